"""The local backend: the Job's torchrun command run as N simulated nodes on this machine.

Each simulated node is one torchrun agent, started with :meth:`JobSpec.node_command` as a Slurm task would
run it, with ``--node-rank i`` and master ``127.0.0.1:<a free port>``, behind the node's monitor
(``python -m rollcall_workload.node.monitor --dir <node-i-monitor> -- <torchrun ...>``: one process per node,
in the agent's process group and session, which starts the agent, ends as it ends, and writes what it sees of
the node's ranks to the same output). Its output goes to its own log sink, as a pod's log would.
On cuda the visible GPUs are split between the nodes. Every process carries the
run's id in its environment, so a timeout, a failure, Ctrl-C or SIGTERM ends all of them, workers included;
each agent gets SIGTERM from the kernel if the suite is killed outright, and what still escapes is ended at
the next session's start (:mod:`rollcall.procs`).
"""

from __future__ import annotations

import io
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rollcall import procs
from rollcall.backends import (
    BackendSettings,
    CleanupError,
    JobState,
    JobStatus,
    Placement,
    PlacementRequest,
    StopTest,
)
from rollcall.collect import Collector, LogSink
from rollcall.jobspec import PACKAGE_ENTRY, JobSpec
from rollcall.ranges import named
from rollcall.secrets import no_kubernetes_secret

#: Seconds between two tests of :meth:`LocalJob.wait`'s ``stop``.
STOP_POLL_S = 1.0
#: The workload script in this repository, run in place of the image's copy.
#: train.py keeps its compiler caches in the directory this variable names.
COMPILE_CACHE_ENV = "ROLLCALL_COMPILE_CACHE"


