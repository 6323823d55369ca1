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
    ROLLCALL_FAIL_RANK, ROLLCALL_HANG_RANK,
    ROLLCALL_HANG_NODE,
    ROLLCALL_CHATTY, ROLLCALL_SLOW_RANK,
    ROLLCALL_SLOW_LINK, ROLLCALL_EXIT_RANK,
    ROLLCALL_CORRUPT_RANK,
    ROLLCALL_CORRUPT_COLLECTIVE,
    ROLLCALL_KERNEL_MISMATCH,
    ROLLCALL_ASSUME_ARCH                             fault injection, see below.
    ROLLCALL_NODE_IDS                                each node rank's node in a larger world
                                                     ("2,3": node rank 0 is node 2), set when the
                                                     suite re-runs a subset of the nodes; the
                                                     nodes ROLLCALL_SLOW_LINK and
                                                     ROLLCALL_HANG_NODE name are of that world
    TORCHELASTIC_ERROR_FILE                          set by torchrun per rank: where an uncaught
                                                     exception is recorded (see "Exit codes").

Rank-log contract. Each event is one line, ``ROLLCALL `` + a compact JSON object + ``\n``, written
with a single ``write(2)`` of fewer than 4096 bytes on a duplicate of file descriptor 1, so lines of
many processes sharing a pipe never interleave. Keys ``event``, ``rank`` and ``world_size`` are
always present, and so is ``time``: the wall clock when the line was written, seconds since the epoch
(a float; the suite draws each rank's events over it and orders failures by it). Other keys may be
added. Events, in order:
    start        local_rank, node_rank, local_world_size, host, node (from NODE_NAME, else
                 SLURMD_NODENAME; null when neither is set), device, device_name, model, seq_len,
                 batch_size, precision, torch, node_id (the node in the world ROLLCALL_NODE_IDS names;
                 node_rank without it), arch (the GPU's, sm_90; null off cuda), kernels (each of the
                 workload's own kernels as the gate chose: "on: <why>" or "off: <why>", see
                 rollcall_workload.gate), workload_version
                 and contract_version (WORKLOAD_VERSION and CONTRACT_VERSION below: the suite refuses a
                 workload older than its own, or of another contract)
                 -- after joining the process group
    kernels      kernels: each kernel's state once the ranks checked them and agreed (as in start; "off:
                 failed its check here: <why>", "off: failed its check on rank N", "off: not used on rank
                 N (another GPU there)")   -- after start, on cuda, unless --bandwidth-only
    epoch_time   epoch (from 1), seconds, steps, samples, loss (this rank's last step's, null when not
                 finite), param_digest (see "Replicas")   -- one per timed epoch
    throughput   samples_per_sec (this rank), tflops (achieved, this rank), mfu (null when the
                 device peak is unknown), flops_per_sample, model, seq_len, batch_size, impl, precision,
                 compile_mode, compile_scope; compute_ms and compute_ms_p90 (median and 90th
                 percentile of this rank's own compute per step, milliseconds, see "Compute time"; null
                 with --compute-steps 0), compute_steps; and where this rank's wall time went, in seconds:
                 startup_s (process start to the first step: imports, process group, model, data),
                 compile_s (the first step, which compiles the model, or in eager mode makes the first
                 kernels), warmup_s (the other warm-up steps), warmup_steps (how many ran, the first
                 included), timed_s (the timed epochs, barriers included, the digests not), digest_s
                 (computing the epochs' parameter digests); compile_cache, whether the first step
                 compiled from the compiler's cache: "hit" (inductor's FX graph cache answered every
                 graph it was asked for), "miss" (it compiled at least one graph afresh) or "off" (nothing
                 compiled: eager, or xla), with compile_cache_hits and compile_cache_misses (graphs
                 found in and compiled past the cache by then; null when "off"), see "Compile cache"
    bandwidth    scope ("world", "node" or "pair"), ranks and nodes (the group's members as
                 compact ranges, "0-7,16"), bytes (per all-reduce), iters, seconds (per all-reduce,
                 as this rank saw it), algbw_gbps, busbw_gbps; sweep ([bytes, busbw_gbps] of each
                 size, only with --bandwidth-sizes); checked (timed all-reduces whose
                 result this rank checked), mismatch (null when every one was the exact sum, else
                 {iters: how many were wrong, elements: wrong elements of the first wrong one, index:
                 its first wrong element, expected, got: that element's values})  -- one per group
                 this rank is in, see "Collective bandwidth"
    facts        what this rank can read about its own device and stack (see "Device facts"), one
                 flat object of fact names, and unknown: {fact: reason} for each fact that could not be
                 read -- after warm-up, with work queued on the device
    complete     param_digest (after the last step, see "Replicas")
                 -- then all ranks meet in a barrier and leave the process group
    error        message -- instead of the rest, on any failure; the suite orders failures by ``time``
Plain progress lines without the prefix may appear in between, and, at any point, the watchdog's:
    stack        dump (from 1, per rank), thread (its name), main (whether it is the thread that
                 trains), threads (how many the dump holds), phase (what the rank was doing: e.g.
                 "rendezvous", "warm-up step 3", "epoch 2 barrier", "epoch 2 step 1", "compute step 4",
                 "bandwidth", "final barrier"), stalled_s (seconds since the last step or phase
                 completed), hang_after (the bound that ran out, seconds), frames (the thread's Python
                 stack, outermost first, each ``[file, line, function, code, own]``: own is true for a
                 file of the workload itself, whose file is then named relative to this script's
                 directory, e.g. ``train.py``), dropped (outermost frames left out to stay under the line
                 limit: a dump truncates frames, never splits a line)
                 -- one per thread, the main thread first, when the watchdog finds the rank stalled
    resumed      dump (the last one written), stalled_s, phase (the one now entered)
                 -- the rank made progress again after a dump: that dump no longer holds

Watchdog: each rank runs a daemon thread that is told whenever a step or phase completes (rendezvous,
model built, each warm-up and timed step, each epoch's barrier, each compute step, each all-reduce and
barrier of the bandwidth phase, the final barrier). When nothing completes within the bound, it dumps
every thread's stack (``stack`` events, from ``sys._current_frames()``) and dumps again each time the
bound passes once more, until the rank makes progress (``resumed``). The bound is ``--hang-after``
seconds; by default 20 times the median step time seen so far (warm-up steps after the first, and the
timed epochs' steps), at least 60 seconds (on xla at least the first step's bound). Until the first
training step has completed (start-up, rendezvous and that step, which compiles), the bound is
``--first-step-hang-after`` seconds, by default
1800 on xla (a Neuron compile takes minutes, tens of minutes for a large model uncached), 600 with
``--compile``, 120 otherwise, and never less than ``--hang-after``.

NCCL's flight recorder: on cuda with NCCL, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_FR_BUFFER_SIZE``
(2000 entries) and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` are set unless the environment sets them, so that a
collective which times out in NCCL's own watchdog dumps each rank's recent collectives (which rank never
joined which one) to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (``/tmp/nccl_trace_rank_<rank>`` unless set).
torch 2.4's documentation lists ``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_NCCL_DUMP_ON_TIMEOUT``
among ProcessGroupNCCL's variables; later releases read ``TORCH_FR_BUFFER_SIZE`` first and keep the old
name (torch 2.11 reads both and ships the dumps' reader, ``torchfrtrace``); a torch without the recorder
ignores the variables.

Exit codes: 0 after ``complete``; 1 after ``error`` (the process ends at once, without tearing
down the process group); 2 for an invalid command line (also after ``error``, whose message says
which argument and why; :func:`parse_args` checks every value, so the suite checks a command line
before launch with it). A rank killed by a signal (torchrun stops the others once one fails) prints
nothing more. The training itself runs under
torch.distributed.elastic's ``record``: an exception that fails a rank is also written, as torchelastic's
JSON error record (message, traceback, timestamp), to the file ``TORCHELASTIC_ERROR_FILE`` names, which
torchrun sets for each rank; the agent reports each failed rank's exit code (or signal) by global rank.

Fault injection (for testing the suite itself): ``ROLLCALL_FAIL_RANK=<rank>[,<rank>...]`` (e.g.
``ROLLCALL_FAIL_RANK=0,2``) makes each rank listed raise a RuntimeError naming the injected failure right
after printing its first ``epoch_time``; ``ROLLCALL_HANG_RANK=<rank>[,<rank>...]`` makes each rank listed
sleep forever at the same point (a rank in both lists fails);
``ROLLCALL_HANG_NODE=<node>[,<node>...]`` makes every rank of each node listed stop before it joins the
process group and before its watchdog starts, sleeping forever after one plain line: a node frozen or cut
off before rendezvous, whose ranks say nothing while the others wait for them at rendezvous, so no event
names the node (the node is named as ``ROLLCALL_SLOW_LINK``'s is: in the world ``ROLLCALL_NODE_IDS``
gives, so it follows its node into the suite's bisection);
``ROLLCALL_CHATTY=<rank>:<bytes>`` makes that rank print about that many bytes of plain progress lines
after its first ``epoch_time``, spread over about five seconds (to test that log rotation loses no event).
``ROLLCALL_EXIT_RANK=<rank>:<code>`` makes that rank answer the whole roll call (``complete`` and the
barrier after it, the process group left) and then exit with status <code> (1-255); with
``<rank>:<SIGNAL>`` (a signal's name, e.g. ``SIGKILL``) it kills itself with that signal instead.
``ROLLCALL_KERNEL_MISMATCH=<rank>[,<rank>...][:<kernel>,...]`` makes those ranks' checks of those kernels
(every kernel without a list) read a wrong result, so that every rank drops them (``kernels``);
``ROLLCALL_ASSUME_ARCH=sm_86`` makes the rank take its GPU for that architecture when the gate chooses its
kernels (rollcall_workload.gate).
Every rank parses all of these variables at start: a malformed value is an ``error`` naming the
variable and the form to write, on every rank, before training (the suite checks them before launch
with the same functions: :func:`check_fault_injection`).

``ROLLCALL_SLOW_RANK=<rank>:<factor>`` (factor >= 1) makes that rank's device that many times slower (a
comma-separated list, ``0:1.5,1:1.5``, slows each rank it names by its own factor):
after its own work of each step (training and compute steps alike; a rank alone in its world: after each
training step's backward, which it times as compute) it runs extra matmuls on its device for
(factor - 1) times the wall-clock time that work took, so each of its steps takes factor times as
long. It is real work sized in time, not a sleep, and never inside a collective; sizing it in time (not
as a fixed number of repeats) keeps the factor exact on a CPU shared by all ranks, where a fixed amount
of extra work would run faster once the other ranks wait. ``ROLLCALL_SLOW_LINK=<node>:<ms>`` is a test
fault for the collective bandwidth phase only: every rank of that node waits <ms> milliseconds before it
posts its part of each timed all-reduce, as a degraded link that delays the node's sends would, so every
group holding the node measures a low bandwidth. The node is named as in the world it was given for: when
``ROLLCALL_NODE_IDS`` maps this job's node ranks to nodes of a larger world (the suite's bisection re-runs a
subset of the nodes), ``ROLLCALL_SLOW_LINK`` names a node of that larger world.

``ROLLCALL_CORRUPT_RANK=<rank>`` flips the highest mantissa bit of the first element of that rank's first
parameter (and of its fp32 master copy under ``--precision bf16``) right after its first timed step, as a
silent data corruption would: its replica differs from the others' from then on, and its ``param_digest``
with them. ``ROLLCALL_CORRUPT_COLLECTIVE=<rank>`` zeroes 1024 elements (from a third of the buffer on) of
every result that rank receives from the bandwidth phase's timed all-reduces, as a bad link or GPU would:
its ``bandwidth`` events carry a ``mismatch``. A value that is not a rank fails the run with an ``error``.

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

Device facts: every rank reports, in ``facts``, host, kernel, os, python, torch and transformers (versions),
nccl (as torch reports it; cuda only) and cuda_devices (the devices CUDA lists), and on cuda, through NVML
(``nvidia-ml-py``, imported only on cuda): driver, cuda_driver, gpus (the GPUs NVML lists), device_index
(NVML's), gpu_name, gpu_uuid, gpu_serial, memory_mib, pcie_gen and pcie_width with their maxima
pcie_gen_max, pcie_width_max (the link as the GPU and its slot can train it),
ecc_volatile_uncorrected, ecc_aggregate_uncorrected, remapped_pending, remapped_failure (booleans),
retired_pending (boolean), clock_events (the names of the active clock-event reasons, e.g. "hw_slowdown",
"sw_thermal", "hw_thermal", "hw_power_brake", "sw_power_cap", "gpu_idle"), sm_clock_mhz, sm_clock_max_mhz,
power_limit_w, power_default_w, temperature_c; on xla: neuron_driver (``/sys/module/neuron/version``),
neuron_runtime, neuron_compiler (installed packages' versions), neuron_devices, neuron_cores; on cuda and
xla libfabric (``fi_info --version``, else the ``libfabric.pc`` beside the library), and on cuda
aws_ofi_nccl (the version string of the NCCL net plugin, ``NCCL_NET_PLUGIN`` or the first
``libnccl-net*.so*`` of ``LD_LIBRARY_PATH``, ``/opt/amazon/ofi-nccl/lib``, ...). PCIe and clocks
are read while the device runs queued work: an idle GPU trains its link down and lowers its clocks. A fact
that cannot be read is absent and named in unknown with the reason (e.g. ``"nvml": "no NVML: device is
cpu"``, ``"retired_pending": "Not Supported"``), never reported as healthy. ``python bench/facts.py`` prints
:func:`device_facts` of every local GPU.

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
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    pass


#: The Kubernetes node the pod runs on (the Job's pod spec sets it from spec.nodeName).
NODE_NAME_ENV = "NODE_NAME"
#: The Slurm node a task runs on (slurmd sets it for each task).
SLURM_NODE_ENV = "SLURMD_NODENAME"
NODE_IDS_ENV = "ROLLCALL_NODE_IDS"
#: The events a rank must say to answer the roll call.
REQUIRED_EVENTS: tuple[str, ...] = ("throughput", "epoch_time", "complete")
#: The all-reduce groups a ``bandwidth`` event may be of.
BANDWIDTH_SCOPES: tuple[str, ...] = ("world", "node", "pair")
#: What a rank's first step found in the compiler's cache (``throughput``'s ``compile_cache``).
CompileCacheState = Literal["hit", "miss", "off"]
COMPILE_CACHE_STATES: tuple[CompileCacheState, ...] = ("hit", "miss", "off")
PARAM_DIGEST_HEX = 16  # the parameters' SHA-256, its first 16 hex digits
EVENT_PREFIX = "ROLLCALL "
#: The rank-log contract's version: raised when an event or a key the suite reads changes meaning. A
#: workload from before the field existed says none: version 1.
CONTRACT_VERSION = 2
#: The workload's own version (major, minor, patch): raised with each change to what it runs or reports
#: (its defaults, its kernels and their gate), so that a suite can refuse an image holding an older one.
WORKLOAD_VERSION = "0.2.0"
MAX_LINE_BYTES = 4096  # PIPE_BUF on Linux: smaller writes to a pipe are atomic


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def encode_event(event: str, rank: int, world_size: int, **fields: Any) -> bytes:
    """One roll-call line under MAX_LINE_BYTES (long strings cut to fit), stamped with ``time``."""
    fields.setdefault("time", round(time.time(), 6))
    record = _clean({"event": event, "rank": rank, "world_size": world_size, **fields})
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

    def emit(self, event: str, **fields: Any) -> None:
        """Write one event line with a single write."""
        self.write(encode_event(event, self.rank, self.world_size, **fields))

    def write(self, data: bytes) -> None:
        """Write one encoded line with a single write."""
        sys.stdout.flush()  # keep plain prints of this process in order with roll-call lines
        written = os.write(self.fd, data)
        while written < len(data):  # not expected below PIPE_BUF; never leave half a line
            written += os.write(self.fd, data[written:])
