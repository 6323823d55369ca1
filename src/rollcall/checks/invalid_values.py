"""Every value a rank reported must be finite and positive (:attr:`RunView.invalid` finds them)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.verdict import Kind, Problem


def invalid_values(run: RunView) -> Iterable[Problem]:
    """Every value must be finite and positive."""
    for r, bad in run.invalid.items():
        shown = ", ".join(bad)
        yield Problem(
            Kind.INVALID_VALUE,
            f"rank {r} reported non-finite or non-positive values: {shown}",
            {r: f"invalid {shown}"},
        )


__all__ = ["invalid_values"]
