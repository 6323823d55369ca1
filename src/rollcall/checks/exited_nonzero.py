"""A rank that answered the whole roll call and then exited non-zero (or by a signal) failed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.endings import LAUNCHER_SIGNALS, Termination
from rollcall.evidence.rootcause import Analysis
from rollcall.ranklog import RankReport
from rollcall.verdict import Kind, Problem, RankState
from rollcall_workload.contract import REQUIRED_EVENTS

#: A rank answered the roll call, then exited non-zero (or by a signal).
EXITED_NONZERO = Kind("exited_nonzero", RankState.FAILED, None)


def exited_nonzero(run: RunView) -> Iterable[Problem]:
    """A rank that answered the whole roll call and then exited non-zero (or by a signal) failed.

    The exit codes are the launcher's own records of its workers (:mod:`rollcall.torchrun`), by global rank.
    A rank the launcher itself stopped (SIGTERM, SIGINT) once another failed is named only when no rank
    ended any other way.
    When no rank reported an error or left before ``complete`` and the infrastructure disrupted nothing, the
    earliest such exit is the root cause (its problem's detail the
    :class:`~rollcall.evidence.rootcause.Analysis` naming it); otherwise each is named after :func:`errors`'
    root cause.
    """
    status = run.observed.status
    if status is None:
        return
    answered = {r for r, report in run.reports.items() if _answered(report)}
    ended: dict[int, Termination] = {}
    for t in status.terminations:
        if t.rank in answered and t.exit_code not in (None, 0) and t.rank not in ended:
            report = run.reports[t.rank]
            pod = min(report.sources) if report.sources else t.pod
            ended[t.rank] = replace(t, node=run.node(t.rank), pod=pod, answered=True)
    own = {r: t for r, t in ended.items() if t.signal not in LAUNCHER_SIGNALS}
    ended = own or ended  # the launcher stops the others once one fails: their ends echo that one's
    if not ended:
        return
    root = (
        status.disruption is None
        and not any(rep.errors for rep in run.reports.values())
        and not run.departures  # a rank that left before complete came first: errors names it
    )
    first = min(ended.values(), key=lambda t: (t.time is None, t.time or 0.0, t.rank))
    for rank, t in sorted(ended.items()):
        how = f"killed by {t.signal}" if t.signal else f"exited with code {t.exit_code}"
        note = f"{how} after answering the roll call"
        if root and t is first:
            analysis = Analysis(termination=t)
            yield Problem(EXITED_NONZERO, analysis.headline() or t.describe(), {rank: note}, analysis)
        else:
            yield Problem(EXITED_NONZERO, t.describe(), {rank: note}, detail=t)


def _answered(report: RankReport) -> bool:
    """Reported every required event and no error."""
    return all(report.has(e) for e in REQUIRED_EVENTS) and not report.errors


CHECK = Check(
    exited_nonzero,
    detects="a rank that answered, then exited non-zero or by a signal",
    reads="the launcher's records (`torchrun.py`)",
    kinds=(EXITED_NONZERO,),
    in_trials=True,
)


__all__ = ["CHECK", "EXITED_NONZERO", "exited_nonzero"]
