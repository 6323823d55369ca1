"""A warning for each of the workload's kernels that failed its check on some GPU and was dropped."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence import kernels
from rollcall.verdict import Kind, Problem


def kernel_fallbacks(run: RunView) -> Iterable[Problem]:
    """A warning for each of the workload's kernels that failed its check on some GPU and was dropped."""
    for f in kernels.kernel_fallbacks(run.reports):
        where: dict[int, str] = {}
        for r in f.failed:
            device = (run.reports[r].start or {}).get("device")
            where[r] = f"{device} of node {run.node(r)}" if isinstance(device, str) else f"node {run.node(r)}"
        ranks = {} if f.everywhere else {r: f"its {f.kernel} kernel failed its check" for r in f.failed}
        yield Problem(Kind.KERNEL_FALLBACK, kernels.fallback_message(f, where), ranks, detail=f, warning=True)


__all__ = ["kernel_fallbacks"]
