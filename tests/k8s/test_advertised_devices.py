"""A node advertising fewer NeuronCores than its instance type has, against a real API server with kwok nodes.

A NeuronCore lost (or a device plugin that did not enumerate one) is a fault nothing here can produce: the
test adds two trn1.32xlarge nodes of its own and patches one's ``status.capacity`` and ``allocatable`` down
to 30 ``aws.amazon.com/neuroncore``, as its device plugin would advertise them. Discovery names the node and
lowers each pod's request to the 30 both offer, so the ranks see all they were given (``device_count`` finds
nothing); the ``advertised_devices`` rule fails the node, naming both counts and its type.
"""

from __future__ import annotations

import json
import uuid

import pytest

from rollcall.backends.kubernetes.kube import call
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.jobspec import NEURONCORE_RESOURCE
from tests.waiting import wait_until

from .conftest import TRN1
from .fakekubelet import FACTS

pytestmark = pytest.mark.control_plane

#: The label that keeps the run on the test's own two nodes.
PAIR_LABEL = "rollcall.test/advertised"
SHORT = 30


def test_a_node_advertising_fewer_neuroncores_than_its_type_is_named_at_discovery_and_fails(
    make_suite, control_plane, kube, request
):
    pair = f"pair-{uuid.uuid4().hex[:6]}"
    added = control_plane.add_nodes(2, TRN1)
    try:
        control_plane.kubectl("label", "node", *added, f"{PAIR_LABEL}={pair}")
        short = added[1]
        body = {"status": {key: {NEURONCORE_RESOURCE: str(SHORT)} for key in ("capacity", "allocatable")}}
        call(kube.core.patch_node_status, short, body)
        wait_until(
            f"node {short} to advertise {SHORT} NeuronCores",
            lambda: all(
                call(kube.core.read_node, short)["status"][key].get(NEURONCORE_RESOURCE) == str(SHORT)
                for key in ("capacity", "allocatable")
            ),
        )
        # each node's first rank reports its facts, and every start event names its node
        facts = {"0": {"neuron_devices": 16}, str(SHORT): {"neuron_devices": 16}}
        suite, backend = make_suite(
            nodes=2, node_selector=f"{PAIR_LABEL}={pair}", annotations={FACTS: json.dumps(facts)}
        )
        attempt = suite.run(request.node.nodeid, request.node.name).result.last
        progress = "\n".join(backend.progress_lines)

        assert attempt.spec.procs_per_node == SHORT, "discovery lowers the request to what both offer"
        assert (
            f"warning: node {short} advertises {SHORT} {NEURONCORE_RESOURCE}, its instance type {TRN1} has 32 "
            "NeuronCores" in progress
        ), progress
        warned = [line for line in backend.progress_lines if "rule advertised_devices names it" in line]
        assert len(warned) == 1, warned  # only the short node
        assert (
            f"warning: each pod requests {SHORT} {NEURONCORE_RESOURCE}, fewer than the 32 of its instance type: "
            f"{short} (1) advertise fewer (rule advertised_devices)" in progress
        ), progress
        assert not attempt.passed
        verdict = attempt.verdict
        [problem] = verdict.of_kind(UNFIT_DEVICE)
        assert (
            f"({short}): advertised_neuroncores={SHORT} advertised, its instance type {TRN1} has 32 "
            "NeuronCores (rule advertised_devices)" in problem.message
        ), problem.message
        assert verdict.unfit_nodes == [short]
        info = attempt.status.node_info
        assert info[short]["advertised_neuroncores"] == str(SHORT) and info[short]["type_neuroncores"] == "32"
        assert info[added[0]]["advertised_neuroncores"] == "32"
        assert "expected_neuron_devices" not in info[short]  # given 30 of 32: device_count expects nothing
    finally:
        control_plane.kubectl("delete", "node", *added)
