r"""Distributed BERT pre-training roll call: every rank must train and say so.

Started by torchrun, one process per accelerator (or per CPU worker). Each rank trains a randomly
initialised BERT on synthetic MLM + NSP batches with DDP (none at world size 1) and reports what happened
on stdout as roll-call lines. Nothing is downloaded; the script works offline. ``--impl hf`` (default)
trains Hugging Face's ``BertForPreTraining``; ``--impl compact`` the same model written for the compiler
in :mod:`rollcall_workload.compact` (fused QKV, flash attention, fusable elementwise chains; on cuda
its dropout+residual+LayerNorm as Triton kernels, ``--fused-ln-dropout``). The process group is NCCL's on
cuda, gloo's on cpu and torch-xla's on xla (gloo's on torch-xla's CPU runtime, see "Replicas");
``--dist-backend gloo`` on cuda lets ranks share one GPU (NCCL refuses that), at the cost of collectives
through host memory.

Environment read (set by torchrun; never MPI variables):
    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE   global/local rank and sizes. Without WORLD_SIZE
                                                     the script runs as a single process (rank 0 of 1).
    GROUP_RANK                                       node rank; falls back to NODE_RANK, then
                                                     JOB_COMPLETION_INDEX, then 0.
    MASTER_ADDR, MASTER_PORT                         rendezvous of the default process group.
    PJRT_DEVICE                                      marks an XLA (Neuron) device as configured
                                                     (CPU: torch-xla's CPU runtime, see "Replicas").
    NODE_NAME                                        the Kubernetes node, reported in ``start``;
                                                     without it SLURMD_NODENAME, the Slurm node.
    ROLLCALL_FAIL_RANK, ROLLCALL_HANG_RANK, ROLLCALL_HANG_NODE, ROLLCALL_CHATTY, ROLLCALL_SLOW_RANK,
    ROLLCALL_SLOW_LINK, ROLLCALL_EXIT_RANK, ROLLCALL_LEAVE_RANK, ROLLCALL_CORRUPT_RANK, ROLLCALL_GIL_RANK,
    ROLLCALL_CORRUPT_COLLECTIVE, ROLLCALL_KERNEL_MISMATCH, ROLLCALL_ASSUME_ARCH, ROLLCALL_STOP_RANK,
    ROLLCALL_NO_JOIN_RANK, ROLLCALL_GPU_HANG_RANK, ROLLCALL_NO_LAUNCH_NODE,
    ROLLCALL_BAD_ADDRESS_RANK                        fault injection (rollcall_workload.faults).
    ROLLCALL_MONITOR_DIR                             the node's monitor directory (heartbeat.py).
    ROLLCALL_NODE_IDS                                each node rank's node in a larger world ("2,3": node
                                                     rank 0 is node 2) when the suite re-runs a subset of
                                                     the nodes: ROLLCALL_SLOW_LINK's and _HANG_NODE's.
    TORCHELASTIC_ERROR_FILE                          set by torchrun per rank: where an uncaught
                                                     exception is recorded (see "Exit codes").

Rank-log contract: each rank answers the roll call in its own log, one line per event, ``ROLLCALL `` and
a compact JSON object; the events, their fields and the rules of a line are declared once, as the records
below (:data:`EVENTS`), and rendered for readers in ``docs/contract.md`` (``make contract-docs``). Plain
progress lines without the prefix may appear in between; the watchdog's ``stack`` and ``resumed`` at any
point.

Watchdog: each rank runs a daemon thread that is told whenever a step or phase completes (rendezvous,
model built, each warm-up and timed step, each epoch's barrier, each compute step, each all-reduce and
barrier of the bandwidth phase, the final barrier). When nothing completes within the bound, it dumps
every thread's stack (``stack`` events, from ``sys._current_frames()``) and dumps again each time the
bound passes once more, until the rank makes progress (``resumed``). The bound is ``--hang-after``
seconds; by default 20 times the median step time seen so far (warm-up steps after the first, and the
timed epochs' steps), at least 60 seconds (on xla at least the first step's bound). Until the first
training step has completed (start-up, rendezvous and that step, which compiles), the bound is
``--first-step-hang-after`` seconds, by default 1800 on xla (a Neuron compile takes minutes, tens of minutes
for a large model uncached), 600 with ``--compile``, 120 otherwise, and never less than ``--hang-after``.
Until the rank has joined the process group the bound is ``--join-hang-after`` (default: the watchdog's
JOIN_HANG_S), so a rank that never joins, and those waiting for it, dump within it. On cuda a dump says
whether the GPU finished the work queued before it (:mod:`rollcall_workload.gpu_progress`). The rank's
heartbeat and faulthandler's dumps for the node's monitor: :mod:`rollcall_workload.heartbeat`.

NCCL's flight recorder: on cuda with NCCL, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_FR_BUFFER_SIZE``
(2000 entries) and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` are set unless the environment sets them, so that a
collective timing out in NCCL's watchdog dumps each rank's recent collectives to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (``/tmp/nccl_trace_rank_<rank>`` unless set); torch 2.4 documents
the first and third, later releases read ``TORCH_FR_BUFFER_SIZE`` first; a torch without it ignores them.

Exit codes: 0 after ``complete``; 1 after ``error`` (the process ends at once, without tearing down the
process group); 2 for an invalid command line (also after ``error``, whose message says which argument and
why; :func:`parse_args` checks every value, so the suite checks a command line before launch with it); a rank
that ends otherwise before ``complete``, with any status, 0 included, says ``exit`` first (its status and
phase). A rank killed by a signal (torchrun stops the others once one fails) prints nothing more. The training
itself runs under torch.distributed.elastic's ``record``: an exception that fails a rank is also written, as
torchelastic's JSON error record (message, traceback, timestamp), to the file ``TORCHELASTIC_ERROR_FILE``
names, which torchrun sets for each rank; the agent reports each failed rank's exit code (or signal) by global
rank. Fault injection (for testing the suite itself): the ``ROLLCALL_*`` variables above, :mod:`.faults`'.

Replicas: DDP gives every rank the same averaged gradients and every replica starts from rank 0's weights,
so the parameters are bitwise equal on every rank. ``param_digest`` is the first 16 hex digits of the
SHA-256 of every parameter's bytes in the model's order (the device's bytes, copied to the host; on cuda
of one 64-bit checksum per parameter computed on the GPU, which any changed bit changes), taken
after each timed epoch (outside its seconds) and before ``complete``; ranks whose digest differs from the
others' hold a diverged replica. On xla ``xm.optimizer_step`` averages the gradients over the XLA runtime's
world (``torch_xla.runtime.world_size()``) before the step. torch-xla's CPU runtime (``PJRT_DEVICE=CPU``)
spans one process: under torchrun each rank's runtime world is that rank alone (its world_size is 1, so
``xm.optimizer_step`` reduces nothing, ``xm.rendezvous`` waits for no one, and the ``xla://`` process group
holds one rank), and the replicas would each train on their own data. There the ranks join a gloo process
group (torchrun's env:// rendezvous) instead, average the gradients over it in host memory (the traced
backward is run first, then one flat buffer is all-reduced and copied back before the optimizer step) and
meet in its barriers, so their replicas stay bitwise equal as on every other device.

Timing: untimed warm-up steps, then ``--epochs`` epochs of ``--steps-per-epoch`` steps. Warm-up ends
when step times settle: once the last ``--warmup-settle`` K step times (each closed by a device
synchronise) all lie within ``--warmup-tolerance`` percent of their median, on every rank (the ranks agree
through one all-reduce per step), and after ``--warmup-steps`` steps at the most; K = 0 (and xla) runs
exactly ``--warmup-steps``. All ranks start each epoch together (barrier); each epoch ends with a device
synchronise. Throughput is the samples this rank processed in timed epochs over their total seconds.

Compute time: in synchronous DDP every rank waits for the slowest at each gradient all-reduce, and DDP
overlaps that all-reduce with the backward, so a training step's time is the same on every rank. After
the timed epochs each rank therefore runs one untimed and then ``--compute-steps`` timed steps of
forward + backward (no optimizer step; gradients are dropped after each) inside DDP's ``no_sync()``
(at world size 1 there is no DDP, so nothing to hold back), under the training steps' precision, so no
collective runs within them. All ranks start each such step together (barrier), the device is
synchronised before it starts and after it ends, and it is timed by CUDA events on cuda and by the
wall clock elsewhere (on xla the timed step includes running the traced graph). A rank alone in its world
on cuda or cpu (no DDP: nothing collective in any step) runs no such steps: the forward + backward of its
last ``--compute-steps`` training steps in the timed epochs are timed instead (CUDA events read after the
epochs, so no step waits; the wall clock on cpu). compute_ms is the median over those steps,
compute_ms_p90 the 90th percentile (linear interpolation).

Collective bandwidth: after that (cuda and cpu; not on xla; off with ``--bandwidth-mb 0`` or one rank)
the ranks all-reduce one float32 buffer of ``--bandwidth-mb`` MiB (64 on accelerators, 8 on cpu) in
groups. Rank r sends ``(i + 37 r) % 251 + 1`` at element i (small integers, so every sum is exact in
float32 in any order of reduction, a pattern that a moved, dropped or stale chunk breaks), and each timed
all-reduce starts from that data again; after the clock stops, the rank compares what it received with
the exact sum it computes for the group (``checked``, ``mismatch``). The groups: the whole world, each
node (when it has 2+ ranks), and each pair of nodes i, i+1 in a ring
(3+ nodes; with 2 nodes the one pair is the world). Every rank makes every group with ``new_group``
in one order; a group whose members equal an earlier one's is dropped. On accelerators groups that
share no rank run at the same time (all nodes together; the ring's pairs in two or three rounds); on
cpu, where simulated nodes share one host's cores, each group is a round of its own. First each group
runs ``--bandwidth-iters`` // 4 + 1 untimed all-reduces; then come ``--bandwidth-iters`` (10 on cpu,
20 otherwise) passes, each visiting every round in turn with a barrier after each round, so a busy
moment of the host falls on every group alike. A visit is an untimed all-reduce that lines the members
up, then a timed one, on the wall clock from its call to the device synchronise after it. seconds is
the median of a group's timed all-reduces (robust to a rank descheduled for a moment). As nccl-tests
define them: algbw_gbps = bytes / seconds / 1e9 and busbw_gbps = algbw_gbps * 2 * (n - 1) / n for n
members. ``--bandwidth-sizes MIN:MAX:FACTOR`` sweeps sizes as nccl-tests' ``-b``/``-e``/``-f`` do (each
size's passes in turn, smallest first): each ``bandwidth`` event then reports the largest size, and its
``sweep`` holds ``[bytes, busbw_gbps]`` of every size. ``--bandwidth-scopes`` measures only the scopes
it lists (e.g. ``world``). ``--bandwidth-only`` runs nothing but this phase, straight after joining the
process group (``start``, then the ``bandwidth`` events, then ``complete``; no model, no ``epoch_time``
nor ``throughput``): the short run the suite repeats on subsets of the nodes to isolate a bad one.

Device facts: every rank reports, in ``facts``, host, kernel, os, python, torch, transformers, nccl (cuda)
and cuda_devices (the devices CUDA lists); on cuda, through NVML (``nvidia-ml-py``): driver, cuda_driver,
gpus (NVML's count), device_index (NVML's), gpu_name, gpu_uuid, gpu_serial, memory_mib, pcie_gen,
pcie_width and their maxima pcie_gen_max, pcie_width_max, ecc_volatile_uncorrected,
ecc_aggregate_uncorrected, remapped_pending, remapped_failure, retired_pending (booleans), clock_events
(the active clock-event reasons, e.g. "hw_slowdown", "sw_thermal", "hw_power_brake"), sm_clock_mhz,
sm_clock_max_mhz, power_limit_w, power_default_w, temperature_c (``start`` carries memory_used_mib,
gpu_processes: what others held before the rank's CUDA context; unknown says why not); on xla:
neuron_driver, neuron_runtime, neuron_compiler, neuron_devices, neuron_cores, neuron_hw_counters; on cuda
and xla libfabric (``fi_info --version``, else ``libfabric.pc``), on cuda aws_ofi_nccl (the NCCL net
plugin's version). PCIe and clocks are read while the device runs queued work (an idle GPU trains its link
down). A fact that cannot be read is absent and named in unknown with the reason (``"nvml": "no NVML:
device is cpu"``), never reported as healthy. ``python bench/facts.py`` prints :func:`device_facts`.

Compile cache: ``--compile-cache DIR`` (or ``ROLLCALL_COMPILE_CACHE``) keeps inductor's and Triton's
caches under DIR (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), so a later run compiles from them.
Whether it did is read from inductor's own counters (``torch._dynamo.utils.counters["inductor"]``:
``fxgraph_cache_hit``, ``fxgraph_cache_miss``) after the first step, the one that compiles, and reported
in ``throughput`` beside that step's seconds (``compile_cache``, ``compile_s``). Without ``--compile-cache``
inductor keeps its cache in its default directory, which may answer too: the counters say what happened.
Where torch has no bytecode beside its modules (an image that ships none and forbids writing it), the
rank keeps Python's bytecode under DIR too (``DIR/python``, ``PYTHONPYCACHEPREFIX``), so a later run's
imports skip compiling torch from source (:func:`keep_bytecode`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from rollcall_workload.gpu_record import GPU_EVENT_WHEN, GpuEvent
from rollcall_workload.heartbeat import FILES, INTRO, MONITOR_DIR_ENV
from rollcall_workload.launcher_record import LAUNCHER_WHEN, Launcher
from rollcall_workload.schema import (
    ABSENT,
    ContractError,
    Event,
    FieldSpec,
    fields_of,
    json_ready,
    optional,
    problems,
    reference,
    required,
    take,
)

__all__ = ["ABSENT", "MONITOR_DIR_ENV", "ContractError", "Event", "FieldSpec", "GpuEvent", "fields_of"]

#: The Kubernetes node the pod runs on (the Job's pod spec sets it from spec.nodeName).
NODE_NAME_ENV = "NODE_NAME"
#: The Slurm node a task runs on (slurmd sets it for each task).
SLURM_NODE_ENV = "SLURMD_NODENAME"
NODE_IDS_ENV = "ROLLCALL_NODE_IDS"
#: The phase a rank is in while it joins the process group (the watchdog's and the heartbeat's).
JOIN_PHASE = "init_process_group"
#: The phases before a rank has joined the process group: the watchdog's first, and the join itself.
START_PHASE = "start-up"
PRE_JOIN_PHASES: tuple[str, ...] = (START_PHASE, JOIN_PHASE)
#: ``1``: a line that breaks its record raises :class:`ContractError` (the suite's tests set it); otherwise
#: the line is written as it is and the breach said once per kind on stderr (see :func:`encode_event`).
STRICT_ENV = "ROLLCALL_CONTRACT_STRICT"
#: The events a rank must say to answer the roll call.
REQUIRED_EVENTS: tuple[str, ...] = ("throughput", "epoch_time", "complete")
#: The all-reduce groups a ``bandwidth`` event may be of.
BandwidthScope = Literal["world", "node", "pair"]
BANDWIDTH_SCOPES: tuple[BandwidthScope, ...] = typing.get_args(BandwidthScope)
#: What a rank's first step found in the compiler's cache (``throughput``'s ``compile_cache``).
CompileCacheState = Literal["hit", "miss", "off"]
COMPILE_CACHE_STATES: tuple[CompileCacheState, ...] = typing.get_args(CompileCacheState)
PARAM_DIGEST_HEX = 16  # the parameters' SHA-256, its first 16 hex digits
EVENT_PREFIX = "ROLLCALL "
#: The rank-log contract's version: raised when an event or a key the suite reads changes meaning. A
#: workload from before the field existed says none: version 1.
CONTRACT_VERSION = 2
#: The workload's own version (major, minor, patch): raised with each change to what it runs or reports
#: (its defaults, its kernels and their gate), so that a suite can refuse an image holding an older one.
WORKLOAD_VERSION = "0.5.0"
MAX_LINE_BYTES = 4096  # PIPE_BUF on Linux: smaller writes to a pipe are atomic

#: The rules of a line, for readers of the contract (``docs/contract.md``).
LINE_RULES: tuple[str, ...] = (
    f"Each event is one line: `{EVENT_PREFIX.strip()}` and a space (the prefix), then one compact JSON "
    "object, then a newline.",
    "One line per event per rank: a rank says each event once (per epoch, per bandwidth group, per "
    "thread of a dump); a reader keeps the last of a repeated one.",
    f"Each line is written with a single `write(2)` of fewer than {MAX_LINE_BYTES} bytes (PIPE_BUF) on a "
    "duplicate of file descriptor 1, so the lines of many processes sharing a pipe never interleave; long "
    "text is cut (ending `...`) and a stack dump drops its outermost frames to fit.",
    "Every line carries the envelope (`event`, `rank`, `world_size`, `time`); a number that is not "
    "finite is written ``null``.",
    "A reader ignores fields it does not know, and an optional field of another type (the record still "
    "counts); a record without a required field, or with one of another type, does not count.",
    "A rank answers the roll call when it said " + ", ".join(f"`{e}`" for e in REQUIRED_EVENTS) + ".",
)


#: The records, by event name, in the order a rank says them.
EVENTS: dict[str, type[Event]] = {}
_E = TypeVar("_E", bound=type[Event])


def _record(name: str, when: str, *, open_: bool = False) -> Callable[[_E], _E]:
    def declare(cls: _E) -> _E:
        cls.NAME, cls.WHEN, cls.OPEN = name, when, open_
        EVENTS[name] = cls
        return cls

    return declare


@_record("start", "after joining the process group")
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
        "(rollcall_workload.gate)",
        {},
        partial=True,
    )
    workload_version: str | None = optional(
        "WORKLOAD_VERSION: the suite refuses a workload older than its own"
    )
    contract_version: int | None = optional("CONTRACT_VERSION: the suite refuses another contract; absent: 1")
    memory_used_mib: int | None = optional("cuda: the GPU's memory in use (MiB) before the rank's context")
    gpu_processes: list[tuple[int, int | None, str]] = optional(
        "cuda: the processes NVML listed on the GPU then, each [pid (the host's), MiB or null, holder: self, "
        "job, container or outside (a pid this container does not have)]",
        [],
        partial=True,
    )


@_record("kernels", "after start, on cuda, unless --bandwidth-only")
@dataclass(kw_only=True, slots=True)
class Kernels(Event):
    """Each kernel's state once the ranks checked them and agreed."""

    kernels: dict[str, str] = optional(
        'as in start; "off: failed its check here: <why>", "off: failed its check on rank N", '
        '"off: not used on rank N (another GPU there)"',
        {},
        partial=True,
    )


