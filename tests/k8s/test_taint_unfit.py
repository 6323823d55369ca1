"""``--taint-unfit`` against a real API server with kwok nodes: a fitness failure taints exactly the unfit node.

The fake kubelet makes node 1's first rank report a PCIe link trained below its width (the ``pcie_width``
rule); the verdict names that node unfit, and the suite taints it, keeping the taint every node held before.
"""

from __future__ import annotations

import json

import pytest

from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.taints import taint_nodes
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.jobspec import Taint
from tests.cluster.controlplane import INSTANCE_TYPE_LABEL

from .conftest import TRN1
from .fakekubelet import FACTS

pytestmark = pytest.mark.control_plane

UNFIT = Taint("rollcall/unfit", "NoSchedule", "true")
#: A taint each node holds before the run, which the pods tolerate (the accelerator's own).
HELD = {"key": "aws.amazon.com/neuron", "value": "present", "effect": "NoSchedule"}
NARROW_LINK = {
    "device_index": 0,
    "gpu_uuid": "GPU-kwok-1",
    "gpu_serial": "S-1",
    "pcie_width": 8,
    "pcie_width_max": 16,
}


def taints(kube, name: str) -> list[dict]:
    found: list[dict] = call(kube.core.read_node, name)["spec"].get("taints") or []
    return found


def test_a_fitness_failure_taints_exactly_the_unfit_node(
    make_suite, ensure_nodes, kube, control_plane, request
):
    ensure_nodes(2)
    names = [
        n["metadata"]["name"]
        for n in control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    ]
    held = f"{HELD['key']}={HELD['value']}:{HELD['effect']}"
    control_plane.kubectl("taint", "nodes", *names, held, "--overwrite")
    try:
        suite, _ = make_suite(
            nodes=2, annotations={FACTS: json.dumps({"32": NARROW_LINK})}, taint_unfit=str(UNFIT)
        )
        record = suite.run(request.node.nodeid, request.node.name)
        verdict = record.result.last.verdict

        assert not record.result.passed
        assert verdict.of_kind(UNFIT_DEVICE), verdict.problems
        assert len(verdict.unfit_nodes) == 1, verdict.unfit_nodes
        bad = verdict.unfit_nodes[0]
        assert bad in names
        assert record.extra["taint_unfit"] == {
            "taint": "rollcall/unfit=true:NoSchedule",
            "key": "rollcall/unfit",
            "value": "true",
            "effect": "NoSchedule",
            "applied": [bad],
            "already": [],
            "failed": {},
        }
        assert any(
            f"tainted unfit node(s) {bad} with {UNFIT}" in line for line in suite.backend.progress_lines
        )
        # exactly the unfit node holds the taint, beside the one it held; every other node is as it was
        for name in names:
            expected = [HELD, UNFIT.manifest()] if name == bad else [HELD]
            assert taints(kube, name) == expected, name
        # tainting again changes nothing
        again = taint_nodes(suite.backend.kube, [bad], UNFIT)
        assert (again.applied, again.already) == ((), (bad,)) and taints(kube, bad) == [
            HELD,
            UNFIT.manifest(),
        ]
    finally:
        for name in names:
            kept = [t for t in taints(kube, name) if t["key"] not in (UNFIT.key, HELD["key"])]
            body = {"spec": {"taints": kept}}
            call(kube.core.patch_node, name, body, _content_type="application/merge-patch+json")
