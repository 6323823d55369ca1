"""The run as every check sees it: what a backend observed, the criteria, and what follows, derived once.

A check is a named predicate ``RunView -> Iterable[Problem]`` in a module of its own under
:mod:`rollcall.checks`, which declares it once as a :class:`Check`: what it detects and reads, its kinds of
problem, and how it acts on a run beyond the verdict (whether it may end the run early, and when, by an
:class:`EarlyStop` over the same :class:`RunView`; whether its failure is run again; whether only the
release gate finds it; whether it judges the trials of ``--isolate``). The runner, the isolation probe and
the release gate read those declarations, never a list of their own. :class:`RunView` holds what several
checks share (each rank's node, the ranks whose values are sound, their figures, each node's facts, the
baseline), each computed at most once per verdict.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from rollcall.evidence.baseline import ConfigKey, Figures, Reference
from rollcall.evidence.clocks import Bounds
from rollcall.evidence.departures import Departure, departures
from rollcall.evidence.gpu_events import GpuEventSeen, events_seen
from rollcall.evidence.gpu_owners import RunGpus
from rollcall.evidence.nodefacts import NodeFacts, node_facts
from rollcall.evidence.perf import PerfFigures
from rollcall.ranges import ranges
from rollcall.ranklog import RankReport, RollCall
from rollcall.verdict import WORKLOAD_KEYS, Criteria, Kind, Layout, Observed, Problem, Stats

#: Nodes listed one by one in a problem's line; beyond, the ranks and the nodes are listed as two ranges.
BY_NODE_GROUPS = 8


@dataclass(frozen=True)
class RunView:
    """The run as every check reads it: what was observed, the criteria, and what follows from them."""

    observed: Observed
    criteria: Criteria
    #: The check whose early stop ended the job (its name), when one did: the run is judged as it stood then.
    stopped_by: str | None = None

    @property
    def roll(self) -> RollCall:
        """The roll call."""
        return self.observed.roll

    @property
    def layout(self) -> Layout:
        """The layout asked for."""
        return self.observed.layout

    def node(self, rank: int) -> int:
        """The node ``rank`` said it ran on, else the one it should have run on."""
        report = self.roll.ranks.get(rank)
        reported = report.node_rank if report else None
        return reported if reported is not None else self.layout.node_of(rank)

    def by_node(self, ranks: Iterable[int]) -> str:
        """``7 (node 0); 19, 40-47 (node 1)``: ranks grouped by the node they ran (or should have run) on.

        Past :data:`BY_NODE_GROUPS` nodes, one list and the nodes' range: ``0-2047 (nodes 0-63)``.
        """
        groups: dict[int, list[int]] = defaultdict(list)
        for r in ranks:
            groups[self.node(r)].append(r)
        if len(groups) > BY_NODE_GROUPS:
            return f"{ranges(r for rs in groups.values() for r in rs)} (nodes {ranges(groups)})"
        return "; ".join(f"{ranges(rs)} (node {n})" for n, rs in sorted(groups.items()))

    @property
    def log_word(self) -> str:
        """What a rank's log is called in a message: its ``pod``, or the ``log`` of a node's processes."""
        return "pod" if self.observed.unit == "pod" else "log"

    @cached_property
    def bounds(self) -> Bounds:
        """The bounds the run's parts are held to, each on its own clock (:mod:`rollcall.evidence.clocks`)."""
        return Bounds.of(self.observed.spec)

    @cached_property
    def reports(self) -> dict[int, RankReport]:
        """The reports of the ranks inside the world, by rank."""
        return {r: rep for r in range(self.layout.world_size) if (rep := self.roll.ranks.get(r)) is not None}

    @cached_property
    def departures(self) -> list[Departure]:
        """The ranks that left before ``complete`` without an error (any status, 0 included), earliest first.

        From each rank's ``exit`` event, the launcher's records of its workers and the nodes' monitors' lines
        of the ranks' processes (:mod:`rollcall.evidence.departures`).
        """
        status, roll = self.observed.status, self.roll
        ended = status.terminations if status is not None else ()
        return departures(
            self.reports,
            ended,
            self.node,
            self.observed.unit,
            processes=roll.processes,
            asked_to_end=roll.stopped,
        )

    @cached_property
    def invalid(self) -> dict[int, list[str]]:
        """Ranks that reported a non-finite or non-positive value, and which."""
        found = {}
        for r, report in self.reports.items():
            bad = [f"throughput={report.throughput}"] if _bad(report.throughput) else []
            bad += [f"epoch {e} seconds={s}" for e, s in sorted(report.epoch_times.items()) if _bad(s)]
            if bad:
                found[r] = bad
        return found

    @cached_property
    def sound(self) -> dict[int, RankReport]:
        """Reports of the ranks whose values are all sound: these are measured."""
        return {r: rep for r, rep in self.reports.items() if r not in self.invalid}

    @cached_property
    def throughputs(self) -> dict[int, float]:
        """Each measured rank's throughput."""
        return {r: rep.throughput for r, rep in self.sound.items() if rep.throughput is not None}

    @cached_property
    def throughput(self) -> Stats:
        """Throughput over the measured ranks."""
        return Stats.of(list(self.throughputs.values()))

    @cached_property
    def epoch_time_mean(self) -> float | None:
        """Mean of the measured ranks' mean epoch times."""
        means = [t for rep in self.sound.values() if (t := rep.epoch_time) is not None]
        return math.fsum(means) / len(means) if means else None

    @cached_property
    def perf(self) -> PerfFigures:
        """The ranks' compute times and the groups' bus bandwidth."""
        return PerfFigures.of(self.roll, self.layout.world_size, self.node, self.log_word)

    @cached_property
    def figures(self) -> Figures:
        """The figures the regression gate compares."""
        return Figures.of(self.throughput.total, self.throughput.median, self.epoch_time_mean, self.perf)

    @cached_property
    def workload(self) -> dict[str, Any]:
        """The workload settings every rank reporting throughput agreed on."""
        return _workload(self)

    @cached_property
    def config(self) -> ConfigKey | None:
        """The run's configuration, when the job asked for is known."""
        spec = self.observed.spec
        return ConfigKey.of(spec, self.workload) if spec is not None else None

    @cached_property
    def nodes_detail(self) -> tuple[NodeFacts, ...]:
        """Each node's facts: what its ranks read, and what the backend observed of it."""
        status = self.observed.status
        return node_facts(self.reports, self.node, status.node_info if status is not None else None)

    @cached_property
    def gpu_events(self) -> tuple[GpuEventSeen, ...]:
        """What the nodes' GPUs said during the run, each tied to its node, rank and phase, and classified.

        Each says whether its GPU is the run's: on a node the run shares, one its ranks named
        (:mod:`rollcall.evidence.gpu_owners`).
        """
        roll, status = self.roll, self.observed.status
        owns = status.owns_nodes if status is not None else None
        world = self.layout.world_size
        owners = RunGpus.of(
            self.reports, roll.processes, roll.gpu_events, roll.launchers, world_size=world, owns_nodes=owns
        )
        return events_seen(roll.gpu_events, self.reports, self.node, self.criteria.xids, owners)

    @cached_property
    def baseline(self) -> Figures | None:
        """The accepted figures of the run's configuration, when the criteria hold baselines."""
        baselines, config = self.criteria.baselines, self.config
        entry = baselines.get(config) if baselines is not None and config is not None else None
        return entry.figures if entry is not None else None

    @cached_property
    def baseline_reference(self) -> Reference | None:
        """The history the baseline is the median of (``--baseline-history``), with its spreads."""
        baselines, config = self.criteria.baselines, self.config
        entry = baselines.get(config) if baselines is not None and config is not None else None
        return entry.reference if entry is not None else None


