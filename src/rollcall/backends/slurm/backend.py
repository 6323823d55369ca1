"""The slurm backend: one sbatch job per run, one task per node, torchrun fanning out to the node's ranks.

render (:mod:`rollcall.backends.slurm.script`)
    ``manifests/slurm/job.sbatch.j2`` is filled from the JobSpec with typed values, each shell-quoted by the
    template environment itself: ``--nodes``, ``--ntasks-per-node=1``, ``--gpus-per-task`` (the ranks per node
    on nvidia), ``--exclusive --mem=0 --no-requeue``, the time limit (``--job-timeout`` plus a margin, so a
    job whose submitter was killed still ends), partition and account, ``--export=NONE`` and only the
    workload's environment, then QOS, reservation, constraint, node list and exclusions and the user's own
    ``--slurm-arg`` lines. Every node runs :meth:`JobSpec.torchrun_command` with Slurm's ``$SLURM_NNODES``
    and ``$SLURM_NODEID`` and the address of the allocation's first host; no NCCL or InfiniBand variable is
    set. With ``--container-image`` each node's task runs in that image through pyxis/enroot.
configuration
    The slurm.conf that Slurm's commands read is found and checked first (:mod:`.conf`): none, or one naming
    no controller, is a usage error before any Slurm command runs; each command then gets it as its
    ``SLURM_CONF``, so none looks its controller up in DNS.
submit
    ``sbatch --parsable``. The batch log and one output file per node (``srun --output=node-%n.out``) are
    written into the run's artifacts directory, which must be visible to the nodes (a shared file system):
    the suite writes a token there first, and the job's first step has every node read it
    (:func:`~rollcall.backends.slurm.script.shared_token`); a job that ends with
    :data:`~rollcall.backends.slurm.script.UNSHARED_EXIT` fails naming the nodes that did not see it.
wait
    ``scontrol show job`` once a second: fails at once on FAILED, NODE_FAIL, OUT_OF_MEMORY, TIMEOUT and the
    other end states (naming the node and task srun reported, and a node srun says failed), on a job PENDING
    past the grace period for a reason that cannot clear by waiting (:mod:`rollcall.backends.slurm.state`),
    held for it (:mod:`rollcall.backends.held`), and at the job timeout. Each node is on its way until its
    task's first line, told to the collector, and held by the start bound (:mod:`.arrivals`); the job's
    nodes are read every 10 s, and one lost (DOWN, NOT_RESPONDING) ends the run only once held past its
    bound (:mod:`.lost`).
discover
    ``scontrol show nodes``/``partition`` once per session (:func:`~rollcall.backends.slurm.state.discover`).
collect
    Each node's file is followed as it grows into the collector, under the node's Slurm name (:mod:`.follow`).
clean up
    ``scancel`` (pass, fail, timeout, Ctrl-C, SIGTERM) and a bounded wait until ``squeue`` no longer lists
    the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rollcall.backends import (
    BackendSettings,
    CleanupError,
    DiscoveryError,
    JobState,
    JobStatus,
    Marking,
    NodeMark,
    Placement,
    PlacementRequest,
    StopTest,
)
from rollcall.backends.held import Held, has_held
from rollcall.backends.marks import NodeMarks
from rollcall.backends.slurm import drains
from rollcall.backends.slurm.arrivals import Arrivals, start_bound_s
from rollcall.backends.slurm.conf import CONF_ENV, find_conf
from rollcall.backends.slurm.follow import Follower
from rollcall.backends.slurm.lost import NODE_LOOK_S, NODE_LOST_S, LostNodes
from rollcall.backends.slurm.script import (
    SECRETS_FILE,
    UNSHARED_EXIT,
    Settings,
    asks_exclusive,
    render,
    shared_token,
    unseen,
    write_secrets,
)
from rollcall.backends.slurm.state import (
    JobInfo,
    Partition,
    SlurmError,
    SlurmNode,
    discover,
    failed_nodes,
    slurmd_timeout_s,
    srun_errors,
)
from rollcall.collect import Collector
from rollcall.jobspec import JobSpec
from rollcall.options.slurm import SlurmOptions
from rollcall.options.values import OptionError

__all__ = ["SlurmBackend", "SlurmCommands", "SlurmError", "SlurmJob"]

log = logging.getLogger(__name__)

POLL_S = 1.0
#: ``scontrol show job`` failures in a row that end the wait (each is retried after ``POLL_S``).
MAX_QUERY_FAILURES = 10


# -- running Slurm's commands ---------------------------------------------------------------------------

Runner = Callable[[Sequence[str], float], str]
#: The client commands the wing runs: each must be on ``PATH`` before anything is submitted.
CLIENT_COMMANDS = ("sbatch", "squeue", "scontrol", "scancel")


@dataclass(frozen=True)
class SlurmCommands:
    """Runs Slurm's commands with ``SLURM_CONF`` set to the checked slurm.conf (never a DNS look-up)."""

    conf: Path

    @classmethod
    def configured(cls, environ: Mapping[str, str] | None = None) -> SlurmCommands:
        """The commands of the slurm.conf found; an :class:`~rollcall.options.values.OptionError` if none.

        Also one if a client command the wing runs (:data:`CLIENT_COMMANDS`) is not on ``PATH``: a usage error
        before anything is submitted, not a failed run.
        """
        conf = find_conf(environ).path
        path = (environ if environ is not None else os.environ).get("PATH")
        missing = [c for c in CLIENT_COMMANDS if shutil.which(c, path=path) is None]
        if missing:
            raise OptionError(
                f"--backend slurm: {conf} names a cluster, but Slurm's client commands "
                f"{', '.join(missing)} are not on PATH: install them (Debian's slurm-client, or your site's "
                "Slurm module) or put them on PATH, then run again"
            )
        return cls(conf)

    def __call__(self, argv: Sequence[str], timeout_s: float = 60.0) -> str:
        """Run one Slurm command; its stdout, or :class:`SlurmError` with what it said."""
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
                env={**os.environ, CONF_ENV: str(self.conf)},
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
    """Runs jobs through sbatch on the cluster that ``SLURM_CONF`` (or Slurm's default) names.

    Created without ``run``, it finds and checks that slurm.conf first (:func:`~.conf.find_conf`), before
    any Slurm command runs.
    """

    settings: Settings = field(default_factory=Settings)
    pending_grace_s: float = 60.0
    cleanup_timeout_s: float = 60.0
    poll_s: float = POLL_S
    progress: Callable[[str], None] | None = None
    #: Slurm's commands; by default those of the slurm.conf found (checked: a usage error without one).
    run: Runner = field(default_factory=SlurmCommands.configured)
    name: str = "slurm"
    unit: str = "node"
    usable: list[str] | None = None
    #: ``--drain-unfit``: drain unfit nodes, resume fit ones rollcall drained (:mod:`.drains`).
    drain: bool = False
    #: How often the job's nodes are read while it runs, and how long a lost state must hold (:mod:`.lost`).
    node_look_s: float = NODE_LOOK_S
    node_lost_s: float = NODE_LOST_S
    #: The marks it makes on nodes (:class:`~rollcall.backends.MarksNodes`): drains.
    MARKS: ClassVar[tuple[str, ...]] = ("drain",)

    @classmethod
    def from_options(cls, options: SlurmOptions, session: BackendSettings) -> SlurmBackend:
        """The backend of its section of the options and what every backend is given.

        With ``--drain-unfit``, an :class:`OptionError` where this user may not drain nodes, before any run.
        """
        backend = cls(
            Settings.from_options(options),
            session.unschedulable_grace_s,
            progress=session.progress,
            run=SlurmCommands.configured(),
            drain=session.marks.drain,
        )
        if backend.drain and (why := drains.missing_rights(backend.run)) is not None:
            raise OptionError(why)
        return backend

    @classmethod
    def check_config(cls, options: SlurmOptions, session: BackendSettings) -> None:
        """The slurm.conf Slurm's commands read names a controller (:func:`.conf.find_conf`).

        With ``--drain-unfit``, this user may drain and resume nodes (:func:`.drains.missing_rights`).
        """
        run = SlurmCommands.configured()
        if session.marks.drain and (why := drains.missing_rights(run)) is not None:
            raise OptionError(why)

    def mark_nodes(self, marks: Sequence[NodeMark], how: Marking) -> drains.Drained:
        """``--drain-unfit``: drain each unfit node, resume each fit one rollcall drained (:mod:`.drains`).

        A maintenance hold of the run's own ``--slurm-reservation`` is no one else's: its nodes are marked.
        """
        reservations = self.settings.reservation.split(",") if self.settings.reservation else ()
        return drains.mark_nodes(self.run, marks, how, SlurmError, reservations)

    @classmethod
    def current_marks(cls, options: SlurmOptions, session: BackendSettings) -> list[NodeMarks]:
        """``rollcall nodes``: the nodes rollcall drained (:mod:`.drains`)."""
        return drains.current_drains(cls.from_options(options, session).run)

    @classmethod
    def clear_marks(
        cls, options: SlurmOptions, session: BackendSettings, names: Sequence[str]
    ) -> drains.Drained:
        """``rollcall nodes --clear``: resume the nodes rollcall drained, never another's drain.

        Raises:
            SlurmError: this user lacks Slurm's operator rights (the message says how to get them).
        """
        run = cls.from_options(options, session).run
        missing = drains.missing_rights(run)
        if missing is not None:
            said = missing.replace("--drain-unfit drains and resumes", "rollcall nodes --clear resumes")
            raise SlurmError(said)
        return drains.clear_drains(run, names, SlurmError)

    @classmethod
    def render_run(
        cls,
        options: SlurmOptions,
        session: BackendSettings,
        request: PlacementRequest,
        spec_of: Callable[[Placement], JobSpec],
        workdir: Path,
    ) -> str:
        """The run's sbatch script, without contacting Slurm: the layout must be given."""
        if request.accelerator == "auto":
            raise ValueError(
                "--accelerator auto needs discovery on the cluster; pass --accelerator nvidia|neuron|cpu"
            )
        if request.procs_per_node is None and request.accelerator != "cpu":
            raise ValueError(
                f"--accelerator {request.accelerator}: pass --procs-per-node (the devices of each node)"
            )
        placement = Placement(request.accelerator, request.procs_per_node or 1)  # as discovery gives it
        spec = spec_of(placement).outwaiting(0.0)  # as launch() renders it
        return render(spec, Settings.from_options(options), workdir / "slurm")

    def discover(self, request: PlacementRequest) -> Placement:
        """Read the nodes and partitions once and choose; :class:`DiscoveryError` when too few are usable.

        With ``--drain-unfit`` and ``--slurm-reservation``, the reservation's nodes that rollcall drained are
        resumed first, for a re-check there (:func:`.drains.resume_for_recheck`).
        """
        if self.drain and self.settings.reservation:
            for reservation in self.settings.reservation.split(","):
                resumed = drains.resume_for_recheck(self.run, reservation)
                if resumed:
                    names = ", ".join(resumed)
                    self._say(f"slurm: resumed {names} (rollcall drained them) to re-check in {reservation}")
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
            want=request.nodes,
            accelerator=request.accelerator,
            partition=self.settings.partition,
            procs_per_node=request.procs_per_node,
        )
        self._say(f"slurm: {placement.description}")
        return placement

    def launch(self, spec: JobSpec, collector: Collector) -> SlurmJob:
        """Render the script and submit it; each node's output is followed once the job runs."""
        if self.usable is not None and spec.nodes > len(self.usable):
            raise DiscoveryError(f"nothing submitted: need {spec.nodes} node(s), {len(self.usable)} usable")
        out = collector.directory / "slurm"
        out.mkdir(parents=True, exist_ok=True)
        spec = spec.outwaiting(0.0)  # the nodes up wait at the rendezvous for one on its way (.arrivals)
        script = render(spec, self.settings, out)
        token_file, token = shared_token(spec, out)
        token_file.write_text(f"{token}\n")
        write_secrets(spec, out)  # the user's alone, read and removed by the script (never in it)
        path = out / "job.sbatch"
        path.write_text(script)
        arrivals = Arrivals(spec.nodes, start_bound_s(spec), self.settings.container_image)
        job = SlurmJob(self, spec, collector, out, exclusive=asks_exclusive(script), arrivals=arrivals)
        try:
            job.job_id = self.run(["sbatch", "--parsable", str(path)], 60).strip().split(";")[0]
        except BaseException:
            (out / SECRETS_FILE).unlink(missing_ok=True)
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


