"""The GPUs' events during the run, each tied to its node, GPU, rank and phase, and classified.

What the nodes' monitors heard from NVML (:attr:`~rollcall.ranklog.RollCall.gpu_events`, the workload's
``gpu_event`` lines) carries no process: :func:`events_seen` ties each event to the rank whose ``facts``
name the same GPU (its UUID; else its NVML index on the node whose log the event came in; else, for a rank
that died before its ``facts``, the CUDA index its ``start`` names), to that rank's node,
and to what the rank was doing then (its last event before, :attr:`GpuEventSeen.phase`). A GPU no rank used
is named with its node and no rank: no healthy rank is blamed for it. Whether it is the run's GPU at all
(:attr:`GpuEventSeen.run_gpu`) is what the run's ranks named as theirs (:mod:`rollcall.evidence.gpu_owners`):
a GPU of their node that none of them named may be another tenant's.

Each event has a :data:`GpuClass`: an Xid its class in the catalog (:mod:`rollcall.evidence.xids`, with
``--xid-class`` over it); a double-bit ECC error and a lost GPU ``hardware``; a single-bit ECC error and a
clock change ``info`` (shown, not judged: the fitness rules judge the counters and throttle reasons). The
class says whose an event is; what it takes out of service (:attr:`GpuEventSeen.takes_out`: the node, the
GPU, or nothing) is NVIDIA's action for it, so that an event NVIDIA ignores or answers by restarting the
application (Xid 92, 94) stays a fact on the GPU's line.

What NVIDIA recommends for an event (:attr:`GpuEventSeen.advice`) is the recovery action the GPU reported with
it, where it did (NVML's ``nvmlEventTypeGpuRecoveryAction``: an event of that type carries the action in its
``data``), else the immediate action the catalog gives its Xid.

A rank's error is told with the event on its GPU beside it (:func:`beside_error`): an Xid or a double-bit ECC
error (or the GPU lost) stamped at most :data:`BESIDE_BEFORE_S` before the error and at most
:data:`SAME_EVENT_S` after it, a hardware one first. An event of an earlier phase of the run is no cause of
the error: it stays a fact of its GPU, on its own line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rollcall.evidence.fitness import EVENT_RULES
from rollcall.evidence.gpu_owners import RunGpus
from rollcall.evidence.xids import (
    RECOVERY_ACTION_EVENT,
    Scope,
    Xid,
    XidClass,
    XidPolicy,
    recovery_action,
    recovery_takes_out,
    said,
)
from rollcall.ranklog import GpuHeard, RankReport

GpuClass = Literal["hardware", "program", "system", "unknown", "info"]
GPU_CLASSES: tuple[GpuClass, ...] = ("hardware", "program", "system", "unknown", "info")
#: The fitness rules these events break (``--fitness-warn`` and ``--fitness-off`` take them).
LOST_RULE, HARDWARE_RULE = (name for name, _ in EVENT_RULES)


@dataclass(frozen=True)
class GpuEventSeen:
    """One GPU event of the run: what was heard, where, on whose GPU, when in that rank's run, its class."""

    heard: GpuHeard
    node: int | None
    node_name: str
    rank: int | None
    phase: str
    xid: Xid | None = None
    #: The GPU is this run's: a rank of it used it, or named it as its own, or nothing says whose it is.
    run_gpu: bool = True
    #: A rank of the run used it or may have: tied to a rank, named by one (its UUID, ``all``, a MIG
    #: instance), or nothing can tell. Only an event on such a GPU fails the run.
    used: bool = True

    @property
    def klass(self) -> GpuClass:
        """Its class: the Xid's, hardware for a double-bit ECC error or a lost GPU, else info."""
        if self.xid is not None:
            return self.xid.klass.value
        kind = self.heard.kind
        return "hardware" if kind in ("double_bit_ecc", "lost") else "info"

    @property
    def takes_out(self) -> Scope | None:
        """What the event takes out of service by NVIDIA's word: its node, its GPU, or nothing (None).

        A GPU lost, its node (NVIDIA reboots the node for a GPU fallen off the bus); a double-bit ECC error,
        its GPU (Xid 48's workflow); a recovery action NVML reported, what that action takes out
        (:data:`~rollcall.evidence.xids.RECOVERY_TAKES_OUT`); an Xid, what its immediate action takes out
        (:attr:`Xid.takes_out <rollcall.evidence.xids.Xid.takes_out>`: the hardware class only).
        """
        kind = self.heard.kind
        if kind == "lost":
            return "node"
        if kind == "double_bit_ecc":
            return "gpu"
        if self.recovery is not None:
            return recovery_takes_out(self.recovery)
        return self.xid.takes_out if self.xid is not None else None

    @property
    def rule(self) -> str | None:
        """The fitness rule it breaks: ``gpu_lost``, ``hardware_event`` (it takes something out), or None."""
        if self.heard.kind == "lost":
            return LOST_RULE
        return HARDWARE_RULE if self.takes_out is not None else None

    @property
    def recovery(self) -> int | None:
        """NVML's recovery action the event carries (``data`` of an ``nvmlEventTypeGpuRecoveryAction``)."""
        h = self.heard
        return h.data if h.event_type == RECOVERY_ACTION_EVENT and h.data is not None else None

    @property
    def advice(self) -> str:
        """What NVIDIA recommends, in words: ``reboot the node (NVIDIA: RESTART_BM)``; '' where nothing says.

        The recovery action the GPU reported with the event, where it did; else the immediate action NVIDIA's
        catalog gives the Xid.
        """
        if self.recovery is not None:
            return recovery_action(self.recovery)
        if self.xid is not None and self.xid.immediate:
            return f"{self.xid.action} (NVIDIA: {self.xid.immediate})"
        if self.xid is not None and self.xid.bucket:  # none of NVIDIA's yet: rollcall's pinned one
            return f"{said(self.xid.bucket)} (rollcall's, NVIDIA's catalog gives none: {self.xid.bucket})"
        return ""

    @property
    def gpu_label(self) -> str:
        """``node 1 (gpu-a) GPU 3, UUID GPU-..., serial ...``: everything that names the GPU."""
        h = self.heard
        where = f"node {self.node} ({self.node_name})" if self.node is not None else f"node {self.node_name}"
        return f"{where} GPU {h.gpu}, UUID {h.uuid or 'unknown'}, serial {h.serial or 'unknown'}"

    @property
    def what(self) -> str:
        """``Xid 31 (GPU memory page fault, program)``, ``GPU lost (NVML: GPU is lost)`` ..."""
        h = self.heard
        if self.xid is not None:
            return f"Xid {self.xid.number} ({self.xid.name}, {self.klass})"
        if self.recovery is not None:
            return "GPU recovery action changed"
        if h.kind == "lost":
            return f"GPU lost ({h.reason or 'NVML'})"
        if h.kind == "clock":
            return f"clock event reasons 0x{h.data or 0:x}"
        return "double-bit ECC error" if h.kind == "double_bit_ecc" else "single-bit ECC error"

    def told_beside(self, when: float | None) -> str:
        """The event as told beside an error at ``when`` (epoch seconds).

        ``beside Xid 31 on GPU 1, 0.4 s before it: GPU memory page fault, program; restart the application
        (NVIDIA: RESTART_APP)``.
        """
        h = self.heard
        what = f"Xid {self.xid.number}" if self.xid is not None else self.what
        detail = f"{self.xid.name}, {self.klass}" if self.xid is not None else self.klass
        gap = h.time - when if h.time is not None and when is not None else None
        if gap is None:
            at = ""
        elif abs(gap) < 0.05:
            at = ", at the same time"
        else:
            at = f", {abs(gap):.1f} s {'before' if gap < 0 else 'after'} it"
        advice = f"; {self.advice}" if self.advice else ""
        return f"beside {what} on GPU {h.gpu}{at}: {detail}{advice}"

    def __str__(self) -> str:
        rank = f" (rank {self.rank}, {self.phase})" if self.rank is not None else ""
        whose = "" if self.run_gpu else " (not this run's GPU)"
        return f"{self.what} on {self.gpu_label}{rank}{whose}"

    def as_dict(self) -> dict[str, Any]:
        """The event, JSON-ready."""
        h = self.heard
        return {
            "kind": h.kind,
            "class": self.klass,
            "xid": h.xid,
            "xid_name": self.xid.name if self.xid is not None else None,
            "xid_mnemonic": self.xid.mnemonic if self.xid is not None else None,
            "immediate_action": self.xid.immediate if self.xid is not None else None,
            "investigatory_action": self.xid.investigatory if self.xid is not None else None,
            "investigation": self.xid.investigation if self.xid is not None else None,
            "recovery_action": self.recovery,
            "advice": self.advice,
            "node": self.node,
            "name": self.node_name,
            "gpu": h.gpu,
            "gpu_uuid": h.uuid,
            "gpu_serial": h.serial,
            "rank": self.rank,
            "run_gpu": self.run_gpu,
            "used": self.used,
            "phase": self.phase,
            "time": h.time,
            "event_type": h.event_type,
            "data": h.data,
            "reason": h.reason,
            "rule": self.rule,
            "message": str(self),
        }


