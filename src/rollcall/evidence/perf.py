"""The slow GPU and the slow link: per-rank compute time and per-node collective bandwidth, and their checks.

In synchronous DDP every rank waits for the slowest at each gradient all-reduce, so per-rank samples/s come
out equal by construction and a slow device or a degraded link slows every rank alike. The workload therefore
measures apart (see its docstring): each rank's own compute per step without communication (``compute_ms``
of its ``throughput`` event) and the bus bandwidth of all-reduces over the world, each node and ring pairs of
nodes (``bandwidth`` events).

:meth:`PerfFigures.of` turns a roll call into typed figures; the checks are pure functions of those figures
returning typed findings; :mod:`rollcall.judge` runs them as checks (problems of kinds
``COMPUTE_STRAGGLER`` and ``SLOW_LINK``) and :attr:`rollcall.verdict.Verdict.perf_report` gathers the figures
and what the checks found into a :class:`PerfReport` for the reports:

- :func:`compute_stragglers`: a rank whose compute time exceeds the median rank's by more than a factor of
  1 / ``--straggler-ratio`` (the ratio means what it means for throughput: a rank running below RATIO times
  the median rank's speed), named with its node and pod;
- :func:`slow_groups`: a node (or ring pair of nodes) whose bus bandwidth is below ``--min-busbw`` GB/s, or
  below ``--busbw-ratio`` times the median of its scope (the median node, the median pair); the world's
  figure is held against ``--min-busbw`` only.

The checks know nothing of the verdict: each finding says its line (``str``) and its note on each rank it
names (``note()``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from rollcall.ranges import ranges
from rollcall.ranklog import RollCall
from rollcall_workload.shape import peak_entry


def median(values: Sequence[float]) -> float | None:
    """The median of ``values``, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class RankCompute:
    """One rank's compute time per step, without communication."""

    rank: int
    node: int
    pod: str | None
    compute_ms: float
    compute_ms_p90: float | None = None
    #: The Kubernetes node the rank ran on (its ``start`` event's ``node``), when it said.
    machine: str | None = None
    #: What ``pod`` is: a ``pod``, or the ``log`` of a node's processes (local, Slurm).
    source: str = "pod"

    def where(self) -> str:
        """``node 1 on ip-10-0-7-12, pod job-1-x7k2p``: the node index, the machine and the pod."""
        return where(self.node, self.pod, self.machine, self.source)


def shallow(obj: Any) -> dict[str, Any]:
    """A dataclass of plain values as a dict of its fields, JSON-ready: ``asdict`` without its deep copies.

    The reports turn thousands of per-rank and per-group records into JSON; their values (numbers, text,
    tuples of them) are never changed afterwards, so there is nothing to copy.
    """
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def where(node: int, pod: str | None, machine: str | None, source: str = "pod") -> str:
    """A rank's place, as the findings name it: node index, the machine it ran on, the pod (or log)."""
    on = f" on {machine}" if machine else ""
    return f"node {node}{on}" + (f", {source} {pod}" if pod else "")


@dataclass(frozen=True)
class GroupBandwidth:
    """One all-reduce group's bandwidth: the lowest any of its members measured."""

    scope: str
    nodes: tuple[int, ...]
    ranks: tuple[int, ...]
    bytes: int
    algbw_gbps: float
    busbw_gbps: float
    reported: int = 1
    #: ``(bytes, busbw_gbps)`` per size of a sweep, the lowest any member measured at that size; else empty.
    sweep: tuple[tuple[int, float], ...] = ()

    @property
    def label(self) -> str:
        """``world``, ``node 1`` or ``nodes 1-2``."""
        if self.scope == "world":
            return "world"
        if self.scope == "node" and len(self.nodes) == 1:
            return f"node {self.nodes[0]}"
        return f"nodes {ranges(self.nodes)}"

    def pods_of(self, pods: Mapping[int, Sequence[str]]) -> tuple[str, ...]:
        """The pods of the group's nodes, given each node's pods; none for the world, which is every pod."""
        return tuple(p for n in self.nodes for p in pods.get(n, ())) if self.scope != "world" else ()

    def finding(self, pods: Sequence[str]) -> dict[str, Any]:
        """What a finding about the group says of it (results.json): scope, nodes, pods, bus bandwidth."""
        return {
            "scope": self.scope,
            "nodes": list(self.nodes),
            "pods": list(pods),
            "busbw_gbps": self.busbw_gbps,
        }

    def as_dict(self) -> dict[str, Any]:
        """The group, JSON-ready."""
        return {**shallow(self), "nodes": list(self.nodes), "ranks": ranges(self.ranks), "label": self.label}


