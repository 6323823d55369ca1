"""One judge: a run's evidence and criteria in, a frozen :class:`~rollcall.verdict.Verdict` out.

:func:`judge` gathers the :class:`Facts` once (each rank's node, the ranks whose values are sound, their
figures), runs every check of :data:`CHECKS` over them, and builds the verdict from the problems they return.
A check is a function ``Facts -> Iterable[Problem]``; adding one is writing it and listing it in
:data:`CHECKS`. A run ``PASSED`` when no check found anything:

- no rank stalled past its ``--hang-after`` (the workload's watchdog dumped its stacks): a rank stalled
  outside any collective is named hung, with its node, pod and innermost frames of the workload's own code;
  the ranks stalled inside a collective are folded into one line as waiting (:mod:`rollcall.checks.hangs`);
- the job succeeded (when its end is known), and NCCL used EFA on every pod when EFA was requested; a job
  the infrastructure disrupted fails with that disruption first, its ranks' errors as consequences;
- every rank ``0..world_size-1`` reported throughput, an epoch time and completion, and no error, and none
  of them then exited non-zero or by a signal (as the launcher recorded its workers' ends);
- every value is finite and positive; no rank outside the world reported;
- every replica holds the same parameters after each epoch and at completion (a silent data corruption
  otherwise, listed first), every all-reduce result of the bandwidth phase was the exact sum, and every loss
  is finite and, over a run long enough to learn, fell (:mod:`rollcall.checks.proofs`);
- each node hosts exactly ``procs_per_node`` ranks (judged from ``start`` events where they exist) and every
  rank that said its world size said the one asked for;
- every rank meets ``min_throughput`` when it is set, and none is a straggler when ``straggler_ratio`` is set,
  neither by throughput nor by its compute time per step (:mod:`rollcall.perf`);
- no node, ring pair of nodes or the world has an all-reduce bus bandwidth below ``min_busbw``, and no node
  (pair) is below ``busbw_ratio`` times the median node's (pair's); with ``busbw_floors`` (``--min-busbw
  auto``) and no ``min_busbw``, none is below the published floor of the run's instance type
  (:mod:`rollcall.checks.floors`);
- no figure regressed against the baseline, when there is one;
- no device breaks a fitness rule (``unfit_device``: ECC, row remapping, retired pages, PCIe link, clock
  events, power limit, and no node sees fewer devices than its instance type has; each rule may warn or be
  off; a compute straggler's line carries its device's clocks, PCIe link, temperature and power limit), no
  node's fact misses the golden configuration (``--expect``), and, under ``--drift fail``, the nodes agree
  on their versions (``config_drift``; a warning by default) (:mod:`rollcall.checks.fitness`).

A check may raise a problem as a warning (``Problem.warning``): the verdict keeps it in ``warnings``, where
every report shows it, and it fails nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from rollcall.backends import JobState
from rollcall.baseline import ConfigKey, Figures, Reference
from rollcall.baseline import regressions as find_regressions
from rollcall.blame import blame
from rollcall.checks import kernels, versions
from rollcall.checks.fitness import (
    NodeFacts,
    device_summary,
    drift,
    mismatches,
    node_facts,
    unfit_devices,
)
from rollcall.checks.floors import below_floors
from rollcall.checks.hangs import resolve, stalled_for, stalls, waiting_line
from rollcall.checks.proofs import (
    digests_by_stage,
    find_bad_losses,
    find_divergence,
    find_wrong_collectives,
    receiving_node,
    suspect_link,
)
from rollcall.perf import PerfFigures, common_node, compute_straggler_problem, slow_groups
from rollcall.perf import compute_stragglers as find_compute_stragglers
from rollcall.ranklog import RankReport, RollCall, ranges
from rollcall.rootcause import LAUNCHER_SIGNALS, Analysis, Failure, Termination, analyse
from rollcall.rootcause import lines as rootcause_lines
from rollcall.stragglers import find_stragglers, straggler_problem
from rollcall.verdict import (
    WORKLOAD_KEYS,
    Criteria,
    Evidence,
    Kind,
    Layout,
    Problem,
    RankResult,
    Stats,
    Verdict,
)
from rollcall_workload.contract import REQUIRED_EVENTS

#: Nodes listed one by one in a problem's line; beyond, the ranks and the nodes are listed as two ranges.
BY_NODE_GROUPS = 8


@dataclass(frozen=True)
class Facts:
    """What every check reads: the evidence, the criteria, and what follows from them."""

    evidence: Evidence
    criteria: Criteria

    @property
    def roll(self) -> RollCall:
        """The roll call."""
        return self.evidence.roll

    @property
    def layout(self) -> Layout:
        """The layout asked for."""
        return self.evidence.layout

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

    @cached_property
    def reports(self) -> dict[int, RankReport]:
        """The reports of the ranks inside the world, by rank."""
        return {r: rep for r in range(self.layout.world_size) if (rep := self.roll.ranks.get(r)) is not None}

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
        return PerfFigures.of(self.roll, self.layout.world_size, self.node, _log_word(self))

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
        spec = self.evidence.spec
        return ConfigKey.of(spec, self.workload) if spec is not None else None

    @cached_property
    def nodes_detail(self) -> tuple[NodeFacts, ...]:
        """Each node's facts: what its ranks read, and what the backend observed of it."""
        status = self.evidence.status
        return node_facts(self.reports, self.node, status.node_info if status is not None else None)

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


