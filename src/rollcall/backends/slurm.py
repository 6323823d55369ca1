"""The slurm backend: one sbatch job per run, one task per node, torchrun fanning out to the node's ranks.

render
    ``manifests/slurm/job.sbatch.j2`` is filled from the JobSpec with typed values, each shell-quoted by the
    template environment itself: ``--nodes``, ``--ntasks-per-node=1``, ``--gpus-per-task`` (the ranks per
    node on nvidia), ``--exclusive --mem=0``, the time limit (``--job-timeout`` plus a margin, so a job whose
    submitter was killed still ends), partition and account, ``--export=NONE`` and only the workload's
    environment. Every node runs :meth:`JobSpec.torchrun_command` with Slurm's ``$SLURM_NNODES`` and
    ``$SLURM_NODEID`` and the address of the allocation's first host; no NCCL or InfiniBand variable is set.
    With ``--container-image`` each node's task runs in that image through pyxis/enroot.
submit
    ``sbatch --parsable``. The batch log and one output file per node (``srun --output=node-%n.out``) are
    written into the run's artifacts directory, which must be visible to the nodes (a shared file system).
wait
    ``scontrol show job`` once a second: fails at once on FAILED, NODE_FAIL, OUT_OF_MEMORY, TIMEOUT and the
    other end states (naming the node and task srun reported), on a job PENDING past the grace period for a
    reason that cannot clear by waiting (:data:`STUCK_REASONS`), and at the job timeout.
collect
    Each node's file is followed as it grows into the collector, under the node's Slurm name.
clean up
    ``scancel`` (pass, fail, timeout, Ctrl-C, SIGTERM) and a bounded wait until ``squeue`` no longer lists
    the job.
"""

from __future__ import annotations

import logging
import math
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from rollcall.backends import JobState, JobStatus, Placement
from rollcall.collect import Collector, LogSink
from rollcall.discovery import DiscoveryError, report
from rollcall.jobspec import IMAGE_SCRIPT, POD_LOG_DIR, Accelerator, JobSpec
from rollcall.options import Options

log = logging.getLogger(__name__)

#: The workload script in this repository, for clusters that run it from a shared file system.
REPO_SCRIPT = Path(__file__).resolve().parents[3] / "images" / "bert-training" / "train.py"
TEMPLATE = "slurm/job.sbatch.j2"
POLL_S = 1.0
#: ``scontrol show job`` failures in a row that end the wait (each is retried after ``POLL_S``).
MAX_QUERY_FAILURES = 10
#: Seconds past ``--job-timeout`` that Slurm's own time limit allows (the suite's deadline comes first).
TIME_LIMIT_MARGIN_S = 60.0
#: torchrun arguments taken from Slurm on each node, not from the JobSpec.
FROM_SLURM = {
    "--nnodes=": "$SLURM_NNODES",
    "--node-rank=": "$SLURM_NODEID",
    "--master-addr=": "$MASTER_ADDR",
    "--master-port=": "$MASTER_PORT",
}
#: Each job's rendezvous port is ``PORT_BASE + job id % PORT_SPAN`` (unprivileged, below the ephemeral range).
PORT_BASE, PORT_SPAN = 20000, 12000

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


class SlurmError(RuntimeError):
    """A Slurm command failed; the message has the command and what it said."""


# -- parsing -----------------------------------------------------------------------------------------------

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
                + report(want, [], rejected | {n.name: "no gpu GRES" for n in usable}, None)
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
        raise DiscoveryError(report(want, [n.name for n in usable], rejected, accel))
    idle = sum(1 for n in usable if "IDLE" in n.states)
    offer = f"{need} GPU(s)" if accel == "nvidia" else f"{usable[0].cpus} CPU(s)"
    description = (
        f"{len(usable)} usable node(s) ({idle} idle) in partition {','.join(names)}; "
        f"each node's task gets {offer}; {need} rank(s) per node"
    )
    return Placement(accel, need, {}, None, description), [n.name for n in usable], rejected


# -- the script -------------------------------------------------------------------------------------------


class Shell(str):
    """Text that is already shell syntax; the template puts it in unquoted."""

    __slots__ = ()


def _shell_value(value: object) -> str:
    if isinstance(value, Shell):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"the sbatch template takes str and int values, got {type(value).__name__}")
    return shlex.quote(str(value))


