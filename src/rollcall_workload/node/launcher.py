"""The node's launcher at the launchers' rendezvous, as the node's monitor sees it (``launcher`` lines)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rollcall_workload import procfs
from rollcall_workload.contract import encode_event
from rollcall_workload.contract.node import NO_RANK
from rollcall_workload.node.gpu_listener import node_name
from rollcall_workload.node.launch import MODULE as LAUNCH_MODULE
from rollcall_workload.node.ranks import POLL_S, RankFiles
from rollcall_workload.node.states import MAX_GAP_POLLS, Held, process_state
from rollcall_workload.rank.watchdog import JOIN_HANG_S


@dataclass
class LauncherWatch:
    """The node's launcher, from the moment the monitor started it until it spawned the node's ranks.

    ``started`` is said at once (:meth:`first`); ``waiting`` at each multiple of ``bound`` with no rank of
    the node spawned (no child process of the launcher, no heartbeat in the monitor directory), ``spawned``
    once one is, and then nothing more. Its waits are measured on the monitor's monotonic clock (``mono``;
    ``started`` is its reading at the launcher's start), so a step of the wall clock ends none early. Its
    process state is read at every look, and each line says how long that state has held at every look
    (:class:`~rollcall_workload.node.states.Held`): one read of ``D`` is a page fault, not a stuck launcher.
    """

    pid: int
    node_rank: int
    started: float
    bound: float = JOIN_HANG_S
    ranks: RankFiles | None = None
    children_of: Callable[[int], list[int]] = procfs.children
    state_of: Callable[[int], tuple[str, str] | None] = process_state
    node: str = field(default_factory=node_name)
    mono: Callable[[], float] = time.monotonic
    max_gap: float = MAX_GAP_POLLS * POLL_S
    _waits: int = 0
    _spawned: bool = False
    _process: tuple[str, str] | None = None
    _held: Held = field(init=False)

    def __post_init__(self) -> None:
        self._held = Held(self.max_gap)

    def _look(self, mono: float) -> float:
        """Read the launcher's state now; how long it has held at every look."""
        self._process = self.state_of(self.pid)
        return self._held.see(self._process[0] if self._process else "", mono)

    def line(self, state: str, mono: float) -> bytes:
        """One ``launcher`` line of ``state``, ``mono`` its monitor's clock now."""
        held = self._look(mono)
        process = self._process
        return encode_event(
            "launcher",
            NO_RANK,
            NO_RANK,
            state=state,
            node_rank=self.node_rank,
            node=self.node,
            pid=self.pid,
            waited_s=round(max(0.0, mono - self.started), 3),
            bound_s=self.bound,
            process_state=process[0] if process else "",
            process_state_name=process[1] if process else "",
            state_held_s=round(held, 3),
        )

    def first(self) -> bytes:
        """The ``started`` line."""
        return self.line("started", self.started)

    def poll(self, now: float) -> list[bytes]:
        """``spawned`` once the node's ranks run, ``waiting`` at each bound until then (``now``: unused)."""
        if self._spawned:
            return []
        mono = self.mono()
        if self.children_of(self.pid) or (self.ranks is not None and self.ranks.heartbeats()):
            self._spawned = True
            return [self.line("spawned", mono)]
        waits = int((mono - self.started) // self.bound) if self.bound > 0 else 0
        if waits <= self._waits:
            self._look(mono)  # every look counts towards how long its state has held
            return []
        self._waits = waits
        return [self.line("waiting", mono)]


def is_launcher(args: list[str]) -> bool:
    """Whether a process of these arguments is torchrun (its script, or ``-m torch.distributed.run``)."""
    if LAUNCH_MODULE in args:  # the wrapper that becomes torchrun once its launch faults let it
        return False
    return "torch.distributed.run" in args or any(arg.rsplit("/", 1)[-1] == "torchrun" for arg in args)


@dataclass
class LauncherFinder:
    """A sidecar's watch of the node's launcher, which it did not start (on Kubernetes: the other container).

    The pod shares its process namespace: at each look until it is found, the finder looks for torchrun among
    the pod's processes; from then on it is that launcher's :class:`LauncherWatch`, its ``started`` line said
    at the look that found it (the launcher's start, to a look), so the node is heard as soon as its launcher
    runs, as on the backends where the monitor starts it.
    """

    node_rank: int
    bound: float = JOIN_HANG_S
    ranks: RankFiles | None = None
    max_gap: float = MAX_GAP_POLLS * POLL_S
    pids: Callable[[], list[int]] = procfs.pids
    cmdline: Callable[[int], list[str]] = procfs.cmdline
    mono: Callable[[], float] = time.monotonic
    watch: LauncherWatch | None = None

    def poll(self, now: float) -> list[bytes]:
        """``started`` at the look that finds the launcher, then its watch's lines."""
        if self.watch is not None:
            return self.watch.poll(now)
        me = os.getpid()
        found = next((pid for pid in self.pids() if pid != me and is_launcher(self.cmdline(pid))), None)
        if found is None:
            return []
        self.watch = LauncherWatch(
            found, self.node_rank, self.mono(), self.bound, self.ranks, mono=self.mono, max_gap=self.max_gap
        )
        return [self.watch.first()]
