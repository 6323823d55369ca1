"""The events a rank says in its own log, in the order it says them.

The sections some fields name (Replicas, Compute time, Collective bandwidth, Device facts, Compile cache)
are ``docs/workload.md``'s.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

from rollcall_workload.contract.events import event
from rollcall_workload.contract.schema import ABSENT, Event, optional, required

#: The phase a rank is in while it joins the process group (the watchdog's and the heartbeat's).
JOIN_PHASE = "init_process_group"
#: The watchdog's first phase: from the rank's process start until it enters init_process_group, importing
#: torch and its device's libraries (torch_xla on Neuron/XLA) and setting up its device (CUDA's context, the
#: Neuron runtime). Its bound is the start skew and the join bound together (S + J, from the process start).
SETUP_PHASE = "imports and device setup"
#: The phases before a rank has joined the process group, in order: its own set-up, then the join itself.
PRE_JOIN_PHASES: tuple[str, ...] = (SETUP_PHASE, JOIN_PHASE)
#: The events a rank must say to answer the roll call.
REQUIRED_EVENTS: tuple[str, ...] = ("throughput", "epoch_time", "complete")
#: The all-reduce groups a ``bandwidth`` event may be of.
BandwidthScope = Literal["world", "node", "pair"]
BANDWIDTH_SCOPES: tuple[BandwidthScope, ...] = typing.get_args(BandwidthScope)
#: What a rank's first step found in the compiler's cache (``throughput``'s ``compile_cache``).
CompileCacheState = Literal["hit", "miss", "off"]
COMPILE_CACHE_STATES: tuple[CompileCacheState, ...] = typing.get_args(CompileCacheState)
PARAM_DIGEST_HEX = 16  # the parameters' SHA-256, its first 16 hex digits


@event("start", "after joining the process group")
@dataclass(kw_only=True, slots=True)
class Start(Event):
    """Who the rank is, where it runs and what it runs."""

    local_rank: int | None = optional("the rank on its node")
    node_rank: int | None = optional("the node's rank in the job")
    local_world_size: int | None = optional("ranks on the node")
    host: str | None = optional("the host name")
    node: str | None = optional("the node, from NODE_NAME, else SLURMD_NODENAME; null when neither is set")
    device: str | None = optional("the device, e.g. cuda:3")
    device_name: str | None = optional("the device's name")
    model: str | None = optional("the model trained")
    seq_len: int | None = optional("the sequence length")
    batch_size: int | None = optional("samples per step on this rank")
    precision: str | None = optional("the training precision")
    torch: str | None = optional("torch's version")
    node_id: int | None = optional("the node in the world ROLLCALL_NODE_IDS names (node_rank without it)")
    arch: str | None = optional("the GPU's architecture, e.g. sm_90; null off cuda")
    kernels: dict[str, str] = optional(
        "each of the workload's own kernels as the gate chose: on: <why> or off: <why> "
        "(rollcall_workload.kernels.gate)",
        {},
        partial=True,
    )
    workload_version: str | None = optional(
        "WORKLOAD_VERSION: the suite refuses a workload older than its own"
    )
    contract_version: int | None = optional("CONTRACT_VERSION: the suite refuses another contract; absent: 1")
    join_s: float | None = optional("seconds the rank spent in init_process_group (joining the group)")
    memory_used_mib: int | None = optional("cuda: the GPU's memory in use (MiB) before the rank's context")
    gpu_processes: list[tuple[int, int | None, str]] = optional(
        "cuda: the processes NVML listed on the GPU then, each [pid (the host's), MiB or null, holder: self, "
        "job, container or outside (a pid this container does not have)]",
        [],
        partial=True,
    )


@event("kernels", "after start, on cuda, unless --bandwidth-only")
@dataclass(kw_only=True, slots=True)
class Kernels(Event):
    """Each kernel's state once the ranks checked them and agreed."""

    kernels: dict[str, str] = optional(
        'as in start; "off: failed its check here: <why>", "off: failed its check on rank N", '
        '"off: not used on rank N (another GPU there)"',
        {},
        partial=True,
    )


@event("epoch_time", "one per timed epoch")
@dataclass(kw_only=True, slots=True)
class EpochTime(Event):
    """One timed epoch: its seconds and the proofs that the rank trained."""

    seconds: float = required("the epoch's seconds, from its barrier to its device synchronise")
    epoch: int = optional("the epoch, from 1", 0, strict=True)
    steps: int | None = optional("steps in the epoch")
    samples: int | None = optional("samples this rank processed in the epoch")
    loss: float | None = optional("this rank's last step's loss; null when not finite", ABSENT)
    param_digest: str | None = optional("the parameters after the epoch (see Replicas)")