Check = Callable[[Facts], Iterable[Problem]]


def hangs(facts: Facts) -> Iterable[Problem]:
    """No rank may stay stalled: each hung one named with where it stopped, the waiting ones in one line."""
    hung, waiting = resolve(stalls(facts.reports))
    for s in hung:
        report = facts.reports[s.rank]
        pod = f", {_log_word(facts)} {sorted(report.sources)[0]}" if report.sources else ""
        yield Problem(
            Kind.HUNG,
            f"rank {s.rank} (node {facts.node(s.rank)}{pod}) hung in {s.where}"
            f"{', no rank hung elsewhere' if s.ambiguous else ', not in a collective'}, "
            f"{stalled_for(s.dump)}: {s.at()}",
            {s.rank: f"hung in {s.where} at {s.frames[0] if s.frames else 'no Python frame'}"},
            detail=s,
        )
    if waiting:
        yield Problem(
            Kind.WAITING,
            waiting_line(waiting, len(hung)),
            {s.rank: f"waiting in a collective ({s.where})" for s in waiting},
            detail=tuple(waiting),
        )


def job_state(facts: Facts) -> Iterable[Problem]:
    """The job must have succeeded, when its end is known."""
    status = facts.evidence.status
    if status is None or status.state is JobState.SUCCEEDED:
        return
    if status.disruption is not None:  # named first, by :func:`errors`
        return
    yield Problem(Kind.JOB, f"job {status.state.value}: {status.reason}", detail=status)


def efa(facts: Facts) -> Iterable[Problem]:
    """With EFA requested, every pod's NCCL must have used it (the backend read the pods' logs)."""
    status = facts.evidence.status
    if status is not None and status.efa is not None and status.efa.failed:
        yield Problem(Kind.EFA, status.efa.reason, detail=status.efa)


def missing_events(facts: Facts) -> Iterable[Problem]:
    """Every rank of the world must report each required event."""
    missing = facts.roll.missing(facts.layout.world_size)
    for event in REQUIRED_EVENTS:
        ranks = missing[event]
        if ranks:
            yield Problem(
                Kind.MISSING_EVENT,
                f"{event} missing on {len(ranks)} rank(s): {facts.by_node(ranks)}",
                {r: f"no {event}" for r in ranks},
                detail=event,
            )


