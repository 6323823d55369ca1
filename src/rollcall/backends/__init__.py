"""Backends run a :class:`~rollcall.jobspec.JobSpec` somewhere and stream every node's log to a collector.

Every backend meets :class:`Backend`: it discovers once what each node offers (:class:`Placement`) for what
the session asks (:class:`PlacementRequest`, built of the options by :func:`rollcall.suite.placement_request`
alone), then launches jobs; tests never care which one ran. Each is created from its own section of the
options and the :class:`BackendSettings` every one shares. This module is the neutral contract: it imports no
wing (:mod:`rollcall.backends.local`, :mod:`rollcall.backends.kubernetes`, :mod:`rollcall.backends.slurm`),
and no wing imports another. A backend reports what it observed (:class:`JobStatus`: the job's end,
terminations, disruptions, what EFA did, what it waited for); :func:`rollcall.judge.judge` alone decides the
verdict.

Each wing is declared once, in :data:`WINGS`: its name, its backend class (a module path, loaded on first
use), the options section it is given, and how ``--backend auto`` finds it. What only some backends can do is
a capability, a :class:`typing.Protocol` their class meets or not (:class:`ChecksAtStart`,
:class:`RendersManifest`, :class:`SchedulesTheSuite`, :class:`MountsSharedCache`, :class:`MarksNodes`, beside
:class:`ConfirmsLater` of a job): the session asks for a capability, never for a backend's name or type. A
backend is its wing and one line of :data:`WINGS`.
"""

from __future__ import annotations

import enum
import importlib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rollcall.collect import Collector
from rollcall.evidence.endings import Disruption, Termination
from rollcall.jobspec import Accelerator, AcceleratorChoice, EfaChoice, JobSpec, Taint, Toleration


class BackendError(RuntimeError):
    """The backend could not do what was asked (a scheduler's command failed): the message says why."""


class DiscoveryError(BackendError):
    """The cluster cannot run the job as asked; the message lists what was found and why."""


