"""Where a bad GPU's own signals are judged: no device may break a fitness rule (ECC, PCIe, clocks...)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.fitness import unfit_devices
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A device's facts break a fitness rule (ECC, row remap, PCIe, clocks, power).
UNFIT_DEVICE = Kind("unfit_device", RankState.SLOW, Blame(Owner.CLUSTER, "a device broke a fitness rule"))


def unfit_device(run: RunView) -> Iterable[Problem]:
    """No device may break a fitness rule: one problem per device, failing and warning rules apart."""
    found = unfit_devices(run.nodes_detail, run.criteria.fitness)
    by_device: dict[tuple[int, bool, bool], list[Any]] = defaultdict(list)
    for u in found:  # the node itself (device_count) before its first rank's device
        by_device[(u.device.rank, not u.device.whole_node, u.severity == "warn")].append(u)
    for (rank, _device, warn), unfit in sorted(by_device.items()):
        what = "; ".join(f"{u.fact}={u.value} {u.why} (rule {u.rule})" for u in unfit)
        yield Problem(
            UNFIT_DEVICE,
            f"unfit device{' (warning)' if warn else ''}: {unfit[0].device.label}: {what}",
            {rank: f"unfit device: {', '.join(u.rule for u in unfit)}"},
            detail=tuple(unfit),
            warning=warn,
        )


CHECK = Check(
    unfit_device,
    detects="an unfit device (ECC, row remapping, PCIe, clocks, power, devices lost, memory held by others)",
    reads="`evidence/fitness.py`, `evidence/gpumem.py`",
    kinds=(UNFIT_DEVICE,),
    gate_only=True,
)


__all__ = ["CHECK", "UNFIT_DEVICE", "unfit_device"]
