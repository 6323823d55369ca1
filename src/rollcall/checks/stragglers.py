"""Stragglers: ranks training slower than a ratio of the median rank.

``--straggler-ratio R`` (0 turns the check off): a rank whose throughput is below R times the median of all
ranks fails the run, named with its node. A bad GPU, link or NeuronCore shows up this way long before a job
fails. The check runs on the attempt that decided a test (after ``--job-retries``: a straggler is never
retried away).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState, Stats

#: A rank's throughput below --straggler-ratio times the median's.
STRAGGLER = Kind(
    "straggler", RankState.STRAGGLER, Blame(Owner.CLUSTER, "a rank slower than its peers"), too_slow=True
)


@dataclass(frozen=True)
class Straggler:
    """A rank training slower than ``threshold`` times the median of all ranks."""

    rank: int
    node: int
    throughput: float
    median: float

    @property
    def ratio(self) -> float:
        """Throughput of this rank over the median."""
        return self.throughput / self.median

    def __str__(self) -> str:
        return (
            f"rank {self.rank} (node {self.node}) at {self.throughput:.2f} samples/s, "
            f"{self.ratio:.2f} of the median"
        )

    def note(self) -> str:
        """What the straggler's own junit case says."""
        return f"straggler: {self.ratio:.2f} of the median throughput"

    def as_dict(self) -> dict[str, Any]:
        """The straggler, JSON-ready."""
        return {**asdict(self), "ratio": self.ratio}


def find_stragglers(per_rank: Mapping[int, Mapping[str, Any]], ratio: float) -> list[Straggler]:
    """Ranks of ``per_rank`` (``{rank: {"throughput": x, "node": n}}``) below ``ratio`` times the median.

    ``ratio`` 0 turns the check off; with fewer than two ranks measured there is no one to lag behind.
    """
    values = {
        r: float(info["throughput"])
        for r, info in per_rank.items()
        if isinstance(info.get("throughput"), int | float) and math.isfinite(info["throughput"])
    }
    median = Stats.of(list(values.values())).median
    if ratio <= 0 or len(values) < 2 or not median:
        return []
    return [
        Straggler(r, int(per_rank[r].get("node", -1)), tp, median)
        for r, tp in sorted(values.items())
        if tp < ratio * median
    ]


def straggler_problem(stragglers: Sequence[Straggler], ratio: float) -> str:
    """The verdict's line naming every straggler."""
    median = stragglers[0].median
    return (
        f"{len(stragglers)} straggler(s) below {ratio:g} x the median throughput of {median:.2f} samples/s "
        f"(--straggler-ratio): " + "; ".join(str(s) for s in stragglers)
    )


def stragglers(run: RunView) -> Iterable[Problem]:
    """With ``straggler_ratio`` set, no measured rank may fall below that ratio of the median."""
    ratio = run.criteria.straggler_ratio
    per_rank = {r: {"throughput": tp, "node": run.node(r)} for r, tp in run.throughputs.items()}
    found = find_stragglers(per_rank, ratio)
    if found:
        yield Problem(
            STRAGGLER, straggler_problem(found, ratio), {s.rank: s.note() for s in found}, detail=found
        )


CHECK = Check(
    stragglers,
    detects="a throughput straggler",
    reads="`checks/stragglers.py`",
    kinds=(STRAGGLER,),
    gate_only=True,
)


__all__ = ["CHECK", "STRAGGLER", "Straggler", "find_stragglers", "straggler_problem", "stragglers"]
