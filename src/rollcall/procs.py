"""Finding and ending the processes of one run, whoever their parent is now.

torchrun starts every worker in a session of its own, so killing an agent's process group does not reach
its workers, and a worker whose agent died is re-parented. Every process the local backend starts therefore
carries ``ROLLCALL_RUN_ID=<run id>`` in its environment, which children inherit; :func:`find_run` finds them
all by that mark in ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterable
from pathlib import Path

RUN_ID_ENV = "ROLLCALL_RUN_ID"
_PROC = Path("/proc")


def marked() -> dict[int, str]:
    """Every live process that carries a run id, with that id."""
    prefix = f"{RUN_ID_ENV}=".encode()
    found = {}
    me = os.getpid()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or prefix not in environ:
            continue
        for var in environ.split(b"\0"):
            if var.startswith(prefix):
                found[int(entry.name)] = var[len(prefix) :].decode(errors="replace")
    return found


def find_run(run_id: str) -> list[int]:
    """Pids of live processes whose environment carries ``ROLLCALL_RUN_ID=<run_id>``."""
    return sorted(pid for pid, rid in marked().items() if rid == run_id)


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each pid, ignoring those already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait (on pidfds, without polling) until the processes end; return those still alive at the timeout."""
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    try:
        alive = dict(fds)
        while alive:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                alive.pop(fd, None)
        return sorted(alive.values())
    finally:
        for fd in fds:
            os.close(fd)


def end_run(run_id: str, grace_s: float = 5.0) -> list[int]:
    """SIGTERM every process of the run, SIGKILL what is left after ``grace_s``; return any survivors."""
    pids = find_run(run_id)
    if not pids:
        return []
    signal_all(pids, signal.SIGTERM)
    left = wait_gone(pids, grace_s)
    signal_all(left, signal.SIGKILL)
    wait_gone(left, 5.0)
    return find_run(run_id)
