"""What torchrun's agent records when its workers fail: one termination record per failed worker.

When a worker fails, the agent prints a ``ChildFailedError`` report to its own output (the pod's log, or
the local node's) with one record per worker it saw end, the first observed failure among them::

    Root Cause (first observed failure):
    [0]:
      time      : 2025-12-01_08:10:15
      host      : ip-10-0-1-7
      rank      : 5 (local_rank: 1)
      exitcode  : -9 (pid: 21173)

:func:`worker_terminations` reads them as :class:`~rollcall.rootcause.Termination` records, so a worker
killed outright (the kernel's OOM killer, SIGKILL), which writes no error line of its own, is still named.
The agent stamps the time in its host's local time, to the second.
"""

from __future__ import annotations

import re
import signal
from datetime import datetime
from pathlib import Path

from rollcall.rootcause import Termination

_RECORD = re.compile(
    r"^\s*time\s*: (?P<time>\S+)[ \t]*\r?\n"
    r"\s*host\s*: (?P<host>\S*)[ \t]*\r?\n"
    r"\s*rank\s*: (?P<rank>\d+) \(local_rank: \d+\)[ \t]*\r?\n"
    r"\s*exitcode\s*: (?P<code>-?\d+)",
    re.MULTILINE,
)
_TIME_FORMAT = "%Y-%m-%d_%H:%M:%S"
#: Bytes read from the end of a log: the agent's report is its last output.
TAIL_BYTES = 1 << 20


def worker_terminations(text: str, pod: str) -> list[Termination]:
    """The workers the agent's failure report in ``text`` names, with how each ended (the first once)."""
    found: dict[int, Termination] = {}
    for m in _RECORD.finditer(text):
        rank, code = int(m["rank"]), int(m["code"])
        found.setdefault(
            rank,
            Termination(
                pod=pod,
                node=None,
                host=m["host"] or None,
                reason=_reason(code),
                exit_code=code,
                time=_time(m["time"]),
                rank=rank,
            ),
        )
    return sorted(found.values(), key=lambda t: t.rank or 0)


def read_terminations(path: Path, pod: str) -> list[Termination]:
    """:func:`worker_terminations` of the end of the log at ``path`` (none when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return worker_terminations(text, pod)


def _reason(code: int) -> str:
    if code >= 0:
        return "Error"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _time(text: str) -> float | None:
    try:
        return datetime.strptime(text, _TIME_FORMAT).timestamp()
    except ValueError:
        return None
