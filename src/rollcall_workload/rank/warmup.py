"""Warm-up: the untimed steps before the epochs, ended once the step time settles on every rank.

The first step runs alone (it compiles: its time is ``compile_s``, and what the compiler found in its cache
is read right after it). Then, adaptive (``--warmup-settle`` K > 0, not on xla), steps one by one until the
last K step times agree within ``--warmup-tolerance`` on every rank (:meth:`Steps.every_rank`, so that
every rank leaves warm-up at the same step) or ``--warmup-steps`` ran; with a fixed count, the rest at once.
Each step time after the first feeds the watchdog's bound.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from rollcall_workload.rank.compile_cache import _inductor_counters, compile_cache_fields
from rollcall_workload.rank.steps import Steps
from rollcall_workload.rank.timing import settled


@dataclass(frozen=True)
class WarmUp:
    """What warm-up measured: the first step's seconds, the rest's, the steps, the compile cache's fields."""

    compile_s: float
    warmup_s: float
    steps: int
    compile_cache: dict[str, Any] | None  # None: no step ran


def warm_up(steps: Steps, args: argparse.Namespace, device: str) -> WarmUp:
    """Run the warm-up of ``args`` on ``device`` (see the module); what it measured."""
    adaptive = args.warmup_settle > 0 and device != "xla"
    step_seconds: list[float] = []
    count_so_far = 0
    compile_cache: dict[str, Any] | None = None
    while count_so_far < args.warmup_steps:
        count = 1 if adaptive or not step_seconds else args.warmup_steps - 1
        started = time.perf_counter()
        steps.train(count, "warm-up", count_so_far + 1)
        steps.acc.synchronize()
        step_seconds.append(time.perf_counter() - started)
        if len(step_seconds) == 1:  # what the compile found in the cache, before any later recompile
            compile_cache = compile_cache_fields(bool(args.compile), _inductor_counters())
        if len(step_seconds) > 1:  # the first step compiles: not a step time
            steps.watchdog.step_time(step_seconds[-1] / count)
        count_so_far += count
        if adaptive and steps.every_rank(settled(step_seconds, args.warmup_settle, args.warmup_tolerance)):
            break
    compile_s = step_seconds[0] if step_seconds else 0.0
    return WarmUp(compile_s, sum(step_seconds[1:]), count_so_far, compile_cache)
