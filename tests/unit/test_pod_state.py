"""Reading a Job's and its pods' status: finished, broken (and where), or still going."""

import pytest

from rollcall.backends.held import Holding
from rollcall.backends.kubernetes.pod_state import (
    GOING_AWAY,
    disruption,
    duplicate_indexes,
    going_away,
    job_disruption,
    job_result,
    node_lost,
    not_ready,
    phases,
    pod_fault,
    started,
    terminated,
    terminations,
    unschedulable,
    where,
)
from rollcall.evidence.endings import Disruption, Termination


def pod(
    name="bert-0-abcde", index="0", node="trn1-0", phase="Running", containers=(), conditions=(), **status
):
    return {
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-completion-index": index}},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "containerStatuses": list(containers),
            "conditions": list(conditions),
            **status,
        },
    }


def container(name="train", image="img:1", **state):
    return {"name": name, "image": image, "state": state}


def job(*conditions):
    return {"metadata": {"name": "bert"}, "status": {"conditions": list(conditions)}}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([{"type": "Complete", "status": "True"}], ("complete", "")),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], ("complete", "")),
        ([{"type": "Complete", "status": "False"}], None),
        (
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "limit reached",
                }
            ],
            ("failed", "Job bert Failed: BackoffLimitExceeded: limit reached"),
        ),
        (
            [{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}],
            ("timed_out", "Job bert FailureTarget: DeadlineExceeded"),
        ),
    ],
)
def test_job_result(conditions, expected):
    assert job_result(job(*conditions)) == expected


def test_a_running_pod_is_fine():
    assert pod_fault(pod(containers=[container(running={"startedAt": "t"})])) is None


@pytest.mark.parametrize(
    "reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"]
)
def test_containers_that_cannot_start(reason):
    p = pod(
        phase="Pending", containers=[container(waiting={"reason": reason, "message": "not found: img:1"})]
    )
    assert pod_fault(p) == (
        f"pod bert-0-abcde (index 0) on node trn1-0: container train cannot start: {reason} (img:1): not found: img:1"
    )


def test_container_creating_is_not_a_fault():
    assert (
        pod_fault(pod(phase="Pending", containers=[container(waiting={"reason": "ContainerCreating"})]))
        is None
    )


def test_non_zero_exit_and_oom():
    crashed = pod(
        phase="Failed",
        containers=[container(terminated={"exitCode": 3, "reason": "Error", "message": "boom\n"})],
    )
    assert (
        pod_fault(crashed)
        == "pod bert-0-abcde (index 0) on node trn1-0: container train exited with code 3 (Error): boom"
    )
    oom = pod(index="5", containers=[container(terminated={"exitCode": 137, "reason": "OOMKilled"})])
    assert pod_fault(oom) == (
        "pod bert-0-abcde (index 5) on node trn1-0: container train was OOMKilled (exit code 137): it ran out of memory"
    )
    init = pod(initContainerStatuses=[container("setup", terminated={"exitCode": 1})])
    assert "container setup exited with code 1 (Error)" in pod_fault(init)


def test_a_pod_that_failed_without_a_container_says_why():
    evicted = pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    assert pod_fault(evicted) == (
        "pod bert-0-abcde (index 0) on node trn1-0 failed: Evicted: The node was low on resource: memory."
    )


def test_pods_being_deleted_are_left_to_the_job():
    p = pod(containers=[container(terminated={"exitCode": 143, "reason": "Error"})])
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_fault(p) is None


def test_succeeded_pod_is_fine():
    assert (
        pod_fault(
            pod(phase="Succeeded", containers=[container(terminated={"exitCode": 0, "reason": "Completed"})])
        )
        is None
    )


def test_unschedulable_gives_the_schedulers_message():
    message = "0/4 nodes are available: 4 Insufficient aws.amazon.com/neuroncore."
    p = pod(
        phase="Pending",
        node=None,
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ],
    )
    assert unschedulable(p) == message
    assert unschedulable(pod()) is None
    assert pod_fault(p) is None


def test_started_and_terminated():
    p = pod(containers=[container("a", running={}), container("b", waiting={"reason": "ContainerCreating"})])
    assert started(p) == ["a"]
    assert not terminated(p, "a")
    done = pod(containers=[container(terminated={"exitCode": 0})])
    assert started(done) == ["train"] and terminated(done, "train")
    assert terminated(pod(phase="Succeeded"), "train")


def test_phases_and_duplicate_indexes():
    pods = [
        pod("a-0-x", "0"),
        pod("a-1-y", "1", phase="Pending"),
        pod("a-1-z", "1", phase="Failed"),
        pod("a-2", "2", phase=None),
    ]
    assert phases(pods) == {"Running": 1, "Pending": 2, "Failed": 1}
    assert duplicate_indexes(pods) == {"1": ["a-1-y", "a-1-z"]}


