"""The loss check: every loss finite, and falling from the first timed epoch to the last over a run that learns."""

from rollcall.checks.loss import LOSS, loss
from rollcall.checks.runview import RunView
from rollcall.evidence.proofs import LEARNING_STEPS, find_bad_losses
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.test_proofs import run_log, verdict


def test_a_loss_that_is_not_finite_fails_by_rank_and_value():
    roll = run_log(losses=(9.8, None))
    v = verdict(roll)
    assert [p.kind for p in v.findings] == [LOSS]
    assert v.problems[0].startswith(
        "loss not finite on ranks 0-1 (node 0); 2-3 (node 1): rank 0 loss not finite: "
    )
    assert v.failed_ranks[3] == ["loss not finite: epoch 2 nan"]


def test_a_loss_that_does_not_fall_fails_only_over_a_run_long_enough_to_learn():
    short = run_log(losses=(9.6, 9.7), steps=LEARNING_STEPS - 1)
    assert verdict(short).passed
    long = run_log(losses=(9.6, 9.7), steps=LEARNING_STEPS)
    v = verdict(long)
    assert [p.kind for p in v.findings] == [LOSS]
    assert v.failed_ranks[0] == [
        f"loss did not fall over {LEARNING_STEPS} steps: 9.6000 (epoch 1) -> 9.7000 (epoch 2)"
    ]
    assert verdict(run_log(losses=(9.7, 9.6), steps=LEARNING_STEPS)).passed


def test_the_steps_counted_are_those_after_the_first_epoch():
    found = find_bad_losses(
        run_log(losses=(9.6, 9.6, 9.6), steps=2).ranks, lambda r: r // 2, learning_steps=4
    )
    assert [(f.rank, f.steps) for f in found] == [(0, 4), (1, 4), (2, 4), (3, 4)]


def test_the_predicate_names_the_ranks_whose_loss_is_not_finite_or_did_not_fall_and_nothing_of_a_falling_one():
    nan = RunView(Observed(run_log(losses=(9.8, None)), Layout(2, 2)), Criteria())
    [problem] = list(loss(nan))
    assert problem.kind is LOSS and set(problem.ranks) == {0, 1, 2, 3}
    assert problem.message.startswith("loss not finite on ranks 0-1 (node 0); 2-3 (node 1)")
    flat = RunView(Observed(run_log(losses=(9.6, 9.7), steps=LEARNING_STEPS), Layout(2, 2)), Criteria())
    [problem] = list(loss(flat))
    assert (
        problem.message.startswith("loss did not fall on ranks")
        and "9.6000 (epoch 1) -> 9.7000" in problem.message
    )
    assert (
        list(
            loss(
                RunView(Observed(run_log(losses=(9.7, 9.6), steps=LEARNING_STEPS), Layout(2, 2)), Criteria())
            )
        )
        == []
    )
