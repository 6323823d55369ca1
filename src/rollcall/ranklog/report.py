"""What each rank said, merged over every log it appeared in, as the parser keeps it (:class:`RankReport`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rollcall_workload.contract import REQUIRED_EVENTS, CompileCacheState


@dataclass(frozen=True)
class RankError:
    """One ``error`` event: its message and its wall-clock time (epoch seconds; None when unstamped)."""

    message: str
    time: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Exited:
    """One ``exit`` event: the rank's process ended before ``complete`` without an error (it left early)."""

    code: int
    phase: str = ""
    time: float | None = None
    source: str = ""


@dataclass(frozen=True)
class CollectiveMismatch:
    """What one rank received wrong from one group's timed all-reduces (a ``bandwidth`` record's ``mismatch``).

    Attributes:
        iters: timed all-reduces whose result was wrong.
        elements: wrong elements in the first wrong result.
        index: the first wrong element's index.
        expected: that element's exact sum.
        got: what the rank received there.
    """

    iters: int | None = None
    elements: int | None = None
    index: int | None = None
    expected: float | None = None
    got: float | None = None


@dataclass(frozen=True)
class Mark:
    """When a rank said one event: ``event`` its name, ``label`` which one (``epoch 2``), ``time`` epoch seconds."""

    event: str
    label: str
    time: float


#: The events a rank's timeline shows (:attr:`RankReport.marks`), in the order a rank says them.
MARKED_EVENTS: tuple[str, ...] = (
    "start",
    "epoch_time",
    "throughput",
    "bandwidth",
    "complete",
    "error",
    "exit",
    "stack",
)


@dataclass(frozen=True)
class CompileCache:
    """Whether a rank's compile came from the compiler's cache, and what the compile cost.

    Attributes:
        state: ``hit`` (every graph compiled came from the cache), ``miss`` (at least one was compiled afresh)
            or ``off`` (nothing was compiled).
        compile_s: seconds of the first step, the one that compiles.
        hits: graphs the cache answered by then (None when ``off``).
        misses: graphs compiled past the cache by then (None when ``off``).
    """

    state: CompileCacheState
    compile_s: float | None = None
    hits: int | None = None
    misses: int | None = None


@dataclass(frozen=True)
class BandwidthRecord:
    """One rank's measure of one all-reduce group (a ``bandwidth`` event)."""

    scope: str
    ranks: tuple[int, ...]
    nodes: tuple[int, ...]
    bytes: int
    algbw_gbps: float
    busbw_gbps: float
    seconds: float | None = None
    #: Timed all-reduces whose result the rank checked (None: the workload checks none).
    checked: int | None = None
    mismatch: CollectiveMismatch | None = None
    #: ``(bytes, busbw_gbps)`` of each size of a sweep (``--bandwidth-sizes``), smallest first; else empty.
    sweep: tuple[tuple[int, float], ...] = ()

    @property
    def key(self) -> tuple[str, tuple[int, ...]]:
        """The group: its scope and nodes."""
        return self.scope, self.nodes


@dataclass(frozen=True)
class Frame:
    """One frame of a thread's Python stack; ``own`` marks a file of the workload itself."""

    file: str
    line: int
    function: str
    code: str = ""
    own: bool = False

    def __str__(self) -> str:
        code = f": {self.code}" if self.code else ""
        return f"{self.file}:{self.line} in {self.function}{code}"


@dataclass(frozen=True)
class ThreadStack:
    """One thread of a dump: its name, whether it trains (the main thread), its frames outermost first."""

    thread: str
    main: bool
    frames: tuple[Frame, ...]
    dropped: int = 0


@dataclass
class StackDump:
    """One dump of a stalled rank's threads (``stack`` events of one ``dump`` number)."""

    dump: int
    phase: str = ""
    stalled_s: float | None = None
    hang_after: float | None = None
    threads: list[ThreadStack] = field(default_factory=list)
    #: When the dump was taken (its first ``stack`` event's time), None when unstamped.
    time: float | None = None
    #: Who took it: "" the rank's own watchdog, "faulthandler" its C-level timer (no Python could run).
    source: str = ""
    #: On cuda, the rank's CUDA device and the seconds its oldest unfinished work had waited then (0.0: the
    #: GPU had finished all of it); None where the dump says nothing of a GPU.
    gpu: int | None = None
    gpu_pending_s: float | None = None

    @property
    def since(self) -> float | None:
        """When the rank last made progress: the dump's time less the seconds it had been stalled."""
        return self.time - self.stalled_s if self.time is not None and self.stalled_s is not None else None

    @property
    def main(self) -> ThreadStack | None:
        """The thread that trains, when the dump holds it."""
        return next((t for t in self.threads if t.main), None)


