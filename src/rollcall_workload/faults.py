"""Fault injection: the variables that make a rank fail, hang, slow down, corrupt or leave early.

Each variable is parsed here, and acted on here too, by a hook named after what it does, called at its
place in the rank or the node's monitor (torch is imported only by the hooks that need it).

The suite checks them with :func:`check_fault_injection` before a job starts, so a variable the ranks would
refuse is refused first. Each variable and its grammar:

Fault injection (for testing the suite itself): ``ROLLCALL_FAIL_RANK=<rank>[,<rank>...]`` (e.g.
``ROLLCALL_FAIL_RANK=0,2``) makes each rank listed raise a RuntimeError naming the injected failure right
after printing its first ``epoch_time``; ``ROLLCALL_HANG_RANK=<rank>[,<rank>...]`` makes each rank listed
sleep forever at the same point (a rank in both lists fails);
``ROLLCALL_HANG_NODE=<node>[,<node>...]`` makes every rank of each node listed stop before it joins the
process group and before its watchdog starts, sleeping forever after one plain line: a node frozen or cut
off before rendezvous, whose ranks say nothing while the others wait for them at rendezvous, so no event
names the node (the node is named as ``ROLLCALL_SLOW_LINK``'s is: in the world ``ROLLCALL_NODE_IDS``
gives, so it follows its node into the suite's bisection);
``ROLLCALL_NO_LAUNCH_NODE=<node>[,<node>...]`` makes the monitor of each node listed (the node's command,
on the backends where the monitor stands in front of torchrun) start neither itself nor the node's launcher:
it writes one plain line and waits to be ended, as a node whose command never starts would (a task stuck in
its prolog, an entrypoint that never runs), so no launcher joins the launchers' rendezvous from it and no
rank is spawned anywhere (the node named as ``ROLLCALL_HANG_NODE``'s is);
``ROLLCALL_CHATTY=<rank>:<bytes>`` makes that rank print about that many bytes of plain progress lines
after its first ``epoch_time``, spread over about five seconds (to test that log rotation loses no event).
``ROLLCALL_EXIT_RANK=<rank>:<code>`` makes that rank answer the whole roll call (``complete`` and the
barrier after it, the process group left) and then exit with status <code> (1-255); with
``<rank>:<SIGNAL>`` (a signal's name, e.g. ``SIGKILL``) it kills itself with that signal instead.
``ROLLCALL_LEAVE_RANK=<rank>[,<rank>...]`` makes each rank listed end with status 0 right after its first
``epoch_time``, without ``complete`` or ``error`` (it says ``exit``), as a workload that returns early would.
``ROLLCALL_VANISH_RANK=<rank>[,<rank>...]`` makes each rank listed end with status 0 at that point without a
word (``os._exit(0)``: no ``exit``, no Python exit path), as a library that ends the process would: only its
node's monitor, which sees its process gone, can tell.
``ROLLCALL_KERNEL_MISMATCH=<rank>[,<rank>...][:<kernel>,...]`` makes those ranks' checks of those kernels
(every kernel without a list) read a wrong result, so that every rank drops them (``kernels``);
``ROLLCALL_ASSUME_ARCH=sm_86`` makes the rank take its GPU for that architecture when the gate chooses its
kernels (rollcall_workload.kernels.gate).
``ROLLCALL_GIL_RANK=<rank>[,<rank>...]`` makes each rank listed block in C with the GIL held after its first
``epoch_time`` (libc's ``sleep`` called through ``ctypes.PyDLL``, which keeps the GIL): no Python thread of
the rank runs again, its watchdog neither; only faulthandler's timer can take its stack.
``ROLLCALL_STOP_RANK=<rank>[,<rank>...]`` makes each rank listed stop itself with SIGSTOP at the same point,
as a frozen process or container: nothing runs in it, faulthandler's timer neither.
``ROLLCALL_NO_JOIN_RANK=<rank>[,<rank>...]`` makes each rank listed sleep forever as it enters
``init_process_group`` (its watchdog running, held to the join bound) without calling it: the others wait
for it there.
``ROLLCALL_GPU_HANG_RANK=<rank>[,<rank>...]`` makes each rank listed queue a kernel that spins on its GPU
for days (``torch.cuda._sleep``) after its first ``epoch_time`` and wait for it (a synchronize, the GIL
released): the GPU's own hang, the host thread waiting on it (cuda only; elsewhere the rank fails naming it).
``ROLLCALL_BAD_ADDRESS_RANK=<rank>[,<rank>...]`` makes each rank listed read an address nothing maps on its
GPU at the same point (:mod:`rollcall_workload.kernels.bad_address`): an MMU fault (Xid 31) and CUDA's illegal
memory access error, as a program's own bug would (cuda with Triton only; elsewhere it fails naming it).
Every rank parses all of these variables at start: a malformed value is an ``error`` naming the
variable and the form to write, on every rank, before training (the suite checks them before launch
with the same functions: :func:`check_fault_injection`).

``ROLLCALL_SLOW_RANK=<rank>:<factor>`` (factor >= 1) makes that rank's device that many times slower (a
comma-separated list, ``0:1.5,1:1.5``, slows each rank it names by its own factor):
after its own work of each step (training and compute steps alike; a rank alone in its world: after each
training step's backward, which it times as compute) it runs extra matmuls on its device for
(factor - 1) times the wall-clock time that work took, so each of its steps takes factor times as
long. It is real work sized in time, not a sleep, and never inside a collective; sizing it in time (not
as a fixed number of repeats) keeps the factor exact on a CPU shared by all ranks, where a fixed amount
of extra work would run faster once the other ranks wait. ``ROLLCALL_SLOW_LINK=<node>:<ms>`` is a test
fault for the collective bandwidth phase only: every rank of that node waits <ms> milliseconds before it
posts its part of each timed all-reduce, as a degraded link that delays the node's sends would, so every
group holding the node measures a low bandwidth. The node is named as in the world it was given for: when
``ROLLCALL_NODE_IDS`` maps this job's node ranks to nodes of a larger world (the suite's bisection re-runs a
subset of the nodes), ``ROLLCALL_SLOW_LINK`` names a node of that larger world.

Slow but healthy (a fleet's unevenness, which must fail nothing within the stated bounds), each
``<index>:<seconds>[,<index>:<seconds>...]``: ``ROLLCALL_LATE_NODE`` makes each node listed start that much
later (its monitor says nothing, its launcher does not start until then: a node that boots or pulls its image
late); ``ROLLCALL_SLOW_LAUNCHER_NODE`` makes each node's launcher take that much longer before it starts
torchrun (a slow import of the launcher); ``ROLLCALL_SLOW_IMPORT_RANK`` makes each rank listed take that
much longer before it imports torch (a cold filesystem: its process exists, it says nothing), and
``ROLLCALL_SLOW_SETUP_RANK`` before it sets up its device (its watchdog running: a slow torch_xla import);
``ROLLCALL_PAUSE_RANK`` makes each rank listed pause that long after its first ``epoch_time`` in Python
(its watchdog runs), and ``ROLLCALL_C_PAUSE_RANK`` in C, holding the GIL (its heartbeat stops too).

``ROLLCALL_CORRUPT_RANK=<rank>`` flips the highest mantissa bit of the first element of that rank's first
parameter (and of its fp32 master copy under ``--precision bf16``) right after its first timed step, as a
silent data corruption would: its replica differs from the others' from then on, and its ``param_digest``
with them. ``ROLLCALL_CORRUPT_COLLECTIVE=<rank>`` zeroes 1024 elements (from a third of the buffer on) of
every result that rank receives from the bandwidth phase's timed all-reduces, as a bad link or GPU would:
its ``bandwidth`` events carry a ``mismatch``. A value that is not a rank fails the run with an ``error``.
``ROLLCALL_SKIP_COLLECTIVE=<rank>[:barrier|all_reduce[:world|fault]]`` makes every rank run one more
collective after its first ``epoch_time`` (a barrier unless named, in the default group unless ``fault``: a
group of every rank made for it), except the rank named, which skips it and goes on: the others wait in it,
the flight recorder tells which rank never entered it.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollcall_workload.contract import NODE_IDS_ENV
from rollcall_workload.kernels.gate import ASSUME_ARCH_ENV, KERNEL_NAMES, check_arch

if TYPE_CHECKING:
    from rollcall_workload.rank.training import Training

FAIL_RANK_ENV = "ROLLCALL_FAIL_RANK"
KERNEL_MISMATCH_ENV = "ROLLCALL_KERNEL_MISMATCH"
CORRUPT_RANK_ENV = "ROLLCALL_CORRUPT_RANK"
CORRUPT_COLLECTIVE_ENV = "ROLLCALL_CORRUPT_COLLECTIVE"
HANG_RANK_ENV = "ROLLCALL_HANG_RANK"
HANG_NODE_ENV = "ROLLCALL_HANG_NODE"
NO_LAUNCH_NODE_ENV = "ROLLCALL_NO_LAUNCH_NODE"
CHATTY_ENV = "ROLLCALL_CHATTY"
SLOW_RANK_ENV = "ROLLCALL_SLOW_RANK"
SLOW_LINK_ENV = "ROLLCALL_SLOW_LINK"
EXIT_RANK_ENV = "ROLLCALL_EXIT_RANK"
LEAVE_RANK_ENV = "ROLLCALL_LEAVE_RANK"
VANISH_RANK_ENV = "ROLLCALL_VANISH_RANK"
LATE_NODE_ENV = "ROLLCALL_LATE_NODE"
SLOW_LAUNCHER_NODE_ENV = "ROLLCALL_SLOW_LAUNCHER_NODE"
SLOW_IMPORT_RANK_ENV = "ROLLCALL_SLOW_IMPORT_RANK"
SLOW_SETUP_RANK_ENV = "ROLLCALL_SLOW_SETUP_RANK"
PAUSE_RANK_ENV = "ROLLCALL_PAUSE_RANK"
C_PAUSE_RANK_ENV = "ROLLCALL_C_PAUSE_RANK"
#: The slow-but-healthy variables, each ``<index>:<seconds>[,...]``: of a node (``node``) or a rank.
DELAYS: tuple[tuple[str, str], ...] = (
    (LATE_NODE_ENV, "node"),
    (SLOW_LAUNCHER_NODE_ENV, "node"),
    (SLOW_IMPORT_RANK_ENV, "rank"),
    (SLOW_SETUP_RANK_ENV, "rank"),
    (PAUSE_RANK_ENV, "rank"),
    (C_PAUSE_RANK_ENV, "rank"),
)
GIL_RANK_ENV = "ROLLCALL_GIL_RANK"
STOP_RANK_ENV = "ROLLCALL_STOP_RANK"
NO_JOIN_RANK_ENV = "ROLLCALL_NO_JOIN_RANK"
GPU_HANG_RANK_ENV = "ROLLCALL_GPU_HANG_RANK"
BAD_ADDRESS_RANK_ENV = "ROLLCALL_BAD_ADDRESS_RANK"
SKIP_COLLECTIVE_ENV = "ROLLCALL_SKIP_COLLECTIVE"
SKIP_OPS, SKIP_GROUPS = ("barrier", "all_reduce"), ("world", "fault")
#: The faults of a rank after its first epoch, by variable, in the order they win when a rank is named twice.
RANK_FAULTS: tuple[tuple[str, str], ...] = (
    (FAIL_RANK_ENV, "fail"),
    (HANG_RANK_ENV, "hang"),
    (GIL_RANK_ENV, "gil"),
    (STOP_RANK_ENV, "stop"),
    (GPU_HANG_RANK_ENV, "gpu_hang"),
    (BAD_ADDRESS_RANK_ENV, "bad_address"),
    (LEAVE_RANK_ENV, "leave"),
    (VANISH_RANK_ENV, "vanish"),
)


def rank_list(name: str, environ: Mapping[str, str], what: str = "rank") -> frozenset[int]:
    """The ranks (or nodes: ``what``) ``<name>=<rank>[,<rank>...]`` names (none when unset).

    Raises:
        ValueError: the value is not a comma-separated list of non-negative integers.
    """
    value = environ.get(name, "").strip()
    if not value:
        return frozenset()
    try:
        ranks = [int(word) for word in value.split(",")]
    except ValueError:
        ranks = [-1]
    if any(rank < 0 for rank in ranks):
        raise ValueError(
            f"{name}={value!r} is not valid; write {name}=<{what}>[,<{what}>...], e.g. {name}=0,2"
        )
    return frozenset(ranks)


def hung_node(environ: Mapping[str, str], node_rank: int, name: str = HANG_NODE_ENV) -> int | None:
    """``node_rank``'s node (in ``ROLLCALL_NODE_IDS``' world) if ``ROLLCALL_HANG_NODE`` names it, else None.

    ``name``: another variable of nodes (``ROLLCALL_NO_LAUNCH_NODE``), read the same way. ValueError when
    either variable is malformed.
    """
    if not (nodes := rank_list(name, environ, "node")):
        return None
    node = node_id(environ, node_rank)
    return node if node in nodes else None


def injected_fault(rank: int, environ: Mapping[str, str]) -> str | None:
    """The fault this rank meets after its first epoch: a name of :data:`RANK_FAULTS` (``fail``, ``hang``).

    None when none. A rank named by several variables takes the first of :data:`RANK_FAULTS` (one in FAIL
    and HANG fails); ValueError when a variable is malformed.
    """
    for name, fault in RANK_FAULTS:
        if rank in rank_list(name, environ):
            return fault
    return None


def never_joins(rank: int, environ: Mapping[str, str]) -> bool:
    """Whether ``ROLLCALL_NO_JOIN_RANK`` names this rank: it sleeps before init_process_group."""
    return rank in rank_list(NO_JOIN_RANK_ENV, environ)


def corrupted_rank(name: str, environ: Mapping[str, str]) -> int | None:
    """The rank that ``name`` (``ROLLCALL_CORRUPT_RANK``, ``ROLLCALL_CORRUPT_COLLECTIVE``) targets, or None.

    Raises:
        ValueError: the value is not a rank (a non-negative integer).
    """
    value = environ.get(name, "").strip()
    if not value:
        return None
    rank = int(value) if value.isdigit() else -1
    if rank < 0:
        raise ValueError(f"{name}={value!r} is not valid; write {name}=<rank>")
    return rank


@dataclass(frozen=True)
class Chatty:
    """``ROLLCALL_CHATTY``: which rank prints plain lines, and about how many bytes of them."""

    rank: int
    size: int


def chatty(environ: Mapping[str, str]) -> Chatty | None:
    """What ``ROLLCALL_CHATTY=<rank>:<bytes>`` asks for, or None; ValueError when malformed."""
    value = environ.get(CHATTY_ENV, "").strip()
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        rank, size = int(head), int(tail)
    except ValueError:
        rank, size = -1, -1
    if not sep or rank < 0 or size < 0:
        raise ValueError(f"{CHATTY_ENV}={value!r} is not valid; write {CHATTY_ENV}=<rank>:<bytes>")
    return Chatty(rank, size)


def check_fault_injection(environ: Mapping[str, str]) -> None:
    """Parse every fault-injection variable in ``environ``; ValueError naming the first malformed one."""
    for name in (*(name for name, _ in RANK_FAULTS), NO_JOIN_RANK_ENV):
        rank_list(name, environ)
    for name in (HANG_NODE_ENV, NO_LAUNCH_NODE_ENV):
        rank_list(name, environ, "node")
    chatty(environ)
    for name, _ in DELAYS:
        delays(name, environ)
    slow_ranks(environ)
    slow_link(environ)
    exit_rank(environ)
    for name in (CORRUPT_RANK_ENV, CORRUPT_COLLECTIVE_ENV):
        corrupted_rank(name, environ)
    node_ids(environ)
    mismatched_kernels(environ, rank=0)
    assumed_arch(environ)
    skipped_collective(environ)


def skipped_collective(environ: Mapping[str, str]) -> tuple[int, str, str] | None:
    """``ROLLCALL_SKIP_COLLECTIVE``'s rank, op and group (None: unset); ValueError naming the form."""
    if not (value := environ.get(SKIP_COLLECTIVE_ENV, "").strip()):
        return None
    parts = value.split(":")
    if (
        not parts[0].isdigit()
        or len(parts) > 3
        or not {*parts[1:2]} <= {*SKIP_OPS}
        or not {*parts[2:]} <= {*SKIP_GROUPS}
    ):
        form = f"<rank>[:{'|'.join(SKIP_OPS)}[:{'|'.join(SKIP_GROUPS)}]]"
        raise ValueError(f"{SKIP_COLLECTIVE_ENV}={value!r} is not valid; write {SKIP_COLLECTIVE_ENV}={form}")
    return int(parts[0]), (parts[1:2] or ["barrier"])[0], (parts[2:] or ["world"])[0]


