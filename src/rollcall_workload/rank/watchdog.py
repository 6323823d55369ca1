"""The watchdog: a rank that stops making progress dumps its threads' stacks as ``stack`` events."""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import io
import json
import os
import statistics
import sys
import threading
import time
import tokenize
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rollcall_workload.rank.gpu_progress import GpuProgress

from rollcall_workload.contract import (
    EVENT_PREFIX,
    JOIN_PHASE,
    MAX_LINE_BYTES,
    SETUP_PHASE,
    RollcallLog,
    check_event,
    encode_event,
)
from rollcall_workload.contract.heartbeat import (
    HEARTBEAT_BYTES,
    STACKS_HEADER,
    Heartbeat,
    heartbeat_path,
    stacks_path,
)
from rollcall_workload.contract.schema import json_ready
from rollcall_workload.safefs import new_file, private_dir

#: The watchdog's default bound: this many times the median step time so far, at least HANG_FLOOR_S (on xla,
#: which compiles again whenever the graph changes, at least the first step's bound).
HANG_STEP_MULTIPLE = 20.0
HANG_FLOOR_S = 60.0
#: Until the first training step completes (it compiles): the default bound, per kind of first step.
FIRST_STEP_HANG_S = {"xla": 1800.0, "compile": 600.0, "eager": 120.0}
#: While the rank is inside init_process_group, from entering it until it has joined: the default bound,
#: ``--join-hang-after``. torchrun starts a node's workers only once every node's agent has joined its own
#: rendezvous, so every rank that has set up reaches init_process_group within seconds of the others.
JOIN_HANG_S = 60.0
#: The start skew S's default (``--start-skew``), in join bounds. Before the join, from the rank's process
#: start through its imports and device setup (SETUP_PHASE), the bound is S + J (:func:`setup_bound`): what
#: the suite gives a rank whose process it saw and never heard. A node slow to import from a cold filesystem
#: or to set up its device is not hung, and the join bound counts only once it has entered.
START_SKEW_JOINS = 2.0
#: faulthandler's timer fires this long after the bound ran out: the rank's own watchdog, which writes
#: richer stacks (thread names, source lines), dumps first whenever a Python thread can run.
FAULTHANDLER_MARGIN_S = 5.0
#: The workload package: a frame of a file under it is its own (its kernels' too), named relative to it
#: (``rank/run.py``).
WORKLOAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_CODE_CHARS = 160  # a frame's source line is cut to this many characters


class Recorder(Protocol):
    """What a stall says besides its stacks (:class:`~rollcall_workload.rank.flight.FlightRecorder`)."""

    def record(self, dump: int) -> None:
        """The rank's ``dump``-th stack dump, once it joined: the stall's first writes what it says."""

    def resumed(self, dump: int) -> None:
        """The stall whose last dump was ``dump`` ended: the next stall says it again."""


def start_skew_bound(join: float | None = None) -> float:
    """The default bound of the imports and device setup: :data:`START_SKEW_JOINS` join bounds."""
    return START_SKEW_JOINS * (join or JOIN_HANG_S)


def setup_bound(start_skew: float | None = None, join: float | None = None) -> float:
    """The bound of the imports and device setup, from the process's start: S + J.

    The suite names a rank whose process it saw and never heard from at S + J after it saw it; the rank's
    own watchdog gives its setup as long, so a rank that says where it is stuck says it no sooner.
    """
    j = join or JOIN_HANG_S
    return (start_skew or start_skew_bound(j)) + j


def first_step_bound(device: str, compiled: bool) -> float:
    """The default bound until the first training step completes: it compiles (xla, --compile) or not."""
    return FIRST_STEP_HANG_S["xla" if device == "xla" else "compile" if compiled else "eager"]


