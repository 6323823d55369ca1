"""Slurm's own words, read: job records and states, pending reasons, srun's errors, nodes and partitions.

Everything here is pure: it parses what ``scontrol show job|nodes|partition -o`` and srun print (one record
per line, ``Key=value``; stable across Slurm versions, unlike their JSON) and decides. :func:`discover`
chooses the nodes a job can use and says why each other node cannot, as the kubernetes discovery does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rollcall.backends import BackendError, DiscoveryError, JobState, Placement, unusable_nodes
from rollcall.jobspec import Accelerator

#: Job states in which the job is over, and how the suite reads each.
END_STATES: dict[str, JobState] = {
    "COMPLETED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "TIMEOUT": JobState.TIMED_OUT,
    "DEADLINE": JobState.TIMED_OUT,
    "CANCELLED": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "REVOKED": JobState.FAILED,
}
#: Reasons a job stays PENDING that waiting does not clear: the request itself, or an administrator's hold.
STUCK_REASONS = frozenset(
    {
        "ReqNodeNotAvail",
        "PartitionConfig",
        "PartitionDown",
        "PartitionInactive",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "JobHeldAdmin",
        "JobHeldUser",
        "DependencyNeverSatisfied",
        "NodeDown",
        "FrontEndDown",
        "ReservationDeleted",
    }
)
#: Per-job limits (``AssocMax...PerJob``, ``QOSMax...PerJob``): the job asks for more than it may ever get.
_STUCK_LIMIT = re.compile(r"^(Assoc|QOS)Max\w*PerJob\w*$")
#: srun's own account of a task that ended badly: ``srun: error: rc2: task 1: Exited with exit code 3``.
SRUN_ERROR = re.compile(r"^srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[\d,-]+): (?P<what>.+)$", re.M)
#: Node states that keep a node from running the job, as ``scontrol show node`` spells them.
BAD_NODE_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "MAINT",
        "NOT_RESPONDING",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "FUTURE",
        "UNKNOWN",
        "INVALID_REG",
    }
)


#: Node states in which a node no longer runs the job it has, the most decided first: DOWN (slurmctld's own
#: decision, after ``SlurmdTimeout`` without an answer, or an administrator's), a reboot under way, powered
#: down, and NOT_RESPONDING (a ping missed: slurmctld sets the node DOWN once it has not answered for
#: ``SlurmdTimeout``). DRAIN, DRAINING, FAILING, MAINT and REBOOT_REQUESTED let a running job finish.
LOST_STATES = ("DOWN", "REBOOT_ISSUED", "POWERING_DOWN", "POWERED_DOWN", "POWER_DOWN", "NOT_RESPONDING")
#: slurmctld's ``SlurmdTimeout`` where the cluster's configuration does not say (Slurm's own default).
SLURMD_TIMEOUT_S = 300.0
#: srun's word of a node that failed under a step: ``srun: error: Node failure on rc2``.
NODE_FAILURE = re.compile(r"^srun: error: Node failure on (?P<node>\S+)$", re.M)


class SlurmError(BackendError):
    """A Slurm command failed; the message has the command and what it said."""


_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_/:.]*)=")


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol show ... -o`` line (``Key=value Key2=value two``) as a mapping."""
    starts = list(_KEY.finditer(line.strip()))
    text = line.strip()
    out: dict[str, str] = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        out[m.group(1)] = text[m.end() : end].strip()
    return out


@dataclass(frozen=True)
class JobInfo:
    """What ``scontrol show job -o`` says of a job."""

    job_id: str
    state: str
    reason: str
    nodes: str
    exit_code: str
    batch_host: str

    @classmethod
    def parse(cls, line: str) -> JobInfo:
        """From ``scontrol show job -o ID`` output."""
        r = parse_record(line)
        if "JobId" not in r or "JobState" not in r:
            raise SlurmError(f"not a job record: {line.strip()[:200]!r}")
        return cls(
            job_id=r["JobId"],
            state=r["JobState"].split("+")[0],
            reason=r.get("Reason", "None"),
            nodes="" if r.get("NodeList") in (None, "(null)") else r["NodeList"],
            exit_code=r.get("ExitCode", ""),
            batch_host=r.get("BatchHost", ""),
        )

    @property
    def stuck(self) -> bool:
        """PENDING for a reason that waiting does not clear (see :data:`STUCK_REASONS`)."""
        base = self.reason.split(",")[0]
        return self.state == "PENDING" and (base in STUCK_REASONS or bool(_STUCK_LIMIT.match(base)))

    @property
    def ended(self) -> JobState | None:
        """The suite's reading of an end state; None while the job is pending or running."""
        return END_STATES.get(self.state)


def srun_errors(text: str) -> list[str]:
    """The lines where srun says that ended badly, e.g. ``node rc2 (task 1): Exited with exit code 3``."""
    return [f"node {m['node']} (task {m['tasks']}): {m['what']}" for m in SRUN_ERROR.finditer(text)]


def failed_nodes(text: str) -> list[str]:
    """The Slurm nodes srun says failed under the step (:data:`NODE_FAILURE`), in order, each once."""
    return list(dict.fromkeys(m["node"] for m in NODE_FAILURE.finditer(text)))