class CleanupError(RuntimeError):
    """Clean-up failed, or left something of the run behind; the message names each object left.

    Attributes:
        left: what is still there (``namespace rollcall-x``, ``process 4242``, ``slurm job 17``).
    """

    def __init__(self, message: str, left: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.left = tuple(left)


class JobState(enum.Enum):
    """How a job ended, as the backend saw it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    #: The pods were never all scheduled within ``--capacity-timeout`` (no nodes, or no Kueue quota).
    NO_CAPACITY = "no_capacity"
    #: The suite ended the job early: the ``stop`` test of :meth:`Job.wait` gave a reason (a hang).
    STOPPED = "stopped"
    #: The suite itself was interrupted (Ctrl-C, SIGTERM) before the job ended, and ended it; set by the
    #: runner (:func:`rollcall.runner.run_once`), not by a backend's wait.
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class EfaUse:
    """What each pod's NCCL log showed of EFA, when the job requested it.

    Attributes:
        fell_back: pods whose NCCL fell back to TCP sockets, with the line that says so.
        unproven: pods that never logged NCCL selecting EFA.
        required: whether an unproven pod fails the run (NCCL on cuda logs the selection).
        causes: per pod, what its log said was missing and the fix (the kubernetes wing's EFA clues).
        reason: when :attr:`failed`, what went wrong, naming what was missing and the fix; else empty.
    """

    fell_back: Mapping[str, str] = field(default_factory=dict)
    unproven: tuple[str, ...] = ()
    required: bool = False
    causes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reason: str = ""

    @property
    def failed(self) -> bool:
        """NCCL did not use EFA on some pod."""
        return bool(self.fell_back) or (self.required and bool(self.unproven))


@dataclass(frozen=True)
class Pull:
    """One pod's wait from being scheduled to its first container starting: its image pulled, containers made.

    Attributes:
        node: the node (completion index) the pod runs; pod: its name; machine: the node it was bound to.
        image: the training container's image; seconds: how long it waited (so far, when not ``done``).
        done: whether a container of it has started (False: still pulling or creating when last seen).
    """

    node: int
    pod: str
    machine: str
    image: str
    seconds: float
    done: bool

    def line(self) -> str:
        """``node 1 still pulling image bert:cuda (pod p-1 on ip-10-0-1-7) after 340s: late, not hung``."""
        if self.done:
            return f"node {self.node} started {self.seconds:.0f}s after it was scheduled"
        where = f"pod {self.pod}" + (f" on {self.machine}" if self.machine else "")
        return (
            f"node {self.node} still pulling image {self.image or '(unknown)'} or creating its containers "
            f"({where}) after {self.seconds:.0f}s: late, not hung"
        )


@dataclass(frozen=True)
class Waits:
    """How long a run waited before its pods trained.

    Attributes:
        waited_for: what scheduling waited for (e.g. ``Karpenter NodePool trn``, ``quota (Kueue)``); empty
            when the nodes were there.
        scheduled_s: from the Job's creation until every pod was scheduled (None: they never were).
        image_pull_s: the longest time a pod took from being scheduled to its container starting (image
            pull and container creation); None when no pod started.
        pulls: each scheduled pod's own wait for its containers, by node (:class:`Pull`).
    """

    waited_for: str = ""
    scheduled_s: float | None = None
    image_pull_s: float | None = None
    pulls: tuple[Pull, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        return {
            "waited_for": self.waited_for,
            "scheduled_s": _round(self.scheduled_s),
            "image_pull_s": _round(self.image_pull_s),
            "pulls": [{**asdict(p), "seconds": _round(p.seconds)} for p in self.pulls],  # each Pull's fields
        }

    def pulling(self) -> list[Pull]:
        """The pods still pulling their image (or creating their containers) when last seen."""
        return [p for p in self.pulls if not p.done]

    def line(self) -> str:
        """One line for a report."""
        parts = []
        if self.scheduled_s is not None:
            waited = f" (waited for {self.waited_for})" if self.waited_for else ""
            parts.append(f"every pod scheduled after {self.scheduled_s:.0f}s{waited}")
        if self.image_pull_s is not None:
            each = ", ".join(f"node {p.node} {p.seconds:.0f}s" for p in self.pulls if p.done)
            parts.append(f"image pulls took up to {self.image_pull_s:.0f}s" + (f" ({each})" if each else ""))
        parts += [p.line() for p in self.pulling()]
        return "; ".join(parts)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass
class JobStatus:
    """The end of a job: its state and, unless it succeeded, why, naming the pod or node.

    ``efa`` is set when the job requested EFA and succeeded: what the pods' logs showed of it (the job's
    state never says whether NCCL used EFA; :func:`rollcall.judge.judge` reads ``efa`` for that).
    ``terminations`` are the containers that ended badly, as their runtime recorded them (where the backend
    can read that).
    ``disruption`` is set when the infrastructure took a pod away (evicted, preempted, its node deleted, lost,
    drained or reclaimed): the job failed, but no rank did. ``waits`` is what the job waited for before
    training (quota, nodes, image pulls), where known. ``node_info`` is what the backend observed of each node
    the job ran on, by node name (a Kubernetes Node's kubelet, container-runtime, kernel and OS image
    versions and its image labels: :data:`rollcall.evidence.nodefacts.OBSERVED_KEYS`), where it can read that.
    ``owns_nodes`` is whether the run had every GPU of each node it ran on: True where the backend asked for
    whole nodes (Slurm's ``--exclusive``; on Kubernetes, each node's pods of the run requested every
    ``nvidia.com/gpu`` it has allocatable), False where it shares them (the local backend's machine; a GPU
    no rank used may be another's), None where the backend cannot tell (then a GPU event counts as the run's
    wherever it happened: :mod:`rollcall.checks.gpu_events`).
    """

    state: JobState
    reason: str = ""
    details: list[str] = field(default_factory=list)
    efa: EfaUse | None = None
    terminations: list[Termination] = field(default_factory=list)
    disruption: Disruption | None = None
    waits: Waits | None = None
    node_info: dict[str, dict[str, str]] = field(default_factory=dict)
    owns_nodes: bool | None = None

    @classmethod
    def disrupted(cls, disruption: Disruption) -> JobStatus:
        """A job failed: the infrastructure took ``disruption``'s pod away, or someone else deleted it."""
        reason = f"{disruption.category}: {disruption.describe()}"
        return cls(JobState.FAILED, reason, disruption=disruption)


@dataclass(frozen=True)
class PlacementRequest:
    """What discovery is asked for: the nodes, their ranks and devices, where they may be, how long to wait.

    Every backend reads what it can of it (local and Slurm the first three); the defaults are the options'.

    Attributes:
        nodes: the nodes (pods) to train on (``--nodes``).
        accelerator: the device the ranks train on, or ``auto`` for what the nodes offer (``--accelerator``).
        procs_per_node: ranks per node; None for what the nodes offer (``--procs-per-node``).
        instance_type: only nodes of this instance type (``--instance-type``); None for any one type.
        efa: whether the pods request EFA (``--efa``).
        node_selector: labels a node must carry (``--node-selector``).
        tolerations: taints the pods tolerate besides the Job manifest's own (``--toleration``).
        check_device_plugins: check that the device-plugin DaemonSets are ready (``--check-device-plugins``).
        capacity_timeout_s: how long pods may wait for nodes that can arrive (``--capacity-timeout``).
        trust_autoscaler: whether a running cluster-autoscaler counts as capacity that can arrive (the user
            gave ``--capacity-timeout``: capacity will come).
        recheck: run on the nodes holding this taint, rollcall's own (``--recheck-tainted``), tolerating it.
    """

    nodes: int = 2
    accelerator: AcceleratorChoice = "auto"
    procs_per_node: int | None = None
    instance_type: str | None = None
    efa: EfaChoice = "auto"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    check_device_plugins: bool = False
    capacity_timeout_s: float = 900.0
    trust_autoscaler: bool = False
    recheck: Taint | None = None


@dataclass(frozen=True)
class BackendSettings:
    """What every backend is given of the session besides its own options section, built in one place.

    A wing reads its own section of the options (``rollcall.options.Options.kubernetes``, ``.slurm``) and
    this; never the whole of the options (:func:`rollcall.suite.backend_settings` builds it).

    Attributes:
        image: the training image (``--image``), for backends that run one.
        keep: leave what runs create in place (``--keep``).
        unschedulable_grace_s: how long a pod (a Slurm job) may wait for a reason that cannot clear
            (``--unschedulable-grace``).
        marks: how the session marks each node after a verdict (``--label-nodes``, ``--taint-unfit``,
            ``--drain-unfit``): a backend that checks its rights at session start checks those too.
        progress: where progress lines go (the terminal, through the plugin); None for silence.
        secrets: whether the workload has secret variables, which a backend passes by reference.
    """

    image: str | None = None
    keep: bool = False
    unschedulable_grace_s: float = 60.0
    marks: Marking = field(default_factory=lambda: Marking())  # noqa: PLW0108 - defined below
    progress: Callable[[str], None] | None = None
    secrets: bool = False


@dataclass(frozen=True)
class Placement:
    """What discovery found the job can use on each node."""

    accelerator: Accelerator
    procs_per_node: int
    resources: dict[str, int] = field(default_factory=dict)
    instance_type: str | None = None
    description: str = ""
    #: The nodes the job must run on, by name (``--recheck-tainted``: those holding rollcall's taint).
    machines: tuple[str, ...] = ()


#: A test :meth:`Job.wait` re-runs about every second: a reason ends the job early (``STOPPED``), None not.
StopTest = Callable[[], str | None]


class Job(Protocol):
    """A launched job."""

    def wait(self, timeout_s: float, stop: StopTest | None = None) -> JobStatus:
        """Block until the job ends or ``timeout_s`` passes; fail fast on the first broken node.

        ``stop`` is re-tested about every second while the job runs; once it gives a reason, the job is ended
        (its processes, or left to :meth:`cleanup` where deleting the job ends them) and the status is
        ``STOPPED`` with that reason.
        """
        ...

    def cleanup(self) -> None:
        """Remove everything the job created and confirm it is gone; safe to call twice.

        Raises :class:`CleanupError` naming what is left when something still exists after the backend's
        clean-up bound, or what could not be deleted; never raises for what is already gone.
        """
        ...


@runtime_checkable
class ConfirmsLater(Protocol):
    """A job whose clean-up can be confirmed while the session goes on (the runner prefers it, if offered)."""

    def cleanup_later(self) -> Future[None]:
        """Ask for everything the job created to be removed now; confirm that it is gone in the background.

        What :meth:`Job.cleanup` does, split in two: a deletion that cannot even be asked for raises
        :class:`CleanupError` at once; what is still there after the backend's clean-up bound is the future's
        :class:`CleanupError`. The future always settles within that bound.
        """
        ...


class Backend(Protocol):
    """Where jobs run (a wing's backend, created by its class's ``from_options``: :class:`BackendClass`)."""

    name: str
    #: What runs one node's torchrun, in the reports' words (:data:`rollcall.evidence.endings.UNITS`):
    #: ``pod``, or ``node`` where the agent is a process of a node (local, Slurm).
    unit: str

    def discover(self, request: PlacementRequest) -> Placement:
        """What each node offers the job (accelerator, ranks, requests); raises when too few are usable."""
        ...

    def launch(self, spec: JobSpec, collector: Collector) -> Job:
        """Create the job and start streaming each node's log into ``collector``."""
        ...


class BackendClass(Protocol):
    """A wing's backend class, as :meth:`Wing.load` gives it: it makes the backend of its section."""

    def from_options(self, section: Any, session: BackendSettings, /) -> Backend:
        """The backend of its section of the options (None for a wing given none) and the session's settings.

        Raises :class:`~rollcall.options.values.OptionError` on bad input found as it is created.
        """
        ...


# -- capabilities: what only some backends can do, asked of a backend's class (or the backend) -------------


@runtime_checkable
class ChecksAtStart(Protocol):
    """A backend with a configuration to check when the session starts, before anything is created.

    A cluster's credentials, server and rights; a scheduler's configuration. The session creates such a
    backend as soon as a test will run a job; a pytest-xdist controller checks it before any worker starts.
    """

    def check_config(self, section: Any, session: BackendSettings, /) -> None:
        """Nothing, or an :class:`~rollcall.options.values.OptionError` naming the option and the fix."""
        ...


@runtime_checkable
class RendersManifest(Protocol):
    """A backend that can print what a run would submit, without submitting it (``rollcall render``)."""

    def render_run(
        self,
        section: Any,
        session: BackendSettings,
        request: PlacementRequest,
        spec_of: Callable[[Placement], JobSpec],
        workdir: Path,
        /,
    ) -> str:
        """What a run would submit, as text.

        The placement is ``request``'s (discovered where it must be), the job ``spec_of`` it, ``workdir``
        where the run's files would lie. Raises ValueError (an :class:`~rollcall.options.values.OptionError`,
        a :class:`BackendError`) naming what is wrong.
        """
        ...


@runtime_checkable
class SchedulesTheSuite(Protocol):
    """A backend that can run the suite itself on a schedule (``rollcall render --cronjob``)."""

    def render_schedule(
        self, schedule: str, suite_image: str, given: Mapping[str, str], results_claim: str | None, /
    ) -> str:
        """The objects that run the suite on ``schedule`` with the options ``given`` (their variables)."""
        ...


@runtime_checkable
class MountsSharedCache(Protocol):
    """A backend whose nodes mount a volume that every node shares (an NFS ``--compile-cache``)."""

    @property
    def shared_cache_dir(self) -> str:
        """Where the ranks find the volume."""
        ...


@dataclass(frozen=True)
class Marking:
    """How the session marks each node after a verdict, so that the next job's scheduler sees it.

    Attributes:
        label: label each node checked with its verdict, the time and the expiry (``--label-nodes``).
        taint: taint each unfit node with this taint, and lift it from a node found fit (``--taint-unfit``).
        drain: drain each unfit node, and resume a node found fit that rollcall drained (``--drain-unfit``).
    """

    label: bool = False
    taint: Taint | None = None
    drain: bool = False

    def __bool__(self) -> bool:
        return self.label or self.taint is not None or self.drain


@dataclass(frozen=True)
class NodeMark:
    """What a verdict says of one node (:mod:`rollcall.nodeverdicts`), for the backend to mark it with.

    Attributes:
        verdict: ``fit``, ``unfit``, ``undetermined`` or ``unchecked``: only an unfit node is marked.
        reason: why, in one line (an unfit node's taint annotation or drain reason).
        checked_at, valid_until: when it was checked and until when that holds (epoch seconds).
        whole: the check covered every GPU of the node: only then does a fit verdict lift a mark.
    """

    name: str
    verdict: str
    reason: str = ""
    checked_at: float | None = None
    valid_until: float | None = None
    whole: bool = True


@runtime_checkable
class MarkReport(Protocol):
    """What marking the nodes did, for the terminal and ``results.json`` (a node it could not mark named)."""

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        ...

    def line(self) -> str:
        """One line for the terminal."""
        ...


@runtime_checkable
class MarksNodes(Protocol):
    """A backend that marks nodes with their verdicts (labels, taints, drains) for the next scheduler."""

    #: The marks it can make (the options naming the others are usage errors on it).
    MARKS: tuple[str, ...]

    def mark_nodes(self, marks: Sequence[NodeMark], how: Marking) -> MarkReport:
        """Mark each node of ``marks`` as ``how`` says; what it did (never raises for one node)."""
        ...


# -- the registry of wings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wing:
    """One backend, declared once: its name, its class, its options section, how ``--backend auto`` finds it.

    Attributes:
        name: what ``--backend`` says (``kubernetes``); every report records it.
        backend: its backend class, ``module:Class``, loaded on first use (:meth:`load`): this module
            imports no wing.
        section: the section of the options it is given (a field of ``rollcall.options.Options``); None: none.
        detect: ``module:function`` of ``(section, environ) -> why it is there, or None``, asked by
            ``--backend auto`` in the order of :data:`WINGS`; None: chosen only when asked for (or as the
            fallback).
        looks_for: what ``detect`` looks for, in words (``kubeconfig or in-cluster config``).
        found_by: what a person does so that ``detect`` finds it (``set KUBECONFIG / --kubeconfig``).
        fallback: ``--backend auto``'s choice when no wing is detected and no option asks for another wing
            (:func:`rollcall.suite.choose_backend`).
    """

    name: str
    backend: str
    section: str | None = None
    detect: str | None = None
    looks_for: str = ""
    found_by: str = ""
    fallback: bool = False

    def load(self) -> BackendClass:
        """The backend class (its module imported now)."""
        found: BackendClass = _load(self.backend)
        return found

    def detected(self, section: Any, environ: Mapping[str, str]) -> str | None:
        """Why ``--backend auto`` finds this wing (``KUBECONFIG=/k``), or None."""
        if self.detect is None:
            return None
        reason: str | None = _load(self.detect)(section, environ)
        return reason


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


#: Every wing, in the order ``--backend auto`` asks them.
WINGS: tuple[Wing, ...] = (
    Wing(
        "kubernetes",
        "rollcall.backends.kubernetes.backend:KubernetesBackend",
        "kubernetes",
        detect="rollcall.backends.kubernetes.kubeconfig:detect",
        looks_for="kubeconfig or in-cluster config",
        found_by="set KUBECONFIG / --kubeconfig",
    ),
    Wing("local", "rollcall.backends.local:LocalBackend", fallback=True),
    Wing("slurm", "rollcall.backends.slurm.backend:SlurmBackend", "slurm"),
)


def wing_named(name: str) -> Wing:
    """The wing ``--backend name`` chooses; KeyError naming those there are."""
    for wing in WINGS:
        if wing.name == name:
            return wing
    raise KeyError(f"no backend {name!r}; there are {', '.join(w.name for w in WINGS)}")


def choose(asked: str, section_of: Callable[[str], Any], environ: Mapping[str, str]) -> tuple[Wing, str]:
    """The wing to use and why: ``asked`` (``--backend``), else the first wing detected, else the fallback.

    ``section_of`` gives a section of the options by name (what a wing's ``detect`` reads).
    """
    if asked != "auto":
        return wing_named(asked), f"--backend {asked}"
    for wing in WINGS:
        reason = wing.detected(section_of(wing.section) if wing.section else None, environ)
        if reason is not None:
            return wing, reason
    missing = " or ".join(w.looks_for for w in WINGS if w.detect)
    return next(w for w in WINGS if w.fallback), f"no {missing} found"


def auto_help() -> str:
    """What ``--backend auto`` does, in words, from :data:`WINGS`."""
    found = ", ".join(f"{w.name} when a {w.looks_for} exists" for w in WINGS if w.detect)
    fallback = next(w.name for w in WINGS if w.fallback)
    asked = [w.name for w in WINGS if not w.detect and not w.fallback]
    otherwise = f"else {fallback}, unless an option only another backend reads is given (a usage error)"
    return f"auto = {found}, {otherwise}" + (f"; {', '.join(asked)} only when asked for" if asked else "")


def able(capability: type) -> list[str]:
    """The names of the wings whose backend class has ``capability`` (each class loaded)."""
    return [w.name for w in WINGS if isinstance(w.load(), capability)]


#: Node names shown per reason when discovery fails.
_SHOW_NODES = 8


def unusable_nodes(
    wanted: int, usable: Sequence[str], rejected: Mapping[str, str], accel: Accelerator | None
) -> str:
    """The message of a failed discovery: how many were needed and found, and why each other node is out."""
    lines = [f"need {wanted} usable node(s), found {len(usable)}" + (f" for {accel}" if accel else "")]
    if usable:
        lines.append(f"  usable: {shown_names(list(usable))}")
    by_reason: dict[str, list[str]] = defaultdict(list)
    for name, reason in rejected.items():
        by_reason[reason].append(name)
    if by_reason:
        lines.append("  not usable:")
        lines += [f"    {reason}: {shown_names(names)}" for reason, names in sorted(by_reason.items())]
    elif not usable:
        lines.append("  the cluster has no nodes")
    return "\n".join(lines)


def shown_names(names: list[str]) -> str:
    """Up to 8 names, then how many more, then the count: ``a, b and 3 more (5)``."""
    shown = ", ".join(names[:_SHOW_NODES])
    return (
        shown
        + (f" and {len(names) - _SHOW_NODES} more" if len(names) > _SHOW_NODES else "")
        + f" ({len(names)})"
    )
