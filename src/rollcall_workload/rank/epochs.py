"""The timed epochs: every rank starts each together, times it, and proves its replica after it.

Each epoch starts at a barrier of all ranks, runs ``--steps-per-epoch`` steps between two device
synchronisations and says ``epoch_time``: its seconds, steps, samples, the last step's loss and the digest of
the replica's parameters (:func:`~rollcall_workload.rank.proofs.parameter_digest`, which every replica must
share; its time is kept out of the timed seconds). Rank 0 prints a line for a reader of the log.
``ROLLCALL_CORRUPT_RANK`` flips one bit of its rank's replica after the first timed step.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from rollcall_workload import faults
from rollcall_workload.contract import RollcallLog
from rollcall_workload.rank.proofs import parameter_digest
from rollcall_workload.rank.samples import DeviceSampler
from rollcall_workload.rank.steps import Steps
from rollcall_workload.rank.timing import ComputeTimer


@dataclass
class Epochs:
    """The timed epochs of one rank, and what they measured once :meth:`run` is through."""

    steps: Steps
    args: argparse.Namespace
    log: RollcallLog
    rank: int
    timer: ComputeTimer | None = None  # one rank alone times its compute within them
    sampler: DeviceSampler | None = None
    corrupt_replica: bool = False  # ``ROLLCALL_CORRUPT_RANK`` names this rank
    #: The epochs' seconds, summed.
    total_seconds: float = 0.0
    #: The seconds the digests took, outside the epochs' own.
    digest_s: float = 0.0
    #: From the first epoch's start to the last one's end, the digests left out.
    timed_s: float = 0.0

    def run(self) -> Iterator[tuple[int, float]]:
        """Each epoch in turn; yields its number and its last step's loss once it said ``epoch_time``.

        What the caller does between two epochs counts in :attr:`timed_s`.
        """
        args, steps, acc, watchdog = self.args, self.steps, self.steps.acc, self.steps.watchdog
        timed_started = time.perf_counter()
        for epoch in range(1, args.epochs + 1):
            watchdog.beat(f"epoch {epoch} barrier")
            acc.barrier(f"rollcall-epoch-{epoch}")  # all ranks start the epoch together
            acc.synchronize()
            started = time.perf_counter()
            label = f"epoch {epoch}"
            if epoch == 1 and self.corrupt_replica:  # one bit flips after the first timed step
                loss = steps.train(1, label, 1, self.timer, self.sampler)
                faults.flip_replica_bit(steps.training, self.rank)
                if args.steps_per_epoch > 1:
                    loss = steps.train(args.steps_per_epoch - 1, label, 2, self.timer, self.sampler)
            else:
                loss = steps.train(args.steps_per_epoch, label, 1, self.timer, self.sampler)
            acc.synchronize()
            seconds = time.perf_counter() - started
            watchdog.beat(f"epoch {epoch} end")
            watchdog.step_time(seconds / args.steps_per_epoch)
            self.total_seconds += seconds
            loss_value = float(loss.detach().float().cpu()) if loss is not None else math.nan
            self._say(epoch, seconds, loss_value)
            yield epoch, loss_value
        self.timed_s = time.perf_counter() - timed_started - self.digest_s

    def _say(self, epoch: int, seconds: float, loss: float) -> None:
        """``epoch_time`` with the replica's digest (timed apart), and rank 0's line."""
        digest_started = time.perf_counter()
        digest = parameter_digest(self.steps.training.model)
        self.digest_s += time.perf_counter() - digest_started
        self.log.emit(
            "epoch_time",
            epoch=epoch,
            seconds=round(seconds, 6),
            steps=self.args.steps_per_epoch,
            samples=self.args.steps_per_epoch * self.args.batch_size,
            loss=round(loss, 4),
            param_digest=digest,
        )
        if self.rank == 0:
            print(f"rollcall: epoch {epoch}/{self.args.epochs} {seconds:.3f}s loss {loss:.4f}", flush=True)
