"""The files a rank writes for its node's monitor: its heartbeat and faulthandler's dumps.

When ``ROLLCALL_MONITOR_DIR`` is set (the backend gives each node one, read by the node's monitor,
``python -m rollcall_workload.node.monitor``), the watchdog thread writes the rank's heartbeat
(``rank-<rank>.heartbeat``, one JSON object: the record :class:`Heartbeat`) at every tick of its own (at
least once a second) and arms faulthandler's C-level timer (``faulthandler.dump_traceback_later``) to dump
every thread's stack into ``rank-<rank>.stacks`` the bound plus
:data:`rollcall_workload.rank.watchdog.FAULTHANDLER_MARGIN_S` after the last step or phase completed,
re-armed at each one. That timer runs without the GIL: a rank whose interpreter is held in C (no Python
thread can run, its own watchdog neither) still has its stack taken. The file starts with one
``ROLLCALL-ARMED {json}`` line (the dump number, phase, bound and threads the timer would dump under);
faulthandler's plain text follows it when the timer fires. The monitor, outside the rank, turns that text
into ``stack`` events (``source`` ``faulthandler``), with the source lines read from the workload's own
files; and names the rank ``silent`` when its heartbeat and its progress both stopped past its bound plus
:data:`rollcall_workload.node.monitor.SILENT_MARGIN_S` while its process still exists, with that process's
state.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from rollcall_workload.contract.env import MONITOR_DIR_ENV
from rollcall_workload.contract.schema import Event, optional, required, take

#: The first line of a rank's stacks file, before faulthandler's text: ``ROLLCALL-ARMED {json}``.
STACKS_HEADER = "ROLLCALL-ARMED "
#: A heartbeat is written in place, padded to this many bytes, so that a reader never sees a shorter one.
HEARTBEAT_BYTES = 1024
#: The section of ``docs/contract.md`` that renders :data:`FILES`.
INTRO = [
    "",
    "## Files for the node's monitor",
    "",
    f"Only where `{MONITOR_DIR_ENV}` is set. Each is one JSON object of the record below, read by the "
    "node's monitor (`python -m rollcall_workload.node.monitor`), never by the suite.",
]

#: The files a rank writes for its node's monitor, by name (in ``docs/contract.md``; not log events).
FILES: dict[str, type[Event]] = {}


@dataclass(kw_only=True, slots=True)
class Heartbeat(Event):
    """The rank's heartbeat: written by its watchdog thread each tick, in place, padded to HEARTBEAT_BYTES."""

    pid: int = required("the rank's process")
    phase: str = required("what the rank is doing (the watchdog's phase)")
    steps: int = required("steps and phases completed so far (each beat of the watchdog)")
    progress: float = required("wall clock of the last step or phase completed, seconds since the epoch")
    hang_after: float = required("the watchdog's bound now, seconds")
    dumps: int = optional("stack dumps written so far (the watchdog's and faulthandler's)", 0)
    joined: bool = optional("whether the rank has joined the process group", False)
    gpu: int | None = optional("the rank's CUDA device, where it uses one")
    gpu_uuid: str | None = optional(
        "that GPU's UUID as NVML names it (GPU-...), where torch reports it: the node's monitor reads the "
        "GPU through NVML by it when the rank stops"
    )


Heartbeat.NAME = "heartbeat"
Heartbeat.WHEN = (
    "the file rank-<rank>.heartbeat in ROLLCALL_MONITOR_DIR, rewritten at each tick of the rank's watchdog "
    "thread (at least once a second); the stale time of a rank that runs no Python"
)
FILES["heartbeat"] = Heartbeat


def heartbeat_path(directory: str, rank: int) -> str:
    """The rank's heartbeat file in the monitor directory."""
    return os.path.join(directory, f"rank-{rank}.heartbeat")


def stacks_path(directory: str, rank: int) -> str:
    """The rank's faulthandler file in the monitor directory (see Heartbeat)."""
    return os.path.join(directory, f"rank-{rank}.stacks")


def read_heartbeat(data: bytes) -> Heartbeat | None:
    """A heartbeat file's record, or None when it is not one (empty, torn, another record)."""
    try:
        obj = json.loads(data.decode("utf-8", "replace").strip() or "null")
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("event") != Heartbeat.NAME:
        return None
    record = take(Heartbeat, obj)
    return record if isinstance(record, Heartbeat) else None
