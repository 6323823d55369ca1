"""The verdict: did every expected rank answer the roll call with sound values?

:func:`assess` turns a :class:`~rollcall.ranklog.RollCall` and the expected :class:`Layout` into a
:class:`Verdict`. Its :class:`Outcome` means:

- ``PASSED``: every rank ``0..world_size-1`` reported throughput, an epoch time and completion; every value is
  finite and positive; no rank outside the world reported; each node hosts exactly ``procs_per_node`` ranks
  (judged from ``start`` events where they exist); every rank meets ``min_throughput`` when it is set.
- ``FAILED``: any of those does not hold; :attr:`Verdict.problems` says which, rank by rank.

The release gate (:mod:`rollcall.baseline`) judges the verdict afterwards and adds its own problems to it:
stragglers by throughput and by compute time, slow links (:mod:`rollcall.perf`; named in
:attr:`Verdict.failed_ranks` too) and regressions against a baseline.
"""

from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollcall.perf import PerfFigures
from rollcall.ranklog import REQUIRED_EVENTS, RollCall, ranges

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
    """The verdict in one word; see the module docstring."""

    PASSED = "passed"
    FAILED = "failed"


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
        return {
            "total": self.total,
            "mean": self.mean,
            "min": self.min,
            "max": self.max,
            "median": self.median,
        }


@dataclass
class Verdict:
    """What the roll call showed, rank by rank."""

    layout: Layout
    missing: dict[str, list[int]]
    unexpected_ranks: list[int]
    problems: list[str] = field(default_factory=list)
    failed_ranks: dict[int, list[str]] = field(default_factory=dict)
    throughput: Stats = field(default_factory=Stats)
    epoch_time_mean: float | None = None
    mfu_mean: float | None = None
    per_rank: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: The workload's settings every rank's throughput event agreed on (see :data:`WORKLOAD_KEYS`).
    workload: dict[str, Any] = field(default_factory=dict)
    #: Per-rank compute times and per-group bandwidth (judged by the release gate, see :mod:`rollcall.perf`).
    perf: PerfFigures = field(default_factory=PerfFigures)

    @property
    def outcome(self) -> Outcome:
        """PASSED when there is no problem at all."""
        return Outcome.FAILED if self.problems else Outcome.PASSED

    @property
    def passed(self) -> bool:
        """Shorthand for ``outcome is Outcome.PASSED``."""
        return self.outcome is Outcome.PASSED

    @property
    def answered(self) -> int:
        """Ranks inside the world that reported every required event."""
        return sum(1 for r in range(self.layout.world_size) if r not in self.failed_ranks)

    def message(self, logs_hint: str | None = None) -> str:
        """A failure message a person can act on: which ranks lack what, on which node, and where logs are."""
        lay = self.layout
        head = (
            f"roll call: {self.answered} of {lay.world_size} ranks answered "
            f"({lay.nodes} node(s) x {lay.procs_per_node} procs)"
        )
        lines = [head, *(f"  - {p}" for p in self.problems)]
        if logs_hint and self.problems:
            lines.append(f"  per-pod logs: {logs_hint}")
        return "\n".join(lines)