def slurmd_timeout_s(config: str) -> float:
    """``SlurmdTimeout`` from ``scontrol show config`` (``SlurmdTimeout = 300 sec``), in seconds.

    Slurm's default where the text does not say, or says 0 (slurmctld then sets no node DOWN for silence).
    """
    found = re.search(r"^SlurmdTimeout\s*=\s*(\d+)\s*sec", config, re.M)
    seconds = float(found[1]) if found else 0.0
    return seconds or SLURMD_TIMEOUT_S


@dataclass(frozen=True)
class SlurmNode:
    """What discovery needs of one node."""

    name: str
    states: frozenset[str]
    cpus: int
    gpus: int
    partitions: frozenset[str]
    reason: str = ""
    state: str = ""

    @classmethod
    def parse(cls, line: str) -> SlurmNode:
        """From one line of ``scontrol show nodes -o``."""
        r = parse_record(line)
        states = frozenset(s for s in re.split(r"[+*]", r.get("State", "UNKNOWN")) if s)
        cpus = int(r["CPUTot"]) if r.get("CPUTot", "").isdigit() else 0
        reason = "" if r.get("Reason") in (None, "(null)") else r["Reason"]
        parts = frozenset(p for p in r.get("Partitions", "").split(",") if p and p != "(null)")
        gpus = gres_gpus(r.get("Gres", ""))
        return cls(r.get("NodeName", "?"), states, cpus, gpus, parts, reason, r.get("State", "UNKNOWN"))

    def problem(self) -> str | None:
        """Why the node cannot take the job, or None."""
        bad = sorted(self.states & BAD_NODE_STATES)
        if bad:
            return f"state {self.state}" + (f" ({self.reason})" if self.reason else "")
        return None

    def lost(self) -> str | None:
        """The most decided of its states in which it no longer runs the job it has (:data:`LOST_STATES`)."""
        return next((s for s in LOST_STATES if s in self.states), None)


def gres_gpus(gres: str) -> int:
    """GPUs in a GRES string: ``gpu:h100:8(S:0-1)`` gives 8, ``gpu:a100:4,gpu:v100:2`` gives 6."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres):
        parts = re.sub(r"\(.*\)$", "", item.strip()).split(":")
        if parts[0] != "gpu":
            continue
        total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


@dataclass(frozen=True)
class Partition:
    """One partition: its nodes' names are read from the nodes themselves."""

    name: str
    state: str
    default: bool

    @classmethod
    def parse(cls, line: str) -> Partition:
        """From one line of ``scontrol show partition -o``."""
        r = parse_record(line)
        return cls(r.get("PartitionName", "?"), r.get("State", "UNKNOWN"), r.get("Default") == "YES")


def discover(
    nodes: Sequence[SlurmNode],
    partitions: Sequence[Partition],
    *,
    want: int,
    accelerator: str = "auto",
    partition: str | None = None,
    procs_per_node: int | None = None,
) -> tuple[Placement, list[str], dict[str, str]]:
    """Choose the nodes of the partition that can run the job; raises :class:`DiscoveryError` if too few."""
    names = [p.name for p in partitions if p.default] if partition is None else partition.split(",")
    if not names:
        raise DiscoveryError("no partition given and the cluster has no default one; use --slurm-partition")
    known = {p.name: p for p in partitions}
    for name in names:
        if name not in known:
            raise DiscoveryError(f"partition {name!r} does not exist (have: {', '.join(sorted(known))})")
        if known[name].state != "UP":
            raise DiscoveryError(f"partition {name} is {known[name].state}: no job can start there")
    chosen = set(names)
    rejected: dict[str, str] = {}
    usable: list[SlurmNode] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.partitions & chosen:
            continue
        why = node.problem()
        if why:
            rejected[node.name] = why
        else:
            usable.append(node)
    accel: Accelerator
    if accelerator == "auto":
        if not any(n.gpus for n in usable):
            raise DiscoveryError(
                "--accelerator auto: no usable node has GPU GRES (use --accelerator cpu to train on CPUs)\n"
                + unusable_nodes(want, [], rejected | {n.name: "no gpu GRES" for n in usable}, None)
            )
        accel = "nvidia"
    else:
        accel = accelerator  # type: ignore[assignment]
    need = procs_per_node or 1
    if accel == "nvidia":
        if procs_per_node is None:
            offers = sorted((n.gpus for n in usable if n.gpus), reverse=True)
            need = offers[min(want, len(offers)) - 1] if offers else 1
        for node in [n for n in usable if n.gpus < need]:
            rejected[node.name] = f"only {node.gpus} gpu GRES, {need} needed"
            usable.remove(node)
    if len(usable) < want:
        raise DiscoveryError(unusable_nodes(want, [n.name for n in usable], rejected, accel))
    idle = sum(1 for n in usable if "IDLE" in n.states)
    offer = f"{need} GPU(s)" if accel == "nvidia" else f"{usable[0].cpus} CPU(s)"
    description = (
        f"{len(usable)} usable node(s) ({idle} idle) in partition {','.join(names)}; "
        f"each node's task gets {offer}; {need} rank(s) per node"
    )
    return Placement(accel, need, {}, None, description), [n.name for n in usable], rejected