def skip_collective(rank: int, world_size: int, device: Any) -> None:
    """``ROLLCALL_SKIP_COLLECTIVE``: each rank runs one more collective (all make its group) but one."""
    if (skip := skipped_collective(os.environ)) is None:
        return
    import torch
    import torch.distributed as dist

    fault = skip[2] == "fault"
    group = dist.new_group(list(range(world_size)), group_desc="rollcall_fault") if fault else None
    if rank == skip[0]:
        print(f"rollcall: rank {rank} skips one {skip[1]} as asked by {SKIP_COLLECTIVE_ENV}", flush=True)
    elif skip[1] == "barrier":
        dist.barrier(group=group)
    else:
        dist.all_reduce(torch.ones(1, device=device), group=group)


def mismatched_kernels(environ: Mapping[str, str], rank: int) -> frozenset[str]:
    """The kernels whose check ``rank`` makes fail (``ROLLCALL_KERNEL_MISMATCH=RANKS[:KERNEL,...]``).

    The kernels of the list, or every kernel without one, on each rank of RANKS; ValueError when malformed.
    """
    text = environ.get(KERNEL_MISMATCH_ENV, "")
    if not text:
        return frozenset()
    ranks, _, kernels = text.partition(":")
    chosen = rank_list(KERNEL_MISMATCH_ENV, {KERNEL_MISMATCH_ENV: ranks})
    names = set(kernels.split(",")) if kernels else set(KERNEL_NAMES)
    if unknown := sorted(names - set(KERNEL_NAMES)):
        raise ValueError(
            f"{KERNEL_MISMATCH_ENV}={text!r}: no kernel {', '.join(unknown)} (of {', '.join(KERNEL_NAMES)})"
        )
    return frozenset(names) if rank in chosen else frozenset()


