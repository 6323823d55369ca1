"""With ``--min-throughput`` set, every measured rank must reach it."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.verdict import Kind, Problem


def min_throughput(run: RunView) -> Iterable[Problem]:
    """With ``min_throughput`` set, every measured rank must reach it."""
    floor = run.criteria.min_throughput
    if floor is None:
        return
    slow = {r: tp for r, tp in run.throughputs.items() if tp < floor}
    if slow:
        yield Problem(
            Kind.MIN_THROUGHPUT,
            f"throughput below --min-throughput {floor:g} samples/s on ranks {run.by_node(slow)}",
            {r: f"throughput {tp:.2f} < {floor:g}" for r, tp in slow.items()},
        )


__all__ = ["min_throughput"]
