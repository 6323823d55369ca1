"""Every rank runs the suite's rank-log contract and a workload no older than the suite's."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, EarlyStop, RunView
from rollcall.evidence import versions
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: The image's workload is of another rank-log contract, or older than the suite's (named first).
WORKLOAD_VERSION = Kind(
    "workload_version",
    RankState.FAILED,
    Blame(Owner.PLATFORM, "the image holds an older workload than the suite"),
)


def workload_version(run: RunView) -> Iterable[Problem]:
    """Every rank runs the suite's rank-log contract and a workload no older than the suite's."""
    mismatch = versions.version_mismatch(run.reports)
    if mismatch is not None:
        why = "its workload is older than the suite's, or of another rank-log contract"
        yield Problem(WORKLOAD_VERSION, mismatch.message, dict.fromkeys(mismatch.ranks, why), mismatch)


def _refused(run: RunView, now: float) -> str | None:
    """Why to end the job at a rank's start: the suite refuses its workload (it would only fail later)."""
    return versions.stop_reason(run.reports)


CHECK = Check(
    workload_version,
    detects="a workload older than the suite, or another contract",
    reads="`evidence/versions.py`",
    kinds=(WORKLOAD_VERSION,),
    stops=EarlyStop(_refused, when="at the `start` of a rank whose workload the suite refuses"),
    retried=False,
    in_trials=True,
)


__all__ = ["CHECK", "WORKLOAD_VERSION", "workload_version"]