def node(name="trn1-0", ready="True", reason="KubeletReady", message=""):
    cond = {"type": "Ready", "status": ready, "reason": reason, "message": message}
    return {"metadata": {"name": name}, "status": {"conditions": [cond]}}


#: A node's Ready other than True held past its bound, and one seen so for a moment only.
HELD = Holding("Unknown", 100.0, 61.0, 60.0, 62)
MOMENT = Holding("Unknown", 100.0, 3.0, 60.0, 4)


def test_a_lost_node_is_named_with_the_pod_on_it_once_its_ready_has_held():
    assert node_lost(pod(), node()) is None
    assert node_lost(pod(), node(), HELD) is None, "Ready is True now: an old holding does not count"
    unknown = node(ready="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting")
    assert node_lost(pod(), unknown) is None, "one look at Unknown is no lost node"
    assert node_lost(pod(), unknown, MOMENT) is None, "held 3 s of its 60 s"
    lost = node_lost(pod(), unknown, HELD)
    assert lost == Disruption(
        "bert-0-abcde",
        0,
        "trn1-0",
        "NodeLost",
        "node trn1-0 was lost (Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting; not Ready for 61s, "
        "past 60s, its pods unheard)",
    )
    assert lost.describe() == (
        "pod bert-0-abcde (index 0) on node trn1-0 was disrupted (NodeLost): node trn1-0 was lost "
        "(Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting; not Ready for 61s, past 60s, its pods "
        "unheard)"
    )
    bare = {"metadata": {"name": "trn1-0"}, "status": {"conditions": []}}
    assert not_ready(bare) == "missing" and node_lost(pod(), bare) is None
    missing = node_lost(pod(), bare, HELD)
    assert missing is not None and missing.message == (
        "node trn1-0 has no Ready condition (not Ready for 61s, past 60s, its pods unheard)"
    )
    assert [not_ready(node(ready=r)) for r in ("True", "False", "Unknown")] == [None, "False", "Unknown"]
    deleted = node_lost(pod(), None)
    assert deleted is not None and deleted.reason == "NodeDeleted"
    assert deleted.message == "node trn1-0 was deleted while the pod ran"
    assert node_lost(pod(phase="Succeeded"), None) is None, "a finished pod no longer needs its node"
    assert node_lost(pod(node=None, phase="Pending"), None) is None, "not scheduled yet"


def disruption_target(reason, message="", status="True"):
    return {
        "type": "DisruptionTarget",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-12-01T08:00:01Z",
    }


@pytest.mark.parametrize(
    "reason",
    [
        "PreemptionByScheduler",
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "DeletionByPodGC",
        "TerminationByKubelet",
    ],
)
def test_a_pod_with_the_disruption_target_condition_is_disrupted(reason):
    evicted = pod(conditions=[disruption_target(reason, "Eviction API: evicting")])
    evicted["metadata"]["deletionTimestamp"] = "2025-12-01T08:00:02Z"

    found = disruption(evicted, node())
    assert found == Disruption(
        "bert-0-abcde", 0, "trn1-0", reason, "Eviction API: evicting", time=1764576001.0
    )
    assert found.describe().startswith(f"pod bert-0-abcde (index 0) on node trn1-0 was disrupted ({reason})")
    assert disruption(evicted, None, nodes_known=False) == found, "the pod's own condition needs no node"


def test_a_false_disruption_target_or_none_is_no_disruption():
    assert (
        disruption(pod(conditions=[disruption_target("EvictionByEvictionAPI", status="False")]), node())
        is None
    )
    assert disruption(pod(), node()) is None
    assert disruption(pod(), None, nodes_known=False) is None, "an unknown node is not a deleted one"
    failed = pod(phase="Failed", containers=[container(terminated={"exitCode": 1, "reason": "Error"})])
    assert disruption(failed, node()) is None, "a rank that failed on a healthy node failed on its own"


@pytest.mark.parametrize("reason", ["Evicted", "Preempting", "Terminated"])
def test_a_pod_its_kubelet_took_away_is_a_disruption_without_the_condition(reason):
    message = "The node was low on resource: memory."
    found = disruption(pod(phase="Failed", reason=reason, message=message), node(), nodes_known=False)
    assert found is not None and (found.reason, found.message) == (reason, message)
    assert disruption(pod(phase="Failed", reason="UnexpectedAdmissionError"), node()) is None


def test_a_deleted_node_is_a_disruption_at_once_a_lost_one_once_held():
    assert (disruption(pod(), None) or Disruption("", None, None, "")).reason == "NodeDeleted"
    unknown = node(ready="Unknown", reason="NodeStatusUnknown")
    assert disruption(pod(), unknown) is None and disruption(pod(), unknown, ready=MOMENT) is None
    lost = disruption(pod(), unknown, ready=HELD)
    assert lost is not None and lost.reason == "NodeLost" and lost.host == "trn1-0"


