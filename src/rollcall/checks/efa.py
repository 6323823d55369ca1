"""With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: EFA was requested and NCCL did not use it.
EFA = Kind(
    "efa",
    RankState.SLOW,
    Blame(Owner.UNDETERMINED, "EFA asked for, not used (the image's plugin, or the node's devices)"),
)


def efa(run: RunView) -> Iterable[Problem]:
    """With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""
    status = run.observed.status
    if status is not None and status.efa is not None and status.efa.failed:
        yield Problem(EFA, status.efa.reason, detail=status.efa)


CHECK = Check(
    efa,
    detects="EFA requested and not used by NCCL",
    reads="`backends/kubernetes/efa.py`",
    kinds=(EFA,),
    in_trials=True,
)


__all__ = ["CHECK", "EFA", "efa"]
