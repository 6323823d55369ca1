"""Where a rank's error is judged: the first failure named first (the root cause), its echoes folded.

A rank that left before ``complete`` without an error (any status, 0 included) takes its place among them at
its time: the first to leave, before any rank failed on its own, is the root cause.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.gpu_events import beside_error, program_evidence
from rollcall.evidence.gpumem import held_memory, out_of_memory
from rollcall.evidence.rootcause import Failure, analyse
from rollcall.evidence.rootcause import lines as rootcause_lines
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: The first failure (and independent ones), named first; whose it is follows from what it says.
ROOT_CAUSE = Kind("root_cause", RankState.MISSING, None)
#: The infrastructure took a pod away (the root cause): no rank failed.
DISRUPTION = Kind(
    "disruption", RankState.SLOW, Blame(Owner.CLUSTER, "the infrastructure took a node or pod away")
)
#: A rank's error other than the root cause (independent, or folded with its echoes); whose it is follows
#: from what it says.
ERROR = Kind("error", RankState.MISSING, None)
#: A rank left before ``complete`` without an error (any status, 0 included), after the root cause.
LEFT_EARLY = Kind("left_early", RankState.MISSING, None)


def errors(run: RunView) -> Iterable[Problem]:
    """A rank that reported an error failed; the first failure is named first, echoes folded.

    :mod:`rollcall.evidence.rootcause` orders the errors (and the backend's termination records) by time; the
    first problem is the root cause (with the whole :class:`~rollcall.evidence.rootcause.Analysis` as its
    detail), then independent failures, then the rest folded by shape. Each rank's note is its own message.
    When the infrastructure disrupted the job, the disruption is the first problem (``DISRUPTION``) and every
    error is folded as its consequence. A rank that left early (:attr:`RunView.departures`) is ordered with
    the errors: the first to leave before any own error is the root cause (``ROOT_CAUSE``, naming that rank),
    ahead of the errors that followed; each other rank that left is a ``LEFT_EARLY`` problem of its own.
    An Xid of the program's own class on a failing rank's GPU during the run is named in that rank's note,
    beside its error (:func:`~rollcall.evidence.gpu_events.program_evidence`): its owner stays the error's.
    An out-of-memory on a GPU another process held before the run (:mod:`rollcall.evidence.gpumem`) names
    that memory as its cause. An error beside an Xid or ECC event on its rank's GPU is told with it
    (:func:`~rollcall.evidence.gpu_events.beside_error`), in its line and the root cause's.
    """
    held = {d.rank: h for n in run.nodes_detail for d in n.devices if (h := held_memory(d.facts))}
    failures = [
        Failure(
            r,
            run.node(r),
            e.source or None,
            e.message,
            e.time,
            run.observed.unit,
            held.get(r) if out_of_memory(e.message) else None,
            beside_error(run.gpu_events, r, e.time),
        )
        for r, report in run.reports.items()
        for e in report.errors
    ]
    status = run.observed.status
    ended = [  # a worker's record names its rank: place it on the rank's node
        replace(t, node=run.node(t.rank)) if t.rank is not None and t.node is None else t
        for t in (status.terminations if status is not None else ())
    ]
    analysis = analyse(failures, ended, status.disruption if status is not None else None, run.departures)
    beside = program_evidence(run.gpu_events)  # the program's own Xids on a failing rank's GPU
    for n, line in enumerate(rootcause_lines(analysis)):
        notes: dict[int, str] = {}
        if line.departure is not None:
            notes[line.departure.rank] = line.departure.how()
        for f in line.failures:  # a rank that wrote two errors keeps both
            notes[f.rank] = (
                f"{notes[f.rank]}; error: {f.message}" if f.rank in notes else f"error: {f.message}"
            )
        for rank in notes.keys() & beside.keys():
            said = "; ".join(
                f"{s.what} on GPU {s.heard.gpu} (UUID {s.heard.uuid}), {s.phase}" for s in beside[rank]
            )
            notes[rank] = f"{notes[rank]}; the GPU said: {said}"
        kind = LEFT_EARLY if line.departure is not None and not line.root else ERROR
        if line.root:
            kind = DISRUPTION if analysis.disruption is not None else ROOT_CAUSE
        yield Problem(kind, line.text, notes, detail=analysis if n == 0 else line)


CHECK = Check(
    errors,
    detects=(
        "a rank's error: the root cause first, echoes folded; a disruption; the first rank to leave, one "
        "that ended before `complete` without an error (any status, 0 included), named ahead of the errors "
        "it caused (owner: the workload's when the rank said `exit` itself, a `return` or `sys.exit` of code "
        "running in it; undetermined when only the launcher recorded it), each other that left `left_early`"
    ),
    reads=(
        "`evidence/rootcause.py`, `evidence/departures.py` (the rank's `exit` event; torchrun's records), "
        "`evidence/gpumem.py`"
    ),
    kinds=(ROOT_CAUSE, DISRUPTION, ERROR, LEFT_EARLY),
    logs_only=True,
    in_trials=True,
)


__all__ = ["CHECK", "DISRUPTION", "ERROR", "LEFT_EARLY", "ROOT_CAUSE", "errors"]