def assumed_arch(environ: Mapping[str, str]) -> str | None:
    """The GPU architecture ``ROLLCALL_ASSUME_ARCH`` makes the workload take its GPU for, or None."""
    text = environ.get(ASSUME_ARCH_ENV, "")
    return check_arch(text) if text else None


@dataclass(frozen=True)
class SlowRank:
    """``ROLLCALL_SLOW_RANK``: which rank to slow down, and by what factor."""

    rank: int
    factor: float


@dataclass(frozen=True)
class SlowLink:
    """``ROLLCALL_SLOW_LINK``: whose sends to delay in the bandwidth phase, and by how much."""

    node: int
    delay_ms: float


def _pair(name: str, environ: Mapping[str, str], what: str) -> tuple[int, float] | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        index, number = int(head), float(tail)
    except ValueError:
        index, number = -1, math.nan
    if not sep or index < 0 or not math.isfinite(number):
        raise ValueError(f"{name}={value!r} is not valid; write {name}=<{what}>")
    return index, number


def slow_rank(environ: Mapping[str, str]) -> SlowRank | None:
    """The rank ``ROLLCALL_SLOW_RANK=<rank>:<factor>`` slows down, or None; ValueError when malformed."""
    pair = _pair(SLOW_RANK_ENV, environ, "rank>:<factor >= 1")
    if pair is None:
        return None
    if pair[1] < 1:
        raise ValueError(f"{SLOW_RANK_ENV}: the factor must be at least 1, not {pair[1]:g}")
    return SlowRank(*pair)


