"""A roll-call line: its rules, and the one way the workload writes it (:class:`RollcallLog`)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from rollcall_workload.contract.env import STRICT_ENV
from rollcall_workload.contract.events import breaches
from rollcall_workload.contract.rank import REQUIRED_EVENTS
from rollcall_workload.contract.schema import ContractError, json_ready

EVENT_PREFIX = "ROLLCALL "
MAX_LINE_BYTES = 4096  # PIPE_BUF on Linux: smaller writes to a pipe are atomic

#: The rules of a line, for readers of the contract (``docs/contract.md``).
LINE_RULES: tuple[str, ...] = (
    f"Each event is one line: `{EVENT_PREFIX.strip()}` and a space (the prefix), then one compact JSON "
    "object, then a newline.",
    "One line per event per rank: a rank says each event once (per epoch, per bandwidth group, per "
    "thread of a dump); a reader keeps the last of a repeated one.",
    f"Each line is written with a single `write(2)` of fewer than {MAX_LINE_BYTES} bytes (PIPE_BUF) on a "
    "duplicate of file descriptor 1, so the lines of many processes sharing a pipe never interleave; long "
    "text is cut (ending `...`) and a stack dump drops its outermost frames to fit.",
    "Every line carries the envelope (`event`, `rank`, `world_size`, `time`); a number that is not "
    "finite is written ``null``.",
    "A reader ignores fields it does not know, and an optional field of another type (the record still "
    "counts); a record without a required field, or with one of another type, does not count.",
    "A rank answers the roll call when it said " + ", ".join(f"`{e}`" for e in REQUIRED_EVENTS) + ".",
)

_SAID: set[str] = set()


def check_event(record: Mapping[str, Any], strict: bool | None = None) -> None:
    """Hold one line's fields (the envelope's included) to its record.

    A breach is a bug in the workload. Strict (``strict``, else :data:`STRICT_ENV` set to ``1``, as the
    suite's tests set it) it raises :class:`ContractError`. A real run is not strict: the line is written
    as it is and the breach said once on stderr, since the reader drops only what it cannot read (a wrong
    optional field; the record when a required one is wrong) and a rank's training must not fail over
    how it reports.
    """
    problems = breaches(str(record.get("event")), record)
    if not problems:
        return
    if strict if strict is not None else os.environ.get(STRICT_ENV) == "1":
        raise ContractError("; ".join(problems))
    for problem in problems:
        if problem not in _SAID:
            _SAID.add(problem)
            print(f"rollcall: the workload broke its contract: {problem}", file=sys.stderr, flush=True)


def encode_event(
    event: str, rank: int, world_size: int, *, strict: bool | None = None, **fields: Any
) -> bytes:
    """One roll-call line under MAX_LINE_BYTES (long strings cut to fit), stamped with ``time``.

    The fields are held to the event's record first (:func:`check_event`).
    """
    fields.setdefault("time", round(time.time(), 6))
    raw = {"event": event, "rank": rank, "world_size": world_size, **fields}
    check_event(raw, strict)
    record = json_ready(raw)
    while True:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)  # ASCII: no encoding errors
        data = f"{EVENT_PREFIX}{text}\n".encode()
        if len(data) < MAX_LINE_BYTES:
            return data
        longest = max(
            (k for k, v in record.items() if isinstance(v, str)), key=lambda k: len(record[k]), default=None
        )
        if longest is None or len(record[longest]) < 8:
            raise ValueError(f"roll-call line too long: {len(data)} bytes")
        record[longest] = record[longest][: len(record[longest]) // 2] + "..."


class RollcallLog:
    """Writes roll-call lines to a private duplicate of stdout, one os.write per line."""

    def __init__(self, rank: int, world_size: int, fd: int | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.fd = os.dup(1) if fd is None else fd
        self.said: set[str] = set()  # the events written so far, and the watchdog's phase now: for exit
        self.phase = ""

    def emit(self, event: str, **fields: Any) -> None:
        """Write one event line with a single write, held to its record (:func:`check_event`)."""
        self.write(encode_event(event, self.rank, self.world_size, **fields))
        self.said.add(event)

    def write(self, data: bytes) -> None:
        """Write one encoded line with a single write."""
        sys.stdout.flush()  # keep plain prints of this process in order with roll-call lines
        written = os.write(self.fd, data)
        while written < len(data):  # not expected below PIPE_BUF; never leave half a line
            written += os.write(self.fd, data[written:])
