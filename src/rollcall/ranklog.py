"""The rank-log contract and its streaming parser.

Every rank of the workload prints one line per event, written with a single ``write`` and flushed::

    ROLLCALL {"event":"start","rank":3,"local_rank":3,"node_rank":0,"world_size":64,"host":"h","device":"cuda:3"}
    ROLLCALL {"event":"epoch_time","rank":3,"world_size":64,"epoch":1,"seconds":0.31,"steps":50,"loss":9.71,"param_digest":"9f86d081884c7d65"}
    ROLLCALL {"event":"throughput","rank":3,"world_size":64,"samples_per_sec":49.97,"compute_ms":41.2,"compute_ms_p90":41.9}
    ROLLCALL {"event":"bandwidth","rank":3,"world_size":64,"scope":"node","ranks":"0-7","nodes":"0","bytes":67108864,"iters":20,"seconds":0.00031,"algbw_gbps":216.5,"busbw_gbps":378.9,"checked":20,"mismatch":null}
    ROLLCALL {"event":"facts","rank":3,"world_size":64,"host":"h","kernel":"6.8.0","driver":"580.159.04","unknown":{"retired_pending":"Not Supported"}}
    ROLLCALL {"event":"complete","rank":3,"world_size":64,"param_digest":"9f86d081884c7d65"}
    ROLLCALL {"event":"error","rank":3,"world_size":64,"message":"...","time":1764576001.25}
    ROLLCALL {"event":"stack","rank":3,"world_size":64,"dump":1,"thread":"MainThread","main":true,"threads":2,"phase":"epoch 2 barrier","stalled_s":61.0,"hang_after":60.0,"frames":[["train.py",1490,"run","acc.barrier(...)",true]],"dropped":0}
    ROLLCALL {"event":"resumed","rank":3,"world_size":64,"dump":1,"stalled_s":75.2,"phase":"epoch 2 step 1"}

Every event of the workload carries ``time`` (wall clock, seconds since the epoch); each rank keeps, per event
(per epoch, per bandwidth group), when it said it last (:attr:`RankReport.marks`), for the page's timeline.

A rank answers the roll call when it reported ``throughput``, at least one ``epoch_time`` and ``complete``;
``compute_ms`` / ``compute_ms_p90`` (this rank's compute per step, without communication) and ``bandwidth``
(one per all-reduce group the rank was in) are optional figures. So are the proofs that the rank trained
correctly: each epoch's ``loss`` and ``steps``, the ``param_digest`` of its parameters after each epoch and at
``complete`` (a replica that diverged has another), and each ``bandwidth`` record's check of what the rank
received (``checked``, and a ``mismatch`` when a result was not the exact sum).

Each event is read through its record in :mod:`rollcall_workload.contract` (``docs/contract.md``): a line as the
workload writes it is decoded straight into its record by msgspec; any other is decoded as JSON and taken through
the same record (:func:`rollcall_workload.contract.read`), with the same result.

Parsing rules:

- anything may stand before the marker (torchrun's ``[default3]:`` prefix, RFC 3339 timestamps, ANSI colour);
- one physical line may hold several markers (processes' writes interleaved): each complete object counts;
- a record counts only when its JSON object parses completely, so a truncated number never becomes a value;
- CRLF endings are fine; a repeated event (a restarted worker, or the same epoch again) keeps the last record;
- an optional field of the wrong type is dropped, never the record: a ``throughput`` whose ``compute_ms`` is not
  a number still counts (without a compute time);
- a ``loss`` of null is a loss that was not finite (the workload writes NaN and infinities as null): it is kept
  as NaN; a ``param_digest`` counts when it is a string;
- a ``mismatch`` counts when it is an object; each of its fields that is not a number is None (a wrong
  result is never dropped for a garbled detail);
- a ``bandwidth`` record counts only when whole: ``scope`` one of world/node/pair, ``ranks`` and ``nodes``
  compact ranges (``"0-7,16"``), ``bytes`` a positive integer and ``algbw_gbps``, ``busbw_gbps`` numbers; one is
  kept per rank and group (scope and nodes), the last;
- ``stack`` events (the workload's watchdog found the rank stalled) are kept per dump: a dump with a higher
  ``dump`` number replaces the one before, a ``resumed`` event withdraws every dump up to its number (the rank
  made progress again), and a stack event of a withdrawn dump is ignored; a frame counts only when whole
  (``[file, line, function, code, own]``), and a stack event without a ``dump`` number or a thread is dropped;
  a dump's ``source`` says who took it (the rank's watchdog, or faulthandler's timer read by the node's
  monitor);
- a ``silent`` event (the node's monitor found the rank's heartbeat and progress stopped while its process
  lives) is kept, the last one, as :attr:`RankReport.silent`, until a ``resumed`` withdraws it;
- a ``throughput``'s ``compile_cache`` (``hit``, ``miss`` or ``off``: what the first step, which compiles, found
  in the compiler's cache) is kept as :attr:`RankReport.compile_cache` with ``compile_s`` and the cache's hit and
  miss counts (each None unless a number); any other value is no compile-cache report;
- a ``facts`` event (what the rank read about its device and stack) is kept whole, the last one, as
  :attr:`RankReport.facts`: each fact under its name, and ``unknown`` (fact name to the reason it could not be
  read; dropped unless a mapping of text to text) apart, as :attr:`RankReport.unknown`;
- the legacy aws-k8s-tester Neuron format is read too (``auto``: up to the log's first rollcall record at
  least, in the piece of the log that holds it; after that piece the log is read as the rollcall
  workload's, one scan instead of two), where one line carries both values::

      [Rank 12] - local_samples=100.0, total_time=2.00s, local_throughput=50.00 samples/s, local_avg_epoch_time=0.40s
      [Rank 12] training complete. Exiting main().

  and each value counts only if it is complete up to and including its unit (a line cut inside the epoch
  time still gives the throughput before it).

Each log (one pod, one node) gets its own :class:`LogParser`, fed in chunks as bytes arrive; all of them write
into one :class:`RollCall`, which knows, for every rank, what it reported and in which log.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import msgspec

from rollcall.ranges import parse_ranges, ranges
from rollcall_workload import contract
from rollcall_workload.contract import (
    ABSENT,
    EVENT_PREFIX,
    REQUIRED_EVENTS,
    Bandwidth,
    CompileCacheState,
    Complete,
    EpochTime,
    Error,
    Event,
    Exit,
    Facts,
    GpuEvent,
    Kernels,
    Resumed,
    Silent,
    Stack,
    Start,
    Throughput,
)
from rollcall_workload.contract.node import Launcher

#: The workload's marker, events and their vocabularies: declared once, by the contract.
MARKER = EVENT_PREFIX.encode()
LEGACY_MARKER = b"[Rank "

Format = Literal["auto", "rollcall", "neuron-legacy"]
FORMATS: tuple[Format, ...] = ("auto", "rollcall", "neuron-legacy")

_NUM = rb"(\d+(?:\.\d+)?)"
# Each value counts when it is complete up to and including its unit: a line cut after the throughput's
# "samples/s" still gives the throughput, and its epoch time only when that is whole too.
_LEGACY_METRICS = re.compile(
    rb"\[Rank (\d+)\] - local_samples="
    + _NUM
    + rb", total_time="
    + _NUM
    + rb"s, local_throughput="
    + _NUM
    + rb" samples/s(?:, local_avg_epoch_time="
    + _NUM
    + rb"s)?"
)
_LEGACY_COMPLETE = re.compile(rb"\[Rank (\d+)\] training complete")
_DECODER = json.JSONDecoder()
#: Events whose every field is kept, the records' and any other (``start``, ``throughput``'s details,
#: ``facts``): read from the whole decoded object. Every other event is decoded straight into its record.
_WHOLE = frozenset({"start", "throughput", "facts"})
#: How the workload begins each line's object: the event's name comes first.
_SNIFF = b'{"event":"'
_TYPED: dict[bytes, tuple[msgspec.json.Decoder[Any], str]] = {
    name.encode(): (msgspec.json.Decoder(record), name)
    for name, record in contract.EVENTS.items()
    if name not in _WHOLE
}
_CHUNK = 1 << 20
# A line longer than this without a newline is parsed in pieces; a record never gets near it.
_MAX_PENDING = 8 << 20
_KEEP_TAIL = 64 << 10


@dataclass(frozen=True)
class RankError:
    """One ``error`` event: its message and its wall-clock time (epoch seconds; None when unstamped)."""

    message: str
    time: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Exited:
    """One ``exit`` event: the rank's process ended before ``complete`` without an error (it left early)."""

    code: int
    phase: str = ""
    time: float | None = None
    source: str = ""


