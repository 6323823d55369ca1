"""No rank outside the world may report."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.ranges import ranges
from rollcall.verdict import Kind, Problem


def unexpected_ranks(run: RunView) -> Iterable[Problem]:
    """No rank outside the world may report."""
    world = run.layout.world_size
    unexpected = run.roll.unexpected(world)
    if unexpected:
        yield Problem(Kind.UNEXPECTED_RANK, f"ranks outside 0..{world - 1} reported: {ranges(unexpected)}")


__all__ = ["unexpected_ranks"]
