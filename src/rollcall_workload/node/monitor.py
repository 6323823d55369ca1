"""The node's monitor: one process per node, outside the ranks, that sees what a stuck rank cannot say.

Each rank's watchdog writes its heartbeat and arms faulthandler's C-level timer into the node's monitor
directory (``ROLLCALL_MONITOR_DIR``, see the contract's Heartbeat). The monitor reads them about once a
second (:data:`POLL_S`) and writes, to its own stdout (the node's log, beside the ranks' lines):

- ``stack`` events (``source`` ``faulthandler``) for each dump faulthandler wrote: its plain text parsed into
  frames (:func:`parse_stacks`), the source lines read from the files (the workload's own named relative to
  its package, as the watchdog names them), so the suite classifies them as it does the watchdog's;
- ``silent`` when a rank's heartbeat and its progress both stopped more than its bound plus
  :data:`SILENT_MARGIN_S` ago while its process still exists, with that process's state
  (:func:`process_state`: ``T`` stopped, ``D`` uninterruptible sleep); a ``resumed`` (dump 0) once its
  heartbeat comes back.

- ``launcher`` (rank -1) where it starts the node's launcher (:class:`LauncherWatch`): ``started`` as it
  starts it, ``waiting`` at each multiple of the join bound (``--join-hang-after``) while no rank of the node
  has been spawned (the launchers' rendezvous has not completed: a node's torchrun spawns its ranks only once
  every node's has joined it), with the launcher's process state, and ``spawned`` once its ranks run.

What it watches is a list of :class:`Source`; the ranks' files are one (:class:`RankFiles`), the node's
GPUs' NVML events another (:class:`~rollcall_workload.node.gpu_listener.GpuEvents`, where NVML answers; its
line on stderr says what it watches, or why it is off). A source that also has a ``close`` (:class:`Closing`)
is closed once, after the last poll: the GPU listener counts the GPUs again then.

Run as ``python -m rollcall_workload.node.monitor --dir DIR [--node-rank N] [--join-hang-after S]``,
then ``[-- CMD...]``: with a command (the node's torchrun) it starts the command and ends as it ends, with
its status; without one it is a sidecar, ended by SIGTERM. ``ROLLCALL_NO_LAUNCH_NODE`` naming its node makes
it start nothing at all (:mod:`rollcall_workload.faults`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rollcall_workload import faults, procfs
from rollcall_workload.contract import MONITOR_DIR_ENV, encode_event
from rollcall_workload.contract.heartbeat import (
    STACKS_HEADER,
    Heartbeat,
    heartbeat_path,
    read_heartbeat,
    stacks_path,
)
from rollcall_workload.contract.node import NO_RANK
from rollcall_workload.node.gpu_listener import GpuEvents, node_name
from rollcall_workload.rank.watchdog import JOIN_HANG_S, encode_stack, frame_entry

#: Seconds between two looks at the ranks' files.
POLL_S = 1.0
#: A rank is silent once its heartbeat and its progress both stopped more than its bound plus this margin
#: ago: the watchdog thread writes the heartbeat at least once a second, so a live rank is never this late.
SILENT_MARGIN_S = 5.0
#: Process states by the letter of ``/proc/<pid>/stat``.
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "uninterruptible sleep",
    "T": "stopped",
    "t": "stopped by a tracer",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
    "P": "parked",
    "W": "paging",
}

_HEARTBEAT = re.compile(r"^rank-(\d+)\.heartbeat$")
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x([0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?+) in (.*?)\s*$')
_TIMEOUT = "Timeout ("


class Source(Protocol):
    """Something the monitor looks at once per poll: what it returns are whole roll-call lines to write."""

    def poll(self, now: float) -> Iterable[bytes]:
        """The lines to write now (``now``: the wall clock)."""
        ...


@runtime_checkable
class Closing(Protocol):
    """A source with something to say once at the end, after its last poll."""

    def poll(self, now: float) -> Iterable[bytes]:
        """As :meth:`Source.poll`."""
        ...

    def close(self, now: float) -> Iterable[bytes]:
        """The lines to write at the end."""
        ...


def process_state(pid: int, proc: str = procfs.PROC) -> tuple[str, str] | None:
    """``(letter, words)`` of the process's state, or None when it is gone (or a zombie)."""
    s = procfs.stat(pid, proc)
    if s is None or s.gone:
        return None
    return s.state, STATES.get(s.state, s.state)