@dataclass(frozen=True)
class CollectiveMismatch:
    """What one rank received wrong from one group's timed all-reduces (a ``bandwidth`` record's ``mismatch``).

    Attributes:
        iters: timed all-reduces whose result was wrong.
        elements: wrong elements in the first wrong result.
        index: the first wrong element's index.
        expected: that element's exact sum.
        got: what the rank received there.
    """

    iters: int | None = None
    elements: int | None = None
    index: int | None = None
    expected: float | None = None
    got: float | None = None


@dataclass(frozen=True)
class Mark:
    """When a rank said one event: ``event`` its name, ``label`` which one (``epoch 2``), ``time`` epoch seconds."""

    event: str
    label: str
    time: float


#: The events a rank's timeline shows (:attr:`RankReport.marks`), in the order a rank says them.
MARKED_EVENTS: tuple[str, ...] = (
    "start",
    "epoch_time",
    "throughput",
    "bandwidth",
    "complete",
    "error",
    "exit",
    "stack",
)


@dataclass(frozen=True)
class CompileCache:
    """Whether a rank's compile came from the compiler's cache, and what the compile cost.

    Attributes:
        state: ``hit`` (every graph compiled came from the cache), ``miss`` (at least one was compiled afresh)
            or ``off`` (nothing was compiled).
        compile_s: seconds of the first step, the one that compiles.
        hits: graphs the cache answered by then (None when ``off``).
        misses: graphs compiled past the cache by then (None when ``off``).
    """

    state: CompileCacheState
    compile_s: float | None = None
    hits: int | None = None
    misses: int | None = None


