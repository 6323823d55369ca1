"""Simulated fleets: a run's physical inputs driven through the suite's real decisions, on one clock.

A :class:`Plan` says only what a fleet does physically: when each node's command starts (or never), how long
each launcher and each rank take to import and set up, how long the first step compiles, each step's time,
pauses in Python and in C, a stall past the hang bound that recovers, brief uninterruptible sleeps of a
launcher, each node's clock offset and log latency, GPU events on GPUs no rank of the run uses, the backend it
runs under (its wing: local, Kubernetes, Slurm) and what that backend sees (a pod pulling its image, a node's
``Ready`` turning for a while, a Slurm node importing its image), and at most one fault. :func:`simulate`
turns it into what the real code sees and decides, with every clock injected (one simulated clock, ``t``, the
suite's; each node's wall clock is ``t`` plus its offset):

- each rank's real :class:`~rollcall_workload.rank.watchdog.Watchdog`, made as ``rank/run.py`` makes it (its
  imports and device setup held to S + J from its process's start, its real
  :class:`~rollcall_workload.rank.flight.FlightRecorder` reading the rank's record of its collectives,
  :mod:`tests.sim.records`), is told each phase and step as the workload tells it, and asked to :meth:`check`
  where its bound could run out (its dumps and records are its own);
- each node's real :class:`~rollcall_workload.node.launcher.LauncherWatch` is polled until its ranks are
  spawned, with the launcher's process state (``D`` now and then);
- each rank whose heartbeat stops (a pause in C, a stopped process) is looked at every second by the real
  :meth:`RankFiles.silence <rollcall_workload.node.ranks.RankFiles.silence>`;
- every line goes to the real parser at the time the suite would read it (its node's latency later; never,
  from a node cut off), and every second the backend's own look is taken (:mod:`tests.sim.wings`: the nodes
  on their way, a node's ``Ready`` held, a Slurm node's task begun) and then the runner's real decisions to
  end the job are asked (the checks' declared early stops, :func:`rollcall.judge.early_stops`, over the run
  as it stands); once the job ends, the real judge gives the verdict, knowing which check stopped it.

What is written directly, as the process would: the rank's own events (``start``, ``epoch_time``, ...), a
crash's error and its peers' echoes, the monitor's ``rank_process`` lines, faulthandler's dumps as the
monitor turns them into events, ``gpu_event`` lines (as the listener writes NVML's events), and pyxis's line
on a Slurm node importing its image.

:class:`Outcome` says what the verdict named and when; :func:`expected` what the bounds say it must name.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import random
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from rollcall.backends import JobState, JobStatus
from rollcall.backends.kubernetes.holds import READY_HOLD_S
from rollcall.backends.slurm.arrivals import start_bound_s
from rollcall.checks.blame import error_blame
from rollcall.checks.runview import RunView
from rollcall.evidence.clocks import Bounds
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.evidence.gpu_events import BESIDE_BEFORE_S
from rollcall.evidence.hangs import SPEAKS_FIRST_S
from rollcall.jobspec import JobSpec
from rollcall.judge import CHECKS, early_stops, judge
from rollcall.nodeverdicts import bound_of, merged, of_verdict, with_breaker
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed, Owner, Verdict
from rollcall_workload.contract import (
    CONTRACT_VERSION,
    EVENT_PREFIX,
    JOIN_PHASE,
    WORKLOAD_VERSION,
    RollcallLog,
)
from rollcall_workload.contract.heartbeat import Heartbeat
from rollcall_workload.node.launcher import LauncherWatch
from rollcall_workload.node.ranks import SILENT_MARGIN_S, RankFiles
from rollcall_workload.rank.watchdog import (
    FAULTHANDLER_MARGIN_S,
    HANG_FLOOR_S,
    JOIN_HANG_S,
    Watchdog,
    encode_stack,
    setup_bound,
)
from tests.sim import records, wings
from tests.sim.records import (
    BACKWARD,
    BARRIER,
    GIL,
    JOINING,
    NOT_JOINING,
    OWN_STEP,
    SLEEP,
    SYNCHRONIZE,
    Place,
    seq_of,
)

#: The default bounds of a cpu run (what the suite and the workload use when nothing is set).
J = JOIN_HANG_S
S = 2 * JOIN_HANG_S
HANG = HANG_FLOOR_S
FIRST_STEP = 120.0
POLL = 1.0
#: How long after a crash or a departure torchrun ends the job (it sees a worker fail).
LAUNCHER_REACTS_S = 1.0

Fault = Literal[
    "crash",
    "vanish",
    "hung",
    "gil",
    "stopped",
    "never_joined",
    "never_started",
    "gpu_hang",
    "xid",
    "corrupt",
    "stuck_launcher",
    "silent_rank",
    "first_step",
    "shared",
    "platform",
    "unfit_gpu",
    "ready_lost",
    "never_began",
    "stuck_in_setup",
]
#: crash: an error; vanish: os._exit(0), no word; hung: a sleep; gil: blocked in C holding the GIL; stopped:
#: SIGSTOP; never_joined: asleep before init_process_group; never_started (the local wing): a node's command
#: never runs (or runs past the start skew); gpu_hang: the host waits on a GPU kernel that never ends; xid: the GPU falls off
#: the bus; corrupt: a replica's parameters differ; stuck_launcher: a launcher in uninterruptible sleep for
#: good; silent_rank: a rank's process stuck before it says a word (an import on a dead filesystem);
#: first_step: a rank's first step (the compile) never ends; shared: a cause every node shares (a node reboot
#: NVIDIA asks for on a GPU of every node, no rank's): the run passes, and the breaker marks no node; platform:
#: the image runs another torch than the golden configuration says (the platform's: no rank named, no mark);
#: unfit_gpu: a rank's GPU failed a row remapping (its rank named, its node marked); ready_lost (Kubernetes): a
#: node's ``Ready`` turns and stays so, nothing of it heard since (disrupted, the node named, the cluster's);
#: never_began (Slurm): a node's task never begins, or only past the start bound I (the node named, the
#: platform's); stuck_in_setup: a rank's imports and device setup never end (named past S + J, the cluster's).
FAULTS: tuple[Fault, ...] = typing.get_args(Fault)
Wing = Literal["local", "kubernetes", "slurm"]
#: The wing each fault needs: a node named for its silence on the local one; its Ready on Kubernetes; its
#: task on Slurm. Every other fault runs under any wing.
WING_OF: dict[Fault, Wing] = {"never_started": "local", "ready_lost": "kubernetes", "never_began": "slurm"}

#: The crash's own error: the workload's words, which the blame rules place.
CRASH = "RuntimeError: injected failure on rank"
ECHO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [10.0.0.{n}]:{p}"


@dataclass(frozen=True)
class Pause:
    """A rank that stops for ``seconds`` at step ``step``: in Python (its watchdog runs) or in C (it cannot)."""

    rank: int
    step: int
    seconds: float
    where: Literal["python", "c"] = "python"


@dataclass(frozen=True)
class Plan:
    """What a fleet does physically, in seconds (see the module docstring).

    ``node_start`` counts from the first node's start; ``math.inf`` never starts.
    """

    nodes: int
    procs: int
    node_start: tuple[float, ...]
    launcher_import: tuple[float, ...]
    rank_import: tuple[float, ...]
    first_step: float
    step_s: float
    offsets: tuple[float, ...]
    latency: tuple[float, ...]
    pauses: tuple[Pause, ...] = ()
    #: (node, from, seconds): the node's launcher is in uninterruptible sleep then (a page fault, NFS).
    d_states: tuple[tuple[int, float, float], ...] = ()
    #: (node, at): a hardware Xid on a GPU of the node no rank of the run uses.
    foreign_xids: tuple[tuple[int, float], ...] = ()
    #: (node, at, xid, rank or None): an Xid that takes nothing out (92 IGNORE, 94 RESTART_APP) on a rank's GPU
    #: or an unused one, or one that takes its GPU alone out (95 RESET_GPU) on an unused GPU: no mark.
    gpu_facts: tuple[tuple[int, float, int, int | None], ...] = ()
    #: (rank, quirk): what a healthy GPU may say that takes nothing out: an administrator's power cap
    #: (``power_cap``), an old uncorrected ECC error NVIDIA remapped (``old_ecc``), a throttle reason and a
    #: PCIe link down in its one reading that its samples under load did not hold (``flicker``).
    quirks: tuple[tuple[int, str], ...] = ()
    fault: Fault | None = None
    culprit: int = 0  # the faulty rank (never_started: the node)
    #: A fault that ends by itself after this many seconds (``hung``: its pause, in ``pauses``, just past the
    #: hang bound; ``stuck_launcher``: its uninterruptible sleep, past twice the join bound), or never
    #: (``math.inf``).
    lasting: float = math.inf
    #: The bounds some value was drawn within 5% of, and on which side (``start skew, inside``).
    near: tuple[str, ...] = ()
    #: The fleet's policy makes a hardware Xid a warning (``--fitness warn=hardware_event``): a GPU lost still
    #: fails (``gpu_lost``).
    xid_warns: bool = False
    #: The backend whose own looks run beside the nodes' lines (:mod:`tests.sim.wings`): ``kubernetes`` pulls
    #: each node's image until its start, ``slurm`` imports it (the roll call's step begins at 0).
    wing: Wing = "local"
    #: (node, from, seconds, state): the node's ``Ready`` is ``state`` (``False``, ``Unknown``) for a while
    #: (Kubernetes: a kubelet that missed its lease, a runtime restart), True before and after.
    flaps: tuple[tuple[int, float, float, str], ...] = ()
    #: The ``Ready`` the ``ready_lost`` fault's node turns to, for good.
    lost_state: str = "Unknown"
    #: (rank, step, share): a stall past the hang bound that ends before it is a hang. ``rank`` stops in its
    #: own compute in step ``step`` (every other rank waits in the step's all_reduce) until ``share`` of the
    #: way from the first to the last of the ranks' watchdogs' looks past the bound: those that looked by then
    #: dump (their flight record with it), the others do not, and every rank goes on.
    recovery: tuple[int, int, float] | None = None
    #: (xid, seconds): an Xid that takes nothing out on the ``crash`` fault's culprit's GPU, that many seconds
    #: (more than ``BESIDE_BEFORE_S``) before its error: an event of an earlier phase, no cause of the error.
    early_xid: tuple[int, float] | None = None
    warmup_steps: int = 2
    epochs: int = 2
    steps_per_epoch: int = 3

    @property
    def world(self) -> int:
        return self.nodes * self.procs

    @property
    def steps(self) -> int:
        return self.warmup_steps + self.epochs * self.steps_per_epoch


@dataclass
class Outcome:
    """What the suite decided of a simulated run."""

    plan: Plan
    verdict: Verdict
    state: JobState
    reason: str
    #: When the job ended (the suite's clock), and when the fault happened (None: a healthy run).
    ended: float
    fault_at: float | None
    named_ranks: frozenset[int]
    named_nodes: frozenset[int]
    #: The nodes a finding names with an unfit GPU that fails the run (not a warning).
    unfit_nodes: frozenset[int] = frozenset()
    #: The nodes ``nodes.json`` marks unfit (the breaker's over them), and how many it counts as checked.
    marked: frozenset[int] = frozenset()
    checked: int = 0
    #: Until when (the suite's clock) the suite read the nodes' lines: a line arriving later was not heard.
    read_to: float = math.inf
    #: The node cut off (``ready_lost``) and from when: nothing it wrote after that was heard.
    cut: tuple[int, float] | None = None

    @property
    def passed(self) -> bool:
        return self.state is JobState.SUCCEEDED and self.verdict.passed

    @property
    def to_verdict(self) -> float | None:
        return None if self.fault_at is None else self.ended - self.fault_at


#: The kinds whose ranks a verdict names as at fault (not the waiting, not the echoes).
BLAMING = frozenset(
    {"root_cause", "hung", "silent", "never_joined", "never_started", "unfit_device", "replica_divergence",
     "exited_nonzero", "left_early", "stuck_in_setup"}
)  # fmt: skip


class _Log(RollcallLog):
    """A rank's log in the simulation: each line restamped with its node's clock and queued for the suite."""

    def __init__(self, sim: _Sim, rank: int, node: int, clock: _At) -> None:
        self.sim, self.node, self.clock = sim, node, clock
        self.rank, self.world_size = rank, sim.plan.world
        self.said, self.phase = set(), ""

    def write(self, data: bytes) -> None:
        self.sim.send(self.node, data, self.clock.t)


class _Sim:
    def __init__(self, plan: Plan, owns_nodes: bool = False) -> None:
        self.plan = plan
        self.t = 0.0
        self.owns = owns_nodes
        self._queue: list[tuple[float, int, bytes]] = []
        self._seq = 0
        self.roll = RollCall(clock=lambda: self.t)
        self._parsers = [self.roll.parser(f"node-{n}") for n in range(plan.nodes)]
        self._feed_order: list[tuple[float, int, int, bytes]] = []
        self.fault_at: float | None = None
        self.job_end = math.inf
        self.job_state = JobState.TIMED_OUT
        #: When the suite last read a line of each node; who else reads each line as the suite reads it.
        self.heard: list[float | None] = [None] * plan.nodes
        self.readers: list[Callable[[int, bytes], None]] = []
        #: A node cut off from then on (``ready_lost``): nothing it writes after that arrives.
        self.cut: tuple[int, float] | None = None

    # -- lines ---------------------------------------------------------------------------------------------

    def send(self, node: int, data: bytes, at: float | None = None) -> None:
        """A line the real code wrote, by node ``node`` at ``at`` (now): stamped by that node's clock."""
        obj = json.loads(data[len(EVENT_PREFIX) :])
        self._queue_line(node, obj, self.t if at is None else at)

    def event(self, writer: int, name: str, rank: int, at: float, **fields: Any) -> None:
        """An event ``name`` of ``rank`` (-1: the node's monitor's) that node ``writer`` writes at ``at``."""
        world = self.plan.world if rank >= 0 else -1
        self._queue_line(writer, {"event": name, "rank": rank, "world_size": world, **fields}, at)

    def raw(self, node: int, line: str, at: float) -> None:
        """A line of the node's output that is no event (Slurm's, pyxis's), read its latency after ``at``."""
        self._push(node, line.encode(), at)

    def _queue_line(self, node: int, obj: dict[str, Any], at: float) -> None:
        """Read by the suite its node's latency after ``at``."""
        obj["time"] = round(at + self.plan.offsets[node], 6)
        self._push(node, f"{EVENT_PREFIX}{json.dumps(obj, separators=(',', ':'))}\n".encode(), at)

    def _push(self, node: int, line: bytes, at: float) -> None:
        if self.cut is not None and node == self.cut[0] and at >= self.cut[1]:
            return  # written on a node cut off: it never arrives
        heapq.heappush(self._feed_order, (at + self.plan.latency[node], self._seq, node, line))
        self._seq += 1

    def read_until(self, t: float) -> None:
        """Feed the suite every line it has read by ``t``, each at the time it read it."""
        while self._feed_order and self._feed_order[0][0] <= t:
            at, _, node, line = heapq.heappop(self._feed_order)
            self.t = at
            self._parsers[node].feed(line)
            self.heard[node] = at
            for reader in self.readers:
                reader(node, line)
        self.t = t


