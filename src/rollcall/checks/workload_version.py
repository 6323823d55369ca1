"""Every rank runs the suite's rank-log contract and a workload no older than the suite's."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence import versions
from rollcall.verdict import Kind, Problem


def workload_version(run: RunView) -> Iterable[Problem]:
    """Every rank runs the suite's rank-log contract and a workload no older than the suite's."""
    mismatch = versions.version_mismatch(run.reports)
    if mismatch is not None:
        why = "its workload is older than the suite's, or of another rank-log contract"
        yield Problem(Kind.WORKLOAD_VERSION, mismatch.message, dict.fromkeys(mismatch.ranks, why), mismatch)


__all__ = ["workload_version"]