def unexpected_ranks(facts: Facts) -> Iterable[Problem]:
    """No rank outside the world may report."""
    world = facts.layout.world_size
    unexpected = facts.roll.unexpected(world)
    if unexpected:
        yield Problem(Kind.UNEXPECTED_RANK, f"ranks outside 0..{world - 1} reported: {ranges(unexpected)}")


def errors(facts: Facts) -> Iterable[Problem]:
    """A rank that reported an error failed; the first failure is named first, echoes folded.

    :mod:`rollcall.rootcause` orders the errors (and the backend's termination records) by time; the
    first problem is the root cause (with the whole :class:`~rollcall.rootcause.Analysis` as its detail),
    then independent failures, then the rest folded by shape. Each rank's note is its own message. When the
    infrastructure disrupted the job, the disruption is the first problem (``DISRUPTION``) and every error
    is folded as its consequence.
    """
    failures = [
        Failure(r, facts.node(r), e.source or None, e.message, e.time, facts.evidence.unit)
        for r, report in facts.reports.items()
        for e in report.errors
    ]
    status = facts.evidence.status
    ended = [  # a worker's record names its rank: place it on the rank's node
        replace(t, node=facts.node(t.rank)) if t.rank is not None and t.node is None else t
        for t in (status.terminations if status is not None else ())
    ]
    analysis = analyse(failures, ended, status.disruption if status is not None else None)
    for n, line in enumerate(rootcause_lines(analysis)):
        notes: dict[int, str] = {}
        for f in line.failures:  # a rank that wrote two errors keeps both
            notes[f.rank] = (
                f"{notes[f.rank]}; error: {f.message}" if f.rank in notes else f"error: {f.message}"
            )
        kind = Kind.ERROR
        if line.root:
            kind = Kind.DISRUPTION if analysis.disruption is not None else Kind.ROOT_CAUSE
        yield Problem(kind, line.text, notes, detail=analysis if n == 0 else line)


def exited_nonzero(facts: Facts) -> Iterable[Problem]:
    """A rank that answered the whole roll call and then exited non-zero (or by a signal) failed.

    The exit codes are the launcher's own records of its workers (:mod:`rollcall.torchrun`), by global rank.
    A rank the launcher itself stopped (SIGTERM, SIGINT) once another failed is named only when no rank
    ended any other way.
    When no rank reported an error and the infrastructure disrupted nothing, the earliest such exit is the
    root cause (its problem's detail the :class:`~rollcall.rootcause.Analysis` naming it); otherwise each is
    named after :func:`errors`' root cause.
    """
    status = facts.evidence.status
    if status is None:
        return
    answered = {r for r, report in facts.reports.items() if _answered(report)}
    ended: dict[int, Termination] = {}
    for t in status.terminations:
        if t.rank in answered and t.exit_code not in (None, 0) and t.rank not in ended:
            report = facts.reports[t.rank]
            pod = min(report.sources) if report.sources else t.pod
            ended[t.rank] = replace(t, node=facts.node(t.rank), pod=pod, answered=True)
    own = {r: t for r, t in ended.items() if t.signal not in LAUNCHER_SIGNALS}
    ended = own or ended  # the launcher stops the others once one fails: their ends echo that one's
    if not ended:
        return
    root = status.disruption is None and not any(rep.errors for rep in facts.reports.values())
    first = min(ended.values(), key=lambda t: (t.time is None, t.time or 0.0, t.rank))
    for rank, t in sorted(ended.items()):
        how = f"killed by {t.signal}" if t.signal else f"exited with code {t.exit_code}"
        note = f"{how} after answering the roll call"
        if root and t is first:
            analysis = Analysis(termination=t)
            yield Problem(Kind.EXITED_NONZERO, analysis.headline() or t.describe(), {rank: note}, analysis)
        else:
            yield Problem(Kind.EXITED_NONZERO, t.describe(), {rank: note}, detail=t)