@event("throughput", "after the timed epochs")
@dataclass(kw_only=True, slots=True)
class Throughput(Event):
    """The rank's speed, and where its wall time went."""

    samples_per_sec: float = required("samples per second over the timed epochs, this rank")
    tflops: float | None = optional("achieved TFLOP/s, this rank")
    mfu: float | None = optional("model FLOPs utilisation; null when the device's peak is unknown")
    flops_per_sample: float | None = optional("the model's FLOPs per sample")
    model: str | None = optional("the model trained")
    seq_len: int | None = optional("the sequence length")
    batch_size: int | None = optional("samples per step on this rank")
    mlm_head: str | None = optional("the MLM head: masked or full")
    compiled: bool | None = optional("whether the model was compiled")
    compile_mode: str | None = optional("torch.compile's mode; null uncompiled")
    compile_scope: str | None = optional("what was compiled; null uncompiled")
    impl: str | None = optional("the model's implementation: hf or compact")
    precision: str | None = optional("the training precision")
    epochs: int | None = optional("timed epochs")
    steps_per_epoch: int | None = optional("steps per timed epoch")
    startup_s: float | None = optional("process start to the first step: imports, process group, model, data")
    compile_s: float | None = optional(
        "the first step, which compiles (or in eager mode makes the first kernels)"
    )
    compile_cache: CompileCacheState | None = optional(
        "whether the first step compiled from the compiler's cache: hit (inductor's FX graph cache answered "
        "every graph), miss (at least one compiled afresh) or off (nothing compiled), see Compile cache"
    )
    compile_cache_hits: int | None = optional("graphs found in the cache by then; null when off")
    compile_cache_misses: int | None = optional("graphs compiled past the cache by then; null when off")
    warmup_s: float | None = optional("the other warm-up steps")
    warmup_steps: int | None = optional("warm-up steps run, the first included")
    timed_s: float | None = optional("the timed epochs, barriers included, the digests not")
    digest_s: float | None = optional("computing the epochs' parameter digests")
    compute_ms: float | None = optional(
        "median of this rank's own compute per step, ms (see Compute time); null with --compute-steps 0"
    )
    compute_ms_p90: float | None = optional("90th percentile of the same")
    compute_steps: int | None = optional("the compute steps timed")


@event("bandwidth", "one per all-reduce group this rank is in, see Collective bandwidth")
@dataclass(kw_only=True, slots=True)
class Bandwidth(Event):
    """One all-reduce group's bandwidth as this rank measured it, and its check of the results."""

    scope: BandwidthScope = required("the group: the world, a node, or a pair of nodes")
    ranks: str = required('the group\'s ranks as compact ranges, "0-7,16"')
    nodes: str = required("the group's nodes as compact ranges")
    bytes: int = required("bytes per all-reduce (the largest size of a sweep); positive")
    algbw_gbps: float = required("bytes / seconds / 1e9")
    busbw_gbps: float = required("algbw_gbps * 2 * (n - 1) / n for n members")
    iters: int | None = optional("timed all-reduces")
    seconds: float | None = optional("median seconds per all-reduce, as this rank saw it")
    sweep: tuple[tuple[int, float], ...] = optional(
        "[bytes, busbw_gbps] of each size, smallest first; only with --bandwidth-sizes", ()
    )
    checked: int | None = optional("timed all-reduces whose result this rank checked")
    mismatch: dict[str, Any] | None = optional(
        "null when every result was the exact sum, else {iters: how many were wrong, elements: wrong "
        "elements of the first wrong one, index: its first wrong element, expected, got: that element's "
        "values}"
    )


@event("facts", "after warm-up, with work queued on the device", open_=True)
@dataclass(kw_only=True, slots=True)
class Facts(Event):
    """What this rank can read about its own device and stack: one field per fact (see Device facts)."""

    unknown: dict[str, str] = optional("each fact that could not be read, with why", {})
    neuron_hw_counters: dict[str, dict[str, int]] = optional(
        "xla, local rank 0: each Neuron device's ECC counters (neuron-monitor's) by index", {}, partial=True
    )


@event("samples", "after the timed epochs, on cuda with NVML")
@dataclass(kw_only=True, slots=True)
class Samples(Event):
    """The rank's GPU sampled while it trained: NVML's flickering facts, summarised (see Device facts)."""

    samples: int = required("the reads: one per timed step, at most one every 0.5 s; positive")
    span_s: float | None = optional("seconds from the first read to the last")
    read_us: float | None = optional("microseconds one read took, the mean")
    clock_events_share: dict[str, float] | None = optional(
        "each clock-event reason active in a read, to the share of reads it was active in (0..1); null when "
        "the reasons could not be read (unknown says why)",
        partial=True,
    )
    sm_clock_mhz_median: float | None = optional("the SM clock's median, MHz")
    pcie_gen_min: int | None = optional("the PCIe link's lowest current generation read")
    pcie_gen_max: int | None = optional("its highest")
    pcie_width_min: int | None = optional("the PCIe link's lowest current width read")
    pcie_width_max: int | None = optional("its highest")
    unknown: dict[str, str] = optional(
        "each of clock_events, sm_clock_mhz, pcie_gen, pcie_width a read could not read, with why", {}
    )


