"""Where a node whose launcher never started is detected: the other nodes' launchers waited for it.

The node's monitor says what its launcher does at the launchers' rendezvous (``launcher`` lines); before any
rank is spawned, a node never heard from, or one whose launcher is stopped there, is named
(:func:`rollcall.evidence.launchers.never_started`), its ranks as never joined. With every launcher up and
waiting, the launchers never met: every rank is named, and no node.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.launchers import never_started as find_never_started
from rollcall.verdict import Kind, Problem


def never_started(run: RunView) -> Iterable[Problem]:
    """Every node's launcher must start and get past the launchers' rendezvous."""
    layout = run.layout
    found = find_never_started(run.roll, layout.nodes, layout.world_size)
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
    yield Problem(Kind.NEVER_JOINED, found.line(), why, detail=found)


__all__ = ["never_started"]