def frame_entry(frame: traceback.FrameSummary) -> list[Any]:
    """``[file, line, function, code, own]`` of one frame; the workload's own files named relative to it."""
    path = os.path.abspath(frame.filename) if frame.filename and not frame.filename.startswith("<") else ""
    own = bool(path) and path.startswith(WORKLOAD_DIR + os.sep)
    name = os.path.relpath(path, WORKLOAD_DIR) if own else frame.filename
    code = without_comment((frame.line or "").strip())
    code = code if len(code) <= MAX_CODE_CHARS else code[: MAX_CODE_CHARS - 3] + "..."
    return [name, frame.lineno or 0, frame.name, code, own]


def without_comment(code: str) -> str:
    """A source line without its trailing comment: ``f(x)  # why`` gives ``f(x)``; a string's ``#`` stays."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                return code[: token.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):  # a line cut mid-expression: what it held so far
        pass
    return code


def encode_stack(rank: int, world_size: int, frames: Sequence[list[Any]], **fields: Any) -> bytes:
    """One ``stack`` line under MAX_LINE_BYTES: outermost frames are dropped until it fits (``dropped``)."""
    kept = list(frames)
    check_event({"event": "stack", "rank": rank, "world_size": world_size, **fields, "frames": kept})
    while True:
        record = json_ready(
            {
                "event": "stack",
                "rank": rank,
                "world_size": world_size,
                "time": round(time.time(), 6),
                **fields,
                "frames": kept,
                "dropped": len(frames) - len(kept),
            }
        )
        data = f"{EVENT_PREFIX}{json.dumps(record, separators=(',', ':'))}\n".encode()
        if len(data) < MAX_LINE_BYTES:
            return data
        if not kept:
            return encode_event("stack", rank, world_size, **fields, frames=[], dropped=len(frames))
        kept = kept[1:]


def thread_stacks() -> list[tuple[str, bool, list[list[Any]]]]:
    """Every thread's (name, is the main thread, frames outermost first), the main thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    stacks = [
        (
            names.get(ident, f"thread-{ident}"),
            ident == main,
            [frame_entry(f) for f in traceback.extract_stack(frame)],
        )
        for ident, frame in sys._current_frames().items()
    ]
    return sorted(stacks, key=lambda s: (not s[1], s[0]))


