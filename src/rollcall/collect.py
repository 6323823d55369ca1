"""Per-pod log collection: each log is written to its own artifact file and parsed as it arrives.

A backend asks the :class:`Collector` for one :class:`LogSink` per pod (or local node) and writes that pod's
bytes into it as they come. Nothing is ever concatenated across pods, and nothing waits for the job's end to
read a log, so a log that rotates or a pod that is deleted has already been read.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any, TypeVar

from rollcall.ranklog import Format, LogParser, RollCall

_log = logging.getLogger(__name__)

#: The session's reports, written to the top of the artifacts directory.
RESULTS_FILE = "results.json"
RANKS_JUNIT_FILE = "ranks.junit.xml"
REPORT_FILE = "report.html"
#: The nodes with an unfit device, one name a line (written only when there are some), for a script to cordon.
UNFIT_NODES_FILE = "unfit-nodes.txt"

T = TypeVar("T")
E = TypeVar("E", bound=Exception)


#: What XML 1.0 and HTML forbid in text (most C0 controls, lone surrogates, U+FFFE and U+FFFF), which a
#: rank's log may hold: colour escapes, a NUL, bytes of no encoding kept as surrogates.
_UNPRINTABLE = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def printable(text: str) -> str:
    """``text`` with each character a page or an XML report cannot hold written as its Python escape."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a reader never finds half a report.

    The text goes to a temporary file beside ``path`` and replaces it only once written and flushed to the
    disk. When that fails (a full disk, a quota, an I/O error) the temporary file is removed, and so is any
    earlier file at ``path``, which no longer says what this session found; the :class:`OSError` is raised.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError:
        for stale in (temporary, path):
            try:
                stale.unlink(missing_ok=True)
            except OSError as exc:  # the clean-up's own failure must not hide why the write failed
                _log.warning("%s: not removed: %s", stale, exc)
        raise


def read_results(file: Path, error: type[E]) -> dict[str, Any]:
    """A session's ``results.json`` as written; ``error`` (naming the file and the fix) when it is not one."""
    try:
        doc = json.loads(file.read_text())
    except OSError as exc:
        raise error(f"cannot read {file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise error(f"{file} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list):
        raise error(f'{file} has no "tests" list: is it a rollcall {RESULTS_FILE}?')
    return doc


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """``name`` with every run of characters unsafe in a file name replaced by ``_``."""
    return _UNSAFE.sub("_", name)


class LogSink:
    """One pod's log: appended to ``path`` and fed to that pod's parser."""

    def __init__(self, path: Path, parser: LogParser, lock: threading.Lock) -> None:
        self.name = parser.source
        self.path = path
        self._parser = parser
        self._lock = lock
        self._file: IO[bytes] | None = open(path, "wb")  # noqa: SIM115 - closed in close()
        # Each pod's own parser is fed under one lock shared by all sinks of the roll call.

    def write(self, data: bytes) -> None:
        """Keep and parse ``data``."""
        if self._file is None:
            raise ValueError(f"log sink {self.path} is closed")
        self._file.write(data)
        self._file.flush()  # the artifact on disk is live: a person can tail it while the job runs
        with self._lock:
            self._parser.feed(data)

    def close(self) -> None:
        """Flush the file and let the parser read a last unterminated line."""
        if self._file is not None:
            self._file.close()
            self._file = None
            with self._lock:
                self._parser.close()


class Collector:
    """Hands out one :class:`LogSink` per pod, all recording into one :class:`RollCall`."""

    def __init__(self, directory: Path, fmt: Format = "auto") -> None:
        self.directory = directory
        self.fmt = fmt
        self.roll = RollCall()
        self.sinks: list[LogSink] = []
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)

    def sink(self, name: str, source: str | None = None) -> LogSink:
        """A new sink for the log called ``name`` (a pod name, or ``node-<i>`` locally).

        ``source``: whose log it is, when not ``name``'s (a pod's sidecar's log is its pod's): events read
        from it count as that node's.
        """
        path = self.directory / f"{safe_name(name)}.log"
        sink = LogSink(path, self.roll.parser(source or name, self.fmt), self._lock)
        self.sinks.append(sink)
        return sink

    def view(self, look: Callable[[RollCall], T]) -> T:
        """``look(roll)`` while no sink feeds the roll call: a consistent view of it as the logs arrive."""
        with self._lock:
            return look(self.roll)

    def on_the_way(self, nodes: Iterable[int]) -> None:
        """That the backend sees ``nodes`` on their way now, and no other (:meth:`RollCall.on_the_way`)."""
        with self._lock:
            self.roll.on_the_way(nodes)

    def close(self) -> None:
        """Close every sink (idempotent)."""
        for sink in self.sinks:
            sink.close()
