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
  heartbeat comes back; on cuda, sooner, with the GPU's NVML reading, where the rank stands still past its
  bound while its GPU stays busy (:data:`~rollcall_workload.node.ranks.GPU_CONFIRM_S`: the GPU's own hang,
  the host waiting on it with no Python thread able to run).

- ``launcher`` (rank -1) where it starts the node's launcher (:class:`LauncherWatch`), or, a sidecar given
  ``--node-rank``, finds it among the processes its pod shares (:class:`LauncherFinder`): ``started`` as it
  starts or finds it, ``waiting`` at each multiple of the join bound (``--join-hang-after``) while no rank of
  the node has been spawned (the launchers' rendezvous has not completed: a node's torchrun spawns its ranks
  only once every node's has joined it), with the launcher's process state, and ``spawned`` once its ranks
  run.

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
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from rollcall_workload import faults
from rollcall_workload.contract import MONITOR_DIR_ENV, NO_RANK, RollcallLog
from rollcall_workload.node.gpu_listener import GpuEvents, GpuLoads
from rollcall_workload.node.launcher import LauncherFinder, LauncherWatch
from rollcall_workload.node.ranks import POLL_S, SILENT_MARGIN_S, RankFiles, RankProcesses
from rollcall_workload.node.stacks import FaultDumps, ThreadText, frames_of, parse_stacks, stack_lines
from rollcall_workload.node.states import MAX_GAP_POLLS, STATES, process_state
from rollcall_workload.rank.watchdog import JOIN_HANG_S
from rollcall_workload.safefs import UnsafePathError, private_dir

#: The monitor's exit code where its directory is another user's to change (:func:`refuse`).
REFUSED_EXIT = 77


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
        watch = launcher(child.pid, time.monotonic())
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
        faults.late_start(opts.node_rank)
        command = faults.slow_launcher(command, opts.node_rank)
    try:
        private_dir(opts.dir)
    except UnsafePathError as exc:  # another user's directory: nothing runs, the node says why in one line
        refuse(exc)
        return REFUSED_EXIT
    gap = MAX_GAP_POLLS * opts.poll  # a longer gap between two looks: the monitor itself was paused
    files = RankFiles(opts.dir, opts.margin, max_gap=gap)
    sources: list[Source] = [RankProcesses(opts.dir, opts.node_rank), files]
    gpus = GpuEvents.open()  # before the command starts: the set holds every event from the first step on
    print(f"rollcall monitor: {gpus.describe()}", file=sys.stderr, flush=True)
    if gpus.off is None:
        sources.append(gpus)
        files.gpus = GpuLoads(gpus.nvml)  # a stopped rank's GPU, read by its UUID
    if not command:
        if opts.node_rank is not None:  # the pod's launcher, found among the pod's processes
            sources.append(LauncherFinder(opts.node_rank, opts.join_hang_after, files, max_gap=gap))
        return sidecar(sources, opts.poll)
    os.environ[MONITOR_DIR_ENV] = opts.dir  # the ranks' heartbeats and dumps go where this monitor reads
    launcher = None
    if opts.node_rank is not None:
        node_rank, bound = opts.node_rank, opts.join_hang_after

        def launcher(pid: int, started: float) -> LauncherWatch:
            return LauncherWatch(pid, node_rank, started, bound, files, max_gap=gap)

    code = run(sources, command, opts.poll, launcher)
    if code < 0:  # end as the command did: by its signal
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep theirs
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


def refuse(exc: UnsafePathError) -> None:
    """Say that the node's directory is refused: a line on stderr and the node's ``error`` (no rank's)."""
    print(f"rollcall monitor: {exc}", file=sys.stderr, flush=True)
    RollcallLog(NO_RANK, NO_RANK).emit("error", message=f"{type(exc).__name__}: {exc}")


__all__ = [
    "POLL_S",
    "REFUSED_EXIT",
    "SILENT_MARGIN_S",
    "STATES",
    "Closing",
    "FaultDumps",
    "LauncherWatch",
    "RankFiles",
    "RankProcesses",
    "Source",
    "ThreadText",
    "frames_of",
    "main",
    "parse_stacks",
    "process_state",
    "refuse",
    "run",
    "sidecar",
    "stack_lines",
    "watch_once",
]

if __name__ == "__main__":
    raise SystemExit(main())
