"""The nightly roll call inside the cluster, on the real nodes: ``rollcall render --cronjob`` is applied, a Job
is made from its CronJob (as ``kubectl create job --from=cronjob/...`` makes it), the suite's own image
(``hack/image.sh suite``) runs ``pytest tests/e2e`` in a pod on a real node with the in-cluster config of the
ServiceAccount of ``manifests/rbac/``, the suite runs the roll call on both real nodes, its pod succeeds,
its metrics arrive at a real Pushgateway, and afterwards nothing of the run is left but the CronJob's Job.

How the pod reaches the API server: the real nodes run no kube-proxy, so the `kubernetes` Service's
ClusterIP (10.96.0.1) leads nowhere from a pod, and the local apiserver listens on the host's 127.0.0.1 only
(``advertise-address`` 127.0.0.1, no Endpoints for the Service). Instead of a kube-proxy (not built yet:
docs/control-plane.md says what it needs), this test starts a
forwarder on the real nodes' host address (10.250.0.1, the bridge every pod already reaches CoreDNS
through) to the apiserver's port, and sets ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` on the
suite's container to it: exactly the two variables the in-cluster config reads, which the kubelet would
otherwise fill from the Service. The apiserver's certificate names 10.250.0.1 (``hack/kwok/kwokctl.yaml``),
so the client verifies it with the ServiceAccount's CA as in any cluster. The suite pod is held to the real
nodes by a nodeSelector (the kwok node runs no containers). Both are the only changes made to the rendered
objects, and both say what a cluster with kube-proxy gives by itself. The Pushgateway listens on the same
host address, so pods reach it.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rollcall.backends.kubernetes.kube import Kube, call
from rollcall.cli import main
from tests.cluster.controlplane import REPO_ROOT, ControlPlane, cluster_sh
from tests.k8s.conftest import suite_namespaces
from tests.waiting import wait_until

from .conftest import IMAGE, REAL, REAL_NODES, WORKLOAD_ARGS

# The suite's image build (cached: seconds when its inputs are unchanged), its import into both nodes, and
# a roll call of 2 x 2 ranks run by the suite in a pod.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

#: The real nodes' host address (hack/realnodes.sh): every pod reaches it through its node.
HOST_IP = "10.250.0.1"
SUITE_IMAGE = "rollcall.local/rollcall-suite:1"
PUSH_JOB = "rollcall-nightly-test"


def fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text
    except OSError:
        return None


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def api_port(cp: ControlPlane) -> int:
    server = yaml.safe_load(cp.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return int(server.rsplit(":", 1)[1])


@contextlib.contextmanager
def process(args: list[str], log: Path, ready: str, probe: Any) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` (output to ``log``) until the block ends; stopped, and checked gone, after it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_until(
                lambda: f"{ready} (exit {proc.poll()}; {log.read_text()[-500:]})",
                lambda: proc.poll() is None and probe(),
                timeout=30,
            )
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture
def suite_image(real_cluster: ControlPlane) -> str:
    """The suite's image, built here (cached by content) and imported into both real nodes' containerd."""
    built = subprocess.run(
        [str(REPO_ROOT / "hack" / "image.sh"), "suite"], capture_output=True, text=True, timeout=1200
    )
    assert built.returncode == 0, built.stderr[-3000:]
    archive = built.stdout.strip().splitlines()[-1]
    for node in range(REAL_NODES):
        cluster_sh(
            "ctr",
            "--name",
            real_cluster.name,
            str(node),
            "-n",
            "k8s.io",
            "images",
            "import",
            archive,
            timeout=600,
        )
    return SUITE_IMAGE


@pytest.fixture
def api_forwarder(real_cluster: ControlPlane, tmp_path: Path) -> Iterator[int]:
    """The apiserver's port, also served on the host address the pods reach (see the module docstring)."""
    port = api_port(real_cluster)

    def answers() -> bool:
        with socket.socket() as s:
            s.settimeout(2)
            return s.connect_ex((HOST_IP, port)) == 0

    args = ["socat", f"TCP-LISTEN:{port},bind={HOST_IP},reuseaddr,fork", f"TCP:127.0.0.1:{port}"]
    with process(args, tmp_path / "api-forwarder.log", f"the forwarder on {HOST_IP}:{port}", answers):
        yield port
    assert not answers(), "the apiserver forwarder is still listening"


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    """A real Pushgateway on the host address the pods reach: its URL; stopped after the test."""
    built = subprocess.run(
        [str(REPO_ROOT / "hack" / "pushgateway.sh"), "build"], capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stderr
    binary = Path(built.stdout.strip()) / "pushgateway"
    port = free_port(HOST_IP)
    url = f"http://{HOST_IP}:{port}"
    args = [str(binary), f"--web.listen-address={HOST_IP}:{port}"]
    with process(
        args, tmp_path / "pushgateway.log", f"the Pushgateway at {url}", lambda: fetch(f"{url}/-/ready")
    ):
        yield url
    assert fetch(f"{url}/-/ready") is None, "the Pushgateway is still answering"


def render(*args: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["render", *args])
    assert code == 0, out.getvalue()
    return [d for d in yaml.safe_load_all(out.getvalue()) if d]


def job_from_cronjob(cron: dict[str, Any], name: str) -> dict[str, Any]:
    """The Job ``kubectl create job NAME --from=cronjob/...`` makes: the template, owned by the CronJob."""
    template = cron["spec"]["jobTemplate"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": cron["metadata"]["namespace"],
            "labels": dict(template.get("metadata", {}).get("labels", {})),
            "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": cron["metadata"]["name"],
                    "uid": cron["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"],
    }


def test_the_cronjobs_job_runs_the_roll_call_in_the_cluster_and_pushes_its_metrics(
    real_cluster: ControlPlane,
    kube: Kube,
    suite_image: str,
    api_forwarder: int,
    pushgateway: str,
    tmp_path: Path,
) -> None:
    objects = render(
        *("--cronjob", "0 2 * * *", "--suite-image", suite_image, "--image", IMAGE),
        *("--nodes", str(REAL_NODES), "--accelerator", "cpu", "--procs-per-node", "2"),
        *("--node-selector", REAL, "--job-timeout", "300", "--unschedulable-grace", "60"),
        # 4 ranks and the suite share 2 loaded cores: their relative speed is noise here, and the profile's
        # EFA devices are fake; what is proven is that the suite in the pod runs and judges the roll call.
        *("--straggler-ratio", "0", "--busbw-ratio", "0", "--efa", "off"),
        *("--workload-args", WORKLOAD_ARGS, "--workload-env", "OMP_NUM_THREADS=1"),
        *("--pushgateway", pushgateway, "--pushgateway-job", PUSH_JOB),
    )
    (cron,) = [o for o in objects if o["kind"] == "CronJob"]
    namespace = cron["metadata"]["namespace"]
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["ROLLCALL_PUSHGATEWAY"] == pushgateway and env["ROLLCALL_NODE_SELECTOR"] == REAL
    # What kube-proxy and a scheduler with only real nodes would give (the module docstring says why).
    container["env"] += [
        {"name": "KUBERNETES_SERVICE_HOST", "value": HOST_IP},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_forwarder)},
    ]
    pod["nodeSelector"] = dict([REAL.split("=", 1)])
    manifest = tmp_path / "nightly.yaml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    real_cluster.kubectl("apply", "-f", str(manifest))
    try:
        created = real_cluster.get("cronjob", cron["metadata"]["name"], "-n", namespace)
        job = job_from_cronjob(created, "rollcall-nightly-now")
        call(kube.batch.create_namespaced_job, namespace, job)

        def finished() -> dict[str, Any] | None:
            status = real_cluster.get("job", "rollcall-nightly-now", "-n", namespace)["status"]
            done = {c["type"] for c in status.get("conditions", []) if c["status"] == "True"}
            return status if done & {"Complete", "Failed"} else None

        status = wait_until("the nightly Job to finish", finished, timeout=1200, every=2)
        pods = real_cluster.get("pods", "-n", namespace, "-l", "job-name=rollcall-nightly-now")["items"]
        (suite_pod,) = pods
        log = real_cluster.kubectl("logs", "-n", namespace, suite_pod["metadata"]["name"], timeout=60)
        (tmp_path / "suite-pod.log").write_text(log)
        assert status.get("succeeded") == 1, log[-6000:]
        assert suite_pod["status"]["phase"] == "Succeeded"
        assert suite_pod["spec"]["nodeName"] in {
            n["metadata"]["name"] for n in real_cluster.get("nodes", "-l", REAL)["items"]
        }
        assert "1 passed" in log, log[-3000:]
        assert f"metrics pushed to {pushgateway} (job={PUSH_JOB}," in log, log[-3000:]

        # the metrics arrived: one throughput sample per rank of the 2 x 2 world, and the run's outcome
        scraped = fetch(f"{pushgateway}/metrics") or ""
        ours = [
            sample
            for family in text_string_to_metric_families(scraped)
            for sample in family.samples
            if sample.labels.get("job") == PUSH_JOB
        ]
        ranks = [s for s in ours if s.name == "rollcall_rank_throughput_samples_per_second"]
        assert sorted(int(s.labels["rank"]) for s in ranks) == list(range(REAL_NODES * 2)), scraped[-3000:]
        assert all(s.value > 0 for s in ranks)
        outcome = {s.labels["outcome"]: s.value for s in ours if s.name == "rollcall_run_outcome"}
        assert outcome.get("passed") == 1, outcome

        # nothing of the run is left but the CronJob's own history: its Job and that Job's pod
        assert wait_until(
            "the run's namespaces to be gone", lambda: not suite_namespaces(kube) or None, timeout=120
        )
        jobs = real_cluster.get("jobs", "-n", namespace)["items"]
        assert [j["metadata"]["name"] for j in jobs] == ["rollcall-nightly-now"]
        assert jobs[0]["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
        left = real_cluster.get("pods", "-n", namespace)["items"]
        assert [p["metadata"]["name"] for p in left] == [suite_pod["metadata"]["name"]]
        services = real_cluster.get("services", "-n", namespace)["items"]
        assert services == []
    finally:
        with contextlib.suppress(Exception):
            (tmp_path / "events.json").write_text(json.dumps(real_cluster.get("events", "-n", namespace)))
        real_cluster.kubectl(
            "delete", "-f", str(manifest), "--ignore-not-found", "--wait=true", "--timeout=180s", timeout=240
        )
