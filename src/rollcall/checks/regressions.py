"""With a baseline, no figure may be worse than it by more than ``--max-regression`` (and its spreads)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.baseline import regressions as find_regressions
from rollcall.verdict import Kind, Problem


def regressions(run: RunView) -> Iterable[Problem]:
    """With a baseline, no figure may be worse than it by more than ``max_regression_pct`` (and spreads)."""
    base = run.baseline
    if base is None:
        return
    c = run.criteria
    for found in find_regressions(run.figures, base, c.max_regression_pct, run.baseline_reference):
        yield Problem(Kind.REGRESSION, str(found), detail=found)


__all__ = ["regressions"]