@dataclass(frozen=True)
class ThreadText:
    """One thread of a faulthandler dump: its id, its frames ``(file, line, function)`` innermost first."""

    ident: int
    frames: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class FaultDumps:
    """A section of a rank's stacks file: the header written when the timer was armed, the dumps since."""

    header: dict[str, Any]
    dumps: tuple[tuple[ThreadText, ...], ...] = ()


def parse_stacks(text: str) -> tuple[FaultDumps, ...]:
    """A stacks file's sections: each header its watchdog wrote, with faulthandler's dumps after it.

    A section without a whole header line is left out (the file is read while the rank writes it).
    """
    sections: list[FaultDumps] = []
    for part in text.split(STACKS_HEADER)[1:]:
        head, newline, rest = part.partition("\n")
        try:
            header = json.loads(head) if newline else None
        except ValueError:
            header = None
        if isinstance(header, dict):
            sections.append(FaultDumps(header, _dumps(rest)))
    return tuple(sections)


def _dumps(text: str) -> tuple[tuple[ThreadText, ...], ...]:
    """The dumps in ``text``: each ``Timeout (...)!`` and the threads after it."""
    dumps: list[tuple[ThreadText, ...]] = []
    threads: list[ThreadText] | None = None
    current: tuple[int, list[tuple[str, int, str]]] | None = None

    def close_thread() -> None:
        nonlocal current
        if current is not None and threads is not None:
            threads.append(ThreadText(current[0], tuple(current[1])))
        current = None

    for line in text.splitlines():
        if line.startswith(_TIMEOUT):
            close_thread()
            if threads is not None:
                dumps.append(tuple(threads))
            threads = []
        elif (m := _THREAD.match(line)) is not None and threads is not None:
            close_thread()
            current = (int(m.group(1), 16), [])
        elif (f := _FRAME.match(line)) is not None and current is not None:
            number = int(f.group(2)) if f.group(2).isdigit() else 0
            current[1].append((f.group(1), number, f.group(3)))
    close_thread()
    if threads is not None:
        dumps.append(tuple(threads))
    return tuple(dumps)


def frames_of(thread: ThreadText) -> list[list[Any]]:
    """The thread's frames as the watchdog writes them: outermost first, source lines read from the files."""
    return [
        frame_entry(traceback.FrameSummary(file, line, function))
        for file, line, function in reversed(thread.frames)
    ]


