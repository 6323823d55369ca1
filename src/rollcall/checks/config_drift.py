"""Under ``--drift fail`` (``warn``: as a warning), the nodes must agree on every version they report."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.fitness import drift
from rollcall.verdict import Kind, Problem


def config_drift(run: RunView) -> Iterable[Problem]:
    """Under ``--drift fail`` (``warn``: as a warning), the nodes must agree on every version they report."""
    mode = run.criteria.drift
    if mode == "off":
        return
    for d in drift(run.nodes_detail):
        yield Problem(Kind.CONFIG_DRIFT, f"config drift: {d}", detail=d, warning=mode == "warn")


__all__ = ["config_drift"]
