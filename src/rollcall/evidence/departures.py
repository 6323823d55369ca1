"""The first to leave: a rank whose process ended before ``complete`` without an error of its own, any status.

A rank that ends early (a ``return`` or ``sys.exit`` in its code, status 0 included) breaks every collective
it is part of: the others then fail with connection errors, echoes of its leaving. Two records say it left:

- **its own ``exit`` event** (:class:`rollcall.ranklog.Exited`), which the workload writes on its way out
  when it ends without ``complete`` and without ``error``: the status it ends with, the phase it was in
  (the watchdog's) and when. It comes through the rank's log, so every backend reads it, whatever records
  its launcher or runtime keep (a Kubernetes Job's failure policy acts on non-zero exits only; a container
  that exits 0 is not a failure there).
- **the launcher's record of the worker** (:mod:`rollcall.torchrun`): torchrun records a worker's status
  when it failed (``FAILED``), and 0 when every worker of its node ended with 0 (``SUCCEEDED``); a worker
  that ended 0 while another of its node failed is recorded as ``TERMINATED``, without a status, like one
  the agent stopped, and is no departure here. This covers a process that ended without running Python's
  exit path (``os._exit`` in a library), or a workload that does not say ``exit``.

A signal is not a departure: a process killed from outside is a
:class:`~rollcall.evidence.endings.Termination`, and the launcher's SIGTERM to the others an echo. A
status above 128 is a signal's, by the shell's convention, and stays a termination too.

:mod:`rollcall.evidence.rootcause` puts each departure into the order of the run's failures at its time: one
before every own error is the root cause, ahead of the errors that came after it. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from rollcall.ranklog import RankReport

#: The highest status that is a process's own: above it, a shell or runtime reports a signal (128 + n).
MAX_OWN_STATUS = 128


class WorkerEnd(Protocol):
    """What a launcher's record of a worker tells (a :class:`~rollcall.evidence.endings.Termination`)."""

    @property
    def pod(self) -> str:
        """Its log: a pod's, or a local node's."""

    @property
    def rank(self) -> int | None:
        """The worker's global rank; None for a pod's or a node's record."""

    @property
    def exit_code(self) -> int | None:
        """Its status (negative: a signal's); None when not recorded."""

    @property
    def time(self) -> float | None:
        """When it ended, epoch seconds, where stamped."""


@dataclass(frozen=True)
class Departure:
    """A rank that left before ``complete`` without an error of its own.

    Attributes:
        rank: the rank.
        node: its node.
        exit_code: the status it ended with (0 included); None when no record says it.
        time: when it left (its ``exit`` event's time; the launcher's record's, where stamped), epoch seconds.
        last_event: the last event it said before it left (``epoch_time of epoch 1``), None when none.
        phase: what it was doing then, as its watchdog named it (``epoch 1 end``); empty when unknown.
        pod: its log (a pod's, or a local node's).
        said: whether the rank said ``exit`` itself (its own code ended it); else only its launcher said so.
        unit: what ran the rank's agent: ``pod`` or ``node`` (:data:`rollcall.evidence.endings.UNITS`).
    """

    rank: int
    node: int
    exit_code: int | None
    time: float | None = None
    last_event: str | None = None
    phase: str = ""
    pod: str | None = None
    said: bool = True
    unit: str = "pod"

    def how(self) -> str:
        """``left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), before complete``."""
        code = f"exit code {self.exit_code}" if self.exit_code is not None else "an unrecorded status"
        after = f"after {self.last_event}" if self.last_event else "before its first event"
        phase = f" (in {self.phase})" if self.phase else ""
        return f"left with {code} {after}{phase}, before complete"

    def describe(self) -> str:
        """``rank 3 (node 1) left with exit code 0 after epoch_time of epoch 1, before complete [...]``."""
        log = f"{'pod' if self.unit == 'pod' else 'log'} {self.pod}" if self.pod else ""
        when = (
            datetime.fromtimestamp(self.time, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"
            if self.time is not None
            else ""
        )
        where = ", ".join(w for w in (log, when) if w)
        return f"rank {self.rank} (node {self.node}) {self.how()}" + (f" [{where}]" if where else "")

    def as_dict(self) -> dict[str, Any]:
        """The departure, JSON-ready."""
        return {
            "rank": self.rank,
            "node": self.node,
            "exit_code": self.exit_code,
            "time": self.time,
            "last_event": self.last_event,
            "phase": self.phase,
            "pod": self.pod,
            "said": self.said,
        }


def last_event(report: RankReport) -> str | None:
    """The rank's last event, by time: ``epoch_time of epoch 1``, ``start``, ``bandwidth world 0``."""
    marks = [m for m in report.marks.values() if m.event not in ("error", "exit", "stack")]
    if marks:
        last = max(marks, key=lambda m: m.time)
        if last.event == "epoch_time":
            return f"epoch_time of {last.label}"
        return last.label
    if report.epoch_times:  # events without a time: the furthest one it said
        return f"epoch_time of epoch {max(report.epoch_times)}"
    return "start" if report.start is not None else None


def departures(
    reports: Mapping[int, RankReport],
    terminations: Iterable[WorkerEnd],
    node: Callable[[int], int],
    unit: str = "pod",
) -> list[Departure]:
    """Every rank that left before ``complete`` without an error, earliest first (see the module docstring).

    ``terminations`` are the launcher's records of its workers (a record without a rank is a pod's or a
    node's, and names no rank); ``node`` places a rank on its node.
    """
    found: dict[int, Departure] = {}
    for rank, report in reports.items():
        ex = report.exited
        if ex is None or report.complete or report.errors:
            continue
        found[rank] = Departure(
            rank, node(rank), ex.code, ex.time, last_event(report), ex.phase, ex.source or None, True, unit
        )
    for t in terminations:
        worker, code = t.rank, t.exit_code
        if worker is None or worker in found or code is None or not 0 <= code <= MAX_OWN_STATUS:
            continue
        said = reports.get(worker)
        if said is not None and (said.complete or said.errors):
            continue
        pod = min(said.sources) if said is not None and said.sources else t.pod
        last = last_event(said) if said is not None else None
        found[worker] = Departure(worker, node(worker), code, t.time, last, "", pod, False, unit)
    return sorted(found.values(), key=lambda d: (d.time is None, d.time or 0.0, d.rank))
