"""The instance-type table: one entry per type, and the fake node profiles agree with it."""

from pathlib import Path

import pytest
import yaml

from rollcall.backends.kubernetes.instances import INSTANCE_TYPES, lookup

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
