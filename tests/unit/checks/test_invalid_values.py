"""The invalid_values check: every throughput and epoch time a rank reports is finite and positive."""

from rollcall.checks.invalid_values import INVALID_VALUE, invalid_values
from rollcall.checks.runview import RunView
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import node_log, roll_of


def test_the_predicate_names_the_rank_and_its_invalid_value_and_nothing_of_sound_values():
    text = node_log(0, 1, 2, tp={1: -5.0}).replace(
        '"rank":0,"world_size":2,"epoch":2,"seconds":0.5', '"rank":0,"world_size":2,"epoch":2,"seconds":0'
    )
    found = list(invalid_values(RunView(Observed(roll_of(text), Layout(1, 2)), Criteria())))
    assert [p.kind for p in found] == [INVALID_VALUE] * 2
    assert [p.message for p in found] == [
        "rank 0 reported non-finite or non-positive values: epoch 2 seconds=0.0",
        "rank 1 reported non-finite or non-positive values: throughput=-5.0",
    ]
    assert found[1].ranks == {1: "invalid throughput=-5.0"}
    assert list(invalid_values(RunView(Observed(roll_of(node_log(0, 1, 2)), Layout(1, 2)), Criteria()))) == []