def stack_lines(dumps: FaultDumps, rank: int, world_size: int | None) -> list[bytes]:
    """The ``stack`` events of the last dump of ``dumps``: one per thread, the main thread first."""
    if not dumps.dumps:
        return []
    header = dumps.header
    skip = {int(i) for i in header.get("skip", ()) if isinstance(i, int)}
    main = header.get("main")
    threads = [t for t in dumps.dumps[-1] if t.ident not in skip]
    threads.sort(key=lambda t: t.ident != main)
    timeout = _float(header.get("timeout"))
    armed, since = _float(header.get("armed")), _float(header.get("since"))
    stalled = None
    if timeout is not None and armed is not None and since is not None:
        stalled = round(armed + timeout * len(dumps.dumps) - since, 3)
    lines = []
    for t in threads:
        is_main = t.ident == main
        name = str(header.get("main_name") or "MainThread") if is_main else f"thread 0x{t.ident:x}"
        lines.append(
            encode_stack(
                rank,
                world_size if world_size is not None else -1,
                frames_of(t),
                dump=int(header.get("dump", 1)),
                thread=name,
                main=is_main,
                threads=len(threads),
                phase=str(header.get("phase", "")),
                stalled_s=stalled,
                hang_after=_float(header.get("hang_after")),
                source="faulthandler",
            )
        )
    return lines


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class RankFiles:
    """The ranks' files in one monitor directory: faulthandler's dumps turned into events, silence named."""

    directory: str
    margin: float = SILENT_MARGIN_S
    state_of: Callable[[int], tuple[str, str] | None] = process_state
    _said: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, dump): its dumps written
    _silent: dict[int, float] = field(default_factory=dict)  # rank: the progress it went silent at

    def heartbeats(self) -> dict[int, Heartbeat]:
        """Each rank's last heartbeat in the directory, by rank."""
        found = {}
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                m = _HEARTBEAT.match(name)
                if m is None:
                    continue
                rank = int(m.group(1))
                for _ in range(2):  # a write caught half-way is read again
                    try:
                        with open(heartbeat_path(self.directory, rank), "rb") as f:
                            beat = read_heartbeat(f.read())
                    except OSError:
                        beat = None
                    if beat is not None:
                        found[rank] = beat
                        break
        return found

    def poll(self, now: float) -> list[bytes]:
        """The new stack dumps, and each rank gone silent or back, as lines."""
        lines: list[bytes] = []
        for rank, beat in sorted(self.heartbeats().items()):
            lines += self._stacks(rank, beat)
            lines += self._silence(rank, beat, now)
        return lines

    def _stacks(self, rank: int, beat: Heartbeat) -> list[bytes]:
        try:
            with open(stacks_path(self.directory, rank), encoding="utf-8", errors="replace") as f:
                sections = parse_stacks(f.read())
        except OSError:
            return []
        lines = []
        for section in sections:
            key = (rank, int(section.header.get("dump", 1)))
            if section.dumps and self._said.get(key) != len(section.dumps):
                self._said[key] = len(section.dumps)
                lines += stack_lines(section, rank, beat.world_size)
        return lines

    def _silence(self, rank: int, beat: Heartbeat, now: float) -> list[bytes]:
        limit = beat.hang_after + self.margin
        quiet, stalled = now - (beat.time or 0.0), now - beat.progress
        if quiet <= limit:
            if self._silent.pop(rank, None) is None:
                return []
            return [encode_event("resumed", rank, beat.world_size or -1, dump=0, phase=beat.phase)]
        if stalled <= limit or self._silent.get(rank) == beat.progress:
            return []
        state = self.state_of(beat.pid)
        if state is None:  # the process is gone: its launcher sees that
            return []
        self._silent[rank] = beat.progress
        return [
            encode_event(
                "silent",
                rank,
                beat.world_size or -1,
                phase=beat.phase,
                steps=beat.steps,
                stalled_s=round(stalled, 3),
                heartbeat_s=round(quiet, 3),
                hang_after=beat.hang_after,
                margin_s=self.margin,
                pid=beat.pid,
                state=state[0],
                state_name=state[1],
            )
        ]