def invalid_values(facts: Facts) -> Iterable[Problem]:
    """Every value must be finite and positive."""
    for r, bad in facts.invalid.items():
        shown = ", ".join(bad)
        yield Problem(
            Kind.INVALID_VALUE,
            f"rank {r} reported non-finite or non-positive values: {shown}",
            {r: f"invalid {shown}"},
        )


def min_throughput(facts: Facts) -> Iterable[Problem]:
    """With ``min_throughput`` set, every measured rank must reach it."""
    floor = facts.criteria.min_throughput
    if floor is None:
        return
    slow = {r: tp for r, tp in facts.throughputs.items() if tp < floor}
    if slow:
        yield Problem(
            Kind.MIN_THROUGHPUT,
            f"throughput below --min-throughput {floor:g} samples/s on ranks {facts.by_node(slow)}",
            {r: f"throughput {tp:.2f} < {floor:g}" for r, tp in slow.items()},
        )


def layout(facts: Facts) -> Iterable[Problem]:
    """Each node that reported ``start`` events hosts ``procs_per_node`` ranks; every world size agrees."""
    lay = facts.layout
    per_node: dict[int, set[int]] = defaultdict(set)
    for r, report in facts.roll.ranks.items():
        if report.node_rank is not None:
            per_node[report.node_rank].add(r)
    for node, ranks in sorted(per_node.items()):
        if not 0 <= node < lay.nodes:
            yield Problem(
                Kind.LAYOUT, f"node_rank {node} is outside 0..{lay.nodes - 1} (ranks {ranges(ranks)})"
            )
        elif len(ranks) != lay.procs_per_node:
            yield Problem(
                Kind.LAYOUT,
                f"node {node} hosted {len(ranks)} rank(s) ({ranges(ranks)}), expected {lay.procs_per_node}",
            )
    worlds: dict[int, list[int]] = defaultdict(list)
    for r, report in facts.reports.items():
        if report.world_size is not None and report.world_size != lay.world_size:
            worlds[report.world_size].append(r)
    for size, said in sorted(worlds.items()):
        yield Problem(
            Kind.LAYOUT,
            f"ranks {facts.by_node(said)} reported a world size of {size}, expected {lay.world_size}",
        )


def stragglers(facts: Facts) -> Iterable[Problem]:
    """With ``straggler_ratio`` set, no measured rank may fall below that ratio of the median."""
    ratio = facts.criteria.straggler_ratio
    per_rank = {r: {"throughput": tp, "node": facts.node(r)} for r, tp in facts.throughputs.items()}
    found = find_stragglers(per_rank, ratio)
    if found:
        yield Problem(
            Kind.STRAGGLER, straggler_problem(found, ratio), {s.rank: s.note() for s in found}, detail=found
        )


def compute_stragglers(facts: Facts) -> Iterable[Problem]:
    """With ``straggler_ratio`` set, no rank's compute time may exceed the median's by more than 1/ratio."""
    ratio = facts.criteria.straggler_ratio
    found = find_compute_stragglers(facts.perf.compute, ratio)
    if found:
        devices = {d.rank: d for n in facts.nodes_detail for d in n.devices}
        known = [f"rank {s.rank} {device_summary(devices[s.rank])}" for s in found if s.rank in devices]
        yield Problem(
            Kind.COMPUTE_STRAGGLER,
            compute_straggler_problem(found, ratio)
            + (f"; their devices: {'; '.join(known)}" if known else ""),
            {s.rank: s.note() for s in found},
            detail=tuple(found),
        )


def slow_links(facts: Facts) -> Iterable[Problem]:
    """No group below ``min_busbw``; no node (pair) below ``busbw_ratio`` times the median node (pair).

    A slow node or pair names its ranks; the world names none (every rank is in it). When one node is in
    every slow pair of nodes, a last line names it.
    """
    c, perf = facts.criteria, facts.perf
    slow = slow_groups(perf.groups, min_busbw=c.min_busbw, busbw_ratio=c.busbw_ratio, pods=perf.pods)
    world = facts.layout.world_size
    for s in slow:
        named = [r for r in s.group.ranks if 0 <= r < world] if s.group.scope != "world" else []
        yield Problem(Kind.SLOW_LINK, f"slow link: {s}", dict.fromkeys(named, s.note()), detail=s)
    node = common_node(slow)
    if node is not None:
        yield Problem(Kind.SLOW_LINK, f"slow link: node {node} is in every slow pair of nodes", detail=node)


