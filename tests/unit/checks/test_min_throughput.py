"""The min_throughput check: with --min-throughput set, every measured rank reaches it."""

from rollcall.checks.min_throughput import MIN_THROUGHPUT, min_throughput
from rollcall.checks.runview import RunView
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import node_log, roll_of


def test_the_predicate_names_the_ranks_below_the_floor_and_nothing_above_it_or_without_one():
    slow = Observed(roll_of(node_log(0, 1, 4, tp={1: 10.0, 3: 19.5})), Layout(1, 4))
    [problem] = list(min_throughput(RunView(slow, Criteria(min_throughput=20))))
    assert problem.kind is MIN_THROUGHPUT
    assert problem.message == "throughput below --min-throughput 20 samples/s on ranks 1, 3 (node 0)"
    assert problem.ranks == {1: "throughput 10.00 < 20", 3: "throughput 19.50 < 20"}
    assert list(min_throughput(RunView(slow, Criteria()))) == []  # no floor set
    sound = Observed(roll_of(node_log(0, 1, 4)), Layout(1, 4))
    assert list(min_throughput(RunView(sound, Criteria(min_throughput=20)))) == []
