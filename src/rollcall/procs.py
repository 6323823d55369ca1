"""Finding and ending the processes of one run, whoever their parent is now.

torchrun starts every worker in a session of its own, so killing an agent's process group does not reach
its workers, and a worker whose agent died is re-parented. Every process the local backend starts therefore
carries ``ROLLCALL_RUN_ID=<run id>`` in its environment, which children inherit; :func:`find_run` finds them
all by that mark in ``/proc``, and a process that does not show it (caught inside ``execve``, or with its
environment cleared) by its descent from one that does.

Whatever ends the suite, its run's processes end too:

- an exception, Ctrl-C or SIGTERM (which :func:`raise_on_sigterm` turns into Ctrl-C): the run's clean-up, in
  ``finally``;
- SIGKILL of the suite: each agent is started through :func:`die_with_parent`, so the kernel sends it
  SIGTERM when the suite's thread that started it dies (``PR_SET_PDEATHSIG``, Linux), and torchrun's own
  SIGTERM handling ends its workers;
- anything that still escapes (an agent that could not act on SIGTERM, a machine without the parent-death
  signal): every process also carries ``ROLLCALL_OWNER=<pid>:<start time>``, the suite process that started
  the run; at the next session's start :func:`reap_orphans` ends each marked process whose owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from rollcall_workload import contract, procfs

#: The variable that marks every process of a run, declared by the contract the workload shares.
RUN_ID_ENV = contract.RUN_ID_ENV

#: ``<pid>:<start time>`` of the suite process that started the run (:func:`owner_mark`).
OWNER_ENV = "ROLLCALL_OWNER"
#: prctl(2)'s option that sets the signal a process gets when its parent (thread) dies.
PR_SET_PDEATHSIG = 1

#: Run by :func:`die_with_parent` in the child before the agent: asks for ``argv[1]`` at the parent's death,
#: gives up if the parent ``argv[2]`` already died (the request would then never fire), and becomes the agent.
_DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]), 0, 0, 0) != 0:\n"
    "    sys.exit(f'rollcall: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}')\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    sys.exit('rollcall: the suite that started this agent is gone; not starting it')\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


def die_with_parent(cmd: list[str], sig: signal.Signals = signal.SIGTERM) -> list[str]:
    """``cmd`` run so that it gets ``sig`` when this process's starting thread dies (Linux; elsewhere as is).

    A tiny Python program sets ``PR_SET_PDEATHSIG`` and then executes ``cmd`` in place (same pid; the setting
    survives ``execve``). The kernel sends the signal when the *thread* that started the child ends, so
    the thread that launches a job must outlive it (the runner launches, waits and cleans up in one thread).
    """
    if not sys.platform.startswith("linux"):
        return cmd
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(int(sig)), str(os.getpid()), *cmd]


def start_time(pid: int) -> int | None:
    """The process's start in clock ticks since boot (``/proc/<pid>/stat``'s 22nd field); None if gone."""
    s = procfs.stat(pid)
    return None if s is None or s.gone else s.start_ticks


def owner_mark(pid: int | None = None) -> str:
    """``<pid>:<start time>`` of this process (or ``pid``): it, whatever reuses its pid later."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid)}"


def owner_alive(mark: str) -> bool:
    """Whether the process ``mark`` (:func:`owner_mark`) names still runs (a malformed mark: yes)."""
    pid, _, started = mark.partition(":")
    if not pid.isdigit() or not started.isdigit():
        return True  # not ours to judge: never reap on a mark we cannot read
    return str(start_time(int(pid))) == started


def _processes() -> dict[int, dict[str, str]]:
    """Every live process of some run (but this one), with its rollcall variables.

    A process is a run's when its environment carries the run's id, or when it descends from one that does
    and carries no run id of its own: the parent chain does not change across ``execve``, so a process
    caught inside one (whose environment reads empty until it is laid out, see ``procfs``), or one that
    cleared its environment, is still found; ``procfs`` also reads a process caught there again.
    """
    me = os.getpid()
    table = {pid: s for pid, s in procfs.stats().items() if pid != me and not s.gone and not s.kernel_thread}
    environs = procfs.environs(table)
    own: dict[int, dict[str, str]] = {}
    for pid, env in environs.items():
        if RUN_ID_ENV in env:
            own[pid] = {k: env[k] for k in (RUN_ID_ENV, OWNER_ENV) if k in env}
    found: dict[int, dict[str, str] | None] = {}
    for pid in table:
        chain = []  # pid and its ancestors up to the first whose marks are known
        at = pid
        while at in table and at not in found:
            if at in own:
                found[at] = own[at]
                break
            chain.append(at)
            found[at] = None  # until its ancestors are known (and where pids reused make a loop)
            at = table[at].ppid
        for link in chain:
            found[link] = found.get(at)
    return {pid: m for pid in table if (m := found[pid]) is not None}


def marked() -> dict[int, str]:
    """Every live process that carries a run id, with that id."""
    return {pid: marks[RUN_ID_ENV] for pid, marks in _processes().items()}


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
    """SIGTERM every process of the run, SIGKILL what is left after ``grace_s``; return any survivors.

    Ctrl-C and SIGTERM are held until it is done, then delivered (:func:`signals_held`): the suite often gets
    SIGTERM twice (a CI runner signals the process group, and ``timeout`` forwards the signal to its child
    and its group again), and the second must not stop the clean-up the first began.
    """
    with signals_held(redeliver=True):
        pids = find_run(run_id)
        if not pids:
            return []
        signal_all(pids, signal.SIGTERM)
        left = wait_gone(pids, grace_s)
        signal_all(left, signal.SIGKILL)
        wait_gone(left, 5.0)
        return find_run(run_id)


