"""The job must have succeeded, when its end is known.

A disruption is named first, by :mod:`.errors`; an interrupted run by :mod:`.interrupted`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.backends import JobState
from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Kind, Problem, RankState

#: The job did not succeed; whose it is follows from the backend's reason
#: (:data:`rollcall.checks.blame.JOB_RULES`).
JOB = Kind("job", RankState.SLOW, None)


def job_state(run: RunView) -> Iterable[Problem]:
    """The job must have succeeded, when its end is known."""
    status = run.observed.status
    if status is None or status.state in (JobState.SUCCEEDED, JobState.INTERRUPTED):
        return
    if status.disruption is not None:  # named first, by :func:`errors`
        return
    yield Problem(JOB, f"job {status.state.value}: {status.reason}", detail=status)


CHECK = Check(
    job_state,
    detects="a job that did not succeed",
    reads="the backend's `JobStatus`",
    kinds=(JOB,),
    in_trials=True,
)


__all__ = ["CHECK", "JOB", "job_state"]
