"""Backends run a :class:`~rollcall.jobspec.JobSpec` somewhere and stream every node's log to a collector.

Every backend meets :class:`Backend`: it discovers once what each node offers (:class:`Placement`), then
launches jobs; tests never care which one ran.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rollcall.collect import Collector
from rollcall.jobspec import Accelerator, JobSpec
from rollcall.rootcause import Disruption, Termination
from rollcall.waits import Waits

if TYPE_CHECKING:
    from rollcall.options import Options


class JobState(enum.Enum):
    """How a job ended, as the backend saw it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    #: The pods were never all scheduled within ``--capacity-timeout`` (no nodes, or no Kueue quota).
    NO_CAPACITY = "no_capacity"


@dataclass(frozen=True)
class EfaUse:
    """What each pod's NCCL log showed of EFA, when the job requested it.

    Attributes:
        fell_back: pods whose NCCL fell back to TCP sockets, with the line that says so.
        unproven: pods that never logged NCCL selecting EFA.
        required: whether an unproven pod fails the run (NCCL on cuda logs the selection).
        causes: per pod, what its log said was missing and the fix (:data:`rollcall.podlogs.NET_CLUES`).
    """

    fell_back: Mapping[str, str] = field(default_factory=dict)
    unproven: tuple[str, ...] = ()
    required: bool = False
    causes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """NCCL did not use EFA on some pod."""
        return bool(self.fell_back) or (self.required and bool(self.unproven))


@dataclass
class JobStatus:
    """The end of a job: its state and, unless it succeeded, why, naming the pod or node.

    ``efa`` is set when the job requested EFA: what the pods' logs showed of it. ``terminations`` are the
    containers that ended badly, as their runtime recorded them (where the backend can read that).
    ``disruption`` is set when the infrastructure took a pod away (evicted, preempted, its node deleted, lost,
    drained or reclaimed): the job failed, but no rank did. ``waits`` is what the job waited for before
    training (quota, nodes, image pulls), where known.
    """

    state: JobState
    reason: str = ""
    details: list[str] = field(default_factory=list)
    efa: EfaUse | None = None
    terminations: list[Termination] = field(default_factory=list)
    disruption: Disruption | None = None
    waits: Waits | None = None

    @classmethod
    def disrupted(cls, disruption: Disruption) -> JobStatus:
        """A job that failed because the infrastructure took ``disruption``'s pod away."""
        reason = f"infrastructure disruption: {disruption.describe()}"
        return cls(JobState.FAILED, reason, disruption=disruption)


@dataclass(frozen=True)
class Placement:
    """What discovery found the job can use on each node."""

    accelerator: Accelerator
    procs_per_node: int
    resources: dict[str, int] = field(default_factory=dict)
    instance_type: str | None = None
    description: str = ""


class Job(Protocol):
    """A launched job."""

    def wait(self, timeout_s: float) -> JobStatus:
        """Block until the job ends or ``timeout_s`` passes; fail fast on the first broken node."""
        ...

    def cleanup(self) -> None:
        """Remove everything the job created; safe to call twice; never raises for what is already gone."""
        ...


class Backend(Protocol):
    """Where jobs run."""

    name: str

    def discover(self, options: Options) -> Placement:
        """What each node offers the job (accelerator, ranks, requests); raises when too few are usable."""
        ...

    def launch(self, spec: JobSpec, collector: Collector) -> Job:
        """Create the job and start streaming each node's log into ``collector``."""
        ...
