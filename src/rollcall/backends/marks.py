"""What rollcall left on the nodes, read back and cleared: the contract of ``rollcall nodes``.

A backend that marks nodes (:class:`~rollcall.backends.MarksNodes`) may also list what it left on them
(:class:`ListsMarks`: each node's rollcall verdict, its expiry, its taint or drain and why, as
:class:`NodeMarks`) and clear them (``rollcall nodes --clear``), under the same rights as marking. This module
imports no wing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rollcall.backends import MarkReport


@dataclass(frozen=True)
class NodeMarks:
    """What rollcall left on one node.

    Attributes:
        verdict: its verdict label (``fit``, ``unfit``, ``undetermined``), None where it has none.
        checked_at, valid_until: when it was checked and until when that holds (epoch seconds), where said.
        marks: what of rollcall's the node holds: ``label``, ``taint``, ``drain``.
        reason: why (the taint's annotation, the drain's reason).
    """

    name: str
    verdict: str | None = None
    checked_at: float | None = None
    valid_until: float | None = None
    marks: tuple[str, ...] = ()
    reason: str = ""

    def expired(self, now: float | None = None) -> bool:
        """Its verdict no longer holds (its expiry passed)."""
        return self.valid_until is not None and self.valid_until < (time.time() if now is None else now)

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """The JSON form (``rollcall nodes --json``)."""
        return {
            "name": self.name,
            "verdict": self.verdict,
            "checked_at": self.checked_at,
            "valid_until": self.valid_until,
            "expired": self.expired(now),
            "marks": list(self.marks),
            "reason": self.reason,
        }


@runtime_checkable
class ListsMarks(Protocol):
    """A backend that lists what rollcall left on its nodes, and clears it."""

    def current_marks(self) -> list[NodeMarks]:
        """Every node holding a mark of rollcall's, by name."""
        ...

    def clear_marks(self, names: Sequence[str]) -> MarkReport:
        """Clear every mark of rollcall's from the nodes ``names`` (all that hold one where empty).

        Never another's mark: a label, taint or drain outside rollcall's own. What it did, per node.
        """
        ...


__all__ = ["ListsMarks", "NodeMarks"]