def _lowest_sweep(records: Sequence[Any]) -> tuple[tuple[int, float], ...]:
    """Per size of the members' sweeps, the lowest bus bandwidth any member measured at it."""
    lowest: dict[int, float] = {}
    for record in records:
        for nbytes, busbw in record.sweep:
            lowest[nbytes] = min(lowest.get(nbytes, math.inf), busbw)
    return tuple(sorted(lowest.items()))


@dataclass(frozen=True)
class NodeBandwidth:
    """One node's bus bandwidth: within the node, and the lowest of the ring pairs it is in."""

    node: int
    pods: tuple[str, ...]
    busbw_gbps: float | None
    pair_busbw_gbps: float | None

    def as_dict(self) -> dict[str, Any]:
        """The node's figures, JSON-ready."""
        return {**shallow(self), "pods": list(self.pods)}


#: MFU's physical bound: a device computes no faster than its peak, so a share above it is no measure.
MFU_BOUND = 1.0


@dataclass(frozen=True)
class RankMfu:
    """One rank's MFU as its ``throughput`` event said it, its achieved TFLOP/s and its ``start``'s device."""

    rank: int
    mfu: float
    tflops: float | None
    device: str | None

    @classmethod
    def of(cls, rank: int, details: Mapping[str, Any], start: Mapping[str, Any]) -> RankMfu | None:
        """What the rank said (None where it said no finite MFU)."""
        mfu, tflops, device = (
            _number(details.get("mfu")),
            _number(details.get("tflops")),
            start.get("device_name"),
        )
        if mfu is None:
            return None
        good_tflops = tflops if tflops is not None and tflops > 0 else None
        return cls(rank, mfu, good_tflops, device if isinstance(device, str) and device else None)


def _number(value: Any) -> float | None:
    """A finite number said, as a float; None for anything else (a boolean, a string, NaN)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


@dataclass(frozen=True)
class Mfu:
    """The run's model FLOPs utilisation, the peak it was held to, and where that peak came from.

    The workload divides its achieved FLOP/s by the peak of its device's name in its table, or by
    ``--peak-tflops``; a share past :data:`MFU_BOUND` (or below 0) says the name or the peak is wrong, so it
    is flagged with them (:attr:`flag`) instead of printed as a figure.
    """

    #: The ranks' mean, a fraction of the peak.
    value: float
    #: The peak the ranks held it to, TFLOP/s (their achieved TFLOP/s over their MFU; None: unsaid).
    peak_tflops: float | None
    #: The device's name as the lowest rank that said one said it.
    device: str | None

    @property
    def trusted(self) -> bool:
        """Within its physical bound: 0 to 100% of the peak."""
        return 0.0 <= self.value <= MFU_BOUND

    @property
    def peak_from(self) -> str:
        """``the table's A10G entry``, ``--peak-tflops`` (the table has another peak, or none), or unknown."""
        entry = peak_entry(self.device) if self.device else None
        if self.peak_tflops is None:
            return "unknown"
        if entry is not None and math.isclose(entry[1] / 1e12, self.peak_tflops, rel_tol=0.01):
            return f"the table's {entry[0]} entry"
        return "--peak-tflops"

    @property
    def flag(self) -> str | None:
        """Why the figure cannot be: the peak it was held to and where that came from; None if trusted."""
        if self.trusted:
            return None
        whose = f"the {self.device}'s" if self.device else "the device's"
        peak = f"{self.peak_tflops:.4g} TFLOPS " if self.peak_tflops is not None else ""
        bound = "above 100%" if self.value > MFU_BOUND else "below 0%"
        return (
            f"{100 * self.value:.1f}% of {whose} {peak}peak, from {self.peak_from}: {bound}, "
            "the GPU's name or its peak is wrong"
        )

    @property
    def text(self) -> str:
        """``45.2%``; ``- (637.7% of the A10G's ... peak ...: above 100%, ...)`` where it cannot be."""
        return f"{100 * self.value:.1f}%" if self.flag is None else f"- ({self.flag})"

    def as_dict(self) -> dict[str, Any]:
        """For results.json: the mean where trusted, else ``untrusted_mean`` and the flag; the peak."""
        said = {"mean": self.value} if self.trusted else {"untrusted_mean": self.value, "flag": self.flag}
        peak = {"peak_tflops": self.peak_tflops} if self.peak_tflops is not None else {}
        device = {"device": self.device} if self.device else {}
        return {**said, **peak, "peak_from": self.peak_from, **device}


