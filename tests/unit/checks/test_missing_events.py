"""The missing_events check: every rank of the world reports each required event, or is named missing."""

from rollcall.checks.missing_events import MISSING_EVENT, missing_events
from rollcall.checks.runview import RunView
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import node_log, roll_of, two_by_two


def test_the_predicate_names_each_missing_event_with_its_ranks_by_node_and_nothing_of_a_whole_roll_call():
    roll = two_by_two(skip={3: ("complete",), 1: ("throughput", "complete")})
    found = list(missing_events(RunView(Observed(roll, Layout(2, 2)), Criteria())))
    assert [p.kind for p in found] == [MISSING_EVENT] * 2
    assert [p.detail for p in found] == ["throughput", "complete"]
    assert found[0].message == "throughput missing on 1 rank(s): 1 (node 0)"
    assert found[1].message == "complete missing on 2 rank(s): 1 (node 0); 3 (node 1)"
    assert found[1].ranks == {1: "no complete", 3: "no complete"}
    assert list(missing_events(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []


def test_a_node_whose_log_is_lost_has_every_rank_missing_every_required_event():
    found = list(missing_events(RunView(Observed(roll_of(node_log(0, 2, 2)), Layout(2, 2)), Criteria())))
    assert [p.detail for p in found] == ["throughput", "epoch_time", "complete"]
    assert all(set(p.ranks) == {2, 3} and p.message.endswith("2-3 (node 1)") for p in found)
