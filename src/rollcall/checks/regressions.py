"""With a baseline, no figure may be worse than it by more than ``--max-regression`` (and its spreads)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.baseline import regressions as find_regressions
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A figure worse than its baseline by more than --max-regression (and its spreads).
REGRESSION = Kind("regression", RankState.SLOW, Blame(Owner.UNDETERMINED, "slower than the baseline"))


def regressions(run: RunView) -> Iterable[Problem]:
    """With a baseline, no figure may be worse than it by more than ``max_regression_pct`` (and spreads)."""
    base = run.baseline
    if base is None:
        return
    c = run.criteria
    for found in find_regressions(run.figures, base, c.max_regression_pct, run.baseline_reference):
        yield Problem(REGRESSION, str(found), detail=found)


CHECK = Check(
    regressions,
    detects="a regression against the baseline",
    reads="`evidence/baseline.py`, `evidence/reference.py`",
    kinds=(REGRESSION,),
    gate_only=True,
)


__all__ = ["CHECK", "REGRESSION", "regressions"]
