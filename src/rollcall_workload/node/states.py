"""What the node sees of a process's state, and how long a reading has held at every look.

A state counts only once it has held: one read of ``D`` is every NFS read and page fault, one of a stale
heartbeat may be the monitor's own pause. :class:`Held` measures how long a reading has held at every one
of the monitor's looks, on its own monotonic clock; a gap between two looks longer than ``max_gap`` (the
monitor itself was not running) starts the count again, so a clock step or a pause counts for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollcall_workload import procfs

#: Process states by the letter of ``/proc/<pid>/stat``.
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "uninterruptible sleep",
    "T": "stopped",
    "t": "stopped by a tracer",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
    "P": "parked",
    "W": "paging",
}
#: A gap between two looks longer than this many polls means the monitor itself was paused.
MAX_GAP_POLLS = 3.0


def process_state(pid: int, proc: str = procfs.PROC) -> tuple[str, str] | None:
    """``(letter, words)`` of the process's state, or None when it is gone (or a zombie)."""
    s = procfs.stat(pid, proc)
    if s is None or s.gone:
        return None
    return s.state, STATES.get(s.state, s.state)


@dataclass
class Held:
    """How long one reading has held at every look (see the module docstring)."""

    max_gap: float
    value: Any = None
    since: float | None = None
    last: float | None = None
    #: Whether the last look read another value than the one before it.
    changed: bool = False

    def see(self, value: Any, mono: float) -> float:
        """Take one look that read ``value`` at ``mono`` (monotonic seconds); seconds it has held since."""
        self.changed = self.since is not None and value != self.value
        paused = self.last is not None and mono - self.last > self.max_gap
        if self.since is None or self.changed or paused:
            self.value, self.since = value, mono
        self.last = mono
        return mono - self.since