@dataclass(frozen=True)
class FlightRecord:
    """A stalled rank's last collectives in each process group (a ``collectives`` event), as the suite reads them.

    Attributes:
        dump: the stack dump it came with (a ``resumed`` past it withdraws it).
        tails: each group, by name (``"0"`` the default), to its last collectives, oldest first, each
            ``(sequence number, op, finished)``.
        labels: each group's description; members: each group's members' global ranks.
        available: False when the recorder held nothing, with ``why``; wrapped: its ring buffer had wrapped.
        file: the whole dump in the node's monitor directory; source: the log that said it.
    """

    dump: int
    tails: dict[str, tuple[tuple[int, str, bool], ...]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    members: dict[str, tuple[int, ...]] = field(default_factory=dict)
    available: bool = True
    why: str = ""
    entries: int = 0
    wrapped: bool = False
    file: str = ""
    source: str = ""


@dataclass(frozen=True)
class Silence:
    """A rank the node's monitor found silent (a ``silent`` event): no heartbeat, no progress, process alive.

    Attributes:
        phase: the phase its last heartbeat named.
        stalled_s: seconds since its last step or phase completed, when the monitor said so.
        heartbeat_s: seconds since its last heartbeat then.
        hang_after: the rank's bound; margin_s: the monitor's margin past it.
        pid: its process; state: the letter of its process state (``T`` stopped, ``D`` uninterruptible
            sleep), ``state_name`` the same in words; empty where the node cannot tell.
        time: when the monitor said it (epoch seconds).
        gpu, gpu_uuid: the rank's CUDA device and its UUID, as its heartbeat named them.
        gpu_busy_pct: where the monitor read the GPU busy through NVML at every look of its confirmation
            window (the GPU's own hang, the host waiting on it): the least utilisation read, percent; else
            None. gpu_reads, gpu_confirm_s: the reads, and the seconds from the first to the last.
    """

    phase: str = ""
    steps: int | None = None
    stalled_s: float | None = None
    heartbeat_s: float | None = None
    hang_after: float | None = None
    margin_s: float | None = None
    pid: int | None = None
    state: str = ""
    state_name: str = ""
    time: float | None = None
    gpu: int | None = None
    gpu_uuid: str | None = None
    gpu_busy_pct: int | None = None
    gpu_reads: int | None = None
    gpu_confirm_s: float | None = None

    @property
    def on_gpu(self) -> bool:
        """Whether the monitor found the rank's GPU busy while it stood still: its GPU's own hang."""
        return self.gpu_busy_pct is not None


@dataclass(frozen=True)
class Sampled:
    """What a rank's ``samples`` event said of its GPU, read while it trained (NVML's, in its timed epochs).

    Attributes:
        samples: the reads (positive).
        clock_events_share: each clock-event reason active in a read, to the share of reads it was active in;
            None when the reasons could not be read.
        sm_clock_mhz_median: the SM clock's median; pcie_*_min, pcie_*_max: the link's lowest and highest
            current generation and width read; each None when it could not be read.
    """

    samples: int
    clock_events_share: dict[str, float] | None = None
    sm_clock_mhz_median: float | None = None
    pcie_gen_min: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_min: int | None = None
    pcie_width_max: int | None = None


@dataclass
class RankReport:
    """Everything one rank said, merged over every log it appeared in."""

    rank: int
    throughput: float | None = None
    epoch_times: dict[int, float] = field(default_factory=dict)
    complete: bool = False
    start: dict[str, Any] | None = None
    errors: list[RankError] = field(default_factory=list)
    #: Its ``exit`` event: it ended before ``complete`` without an error, with this status (None: it did not).
    exited: Exited | None = None
    details: dict[str, Any] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    world_size: int | None = None
    #: Median and 90th percentile of this rank's compute per step without communication (ms).
    compute_ms: float | None = None
    compute_ms_p90: float | None = None
    bandwidth: dict[tuple[str, tuple[int, ...]], BandwidthRecord] = field(default_factory=dict)
    #: The watchdog's last dump of this rank that no ``resumed`` withdrew: the rank is stalled.
    stall: StackDump | None = None
    #: The highest dump number a ``resumed`` event withdrew.
    resumed: int = 0
    #: Its current stall's flight record, said with that stall's first dump (None: none, or a ``resumed`` withdrew
    #: it: a ``resumed`` withdraws only the records of dumps up to its own, never a later stall's).
    flight: FlightRecord | None = None
    #: The node's monitor found the rank silent (and no ``resumed`` came since).
    silent: Silence | None = None
    #: Each timed epoch's loss (NaN when the rank reported it not finite) and steps, by epoch.
    losses: dict[int, float] = field(default_factory=dict)
    epoch_steps: dict[int, int] = field(default_factory=dict)
    #: The digest of the rank's parameters after each timed epoch, by epoch, and at ``complete``.
    digests: dict[int, str] = field(default_factory=dict)
    final_digest: str | None = None
    #: When it said each of :data:`MARKED_EVENTS` that carried a ``time``, by label (the last of each).
    marks: dict[str, Mark] = field(default_factory=dict)
    #: What the rank's ``facts`` event read about its device and stack (None without one), and the facts
    #: it could not read, each with why.
    facts: dict[str, Any] | None = None
    unknown: dict[str, str] = field(default_factory=dict)
    #: Its GPU as sampled while it trained (its ``samples`` event); None: it said none.
    samples: Sampled | None = None
    #: What the first step found in the compiler's cache (None: the rank did not say).
    compile_cache: CompileCache | None = None
    #: Each of the workload's own kernels' state (``on: ...`` or ``off: ...``), as its ``start`` chose them
    #: and its ``kernels`` event, after the ranks' checks, settled them.
    kernels: dict[str, str] = field(default_factory=dict)

    @property
    def epoch_time(self) -> float | None:
        """Mean over the distinct epochs this rank timed, or None when it timed none."""
        if not self.epoch_times:
            return None
        return math.fsum(self.epoch_times.values()) / len(self.epoch_times)

    @property
    def node_rank(self) -> int | None:
        """The node this rank said it ran on, from its ``start`` event."""
        value = (self.start or {}).get("node_rank")
        return value if isinstance(value, int) else None

    def has(self, event: str) -> bool:
        """Whether this rank reported ``event`` (one of :data:`REQUIRED_EVENTS`)."""
        if event == "throughput":
            return self.throughput is not None
        if event == "epoch_time":
            return bool(self.epoch_times)
        if event == "complete":
            return self.complete
        raise ValueError(f"unknown event {event!r}; expected one of {', '.join(REQUIRED_EVENTS)}")


@dataclass(frozen=True)
class GpuHeard:
    """A ``gpu_event`` the node's monitor wrote: what one GPU of the node said during the run, and the log."""

    kind: str
    gpu: int
    uuid: str | None
    serial: str | None
    node: str | None
    xid: int | None
    event_type: int | None
    data: int | None
    reason: str
    time: float | None
    source: str


@dataclass(frozen=True)
class LauncherHeard:
    """A ``launcher`` line the node's monitor wrote: the node's launcher started, waiting, or past it."""

    state: str
    node_rank: int
    node: str | None
    pid: int | None
    waited_s: float | None
    bound_s: float | None
    process_state: str
    process_state_name: str
    time: float | None
    source: str
    #: How long ``process_state`` had held at every look of the monitor (None: a monitor that does not say).
    state_held_s: float | None = None
    #: When the suite read it, on the suite's own clock (``RollCall.clock``): no node's clock is compared.
    received: float | None = None


@dataclass(frozen=True)
class RankProcessHeard:
    """A ``rank_process`` line the node's monitor wrote: a rank's process first seen, or first seen gone.

    ``alive_at`` and ``gone_at`` (a departure's interval) are the node's wall clock, as its ranks' own events
    are; ``received`` the suite's clock when it read the line.
    """

    state: str
    rank: int
    pid: int
    node_rank: int | None
    local_rank: int | None
    visible_devices: str | None
    alive_at: float | None
    gone_at: float | None
    time: float | None
    source: str
    received: float | None = None
    #: The node its monitor named (NODE_NAME, else SLURMD_NODENAME, else the host name), where it did.
    node: str | None = None


#: A part of the run the suite hears from: ``("node", node rank)`` or ``("rank", global rank)``.
Part = tuple[str, int]


@dataclass
class Receipt:
    """When the suite first and last read a line of one part of the run (a node, a rank), on its own clock."""

    first: float
    last: float