def slow_ranks(environ: Mapping[str, str]) -> dict[int, float]:
    """Each rank ``ROLLCALL_SLOW_RANK=<rank>:<factor>[,<rank>:<factor>...]`` slows down, by its factor."""
    value = environ.get(SLOW_RANK_ENV, "").strip()
    factors: dict[int, float] = {}
    for part in value.split(",") if value else ():
        one = slow_rank({SLOW_RANK_ENV: part})
        if one is None:
            raise ValueError(
                f"{SLOW_RANK_ENV}={value!r} has an empty entry; "
                f"write {SLOW_RANK_ENV}=<rank>:<factor >= 1>[,<rank>:<factor>...]"
            )
        if one.rank in factors:
            raise ValueError(f"{SLOW_RANK_ENV}: rank {one.rank} is named twice; name each rank once")
        factors[one.rank] = one.factor
    return factors


def delays(name: str, environ: Mapping[str, str]) -> dict[int, float]:
    """Each index ``<name>=<index>:<seconds>[,...]`` names (a node or a rank), with its seconds (>= 0)."""
    value = environ.get(name, "").strip()
    found: dict[int, float] = {}
    for part in value.split(",") if value else ():
        pair = _pair(name, {name: part.strip()}, "index>:<seconds >= 0>[,<index>:<seconds>...]")
        if pair is None or pair[1] < 0 or pair[0] in found:
            raise ValueError(f"{name}={value!r} is not valid; write {name}=<index>:<seconds >= 0>[,...]")
        found[pair[0]] = pair[1]
    return found


