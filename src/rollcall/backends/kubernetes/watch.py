"""Watching the API server: :class:`Informer` and one watch-driven wait, :func:`wait_for`.

:class:`Informer` lists then watches one kind of object, re-listing when the server says the resource
version has expired (410 Gone) and reconnecting after transient errors (:func:`.kube.retrying`), and keeps
the newest copy of each object. :func:`wait_for` re-tests a condition on every change any informer sees (and
every ``poll_s``) under one deadline, like ``kr8s``'s waits and e2e-framework's ``wait.For``. A streaming
response is read line by line (:func:`iter_lines`) and released from another thread (:func:`shutdown`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.kube import (
    API_RETRY_S,
    CONNECT_TIMEOUT_S,
    KubeError,
    call,
    message_of,
    retrying,
)
from rollcall.backends.kubernetes.views import Obj, View, items

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Server-side timeout of each watch request; the informer simply watches again after it.
WATCH_TIMEOUT_S = 240


def iter_lines(resp: Any) -> Iterator[bytes]:
    """The newline-separated lines of a streaming response, as they arrive."""
    pending = b""
    for chunk in resp.stream(1 << 16, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line)
    if pending:
        yield pending


class Informer:
    """Lists, then watches, one kind of object; keeps the newest copy of each, by name.

    Args:
        list_fn: a ``list_*`` method of a typed API (e.g. ``core.list_namespaced_pod``).
        what: a name for messages, e.g. ``"pods of job x"``.
        retry_s: how long transient errors are retried before the informer gives up and sets ``error``.
        **selector: the list method's arguments (``namespace``, ``label_selector``, ``field_selector``).
    """

    def __init__(
        self, list_fn: Callable[..., Any], what: str, *, retry_s: float = API_RETRY_S, **selector: Any
    ) -> None:
        self.what = what
        self.error: BaseException | None = None
        self.synced = threading.Event()
        self.reconnects = 0
        self._list_fn = list_fn
        self._selector = selector
        self._retry_s = retry_s
        self._objects: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._stopped = threading.Event()
        self._resp: Any = None
        self._version: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rollcall-watch {what}")

    def start(self) -> Informer:
        """Start listing and watching in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the open watch is shut down at once)."""
        self._stopped.set()
        shutdown(self._resp)

    def objects(self) -> list[Obj]:
        """A snapshot of the objects seen."""
        with self._lock:
            return list(self._objects.values())

    def get(self, name: str) -> Obj | None:
        """The newest copy of the object called ``name``, if it exists."""
        with self._lock:
            return self._objects.get(name)

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from the watch thread) after every change."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not end the watch
                log.exception("listener of %s failed", self.what)

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                for attempt in retrying(self._retry_s):
                    with attempt:
                        if self._stopped.is_set():
                            return
                        self._session()
        except BaseException as exc:
            if not self._stopped.is_set():
                log.warning("watching %s failed: %s", self.what, message_of(exc))
                self.error = exc
                self._notify()

    def _session(self) -> None:
        """List (when there is no version to resume from), then watch until the server ends the watch.

        ``_version`` follows every event, so a broken watch resumes where it stopped; an expired version
        (410 Gone) clears it, and the next session lists again.
        """
        if self._version is None:
            body = call(self._list_fn, retry_s=0, **self._selector)
            with self._lock:
                self._objects = {View(o).name: o for o in items(body)}
            self._version = View(body).resource_version or None  # none: the next session lists again
            self.synced.set()
            self._notify()
        try:
            resp = self._list_fn(
                watch=True,
                resource_version=self._version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_TIMEOUT_S,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_S, WATCH_TIMEOUT_S + 30),
                **self._selector,
            )
        except ApiException as exc:
            if exc.status == 410:
                self._version = None
                return
            raise
        self._resp = resp
        try:
            for line in iter_lines(resp):
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:  # expired: list again
                        self.reconnects += 1
                        self._version = None
                        return
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if kind != "BOOKMARK":
                    name = View(obj).name
                    with self._lock:
                        if kind == "DELETED":
                            self._objects.pop(name, None)
                        else:
                            self._objects[name] = obj
                self._version = View(obj).resource_version or self._version
                if kind != "BOOKMARK":
                    self._notify()
        except Exception:
            if self._stopped.is_set():
                return
            self.reconnects += 1
            raise
        finally:
            self._resp = None
            shutdown(resp)


def shutdown(resp: Any) -> None:
    """Unblock a read on a streaming response from another thread, and release it (None is fine)."""
    if resp is None:
        return
    try:
        unblock = getattr(resp, "shutdown", None)  # urllib3 >= 2.3
        if unblock is not None:
            unblock()
        resp.close()
    except Exception:  # best effort on a connection that may already be gone
        pass


class WaitTimeout(TimeoutError):
    """:func:`wait_for` ran out of time; ``last`` is the last state the caller's ``describe`` gave."""

    def __init__(self, message: str, last: str = "") -> None:
        super().__init__(f"{message}; last seen: {last}" if last else message)
        self.last = last


class WatchLost(KubeError):
    """An informer gave up: its watch failed for longer than the retry bound, or with a permanent error."""


def wait_for(
    condition: Callable[[], T | None],
    *informers: Informer,
    timeout_s: float,
    poll_s: float = 1.0,
    what: str = "condition",
    describe: Callable[[], str] | None = None,
) -> T:
    """Re-test ``condition`` on every change an informer sees (and every ``poll_s``) until it gives a value.

    ``condition`` runs on the calling thread, only once every informer has listed. Raises
    :class:`WaitTimeout` after ``timeout_s`` (with ``describe()`` as the last state seen), and
    :class:`WatchLost` when an informer gives up.
    """
    wake = threading.Event()
    for informer in informers:
        informer.subscribe(wake.set)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            wake.clear()
            for informer in informers:
                if informer.error is not None:
                    raise WatchLost(
                        f"lost the watch on {informer.what}: {message_of(informer.error)}"
                    ) from informer.error
            if all(i.synced.is_set() for i in informers):
                result = condition()
                if result is not None:
                    return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"{what} not met within {timeout_s:g}s", describe() if describe else "")
            wake.wait(min(poll_s, remaining))
    finally:
        for informer in informers:
            informer.unsubscribe(wake.set)
