"""nodes.json: a verdict per node (fit, unfit, undetermined, unchecked), each GPU's own, how long it holds.

The GPU events are written into the nodes' logs as their monitors write them (no GPU here: a lost GPU and an
Xid are faults nothing on this machine can produce), and the whole roll call is judged, as in
tests/unit/test_gpu_event_reports.py.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rollcall import nodeverdicts as nv
from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.jobspec import JobSpec
from rollcall.runner import Attempt, RunResult
from tests.unit.checks.test_gpu_events import gpu_line
from tests.unit.checks.test_gpu_events import roll_of as events_roll
from tests.unit.helpers import event, judged, node_log, roll_of
from tests.unit.test_fitness import facts_of, fake_nvml, roll_with, verdict_of
from tests.unit.test_gpu_event_reports import record_of

ROOT = Path(__file__).resolve().parents[2]
DAY = 86400.0


def logged(node, nodes=2, ppn=2, **kw):
    """A node's log, each rank saying its facts too (the workload does at its start)."""
    world = nodes * ppn
    facts = [
        f"[{r}]:" + event("facts", r, world, host=f"n{node}") for r in range(node * ppn, (node + 1) * ppn)
    ]
    return node_log(node, nodes, ppn, **kw) + "\n".join(facts) + "\n"


def two_by_two():
    return roll_of(logged(0), logged(1))


def by_name(nodes):
    return {n.name: n for n in nodes}


def record(attempt, test="t.py::test_x", backend="kubernetes"):
    return reports.TestRecord(test, RunResult(backend, [attempt]), "cpu")


def nodes_of(records, ttl=DAY, max_unfit=None):
    """The session's nodes by name, the breaker not tripped."""
    nodes, breaker = nv.of_records(records, ttl, max_unfit)
    assert not breaker.tripped, breaker
    return by_name(nodes)


def gpu_record(tmp_path, verdict, test="t.py::test_x"):
    """A test of two GPU nodes whose deciding attempt ``verdict`` judged."""
    attempt = Attempt(
        JobSpec("job", 2, 1, accelerator="nvidia"), JobStatus(JobState.SUCCEEDED), verdict, tmp_path, 1.0
    )
    return reports.TestRecord(test, RunResult("local", [attempt]), "nvidia")


def narrow(*bad_nodes):
    """Two nodes of one H200 rank each; ``bad_nodes``' GPU counts 2 uncorrected ECC errors (rule ecc_volatile)."""
    return roll_with(
        {n: facts_of(fake_nvml(ecc_volatile=2) if n in bad_nodes else fake_nvml()) for n in (0, 1)}
    )


def test_a_gpu_lost_that_no_rank_used_makes_its_gpu_and_node_unfit_and_the_other_node_stays_fit(tmp_path):
    nodes = nodes_of([record_of(tmp_path)])
    n1 = nodes["n1"]
    assert (n1.verdict, n1.owner) == ("unfit", "cluster")
    assert len(n1.reasons) == 1 and "GPU lost" in n1.reasons[0]
    lost = next(g for g in n1.gpus if g.index == 5)
    assert (lost.verdict, lost.rank, lost.uuid, lost.serial) == ("unfit", None, "GPU-5bbb", "165005")
    assert len(lost.reasons) == 1 and "GPU lost" in lost.reasons[0]
    used = next(g for g in n1.gpus if g.index == 1)
    assert (used.verdict, used.rank) == ("fit", 1)  # an Xid of the program class is no fault of the GPU
    assert used.reasons == () and len(used.events) == 1 and used.events[0].startswith("Xid 31 ")
    # n0's one GPU was checked, its node's count unread: fit, not whole
    assert (nodes["n0"].verdict, nodes["n0"].whole) == ("fit", False)
    assert nodes["n0"].reasons == ("not re-checked whole: 1 GPU(s) checked, the node's count unread",)
    assert n1.ran == (nv.Ran(test="t.py::test_x", backend="local", ranks=(1,), passed=False),)


