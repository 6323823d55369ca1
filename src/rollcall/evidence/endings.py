"""How a pod or a rank's process ended where no rank said why, as the runtime or infrastructure recorded it.

- A :class:`Termination`: a container or a torchrun worker that ended badly (OOM-killed, killed by a signal,
  a non-zero exit), as the runtime recorded it: a pod's container status, torchrun's record of a worker.
  One killed from outside (:attr:`Termination.silent_kill`) leaves no error line of its own.
- A :class:`Disruption`: the infrastructure took a pod away (evicted, preempted, its node deleted, lost,
  drained or reclaimed), or someone else deleted an object of the run (:data:`DELETED_UNDER_RUN`).

The backends make them (:attr:`rollcall.backends.JobStatus.terminations`,
:attr:`rollcall.backends.JobStatus.disruption`); :mod:`.rootcause` orders them among the ranks' errors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

#: What can run a node's torchrun agent (:attr:`Termination.unit`): a pod, or a node's own processes.
UNITS: tuple[str, ...] = ("pod", "node")

#: Signals the launcher itself sends its workers once one has failed: their ends are echoes.
LAUNCHER_SIGNALS = frozenset({"SIGTERM", "SIGINT"})


@dataclass(frozen=True)
class Termination:
    """A container or a worker that ended badly, as its runtime recorded it.

    A pod's container status gives one per container (``rank`` None); torchrun's records one per worker
    (:mod:`rollcall.torchrun`; ``exit_code`` negative for a signal, ``reason`` its name; ``message`` the
    exception the worker recorded in its error file, if it did). ``answered`` marks a worker that had
    answered the whole roll call before it ended so (set by the judge). ``unit`` is what ran the agent, one
    of :data:`UNITS`: a ``pod`` (``pod`` its name), or a ``node`` whose agent and workers are processes
    (local, Slurm: ``pod`` is then the node's log, ``node-1``), and the description says so.
    """

    pod: str
    node: int | None
    host: str | None
    reason: str
    exit_code: int | None = None
    time: float | None = None
    rank: int | None = None
    message: str | None = None
    answered: bool = False
    unit: str = "pod"

    @property
    def signal(self) -> str | None:
        """The signal that ended it (``SIGKILL``), when one did."""
        return self.reason if self.exit_code is not None and self.exit_code < 0 else None

    @property
    def silent_kill(self) -> bool:
        """Killed from outside (OOM killer, a signal): such a process leaves no error line of its own."""
        if self.reason == "OOMKilled":
            return True
        if self.exit_code is None:
            return False
        if self.exit_code < 0:
            return self.reason not in LAUNCHER_SIGNALS
        return self.exit_code > 128

    def describe(self) -> str:
        """``pod p (index 1) on node n ended OOMKilled (exit code 137) at ...``, or the worker's rank.

        A worker that had answered the roll call: ``rank 0 (node 0, pod p) exited with code 1 after
        answering the roll call`` (``was killed by SIGKILL`` for a signal).
        """
        if self.unit == "node":
            return self._describe_process()
        if self.answered and self.rank is not None:
            how = f"was killed by {self.signal}" if self.signal else f"exited with code {self.exit_code}"
            node = f"node {self.node}, " if self.node is not None else ""
            return f"rank {self.rank} ({node}pod {self.pod}) {how} after answering the roll call"
        index = f" (index {self.node})" if self.node is not None else ""
        host = f" on node {self.host}" if self.host else ""
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        how = f"{self.reason}{code}{_at(self.time)}"
        if self.rank is not None:
            return f"rank {self.rank} (pod {self.pod}{index}{host}) was ended by {how}"
        return f"pod {self.pod}{index}{host} ended {how}"

    def _describe_process(self) -> str:
        """A node's processes: ``rank 3's process (node 1, log node-1, host h) was ended by SIGKILL``."""
        where = ", ".join(
            w
            for w in (
                f"node {self.node}" if self.node is not None else "",
                f"log {self.pod}",
                f"host {self.host}" if self.host else "",
            )
            if w
        )
        if self.answered and self.rank is not None:
            how = f"was killed by {self.signal}" if self.signal else f"exited with code {self.exit_code}"
            return f"rank {self.rank}'s process ({where}) {how} after answering the roll call"
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        how = f"{self.reason}{code}{_at(self.time)}"
        if self.rank is not None:
            return f"rank {self.rank}'s process ({where}) was ended by {how}"
        return f"the torchrun agent ({where}) ended {how}"

    def as_dict(self) -> dict[str, Any]:
        """The termination, JSON-ready."""
        return {
            "pod": self.pod,
            "node": self.node,
            "host": self.host,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "time": self.time,
            "rank": self.rank,
            "message": self.message,
            "answered": self.answered,
            "unit": self.unit,
        }


#: A :class:`Disruption`'s reason when someone else deleted the run's namespace, Job, Service or a pod.
DELETED_UNDER_RUN = "DeletedUnderRun"


@dataclass(frozen=True)
class Disruption:
    """The infrastructure took a pod away: evicted, preempted, its node deleted, lost, drained or reclaimed.

    Attributes:
        pod: the pod's name.
        node: its completion index (the node rank), None when unknown.
        host: the Kubernetes node it ran on.
        reason: what did it, in one word: the ``DisruptionTarget`` condition's reason
            (``EvictionByEvictionAPI``, ``PreemptionByScheduler``, ``DeletionByTaintManager``,
            ``DeletionByPodGC``, ``TerminationByKubelet``), else ``NodeDeleted``, ``NodeLost``,
            ``NodeDrained`` (deleted off a cordoned node) or ``NodeGoingAway`` (off a node tainted as going
            away).
        message: what a person reads: the condition's message, the node's state, and what the node's taints
            say of why it is going away (a spot interruption, Karpenter, ...).
        time: when (epoch seconds), where the API recorded it.
    """

    pod: str
    node: int | None
    host: str | None
    reason: str
    message: str = ""
    time: float | None = None
    #: What was taken away: a ``pod``, or (:data:`DELETED_UNDER_RUN`) the run's ``namespace``, ``Job`` or
    #: ``Service`` that someone else deleted; ``pod`` then holds that object's name.
    kind: str = "pod"

    @property
    def deleted_under_run(self) -> bool:
        """Someone else deleted an object of the run while it ran (not the infrastructure's doing)."""
        return self.reason == DELETED_UNDER_RUN

    @property
    def category(self) -> str:
        """What the run's failure is called: ``deleted under the run`` or ``infrastructure disruption``."""
        return "deleted under the run" if self.deleted_under_run else "infrastructure disruption"

    def describe(self) -> str:
        """``pod p (index 1) on node n was disrupted (EvictionByEvictionAPI): message``."""
        index = f" (index {self.node})" if self.node is not None else ""
        host = f" on node {self.host}" if self.host else ""
        verb = "was deleted under the run" if self.deleted_under_run else "was disrupted"
        return f"{self.kind} {self.pod}{index}{host} {verb} ({self.reason})" + (
            f": {self.message}" if self.message else ""
        )

    def as_dict(self) -> dict[str, Any]:
        """The disruption, JSON-ready."""
        return asdict(self)


def clock(time: float | None) -> str:
    """``09:00:01.234 UTC``: an epoch time as the failure messages show it; empty for None."""
    if time is None:
        return ""
    return datetime.fromtimestamp(time, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def _at(time: float | None) -> str:
    return f" at {clock(time)}" if time is not None else ""
