"""The stragglers check: no rank training slower than --straggler-ratio times the median rank."""

from rollcall.checks.runview import RunView
from rollcall.checks.stragglers import STRAGGLER, find_stragglers, stragglers
from rollcall.gate import GateReport
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import node_log, roll_of
from tests.unit.test_baseline import attempt_of


def test_a_rank_below_the_ratio_of_the_median_is_a_straggler():
    per_rank = {r: {"throughput": 50.0, "node": r // 4} for r in range(8)}
    per_rank[6]["throughput"] = 39.0
    found = find_stragglers(per_rank, 0.8)
    assert [(s.rank, s.node) for s in found] == [(6, 1)]
    assert str(found[0]) == "rank 6 (node 1) at 39.00 samples/s, 0.78 of the median"
    assert find_stragglers(per_rank, 0.75) == []
    assert find_stragglers(per_rank, 0) == []  # off
    assert find_stragglers({0: {"throughput": 1.0, "node": 0}}, 0.8) == []


def test_a_straggler_fails_the_verdict_naming_rank_and_node():
    attempt = attempt_of(tp={2: 20.0})
    report = GateReport.of("t::a", attempt)
    assert not attempt.passed and not report.sound
    assert attempt.verdict.failed_ranks == {2: ["straggler: 0.40 of the median throughput"]}
    assert attempt.verdict.problems == [
        "1 straggler(s) below 0.8 x the median throughput of 50.00 samples/s (--straggler-ratio): "
        "rank 2 (node 1) at 20.00 samples/s, 0.40 of the median"
    ]
    assert GateReport.of("t::a", attempt_of(tp={2: 20.0}, straggler_ratio=0)).stragglers == []


def test_the_predicate_names_the_rank_below_the_ratio_of_the_median_and_nothing_of_a_even_run():
    slow = Observed(roll_of(node_log(0, 2, 2, tp={2: 20.0}), node_log(1, 2, 2, tp={2: 20.0})), Layout(2, 2))
    [problem] = list(stragglers(RunView(slow, Criteria(straggler_ratio=0.8))))
    assert problem.kind is STRAGGLER and problem.ranks == {2: "straggler: 0.40 of the median throughput"}
    assert problem.message == (
        "1 straggler(s) below 0.8 x the median throughput of 50.00 samples/s (--straggler-ratio): "
        "rank 2 (node 1) at 20.00 samples/s, 0.40 of the median"
    )
    assert list(stragglers(RunView(slow, Criteria(straggler_ratio=0)))) == []  # off
    even = Observed(roll_of(node_log(0, 2, 2), node_log(1, 2, 2)), Layout(2, 2))
    assert list(stragglers(RunView(even, Criteria(straggler_ratio=0.8)))) == []
