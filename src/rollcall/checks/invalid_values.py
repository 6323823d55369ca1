"""Every value a rank reported must be finite and positive (:attr:`Facts.invalid` finds them)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.facts import Facts
from rollcall.verdict import Kind, Problem


def invalid_values(facts: Facts) -> Iterable[Problem]:
    """Every value must be finite and positive."""
    for r, bad in facts.invalid.items():
        shown = ", ".join(bad)
        yield Problem(
            Kind.INVALID_VALUE,
            f"rank {r} reported non-finite or non-positive values: {shown}",
            {r: f"invalid {shown}"},
        )


__all__ = ["invalid_values"]
