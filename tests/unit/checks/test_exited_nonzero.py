"""The exited_nonzero check: a rank that answered the whole roll call, then exited non-zero or by a signal."""

from rollcall.backends import JobState, JobStatus
from rollcall.checks.exited_nonzero import EXITED_NONZERO, exited_nonzero
from rollcall.checks.runview import RunView
from rollcall.evidence.endings import Termination
from rollcall.evidence.rootcause import Analysis
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import two_by_two

T0 = 1_764_576_000.0


def worker(rank, exit_code, reason="", time=T0):
    """torchrun's record of worker ``rank``, which ended with ``exit_code``."""
    return Termination(f"pod-{rank // 2}", None, None, reason, exit_code, time, rank=rank, unit="pod")


def test_the_predicate_names_a_rank_that_answered_then_exited_non_zero_as_the_root_cause():
    status = JobStatus(JobState.FAILED, "pod-1 failed", terminations=[worker(3, 1)])
    [problem] = list(exited_nonzero(RunView(Observed(two_by_two(), Layout(2, 2), status), Criteria())))
    assert problem.kind is EXITED_NONZERO
    assert problem.ranks == {3: "exited with code 1 after answering the roll call"}
    assert isinstance(problem.detail, Analysis) and problem.detail.termination is not None
    assert problem.detail.termination.rank == 3 and problem.detail.termination.node == 1
    assert problem.message == (
        "first failure: rank 3 (node 1, pod pod-1) exited with code 1 after answering the roll call"
    )


def test_the_predicate_names_nothing_of_a_clean_exit_or_a_rank_that_had_not_answered():
    clean = JobStatus(JobState.SUCCEEDED, terminations=[worker(3, 0)])
    assert list(exited_nonzero(RunView(Observed(two_by_two(), Layout(2, 2), clean), Criteria()))) == []
    unanswered = JobStatus(JobState.FAILED, "pod-1 failed", terminations=[worker(3, 1)])
    roll = two_by_two(skip={3: ("complete",)})
    assert list(exited_nonzero(RunView(Observed(roll, Layout(2, 2), unanswered), Criteria()))) == []
    assert list(exited_nonzero(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []


def test_a_rank_the_launcher_stopped_is_named_only_when_no_rank_ended_otherwise():
    stopped = [worker(0, -15, "SIGTERM"), worker(3, -9, "SIGKILL", T0 + 1)]
    status = JobStatus(JobState.FAILED, "pod-1 failed", terminations=stopped)
    found = list(exited_nonzero(RunView(Observed(two_by_two(), Layout(2, 2), status), Criteria())))
    assert [set(p.ranks) for p in found] == [{3}] and found[0].ranks[3].startswith("killed by SIGKILL")
    alone = JobStatus(JobState.FAILED, "pod-0 failed", terminations=[worker(0, -15, "SIGTERM")])
    [problem] = list(exited_nonzero(RunView(Observed(two_by_two(), Layout(2, 2), alone), Criteria())))
    assert problem.ranks == {0: "killed by SIGTERM after answering the roll call"}