def busbw_floors(facts: Facts) -> Iterable[Problem]:
    """``--min-busbw auto``: no group below the published floor of the run's instance type, where known.

    Only a run on the type's GPUs is held to them. A node is held to the type's one-node (NVLink) floor, a
    pair and a world of two nodes or more to its fabric's (EFA); the line names the group, what it measured
    at which size, the floor and its source.
    """
    c, spec, perf = facts.criteria, facts.evidence.spec, facts.perf
    if not c.busbw_floors or c.min_busbw is not None or spec is None or spec.accelerator != "nvidia":
        return  # the floors are NCCL's on the type's GPUs: a run on its CPUs is not held to them
    world = facts.layout.world_size
    for found in below_floors(perf.groups, spec.instance_type, perf.pods):
        g = found.group
        named = [r for r in g.ranks if 0 <= r < world] if g.scope != "world" else []
        yield Problem(Kind.SLOW_LINK, f"slow link: {found}", dict.fromkeys(named, found.note()), detail=found)


def regressions(facts: Facts) -> Iterable[Problem]:
    """With a baseline, no figure may be worse than it by more than ``max_regression_pct`` (and spreads)."""
    base = facts.baseline
    if base is None:
        return
    c = facts.criteria
    for found in find_regressions(facts.figures, base, c.max_regression_pct, facts.baseline_reference):
        yield Problem(Kind.REGRESSION, str(found), detail=found)


def replica_divergence(facts: Facts) -> Iterable[Problem]:
    """Every rank's parameters must equal the other replicas' after each epoch and at completion.

    A replica that diverged is a silent data corruption: its problem is the first one listed.
    """
    found = find_divergence(facts.reports, facts.node)
    if not found:
        return
    named = "; ".join(f"rank {d.rank} (node {d.node}) {d.when}" for d in found)
    ref = found[0]
    yield Problem(
        Kind.REPLICA_DIVERGENCE,
        f"replica divergence (silent data corruption): {named}: parameters unlike the replicas' "
        f"(param_digest {ref.digest} where {ref.agreeing} rank(s) hold {ref.reference})",
        {d.rank: d.note() for d in found},
        detail=tuple(found),
    )


def collective_mismatch(facts: Facts) -> Iterable[Problem]:
    """Every result a rank received from the bandwidth phase's timed all-reduces must be the exact sum.

    One problem per group naming the ranks that received wrong data; when they are all on one node, a last
    line names it (its device or its link).
    """
    found = find_wrong_collectives(facts.reports, facts.node)
    for group in found:
        notes = {r.rank: f"wrong data from the {group.label}" for r in group.receivers}
        yield Problem(Kind.COLLECTIVE_MISMATCH, f"collective mismatch: {group}", notes, detail=group)
    node, ranks = receiving_node(found), sorted({r.rank for g in found for r in g.receivers})
    link = suspect_link(facts.reports, found) if node is None else None
    if node is not None:
        yield Problem(
            Kind.COLLECTIVE_MISMATCH,
            f"collective mismatch: every rank that received wrong data ({ranges(ranks)}) is on node {node}: "
            "its device or its link",
            detail=node,
        )
    elif link is not None:
        yield Problem(
            Kind.COLLECTIVE_MISMATCH,
            f"collective mismatch: every group that received wrong data crosses the link between nodes "
            f"{link[0]} and {link[1]}, and no group that was right does",
            detail=link,
        )


