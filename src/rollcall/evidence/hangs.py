"""Stalled ranks, told apart by their stacks: waiting in a collective, or hung elsewhere.

The workload's watchdog dumps a rank's thread stacks when no step or phase completed within its
``--hang-after`` (``stack`` events, :class:`~rollcall.ranklog.StackDump`). The thread that trains (the main
thread) tells where the rank is:

- **waiting**: a frame of ``torch.distributed`` (a collective, a barrier, the store, the rendezvous) or one of
  torch_xla's collectives is on its stack, or its innermost line waits on the store or on a collective's work
  (``store.get(...)``, ``store.wait(...)``, ``work.wait()``, which run in C++ without a Python frame of their
  own): the rank waits for the others, it is a victim;
- **hung**: anything else: a sleep (``sleep(`` on its innermost line), the data loader (a frame of
  ``torch.utils.data``), I/O (a frame of the standard library's socket, ssl, selectors or subprocess modules
  innermost, or a ``recv``/``read``/``accept``/``select``/``poll`` call on its innermost line), else its own
  compute: the rank stopped on its own.

:func:`stalls` classifies every rank whose dump no progress withdrew; :func:`stop_reason` is the runner's test
for ending a job at the hang: every rank that has not completed is stalled or silent (so the waiting ones have
waited their ``--hang-after`` too), whether one of them is hung or silent, or none made progress at all.
A dump may come from faulthandler's C-level timer (``source`` ``faulthandler``, turned into events by the
node's monitor) when no Python thread of the rank could run: it is read like the watchdog's.

Before the process group: the ranks that wait in ``init_process_group`` past their join bound
(``--join-hang-after``) while every other rank is stalled or silent elsewhere, or past its own start skew
without a word, wait for ranks that never joined (:func:`never_joined`): those are named, and the job ends
then. A rank stalled in its imports and device setup (``SETUP_PHASE``, before it entered
``init_process_group``) waits for no other rank: it counts only once its dump says it was there for the start
skew and the join bound together (S + J from its process's start, what a rank seen and never heard gets), and
is named as still setting up its device. Every rank inside
``init_process_group``, none missing, is joining, not hanging (:func:`joining`): held to the process group's
timeout (``--pg-timeout``), never to the hang bound.

A limit of reading Python stacks: DDP waits for its gradient all-reduce inside ``backward()`` (C++, no
Python frame of ``torch.distributed``), so a rank stalled in ``backward()`` may be computing or waiting. Such
a rank is *ambiguous* (:func:`resolve`): folded with the waiting ranks when another rank is hung for certain,
named hung (``in backward``) when none is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rollcall.evidence.clocks import Bounds, heard, now_of, on_the_way, origin, t0
from rollcall.evidence.silence import gpu_named, silences
from rollcall.ranges import ranges
from rollcall.ranklog import Frame, RankReport, RollCall, StackDump
from rollcall_workload.contract import JOIN_PHASE, SETUP_PHASE
from rollcall_workload.rank.watchdog import FAULTHANDLER_MARGIN_S

#: Path pieces of the libraries whose frames mean "waiting for the other ranks".
_COLLECTIVE_PATHS = ("torch/distributed/",)
#: torch_xla's collectives (its other frames run the rank's own graph).
_XLA_COLLECTIVES = frozenset({"rendezvous", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
#: Function names of decorators around torch.distributed's collectives: not the collective's name.
_WRAPPERS = frozenset({"wrapper", "_wrapper", "inner", "wrapped", "_fn"})
_SLEEP = re.compile(r"\bsleep\s*\(")
_STORE_WAIT = re.compile(r"\bstore\w*\.(get|wait)\s*\(")
_WORK_WAIT = re.compile(r"\b(work|handle|req|request|future|fut)\w*\.wait\s*\(")
_IO_CALL = re.compile(r"\.(recv\w*|read\w*|accept|select|poll|communicate)\s*\(")
#: Standard-library modules whose frames innermost mean the rank waits on I/O.
_IO_MODULES = (
    "/socket.py",
    "/ssl.py",
    "/selectors.py",
    "/subprocess.py",
    "/shutil.py",
    "/_pyio.py",
    "/urllib/",
)
#: What an ambiguous rank (stalled in backward) waits in, when another rank is hung for certain.
DDP_WAIT = "DDP's gradient all-reduce in backward"
#: Where a rank stalled in its imports and device setup stands (it has joined nothing: it waits for no rank).
SETUP_WHERE = "its imports and device setup"
#: Each phase's bound, by the flag that sets it; every other phase's is ``--hang-after``.
PHASE_BOUNDS = {SETUP_PHASE: "--start-skew + --join-hang-after", JOIN_PHASE: "--join-hang-after"}
#: What a dump taken by faulthandler's timer (read by the node's monitor) says of the rank.
FAULTHANDLER_NOTE = "stack taken by faulthandler: no Python thread of the rank could run"
#: The same, where the node's monitor read the rank's GPU busy meanwhile (:func:`~.silence.gpu_busy`).
FAULTHANDLER_GPU_NOTE = "stack taken by faulthandler while the host waited on its GPU"
#: How much past the process group's timeout the suite waits for PyTorch's own error before it ends the run.
PG_TIMEOUT_MARGIN_S = 60.0
#: How long past its own bound the suite waits for a rank seen and never heard: its watchdog's dump (or
#: faulthandler's, this much later) says where it is, and comes first.
SPEAKS_FIRST_S = FAULTHANDLER_MARGIN_S
#: Innermost own frames a hung rank's line shows.
SHOWN_FRAMES = 3


@dataclass(frozen=True)
class Stall:
    """One stalled rank, classified from its dump.

    Attributes:
        rank: the rank.
        waiting: whether it waits in a collective (else it is hung on its own).
        where: the collective (``barrier``, ``all_reduce``, ``init_process_group``) when waiting, else what
            the rank does: ``a sleep``, ``I/O``, ``the data loader`` or ``its own compute``.
        frames: the innermost frames of the workload's own code, innermost first (of any code when the stack
            holds none of the workload's).
        dump: the dump it was read from.
        ambiguous: stalled in ``backward()``, where DDP's gradient all-reduce waits too (see the module).
    """

    rank: int
    waiting: bool
    where: str
    frames: tuple[Frame, ...]
    dump: StackDump
    ambiguous: bool = False

    def at(self) -> str:
        """Where the rank stands, innermost frame first: ``train.py:1585 in f: time.sleep(3600) <- ...``."""
        return " <- ".join(str(f) for f in self.frames) or "no Python frame"


def classify(frames: tuple[Frame, ...]) -> tuple[bool, str]:
    """Whether a stack (outermost first) waits in a collective, and the collective or what it does instead."""
    for f in frames:
        path = f.file.replace("\\", "/")
        if any(piece in path for piece in _COLLECTIVE_PATHS) and f.function not in _WRAPPERS:
            return True, f.function
        if "torch_xla/" in path and f.function in _XLA_COLLECTIVES:
            return True, f.function
    if not frames:
        return False, "its own compute"
    inner = frames[-1]
    if _STORE_WAIT.search(inner.code):
        return True, "store get/wait"
    if _WORK_WAIT.search(inner.code):
        return True, "work.wait"
    if any("torch/utils/data/" in f.file.replace("\\", "/") for f in frames):
        return False, "the data loader"
    if _SLEEP.search(inner.code):
        return False, "a sleep"
    path = inner.file.replace("\\", "/")
    if any(m in path for m in _IO_MODULES) or _IO_CALL.search(inner.code):
        return False, "I/O"
    return False, "its own compute"


def in_backward(frames: tuple[Frame, ...]) -> bool:
    """Whether a stack (outermost first) runs autograd's backward (``Tensor.backward`` and below)."""
    for f in frames:
        path = f.file.replace("\\", "/")
        if ("torch/autograd/" in path or path.endswith("torch/_tensor.py")) and "backward" in f.function:
            return True
    return False


