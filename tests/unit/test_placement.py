"""Kubernetes placement as one pipeline: the nodes there, else capacity that can arrive, then the plugins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rollcall.backends import DiscoveryError, PlacementRequest
from rollcall.backends.kubernetes.placement import Provisioning, place, plan_arriving, tolerations
from rollcall.jobspec import Toleration
from tests.unit.test_capacity import pool
from tests.unit.test_discovery import ds, node


@dataclass
class FakeCluster:
    """A cluster's objects, and which of them the pipeline read."""

    node_objs: list[dict[str, Any]] = field(default_factory=list)
    provisioners: Provisioning = field(default_factory=Provisioning)
    daemonset_objs: list[dict[str, Any]] = field(default_factory=list)
    read: list[str] = field(default_factory=list)

    def nodes(self) -> list[dict[str, Any]]:
        self.read.append("nodes")
        return self.node_objs

    def provisioning(self) -> Provisioning:
        self.read.append("provisioning")
        return self.provisioners

    def daemonsets(self) -> list[dict[str, Any]]:
        self.read.append("daemonsets")
        return self.daemonset_objs


def test_enough_nodes_read_nothing_but_the_nodes():
    cluster = FakeCluster([node("a"), node("b")])
    planned = place(PlacementRequest(nodes=2), cluster)
    assert planned.arriving is None and planned.discovery.usable == ["a", "b"]
    assert planned.placement.resources == {"aws.amazon.com/neuroncore": 32, "vpc.amazonaws.com/efa": 8}
    assert cluster.read == ["nodes"]


def test_too_few_nodes_plan_the_pods_from_the_instance_type_of_a_pool_that_can_bring_them():
    lines: list[str] = []
    cluster = FakeCluster([node("a")], Provisioning([pool("trn")], None))
    request = PlacementRequest(nodes=3, instance_type="trn1.32xlarge", efa="on", capacity_timeout_s=600)
    planned = place(request, cluster, lines.append)
    assert cluster.read == ["nodes", "provisioning"]
    assert planned.arriving is not None and planned.arriving.describe() == "Karpenter NodePool trn"
    p = planned.placement
    assert (p.accelerator, p.procs_per_node, p.instance_type) == ("neuron", 32, "trn1.32xlarge")
    assert p.resources == {"aws.amazon.com/neuroncore": 32, "vpc.amazonaws.com/efa": 8}
    assert planned.discovery.usable == ["a"] and planned.discovery.efa
    assert lines == [
        "too few nodes (1 of 3); 2 can arrive from Karpenter NodePool trn: the run will wait up to 600s for them"
    ]


def test_nothing_that_can_arrive_fails_naming_what_was_looked_for():
    with pytest.raises(DiscoveryError) as err:
        place(PlacementRequest(nodes=2, instance_type="trn1.32xlarge"), FakeCluster())
    assert "need 2 usable node(s), found 0" in str(err.value)
    assert "no capacity can arrive; looked for:" in str(err.value)
    assert "Karpenter NodePools (karpenter.sh/v1): the API is not installed" in str(err.value)


def test_an_autoscaler_counts_only_when_the_capacity_timeout_was_given():
    status = {"metadata": {"name": "cluster-autoscaler-status"}}
    cluster = FakeCluster(provisioners=Provisioning(None, status))
    request = PlacementRequest(nodes=2, accelerator="cpu")
    with pytest.raises(DiscoveryError, match="give --capacity-timeout to wait for it"):
        place(request, cluster)
    planned = place(PlacementRequest(nodes=2, accelerator="cpu", trust_autoscaler=True), cluster)
    assert planned.arriving is not None and planned.arriving.describe().startswith("cluster-autoscaler")
    assert (planned.placement.procs_per_node, planned.placement.resources) == (1, {})


def test_capacity_of_an_unknown_type_needs_the_accelerator_and_ranks():
    with pytest.raises(DiscoveryError, match="what its nodes offer is unknown"):
        place(PlacementRequest(nodes=2), FakeCluster(provisioners=Provisioning([pool("any")])))


def test_a_pool_tainted_as_the_request_tolerates_can_bring_the_nodes():
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    provisioning = Provisioning([pool("trn", taints=[taint])])
    request = PlacementRequest(nodes=1, instance_type="trn1.32xlarge")
    with pytest.raises(DiscoveryError, match="not tolerated"):
        place(request, FakeCluster(provisioners=provisioning))
    tolerated = PlacementRequest(
        nodes=1, instance_type="trn1.32xlarge", tolerations=(Toleration("dedicated", "NoSchedule", "ml"),)
    )
    assert place(tolerated, FakeCluster(provisioners=provisioning)).arriving is not None


def test_the_jobs_tolerations_are_the_manifests_then_the_requests():
    extra = Toleration("dedicated", "NoExecute")
    assert tolerations(PlacementRequest(tolerations=(extra,)))[-1] == extra.manifest()
    assert extra.manifest() not in tolerations(PlacementRequest())


def test_device_plugins_are_read_only_when_asked_and_only_of_nodes_that_exist():
    nodes = [node("a"), node("b")]
    not_ready = [ds("neuron-device-plugin", desired=2, ready=1), ds("aws-efa-k8s-device-plugin")]
    quiet = FakeCluster(nodes, daemonset_objs=not_ready)
    place(PlacementRequest(nodes=2), quiet)
    assert quiet.read == ["nodes"]
    with pytest.raises(DiscoveryError, match="neuron device plugin kube-system/neuron-device-plugin: 1 of 2"):
        place(
            PlacementRequest(nodes=2, check_device_plugins=True), FakeCluster(nodes, daemonset_objs=not_ready)
        )
    lines: list[str] = []
    arriving = FakeCluster([], Provisioning([pool("trn")]), not_ready)
    place(
        PlacementRequest(nodes=2, instance_type="trn1.32xlarge", check_device_plugins=True),
        arriving,
        lines.append,
    )
    assert "daemonsets" not in arriving.read
    assert lines[-1].startswith("--check-device-plugins: the nodes do not exist yet")


def test_plan_arriving_is_a_step_of_its_own():
    from rollcall.backends.kubernetes.discovery import TooFewNodes

    short = TooFewNodes("need 2 usable node(s), found 0", [], {}, "nvidia")
    found, lookup = plan_arriving(
        PlacementRequest(nodes=2, procs_per_node=4),
        short,
        Provisioning([pool("gpu")]),
        tolerations(PlacementRequest()),
    )
    assert (found.placement.accelerator, found.placement.resources) == ("nvidia", {"nvidia.com/gpu": 4})
    assert lookup.describe() == "Karpenter NodePool gpu"
