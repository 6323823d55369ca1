"""One description of the training job, and the one torchrun command built from it.

Every backend starts the very same command: the kubernetes backend as each pod's training container (node
rank ``$(JOB_COMPLETION_INDEX)``, master ``<job>-0.<service>``), the slurm backend as each node's task (node
rank ``$SLURM_NODEID``), the local backend once per simulated node (node rank ``i``, master ``127.0.0.1``).
Only the launcher, the script path and those two values differ. Each node also runs its monitor
(:func:`monitor_command`) outside the ranks: local and slurm in front of torchrun
(:meth:`JobSpec.node_command`), kubernetes as the pod's sidecar, since a frozen container would freeze a
monitor inside it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from rollcall.secrets import SecretSource
from rollcall_workload import faults
from rollcall_workload.rank import cli

Accelerator = Literal["nvidia", "neuron", "cpu"]
#: What ``--accelerator`` and ``--efa`` accept (``auto``: let discovery choose).
AcceleratorChoice = Literal["auto", Accelerator]
EfaChoice = Literal["auto", "on", "off"]
#: The effects a taint (and so a toleration) may have.
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
#: torchrun's rendezvous waits this much past the latest a node may join it (JobSpec.rendezvous_timeout_s).
RENDEZVOUS_MARGIN_S = 60.0
#: How long a job may run unless told otherwise (``--job-timeout``).
DEFAULT_JOB_TIMEOUT_S = 1800.0

#: Resource names of the accelerators and of EFA, as device plugins advertise them.
GPU_RESOURCE = "nvidia.com/gpu"
NEURON_RESOURCE = "aws.amazon.com/neuron"
NEURONCORE_RESOURCE = "aws.amazon.com/neuroncore"
NEURONDEVICE_RESOURCE = "aws.amazon.com/neurondevice"
#: The Neuron resources in order of preference: one rank per NeuronCore, else per whole device (the Neuron
#: device plugin advertises ``neurondevice``; ``neuron`` is its older name for the same devices).
NEURON_RESOURCES = (NEURONCORE_RESOURCE, NEURONDEVICE_RESOURCE, NEURON_RESOURCE)
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: Where ``--neuron-cache`` is mounted in the pods: the Neuron compiler's persistent cache.
NEURON_CACHE_DIR = "/var/cache/neuron-compile-cache"
#: Where ``--compile-cache`` is mounted in the pods: train.py's ``--compile-cache`` (inductor's and Triton's).
COMPILE_CACHE_DIR = "/var/cache/rollcall-compile-cache"

#: train.py's ``--device`` for each accelerator.
DEVICE_OF: dict[Accelerator, str] = {"nvidia": "cuda", "neuron": "xla", "cpu": "cpu"}

#: torchrun prefixes every rank's console line with this (``${rank}`` is the global rank).
LOG_PREFIX_TEMPLATE = "[${rank}]:"
#: Where ranks' own log files go inside a pod (torchrun ``--log-dir``).
POD_LOG_DIR = "/tmp/rollcall-logs"
#: The agent's own error file, in its log directory: the agent copies its first failed worker's error there.
AGENT_ERROR_FILE = "agent-error.json"
#: The workload reads each node rank's node in the larger world from this (:attr:`JobSpec.node_ids`).
NODE_IDS_ENV = "ROLLCALL_NODE_IDS"
#: The node's monitor directory inside the pods, made private (safefs) in the emptyDir both containers mount.
POD_MONITOR_DIR = "/rollcall-monitor/node"
#: The module every node's monitor runs (``python -m``), from the workload's own package.
MONITOR_MODULE = "rollcall_workload.node.monitor"
#: Where no monitor stands before the launcher (Kubernetes), what applies the launch faults and becomes it.
LAUNCH_MODULE = "rollcall_workload.node.launch"
#: The Python the images start the monitor with; the workload's package lies beside train.py, in the images'
#: working directory (:data:`IMAGE_DIR`), so ``-m`` finds it there.
IMAGE_PYTHON = ("python3",)
#: The workload's path inside the images.
IMAGE_SCRIPT = "/workspace/train.py"
IMAGE_DIR = "/workspace"
#: The workload as this Python's installed package runs it (local; slurm without a container image):
#: torchrun's ``--module`` starts each rank as ``python -m rollcall_workload``, from a checkout or a wheel.
PACKAGE_ENTRY: tuple[str, ...] = ("--module", "rollcall_workload")
#: Where the manifests and batch templates are read from: ``$ROLLCALL_MANIFESTS_DIR``, else the package's own
#: (``manifests/`` at the checkout's root is a link to it, for ``kubectl apply -f manifests/rbac/``).
MANIFESTS_ENV = "ROLLCALL_MANIFESTS_DIR"
MANIFESTS_DIR = Path(__file__).resolve().parent / "manifests"


def monitor_command(monitor_dir: str, python: Sequence[str] = IMAGE_PYTHON) -> list[str]:
    """The node's monitor (:mod:`rollcall_workload.node.monitor`) reading ``monitor_dir``.

    Alone, it is a sidecar; :func:`launcher_monitor_command` puts it in front of the node's launcher.
    """
    return [*python, "-m", MONITOR_MODULE, "--dir", monitor_dir]


def launcher_monitor_command(
    monitor_dir: str, python: Sequence[str], node_rank: str, workload_args: Sequence[str]
) -> list[str]:
    """The monitor in front of node ``node_rank``'s launcher: it watches it at the launchers' rendezvous.

    In steps of the ranks' join bound (``--join-hang-after`` of ``workload_args``, train.py's own parser).
    """
    bound = cli.join_bound(workload_args)
    return [*monitor_command(monitor_dir, python), f"--node-rank={node_rank}", f"--join-hang-after={bound:g}"]


def manifests_dir() -> Path:
    """The directory holding job.yaml, service.yaml, namespace.yaml and the batch templates.

    Raises FileNotFoundError, saying how to point rollcall at a copy, when it holds no job.yaml.
    """
    chosen = os.environ.get(MANIFESTS_ENV)
    directory = Path(chosen) if chosen else MANIFESTS_DIR
    if not (directory / "job.yaml").is_file():
        raise FileNotFoundError(
            f"no job.yaml in {directory}: unset {MANIFESTS_ENV} (the installed package has its own), or set "
            "it to a copy of rollcall's manifests/ directory"
        )
    return directory


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

# An image reference, by the grammar of the distribution project's reference package (what containerd and
# the kubelet parse): [domain[:port]/]path[:tag][@digest], the path in lower case.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_HOST = rf"(?:{_DOMAIN}|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"^(?:(?P<domain>{_HOST})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
)


def check_image(reference: str) -> str:
    """``reference`` when it is a valid image reference; else ValueError saying what is wrong with it.

    The API server accepts any string as an image; the runtime only refuses it once the pod is on a node.
    """
    if not reference or reference != reference.strip():
        raise ValueError("an image reference may not be empty or have spaces around it")
    match = _IMAGE.match(reference)
    domain = match["domain"] if match else None
    if domain and not ("." in domain or ":" in domain or domain == "localhost") and domain != domain.lower():
        match = None  # a first component without '.', ':' or localhost is part of the lower-case path
    if match is None:
        hint = " (repository names are lower case)" if reference != reference.lower() else ""
        raise ValueError(
            "not an image reference of the form [registry[:port]/]repository[:tag][@sha256:digest]" + hint
        )
    name = reference.partition("@")[0]
    if match["tag"]:
        name = name.rpartition(":")[0]
    if len(name) > 255:
        raise ValueError("the repository name is longer than 255 characters")
    return reference


@dataclass(frozen=True)
class CacheVolume:
    """Where a compiler's cache lives outside the pod, so that a run reuses the last run's compiled graphs.

    ``--neuron-cache`` (the Neuron compiler's) and ``--compile-cache`` (inductor's and Triton's) are both one.
    Each run has a namespace of its own, so the volume is one a pod can name without a claim in it: a
    directory of the node (``host``; each node keeps its own cache) or an NFS export such as an Amazon EFS
    file system (``nfs``; shared by every node). Backends without pods (local, slurm) use a ``host``
    directory as it is.
    """

    kind: Literal["host", "nfs"]
    path: str
    server: str | None = None

    def __str__(self) -> str:
        return f"nfs:{self.server}:{self.path}" if self.kind == "nfs" else f"host:{self.path}"


_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def parse_cache_volume(text: str) -> CacheVolume:
    """``host:/PATH`` or ``nfs:SERVER:/PATH`` as a :class:`CacheVolume`; ValueError saying what is wrong."""
    kind, _, rest = text.partition(":")
    server = None
    if kind == "nfs":
        server, _, rest = rest.partition(":")
        if not _HOSTNAME.match(server):
            raise ValueError(f"{server!r} is not an NFS server name or address")
    elif kind != "host":
        raise ValueError(
            "expected host:/PATH (a directory of each node) or nfs:SERVER:/PATH (e.g. Amazon EFS)"
        )
    path = rest
    if not path.startswith("/") or "/../" in f"{path}/" or any(c.isspace() for c in path):
        raise ValueError(f"{path!r} is not an absolute path without '..' or spaces")
    return CacheVolume("nfs" if server is not None else "host", path.rstrip("/") or "/", server)


def parse_compile_cache(text: str) -> CacheVolume:
    """:func:`parse_cache_volume`, or a plain absolute directory ``/PATH`` (the same as ``host:/PATH``)."""
    return parse_cache_volume(f"host:{text}" if text.startswith("/") else text)


@dataclass(frozen=True)
class Toleration:
    """A toleration of the pods, as ``--toleration KEY[=VALUE]:EFFECT`` gives it (kubectl's taint syntax).

    Without a value it tolerates the key whatever its value (``operator: Exists``).
    """

    key: str
    effect: TaintEffect
    value: str | None = None

    def manifest(self) -> dict[str, str]:
        """The toleration as a pod spec holds it."""
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}

    def __str__(self) -> str:
        value = "" if self.value is None else f"={self.value}"
        return f"{self.key}{value}:{self.effect}"


#: rollcall's own domain of node labels, annotations and taints: ``--label-nodes`` writes these keys, the
#: taint of ``--taint-unfit`` must be of it, and the policy of ``manifests/rbac/`` lets it change no other.
NODE_DOMAIN = "rollcall"
#: ``--label-nodes``: a node's verdict (fit, unfit, undetermined), when it was checked, until when it holds.
VERDICT_LABEL = f"{NODE_DOMAIN}/verdict"
CHECKED_LABEL = f"{NODE_DOMAIN}/checked-at"
EXPIRES_LABEL = f"{NODE_DOMAIN}/valid-until"
#: Why rollcall tainted a node (``--taint-unfit``): the unfit verdict's reasons.
REASON_ANNOTATION = f"{NODE_DOMAIN}/unfit-reason"


@dataclass(frozen=True)
class Taint:
    """A node taint, as ``--taint-unfit KEY[=VALUE]:EFFECT`` gives it (kubectl's taint syntax)."""

    key: str
    effect: TaintEffect
    value: str = ""

    def manifest(self) -> dict[str, str]:
        """The taint as a node's ``spec.taints`` holds it (no value: none)."""
        return {"key": self.key, **({"value": self.value} if self.value else {}), "effect": self.effect}

    def __str__(self) -> str:
        return f"{self.key}{f'={self.value}' if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class Scheduling:
    """How the user shapes where and when the pods run (the kubernetes backend).

    Attributes:
        tolerations: taints the pods tolerate besides the accelerators' (``--toleration``).
        priority_class: the pods' PriorityClass (``--priority-class``).
        queue: the Kueue LocalQueue the Job is submitted to (``--queue``); the Job is created suspended, for
            Kueue to admit it.
        image_pull_secrets: Secrets the kubelet pulls the image with (``--image-pull-secret``).
        service_account: the pods' ServiceAccount (``--service-account``); its Kubernetes API token is still
            not mounted (the workload never calls the API; IRSA and EKS Pod Identity project their own).
    """

    tolerations: tuple[Toleration, ...] = ()
    priority_class: str | None = None
    queue: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None


@dataclass(frozen=True)
class HangBounds:
    """The workload's hang and join bounds the suite sets (``--hang-after``, ...), in seconds.

    None leaves the workload its own default (``auto``: the formulas of its watchdog).
    Each bound set is passed on the workload's command line (:meth:`args`), before ``--workload-args``.

    Attributes:
        hang_after_s: ``--hang-after``: no step or phase completes within it, the rank dumps its stacks.
        first_step_hang_after_s: ``--first-step-hang-after``: the same until the first step (which compiles)
            completes.
        join_hang_after_s: ``--join-hang-after``: the same from entering ``init_process_group`` until the rank
            has joined the process group.
        pg_timeout_s: ``--pg-timeout``: how long ``init_process_group`` waits for every rank to join (and
            each collective may take); None: PyTorch's, by backend.
        start_skew_s: ``--start-skew``: how long after the first part of the run is heard a node or rank may
            still be heard for the first time, and the bound of each rank's imports and device setup, from
            its process's start until it enters ``init_process_group`` (None: twice the join bound).
    """

    hang_after_s: float | None = None
    first_step_hang_after_s: float | None = None
    join_hang_after_s: float | None = None
    pg_timeout_s: float | None = None
    start_skew_s: float | None = None

    #: Each bound's flag, the workload's and the suite's alike, by field.
    FLAGS: ClassVar[Mapping[str, str]] = {
        "hang_after_s": "--hang-after",
        "first_step_hang_after_s": "--first-step-hang-after",
        "join_hang_after_s": "--join-hang-after",
        "pg_timeout_s": "--pg-timeout",
        "start_skew_s": "--start-skew",
    }

    def join_bound(self, workload_args: Sequence[str] = ()) -> float:
        """J, the join bound the ranks and the nodes' monitors use: this one's, else the workload's args'."""
        return self.join_hang_after_s or cli.join_bound(workload_args)

    def start_skew(self, workload_args: Sequence[str] = ()) -> float:
        """S, the start skew: this one's, else the workload's args', else twice the join bound."""
        return self.start_skew_s or cli.start_skew(workload_args, self.join_bound(workload_args))

    def pg_timeout(self, backend: str, workload_args: Sequence[str] = ()) -> float:
        """The process group's timeout with ``backend`` (nccl, gloo): set, given, or PyTorch's."""
        if self.pg_timeout_s:
            return self.pg_timeout_s
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                given = cli.parse_args(list(workload_args)).pg_timeout
        except (cli.CommandLineError, SystemExit):
            given = None
        return float(given) if given else cli.PG_TIMEOUT_S.get(backend, max(cli.PG_TIMEOUT_S.values()))

    def set(self) -> dict[str, float]:
        """Each bound set, by its flag."""
        return {flag: v for name, flag in self.FLAGS.items() if (v := getattr(self, name)) is not None}

    def args(self) -> tuple[str, ...]:
        """The workload's arguments that set them: ``("--hang-after=60",)``; none for ``auto``."""
        return tuple(f"{flag}={value:g}" for flag, value in self.set().items())

    def conflicts(self, workload_args: Sequence[str]) -> dict[str, tuple[float, float]]:
        """Each bound set here that ``workload_args`` also set, to another value: flag: (this, theirs).

        ``workload_args`` are read by the workload's own parser (those it refuses set nothing here).
        """
        mine = self.set()
        if not mine:
            return {}
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                theirs = vars(cli.parse_args(list(workload_args)))
        except (cli.CommandLineError, SystemExit):
            return {}
        found = {}
        for flag, value in mine.items():
            other = theirs.get(flag.lstrip("-").replace("-", "_"))
            if other is not None and float(other) != value:
                found[flag] = (value, float(other))
        return found


@dataclass(frozen=True)
class JobSpec:
    """What to run: the layout, the image, the workload and what each node needs.

    Attributes:
        name: the Job's name (a DNS label, unique per run).
        nodes: nodes (pods, or local torchrun agents) to run.
        procs_per_node: ranks per node (GPUs or NeuronCores per node, or 1 on cpu).
        accelerator: which device the ranks train on.
        image: the container image (the kubernetes backend only).
        workload_args: extra arguments for train.py.
        hang_bounds: the hang and join bounds set for the workload (``--hang-after``, ...), passed before
            ``workload_args``.
        env: extra environment for the workload's processes (one that looks secret: :mod:`rollcall.secrets`).
        secrets: the workload's variables whose values come by reference (``--workload-secret``), by name.
        resources: per-node resource requests and limits (accelerator and EFA devices).
        instance_type: value of ``node.kubernetes.io/instance-type`` to select nodes by.
        node_selector: more node labels the pods must land on (``--node-selector``).
        neuron_cache: a volume that keeps the Neuron compile cache between runs (``--neuron-cache``).
        compile_cache: a volume that keeps inductor's and Triton's caches between runs
            (``--compile-cache``), given to train.py as its ``--compile-cache``.
        requests: the container's requests of cpu, memory, ... (``--requests``), besides ``resources``.
        limits: the container's limits of cpu, memory, ... (``--limits``), besides ``resources``.
        scheduling: tolerations, priority, queue, pull secrets and service account (the kubernetes backend).
        master_port: the rendezvous port on node 0.
        rdzv_timeout_s: how long a node waits for the others at rendezvous.
        job_timeout_s: how long the whole job may run.
        node_ids: when the job runs a subset of a larger world's nodes (the bisection of
            :mod:`rollcall.isolation`), each node rank's node in that world; the workload reads them from
            :data:`NODE_IDS_ENV`. Empty: the job is the world.
        machines: the machines (Kubernetes or Slurm node names) the job must run on, when it re-runs nodes
            of an earlier run that said where they ran; a backend that places its nodes pins them there.
            Empty: anywhere.
    """

    name: str
    nodes: int
    procs_per_node: int
    accelerator: Accelerator = "cpu"
    image: str | None = None
    workload_args: tuple[str, ...] = ()
    hang_bounds: HangBounds = field(default_factory=HangBounds)
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, SecretSource] = field(default_factory=dict)
    resources: Mapping[str, int] = field(default_factory=dict)
    instance_type: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    neuron_cache: CacheVolume | None = None
    compile_cache: CacheVolume | None = None
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    scheduling: Scheduling = field(default_factory=Scheduling)
    master_port: int = 29500
    rdzv_timeout_s: int | None = None
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    node_ids: tuple[int, ...] = ()
    machines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _DNS_LABEL.match(self.name) or len(self.name) > 52:
            raise ValueError(
                f"job name {self.name!r} is not a DNS label of at most 52 characters "
                "(lower-case letters, digits and '-', starting with a letter)"
            )
        if self.nodes < 1 or self.procs_per_node < 1:
            raise ValueError(
                f"nodes and procs_per_node must be >= 1, got {self.nodes} and {self.procs_per_node}"
            )
        if self.node_ids and len(self.node_ids) != self.nodes:
            raise ValueError(f"node_ids {self.node_ids} must name one node per node rank ({self.nodes})")

    @property
    def world_size(self) -> int:
        """Ranks in all."""
        return self.nodes * self.procs_per_node

    @property
    def join_bound_s(self) -> float:
        """J: the join bound of the ranks and the nodes' monitors (``--join-hang-after``)."""
        return self.hang_bounds.join_bound(self.workload_args)

    @property
    def start_skew_s(self) -> float:
        """S: how long after the run's first part was heard another may be heard first (``--start-skew``)."""
        return self.hang_bounds.start_skew(self.workload_args)

    @property
    def pg_timeout_s(self) -> float:
        """How long ``init_process_group`` waits for every rank (``--pg-timeout``; PyTorch's by backend)."""
        args = self.workload_args
        backend = "gloo" if "gloo" in args or self.accelerator != "nvidia" else "nccl"
        return self.hang_bounds.pg_timeout(backend, args)

    @property
    def rendezvous_timeout_s(self) -> int:
        """Torchrun's rendezvous timeout: set, else past every bound the suite allows a late node.

        A node heard last at the start skew S has twice the join bound J to get its launcher through the
        rendezvous (:mod:`rollcall.evidence.launchers`): torchrun must not end a run before the suite would,
        so its timeout is S + 2 J and a minute more.
        """
        if self.rdzv_timeout_s is not None:
            return self.rdzv_timeout_s
        return math.ceil(self.start_skew_s + 2 * self.join_bound_s + RENDEZVOUS_MARGIN_S)

    def outwaiting(self, arrival_s: float) -> JobSpec:
        """The spec with torchrun's rendezvous waiting out the job's timeout and ``arrival_s`` more.

        Where a backend holds a node on its way (its pod waiting for capacity, or pulling a large image)
        by bounds of its own, the nodes already up wait at the rendezvous meanwhile: torchrun's timeout
        must not end a run that the backend still allows. The suite itself ends a rendezvous that cannot
        complete, once no node is on its way (:mod:`rollcall.evidence.launchers`). A timeout set on the
        spec is kept.
        """
        if self.rdzv_timeout_s is not None:
            return self
        floor = math.ceil(self.job_timeout_s + arrival_s)
        return dataclasses.replace(self, rdzv_timeout_s=max(self.rendezvous_timeout_s, floor))

    def workload_argv(self, compile_cache_dir: str | None = None) -> list[str]:
        """train.py's arguments: the device, the compile cache, the hang bounds, then the user's own.

        Args:
            compile_cache_dir: where :attr:`compile_cache` is mounted for the ranks; without it (a backend
                without pods) the ranks use its directory as it is.
        """
        cache = []
        if self.compile_cache is not None:
            cache = ["--compile-cache", compile_cache_dir or self.compile_cache.path]
        return [
            "--device",
            DEVICE_OF[self.accelerator],
            *cache,
            *self.hang_bounds.args(),
            *self.workload_args,
        ]

    def torchrun_command(
        self,
        *,
        node_rank: str,
        master_addr: str,
        master_port: int | None = None,
        launcher: Sequence[str] = ("torchrun",),
        entry: Sequence[str] = (IMAGE_SCRIPT,),
        log_dir: str = POD_LOG_DIR,
        compile_cache_dir: str | None = None,
    ) -> list[str]:
        """The command every node runs: static rendezvous, bounded, per-rank logs multiplexed by the agent.

        torchrun writes each rank's output to its own file under ``log_dir`` and tees it to the agent's
        stdout with the prefix of :data:`LOG_PREFIX_TEMPLATE`, so ranks never race on one pipe. Each rank's
        error file lies there too; the agent writes a JSON event per worker to its own output when the
        workers end (``--event-log-handler=console``): every failed worker's exit code or signal, by global
        rank, with its error file's record (:mod:`rollcall.torchrun` reads them).
        """
        return [
            *launcher,
            f"--nnodes={self.nodes}",
            f"--nproc-per-node={self.procs_per_node}",
            f"--node-rank={node_rank}",
            f"--master-addr={master_addr}",
            f"--master-port={master_port or self.master_port}",
            f"--rdzv-conf=timeout={self.rendezvous_timeout_s}",
            "--max-restarts=0",
            f"--log-dir={log_dir}",
            "--redirects=3",
            "--tee=3",
            "--event-log-handler=console",
            *entry,
            *self.workload_argv(compile_cache_dir),
        ]

    def node_command(
        self,
        *,
        monitor_dir: str,
        python: Sequence[str] = IMAGE_PYTHON,
        node_rank: str,
        master_addr: str,
        master_port: int | None = None,
        launcher: Sequence[str] = ("torchrun",),
        entry: Sequence[str] = (IMAGE_SCRIPT,),
        log_dir: str = POD_LOG_DIR,
        compile_cache_dir: str | None = None,
    ) -> list[str]:
        """The node's :meth:`torchrun_command` behind its monitor: ``python -m ... --dir DIR -- torchrun``.

        The monitor starts torchrun with ``ROLLCALL_MONITOR_DIR`` set to ``monitor_dir``, so every rank writes
        its heartbeat and faulthandler's dumps there; it forwards signals to torchrun and ends as it ends.
        ``python`` starts the monitor (the one the node's torch runs under: the workload's package is there).
        """
        torchrun = self.torchrun_command(
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=master_port,
            launcher=launcher,
            entry=entry,
            log_dir=log_dir,
            compile_cache_dir=compile_cache_dir,
        )
        workload = (*self.hang_bounds.args(), *self.workload_args)
        monitor = launcher_monitor_command(monitor_dir, python, node_rank, workload)
        return [*monitor, "--", *torchrun]

    def workload_env(self, log_dir: str = POD_LOG_DIR) -> dict[str, str]:
        """Environment every node's agent gets, the user's own on top.

        ``TORCHELASTIC_ERROR_FILE`` is the agent's own error file (:data:`AGENT_ERROR_FILE` in ``log_dir``,
        the agent's ``--log-dir``); torchrun gives each worker one of its own beside its logs.
        """
        subset = {NODE_IDS_ENV: ",".join(map(str, self.node_ids))} if self.node_ids else {}
        return {
            "PYTHONUNBUFFERED": "1",
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": LOG_PREFIX_TEMPLATE,
            "TORCHELASTIC_ERROR_FILE": f"{log_dir.rstrip('/')}/{AGENT_ERROR_FILE}",
            "HF_HUB_OFFLINE": "1",
            **self.env,
            **subset,
        }


# -- the workload's own checks of its input -------------------------------------------------------------
#
# ``--workload-args`` is parsed by the workload's own parser (:func:`rollcall_workload.rank.cli.parse_args`,
# which checks every value), and the fault-injection variables of ``--workload-env`` by its own parsing
# functions (:func:`rollcall_workload.faults.check_fault_injection`), so a command line or a variable the
# ranks would refuse is refused before a job starts, with the workload's own message. Neither module imports
# torch.


def check_args(args: Sequence[str]) -> None:
    """Raise ValueError with the workload's own message when its parser refuses ``args``."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # what --help would print
            cli.parse_args(list(args))
    except cli.CommandLineError as exc:
        raise ValueError(f"train.py refuses it: {exc}") from None
    except SystemExit:  # --help or --version: the parser printed and would end the process
        raise ValueError("train.py prints its help and exits instead of training") from None


def check_env(env: Mapping[str, str]) -> None:
    """Raise ValueError with the workload's own message when a fault-injection variable in ``env`` is bad."""
    faults.check_fault_injection(env)
