"""The timed training: this rank's training steps, one after another, each held to the watchdog's bound.

:class:`Steps` holds what a step needs (the model, its optimizer, the batch pool, the step's autocast, the
slowdown ``ROLLCALL_SLOW_RANK`` asks of this rank) and runs them: :meth:`Steps.train` the forward, the
backward and the optimizer's step of ``count`` steps, each beating the watchdog first; with a clock it times
each step's compute (one rank alone), with a sampler it reads the GPU while the step's work is queued.
:meth:`Steps.every_rank` is the ranks' agreement on one flag (the warm-up's). Warm-up, the timed epochs
and the compute phase all draw their steps from here, so the batches go round in one order.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from rollcall_workload.model import batch_pool
from rollcall_workload.rank.dist import Accelerator, DistEnv
from rollcall_workload.rank.samples import DeviceSampler
from rollcall_workload.rank.timing import ComputeTimer, Slowdown
from rollcall_workload.rank.training import Training
from rollcall_workload.rank.watchdog import Watchdog


@dataclass
class Steps:
    """A rank's training steps: what each needs, and the count of batches drawn so far."""

    training: Training
    acc: Accelerator
    watchdog: Watchdog
    batches: list[dict[str, Any]]
    slowdown: Slowdown
    world_size: int
    drawn: Iterator[int] = field(default_factory=itertools.count)

    @classmethod
    def of(
        cls,
        training: Training,
        args: argparse.Namespace,
        env: DistEnv,
        acc: Accelerator,
        watchdog: Watchdog,
        *,
        slow: float = 1.0,
    ) -> Steps:
        """The steps of ``training``: this rank's batch pool made on the device, its slowdown ``slow``."""
        batches = batch_pool(args, env.rank, training.shape.vocab, acc.device)
        return cls(training, acc, watchdog, batches, Slowdown(acc, slow), env.world_size)

    @property
    def autocast(self) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        """The step's autocast: the device's under fp32 parameters, none with bf16 weights."""
        return self.acc.autocast if self.training.autocast else contextlib.nullcontext

    def train(
        self,
        count: int,
        label: str,
        first: int,
        clock: ComputeTimer | None = None,
        sampler: DeviceSampler | None = None,
    ) -> torch.Tensor | None:
        """Run ``count`` steps, the watchdog told each as ``<label> step <n>`` from ``first``; the last loss.

        ``clock`` times each step's forward and backward (its slowdown counted as compute); ``sampler`` reads
        the GPU once each step's work is queued.
        """
        import torch

        training, acc, autocast = self.training, self.acc, self.autocast
        loss = None
        for i in range(count):
            self.watchdog.beat(f"{label} step {first + i}")
            self.slowdown.begin()
            if clock is not None:
                clock.start()
            if training.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with autocast():
                loss = training.step_model(self.batches[next(self.drawn) % len(self.batches)])
            loss.backward()
            if clock is not None:
                self.slowdown.end()  # its extra work is compute, as in measure_compute
                clock.stop()
            acc.optimizer_step(training.optimizer)
            training.optimizer.zero_grad(set_to_none=True)
            acc.step_boundary()
            if sampler is not None:  # the step's work queued: the GPU is busy with it
                sampler.tick()
            if clock is None:
                self.slowdown.end()
            self.watchdog.first_step_done()
        return loss

    def every_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank (a MIN all-reduce; one rank alone: its own)."""
        if self.world_size == 1:
            return flag
        import torch
        import torch.distributed as dist

        self.watchdog.beat("warm-up agreement")
        value = torch.tensor([int(flag)], device=self.acc.device)
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        return bool(value.item())
