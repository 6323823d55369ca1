"""``--taint-unfit``, ``--label-nodes`` and ``--recheck-tainted`` against a real API server with kwok nodes.

The fake kubelet makes node 1's first rank report a PCIe link trained below its width (the ``pcie_width``
rule); the verdict names that node unfit, and the suite taints it, keeping the taint every node held before,
and labels every node with its verdict. A re-check runs on the tainted node alone (its pods tolerate the taint),
finds it fit, and lifts the taint.
"""

from __future__ import annotations

import json

import pytest

from rollcall.backends import DiscoveryError, Marking, NodeMark
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.taints import mark_nodes
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


def test_a_fitness_failure_taints_and_labels_the_unfit_node_and_a_recheck_lifts_it(
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
            nodes=2,
            annotations={FACTS: json.dumps({"32": NARROW_LINK})},
            taint_unfit=str(UNFIT),
            label_nodes=True,
        )
        record = suite.run(request.node.nodeid, request.node.name)
        verdict = record.result.last.verdict

        assert not record.result.passed
        assert verdict.of_kind(UNFIT_DEVICE), verdict.problems
        assert len(verdict.unfit_nodes) == 1, verdict.unfit_nodes
        bad = verdict.unfit_nodes[0]
        assert bad in names
        assert record.extra["node_marks"]["tainted"] == [bad] and record.extra["node_marks"]["failed"] == {}
        assert any(
            f"tainted unfit node(s) {bad} with {UNFIT}" in line for line in suite.backend.progress_lines
        )
        # exactly the unfit node holds the taint, beside the one it held; every other node is as it was
        for name in names:
            expected = [HELD, UNFIT.manifest()] if name == bad else [HELD]
            assert taints(kube, name) == expected, name
        node = call(kube.core.read_node, bad)
        assert "pcie_width" in node["metadata"]["annotations"]["rollcall/unfit-reason"]
        assert node["metadata"]["labels"]["rollcall/verdict"] == "unfit"
        ran = {n.name for n in verdict.nodes_detail}
        assert {n: call(kube.core.read_node, n)["metadata"]["labels"]["rollcall/verdict"] for n in ran} == {
            n: "unfit" if n == bad else "fit" for n in ran
        }
        # tainting again changes nothing
        again = mark_nodes(suite.backend.kube, [NodeMark(bad, "unfit", "x")], Marking(taint=UNFIT))
        assert (again.tainted, again.already) == ((), (bad,)) and taints(kube, bad) == [
            HELD,
            UNFIT.manifest(),
        ]

        # the re-check: the pods tolerate rollcall's taint and run on the tainted node only; found fit, it is
        # lifted, and the node is labelled fit
        healthy = {**NARROW_LINK, "pcie_width": 16}
        suite, _ = make_suite(
            nodes=1,
            annotations={FACTS: json.dumps({"0": healthy})},
            taint_unfit=str(UNFIT),
            recheck_tainted=True,
            label_nodes=True,
        )
        record = suite.run(request.node.nodeid + "-recheck", request.node.name + "_recheck")
        assert record.result.passed, record.result.last.verdict.message()
        assert record.result.last.spec.machines == (bad,)
        assert record.extra["node_marks"]["untainted"] == [bad], record.extra
        assert taints(kube, bad) == [HELD]
        node = call(kube.core.read_node, bad)
        assert node["metadata"]["labels"]["rollcall/verdict"] == "fit"
        assert "rollcall/unfit-reason" not in node["metadata"].get("annotations", {})
        # nothing left to re-check: no node holds the taint
        suite, _ = make_suite(nodes=1, taint_unfit=str(UNFIT), recheck_tainted=True)
        with pytest.raises(DiscoveryError, match="no node holds rollcall/unfit=true:NoSchedule"):
            suite.placement  # noqa: B018 - discovery
    finally:
        for name in names:
            kept = [t for t in taints(kube, name) if t["key"] not in (UNFIT.key, HELD["key"])]
            gone = {k: None for k in ("rollcall/verdict", "rollcall/checked-at", "rollcall/valid-until")}
            body = {
                "metadata": {"labels": gone, "annotations": {"rollcall/unfit-reason": None}},
                "spec": {"taints": kept},
            }
            call(kube.core.patch_node, name, body, _content_type="application/merge-patch+json")
