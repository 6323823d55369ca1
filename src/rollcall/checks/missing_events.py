"""Where a missing rank is detected: every rank of ``0..world_size-1`` must report each required event."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.verdict import Kind, Problem
from rollcall_workload.contract import REQUIRED_EVENTS


def missing_events(run: RunView) -> Iterable[Problem]:
    """Every rank of the world must report each required event."""
    missing = run.roll.missing(run.layout.world_size)
    for event in REQUIRED_EVENTS:
        ranks = missing[event]
        if ranks:
            yield Problem(
                Kind.MISSING_EVENT,
                f"{event} missing on {len(ranks)} rank(s): {run.by_node(ranks)}",
                {r: f"no {event}" for r in ranks},
                detail=event,
            )


__all__ = ["missing_events"]
