"""Every result a rank received from the bandwidth phase's timed all-reduces must be the exact sum."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.proofs import find_wrong_collectives, receiving_node, suspect_link
from rollcall.ranges import ranges
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A rank received a result from the bandwidth phase's all-reduce that is not the exact sum.
COLLECTIVE_MISMATCH = Kind(
    "collective_mismatch", RankState.WRONG, Blame(Owner.CLUSTER, "an all-reduce delivered wrong data")
)


def collective_mismatch(run: RunView) -> Iterable[Problem]:
    """Every result a rank received from the bandwidth phase's timed all-reduces must be the exact sum.

    One problem per group naming the ranks that received wrong data; when they are all on one node, a last
    line names it (its device or its link).
    """
    found = find_wrong_collectives(run.reports, run.node)
    for group in found:
        notes = {r.rank: f"wrong data from the {group.label}" for r in group.receivers}
        yield Problem(COLLECTIVE_MISMATCH, f"collective mismatch: {group}", notes, detail=group)
    node, ranks = receiving_node(found), sorted({r.rank for g in found for r in g.receivers})
    link = suspect_link(run.reports, found) if node is None else None
    if node is not None:
        yield Problem(
            COLLECTIVE_MISMATCH,
            f"collective mismatch: every rank that received wrong data ({ranges(ranks)}) is on node {node}: "
            "its device or its link",
            detail=node,
        )
    elif link is not None:
        yield Problem(
            COLLECTIVE_MISMATCH,
            f"collective mismatch: every group that received wrong data crosses the link between nodes "
            f"{link[0]} and {link[1]}, and no group that was right does",
            detail=link,
        )


CHECK = Check(
    collective_mismatch,
    detects="an all-reduce that returned a wrong sum",
    reads="`evidence/proofs.py`",
    kinds=(COLLECTIVE_MISMATCH,),
)


__all__ = ["CHECK", "COLLECTIVE_MISMATCH", "collective_mismatch"]
