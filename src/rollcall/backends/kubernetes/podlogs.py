"""Following a container's log from its start, into the pod's log sink, as the bytes arrive.

Why follow rather than fetch at the end: the kubelet serves only the newest file once a container log has
rotated past ``containerLogMaxSize`` (10 MiB by default), so lines printed early vanish from a fetch made
after the job; and a pod that is deleted takes its log with it.

One :class:`LogFollower` thread per container asks for the log with ``follow`` and ``timestamps``. The
timestamps are stripped before the sink sees a line; they serve to resume: when the connection breaks (an
API server restart, a reset), the follower asks for the log again and skips every line up to and including
the last one it kept, so nothing is lost and nothing is counted twice.

Each complete chunk of lines is also handed to ``scan`` on the way (the job's
:class:`~.efa.EfaEvidence` reads NCCL's lines about EFA there).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.kube import API_RETRY_S, CONNECT_TIMEOUT_S, is_transient, message_of
from rollcall.backends.kubernetes.watch import shutdown
from rollcall.collect import LogSink

log = logging.getLogger(__name__)

_TS = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
#: Read timeout of a followed log: training may print nothing for a long while (compilation, a slow epoch).
FOLLOW_READ_TIMEOUT_S = 24 * 3600.0
#: A line longer than this without a newline is passed on as it is.
_MAX_PENDING = 16 << 20


def timestamp_key(ts: bytes) -> tuple[int, int] | None:
    """``2026-01-02T03:04:05.123456789Z`` as (seconds since the epoch, nanoseconds), or None.

    The kubelet's timestamp of a log line, to the nanosecond, read from bytes on the hot path; an API
    object's timestamps are :func:`.views.parse_time`'s.
    """
    m = _TS.match(ts)
    if not m:
        return None
    zone = m[3].decode()
    when = datetime.fromisoformat(m[1].decode() + ("+00:00" if zone == "Z" else zone))
    return int(when.timestamp()), int((m[2] or b"0").ljust(9, b"0"))


@dataclass
class LogFollower:
    """Follows one container's log into ``sink`` in a thread; see the module docstring.

    Attributes:
        error: why the log could not be read to its end, if it could not.
        last_data: when bytes last arrived (monotonic seconds).
    """

    core: Any
    namespace: str
    pod: str
    container: str
    sink: LogSink
    scan: Callable[[bytes], None] | None = None
    retry_s: float = API_RETRY_S
    error: str | None = None
    received: int = 0
    reconnects: int = 0
    last_data: float = field(default_factory=time.monotonic)
    _pending: bytes = b""
    _last: tuple[int, int] | None = None
    _same: int = 0
    _replay: tuple[tuple[int, int], int] | None = None
    _replayed: int = 0
    _resp: Any = None
    _closing: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LogFollower:
        """Start following."""
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"rollcall-log {self.namespace}/{self.pod}/{self.container}"
        )
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        """Whether the follower has finished (the log ended, or it gave up, or was closed)."""
        return self._thread is not None and not self._thread.is_alive()

    def close(self) -> None:
        """Stop following now (used once the container has ended and the stream has gone quiet)."""
        self._closing.set()
        shutdown(self._resp)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        failing_since: float | None = None
        delay = 0.2
        try:
            while not self._closing.is_set():
                try:
                    self._follow()
                    return  # the log ended
                except Exception as exc:  # classified below
                    if self._closing.is_set():
                        return
                    if isinstance(exc, ApiException) and exc.status == 404:
                        self.error = f"pod gone before its log was read to the end ({message_of(exc)})"
                        return
                    # 400 while the container is being created, or no log served yet; else transient
                    retryable = is_transient(exc) or (isinstance(exc, ApiException) and exc.status == 400)
                    now = time.monotonic()
                    failing_since = failing_since or now
                    if not retryable or now - failing_since > self.retry_s:
                        self.error = f"log could not be read to the end: {message_of(exc)}"
                        return
                    log.debug("log of %s/%s: %s; resuming", self.namespace, self.pod, message_of(exc))
                self.reconnects += 1
                self._closing.wait(delay)
                delay = min(delay * 2, 5.0)
        finally:
            self._resp = None
            self._flush()
            self.sink.close()

    def _follow(self) -> None:
        if self._last is not None:
            self._replay, self._replayed = (self._last, self._same), 0
        self._pending = b""
        resp = self.core.read_namespaced_pod_log(
            self.pod,
            self.namespace,
            container=self.container,
            follow=True,
            timestamps=True,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, FOLLOW_READ_TIMEOUT_S),
        )
        self._resp = resp
        if self._closing.is_set():
            return
        for chunk in resp.stream(1 << 16, decode_content=False):
            self.last_data = time.monotonic()
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        self._pending += chunk
        if b"\n" not in chunk and len(self._pending) < _MAX_PENDING:
            return
        *lines, self._pending = self._pending.split(b"\n")
        if len(self._pending) >= _MAX_PENDING:
            lines.append(self._pending)
            self._pending = b""
        out = [text + b"\n" for text in self._keep(lines)]
        if out:
            self._write(b"".join(out))

    def _keep(self, lines: list[bytes]) -> list[bytes]:
        kept = []
        for line in lines:
            ts, sep, text = line.partition(b" ")
            key = timestamp_key(ts) if sep or ts else None
            if key is None:  # not a timestamped line: keep it whole
                kept.append(line)
            elif self._is_new(key):
                kept.append(text)
        return kept

    def _is_new(self, key: tuple[int, int]) -> bool:
        if self._replay is not None:
            last, same = self._replay
            if key < last:
                return False
            if key == last and self._replayed < same:
                self._replayed += 1
                return False
            self._replay = None
        if key == self._last:
            self._same += 1
        else:
            self._last, self._same = key, 1
        return True

    def _flush(self) -> None:
        if self._pending:
            kept = self._keep([self._pending])
            self._pending = b""
            if kept:
                self._write(kept[0])

    def _write(self, data: bytes) -> None:
        try:
            self.sink.write(data)
        except ValueError:  # the sink was closed under us: the run is over
            self._closing.set()
            return
        self.received += len(data)
        if self.scan is not None:
            self.scan(data)