def loss(facts: Facts) -> Iterable[Problem]:
    """Every loss must be finite, and fall from the first timed epoch to the last over a run that learns."""
    found = find_bad_losses(facts.reports, facts.node)
    for what, group in (
        ("loss not finite", [f for f in found if not f.finite]),
        ("loss did not fall", [f for f in found if f.finite]),
    ):
        if group:
            yield Problem(
                Kind.LOSS,
                f"{what} on ranks {facts.by_node(f.rank for f in group)}: "
                + "; ".join(f"rank {f.rank} {f.note()}" for f in group),
                {f.rank: f.note() for f in group},
                detail=tuple(group),
            )


#: Every check, in the order their problems are listed (a silent data corruption first).
def unfit_device(facts: Facts) -> Iterable[Problem]:
    """No device may break a fitness rule: one problem per device, failing and warning rules apart."""
    found = unfit_devices(facts.nodes_detail, facts.criteria.fitness)
    by_device: dict[tuple[int, bool, bool], list[Any]] = defaultdict(list)
    for u in found:  # the node itself (device_count) before its first rank's device
        by_device[(u.device.rank, not u.device.whole_node, u.severity == "warn")].append(u)
    for (rank, _device, warn), unfit in sorted(by_device.items()):
        what = "; ".join(f"{u.fact}={u.value} {u.why} (rule {u.rule})" for u in unfit)
        yield Problem(
            Kind.UNFIT_DEVICE,
            f"unfit device{' (warning)' if warn else ''}: {unfit[0].device.label}: {what}",
            {rank: f"unfit device: {', '.join(u.rule for u in unfit)}"},
            detail=tuple(unfit),
            warning=warn,
        )


def config_drift(facts: Facts) -> Iterable[Problem]:
    """Under ``--drift fail`` (``warn``: as a warning), the nodes must agree on every version they report."""
    mode = facts.criteria.drift
    if mode == "off":
        return
    for d in drift(facts.nodes_detail):
        yield Problem(Kind.CONFIG_DRIFT, f"config drift: {d}", detail=d, warning=mode == "warn")


def workload_version(facts: Facts) -> Iterable[Problem]:
    """Every rank runs the suite's rank-log contract and a workload no older than the suite's."""
    mismatch = versions.version_mismatch(facts.reports)
    if mismatch is not None:
        why = "its workload is older than the suite's, or of another rank-log contract"
        yield Problem(Kind.WORKLOAD_VERSION, mismatch.message, dict.fromkeys(mismatch.ranks, why), mismatch)


def kernel_fallbacks(facts: Facts) -> Iterable[Problem]:
    """A warning for each of the workload's kernels that failed its check on some GPU and was dropped."""
    for f in kernels.kernel_fallbacks(facts.reports):
        where: dict[int, str] = {}
        for r in f.failed:
            device = (facts.reports[r].start or {}).get("device")
            where[r] = (
                f"{device} of node {facts.node(r)}" if isinstance(device, str) else f"node {facts.node(r)}"
            )
        ranks = {} if f.everywhere else {r: f"its {f.kernel} kernel failed its check" for r in f.failed}
        yield Problem(Kind.KERNEL_FALLBACK, kernels.fallback_message(f, where), ranks, detail=f, warning=True)


def expectations(facts: Facts) -> Iterable[Problem]:
    """Every node's fact matches the golden configuration (``--expect KEY=GLOB``); unknown does not."""
    expect = facts.criteria.expect
    if not expect:
        return
    nodes = facts.nodes_detail
    if not nodes:
        keys = ", ".join(f"{k}={g}" for k, g in expect)
        yield Problem(Kind.EXPECTATION, f"--expect {keys}: no rank reported its facts")
        return
    for m in mismatches(nodes, expect):
        yield Problem(Kind.EXPECTATION, f"expectation not met: {m}", detail=m)


