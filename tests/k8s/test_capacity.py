"""Capacity that arrives while a run waits: Karpenter (its kwok provider) provisions the nodes, or nothing can.

Karpenter runs as a local process against the session's control plane (hack/karpenter.sh) for this module
only. Each test's NodePool labels its nodes ``rollcall.test/pool=<name>`` and the run selects on that label,
so no existing node is usable: the cluster has none of them until Karpenter creates them. The pool is
deleted after each test and its nodes are awaited gone, so other tests never see them.

Without Karpenter: a cluster-autoscaler (its status ConfigMap; the test plays it, adding nodes and a
``TriggeredScaleUp`` event while the run waits), a Job created suspended as Kueue would hold it (the test
admits it by unsuspending), and EKS Auto Mode nodes under ``--check-device-plugins``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rollcall.backends import DiscoveryError, JobState
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.manifests import QUEUE_LABEL
from tests.cluster.conftest import _unavailable
from tests.cluster.controlplane import INSTANCE_TYPE_LABEL, ControlPlane, ControlPlaneError
from tests.waiting import wait_until

from .conftest import TRN1, active_suite_namespaces, job_kind, suite_namespaces

pytestmark = pytest.mark.control_plane

POOL_LABEL = "rollcall.test/pool"
AUTO_MODE = "eks.amazonaws.com/compute-type"


@pytest.fixture(scope="module")
def karpenter(control_plane: ControlPlane) -> Iterator[None]:
    try:
        control_plane.start_karpenter()
    except ControlPlaneError as exc:
        _unavailable(f"karpenter: {exc}")
    yield
    control_plane.stop_karpenter()


def _pool_nodes(cp: ControlPlane, name: str) -> list[Any]:
    items: list[Any] = cp.get("nodes", "-l", f"{POOL_LABEL}={name}")["items"]
    return items


@pytest.fixture
def nodepool(control_plane: ControlPlane, karpenter: None) -> Iterator[Callable[..., str]]:
    """``nodepool(**spec)``: a NodePool of trn1.32xlarge nodes labelled with its name; returns the name."""
    made: list[str] = []

    def make(limits: dict[str, str] | None = None, node_class: str = "default") -> str:
        name = f"trn-{uuid.uuid4().hex[:6]}"
        spec: dict[str, Any] = {
            "template": {
                "metadata": {"labels": {POOL_LABEL: name}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": node_class,
                    },
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [TRN1]}
                    ],
                },
            },
        }
        if limits:
            spec["limits"] = limits
        control_plane.apply(
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}
        )
        made.append(name)
        wait_until(
            f"NodePool {name} Ready",
            lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in control_plane.get("nodepool", name).get("status", {}).get("conditions", [])
            ),
            timeout=60,
        )
        return name

    yield make
    for name in made:
        control_plane.kubectl("delete", "nodepool", name, "--wait=false")
    for name in made:
        gone = lambda pool=name: not _pool_nodes(control_plane, pool) or None  # noqa: E731
        wait_until(f"the nodes of NodePool {name} gone", gone, 180)


@pytest.fixture
def slow_launch(control_plane: ControlPlane, karpenter: None) -> Iterator[str]:
    """A node class whose nodes register 15 s after their NodeClaim is created (a real launch takes minutes)."""
    control_plane.apply(
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "slow"},
            "spec": {"nodeRegistrationDelay": "15s"},
        }
    )
    yield "slow"


def run(suite: Any, request: pytest.FixtureRequest) -> Any:
    return suite.run(request.node.nodeid, request.node.name).result.last


def test_two_trn1_nodes_arrive_while_the_run_waits(make_suite, nodepool, slow_launch, control_plane, request):
    pool = nodepool(node_class=slow_launch)
    assert not _pool_nodes(control_plane, pool), "the cluster has none of the pool's nodes yet"
    # The launch takes 15 s; a 10 s job timeout passes only because it counts from when the pods are scheduled.
    suite, backend = make_suite(nodes=2, node_selector=f"{POOL_LABEL}={pool}", efa="off", job_timeout=10)
    record = suite.run(request.node.nodeid, request.node.name)
    attempt = record.result.last

    assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
    assert attempt.spec.procs_per_node == 32, "planned from trn1.32xlarge before any node existed"
    waits = attempt.status.waits
    assert waits.waited_for == f"Karpenter NodePool {pool}"
    assert waits.scheduled_s is not None and waits.scheduled_s >= 15 and waits.image_pull_s is not None
    progress = "\n".join(backend.progress_lines)
    assert f"too few nodes (0 of 2); 2 can arrive from Karpenter NodePool {pool}" in progress
    assert f"waiting for capacity from Karpenter NodePool {pool}: NodeClaims {pool}-" in progress, progress
    assert "every pod scheduled after" in progress and "--job-timeout" in progress
    reported = record.as_dict()["job"]["waits"]
    assert reported["waited_for"] == waits.waited_for and reported["scheduled_s"] == round(
        waits.scheduled_s, 1
    )
    nodes = _pool_nodes(control_plane, pool)
    assert len(nodes) == 2 and all(n["metadata"]["labels"]["karpenter.sh/nodepool"] == pool for n in nodes)


def test_with_nothing_to_provision_it_fails_before_creating_anything(
    make_suite, nodepool, kube, kubelet, request
):
    pool = nodepool()
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    served = len(kubelet.served)
    suite, _ = make_suite(nodes=2, node_selector=f"{POOL_LABEL}=nowhere")
    with pytest.raises(DiscoveryError) as err:
        run(suite, request)
    text = str(err.value)
    assert "need 2 usable node(s), found 0" in text, text
    assert "no capacity can arrive; looked for:" in text
    assert f"{pool}: its template sets {POOL_LABEL}={pool}, not nowhere" in text, text
    assert "cluster-autoscaler: no kube-system/cluster-autoscaler-status ConfigMap" in text
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before, "no namespace was created"
    assert len(kubelet.served) == served


def test_capacity_that_never_arrives_fails_typed_after_the_bound(make_suite, nodepool, request):
    # The pool matches, but no instance type it offers has 64 NeuronCores: Karpenter never launches.
    pool = nodepool()
    suite, backend = make_suite(
        nodes=2, node_selector=f"{POOL_LABEL}={pool}", procs_per_node=64, efa="off", capacity_timeout=15
    )
    attempt = run(suite, request)

    assert attempt.status.state is JobState.NO_CAPACITY
    reason = attempt.status.reason
    assert reason.startswith(f"Karpenter NodePool {pool} did not arrive within 15s (--capacity-timeout)"), (
        reason
    )
    assert "Insufficient aws.amazon.com/neuroncore" in reason or "didn't match" in reason, reason
    assert not attempt.passed and attempt.status.waits.scheduled_s is None
    assert not any("is Unschedulable after" in line for line in backend.progress_lines)


def _unsuspend_when_waiting(kube: Any, lines: list[str], done: threading.Event) -> None:
    def suspended_job() -> Any:
        if not any("waiting for quota (Kueue)" in line for line in lines):
            return None
        for ns in active_suite_namespaces(kube):
            for job in call(kube.batch.list_namespaced_job, ns["metadata"]["name"])["items"]:
                if job["spec"].get("suspend"):
                    return job
        return None

    job = wait_until("the suspended Job waiting for quota", suspended_job, timeout=120)
    ns = job["metadata"]["namespace"]
    if job_kind() == "jobset":  # Kueue admits the JobSet, whose controller resumes its Job
        (jobset,) = call(kube.jobset.list_namespaced_job_set, ns)["items"]
        assert jobset["metadata"]["labels"][QUEUE_LABEL] == "team-a"
        call(
            kube.jobset.patch_namespaced_job_set,
            jobset["metadata"]["name"],
            ns,
            body={"spec": {"suspend": False}},
            _content_type="application/merge-patch+json",
        )
    else:
        call(kube.batch.patch_namespaced_job, job["metadata"]["name"], ns, body={"spec": {"suspend": False}})
    done.set()


def test_a_suspended_job_waits_for_quota_then_runs(make_suite, ensure_nodes, kube, request):
    """``--queue`` creates the Job suspended with Kueue's queue label; the test admits it as Kueue would."""
    ensure_nodes(2)
    suite, backend = make_suite(nodes=2, queue="team-a")
    done = threading.Event()
    admit = threading.Thread(target=_unsuspend_when_waiting, args=(kube, backend.progress_lines, done))
    admit.start()
    attempt = run(suite, request)
    admit.join(5)

    assert done.is_set() and attempt.passed, attempt.verdict.message(str(attempt.artifacts))
    assert attempt.status.waits.waited_for == "quota (Kueue)"
    assert any("waiting for quota (Kueue): the Job is suspended" in line for line in backend.progress_lines)


