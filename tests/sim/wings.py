"""The backends' own looks at a simulated fleet, each second: what a Kubernetes or Slurm wing sees and decides.

A fleet runs under one wing (:attr:`tests.sim.fleet.Plan.wing`):

- ``local``: nothing but the nodes' own lines (the local backend, and what every backend shares);
- ``kubernetes``: each node's pod is scheduled at the start and pulls its image until its node starts (its
  containers start then); the wing tells the collector the nodes whose pod has started no container of
  rollcall's (:func:`rollcall.backends.kubernetes.waits.on_the_way`, as the Job's wait does), and feeds each
  node's ``Ready`` to the real :class:`~rollcall.backends.kubernetes.holds.Holds` with when the suite last
  read a line of its pod; a pod whose node was lost so past its bound ends the run as disrupted
  (:func:`rollcall.backends.kubernetes.pod_state.disruption`);
- ``slurm``: the roll call's step begins at the start, with every node up (the batch script's lines), and
  each node's task begins at its start, after pyxis imported its image: the node's output is ``pyxis:``'s
  line until then; the real :class:`~rollcall.backends.slurm.arrivals.Arrivals` reads the batch log and
  whether each node's output as the suite read it holds a line of its task's own
  (:func:`~rollcall.backends.slurm.arrivals.task_began`), tells the collector the nodes on their way, and a
  node on its way past the start bound I ends the run, named (:meth:`Arrivals.overdue`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rollcall.backends import JobState, JobStatus
from rollcall.backends.kubernetes.holds import Holds
from rollcall.backends.kubernetes.manifests import CONTAINER, MONITOR_CONTAINER
from rollcall.backends.kubernetes.pod_state import disruption
from rollcall.backends.kubernetes.views import INDEX_LABEL
from rollcall.backends.kubernetes.waits import on_the_way
from rollcall.backends.slurm.arrivals import STEP_BEGINS, Arrivals, start_bound_s, task_began
from rollcall.jobspec import JobSpec
from rollcall.ranklog import RollCall

if TYPE_CHECKING:
    from tests.sim.fleet import Plan

#: The image each Slurm node imports (``--container-image``), and what pyxis says meanwhile.
IMAGE = "registry.example/rollcall:sim"
PYXIS = f"pyxis: importing docker image: {IMAGE}\n"
#: The Kubernetes node condition's reasons, by ``Ready``'s status.
REASONS = {"False": "KubeletNotReady", "Unknown": "NodeStatusUnknown"}


class Wing(Protocol):
    """A backend's own look, each second: a status that ends the run, or None."""

    def look(self, t: float) -> JobStatus | None:
        """One look at ``t`` (the suite's clock; every line read by then is read)."""


class Local:
    """The local backend's: nothing of its own before the job ends."""

    def look(self, t: float) -> JobStatus | None:
        return None