def tainted(*keys, cordoned=False):
    n = node()
    n["spec"] = {"taints": [{"key": k, "effect": "NoSchedule"} for k in keys], "unschedulable": cordoned}
    return n


def test_a_pod_deleted_on_a_cordoned_node_was_drained():
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2025-12-01T08:00:02Z"
    found = disruption(deleting, tainted(cordoned=True))
    assert found is not None and found.reason == "NodeDrained"
    assert found.message == "the pod was deleted; node trn1-0 is cordoned"
    assert disruption(deleting, node()) is None, "deleted on a healthy node: the Job's own doing"
    assert disruption(pod(), tainted(cordoned=True)) is None, "cordoned, but the pod still runs"


@pytest.mark.parametrize(
    ("taint", "says"),
    [
        ("karpenter.sh/disrupted", "Karpenter is disrupting the node"),
        ("aws-node-termination-handler/spot-itn", "spot interruption notice"),
        ("aws-node-termination-handler/scheduled-maintenance", "scheduled maintenance"),
        ("ToBeDeletedByClusterAutoscaler", "scale-down by the cluster autoscaler"),
    ],
)
def test_the_nodes_taints_say_why_it_is_going_away(taint, says):
    evicted = pod(conditions=[disruption_target("EvictionByEvictionAPI", "Eviction API: evicting")])
    found = disruption(evicted, tainted(taint, cordoned=True))
    assert found is not None and found.reason == "EvictionByEvictionAPI"
    assert f"{says}" in found.message and f"(taint {taint})" in found.message
    assert found.message.endswith("node trn1-0 is cordoned")

    killed = pod(phase="Failed", containers=[container(terminated={"exitCode": 137, "reason": "Error"})])
    reclaimed = disruption(killed, tainted(taint))
    assert reclaimed is not None and reclaimed.reason == "NodeGoingAway" and says in reclaimed.message
    assert going_away(tainted(taint, "dedicated")) == [f"{GOING_AWAY[taint]} (taint {taint})"]


def test_a_job_failed_by_its_pod_failure_policy_for_a_disruption_names_the_pod():
    message = "Pod ns/bert-0-abcde has condition DisruptionTarget matching FailJob rule at index 0"
    failed = job({"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": message})
    evicted = pod(conditions=[disruption_target("EvictionByEvictionAPI", "Eviction API: evicting")])

    found = job_disruption(failed, [evicted])
    assert found is not None and found.reason == "EvictionByEvictionAPI" and found.host == "trn1-0"
    gone = job_disruption(failed, [])
    assert gone is not None and gone.pod == "bert-0-abcde" and gone.reason == "DisruptionTarget"
    assert "matching FailJob rule" in gone.message

    exit_code = (
        "Container train for pod ns/bert-0-abcde failed with exit code 1 matching FailJob rule at index 1"
    )
    by_rank = job({"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": exit_code})
    assert job_disruption(by_rank, [evicted]) is None, "a rank's exit code is its own failure"
    backoff = job({"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"})
    assert job_disruption(backoff, [evicted]) is None


def test_terminations_are_read_as_typed_records():
    oom = container(terminated={"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2025-12-01T08:00:01Z"})
    ok = container(terminated={"exitCode": 0, "reason": "Completed"})
    pods = [
        pod("bert-1-x", index="1", node="trn1-1", phase="Failed", containers=[oom]),
        pod("bert-0-y", index="0", node="trn1-0", phase="Succeeded", containers=[ok]),
        pod("bert-2-z", index="2", containers=[container(running={})]),
    ]
    assert terminations(pods) == [Termination("bert-1-x", 1, "trn1-1", "OOMKilled", 137, 1764576001.0)]


def test_a_restarted_container_is_read_from_its_last_state_and_init_containers_count():
    restarted = {
        "name": "train",
        "state": {"running": {}},
        "lastState": {
            "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-12-01T08:00:01+01:00"}
        },
    }
    init = container(name="setup", terminated={"exitCode": 2})
    p = pod("bert-3-w", index="3", node="trn1-3", containers=[restarted], initContainerStatuses=[init])
    assert terminations([p]) == [
        Termination("bert-3-w", 3, "trn1-3", "Error", 2, None),  # init containers first; no finish time
        Termination("bert-3-w", 3, "trn1-3", "Error", 1, 1764572401.0),  # +01:00 is an hour before Z
    ]


def test_fields_that_are_null_read_as_absent():
    bare = {"metadata": {"name": "bert-0-n", "labels": None}, "spec": None, "status": None}
    assert pod_fault(bare) is None and unschedulable(bare) is None and started(bare) == []
    assert where(bare) == "pod bert-0-n (index ?) on node no node yet"
    assert phases([bare]) == {"Pending": 1} and terminations([bare]) == []
    assert disruption(bare, None) is None, "a pod with no node yet needs none"
