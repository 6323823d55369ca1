"""No rank outside the world may report."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.facts import Facts
from rollcall.ranges import ranges
from rollcall.verdict import Kind, Problem


def unexpected_ranks(facts: Facts) -> Iterable[Problem]:
    """No rank outside the world may report."""
    world = facts.layout.world_size
    unexpected = facts.roll.unexpected(world)
    if unexpected:
        yield Problem(Kind.UNEXPECTED_RANK, f"ranks outside 0..{world - 1} reported: {ranges(unexpected)}")


__all__ = ["unexpected_ranks"]
