"""With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.verdict import Kind, Problem


def efa(run: RunView) -> Iterable[Problem]:
    """With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""
    status = run.observed.status
    if status is not None and status.efa is not None and status.efa.failed:
        yield Problem(Kind.EFA, status.efa.reason, detail=status.efa)


__all__ = ["efa"]
