"""The node's ranks as its monitor sees them: their files (heartbeats, faulthandler's dumps) and processes.

:class:`RankFiles` turns each rank's faulthandler dumps into ``stack`` events, once a dump has been read whole
(unchanged across a look), and names a rank ``silent`` once its heartbeat has not changed at any look for
its bound plus :data:`SILENT_MARGIN_S` (:class:`~rollcall_workload.node.states.Held`), with its process's
state; ``resumed`` (dump 0) when the heartbeat comes back.

A rank on cuda whose Python cannot run while it waits on its GPU (a CUDA call that blocks with the GIL
held) cannot probe its GPU itself (:mod:`rollcall_workload.rank.gpu_progress`). Where the monitor reads
NVML (:class:`~rollcall_workload.node.gpu_listener.GpuLoads`) and the rank's heartbeat names its GPU, the
monitor reads that GPU at each look while the heartbeat stands unchanged, and says the rank ``silent`` with
its GPU's reading (the ``gpu_`` fields) once, together: its progress has stood still past its bound; its
heartbeat and NVML's utilisation of at least :data:`GPU_BUSY_PCT` have held at every look for
:data:`GPU_CONFIRM_S` (the confirmation window); NVML lists at most one compute process on the GPU (the
rank's: another's work would keep it busy too); its process is not stopped. The rank's work queued since its
last progress has not finished while the GPU runs: the GPU's own hang, said within the bound plus the
window, where the plain silence waits for the margin. :class:`RankProcesses` says when it first sees each
rank's process (``rank_process`` ``seen``: the rank is heard from before it can say a word) and when it first
sees it gone (``gone``, with the last look that saw it alive: however it left).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollcall_workload import procfs
from rollcall_workload.contract import MONITOR_DIR_ENV, encode_event
from rollcall_workload.contract.heartbeat import Heartbeat, heartbeat_path, read_heartbeat, stacks_path
from rollcall_workload.node.gpu_listener import Load, node_name
from rollcall_workload.node.stacks import parse_stacks, stack_lines
from rollcall_workload.node.states import MAX_GAP_POLLS, Held, process_state
from rollcall_workload.rank.watchdog import FAULTHANDLER_MARGIN_S
from rollcall_workload.safefs import open_read

#: Seconds between two looks at the ranks' files.
POLL_S = 1.0
#: A rank is silent once its heartbeat has not changed, at any look, for its bound plus this margin: the
#: watchdog thread writes the heartbeat at least once a second, so a live rank is never this late. It is
#: faulthandler's margin and three looks more: a rank whose interpreter is held in C (its process alive, no
#: Python running) has its stack dumped by faulthandler's timer first, and that dump read whole (two looks),
#: so that it is named hung where it stands, never silent first (the node's fault) by a look's race.
SILENT_MARGIN_S = FAULTHANDLER_MARGIN_S + 3 * POLL_S
#: A GPU reads busy at an NVML utilisation of at least this, percent (a kernel ran for that share of NVML's
#: last sample period).
GPU_BUSY_PCT = 90
#: The confirmation window: a stopped rank's heartbeat unchanged and its GPU busy at every look for this long
#: (four looks a second apart) before the monitor says the GPU's hang. The watchdog writes the heartbeat at
#: least once a second, so a rank whose Python runs is never quiet this long.
GPU_CONFIRM_S = 3 * POLL_S
#: Process states in which the GPU's reading says nothing of the rank: stopped, it is silent as any other.
_STOPPED = frozenset({"T", "t"})
_HEARTBEAT = re.compile(r"^rank-(\d+)\.heartbeat$")


class GpuReader(Protocol):
    """What the monitor asks of NVML (:class:`~rollcall_workload.node.gpu_listener.GpuLoads`)."""

    def read(self, uuid: str) -> Load | None:
        """The GPU's load now, by its UUID; None where NVML cannot say."""
        ...


@dataclass(frozen=True)
class BusyWindow:
    """The reads of one rank's GPU while its heartbeat stands: when the first and last were, the least."""

    first: float
    last: float
    reads: int
    least: int