def compile_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where local runs keep the workload's compiler caches: ``compile`` under rollcall's cache directory.

    That is ``$ROLLCALL_CACHE_DIR``, else ``$XDG_CACHE_HOME/rollcall``, else ``~/.cache/rollcall`` (the
    directory ``hack/cluster.sh`` keeps its binaries in), so a second run on this machine compiles from cache.
    """
    root = environ.get("ROLLCALL_CACHE_DIR") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rollcall"
    )
    return Path(root) / "compile"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES``, else those ``nvidia-smi -L`` lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


@dataclass
class LocalBackend:
    """Runs jobs as local torchrun agents."""

    python: str = sys.executable
    script: Path | None = None
    name: str = "local"
    unit: str = "node"

    @classmethod
    def from_options(cls, options: None, session: BackendSettings) -> LocalBackend:
        """The local backend: it is given no section of the options (what it runs is the JobSpec's)."""
        return cls()

    def discover(self, request: PlacementRequest) -> Placement:
        """Local discovery: cuda when GPUs are visible (split between the simulated nodes), else cpu."""
        accel = request.accelerator
        gpus = visible_gpus() if accel in ("auto", "nvidia") else []
        if accel == "auto":
            accel = "nvidia" if gpus else "cpu"
        if accel == "neuron":
            return Placement("neuron", request.procs_per_node or 1, description="local xla")
        if accel == "nvidia":
            if not gpus:
                raise RuntimeError("--accelerator nvidia: no GPU is visible here (nvidia-smi -L lists none)")
            per_node = request.procs_per_node or max(1, len(gpus) // request.nodes)
            return Placement("nvidia", per_node, description=f"{len(gpus)} local GPU(s)")
        return Placement("cpu", request.procs_per_node or 1, description="local cpu")

    def launch(self, spec: JobSpec, collector: Collector) -> LocalJob:
        """Start one agent per simulated node."""
        if self.script is not None and not self.script.is_file():
            raise FileNotFoundError(f"workload script {self.script} not found")
        no_kubernetes_secret(spec.secrets, "local")  # the others stay in the processes' environment only
        port = free_port()
        gpus = visible_gpus() if spec.accelerator == "nvidia" else []
        if spec.accelerator == "nvidia" and len(gpus) < spec.world_size:
            raise RuntimeError(
                f"{spec.nodes} node(s) x {spec.procs_per_node} GPU(s) need {spec.world_size} GPUs, "
                f"but {len(gpus)} are visible; lower --nodes or --procs-per-node"
            )
        run_id = f"{spec.name}-{os.getpid()}-{port}"
        threads = {}
        if spec.accelerator == "cpu" and "OMP_NUM_THREADS" not in {**os.environ, **spec.env}:
            # Every simulated node shares this host: split its cores among all the ranks, not per node.
            threads = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // spec.world_size))}
        job = LocalJob(spec=spec, run_id=run_id)
        try:
            for node in range(spec.nodes):
                log_dir = collector.directory / f"node-{node}-ranks"
                monitor_dir = collector.directory / f"node-{node}-monitor"
                workload = spec.workload_env(str(log_dir))
                env = {**os.environ, **threads, **workload, procs.RUN_ID_ENV: run_id}
                env.setdefault(COMPILE_CACHE_ENV, str(compile_cache_dir(os.environ)))  # the user's wins
                if gpus:
                    env["CUDA_VISIBLE_DEVICES"] = ",".join(
                        gpus[node * spec.procs_per_node : (node + 1) * spec.procs_per_node]
                    )
                cmd = spec.node_command(
                    monitor_dir=str(monitor_dir),
                    python=(self.python,),
                    node_rank=str(node),
                    master_addr="127.0.0.1",
                    master_port=port,
                    launcher=(self.python, "-m", "torch.distributed.run"),
                    entry=(str(self.script),) if self.script else PACKAGE_ENTRY,
                    log_dir=str(log_dir),
                )
                job.start(node, cmd, env, collector.sink(f"node-{node}"))
        except BaseException:
            job.cleanup()
            raise
        return job


@dataclass
class _Node:
    index: int
    proc: subprocess.Popen[bytes]
    reader: threading.Thread


@dataclass
class LocalJob:
    """The agents of one run."""

    spec: JobSpec
    run_id: str
    nodes: list[_Node] = field(default_factory=list)
    _exits: queue.Queue[tuple[int, int]] = field(default_factory=queue.Queue)
    _cleaned: bool = False

    def start(self, index: int, cmd: list[str], env: dict[str, str], sink: LogSink) -> None:
        """Start the agent of node ``index`` with its output going to ``sink``.

        It carries this suite process as its owner (:data:`~rollcall.procs.OWNER_ENV`) and gets SIGTERM when
        the thread starting it dies (:func:`~rollcall.procs.die_with_parent`).
        """
        proc = subprocess.Popen(
            procs.die_with_parent(cmd),
            env={**env, procs.OWNER_ENV: procs.owner_mark()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        reader = threading.Thread(
            target=self._pump, args=(index, proc, sink), daemon=True, name=f"rollcall-node-{index}"
        )
        reader.start()
        self.nodes.append(_Node(index, proc, reader))

    def _pump(self, index: int, proc: subprocess.Popen[bytes], sink: LogSink) -> None:
        stream = proc.stdout
        assert isinstance(stream, io.BufferedReader)
        try:
            while chunk := stream.read1(1 << 16):
                sink.write(chunk)
        finally:
            sink.close()
            self._exits.put((index, proc.wait()))

    def wait(self, timeout_s: float, stop: StopTest | None = None) -> JobStatus:
        """Wait for every agent; the first that exits non-zero fails the job and ends the others.

        ``stop`` is re-tested every :data:`STOP_POLL_S`; a reason it gives ends every process of the run. The
        run never owns its node: this machine's GPUs are anyone's (:attr:`JobStatus.owns_nodes`).
        """
        status = self._wait(timeout_s, stop)
        status.owns_nodes = False
        return status

    def _wait(self, timeout_s: float, stop: StopTest | None) -> JobStatus:
        deadline = time.monotonic() + timeout_s
        pending = {n.index for n in self.nodes}
        while pending:
            left = max(0.0, deadline - time.monotonic())
            try:
                index, code = self._exits.get(timeout=min(left, STOP_POLL_S) if stop else left)
            except queue.Empty:
                reason = stop() if stop is not None else None
                if reason:
                    self._stop()
                    return JobStatus(JobState.STOPPED, f"{reason}; {_stopped(pending)}")
                if time.monotonic() < deadline:
                    continue
                self._stop()
                return JobStatus(
                    JobState.TIMED_OUT,
                    f"job did not finish within {timeout_s:g}s; {named('node', pending)} still running "
                    f"{'was' if len(pending) == 1 else 'were'} killed",
                )
            pending.discard(index)
            if code != 0:
                self._stop()
                others = f"; {_stopped(pending)}" if pending else ""
                return JobStatus(
                    JobState.FAILED, f"node {index} (torchrun agent) exited with code {code}{others}"
                )
        return JobStatus(JobState.SUCCEEDED)

    def _stop(self) -> list[int]:
        left = procs.end_run(self.run_id)
        for node in self.nodes:
            node.reader.join(timeout=10)
        return left

    def cleanup(self) -> None:
        """End every process of the run (agents and workers), close the logs, and confirm none is left.

        Raises :class:`~rollcall.backends.CleanupError` naming each process of the run still alive after
        SIGTERM, SIGKILL and 10 s.
        """
        if self._cleaned:
            return
        self._cleaned = True
        left = self._stop()
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.kill()
            node.proc.wait()
        if left:
            named = [f"process {pid}" for pid in left]
            raise CleanupError(f"run {self.run_id} left {', '.join(named)} after SIGKILL", named)


def _stopped(nodes: set[int]) -> str:
    """``node 0 was stopped``, ``nodes 0-1 were stopped``."""
    return f"{named('node', nodes)} {'was' if len(nodes) == 1 else 'were'} stopped"
