"""A warning for each of the workload's kernels that failed its check on some GPU and was dropped."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence import kernels
from rollcall.verdict import Kind, Problem, RankState

#: A kernel of the workload's own failed its check on some ranks' GPUs: every rank trained without it. Whose:
#: the workload's where it failed everywhere, else the GPU's that computed it wrong.
KERNEL_FALLBACK = Kind("kernel_fallback", RankState.SLOW, None)


def kernel_fallbacks(run: RunView) -> Iterable[Problem]:
    """A warning for each of the workload's kernels that failed its check on some GPU and was dropped."""
    for f in kernels.kernel_fallbacks(run.reports):
        where: dict[int, str] = {}
        for r in f.failed:
            device = (run.reports[r].start or {}).get("device")
            where[r] = f"{device} of node {run.node(r)}" if isinstance(device, str) else f"node {run.node(r)}"
        ranks = {} if f.everywhere else {r: f"its {f.kernel} kernel failed its check" for r in f.failed}
        yield Problem(KERNEL_FALLBACK, kernels.fallback_message(f, where), ranks, detail=f, warning=True)


CHECK = Check(
    kernel_fallbacks,
    detects="a kernel of the workload's own dropped on some GPU",
    reads="`evidence/kernels.py`",
    kinds=(KERNEL_FALLBACK,),
)


__all__ = ["CHECK", "KERNEL_FALLBACK", "kernel_fallbacks"]
