"""judge(): each check's problems, typed; rank states from the kinds of problems, never from their text."""

from dataclasses import FrozenInstanceError

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.layout import LAYOUT
from rollcall.checks.min_throughput import MIN_THROUGHPUT
from rollcall.checks.stragglers import STRAGGLER
from rollcall.judge import CHECKS, RunView, judge
from rollcall.verdict import Criteria, Layout, Observed, Problem, RankState
from tests.unit.helpers import event, node_log, roll_of, two_by_two


def test_a_sound_run_has_no_problem_and_every_rank_is_ok():
    v = judge(Observed(two_by_two(), Layout(2, 2), JobStatus(JobState.SUCCEEDED)))
    assert v.passed and v.findings == ()
    assert {r.state for r in v.ranks.values()} == {RankState.OK}
    assert [r.pod for r in v.ranks.values()] == ["pod-0", "pod-0", "pod-1", "pod-1"]
    assert v.ranks[3].reported == ("start", "throughput", "epoch_time", "complete")


def test_the_state_is_the_worst_kind_naming_the_rank():
    text = node_log(0, 1, 4, tp={1: 10.0, 2: 10.0}) + event("error", 2, 4, message="boom") + "\n"
    v = judge(Observed(roll_of(text), Layout(1, 4)), Criteria(min_throughput=20, straggler_ratio=0.5))
    states = {r: res.state for r, res in v.ranks.items()}
    assert states == {0: RankState.OK, 1: RankState.STRAGGLER, 2: RankState.RAISED, 3: RankState.OK}
    assert [p.kind for p in v.ranks[1].problems] == [MIN_THROUGHPUT, STRAGGLER]
    assert v.ranks[2].notes == [
        "error: boom",
        "throughput 10.00 < 20",
        "straggler: 0.33 of the median throughput",
    ]


def test_adding_a_check_is_one_function():
    def odd_ranks(run: RunView):
        ranks = {r: "odd" for r in run.reports if r % 2}
        yield Problem(LAYOUT, "odd ranks are not allowed", ranks)

    v = judge(Observed(two_by_two(), Layout(2, 2)), checks=(*CHECKS, odd_ranks))
    assert v.problems == ["odd ranks are not allowed"]
    assert v.failed_ranks == {1: ["odd"], 3: ["odd"]}
    assert v.answered == 4  # every rank said every event: the new check fails the run, not the roll call


def test_the_verdict_is_frozen_and_judging_again_adds_criteria_without_touching_it():
    observed = Observed(two_by_two(tp={0: 10.0}), Layout(2, 2))
    first = judge(observed)
    assert first.passed
    again = judge(observed, Criteria(straggler_ratio=0.8))
    assert first.passed and [p.kind for p in again.findings] == [STRAGGLER]
    with pytest.raises(FrozenInstanceError):
        first.findings = ()  # type: ignore[misc]