@dataclass
class RankFiles:
    """The ranks' files in one monitor directory: faulthandler's dumps turned into events, silence named."""

    directory: str
    margin: float = SILENT_MARGIN_S
    state_of: Callable[[int], tuple[str, str] | None] = process_state
    #: The monitor's own clock, and the most seconds between two of its looks (more: it was paused).
    mono: Callable[[], float] = time.monotonic
    max_gap: float = MAX_GAP_POLLS * POLL_S
    _said: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, dump): its dumps written
    _silent: dict[int, float] = field(default_factory=dict)  # rank: the progress it went silent at
    _held: dict[int, Held] = field(default_factory=dict)  # rank: how long its heartbeat has not changed
    _text: dict[int, str] = field(default_factory=dict)  # rank: its stacks file at the last look
    _unread: set[int] = field(default_factory=set)  # ranks whose stacks file changed at the last look
    #: NVML, where the monitor has it: the GPU of a rank whose heartbeat stands is read (see the module).
    gpus: GpuReader | None = None
    _stood: dict[int, Held] = field(default_factory=dict)  # rank: how long its progress has not changed
    _busy: dict[int, BusyWindow] = field(default_factory=dict)  # rank: its GPU's busy reads so far

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
                        with os.fdopen(open_read(heartbeat_path(self.directory, rank)), "rb") as f:
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
        mono = self.mono()
        for rank, beat in sorted(self.heartbeats().items()):
            lines += self._stacks(rank, beat)
            lines += self.silence(rank, beat, now, mono, dumping=rank in self._unread)
        return lines

    def _stacks(self, rank: int, beat: Heartbeat) -> list[bytes]:
        """The dumps of the rank's stacks file, once it reads the same at two looks in a row (written whole).

        faulthandler writes a dump thread by thread, the main thread last: a file read while it writes holds
        half a dump, so one read is taken only when the next look finds it unchanged.
        """
        try:
            # the file is ASCII (faulthandler escapes every other character, the header is JSON's ASCII), so
            # equivalent mutant: any other spelling of UTF-8, no encoding, no error handler or an unknown one
            fd = open_read(stacks_path(self.directory, rank))
            with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return []
        if self._text.get(rank) != text:
            self._text[rank] = text
            self._unread.add(rank)
            return []
        self._unread.discard(rank)
        sections = parse_stacks(text)
        lines = []
        for section in sections:
            key = (rank, int(section.header.get("dump", 1)))
            if section.dumps and self._said.get(key) != len(section.dumps):
                self._said[key] = len(section.dumps)
                lines += stack_lines(section, rank, beat.world_size)
        return lines

    def silence(
        self, rank: int, beat: Heartbeat, now: float, mono: float, dumping: bool = False
    ) -> list[bytes]:
        """``silent`` once the heartbeat has not changed at any look for the bound plus the margin.

        Measured on the monitor's own clock (:class:`Held`), not from the heartbeat's stamp: a clock step
        or a pause of the monitor never makes a rank silent. Not while the rank's stacks file is being
        written (``dumping``: it changed since the last look): its dump, read whole, says more. Sooner, with
        its GPU's reading, where the GPU stays busy while the rank stands still (see the module).
        """
        limit = beat.hang_after + self.margin
        held = self._held.setdefault(rank, Held(self.max_gap)).see((beat.time, beat.steps), mono)
        stood = self._stood.setdefault(rank, Held(self.max_gap)).see((beat.steps, beat.progress), mono)
        # equivalent mutant: another default time: the watchdog stamps every heartbeat
        quiet, stalled = now - (beat.time or 0.0), now - beat.progress
        if held <= limit:
            if rank in self._silent:
                if not self._held[rank].changed:
                    return []  # back only once the heartbeat has changed: a new beat
                del self._silent[rank]
                # equivalent mutant: another default world size: every heartbeat carries the rank's
                return [encode_event("resumed", rank, beat.world_size or -1, dump=0, phase=beat.phase)]
            busy = self._gpu_busy(rank, beat, held, mono)
            if busy is None or stood <= beat.hang_after or mono - busy.first < GPU_CONFIRM_S:
                return []
            state = self.state_of(beat.pid)
            if state is None or state[0] in _STOPPED:
                return []
            self._silent[rank] = beat.progress
            gpu = {
                "gpu": beat.gpu,
                "gpu_uuid": beat.gpu_uuid,
                "gpu_busy_pct": busy.least,
                "gpu_reads": busy.reads,
                "gpu_confirm_s": round(busy.last - busy.first, 3),
            }
            return [self._silent_line(rank, beat, state, stalled=stalled, quiet=quiet, held=held, **gpu)]
        if self._silent.get(rank) == beat.progress or dumping:
            return []
        state = self.state_of(beat.pid)
        if state is None:  # the process is gone: its launcher sees that
            return []
        self._silent[rank] = beat.progress
        return [
            self._silent_line(
                rank, beat, state, stalled=stalled, quiet=quiet, held=held, margin_s=self.margin
            )
        ]

    def _gpu_busy(self, rank: int, beat: Heartbeat, held: float, mono: float) -> BusyWindow | None:
        """The rank's GPU read now, while its heartbeat stands: the busy reads so far, None when not busy."""
        load = None
        if self.gpus is not None and beat.gpu_uuid and held > 0:  # unchanged since the last look
            load = self.gpus.read(beat.gpu_uuid)
        if load is None or load.utilisation < GPU_BUSY_PCT or load.processes is None or load.processes > 1:
            self._busy.pop(rank, None)  # not busy, unknown, or shared: the window starts again
            return None
        was = self._busy.get(rank)
        if was is None or mono - was.last > self.max_gap:
            was = BusyWindow(mono, mono, 0, load.utilisation)
        busy = BusyWindow(was.first, mono, was.reads + 1, min(was.least, load.utilisation))
        self._busy[rank] = busy
        return busy

    @staticmethod
    def _silent_line(
        rank: int,
        beat: Heartbeat,
        state: tuple[str, str],
        *,
        stalled: float,
        quiet: float,
        held: float,
        **extra: Any,
    ) -> bytes:
        """The ``silent`` line (``extra``: the margin, or the GPU's reading)."""
        return encode_event(
            "silent",
            rank,
            # equivalent mutant: another default world size: every heartbeat carries the rank's
            beat.world_size or -1,
            phase=beat.phase,
            steps=beat.steps,
            stalled_s=round(stalled, 3),
            heartbeat_s=round(quiet, 3),
            hang_after=beat.hang_after,
            pid=beat.pid,
            state=state[0],
            state_name=state[1],
            held_s=round(held, 3),
            **extra,
        )