@event("complete", "last; then all ranks meet in a barrier and leave the process group")
@dataclass(kw_only=True, slots=True)
class Complete(Event):
    """The rank trained to the end."""

    param_digest: str | None = optional("the parameters after the last step (see Replicas)")


@event("error", "instead of the rest, on any failure")
@dataclass(kw_only=True, slots=True)
class Error(Event):
    """The rank failed."""

    message: str = optional("what failed", "")


@event("exit", "instead of complete, when the rank's process ends without complete and without error")
@dataclass(kw_only=True, slots=True)
class Exit(Event):
    """The rank's process ends before the roll call is complete, without reporting an error: it left early."""

    code: int = required("the exit status the process ends with (0 included)")
    phase: str = optional('what the rank was doing then (the watchdog\'s phase), e.g. "epoch 1 end"', "")


@event("stack", "one per thread, the main thread first, when the watchdog finds the rank stalled")
@dataclass(kw_only=True, slots=True)
class Stack(Event):
    """One thread's Python stack in one dump of a stalled rank."""

    dump: int = required("the dump, from 1, per rank")
    thread: str = required("the thread's name")
    frames: list[tuple[str, int, str, str, bool]] = required(
        "the thread's stack, outermost first, each [file, line, function, code, own]: own is true for a "
        "file of the workload, then named relative to its package",
        partial=True,
    )
    main: bool = optional("whether it is the thread that trains", False)
    threads: int | None = optional("threads the dump holds")
    phase: str = optional(
        'what the rank was doing, e.g. "imports and device setup", "init_process_group", "epoch 2 barrier", '
        '"final barrier"',
        "",
    )
    stalled_s: float | None = optional("seconds since the last step or phase completed")
    hang_after: float | None = optional("the bound that ran out, seconds")
    dropped: int = optional("outermost frames left out to stay under the line limit", 0)
    gpu: int | None = optional("the rank's CUDA device, where it uses one")
    gpu_pending_s: float | None = optional("seconds the GPU's oldest unfinished work has waited (0: none)")
    source: str = optional(
        'who took the stack: "" the rank\'s own watchdog; "faulthandler" its C-level timer, turned into this '
        "event by the node's monitor (no Python thread of the rank could run)",
        "",
    )


@event(
    "collectives",
    "once per stall, with the rank's first stack dump after it joined, before its stack lines: what the "
    "flight recorder holds",
)
@dataclass(kw_only=True, slots=True)
class Collectives(Event):
    """The rank's last collectives in each process group, from torch.distributed's flight recorder."""

    dump: int = required("the stack dump it goes with")
    available: bool = optional("whether the recorder held anything (false: see why)", True)
    why: str = optional("why the recorder held nothing (torch_xla's own group, a torch without one)", "")
    tails: dict[str, list[tuple[int, str, bool]]] = optional(
        "each process group by its name (the default group's is 0) to its last collectives, oldest first, "
        'each [sequence number in the group, op ("all_reduce", "barrier"), finished]',
        {},
        partial=True,
    )
    labels: dict[str, str] = optional('each group\'s description ("default_pg", or as it was made)', {})
    members: dict[str, str] = optional(
        'each group the rank is in, with its members\' global ranks as ranges ("0-7,16"), whether or not it '
        "ran a collective in it",
        {},
        partial=True,
    )
    entries: int = optional("entries the recorder held", 0)
    wrapped: bool = optional("whether its ring buffer had overwritten its oldest entries", False)
    file: str = optional(
        "the whole dump (PyTorch's pickle, as torch.distributed.flight_recorder.fr_trace reads it) in the "
        "node's monitor directory: flight/stall-<n>-rank-<rank>, its rank's n-th stall",
        "",
    )


@event(
    "resumed",
    "when the rank makes progress again after a dump; from the node's monitor (dump 0) when the heartbeat "
    "of a rank it named silent comes back",
)
@dataclass(kw_only=True, slots=True)
class Resumed(Event):
    """The rank made progress again: the dump (and any ``silent``) no longer holds."""

    dump: int = required("the last dump written (0 from the node's monitor: none withdrawn)")
    stalled_s: float | None = optional("seconds it was stalled")
    phase: str | None = optional("the phase now entered")