def _node(plan: Plan, rank: int) -> int:
    return rank // plan.procs


def simulate(plan: Plan, owns_nodes: bool = False) -> Outcome:
    """Run ``plan`` through the real decisions (see the module docstring)."""
    sim = _Sim(plan, owns_nodes)
    nodes = plan.nodes
    spec = JobSpec("sim", nodes, plan.procs)
    bounds = Bounds.of(spec)
    started = list(plan.node_start)
    fault_at: float | None = None
    wing = _wing(sim, plan, spec)

    # -- the launchers, until the rendezvous -----------------------------------------------------------------
    imports = list(plan.launcher_import)
    d_states = list(plan.d_states)
    if (
        plan.fault == "stuck_launcher"
    ):  # its import in uninterruptible sleep, never done (or done just too late)
        imports[plan.culprit] = plan.lasting + 0.5
        d_states.append((plan.culprit, started[plan.culprit], plan.lasting))
        fault_at = started[plan.culprit]
    joined = [s + imports[n] for n, s in enumerate(started)]
    rendezvous = max(joined)
    spawn = rendezvous + 0.2 if math.isfinite(rendezvous) else math.inf
    if plan.fault == "never_started":  # T0: when the first node was heard
        fault_at = min(s + plan.latency[n] for n, s in enumerate(started) if math.isfinite(s))
    if plan.fault == "never_began":  # the roll call's step began: its start bound counts from there
        fault_at = 0.0
    for n, s in enumerate(started):
        if plan.wing == "slurm":  # pyxis imports the node's image inside the step, before its task begins
            sim.raw(n, wings.PYXIS, 0.0)
        if not math.isfinite(s):
            continue
        d_windows = [(a, a + d) for node, a, d in d_states if node == n]
        clock = _At(sim)
        kids: list[int] = []

        def state_of(pid: int, windows=d_windows, clock=clock) -> tuple[str, str]:
            return (
                ("D", "uninterruptible sleep")
                if any(a <= clock() < b for a, b in windows)
                else ("S", "sleeping")
            )

        watch = LauncherWatch(1000 + n, n, s, J, None, lambda pid, kids=kids: kids, state_of, node=f"n{n}",
                              mono=clock)  # fmt: skip
        clock.t = s
        sim.send(n, watch.first(), s)
        # its monitor's looks, a second apart, until its ranks spawn (a node whose rendezvous never completes:
        # while the others' bounds run); a launcher never in D says a line only at each J and once its ranks
        # spawn, and its S held for however long counts for nothing, so only those looks are taken
        limit = spawn + POLL if math.isfinite(spawn) else s + 3 * S + 4 * J
        every = bool(d_windows)
        looks = (
            [s + i * POLL for i in range(1, int((limit - s) / POLL) + 1)]
            if every
            else sorted(
                {s + math.ceil(k * J / POLL) * POLL for k in range(1, int((limit - s) / J) + 1)}
                | ({s + math.ceil((spawn - s) / POLL) * POLL} if math.isfinite(spawn) else set())
            )
        )
        for t in looks:
            if t > limit:
                break
            clock.t = t
            if t >= spawn:
                kids.append(1)
            for line in watch.poll(0.0):
                sim.send(n, line, t)
            if kids:
                break

    # -- the ranks ---------------------------------------------------------------------------------------------
    if math.isfinite(spawn):
        _ranks(sim, plan, spawn, bounds)
        fault_at = fault_at if sim.fault_at is None else sim.fault_at
    end = sim.job_end if math.isfinite(spawn) else math.inf
    state = sim.job_state if math.isfinite(spawn) else JobState.FAILED
    if isinstance(wing, wings.Kubernetes) and sim.cut is not None:  # the node lost: its Ready turns for good
        wing.lost = (sim.cut[0], sim.cut[1], plan.lost_state)

    for n, at in node_reboots(plan):  # a GPU of the node the run does not use: its monitor hears it
        sim.event(n, "gpu_event", -1, at, kind="xid", gpu=plan.procs, uuid=f"GPU-foreign-{n}", node=f"n{n}",
                  xid=79, event_type=8, data=79)  # fmt: skip
    for n, at, xid, rank in plan.gpu_facts:
        if not math.isfinite(started[n]):
            continue  # no monitor ran there to hear it
        at = max(at, started[n])  # noqa: PLW2901  # its node's monitor hears it once it runs
        gpu, uuid = (
            (rank % plan.procs, f"GPU-run-{rank}") if rank is not None else (plan.procs, f"GPU-idle-{n}")
        )
        sim.event(n, "gpu_event", -1, at, kind="xid", gpu=gpu, uuid=uuid, node=f"n{n}", xid=xid, event_type=8,
                  data=xid)  # fmt: skip

    # -- the runner: every second, the backend's own look, then the checks' early stops (the runner's _Watch) --
    layout = Layout(nodes, plan.procs)
    policy = FitnessPolicy(warn=frozenset({"hardware_event"})) if plan.xid_warns else FitnessPolicy()
    criteria = Criteria(fitness=policy, expect=(("torch", GOLDEN_TORCH),) if plan.fault == "platform" else ())
    stops = early_stops(CHECKS)
    stopped_by: str | None = None
    reason = ""
    read_to = math.inf
    horizon = min(end, 3600.0)
    status: JobStatus | None = None
    t = 0.0
    while t < horizon:
        sim.read_until(t)
        status = wing.look(t)
        if status is not None:  # the backend ended the run on its own finding
            reason, state, end = status.reason, status.state, t
            sim.roll.ended = read_to = t
            break
        run = RunView(Observed(sim.roll, layout, None, spec, "node"), criteria)
        run.__dict__["bounds"] = bounds  # the spec's, as RunView works them out (once here: parsing is slow)
        r = next(((name, why) for name, stop in stops if (why := stop(run, t)) is not None), None)
        if r is not None:
            (stopped_by, reason), state, end = r, JobState.STOPPED, t
            sim.roll.ended = sim.roll.stopped = read_to = t
            break
        t += POLL
    else:
        if not math.isfinite(end):
            end, state, reason = horizon, JobState.TIMED_OUT, "the job timeout"
            sim.roll.stopped = end
        read_to = end + 5.0
        sim.read_until(read_to)  # what the logs still carried when the job ended
        sim.roll.ended = end
    status = (
        dataclasses.replace(status, owns_nodes=owns_nodes)
        if status is not None
        else JobStatus(state, reason, owns_nodes=owns_nodes)
    )
    verdict = judge(Observed(sim.roll, layout, status, spec, "node"), criteria, stopped_by=stopped_by)
    ranks, named_nodes = _named(verdict, plan)
    analysis = verdict.root_cause
    if analysis is not None and analysis.disruption is not None and analysis.disruption.node is not None:
        named_nodes |= {analysis.disruption.node}  # the pod the infrastructure took away: its node
    if isinstance(wing, wings.Slurm):
        named_nodes |= set(wing.late)  # the nodes whose task did not begin within the start bound
    unfit = frozenset(
        d.device.node for p in verdict.findings if p.kind.value == "unfit_device" for d in p.detail
        if d.device.node is not None
    )  # fmt: skip
    passed = state is JobState.SUCCEEDED and verdict.passed
    found = of_verdict(verdict, test="sim", backend="sim", passed=passed, checked_at=0.0, ttl_s=1.0,
                       given=[f"n{n}" for n in range(nodes)])  # fmt: skip
    session, _ = with_breaker(merged(found), None)
    marked = frozenset(int(v.name[1:]) for v in session if v.verdict == "unfit")
    checked = sum(1 for v in session if v.verdict != "unchecked")
    return Outcome(
        plan, verdict, state, reason, end, fault_at, ranks, frozenset(named_nodes), unfit, marked, checked,
        read_to, sim.cut,
    )  # fmt: skip


