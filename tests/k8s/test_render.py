"""``rollcall render`` without the layout discovers it on the real API server's nodes.

tests/unit/test_cli.py checks the same discovery against a fake API; here the nodes are the local control
plane's fake ones (hack/profiles/), read through its kubeconfig, and the expected requests are the literal
allocatable figures of those profiles.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import yaml

from rollcall.cli import main
from tests.cluster.controlplane import ControlPlane

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


@pytest.mark.parametrize(
    ("instance_type", "cache"),
    [
        (P5, ("--compile-cache", "host:/var/cache/rollcall-compile")),
        (TRN1, ("--neuron-cache", "nfs:fs-0123456789abcdef0.efs.us-west-2.amazonaws.com:/neuron")),
    ],
)
def test_every_field_render_sets_with_every_option_is_one_this_api_server_knows(
    control_plane: ControlPlane,
    ensure_nodes: Any,
    capsys: pytest.CaptureFixture[str],
    instance_type: str,
    cache: tuple[str, str],
    jobset_controller: str,
) -> None:
    """The Service and Job (or the JobSet, of the session's job kind) rendered with every option that shapes
    them pass the server's dry run with its strict field validation: no field is one this Kubernetes (or the
    JobSet CRD) does not know (the oldest tested included, ``make test-k8s-oldest``), as a run's own creates
    are strict."""
    ensure_nodes(2, instance_type)
    namespace = f"render-{uuid.uuid4().hex[:8]}"
    args = [
        *("--kubeconfig", str(control_plane.kubeconfig), "--instance-type", instance_type, "--nodes", "2"),
        *("--image", IMAGE, "--name", "bert-every-option", "--namespace", namespace),
        *("--service-account", "trainer", "--node-selector", "kubernetes.io/arch=amd64"),
        *("--toleration", "dedicated=ml:NoSchedule", "--toleration", "spot:NoExecute"),
        *("--priority-class", "training-high", "--queue", "team-ml", "--image-pull-secret", "regcred"),
        *("--requests", "cpu=4,memory=8Gi", "--limits", "cpu=8,memory=16Gi", "--efa", "on", *cache),
        *("--workload-env", "NCCL_DEBUG=WARN", "--job-timeout", "600", "--job-kind", jobset_controller),
    ]
    jobset = jobset_controller == "jobset"
    control_plane.create_namespace(namespace)
    try:
        control_plane.kubectl("create", "serviceaccount", "trainer", "-n", namespace)
        assert main(["render", *args]) == 0, capsys.readouterr().err
        rendered = capsys.readouterr().out
        assert [d["kind"] for d in yaml.safe_load_all(rendered)] == (
            ["JobSet"] if jobset else ["Service", "Job"]
        )
        dry_run = (
            "create",
            "--dry-run=server",
            "--validate=strict",
            "-n",
            namespace,
            "-o",
            "name",
            "-f",
            "-",
        )
        created = control_plane.kubectl(*dry_run, input=rendered)
        assert created.split() == (
            ["jobset.jobset.x-k8s.io/bert-every-option"]
            if jobset
            else ["service/bert-every-option", "job.batch/bert-every-option"]
        )
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false")
