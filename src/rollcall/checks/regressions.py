"""With a baseline, no figure may be worse than it by more than ``--max-regression`` (and its spreads)."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.facts import Facts
from rollcall.evidence.baseline import regressions as find_regressions
from rollcall.verdict import Kind, Problem


def regressions(facts: Facts) -> Iterable[Problem]:
    """With a baseline, no figure may be worse than it by more than ``max_regression_pct`` (and spreads)."""
    base = facts.baseline
    if base is None:
        return
    c = facts.criteria
    for found in find_regressions(facts.figures, base, c.max_regression_pct, facts.baseline_reference):
        yield Problem(Kind.REGRESSION, str(found), detail=found)


__all__ = ["regressions"]
