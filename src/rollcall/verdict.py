"""The verdict's data: what each rank did, what was wrong, and the run's figures, as typed values.

:func:`rollcall.judge.judge` builds a :class:`Verdict` once, from what a backend :class:`Observed` of a run
(the roll call, the layout asked for, the job's end) and the :class:`Criteria` it is held to. Every report
(the failure message, ``results.json``, the per-rank junit, ``report.html``) reads the verdict; none parses
a sentence.

- A :class:`Problem` is one thing wrong: its :class:`Kind`, the line a person reads, and for each rank it
  names what it says about that rank (``no throughput``, ``error: ...``).
- A :class:`RankResult` is one rank: what it reported, its node and pod, its :class:`RankState` (the worst of
  what its problems' kinds mean) and its problems.
- :attr:`Verdict.outcome` is ``PASSED`` when there is no problem at all; a problem a check raised as a
  warning (``Problem.warning``: a fitness rule made a warning, drift under ``--drift warn``) is kept apart in
  :attr:`Verdict.warnings`, shown by every report, and fails nothing.
- :attr:`Verdict.nodes_detail` holds each node's facts (:mod:`rollcall.evidence.nodefacts`).
- A run the infrastructure disrupted (a pod evicted, preempted, its node deleted, lost, drained or reclaimed)
  has a ``DISRUPTION`` problem first, naming the pod, its node and the reason; the ranks' errors follow as
  its consequences (:attr:`Verdict.disruption`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rollcall.collect import RANKS_JUNIT_FILE, REPORT_FILE, RESULTS_FILE
from rollcall.evidence.baseline import Baselines, ConfigKey, Figures
from rollcall.evidence.drift import DriftMode, Mismatch
from rollcall.evidence.endings import Disruption
from rollcall.evidence.fitness import FitnessPolicy, Unfit
from rollcall.evidence.gpu_events import GpuEventSeen
from rollcall.evidence.nodefacts import NodeFacts
from rollcall.evidence.perf import ComputeStraggler, Mfu, PerfFigures, PerfReport, SlowGroup
from rollcall.evidence.rootcause import Analysis, Line
from rollcall.evidence.xids import XidPolicy
from rollcall.ranges import counted

if TYPE_CHECKING:
    from rollcall.backends import JobStatus
    from rollcall.jobspec import JobSpec
    from rollcall.ranklog import CompileCache, Mark, RollCall

#: Settings of the workload, from its ``throughput`` events, that tell one configuration from another.
WORKLOAD_KEYS: tuple[str, ...] = ("model", "seq_len", "batch_size")


@dataclass(frozen=True)
class Layout:
    """The shape the job was asked for."""

    nodes: int
    procs_per_node: int

    @property
    def world_size(self) -> int:
        """Ranks expected in all."""
        return self.nodes * self.procs_per_node

    def node_of(self, rank: int) -> int:
        """The node torchrun's static rendezvous puts ``rank`` on."""
        return rank // self.procs_per_node


class Outcome(enum.Enum):
    """The verdict in one word."""

    PASSED = "passed"
    FAILED = "failed"


class RankState(enum.Enum):
    """What one rank did, in one word (``report.html`` colours a rank by it)."""

    OK = "ok"
    MISSING = "missing"  # never reported an event, or reported an invalid value; said no error of its own
    RAISED = "raised"  # reported an error (its own, or an echo of another rank's) and never answered
    STRAGGLER = "straggler"  # answered, but below --straggler-ratio of the median throughput or compute time
    SLOW = "slow"  # answered, but below --min-throughput, on a slow link (or failed another check naming it)
    FAILED = "failed"  # answered the roll call, then exited non-zero or was killed by a signal
    WRONG = "wrong"  # answered, but trained wrongly: a diverged replica, wrong all-reduce data, a failed loss
    HUNG = "hung"  # stalled past its --hang-after outside any collective: it holds the others up
    WAITING = "waiting"  # stalled inside a collective or barrier, waiting for another rank (a victim)
    SILENT = "silent"  # heartbeat and progress stopped while its process still existed (seen from outside)

    @property
    def answered(self) -> bool:
        """Whether a rank in this state answered the roll call (missing, raised, hung, waiting, silent)."""
        return self not in UNANSWERED

    @property
    def severity(self) -> int:
        """Higher is worse: a rank is in the worst state any of its problems puts it in."""
        return _SEVERITY[self]


