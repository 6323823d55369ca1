"""Where a missing rank is detected: every rank of ``0..world_size-1`` must report each required event.

A trial of ``--isolate`` trains nothing (no epoch time, no throughput): there every rank must say ``complete``
(:func:`completed`).
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState
from rollcall_workload.contract import REQUIRED_EVENTS

#: A rank of the world never said a required event.
MISSING_EVENT = Kind(
    "missing_event",
    RankState.MISSING,
    Blame(Owner.UNDETERMINED, "a rank said less than the roll call asks"),
    follows=True,
)


def missing_events(run: RunView) -> Iterable[Problem]:
    """Every rank of the world must report each required event."""
    missing = run.roll.missing(run.layout.world_size)
    for event in REQUIRED_EVENTS:
        ranks = missing[event]
        if ranks:
            yield Problem(
                MISSING_EVENT,
                f"{event} missing on {len(ranks)} rank(s): {run.by_node(ranks)}",
                {r: f"no {event}" for r in ranks},
                detail=event,
            )


def completed(run: RunView) -> Iterable[Problem]:
    """Every rank of a trial must say ``complete`` (a trial trains nothing: no epoch time, no throughput)."""
    missing = [r for r in range(run.layout.world_size) if not ((rep := run.reports.get(r)) and rep.complete)]
    if missing:
        yield Problem(
            MISSING_EVENT,
            f"complete missing on {len(missing)} rank(s): {run.by_node(missing)}",
            {r: "no complete" for r in missing},
            detail="complete",
        )


CHECK = Check(
    missing_events,
    detects="a missing rank: a required event never said",
    reads="`ranklog/` (`RollCall.missing`)",
    kinds=(MISSING_EVENT,),
    logs_only=True,
    in_trials=True,
    in_trials_as=completed,
)


__all__ = ["CHECK", "MISSING_EVENT", "completed", "missing_events"]
