"""Disruptions against a real API server, scheduler, Job, pod GC and taint controllers, with kwok nodes.

A pod evicted through the Eviction API (the API server sets its ``DisruptionTarget`` condition), a node deleted
under a running pod, a ``kubectl drain`` (cordon, then evict), a ``NoExecute`` taint (the taint manager
evicts), a preemption by the scheduler, and a node reclaimed as Karpenter and the AWS Node Termination Handler
do it (taint, cordon, evict) each fail the run as an infrastructure disruption naming the pod's node and the
reason, never as a failed rank; with ``--job-retries 1`` a disruption then a pass passes, reported as passed after
a disruption. A node's ``Ready`` that the cluster's admin turns ``False`` for a few seconds passes; one that stays
``False`` past its bound is named lost.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from rollcall.backends import JobState
from rollcall.backends.kubernetes.holds import Bounds
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.manifests import JOB_LABEL, PodExtras
from rollcall.backends.kubernetes.pod_state import index_of
from rollcall.checks.errors import DISRUPTION, ROOT_CAUSE
from rollcall.checks.job_state import JOB
from rollcall.runner import Attempt, RunResult
from tests.cluster.controlplane import NOT_READY_TAINT, RUN_DURATION_ANNOTATION
from tests.waiting import wait_until

from .conftest import TRN1, suite_namespaces

pytestmark = pytest.mark.control_plane

#: Long enough that only the disruption can end the run.
RUNS_UNTIL_DISRUPTED = {RUN_DURATION_ANNOTATION: "300s"}


class Run:
    """A Suite.run in a thread, and the pods of its first attempt once they all run."""

    def __init__(self, suite: Any, request: pytest.FixtureRequest, kube: Any) -> None:
        self.kube = kube
        self.before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._go, args=(suite, request), daemon=True)
        self._thread.start()

    def _go(self, suite: Any, request: pytest.FixtureRequest) -> None:
        try:
            self.result = suite.run(request.node.nodeid, request.node.name).result
        except BaseException as exc:  # re-raised by finish()
            self.error = exc

    def running_pods(self, count: int) -> list[dict[str, Any]]:
        """The first attempt's pods, by index, once ``count`` of them run."""

        def probe() -> list[dict[str, Any]] | None:
            pods = [
                p
                for p in call(self.kube.core.list_pod_for_all_namespaces, label_selector=JOB_LABEL)["items"]
                if p["metadata"]["namespace"] not in self.before and p["status"].get("phase") == "Running"
            ]
            return sorted(pods, key=index_of) if len(pods) >= count else None

        found: list[dict[str, Any]] = wait_until("the run's pods to run", probe, timeout=120)
        return found

    def finish(self) -> RunResult:
        self._thread.join(300)
        assert not self._thread.is_alive(), "the run did not end"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def evict(kube: Any, pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    call(kube.core.create_namespaced_pod_eviction, meta["name"], meta["namespace"], body=body)


def assert_disrupted(attempt: Attempt, pod: dict[str, Any], reasons: tuple[str, ...]) -> None:
    """The attempt failed as a disruption of ``pod`` on its node, for one of ``reasons``; no rank failed."""
    node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
    message = attempt.verdict.message(str(attempt.artifacts))
    found = attempt.status.disruption
    assert attempt.status.state is JobState.FAILED and found is not None, message
    assert (found.pod, found.host, found.node) == (name, node, int(index_of(pod))), found
    assert found.reason in reasons, found
    assert attempt.verdict.findings[0].kind is DISRUPTION, message
    assert attempt.verdict.problems[0].startswith(
        f"first failure: infrastructure disruption: pod {name} (index {index_of(pod)}) on node {node} was "
        f"disrupted ({found.reason})"
    ), message
    assert not attempt.verdict.of_kind(ROOT_CAUSE) and not attempt.verdict.of_kind(JOB), message
    assert attempt.disruption == found


@pytest.fixture
def uncordon(control_plane) -> Iterator[Callable[[str], None]]:
    """``uncordon(node)`` at the end of the test."""
    nodes: list[str] = []
    yield nodes.append
    for node in nodes:
        control_plane.kubectl("uncordon", node)


def test_a_pod_evicted_through_the_eviction_api_is_a_disruption(make_suite, kube, request):
    suite, _ = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    evict(kube, pod)
    result = run.finish()

    assert result.outcome == "disrupted" and not result.passed
    assert_disrupted(result.last, pod, ("EvictionByEvictionAPI",))
    assert "Eviction API" in (result.last.status.disruption.message if result.last.status.disruption else "")


def test_a_node_deleted_under_a_running_pod_is_a_disruption(
    make_suite, kube, control_plane, ensure_nodes, request
):
    ensure_nodes(3)
    suite, _ = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    node = pod["spec"]["nodeName"]
    control_plane.kubectl("delete", "node", node, "--wait=false")
    try:
        result = run.finish()
    finally:
        control_plane.add_named_nodes([node], TRN1)

    # the nodes' watch sees the node go at once; pod GC would mark the pod DeletionByPodGC later
    assert_disrupted(result.last, pod, ("NodeDeleted", "DeletionByPodGC"))


def test_a_drained_node_is_a_disruption(make_suite, kube, control_plane, ensure_nodes, uncordon, request):
    ensure_nodes(3)
    suite, _ = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    node = pod["spec"]["nodeName"]
    uncordon(node)
    drain = subprocess.Popen(
        [
            str(control_plane.bin_dir / "kubectl"),
            *("--kubeconfig", str(control_plane.kubeconfig), "drain", node),
            *("--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        result = run.finish()
    finally:
        out, _ = drain.communicate(timeout=180)
    assert "evicting pod" in out, out

    assert_disrupted(result.last, pod, ("EvictionByEvictionAPI",))
    found = result.last.status.disruption
    assert found is not None and found.message.endswith(f"node {node} is cordoned"), found


@pytest.fixture
def untaint(control_plane) -> Iterator[Callable[[str, str], None]]:
    """``untaint(node, key)``: remove the taint at the end of the test."""
    taints: list[tuple[str, str]] = []
    yield lambda node, key: taints.append((node, key))
    for node, key in taints:
        control_plane.kubectl("taint", "node", node, f"{key}-")


def test_a_noexecute_taint_evicts_through_the_taint_manager(
    make_suite, kube, control_plane, ensure_nodes, untaint, request
):
    ensure_nodes(3)
    suite, _ = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    node = pod["spec"]["nodeName"]
    untaint(node, "rollcall.test/maintenance")
    control_plane.kubectl("taint", "node", node, "rollcall.test/maintenance=now:NoExecute")
    result = run.finish()

    assert_disrupted(result.last, pod, ("DeletionByTaintManager",))


def test_a_pod_preempted_by_the_scheduler_is_a_disruption(
    make_suite, kube, control_plane, ensure_nodes, request
):
    ensure_nodes(3)
    suite, _ = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    node = pod["spec"]["nodeName"]
    urgent = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "rollcall-test-urgent"},
        "value": 1000000,
    }
    preemptor = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rollcall-test-preemptor", "namespace": "default"},
        "spec": {
            "priorityClassName": "rollcall-test-urgent",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/urgent:1",
                    "resources": {"limits": dict(pod["spec"]["containers"][0]["resources"]["limits"])},
                }
            ],
        },
    }
    control_plane.apply(urgent, preemptor)
    try:
        result = run.finish()
    finally:
        control_plane.kubectl(
            "delete", "pod", "rollcall-test-preemptor", "-n", "default", "--grace-period=0", "--force"
        )
        control_plane.kubectl("delete", "priorityclass", "rollcall-test-urgent")

    assert_disrupted(result.last, pod, ("PreemptionByScheduler",))


