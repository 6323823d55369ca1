"""What must hold before it counts on a cluster: a node's Ready not True, a pod stuck creating (holds.py),
and the run's verdict over them (KubernetesJob, without a cluster)."""

import json
from types import SimpleNamespace

import pytest

from rollcall.backends import JobState, held
from rollcall.backends.held import Holding
from rollcall.backends.kubernetes.holds import (
    ATTACH_AND_MOUNT_S,
    CREATING_S,
    FORCE_DETACH_S,
    NODE_MONITOR_GRACE_S,
    NOT_READY_TOLERATION_S,
    READY_HOLD_S,
    Bounds,
    Holds,
    creating,
    stuck_creating,
    waits_for,
)
from tests.unit.test_kubernetes_job import FakeInformer, NoLogs, clocked, make

INDEX = "batch.kubernetes.io/job-completion-index"


def pod(name="a", index=0, phase="Running", containers=(), conditions=(), node="node-0", message=""):
    return {
        "metadata": {"name": name, "labels": {INDEX: str(index)}, "resourceVersion": "1"},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "containerStatuses": list(containers),
            "conditions": list(conditions),
            **({"message": message} if message else {}),
        },
    }


def node(name="node-0", ready="True", reason="KubeletReady", version="1"):
    cond = {"type": "Ready", "status": ready, "reason": reason}
    return {"metadata": {"name": name, "resourceVersion": version}, "status": {"conditions": [cond]}}


def event(reason, message, when="2026-12-01T10:00:00Z", kind="Warning"):
    return {"reason": reason, "message": message, "type": kind, "lastTimestamp": when}


CREATING = {"name": "train", "state": {"waiting": {"reason": "ContainerCreating"}}}
SANDBOX = {"type": "PodReadyToStartContainers", "status": "True"}
NO_SANDBOX = {"type": "PodReadyToStartContainers", "status": "False"}
MOUNT = event(
    "FailedMount",
    'MountVolume.SetUp failed for volume "data" : mount failed: exit status 32',
    "2026-12-01T10:02:00Z",
)
TIMED_OUT = event(
    "FailedMount",
    "Unable to attach or mount volumes: unmounted volumes=[data cache], unattached volumes=[data cache "
    "kube-api-access-x]: timed out waiting for the condition",
    "2026-12-01T10:05:00Z",
)


def test_the_bounds_relate_to_the_clusters_own_timeouts():
    assert NODE_MONITOR_GRACE_S + READY_HOLD_S < NOT_READY_TOLERATION_S, "counted before Kubernetes evicts"
    assert READY_HOLD_S >= NODE_MONITOR_GRACE_S, "a kubelet silent one more grace period still passes"
    assert CREATING_S == FORCE_DETACH_S + ATTACH_AND_MOUNT_S == 483.0
    assert Bounds() == Bounds(READY_HOLD_S, CREATING_S)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod(phase="Pending", containers=[CREATING]), True),
        (pod(phase="Pending", containers=[CREATING], conditions=[NO_SANDBOX]), True),
        (pod(phase="Pending"), True),  # the kubelet has not said a word of it yet
        (pod(phase="Pending", containers=[CREATING], conditions=[SANDBOX]), False),  # pulling its image
        (pod(phase="Pending", node=None), False),  # not scheduled: the scheduler's, not this
        (pod(containers=[{"name": "train", "state": {"running": {"startedAt": "x"}}}]), False),
        (pod(phase="Succeeded"), False),
    ],
)
def test_a_pod_is_creating_while_bound_with_no_sandbox_and_no_container_started(obj, expected):
    assert creating(obj) is expected


def test_what_a_creating_pod_waits_for_is_read_from_its_events():
    assert waits_for([MOUNT]) == (
        False,
        'volume data to attach and mount (FailedMount: MountVolume.SetUp failed for volume "data" : mount '
        "failed: exit status 32)",
    )
    past, what = waits_for([MOUNT, TIMED_OUT])  # the newest names both
    assert not past and what.startswith("volumes cache, data to attach and mount (FailedMount: Unable to")
    attach = event("FailedAttachVolume", 'Multi-Attach error for volume "pvc-1" Volume is already used')
    assert waits_for([attach])[1].startswith("volume pvc-1 to attach and mount (FailedAttachVolume: ")
    sandbox = event(
        "FailedCreatePodSandBox", "failed to setup network for sandbox: cni plugin not initialized"
    )
    assert waits_for([sandbox])[1] == (
        "its sandbox: the network plugin (FailedCreatePodSandBox: failed to setup network for sandbox: cni "
        "plugin not initialized)"
    )
    assert waits_for([]) == (False, "its volumes or its sandbox: no event of the pod says which")
    pulling = event("Pulling", 'Pulling image "bert:cuda"', kind="Normal")
    assert waits_for([MOUNT, pulling]) == (True, ""), "its image pulls: past its volumes and sandbox"