def test_a_job_never_admitted_fails_naming_the_quota(make_suite, ensure_nodes, request):
    ensure_nodes(2)
    suite, _ = make_suite(nodes=2, capacity_timeout=5, queue="team-a")
    attempt = run(suite, request)

    assert attempt.status.state is JobState.NO_CAPACITY
    assert attempt.status.reason.startswith("quota (Kueue) did not arrive within 5s (--capacity-timeout)")


def test_device_plugins_on_eks_auto_mode_rest_on_allocatable(make_suite, ensure_nodes, control_plane):
    ensure_nodes(2)
    names = [
        n["metadata"]["name"]
        for n in control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    ]
    control_plane.kubectl("label", "node", *names[:2], f"{AUTO_MODE}=auto")
    try:
        suite, backend = make_suite(nodes=2, check_device_plugins=True, node_selector=f"{AUTO_MODE}=auto")
        assert suite.placement.accelerator == "neuron", (
            "no device-plugin DaemonSet exists, yet discovery passes"
        )
        assert any(
            "EKS Auto Mode nodes run no device-plugin DaemonSets" in line for line in backend.progress_lines
        )
    finally:
        control_plane.kubectl("label", "node", *names[:2], f"{AUTO_MODE}-")


@pytest.fixture
def autoscaler_status(control_plane: ControlPlane) -> Iterator[None]:
    """A cluster-autoscaler's status ConfigMap: the sign that one runs."""
    control_plane.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"},
            "data": {"status": "Cluster-autoscaler status at 2026-12-01: Health: Healthy"},
        }
    )
    yield
    control_plane.kubectl("delete", "configmap", "cluster-autoscaler-status", "-n", "kube-system")