#: A rank's state is its problems' worst: a stalled rank is missing events too, and shows as what stalled it.
_WORSE = ("ok", "slow", "straggler", "failed", "missing", "raised", "waiting", "hung", "silent", "wrong")
_SEVERITY = {RankState(value): n for n, value in enumerate(_WORSE)}
#: The states of a rank stalled while others waited or went on: each has its own tile and its own count.
STALLED = (RankState.HUNG, RankState.WAITING, RankState.SILENT)
#: The states of a rank that did not answer the roll call.
UNANSWERED = frozenset({*STALLED, RankState.MISSING, RankState.RAISED})


class Owner(enum.Enum):
    """Whose a failure is."""

    CLUSTER = "cluster"
    PLATFORM = "platform"
    WORKLOAD = "workload"
    UNDETERMINED = "undetermined"

    @property
    def words(self) -> str:
        """How people read it, with its one name (:attr:`value`): ``the workload's (rollcall's own)`` ..."""
        return _WORDS[self]


_WORDS = {
    Owner.CLUSTER: "the cluster's",
    Owner.PLATFORM: "the platform's",
    Owner.WORKLOAD: "the workload's (rollcall's own)",
    Owner.UNDETERMINED: "undetermined",
}


@dataclass(frozen=True)
class Blame:
    """Whose one problem is, and why (a few words)."""

    owner: Owner
    why: str

    def as_dict(self) -> dict[str, str]:
        """The blame, JSON-ready."""
        return {"owner": self.owner.value, "why": self.why}

    @property
    def line(self) -> str:
        """``the cluster's: an NCCL (GPU communication or network) error``."""
        return f"{self.owner.words}: {self.why}"