@dataclass(frozen=True)
class PerfFigures:
    """The compute times of the ranks and the bandwidth of the groups, as the ranks reported them."""

    compute: tuple[RankCompute, ...] = ()
    groups: tuple[GroupBandwidth, ...] = ()
    #: The pods (log sources) of each node's ranks.
    pods: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    #: The machine (the ``start`` event's ``node``) each node's ranks said they ran on, where one did.
    machines: Mapping[int, str] = field(default_factory=dict)
    #: Each rank's MFU as it said it, beside its achieved TFLOP/s and its device's name (:meth:`mfu`).
    mfus: tuple[RankMfu, ...] = ()

    @classmethod
    def of(
        cls, roll: RollCall, world_size: int, node_of: Callable[[int], int], source: str = "pod"
    ) -> PerfFigures:
        """The figures of ranks ``0..world_size-1``; ``node_of(rank)`` is the node a rank ran on.

        ``source`` is what a rank's log is called in the findings (``pod``, or ``log``).
        """
        compute = []
        mfus: list[RankMfu] = []
        pods: dict[int, set[str]] = defaultdict(set)
        machines: dict[int, str] = {}
        measured: dict[tuple[str, tuple[int, ...]], list[Any]] = defaultdict(list)
        for r in range(world_size):
            report = roll.ranks.get(r)
            if report is None:
                continue
            node = node_of(r)
            pods[node].update(report.sources)
            said = (report.start or {}).get("node")
            if isinstance(said, str) and said:
                machines.setdefault(node, said)
            if _usable(report.compute_ms):
                assert report.compute_ms is not None
                p90 = report.compute_ms_p90 if _usable(report.compute_ms_p90) else None
                pod = min(report.sources) if report.sources else None
                machine = (report.start or {}).get("node")
                machine = machine if isinstance(machine, str) and machine else None
                compute.append(RankCompute(r, node, pod, report.compute_ms, p90, machine, source))
            said_mfu = RankMfu.of(r, report.details, report.start or {})
            if said_mfu is not None:
                mfus.append(said_mfu)
            for key, record in report.bandwidth.items():
                if _usable(record.busbw_gbps) and _usable(record.algbw_gbps):
                    measured[key].append(record)
        groups = [
            GroupBandwidth(
                scope=scope,
                nodes=nodes,
                ranks=records[0].ranks,
                bytes=records[0].bytes,
                algbw_gbps=min(r.algbw_gbps for r in records),
                busbw_gbps=min(r.busbw_gbps for r in records),
                reported=len(records),
                sweep=_lowest_sweep(records),
            )
            for (scope, nodes), records in measured.items()
        ]
        order = {"world": 0, "node": 1, "pair": 2}
        groups.sort(key=lambda g: (order.get(g.scope, 3), g.nodes))
        return cls(
            tuple(compute),
            tuple(groups),
            {n: tuple(sorted(p)) for n, p in sorted(pods.items())},
            dict(sorted(machines.items())),
            tuple(mfus),
        )

    def mfu(self, mean: float | None) -> Mfu | None:
        """The run's MFU (``mean``, the verdict's) with the peak the ranks held it to; None without one."""
        if mean is None:
            return None
        peaks = [m.tflops / m.mfu for m in self.mfus if m.tflops is not None and m.mfu > 0]
        device = next((m.device for m in self.mfus if m.device), None)
        return Mfu(mean, median(peaks), device)

    @property
    def compute_median(self) -> float | None:
        """The median of the ranks' compute times per step (ms), or None when no rank measured one."""
        return median([c.compute_ms for c in self.compute])

    def scope(self, scope: str) -> list[GroupBandwidth]:
        """The groups of one scope."""
        return [g for g in self.groups if g.scope == scope]

    def nodes(self) -> list[NodeBandwidth]:
        """Each node's bandwidth figures (nodes that are in no measured group are left out)."""
        own = {g.nodes[0]: g.busbw_gbps for g in self.scope("node")}
        pairs: dict[int, float] = {}
        for g in self.scope("pair"):
            for n in g.nodes:
                pairs[n] = min(pairs.get(n, math.inf), g.busbw_gbps)
        return [
            NodeBandwidth(n, self.pods.get(n, ()), own.get(n), pairs.get(n))
            for n in sorted(set(own) | set(pairs))
        ]

    def as_dict(self) -> dict[str, Any]:
        """The figures, JSON-ready: per rank, per group and per node."""
        return {
            "compute": [shallow(c) for c in self.compute],
            "bandwidth": {
                "groups": [g.as_dict() for g in self.groups],
                "nodes": [n.as_dict() for n in self.nodes()],
            },
        }