def test_a_passing_run_finds_every_node_fit_until_its_ttl(tmp_path):
    attempt = replace(judged(two_by_two(), JobSpec("job", 2, 2)), judged_at=1_800_000_000.0)
    nodes, breaker = nv.of_records([record(attempt)], 3600.0)
    assert [(n.name, n.verdict, n.whole, n.reasons) for n in nodes] == [
        ("n0", "fit", True, ()),
        ("n1", "fit", True, ()),
    ]
    assert (nodes[0].checked_at, nodes[0].valid_until) == (1_800_000_000.0, 1_800_003_600.0)
    assert nodes[1].ran[0].ranks == (2, 3)
    assert breaker == nv.Breaker(bound=1, unfit=(), tripped=False)


def test_a_failed_rank_leaves_its_node_undetermined_never_unfit(tmp_path):
    roll = roll_of(logged(0), logged(1, skip={3: ("complete",)}))
    attempt = judged(roll, JobSpec("job", 2, 2), JobStatus(JobState.FAILED, "rank 3 exited 1"))
    nodes = nodes_of([record(attempt)])
    assert nodes["n1"].verdict == "undetermined" and nodes["n1"].reasons[0].startswith("rank 3: ")
    assert nodes["n1"].owner is not None
    assert nodes["n0"].verdict == "fit"


def test_simulated_nodes_of_one_host_are_told_apart_by_their_index():
    roll = roll_of(
        logged(0).replace('"host":"n0"', '"host":"vm"'), logged(1).replace('"host":"n1"', '"host":"vm"')
    )
    attempt = judged(roll, JobSpec("job", 2, 2))
    assert [n.name for n in nv.of_records([record(attempt, backend="local")], DAY)[0]] == [
        "vm node 0",
        "vm node 1",
    ]


def test_a_node_given_that_no_rank_reported_from_is_unchecked():
    status = JobStatus(JobState.SUCCEEDED, node_info={"n0": {}, "n1": {}, "spare": {"zone": "us-west-2a"}})
    attempt = judged(two_by_two(), JobSpec("job", 2, 2), status)
    nodes = nodes_of([record(attempt)])
    assert nodes["spare"].verdict == "unchecked" and nodes["spare"].valid_until is None
    assert nodes["spare"].whole is False


def test_a_node_checked_by_two_tests_takes_the_worst_verdict_and_the_latest_time(tmp_path):
    fit = nv.NodeVerdict(name="a", verdict="fit", checked_at=2000.0, valid_until=2060.0)
    unfit = nv.NodeVerdict(name="a", verdict="unfit", reasons=("ecc",), checked_at=1000.0)
    (node,) = nv.merged([unfit, fit])
    assert (node.verdict, node.reasons, node.checked_at, node.valid_until) == (
        "unfit",
        ("ecc",),
        2000.0,
        2060.0,
    )


def test_a_fit_node_checked_whole_by_any_of_its_tests_is_whole():
    part = nv.NodeVerdict(name="a", verdict="fit", reasons=("not re-checked whole: 1 of 8 GPUs checked",),
                          whole=False, checked_at=1000.0)  # fmt: skip
    whole = nv.NodeVerdict(name="a", verdict="fit", checked_at=900.0)
    (node,) = nv.merged([part, whole])
    assert (node.verdict, node.whole, node.reasons, node.checked_at) == ("fit", True, (), 1000.0)
    (only_part,) = nv.merged([part, replace(part, checked_at=1100.0)])
    assert (only_part.whole, only_part.reasons) == (False, part.reasons)


def test_where_a_kubernetes_node_is_comes_from_its_labels_and_provider_id():
    from rollcall.backends.kubernetes.nodeviews import Node

    node = Node(
        {
            "metadata": {
                "name": "ip-10-0-0-1",
                "labels": {
                    "node.kubernetes.io/instance-type": "p5.48xlarge",
                    "topology.kubernetes.io/zone": "us-east-2b",
                    "karpenter.k8s.aws/capacity-reservation-id": "cr-0123",
                },
            },
            "spec": {"providerID": "aws:///us-east-2b/i-0abc123"},
            "status": {},
        }
    )
    assert {k: node.facts[k] for k in nv.WHERE_KEYS} == {
        "instance_type": "p5.48xlarge",
        "zone": "us-east-2b",
        "instance_id": "i-0abc123",
        "capacity_reservation": "cr-0123",
    }