def stall_of(report: RankReport) -> Stall | None:
    """The rank's stall, classified from its main thread; None when no dump stands or it holds no thread."""
    dump = report.stall
    if dump is None or report.complete:
        return None
    thread = dump.main or (dump.threads[0] if dump.threads else None)
    if thread is None:
        return None
    waiting, where = classify(thread.frames)
    if dump.phase == SETUP_PHASE:  # before the join: a torch.distributed frame is an import, no collective
        waiting, where = False, SETUP_WHERE
    own = [f for f in thread.frames if f.own] or list(thread.frames)
    ambiguous = not waiting and where == "its own compute" and in_backward(thread.frames)
    if ambiguous:
        where = "backward (its own compute, or DDP's gradient all-reduce)"
    return Stall(report.rank, waiting, where, tuple(reversed(own[-SHOWN_FRAMES:])), dump, ambiguous)


def stalls(reports: Mapping[int, RankReport]) -> dict[int, Stall]:
    """Every rank whose last dump stands (and which has not completed), classified, by rank."""
    found = {}
    for r, report in sorted(reports.items()):
        stall = stall_of(report)
        if stall is not None:
            found[r] = stall
    return found


def held(found: Mapping[int, Stall], bounds: Bounds) -> dict[int, Stall]:
    """The stalls that count now: one in the imports and device setup only once held for S + J.

    Its dump must say the rank was there for S + J (the rank's own bound, from its process's start): a
    workload that dumps there sooner (at an older or shorter bound) may still be importing within it.
    """
    return {
        r: s
        for r, s in found.items()
        if s.dump.phase != SETUP_PHASE
        or s.dump.stalled_s is None
        or s.dump.stalled_s >= bounds.start_skew_s + bounds.join_s
    }


