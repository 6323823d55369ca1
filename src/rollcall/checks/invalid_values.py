"""Every value a rank reported must be finite and positive (:attr:`RunView.invalid` finds them)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A rank reported a value that is not finite or not positive.
INVALID_VALUE = Kind(
    "invalid_value", RankState.MISSING, Blame(Owner.WORKLOAD, "the workload reported a value that cannot be")
)


def invalid_values(run: RunView) -> Iterable[Problem]:
    """Every value must be finite and positive."""
    for r, bad in run.invalid.items():
        shown = ", ".join(bad)
        yield Problem(
            INVALID_VALUE,
            f"rank {r} reported non-finite or non-positive values: {shown}",
            {r: f"invalid {shown}"},
        )


CHECK = Check(
    invalid_values,
    detects="a value not finite or not positive",
    reads="`checks/runview.py` (`RunView.invalid`)",
    kinds=(INVALID_VALUE,),
    logs_only=True,
)


__all__ = ["CHECK", "INVALID_VALUE", "invalid_values"]
