"""What each event changes in the roll call: one keeper per record of the contract, in :data:`KEEPERS`.

A keeper takes a record as read from one log and keeps what it says: a rank's event in the rank's
:class:`~rollcall.ranklog.report.RankReport` (and, where it carries a time, a mark for the timeline), a line
of the node's monitor that names no rank (``launcher``, ``gpu_event``) in the roll call's own lists. Every
event of the contract has one; a unit test holds that.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rollcall.ranges import parse_ranges, ranges
from rollcall.ranklog.report import (
    MARKED_EVENTS,
    BandwidthRecord,
    CollectiveMismatch,
    CompileCache,
    Exited,
    FlightRecord,
    Frame,
    GpuHeard,
    LauncherHeard,
    Mark,
    Part,
    RankError,
    RankProcessHeard,
    RankReport,
    Sampled,
    Silence,
    StackDump,
    ThreadStack,
)
from rollcall_workload.contract import (
    ABSENT,
    Bandwidth,
    Collectives,
    Complete,
    EpochTime,
    Error,
    Event,
    Exit,
    Facts,
    GpuEvent,
    Kernels,
    Launcher,
    RankProcess,
    Resumed,
    Samples,
    Silent,
    Stack,
    Start,
    Throughput,
)


class Heard(Protocol):
    """Where the records go: the roll call (:class:`rollcall.ranklog.parser.RollCall`)."""

    gpu_events: list[GpuHeard]
    launchers: list[LauncherHeard]
    processes: list[RankProcessHeard]
    records: int
    #: The suite's clock when the piece of log being read arrived.
    now: float

    def rank(self, rank: int) -> RankReport:
        """The report of ``rank``, created on first use."""
        ...

    def note(self, part: Part) -> None:
        """That a line of ``part`` was read now."""
        ...


@dataclass(frozen=True)
class Said:
    """Where a record was read: its log, and its whole decoded object for the events kept whole."""

    source: str
    obj: dict[str, Any] | None = None

    def rank(self, heard: Heard, rec: Event, label: str | None = None) -> RankReport:
        """The report of the record's rank, with the record counted, its log and its mark (``label``)."""
        report = heard.rank(rec.rank)
        report.sources.add(self.source)
        heard.records += 1
        heard.note(("rank", rec.rank))
        if rec.world_size is not None:
            report.world_size = rec.world_size
        stamp = _stamp(rec.time)
        if stamp is not None and rec.event in MARKED_EVENTS:
            label = label or rec.event
            report.marks[label] = Mark(rec.event, label, stamp)
        return report

    def beyond_envelope(self) -> dict[str, Any]:
        """Every field of the whole object but the envelope's, as it was written."""
        return {k: v for k, v in (self.obj or {}).items() if k not in _ENVELOPE}


#: What keeps one record read from a log: (where it goes, the record, where it was read).
Keeper = Callable[[Heard, Any, Said], None]
_ENVELOPE = frozenset({"event", "rank", "world_size", "time"})


def _launcher(heard: Heard, rec: Launcher, said: Said) -> None:
    heard.launchers.append(
        LauncherHeard(
            rec.state,
            rec.node_rank,
            rec.node,
            rec.pid,
            _number(rec.waited_s),
            _number(rec.bound_s),
            rec.process_state,
            rec.process_state_name,
            _stamp(rec.time),
            said.source,
            _number(rec.state_held_s),
            heard.now,
        )
    )
    heard.records += 1
    heard.note(("node", rec.node_rank))


def _rank_process(heard: Heard, rec: RankProcess, said: Said) -> None:
    """A rank's process seen or gone: the rank is heard from (and its node, where the line says it)."""
    heard.processes.append(
        RankProcessHeard(
            rec.state,
            rec.rank,
            rec.pid,
            rec.node_rank,
            rec.local_rank,
            rec.visible_devices,
            _stamp(rec.alive_at),
            _stamp(rec.gone_at),
            _stamp(rec.time),
            said.source,
            heard.now,
            rec.node,
        )
    )
    heard.records += 1
    heard.note(("rank", rec.rank))
    if rec.node_rank is not None:
        heard.note(("node", rec.node_rank))


