"""A run the suite was interrupted in (Ctrl-C, SIGTERM) before its job ended, and where each rank stood then.

Named before the hangs, the errors and the missing events, which it explains (after only what the ranks
proved wrong before the signal: another workload, a diverged replica, a wrong all-reduce). Each rank that
had not completed is named with its state at that moment, from what its log said: waiting in a collective
or hung (its watchdog's last dump, :mod:`rollcall.evidence.hangs`), running (it had started, no dump
stood), or not started (no ``start``: it had not joined the process group). The ranks that had completed
answered, and are not named.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.backends import JobState
from rollcall.checks.runview import Check, RunView
from rollcall.evidence.hangs import resolve, stalls
from rollcall.ranges import ranges
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: The suite was interrupted (Ctrl-C, SIGTERM) before the job ended: each rank not done, as it stood then.
#: Whoever sent the signal (a person, a CI job's timeout or cancel) ended the run before its verdict: the
#: signal says nothing of the cluster, and a CI timeout may as well be a slow cluster as a short budget.
INTERRUPTED = Kind(
    "interrupted",
    RankState.MISSING,
    Blame(Owner.UNDETERMINED, "the run was interrupted from outside before its verdict"),
)

#: The states a rank may be in when the run is interrupted, in the order the line lists them.
STATES = ("answered", "waiting", "hung", "running", "not started")


def interrupted(run: RunView) -> Iterable[Problem]:
    """An interrupted run is a problem of its own, naming each rank that had not completed and its state."""
    status = run.observed.status
    if status is None or status.state is not JobState.INTERRUPTED:
        return
    hung, waiting = resolve(stalls(run.reports))
    stalled = {s.rank: ("hung", f"hung in {s.where}") for s in hung}
    stalled |= {s.rank: ("waiting", f"waiting in a collective ({s.where})") for s in waiting}
    states: dict[int, tuple[str, str]] = {}
    for r in range(run.layout.world_size):
        report = run.reports.get(r)
        if report is not None and report.complete:
            states[r] = ("answered", "answered")
        elif r in stalled:
            states[r] = stalled[r]
        elif report is not None and (report.start is not None or report.epoch_times):
            done = len(report.epoch_times)
            states[r] = ("running", f"running ({done} epoch(s) done)")
        else:
            states[r] = ("not started", "not started (no start: not in the process group)")
    counts = [
        f"{'rank' if len(rs) == 1 else 'ranks'} {ranges(rs)} {state}"
        for state in STATES
        if (rs := [r for r, (s, _) in states.items() if s == state])
    ]
    yield Problem(
        INTERRUPTED,
        f"run {status.reason}: {'; '.join(counts)}",
        {r: f"{note} when interrupted" for r, (state, note) in states.items() if state != "answered"},
        detail=status,
    )


CHECK = Check(
    interrupted,
    detects="a run interrupted (Ctrl-C, SIGTERM) before its job ended, and where each rank stood then",
    reads="the runner's `JobStatus` (`interrupted`), `evidence/hangs.py`",
    kinds=(INTERRUPTED,),
)


__all__ = ["CHECK", "INTERRUPTED", "interrupted"]
