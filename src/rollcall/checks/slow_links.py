"""Where a slow link is detected: no group under ``--min-busbw``, no node (pair) under ``--busbw-ratio``.

A slow node or pair names its ranks; the world names none (every rank is in it).
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.perf import common_node, slow_groups
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A node, pair of nodes or the world below --min-busbw, --busbw-ratio or its published floor.
SLOW_LINK = Kind(
    "slow_link", RankState.SLOW, Blame(Owner.CLUSTER, "a link slower than it should be"), too_slow=True
)


def slow_links(run: RunView) -> Iterable[Problem]:
    """No group below ``min_busbw``; no node (pair) below ``busbw_ratio`` times the median node (pair).

    A slow node or pair names its ranks; the world names none (every rank is in it). When one node is in
    every slow pair of nodes, a last line names it.
    """
    c, perf = run.criteria, run.perf
    slow = slow_groups(perf.groups, min_busbw=c.min_busbw, busbw_ratio=c.busbw_ratio, pods=perf.pods)
    world = run.layout.world_size
    for s in slow:
        named = [r for r in s.group.ranks if 0 <= r < world] if s.group.scope != "world" else []
        yield Problem(SLOW_LINK, f"slow link: {s}", dict.fromkeys(named, s.note()), detail=s)
    node = common_node(slow)
    if node is not None:
        yield Problem(SLOW_LINK, f"slow link: node {node} is in every slow pair of nodes", detail=node)


CHECK = Check(
    slow_links,
    detects="a slow link: a node, pair or world below its bandwidth",
    reads="`evidence/perf.py`",
    kinds=(SLOW_LINK,),
    gate_only=True,
    in_trials=True,
)


__all__ = ["CHECK", "SLOW_LINK", "slow_links"]
