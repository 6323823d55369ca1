"""Every loss must be finite, and fall from the first timed epoch to the last over a run that learns."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.proofs import find_bad_losses
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A loss that was not finite, or did not fall over a run long enough to learn.
LOSS = Kind("loss", RankState.WRONG, Blame(Owner.UNDETERMINED, "the loss did not behave"))


def loss(run: RunView) -> Iterable[Problem]:
    """Every loss must be finite, and fall from the first timed epoch to the last over a run that learns."""
    found = find_bad_losses(run.reports, run.node)
    for what, group in (
        ("loss not finite", [f for f in found if not f.finite]),
        ("loss did not fall", [f for f in found if f.finite]),
    ):
        if group:
            yield Problem(
                LOSS,
                f"{what} on ranks {run.by_node(f.rank for f in group)}: "
                + "; ".join(f"rank {f.rank} {f.note()}" for f in group),
                {f.rank: f.note() for f in group},
                detail=tuple(group),
            )


CHECK = Check(
    loss,
    detects="a loss not finite, or not falling",
    reads="`evidence/proofs.py`",
    kinds=(LOSS,),
)


__all__ = ["CHECK", "LOSS", "loss"]
