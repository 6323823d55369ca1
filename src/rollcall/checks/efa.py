"""With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.facts import Facts
from rollcall.verdict import Kind, Problem


def efa(facts: Facts) -> Iterable[Problem]:
    """With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""
    status = facts.observed.status
    if status is not None and status.efa is not None and status.efa.failed:
        yield Problem(Kind.EFA, status.efa.reason, detail=status.efa)


__all__ = ["efa"]