#: Every check, in the order their problems are listed.
CHECKS: tuple[Check, ...] = (
    workload_version,
    replica_divergence,
    collective_mismatch,
    hangs,
    errors,
    exited_nonzero,
    job_state,
    efa,
    missing_events,
    unexpected_ranks,
    invalid_values,
    loss,
    min_throughput,
    layout,
    stragglers,
    compute_stragglers,
    slow_links,
    busbw_floors,
    regressions,
    unfit_device,
    config_drift,
    expectations,
    kernel_fallbacks,
)

#: The checks that need no job, only logs: what ``rollcall check-logs`` holds saved logs to.
LOG_CHECKS: tuple[Check, ...] = (errors, missing_events, unexpected_ranks, invalid_values)


def judge(evidence: Evidence, criteria: Criteria | None = None, checks: Iterable[Check] = CHECKS) -> Verdict:
    """The verdict on ``evidence`` held to ``criteria``: every check's problems, rank by rank."""
    facts = Facts(evidence, criteria or Criteria())
    raised = [replace(p, blame=blame(p)) for check in checks for p in check(facts)]
    found = tuple(p for p in raised if not p.warning)
    world = facts.layout.world_size
    ranks = {}
    for r in range(world):
        report = facts.reports.get(r)
        sound = facts.sound.get(r)
        ranks[r] = RankResult(
            rank=r,
            node=facts.node(r),
            pods=tuple(sorted(report.sources)) if report else (),
            reported=_reported(report),
            throughput=sound.throughput if sound else None,
            epoch_time=sound.epoch_time if sound else None,
            complete=bool(report and report.complete),
            problems=tuple(p for p in found if r in p.ranks),
            marks=tuple(sorted(report.marks.values(), key=lambda m: m.time)) if report else (),
            compile_cache=report.compile_cache if report else None,
        )
    mfus = [m for rep in facts.sound.values() if (m := _finite(rep.details.get("mfu"))) is not None]
    return Verdict(
        layout=facts.layout,
        ranks=ranks,
        findings=found,
        missing=facts.roll.missing(world),
        unexpected_ranks=facts.roll.unexpected(world),
        throughput=facts.throughput,
        epoch_time_mean=facts.epoch_time_mean,
        mfu_mean=math.fsum(mfus) / len(mfus) if mfus else None,
        workload=facts.workload,
        perf=facts.perf,
        replicas=digests_by_stage(facts.reports),
        criteria=facts.criteria,
        config=facts.config,
        baseline=facts.baseline,
        warnings=tuple(p for p in raised if p.warning),
        nodes_detail=facts.nodes_detail,
        kernels=kernels.kernels_used(facts.reports),
    )


def assess(roll: RollCall, layout: Layout, *, min_throughput: float | None = None) -> Verdict:
    """Judge a roll call against the layout asked for (the job's end unknown)."""
    return judge(Evidence(roll, layout), Criteria(min_throughput=min_throughput))


def _answered(report: RankReport) -> bool:
    """Reported every required event and no error."""
    return all(report.has(e) for e in REQUIRED_EVENTS) and not report.errors


def _reported(report: RankReport | None) -> tuple[str, ...]:
    if report is None:
        return ()
    said = ["start"] if report.start is not None else []
    said += [e for e in REQUIRED_EVENTS if report.has(e)]
    return (*said, "error") if report.errors else tuple(said)


def _workload(facts: Facts) -> dict[str, Any]:
    """Each of :data:`WORKLOAD_KEYS` that every rank reporting throughput gave, with one value for all.

    A key no throughput event settles (no rank got that far: a failed run) is read, the same way, from the
    ranks' ``start`` events.
    """
    reports = facts.reports.values()
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


def _log_word(facts: Facts) -> str:
    """What a rank's log is called in a message: its ``pod``, or the ``log`` of a node's processes."""
    return "pod" if facts.evidence.unit == "pod" else "log"


def _bad(value: float | None) -> bool:
    return value is not None and not (math.isfinite(value) and value > 0)


def _finite(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


__all__ = ["CHECKS", "LOG_CHECKS", "Check", "Facts", "assess", "judge"]