@pytest.mark.parametrize(
    ("taint", "says"),
    [
        ("karpenter.sh/disrupted", "Karpenter is disrupting the node"),
        ("aws-node-termination-handler/spot-itn", "spot interruption notice"),
    ],
)
def test_a_node_reclaimed_says_why_in_the_disruption(
    make_suite, kube, control_plane, ensure_nodes, untaint, uncordon, request, taint, says
):
    # what Karpenter and the AWS Node Termination Handler do: taint the node NoSchedule, cordon it, evict
    ensure_nodes(3)
    suite, _ = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[0]
    node = pod["spec"]["nodeName"]
    untaint(node, taint)
    uncordon(node)
    control_plane.kubectl("taint", "node", node, f"{taint}=1:NoSchedule")
    control_plane.kubectl("cordon", node)
    evict(kube, pod)
    result = run.finish()

    assert_disrupted(result.last, pod, ("EvictionByEvictionAPI",))
    found = result.last.status.disruption
    assert found is not None and f"{says}" in found.message and f"(taint {taint})" in found.message, found


def test_with_retries_a_disruption_then_a_pass_passes_as_such(make_suite, kube, request):
    suite, backend = make_suite(nodes=2, retries=1, annotations=RUNS_UNTIL_DISRUPTED)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[0]
    backend.extras = PodExtras(annotations={RUN_DURATION_ANNOTATION: "1s"})  # the retry runs to its end
    evict(kube, pod)
    result = run.finish()

    assert result.passed and not result.flaky, result.message()
    assert result.outcome == "passed_after_disruption" and len(result.attempts) == 2
    assert_disrupted(result.attempts[0], pod, ("EvictionByEvictionAPI",))
    assert [n for n, _ in result.disruptions] == [1]
    (record,) = suite.records
    entry = record.as_dict()
    assert entry["outcome"] == "passed_after_disruption" and not entry["flaky"]
    assert entry["disruptions"][0]["pod"] == pod["metadata"]["name"]
    assert entry["disruptions"][0]["reason"] == "EvictionByEvictionAPI"