def test_nodes_json_is_written_whole_and_xdist_workers_files_merge(tmp_path):
    nodes, breaker = nv.of_records([record_of(tmp_path)], DAY)
    nv.write_nodes(tmp_path / "nodes.gw0.json", nodes, DAY, breaker)
    attempt = judged(two_by_two(), JobSpec("job", 2, 2))
    nodes, breaker = nv.of_records([record(attempt, "t.py::test_y")], DAY)
    nv.write_nodes(tmp_path / "nodes.gw1.json", nodes, DAY, breaker, {"marked": []})
    doc = json.loads((tmp_path / "nodes.gw1.json").read_text())
    assert (doc["schema_version"], doc["verdict_ttl_s"], doc["marks"]) == (2, DAY, {"marked": []})
    assert "schema" not in doc and isinstance(doc["written_at"], float)
    assert doc["breaker"] == {"bound": 1, "unfit": [], "tripped": False, "common": None}
    assert isinstance(doc["nodes"][0]["checked_at"], float) and doc["nodes"][0]["whole"] is True
    assert nv.read_nodes(tmp_path / "nodes.gw1.json") == (nodes, DAY)
    found = nv.merge_worker_files(tmp_path, since=time.time() - 60)
    assert not (tmp_path / nv.NODES_FILE).exists()  # the controller writes it (Suite.conclude_workers)
    assert found is not None
    merged_nodes, merged_breaker, ttl = found
    assert ttl == DAY and merged_breaker == nv.Breaker(bound=1, unfit=("n1",), tripped=False)
    nodes = by_name(merged_nodes)
    assert nodes["n1"].verdict == "unfit" and len(nodes["n1"].ran) == 2
    assert nodes["n0"].verdict == "fit" and nodes["n0"].whole  # test_y checked n0 whole
    lost = next(g for g in nodes["n1"].gpus if g.index == 5)
    assert lost.verdict == "unfit"
    assert nv.merge_worker_files(tmp_path, since=time.time() + 60) is None


def test_a_nodes_json_of_another_schema_is_refused(tmp_path):
    (tmp_path / "nodes.json").write_text(json.dumps({"schema": 1, "verdict_ttl_s": DAY, "nodes": []}))
    try:
        nv.read_nodes(tmp_path / "nodes.json")
    except ValueError as e:
        assert "schema_version" in str(e)
    else:
        raise AssertionError("schema 1 read")


# ---------------------------------------------------------------- what an event takes out


def test_a_reset_gpu_xid_on_a_gpu_no_rank_used_passes_leaves_the_node_fit_and_that_gpu_unfit(tmp_path):
    """Xid 95 (RESET_GPU) on GPU 5 of n1, which no rank used: the run passes, GPU 5 alone is out."""
    xid = gpu_line(xid=95, gpu=5, uuid="GPU-5bbb", data=95, event_type=8)
    verdict = verdict_of(events_roll([xid]))
    assert verdict.passed and verdict.unfit_nodes == []
    nodes = by_name(
        nv.of_verdict(verdict, test="t", backend="local", passed=True, checked_at=1000.0, ttl_s=DAY)
    )
    n1 = nodes["n1"]
    assert (n1.verdict, n1.owner, n1.whole) == ("fit", None, False)
    assert n1.reasons == ("not re-checked whole: 1 GPU(s) checked, the node's count unread",)
    assert n1.action == "reset the GPU (NVIDIA: RESET_GPU)"  # its unfit GPU's, the node itself fit
    gpu5 = next(g for g in n1.gpus if g.index == 5)
    assert (gpu5.verdict, gpu5.rank, gpu5.uuid) == ("unfit", None, "GPU-5bbb")
    assert len(gpu5.reasons) == 1 and "Xid 95" in gpu5.reasons[0]
    assert gpu5.action == "reset the GPU (NVIDIA: RESET_GPU)"
    assert next(g for g in n1.gpus if g.index == 1).verdict == "fit"
    assert nodes["n0"].verdict == "fit"