def _wing(sim: _Sim, plan: Plan, spec: JobSpec) -> wings.Wing:
    """The backend's own looks the plan runs under (:mod:`tests.sim.wings`)."""
    if plan.wing == "kubernetes":
        return wings.Kubernetes(plan, sim.roll, lambda n: sim.heard[n])
    if plan.wing == "slurm":
        slurm = wings.Slurm(plan, spec, sim.roll)
        sim.readers.append(slurm.read)
        return slurm
    return wings.Local()


#: What each quirk of :attr:`Plan.quirks` makes a healthy GPU say in its ``facts``.
QUIRKS: dict[str, dict[str, Any]] = {
    "power_cap": {"power_limit_w": 500.0, "power_default_w": 700.0},
    "old_ecc": {"ecc_aggregate_uncorrected": 2, "ecc_volatile_uncorrected": 0, "remapped_pending": False,
                "remapped_failure": False},
    # the one reading caught a throttle reason and a link trained down while idle: neither held under load
    "flicker": {"clock_events": ["hw_slowdown"], "pcie_gen": 3, "pcie_gen_max": 5},
}  # fmt: skip
#: The torch every rank reports, and what the ``platform`` fault's golden configuration expects instead.
TORCH, GOLDEN_TORCH = "2.11.0", "0.0.*"


