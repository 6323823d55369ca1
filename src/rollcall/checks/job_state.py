"""The job must have succeeded, when its end is known.

A disruption is named first, by :mod:`.errors`; an interrupted run by :mod:`.interrupted`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.backends import JobState
from rollcall.checks.runview import RunView
from rollcall.verdict import Kind, Problem


def job_state(run: RunView) -> Iterable[Problem]:
    """The job must have succeeded, when its end is known."""
    status = run.observed.status
    if status is None or status.state in (JobState.SUCCEEDED, JobState.INTERRUPTED):
        return
    if status.disruption is not None:  # named first, by :func:`errors`
        return
    yield Problem(Kind.JOB, f"job {status.state.value}: {status.reason}", detail=status)


__all__ = ["job_state"]