def _scale_up_when_waiting(
    cp: ControlPlane, kube: Any, lines: list[str], group: str, added: list[str]
) -> None:
    """Play the autoscaler: once the run waits, report a scale-up and add two nodes of the group."""
    wait_until("the run waiting for capacity", lambda: any("waiting for capacity" in x for x in lines), 120)
    ns = next(n["metadata"]["name"] for n in active_suite_namespaces(kube))
    pod = call(kube.core.list_namespaced_pod, ns)["items"][0]["metadata"]["name"]
    cp.apply(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.scale-up", "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
            "reason": "TriggeredScaleUp",
            "message": f"pod triggered scale-up: [{{{group} 0->2 (max: 4)}}]",
            "type": "Normal",
            "source": {"component": "cluster-autoscaler"},
        }
    )
    wait_until("the scale-up shown", lambda: any("TriggeredScaleUp: pod triggered" in x for x in lines), 60)
    added += cp.add_nodes(2, TRN1)
    cp.kubectl("label", "node", *added, f"{POOL_LABEL}={group}")


def test_a_trusted_autoscaler_brings_nodes_the_test_adds(
    make_suite, control_plane, kube, autoscaler_status, request
):
    group = f"asg-{uuid.uuid4().hex[:6]}"
    suite, backend = make_suite(
        nodes=2, node_selector=f"{POOL_LABEL}={group}", efa="off", capacity_timeout="10m"
    )
    added: list[str] = []
    scaler = threading.Thread(
        target=_scale_up_when_waiting, args=(control_plane, kube, backend.progress_lines, group, added)
    )
    scaler.start()
    try:
        attempt = run(suite, request)
        scaler.join(30)
        assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
        assert attempt.status.waits.waited_for == "cluster-autoscaler (kube-system/cluster-autoscaler-status)"
        assert any("TriggeredScaleUp: pod triggered scale-up" in line for line in backend.progress_lines)
    finally:
        scaler.join(30)
        if added:
            control_plane.kubectl("delete", "node", *added)


def test_an_untrusted_autoscaler_is_named_but_not_waited_for(make_suite, autoscaler_status, request):
    suite, _ = make_suite(nodes=2, node_selector=f"{POOL_LABEL}=nowhere")
    with pytest.raises(DiscoveryError) as err:
        run(suite, request)
    assert "cluster-autoscaler: it runs, but its status does not say which labels" in str(err.value)
    assert "give --capacity-timeout to wait for it to scale up" in str(err.value)
