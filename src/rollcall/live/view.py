"""The live roll call: how far every rank has got while the job runs, in one line.

:meth:`LiveRollCall.of` reads a consistent view of the roll call as the logs arrive
(:meth:`rollcall.collect.Collector.view`): ranks started, epochs done (fewest and most over the ranks that
started), ranks that reported throughput and completion, out of the world, and the slowest rank so far (the
lowest throughput once any rank reported one, else the longest epoch). The runner hands it to a
:class:`LiveView` about every second while the job runs, and once more when it ended; the pytest plugin's
view writes it through the terminal reporter (one line rewritten on a terminal, a plain line every
``--progress-every`` seconds otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rollcall.ranklog import RollCall


@dataclass(frozen=True)
class Slowest:
    """The slowest rank so far, and by what measure."""

    rank: int
    node: int | None
    value: float
    unit: str

    def __str__(self) -> str:
        where = f" on node {self.node}" if self.node is not None else ""
        spec = ".1f" if self.unit == "samples/s" else ".2f"
        return f"rank {self.rank}{where} ({self.value:{spec}} {self.unit})"


@dataclass(frozen=True)
class LiveRollCall:
    """How far the ranks of one job have got."""

    world_size: int
    started: int = 0
    epochs_min: int | None = None
    epochs_max: int | None = None
    throughput: int = 0
    complete: int = 0
    slowest: Slowest | None = None

    @classmethod
    def of(cls, roll: RollCall, world_size: int) -> LiveRollCall:
        """The state of ``roll``'s ranks inside the world (ranks outside it are the judge's to name)."""
        ranks = {r: rep for r, rep in roll.ranks.items() if 0 <= r < world_size}
        started = [rep for rep in ranks.values() if rep.start is not None or rep.epoch_times]
        epochs = [len(rep.epoch_times) for rep in started]
        with_tp = [rep for rep in ranks.values() if rep.throughput is not None]
        slowest = None
        if with_tp:
            low = min(with_tp, key=lambda rep: (rep.throughput or 0.0, rep.rank))
            slowest = Slowest(low.rank, low.node_rank, low.throughput or 0.0, "samples/s")
        else:
            timed = [(rep.epoch_time, rep) for rep in ranks.values() if rep.epoch_time is not None]
            if timed:
                t, rep = max(timed, key=lambda x: (x[0] or 0.0, -x[1].rank))
                slowest = Slowest(rep.rank, rep.node_rank, t or 0.0, "s per epoch")
        return cls(
            world_size=world_size,
            started=len(started),
            epochs_min=min(epochs) if epochs else None,
            epochs_max=max(epochs) if epochs else None,
            throughput=len(with_tp),
            complete=sum(1 for rep in ranks.values() if rep.complete),
            slowest=slowest,
        )

    def line(self) -> str:
        """``roll call: 4/4 started, epochs done 1-2, throughput 2/4, complete 1/4; slowest so far: ...``."""
        w = self.world_size
        if self.epochs_min is None:
            epochs = "-"
        elif self.epochs_min == self.epochs_max:
            epochs = str(self.epochs_min)
        else:
            epochs = f"{self.epochs_min}-{self.epochs_max}"
        head = (
            f"roll call: {self.started}/{w} started, epochs done {epochs}, "
            f"throughput {self.throughput}/{w}, complete {self.complete}/{w}"
        )
        return f"{head}; slowest so far: {self.slowest}" if self.slowest else head


class LiveView(Protocol):
    """Where the live roll call goes while a job runs."""

    def update(self, live: LiveRollCall) -> None:
        """The roll call now (about every second while the job runs)."""

    def finish(self, live: LiveRollCall) -> None:
        """The roll call when the job has ended and every log was read."""
