"""Under ``--drift fail`` (``warn``: as a warning), the nodes must agree on every version they report."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.drift import drift
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: Nodes of the run differ in a version (driver, CUDA, NCCL, kernel, torch ...).
CONFIG_DRIFT = Kind("config_drift", RankState.SLOW, Blame(Owner.PLATFORM, "the nodes' software differs"))


def config_drift(run: RunView) -> Iterable[Problem]:
    """Under ``--drift fail`` (``warn``: as a warning), the nodes must agree on every version they report."""
    mode = run.criteria.drift
    if mode == "off":
        return
    for d in drift(run.nodes_detail):
        yield Problem(CONFIG_DRIFT, f"config drift: {d}", detail=d, warning=mode == "warn")


CHECK = Check(
    config_drift,
    detects="nodes that disagree on their versions",
    reads="`evidence/drift.py`",
    kinds=(CONFIG_DRIFT,),
    gate_only=True,
)


__all__ = ["CHECK", "CONFIG_DRIFT", "config_drift"]
