"""What ``/proc`` says of a process: its state, its parent, its children, its environment.

One reader for everything that looks at processes (the node's monitor, the GPU's holders, the suite's
``procs``), so that each reads a process the same way and none takes a passing state for a lasting one:

- A process inside ``execve`` has, for a few microseconds (longer when it is preempted there, on a loaded
  machine), a new address space whose environment is not yet laid out: ``/proc/<pid>/environ`` reads empty,
  as it does for a process that is exiting. :func:`environs` reads such a process again until its
  environment is there, it has gone, or ``settle_s`` has passed; a process whose environment is really
  empty (``env -i``) costs that bound once per call, however many there are.
- A kernel thread has no environment at all, and a zombie none left: neither is read again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

PROC = "/proc"
#: ``/proc/<pid>/stat``'s flags: a kernel thread, and a process that is exiting (``include/linux/sched.h``).
PF_KTHREAD = 0x00200000
PF_EXITING = 0x00000004
#: How long an empty environment is read again before it is taken as empty (see the module docstring).
SETTLE_S = 0.5


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` the project reads."""

    pid: int
    #: One letter: R running, S sleeping, D uninterruptible, T stopped, t traced, Z zombie, X dead, ...
    state: str
    ppid: int
    pgrp: int
    session: int
    flags: int
    #: Clock ticks since boot: with the pid, names the process whatever reuses its pid later.
    start_ticks: int

    @property
    def kernel_thread(self) -> bool:
        """A thread of the kernel's (no address space, no environment)."""
        return bool(self.flags & PF_KTHREAD)

    @property
    def gone(self) -> bool:
        """A zombie or dead: it has exited, only its parent's wait is left."""
        return self.state in ("Z", "X")

    @property
    def ending(self) -> bool:
        """Exited or exiting: its address space (and so its environment) is gone or going."""
        return self.gone or bool(self.flags & PF_EXITING)


def stat(pid: int, proc: str = PROC) -> Stat | None:
    """``/proc/<pid>/stat`` read (None: no such process, or unreadable)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces and parentheses.
    fields = text.rpartition(")")[2].split()
    try:
        return Stat(
            pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[6]), int(fields[19])
        )
    except (IndexError, ValueError):
        return None


def pids(proc: str = PROC) -> list[int]:
    """Every process's pid in this pid namespace."""
    try:
        return sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return []


def cmdline(pid: int, proc: str = PROC) -> list[str]:
    """``pid``'s arguments (empty: a kernel thread, a zombie, or gone)."""
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def children(pid: int, proc: str = PROC) -> list[int]:
    """The pids of ``pid``'s child processes.

    Read from each of its threads' ``children`` file, else from every process's ``stat`` (a kernel built
    without ``CONFIG_PROC_CHILDREN``).
    """
    try:
        tasks = os.listdir(os.path.join(proc, str(pid), "task"))
    except OSError:
        return []
    found: list[int] = []
    try:
        for task in tasks:
            with open(os.path.join(proc, str(pid), "task", task, "children"), encoding="ascii") as f:
                found += [int(word) for word in f.read().split()]
        return found
    except (OSError, ValueError):
        pass
    return [p for p in pids(proc) if (s := stat(p, proc)) is not None and s.ppid == pid]


def _read_environ(pid: int, proc: str) -> bytes | None:
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as f:
            return f.read()
    except OSError:
        return None


def parse_environ(raw: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ``'s ``NAME=value`` entries (entries without ``=`` dropped)."""
    found = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            found[name.decode(errors="replace")] = value.decode(errors="replace")
    return found


def _settling(pid: int, proc: str) -> bool:
    """Whether an empty environment of ``pid`` may be one it is between (a live, non-kernel process)."""
    s = stat(pid, proc)
    return s is not None and not s.kernel_thread and not s.ending


def environs(
    wanted: Iterable[int], proc: str = PROC, *, settle_s: float = SETTLE_S
) -> dict[int, dict[str, str]]:
    """The environment of each process of ``wanted`` that has one to read, by pid.

    A process that is gone, unreadable (another user's, as a non-root reader), a kernel thread or a zombie
    is left out. One whose environment reads empty while it lives is read again, every such process in each
    round, until it reads whole or ``settle_s`` has passed (see the module docstring): it is left out only
    when it is still empty then.
    """
    found: dict[int, dict[str, str]] = {}
    empty: list[int] = []
    for pid in wanted:
        raw = _read_environ(pid, proc)
        if raw:
            found[pid] = parse_environ(raw)
        elif raw is not None:
            empty.append(pid)
    deadline = time.monotonic() + settle_s
    while empty := [pid for pid in empty if _settling(pid, proc)]:
        if time.monotonic() >= deadline:
            break
        time.sleep(0.0005)  # let it run on to the end of its execve
        for pid in list(empty):
            if raw := _read_environ(pid, proc):
                found[pid] = parse_environ(raw)
                empty.remove(pid)
    return found


def environ(pid: int, proc: str = PROC, *, settle_s: float = SETTLE_S) -> dict[str, str] | None:
    """One process's environment (see :func:`environs`); None when it has none to read."""
    return environs([pid], proc, settle_s=settle_s).get(pid)


def stats(proc: str = PROC) -> dict[int, Stat]:
    """Every process's :class:`Stat`, by pid (those that went away while read are left out)."""
    return {pid: s for pid in pids(proc) if (s := stat(pid, proc)) is not None}
