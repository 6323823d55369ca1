"""A backend is asked for a placement by a small typed request, built from the options in one place."""

import dataclasses
import typing

import pytest

from rollcall.backends import Backend, Placement, PlacementRequest
from rollcall.backends.kubernetes.backend import KubernetesBackend
from rollcall.backends.local import LocalBackend
from rollcall.backends.slurm.backend import SlurmBackend
from rollcall.jobspec import Toleration
from rollcall.options import DEFAULTS, Options, resolve
from rollcall.suite import Suite, placement_request
from tests.unit.test_imports import graph, wing_of


def test_the_request_of_the_default_options_is_the_requests_default():
    assert placement_request(DEFAULTS) == PlacementRequest()


def test_the_request_carries_what_the_options_ask_for():
    options = resolve(
        {
            "nodes": "4",
            "accelerator": "neuron",
            "procs_per_node": "16",
            "instance_type": "trn1.32xlarge",
            "efa": "on",
            "node_selector": ["pool=ml"],
            "toleration": ["dedicated=ml:NoSchedule"],
            "check_device_plugins": True,
            "capacity_timeout": "20m",
        },
        environ={},
    )
    assert placement_request(options) == PlacementRequest(
        nodes=4,
        accelerator="neuron",
        procs_per_node=16,
        instance_type="trn1.32xlarge",
        efa="on",
        node_selector={"pool": "ml"},
        tolerations=(Toleration("dedicated", "NoSchedule", "ml"),),
        check_device_plugins=True,
        capacity_timeout_s=1200.0,
        trust_autoscaler=True,
    )


@pytest.mark.parametrize(
    ("environ", "trusted"),
    [({}, False), ({"ROLLCALL_CAPACITY_TIMEOUT": "900"}, True)],
)
def test_the_autoscaler_is_trusted_when_the_capacity_timeout_was_given_even_at_its_default(environ, trusted):
    request = placement_request(resolve({}, environ=environ))
    assert (request.capacity_timeout_s, request.trust_autoscaler) == (900.0, trusted)


def test_the_request_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PlacementRequest().nodes = 3  # type: ignore[misc]


@pytest.mark.parametrize("backend", [Backend, LocalBackend, SlurmBackend, KubernetesBackend])
def test_discover_takes_the_request_and_no_options(backend):
    hints = typing.get_type_hints(backend.discover)
    assert hints == {"request": PlacementRequest, "return": Placement}
    assert Options not in hints.values()
    assert "Options" not in str(hints)


def test_no_module_of_kubernetes_placement_imports_the_options():
    edges = graph()
    placement = [m for m in edges if wing_of(m) and m.rsplit(".", 1)[-1] in {
        "placement", "discovery", "capacity", "instances", "views", "state", "local"
    }]  # fmt: skip
    assert "rollcall.backends.kubernetes.discovery" in placement
    assert {m: "rollcall.options" for m in placement if "rollcall.options" in edges[m]} == {}
    assert not [m for m in placement if any(i.startswith("rollcall.options") for i in edges[m])]
    assert not [i for i in edges["rollcall.backends"] if i.startswith("rollcall.options")]


#: The section of the options each wing is given (besides how values are read: ``options.values``).
SECTION_OF = {
    "rollcall.backends.kubernetes": "rollcall.options.kubernetes",
    "rollcall.backends.slurm": "rollcall.options.slurm",
    "rollcall.backends.local": None,
}


def test_each_wing_imports_its_own_section_of_the_options_only():
    edges = graph()
    seen = set()
    for module, imported in sorted(edges.items()):
        wing = wing_of(module)
        if wing is None:
            continue
        options = {i for i in imported if i == "rollcall.options" or i.startswith("rollcall.options.")}
        allowed = {SECTION_OF[wing], "rollcall.options.values"}
        assert options <= allowed, (
            f"{module} imports {sorted(options - allowed)}: its wing is given {allowed}"
        )
        seen |= options
    assert {"rollcall.options.kubernetes", "rollcall.options.slurm"} <= seen


class Recording:
    """A backend that records what discovery was asked for."""

    name = "fake"
    unit = "node"

    def __init__(self):
        self.asked = []

    def discover(self, request):
        self.asked.append(request)
        return Placement("cpu", request.procs_per_node or 1)

    def launch(self, spec, collector):  # pragma: no cover - never launched here
        raise NotImplementedError


def test_the_suite_discovers_once_with_the_request_of_its_options():
    options = resolve({"nodes": "3", "accelerator": "cpu", "procs_per_node": "2"}, environ={})
    suite = Suite(options, "fake", "a test")
    fake = Recording()
    suite.__dict__["backend"] = fake  # the cached backend
    assert suite.placement == Placement("cpu", 2)
    assert suite.placement == Placement("cpu", 2)
    assert fake.asked == [placement_request(options)]
    assert fake.asked[0].nodes == 3