@dataclass
class Kubernetes:
    """Each node's pod and its ``Ready`` (see the module docstring).

    ``heard(node)``: when the suite last read a line of the node's pod (None: never). ``lost``: the node whose
    ``Ready`` turned for good, when, and to what (the ``ready_lost`` fault), once the simulation knows it.

    Each look feeds :class:`Holds` the pods of the nodes whose ``Ready`` is not True or still held: every other
    pod is past creating on a Ready node, where Holds has nothing to time and no disruption can be found (the
    Job's wait, which feeds it all of them, works each pod's out once per version of it and its node too).
    """

    plan: Plan
    roll: RollCall
    heard: Callable[[int], float | None]
    lost: tuple[int, float, str] | None = None
    holds: Holds = field(init=False)
    _starts: list[float] = field(init=False)
    _way: tuple[int, list[int]] = (-1, [])

    def __post_init__(self) -> None:
        self.holds = Holds(None, "sim")  # type: ignore[arg-type]  # no API: pods past creating are never read
        self._starts = sorted(self.plan.node_start)

    def ready(self, t: float) -> dict[int, str]:
        """Each node whose ``Ready`` is not True at ``t``, and what it is: a flap's, or its loss's."""
        down = {n: state for n, at, seconds, state in self.plan.flaps if at <= t < at + seconds}
        if self.lost is not None and t >= self.lost[1]:
            down[self.lost[0]] = self.lost[2]
        return down

    def node(self, n: int, status: str) -> dict[str, Any]:
        """Node ``n`` as the API returns it, its ``Ready`` ``status``."""
        ready = {"type": "Ready", "status": status, "reason": REASONS.get(status, "KubeletReady")}
        return {"metadata": {"name": f"n{n}"}, "spec": {}, "status": {"conditions": [ready]}}

    def pod(self, n: int, t: float) -> dict[str, Any]:
        """Node ``n``'s pod at ``t``: scheduled, its sandbox made, pulling its image until its node starts."""
        started = t >= self.plan.node_start[n]
        state = {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}
        return {
            "metadata": {"name": f"sim-{n}", "labels": {INDEX_LABEL: str(n)}},
            "spec": {"nodeName": f"n{n}"},
            "status": {
                "phase": "Running" if started else "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "PodReadyToStartContainers", "status": "True"},
                ],
                "initContainerStatuses": [{"name": MONITOR_CONTAINER, "started": started, "state": state}],
                "containerStatuses": [{"name": CONTAINER, "started": started, "state": state}],
            },
        }

    def look(self, t: float) -> JobStatus | None:
        arrived = bisect.bisect_right(self._starts, t)
        if arrived != self._way[0]:  # a pod started a container since: the nodes on their way, as the Job's
            pods = [self.pod(n, t) for n in range(self.plan.nodes)]
            self._way = (arrived, on_the_way(pods, self.plan.nodes))
        self.roll.on_the_way(self._way[1])
        down = self.ready(t)
        looked = sorted({*down, *(int(name[1:]) for name in self.holds.ready.holdings())})
        pods = [self.pod(n, t) for n in looked]
        objects = {f"n{n}": self.node(n, down.get(n, "True")) for n in looked}

        def heard(pod: str) -> float | None:
            return self.heard(int(pod.rsplit("-", 1)[1]))

        self.holds.look(pods, objects.get, heard, t)
        for n, pod in zip(looked, pods, strict=True):
            found = disruption(pod, objects[f"n{n}"], ready=self.holds.node(f"n{n}"))
            if found is not None:
                return JobStatus.disrupted(found)
        return None


@dataclass
class Slurm:
    """The batch script's lines and each node's way into the roll call's step (see the module docstring).

    The simulation hands it each line the suite reads (:meth:`read`), as the node's follower notes the first
    64 KiB of its output.
    """

    plan: Plan
    spec: JobSpec
    roll: RollCall
    arrivals: Arrivals = field(init=False)
    #: The nodes it named late, once it ended the run for them.
    late: tuple[int, ...] = ()
    _heads: dict[int, bytes] = field(default_factory=dict)
    _began: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.arrivals = Arrivals(self.plan.nodes, start_bound_s(self.spec), IMAGE)

    @property
    def hosts(self) -> list[str]:
        return [f"n{n}" for n in range(self.plan.nodes)]

    def batch_log(self) -> str:
        """The batch script's output: every node up, then the roll call's step begins."""
        up = "".join(f"rollcall: node n{n} (index {n}) is up\n" for n in range(self.plan.nodes))
        return f"{up}{STEP_BEGINS}\n"

    def read(self, node: int, line: bytes) -> None:
        """A line of the node's output, as the suite read it: whether its task has begun (the follower's)."""
        if node in self._began:
            return
        head = self._heads.get(node, b"") + line
        self._heads[node] = head
        if task_began(head) or len(head) >= 1 << 16:
            self._began.add(node)

    def look(self, t: float) -> JobStatus | None:
        arrivals = self.arrivals
        if arrivals.step_since is None:
            arrivals.look(self.batch_log(), (), t)
        arrivals.look("", self._began, t)
        self.roll.on_the_way(arrivals.on_the_way())
        late = arrivals.overdue(t, self.hosts)
        if late is None:
            return None
        self.late = late.nodes
        return JobStatus(JobState.FAILED, f"{late.line()}; slurm job sim is cancelled")


__all__ = ["IMAGE", "PYXIS", "Kubernetes", "Local", "Slurm", "Wing"]
