"""With ``--min-throughput`` set, every measured rank must reach it."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A rank's throughput below --min-throughput.
MIN_THROUGHPUT = Kind(
    "min_throughput", RankState.SLOW, Blame(Owner.CLUSTER, "a rank slower than the floor"), too_slow=True
)


def min_throughput(run: RunView) -> Iterable[Problem]:
    """With ``min_throughput`` set, every measured rank must reach it."""
    floor = run.criteria.min_throughput
    if floor is None:
        return
    slow = {r: tp for r, tp in run.throughputs.items() if tp < floor}
    if slow:
        yield Problem(
            MIN_THROUGHPUT,
            f"throughput below --min-throughput {floor:g} samples/s on ranks {run.by_node(slow)}",
            {r: f"throughput {tp:.2f} < {floor:g}" for r, tp in slow.items()},
        )


CHECK = Check(
    min_throughput,
    detects="a rank below `--min-throughput`",
    reads="`checks/runview.py`",
    kinds=(MIN_THROUGHPUT,),
)


__all__ = ["CHECK", "MIN_THROUGHPUT", "min_throughput"]
