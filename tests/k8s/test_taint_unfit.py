"""``--taint-unfit``, ``--label-nodes`` and ``--recheck-tainted`` against a real API server with kwok nodes.

The fake kubelet makes node 1's first rank report a PCIe link trained below its width (the ``pcie_width``
rule); the verdict names that node unfit, and the suite taints it, keeping the taint every node held before,
and labels every node with its verdict. A re-check runs on the tainted node alone (its pods tolerate the taint)
and finds it fit: of part of its GPUs, the taint stays; of all, it is lifted. A marking pass clears the
verdicts that have expired (never a taint), and writes its times as integer epoch seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from rollcall.backends import DiscoveryError, Marking, NodeMark
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.taints import mark_nodes
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.jobspec import CHECKED_LABEL as CHECKED
from rollcall.jobspec import EXPIRES_LABEL as EXPIRES
from rollcall.jobspec import REASON_ANNOTATION, Taint
from rollcall.jobspec import VERDICT_LABEL as VERDICT
from rollcall.nodeverdicts import NodeVerdict, of_records
from tests.cluster.controlplane import INSTANCE_TYPE_LABEL
from tests.waiting import wait_until

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


def session_end(suite) -> tuple[list[NodeVerdict], dict]:
    """The session's end, as the plugin's: its nodes' verdicts, marked once; those, and what marking did."""
    nodes, _ = of_records(suite.records, suite.verdict_ttl_s, suite.options.recovery.max_unfit)
    marked = suite.mark(nodes)
    assert marked is not None
    return nodes, marked.as_dict()


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
        nodes, marks = session_end(suite)
        assert marks["tainted"] == [bad] and marks["failed"] == {}, marks
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
        # the times are integer epoch seconds, which a nodeAffinity Gt/Lt term compares
        checked_at, valid_until = (int(node["metadata"]["labels"][k]) for k in (CHECKED, EXPIRES))
        assert valid_until > checked_at > time.time() - 3600
        ran = {n.name for n in nodes if n.verdict != "unchecked"}
        assert {n: call(kube.core.read_node, n)["metadata"]["labels"]["rollcall/verdict"] for n in ran} == {
            n: "unfit" if n == bad else "fit" for n in ran
        }
        # tainting again changes nothing
        again = mark_nodes(suite.backend.kube, [NodeMark(bad, "unfit", "x")], Marking(taint=UNFIT))
        assert (again.tainted, again.already) == ((), (bad,)) and taints(kube, bad) == [
            HELD,
            UNFIT.manifest(),
        ]

        # the re-check: the pods tolerate rollcall's taint and run on the tainted node only
        def recheck(facts: dict, tag: str) -> tuple[list[NodeVerdict], dict]:
            suite, _ = make_suite(
                nodes=1,
                annotations={FACTS: json.dumps({"0": facts})},
                taint_unfit=str(UNFIT),
                recheck_tainted=True,
                label_nodes=True,
            )
            record = suite.run(f"{request.node.nodeid}-{tag}", f"{request.node.name}_{tag}")
            assert record.result.passed, record.result.last.verdict.message()
            assert record.result.last.spec.machines == (bad,)
            nodes, marks = session_end(suite)
            assert marks["labelled"] == {bad: "fit"} and marks["failed"] == {}, marks
            return nodes, marks

        # found fit where its ranks do not say how many GPUs the node has (not all checked): the taint stays
        healthy = {**NARROW_LINK, "pcie_width": 16}
        nodes, marks = recheck(healthy, "part")
        assert [n.whole for n in nodes if n.name == bad] == [False], nodes
        assert marks["kept"] == {bad: "not re-checked whole"} and marks["untainted"] == [], marks
        assert taints(kube, bad) == [HELD, UNFIT.manifest()]
        reason = call(kube.core.read_node, bad)["metadata"]["annotations"]["rollcall/unfit-reason"]
        assert reason == "x"  # the reason of the last unfit verdict stays beside its taint
        # found fit on every GPU: the taint is lifted, and the node is labelled fit
        nodes, marks = recheck({**healthy, "gpus": 1}, "whole")
        assert [n.whole for n in nodes if n.name == bad] == [True], nodes
        assert marks["untainted"] == [bad] and marks["kept"] == {}, marks
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