@dataclass
class LauncherWatch:
    """The node's launcher, from the moment the monitor started it until it spawned the node's ranks.

    ``started`` (the wall clock at its start) is said at once (:meth:`first`); ``waiting`` at each multiple
    of ``bound`` with no rank of the node spawned (no child process of the launcher, no heartbeat in the
    monitor directory), ``spawned`` once one is, and then nothing more.
    """

    pid: int
    node_rank: int
    started: float
    bound: float = JOIN_HANG_S
    ranks: RankFiles | None = None
    children_of: Callable[[int], list[int]] = procfs.children
    state_of: Callable[[int], tuple[str, str] | None] = process_state
    node: str = field(default_factory=node_name)
    _waits: int = 0
    _spawned: bool = False

    def line(self, state: str, now: float) -> bytes:
        """One ``launcher`` line of ``state`` at ``now``."""
        process = self.state_of(self.pid)
        return encode_event(
            "launcher",
            NO_RANK,
            NO_RANK,
            state=state,
            node_rank=self.node_rank,
            node=self.node,
            pid=self.pid,
            waited_s=round(max(0.0, now - self.started), 3),
            bound_s=self.bound,
            process_state=process[0] if process else "",
            process_state_name=process[1] if process else "",
        )

    def first(self) -> bytes:
        """The ``started`` line."""
        return self.line("started", self.started)

    def poll(self, now: float) -> list[bytes]:
        """``spawned`` once the node's ranks run, ``waiting`` at each bound until then."""
        if self._spawned:
            return []
        if self.children_of(self.pid) or (self.ranks is not None and self.ranks.heartbeats()):
            self._spawned = True
            return [self.line("spawned", now)]
        waits = int((now - self.started) // self.bound) if self.bound > 0 else 0
        if waits <= self._waits:
            return []
        self._waits = waits
        return [self.line("waiting", now)]


def watch_once(sources: Sequence[Source], fd: int = 1, *, last: bool = False) -> None:
    """Poll every source once and write what they said, one write per line; ``last``: then close them."""
    now = time.time()
    for source in sources:
        for line in source.poll(now):
            os.write(fd, line)
        if last and isinstance(source, Closing):
            for line in source.close(now):
                os.write(fd, line)


def run(
    sources: Sequence[Source],
    command: Sequence[str],
    poll_s: float = POLL_S,
    launcher: Callable[[int, float], LauncherWatch] | None = None,
) -> int:
    """Start ``command``, poll ``sources`` until it ends, and once more; its status (negative: a signal).

    ``launcher``: the watch of the command as the node's launcher, made from its pid and start time; its
    ``started`` line is written at once and it is polled with the others.
    """
    child = subprocess.Popen(list(command))
    if launcher is not None:
        watch = launcher(child.pid, time.time())
        os.write(1, watch.first())
        sources = [*sources, watch]

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = child.wait(timeout=poll_s)
            break
        watch_once(sources)
    watch_once(sources, last=True)
    return code


def sidecar(sources: Sequence[Source], poll_s: float = POLL_S) -> int:
    """Poll ``sources`` until SIGTERM or SIGINT, then once more; 0 (a sidecar told to end has not failed)."""
    ended = False

    def end(_signum: int, _frame: object) -> None:
        nonlocal ended
        ended = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, end)
    while not ended:
        watch_once(sources)
        time.sleep(poll_s)
    watch_once(sources, last=True)  # the last look closes what closes (the GPUs counted again)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m rollcall_workload.node.monitor --dir DIR [-- COMMAND...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[args.index("--") + 1 :] if "--" in args else []
    own = args[: args.index("--")] if "--" in args else args
    parser = argparse.ArgumentParser(prog="python -m rollcall_workload.node.monitor", description=__doc__)
    parser.add_argument("--dir", required=True, help="the node's monitor directory (ROLLCALL_MONITOR_DIR)")
    parser.add_argument("--margin", type=float, default=SILENT_MARGIN_S, help="seconds past a rank's bound")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between two looks")
    parser.add_argument(
        "--node-rank", type=int, help="the node's rank in the job: the command is its launcher (watched)"
    )
    parser.add_argument(
        "--join-hang-after",
        type=float,
        default=JOIN_HANG_S,
        help="seconds between two launcher waiting lines (the ranks' --join-hang-after)",
    )
    opts = parser.parse_args(own)
    if command and opts.node_rank is not None:
        faults.no_launch(opts.node_rank)
    os.makedirs(opts.dir, exist_ok=True)
    files = RankFiles(opts.dir, opts.margin)
    sources: list[Source] = [files]
    gpus = GpuEvents.open()  # before the command starts: the set holds every event from the first step on
    print(f"rollcall monitor: {gpus.describe()}", file=sys.stderr, flush=True)
    if gpus.off is None:
        sources.append(gpus)
    if not command:
        return sidecar(sources, opts.poll)
    os.environ[MONITOR_DIR_ENV] = opts.dir  # the ranks' heartbeats and dumps go where this monitor reads
    launcher = None
    if opts.node_rank is not None:
        node_rank, bound = opts.node_rank, opts.join_hang_after

        def launcher(pid: int, started: float) -> LauncherWatch:
            return LauncherWatch(pid, node_rank, started, bound, files)

    code = run(sources, command, opts.poll, launcher)
    if code < 0:  # end as the command did: by its signal
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep theirs
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
