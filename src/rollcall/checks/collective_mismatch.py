"""Every result a rank received from the bandwidth phase's timed all-reduces must be the exact sum."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.proofs import find_wrong_collectives, receiving_node, suspect_link
from rollcall.ranges import ranges
from rollcall.verdict import Kind, Problem


def collective_mismatch(run: RunView) -> Iterable[Problem]:
    """Every result a rank received from the bandwidth phase's timed all-reduces must be the exact sum.

    One problem per group naming the ranks that received wrong data; when they are all on one node, a last
    line names it (its device or its link).
    """
    found = find_wrong_collectives(run.reports, run.node)
    for group in found:
        notes = {r.rank: f"wrong data from the {group.label}" for r in group.receivers}
        yield Problem(Kind.COLLECTIVE_MISMATCH, f"collective mismatch: {group}", notes, detail=group)
    node, ranks = receiving_node(found), sorted({r.rank for g in found for r in g.receivers})
    link = suspect_link(run.reports, found) if node is None else None
    if node is not None:
        yield Problem(
            Kind.COLLECTIVE_MISMATCH,
            f"collective mismatch: every rank that received wrong data ({ranges(ranks)}) is on node {node}: "
            "its device or its link",
            detail=node,
        )
    elif link is not None:
        yield Problem(
            Kind.COLLECTIVE_MISMATCH,
            f"collective mismatch: every group that received wrong data crosses the link between nodes "
            f"{link[0]} and {link[1]}, and no group that was right does",
            detail=link,
        )


__all__ = ["collective_mismatch"]
