"""Each node that reported ``start`` events hosts ``procs_per_node`` ranks; every world size agrees."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.ranges import ranges
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A node hosted another number of ranks than asked, or a rank said another world size.
LAYOUT = Kind("layout", RankState.SLOW, Blame(Owner.PLATFORM, "the ranks were not placed as asked"))


def layout(run: RunView) -> Iterable[Problem]:
    """Each node that reported ``start`` events hosts ``procs_per_node`` ranks; every world size agrees."""
    lay = run.layout
    per_node: dict[int, set[int]] = defaultdict(set)
    for r, report in run.roll.ranks.items():
        if report.node_rank is not None:
            per_node[report.node_rank].add(r)
    for node, ranks in sorted(per_node.items()):
        if not 0 <= node < lay.nodes:
            yield Problem(LAYOUT, f"node_rank {node} is outside 0..{lay.nodes - 1} (ranks {ranges(ranks)})")
        elif len(ranks) != lay.procs_per_node:
            yield Problem(
                LAYOUT,
                f"node {node} hosted {len(ranks)} rank(s) ({ranges(ranks)}), expected {lay.procs_per_node}",
            )
    worlds: dict[int, list[int]] = defaultdict(list)
    for r, report in run.reports.items():
        if report.world_size is not None and report.world_size != lay.world_size:
            worlds[report.world_size].append(r)
    for size, said in sorted(worlds.items()):
        yield Problem(
            LAYOUT,
            f"ranks {run.by_node(said)} reported a world size of {size}, expected {lay.world_size}",
        )


CHECK = Check(
    layout,
    detects="a node with the wrong number of ranks; another world size",
    reads="`ranklog/`",
    kinds=(LAYOUT,),
    in_trials=True,
)


__all__ = ["CHECK", "LAYOUT", "layout"]
