"""Each node's way into the roll call's step, as the Slurm wing sees it from outside the step.

Slurm shows the roll call's step RUNNING on every node from its launch, but a node's task may begin long
after: with ``--container-image``, pyxis imports the image inside the step (enroot, in slurmstepd, before the
task runs: minutes for an image of gigabytes, each node its own import), and Slurm's task prolog runs there
too. ``squeue --steps``, ``sacct`` and ``scontrol show step`` say RUNNING throughout; pyxis says ``importing
docker image`` only where the step has a single task, and nothing of the node's own monitor (which runs
inside the container) can be heard until the import ends. So the batch script says, outside any container:

- each node's first step prints :data:`UP` once it has read the shared token (:func:`up`);
- the script prints :data:`STEP_BEGINS` right before it starts the roll call's step (:func:`step_began`);
- a node's task has begun at the first line of its output file that is neither Slurm's nor pyxis's own
  (:func:`task_began`): its monitor's first line, where the import ended.

A node whose task has not begun is on its way (:meth:`Arrivals.on_the_way`, what the backend tells the
collector): nothing of it can be heard yet and no bound of the roll call holds it. The wing's own start
bound does (:func:`start_bound_s`): its task must begin within I of the step's start, or the run fails
naming the node and what it waited for (:meth:`Arrivals.overdue`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rollcall.jobspec import JobSpec

#: What each node's first step prints once it has read the shared token: its Slurm name and node index.
UP = re.compile(r"^rollcall: node (?P<node>\S+) \(index (?P<index>\d+)\) is up$", re.M)
#: What the batch script prints right before it starts the roll call's step.
STEP_BEGINS = "rollcall: the roll call's step begins"
#: The share of the job timeout a node's task may take to begin (an image import), at least the start skew.
START_SHARE = 0.5
#: Lines of a node's output that Slurm and pyxis write themselves, before or instead of the task's own.
_NOT_THE_TASKS = (b"pyxis:", b"slurmstepd:", b"srun:")


def start_bound_s(spec: JobSpec) -> float:
    """I: how long after the roll call's step begins a node's task may begin: max(S, job timeout / 2).

    An image import may take half the job's time; the other half is the roll call's. Never less than the
    start skew S, which bounds a node once it is heard.
    """
    return max(spec.start_skew_s, spec.job_timeout_s * START_SHARE)


def up(batch_log: str) -> set[int]:
    """The node indexes whose first step said they are up (:data:`UP`)."""
    return {int(m["index"]) for m in UP.finditer(batch_log)}


def step_began(batch_log: str) -> bool:
    """Whether the batch script has started the roll call's step (:data:`STEP_BEGINS`)."""
    return any(line.strip() == STEP_BEGINS for line in batch_log.splitlines())


def task_began(head: bytes) -> bool:
    """Whether a node's output so far holds a whole line of its task's own (not Slurm's nor pyxis's)."""
    lines = head.split(b"\n")[:-1]  # the last piece is a line not yet ended
    return any(line.strip() and not line.lstrip().startswith(_NOT_THE_TASKS) for line in lines)


@dataclass(frozen=True)
class Late:
    """The nodes whose task had not begun within the start bound.

    Attributes:
        nodes: their node indexes, in order; hosts: their Slurm names, where known (by index).
        bound_s: I, the start bound; waited_s: how long the step had run.
        image: the container image they were importing, if any.
    """

    nodes: tuple[int, ...]
    hosts: tuple[str, ...]
    bound_s: float
    waited_s: float
    image: str | None

    def line(self) -> str:
        """``node 1 (slurm node rc2) ... within 900s of the roll call's step (I = ...)``."""
        return (
            f"{_named(self.nodes, self.hosts)} did not begin {_theirs(self.nodes)} task within "
            f"{self.bound_s:g}s of the roll call's step (waited {self.waited_s:.0f}s): "
            f"{waiting_for(self.image)}; the start bound is max(--start-skew, --job-timeout / 2)"
        )


def waiting_for(image: str | None) -> str:
    """What a node whose task has not begun is waiting for, in words."""
    if image:
        return f"pyxis still importing image {image} (or Slurm's task prolog still running)"
    return "Slurm's task prolog or the node's monitor still starting"


def _theirs(nodes: Sequence[int]) -> str:
    return "its" if len(nodes) == 1 else "their"


def _named(nodes: Sequence[int], hosts: Sequence[str]) -> str:
    each = [f"{n} (slurm node {h})" if h else str(n) for n, h in zip(nodes, hosts, strict=True)]
    return f"node {each[0]}" if len(each) == 1 else f"nodes {', '.join(each)}"


@dataclass
class Arrivals:
    """What the wing has seen of each node's way into the roll call's step, look by look.

    Attributes:
        nodes: the job's node count; bound_s: I (:func:`start_bound_s`); image: ``--container-image``.
        up: the nodes whose first step said they are up; began: those whose task has begun.
        step_since: when the wing first saw the roll call's step begin (its clock), None before.
    """

    nodes: int
    bound_s: float
    image: str | None = None
    up: set[int] = field(default_factory=set)
    began: set[int] = field(default_factory=set)
    step_since: float | None = None

    def look(self, batch_log: str, began: Iterable[int], now: float) -> None:
        """One look: the batch log as it reads now, the nodes whose task has begun, at ``now``."""
        self.up |= up(batch_log)
        self.began |= set(began)
        if self.step_since is None and step_began(batch_log):
            self.step_since = now

    def on_the_way(self) -> list[int]:
        """The nodes whose task has not begun, in order: nothing of them can be heard yet."""
        return [n for n in range(self.nodes) if n not in self.began]

    def overdue(self, now: float, hosts: Sequence[str] = ()) -> Late | None:
        """The nodes whose task has not begun within I of the step's start; None while none is late."""
        late = tuple(self.on_the_way())
        if not late or self.step_since is None or now - self.step_since < self.bound_s:
            return None
        names = tuple(hosts[n] if n < len(hosts) else "" for n in late)
        return Late(late, names, self.bound_s, now - self.step_since, self.image)

    def where(self, hosts: Sequence[str] = ()) -> str:
        """Where the nodes on their way stood, for a run that ended meanwhile; empty when none was."""
        late = self.on_the_way()
        if not late:
            return ""
        names = [hosts[n] if n < len(hosts) else "" for n in late]
        if self.step_since is not None:
            return f"{_named(late, names)} had not begun {_theirs(late)} task: {waiting_for(self.image)}"
        before = [n for n in late if n not in self.up]
        if not before:
            return f"{_named(late, names)} had run the job's first step; the roll call's step had not begun"
        return (
            f"{_named(before, [names[late.index(n)] for n in before])} had not run the job's first step "
            "(Slurm's prolog, or the shared-storage check)"
        )


__all__ = [
    "START_SHARE",
    "STEP_BEGINS",
    "UP",
    "Arrivals",
    "Late",
    "start_bound_s",
    "step_began",
    "task_began",
    "up",
    "waiting_for",
]
