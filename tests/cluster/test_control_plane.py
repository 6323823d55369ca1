"""The local control plane is a real Kubernetes: nodes, scheduling, Jobs, pod logs, failures."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.waiting import wait_until

from .controlplane import (
    CLUSTER_SH,
    EXIT_CODE_ANNOTATION,
    FAIL_LABEL,
    INSTANCE_TYPE_LABEL,
    RUN_DURATION_ANNOTATION,
    ControlPlane,
    ControlPlaneError,
    cluster_sh,
)

pytestmark = pytest.mark.control_plane

TRN1 = "trn1.32xlarge"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    control_plane.create_namespace(name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def job_finished(cp: ControlPlane, namespace: str, name: str) -> str | None:
    """``Complete`` or ``Failed`` once the Job has that condition, else None."""
    job = cp.get("job", name, "-n", namespace)
    for cond in job["status"].get("conditions", []):
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return None


def job_pods(cp: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    pods = cp.get("pods", "-n", namespace, "-l", f"job-name={job}")["items"]
    return sorted(pods, key=lambda p: int(p["metadata"]["annotations"][INDEX_ANNOTATION]))


def indexed_job(
    name: str,
    completions: int,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Indexed Job whose pods each take a whole trn1.32xlarge (so one pod per node)."""
    container = {
        "name": "train",
        "image": "registry.invalid/rollcall/train:never-pulled",
        "resources": {"limits": {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels or {}, "annotations": annotations or {}},
                "spec": {"subdomain": name, "restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def test_apiserver_is_the_pinned_upstream_release(control_plane: ControlPlane) -> None:
    """The version the session asked for (ROLLCALL_TEST_K8S_VERSION, else the newest), one cluster.sh pins."""
    pinned = re.findall(r"^K8S_(?:NEWEST|OLDEST)=(\S+)$", CLUSTER_SH.read_text(), re.M)
    wanted = cluster_sh("version").strip()
    assert wanted in pinned
    version = json.loads(control_plane.kubectl("get", "--raw", "/version"))
    assert version["gitVersion"] == wanted


def test_fake_accelerator_nodes_are_ready(control_plane: ControlPlane) -> None:
    nodes = control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    assert len(nodes) >= 2
    for node in nodes:
        status = node["status"]
        ready = {c["type"]: c["status"] for c in status["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]
        alloc = status["allocatable"]
        assert alloc["aws.amazon.com/neuron"] == "16"
        assert alloc["aws.amazon.com/neuroncore"] == "32"
        assert alloc["vpc.amazonaws.com/efa"] == "8"
        assert {"cpu", "memory", "pods"} <= set(alloc) & set(status["capacity"])


def test_indexed_job_with_headless_service_completes_and_serves_logs(
    control_plane: ControlPlane, namespace: str
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"job-name": "trainer"},
            "ports": [{"name": "rendezvous", "port": 29500}],
        },
    }
    job = indexed_job("trainer", 2)
    job["metadata"]["namespace"] = namespace
    control_plane.apply(service, job)

    finished = wait_until("job trainer to finish", lambda: job_finished(control_plane, namespace, "trainer"))
    assert finished == "Complete"
    assert control_plane.get("service", "trainer", "-n", namespace)["spec"]["clusterIP"] == "None"
    pods = job_pods(control_plane, namespace, "trainer")
    assert [p["metadata"]["annotations"][INDEX_ANNOTATION] for p in pods] == ["0", "1"]
    assert [p["spec"]["hostname"] for p in pods] == ["trainer-0", "trainer-1"]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "each pod needs a whole node"
    assert all(p["status"].get("podIP") for p in pods)

    for index, pod in enumerate(pods):
        name = pod["metadata"]["name"]
        lines = [f"rank {index}: world size 2", f"rank {index}: step 1 loss 0.25"]
        control_plane.serve_logs(namespace, name, lines)
        # kwok picks the Logs object up from a watch: allow it a moment
        out = wait_until(
            f"logs of {name}", partial(_logs_or_none, control_plane, namespace, name), timeout=30
        )
        assert out.splitlines() == lines


def _logs_or_none(cp: ControlPlane, namespace: str, pod: str) -> str | None:
    try:
        return cp.kubectl("logs", "-n", namespace, pod)
    except ControlPlaneError:
        return None


def test_labelled_pod_fails(control_plane: ControlPlane, namespace: str) -> None:
    job = indexed_job(
        "crash",
        1,
        labels={FAIL_LABEL: "true"},
        annotations={EXIT_CODE_ANNOTATION: "3", RUN_DURATION_ANNOTATION: "1s"},
    )
    job["metadata"]["namespace"] = namespace
    control_plane.apply(job)

    finished = wait_until("job crash to finish", lambda: job_finished(control_plane, namespace, "crash"))
    assert finished == "Failed"
    (pod,) = job_pods(control_plane, namespace, "crash")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_add_nodes_then_restart_apiserver(control_plane: ControlPlane) -> None:
    names = control_plane.add_nodes(2, "g5.xlarge")
    for name in names:
        node = control_plane.get("node", name)
        assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == "g5.xlarge"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"

    control_plane.restart_apiserver()
    after = {n["metadata"]["name"] for n in control_plane.get("nodes")["items"]}
    assert after >= set(names)