def _facts(sim: _Sim, plan: Plan, rank: int, at: float) -> None:
    """The rank's ``facts``: its GPU (by UUID and index), the node's count (one GPU more than its ranks use),
    torch, its quirks, and the row remapping the ``unfit_gpu`` fault's rank failed."""
    n = _node(plan, rank)
    said: dict[str, Any] = {k: v for r, q in plan.quirks if r == rank for k, v in QUIRKS[q].items()}
    if plan.fault == "unfit_gpu" and rank == plan.culprit:
        said["remapped_failure"] = True
    sim.event(n, "facts", rank, at + 0.01, host=f"n{n}", device_index=rank % plan.procs,
              gpu_uuid=f"GPU-run-{rank}", gpus=plan.procs + 1, torch=TORCH, **said)  # fmt: skip
    if (rank, "flicker") in plan.quirks:  # its samples while it trained: the reason in 1 read of 20
        sim.event(n, "samples", rank, at + 0.02, samples=20, clock_events_share={"hw_slowdown": 0.05},
                  pcie_gen_min=3, pcie_gen_max=5)  # fmt: skip


class _At:
    """A clock one component reads, set by the simulation."""

    def __init__(self, sim: _Sim | None = None) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _named(verdict: Verdict, plan: Plan) -> tuple[frozenset[int], frozenset[int]]:
    """The ranks and nodes the verdict names at fault."""
    ranks: set[int] = set()
    for p in verdict.findings:
        if p.kind.value not in BLAMING:
            continue
        if p.kind.value == "root_cause":
            analysis = verdict.root_cause
            first = []
            if analysis is not None:
                if analysis.departure is not None:
                    first = [analysis.departure.rank]
                elif analysis.first is not None:
                    first = [analysis.first.rank]
            ranks.update(r for r in first if r is not None)
            continue
        ranks.update(p.ranks)
    return frozenset(ranks), frozenset(_node(plan, r) for r in ranks)


