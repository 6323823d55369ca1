import math

from rollcall.judge import assess
from rollcall.verdict import Layout, Outcome, Stats
from tests.unit.helpers import event, node_log, roll_of


def test_every_rank_present_passes_with_stats():
    roll = roll_of(node_log(0, 2, 4), node_log(1, 2, 4, tp={5: 30.0}))
    v = assess(roll, Layout(2, 4))
    assert v.outcome is Outcome.PASSED and v.passed, v.problems
    assert v.answered == 8
    assert v.throughput.total == 7 * 50 + 30
    assert v.throughput.min == 30 and v.throughput.max == 50
    assert math.isclose(v.epoch_time_mean, 0.45)


def test_missing_ranks_are_named_compactly_by_node():
    skip = {r: ("throughput",) for r in (9, 12, 13, 14, 15)}
    roll = roll_of(node_log(0, 2, 8), node_log(1, 2, 8, skip=skip))
    v = assess(roll, Layout(2, 8))
    assert not v.passed
    assert v.missing["throughput"] == [9, 12, 13, 14, 15]
    msg = v.message("artifacts/test_x/")
    assert "throughput missing on 5 rank(s): 9, 12-15 (node 1)" in msg
    assert "11 of 16 ranks answered" in msg
    assert "artifacts/test_x/" in msg


def test_a_pod_whose_log_is_lost_fails_naming_all_its_ranks():
    v = assess(roll_of(node_log(0, 2, 4)), Layout(2, 4))
    assert v.missing == {"throughput": [4, 5, 6, 7], "epoch_time": [4, 5, 6, 7], "complete": [4, 5, 6, 7]}
    assert "complete missing on 4 rank(s): 4-7 (node 1)" in v.message()


def test_unexpected_rank_fails():
    roll = roll_of(node_log(0, 1, 2) + event("complete", 7, 2) + "\n")
    v = assess(roll, Layout(1, 2))
    assert v.unexpected_ranks == [7]
    assert any("outside 0..1" in p for p in v.problems)


def test_non_finite_or_non_positive_values_fail():
    text = node_log(0, 1, 2, tp={1: 0.0}).replace('"seconds":0.5', '"seconds":NaN', 1)
    v = assess(roll_of(text), Layout(1, 2))
    assert not v.passed
    assert sorted(v.failed_ranks) == [0, 1]
    assert v.throughput.total is None


def test_node_hosting_the_wrong_number_of_ranks_fails():
    # Rank 3 claims node 0, so node 0 hosts three ranks and node 1 one.
    text = node_log(0, 2, 2) + node_log(1, 2, 2).replace(
        '"rank":3,"world_size":4,"local_rank":1,"node_rank":1',
        '"rank":3,"world_size":4,"local_rank":1,"node_rank":0',
    )
    v = assess(roll_of(text), Layout(2, 2))
    assert not v.passed
    assert any("node 0 hosted 3 rank(s) (0-1, 3), expected 2" in p for p in v.problems)
    assert any("node 1 hosted 1 rank(s) (2), expected 2" in p for p in v.problems)


def test_error_events_are_reported_with_rank_and_node():
    text = node_log(0, 2, 1) + event("error", 1, 2, message="injected failure") + "\n" + node_log(1, 2, 1)
    v = assess(roll_of(text), Layout(2, 1))
    assert not v.passed and sorted(v.failed_ranks) == [1]
    assert "rank 1 (node 1) reported an error: injected failure" in v.message()


def test_min_throughput():
    roll = roll_of(node_log(0, 1, 4, tp={2: 10.0, 3: 20.0}))
    assert assess(roll, Layout(1, 4), min_throughput=5).passed
    v = assess(roll, Layout(1, 4), min_throughput=25)
    assert not v.passed
    assert "below --min-throughput 25 samples/s on ranks 2-3 (node 0)" in v.message()


def test_stats_median():
    assert Stats.of([3.0, 1.0, 2.0]).median == 2.0
    assert Stats.of([4.0, 1.0, 2.0, 3.0]).median == 2.5
    assert Stats.of([]).total is None


def test_a_straggler_answered_too_slowly_and_a_rank_that_missed_an_event_did_not():
    from dataclasses import replace

    from rollcall.gate import criteria_of
    from rollcall.judge import judge
    from rollcall.options import DEFAULTS
    from rollcall.verdict import Observed

    roll = roll_of(node_log(0, 2, 2, tp={1: 10.0}), node_log(1, 2, 2, skip={3: ("complete",)}))
    v = judge(Observed(roll, Layout(2, 2)), replace(criteria_of(DEFAULTS), straggler_ratio=0.8))
    assert [r for r, res in v.ranks.items() if res.answered] == [0, 1, 2]
    assert [r for r, res in v.ranks.items() if res.too_slow] == [1]
    assert (v.answered, v.too_slow) == (3, 1)
    assert v.message().startswith("roll call: 3 of 4 ranks answered, 1 of them too slow (2 nodes x 2 procs)")
