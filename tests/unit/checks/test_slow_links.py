"""The slow_links check: no group under --min-busbw, no node (pair) under --busbw-ratio of the median."""

from rollcall.checks.runview import RunView
from rollcall.checks.slow_links import SLOW_LINK, slow_links
from rollcall.gate import GateReport
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.test_perf import attempt_with, perf_log


def test_the_gate_fails_a_slow_node_by_name():
    attempt = attempt_with(node_busbw={1: 0.05})
    GateReport.of("t::a", attempt)
    assert not attempt.passed
    assert attempt.verdict.problems == [
        "slow link: node 1 (pod(s) job-1): bus bandwidth 0.05 GB/s, 0.10 x the median node's 0.525 GB/s "
        "(--busbw-ratio 0.5)"
    ]
    assert sorted(attempt.verdict.failed_ranks) == [2, 3]
    assert GateReport.of("t::a", attempt_with(node_busbw={1: 0.05}, criteria={"busbw_ratio": 0})).sound
    below = attempt_with(world_busbw=0.3, criteria={"min_busbw": 0.5})
    GateReport.of("t::a", below)
    # the nodes (1 GB/s) are above it; the world is below, and names no rank
    assert below.verdict.problems == ["slow link: world: bus bandwidth 0.3 GB/s, below --min-busbw 0.5 GB/s"]
    assert below.verdict.failed_ranks == {}


def perf_roll(**kw):
    roll = RollCall()
    for node in range(2):
        parser = roll.parser(f"job-{node}")
        parser.feed(perf_log(node, 2, 2, **kw).encode())
        parser.close()
    return roll


def test_the_predicate_names_the_slow_nodes_ranks_and_the_slow_world_none_and_nothing_of_fast_links():
    slow = Observed(perf_roll(node_busbw={1: 0.05}), Layout(2, 2))
    [problem] = list(slow_links(RunView(slow, Criteria(busbw_ratio=0.5))))
    assert problem.kind is SLOW_LINK and set(problem.ranks) == {2, 3}
    assert problem.message.startswith("slow link: node 1 (pod(s) job-1): bus bandwidth 0.05 GB/s")
    [world] = list(slow_links(RunView(Observed(perf_roll(), Layout(2, 2)), Criteria(min_busbw=0.5))))
    assert (
        world.ranks == {}
        and world.message == "slow link: world: bus bandwidth 0.3 GB/s, below --min-busbw 0.5 GB/s"
    )
    fast = Observed(perf_roll(), Layout(2, 2))
    assert list(slow_links(RunView(fast, Criteria(busbw_ratio=0.5, min_busbw=0.1)))) == []
