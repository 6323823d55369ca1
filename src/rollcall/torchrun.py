r"""What torchrun's agent records when its workers fail: one termination record per failed worker.

Three sources, read in this order, each worker named by its global rank:

1. **The agent's worker events** (structured). Started with ``--event-log-handler=console``
   (:meth:`rollcall.jobspec.JobSpec.torchrun_command`), the agent writes one JSON object per line to its own
   output (the pod's log, or the local node's) for every worker at the end of a run:
   ``{"name": "torchelastic.worker.status.FAILED", "source": "WORKER", "metadata": {"global_rank": 5,
   "hostname": ..., "raw_error": "<the worker's error file>", "metadata": "{... \\"exit_code\\": [-9],
   \\"worker_pid\\": [21173]}"}}``. Every failed worker has one, with its exit code (negative: the signal
   that ended it); ``raw_error`` is the JSON the worker wrote to its own error file, or ``{"message":
   "<NONE>"}`` when it wrote none. When every worker of the node ended with status 0, each has a
   ``torchelastic.worker.status.SUCCEEDED`` event instead, without a status: read as exit code 0
   (reason ``Exited``), so a node whose ranks left early with 0 is on record too. A worker that ended with 0
   while another of its node failed has a ``TERMINATED`` event, as one the agent stopped: its status is lost,
   and it is not read (the rank's own ``exit`` event says it, :mod:`rollcall.evidence.departures`).
2. **The printed failure table**, the fallback for a launcher started without events: the agent's
   ``ChildFailedError`` report, one record per failed worker, the first observed failure among them::

       Root Cause (first observed failure):
       [0]:
         time      : 2025-12-01_08:10:15
         host      : ip-10-0-1-7
         rank      : 5 (local_rank: 1)
         exitcode  : -9 (pid: 21173)

   stamped in the host's local time, to the second.
3. The container's termination record, last: the kubernetes wing reads it from the pod's status
   (:func:`rollcall.backends.kubernetes.pod_state.terminations`), one per pod, with no rank.

**Error files.** torchrun sets ``TORCHELASTIC_ERROR_FILE`` for each worker to
``<log dir>/<run id>_<random>/attempt_<n>/<local rank>/error.json``; a worker whose main is wrapped in
``torch.distributed.elastic.multiprocessing.errors.record`` (train.py's is) writes its uncaught exception
there: ``{"message": {"message": "RuntimeError: ...", "extraInfo": {"py_callstack": "<traceback>",
"timestamp": "<epoch seconds>"}}}``. When the agent itself has ``TORCHELASTIC_ERROR_FILE`` set, it copies the
first failure's file there, adding ``"errorCode"`` (the worker's exit code). :func:`read_error_file` reads
either; a worker killed outright (the kernel's OOM killer, SIGKILL) or exiting by ``sys.exit`` writes none.

Either way a worker killed outright, which writes no error line of its own, is still named.
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rollcall.evidence.endings import Termination

#: The event the agent writes for a worker that failed.
FAILED_EVENT = "torchelastic.worker.status.FAILED"
#: The event the agent writes for each worker when every worker of its node ended with status 0.
SUCCEEDED_EVENT = "torchelastic.worker.status.SUCCEEDED"
#: The reason of a worker's record that ended with status 0.
EXITED = "Exited"

_RECORD = re.compile(
    r"^\s*time\s*: (?P<time>\S+)[ \t]*\r?\n"
    r"\s*host\s*: (?P<host>\S*)[ \t]*\r?\n"
    r"\s*rank\s*: (?P<rank>\d+) \(local_rank: \d+\)[ \t]*\r?\n"
    r"\s*exitcode\s*: (?P<code>-?\d+)",
    re.MULTILINE,
)
_EVENT_LINE = re.compile(
    r'^.*?(\{"name": "(?:' + "|".join(map(re.escape, (FAILED_EVENT, SUCCEEDED_EVENT))) + r')".*\})\s*$',
    re.MULTILINE,
)
_TIME_FORMAT = "%Y-%m-%d_%H:%M:%S"
#: Bytes read from the end of a log: the agent's report is its last output.
TAIL_BYTES = 1 << 20


@dataclass(frozen=True)
class ErrorRecord:
    """What torchelastic's error file of one worker (or the agent's copy of it) says.

    Attributes:
        message: the exception, ``Type: text``.
        traceback: the Python stack it was raised from, when recorded.
        time: when it was recorded (epoch seconds), when stamped.
        exit_code: the exit code the agent recorded with it (``errorCode``, the agent's copy only).
    """

    message: str
    traceback: str | None = None
    time: float | None = None
    exit_code: int | None = None


def error_record(data: object) -> ErrorRecord | None:
    """The :class:`ErrorRecord` of an error file's parsed JSON; None when it records no error."""
    if not isinstance(data, dict):
        return None
    message = data.get("message")
    if isinstance(message, str):  # torchelastic's flat form: {"message": "...", "timestamp": ...}
        if message in ("", "<NONE>"):
            return None
        return ErrorRecord(message, time=_number(data.get("timestamp")))
    if not isinstance(message, dict) or not isinstance(message.get("message"), str):
        return None
    extra = message.get("extraInfo")
    extra = extra if isinstance(extra, dict) else {}
    stack = extra.get("py_callstack")
    code = message.get("errorCode")
    return ErrorRecord(
        message["message"],
        traceback=stack if isinstance(stack, str) else None,
        time=_number(extra.get("timestamp")),
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
    )


def read_error_file(path: Path) -> ErrorRecord | None:
    """The error file at ``path``; None when there is none, or it is not torchelastic's JSON."""
    try:
        return error_record(json.loads(path.read_text(encoding="utf-8", errors="replace")))
    except (OSError, ValueError):
        return None


def worker_events(text: str, pod: str, unit: str = "pod") -> list[Termination]:
    """The workers the agent's ``FAILED`` (and ``SUCCEEDED``: code 0) events in ``text`` name, each once."""
    found: dict[int, Termination] = {}
    for m in _EVENT_LINE.finditer(text):
        ended = _event(m[1], pod, unit)
        if ended is not None and ended.rank is not None:
            found.setdefault(ended.rank, ended)
    return sorted(found.values(), key=lambda t: t.rank or 0)


def worker_terminations(text: str, pod: str, unit: str = "pod") -> list[Termination]:
    """The workers the agent's printed failure table in ``text`` names, with how each ended (once each)."""
    found: dict[int, Termination] = {}
    for m in _RECORD.finditer(text):
        rank, code = int(m["rank"]), int(m["code"])
        found.setdefault(
            rank,
            Termination(
                pod=pod,
                node=None,
                host=m["host"] or None,
                reason=reason(code),
                exit_code=code,
                time=_time(m["time"]),
                rank=rank,
                unit=unit,
            ),
        )
    return sorted(found.values(), key=lambda t: t.rank or 0)


def terminations(text: str, pod: str, unit: str = "pod") -> list[Termination]:
    """Every failed worker of the agent's output ``text``: its events where it wrote them, else its table.

    ``pod`` names the log; ``unit`` what ran the agent (``pod``, or ``node`` for a local or Slurm node).
    """
    return worker_events(text, pod, unit) or worker_terminations(text, pod, unit)


def read_terminations(path: Path, pod: str, unit: str = "pod") -> list[Termination]:
    """:func:`terminations` of the end of the log at ``path`` (none when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return terminations(text, pod, unit)


def reason(code: int) -> str:
    """``Error`` for an exit status, the signal's name for a negative code (``SIGKILL`` for -9)."""
    if code >= 0:
        return "Error"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _event(line: str, pod: str, unit: str) -> Termination | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    meta = event.get("metadata") if isinstance(event, dict) else None
    name = event.get("name") if isinstance(event, dict) else None
    if not isinstance(meta, dict) or name not in (FAILED_EVENT, SUCCEEDED_EVENT):
        return None
    rank, code = meta.get("global_rank"), _first(_json(meta.get("metadata")).get("exit_code"))
    if name == SUCCEEDED_EVENT:
        code = 0
    if not isinstance(rank, int) or not isinstance(code, int):
        return None
    record = error_record(_json(meta.get("raw_error")))
    host = meta.get("hostname")
    return Termination(
        pod=pod,
        node=None,
        host=host if isinstance(host, str) and host else None,
        reason=reason(code) if code else EXITED,
        exit_code=code,
        time=record.time if record else None,
        rank=rank,
        message=record.message if record else None,
        unit=unit,
    )


def _json(text: object) -> dict[str, Any]:
    if not isinstance(text, str):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _first(value: object) -> object:
    """The value itself: the agent writes a worker's numbers as one-element lists (``"exit_code": [-9]``)."""
    return value[0] if isinstance(value, list) and value else value


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _time(text: str) -> float | None:
    try:
        return datetime.strptime(text, _TIME_FORMAT).timestamp()
    except ValueError:
        return None