def phase_at(report: RankReport, when: float | None) -> str:
    """What the rank was doing at ``when``: ``after epoch 1`` (its last event before), or ``before start``."""
    if when is None:
        return "at an unknown time"
    before = [m for m in report.marks.values() if m.time <= when]
    errors = [e for e in report.errors if e.time is not None and e.time <= when]
    if errors:
        return "after its error"
    if not before:
        return "before start"
    return f"after {max(before, key=lambda m: m.time).label}"


def events_seen(
    heard: Iterable[GpuHeard],
    reports: Mapping[int, RankReport],
    node_of: Callable[[int], int],
    policy: XidPolicy | None = None,
    owners: RunGpus | None = None,
) -> tuple[GpuEventSeen, ...]:
    """Every event heard, tied and classified (see the module's docstring), in the order heard.

    ``owners``: the GPUs the run's ranks named as theirs; without it every GPU is the run's.
    """
    policy = policy or XidPolicy()
    by_uuid: dict[str, list[int]] = {}
    by_index: dict[tuple[str, Any], int] = {}
    by_cuda: dict[tuple[str, Any], int] = {}
    by_source: dict[str, int] = {}
    for rank, report in sorted(reports.items()):
        facts = report.facts or {}
        if isinstance(uuid := facts.get("gpu_uuid"), str):
            by_uuid.setdefault(uuid, []).append(rank)
        # equivalent mutant: any other default than "" (no device) starts with "cuda:" no more than "" does
        device = str((report.start or {}).get("device") or "")
        for source in sorted(report.sources):
            by_source.setdefault(source, rank)
            if "device_index" in facts:
                by_index.setdefault((source, facts["device_index"]), rank)
            if device.startswith("cuda:") and device[5:].isdigit():
                by_cuda.setdefault((source, int(device[5:])), rank)
    seen = []
    for h in _once(heard):
        # equivalent mutant: get's default None, or none, for [] (both are false below)
        sharing = by_uuid.get(h.uuid, []) if h.uuid else []
        if sharing:
            on = _one_of(sharing, h, reports)
        else:  # no rank read that UUID (none had said its facts yet): the index on that node
            on = by_index.get((h.source, h.gpu), by_cuda.get((h.source, h.gpu)))
        anchor = on if on is not None else by_source.get(h.source)
        node = node_of(anchor) if anchor is not None else None
        # equivalent mutant: reports.get(None) for None (reports are keyed by rank)
        name = h.node or _named(reports.get(anchor) if anchor is not None else None) or "unknown"
        # equivalent mutant: "on is not None or on in reports" (a rank tied to an event is one of reports)
        phase = phase_at(reports[on], h.time) if on is not None and on in reports else ""
        # the node's monitor writes a gpu_event of kind xid only with its Xid number, no other kind with one:
        # equivalent mutant: "or" for the last "and"
        xid = policy.of(h.xid) if h.kind == "xid" and h.xid is not None else None
        ours = on is not None or owners is None or owners.owns(h)
        used = on is not None or owners is None or owners.named(h)
        seen.append(GpuEventSeen(h, node, name, on, phase, xid, ours, used))
    return tuple(seen)


