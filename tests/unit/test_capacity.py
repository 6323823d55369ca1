"""Matching the cluster's provisioners to the nodes a run needs, and what a run waited for (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rollcall.backends import Waits
from rollcall.backends.kubernetes import capacity, waits
from rollcall.backends.kubernetes.capacity import find, nodepool_mismatch
from rollcall.backends.kubernetes.discovery import TooFewNodes, discover, tolerates
from rollcall.backends.kubernetes.manifests import job_tolerations
from rollcall.backends.kubernetes.views import parse_time

TRN1 = {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
TOLERATES = lambda taint: tolerates(job_tolerations(), taint)  # noqa: E731


def pool(
    name: str = "trn",
    labels: dict[str, str] | None = None,
    requirements: list[dict[str, Any]] | None = None,
    *,
    taints: list[dict[str, str]] | None = None,
    limits: dict[str, str] | None = None,
    used: dict[str, str] | None = None,
    ready: str = "True",
    group: str = "karpenter.k8s.aws",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {
                "nodeClassRef": {"group": group, "kind": "EC2NodeClass", "name": "default"},
                "requirements": requirements or [],
                "taints": taints or [],
            },
        }
    }
    if limits:
        spec["limits"] = limits
    status = {"conditions": [{"type": "Ready", "status": ready, "reason": "NodeClassNotReady"}]}
    return {"metadata": {"name": name}, "spec": spec, "status": status | {"resources": used or {}}}


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def mismatch(p: dict[str, Any], labels: dict[str, str], need: dict[str, int] | None = None) -> str | None:
    return nodepool_mismatch(p, labels, TOLERATES, need or {"nodes": 2})


def test_a_pool_that_may_pick_the_instance_type_matches():
    assert mismatch(pool(), TRN1) is None
    assert (
        mismatch(pool(requirements=[req("node.kubernetes.io/instance-type", "In", "trn1.32xlarge")]), TRN1)
        is None
    )
    assert (
        mismatch(pool(requirements=[req("karpenter.k8s.aws/instance-family", "In", "trn1", "trn1n")]), TRN1)
        is None
    )


def test_a_pool_whose_requirements_exclude_the_instance_type_does_not():
    gpu = pool(requirements=[req("node.kubernetes.io/instance-type", "In", "p5.48xlarge")])
    assert mismatch(gpu, TRN1) == (
        "it requires node.kubernetes.io/instance-type In ['p5.48xlarge'], not trn1.32xlarge"
    )
    # EKS Auto Mode's built-in general-purpose pool: categories c, m, r only.
    general = pool(
        "general-purpose",
        requirements=[req("eks.amazonaws.com/instance-category", "In", "c", "m", "r")],
        group="eks.amazonaws.com",
    )
    assert (
        mismatch(general, TRN1)
        == "it requires eks.amazonaws.com/instance-category In ['c', 'm', 'r'], not trn"
    )
    old = pool(requirements=[req("karpenter.k8s.aws/instance-generation", "Gt", "1")])
    assert mismatch(old, TRN1) == "it requires karpenter.k8s.aws/instance-generation Gt ['1'], not 1"


def test_node_selector_labels_must_be_carried_by_the_pool():
    labels = TRN1 | {"team": "ml"}
    assert mismatch(pool(labels={"team": "ml"}), labels) is None
    assert mismatch(pool(requirements=[req("team", "In", "ml", "infra")]), labels) is None
    assert mismatch(pool(labels={"team": "infra"}), labels) == "its template sets team=infra, not ml"
    assert mismatch(pool(), labels) == "its nodes would not carry team=ml"
    assert mismatch(pool("gpu"), TRN1 | {"karpenter.sh/nodepool": "trn"}) == (
        "its nodes are labelled karpenter.sh/nodepool=gpu, not trn"
    )
    assert mismatch(pool("trn"), TRN1 | {"karpenter.sh/nodepool": "trn"}) is None
    assert mismatch(pool(), TRN1 | {"topology.kubernetes.io/zone": "us-east-1a"}) is None


def test_untolerated_taints_not_ready_and_exhausted_limits_rule_a_pool_out():
    tainted = pool(taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
    assert mismatch(tainted, TRN1) == "its nodes are tainted dedicated:NoSchedule (not tolerated)"
    neuron = pool(taints=[{"key": "aws.amazon.com/neuron", "effect": "NoSchedule"}])
    assert mismatch(neuron, TRN1) is None, "the Job tolerates the accelerator taints"
    assert mismatch(pool(ready="False"), TRN1) == "not Ready (NodeClassNotReady)"
    need = {"nodes": 2, "aws.amazon.com/neuroncore": 64}
    full = pool(limits={"aws.amazon.com/neuroncore": "96"}, used={"aws.amazon.com/neuroncore": "64"})
    assert (
        mismatch(full, TRN1, need) == "its limit aws.amazon.com/neuroncore=96 leaves room for 32, 64 needed"
    )
    assert mismatch(pool(limits={"aws.amazon.com/neuroncore": "128"}), TRN1, need) is None
    assert (
        mismatch(pool(limits={"nodes": "1"}), TRN1, need) == "its limit nodes=1 leaves room for 1, 2 needed"
    )


def test_find_names_what_it_looked_for():
    gpu = pool("gpu", requirements=[req("node.kubernetes.io/instance-type", "In", "p5.48xlarge")])
    common = {"labels": TRN1, "tolerates": TOLERATES, "need": {"nodes": 2}}
    lookup = find([gpu, pool("trn")], None, trust_autoscaler=False, **common)
    assert lookup.provisioners == (capacity.Provisioner("karpenter", "trn"),)
    assert lookup.karpenter and lookup.describe() == "Karpenter NodePool trn"

    nothing = find(
        [gpu], {"metadata": {"name": "cluster-autoscaler-status"}}, trust_autoscaler=False, **common
    )
    assert nothing.provisioners == ()
    assert nothing.report().splitlines() == [
        "  no capacity can arrive; looked for:",
        "    Karpenter NodePools (karpenter.sh/v1) for nodes with node.kubernetes.io/instance-type=trn1.32xlarge:",
        "      gpu: it requires node.kubernetes.io/instance-type In ['p5.48xlarge'], not trn1.32xlarge",
        "    cluster-autoscaler: it runs, but its status does not say which labels its node groups carry; "
        "give --capacity-timeout to wait for it to scale up",
    ]
    trusted = find(None, {"metadata": {}}, trust_autoscaler=True, **common)
    assert [p.kind for p in trusted.provisioners] == ["cluster-autoscaler"] and not trusted.karpenter
    absent = find(None, None, trust_autoscaler=True, errors={"nodepools": "Forbidden"}, **common)
    assert absent.looked == (
        "Karpenter NodePools (karpenter.sh/v1): could not list them: Forbidden",
        "cluster-autoscaler: no kube-system/cluster-autoscaler-status ConfigMap (none runs)",
    )
    auto = find([pool("trn", group="eks.amazonaws.com")], None, trust_autoscaler=False, **common)
    assert str(auto.provisioners[0]) == "EKS Auto Mode NodePool trn"


@pytest.mark.parametrize(
    ("op", "value", "allowed"),
    [
        ("In", "a", True),
        ("In", "c", False),
        ("NotIn", "c", True),
        ("NotIn", "a", False),
        ("Exists", "x", True),
        ("DoesNotExist", "x", False),
        ("Gt", "3", True),
        ("Lt", "3", False),
        ("Gt", "x", False),
    ],
)
def test_requirement_operators(op, value, allowed):
    values = ["a", "b"] if op in ("In", "NotIn") else ["2"] if op in ("Gt", "Lt") else []
    assert capacity.allows({"key": "k", "operator": op, "values": values}, value) is allowed


def test_the_catalogue_plans_a_trn1_node_before_one_exists():
    assert capacity.shape("trn1.32xlarge") == capacity.Shape("neuron", "aws.amazon.com/neuroncore", 32, 8)
    assert capacity.shape("x1.unknown") is None and capacity.shape(None) is None
    assert capacity.derived_labels("trn1.32xlarge")["karpenter.k8s.aws/instance-category"] == "trn"


def test_too_few_nodes_is_typed_with_what_was_found():
    with pytest.raises(TooFewNodes) as err:
        discover([], nodes=2, accelerator="neuron", instance_type="trn1.32xlarge")
    assert err.value.usable == [] and err.value.accelerator == "neuron"
    with pytest.raises(TooFewNodes) as auto:
        discover([], nodes=2, instance_type="trn1.32xlarge")
    assert auto.value.accelerator is None


def _pod(name: str, node: str | None, scheduled: str | None, started: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if started else "Pending", "conditions": []}
    if scheduled:
        status["conditions"].append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}
        )
    if started:
        status["containerStatuses"] = [{"name": "train", "state": {"running": {"startedAt": started}}}]
    labels = {"batch.kubernetes.io/job-completion-index": name[-1]}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}, "status": status}


def test_a_node_arrives_when_a_container_of_rollcalls_starts_not_an_injected_init_container():
    """An init container the cluster injects (a mesh's) that ran is no arrival: the node is still on its way
    while its training image pulls; the monitor sidecar's start, or the training container's, is."""
    injected = _pod("p-1", "n1", "2026-12-01T10:00:10Z", None)
    injected["status"]["initContainerStatuses"] = [
        {"name": "istio-init", "state": {"terminated": {"exitCode": 0, "startedAt": "2026-12-01T10:00:12Z"}}},
        {"name": "monitor", "state": {"waiting": {"reason": "PodInitializing"}}},
    ]
    ready = _pod("p-0", "n0", "2026-12-01T10:00:00Z", "2026-12-01T10:01:30Z")
    assert waits.on_the_way([ready, injected], 2) == [1]
    monitor = injected["status"]["initContainerStatuses"][1]
    monitor["state"] = {"running": {"startedAt": "2026-12-01T10:02:00Z"}}
    assert waits.on_the_way([ready, injected], 2) == []


def test_waits_over_pods():
    pods = [
        _pod("p-0", "n0", "2026-12-01T10:00:00Z", "2026-12-01T10:01:30Z"),
        _pod("p-1", "n1", "2026-12-01T10:00:10Z", None),
    ]
    assert waits.all_scheduled(pods, 2) and not waits.all_scheduled(pods[:1], 2)
    assert waits.pulling(pods) == ["p-1"]
    assert waits.image_pull_s(pods) == 90.0
    assert waits.image_pull_s(pods[1:]) is None
    assert not waits.all_scheduled([_pod("p-0", None, None, None)], 1)
    assert waits.suspended({"spec": {"suspend": True}}) and not waits.suspended({"spec": {}})
    line = Waits("Karpenter NodePool trn", 312.4, 90.0).line()
    assert line == (
        "every pod scheduled after 312s (waited for Karpenter NodePool trn); image pulls took up to 90s"
    )
    assert Waits("quota (Kueue)", None, None).as_dict() == {
        "waited_for": "quota (Kueue)",
        "scheduled_s": None,
        "image_pull_s": None,
        "pulls": [],
    }


def test_each_pods_pull_is_told_and_a_node_still_pulling_is_named_late_not_hung():
    pods = [
        _pod("p-0", "n0", "2026-12-01T10:00:00Z", "2026-12-01T10:01:30Z"),
        _pod("p-1", "n1", "2026-12-01T10:00:10Z", None),
        _pod("p-2", None, None, None),  # not scheduled yet: waiting for capacity, not for its image
    ]
    pods[1]["spec"]["containers"] = [{"name": "train", "image": "registry.example/bert:cuda"}]
    now = datetime(2026, 12, 1, 10, 5, 50, tzinfo=UTC)
    (done, late) = waits.pulls(pods, now)
    assert (done.node, done.seconds, done.done) == (0, 90.0, True)
    assert (late.node, late.pod, late.machine, late.seconds, late.done) == (1, "p-1", "n1", 340.0, False)
    assert late.line() == (
        "node 1 still pulling image registry.example/bert:cuda or creating its containers (pod p-1 on n1) "
        "after 340s: late, not hung"
    )
    waited = Waits("", 10.0, 90.0, (done, late))
    assert waited.pulling() == [late]
    assert waited.line() == (
        f"every pod scheduled after 10s; image pulls took up to 90s (node 0 90s); {late.line()}"
    )
    assert waited.as_dict()["pulls"][1] == {
        "node": 1,
        "pod": "p-1",
        "machine": "n1",
        "image": "registry.example/bert:cuda",
        "seconds": 340.0,
        "done": False,
    }
    finished = {**pods[1], "status": {**pods[1]["status"], "phase": "Failed"}}
    assert waits.pulls([finished], now) == ()  # it ended without a container started: not pulling


def test_nodeclaims_and_scale_up_events_as_progress():
    claim = {
        "metadata": {
            "name": "trn-x1",
            "creationTimestamp": "2026-12-01T10:00:05Z",
            "labels": {"node.kubernetes.io/instance-type": "trn1.32xlarge"},
        },
        "status": {
            "conditions": [{"type": "Launched", "status": "True"}, {"type": "Registered", "status": "False"}]
        },
    }
    older = {"metadata": {"name": "old", "creationTimestamp": "2026-12-01T09:00:00Z"}, "status": {}}
    since = parse_time("2026-12-01T10:00:00Z")
    assert waits.claims_since([older, claim], since) == ["trn-x1 (trn1.32xlarge: Launched)"]
    assert waits.claim_line(older) == "old (instance type not chosen yet: launching)"
    events = [
        {
            "reason": "TriggeredScaleUp",
            "message": "pod triggered scale-up: [{trn 0->2}]",
            "lastTimestamp": "b",
        },
        {"reason": "TriggeredScaleUp", "message": "older", "lastTimestamp": "a"},
        {"reason": "FailedScheduling", "message": "0/3 nodes", "lastTimestamp": "c"},
    ]
    assert waits.scale_up_events(events) == ["TriggeredScaleUp: pod triggered scale-up: [{trn 0->2}]"]