#: What the judge runs: a named predicate over the run, the problems it finds.
Predicate = Callable[[RunView], Iterable[Problem]]
#: Why to end the job now, or None: over the run as it stands while its job runs (no end known), at ``now``
#: on the roll call's clock.
StopReason = Callable[[RunView, float], str | None]


@dataclass(frozen=True)
class EarlyStop:
    """How a check ends a run before its job does: the same judgement, made while the job runs.

    The runner asks :attr:`reason` about every second over the live run (the roll call as the logs arrive, the
    layout, the spec's bounds); the first reason of the checks, in the judge's order, ends the job, and the
    judge then reads the roll call as it stood at that moment, knowing which check stopped it. Where it fires,
    the check (or, for a stop that covers several checks' problems, one of :attr:`judged_as`) names the
    problem in the verdict: a stop reads the evidence its check reads, over the same functions of
    :mod:`rollcall.evidence`, so that it fires only where its check names the problem at that moment
    (``tests/unit/test_check_actions.py`` holds each stop to it).
    """

    #: Why to end the job now, or None (a built-in check's calls its ``evidence`` module's ``stop_reason``).
    reason: StopReason
    #: When it fires, in the docs' words (``docs/checks.md``).
    when: str
    #: The kinds of problem the verdict names where it fired, when more than the check's own (the hang's stop
    #: ends at a silent rank, or one that never joined, as well as at a hung one).
    judged_as: tuple[Kind, ...] = ()


