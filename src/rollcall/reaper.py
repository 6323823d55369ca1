"""Last-resort clean-up: namespaces a session created are deleted even if the session dies without doing so.

The runner deletes each run's namespace in ``finally`` (pass, fail, timeout, Ctrl-C, and SIGTERM, which
the plugin turns into KeyboardInterrupt). Two ways of dying skip ``finally`` and ``atexit`` alike:
pytest-timeout's ``thread`` method ends the process with ``os._exit``, and SIGKILL (or the OOM killer) ends
it outright.

So the kubernetes backend keeps a :class:`Ledger`: each namespace is written to a small state file before it
is created and crossed out once it is gone, and one watcher process per session (``python -m
rollcall.reaper``, in its own session so Ctrl-C to the terminal does not reach it) sleeps until its parent
goes away, then deletes whatever is still listed. An ``atexit`` hook does the same in-process on an ordinary
exit. The session sweep (``--sweep-older-than``) covers anything these miss, such as a killed machine.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 0.5


def pending(state: Path) -> list[str]:
    """Namespaces listed in ``state`` (``+name`` lines) and not crossed out since (``-name`` lines)."""
    names: dict[str, None] = {}
    try:
        text = state.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        op, name = line[:1], line[1:].strip()
        if op == "+" and name:
            names[name] = None
        elif op == "-":
            names.pop(name, None)
    return list(names)


class Ledger:
    """The namespaces this process created and has not yet seen deleted; see the module docstring.

    Args:
        delete: deletes one namespace (used by the in-process ``atexit`` hook).
        connect_args: ``--kubeconfig``/``--context`` arguments the watcher process connects with.
        watcher: whether to start the watcher process (on the first namespace).
    """

    def __init__(
        self, delete: Callable[[str], object], connect_args: Sequence[str] = (), *, watcher: bool = True
    ) -> None:
        self._delete = delete
        self._connect_args = list(connect_args)
        self._watcher = watcher
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        fd, name = tempfile.mkstemp(prefix="rollcall-namespaces-", suffix=".txt")
        os.close(fd)
        self.state = Path(name)
        atexit.register(self._at_exit)

    def add(self, namespace: str) -> None:
        """Record ``namespace`` before it is created."""
        with self._lock:
            self._append(f"+{namespace}")
            if self._watcher and self._proc is None:
                self._proc = self._spawn()

    def remove(self, namespace: str) -> None:
        """Cross ``namespace`` out (it is gone, or kept on purpose with ``--keep``)."""
        with self._lock:
            self._append(f"-{namespace}")

    def pending(self) -> list[str]:
        """What is still listed."""
        return pending(self.state)

    def delete_pending(self) -> None:
        """Delete every namespace still listed (the ``atexit`` hook; errors are logged)."""
        for namespace in self.pending():
            try:
                self._delete(namespace)
                self.remove(namespace)
            except Exception as exc:  # last resort: report and go on
                log.warning("could not delete namespace %s at exit: %s", namespace, exc)

    def _at_exit(self) -> None:
        self.delete_pending()
        if not self._watcher or self._proc is None:  # else the watcher removes the file after us
            with contextlib.suppress(OSError):
                self.state.unlink()

    def _append(self, line: str) -> None:
        with self.state.open("a") as f:
            f.write(line + "\n")

    def _spawn(self) -> subprocess.Popen[bytes]:
        cmd = [
            sys.executable,
            "-m",
            "rollcall.reaper",
            "--parent",
            str(os.getpid()),
            "--state",
            str(self.state),
            *self._connect_args,
        ]
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )


def watch(parent: int, state: Path, delete: Callable[[str], None] | None = None) -> list[str]:
    """Sleep while ``parent`` lives, then delete what ``state`` still lists; returns what was deleted."""
    while os.getppid() == parent:
        time.sleep(POLL_S)
    names = pending(state)
    done = []
    if names and delete is not None:
        for name in names:
            with contextlib.suppress(Exception):
                delete(name)
                done.append(name)
    with contextlib.suppress(OSError):
        state.unlink()
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """The watcher process: ``python -m rollcall.reaper --parent PID --state FILE [--kubeconfig P]``."""
    parser = argparse.ArgumentParser(prog="python -m rollcall.reaper")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    args = parser.parse_args(argv)

    kube: Any = None

    def delete(namespace: str) -> None:
        nonlocal kube
        from rollcall.kube import connect, delete_namespace

        kube = kube or connect(args.kubeconfig, args.context)
        delete_namespace(kube, namespace)

    watch(args.parent, args.state, delete)
    return 0


if __name__ == "__main__":
    sys.exit(main())
