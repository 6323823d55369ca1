"""Where a node whose launcher never started is detected: the other nodes' launchers waited for it.

The node's monitor says what its launcher does at the launchers' rendezvous (``launcher`` lines); before any
rank is spawned, a node never heard from, or one whose launcher is stopped there, is named
(:func:`rollcall.evidence.launchers.never_started`) with its ranks, which no launcher spawned to join. With
every launcher up and waiting, the launchers never met: every rank is named, and no node. Its problems are of
its own kind, ``never_started``: a rank's state ``missing``, its owner undetermined (the node's command, the
node, or the way to node 0's rendezvous), not a ``never_joined`` rank's.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, EarlyStop, RunView
from rollcall.evidence.launchers import never_started as find_never_started
from rollcall.evidence.launchers import stop_reason
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A node's launcher never started, or the launchers never met: no rank was spawned to join; nothing the run
#: saw tells its command, its node or the way to node 0's rendezvous apart.
NEVER_STARTED = Kind(
    "never_started",
    RankState.MISSING,
    Blame(
        Owner.UNDETERMINED,
        "a node's launcher never started or never met the others (its command, its node, or the way to "
        "node 0's rendezvous)",
    ),
)


def never_started(run: RunView) -> Iterable[Problem]:
    """Every node's launcher must start and get past the launchers' rendezvous."""
    layout = run.layout
    found = find_never_started(run.roll, layout.nodes, layout.world_size, run.bounds)
    if found is None:
        return
    named = set(found.named)
    if named:
        why = {
            r: "its node's launcher never started"
            if layout.node_of(r) in found.missing
            else "its node's launcher is stuck at the launchers' rendezvous"
            for r in range(layout.world_size)
            if layout.node_of(r) in named
        }
    else:
        why = {r: "never spawned: the launchers never met" for r in range(layout.world_size)}
    yield Problem(NEVER_STARTED, found.line(), why, detail=found)


def _unstarted(run: RunView, now: float) -> str | None:
    """Why to end the job now: a node never started its launcher, or the launchers never met."""
    return stop_reason(run.roll, run.layout.nodes, run.layout.world_size, run.bounds, now)


CHECK = Check(
    never_started,
    detects=(
        "a node whose launcher never started (no rank spawned anywhere) while another node's waited at the "
        "launchers' rendezvous"
    ),
    reads="`evidence/launchers.py` (the nodes' monitors' `launcher` lines)",
    kinds=(NEVER_STARTED,),
    stops=EarlyStop(
        _unstarted,
        when=(
            "at the start skew after T0 (a node never heard from), or twice the join bound after the last "
            "launcher was heard (the launchers never met)"
        ),
    ),
    in_trials=True,
)


__all__ = ["CHECK", "NEVER_STARTED", "never_started"]