@_record("epoch_time", "one per timed epoch")
@dataclass(kw_only=True, slots=True)
class EpochTime(Event):
    """One timed epoch: its seconds and the proofs that the rank trained."""

    seconds: float = required("the epoch's seconds, from its barrier to its device synchronise")
    epoch: int = optional("the epoch, from 1", 0, strict=True)
    steps: int | None = optional("steps in the epoch")
    samples: int | None = optional("samples this rank processed in the epoch")
    loss: float | None = optional("this rank's last step's loss; null when not finite", ABSENT)
    param_digest: str | None = optional("the parameters after the epoch (see Replicas)")


@_record("throughput", "after the timed epochs")
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


@_record("bandwidth", "one per all-reduce group this rank is in, see Collective bandwidth")
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


@_record("facts", "after warm-up, with work queued on the device", open_=True)
@dataclass(kw_only=True, slots=True)
class Facts(Event):
    """What this rank can read about its own device and stack: one field per fact (see Device facts)."""

    unknown: dict[str, str] = optional("each fact that could not be read, with why", {})
    neuron_hw_counters: dict[str, dict[str, int]] = optional(
        "xla, local rank 0: each Neuron device's ECC counters (neuron-monitor's) by index", {}, partial=True
    )


@_record("complete", "last; then all ranks meet in a barrier and leave the process group")
@dataclass(kw_only=True, slots=True)
class Complete(Event):
    """The rank trained to the end."""

    param_digest: str | None = optional("the parameters after the last step (see Replicas)")