@dataclass
class SlurmJob:
    """One submitted job."""

    backend: SlurmBackend
    spec: JobSpec
    collector: Collector
    out_dir: Path
    job_id: str = ""
    hosts: list[str] = field(default_factory=list)
    #: Its sbatch script asks ``--exclusive``: the job has its nodes, every GPU of them, to itself.
    exclusive: bool = False
    #: Each node's way into the roll call's step (:mod:`.arrivals`); by default the spec's, without an image.
    arrivals: Arrivals | None = None
    _followers: list[Follower] = field(default_factory=list)
    _cleaned: bool = False
    _lost: LostNodes | None = None
    _looked: float = -float("inf")

    def __post_init__(self) -> None:
        if self.arrivals is None:
            self.arrivals = Arrivals(self.spec.nodes, start_bound_s(self.spec))

    def info(self) -> JobInfo | None:
        """The job as slurmctld sees it now; None once it no longer knows the job."""
        try:
            out = self.backend.run(["scontrol", "show", "job", "-o", self.job_id], 30)
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return None
            raise
        return JobInfo.parse(out)

    def wait(self, timeout_s: float, stop: StopTest | None = None) -> JobStatus:
        """Poll the job until it ends, is stuck past the grace period, or ``timeout_s`` passes.

        ``stop`` is re-tested at every poll; a reason it gives ends the wait as ``STOPPED`` (clean-up cancels
        the job).
        """
        deadline = time.monotonic() + timeout_s
        stuck: Held[str] = Held(self.backend.pending_grace_s)  # one key: the job, by its pending reason
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
            late = self._arrivals(info) or self._nodes(info)
            if late is not None:
                return self._status(late)
            reason = stop() if stop is not None else None
            if reason:
                return self._status(
                    JobStatus(JobState.STOPPED, f"{reason}; slurm job {self.job_id} is cancelled")
                )
            now = time.monotonic()
            holding = stuck.see("job", info.reason.split(",")[0] if info.stuck else None, now)
            grace = self.backend.pending_grace_s
            if holding is not None and has_held(holding):
                return self._status(
                    JobStatus(
                        JobState.FAILED,
                        f"slurm job {self.job_id} stayed PENDING for {grace:g}s with reason "
                        f"{info.reason}, which waiting does not clear; cancelled",
                    )
                )
            if now >= deadline:
                where = f" on {info.nodes}" if info.nodes else ""
                assert self.arrivals is not None
                ways = self.arrivals.where(self.hosts) if info.state != "PENDING" else ""
                return self._status(
                    JobStatus(
                        JobState.TIMED_OUT,
                        f"job did not finish within {timeout_s:g}s; slurm job {self.job_id} was "
                        f"{info.state}{where} and is cancelled" + (f"; {ways}" if ways else ""),
                    )
                )
            time.sleep(min(self.backend.poll_s, max(0.0, deadline - now)))

    def _arrivals(self, info: JobInfo) -> JobStatus | None:
        """One look at each node's way into the roll call's step, told to the collector (:mod:`.arrivals`).

        A node whose task has not begun is on its way: the roll call names no node for silence meanwhile.
        One still on its way past the start bound ends the run, named with what it waited for.
        """
        arrivals = self.arrivals
        assert arrivals is not None
        now = time.monotonic()
        if info.state != "PENDING" and arrivals.step_since is None:  # the script's lines until the step
            batch = self.out_dir / "batch.out"
            with contextlib.suppress(OSError):  # not there yet: the batch host has not opened it
                arrivals.look(batch.read_text(errors="replace"), (), now)
        arrivals.look("", (i for i, f in enumerate(self._followers) if f.began.is_set()), now)
        self.collector.on_the_way(arrivals.on_the_way())
        late = arrivals.overdue(now, self.hosts)
        if late is None:
            return None
        return JobStatus(JobState.FAILED, f"{late.line()}; slurm job {self.job_id} is cancelled")

    def _nodes(self, info: JobInfo) -> JobStatus | None:
        """Every ``node_look_s`` while the job runs, a look at its nodes (:mod:`.lost`).

        A node whose lost state has held past its bound ends the run, named; a look that fails is skipped.
        """
        now = time.monotonic()
        if info.state != "RUNNING" or not info.nodes or now - self._looked < self.backend.node_look_s:
            return None
        self._looked = now
        run = self.backend.run
        if self._lost is None:
            try:
                timeout = slurmd_timeout_s(run(["scontrol", "show", "config"], 30))
            except SlurmError as exc:
                log.warning("%s (SlurmdTimeout taken as Slurm's default)", exc)
                timeout = slurmd_timeout_s("")
            self._lost = LostNodes(timeout, self.backend.node_lost_s)
        try:
            out = run(["scontrol", "show", "node", "-o", info.nodes], 30)
        except SlurmError as exc:
            log.warning("%s (the job's nodes are read again at the next look)", exc)
            return None
        for change in self._lost.look([SlurmNode.parse(x) for x in out.splitlines() if x], now):
            self.backend._say(change)
        lost = self._lost.lost(self.hosts)
        return JobStatus(JobState.FAILED, f"{lost}; slurm job {self.job_id} is cancelled") if lost else None

    def _ended(self, info: JobInfo, state: JobState) -> JobStatus:
        if state is JobState.SUCCEEDED:
            return JobStatus(state)
        self._stop_followers()
        batch = self.out_dir / "batch.out"
        said = batch.read_text(errors="replace") if batch.is_file() else None
        unshared = self._unshared(info, said)
        if unshared:
            return JobStatus(state, unshared)
        errors = srun_errors(said) if said is not None else []
        why = f"slurm job {self.job_id} ended {info.state} (exit code {info.exit_code}, reason {info.reason})"
        if errors:
            why += "; srun: " + "; ".join(errors)
        hosts = self.hosts
        lost = [
            (f"node {hosts.index(n)} (slurm node {n})" if n in hosts else f"slurm node {n}")
            + f" lost: srun says Node failure on {n}"
            for n in failed_nodes(said or "")
        ]
        if self._lost is not None and (seen := self._lost.seen(hosts)):
            lost.append(seen)
        return JobStatus(state, "; ".join([why, *lost]))

    def _unshared(self, info: JobInfo, batch_log: str | None) -> str:
        """Why the job ended, when the artifacts directory is not on storage every node shares; else empty.

        The script's first step ended it (:data:`UNSHARED_EXIT`), naming the nodes that did not see the token;
        or the batch host could not open the batch log there (``JobLaunchFailure``, no batch log here).
        """
        fix = "point --artifacts-dir at a shared file system"
        where = f"the artifacts directory {self.out_dir}"
        if info.exit_code.split(":")[0] == str(UNSHARED_EXIT):
            nodes = unseen(batch_log or "")
            named = ", ".join(node if host in (node, "") else f"{node} (host {host})" for node, host in nodes)
            who = (
                f"node(s) {named} do not see it"
                if named
                else "a node does not see it (the batch log names none)"
            )
            return (
                f"{where} is not on storage every node shares: {who}; {fix} "
                f"(slurm job {self.job_id} ended at its first step, exit code {info.exit_code})"
            )
        if info.reason == "JobLaunchFailure" and batch_log is None:
            host = info.batch_host or "its batch host"
            return (
                f"{where} is likely not on storage every node shares: slurm job {self.job_id} failed to "
                f"launch on {host} (JobLaunchFailure), which wrote no batch log there; {fix}"
            )
        return ""

    def _status(self, status: JobStatus) -> JobStatus:
        """``status`` with where each node's log is, which Slurm node each index ran on, if it owned them.

        The job owns its nodes where its script asked ``--exclusive`` (:attr:`JobStatus.owns_nodes`).
        """
        self._stop_followers()
        status.owns_nodes = self.exclusive
        for index, host in enumerate(self.hosts):
            status.details.append(f"node {index} ran on slurm node {host} (log {host}.log)")
        status.details.append(f"sbatch script and Slurm's own output: {self.out_dir}")
        return status

    def _follow(self, nodelist: str) -> None:
        self.hosts = self.backend.run(["scontrol", "show", "hostnames", nodelist], 30).split()
        for index, host in enumerate(self.hosts):
            follower = Follower(self.out_dir / f"node-{index}.out", self.collector.sink(host))
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
                    left = f"slurm job {self.job_id}"
                    raise CleanupError(
                        f"{left} is still listed by squeue {self.backend.cleanup_timeout_s:g}s after scancel",
                        [left],
                    )
                time.sleep(self.backend.poll_s)
        finally:
            self._stop_followers()
            (self.out_dir / SECRETS_FILE).unlink(missing_ok=True)  # a job that never began left it

    def listed(self) -> bool:
        """Whether squeue still lists the job (pending, running or completing)."""
        try:
            return bool(self.backend.run(["squeue", "-h", "-j", self.job_id, "-o", "%i"], 30).strip())
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return False
            raise
