"""Steady state and its clocks: when warm-up has settled, step and compute timers, and injected slowness."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from rollcall_workload.rank.dist import Accelerator, no_sync
from rollcall_workload.rank.watchdog import Watchdog

PROCESS_STARTED = time.monotonic()  # before torch is imported: start-up counts from here


def settled(step_seconds: Sequence[float], k: int, tolerance_pct: float) -> bool:
    """Whether the last ``k`` step times all lie within ``tolerance_pct`` percent of their median."""
    if k < 1 or len(step_seconds) < k:
        return False
    last = step_seconds[-k:]
    median = statistics.median(last)
    return median > 0 and all(abs(t - median) <= median * tolerance_pct / 100 for t in last)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated linearly between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class StepClock:
    """Times one region in milliseconds: CUDA events on cuda, the wall clock after a synchronise elsewhere."""

    def __init__(self, acc: Accelerator) -> None:
        self.acc = acc
        self._event: Any = None
        self._started = 0.0

    def start(self) -> None:
        """Mark the start (the device is synchronised first)."""
        import torch

        self.acc.synchronize()
        if self.acc.kind == "cuda":
            self._event = torch.cuda.Event(enable_timing=True)
            self._event.record()
        self._started = time.perf_counter()

    def stop_ms(self) -> float:
        """Milliseconds since :meth:`start`, once the device has finished the work queued since."""
        import torch

        if self.acc.kind == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return float(self._event.elapsed_time(end))
        self.acc.synchronize()
        return (time.perf_counter() - self._started) * 1000


class ComputeTimer:
    """Each training step's forward + backward timed inside the timed epochs, where one rank trains alone.

    With one rank there is no DDP, so no collective runs within a training step and the timed epochs' own
    steps serve as the compute steps (see "Compute time"): on cuda a CUDA event is recorded before each
    step's forward and after its backward, and all are read once the epochs are over, so no step waits for
    the device; on the CPU the wall clock, the work being done when the calls return.
    """

    def __init__(self, acc: Accelerator) -> None:
        self.acc = acc
        self._marks: list[tuple[Any, Any]] = []
        self._start: Any = None

    def _now(self) -> Any:
        import torch

        if self.acc.kind == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self) -> None:
        """Before a step's forward."""
        self._start = self._now()

    def stop(self) -> None:
        """After the same step's backward."""
        self._marks.append((self._start, self._now()))

    def times_ms(self, last: int) -> list[float]:
        """Milliseconds of each of the last ``last`` steps timed (all of them when fewer ran)."""
        marks = self._marks[-last:] if last > 0 else []
        if self.acc.kind == "cuda" and marks:
            marks[-1][1].synchronize()
            return [float(a.elapsed_time(b)) for a, b in marks]
        return [(b - a) * 1000 for a, b in marks]


class Slowdown:
    """``ROLLCALL_SLOW_RANK`` on this rank: each step made ``factor`` times as long by extra work.

    :meth:`begin` and :meth:`end` bracket one step; ``end`` runs matmuls on the device for (factor - 1) times
    the wall-clock time the step took. With factor 1 both do nothing (and synchronise nothing).
    """

    def __init__(self, acc: Accelerator, factor: float = 1.0) -> None:
        self.acc = acc
        self.factor = factor
        self._started = 0.0
        self._operand: Any = None

    def begin(self) -> None:
        """Start of one step."""
        if self.factor > 1:
            self.acc.synchronize()
            self._started = time.perf_counter()

    def end(self) -> None:
        """End of the step: the extra work, then back to the caller."""
        if self.factor <= 1:
            return
        self.acc.synchronize()
        self.burn((self.factor - 1) * (time.perf_counter() - self._started))

    def burn(self, seconds: float) -> None:
        """Keep the device busy with matmuls for ``seconds`` of wall-clock time."""
        import torch

        if self._operand is None:
            size = 2048 if self.acc.kind == "cuda" else 128
            self._operand = torch.randn(size, size, device=self.acc.device)
        per_sync = 8 if self.acc.kind == "cuda" else 1
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(per_sync):
                product = self._operand @ self._operand
            del product
            self.acc.step_boundary()
            self.acc.synchronize()


def measure_compute(
    acc: Accelerator,
    step_model: Callable[..., Any],
    optimizer: Any,
    batches: Sequence[dict[str, Any]],
    *,
    steps: int,
    slowdown: Slowdown,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    cudagraphs: bool = False,
    watchdog: Watchdog | None = None,
) -> list[float]:
    """Milliseconds of each of ``steps`` forward + backward steps with no collective in them.

    ``autocast`` is the training steps' autocast context (``acc.autocast`` when None; a null context with
    bf16 weights); with ``cudagraphs`` each step is marked as a new CUDA-graph step, as in training.
    """
    import torch

    clock = StepClock(acc)
    times: list[float] = []
    for i in range(steps + 1 if steps else 0):  # the first one is untimed
        if watchdog is not None:
            watchdog.beat(f"compute step {i}")
        acc.barrier(f"rollcall-compute-{i}")
        with no_sync(acc, step_model):
            clock.start()
            slowdown.begin()
            if cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with (autocast or acc.autocast)():
                loss = step_model(batches[i % len(batches)])
            loss.backward()
            acc.step_boundary()
            slowdown.end()
            elapsed = clock.stop_ms()
        optimizer.zero_grad(set_to_none=True)
        if i:
            times.append(elapsed)
    return times


def compute_fields(times: Sequence[float]) -> dict[str, Any]:
    """The ``throughput`` event's compute fields for the step times ``times`` (ms)."""
    if not times:
        return {"compute_ms": None, "compute_ms_p90": None, "compute_steps": 0}
    return {
        "compute_ms": round(percentile(times, 50), 4),
        "compute_ms_p90": round(percentile(times, 90), 4),
        "compute_steps": len(times),
    }