def delay(name: str, index: int, environ: Mapping[str, str] | None = None) -> float:
    """The seconds ``name`` delays node or rank ``index`` by (0: none)."""
    return delays(name, os.environ if environ is None else environ).get(index, 0.0)


def slow_link(environ: Mapping[str, str]) -> SlowLink | None:
    """The node ``ROLLCALL_SLOW_LINK=<node>:<ms>`` slows down, or None; ValueError when malformed."""
    pair = _pair(SLOW_LINK_ENV, environ, "node>:<milliseconds >= 0")
    if pair is None:
        return None
    if pair[1] < 0:
        raise ValueError(f"{SLOW_LINK_ENV}: the delay must not be negative, not {pair[1]:g}")
    return SlowLink(*pair)


def node_ids(environ: Mapping[str, str]) -> tuple[int, ...]:
    """``ROLLCALL_NODE_IDS=2,3``: each node rank's node in the larger world (empty: its own rank)."""
    value = environ.get(NODE_IDS_ENV, "").strip()
    if not value:
        return ()
    words = [w.strip() for w in value.split(",")]
    if not all(w.isdigit() for w in words) or len(set(words)) != len(words):
        raise ValueError(
            f"{NODE_IDS_ENV}={value!r} is not valid; write {NODE_IDS_ENV}=<node>[,<node>...], distinct "
            "whole numbers, one per node rank"
        )
    return tuple(int(w) for w in words)