def _ranks(sim: _Sim, plan: Plan, spawn: float, bounds: Bounds) -> None:
    """Every rank from its spawn to the job's end: its watchdog, its events, the fault."""
    world = plan.world
    fault, culprit = plan.fault, plan.culprit
    seen = [spawn + POLL * (1 + (n % 3) / 3) for n in range(plan.nodes)]  # each node's next look after it
    for r in range(world):
        n = _node(plan, r)
        sim.event(n, "rank_process", r, seen[n], state="seen", pid=2000 + r, node_rank=n, local_rank=r % plan.procs,
                  node=f"n{n}", visible_devices=f"GPU-run-{r}")  # fmt: skip
    ready = [spawn + plan.rank_import[r] for r in range(world)]
    if fault == "stuck_in_setup":
        ready[culprit] = math.inf  # its imports and device setup never end
    asleep = fault in ("never_joined", "silent_rank")  # the culprit never enters init_process_group
    entering = [t for r, t in enumerate(ready) if not (asleep and r == culprit)]
    group = (max(entering) + 0.05) if len(entering) == world else math.inf
    sim.fault_at = None
    clock = _At(sim)
    places = [Place() for _ in range(world)]
    # each watchdog's thread starts once torch is imported (here half the rank's setup), as rank/run.py makes
    # it: its first phase, the imports and device setup, held to S + J from the process's start
    starts = [spawn + min(plan.rank_import[r], S) / 2 for r in range(world)]
    dogs = []
    for r in range(world):
        log = _Log(sim, r, _node(plan, r), clock)
        dogs.append(Watchdog(log, None, FIRST_STEP, clock=clock, join=J, setup=setup_bound(S, J), since=spawn,
                             stacks=places[r].stacks, recorder=records.recorder(log, plan, places[r])))  # fmt: skip
    for r, dog in enumerate(dogs):
        if fault == "silent_rank" and r == culprit:
            continue  # stuck before its watchdog started: it never looks
        _checks(dog, clock, spawn, min(ready[r], spawn + 3 * (S + J)), starts[r])
        if not math.isfinite(ready[r]):
            continue
        clock.t = ready[r]
        dog.beat(JOIN_PHASE)  # the join bound counts from here; the never_joined culprit then sleeps
        places[r].at(NOT_JOINING if fault == "never_joined" and r == culprit else JOINING)
    if fault == "never_joined":
        sim.fault_at = ready[culprit]
    if fault in ("silent_rank", "stuck_in_setup"):
        sim.fault_at = spawn
    if not math.isfinite(group):  # the group never forms: every rank dumps at its bound, once or twice
        for r, dog in enumerate(dogs):
            if not (fault == "silent_rank" and r == culprit) and math.isfinite(ready[r]):
                _checks(dog, clock, ready[r], ready[r] + 3 * S + J, starts[r])
        sim.job_end, sim.job_state = math.inf, JobState.TIMED_OUT
        return
    # the group forms; each step ends at once on every rank (DDP), a pause delaying them all
    ends = [group + plan.first_step]
    delay = {p.step: p for p in plan.pauses}
    for k in range(1, plan.steps):
        if plan.recovery is not None and k == plan.recovery[1]:
            ends.append(_recovered(ends[-1], starts, plan.recovery[2]))
        else:
            ends.append(ends[-1] + plan.step_s + (delay[k].seconds if k in delay else 0.0))
    stop_at = plan.warmup_steps + plan.steps_per_epoch  # faults strike after the first epoch
    lasting = fault == "hung" and math.isfinite(plan.lasting)  # a hang that ends: the ranks go on after it
    faulted = fault in ("crash", "vanish", "hung", "gil", "stopped", "gpu_hang", "xid", "ready_lost")
    faulted = faulted and not lasting
    last = stop_at if faulted else plan.steps
    # the first epoch's barrier, where the fault strikes: the ranks finished every collective before it
    barrier = seq_of(plan, "barrier", stop_at - 1) - 1

    def stalled(r: int) -> None:
        """Where rank ``r`` stands once the fault struck: its own, or waiting in the barrier for it."""
        if r == culprit and fault in ("hung", "gpu_hang"):
            places[r].at(SLEEP if fault == "hung" else SYNCHRONIZE, barrier)
        else:
            places[r].at(BARRIER, barrier, entered=True)

    if fault == "first_step":  # the culprit's first step never ends; the others finish theirs and wait
        for r, dog in enumerate(dogs):
            clock.t = group
            _checks(dog, clock, ready[r], group, starts[r])
            dog.joined()
            n = _node(plan, r)
            sim.event(
                n,
                "start",
                r,
                group,
                local_rank=r % plan.procs,
                node_rank=n,
                host=f"n{n}",
                node=f"n{n}",
                device="cpu",
                workload_version=WORKLOAD_VERSION,
                contract_version=CONTRACT_VERSION,
            )
            _facts(sim, plan, r, group)
            dog.beat("warm-up step 1")
            if r != culprit:
                clock.t = ends[0]
                dog.first_step_done()
                dog.beat("warm-up step 2", step=True)
                places[r].at(BARRIER, 0, entered=True)  # in the first step's all_reduce, for the culprit
            else:
                places[r].at(SYNCHRONIZE, 0)
            _checks(dog, clock, clock.t, clock.t + FIRST_STEP + 3 * HANG, starts[r])
        sim.fault_at = group
        sim.job_end, sim.job_state = math.inf, JobState.TIMED_OUT
        return
    for r, dog in enumerate(dogs):
        n = _node(plan, r)
        clock.t = group
        _checks(dog, clock, ready[r], group, starts[r])
        dog.joined()
        sim.event(n, "start", r, group, local_rank=r % plan.procs, node_rank=n, host=f"n{n}", node=f"n{n}",
                  device="cpu", workload_version=WORKLOAD_VERSION, contract_version=CONTRACT_VERSION,
                  join_s=round(group - ready[r], 3))  # fmt: skip
        _facts(sim, plan, r, group)
        dog.beat("warm-up step 1")
        prev = group
        for k in range(last):
            done = seq_of(plan, "all_reduce", k) - 1
            if lasting and k == stop_at:  # hung past its bound, in the barrier's stead: the others wait there
                stalled(r)
            elif plan.recovery is not None and k == plan.recovery[1] and r == plan.recovery[0]:
                places[r].at(OWN_STEP, done)  # a slow batch: the others wait for it in the step's all_reduce
            else:
                places[r].at(BACKWARD, done, entered=True)
            _checks(dog, clock, prev, ends[k], starts[r])
            clock.t = ends[k]
            if k == 0:
                dog.first_step_done()
            else:
                dog.step_time(plan.step_s)
            dog.beat(f"step {k + 2}", step=True)
            prev = ends[k]
            epoch, within = divmod(k + 1 - plan.warmup_steps, plan.steps_per_epoch)
            if k + 1 > plan.warmup_steps and within == 0:
                digest = "bad0" * 4 if fault == "corrupt" and r == culprit else "600d" * 4
                sim.event(n, "epoch_time", r, ends[k], epoch=epoch, seconds=plan.steps_per_epoch * plan.step_s,
                          steps=plan.steps_per_epoch, loss=9.0 - epoch, param_digest=digest)  # fmt: skip
        pause_c = [p for p in plan.pauses if p.rank == r and p.where == "c"]
        for p in pause_c:
            _silence_window(sim, plan, r, ends[p.step - 1], p.seconds, ("S", "sleeping"))
        if not faulted:
            sim.event(n, "throughput", r, ends[-1] + 0.1, samples_per_sec=40.0)
            sim.event(n, "complete", r, ends[-1] + 0.2, param_digest="bad0" * 4 if fault == "corrupt" and r == culprit
                      else "600d" * 4)  # fmt: skip
    if not faulted:
        if fault == "corrupt":
            sim.fault_at = group
        if lasting:  # the culprit's last beat before its pause
            sim.fault_at = ends[stop_at - 1]
        sim.job_end, sim.job_state = ends[-1] + 1.0, JobState.SUCCEEDED
        return
    # the fault, at the end of the first epoch
    t_f = ends[stop_at - 1] + 0.01
    sim.fault_at = t_f
    culprit_node = culprit if fault == "ready_lost" else _node(plan, culprit)
    if fault in ("crash", "vanish", "xid"):
        if fault == "crash":
            if plan.early_xid is not None:  # an Xid of an earlier phase on its GPU, which it outlived
                xid, before = plan.early_xid
                sim.event(culprit_node, "gpu_event", -1, t_f - before, kind="xid", xid=xid, event_type=8, data=xid,
                          gpu=culprit % plan.procs, uuid=f"GPU-run-{culprit}", node=f"n{culprit_node}")  # fmt: skip
            sim.event(culprit_node, "error", culprit, t_f, message=CRASH)
        if fault == "xid":  # the GPU falls off the bus: an Xid 79, then NVML finds it lost
            gpu = {"gpu": culprit % plan.procs, "uuid": f"GPU-run-{culprit}", "node": f"n{culprit_node}"}
            sim.event(culprit_node, "gpu_event", -1, t_f, kind="xid", xid=79, event_type=8, data=79, **gpu)
            sim.event(
                culprit_node, "gpu_event", -1, t_f + 0.2, kind="lost", reason="NVML: GPU is lost", **gpu
            )
            sim.event(
                culprit_node,
                "error",
                culprit,
                t_f + 0.3,
                message="RuntimeError: CUDA error: unspecified launch failure",
            )
        if fault == "vanish":
            look = t_f + POLL * 0.5
            sim.event(culprit_node, "rank_process", culprit, look, state="gone", pid=2000 + culprit,
                      node_rank=culprit_node, node=f"n{culprit_node}", alive_at=round(look - POLL, 6),
                      gone_at=round(look, 6))  # fmt: skip
        for r in range(world):
            if r != culprit:
                sim.event(_node(plan, r), "error", r, t_f + 0.05 + 0.001 * (r % 97),
                          message=ECHO.format(n=culprit_node, p=20000 + r))  # fmt: skip
        sim.job_end, sim.job_state = t_f + LAUNCHER_REACTS_S, JobState.FAILED
        return
    if fault == "ready_lost":  # the node's network is gone: nothing it writes from now on arrives
        sim.cut = (culprit_node, t_f)
    # hangs: the culprit stops at t_f, every other rank waits in the next collective
    for r, dog in enumerate(dogs):
        clock.t = t_f
        stalled(r)
        if fault == "gil" and r == culprit:
            fired = t_f + HANG + FAULTHANDLER_MARGIN_S
            for dump, at in enumerate((fired, fired + HANG + FAULTHANDLER_MARGIN_S), start=1):
                read = math.floor(at) + 2 * POLL  # the monitor reads a dump once it is whole: a look later
                line = encode_stack(culprit, world, GIL, dump=dump, thread="MainThread", main=True, threads=1,
                                    phase=f"step {stop_at + 1}", stalled_s=round(at - t_f, 3), hang_after=HANG,
                                    source="faulthandler")  # fmt: skip
                sim.send(culprit_node, line, read)
            _silence_window(sim, plan, r, t_f, 3 * HANG, ("S", "sleeping"))
            continue
        if fault == "stopped" and r == culprit:
            _silence_window(sim, plan, r, t_f, 3 * HANG, ("T", "stopped"))
            continue
        _checks(dog, clock, t_f, t_f + 3 * HANG, starts[r])
    sim.job_end, sim.job_state = math.inf, JobState.TIMED_OUT


