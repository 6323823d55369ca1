"""Every node's fact matches the golden configuration (``--expect KEY=GLOB``); unknown does not."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.drift import mismatches
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A node's fact does not match --expect KEY=GLOB (or is unknown).
EXPECTATION = Kind(
    "expectation", RankState.SLOW, Blame(Owner.PLATFORM, "a node is not as the golden configuration says")
)


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
    detects="a node short of the golden configuration (`--expect`)",
    reads="`evidence/drift.py`",
    kinds=(EXPECTATION,),
)


__all__ = ["CHECK", "EXPECTATION", "expectations"]