@dataclass(frozen=True)
class Check:
    """One check, declared once by its module (``rollcall.checks.<name>.CHECK``).

    The judge runs it (:data:`rollcall.judge.ORDER` says when), the kinds of problem it declares carry their
    rank state and owner, and ``docs/checks.md`` is generated from it (``python -m rollcall.checks
    --markdown``). How it acts on a run beyond its problems is declared here too, read by the runner (its
    early stop, whether a failure is retried, the release gate's kinds) and the isolation probe (the trials'
    checks); the defaults: it never ends a run early, its failure is retried, it is not the release gate's
    alone and it does not judge a trial.
    """

    #: The predicate, named after the check and its module.
    predicate: Predicate
    #: What it detects, as the docs' table says it (Markdown).
    detects: str
    #: What it reads beyond the ranks' events: modules of :mod:`rollcall.evidence`, the backend's records.
    reads: str
    #: The kinds of problem it declares; it may raise another check's too (``busbw_floors`` a ``slow_link``).
    kinds: tuple[Kind, ...] = ()
    #: It needs no job, only the ranks' logs: ``rollcall check-logs`` holds saved logs to it.
    logs_only: bool = False
    #: It may end the run before its job ends, and when (None: it judges the ended run only).
    stops: EarlyStop | None = None
    #: A run it failed may be run again under ``--job-retries``; False where the same job would fail the same
    #: way (a workload the suite refuses), whatever else failed.
    retried: bool = True
    #: Only the release gate finds its problems (a straggler, a slow link, a regression): a run failed by such
    #: checks alone is not run again, as a retry would hide them.
    gate_only: bool = False
    #: It judges the short trials of ``--isolate`` too (rendezvous and bandwidth only, no training).
    in_trials: bool = False
    #: What it checks in a trial in place of :attr:`predicate`, where a trial says less than a run.
    in_trials_as: Predicate | None = None

    @property
    def name(self) -> str:
        """The check's name: its predicate's and its module's."""
        return self.predicate.__name__

    @property
    def stop_kinds(self) -> tuple[Kind, ...]:
        """The kinds of problem the verdict names where its early stop fired: its own, and those it adds."""
        extra = self.stops.judged_as if self.stops is not None else ()
        return (*self.kinds, *(k for k in extra if k not in self.kinds))

    def for_trials(self) -> Check:
        """The check as it judges a trial of ``--isolate``: :attr:`in_trials_as` in place of its predicate."""
        return self if self.in_trials_as is None else replace(self, predicate=self.in_trials_as)

    def __call__(self, run: RunView) -> Iterable[Problem]:
        """The problems it finds in ``run``."""
        return self.predicate(run)


def _workload(run: RunView) -> dict[str, Any]:
    """Each of :data:`WORKLOAD_KEYS` that every rank reporting throughput gave, with one value for all.

    A key no throughput event settles (no rank got that far: a failed run) is read, the same way, from the
    ranks' ``start`` events.
    """
    reports = run.reports.values()
    found = _agreed([r.details for r in reports if r.throughput is not None])
    started = _agreed([r.start for r in reports if r.start is not None])
    return {k: found.get(k, started.get(k)) for k in WORKLOAD_KEYS if k in found or k in started}


def _agreed(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each of :data:`WORKLOAD_KEYS` that every one of ``events`` gave, with one value for all."""
    seen: dict[str, set[str | int | float | None]] = defaultdict(set)
    for fields in events:
        for key in WORKLOAD_KEYS:
            value = fields.get(key)
            ok = isinstance(value, str | int | float) and not isinstance(value, bool)
            seen[key].add(value if ok else None)  # absent on one rank: no agreement
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}


def _bad(value: float | None) -> bool:
    return value is not None and not (math.isfinite(value) and value > 0)


__all__ = ["BY_NODE_GROUPS", "Check", "EarlyStop", "Predicate", "RunView", "StopReason"]