def _gpu_event(heard: Heard, rec: GpuEvent, said: Said) -> None:
    heard.gpu_events.append(
        GpuHeard(
            rec.kind,
            rec.gpu,
            rec.uuid,
            rec.serial,
            rec.node,
            rec.xid,
            rec.event_type,
            rec.data,
            rec.reason,
            _stamp(rec.time),
            said.source,
        )
    )
    heard.records += 1


def _start(heard: Heard, rec: Start, said: Said) -> None:
    report = said.rank(heard, rec)
    report.start = said.beyond_envelope()
    report.kernels = rec.kernels or report.kernels


def _kernels(heard: Heard, rec: Kernels, said: Said) -> None:
    said.rank(heard, rec).kernels = rec.kernels


def _epoch_time(heard: Heard, rec: EpochTime, said: Said) -> None:
    """An epoch's time, and its loss (null: not finite, kept as NaN), steps and digest, where sound."""
    report = said.rank(heard, rec, f"epoch {rec.epoch}")
    report.epoch_times[rec.epoch] = rec.seconds
    if rec.loss is not ABSENT:
        report.losses[rec.epoch] = math.nan if rec.loss is None else rec.loss
    if rec.steps is not None:
        report.epoch_steps[rec.epoch] = rec.steps
    if rec.param_digest is not None:
        report.digests[rec.epoch] = rec.param_digest


def _throughput(heard: Heard, rec: Throughput, said: Said) -> None:
    report = said.rank(heard, rec)
    report.throughput = rec.samples_per_sec
    report.details.update(said.beyond_envelope())
    report.compute_ms = rec.compute_ms
    report.compute_ms_p90 = rec.compute_ms_p90
    report.compile_cache = (
        None
        if rec.compile_cache is None
        else CompileCache(rec.compile_cache, rec.compile_s, rec.compile_cache_hits, rec.compile_cache_misses)
    )


def _bandwidth(heard: Heard, rec: Bandwidth, said: Said) -> None:
    """A group's bandwidth, kept only when its groups parse and its size is positive."""
    ranks_, nodes = parse_ranges(rec.ranks), parse_ranges(rec.nodes)
    if ranks_ is None or nodes is None or rec.bytes <= 0:
        return
    band = BandwidthRecord(
        rec.scope,
        ranks_,
        nodes,
        rec.bytes,
        rec.algbw_gbps,
        rec.busbw_gbps,
        rec.seconds,
        checked=rec.checked,
        mismatch=_mismatch(rec.mismatch),
        # a sweep counts only whole: every size positive
        sweep=rec.sweep if all(b > 0 for b, _ in rec.sweep) else (),
    )
    said.rank(heard, rec, _bandwidth_label(band.scope, band.nodes)).bandwidth[band.key] = band


def _facts(heard: Heard, rec: Facts, said: Said) -> None:
    report = said.rank(heard, rec)
    report.facts = {k: v for k, v in said.beyond_envelope().items() if k != "unknown"}
    report.unknown = rec.unknown


def _samples(heard: Heard, rec: Samples, said: Said) -> None:
    """The GPU sampled while the rank trained, kept where it read anything."""
    report = said.rank(heard, rec)
    if rec.samples > 0:
        report.samples = Sampled(
            rec.samples,
            rec.clock_events_share,
            rec.sm_clock_mhz_median,
            rec.pcie_gen_min,
            rec.pcie_gen_max,
            rec.pcie_width_min,
            rec.pcie_width_max,
        )


def _complete(heard: Heard, rec: Complete, said: Said) -> None:
    report = said.rank(heard, rec)
    report.complete = True
    if rec.param_digest is not None:
        report.final_digest = rec.param_digest


def _error(heard: Heard, rec: Error, said: Said) -> None:
    said.rank(heard, rec).errors.append(RankError(rec.message, _stamp(rec.time), said.source))


def _exit(heard: Heard, rec: Exit, said: Said) -> None:
    said.rank(heard, rec).exited = Exited(rec.code, rec.phase, _stamp(rec.time), said.source)