@dataclass(frozen=True)
class Kind:
    """What sort of problem: its name, the state it puts the ranks it names in, and whose it is.

    Each kind is declared once, by the check that raises it (:class:`rollcall.checks.runview.Check`'s
    ``kinds``; ``docs/checks.md`` lists them), or by the one module that raises a kind no check does
    (``isolated``: :mod:`rollcall.isolation.probe`).
    """

    #: Its name, as every report and ``results.json`` say it (``hung``).
    value: str
    #: The state of a rank that a problem of this kind names (a rank is in the worst of its problems').
    rank_state: RankState
    #: Whose every problem of this kind is; None where it is placed problem by problem (an error by what it
    #: says, a job's end by its reason: :mod:`rollcall.checks.blame`).
    owner: Blame | None
    #: The ranks it names answered, but too slowly (a straggler, below a throughput or bandwidth floor).
    too_slow: bool = False
    #: A problem of this kind follows from another when one stands (ranks waiting for another, the events a
    #: rank never said): never the first failure then (:attr:`Verdict.first_failure`).
    follows: bool = False

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run.

    Attributes:
        kind: what sort of problem.
        message: the line a person reads.
        ranks: for each rank it names (in the world), what it says about that rank.
        detail: the check's own typed finding (e.g. the stragglers, a regression), for reports.
        warning: reported, but fails nothing (:attr:`Verdict.warnings`).
        blame: whose it is: the cluster's, the platform's, rollcall's own, or undetermined.
    """

    kind: Kind
    message: str
    ranks: Mapping[int, str] = field(default_factory=dict)
    detail: Any = None
    warning: bool = False
    #: Whose it is (:mod:`rollcall.checks.blame`), set by the judge.
    blame: Blame | None = None

    @property
    def follows(self) -> bool:
        """Whether it follows from another problem (never the first failure, never a rank at fault).

        Its kind does (``Kind.follows``), or it is a line of the ranks' errors that only echo another's (a
        peer gone, a connection reset).
        """
        if self.kind.follows:
            return True
        line = self.detail
        return (
            isinstance(line, Line)
            and not line.root
            and bool(line.failures)
            and all(f.echo for f in line.failures)
        )

    def as_dict(self) -> dict[str, Any]:
        """The problem, JSON-ready, with whose it is."""
        whose = self.blame.as_dict() if self.blame is not None else {"owner": None, "why": None}
        return {"kind": self.kind.value, "message": self.message, "ranks": sorted(self.ranks), **whose}


@dataclass(frozen=True)
class Stats:
    """Summary of one per-rank measure over the ranks that reported it."""

    total: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    median: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        """Stats of ``values``; all None when there are none."""
        if not values:
            return cls()
        ordered = sorted(values)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        total = math.fsum(ordered)
        return cls(total, total / len(ordered), ordered[0], ordered[-1], median)

    def as_dict(self) -> dict[str, float | None]:
        """The stats as a JSON-ready mapping."""
        return asdict(self)


@dataclass(frozen=True)
class Observed:
    """What a backend observed of a run: the roll call, the layout asked for, the job's end, the spec.

    ``status`` and ``spec`` are unknown (None) when only logs are judged (``rollcall check-logs``); without a
    spec the run has no configuration, so no baseline applies.
    """

    roll: RollCall
    layout: Layout
    status: JobStatus | None = None
    spec: JobSpec | None = None
    #: What ran each node's agent, as the messages name it (:data:`rollcall.evidence.endings.UNITS`):
    #: a ``pod``, or a ``node`` whose processes the ranks are (local, Slurm), whose log is then named a log.
    unit: str = "pod"


@dataclass(frozen=True)
class Criteria:
    """What a run is held to beyond answering the roll call; the defaults add only the fitness rules.

    Attributes:
        min_throughput: samples/s every rank must reach.
        straggler_ratio: ranks below this times the median throughput, or above the median compute time
            over it, fail (0: off).
        min_busbw: GB/s of all-reduce bus bandwidth every node, pair of nodes and the world must reach.
        busbw_ratio: a node (pair) below this times the median node's (pair's) bus bandwidth fails (0: off).
        busbw_floors: without ``min_busbw``, hold every node, pair and world to the published floor of the
            run's instance type (``--min-busbw auto``; :mod:`rollcall.evidence.floors`), where one is known.
        baselines: each configuration's accepted figures (None: no regression gate); a run is compared
            with the entry of its own configuration (:class:`~rollcall.evidence.baseline.ConfigKey`), if there
            is one.
        baseline_file: where ``baselines`` were read from, for the reports.
        max_regression_pct: how much worse than its baseline a figure may be.
        fitness: which fitness rules warn and which are off (every rule fails by default).
        drift: what nodes differing in a version do: fail, warn (the default) or nothing.
        expect: the golden configuration, ``(key, glob)`` pairs every node's facts must match.

    One value per session (:func:`rollcall.gate.criteria_of` builds it from the options); every attempt is
    judged once against all of it.
    """

    min_throughput: float | None = None
    straggler_ratio: float = 0.0
    min_busbw: float | None = None
    busbw_ratio: float = 0.0
    busbw_floors: bool = False
    baselines: Baselines | None = None
    baseline_file: str | None = None
    max_regression_pct: float = 0.0
    fitness: FitnessPolicy = field(default_factory=FitnessPolicy)
    #: The Xid catalog's classes with ``--xid-class`` over them (:mod:`rollcall.evidence.xids`).
    xids: XidPolicy = field(default_factory=XidPolicy)
    drift: DriftMode = "warn"
    expect: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RankResult:
    """One rank of the world: what it reported, where it ran, and what was wrong with it."""

    rank: int
    node: int
    pods: tuple[str, ...] = ()
    reported: tuple[str, ...] = ()
    throughput: float | None = None
    epoch_time: float | None = None
    complete: bool = False
    problems: tuple[Problem, ...] = ()
    #: When it said each event that carried a time, earliest first (the page's timeline).
    marks: tuple[Mark, ...] = ()
    #: What its first step found in the compiler's cache (None: it did not say).
    compile_cache: CompileCache | None = None

    @property
    def pod(self) -> str | None:
        """The first log (pod, or local node) the rank was read from."""
        return self.pods[0] if self.pods else None

    @property
    def state(self) -> RankState:
        """Its problems' worst state (``OK`` without); ``RAISED``, not ``MISSING``, if it said an error."""
        worst = max(
            (p.kind.rank_state for p in self.problems), key=_SEVERITY.__getitem__, default=RankState.OK
        )
        return RankState.RAISED if worst is RankState.MISSING and "error" in self.reported else worst

    @property
    def notes(self) -> list[str]:
        """What each of its problems says about it."""
        return [p.ranks[self.rank] for p in self.problems]

    @property
    def answered(self) -> bool:
        """Reported every required event with sound values: no problem puts it in an :data:`UNANSWERED` state.

        A straggler, a slow rank and one that exited non-zero after ``complete`` answered (see
        :attr:`too_slow`); one that missed an event, reported an error, hung, waited or went silent did not.
        """
        return self.state.answered

    @property
    def too_slow(self) -> bool:
        """Answered, but a straggler or below a throughput or bandwidth floor."""
        return any(p.kind.too_slow for p in self.problems)

    @property
    def at_fault(self) -> bool:
        """Named by a problem that follows from no other: a cause, not a rank that waited or echoed."""
        return any(not p.follows for p in self.problems)

    @property
    def wall_s(self) -> float | None:
        """Seconds from its first timed event to its last (None: fewer than two carried a time)."""
        times = [m.time for m in self.marks]
        return max(times) - min(times) if len(times) > 1 else None