class Watchdog:
    """Dumps every thread's stack when no step or phase completes within the bound (see the docstring).

    The training thread calls :meth:`beat` each time a step or phase completes, naming what comes next, and
    :meth:`step_time` with the seconds per step it measured; a daemon thread watches the time since.

    Until :meth:`joined`, the rank's first phase (:data:`SETUP_PHASE`, its imports and device setup) is held
    to ``setup`` (the start skew; None: ``join``), counted from ``since`` (the process's start on the
    watchdog's clock; None: now), and the join (:data:`JOIN_PHASE`) to ``join``, counted from entering it.
    """

    def __init__(
        self,
        log: RollcallLog,
        hang_after: float | None,
        first_step: float,
        floor: float = HANG_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
        *,
        join: float | None = None,
        setup: float | None = None,
        since: float | None = None,
        monitor_dir: str | None = None,
        fh_margin: float = FAULTHANDLER_MARGIN_S,
        gpu: GpuProgress | None = None,
        stacks: Callable[[], list[tuple[str, bool, list[list[Any]]]]] | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.log = log
        self.recorder = recorder  # once joined, a stall's first dump says the rank's last collectives first
        self._stacks = stacks or thread_stacks  # what a dump holds: this process's threads (a test's own)
        self.gpu = gpu
        self.hang_after = hang_after
        self.floor = floor
        self.first_step = first_step
        self.join = join
        self.setup = setup
        self.fh_margin = fh_margin
        self._clock = clock
        self._joined = False
        self._beats = 0
        self._last = clock() if since is None else since  # the first phase began then (the process's start)
        self._wall_last = time.time() - (clock() - self._last)
        self._monitor = _MonitorFiles(monitor_dir, log.rank) if monitor_dir else None
        self._lock = threading.Lock()
        self._beating = threading.Lock()  # one heartbeat taken and written at a time: the file holds the last
        self._phase = SETUP_PHASE
        self._steps: list[float] = []
        self._first_done = False
        self._dumps = 0
        self._dumped_at: float | None = None  # the last dump since the last beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def bound(self) -> float:
        """Seconds without progress after which the rank counts as stalled now."""
        if self.hang_after is not None:
            steady = self.hang_after
        else:
            median = statistics.median(self._steps) if self._steps else 0.0
            steady = max(self.floor, HANG_STEP_MULTIPLE * median)
        if not self._joined:
            before = self.join if self._phase == JOIN_PHASE or self.setup is None else self.setup
            if before is not None:
                return before
        return steady if self._first_done else max(steady, self.first_step)

    def start(self) -> Watchdog:
        """Start watching (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="rollcall-watchdog", daemon=True)
            self._thread.start()
            self._arm()
        return self

    def stop(self) -> None:
        """Stop watching (faulthandler's timer too)."""
        self._stop.set()
        if self._monitor is not None:
            self._monitor.disarm()

    def beat(self, phase: str, *, step: bool = False) -> None:
        """A step (``step``) or phase completed; ``phase`` is what the rank does next."""
        if self.gpu is not None:  # the GPU's work queued until now, for a dump to ask whether it finished
            self.gpu.mark()
        with self._lock:
            now = self._clock()
            stalled = now - self._last
            fired = self._monitor.fired() if self._monitor is not None else None
            if fired is not None:  # faulthandler dumped while no Python thread could run
                self._dumps = max(self._dumps, fired)
                self._dumped_at = self._dumped_at if self._dumped_at is not None else now
            resumed = self._dumped_at is not None
            self._phase, self._last, self._dumped_at = phase, now, None
            self.log.phase = phase
            self._wall_last = time.time()
            self._beats += 1
            self._first_done = self._first_done or step
            dump = self._dumps
        if resumed:
            if self.recorder is not None:  # before the line: a dump after it is the next stall's
                self.recorder.resumed(dump)
            self.log.emit("resumed", dump=dump, stalled_s=round(stalled, 3), phase=phase)
        if self._monitor is not None:  # the heartbeat says this progress, and the bound from now, at once
            self._beat()
        self._arm()

    def joined(self) -> None:
        """The rank has joined the process group: the bounds of the steps apply from now."""
        with self._lock:
            self._joined = True

    def first_step_done(self) -> None:
        """The first training step has completed: the bound of the steps after it applies from now."""
        with self._lock:
            changed, self._first_done = not self._first_done, True
        if changed and self._monitor is not None:
            self._beat()

    def step_time(self, seconds: float) -> None:
        """One measured step time (seconds), for the default bound."""
        with self._lock:
            self._steps.append(seconds)

    def check(self) -> bool:
        """Dump the stacks if the bound has run out since the last beat (or the last dump); whether it did."""
        with self._lock:
            now, bound = self._clock(), self.bound()
            since = now if self._dumped_at is None else self._dumped_at
            if now - self._last < bound or (self._dumped_at is not None and now - since < bound):
                return False
            self._dumps += 1
            self._dumped_at = now
            dump, phase, stalled, joined = self._dumps, self._phase, now - self._last, self._joined
        self._arm()  # its own dump taken: faulthandler's waits another bound
        if self.recorder is not None and joined:  # the collectives line before the stacks that end the run
            self.recorder.record(dump)
        probe = self.gpu.probe() if self.gpu is not None else None
        gpu = {"gpu": probe.gpu, "gpu_pending_s": probe.pending_s} if probe is not None else {}
        stacks = [s for s in self._stacks() if s[0] != "rollcall-watchdog"]
        for name, main, frames in stacks:
            line = encode_stack(
                self.log.rank,
                self.log.world_size,
                frames,
                dump=dump,
                thread=name,
                main=main,
                threads=len(stacks),
                phase=phase,
                stalled_s=round(stalled, 3),
                hang_after=round(bound, 3),
                **gpu,
            )
            self.log.write(line)
        return True

    def heartbeat(self) -> Heartbeat:
        """The rank's heartbeat now (see the contract's Heartbeat)."""
        with self._lock:
            return Heartbeat(
                event=Heartbeat.NAME,
                rank=self.log.rank,
                world_size=self.log.world_size,
                time=round(time.time(), 3),
                pid=os.getpid(),
                phase=self._phase,
                steps=self._beats,
                progress=round(self._wall_last, 3),
                hang_after=round(self.bound(), 3),
                dumps=self._dumps,
                joined=self._joined,
                gpu=self.gpu.gpu if self.gpu is not None else None,  # the node's monitor reads it (NVML)
                gpu_uuid=self.gpu.uuid if self.gpu is not None else None,
            )

    def _beat(self) -> None:
        """Take the heartbeat and write it, as one step: a beat taken earlier never overwrites a later one."""
        if self._monitor is not None:
            with self._beating:
                self._monitor.beat(self.heartbeat())

    def _arm(self) -> None:
        """(Re-)arm faulthandler's timer: the bound plus its margin after the last step or phase."""
        if self._monitor is None or self._stop.is_set():
            return
        with self._lock:
            bound, phase, since, dump = self.bound(), self._phase, self._wall_last, self._dumps + 1
            elapsed = self._clock() - (self._last if self._dumped_at is None else self._dumped_at)
        timeout = max(0.5, bound + self.fh_margin - elapsed)
        self._monitor.arm(
            timeout,
            dump=dump,
            phase=phase,
            since=round(since, 3),
            armed=round(time.time(), 3),
            hang_after=round(bound, 3),
            main=threading.main_thread().ident or 0,
            main_name=threading.main_thread().name,
            skip=[t.ident or 0 for t in (self._thread,) if t is not None],
        )

    def _watch(self) -> None:
        while True:
            if self._monitor is not None:
                self._beat()
            if self._stop.wait(min(1.0, self.bound() / 10)):
                return
            self.check()


class _MonitorFiles:
    """The rank's files in its node's monitor directory: the heartbeat, and faulthandler's dumps."""

    def __init__(self, directory: str, rank: int) -> None:
        private_dir(directory)  # the monitor's, or made here first: this user's alone (safefs)
        self._beat = new_file(heartbeat_path(directory, rank))
        self._stacks = new_file(stacks_path(directory, rank), os.O_WRONLY | os.O_APPEND)
        self._end = 0  # the file's size once the last header was written
        self._dump = 0  # the dump number that header gives
        self._arming = threading.Lock()  # the training thread and the watchdog's both re-arm

    def beat(self, heartbeat: Heartbeat) -> None:
        """Write the heartbeat in place (one write of HEARTBEAT_BYTES: a reader never sees a short one)."""
        data = json.dumps(json_ready(_fields(heartbeat)), separators=(",", ":")).encode()
        os.pwrite(self._beat, data.ljust(HEARTBEAT_BYTES), 0)

    def fired(self) -> int | None:
        """The dump number faulthandler wrote since it was last armed, or None when it did not fire."""
        if self._end and os.fstat(self._stacks).st_size > self._end:
            return self._dump
        return None

    def arm(self, timeout: float, **header: Any) -> None:
        """Arm faulthandler's timer: every ``timeout`` seconds, every thread's stack into the file.

        The file is emptied first unless faulthandler wrote to it since the last arming: then the new header
        follows its dumps, which the monitor may not have read yet.
        """
        line = f"{STACKS_HEADER}{json.dumps({**header, 'timeout': round(timeout, 3)})}\n".encode()
        with self._arming:
            faulthandler.cancel_dump_traceback_later()
            if self.fired() is None:
                os.ftruncate(self._stacks, 0)
            os.write(self._stacks, line)
            self._end, self._dump = os.fstat(self._stacks).st_size, int(header["dump"])
            faulthandler.dump_traceback_later(timeout, repeat=True, file=self._stacks)

    def disarm(self) -> None:
        """Stop faulthandler's timer."""
        with contextlib.suppress(Exception):
            faulthandler.cancel_dump_traceback_later()


def _fields(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
