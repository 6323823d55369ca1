"""A node's own health as the platform reports it: the EKS node monitoring agent's ``AcceleratedHardwareReady``
condition, and devices its kubelet holds back from allocatable, read where discovery reads the nodes, and
judged by the fitness rules ``hardware_ready`` and ``lost_devices``.

Neither the agent nor an unhealthy device is here: the conditions and counts are written into the Node objects,
as the API would return them, and fed to the wing's own functions.
"""

from __future__ import annotations

from typing import Any

from rollcall.backends import PlacementRequest
from rollcall.backends.kubernetes.discovery import Node as DiscoveryNode
from rollcall.backends.kubernetes.discovery import discover
from rollcall.backends.kubernetes.manifests import job_tolerations
from rollcall.backends.kubernetes.nodeviews import Node, NodeHealth
from rollcall.backends.kubernetes.placement import place
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.options import resolve
from tests.unit.test_placement import FakeCluster

from .test_fitness import facts_of, fake_nvml, roll_with
from .test_node_fitness import judged, observed_of

#: What the agent writes when it finds an accelerator fault (the reason and message as an example).
NOT_READY = {
    "type": "AcceleratedHardwareReady",
    "status": "False",
    "reason": "NvidiaXID79Error",
    "message": "GPU has fallen off the bus",
}


def p5(
    name: str, *, hardware: dict[str, str] | None = None, gpus: str = "8", efa: str = "32"
) -> dict[str, Any]:
    """A p5.48xlarge Node, Ready, with 8 GPUs and 32 EFA interfaces of capacity, ``gpus``/``efa`` allocatable."""
    conditions = [{"type": "Ready", "status": "True"}, *([hardware] if hardware else [])]
    return {
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
        "spec": {},
        "status": {
            "conditions": conditions,
            "capacity": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
            "allocatable": {"cpu": "190", "nvidia.com/gpu": gpus, "vpc.amazonaws.com/efa": efa},
        },
    }


def test_the_view_reads_the_agents_condition_and_what_allocatable_holds_back():
    sick = Node(p5("a", hardware=NOT_READY, gpus="7", efa="30")).health
    assert sick.hardware_ready == "False"
    assert sick.hardware_reason == "NvidiaXID79Error: GPU has fallen off the bus"
    assert sick.lost == {"nvidia.com/gpu": 1, "vpc.amazonaws.com/efa": 2}
    assert sick.facts == {
        "hardware_ready": "False",
        "hardware_ready_reason": "NvidiaXID79Error: GPU has fallen off the bus",
        "allocatable_gpus": "7",
        "capacity_gpus": "8",
        "allocatable_efa": "30",
        "capacity_efa": "32",
    }
    healthy = Node(p5("b")).health  # no agent: no condition
    assert healthy.hardware_ready is None and healthy.lost == {}
    assert "hardware_ready" not in healthy.facts and healthy.facts["allocatable_gpus"] == "8"
    unknown = Node(p5("c", hardware={"type": "AcceleratedHardwareReady", "status": "Unknown"})).health
    assert unknown.hardware_ready == "Unknown" and unknown.hardware_reason == ""


def test_discovery_keeps_an_unhealthy_node_usable_and_warns_naming_the_condition_and_the_devices_lost():
    found = discover([p5("a", hardware=NOT_READY), p5("b", gpus="7")], nodes=2, tolerations=job_tolerations())
    assert found.usable == ["a", "b"]
    assert DiscoveryNode.of(p5("a", hardware=NOT_READY)).health.hardware_ready == "False"
    assert found.unhealthy == {
        "a": Node(p5("a", hardware=NOT_READY)).health,
        "b": Node(p5("b", gpus="7")).health,
    }
    warned = [w for w in found.warnings() if w.startswith(("node a ", "node b "))]
    assert (
        "node a is AcceleratedHardwareReady=False (NvidiaXID79Error: GPU has fallen off the bus): rule "
        "hardware_ready names it after a run on it"
    ) in warned
    assert any(
        w.startswith("node b holds 1 nvidia.com/gpu back from allocatable (unhealthy): rule lost_devices")
        for w in warned
    )
    calm = discover(
        [p5("c", hardware={"type": "AcceleratedHardwareReady", "status": "Unknown"}), p5("d")],
        nodes=2,
        tolerations=job_tolerations(),
    )
    assert calm.unhealthy == {} and calm.warnings() == []


def test_placement_says_the_warning_before_the_run():
    said: list[str] = []
    place(PlacementRequest(nodes=2), FakeCluster([p5("a", hardware=NOT_READY), p5("b")]), said.append)
    assert any(line.startswith("warning: node a is AcceleratedHardwareReady=False") for line in said)


def observed(obj: dict[str, Any]) -> dict[str, str]:
    """What the kubernetes wing observes of a node whose pod was given its 8 GPUs (job.py's facts)."""
    return observed_of(obj, 8)


def test_a_node_the_agent_calls_not_ready_is_unfit_named_with_the_conditions_reason_and_message():
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    verdict = judged(roll, {"n0": observed(p5("n0")), "n1": observed(p5("n1", hardware=NOT_READY))})
    assert not verdict.passed and verdict.unfit_nodes == ["n1"]
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.message == (
        "unfit device: node 1 (n1): hardware_ready=False (AcceleratedHardwareReady, the EKS node monitoring "
        "agent's): NvidiaXID79Error: GPU has fallen off the bus (rule hardware_ready)"
    )
    assert problem.blame is not None and problem.blame.owner.name == "CLUSTER"


def test_unknown_or_absent_says_nothing():
    unknown = {"type": "AcceleratedHardwareReady", "status": "Unknown", "reason": "NodeStatusNeverUpdated"}
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    verdict = judged(roll, {"n0": observed(p5("n0")), "n1": observed(p5("n1", hardware=unknown))})
    assert verdict.passed and verdict.warnings == ()


def test_a_node_allocating_fewer_gpus_or_efa_than_its_capacity_has_lost_them_named_by_number():
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    verdict = judged(roll, {"n0": observed(p5("n0", efa="29")), "n1": observed(p5("n1"))})
    assert not verdict.passed and verdict.unfit_nodes == ["n0"]
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert (
        "allocatable_efa=29 below its capacity 32: the node has lost 3 EFA interfaces (its device plugin "
        "reports them unhealthy) (rule lost_devices)"
    ) in problem.message
    [unfit] = [u for u in verdict.unfit if u.rule == "lost_devices"]
    assert unfit.as_dict()["value"] == 29


def test_the_rules_warn_or_are_off_by_name():
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    nodes = {"n0": observed(p5("n0", hardware=NOT_READY)), "n1": observed(p5("n1"))}
    options = resolve({"fitness_warn": ["hardware_ready"]}, environ={})
    warned = judged(roll, nodes, fitness=FitnessPolicy(warn=options.judging.fitness_warn))
    assert warned.passed and len(warned.warnings) == 1 and "rule hardware_ready" in warned.warnings[0].message
    off = judged(roll, nodes, fitness=FitnessPolicy(off=frozenset({"hardware_ready"})))
    assert off.passed and off.warnings == ()


def test_a_health_without_anything_wrong_has_no_lost_devices():
    assert NodeHealth(counts={"nvidia.com/gpu": (8, 8)}).lost == {}
