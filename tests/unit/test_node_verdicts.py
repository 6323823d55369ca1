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

from rollcall import nodeverdicts as nv
from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.jobspec import JobSpec
from rollcall.runner import RunResult
from tests.unit.helpers import event, judged, node_log, roll_of
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


def test_a_gpu_lost_that_no_rank_used_makes_its_gpu_and_node_unfit_and_the_other_node_stays_fit(tmp_path):
    nodes = by_name(nv.of_records([record_of(tmp_path)], DAY))
    n1 = nodes["n1"]
    assert (n1.verdict, n1.owner) == ("unfit", "cluster")
    lost = next(g for g in n1.gpus if g.index == 5)
    assert (lost.verdict, lost.rank, lost.uuid, lost.serial) == ("unfit", None, "GPU-5bbb", "165005")
    assert len(lost.reasons) == 1 and "GPU lost" in lost.reasons[0]
    used = next(g for g in n1.gpus if g.index == 1)
    assert (used.verdict, used.rank) == ("fit", 1)  # an Xid of the program class is no fault of the GPU
    assert nodes["n0"].verdict == "fit" and nodes["n0"].reasons == ()
    assert n1.ran == (nv.Ran(test="t.py::test_x", backend="local", ranks=(1,), passed=False),)


def test_a_passing_run_finds_every_node_fit_until_its_ttl(tmp_path):
    attempt = replace(judged(two_by_two(), JobSpec("job", 2, 2)), judged_at=1_800_000_000.0)
    nodes = nv.of_records([record(attempt)], 3600.0)
    assert [(n.name, n.verdict) for n in nodes] == [("n0", "fit"), ("n1", "fit")]
    assert (nodes[0].checked_at, nodes[0].valid_until) == ("2027-01-15T08:00:00Z", "2027-01-15T09:00:00Z")
    assert nodes[1].ran[0].ranks == (2, 3)


def test_a_failed_rank_leaves_its_node_undetermined_never_unfit(tmp_path):
    roll = roll_of(logged(0), logged(1, skip={3: ("complete",)}))
    attempt = judged(roll, JobSpec("job", 2, 2), JobStatus(JobState.FAILED, "rank 3 exited 1"))
    nodes = by_name(nv.of_records([record(attempt)], DAY))
    assert nodes["n1"].verdict == "undetermined" and nodes["n1"].reasons[0].startswith("rank 3: ")
    assert nodes["n1"].owner is not None
    assert nodes["n0"].verdict == "fit"


def test_simulated_nodes_of_one_host_are_told_apart_by_their_index():
    roll = roll_of(
        logged(0).replace('"host":"n0"', '"host":"vm"'), logged(1).replace('"host":"n1"', '"host":"vm"')
    )
    attempt = judged(roll, JobSpec("job", 2, 2))
    assert [n.name for n in nv.of_records([record(attempt, backend="local")], DAY)] == [
        "vm node 0",
        "vm node 1",
    ]


def test_a_node_given_that_no_rank_reported_from_is_unchecked():
    status = JobStatus(JobState.SUCCEEDED, node_info={"n0": {}, "n1": {}, "spare": {"zone": "us-west-2a"}})
    attempt = judged(two_by_two(), JobSpec("job", 2, 2), status)
    nodes = by_name(nv.of_records([record(attempt)], DAY))
    assert nodes["spare"].verdict == "unchecked" and nodes["spare"].valid_until is None


def test_a_node_checked_by_two_tests_takes_the_worst_verdict_and_the_latest_time(tmp_path):
    fit = nv.NodeVerdict(name="a", verdict="fit", checked_at="2026-12-06T02:00:00Z", valid_until="x2")
    unfit = nv.NodeVerdict(name="a", verdict="unfit", reasons=("ecc",), checked_at="2026-12-06T01:00:00Z")
    (node,) = nv.merged([unfit, fit])
    assert (node.verdict, node.reasons, node.checked_at, node.valid_until) == (
        "unfit",
        ("ecc",),
        "2026-12-06T02:00:00Z",
        "x2",
    )


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
    nv.write(tmp_path / "nodes.gw0.json", [record_of(tmp_path)], DAY)
    attempt = judged(two_by_two(), JobSpec("job", 2, 2))
    nv.write(tmp_path / "nodes.gw1.json", [record(attempt, "t.py::test_y")], DAY)
    nv.merge_worker_files(tmp_path, since=time.time() - 60)
    doc = json.loads((tmp_path / nv.NODES_FILE).read_text())
    assert (doc["schema"], doc["verdict_ttl_s"]) == (nv.SCHEMA, DAY)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["n1"]["verdict"] == "unfit" and len(nodes["n1"]["ran"]) == 2
    assert nodes["n0"]["verdict"] == "fit"


def test_docs_nodes_md_is_what_the_records_generate():
    assert (ROOT / "docs" / "nodes.md").read_text() == nv.markdown(), (
        "regenerate: python -m rollcall.nodeverdicts --markdown > docs/nodes.md"
    )
    assert os.path.exists(ROOT / "docs" / "nodes.md")