def resolve(found: Mapping[int, Stall]) -> tuple[list[Stall], list[Stall]]:
    """The hung and the waiting ranks: ambiguous ones wait if another rank is hung for certain, else hang."""
    certain = [s for s in found.values() if not s.waiting and not s.ambiguous]
    ambiguous = [s for s in found.values() if s.ambiguous]
    waiting = [s for s in found.values() if s.waiting]
    if certain:
        folded = [replace(s, waiting=True, where=DDP_WAIT) for s in ambiguous]
        return certain, sorted(waiting + folded, key=lambda s: s.rank)
    return ambiguous, waiting


@dataclass(frozen=True)
class NeverJoined:
    """Ranks that never joined the process group, and those that waited for them in ``init_process_group``.

    Attributes:
        missing: the ranks that never joined (stalled or silent elsewhere: before init_process_group; or
            never heard from).
        waiting: the ranks stalled waiting in init_process_group.
        waited_s: the longest any of those had waited at its dump.
        unheard: those of ``missing`` that said nothing at all (no event, no heartbeat the monitor saw).
        seen: those of ``unheard`` whose process their node's monitor saw: stuck before their watchdog.
        setting_up: those of ``missing`` stalled in their imports and device setup past the start skew.
        setup_s: the longest any of those had been there at its dump.
        setup_bound_s: the start skew S they were held to.
    """

    missing: tuple[int, ...]
    waiting: tuple[int, ...]
    waited_s: float | None
    unheard: tuple[int, ...] = ()
    seen: tuple[int, ...] = ()
    setting_up: tuple[int, ...] = ()
    setup_s: float | None = None
    setup_bound_s: float | None = None

    def line(self, node: Callable[[int], int] | None = None, ranks: Iterable[int] | None = None) -> str:
        """``rank 1 (node 0) never joined; ranks 0, 2-3 waited 60s in init_process_group``.

        ``ranks``: those of ``missing`` to name (all by default).
        """
        mine = self.missing if ranks is None else tuple(r for r in self.missing if r in set(ranks))
        named = [f"{r} (node {node(r)})" if node is not None else str(r) for r in mine]
        who = f"rank {named[0]}" if len(named) == 1 else f"ranks {', '.join(named)}"
        waiters = f"rank {self.waiting[0]}" if len(self.waiting) == 1 else f"ranks {ranges(self.waiting)}"
        waited = f" {self.waited_s:.0f}s" if self.waited_s is not None else ""

        def which(group: list[int]) -> str:
            return "" if set(group) == set(mine) else f"{ranges(group)} "

        notes = []
        setup = [r for r in self.setting_up if r in mine]
        if setup:
            after = f" after {self.setup_s:.0f}s" if self.setup_s is not None else ""
            bound = f" {self.setup_bound_s:g}s" if self.setup_bound_s is not None else ""
            notes.append(
                f"{which(setup)}still importing and setting up its device{after}, "
                f"past --start-skew + --join-hang-after{bound}"
            )
        unwatched = []
        quiet = [r for r in self.unheard if r not in self.seen and r in mine]
        seen = [r for r in self.seen if r in mine]
        for group, what in ((seen, "its process seen, never a word"), (quiet, "never heard from")):
            if group:
                unwatched.append(f"{which(group)}{what}")
        if unwatched:
            notes.append(f"{'; '.join(unwatched)}: stuck before the watchdog started")
        note = f" ({'; '.join(notes)})" if notes else ""
        return f"{who} never joined{note}; {waiters} waited{waited} in {JOIN_PHASE}"