def test_a_marking_pass_clears_expired_verdicts_and_writes_its_times_as_integers(
    make_suite, ensure_nodes, kube, control_plane, request
):
    ensure_nodes(3)
    names = sorted(
        n["metadata"]["name"]
        for n in control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    )[:3]
    now = int(time.time())
    old_form = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now - 7200))
    # as the admin: an expired verdict in each form (one on a node rollcall tainted), and one still valid
    given = {
        names[0]: ("fit", str(now - 90000), str(now - 3600)),
        names[1]: ("unfit", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now - 90000)), old_form),
        names[2]: ("fit", str(now - 60), str(now + 86400)),
    }
    for name, (verdict, checked, until) in given.items():
        labels = [f"{VERDICT}={verdict}", f"{CHECKED}={checked}", f"{EXPIRES}={until}"]
        control_plane.kubectl("label", "nodes", name, *labels, "--overwrite")
    control_plane.kubectl("taint", "nodes", names[1], str(UNFIT), "--overwrite")
    try:
        # the ranks' facts name their node (the fake kubelet's start events), so the verdict is per node
        healthy = {**NARROW_LINK, "pcie_width": 16, "gpus": 1}
        suite, _ = make_suite(nodes=1, annotations={FACTS: json.dumps({"0": healthy})}, label_nodes=True)
        started = time.time()
        record = suite.run(request.node.nodeid, request.node.name)
        assert record.result.passed, record.result.last.verdict.message()
        nodes, marks = session_end(suite)
        (checked,) = {n.name for n in nodes if n.verdict != "unchecked"}
        assert marks["labelled"] == {checked: "fit"} and marks["failed"] == {}, marks
        # the node checked now: integer epoch seconds, as nodeAffinity's Gt and Lt compare them
        labels = call(kube.core.read_node, checked)["metadata"]["labels"]
        assert labels[VERDICT] == "fit"
        assert labels[CHECKED].isdigit() and labels[EXPIRES].isdigit(), labels
        assert started - 1 <= int(labels[CHECKED]) <= time.time()
        assert int(labels[EXPIRES]) > int(labels[CHECKED])
        # the expired verdicts are gone, in either form, but on the node labelled anew; the valid one stays
        expired = sorted(n for n in names[:2] if n != checked)
        cleared = set(marks["expired"])
        assert set(expired) <= cleared and not {checked, names[2]} & cleared, marks
        assert "cleared the expired verdict labels of node(s) " in marks["line"]
        for name in expired:
            held = call(kube.core.read_node, name)["metadata"]["labels"]
            assert not {VERDICT, CHECKED, EXPIRES} & set(held), (name, held)
        if names[2] != checked:
            held = call(kube.core.read_node, names[2])["metadata"]["labels"]
            assert (held[VERDICT], held[EXPIRES]) == ("fit", str(now + 86400))
        # an expiry never lifts a taint: only a fit verdict of the whole node does
        if names[1] != checked:
            assert UNFIT.manifest() in taints(kube, names[1])
    finally:
        for name in names:
            kept = [t for t in taints(kube, name) if t["key"] != UNFIT.key]
            body = {
                "metadata": {"labels": dict.fromkeys((VERDICT, CHECKED, EXPIRES))},
                "spec": {"taints": kept},
            }
            call(kube.core.patch_node, name, body, _content_type="application/merge-patch+json")