@dataclass(frozen=True)
class BandwidthRecord:
    """One rank's measure of one all-reduce group (a ``bandwidth`` event)."""

    scope: str
    ranks: tuple[int, ...]
    nodes: tuple[int, ...]
    bytes: int
    algbw_gbps: float
    busbw_gbps: float
    seconds: float | None = None
    #: Timed all-reduces whose result the rank checked (None: the workload checks none).
    checked: int | None = None
    mismatch: CollectiveMismatch | None = None
    #: ``(bytes, busbw_gbps)`` of each size of a sweep (``--bandwidth-sizes``), smallest first; else empty.
    sweep: tuple[tuple[int, float], ...] = ()

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """The group: its scope and nodes."""
        return self.scope, self.nodes


@dataclass(frozen=True)
class Frame:
    """One frame of a thread's Python stack; ``own`` marks a file of the workload itself."""

    file: str
    line: int
    function: str
    code: str = ""
    own: bool = False

    def __str__(self) -> str:
        code = f": {self.code}" if self.code else ""
        return f"{self.file}:{self.line} in {self.function}{code}"


@dataclass(frozen=True)
class ThreadStack:
    """One thread of a dump: its name, whether it trains (the main thread), its frames outermost first."""

    thread: str
    main: bool
    frames: tuple[Frame, ...]
    dropped: int = 0


@dataclass
class StackDump:
    """One dump of a stalled rank's threads (``stack`` events of one ``dump`` number)."""

    dump: int
    phase: str = ""
    stalled_s: float | None = None
    hang_after: float | None = None
    threads: list[ThreadStack] = field(default_factory=list)
    #: When the dump was taken (its first ``stack`` event's time), None when unstamped.
    time: float | None = None
    #: Who took it: "" the rank's own watchdog, "faulthandler" its C-level timer (no Python could run).
    source: str = ""
    #: On cuda, the rank's CUDA device and the seconds its oldest unfinished work had waited then (0.0: the
    #: GPU had finished all of it); None where the dump says nothing of a GPU.
    gpu: int | None = None
    gpu_pending_s: float | None = None

    @property
    def since(self) -> float | None:
        """When the rank last made progress: the dump's time less the seconds it had been stalled."""
        return self.time - self.stalled_s if self.time is not None and self.stalled_s is not None else None

    @property
    def main(self) -> ThreadStack | None:
        """The thread that trains, when the dump holds it."""
        return next((t for t in self.threads if t.main), None)


@dataclass(frozen=True)
class Silence:
    """A rank the node's monitor found silent (a ``silent`` event): no heartbeat, no progress, process alive.

    Attributes:
        phase: the phase its last heartbeat named.
        stalled_s: seconds since its last step or phase completed, when the monitor said so.
        heartbeat_s: seconds since its last heartbeat then.
        hang_after: the rank's bound; margin_s: the monitor's margin past it.
        pid: its process; state: the letter of its process state (``T`` stopped, ``D`` uninterruptible
            sleep), ``state_name`` the same in words; empty where the node cannot tell.
        time: when the monitor said it (epoch seconds).
    """

    phase: str = ""
    steps: int | None = None
    stalled_s: float | None = None
    heartbeat_s: float | None = None
    hang_after: float | None = None
    margin_s: float | None = None
    pid: int | None = None
    state: str = ""
    state_name: str = ""
    time: float | None = None


@dataclass
class RankReport:
    """Everything one rank said, merged over every log it appeared in."""

    rank: int
    throughput: float | None = None
    epoch_times: dict[int, float] = field(default_factory=dict)
    complete: bool = False
    start: dict[str, Any] | None = None
    errors: list[RankError] = field(default_factory=list)
    #: Its ``exit`` event: it ended before ``complete`` without an error, with this status (None: it did not).
    exited: Exited | None = None
    details: dict[str, Any] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    world_size: int | None = None
    #: Median and 90th percentile of this rank's compute per step without communication (ms).
    compute_ms: float | None = None
    compute_ms_p90: float | None = None
    bandwidth: dict[tuple[str, tuple[int, ...]], BandwidthRecord] = field(default_factory=dict)
    #: The watchdog's last dump of this rank that no ``resumed`` withdrew: the rank is stalled.
    stall: StackDump | None = None
    #: The highest dump number a ``resumed`` event withdrew.
    resumed: int = 0
    #: The node's monitor found the rank silent (and no ``resumed`` came since).
    silent: Silence | None = None
    #: Each timed epoch's loss (NaN when the rank reported it not finite) and steps, by epoch.
    losses: dict[int, float] = field(default_factory=dict)
    epoch_steps: dict[int, int] = field(default_factory=dict)
    #: The digest of the rank's parameters after each timed epoch, by epoch, and at ``complete``.
    digests: dict[int, str] = field(default_factory=dict)
    final_digest: str | None = None
    #: When it said each of :data:`MARKED_EVENTS` that carried a ``time``, by label (the last of each).
    marks: dict[str, Mark] = field(default_factory=dict)
    #: What the rank's ``facts`` event read about its device and stack (None without one), and the facts
    #: it could not read, each with why.
    facts: dict[str, Any] | None = None
    unknown: dict[str, str] = field(default_factory=dict)
    #: What the first step found in the compiler's cache (None: the rank did not say).
    compile_cache: CompileCache | None = None
    #: Each of the workload's own kernels' state (``on: ...`` or ``off: ...``), as its ``start`` chose them
    #: and its ``kernels`` event, after the ranks' checks, settled them.
    kernels: dict[str, str] = field(default_factory=dict)

    @property
    def epoch_time(self) -> float | None:
        """Mean over the distinct epochs this rank timed, or None when it timed none."""
        if not self.epoch_times:
            return None
        return math.fsum(self.epoch_times.values()) / len(self.epoch_times)

    @property
    def node_rank(self) -> int | None:
        """The node this rank said it ran on, from its ``start`` event."""
        value = (self.start or {}).get("node_rank")
        return value if isinstance(value, int) else None

    def has(self, event: str) -> bool:
        """Whether this rank reported ``event`` (one of :data:`REQUIRED_EVENTS`)."""
        if event == "throughput":
            return self.throughput is not None
        if event == "epoch_time":
            return bool(self.epoch_times)
        if event == "complete":
            return self.complete
        raise ValueError(f"unknown event {event!r}; expected one of {', '.join(REQUIRED_EVENTS)}")


@dataclass(frozen=True)
class GpuHeard:
    """A ``gpu_event`` the node's monitor wrote: what one GPU of the node said during the run, and the log."""

    kind: str
    gpu: int
    uuid: str | None
    serial: str | None
    node: str | None
    xid: int | None
    event_type: int | None
    data: int | None
    reason: str
    time: float | None
    source: str


@dataclass(frozen=True)
class LauncherHeard:
    """A ``launcher`` line the node's monitor wrote: the node's launcher started, waiting, or past it."""

    state: str
    node_rank: int
    node: str | None
    pid: int | None
    waited_s: float | None
    bound_s: float | None
    process_state: str
    process_state_name: str
    time: float | None
    source: str


@dataclass
class RollCall:
    """The ranks heard from, keyed by global rank; the nodes' monitors' GPU and launcher lines, in order."""

    ranks: dict[int, RankReport] = field(default_factory=dict)
    gpu_events: list[GpuHeard] = field(default_factory=list)
    launchers: list[LauncherHeard] = field(default_factory=list)
    records: int = 0
    bytes_read: int = 0

    def rank(self, rank: int) -> RankReport:
        """The report of ``rank``, created on first use."""
        report = self.ranks.get(rank)
        if report is None:
            report = self.ranks[rank] = RankReport(rank)
        return report

    def parser(self, source: str, fmt: Format = "auto") -> LogParser:
        """A parser for one log (one pod or node) that records into this roll call."""
        return LogParser(self, source, fmt)

    def read_file(self, path: str | Path, fmt: Format = "auto", source: str | None = None) -> None:
        """Parse one log file, streaming it in chunks."""
        with open(path, "rb") as stream:
            self.read_stream(stream, source or Path(path).name, fmt)

    def read_stream(self, stream: IO[bytes], source: str, fmt: Format = "auto") -> None:
        """Parse one binary stream to its end."""
        parser = self.parser(source, fmt)
        while chunk := stream.read(_CHUNK):
            parser.feed(chunk)
        parser.close()

    def missing(self, world_size: int) -> dict[str, list[int]]:
        """For each required event, the ranks in ``0..world_size-1`` that did not report it."""
        return {
            event: [r for r in range(world_size) if r not in self.ranks or not self.ranks[r].has(event)]
            for event in REQUIRED_EVENTS
        }

    def unexpected(self, world_size: int) -> list[int]:
        """Ranks that reported but lie outside ``0..world_size-1``."""
        return sorted(r for r in self.ranks if not 0 <= r < world_size)


class LogParser:
    """Streaming parser of one log. Feed it bytes as they arrive, then close it."""

    def __init__(self, roll: RollCall, source: str, fmt: Format = "auto") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}")
        self.roll = roll
        self.source = source
        self._modern = fmt in ("auto", "rollcall")
        self._legacy = fmt in ("auto", "neuron-legacy")
        self._pending = b""

    def feed(self, data: bytes) -> None:
        """Parse every whole line in ``data`` (plus what was pending); keep the unfinished tail."""
        self.roll.bytes_read += len(data)
        buf = self._pending + data if self._pending else data
        end = buf.rfind(b"\n") + 1
        if end == 0 and len(buf) > _MAX_PENDING:
            end = len(buf) - _KEEP_TAIL
        self._pending = buf[end:]
        if end:
            self._scan(buf, end)

    def close(self) -> None:
        """Parse what is left: a last line without a newline still counts if its record is whole."""
        if self._pending:
            pending, self._pending = self._pending, b""
            self._scan(pending, len(pending))

    def _scan(self, buf: bytes, end: int) -> None:
        shown = False  # auto: whether this piece of the log shows it is the rollcall workload's
        if self._modern:
            before = self.roll.records
            self._scan_modern(buf, end)
            shown = self._legacy and self.roll.records != before
        if self._legacy:
            self._scan_legacy(buf, end)
        if shown:  # no legacy line follows a rollcall record: the rest of the log takes one scan, not two
            self._legacy = False

    def _scan_modern(self, buf: bytes, end: int) -> None:
        find, typed, sniff, skip = buf.find, _TYPED, _SNIFF, len(MARKER) + len(_SNIFF)
        pos = find(MARKER, 0, end)
        while pos >= 0:
            start = pos + len(MARKER)
            line_end = find(b"\n", start, end)
            if line_end < 0:
                line_end = end
            # The fast path: a line as the workload writes it, its event first, decoded into its record at
            # once. Anything else (an object that is not quite its record, a second marker after it, a value
            # JSON allows but msgspec does not) takes the slow path, which reads it as it always did.
            if buf.startswith(sniff, start):
                quote = find(b'"', pos + skip, line_end)
                known = typed.get(buf[pos + skip : quote]) if quote >= 0 else None
                if known is not None:
                    try:
                        rec = known[0].decode(buf[start:line_end])
                    except msgspec.MsgspecError:
                        rec = None
                    if rec is not None and rec.event == known[1]:
                        self._record(rec, None)
                        pos = find(MARKER, line_end, end)
                        continue
            text = buf[start:line_end].decode("utf-8", "surrogateescape")
            try:
                obj, consumed = _DECODER.raw_decode(text)
            except ValueError:
                obj, consumed = None, 0
            if isinstance(obj, dict) and (rec := contract.read(obj)) is not None:
                self._record(rec, obj)
            # Continue after the object when it parsed (a second marker may follow on the line), else just
            # after this marker: whatever followed was not a whole record.
            nxt = start + len(text[:consumed].encode("utf-8", "surrogateescape")) if consumed else start
            pos = find(MARKER, nxt, end)

    def _scan_legacy(self, buf: bytes, end: int) -> None:
        pos = buf.find(LEGACY_MARKER, 0, end)
        while pos >= 0:
            m = _LEGACY_METRICS.match(buf, pos, end)
            if m:
                report = self._rank(int(m.group(1)))
                if report is not None:
                    report.throughput = float(m.group(4))
                    if m.group(5) is not None:
                        report.epoch_times = {0: float(m.group(5))}
                    report.details.update(local_samples=float(m.group(2)), total_time=float(m.group(3)))
                    self.roll.records += 1
            else:
                c = _LEGACY_COMPLETE.match(buf, pos, end)
                if c:
                    report = self._rank(int(c.group(1)))
                    if report is not None:
                        report.complete = True
                        self.roll.records += 1
            pos = buf.find(LEGACY_MARKER, pos + len(LEGACY_MARKER), end)

    def _rank(self, rank: int) -> RankReport:
        report = self.roll.rank(rank)
        report.sources.add(self.source)
        return report

    def _record(self, rec: Event, obj: dict[str, Any] | None) -> None:
        """Keep one record (``obj``: the whole decoded object, for :data:`_WHOLE`'s events)."""
        event = rec.event
        if isinstance(rec, Launcher):  # the node's monitor's, of no rank
            self.roll.launchers.append(
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
                    self.source,
                )
            )
            self.roll.records += 1
            return
        if isinstance(rec, GpuEvent):  # the node's monitor's, of no rank
            stamp = _stamp(rec.time)
            self.roll.gpu_events.append(
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
                    stamp,
                    self.source,
                )
            )
            self.roll.records += 1
            return
        band = None
        if isinstance(rec, Bandwidth):
            band = _bandwidth(rec)
            if band is None:
                return
        report = self._rank(rec.rank)
        self.roll.records += 1
        if rec.world_size is not None:
            report.world_size = rec.world_size
        stamp = _stamp(rec.time)
        if stamp is not None and event in MARKED_EVENTS:
            label = (
                f"epoch {rec.epoch}"
                if isinstance(rec, EpochTime)
                else f"stacks {rec.dump}"
                if isinstance(rec, Stack)
                else _bandwidth_label(band.scope, band.nodes)
                if band is not None
                else event
            )
            report.marks[label] = Mark(event, label, stamp)
        if isinstance(rec, EpochTime):
            report.epoch_times[rec.epoch] = rec.seconds
            _epoch_proofs(report, rec)
        elif band is not None:
            report.bandwidth[band.key] = band
        elif isinstance(rec, Stack):
            _add_stack(report, rec)
        elif isinstance(rec, Resumed):
            report.resumed = max(report.resumed, rec.dump)
            report.silent = None
            if report.stall is not None and report.stall.dump <= report.resumed:
                report.stall = None
        elif isinstance(rec, Silent):
            report.silent = Silence(
                rec.phase,
                rec.steps,
                rec.stalled_s,
                rec.heartbeat_s,
                rec.hang_after,
                rec.margin_s,
                rec.pid,
                rec.state,
                rec.state_name,
                stamp,
            )
        elif isinstance(rec, Throughput):
            report.throughput = rec.samples_per_sec
            report.details.update(_beyond_envelope(obj))
            report.compute_ms = rec.compute_ms
            report.compute_ms_p90 = rec.compute_ms_p90
            report.compile_cache = (
                None
                if rec.compile_cache is None
                else CompileCache(
                    rec.compile_cache, rec.compile_s, rec.compile_cache_hits, rec.compile_cache_misses
                )
            )
        elif isinstance(rec, Complete):
            report.complete = True
            if rec.param_digest is not None:
                report.final_digest = rec.param_digest
        elif isinstance(rec, Start):
            report.start = _beyond_envelope(obj)
            report.kernels = rec.kernels or report.kernels
        elif isinstance(rec, Kernels):
            report.kernels = rec.kernels
        elif isinstance(rec, Facts):
            report.facts = {k: v for k, v in _beyond_envelope(obj).items() if k != "unknown"}
            report.unknown = rec.unknown
        elif isinstance(rec, Error):
            report.errors.append(RankError(rec.message, stamp, self.source))
        elif isinstance(rec, Exit):
            report.exited = Exited(rec.code, rec.phase, stamp, self.source)


_ENVELOPE = frozenset({"event", "rank", "world_size", "time"})


def _beyond_envelope(obj: dict[str, Any] | None) -> dict[str, Any]:
    """Every field of a whole object but the envelope's, as it was written."""
    return {k: v for k, v in (obj or {}).items() if k not in _ENVELOPE}


def _add_stack(report: RankReport, rec: Stack) -> None:
    """Keep one ``stack`` event in the rank's current dump (see the module docstring)."""
    dump = rec.dump
    if dump <= report.resumed:
        return
    stall = report.stall
    if stall is not None and dump < stall.dump:
        return
    if stall is None or dump > stall.dump:
        when = _stamp(rec.time)
        stall = report.stall = StackDump(
            dump,
            rec.phase,
            rec.stalled_s,
            rec.hang_after,
            time=when,
            source=rec.source,
            gpu=rec.gpu,
            gpu_pending_s=rec.gpu_pending_s,
        )
    thread = ThreadStack(rec.thread, rec.main, tuple(Frame(*f) for f in rec.frames), rec.dropped)
    stall.threads = [t for t in stall.threads if t.thread != thread.thread] + [thread]


def _epoch_proofs(report: RankReport, rec: EpochTime) -> None:
    """An ``epoch_time``'s loss (null: not finite, kept as NaN), steps and parameter digest, where sound."""
    if rec.loss is not ABSENT:
        report.losses[rec.epoch] = math.nan if rec.loss is None else rec.loss
    if rec.steps is not None:
        report.epoch_steps[rec.epoch] = rec.steps
    if rec.param_digest is not None:
        report.digests[rec.epoch] = rec.param_digest


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


def _bandwidth(rec: Bandwidth) -> BandwidthRecord | None:
    """A ``bandwidth`` record as kept, or None unless its groups parse and its size is positive."""
    ranks, nodes = parse_ranges(rec.ranks), parse_ranges(rec.nodes)
    if ranks is None or nodes is None or rec.bytes <= 0:
        return None
    return BandwidthRecord(
        rec.scope,
        ranks,
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


def parse_files(paths: Iterable[str | Path], fmt: Format = "auto") -> RollCall:
    """Parse each file on its own into one roll call."""
    roll = RollCall()
    for path in paths:
        roll.read_file(path, fmt)
    return roll