def test_a_node_scoped_xid_on_a_gpu_no_rank_used_passes_and_makes_its_node_unfit(tmp_path):
    xid = gpu_line(xid=79, gpu=5, uuid="GPU-5bbb", data=79, event_type=8)
    verdict = verdict_of(events_roll([xid]))
    assert verdict.passed and verdict.unfit_nodes == ["n1"]
    nodes = nodes_of([gpu_record(tmp_path, verdict)])
    assert (nodes["n1"].verdict, nodes["n1"].owner) == ("unfit", "cluster")
    assert nodes["n1"].action == "reboot the node (NVIDIA: RESTART_BM)"
    assert nodes["n0"].verdict == "fit"


@pytest.mark.parametrize("xid", [92, 94])
def test_an_xid_that_takes_nothing_out_stays_on_its_gpus_line_as_a_fact(xid):
    verdict = verdict_of(events_roll([gpu_line(xid=xid, data=xid, event_type=8)]))
    nodes = by_name(nv.of_verdict(verdict, test="t", backend="local", passed=True, checked_at=1.0, ttl_s=DAY))
    assert nodes["n1"].verdict == "fit"
    gpu1 = next(g for g in nodes["n1"].gpus if g.index == 1)
    assert (gpu1.verdict, gpu1.reasons) == ("fit", ())
    assert len(gpu1.events) == 1 and gpu1.events[0].startswith(f"Xid {xid} ")


def test_a_rule_warned_by_the_fitness_options_takes_nothing_out(tmp_path):
    warned = verdict_of(narrow(1), fitness=FitnessPolicy(warn=frozenset({"ecc_volatile"})))
    assert warned.passed and warned.unfit_nodes == []
    assert [u.out for u in warned.unfit] == [None]
    nodes = nodes_of([gpu_record(tmp_path, warned)])
    assert nodes["n1"].verdict == "fit"
    assert (
        nodes["n1"].gpus[0].verdict == "fit" and "ecc_volatile_uncorrected=2" in nodes["n1"].gpus[0].events[0]
    )
    failed = verdict_of(narrow(1))
    assert nodes_of([gpu_record(tmp_path, failed)])["n1"].verdict == "unfit"


def test_a_fit_node_of_8_gpus_that_one_rank_checked_is_not_whole(tmp_path):
    verdict = verdict_of(narrow())
    assert verdict.passed and verdict.nodes_detail[0].facts["gpus"] in (8, "8")
    nodes = nodes_of([gpu_record(tmp_path, verdict)])
    for name in ("n0", "n1"):
        assert (nodes[name].verdict, nodes[name].whole) == ("fit", False)
        assert nodes[name].reasons == ("not re-checked whole: 1 of 8 GPUs checked",)


# ---------------------------------------------------------------- the breaker


def test_the_breaker_trips_on_2_unfit_of_2_nodes_by_default_and_marks_none(tmp_path):
    both = gpu_record(tmp_path, verdict_of(narrow(0, 1)))
    nodes, breaker = nv.of_records([both], DAY)
    assert breaker.tripped and breaker.bound == 1 and breaker.unfit == ("n0", "n1")
    assert breaker.common == "rule ecc_volatile, on 2 of the 2"
    assert "more than --max-unfit 1" in breaker.line() and "rule ecc_volatile" in breaker.line()
    for n in nodes:
        assert (n.verdict, n.owner) == ("undetermined", "undetermined")
        assert n.reasons[0].startswith("breaker: 2 of 2 nodes found unfit, more than --max-unfit 1")
        assert any("ecc_volatile_uncorrected=2" in r for r in n.reasons[1:])
    assert not nv.write_unfit_nodes(tmp_path / "unfit-nodes.txt", nodes)
    held, breaker = nv.of_records([both], DAY, max_unfit=2)
    assert not breaker.tripped and breaker.bound == 2
    assert [(n.verdict, n.owner) for n in held] == [("unfit", "cluster")] * 2
    assert nv.write_unfit_nodes(tmp_path / "unfit-nodes.txt", held)
    assert (tmp_path / "unfit-nodes.txt").read_text() == "n0\nn1\n"