#: Seconds apart within which two monitors' reports of one GPU's same event are one event: each stamps it
#: when it polls, about once a second.
SAME_EVENT_S = 2.0


def _one_of(ranks: list[int], h: GpuHeard, reports: Mapping[int, RankReport]) -> int | None:
    """The rank on the event's GPU, of the ranks whose facts name its UUID.

    One, mostly. Where several share the GPU (the local backend's simulated nodes on one GPU; a GPU
    time-sliced between pods), the one whose error came first from about the event's time on (a program's
    fault: its own error follows, the others' echoes after it); None where none of them failed then, so
    no rank that merely shares the GPU is blamed (the event keeps its GPU and the node that heard it).
    """
    if len(ranks) == 1:
        return ranks[0]
    if h.time is None:
        return None
    after = [
        (e.time, r)
        for r in ranks
        for e in reports[r].errors
        if e.time is not None and e.time >= h.time - SAME_EVENT_S
    ]
    return min(after)[1] if after else None


def _once(heard: Iterable[GpuHeard]) -> Iterable[GpuHeard]:
    """Each event once, the first report of it standing.

    Where several monitors listen to one GPU (the local backend's simulated nodes share the host's GPUs; pods
    sharing a node), each hears every event of it.
    """
    kept: dict[tuple[Any, ...], list[GpuHeard]] = {}
    for h in heard:
        key = (h.uuid or (h.node, h.gpu), h.kind, h.xid, h.event_type, h.data)
        earlier = kept.setdefault(key, [])
        if any(
            e.source != h.source
            and (e.time is None or h.time is None or abs(e.time - h.time) <= SAME_EVENT_S)
            for e in earlier
        ):
            continue
        earlier.append(h)
        yield h


