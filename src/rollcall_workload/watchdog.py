"""The watchdog: a rank that stops making progress dumps its threads' stacks as ``stack`` events."""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from rollcall_workload.contract import EVENT_PREFIX, MAX_LINE_BYTES, RollcallLog, _clean, encode_event

#: The watchdog's default bound: this many times the median step time so far, at least HANG_FLOOR_S (on xla,
#: which compiles again whenever the graph changes, at least the first step's bound).
HANG_STEP_MULTIPLE = 20.0
HANG_FLOOR_S = 60.0
#: Until the first training step completes (it compiles): the default bound, per kind of first step.
FIRST_STEP_HANG_S = {"xla": 1800.0, "compile": 600.0, "eager": 120.0}
#: Frames of the workload itself: files of this package (its kernels' too).
WORKLOAD_DIR = os.path.dirname(os.path.abspath(__file__))
MAX_CODE_CHARS = 160  # a frame's source line is cut to this many characters
FLIGHT_RECORDER_ENV = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
}


def first_step_bound(device: str, compiled: bool) -> float:
    """The default bound until the first training step completes: it compiles (xla, --compile) or not."""
    return FIRST_STEP_HANG_S["xla" if device == "xla" else "compile" if compiled else "eager"]


def frame_entry(frame: traceback.FrameSummary) -> list[Any]:
    """``[file, line, function, code, own]`` of one frame; the workload's own files named relative to it."""
    path = os.path.abspath(frame.filename) if frame.filename and not frame.filename.startswith("<") else ""
    own = bool(path) and path.startswith(WORKLOAD_DIR + os.sep)
    name = os.path.relpath(path, WORKLOAD_DIR) if own else frame.filename
    code = (frame.line or "").strip()
    code = code if len(code) <= MAX_CODE_CHARS else code[: MAX_CODE_CHARS - 3] + "..."
    return [name, frame.lineno or 0, frame.name, code, own]


def encode_stack(rank: int, world_size: int, frames: Sequence[list[Any]], **fields: Any) -> bytes:
    """One ``stack`` line under MAX_LINE_BYTES: outermost frames are dropped until it fits (``dropped``)."""
    kept = list(frames)
    while True:
        record = _clean(
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
    """

    def __init__(
        self,
        log: RollcallLog,
        hang_after: float | None,
        first_step: float,
        floor: float = HANG_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.hang_after = hang_after
        self.floor = floor
        self.first_step = first_step
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = "start-up"
        self._last = clock()
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
        return steady if self._first_done else max(steady, self.first_step)

    def start(self) -> Watchdog:
        """Start watching (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="rollcall-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()

    def beat(self, phase: str, *, step: bool = False) -> None:
        """A step (``step``) or phase completed; ``phase`` is what the rank does next."""
        with self._lock:
            now = self._clock()
            stalled = now - self._last
            resumed = self._dumped_at is not None
            self._phase, self._last, self._dumped_at = phase, now, None
            self._first_done = self._first_done or step
            dump = self._dumps
        if resumed:
            self.log.emit("resumed", dump=dump, stalled_s=round(stalled, 3), phase=phase)

    def first_step_done(self) -> None:
        """The first training step has completed: the bound of the steps after it applies from now."""
        with self._lock:
            self._first_done = True

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
            dump, phase, stalled = self._dumps, self._phase, now - self._last
        stacks = [s for s in thread_stacks() if s[0] != "rollcall-watchdog"]
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
            )
            self.log.write(line)
        return True

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.bound() / 10)):
            self.check()
