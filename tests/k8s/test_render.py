"""``rollcall render`` without the layout discovers it on the real API server's nodes.

tests/unit/test_cli.py checks the same discovery against a fake API; here the nodes are the local control
plane's fake ones (hack/profiles/), read through its kubeconfig, and the expected requests are the literal
allocatable figures of those profiles.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from rollcall.cli import main

from .conftest import IMAGE, P5, TRN1

pytestmark = pytest.mark.control_plane


def rendered_job(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """The Job that ``rollcall render`` prints for ``args``."""
    assert main(["render", *args]) == 0, capsys.readouterr().err
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    (job,) = [d for d in docs if d["kind"] == "Job"]
    job_doc: dict[str, Any] = job
    return job_doc


@pytest.mark.parametrize(
    ("instance_type", "procs", "device", "limits"),
    [
        # hack/profiles/trn1.32xlarge.yaml: 32 NeuronCores and 8 EFA devices allocatable
        (TRN1, 32, "xla", {"aws.amazon.com/neuroncore": "32", "vpc.amazonaws.com/efa": "8"}),
        # hack/profiles/p5.48xlarge.yaml: 8 GPUs and 32 EFA devices allocatable
        (P5, 8, "cuda", {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}),
    ],
)
def test_render_requests_what_the_clusters_nodes_offer(
    control_plane, ensure_nodes, capsys, instance_type, procs, device, limits
):
    ensure_nodes(2, instance_type)
    job = rendered_job(
        capsys,
        *("--kubeconfig", str(control_plane.kubeconfig), "--instance-type", instance_type, "--nodes", "2"),
        *("--image", IMAGE, "--name", "bert-discovered"),
    )
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (2, 2)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == instance_type
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == limits
    assert container["resources"]["requests"] == limits
    assert f"--nproc-per-node={procs}" in container["command"]
    device_at = container["command"].index("--device")
    assert container["command"][device_at + 1] == device
