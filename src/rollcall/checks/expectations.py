"""Every node's fact matches the golden configuration (``--expect KEY=GLOB``); unknown does not."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.drift import Mismatch, mismatches
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A node's fact does not match --expect KEY=GLOB (or is unknown): whose it is, each key declares
#: (:func:`rollcall.evidence.drift.whose`: the node's own, the cluster's; what the run brought, the
#: platform's).
EXPECTATION = Kind("expectation", RankState.SLOW, None)


def expectation_blame(detail: object) -> Blame:
    """Whose an expectation not met is: the cluster's for a fact of the node's own, else the platform's."""
    if isinstance(detail, Mismatch) and detail.whose == "node":
        why = f"the node's own fact {detail.key} is not as the golden configuration says"
        return Blame(Owner.CLUSTER, why)
    if isinstance(detail, Mismatch):
        return Blame(Owner.PLATFORM, f"{detail.key} is what the run brought or where it ran: the platform's")
    return Blame(Owner.PLATFORM, "no rank reported the facts the golden configuration names")


def expectations(run: RunView) -> Iterable[Problem]:
    """Every node's fact matches the golden configuration (``--expect KEY=GLOB``); unknown does not."""
    expect = run.criteria.expect
    if not expect:
        return
    nodes = run.nodes_detail
    if not nodes:
        keys = ", ".join(f"{k}={g}" for k, g in expect)
        yield Problem(EXPECTATION, f"--expect {keys}: no rank reported its facts")
        return
    for m in mismatches(nodes, expect):
        yield Problem(EXPECTATION, f"expectation not met: {m}", detail=m)


CHECK = Check(
    expectations,
    detects=(
        "a node short of the golden configuration (`--expect`): the cluster's for a fact of the node's own "
        "(it makes the node unfit), the platform's for what the run brought (it marks no node)"
    ),
    reads="`evidence/drift.py`",
    kinds=(EXPECTATION,),
    gate_only=True,
)


__all__ = ["CHECK", "EXPECTATION", "expectation_blame", "expectations"]