def _look_at(t: float, start: float, tick: float) -> float:
    """A watchdog's look at or after ``t``: its thread looks every ``tick`` seconds from ``start``."""
    return start + math.ceil((t - start) / tick) * tick


def _checks(dog: Watchdog, clock: _At, since: float, until: float, start: float) -> None:
    """The watchdog's looks between ``since`` and ``until`` (no beat between) from its bound's first run-out.

    Its thread looks every ``min(1, bound / 10)`` seconds from its start (``start``), as the real one does
    (``Watchdog._watch``): a bound runs out at its next look, never between two.
    """
    t = since + dog.bound()
    while True:
        t = _look_at(t, start, min(1.0, dog.bound() / 10))
        if t >= until:
            return
        clock.t = t
        t += dog.bound() if dog.check() else min(1.0, dog.bound() / 10)


def _recovered(since: float, starts: list[float], share: float) -> float:
    """When a stall from ``since`` (every rank's last step) past the hang bound ends: ``share`` of the way from
    the first to the last of the watchdogs' looks past the bound. Those that looked by then dumped; the last
    did not, so no moment saw every rank stalled: no hang (:attr:`Plan.recovery`)."""
    looks = [_look_at(since + HANG, start, min(1.0, HANG / 10)) for start in starts]
    return min(looks) + share * (max(looks) - min(looks))


def _silence_window(
    sim: _Sim, plan: Plan, rank: int, since: float, seconds: float, state: tuple[str, str]
) -> None:
    """The node's monitor looking, every second, at a rank whose heartbeat stopped at ``since`` for ``seconds``."""
    n = _node(plan, rank)
    mono = _At(sim)
    files = RankFiles("", SILENT_MARGIN_S, state_of=lambda pid: state, mono=mono)
    beat = Heartbeat(event="heartbeat", rank=rank, world_size=plan.world, time=since + plan.offsets[n],
                     pid=2000 + rank, phase="step", steps=10, progress=since + plan.offsets[n], hang_after=HANG,
                     dumps=0, joined=True)  # fmt: skip
    t = math.floor(since) + 0.5
    while t < since + seconds:
        mono.t = t
        for line in files.silence(rank, beat, t + plan.offsets[n], t):
            sim.send(n, line, t)
        t += POLL


# -- the bounds' deadlines, and what each fault must name ------------------------------------------------


def node_reboots(plan: Plan) -> list[tuple[int, float]]:
    """Each node reboot NVIDIA asks for on a GPU no rank uses (an Xid 79: the foreign ones, every node's of a
    shared cause), as (node, when its monitor hears it): a node never started has no monitor to hear it."""
    shared = [(n, 1.0) for n in range(plan.nodes)] if plan.fault == "shared" else []
    started = plan.node_start
    return [(n, max(at, started[n])) for n, at in (*plan.foreign_xids, *shared) if math.isfinite(started[n])]


def expected_marks(
    plan: Plan, checked: int, read_to: float = math.inf, cut: tuple[int, float] | None = None
) -> frozenset[int]:
    """The nodes a session must mark unfit: a node reboot NVIDIA asks for on any GPU of the node that the suite
    heard by ``read_to`` (and before its node was ``cut`` off), unless the fleet's policy warns of it, the GPU
    fallen off the bus; none where more than the breaker's bound."""
    heard = {
        n
        for n, at in node_reboots(plan)
        if at + plan.latency[n] <= read_to and (cut is None or n != cut[0] or at < cut[1])
    }
    out = set() if plan.xid_warns else heard
    if plan.fault in ("xid", "unfit_gpu"):  # xid: the GPU is lost too, gpu_lost fails whatever the policy
        out.add(_node(plan, plan.culprit))
    return frozenset(out) if len(out) <= bound_of(None, checked) else frozenset()


#: The faults whose culprit is a node (every rank of it), not a rank.
NODE_FAULTS: frozenset[Fault] = frozenset({"never_started", "stuck_launcher", "ready_lost", "never_began"})
#: The faults the backend itself names a node for (its ranks are not named: none of them failed).
BACKEND_FAULTS: frozenset[Fault] = frozenset({"ready_lost", "never_began"})
#: Whose each fault is, where its class says, and the kind of the finding that says it (the others are placed
#: by what their ranks said or did; a platform's cause by the run's first failure).
OWNERS: dict[Fault, tuple[str, Owner]] = {
    "ready_lost": ("disruption", Owner.CLUSTER),  # a node went away under the job
    "never_began": ("job", Owner.PLATFORM),  # the job could not be started there (an image import, a prolog)
    "stuck_in_setup": ("stuck_in_setup", Owner.CLUSTER),  # the same image set up everywhere else: the node
    "crash": ("root_cause", error_blame(CRASH).owner),  # its own words, whatever GPU event came well before
}


def expected(plan: Plan) -> tuple[frozenset[int], frozenset[int]]:
    """The ranks and nodes a verdict must name at fault (none: a healthy run, a shared or platform's cause)."""
    if plan.fault in (None, "shared", "platform"):
        return frozenset(), frozenset()
    if plan.fault in BACKEND_FAULTS:
        return frozenset(), frozenset({plan.culprit})
    if plan.fault in NODE_FAULTS:
        node = plan.culprit
        return frozenset(range(node * plan.procs, (node + 1) * plan.procs)), frozenset({node})
    if plan.fault == "corrupt" and plan.world == 2:  # one replica against one: which is wrong cannot be told
        return frozenset({0, 1}), frozenset({_node(plan, 0), _node(plan, 1)})
    return frozenset({plan.culprit}), frozenset({_node(plan, plan.culprit)})


def deadline(plan: Plan) -> float:
    """The most seconds from the fault to the verdict the stated bounds allow (one poll and a look spare).

    Each bound as docs/hangs.md states it: a rank's imports and device setup S + J from its process's start;
    a node's ``Ready`` held R from when it turned (its pods unheard since); a Slurm node's task I from the roll
    call's step.
    """
    spare = 3 * POLL + max(plan.latency)
    bound = {
        None: 0.0,
        "crash": LAUNCHER_REACTS_S,
        "vanish": LAUNCHER_REACTS_S,
        "xid": LAUNCHER_REACTS_S,
        "hung": HANG,
        "gpu_hang": HANG,
        "gil": HANG + SILENT_MARGIN_S,
        "stopped": HANG + SILENT_MARGIN_S,
        "never_joined": S + J,
        "never_started": S,
        "corrupt": math.inf,
        "stuck_launcher": 2 * J,  # after the last node was heard
        "silent_rank": S + J + SPEAKS_FIRST_S + POLL,
        "first_step": FIRST_STEP + HANG,
        "shared": math.inf,
        "platform": math.inf,
        "unfit_gpu": math.inf,
        "ready_lost": READY_HOLD_S,
        "never_began": START_BOUND,
        "stuck_in_setup": setup_bound(S, J),
    }[plan.fault]
    if plan.fault == "stuck_launcher":  # from its node's start: the last node heard up to S later, or later
        bound += max(S, _last_heard(plan) - plan.node_start[plan.culprit])  # still where it was on its way
    return bound + spare


def _last_heard(plan: Plan) -> float:
    """When the suite first heard the last node it heard (its first line, its log's latency after its start)."""
    return max(s + plan.latency[n] for n, s in enumerate(plan.node_start) if math.isfinite(s))