def never_joined(
    roll: RollCall, world_size: int, bounds: Bounds | None = None, now: float | None = None
) -> NeverJoined | None:
    """The ranks that never joined the process group, once it is certain; else None.

    Certain when no rank has said ``start`` (the group never formed), some ranks are stalled waiting in
    ``init_process_group`` past their join bound, every other rank that said a word is stalled or silent
    elsewhere, and each rank still without a word is past its own deadline (:mod:`rollcall.evidence.clocks`):
    one whose process its node's monitor saw, S + J + m after it was seen (its own watchdog holds its
    imports and device setup to S + J from its process's start, and its dump, which says where it is, comes
    first: m is faulthandler's margin past the watchdog's bound, :data:`SPEAKS_FIRST_S`); one never heard
    from at all, S after T0 (a node frozen or cut off as it began, ``ROLLCALL_HANG_NODE``). With none
    missing, every rank is inside ``init_process_group``: joining, not hung (:func:`joining`).
    """
    bounds = bounds or Bounds()
    reports = roll.ranks
    if any(rep.start is not None or rep.complete for rep in reports.values()):
        return None
    found, quiet = held(stalls(reports), bounds), silences(reports)
    if any(r in reports and r not in found and r not in quiet for r in range(world_size)):
        return None
    waiting = [r for r, s in found.items() if s.waiting and s.dump.phase == JOIN_PHASE and r < world_size]
    missing = [r for r in range(world_size) if r not in waiting]
    if not waiting or not missing:
        return None
    unheard = tuple(r for r in missing if r not in found and r not in quiet)
    if unheard and on_the_way(roll):
        return None  # a node on its way (its pod pulling its image): its ranks cannot be heard yet
    moment, first = now_of(roll, now), origin(roll)
    for r in unheard:
        seen = heard(roll, ("rank", r))
        # its process seen, never a word: it may be importing and setting up its device (S + J), past which
        # its own dump says so first; never heard at all: the start skew from the run's first part
        due = (
            seen + bounds.start_skew_s + bounds.join_s + SPEAKS_FIRST_S
            if seen is not None
            else (first or 0.0) + bounds.start_skew_s
        )
        if first is None or moment < due:
            return None  # it may yet say its first word
    waited = [s for r in waiting if (s := found[r].dump.stalled_s) is not None]
    spoke = tuple(r for r in unheard if heard(roll, ("rank", r)) is not None)  # its process seen
    setup = [found[r] for r in missing if r in found and found[r].dump.phase == SETUP_PHASE]
    longest = [s.dump.stalled_s for s in setup if s.dump.stalled_s is not None]
    return NeverJoined(
        tuple(missing),
        tuple(waiting),
        max(waited) if waited else None,
        unheard,
        spoke,
        tuple(s.rank for s in setup),
        max(longest) if longest else None,
        bounds.start_skew_s + bounds.join_s if setup else None,
    )


def joining(roll: RollCall, world_size: int) -> bool:
    """Whether every rank of the world is stalled waiting inside ``init_process_group``: the group is forming.

    Slow NCCL initialisation, or a TCPStore answering thousands of ranks, is no hang: such ranks are held
    to the process group's own timeout, after which PyTorch raises in every rank (its own error ends the run).
    """
    found = stalls(roll.ranks)
    return all(
        r in found and found[r].waiting and found[r].dump.phase == JOIN_PHASE for r in range(world_size)
    )