@dataclass(frozen=True)
class FirstFailure:
    """The first failure of a failed run, whatever its class: the one finding every report leads with.

    Attributes:
        summary: ``first failure: ...`` (``first failure undetermined: ...`` with why, where none is told).
        kind: the kind of the problem it comes from (``undetermined`` where none).
        ranks: the ranks it names; owner: whose it is (the cluster's, the platform's, rollcall's own,
            undetermined).
        analysis: how the ranks' errors came about, where they said why (:class:`Analysis`).
    """

    summary: str
    kind: str
    ranks: tuple[int, ...] = ()
    owner: str = "undetermined"
    analysis: Analysis | None = None

    @classmethod
    def of(cls, findings: Sequence[Problem]) -> FirstFailure | None:
        """The first failure among ``findings`` (in the checks' order); None when there are none.

        The first problem whose kind does not follow from another's (``Kind.follows``); a rank's errors lead
        with how they came about (:attr:`Analysis.headline`). Where every problem follows from another (the
        events missing, nothing said why), the first failure is undetermined, with the first sign of it.
        """
        if not findings:
            return None
        cause = next((p for p in findings if not p.follows), None)
        if cause is None:
            sign = findings[0]
            return cls(
                f"first failure undetermined: no rank said why and no check named a cause; the first sign: "
                f"{sign.message}",
                "undetermined",
                tuple(sorted(sign.ranks)),
            )
        analysis = cause.detail if isinstance(cause.detail, Analysis) else None
        headline = analysis.headline() if analysis is not None else None
        owner = cause.blame.owner.value if cause.blame is not None else "undetermined"
        summary = headline or f"first failure: {cause.message}"
        return cls(summary, cause.kind.value, tuple(sorted(cause.ranks)), owner, analysis)

    def as_dict(self) -> dict[str, Any]:
        """``results.json``'s ``root_cause``: the summary, kind, ranks and owner, and the errors' analysis."""
        extra = self.analysis.as_dict() if self.analysis is not None else {}
        return {
            **extra,
            "summary": self.summary,
            "kind": self.kind,
            "ranks": list(self.ranks),
            "owner": self.owner,
        }