@dataclass(frozen=True)
class ComputeStraggler:
    """A rank whose compute per step exceeds the median rank's by more than the allowed factor."""

    rank: int
    node: int
    pod: str | None
    compute_ms: float
    median_ms: float
    machine: str | None = None
    source: str = "pod"

    @property
    def ratio(self) -> float:
        """Compute time of this rank over the median."""
        return self.compute_ms / self.median_ms

    def __str__(self) -> str:
        at = where(self.node, self.pod, self.machine, self.source)
        return f"rank {self.rank} ({at}) at {self.compute_ms:.2f} ms per step, {self.ratio:.2f} x the median"

    def note(self) -> str:
        """What the straggler's own junit case says."""
        return f"compute straggler: {self.ratio:.2f} x the median compute time"

    def as_dict(self) -> dict[str, Any]:
        """The straggler, JSON-ready."""
        return {**asdict(self), "ratio": self.ratio, "message": str(self)}


def compute_stragglers(ranks: Sequence[RankCompute], straggler_ratio: float) -> list[ComputeStraggler]:
    """Ranks whose ``compute_ms`` exceeds the median rank's by more than a factor of 1 / ``straggler_ratio``.

    ``straggler_ratio`` 0 turns the check off; with fewer than two ranks measured none lags behind.
    """
    mid = median([r.compute_ms for r in ranks])
    if straggler_ratio <= 0 or len(ranks) < 2 or not mid:
        return []
    limit = mid / straggler_ratio
    return [
        ComputeStraggler(r.rank, r.node, r.pod, r.compute_ms, mid, r.machine, r.source)
        for r in sorted(ranks, key=lambda r: r.rank)
        if r.compute_ms > limit
    ]


@dataclass(frozen=True)
class SlowGroup:
    """A node, ring pair or world whose bus bandwidth is below ``--min-busbw`` or the ratio of its median."""

    group: GroupBandwidth
    pods: tuple[str, ...]
    median_gbps: float | None
    min_busbw: float | None
    busbw_ratio: float

    @property
    def below_min(self) -> bool:
        """Below ``--min-busbw``."""
        return self.min_busbw is not None and self.group.busbw_gbps < self.min_busbw

    @property
    def ratio(self) -> float | None:
        """Bus bandwidth over the median of the scope, when there is one to compare with."""
        return self.group.busbw_gbps / self.median_gbps if self.median_gbps else None

    def __str__(self) -> str:
        g = self.group
        pods = f" (pod(s) {', '.join(self.pods)})" if self.pods else ""
        why = []
        if self.below_min:
            why.append(f"below --min-busbw {self.min_busbw:g} GB/s")
        ratio = self.ratio
        if ratio is not None and ratio < self.busbw_ratio:
            of = "node" if g.scope == "node" else "pair"
            why.append(f"{ratio:.2f} x the median {of}'s {self.median_gbps:.4g} GB/s")
            why[-1] += f" (--busbw-ratio {self.busbw_ratio:g})"
        return f"{g.label}{pods}: bus bandwidth {g.busbw_gbps:.4g} GB/s, " + "; ".join(why)

    def note(self) -> str:
        """What the junit case of each rank of the group says."""
        return f"slow link: {self.group.label} at {self.group.busbw_gbps:.4g} GB/s"

    def as_dict(self) -> dict[str, Any]:
        """The finding, JSON-ready."""
        return {
            **self.group.finding(self.pods),
            "median_gbps": self.median_gbps,
            "ratio": self.ratio,
            "message": str(self),
        }


