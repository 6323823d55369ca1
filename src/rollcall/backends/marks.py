"""What rollcall left on the nodes, read back and cleared: the contract of ``rollcall nodes``.

## The marks, and how to undo each

Each mark is made once per session, at its end, from this file's verdicts (the breaker's over them); a node
``undetermined`` or ``unchecked`` is never tainted or drained, nor freed of a taint or drain.

- ``--label-nodes`` (Kubernetes): ``rollcall/verdict`` (``fit``, ``unfit``, ``undetermined``),
  ``rollcall/checked-at`` and ``rollcall/valid-until``, the times as integer epoch seconds so that a
  nodeAffinity ``Gt`` or ``Lt`` term can compare them (a label that is no integer never matches). nodeAffinity
  has no notion of now: the submitter writes the current time into the term at submit time, e.g.
  ``NOW=$(date +%s) envsubst < job.yaml | kubectl apply -f -`` over this term of a pod's affinity:

      - {key: rollcall/verdict, operator: In, values: [fit]}
      - {key: rollcall/valid-until, operator: Gt, values: ["${NOW}"]}

  ``rollcall render --fit-affinity`` prints that affinity with the current time written in. ``Gt`` compares
  against the time written at submit, not at scheduling: a pod pending for hours can still
  land on a node whose verdict expired meanwhile, and ``IgnoredDuringExecution`` never moves a running pod.
  Each ``--label-nodes`` pass first removes the verdict labels whose ``rollcall/valid-until`` has passed (the
  older ``20261206T170000Z`` form too) on every node it can list, so a stale ``fit`` does not hold forever;
  an expiry never lifts a taint. Needs ``get``, ``list`` and ``patch`` of nodes. See them: ``kubectl get
  nodes -L rollcall/verdict -L rollcall/valid-until``. Undo: ``kubectl label nodes --all rollcall/verdict-
  rollcall/checked-at- rollcall/valid-until-``, or ``rollcall nodes --clear``.
- ``--taint-unfit`` (Kubernetes): an unfit node gets rollcall's taint and the reasons in the annotation
  ``rollcall/unfit-reason``; a node found fit on a check of every GPU (``whole``) loses them; a fit check
  of part of it keeps them ("not re-checked whole"). Never another's taint. Undo: ``kubectl taint nodes
  NODE rollcall/unfit-`` and ``kubectl annotate nodes NODE rollcall/unfit-reason-``, or ``rollcall nodes
  --clear``.
- ``--drain-unfit`` (Slurm): each node's state is read just before it is drained or resumed, and a node
  someone else holds is left as it is, listed under ``left``: drained with a reason not rollcall's, down or
  failing, waiting for a reboot an administrator asked for, or in a maintenance reservation other than the
  run's own ``--slurm-reservation``. An unfit node is drained with the reason ``rollcall: ...`` (one rollcall
  drained already keeps its first reason: ``already``); a fit node checked whole whose drain reason is
  rollcall's is resumed; one checked in part stays drained (``kept``). Slurm has no conditional update: an
  administrator acting between the read and the update can still be overwritten; the window is one
  command. Undo: ``scontrol update nodename=N state=resume``, or ``rollcall nodes --clear``.
- ``unfit-nodes.txt``: the unfit nodes, one a line, for a script of your own.

A node that could not be marked (a 403, the API server or slurmctld lost midway) is listed under ``failed``
with the server's answer; every other node's mark stands, and each report says which nodes changed.

``rollcall nodes`` lists the verdicts, expiries and marks rollcall left on the cluster's nodes (or Slurm's
drains), with the suite's own ``--backend`` and cluster options; ``rollcall nodes --clear [--node NAME]``
removes them (rollcall's labels, its taint and annotation, its drains; never another's), with the rights
marking needs.

## Reading them back

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

from rollcall.backends import BackendSettings, MarkReport


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
    """A backend class that lists what rollcall left on its nodes, and clears it.

    Both are the class's own, from the wing's options section: they need the rights of marking (read and
    patch nodes; Slurm's operator to resume), not those of running a job. Errors are the backend's
    :class:`~rollcall.backends.BackendError` (or an ``OptionError``), naming what is missing.
    """

    @classmethod
    def current_marks(cls, options: Any, session: BackendSettings) -> list[NodeMarks]:
        """Every node holding a mark of rollcall's, by name."""
        ...

    @classmethod
    def clear_marks(cls, options: Any, session: BackendSettings, names: Sequence[str]) -> MarkReport:
        """Clear every mark of rollcall's from the nodes ``names`` (all that hold one where empty).

        Never another's mark: a label, taint or drain outside rollcall's own. What it did, per node.
        """
        ...


__all__ = ["ListsMarks", "NodeMarks"]
