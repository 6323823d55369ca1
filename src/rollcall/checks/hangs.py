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
for ending a job at the hang: every rank that has not completed is stalled (so the waiting ones have waited
their ``--hang-after`` too), whether one of them is hung or none made progress at all.

A limit of reading Python stacks: DDP waits for its gradient all-reduce inside ``backward()`` (C++, no
Python frame of ``torch.distributed``), so a rank stalled in ``backward()`` may be computing or waiting. Such
a rank is *ambiguous* (:func:`resolve`): folded with the waiting ranks when another rank is hung for certain,
named hung (``in backward``) when none is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from rollcall.ranklog import Frame, RankReport, StackDump, ranges

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


def resolve(found: Mapping[int, Stall]) -> tuple[list[Stall], list[Stall]]:
    """The hung and the waiting ranks: ambiguous ones wait if another rank is hung for certain, else hang."""
    certain = [s for s in found.values() if not s.waiting and not s.ambiguous]
    ambiguous = [s for s in found.values() if s.ambiguous]
    waiting = [s for s in found.values() if s.waiting]
    if certain:
        folded = [replace(s, waiting=True, where=DDP_WAIT) for s in ambiguous]
        return certain, sorted(waiting + folded, key=lambda s: s.rank)
    return ambiguous, waiting


def stop_reason(reports: Mapping[int, RankReport], world_size: int) -> str | None:
    """Why to end the job now, or None: every rank of the world that has not completed is stalled.

    A rank not heard from at all is not stalled (it may not have started yet).
    """
    open_ranks = [r for r in range(world_size) if not (r in reports and reports[r].complete)]
    if not open_ranks:
        return None
    found = stalls(reports)
    if any(r not in found for r in open_ranks):
        return None
    hung = [s.rank for s in resolve({r: found[r] for r in open_ranks})[0]]
    if hung:
        return (
            f"rank(s) {ranges(hung)} hung, every other rank waited past its --hang-after: ended at the hang"
        )
    return f"no rank made progress within its --hang-after (ranks {ranges(open_ranks)}); ended at the hang"


def waiting_line(waiting: Iterable[Stall], hung: int) -> str:
    """``ranks 0, 2-3 waiting in a collective (barrier) for the hung rank``: the waiting ranks, one line."""
    stalled = list(waiting)
    ops = sorted({s.where for s in stalled})
    who = f"rank {stalled[0].rank}" if len(stalled) == 1 else f"ranks {ranges(s.rank for s in stalled)}"
    whom = (
        "for the hung rank" if hung == 1 else "for the hung ranks" if hung else "with no rank hung elsewhere"
    )
    return f"{who} waiting in a collective ({', '.join(ops)}) {whom}"


def stalled_for(dump: StackDump) -> str:
    """``for 61s (--hang-after 60s, phase epoch 1 end)``."""
    parts = [f"--hang-after {dump.hang_after:g}s"] if dump.hang_after is not None else []
    parts += [f"phase {dump.phase}"] if dump.phase else []
    stalled = f"for {dump.stalled_s:.0f}s " if dump.stalled_s is not None else ""
    return f"{stalled}({', '.join(parts)})" if parts else stalled.strip()


__all__ = [
    "Stall",
    "classify",
    "in_backward",
    "resolve",
    "stall_of",
    "stalled_for",
    "stalls",
    "stop_reason",
    "waiting_line",
]