def _stack(heard: Heard, rec: Stack, said: Said) -> None:
    """One ``stack`` event, kept in the rank's current dump (see :mod:`rollcall.ranklog`)."""
    report = said.rank(heard, rec, f"stacks {rec.dump}")
    dump = rec.dump
    if dump <= report.resumed:
        return
    stall = report.stall
    if stall is not None and dump < stall.dump:
        return
    if stall is None or dump > stall.dump:
        stall = report.stall = StackDump(
            dump,
            rec.phase,
            rec.stalled_s,
            rec.hang_after,
            time=_stamp(rec.time),
            source=rec.source,
            gpu=rec.gpu,
            gpu_pending_s=rec.gpu_pending_s,
        )
    thread = ThreadStack(rec.thread, rec.main, tuple(Frame(*f) for f in rec.frames), rec.dropped)
    stall.threads = [t for t in stall.threads if t.thread != thread.thread] + [thread]


def _resumed(heard: Heard, rec: Resumed, said: Said) -> None:
    report = said.rank(heard, rec)
    report.resumed = max(report.resumed, rec.dump)
    report.silent = None
    if report.stall is not None and report.stall.dump <= report.resumed:
        report.stall = None
    if report.flight is not None and report.flight.dump <= report.resumed:
        report.flight = None


def _collectives(heard: Heard, rec: Collectives, said: Said) -> None:
    """A stalled rank's flight record: kept until a ``resumed`` past its dump withdraws it."""
    report = said.rank(heard, rec)
    if rec.dump <= report.resumed:
        return
    members = {name: m for name, text in rec.members.items() if (m := parse_ranges(text)) is not None}
    report.flight = FlightRecord(
        rec.dump,
        {name: tuple(tail) for name, tail in rec.tails.items()},
        dict(rec.labels),
        members,
        rec.available,
        rec.why,
        rec.entries,
        rec.wrapped,
        rec.file,
        said.source,
    )


def _silent(heard: Heard, rec: Silent, said: Said) -> None:
    said.rank(heard, rec).silent = Silence(
        rec.phase,
        rec.steps,
        rec.stalled_s,
        rec.heartbeat_s,
        rec.hang_after,
        rec.margin_s,
        rec.pid,
        rec.state,
        rec.state_name,
        _stamp(rec.time),
        rec.gpu,
        rec.gpu_uuid,
        rec.gpu_busy_pct,
        rec.gpu_reads,
        rec.gpu_confirm_s,
    )


#: Each record of the contract, and what keeps it.
KEEPERS: dict[type[Event], Keeper] = {
    Start: _start,
    Kernels: _kernels,
    EpochTime: _epoch_time,
    Throughput: _throughput,
    Bandwidth: _bandwidth,
    Facts: _facts,
    Samples: _samples,
    Complete: _complete,
    Error: _error,
    Exit: _exit,
    Stack: _stack,
    Resumed: _resumed,
    Collectives: _collectives,
    Silent: _silent,
    Launcher: _launcher,
    GpuEvent: _gpu_event,
    RankProcess: _rank_process,
}


def keep(heard: Heard, rec: Event, said: Said) -> None:
    """Keep one record read from a log (a record of no keeper's is a bug: :data:`KEEPERS` lacks it)."""
    KEEPERS[type(rec)](heard, rec, said)


@functools.lru_cache(maxsize=1 << 14)
def _bandwidth_label(scope: str, nodes: tuple[int, ...]) -> str:
    """A bandwidth mark's label, ``bandwidth pair 3-4``: made once per group, not once per member."""
    return f"bandwidth {scope} {ranges(nodes)}"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mismatch(value: dict[str, Any] | None) -> CollectiveMismatch | None:
    """A ``bandwidth`` record's ``mismatch`` (an object), its garbled fields None; None when there is none."""
    if value is None:
        return None
    return CollectiveMismatch(
        iters=_count(value.get("iters")),
        elements=_count(value.get("elements")),
        index=_count(value.get("index")),
        expected=_number(value.get("expected")),
        got=_number(value.get("got")),
    )


def _stamp(time: float | None) -> float | None:
    """A record's ``time``, where it is a finite number."""
    return time if time is not None and math.isfinite(time) else None


def _number(value: object) -> float | None:
    """A JSON number as float; NaN and infinities are kept (the verdict rejects them), strings are not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
