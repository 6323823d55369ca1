"""The collective_mismatch check: every all-reduce of the bandwidth phase returned the exact sum to every rank."""

from rollcall.checks.collective_mismatch import COLLECTIVE_MISMATCH, collective_mismatch
from rollcall.checks.runview import RunView
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed, RankState
from tests.unit.helpers import event
from tests.unit.test_proofs import run_log, verdict


def test_wrong_all_reduce_data_names_the_group_the_rank_what_and_the_node():
    wrong = {"iters": 10, "elements": 1024, "index": 1365, "expected": 14.0, "got": 0.0}
    v = verdict(run_log(mismatch={2: wrong}))
    assert [p.kind for p in v.findings] == [COLLECTIVE_MISMATCH] * 2
    assert v.problems == [
        "collective mismatch: world all-reduce (ranks 0-3, nodes 0-1): rank 2 (node 1) received 1024 of 1024 "
        "elements wrong in 10 timed all-reduce(s), first at index 1365 (expected 14, got 0)",
        "collective mismatch: every rank that received wrong data (2) is on node 1: its device or its link",
    ]
    assert v.failed_ranks == {2: ["wrong data from the world all-reduce (ranks 0-3, nodes 0-1)"]}
    assert v.ranks[2].state is RankState.WRONG


def test_wrong_data_on_two_nodes_names_no_single_node():
    wrong = {"iters": 1, "elements": 1, "index": 0, "expected": 4.0, "got": 5.0}
    v = verdict(run_log(mismatch={0: wrong, 3: wrong}))
    assert len(v.findings) == 1 and sorted(v.findings[0].ranks) == [0, 3]
    assert (
        "rank 0 (node 0) received 1 of 1024" in v.problems[0]
        and "; rank 3 (node 1) received" in v.problems[0]
    )


def test_wrong_data_on_every_rank_of_the_groups_crossing_one_link_names_that_link():
    wrong = {"iters": 10, "elements": 512, "index": 0, "expected": 10.0, "got": 12.0}
    lines = []
    for r in range(4):
        node = r // 2
        lines.append(event("start", r, 4, local_rank=r % 2, node_rank=node))
        for scope, ranks, nodes, bad in (
            ("world", "0-3", "0-1", wrong),
            ("node", f"{2 * node}-{2 * node + 1}", str(node), None),
        ):
            lines.append(
                event(
                    "bandwidth",
                    r,
                    4,
                    scope=scope,
                    ranks=ranks,
                    nodes=nodes,
                    bytes=4096,
                    algbw_gbps=1.0,
                    busbw_gbps=1.5,
                    checked=10,
                    mismatch=bad,
                )
            )
    roll = RollCall()
    roll.parser("p").feed(("\n".join(lines) + "\n").encode())
    found = [p for p in verdict(roll).findings if p.kind is COLLECTIVE_MISMATCH]
    assert sorted(found[0].ranks) == [0, 1, 2, 3]
    assert found[-1].message == (
        "collective mismatch: every group that received wrong data crosses the link between nodes 0 and 1, "
        "and no group that was right does"
    )
    assert found[-1].detail == (0, 1) and len(found) == 2


def test_the_predicate_names_the_rank_that_received_wrong_data_and_nothing_of_exact_sums():
    wrong = {"iters": 10, "elements": 1024, "index": 1365, "expected": 14.0, "got": 0.0}
    found = list(
        collective_mismatch(RunView(Observed(run_log(mismatch={2: wrong}), Layout(2, 2)), Criteria()))
    )
    assert [p.kind for p in found] == [COLLECTIVE_MISMATCH] * 2
    assert (
        set(found[0].ranks) == {2}
        and "rank 2 (node 1) received 1024 of 1024 elements wrong" in found[0].message
    )
    assert found[1].message.endswith("is on node 1: its device or its link") and found[1].detail == 1
    assert list(collective_mismatch(RunView(Observed(run_log(), Layout(2, 2)), Criteria()))) == []