def node_id(environ: Mapping[str, str], node_rank: int) -> int:
    """The node ``node_rank`` is in the world ``ROLLCALL_NODE_IDS`` names (``node_rank`` without it)."""
    ids = node_ids(environ)
    if not ids:
        return node_rank
    if node_rank >= len(ids):
        raise ValueError(f"{NODE_IDS_ENV} names {len(ids)} node(s), but this is node rank {node_rank}")
    return ids[node_rank]


@dataclass(frozen=True)
class ExitRank:
    """``ROLLCALL_EXIT_RANK``: which rank ends badly after its roll call, with which status or signal."""

    rank: int
    code: int = 0
    signal: str | None = None


def exit_rank(environ: Mapping[str, str]) -> ExitRank | None:
    """The rank ``ROLLCALL_EXIT_RANK=<rank>:<code|SIGNAL>`` ends badly, or None; ValueError when malformed."""
    value = environ.get(EXIT_RANK_ENV, "").strip()
    if not value:
        return None
    head, _, tail = value.partition(":")
    names = {s.name for s in signal.Signals}
    if head.isdigit() and tail.upper() in names:
        return ExitRank(int(head), signal=tail.upper())
    if head.isdigit() and tail.isdigit() and 1 <= int(tail) <= 255:
        return ExitRank(int(head), code=int(tail))
    raise ValueError(
        f"{EXIT_RANK_ENV}={value!r} is not valid; write {EXIT_RANK_ENV}=<rank>:<exit code 1-255> "
        f"or {EXIT_RANK_ENV}=<rank>:<signal name, e.g. SIGKILL>"
    )