@_record("error", "instead of the rest, on any failure")
@dataclass(kw_only=True, slots=True)
class Error(Event):
    """The rank failed."""

    message: str = optional("what failed", "")


@_record("exit", "instead of complete, when the rank's process ends without complete and without error")
@dataclass(kw_only=True, slots=True)
class Exit(Event):
    """The rank's process ends before the roll call is complete, without reporting an error: it left early."""

    code: int = required("the exit status the process ends with (0 included)")
    phase: str = optional('what the rank was doing then (the watchdog\'s phase), e.g. "epoch 1 end"', "")


@_record("stack", "one per thread, the main thread first, when the watchdog finds the rank stalled")
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
        'what the rank was doing, e.g. "init_process_group", "epoch 2 barrier", "bandwidth", "final barrier"',
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


@_record(
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


@_record(
    "silent",
    "written by the node's monitor, not the rank: when the rank's heartbeat and progress both stopped past "
    "its bound plus the monitor's margin while its process still exists",
)
@dataclass(kw_only=True, slots=True)
class Silent(Event):
    """The rank says nothing and runs no Python: its heartbeat stopped, its process lives (see Heartbeat)."""

    phase: str = optional("the phase its last heartbeat named", "")
    steps: int | None = optional("the steps and phases it had completed by then")
    stalled_s: float | None = optional("seconds since its last step or phase completed")
    heartbeat_s: float | None = optional("seconds since its last heartbeat")
    hang_after: float | None = optional("the rank's bound then, seconds")
    margin_s: float | None = optional("the monitor's margin past the bound, seconds")
    pid: int | None = optional("the rank's process")
    state: str = optional(
        "its process state as the node sees it: the letter of /proc/<pid>/stat (T stopped, t traced, "
        "D uninterruptible sleep, R running, S sleeping); empty where the node cannot tell",
        "",
    )
    state_name: str = optional('the same in words, e.g. "stopped", "uninterruptible sleep"', "")


_record("launcher", LAUNCHER_WHEN)(Launcher)  # declared in launcher_record, beside the gpu_event record
_record("gpu_event", GPU_EVENT_WHEN)(GpuEvent)  # declared in gpu_record, beside the monitor's listener


def breaches(event: str, fields: Mapping[str, Any]) -> list[str]:
    """What is wrong with a line of ``event`` holding ``fields`` (the envelope's included); empty: nothing."""
    record = EVENTS.get(event)
    if record is None:
        return [f"no event {event!r} in the contract (one of {', '.join(EVENTS)})"]
    return problems(record, fields)


def read(obj: Mapping[str, Any]) -> Event | None:
    """The record of one decoded line as the suite reads it, or None when it is not one.

    None for an event the contract does not declare, or a record that does not count
    (:func:`rollcall_workload.schema.take`).
    """
    record = EVENTS.get(obj.get("event"))  # type: ignore[arg-type]
    return None if record is None else take(record, obj)


def markdown() -> str:
    """The contract's reference for readers, ``docs/contract.md``: the line's rules, then each event."""
    intro = [
        "# The rank-log contract",
        "",
        "<!-- Generated from the records of src/rollcall_workload/contract.py by `make contract-docs`"
        " (python -m rollcall_workload.contract --markdown); do not edit. -->",
        "",
        f"Contract version {CONTRACT_VERSION}. Each rank of the workload answers the roll call in its own "
        "log. The rules of a line:",
        "",
        *(f"- {rule}" for rule in LINE_RULES),
    ]
    return reference(intro, EVENTS) + reference(INTRO, FILES)


_SAID: set[str] = set()


def check_event(record: Mapping[str, Any], strict: bool | None = None) -> None:
    """Hold one line's fields (the envelope's included) to its record.

    A breach is a bug in the workload. Strict (``strict``, else :data:`STRICT_ENV` set to ``1``, as the
    suite's tests set it) it raises :class:`ContractError`. A real run is not strict: the line is written
    as it is and the breach said once on stderr, since the reader drops only what it cannot read (a wrong
    optional field; the record when a required one is wrong) and a rank's training must not fail over
    how it reports.
    """
    problems = breaches(str(record.get("event")), record)
    if not problems:
        return
    if strict if strict is not None else os.environ.get(STRICT_ENV) == "1":
        raise ContractError("; ".join(problems))
    for problem in problems:
        if problem not in _SAID:
            _SAID.add(problem)
            print(f"rollcall: the workload broke its contract: {problem}", file=sys.stderr, flush=True)


def encode_event(
    event: str, rank: int, world_size: int, *, strict: bool | None = None, **fields: Any
) -> bytes:
    """One roll-call line under MAX_LINE_BYTES (long strings cut to fit), stamped with ``time``.

    The fields are held to the event's record first (:func:`check_event`).
    """
    fields.setdefault("time", round(time.time(), 6))
    raw = {"event": event, "rank": rank, "world_size": world_size, **fields}
    check_event(raw, strict)
    record = json_ready(raw)
    while True:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)  # ASCII: no encoding errors
        data = f"{EVENT_PREFIX}{text}\n".encode()
        if len(data) < MAX_LINE_BYTES:
            return data
        longest = max(
            (k for k, v in record.items() if isinstance(v, str)), key=lambda k: len(record[k]), default=None
        )
        if longest is None or len(record[longest]) < 8:
            raise ValueError(f"roll-call line too long: {len(data)} bytes")
        record[longest] = record[longest][: len(record[longest]) // 2] + "..."


class RollcallLog:
    """Writes roll-call lines to a private duplicate of stdout, one os.write per line."""

    def __init__(self, rank: int, world_size: int, fd: int | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.fd = os.dup(1) if fd is None else fd
        self.said: set[str] = set()  # the events written so far, and the watchdog's phase now: for exit
        self.phase = ""

    def emit(self, event: str, **fields: Any) -> None:
        """Write one event line with a single write, held to its record (:func:`check_event`)."""
        self.write(encode_event(event, self.rank, self.world_size, **fields))
        self.said.add(event)

    def write(self, data: bytes) -> None:
        """Write one encoded line with a single write."""
        sys.stdout.flush()  # keep plain prints of this process in order with roll-call lines
        written = os.write(self.fd, data)
        while written < len(data):  # not expected below PIPE_BUF; never leave half a line
            written += os.write(self.fd, data[written:])


def _main(argv: list[str]) -> int:
    if argv != ["--markdown"]:
        print("usage: python -m rollcall_workload.contract --markdown > docs/contract.md", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


# help() and pydoc show the records too: the docstring above holds what they do not.
__doc__ = f"{__doc__}\nThe records, rendered (docs/contract.md):\n\n{markdown()}"

if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