def test_the_breakers_bound_is_10_percent_of_the_nodes_checked_at_least_1_or_max_unfit():
    assert [nv.bound_of(None, n) for n in (0, 1, 2, 10, 11, 200)] == [1, 1, 1, 1, 2, 20]
    assert nv.bound_of(0, 50) == 0 and nv.bound_of(3, 2) == 3
    one = [nv.NodeVerdict(name="a", verdict="unfit", reasons=("x (rule ecc_volatile)",)),
           nv.NodeVerdict(name="b", verdict="fit"), nv.NodeVerdict(name="c", verdict="unchecked")]  # fmt: skip
    kept, breaker = nv.with_breaker(one, None)
    assert kept == one and breaker == nv.Breaker(bound=1, unfit=("a",), tripped=False)
    none, breaker = nv.with_breaker(one, 0)
    assert breaker.tripped and none[0].verdict == "undetermined" and none[1:] == one[1:]


def test_merging_workers_files_applies_the_breaker_over_the_whole_session(tmp_path):
    """Each worker saw 1 unfit node of 2 (not tripped); the session has 2 of 2: tripped."""
    for worker, bad in (("gw0", 1), ("gw1", 0)):
        nodes, breaker = nv.of_records(
            [gpu_record(tmp_path, verdict_of(narrow(bad)), f"t.py::{worker}")], DAY
        )
        assert not breaker.tripped
        nv.write_nodes(tmp_path / f"nodes.{worker}.json", nodes, DAY, breaker)
    found = nv.merge_worker_files(tmp_path, time.time() - 60)
    assert found is not None
    nodes, breaker, ttl = found
    assert breaker.tripped and breaker.unfit == ("n0", "n1") and ttl == DAY
    assert [n.verdict for n in nodes] == ["undetermined", "undetermined"]
    nodes, breaker, _ = nv.merge_worker_files(tmp_path, time.time() - 60, max_unfit=2)
    assert not breaker.tripped and [(n.verdict, n.owner) for n in nodes] == [("unfit", "cluster")] * 2


def test_a_workers_tripped_breaker_is_judged_again_over_the_session(tmp_path):
    nodes, breaker = nv.of_records([gpu_record(tmp_path, verdict_of(narrow(0, 1)))], DAY)
    assert breaker.tripped
    nv.write_nodes(tmp_path / "nodes.gw0.json", nodes, DAY, breaker)
    merged, breaker, _ = nv.merge_worker_files(tmp_path, time.time() - 60, max_unfit=2)
    assert not breaker.tripped
    assert [(n.verdict, n.owner) for n in merged] == [("unfit", "cluster")] * 2
    assert not any(r.startswith("breaker: ") for n in merged for r in n.reasons)


def test_docs_nodes_md_is_what_the_records_generate():
    assert (ROOT / "docs" / "nodes.md").read_text() == nv.markdown(), (
        "regenerate: python -m rollcall.nodeverdicts --markdown > docs/nodes.md"
    )
    assert os.path.exists(ROOT / "docs" / "nodes.md")


def test_the_marks_follow_the_sessions_verdicts_the_breakers_over_them(tmp_path):
    from rollcall.backends import NodeMark
    from rollcall.suite import node_marks

    one = gpu_record(tmp_path, verdict_of(narrow(1)))
    nodes, _ = nv.of_records([one], DAY, max_unfit=1)
    n0, n1 = node_marks(nodes)
    assert (n1.name, n1.verdict, n1.whole) == (
        "n1",
        "unfit",
        False,
    ) and "ecc_volatile_uncorrected=2" in n1.reason
    assert n1 == NodeMark("n1", "unfit", "; ".join(nodes[1].reasons), nodes[1].checked_at,
                          nodes[1].valid_until, False)  # fmt: skip
    assert (n0.verdict, n0.reason) == ("fit", "not re-checked whole: 1 of 8 GPUs checked")
    tripped, breaker = nv.of_records([gpu_record(tmp_path, verdict_of(narrow(0, 1)))], DAY)
    assert breaker.tripped
    assert [(m.verdict, m.reason.startswith("breaker: ")) for m in node_marks(tripped)] == [
        ("undetermined", True)
    ] * 2