def stop_reason(
    roll: RollCall, world_size: int, bounds: Bounds | None = None, now: float | None = None
) -> str | None:
    """Why to end the job now, or None: every rank of the world that has not completed is stalled or silent.

    A rank not heard from at all is not stalled (it may not have started yet). Every rank inside
    ``init_process_group`` is joining (:func:`joining`): held to the process group's timeout, counted from
    when the first rank was heard, and a minute more (PyTorch raises at it first).
    """
    bounds = bounds or Bounds()
    reports = roll.ranks
    open_ranks = [r for r in range(world_size) if not (r in reports and reports[r].complete)]
    if not open_ranks:
        return None
    joined = never_joined(roll, world_size, bounds, now)  # it counts the ranks never heard from (see there)
    if joined is not None:
        bound = (
            "the start skew and the join bound (--start-skew + --join-hang-after)"
            if joined.setting_up
            else "the join bound (--join-hang-after)"
        )
        return f"{joined.line()}: ended at {bound}"
    found, quiet = held(stalls(reports), bounds), silences(reports)
    if any(r not in found and r not in quiet for r in open_ranks):
        return None
    if joining(roll, world_size):
        first = t0(roll, [("rank", r) for r in range(world_size)])
        limit = bounds.pg_timeout_s + PG_TIMEOUT_MARGIN_S
        if first is None or now_of(roll, now) < first + limit:
            return None
        return (
            f"every rank waited in {JOIN_PHASE} past the process group's timeout (--pg-timeout "
            f"{bounds.pg_timeout_s:g}s) and a minute more: the group never formed"
        )
    certain = resolve({r: found[r] for r in open_ranks if r in found})[0]
    # a silent rank is a culprit as a rank hung for certain is: those stalled in backward wait for it
    culprit = any(r in quiet and r not in found for r in open_ranks)
    hung = [s.rank for s in certain if not (culprit and s.ambiguous)]
    if all(s.ambiguous for s in certain):  # a rank its node's monitor found hung on its GPU is named hung
        hung += [r for r in open_ranks if r in quiet and r not in found and quiet[r].on_gpu]
    silent = [r for r in open_ranks if r in quiet and r not in hung]
    stuck = [f"rank(s) {ranges(hung)} hung"] if hung else []
    stuck += (
        [f"rank(s) {ranges(silent)} silent ({_states(quiet[r].state_name for r in silent)})"]
        if silent
        else []
    )
    if stuck:
        return f"{', '.join(stuck)}, every other rank waited past its --hang-after: ended at the hang"
    return f"no rank made progress within its --hang-after (ranks {ranges(open_ranks)}); ended at the hang"


def _states(names: Iterable[str]) -> str:
    return "process " + " / ".join(sorted({n or "state unknown" for n in names}))


def waiting_line(waiting: Iterable[Stall], hung: int, silent: int = 0) -> str:
    """``ranks 0, 2-3 waiting in a collective (barrier) for the hung rank``: the waiting ranks, one line."""
    stalled = list(waiting)
    ops = sorted({s.where for s in stalled})
    who = f"rank {stalled[0].rank}" if len(stalled) == 1 else f"ranks {ranges(s.rank for s in stalled)}"
    if hung:
        whom = "for the hung rank" if hung == 1 else "for the hung ranks"
    elif silent:
        whom = "for the silent rank" if silent == 1 else "for the silent ranks"
    else:
        whom = "with no rank hung elsewhere"
    return f"{who} waiting in a collective ({', '.join(ops)}) {whom}"


def stalled_for(dump: StackDump, on_gpu: bool = False) -> str:
    """``for 61s (--hang-after 60s, phase epoch 1 end)``; ``on_gpu``: the monitor read its GPU busy."""
    bound = PHASE_BOUNDS.get(dump.phase, "--hang-after")
    parts = [f"{bound} {dump.hang_after:g}s"] if dump.hang_after is not None else []
    parts += [f"phase {dump.phase}"] if dump.phase else []
    note = FAULTHANDLER_GPU_NOTE if on_gpu else FAULTHANDLER_NOTE
    parts += [note] if dump.source == "faulthandler" else []
    stalled = f"for {dump.stalled_s:.0f}s " if dump.stalled_s is not None else ""
    return f"{stalled}({', '.join(parts)})" if parts else stalled.strip()


def gpu_line(dump: StackDump, node: int, facts: Mapping[str, Any] | None = None) -> str | None:
    """What a hung rank's dump says of its GPU: ``GPU 0 of node 1 has not finished work queued 63s ago``.

    Said when the GPU's oldest unfinished work had waited at least the bound that ran out (the host waits on
    the GPU: the GPU's hang, not the host's), or when the GPU had finished everything (the host's own); None
    where the dump says nothing of a GPU, or its work was younger than the bound (busy, not stuck). The GPU is
    named by NVML's index and UUID from the rank's ``facts`` where it sent them, else by its CUDA device.
    """
    if dump.gpu is None or dump.gpu_pending_s is None:
        return None
    gpu = gpu_named(dump.gpu, node, facts)
    if dump.gpu_pending_s <= 0:
        return f"{gpu} had finished all the work queued before the dump: the wait is the host's"
    bound = dump.hang_after or 0.0
    if dump.gpu_pending_s < bound:
        return None
    return f"{gpu} has not finished work queued {dump.gpu_pending_s:.0f}s ago: the host waits on the GPU"


__all__ = [
    "FAULTHANDLER_GPU_NOTE",
    "FAULTHANDLER_NOTE",
    "NeverJoined",
    "Stall",
    "classify",
    "gpu_line",
    "held",
    "in_backward",
    "joining",
    "never_joined",
    "resolve",
    "stall_of",
    "stalled_for",
    "stalls",
    "stop_reason",
    "waiting_line",
]