def test_a_pod_creating_past_its_bound_names_itself_its_node_and_the_volume():
    held = Holding("creating", 0.0, 490.0, 483.0, 400)
    stuck = pod(phase="Pending", containers=[CREATING], index=1, node="ip-10-0-1-7")
    assert stuck_creating(stuck, held, [MOUNT]) == (
        "pod a (index 1) on node ip-10-0-1-7 was still creating its containers after 490s (bound 483s: "
        "volumes that never attach or mount), waiting for volume data to attach and mount (FailedMount: "
        'MountVolume.SetUp failed for volume "data" : mount failed: exit status 32)'
    )
    pulling = event("Pulled", "Successfully pulled image", kind="Normal")
    assert stuck_creating(stuck, held, [pulling]) is None


class Events(NoLogs):
    """The core API with the pod events ``events`` holds, by pod name (a read of one not there fails)."""

    def __init__(self, **events):
        super().__init__()
        self.events = events
        self.asked = []

    def list_namespaced_event(self, namespace, field_selector=None, **kwargs):
        self.asked.append(field_selector)
        name = field_selector.rpartition("=")[2]
        if name not in self.events:
            raise RuntimeError("events not readable")
        return SimpleNamespace(data=json.dumps({"items": self.events[name]}).encode())


def holds_of(**events):
    return Holds(SimpleNamespace(core=Events(**events)), "ns-1", Bounds(ready_s=60.0, creating_s=483.0))


def test_a_nodes_ready_is_held_across_looks_and_a_flap_back_to_true_starts_again():
    seen = holds_of()
    pods, unheard = [pod()], lambda _: None
    down = {"node-0": node(ready="False", reason="KubeletNotReady")}
    seen.look(pods, down.get, unheard, 100.0)
    seen.look(pods, down.get, unheard, 159.0)
    assert not seen.node("node-0").counts
    up = {"node-0": node()}
    seen.look(pods, up.get, unheard, 160.0)
    assert seen.node("node-0") is None, "Ready again: the count starts again"
    seen.look(pods, down.get, unheard, 161.0)
    seen.look(pods, down.get, unheard, 220.0)
    assert not seen.node("node-0").counts
    seen.look(pods, down.get, unheard, 221.0)
    held = seen.node("node-0")
    assert held.counts and (held.state, held.since, held.held_s) == ("False", 161.0, 60.0)


def test_a_node_whose_pods_are_heard_is_not_counted_lost():
    seen = holds_of()
    pods = [pod()]
    lost = {"node-0": node(ready="Unknown", reason="NodeStatusUnknown")}
    heard = {"a": 50.0}
    seen.look(pods, lost.get, heard.get, 100.0)
    heard["a"] = 150.0  # a rank's line arrived meanwhile
    seen.look(pods, lost.get, heard.get, 161.0)
    assert seen.node("node-0").since == 161.0, "heard since its Ready turned: the count starts again"
    seen.look(pods, lost.get, heard.get, 220.0)
    assert not seen.node("node-0").counts
    seen.look(pods, lost.get, heard.get, 221.0)
    assert seen.node("node-0").counts


def test_a_node_no_pod_runs_on_is_no_longer_held():
    seen = holds_of()
    lost = {"node-0": node(ready="Unknown")}
    seen.look([pod()], lost.get, lambda _: None, 0.0)
    seen.look([pod(phase="Succeeded")], lost.get, lambda _: None, 1.0)
    assert seen.node("node-0") is None


def test_a_pod_stuck_creating_fails_only_past_its_bound_and_its_events_are_read_once():
    seen = holds_of(a=[MOUNT])
    stuck = [pod(phase="Pending", containers=[CREATING])]
    seen.look(stuck, lambda _: None, lambda _: None, 0.0)
    seen.look(stuck, lambda _: None, lambda _: None, 482.0)
    assert seen.stuck(stuck) is None and seen.kube.core.asked == []
    seen.look(stuck, lambda _: None, lambda _: None, 483.0)
    assert "waiting for volume data to attach and mount" in seen.stuck(stuck)
    assert seen.kube.core.asked == ["involvedObject.kind=Pod,involvedObject.name=a"]