@dataclass(frozen=True)
class Verdict:
    """What the roll call showed, rank by rank; built by :func:`rollcall.judge.judge`."""

    layout: Layout
    ranks: Mapping[int, RankResult]
    findings: tuple[Problem, ...]
    missing: Mapping[str, list[int]]
    unexpected_ranks: list[int]
    throughput: Stats = field(default_factory=Stats)
    epoch_time_mean: float | None = None
    mfu_mean: float | None = None
    #: The workload's settings every rank's throughput event agreed on (see :data:`WORKLOAD_KEYS`).
    workload: Mapping[str, Any] = field(default_factory=dict)
    #: Per-rank compute times and per-group bus bandwidth, as the ranks reported them
    #: (:mod:`rollcall.evidence.perf`).
    perf: PerfFigures = field(default_factory=PerfFigures)
    #: The distinct parameter digests the ranks reported after each epoch and at completion (one: agreed).
    replicas: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: What the run was held to.
    criteria: Criteria = field(default_factory=Criteria, compare=False)
    #: The run's configuration (None when the job asked for is unknown) and its baseline, if there is one.
    config: ConfigKey | None = None
    baseline: Figures | None = None
    #: Problems raised as warnings: shown, failing nothing.
    warnings: tuple[Problem, ...] = ()
    #: Each node's facts, as its ranks read them and the backend observed them (:mod:`.checks.fitness`).
    nodes_detail: tuple[NodeFacts, ...] = ()
    #: Each of the workload's own kernels: whether the run trained with it, and why (the lowest rank's word).
    kernels: Mapping[str, str] = field(default_factory=dict)
    #: What the nodes' GPUs said during the run (NVML's events), each tied to its rank and classified.
    gpu_events: tuple[GpuEventSeen, ...] = ()

    @property
    def mfu(self) -> Mfu | None:
        """The run's MFU with the peak it was held to, flagged past its bound (:class:`Mfu`); None unsaid."""
        return self.perf.mfu(self.mfu_mean)

    @property
    def unfit(self) -> list[Unfit]:
        """Every fitness rule a device broke, failures and warnings alike."""
        return [u for u in _unfit(*self.findings, *self.warnings) if u.severity != "off"]

    def out_of_service(self) -> dict[int, list[str]]:
        """The one predicate of "unfit" (docs/nodes.md): each node a finding takes out, with why, by index.

        A finding taking its node out (``Unfit.out``, a warning's too); a node's own fact ``--expect`` misses.
        """
        found: dict[int, list[str]] = {}
        for u in (u for u in self.unfit if u.out == "node"):
            found.setdefault(u.device.node, []).append(str(u))
        for m in (p.detail for p in self.findings if isinstance(p.detail, Mismatch) and p.detail.out):
            found.setdefault(m.node, []).append(str(m))
        return found

    @property
    def unfit_nodes(self) -> list[str]:
        """The names of the nodes :meth:`out_of_service` takes out, in node order."""
        known = {n.node: n.name for n in self.nodes_detail}  # else a node no rank reported from, by name
        rest = {u.device.name for u in self.unfit if u.out == "node" and u.device.node not in known}
        return [known[i] for i in sorted(self.out_of_service()) if i in known] + sorted(rest)

    def node_verdicts(self) -> list[dict[str, Any]]:
        """Each node's facts with its verdict (``unfit`` or ``fit``) and the reasons, JSON-ready."""
        reasons: dict[int, list[str]] = {}
        for u in self.unfit:
            reasons.setdefault(u.device.node, []).append(f"{u.severity}: {u}")
        failed = self.out_of_service()
        verdict = {True: "unfit", False: "fit"}
        return [
            {**n.as_dict(), "verdict": verdict[n.node in failed], "reasons": reasons.get(n.node, [])}
            for n in self.nodes_detail
        ]

    @property
    def outcome(self) -> Outcome:
        """PASSED when there is no problem at all."""
        return Outcome.FAILED if self.findings else Outcome.PASSED

    @property
    def passed(self) -> bool:
        """Shorthand for ``outcome is Outcome.PASSED``."""
        return self.outcome is Outcome.PASSED

    @property
    def problems(self) -> list[str]:
        """Every problem's line, in the order the checks found them."""
        return [p.message for p in self.findings]

    @property
    def failed_ranks(self) -> dict[int, list[str]]:
        """Ranks of the world with a problem, and what each problem says about them."""
        return {r: result.notes for r, result in sorted(self.ranks.items()) if result.problems}

    @property
    def answered(self) -> int:
        """Ranks inside the world that reported every required event with sound values (stragglers too)."""
        return sum(1 for result in self.ranks.values() if result.answered)

    @property
    def stalled(self) -> dict[str, int]:
        """How many ranks are hung, waiting or silent, by state (the states that stopped the run)."""
        counts = {s.value: 0 for s in STALLED}
        for result in self.ranks.values():
            if result.state in STALLED:
                counts[result.state.value] += 1
        return {k: n for k, n in counts.items() if n}

    @property
    def too_slow(self) -> int:
        """Ranks that answered, but too slowly (:attr:`RankResult.too_slow`)."""
        return sum(1 for result in self.ranks.values() if result.too_slow)

    @property
    def figures(self) -> Figures:
        """The figures the regression gate compares."""
        return Figures.of(self.throughput.total, self.throughput.median, self.epoch_time_mean, self.perf)

    @property
    def root_cause(self) -> Analysis | None:
        """How the ranks' errors came about, first failure first (None when no rank reported one)."""
        for p in self.findings:
            if isinstance(p.detail, Analysis):
                return p.detail
        return None

    @property
    def first_failure(self) -> FirstFailure | None:
        """The first failure, whatever its class (None when the run passed): what every report leads with."""
        return FirstFailure.of(self.findings)

    @property
    def disruption(self) -> Disruption | None:
        """The infrastructure disruption that ended the run, if one did."""
        analysis = self.root_cause
        return analysis.disruption if analysis is not None else None

    @property
    def perf_report(self) -> PerfReport:
        """The compute and bandwidth figures with the compute stragglers and slow links the checks found."""
        c = self.criteria
        return PerfReport(
            figures=self.perf,
            straggler_ratio=c.straggler_ratio,
            min_busbw=c.min_busbw,
            busbw_ratio=c.busbw_ratio,
            stragglers=tuple(s for p in self.findings if isinstance(p.detail, tuple) for s in _of(p.detail)),
            slow=tuple(p.detail for p in self.findings if isinstance(p.detail, SlowGroup)),
        )

    def of_kind(self, kind: Kind) -> list[Problem]:
        """The problems of ``kind``."""
        return [p for p in self.findings if p.kind is kind]

    def message(self, logs_hint: str | None = None) -> str:
        """A failure message a person can act on: which ranks lack what, on which node, and where logs are."""
        lay = self.layout
        slow = f", {self.too_slow} of them too slow" if self.too_slow else ""
        head = (
            f"roll call: {self.answered} of {lay.world_size} ranks answered{slow} "
            f"({counted(lay.nodes, 'node')} x {counted(lay.procs_per_node, 'proc')})"
        )
        lines = [head, *(f"  - {p}" for p in self.problems)]
        if self.findings and self.findings[0].blame is not None:  # whose the first problem is, under it
            lines.insert(2, f"    whose: {self.findings[0].blame.line}")
        lines += [f"  - warning: {p.message}" for p in self.warnings]
        if logs_hint and self.findings:
            lines.append(f"  logs: {logs_hint}")
        if self.root_cause is not None:
            where = f"{RESULTS_FILE} (root_cause, errors), {RANKS_JUNIT_FILE}, {REPORT_FILE}"
            lines.append(f"  every rank's own error: {where}")
        return "\n".join(lines)


def _unfit(*problems: Problem) -> list[Unfit]:
    """The unfit devices ``problems`` hold (``unfit_device`` problems: their detail is the devices' rules)."""
    return [u for p in problems if isinstance(p.detail, tuple) for u in p.detail if isinstance(u, Unfit)]


def _of(detail: tuple[Any, ...]) -> list[ComputeStraggler]:
    """The compute stragglers a problem's detail holds (``compute_straggler`` problems')."""
    return [s for s in detail if isinstance(s, ComputeStraggler)]