#: A process younger than this is read again at each look: it may still be between fork and exec, its
#: environment its parent's (a rank's is only there once torchrun has executed it).
YOUNG_S = 10.0
#: The variables a rank's environment carries, torchrun's: the global and the node's rank.
RANK_ENV, LOCAL_RANK_ENV = "RANK", "LOCAL_RANK"
#: Where a rank's devices are named: the runtime's (the node's UUIDs, in a container), then CUDA's.
NVIDIA_DEVICES_ENV, CUDA_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"


def visible_devices(env: dict[str, str]) -> str | None:
    """The devices a rank may use, as the node names them where its environment says so (see the contract).

    Inside a container CUDA counts from the container's own devices, so ``NVIDIA_VISIBLE_DEVICES`` wins where
    it names UUIDs; else ``CUDA_VISIBLE_DEVICES`` (a process on the node itself), else the runtime's indexes.
    """
    runtime, cuda = env.get(NVIDIA_DEVICES_ENV), env.get(CUDA_DEVICES_ENV)
    if runtime and "GPU-" in runtime:
        return runtime
    return cuda or runtime or None


@dataclass(frozen=True)
class _Tracked:
    rank: int
    world_size: int
    start_ticks: int
    alive_at: float


@dataclass
class RankProcesses:
    """The node's rank processes: ``seen`` when first seen, ``gone`` when the monitor first sees one gone.

    A rank's process is one whose environment names this monitor's directory (``ROLLCALL_MONITOR_DIR``) and a
    rank (torchrun's ``RANK``), and whose parent names no rank (a rank's own children, its compile workers,
    carry its variables too). The monitor finds them in ``/proc`` whoever started them: its own launcher's
    workers on local and Slurm, the training container's in a pod that shares its process namespace.
    ``gone`` carries the interval the rank left in: the last look that saw it alive, and this one.
    """

    directory: str
    node_rank: int | None = None
    node: str = field(default_factory=node_name)
    proc: str = procfs.PROC
    clock: Callable[[], float] = time.time
    _ranks: dict[int, _Tracked] = field(default_factory=dict)  # pid: the rank it runs
    _others: dict[int, int] = field(default_factory=dict)  # pid: start ticks, of a process that is no rank

    def poll(self, now: float) -> list[bytes]:
        """``rank_process`` lines for each rank process first seen, and each first seen gone."""
        stats = procfs.stats(self.proc)
        lines = self._gone(stats, now)
        me = os.getpid()
        uptime = _uptime(self.proc)
        fresh = [
            pid
            for pid, s in stats.items()
            if pid != me
            and pid not in self._ranks
            and self._others.get(pid) != s.start_ticks
            and not s.kernel_thread
            and not s.gone
        ]
        envs = procfs.environs(fresh, self.proc)
        for pid in sorted(fresh, key=lambda p: stats[p].start_ticks):  # a parent before its children
            s, env = stats[pid], envs.get(pid) or {}
            # equivalent mutant: another default RANK that is no number either
            if env.get(MONITOR_DIR_ENV) != self.directory or not env.get(RANK_ENV, "").isdigit():
                if uptime is None or uptime - s.start_ticks / _TICKS > YOUNG_S:
                    self._others[pid] = s.start_ticks  # settled: never read again
                continue
            if s.ppid in self._ranks or any(t.rank == int(env[RANK_ENV]) for t in self._ranks.values()):
                self._others[pid] = s.start_ticks  # a rank's own child, or a second of its rank: no rank
                continue
            # equivalent mutant: another default WORLD_SIZE that is no number either
            rank, world = int(env[RANK_ENV]), env.get("WORLD_SIZE", "")
            tracked = _Tracked(rank, int(world) if world.isdigit() else -1, s.start_ticks, now)
            self._ranks[pid] = tracked
            # equivalent mutant: another default LOCAL_RANK that is no number either
            local = env.get(LOCAL_RANK_ENV, "")
            lines.append(
                encode_event(
                    "rank_process",
                    rank,
                    tracked.world_size,
                    state="seen",
                    pid=pid,
                    node_rank=self.node_rank,
                    local_rank=int(local) if local.isdigit() else None,
                    node=self.node,
                    visible_devices=visible_devices(env),
                )
            )
        for pid in list(self._others):
            if pid not in stats:
                del self._others[pid]
        return lines

    def _gone(self, stats: dict[int, procfs.Stat], now: float) -> list[bytes]:
        lines = []
        for pid, t in list(self._ranks.items()):
            s = stats.get(pid)
            if s is not None and not s.gone and s.start_ticks == t.start_ticks:
                self._ranks[pid] = _Tracked(t.rank, t.world_size, t.start_ticks, now)
                continue
            del self._ranks[pid]
            lines.append(
                encode_event(
                    "rank_process",
                    t.rank,
                    t.world_size,
                    state="gone",
                    pid=pid,
                    node_rank=self.node_rank,
                    node=self.node,
                    alive_at=round(t.alive_at, 6),
                    gone_at=round(now, 6),
                )
            )
        return lines


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _uptime(proc: str) -> float | None:
    """Seconds since boot (``/proc/uptime``), the clock processes' start ticks count on."""
    try:
        with open(os.path.join(proc, "uptime"), encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