def _named(report: RankReport | None) -> str | None:
    start = (report.start or {}) if report is not None else {}
    for key in ("node", "host"):
        if isinstance(value := start.get(key), str) and value:
            return value
    return None


#: Seconds before a rank's error within which an event on its GPU is beside it (both ends in). A GPU's fault
#: reaches the rank at its next call into the GPU: within the step it was in, an NCCL watchdog's poll (about a
#: second) or the next synchronisation, seconds; a minute covers the longest step of a healthy run and the
#: monitor's poll, and leaves out an event of an earlier phase, which the rank outlived.
BESIDE_BEFORE_S = 60.0


def beside(event_at: float | None, error_at: float | None) -> bool:
    """Whether an event stamped ``event_at`` is beside an error stamped ``error_at`` (epoch seconds).

    From :data:`BESIDE_BEFORE_S` before the error to :data:`SAME_EVENT_S` after it, both ends in: the node's
    monitor stamps an event when it polls, about once a second, on the clock of the node the rank runs on, so
    the error may be stamped first. An unstamped event, or an error without a time, counts.
    """
    if event_at is None or error_at is None:
        return True
    return error_at - BESIDE_BEFORE_S <= event_at <= error_at + SAME_EVENT_S


def beside_error(seen: Iterable[GpuEventSeen], rank: int, when: float | None) -> GpuEventSeen | None:
    """The event on ``rank``'s GPU that its error at ``when`` is told with, if one is.

    An Xid (of any class), a double-bit ECC error or the GPU lost, tied to that rank, :func:`beside` the
    error. Of several, a hardware one first (it decides whose the error is), then the nearest in time.
    """

    def gap(s: GpuEventSeen) -> float:
        t = s.heard.time
        # equivalent mutant: float("INF") is float("inf")
        return abs(t - when) if t is not None and when is not None else float("inf")

    found = [s for s in seen if s.rank == rank and s.klass != "info" and beside(s.heard.time, when)]
    return min(found, key=lambda s: (s.klass != "hardware", gap(s)), default=None)


def program_evidence(seen: Iterable[GpuEventSeen]) -> dict[int, list[GpuEventSeen]]:
    """The ``program`` class's events by the rank on their GPU: what is attached to that rank's error."""
    found: dict[int, list[GpuEventSeen]] = {}
    for s in seen:
        if s.klass == "program" and s.rank is not None:
            found.setdefault(s.rank, []).append(s)
    return found


__all__ = [
    "BESIDE_BEFORE_S",
    "GPU_CLASSES",
    "HARDWARE_RULE",
    "LOST_RULE",
    "SAME_EVENT_S",
    "GpuClass",
    "GpuEventSeen",
    "XidClass",
    "beside",
    "beside_error",
    "events_seen",
    "phase_at",
    "program_evidence",
]
