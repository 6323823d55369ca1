"""The layout check: each node hosts its number of ranks, and every rank reports the world size asked for."""

from rollcall.checks.layout import LAYOUT, layout
from rollcall.checks.runview import RunView
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import node_log, roll_of, two_by_two


def test_a_rank_reporting_another_world_size_is_a_layout_problem():
    text = node_log(0, 1, 2).replace('"rank":1,"world_size":2', '"rank":1,"world_size":3')
    v = judge(Observed(roll_of(text), Layout(1, 2)))
    assert [p.kind for p in v.findings] == [LAYOUT]
    assert v.problems == ["ranks 1 (node 0) reported a world size of 3, expected 2"]


def test_the_predicate_names_a_node_with_the_wrong_number_of_ranks_and_nothing_of_the_layout_asked_for():
    one_node = roll_of(node_log(0, 1, 4))
    found = list(layout(RunView(Observed(one_node, Layout(2, 2)), Criteria())))
    assert [p.kind for p in found] == [LAYOUT]
    assert found[0].message == "node 0 hosted 4 rank(s) (0-3), expected 2"
    outside = roll_of(node_log(0, 1, 2).replace('"node_rank":0', '"node_rank":7'))
    [problem] = list(layout(RunView(Observed(outside, Layout(1, 2)), Criteria())))
    assert problem.message == "node_rank 7 is outside 0..0 (ranks 0-1)"
    assert list(layout(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []
