"""The streaming parser: each log (one pod, one node) read in chunks into one :class:`RollCall`."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import msgspec

from rollcall.ranklog.keep import Said, keep
from rollcall.ranklog.report import GpuHeard, LauncherHeard, Part, RankProcessHeard, RankReport, Receipt
from rollcall_workload import contract
from rollcall_workload.contract import EVENT_PREFIX, REQUIRED_EVENTS

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


@dataclass
class RollCall:
    """The ranks heard from, keyed by global rank; the nodes' monitors' GPU and launcher lines, in order."""

    ranks: dict[int, RankReport] = field(default_factory=dict)
    gpu_events: list[GpuHeard] = field(default_factory=list)
    launchers: list[LauncherHeard] = field(default_factory=list)
    processes: list[RankProcessHeard] = field(default_factory=list)
    #: When the suite first and last read a line of each part, by part: ``("node", n)``, ``("rank", r)``.
    heard: dict[Part, Receipt] = field(default_factory=dict)
    #: The nodes the backend saw on their way, by node rank (its pod waiting for capacity, pulling its
    #: image, creating its container): the first look that saw it so, and the last look that did or the
    #: first that saw it arrived; and those on their way at its last look (:meth:`on_the_way`). Nothing of
    #: such a node runs yet: the backend's own bounds hold it.
    arriving: dict[int, Receipt] = field(default_factory=dict)
    arriving_now: frozenset[int] = frozenset()
    records: int = 0
    bytes_read: int = 0
    #: The suite's clock (monotonic seconds; a test gives its own) and its reading when the piece of log now
    #: being parsed arrived.
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    now: float = 0.0
    #: When the suite ended the job, or saw it end, on the same clock (None: it has not): what the judge
    #: reads the roll call at; and when the suite asked it to end (at a hang, its timeout, a signal), where
    #: it did: what the ranks did after that is the suite's doing.
    ended: float | None = None
    stopped: float | None = None

    def note(self, part: Part) -> None:
        """That a line of ``part`` was read now."""
        receipt = self.heard.get(part)
        if receipt is None:
            self.heard[part] = Receipt(self.now, self.now)
        else:
            receipt.last = self.now

    def on_the_way(self, nodes: Iterable[int]) -> None:
        """What the backend sees now: ``nodes`` are on their way (and no other), at the suite's clock."""
        moment, now = self.clock(), frozenset(nodes)
        for node in now | self.arriving_now:  # on its way still, or seen arrived at this look
            receipt = self.arriving.get(node)
            if receipt is None:
                self.arriving[node] = Receipt(moment, moment)
            else:
                receipt.last = moment
        self.arriving_now = now

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
        self._said = Said(source)  # where every record decoded straight into its record was read
        self._modern = fmt in ("auto", "rollcall")
        self._legacy = fmt in ("auto", "neuron-legacy")
        self._pending = b""

    def feed(self, data: bytes) -> None:
        """Parse every whole line in ``data`` (plus what was pending); keep the unfinished tail."""
        self.roll.bytes_read += len(data)
        self.roll.now = self.roll.clock()
        buf = self._pending + data if self._pending else data
        end = buf.rfind(b"\n") + 1
        if end == 0 and len(buf) > _MAX_PENDING:
            end = len(buf) - _KEEP_TAIL
        self._pending = buf[end:]
        if end:
            self._scan(buf, end)

    def close(self) -> None:
        """Parse what is left: a last line without a newline still counts if its record is whole."""
        self.roll.now = self.roll.clock()
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
                        keep(self.roll, rec, self._said)
                        pos = find(MARKER, line_end, end)
                        continue
            text = buf[start:line_end].decode("utf-8", "surrogateescape")
            try:
                obj, consumed = _DECODER.raw_decode(text)
            except ValueError:
                obj, consumed = None, 0
            if isinstance(obj, dict) and (rec := contract.read(obj)) is not None:
                keep(self.roll, rec, Said(self.source, obj))
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


def parse_files(paths: Iterable[str | Path], fmt: Format = "auto") -> RollCall:
    """Parse each file on its own into one roll call."""
    roll = RollCall()
    for path in paths:
        roll.read_file(path, fmt)
    return roll