def test_a_pod_whose_image_pulls_or_whose_events_cannot_be_read_is_not_failed():
    seen = holds_of(a=[event("Pulling", "Pulling image", kind="Normal")])
    pods = [pod("a", phase="Pending", containers=[CREATING]), pod("b", 1, phase="Pending")]
    for now in (0.0, 500.0):
        seen.look(pods, lambda _: None, lambda _: None, now)
    assert seen.stuck(pods) is None and seen.past == {"a"}, "b's events cannot be read: read again"
    assert seen.stuck(pods) is None
    assert seen.kube.core.asked.count("involvedObject.kind=Pod,involvedObject.name=a") == 1


# -- the run's verdict ----------------------------------------------------------------------------------------


def lost_run(tmp_path, monkeypatch, *times):
    run = make(tmp_path, [pod("a", 0), pod("b", 1, node="node-1")], bounds=Bounds(ready_s=60.0))
    run.nodes = FakeInformer(node("node-0"), node("node-1"))
    return clocked(run, monkeypatch, *times)


def test_a_node_not_ready_ends_the_run_only_once_held_past_its_bound(tmp_path, monkeypatch):
    run = lost_run(tmp_path, monkeypatch, 100.0, 130.0, 159.0, 160.0)
    run.nodes.items["node-1"] = node("node-1", ready="Unknown", reason="NodeStatusUnknown", version="2")
    assert run._verdict() is None and run._verdict() is None and run._verdict() is None
    status = run._verdict()
    assert status.state is JobState.FAILED and status.disruption is not None, status
    assert (status.disruption.reason, status.disruption.host, status.disruption.pod) == (
        "NodeLost",
        "node-1",
        "b",
    )
    assert "not Ready for 60s, past 60s, its pods unheard" in status.reason


def test_a_ready_that_flaps_back_to_true_passes(tmp_path, monkeypatch):
    run = lost_run(tmp_path, monkeypatch, 100.0, 130.0, 131.0, 175.0, 200.0)
    run.nodes.items["node-1"] = node("node-1", ready="False", reason="KubeletNotReady", version="2")
    assert run._verdict() is None and run._verdict() is None
    run.nodes.items["node-1"] = node("node-1", version="3")
    assert run._verdict() is None
    run.nodes.items["node-1"] = node("node-1", ready="False", reason="KubeletNotReady", version="4")
    assert run._verdict() is None and run._verdict() is None, "60 s in all, never 60 s at once"


def test_a_held_bug_that_counts_one_look_fails_the_flap(tmp_path, monkeypatch):
    """The known bug put back into the one predicate: the flap above ends the run as disrupted."""
    monkeypatch.setattr(held, "has_held", lambda _: True)
    run = lost_run(tmp_path, monkeypatch, 100.0)
    run.nodes.items["node-1"] = node("node-1", ready="False", reason="KubeletNotReady", version="2")
    status = run._verdict()
    assert status is not None and status.disruption is not None and status.disruption.reason == "NodeLost"


def test_a_pod_stuck_creating_fails_the_run_naming_it_its_node_and_the_volume(tmp_path, monkeypatch):
    a = pod("a", 0)
    b = pod("b", 1, phase="Pending", containers=[CREATING], conditions=[NO_SANDBOX], node="node-1")
    run = make(tmp_path, [a, b])
    run.settings.kube.core = Events(b=[MOUNT])
    now = [10.0]
    monkeypatch.setattr("rollcall.backends.kubernetes.job.time.monotonic", lambda: now[0])
    run.started, run._timeout_s = 0.0, 1800.0
    assert run._verdict() is None
    now[0] += CREATING_S - 1
    assert run._verdict() is None
    now[0] += 1
    status = run._verdict()
    assert status.state is JobState.FAILED and status.disruption is None, status
    assert status.reason.startswith(
        "pod b (index 1) on node node-1 was still creating its containers after 483s (bound 483s"
    )
    assert (
        'waiting for volume data to attach and mount (FailedMount: MountVolume.SetUp failed for volume "data"'
        in (status.reason)
    )


def test_progress_says_when_a_nodes_ready_turns_and_when_it_is_true_again():
    seen = holds_of()
    pods, unheard = [pod()], lambda _: None
    down, up = {"node-0": node(ready="False")}, {"node-0": node()}
    assert seen.look(pods, up.get, unheard, 0.0) == []
    assert seen.look(pods, down.get, unheard, 1.0) == [
        "node node-0 Ready=False: lost only if that holds 60s with its pods unheard"
    ]
    assert seen.look(pods, down.get, unheard, 2.0) == [], "said once"
    assert seen.look(pods, up.get, unheard, 3.0) == ["node node-0 Ready again: not lost"]
