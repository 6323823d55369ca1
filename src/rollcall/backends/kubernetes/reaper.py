"""Last-resort clean-up: what a session created is deleted even if the session dies without doing so.

The runner deletes each run's namespace in ``finally`` (pass, fail, timeout, Ctrl-C, and SIGTERM, which
the plugin turns into KeyboardInterrupt). Two ways of dying skip ``finally`` and ``atexit`` alike:
pytest-timeout's ``thread`` method ends the process with ``os._exit``, and SIGKILL (or the OOM killer) ends
it outright.

So the kubernetes backend keeps a :class:`Ledger`: each run's :class:`Claim` (its namespace, or, in an
existing namespace given with ``--namespace``, its Jobs and Services there by run-id label, never that
namespace) is written to a small state file before anything is created and crossed out once it is gone,
and one watcher process per session (``python -m rollcall.backends.kubernetes.reaper``, in its own
session so Ctrl-C to the terminal does not reach it) sleeps until its parent goes away, then deletes
whatever is still listed. An ``atexit`` hook does the same in-process on an ordinary exit. The session
sweep (``--sweep-older-than``) covers anything these miss, such as a killed machine.
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollcall.backends.kubernetes.kube import Kube

log = logging.getLogger(__name__)

POLL_S = 0.5


@dataclass(frozen=True)
class Claim:
    """What a run leaves to delete: its namespace, or (``run_id`` set) its objects in a namespace not its own.

    In the state file it is one word: ``<namespace>`` or ``<namespace>/<run-id>`` (neither holds a ``/``).
    """

    namespace: str
    run_id: str | None = None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.run_id}" if self.run_id else self.namespace

    @classmethod
    def parse(cls, word: str) -> Claim:
        """The claim a state file's word names."""
        namespace, _, run_id = word.partition("/")
        return cls(namespace, run_id or None)


def release(kube: Kube, claim: Claim) -> None:
    """Delete what ``claim`` names: the namespace, or the run's Jobs and Services in it (by run-id label)."""
    from rollcall.backends.kubernetes.kube import delete_labelled, delete_namespace
    from rollcall.backends.kubernetes.manifests import RUN_ID_LABEL, secret_name

    if claim.run_id is None:
        delete_namespace(kube, claim.namespace)
    else:
        selector = f"{RUN_ID_LABEL}={claim.run_id}"
        delete_labelled(kube, claim.namespace, selector, secret_name(claim.run_id))


def pending(state: Path) -> list[Claim]:
    """Claims listed in ``state`` (``+word`` lines) and not crossed out since (``-word`` lines)."""
    words: dict[str, None] = {}
    try:
        text = state.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        op, word = line[:1], line[1:].strip()
        if op == "+" and word:
            words[word] = None
        elif op == "-":
            words.pop(word, None)
    return [Claim.parse(w) for w in words]


class Ledger:
    """What this process created and has not yet seen deleted; see the module docstring.

    Args:
        delete: deletes what one claim names (used by the in-process ``atexit`` hook).
        connect_args: ``--kubeconfig``/``--context`` arguments the watcher process connects with.
        watcher: whether to start the watcher process (on the first claim).
    """

    def __init__(
        self, delete: Callable[[Claim], object], connect_args: Sequence[str] = (), *, watcher: bool = True
    ) -> None:
        self._delete = delete
        self._connect_args = list(connect_args)
        self._watcher = watcher
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        fd, name = tempfile.mkstemp(prefix="rollcall-claims-", suffix=".txt")
        os.close(fd)
        self.state = Path(name)
        atexit.register(self._at_exit)

    def add(self, claim: Claim) -> None:
        """Record ``claim`` before anything it names is created."""
        with self._lock:
            self._append(f"+{claim}")
            if self._watcher and self._proc is None:
                self._proc = self._spawn()

    def remove(self, claim: Claim) -> None:
        """Cross ``claim`` out (what it names is gone, or kept on purpose with ``--keep``)."""
        with self._lock:
            self._append(f"-{claim}")

    def pending(self) -> list[Claim]:
        """What is still listed."""
        return pending(self.state)

    def delete_pending(self) -> None:
        """Delete what every claim still listed names (the ``atexit`` hook; errors are logged)."""
        for claim in self.pending():
            try:
                self._delete(claim)
                self.remove(claim)
            except Exception as exc:  # last resort: report and go on
                what = f"namespace {claim}" if claim.run_id is None else f"the objects of run {claim}"
                log.warning("could not delete %s at exit: %s", what, exc)

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
            "rollcall.backends.kubernetes.reaper",
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


def watch(parent: int, state: Path, delete: Callable[[Claim], None] | None = None) -> list[Claim]:
    """Sleep while ``parent`` lives, then delete what ``state`` still lists; returns what was deleted."""
    while os.getppid() == parent:
        time.sleep(POLL_S)
    claims = pending(state)
    done = []
    if claims and delete is not None:
        for claim in claims:
            with contextlib.suppress(Exception):
                delete(claim)
                done.append(claim)
    with contextlib.suppress(OSError):
        state.unlink()
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """The watcher process: ``python -m rollcall.backends.kubernetes.reaper --parent PID --state FILE``.

    ``--kubeconfig P`` names the cluster's configuration.
    """
    parser = argparse.ArgumentParser(prog="python -m rollcall.backends.kubernetes.reaper")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    args = parser.parse_args(argv)

    kube: Any = None

    def delete(claim: Claim) -> None:
        nonlocal kube
        from rollcall.backends.kubernetes.kube import connect

        kube = kube or connect(args.kubeconfig, args.context)
        release(kube, claim)

    watch(args.parent, args.state, delete)
    return 0


if __name__ == "__main__":
    sys.exit(main())
