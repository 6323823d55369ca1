"""Where a slow GPU is detected: no rank's compute time per step may exceed the median's by more than 1/ratio.

In synchronous DDP throughput is equal on every rank, compute time is not; the line carries each slow
rank's device (clocks, PCIe link, temperature, power limit) when its node reported it.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.fitness import device_summary
from rollcall.evidence.perf import compute_straggler_problem
from rollcall.evidence.perf import compute_stragglers as find_compute_stragglers
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: Compute time per step above the median's by 1/--straggler-ratio.
COMPUTE_STRAGGLER = Kind(
    "compute_straggler",
    RankState.STRAGGLER,
    Blame(Owner.CLUSTER, "a GPU slower than its peers"),
    too_slow=True,
)


def compute_stragglers(run: RunView) -> Iterable[Problem]:
    """With ``straggler_ratio`` set, no rank's compute time may exceed the median's by more than 1/ratio."""
    ratio = run.criteria.straggler_ratio
    found = find_compute_stragglers(run.perf.compute, ratio)
    if found:
        devices = {d.rank: d for n in run.nodes_detail for d in n.devices}
        known = [f"rank {s.rank} {device_summary(devices[s.rank])}" for s in found if s.rank in devices]
        yield Problem(
            COMPUTE_STRAGGLER,
            compute_straggler_problem(found, ratio)
            + (f"; their devices: {'; '.join(known)}" if known else ""),
            {s.rank: s.note() for s in found},
            detail=tuple(found),
        )


CHECK = Check(
    compute_stragglers,
    detects="a slow GPU: compute time per step above the median's",
    reads="`evidence/perf.py`, `evidence/fitness.py`",
    kinds=(COMPUTE_STRAGGLER,),
    gate_only=True,
)


__all__ = ["CHECK", "COMPUTE_STRAGGLER", "compute_stragglers"]