def wrongs(outcome: Outcome) -> list[str]:
    """What the suite got wrong of a simulated run (empty: nothing), each a short phrase.

    A healthy run must pass naming nobody (a ``false failure``, a ``false name``); a faulty one must fail
    naming its culprit's ranks and node and no other (``missed``, ``false name``), a GPU that fell off the bus
    unfit, within the deadline its bounds state (``late``), its finding the owner :data:`OWNERS` says
    (``wrong owner``). Either must mark exactly the nodes :func:`expected_marks` says (``false mark``,
    ``missed mark``).
    """
    plan = outcome.plan
    ranks, nodes = expected(plan)
    found = []
    marks = expected_marks(plan, outcome.checked, outcome.read_to, outcome.cut)
    if outcome.marked - marks:
        found.append("false mark")
    if marks - outcome.marked:
        found.append("missed mark")
    if plan.fault is None or plan.fault == "shared":
        if not outcome.passed:
            found.append("false failure")
        if outcome.named_ranks or outcome.named_nodes:
            found.append("false name")
        return found
    if outcome.passed:
        found.append("missed")
    first = outcome.verdict.first_failure
    if plan.fault == "platform" and (first is None or first.owner != "platform"):
        found.append("wrong owner")
    if plan.fault in OWNERS:
        kind, owner = OWNERS[plan.fault]
        verdict = outcome.verdict
        said = [p.blame.owner for p in verdict.findings if p.kind.value == kind and p.blame is not None]
        if said[:1] != [owner]:
            found.append("wrong owner")
    if not ranks <= outcome.named_ranks or not nodes <= outcome.named_nodes:
        found.append("missed culprit")
    if outcome.named_ranks - ranks or (plan.fault in BACKEND_FAULTS and outcome.named_nodes - nodes):
        found.append("false name")
    if plan.fault == "xid" and not nodes <= outcome.unfit_nodes:
        found.append("GPU not named unfit")
    late = outcome.to_verdict
    if late is not None and late > deadline(plan):
        found.append("late")
    return found


# -- plans ---------------------------------------------------------------------------------------------------


def near(rng: random.Random, bound: float, inside: bool) -> float:
    """A value within 5% of ``bound``: below it (``inside``) or above it."""
    return bound * (1 - rng.uniform(0.0, 0.05)) if inside else bound * (1 + rng.uniform(0.001, 0.05))


#: Beyond a bound, a fault lasts at least this much longer: the suite decides at its polls, a second apart.
BEYOND_S = 2 * POLL


