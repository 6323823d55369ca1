"""The compute_stragglers check: no GPU whose compute time per step exceeds the median's by more than 1/ratio."""

from rollcall.checks.compute_stragglers import COMPUTE_STRAGGLER, compute_stragglers
from rollcall.checks.runview import RunView
from rollcall.gate import GateReport
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.test_perf import attempt_with, perf_log


def test_the_gate_fails_a_compute_straggler_by_name_node_and_pod():
    attempt = attempt_with(compute={3: 31.5})
    report = GateReport.of("t::a", attempt)
    assert not attempt.passed and not report.sound
    assert attempt.verdict.failed_ranks == {3: ["compute straggler: 3.15 x the median compute time"]}
    assert attempt.verdict.problems == [
        "1 compute straggler(s) above 1.25 x the median compute time of 10.00 ms per step "
        "(--straggler-ratio 0.8): rank 3 (node 1, pod job-1) at 31.50 ms per step, 3.15 x the median"
    ]
    assert report.as_dict()["compute_stragglers"] == 1
    assert GateReport.of("t::a", attempt_with(compute={3: 31.5}, criteria={"straggler_ratio": 0})).sound


def test_a_compute_straggler_names_the_machine_its_start_event_gave():
    attempt = attempt_with(compute={3: 31.5}, machines={0: "ip-10-0-1-5", 1: "ip-10-0-7-12"})
    GateReport.of("t::a", attempt)
    assert attempt.verdict.problems[0].endswith(
        "rank 3 (node 1 on ip-10-0-7-12, pod job-1) at 31.50 ms per step, 3.15 x the median"
    )
    summary = attempt.verdict.perf_report.summary()
    assert summary[0].startswith("slowest rank: 3 (node 1 on ip-10-0-7-12, pod job-1), 31.50 ms")
    assert [c.machine for c in attempt.verdict.perf.compute] == ["ip-10-0-1-5"] * 2 + ["ip-10-0-7-12"] * 2


def perf_roll(**kw):
    roll = RollCall()
    for node in range(2):
        parser = roll.parser(f"job-{node}")
        parser.feed(perf_log(node, 2, 2, **kw).encode())
        parser.close()
    return roll


def test_the_predicate_names_the_slow_gpus_rank_and_nothing_of_even_compute_times():
    slow = Observed(perf_roll(compute={3: 31.5}), Layout(2, 2))
    [problem] = list(compute_stragglers(RunView(slow, Criteria(straggler_ratio=0.8))))
    assert problem.kind is COMPUTE_STRAGGLER
    assert problem.ranks == {3: "compute straggler: 3.15 x the median compute time"}
    assert problem.message.endswith("rank 3 (node 1, pod job-1) at 31.50 ms per step, 3.15 x the median")
    assert list(compute_stragglers(RunView(slow, Criteria(straggler_ratio=0)))) == []  # off
    even = Observed(perf_roll(), Layout(2, 2))
    assert list(compute_stragglers(RunView(even, Criteria(straggler_ratio=0.8)))) == []
