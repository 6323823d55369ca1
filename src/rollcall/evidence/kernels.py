"""The workload's own kernels: which ran, and each one a rank's check on its GPU made every rank drop.

Pure functions over what the ranks said of the kernels: ``start``'s ``kernels`` (what
:mod:`rollcall_workload.kernels.gate` chose), then the ``kernels`` event (what the ranks' checks,
:mod:`rollcall_workload.kernels.check`, settled): each kernel's state, ``on: ...`` or ``off: ...``, and why.
A kernel whose check failed on some ranks was dropped on all of them, and the run trained with the standard
op: nothing failed, so the judge raises a warning, never an unfit node. It names the devices whose check
failed when their peers' passed (that device computes the kernel wrong, or could not compile or launch it),
and no device when every rank's failed (the kernel does not hold on that architecture: the workload's own
fault).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rollcall.ranges import ranges
from rollcall.ranklog import RankReport

#: How a rank says its own check of a kernel failed (``off: failed its check here: <why>``).
FAILED_HERE = "off: failed its check here: "


@dataclass(frozen=True)
class KernelFallback:
    """A kernel every rank dropped because its check failed on some.

    Attributes:
        kernel: the kernel's name (``attention``, ``dropout_layer_norm``, ...).
        failed: each rank whose own check failed, with why.
        reported: how many ranks said anything of the kernel.
    """

    kernel: str
    failed: Mapping[int, str]
    reported: int

    @property
    def everywhere(self) -> bool:
        """Whether every rank that reported it failed its check: the kernel's fault, not a device's."""
        return len(self.failed) == self.reported


def kernel_states(report: RankReport) -> dict[str, str]:
    """The kernels' states one rank settled on (its ``kernels`` event, else its ``start``'s)."""
    return report.kernels


def kernels_used(reports: Mapping[int, RankReport]) -> dict[str, str]:
    """Each kernel's state as the lowest rank that said it gave it: what the run trained with, and why."""
    for rank in sorted(reports):
        if states := kernel_states(reports[rank]):
            return states
    return {}


def kernel_fallbacks(reports: Mapping[int, RankReport]) -> list[KernelFallback]:
    """Each kernel dropped on every rank because its check failed on some, in the order first said."""
    failed: dict[str, dict[int, str]] = {}
    reported: dict[str, int] = {}
    for rank in sorted(reports):
        for kernel, state in kernel_states(reports[rank]).items():
            reported[kernel] = reported.get(kernel, 0) + 1
            if state.startswith(FAILED_HERE):
                failed.setdefault(kernel, {})[rank] = state.removeprefix(FAILED_HERE).split("; ")[0]
    return [KernelFallback(k, ranks, reported[k]) for k, ranks in failed.items()]


def fallback_message(f: KernelFallback, where: Mapping[int, str]) -> str:
    """The warning's line: the kernel, the ranks (their devices in ``where``) whose check failed, and why."""
    if f.everywhere:
        reason = next(iter(f.failed.values()))
        return (
            f"the workload's {f.kernel} kernel failed its check on every rank ({reason}): the kernel does "
            "not hold on this GPU (rollcall's own fault, not the cluster's); the run trained with the "
            "standard op"
        )
    ranks = sorted(f.failed)
    first = ranks[0]
    device = f" ({where[first]})" if first in where else ""
    return (
        f"the workload's {f.kernel} kernel failed its check on rank(s) {ranges(ranks)} only, its peers' "
        f"passed: rank {first}{device}: {f.failed[first]}; every rank trained with the standard op"
    )