# -- the hooks: where a rank (or a node's monitor) acts on the variables above ---------------------------


def chatter(rank: int, environ: Mapping[str, str]) -> None:
    """Print the plain lines that ``ROLLCALL_CHATTY=<rank>:<bytes>`` asks of this rank, in 50 chunks."""
    asked = chatty(environ)
    if asked is None or asked.rank != rank:
        return
    line = f"rollcall: rank {rank} chatter " + "x" * 200 + "\n"
    lines_per_chunk = max(1, asked.size // len(line) // 50)
    for _ in range(50):
        sys.stdout.write(line * lines_per_chunk)
        sys.stdout.flush()
        time.sleep(0.1)


def flip_replica_bit(training: Training, rank: int) -> None:
    """``ROLLCALL_CORRUPT_RANK``: flip one bit of this replica's first parameter (and of its fp32 master)."""
    from rollcall_workload.rank.proofs import flip_bit
    from rollcall_workload.rank.training import MasterWeightAdamW

    flip_bit(next(training.model.parameters()))
    if isinstance(training.optimizer, MasterWeightAdamW):  # the master is written back each step
        flip_bit(training.optimizer.master[0])
    print(
        f"rollcall: rank {rank} flipped one bit of its first parameter as asked by {CORRUPT_RANK_ENV}",
        flush=True,
    )


def inject_fault(rank: int) -> None:
    """The fault a rank-listed variable asks of this rank after its first ``epoch_time``, if any."""
    fault = injected_fault(rank, os.environ)
    if fault == "fail":
        raise RuntimeError(f"injected failure on rank {rank} ({FAIL_RANK_ENV})")
    if fault == "hang":
        print(f"rollcall: rank {rank} hangs as asked by {HANG_RANK_ENV}", flush=True)
        while True:
            time.sleep(3600)
    if fault == "vanish":
        print(f"rollcall: rank {rank} ends with os._exit(0) as asked by {VANISH_RANK_ENV}", flush=True)
        os._exit(0)
    if fault == "leave":
        print(f"rollcall: rank {rank} leaves with status 0 as asked by {LEAVE_RANK_ENV}", flush=True)
        sys.exit(0)
    if fault == "gil":
        print(f"rollcall: rank {rank} blocks in C holding the GIL as asked by {GIL_RANK_ENV}", flush=True)
        hold_the_gil()
    if fault in ("gpu_hang", "bad_address"):
        import torch  # the GPU's own faults need it; the others run before it is imported
    if fault == "gpu_hang":
        if not torch.cuda.is_available():
            raise RuntimeError(f"{GPU_HANG_RANK_ENV} names rank {rank}, which has no CUDA device to hang")
        print(f"rollcall: rank {rank} hangs its GPU as asked by {GPU_HANG_RANK_ENV}", flush=True)
        torch.cuda._sleep(1 << 50)  # a kernel spinning for about 2**50 clock cycles: days at any clock rate
        torch.cuda.synchronize()
    if fault == "bad_address":
        print(f"rollcall: rank {rank} reads an unmapped address ({BAD_ADDRESS_RANK_ENV})", flush=True)
        on = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        from rollcall_workload.kernels.bad_address import read_unmapped

        read_unmapped(on, BAD_ADDRESS_RANK_ENV)
    if fault == "stop":
        print(f"rollcall: rank {rank} stops itself (SIGSTOP) as asked by {STOP_RANK_ENV}", flush=True)
        while True:  # SIGCONT lets it go on, only to stop again
            os.kill(os.getpid(), signal.SIGSTOP)


def hold_the_gil(seconds: int = 3600, forever: bool = True) -> None:
    """Block in C with the GIL held: libc's sleep through ``ctypes.PyDLL``, whose calls keep the GIL."""
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(seconds)
        if not forever:
            return


def never_join(rank: int) -> None:
    """``ROLLCALL_NO_JOIN_RANK``: this rank sleeps as it enters init_process_group (its watchdog running)."""
    if not never_joins(rank, os.environ):
        return
    print(f"rollcall: rank {rank} never joins the process group as asked by {NO_JOIN_RANK_ENV}", flush=True)
    while True:
        time.sleep(3600)


def hang_node(rank: int, node_rank: int) -> None:
    """``ROLLCALL_HANG_NODE``: this rank's node never reaches rendezvous (no watchdog, no event)."""
    node = hung_node(os.environ, node_rank)
    if node is None:
        return
    print(
        f"rollcall: rank {rank} of node {node} hangs before rendezvous as asked by {HANG_NODE_ENV}",
        flush=True,
    )
    while True:
        time.sleep(3600)


def no_launch(node_rank: int) -> None:
    """``ROLLCALL_NO_LAUNCH_NODE``: start nothing, say one plain line, wait to be ended (then end as told)."""
    node = hung_node(os.environ, node_rank, NO_LAUNCH_NODE_ENV)
    if node is None:
        return
    ends = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, ends)  # before the line: a signal sent once it is read waits
    print(
        f"rollcall: node {node} starts no launcher as asked by {NO_LAUNCH_NODE_ENV}",
        file=sys.stderr,
        flush=True,
    )
    received = signal.sigwait(ends)
    raise SystemExit(128 + received)


