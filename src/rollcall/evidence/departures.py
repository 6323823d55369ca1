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

- **its node's monitor** (``rank_process`` ``gone``, :class:`~rollcall.ranklog.RankProcessHeard`): the
  monitor saw the rank's process alive at one look and gone at the next, however it left (``os._exit(0)``
  in a library after the first epoch included, which says nothing and leaves no record of its own). It knows
  no status, only the interval the process left in; it counts while the rank had not completed and before
  the suite asked the job to end (its line read before then, on the suite's clock), and only as a
  candidate for the first failure (it left before every error of the run's own, or while one came: the
  order is then undecided, and both are named). The ranks the launcher stopped after another failed leave
  later than that error and are its echoes, not departures.

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

from rollcall.ranklog import RankProcessHeard, RankReport

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
    #: Seen by its node's monitor only: the first look that saw it gone (``time``: the last that saw it
    #: alive, the earliest it may have left), on its node's wall clock. None for the other records.
    gone_at: float | None = None

    def how(self) -> str:
        """``left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), before complete``."""
        if self.gone_at is not None and self.time is not None:
            span = f"between {_clock(self.time)} and {_clock(self.gone_at)}"
            after = f"after {self.last_event}" if self.last_event else "before its first event"
            return f"left {after}, before complete (its process gone {span}, seen by its node's monitor)"
        code = f"exit code {self.exit_code}" if self.exit_code is not None else "an unrecorded status"
        after = f"after {self.last_event}" if self.last_event else "before its first event"
        phase = f" (in {self.phase})" if self.phase else ""
        return f"left with {code} {after}{phase}, before complete"

    def describe(self) -> str:
        """``rank 3 (node 1) left with exit code 0 after epoch_time of epoch 1, before complete [...]``."""
        log = f"{'pod' if self.unit == 'pod' else 'log'} {self.pod}" if self.pod else ""
        when = _clock(self.time) if self.time is not None and self.gone_at is None else ""
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
            "gone_at": self.gone_at,
        }


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


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
    *,
    processes: Iterable[RankProcessHeard] = (),
    asked_to_end: float | None = None,
) -> list[Departure]:
    """Every rank that left before ``complete`` without an error, earliest first (see the module docstring).

    ``terminations`` are the launcher's records of its workers (a record without a rank is a pod's or a
    node's, and names no rank); ``node`` places a rank on its node; ``processes`` the nodes' monitors' lines
    of the ranks' processes, ``asked_to_end`` when the suite asked the job to end, on the clock it read them
    on (None: it did not).
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
    recorded = {t.rank for t in terminations if t.rank is not None}
    for p in processes:
        said = reports.get(p.rank)
        if (
            p.state != "gone"
            or p.rank in found
            or p.rank in recorded
            or p.alive_at is None
            or p.gone_at is None
            or (said is not None and (said.complete or said.errors or said.exited is not None))
            or (asked_to_end is not None and (p.received is None or p.received >= asked_to_end))
        ):
            continue
        last = last_event(said) if said is not None else None
        pod = min(said.sources) if said is not None and said.sources else p.source
        found[p.rank] = Departure(
            p.rank, node(p.rank), None, p.alive_at, last, "", pod, False, unit, p.gone_at
        )
    return sorted(found.values(), key=lambda d: (d.time is None, d.time or 0.0, d.rank))
