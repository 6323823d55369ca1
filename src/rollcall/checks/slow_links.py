"""Where a slow link is detected: no group under ``--min-busbw``, no node (pair) under ``--busbw-ratio``.

A slow node or pair names its ranks; the world names none (every rank is in it).
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.perf import common_node, slow_groups
from rollcall.verdict import Kind, Problem


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
        yield Problem(Kind.SLOW_LINK, f"slow link: {s}", dict.fromkeys(named, s.note()), detail=s)
    node = common_node(slow)
    if node is not None:
        yield Problem(Kind.SLOW_LINK, f"slow link: node {node} is in every slow pair of nodes", detail=node)


__all__ = ["slow_links"]