def late_start(node_rank: int) -> None:
    """``ROLLCALL_LATE_NODE``: the node's command starts that much later (nothing of it seen until then)."""
    if seconds := delay(LATE_NODE_ENV, node_rank):
        time.sleep(seconds)


def slow_launcher(command: list[str], node_rank: int) -> list[str]:
    """``ROLLCALL_SLOW_LAUNCHER_NODE``: the launcher's ``command`` made to take that much longer to start."""
    seconds = delay(SLOW_LAUNCHER_NODE_ENV, node_rank)
    if not seconds:
        return command
    wait = "import os, sys, time; time.sleep(float(sys.argv[1])); os.execvp(sys.argv[2], sys.argv[2:])"
    return [sys.executable, "-c", wait, str(seconds), *command]


def slow_start(rank: int, name: str) -> None:
    """The rank starts slower by ``name``'s seconds: ``ROLLCALL_SLOW_IMPORT_RANK`` or ``_SETUP_RANK``."""
    if seconds := delay(name, rank):
        time.sleep(seconds)


def pause(rank: int) -> None:
    """``ROLLCALL_PAUSE_RANK`` (in Python) and ``ROLLCALL_C_PAUSE_RANK`` (in C, the GIL held): a pause."""
    if seconds := delay(PAUSE_RANK_ENV, rank):
        print(f"rollcall: rank {rank} pauses {seconds:g}s in Python as asked by {PAUSE_RANK_ENV}", flush=True)
        time.sleep(seconds)
    if seconds := delay(C_PAUSE_RANK_ENV, rank):
        print(f"rollcall: rank {rank} pauses {seconds:g}s in C as asked by {C_PAUSE_RANK_ENV}", flush=True)
        ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))