def plan_of(
    rng: random.Random,
    fault: Fault | None = None,
    world: int | None = None,
    edge: float = 0.2,
    outside: bool | None = None,
    wing: Wing | None = None,
) -> Plan:
    """A random plan: healthy but uneven within every stated bound (``fault`` None) or with one fault.

    Every bound is on the suite's clock, when it reads a part's lines: a value drawn within a bound leaves
    room for the monitor's look and the node's log latency. ``edge``: the share of the values drawn within 5%
    of their bound (healthy side); a fault near a bound lasts 5% past it at most, two polls at least (and
    long enough for the suite to read it). ``outside``: whether a fault of :data:`EDGED` is drawn just past
    its bound (None: at random). ``wing``: the backend's own looks (None: the fault's, else at random).
    """
    if world is None:
        world = max(2, round(2 ** rng.uniform(1, 11)))
    # a node holds 8 accelerators mostly (p4d, p5, p6; a trn1's 16 NeuronCores count as 8 here), fewer on small
    # ones (g5, g6) and in small runs
    procs = rng.choice((8, 8, 8, 4, 2)) if world >= 64 else rng.choice((1, 2, 4, 8))
    procs = min(procs, world)
    nodes = max(1, world // procs)
    if nodes * procs < 2:
        nodes, procs = 2, 1
    world = nodes * procs
    wing = (WING_OF.get(fault) if fault is not None else None) or wing or rng.choice(WINGS)
    latency = [rng.uniform(0.0, 1.5) for _ in range(nodes)]
    slack = 0.2 + 2 * POLL + max(latency)

    edges: set[str] = set()

    def within(bound: float, name: str = "") -> float:
        if rng.random() < edge:
            if name:
                edges.add(f"{name}, inside")
            return near(rng, bound, True)
        return rng.uniform(0.0, 0.9 * bound)

    first = rng.randrange(nodes)
    latency[first] = min(latency)  # the node heard first (T0): its log is the quickest
    heard = [0.0 if n == first else within(S - POLL, "start skew") for n in range(nodes)]
    starts = [h + latency[first] - latency[n] for n, h in enumerate(heard)]
    # nodes on their way: a pod pulling its image (Kubernetes: no bound of the suite's, the job timeout's), a
    # Slurm node importing it inside the roll call's step (its task begins within the start bound I)
    for n in rng.sample(range(nodes), k=min(nodes, rng.randint(0, 2)) if wing != "local" else 0):
        if wing == "kubernetes":
            starts[n] = rng.uniform(S, 4 * S)
        else:
            starts[n] = max(0.0, within(START_BOUND - POLL, "start bound") - latency[n])
    heard = [s + latency[n] - latency[first] for n, s in enumerate(starts)]  # after T0, on the suite's clock
    launcher_import = [within(2 * J - slack, "launcher") for _ in range(nodes)]
    rank_import = [within(S - slack, "rank import") for _ in range(world)]
    # slow imports and device setup (torch_xla's, from a cold filesystem): up to S + J from the process's start
    for r in rng.sample(range(world), k=min(world, rng.randint(0, 2))):
        rank_import[r] = within(S + J - POLL, "setup") if rng.random() < 0.5 else rng.uniform(J, S + J - POLL)
    steps = 2 + 2 * 3
    pauses = []
    for _ in range(rng.randint(0, 2)):
        where = rng.choice(("python", "c"))
        pauses.append(
            Pause(rng.randrange(world), rng.randrange(2, steps), within(HANG - 2, f"pause in {where}"), where)
        )
    # brief D states, each below the join bound; two on one node apart by two looks at least (one look sees
    # the launcher out of D between them: else they would be one longer D, a stuck launcher)
    d_states: tuple[tuple[int, float, float], ...] = ()
    drawn = [
        (rng.randrange(nodes), rng.uniform(0, S), within(J - POLL, "D state"))
        for _ in range(rng.randint(0, 2))
    ]
    for node, at, held in sorted(drawn):
        if all(n != node or at >= a + d + 2 * POLL for n, a, d in d_states):
            d_states += ((node, at, held),)
    # a node's Ready other than True for a while, well under R; two on one node apart by two looks at least
    flaps: tuple[tuple[int, float, float, str], ...] = ()
    if wing == "kubernetes":
        drawn_flaps = [
            (rng.randrange(nodes), rng.uniform(0, 2 * S + 4 * J), rng.uniform(1.0, 0.75 * READY_HOLD_S))
            for _ in range(rng.randint(0, 3))
        ]
        for node, at, held in sorted(drawn_flaps):
            if all(n != node or at >= a + d + 2 * POLL for n, a, d, _ in flaps):
                flaps += ((node, at, held, rng.choice(("False", "Unknown"))),)
    foreign = tuple((rng.randrange(nodes), rng.uniform(0, S)) for _ in range(rng.randint(0, 1)))
    gpu_facts: tuple[tuple[int, float, int, int | None], ...] = ()
    quirks: tuple[tuple[int, str], ...] = ()
    for xid in rng.choices((92, 94, 95), k=rng.randint(0, 2)):
        node = rng.randrange(nodes)
        # a GPU reset on a rank's GPU fails the run (a fault, not a fact): 95 only on a GPU no rank uses
        rank = None if xid == 95 or rng.random() < 0.5 else node * procs + rng.randrange(procs)
        gpu_facts += ((node, rng.uniform(0, S), xid, rank),)
    if fault == "shared" and nodes == 1:
        return plan_of(rng, fault, 2 * procs, edge, outside, wing)
    quirks = tuple((rng.randrange(world), q) for q in rng.choices(tuple(QUIRKS), k=rng.randint(0, 2)))
    culprit = rng.randrange(nodes if fault in NODE_FAULTS else world)
    if fault == "stuck_launcher" and nodes == 1:
        return plan_of(rng, fault, 2 * procs, edge, outside, wing)
    if fault == "never_started":
        if nodes == 1:
            nodes, procs = 2, max(1, world // 2)
            return plan_of(rng, fault, nodes * procs, edge, outside, wing)
        culprit = rng.choice([n for n in range(nodes) if n != first])
        if outside if outside is not None else rng.random() < 0.6:
            edges.add("start skew, outside")
            late = near(rng, S, False) + BEYOND_S
        else:
            late = S + rng.uniform(BEYOND_S, 3 * S)
        starts[culprit] = math.inf if rng.random() < 0.3 else late + latency[first] - latency[culprit]
    if fault == "never_began":  # its task never begins, or only past the start bound (read the look after)
        if outside if outside is not None else rng.random() < 0.6:
            edges.add("start bound, outside")
            starts[culprit] = near(rng, START_BOUND, False)
        else:
            starts[culprit] = math.inf if rng.random() < 0.5 else START_BOUND + rng.uniform(POLL, START_BOUND)
    if fault is not None and fault not in ("never_started", "never_began"):
        pauses = [p for p in pauses if p.rank != culprit]
    lasting = math.inf
    if fault == "hung" and (outside if outside is not None else rng.random() < 0.5):
        # hung just past the bound, then going on: named, as long as it lasted past the bound for the suite
        # to read it (its node's log latency, the monitor's look and the runner's poll: deadline's spare)
        edges.add("hang bound, outside")
        lasting = near(rng, HANG, False) + 3 * POLL + max(latency)
        strike = 2 + 3  # the first step after the first epoch (warm-up steps, steps per epoch)
        pauses = [p for p in pauses if p.step != strike] + [Pause(culprit, strike, lasting, "python")]
    if fault == "stuck_launcher" and (outside if outside is not None else rng.random() < 0.5):
        # in uninterruptible sleep just past the launchers' deadline, then through: twice the join bound after
        # the last node was heard (a node heard late gives every other launcher time, this one too)
        edges.add("launcher, outside")
        lasting = max(heard) - starts[culprit] + near(rng, 2 * J, False) + 3 * POLL + max(latency)
    # a stall past the hang bound that ends before it is a hang, before the fault (which strikes after the
    # first epoch) or in a healthy run before its last step (there the ranks that did not dump complete as it
    # ends, and a rank not open is no longer one that keeps the stall from being a hang); no other pause in
    # its step
    recovery = None
    if rng.random() < 0.3:
        step = rng.randrange(1, 2 + 3 if fault is not None else steps - 1)
        recovery = (rng.randrange(world), step, rng.uniform(0.1, 0.9))
        pauses = [p for p in pauses if p.step != step]
    first_step = within(FIRST_STEP - 2, "first step")
    early_xid = None
    if fault == "crash" and rng.random() < 0.5:  # an Xid its GPU outlived, over a minute before its error
        before = rng.uniform(BESIDE_BEFORE_S + 1, FIRST_STEP - 4)
        early_xid = (rng.choice((92, 94)), before)
        first_step = max(first_step, before + 1)  # its node's monitor ran by then
    return Plan(
        nodes=nodes,
        procs=procs,
        node_start=tuple(starts),
        launcher_import=tuple(launcher_import),
        rank_import=tuple(rank_import),
        first_step=first_step,
        step_s=rng.uniform(0.05, 1.0),
        offsets=tuple(rng.uniform(-0.2, 0.2) for _ in range(nodes)),
        latency=tuple(latency),
        pauses=tuple(pauses),
        d_states=d_states,
        foreign_xids=foreign,
        gpu_facts=gpu_facts,
        quirks=quirks,
        fault=fault,
        culprit=culprit,
        lasting=lasting,
        xid_warns=rng.random() < 0.3,
        wing=wing,
        flaps=flaps,
        lost_state=rng.choice(("False", "Unknown")),
        recovery=recovery,
        early_xid=early_xid,
        near=tuple(sorted(edges)),
    )


#: The wings a plan runs under, where its fault needs none of its own.
WINGS: tuple[Wing, ...] = typing.get_args(Wing)
#: I, the Slurm wing's start bound: a node's task begins within it of the roll call's step (the defaults').
START_BOUND = start_bound_s(JobSpec("sim", 1, 1))
#: The faults that can last just past their bound and then end (:attr:`Plan.lasting`; a node never started
#: is heard just past the start skew, a Slurm node's task begins just past the start bound).
EDGED: tuple[Fault, ...] = ("never_started", "hung", "stuck_launcher", "never_began")
#: The share of faulty plans that are one of :data:`EDGED` just past its bound, so that each bound's outside
#: is drawn in more than 5% of all plans (the rest are of every class in turn).
EDGED_SHARE = 0.3


def plans(seed: int, count: int, faulty: float = 0.5, start: int = 0) -> Iterator[Plan]:
    """``count`` plans from ``seed``: about ``faulty`` of them with one fault, of every class in turn (some
    of :data:`EDGED` just past their bound)."""
    rng = random.Random(seed)
    for i in range(start, start + count):
        if rng.random() >= faulty:
            yield plan_of(rng)
        elif rng.random() < EDGED_SHARE:
            yield plan_of(rng, EDGED[i % len(EDGED)], outside=True)
        else:
            yield plan_of(rng, FAULTS[i % len(FAULTS)])


def edges(plan: Plan) -> dict[str, int]:
    """The bounds ``plan`` drew a value within 5% of, each once (for a tally over many plans)."""
    return dict.fromkeys(plan.near, 1)


def shapes(plan: Plan) -> dict[str, int]:
    """The shapes ``plan`` drew beside its fault (if any), each once (for a tally over many plans)."""
    drawn = {
        f"{plan.wing} wing": True,
        "nodes on their way": plan.wing != "local" and any(s > S for s in plan.node_start),
        "Ready flaps": bool(plan.flaps),
        "a stall recovered": plan.recovery is not None,
        "setup past S": any(i > S for i in plan.rank_import),
        "an Xid well before the error": plan.early_xid is not None,
    }
    return {name: 1 for name, yes in drawn.items() if yes}


def slow_setup_named(plan: Plan) -> bool:
    """Whether ``plan`` draws what the suite now names wrongly: a rank whose imports and device setup take past
    S (within the S + J its own watchdog gives them) while a peer keeps the group from forming.

    The rank enters ``init_process_group`` and waits there silently until its join bound runs out, up to
    S + 2 J after its process started; the suite names a rank seen and never heard at S + J + m after it
    was seen (``evidence/hangs.py`` ``never_joined``), so it names this one with the culprit, and names the
    culprit only then.
    """
    stuck = plan.fault in ("never_joined", "silent_rank", "stuck_in_setup")
    return stuck and any(i > S for r, i in enumerate(plan.rank_import) if r != plan.culprit)


__all__ = [
    "FAULTS", "WINGS", "Fault", "Outcome", "Pause", "Plan", "Wing", "deadline", "edges", "expected",
    "expected_marks", "plan_of", "plans", "shapes", "simulate", "slow_setup_named", "wrongs",
]  # fmt: skip