def shell_word(arg: str) -> str:
    """``arg`` quoted for bash; the values :data:`FROM_SLURM` names become Slurm's variables."""
    for prefix, var in FROM_SLURM.items():
        if arg.startswith(prefix):
            return f'{prefix}"{var}"'
    return shlex.quote(arg)


def time_limit(seconds: float) -> str:
    """Slurm's ``--time`` as ``D-HH:MM:SS``, rounded up to a whole second."""
    total = max(1, math.ceil(seconds))
    days, rest = divmod(total, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


@dataclass(frozen=True)
class Settings:
    """What the script needs besides the JobSpec.

    Attributes:
        partition: ``--partition`` (one or several, comma-separated); the cluster's default when None.
        account: ``--account``.
        container_image: run each node's task in this image (pyxis/enroot); torchrun and the workload are
            then the image's (``torchrun``, ``/workspace/train.py``).
        launcher: how torchrun is started without a container image (default: this Python's torch).
        script: the workload's path on the nodes without a container image (default: this checkout's).
        margin_s: seconds Slurm's time limit allows past the job timeout.
    """

    partition: str | None = None
    account: str | None = None
    container_image: str | None = None
    launcher: tuple[str, ...] = (sys.executable, "-m", "torch.distributed.run")
    script: str = str(REPO_SCRIPT)
    margin_s: float = TIME_LIMIT_MARGIN_S

    @classmethod
    def from_options(cls, options: Options) -> Settings:
        """From ``--slurm-partition``, ``--slurm-account`` and ``--container-image``."""
        return cls(options.slurm_partition, options.slurm_account, options.container_image)


def _template_source(name: str) -> str:
    from rollcall.manifests import manifests_dir

    return (manifests_dir() / name).read_text()


_ENV = jinja2.Environment(
    loader=jinja2.FunctionLoader(_template_source),
    undefined=jinja2.StrictUndefined,
    finalize=_shell_value,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)


_PATH_SAFE = re.compile(r"^[\w@%+=:,./-]+$")


def render(spec: JobSpec, settings: Settings, out_dir: Path) -> str:
    """The sbatch script of ``spec``; ``out_dir`` (absolute, shared with the nodes) gets its logs."""
    out = out_dir.resolve()
    if not _PATH_SAFE.match(str(out)):
        raise ValueError(
            f"the artifacts directory {out} has characters #SBATCH lines cannot carry; "
            "use --artifacts-dir with letters, digits and / . _ - only"
        )
    if settings.container_image:
        launcher: Sequence[str] = ("torchrun",)
        script, log_dir = IMAGE_SCRIPT, POD_LOG_DIR
    else:
        launcher, script, log_dir = settings.launcher, settings.script, str(out / "ranks")
    argv = spec.torchrun_command(
        node_rank="$SLURM_NODEID",
        master_addr="$MASTER_ADDR",
        launcher=launcher,
        script=script,
        log_dir=log_dir,
    )
    command = "exec " + " ".join(shell_word(a) for a in argv)
    env = spec.workload_env()
    threads = spec.accelerator == "cpu" and "OMP_NUM_THREADS" not in env
    values: dict[str, Any] = {
        "name": spec.name,
        "nodes": spec.nodes,
        "procs_per_node": spec.procs_per_node,
        "accelerator": spec.accelerator,
        "gpus_per_task": spec.procs_per_node if spec.accelerator == "nvidia" else 0,
        "time_limit": time_limit(spec.job_timeout_s + settings.margin_s),
        "partition": settings.partition,
        "account": settings.account,
        "batch_log": str(out / "batch.out"),
        "node_log": str(out / "node-%n.out"),
        "env": sorted(env.items()),
        "omp_threads_per": spec.procs_per_node if threads else 0,
        "container_image": settings.container_image,
        "command": command,
        "port_base": PORT_BASE,
        "port_span": PORT_SPAN,
    }
    return _ENV.get_template(TEMPLATE).render(values)


# -- running Slurm's commands ---------------------------------------------------------------------------

Runner = Callable[[Sequence[str], float], str]


def run_command(argv: Sequence[str], timeout_s: float = 60.0) -> str:
    """Run one Slurm command; its stdout, or :class:`SlurmError` with what it said."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: install Slurm's client commands (slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shlex.join(argv)} did not answer within {timeout_s:g}s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise SlurmError(f"{shlex.join(argv)} exited {done.returncode}: {said}")
    return done.stdout


# -- the backend -------------------------------------------------------------------------------------------


@dataclass
class SlurmBackend:
    """Runs jobs through sbatch on the cluster that ``SLURM_CONF`` (or Slurm's default) names."""

    settings: Settings = field(default_factory=Settings)
    pending_grace_s: float = 60.0
    cleanup_timeout_s: float = 60.0
    poll_s: float = POLL_S
    progress: Callable[[str], None] | None = None
    run: Runner = run_command
    name: str = "slurm"
    usable: list[str] | None = None

    @classmethod
    def from_options(cls, options: Options, progress: Callable[[str], None] | None = None) -> SlurmBackend:
        """The backend of the session's options."""
        return cls(Settings.from_options(options), options.unschedulable_grace, progress=progress)

    def discover(self, options: Options) -> Placement:
        """Read the nodes and partitions once and choose; :class:`DiscoveryError` when too few are usable."""
        nodes = [
            SlurmNode.parse(x) for x in self.run(["scontrol", "show", "nodes", "-o"], 60).splitlines() if x
        ]
        parts = [
            Partition.parse(x)
            for x in self.run(["scontrol", "show", "partition", "-o"], 60).splitlines()
            if x
        ]
        placement, self.usable, _ = discover(
            nodes,
            parts,
            want=options.nodes,
            accelerator=options.accelerator,
            partition=self.settings.partition,
            procs_per_node=options.procs_per_node,
        )
        self._say(f"slurm: {placement.description}")
        return placement

    def launch(self, spec: JobSpec, collector: Collector) -> SlurmJob:
        """Render the script and submit it; each node's output is followed once the job runs."""
        if self.usable is not None and spec.nodes > len(self.usable):
            raise DiscoveryError(f"nothing submitted: need {spec.nodes} node(s), {len(self.usable)} usable")
        out = collector.directory / "slurm"
        out.mkdir(parents=True, exist_ok=True)
        script = render(spec, self.settings, out)
        path = out / "job.sbatch"
        path.write_text(script)
        job = SlurmJob(self, spec, collector, out)
        try:
            job.job_id = self.run(["sbatch", "--parsable", str(path)], 60).strip().split(";")[0]
        except BaseException:
            # Interrupted (Ctrl-C, a timeout) after slurmctld took the job: cancel it by its unique name.
            try:
                self.run(["scancel", "--name", spec.name], 30)
            except SlurmError as exc:
                log.warning("could not cancel job %s by name: %s", spec.name, exc)
            raise
        self._say(f"slurm job {job.job_id} ({spec.name}) submitted: {spec.nodes} node(s)")
        return job

    def _say(self, line: str) -> None:
        log.info("%s", line)
        if self.progress is not None:
            self.progress(line)


class _Follower(threading.Thread):
    """Copies one node's output file into its sink as it grows, until stopped and read to the end."""

    def __init__(self, path: Path, sink: LogSink) -> None:
        super().__init__(daemon=True, name=f"rollcall-slurm-{path.name}")
        self.path, self.sink = path, sink
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self._copy()
        except ValueError:  # the collector closed the sink first (a run interrupted under --keep)
            return
        finally:
            self.sink.close()

    def _copy(self) -> None:
        while not self.path.exists():
            if self.stopping.wait(0.2) and not self.path.exists():
                return  # the job ended before this node wrote anything
        with self.path.open("rb") as f:
            while True:
                chunk = f.read(1 << 16)
                if chunk:
                    self.sink.write(chunk)
                    continue
                if self.stopping.is_set():  # stopped, at the end: read what came meanwhile
                    if rest := f.read():
                        self.sink.write(rest)
                    return
                self.stopping.wait(0.2)


@dataclass
class SlurmJob:
    """One submitted job."""

    backend: SlurmBackend
    spec: JobSpec
    collector: Collector
    out_dir: Path
    job_id: str = ""
    hosts: list[str] = field(default_factory=list)
    _followers: list[_Follower] = field(default_factory=list)
    _cleaned: bool = False

    def info(self) -> JobInfo | None:
        """The job as slurmctld sees it now; None once it no longer knows the job."""
        try:
            out = self.backend.run(["scontrol", "show", "job", "-o", self.job_id], 30)
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return None
            raise
        return JobInfo.parse(out)

    def wait(self, timeout_s: float) -> JobStatus:
        """Poll the job until it ends, is stuck past the grace period, or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        stuck_since: float | None = None
        last = ""
        failures = 0
        while True:
            try:
                info = self.info()
                failures = 0
            except SlurmError as exc:  # slurmctld busy or restarting: keep asking, within bounds
                failures += 1
                if failures >= MAX_QUERY_FAILURES or time.monotonic() >= deadline:
                    raise
                log.warning("%s (retrying)", exc)
                time.sleep(self.backend.poll_s)
                continue
            if info is None:
                return self._status(JobStatus(JobState.FAILED, f"slurm job {self.job_id} is no longer known"))
            if info.nodes and not self.hosts and info.state != "PENDING":
                self._follow(info.nodes)
            seen = f"{info.state} ({info.reason})"
            if seen != last:
                self.backend._say(
                    f"slurm job {self.job_id}: {seen}" + (f" on {info.nodes}" if info.nodes else "")
                )
                last = seen
            ended = info.ended
            if ended is not None:
                return self._status(self._ended(info, ended))
            now = time.monotonic()
            stuck_since = (stuck_since or now) if info.stuck else None
            grace = self.backend.pending_grace_s
            if stuck_since is not None and now - stuck_since >= grace:
                return self._status(
                    JobStatus(
                        JobState.FAILED,
                        f"slurm job {self.job_id} stayed PENDING for {grace:g}s with reason "
                        f"{info.reason}, which waiting does not clear; cancelled",
                    )
                )
            if now >= deadline:
                where = f" on {info.nodes}" if info.nodes else ""
                return self._status(
                    JobStatus(
                        JobState.TIMED_OUT,
                        f"job did not finish within {timeout_s:g}s; slurm job {self.job_id} was "
                        f"{info.state}{where} and is cancelled",
                    )
                )
            time.sleep(min(self.backend.poll_s, max(0.0, deadline - now)))

    def _ended(self, info: JobInfo, state: JobState) -> JobStatus:
        if state is JobState.SUCCEEDED:
            return JobStatus(state)
        self._stop_followers()
        batch = self.out_dir / "batch.out"
        errors = srun_errors(batch.read_text(errors="replace")) if batch.is_file() else []
        why = f"slurm job {self.job_id} ended {info.state} (exit code {info.exit_code}, reason {info.reason})"
        if errors:
            why += "; srun: " + "; ".join(errors)
        return JobStatus(state, why)

    def _status(self, status: JobStatus) -> JobStatus:
        """``status`` with where each node's log is, and which Slurm node each node index ran on."""
        self._stop_followers()
        for index, host in enumerate(self.hosts):
            status.details.append(f"node {index} ran on slurm node {host} (log {host}.log)")
        status.details.append(f"sbatch script and Slurm's own output: {self.out_dir}")
        return status

    def _follow(self, nodelist: str) -> None:
        self.hosts = self.backend.run(["scontrol", "show", "hostnames", nodelist], 30).split()
        for index, host in enumerate(self.hosts):
            follower = _Follower(self.out_dir / f"node-{index}.out", self.collector.sink(host))
            follower.start()
            self._followers.append(follower)

    def _stop_followers(self) -> None:
        for follower in self._followers:
            follower.stopping.set()
        for follower in self._followers:
            follower.join(timeout=30)

    def cleanup(self) -> None:
        """Cancel the job and wait (bounded) until squeue no longer lists it; safe to call twice."""
        if self._cleaned or not self.job_id:
            self._stop_followers()
            return
        self._cleaned = True
        try:
            self.backend.run(["scancel", self.job_id], 30)
            deadline = time.monotonic() + self.backend.cleanup_timeout_s
            while self.listed():
                if time.monotonic() > deadline:
                    log.warning("slurm job %s still listed by squeue after scancel", self.job_id)
                    break
                time.sleep(self.backend.poll_s)
        finally:
            self._stop_followers()

    def listed(self) -> bool:
        """Whether squeue still lists the job (pending, running or completing)."""
        try:
            return bool(self.backend.run(["squeue", "-h", "-j", self.job_id, "-o", "%i"], 30).strip())
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return False
            raise