def test_rollcall_nodes_lists_rollcalls_marks_and_clear_removes_them_never_anothers(
    ensure_nodes, kube, control_plane
):
    """``rollcall nodes`` (the console command) lists a node holding rollcall's verdict, expiry, taint and
    annotation, and ``--clear`` removes them while the node's own taint and an operator's label stay."""
    ensure_nodes(1)
    name = sorted(
        n["metadata"]["name"]
        for n in control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    )[0]
    now = int(time.time())
    labels = [f"{VERDICT}=unfit", f"{CHECKED}={now - 60}", f"{EXPIRES}={now + 3600}", "team=ml"]
    control_plane.kubectl("label", "nodes", name, *labels, "--overwrite")
    control_plane.kubectl("taint", "nodes", name, str(UNFIT), "team=ml:NoSchedule", "--overwrite")
    control_plane.kubectl("annotate", "nodes", name, f"{REASON_ANNOTATION}=pcie_width 8 of 16", "--overwrite")
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}

    def rollcall(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "rollcall.cli", "nodes", "--backend", "kubernetes", "--json", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False)

    try:
        listed = rollcall()
        assert listed.returncode == 0, listed.stderr
        [node] = [n for n in json.loads(listed.stdout)["nodes"] if n["name"] == name]
        assert (node["verdict"], node["valid_until"], node["expired"]) == ("unfit", now + 3600, False), node
        assert (node["marks"], node["reason"]) == (["label", "taint"], "pcie_width 8 of 16"), node
        cleared = rollcall("--clear", "--node", name)
        assert cleared.returncode == 0, cleared.stderr
        assert json.loads(cleared.stdout)["cleared"] == [name], cleared.stdout
        held = call(kube.core.read_node, name)
        assert not {VERDICT, CHECKED, EXPIRES} & set(held["metadata"]["labels"]), held["metadata"]["labels"]
        assert held["metadata"]["labels"]["team"] == "ml"
        assert REASON_ANNOTATION not in (held["metadata"].get("annotations") or {})
        theirs = {"key": "team", "value": "ml", "effect": "NoSchedule"}
        assert UNFIT.manifest() not in taints(kube, name) and theirs in taints(kube, name), taints(kube, name)
        assert name not in [n["name"] for n in json.loads(rollcall().stdout)["nodes"]]
    finally:
        control_plane.kubectl("label", "nodes", name, "team-", f"{VERDICT}-", f"{CHECKED}-", f"{EXPIRES}-")
        kept = [t for t in taints(kube, name) if t["key"] != UNFIT.key]
        call(
            kube.core.patch_node,
            name,
            {"spec": {"taints": kept}},
            _content_type="application/merge-patch+json",
        )


def test_the_fit_affinity_render_prints_keeps_a_pod_off_a_node_whose_fit_verdict_expired(
    ensure_nodes, kube, control_plane, tmp_path
):
    """The scheduler itself compares ``rollcall render --fit-affinity``'s Gt term with the integer expiry: of
    two nodes labelled fit, the pod lands on the one whose verdict still holds."""
    ensure_nodes(2)
    fresh, stale = sorted(
        n["metadata"]["name"]
        for n in control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    )[:2]
    now = int(time.time())
    control_plane.kubectl("label", "nodes", fresh, f"{VERDICT}=fit", f"{EXPIRES}={now + 3600}", "--overwrite")
    control_plane.kubectl("label", "nodes", stale, f"{VERDICT}=fit", f"{EXPIRES}={now - 60}", "--overwrite")
    control_plane.kubectl("label", "nodes", fresh, stale, "rollcall-test/pick=fit-affinity", "--overwrite")
    printed = subprocess.run(
        [sys.executable, "-m", "rollcall.cli", "render", "--fit-affinity"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    term = yaml.safe_load(printed)
    # of the cluster's nodes (other tests label theirs fit), only these two: the term's own expressions decide
    [selected] = term["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    selected["matchExpressions"].append(
        {"key": "rollcall-test/pick", "operator": "In", "values": ["fit-affinity"]}
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fit-affinity", "namespace": "default"},
        "spec": {
            **term,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:
        wait_until(
            lambda: f"the pod scheduled: {control_plane.get('pod', '-n', 'default', 'fit-affinity')['spec']}",
            lambda: control_plane.get("pod", "-n", "default", "fit-affinity")["spec"].get("nodeName"),
            timeout=60,
            every=0.5,
        )
        assert control_plane.get("pod", "-n", "default", "fit-affinity")["spec"]["nodeName"] == fresh
    finally:
        control_plane.kubectl("delete", "pod", "-n", "default", "fit-affinity", "--wait=false")
        control_plane.kubectl(
            "label", "nodes", fresh, stale, f"{VERDICT}-", f"{EXPIRES}-", "rollcall-test/pick-"
        )
