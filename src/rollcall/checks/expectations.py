"""Every node's fact matches the golden configuration (``--expect KEY=GLOB``); unknown does not."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.fitness import mismatches
from rollcall.verdict import Kind, Problem


def expectations(run: RunView) -> Iterable[Problem]:
    """Every node's fact matches the golden configuration (``--expect KEY=GLOB``); unknown does not."""
    expect = run.criteria.expect
    if not expect:
        return
    nodes = run.nodes_detail
    if not nodes:
        keys = ", ".join(f"{k}={g}" for k, g in expect)
        yield Problem(Kind.EXPECTATION, f"--expect {keys}: no rank reported its facts")
        return
    for m in mismatches(nodes, expect):
        yield Problem(Kind.EXPECTATION, f"expectation not met: {m}", detail=m)


__all__ = ["expectations"]
