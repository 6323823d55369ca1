"""The unexpected_ranks check: no rank outside 0..world_size-1 may report."""

from rollcall.checks.runview import RunView
from rollcall.checks.unexpected_ranks import UNEXPECTED_RANK, unexpected_ranks
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import event, node_log, roll_of


def test_the_predicate_names_a_rank_outside_the_world_and_nothing_of_one_inside_it():
    text = node_log(0, 1, 2) + event("start", 5, 2, local_rank=1, node_rank=0) + "\n"
    [problem] = list(unexpected_ranks(RunView(Observed(roll_of(text), Layout(1, 2)), Criteria())))
    assert problem.kind is UNEXPECTED_RANK and problem.message == "ranks outside 0..1 reported: 5"
    assert problem.ranks == {}  # the rank is not one of the world's
    assert (
        list(unexpected_ranks(RunView(Observed(roll_of(node_log(0, 1, 2)), Layout(1, 2)), Criteria()))) == []
    )