def assess(
    roll: RollCall,
    layout: Layout,
    *,
    min_throughput: float | None = None,
) -> Verdict:
    """Judge a roll call against the layout that was asked for."""
    world = layout.world_size
    missing = roll.missing(world)
    unexpected = roll.unexpected(world)
    verdict = Verdict(layout=layout, missing=missing, unexpected_ranks=unexpected)
    failed = verdict.failed_ranks

    for event in REQUIRED_EVENTS:
        for r in missing[event]:
            failed.setdefault(r, []).append(f"no {event}")
        if missing[event]:
            verdict.problems.append(
                f"{event} missing on {len(missing[event])} rank(s): {_by_node(missing[event], roll, layout)}"
            )
    if unexpected:
        verdict.problems.append(f"ranks outside 0..{world - 1} reported: {ranges(unexpected)}")

    throughputs: list[float] = []
    epoch_means: list[float] = []
    mfus: list[float] = []
    for r in range(world):
        report = roll.ranks.get(r)
        if report is None:
            continue
        for message in report.errors:
            failed.setdefault(r, []).append(f"error: {message}")
            verdict.problems.append(f"rank {r} (node {_node(r, roll, layout)}) reported an error: {message}")
        bad = [f"throughput={report.throughput}"] if _bad(report.throughput) else []
        bad += [f"epoch {e} seconds={s}" for e, s in sorted(report.epoch_times.items()) if _bad(s)]
        if bad:
            failed.setdefault(r, []).append("invalid " + ", ".join(bad))
            verdict.problems.append(f"rank {r} reported non-finite or non-positive values: {', '.join(bad)}")
            continue
        if report.throughput is not None:
            throughputs.append(report.throughput)
            if min_throughput is not None and report.throughput < min_throughput:
                failed.setdefault(r, []).append(f"throughput {report.throughput:.2f} < {min_throughput:g}")
        if report.epoch_time is not None:
            epoch_means.append(report.epoch_time)
        mfu = report.details.get("mfu")
        if isinstance(mfu, int | float) and math.isfinite(mfu):
            mfus.append(float(mfu))
        verdict.per_rank[r] = {
            "throughput": report.throughput,
            "epoch_time": report.epoch_time,
            "complete": report.complete,
            "node": _node(r, roll, layout),
            "logs": sorted(report.sources),
        }
    if min_throughput is not None:
        slow = [r for r, why in failed.items() if any(w.startswith("throughput ") for w in why)]
        if slow:
            verdict.problems.append(
                f"throughput below --min-throughput {min_throughput:g} samples/s on ranks "
                f"{_by_node(slow, roll, layout)}"
            )
    verdict.problems.extend(_layout_problems(roll, layout))
    verdict.throughput = Stats.of(throughputs)
    verdict.epoch_time_mean = math.fsum(epoch_means) / len(epoch_means) if epoch_means else None
    verdict.mfu_mean = math.fsum(mfus) / len(mfus) if mfus else None
    verdict.workload = _workload(roll, world)
    verdict.perf = PerfFigures.of(roll, world, lambda r: _node(r, roll, layout))
    return verdict


def _workload(roll: RollCall, world: int) -> dict[str, Any]:
    """Each of :data:`WORKLOAD_KEYS` that every rank reporting throughput gave, with one value for all."""
    seen: dict[str, set[str | int | float | None]] = defaultdict(set)
    for report in (roll.ranks[r] for r in range(world) if r in roll.ranks):
        if report.throughput is None:
            continue
        for key in WORKLOAD_KEYS:
            value = report.details.get(key)
            ok = isinstance(value, str | int | float) and not isinstance(value, bool)
            seen[key].add(value if ok else None)  # absent on one rank: no agreement
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}


def _bad(value: float | None) -> bool:
    return value is not None and not (math.isfinite(value) and value > 0)


def _node(rank: int, roll: RollCall, layout: Layout) -> int:
    report = roll.ranks.get(rank)
    reported = report.node_rank if report else None
    return reported if reported is not None else layout.node_of(rank)


def _by_node(ranks: list[int], roll: RollCall, layout: Layout) -> str:
    """``7 (node 0); 19, 40-47 (node 1)``: ranks grouped by the node they ran (or should have run) on."""
    groups: dict[int, list[int]] = defaultdict(list)
    for r in ranks:
        groups[_node(r, roll, layout)].append(r)
    return "; ".join(f"{ranges(rs)} (node {n})" for n, rs in sorted(groups.items()))


def _layout_problems(roll: RollCall, layout: Layout) -> list[str]:
    """Each node that reported ``start`` events must host exactly ``procs_per_node`` ranks."""
    per_node: dict[int, set[int]] = defaultdict(set)
    for r, report in roll.ranks.items():
        if report.node_rank is not None:
            per_node[report.node_rank].add(r)
    problems = []
    for node, ranks in sorted(per_node.items()):
        if not 0 <= node < layout.nodes:
            problems.append(f"node_rank {node} is outside 0..{layout.nodes - 1} (ranks {ranges(ranks)})")
        elif len(ranks) != layout.procs_per_node:
            problems.append(
                f"node {node} hosted {len(ranks)} rank(s) ({ranges(ranks)}), expected {layout.procs_per_node}"
            )
    return problems
