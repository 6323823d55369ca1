"""The instance-type table: one entry per type, and the fake node profiles agree with it."""

from pathlib import Path

import pytest
import yaml

from rollcall.backends.kubernetes.instances import (
    INSTANCE_TYPES,
    advertised_counts,
    count_facts,
    lookup,
    shortfalls,
)
from rollcall.backends.kubernetes.nodeviews import Node

PROFILES = sorted((Path(__file__).resolve().parents[2] / "hack" / "profiles").glob("*.yaml"))


def test_entries_are_keyed_by_their_name_and_have_an_accelerator():
    for name, t in INSTANCE_TYPES.items():
        assert t.name == name
        assert (t.gpus > 0) != (t.neuron_devices > 0), name
        assert t.efa >= 0 and (t.efa > 0 or not t.efa_rdma), name
    assert lookup("p5.48xlarge") is INSTANCE_TYPES["p5.48xlarge"]
    assert lookup("m7i.large") is None and lookup(None) is None


@pytest.mark.parametrize(
    ("name", "efa"),
    [
        ("p4d.24xlarge", 4),
        ("p5.48xlarge", 32),
        ("p5e.48xlarge", 32),
        ("p5en.48xlarge", 16),
        ("p6-b200.48xlarge", 8),
        ("trn1.32xlarge", 8),
        ("trn1n.32xlarge", 16),
        ("trn2.48xlarge", 16),
    ],
)
def test_efa_interfaces_of_the_types_most_used_for_training(name, efa):
    assert INSTANCE_TYPES[name].efa == efa


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_fake_node_profiles_advertise_what_their_type_has(profile):
    node = yaml.safe_load(profile.read_text())
    t = lookup(node["metadata"]["labels"]["node.kubernetes.io/instance-type"])
    assert t is not None, f"{profile.name}: type not in rollcall.backends.kubernetes.instances"
    for section in ("capacity", "allocatable"):
        have = {k: int(v) for k, v in node["status"][section].items() if "/" in k}
        expected = {
            "nvidia.com/gpu": t.gpus,
            "aws.amazon.com/neuron": t.neuron_devices,
            "aws.amazon.com/neuroncore": t.neuron_cores,
            "vpc.amazonaws.com/efa": t.efa,
        }
        assert have == {k: v for k, v in expected.items() if v}, f"{profile.name} {section}"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_fake_node_profiles_are_short_of_nothing_and_their_facts_pair_each_count_with_the_types(profile):
    node = Node(yaml.safe_load(profile.read_text()))
    counts = advertised_counts(node.advertised)
    assert counts and shortfalls(node.instance_type, counts) == [], profile.name
    facts = count_facts(node.instance_type, counts)
    for fact in counts:
        assert facts[f"advertised_{fact}"] == facts[f"type_{fact}"], f"{profile.name} {fact}"


def test_a_short_count_is_named_with_the_resource_both_counts_and_the_type():
    """A device a node does not advertise is a fault nothing here can produce: the counts are written."""
    [lack] = shortfalls("trn2.48xlarge", {"neuron_devices": 16, "neuroncores": 56, "efa": 16})
    assert str(lack) == (
        "advertises 56 aws.amazon.com/neuroncore, its instance type trn2.48xlarge has 64 NeuronCores"
    )  # 128 physical cores advertised two to a logical one (LNC=2)
    assert [str(s) for s in shortfalls("p5.48xlarge", {"gpus": 8, "efa": 31})] == [
        "advertises 31 vpc.amazonaws.com/efa, its instance type p5.48xlarge has 32 EFA interfaces"
    ]
    assert shortfalls("x9.big", {"gpus": 1}) == [] and shortfalls(None, {"gpus": 1}) == []
    # a count a node lists in two resources (whole Neuron devices) is the lesser
    listed = {"aws.amazon.com/neurondevice": 15, "aws.amazon.com/neuron": 16}
    assert advertised_counts(listed.get) == {"neuron_devices": 15}