#: The annotation kwok manages a fake node by (hack/kwok/kwokctl.yaml).
KWOK_NODE = "kwok.x-k8s.io/node"
NOT_READY = ("KubeletNotReady", "container runtime is down")
#: How long a flap of a node's Ready lasts: a container runtime's restart.
FLAP_S = 5.0


def taints_of(control_plane: Any, node: str) -> set[str]:
    return {t["key"] for t in control_plane.get("node", node)["spec"].get("taints") or []}


@pytest.fixture
def set_ready(control_plane) -> Iterator[Callable[[str, str], None]]:
    """``set_ready(node, status)``: the cluster's admin sets a fake node's ``Ready`` condition.

    kwok, which would set a fake node's ``Ready`` back to True at once, is set aside from the node meanwhile:
    a change it still sees first has it play its next heartbeat of the node 5 min off, and it sees none after
    the node's kwok annotation changes; the node's lease it keeps renewing, so the node controller leaves the
    condition as set. At the end the node is Ready and kwok's again, the node controller's taints lifted.
    """
    aside: list[str] = []

    def set_it(node: str, status: str) -> None:
        if node not in aside:
            aside.append(node)
            control_plane.kubectl(
                "annotate", "node", node, f"rollcall.test/aside={time.time_ns()}", "--overwrite"
            )
            control_plane.kubectl("annotate", "node", node, f"{KWOK_NODE}=aside", "--overwrite")
        reason, message = (
            NOT_READY if status != "True" else ("KubeletReady", "kubelet is posting ready status")
        )
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"type": "Ready", "status": status, "reason": reason, "message": message}
        ready |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
        patch = json.dumps({"status": {"conditions": [ready]}})
        control_plane.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", patch)

    yield set_it
    for node in aside:
        set_it(node, "True")
        control_plane.kubectl(
            "annotate", "node", node, f"{KWOK_NODE}=fake", "rollcall.test/aside-", "--overwrite"
        )
    for node in aside:
        wait_until(
            lambda node=node: f"{NOT_READY_TAINT} to be lifted from {node}: {taints_of(control_plane, node)}",
            lambda node=node: NOT_READY_TAINT not in taints_of(control_plane, node),
            timeout=60,
            every=0.5,
        )


def test_a_nodes_ready_turned_false_for_a_few_seconds_passes(
    make_suite, kube, control_plane, ensure_nodes, set_ready, request
):
    """The admin turns node 1's Ready False for 5 s (:data:`FLAP_S`: the run has seen it and the node controller
    has tainted the node), then True again: a runtime's hiccup, shorter than the bound (15 s here). The run trains
    on and passes."""
    ensure_nodes(3)
    suite, backend = make_suite(nodes=2, annotations={RUN_DURATION_ANNOTATION: "45s"})
    backend.bounds = Bounds(ready_s=15.0)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    node = pod["spec"]["nodeName"]
    lines = backend.progress_lines  # type: ignore[attr-defined]
    set_ready(node, "False")
    turned = time.monotonic()
    seen = f"node {node} Ready=False: lost only if that holds 15s with its pods unheard"
    wait_until(f"the run to say '{seen}'", lambda: any(seen in line for line in lines), timeout=30)
    wait_until(
        f"the node controller to taint {node} {NOT_READY_TAINT}",
        lambda: NOT_READY_TAINT in taints_of(control_plane, node),
        timeout=30,
        every=0.2,
    )
    time.sleep(
        max(0.0, FLAP_S - (time.monotonic() - turned))
    )  # the flap's own length, not a wait for anything
    set_ready(node, "True")
    flap = time.monotonic() - turned
    result = run.finish()

    assert result.passed and result.outcome == "passed", result.message()
    assert any(f"node {node} Ready again: not lost" in line for line in lines), lines
    assert FLAP_S <= flap < 15.0, f"the flap lasted {flap:.1f}s, not {FLAP_S:g} s to the bound"
    print(f"Ready=False for {flap:.1f}s: passed")


def test_a_node_not_ready_past_its_bound_is_named_lost(make_suite, kube, ensure_nodes, set_ready, request):
    """The admin turns node 1's Ready False and leaves it so: the run ends as disrupted once that has held
    for the bound (5 s here), naming the node, its pod and how long."""
    ensure_nodes(3)
    suite, backend = make_suite(nodes=2, annotations=RUNS_UNTIL_DISRUPTED)
    backend.bounds = Bounds(ready_s=5.0)
    run = Run(suite, request, kube)
    pod = run.running_pods(2)[1]
    node = pod["spec"]["nodeName"]
    set_ready(node, "False")
    turned = time.monotonic()
    result = run.finish()
    took = time.monotonic() - turned

    assert_disrupted(result.last, pod, ("NodeLost",))
    found = result.last.status.disruption
    assert found is not None and found.message.startswith(
        f"node {node} was lost (Ready=False, {NOT_READY[0]}: {NOT_READY[1]}; not Ready for "
    ), found
    assert "past 5s, its pods unheard)" in found.message, found
    print(f"Ready=False to the run's end {took:.1f}s: {found.message}")