@dataclass(frozen=True)
class Reaped:
    """The processes of one run whose suite had died, and what became of them."""

    run_id: str
    owner: str
    pids: tuple[int, ...]
    #: Those still alive after SIGTERM and SIGKILL (another user's, say).
    left: tuple[int, ...] = ()

    def line(self) -> str:
        """What a person reads at the session's start."""
        pid = self.owner.partition(":")[0]
        head = (
            f"rollcall: ended {len(self.pids)} process(es) of run {self.run_id} left behind by a suite that "
            f"is gone (pid {pid}): {', '.join(map(str, self.pids))}"
        )
        return head + (f"; still alive: {', '.join(map(str, self.left))}" if self.left else "")


def orphans(runs: Container[str] | None = None) -> dict[tuple[str, str], list[int]]:
    """The marked processes whose owner (``ROLLCALL_OWNER``) is gone, by (run id, owner).

    Of the run ids ``runs`` only, where given. A process without an owner mark (started by hand, or by an
    older suite) is never an orphan here.
    """
    found: dict[tuple[str, str], list[int]] = {}
    for pid, marks in sorted(_processes().items()):
        owner = marks.get(OWNER_ENV)
        if owner is not None and not owner_alive(owner) and (runs is None or marks[RUN_ID_ENV] in runs):
            found.setdefault((marks[RUN_ID_ENV], owner), []).append(pid)
    return found


def reap_orphans(grace_s: float = 5.0, runs: Container[str] | None = None) -> list[Reaped]:
    """End every run whose suite died without ending it (SIGTERM, then SIGKILL after ``grace_s``).

    Of the run ids ``runs`` only, where given: a test ends its own, never another session's on the machine.
    """
    reaped = []
    for (run_id, owner), pids in orphans(runs).items():
        left = end_run(run_id, grace_s)
        reaped.append(Reaped(run_id, owner, tuple(pids), tuple(left)))
    return reaped


@dataclass
class Held:
    """The signals that arrived while :func:`signals_held` held them, in order."""

    signals: list[signal.Signals] = field(default_factory=list)


@contextlib.contextmanager
def signals_held(
    sigs: Iterable[signal.Signals] = (signal.SIGINT, signal.SIGTERM), *, redeliver: bool = False
) -> Iterator[Held]:
    """Hold ``sigs`` while the block runs (a clean-up a second Ctrl-C or SIGTERM must not cut short).

    Each signal that arrives is recorded (:class:`Held`), not acted on. After the block the previous handlers
    are back; with ``redeliver`` each signal held is then raised again, once, for them to act on (the
    plugin's SIGTERM handler, Python's Ctrl-C), else the caller decides what the held signals mean. Only the
    main thread may set handlers: in another thread nothing is held (signals interrupt the main thread).
    """
    held = Held()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        held.signals.append(signal.Signals(signum))

    previous = {sig: signal.signal(sig, hold) for sig in sigs}
    try:
        yield held
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if redeliver:
            for sig in dict.fromkeys(held.signals):
                signal.raise_signal(sig)


# -- the suite's own Ctrl-C and SIGTERM: interrupted once, its clean-up and reports run whole ------


def raise_on_sigterm() -> None:
    """Turn SIGTERM (what CI sends on cancel) into KeyboardInterrupt, so clean-up in ``finally`` runs.

    SIGTERM then does what Ctrl-C does: the run is ended and judged as far as it got, the reports are
    written, and the session ends with pytest's exit code for an interruption (2). Either raises once: CI
    runners and ``timeout`` send a signal to the suite and to its group, so a second often arrives before
    the first's clean-up has begun, and must not interrupt the handling of the first (it is recorded in
    :data:`_SIGNALLED`). Python's own Ctrl-C handler is replaced likewise; a handler of the user's is kept.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        _SIGNALLED.append(sig)
        if len(_SIGNALLED) > 1:  # the first is on its way up: its clean-up must run
            return
        raise KeyboardInterrupt() if sig is signal.SIGINT else KeyboardInterrupt(f"signal {sig.name}")

    if threading.current_thread() is not threading.main_thread():
        return
    for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(sig) in (default, None):
            _REPLACED[sig] = signal.signal(sig, handler)


#: The Ctrl-C and SIGTERM that reached the session, in order: only the first was raised.
_SIGNALLED: list[signal.Signals] = []
#: The handlers :func:`raise_on_sigterm` replaced, until :func:`restore_signal_handlers`.
_REPLACED: dict[signal.Signals, Any] = {}


def ignore_interrupts() -> None:
    """Interrupted once, the session is ending: a further Ctrl-C or SIGTERM must not cut the reports short.

    CI runners and ``timeout`` often send SIGTERM more than once; from now on both are ignored (the exit
    code is already pytest's for an interruption, 2); :func:`restore_signal_handlers` gives the handlers back
    (a session run inside another process, as pytester's are). Only the main thread may set handlers.
    """
    if threading.current_thread() is threading.main_thread() and not _IGNORED:
        for sig in (signal.SIGINT, signal.SIGTERM):
            _IGNORED[sig] = signal.signal(sig, signal.SIG_IGN)


#: The handlers :func:`ignore_interrupts` replaced, until :func:`restore_signal_handlers`.
_IGNORED: dict[signal.Signals, Any] = {}


def restore_signal_handlers() -> None:
    """Give back the Ctrl-C and SIGTERM handlers set aside, at the session's end."""
    if threading.current_thread() is threading.main_thread():
        while _IGNORED:
            sig, handler = _IGNORED.popitem()
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        while _REPLACED:
            sig, handler = _REPLACED.popitem()
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        _SIGNALLED.clear()
