"""No rank outside the world may report."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.ranges import ranges
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A rank outside the world reported.
UNEXPECTED_RANK = Kind(
    "unexpected_rank", RankState.SLOW, Blame(Owner.PLATFORM, "a rank outside the world asked for")
)


def unexpected_ranks(run: RunView) -> Iterable[Problem]:
    """No rank outside the world may report."""
    world = run.layout.world_size
    unexpected = run.roll.unexpected(world)
    if unexpected:
        yield Problem(UNEXPECTED_RANK, f"ranks outside 0..{world - 1} reported: {ranges(unexpected)}")


CHECK = Check(
    unexpected_ranks,
    detects="a rank outside the world",
    reads="`ranklog/`",
    kinds=(UNEXPECTED_RANK,),
    logs_only=True,
    in_trials=True,
)


__all__ = ["CHECK", "UNEXPECTED_RANK", "unexpected_ranks"]
