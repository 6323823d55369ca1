"""Compute and throughput: the steps' compute timed without communication, then the ``throughput`` event.

Compute time comes from the timed epochs' own steps where one rank trains alone (its
:class:`~rollcall_workload.rank.timing.ComputeTimer`), else from ``--compute-steps`` steps of their own
(:func:`~rollcall_workload.rank.timing.measure_compute`). ``throughput`` says the samples per second over
the timed epochs, the model FLOPs behind them and their share of the device's peak (MFU, where the peak is
known), the run's settings, and where the start-up, the compile, warm-up and the epochs spent their time.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from rollcall_workload.contract import RollcallLog
from rollcall_workload.model import mlm_predictions
from rollcall_workload.rank.compile_cache import _inductor_counters, compile_cache_fields
from rollcall_workload.rank.epochs import Epochs
from rollcall_workload.rank.steps import Steps
from rollcall_workload.rank.timing import ComputeTimer, compute_fields, measure_compute
from rollcall_workload.rank.warmup import WarmUp
from rollcall_workload.shape import flops_per_sample, model_flops_utilization, peak_flops


def compute_times(steps: Steps, args: argparse.Namespace, timer: ComputeTimer | None) -> list[float]:
    """Milliseconds of each compute step: ``timer``'s of the epochs, else ``--compute-steps`` steps' own."""
    if timer is not None:
        return timer.times_ms(args.compute_steps)
    training = steps.training
    return measure_compute(
        steps.acc,
        training.step_model,
        training.optimizer,
        steps.batches,
        steps=args.compute_steps,
        slowdown=steps.slowdown,
        autocast=steps.autocast,
        cudagraphs=training.cudagraphs,
        watchdog=steps.watchdog,
    )


@dataclass(frozen=True)
class RunTimes:
    """Where the rank's time went before the bandwidth phase, as ``throughput`` says it."""

    startup_s: float
    warm: WarmUp
    epochs: Epochs
    compute_ms: list[float]


def report_throughput(
    log: RollcallLog, args: argparse.Namespace, steps: Steps, model_label: str, times: RunTimes
) -> None:
    """Say ``throughput`` (see the module)."""
    shape, precision, acc = steps.training.shape, steps.training.precision, steps.acc
    samples_per_sec = args.epochs * args.steps_per_epoch * args.batch_size / times.epochs.total_seconds
    mlm_tokens = mlm_predictions(args.seq_len) if args.mlm_head == "masked" else None
    fps = flops_per_sample(shape, args.seq_len, mlm_tokens)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (peak_flops(acc.name) if acc.bf16 else None)
    warm = times.warm
    log.emit(
        "throughput",
        samples_per_sec=round(samples_per_sec, 3),
        tflops=round(fps * samples_per_sec / 1e12, 4),
        mfu=_round(model_flops_utilization(fps, samples_per_sec, peak), 4),
        flops_per_sample=fps,
        model=model_label,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        mlm_head=args.mlm_head,
        compiled=bool(args.compile),
        compile_mode=args.compile_mode if args.compile else None,
        compile_scope=args.compile_scope if args.compile else None,
        impl=args.impl,
        precision=precision,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        startup_s=round(times.startup_s, 3),
        compile_s=round(warm.compile_s, 3),
        # without warm-up the first timed step compiled: the counters after the epochs tell
        **(warm.compile_cache or compile_cache_fields(bool(args.compile), _inductor_counters())),
        warmup_s=round(warm.warmup_s, 3),
        warmup_steps=warm.steps,
        timed_s=round(times.epochs.timed_s, 3),
        digest_s=round(times.epochs.digest_s, 3),
        **compute_fields(times.compute_ms),
    )


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