def slow_groups(
    groups: Sequence[GroupBandwidth],
    *,
    min_busbw: float | None = None,
    busbw_ratio: float = 0.0,
    pods: Mapping[int, Sequence[str]] | None = None,
) -> list[SlowGroup]:
    """Groups below ``min_busbw`` GB/s or ``busbw_ratio`` x the median of their scope (0: that part off).

    Node groups are compared with the median node, pair groups with the median pair (each needs two groups
    or more); the world has no peer and is held against ``min_busbw`` only.
    """
    pods = pods or {}
    found = []
    for scope in ("world", "node", "pair"):
        members = [g for g in groups if g.scope == scope]
        mid = median([g.busbw_gbps for g in members]) if scope != "world" and len(members) >= 2 else None
        for g in members:
            low = min_busbw is not None and g.busbw_gbps < min_busbw
            low = low or (busbw_ratio > 0 and mid is not None and g.busbw_gbps < busbw_ratio * mid)
            if low:
                found.append(SlowGroup(g, g.pods_of(pods), mid, min_busbw, busbw_ratio))
    return found


def compute_straggler_problem(stragglers: Sequence[ComputeStraggler], straggler_ratio: float) -> str:
    """The verdict's line naming every compute straggler."""
    mid = stragglers[0].median_ms
    return (
        f"{len(stragglers)} compute straggler(s) above {1 / straggler_ratio:.3g} x the median compute time "
        f"of {mid:.2f} ms per step (--straggler-ratio {straggler_ratio:g}): "
        + "; ".join(str(s) for s in stragglers)
    )


def common_node(slow: Sequence[SlowGroup]) -> int | None:
    """The one node that is in every slow ring pair, when two pairs or more are slow."""
    pairs = [set(s.group.nodes) for s in slow if s.group.scope == "pair"]
    if len(pairs) < 2:
        return None
    common = set.intersection(*pairs)
    return next(iter(common)) if len(common) == 1 else None


@dataclass(frozen=True)
class PerfReport:
    """The figures of one run and what the compute and bandwidth checks found in them."""

    figures: PerfFigures
    straggler_ratio: float
    min_busbw: float | None
    busbw_ratio: float
    stragglers: tuple[ComputeStraggler, ...] = ()
    slow: tuple[SlowGroup, ...] = ()

    def slowest_rank(self) -> RankCompute | None:
        """The rank with the longest compute time."""
        return max(self.figures.compute, key=lambda r: (r.compute_ms, -r.rank), default=None)

    def lowest_group(self) -> tuple[GroupBandwidth, float | None] | None:
        """The node (else pair, else world) group of lowest bus bandwidth, and the median of its scope."""
        for scope in ("node", "pair", "world"):
            groups = self.figures.scope(scope)
            if groups:
                low = min(groups, key=lambda g: (g.busbw_gbps, g.nodes))
                mid = median([g.busbw_gbps for g in groups]) if len(groups) >= 2 else None
                return low, mid
        return None

    def summary(self) -> list[str]:
        """Where the run is slowest, failing or not: the slowest rank and the node of lowest bandwidth."""
        lines = []
        rank = self.slowest_rank()
        if rank is not None:
            mid = median([r.compute_ms for r in self.figures.compute]) or rank.compute_ms
            lines.append(
                f"slowest rank: {rank.rank} ({rank.where()}), {rank.compute_ms:.2f} ms compute per "
                f"step, {rank.compute_ms / mid:.2f} x the median of {mid:.2f} ms"
            )
        low = self.lowest_group()
        if low is not None:
            group, scope_mid = low
            pods = group.pods_of(self.figures.pods)
            where = f"{group.label}" + (f" (pod(s) {', '.join(pods)})" if pods else "")
            versus = (
                f", {group.busbw_gbps / scope_mid:.2f} x the median of {scope_mid:.4g} GB/s"
                if scope_mid
                else ""
            )
            lines.append(f"lowest bus bandwidth: {where}, {group.busbw_gbps:.4g} GB/s{versus}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        """The figures and findings, JSON-ready."""
        return {
            **self.figures.as_dict(),
            "straggler_ratio": self.straggler_ratio,
            "min_busbw": self.min_busbw,
            "busbw_ratio": self.busbw_ratio,
            "compute_stragglers": [s.as_dict() for s in self.stragglers],
            "slow_links": [s.as_dict() for s in self.slow],
            "summary": self.summary(),
        }
