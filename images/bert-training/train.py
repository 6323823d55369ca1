r"""Distributed BERT pre-training roll call: every rank must train and say so.

Started by torchrun, one process per accelerator (or per CPU worker). Each rank trains a randomly
initialised BERT on synthetic MLM + NSP batches with DDP (none at world size 1) and reports what happened
on stdout as roll-call lines. Nothing is downloaded; the script works offline. ``--impl hf`` (default)
trains Hugging Face's ``BertForPreTraining``; ``--impl compact`` the same model written for the compiler
in ``bert_compact.py`` beside this file (fused QKV, flash attention, fusable elementwise chains; on cuda
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
    ROLLCALL_CORRUPT_COLLECTIVE                      fault injection, see below.
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
                 batch_size, precision, node_id (the node in the world ROLLCALL_NODE_IDS names;
                 node_rank without it)
                 -- after joining the process group
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

import argparse
import contextlib
import functools
import glob
import importlib.util
import itertools
import json
import math
import os
import re
import signal
import socket
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn

if TYPE_CHECKING:
    import torch

FAIL_RANK_ENV = "ROLLCALL_FAIL_RANK"
CORRUPT_RANK_ENV = "ROLLCALL_CORRUPT_RANK"
CORRUPT_COLLECTIVE_ENV = "ROLLCALL_CORRUPT_COLLECTIVE"
HANG_RANK_ENV = "ROLLCALL_HANG_RANK"
HANG_NODE_ENV = "ROLLCALL_HANG_NODE"
CHATTY_ENV = "ROLLCALL_CHATTY"
#: The Kubernetes node the pod runs on (the Job's pod spec sets it from spec.nodeName).
NODE_NAME_ENV = "NODE_NAME"
#: The Slurm node a task runs on (slurmd sets it for each task).
SLURM_NODE_ENV = "SLURMD_NODENAME"
SLOW_RANK_ENV = "ROLLCALL_SLOW_RANK"
SLOW_LINK_ENV = "ROLLCALL_SLOW_LINK"
NODE_IDS_ENV = "ROLLCALL_NODE_IDS"
EXIT_RANK_ENV = "ROLLCALL_EXIT_RANK"
BANDWIDTH_SCOPES = ("world", "node", "pair")
#: The bandwidth phase's data: rank r sends (i + PATTERN_STRIDE * r) % PATTERN_PERIOD + 1 at element i, small
#: integers whose sums float32 holds exactly (up to 2**24 / PATTERN_PERIOD ranks) in any order of reduction.
PATTERN_PERIOD = 251  # prime: a chunk moved by any power-of-two offset lands on other values
PATTERN_STRIDE = 37
#: Elements ROLLCALL_CORRUPT_COLLECTIVE zeroes in each result its rank receives (from a third of the buffer).
CORRUPT_CHUNK = 1024
PARAM_DIGEST_HEX = 16  # the parameters' SHA-256, its first 16 hex digits
EVENT_PREFIX = "ROLLCALL "
MAX_LINE_BYTES = 4096  # PIPE_BUF on Linux: smaller writes to a pipe are atomic
DATA_POOL_BATCHES = 4  # batches generated once per rank, reused in turn
MASK_PROB = 0.15
CLS_ID, SEP_ID, MASK_ID = 101, 102, 103  # BERT's uncased vocabulary ids
FIRST_WORD_ID = 1000  # synthetic "words" are drawn from [FIRST_WORD_ID, vocab_size)
DEVICES = ("auto", "cuda", "xla", "cpu")
IMPLS = ("hf", "compact")
PRECISIONS = ("autocast", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
COMPILE_SCOPES = ("model", "layer")  # --compile-scope: one graph for the model, or one shared by its layers
COMPILE_CACHE_ENV = "ROLLCALL_COMPILE_CACHE"
PROCESS_STARTED = time.monotonic()  # before torch is imported: start-up counts from here


@dataclass(frozen=True)
class BertShape:
    """The sizes of a BERT that the FLOPs count needs."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int


MODEL_PRESETS: dict[str, BertShape] = {
    "tiny": BertShape(hidden=128, layers=2, heads=2, intermediate=512, vocab=8192),
    "base": BertShape(hidden=768, layers=12, heads=12, intermediate=3072, vocab=30522),
    "large": BertShape(hidden=1024, layers=24, heads=16, intermediate=4096, vocab=30522),
}

# Defaults that fit a small accelerator / a quick CPU run; every one can be overridden.
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    # A short run that proves the roll call on CPUs.
    "cpu": dict(
        model="tiny",
        seq_len=64,
        batch_size=8,
        warmup_steps=2,
        epochs=2,
        steps_per_epoch=3,
        compute_steps=10,
        bandwidth_mb=8.0,
        bandwidth_iters=10,
        impl="hf",
        precision="autocast",
        compile=False,
    ),
    # What keeps a GPU busy, so that a slow one shows: the compact BERT-large in bf16 with fp32 master
    # weights, compiled, with a batch sized to the GPU's memory (:func:`cuda_batch_size`); warm-up ends
    # once the step time settles (45% MFU on one H200, bench/NOTES.md).
    "cuda": dict(
        model="large",
        seq_len=128,
        warmup_steps=40,
        epochs=3,
        # the loss must fall over the 30 steps after the first epoch (the suite's LEARNING_STEPS)
        steps_per_epoch=15,
        compute_steps=10,
        bandwidth_mb=64.0,
        bandwidth_iters=20,
        impl="compact",
        precision="bf16",
        compile=True,
    ),
    # The Neuron path: Hugging Face's BERT-base, which the Neuron compiler takes as it is.
    "xla": dict(
        model="base",
        seq_len=128,
        batch_size=32,
        warmup_steps=10,
        epochs=3,
        steps_per_epoch=50,
        compute_steps=10,
        bandwidth_mb=64.0,
        bandwidth_iters=20,
        impl="hf",
        precision="autocast",
        compile=False,
    ),
}
#: Tokens per step (batch x sequence length) the default batch holds on a GPU of 128 GiB or more; less
#: memory, proportionally fewer (seq 128: 384 samples on an H200, 240 on an 80 GiB H100; seq 512: 96 and
#: 60). On one H200 this many tokens ran 2.9% faster than 32768 at seq 128 and 3.3% at seq 512 (the
#: optimizer and the step's fixed costs spread over more samples); 65536 gained nothing more
#: (bench/NOTES.md).
CUDA_TOKENS_PER_STEP = 49152
CUDA_FULL_MEMORY = 128 << 30


def cuda_batch_size(seq_len: int, memory_bytes: int) -> int:
    """The default batch on a GPU of ``memory_bytes``: :data:`CUDA_TOKENS_PER_STEP` scaled to its memory."""
    tokens = CUDA_TOKENS_PER_STEP * min(1.0, memory_bytes / CUDA_FULL_MEMORY)
    return max(1, int(tokens // seq_len))


# Dense bf16 tensor peak per device, FLOP/s, matched as whole words of the device name, first match.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("H100 PCIe", 756.5e12),
    ("H100 NVL", 835.5e12),
    ("H200 NVL", 835.5e12),
    ("GH200", 989.4e12),
    ("H200", 989.4e12),
    ("H100", 989.4e12),
    ("H800", 989.4e12),
    ("H20", 148e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362.05e12),
    ("L40", 181.05e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("MI300X", 1307.4e12),
    ("MI325X", 1307.4e12),
)


# ---------------------------------------------------------------- pure helpers (no torch needed)


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands in the job, from torchrun's environment."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    local_world_size: int
    launched: bool  # False when started without torchrun (single process)


def read_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """Ranks and sizes from torchrun's environment."""

    def num(*names: str, default: int) -> int:
        for name in names:
            value = environ.get(name, "").strip()
            if value:
                return int(value)
        return default

    return DistEnv(
        rank=num("RANK", default=0),
        local_rank=num("LOCAL_RANK", default=0),
        world_size=num("WORLD_SIZE", default=1),
        node_rank=num("GROUP_RANK", "NODE_RANK", "JOB_COMPLETION_INDEX", default=0),
        local_world_size=num("LOCAL_WORLD_SIZE", default=1),
        launched=bool(environ.get("WORLD_SIZE", "").strip()),
    )


def resolve_device(requested: str, cuda_available: bool, xla_importable: bool, xla_configured: bool) -> str:
    """``auto`` -> cuda if available, else xla if torch_xla imports and a device is configured, else cpu."""
    if requested != "auto":
        return requested
    if cuda_available:
        return "cuda"
    if xla_importable and xla_configured:
        return "xla"
    return "cpu"


def flops_per_sample(shape: BertShape, seq_len: int, mlm_tokens: int | None = None) -> float:
    """Training FLOPs (forward + backward = 6 x matmul params x tokens, plus attention) per sample.

    The encoder and the MLM head (transform + decoder) run on every token, or the MLM head on
    ``mlm_tokens`` only; the pooler and NSP classifier run once per sample. Attention scores and
    their weighted sum add 2 x 2 x seq^2 x hidden per layer forward, times 3 with the backward.
    """
    h = shape.hidden
    heads_tokens = seq_len if mlm_tokens is None else mlm_tokens
    encoder = shape.layers * (4 * h * h + 2 * h * shape.intermediate)
    mlm_head = h * h + h * shape.vocab
    pooler_nsp = h * h + 2 * h
    matmul = encoder * seq_len + mlm_head * heads_tokens + pooler_nsp
    return 6.0 * matmul + 12.0 * shape.layers * h * seq_len * seq_len


def peak_flops(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of a device named like ``torch.cuda.get_device_name()``, or None."""
    for key, flops in PEAK_BF16_FLOPS:
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", device_name, re.IGNORECASE):
            return flops
    return None


def model_flops_utilization(flops_sample: float, samples_per_sec: float, peak: float | None) -> float | None:
    """Achieved model FLOP/s over the device's peak, or None when the peak is unknown."""
    if not peak or peak <= 0:
        return None
    return flops_sample * samples_per_sec / peak


def batch_seed(seed: int, rank: int, index: int) -> int:
    """Distinct generator seed for each (seed, rank, batch index)."""
    return ((seed & 0xFFFFF) << 40 | (rank & 0xFFFFF) << 20 | (index & 0xFFFFF)) & (2**63 - 1)


def settled(step_seconds: Sequence[float], k: int, tolerance_pct: float) -> bool:
    """Whether the last ``k`` step times all lie within ``tolerance_pct`` percent of their median."""
    if k < 1 or len(step_seconds) < k:
        return False
    last = step_seconds[-k:]
    median = statistics.median(last)
    return median > 0 and all(abs(t - median) <= median * tolerance_pct / 100 for t in last)


def precision_label(precision: str, bf16: bool) -> str:
    """How a run of ``--precision`` computes on a device with (``bf16``) or without bf16 support."""
    if not bf16:
        return "fp32"
    return "bf16-master-fp32" if precision == "bf16" else "bf16-autocast"


def compile_cache_env(directory: str) -> dict[str, str]:
    """The environment that keeps inductor's and Triton's caches under ``directory``."""
    root = os.path.abspath(directory)
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(root, "triton"),
    }


def keep_bytecode(directory: str, module: str = "torch") -> str | None:
    """Keeps Python's bytecode under ``directory``/python where ``module`` has none; that directory, or None.

    An interpreter that finds no bytecode beside torch's modules (an image that ships none and sets
    ``PYTHONDONTWRITEBYTECODE``) compiles every module it imports from source, in every process of every
    run: about 8 s of a rank's start-up on an H200 host (``import torch._inductor.compile_fx`` 11.5-13.9 s
    from source, 3.2-3.6 s from bytecode; bench/NOTES.md). Then this process, and through
    ``PYTHONPYCACHEPREFIX`` its children (inductor's compile workers), read and write their bytecode under
    the compile cache instead, so a later run reads it. Nothing changes where ``module`` is already imported
    (the imports this is for are done), where a prefix is set, or where ``module`` has its bytecode beside
    it (a prefix would hide it: an image's own bytecode would go unread).
    """
    if module in sys.modules or sys.pycache_prefix is not None:
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    if os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return None
    prefix = os.path.join(os.path.abspath(directory), "python")
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    return prefix


#: What ``throughput``'s ``compile_cache`` says of the first step's compile.
CompileCacheState = Literal["hit", "miss", "off"]


def compile_cache_fields(compiled: bool, inductor: Mapping[str, int]) -> dict[str, Any]:
    """``throughput``'s compile-cache fields, from inductor's counters after the first step.

    Args:
        compiled: whether the model was compiled (``--compile``); without it nothing is cached: "off".
        inductor: ``torch._dynamo.utils.counters["inductor"]``: ``fxgraph_cache_hit``, ``fxgraph_cache_miss``.
    """
    if not compiled:
        return {"compile_cache": "off", "compile_cache_hits": None, "compile_cache_misses": None}
    hits, misses = int(inductor.get("fxgraph_cache_hit", 0)), int(inductor.get("fxgraph_cache_miss", 0))
    state: CompileCacheState = "hit" if hits > 0 and misses == 0 else "miss"
    return {"compile_cache": state, "compile_cache_hits": hits, "compile_cache_misses": misses}


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


def rank_list(name: str, environ: Mapping[str, str], what: str = "rank") -> frozenset[int]:
    """The ranks (or nodes: ``what``) ``<name>=<rank>[,<rank>...]`` names (none when unset).

    Raises:
        ValueError: the value is not a comma-separated list of non-negative integers.
    """
    value = environ.get(name, "").strip()
    if not value:
        return frozenset()
    try:
        ranks = [int(word) for word in value.split(",")]
    except ValueError:
        ranks = [-1]
    if any(rank < 0 for rank in ranks):
        raise ValueError(
            f"{name}={value!r} is not valid; write {name}=<{what}>[,<{what}>...], e.g. {name}=0,2"
        )
    return frozenset(ranks)


def hung_node(environ: Mapping[str, str], node_rank: int) -> int | None:
    """The node ``node_rank`` is (in ``ROLLCALL_NODE_IDS``' world), if ``ROLLCALL_HANG_NODE`` names it.

    Returns:
        The node, or None when the variable does not name it.

    Raises:
        ValueError: either variable is malformed.
    """
    nodes = rank_list(HANG_NODE_ENV, environ, "node")
    if not nodes:
        return None
    node = node_id(environ, node_rank)
    return node if node in nodes else None


#: The watchdog's default bound: this many times the median step time so far, at least HANG_FLOOR_S (on xla,
#: which compiles again whenever the graph changes, at least the first step's bound).
HANG_STEP_MULTIPLE = 20.0
HANG_FLOOR_S = 60.0
#: Until the first training step completes (it compiles): the default bound, per kind of first step.
FIRST_STEP_HANG_S = {"xla": 1800.0, "compile": 600.0, "eager": 120.0}
#: Frames of the workload itself: files in this script's directory.
WORKLOAD_DIR = os.path.dirname(os.path.abspath(__file__))
MAX_CODE_CHARS = 160  # a frame's source line is cut to this many characters
FLIGHT_RECORDER_ENV = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
}


def first_step_bound(device: str, compiled: bool) -> float:
    """The default bound until the first training step completes: it compiles (xla, --compile) or not."""
    return FIRST_STEP_HANG_S["xla" if device == "xla" else "compile" if compiled else "eager"]


def frame_entry(frame: traceback.FrameSummary) -> list[Any]:
    """``[file, line, function, code, own]`` of one frame; the workload's own files named relative to it."""
    path = os.path.abspath(frame.filename) if frame.filename and not frame.filename.startswith("<") else ""
    own = bool(path) and os.path.dirname(path) == WORKLOAD_DIR
    name = os.path.basename(path) if own else frame.filename
    code = (frame.line or "").strip()
    code = code if len(code) <= MAX_CODE_CHARS else code[: MAX_CODE_CHARS - 3] + "..."
    return [name, frame.lineno or 0, frame.name, code, own]


def encode_stack(rank: int, world_size: int, frames: Sequence[list[Any]], **fields: Any) -> bytes:
    """One ``stack`` line under MAX_LINE_BYTES: outermost frames are dropped until it fits (``dropped``)."""
    kept = list(frames)
    while True:
        record = _clean(
            {
                "event": "stack",
                "rank": rank,
                "world_size": world_size,
                "time": round(time.time(), 6),
                **fields,
                "frames": kept,
                "dropped": len(frames) - len(kept),
            }
        )
        data = f"{EVENT_PREFIX}{json.dumps(record, separators=(',', ':'))}\n".encode()
        if len(data) < MAX_LINE_BYTES:
            return data
        if not kept:
            return encode_event("stack", rank, world_size, **fields, frames=[], dropped=len(frames))
        kept = kept[1:]


def thread_stacks() -> list[tuple[str, bool, list[list[Any]]]]:
    """Every thread's (name, is the main thread, frames outermost first), the main thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    stacks = [
        (
            names.get(ident, f"thread-{ident}"),
            ident == main,
            [frame_entry(f) for f in traceback.extract_stack(frame)],
        )
        for ident, frame in sys._current_frames().items()
    ]
    return sorted(stacks, key=lambda s: (not s[1], s[0]))


class Watchdog:
    """Dumps every thread's stack when no step or phase completes within the bound (see the docstring).

    The training thread calls :meth:`beat` each time a step or phase completes, naming what comes next, and
    :meth:`step_time` with the seconds per step it measured; a daemon thread watches the time since.
    """

    def __init__(
        self,
        log: RollcallLog,
        hang_after: float | None,
        first_step: float,
        floor: float = HANG_FLOOR_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.hang_after = hang_after
        self.floor = floor
        self.first_step = first_step
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = "start-up"
        self._last = clock()
        self._steps: list[float] = []
        self._first_done = False
        self._dumps = 0
        self._dumped_at: float | None = None  # the last dump since the last beat
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def bound(self) -> float:
        """Seconds without progress after which the rank counts as stalled now."""
        if self.hang_after is not None:
            steady = self.hang_after
        else:
            median = statistics.median(self._steps) if self._steps else 0.0
            steady = max(self.floor, HANG_STEP_MULTIPLE * median)
        return steady if self._first_done else max(steady, self.first_step)

    def start(self) -> Watchdog:
        """Start watching (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="rollcall-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()

    def beat(self, phase: str, *, step: bool = False) -> None:
        """A step (``step``) or phase completed; ``phase`` is what the rank does next."""
        with self._lock:
            now = self._clock()
            stalled = now - self._last
            resumed = self._dumped_at is not None
            self._phase, self._last, self._dumped_at = phase, now, None
            self._first_done = self._first_done or step
            dump = self._dumps
        if resumed:
            self.log.emit("resumed", dump=dump, stalled_s=round(stalled, 3), phase=phase)

    def first_step_done(self) -> None:
        """The first training step has completed: the bound of the steps after it applies from now."""
        with self._lock:
            self._first_done = True

    def step_time(self, seconds: float) -> None:
        """One measured step time (seconds), for the default bound."""
        with self._lock:
            self._steps.append(seconds)

    def check(self) -> bool:
        """Dump the stacks if the bound has run out since the last beat (or the last dump); whether it did."""
        with self._lock:
            now, bound = self._clock(), self.bound()
            since = now if self._dumped_at is None else self._dumped_at
            if now - self._last < bound or (self._dumped_at is not None and now - since < bound):
                return False
            self._dumps += 1
            self._dumped_at = now
            dump, phase, stalled = self._dumps, self._phase, now - self._last
        stacks = [s for s in thread_stacks() if s[0] != "rollcall-watchdog"]
        for name, main, frames in stacks:
            line = encode_stack(
                self.log.rank,
                self.log.world_size,
                frames,
                dump=dump,
                thread=name,
                main=main,
                threads=len(stacks),
                phase=phase,
                stalled_s=round(stalled, 3),
                hang_after=round(bound, 3),
            )
            self.log.write(line)
        return True

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.bound() / 10)):
            self.check()


def injected_fault(rank: int, environ: Mapping[str, str]) -> str | None:
    """``"fail"`` or ``"hang"`` when fault injection targets this rank, else None; ValueError when malformed.

    A rank named by both variables fails.
    """
    for name, fault in ((FAIL_RANK_ENV, "fail"), (HANG_RANK_ENV, "hang")):
        if rank in rank_list(name, environ):
            return fault
    return None


def corrupted_rank(name: str, environ: Mapping[str, str]) -> int | None:
    """The rank that ``name`` (``ROLLCALL_CORRUPT_RANK``, ``ROLLCALL_CORRUPT_COLLECTIVE``) targets, or None.

    Raises:
        ValueError: the value is not a rank (a non-negative integer).
    """
    value = environ.get(name, "").strip()
    if not value:
        return None
    rank = int(value) if value.isdigit() else -1
    if rank < 0:
        raise ValueError(f"{name}={value!r} is not valid; write {name}=<rank>")
    return rank


def pattern_row(rank: int) -> list[int]:
    """One period of what ``rank`` all-reduces in the bandwidth phase: element i is ``row[i % len(row)]``."""
    return [(i + PATTERN_STRIDE * rank) % PATTERN_PERIOD + 1 for i in range(PATTERN_PERIOD)]


def expected_row(ranks: Iterable[int]) -> list[int]:
    """One period of the exact sum an all-reduce of the patterns of ``ranks`` returns."""
    total = [0] * PATTERN_PERIOD
    for rank in ranks:
        for i, value in enumerate(pattern_row(rank)):
            total[i] += value
    return total


@dataclass(frozen=True)
class Mismatch:
    """A result that differs from the exact sum: how many elements, and the first of them."""

    elements: int
    index: int
    expected: float
    got: float


def mismatch(received: torch.Tensor, expected: torch.Tensor) -> Mismatch | None:
    """How ``received`` differs from ``expected`` (NaN counts as wrong), or None when they are equal."""
    import torch

    if torch.equal(received, expected):
        return None
    wrong = received.ne(expected)
    index = int(wrong.to(torch.uint8).argmax())  # the first wrong element
    return Mismatch(int(wrong.sum()), index, float(expected[index]), float(received[index]))


@dataclass
class ResultCheck:
    """The check of every timed all-reduce's result one rank received from one group."""

    checked: int = 0
    wrong: int = 0
    first: Mismatch | None = None

    def check(self, received: torch.Tensor, expected: torch.Tensor) -> None:
        """Compare one received result with the exact sum."""
        self.checked += 1
        found = mismatch(received, expected)
        if found is not None:
            self.wrong += 1
            self.first = self.first or found

    def fields(self) -> dict[str, Any]:
        """The ``bandwidth`` event's ``checked`` and ``mismatch`` fields."""
        found = None
        if self.first is not None:
            found = {"iters": self.wrong, **asdict(self.first)}
        return {"checked": self.checked, "mismatch": found}


def pattern_tensor(row: Sequence[int], numel: int, device: Any) -> torch.Tensor:
    """``numel`` float32 elements repeating ``row``, on ``device``."""
    import torch

    period = torch.tensor(row, dtype=torch.float32, device=device)
    return period.repeat(-(-numel // len(row)))[:numel].contiguous()


def drop_chunk(received: torch.Tensor) -> None:
    """``ROLLCALL_CORRUPT_COLLECTIVE``: zero :data:`CORRUPT_CHUNK` elements from a third of ``received``."""
    start = received.numel() // 3
    received[start : start + CORRUPT_CHUNK].zero_()


#: The checksums' odd multipliers: element i of a parameter is weighted by (i * _MIX + _OFFSET) | 1, mod 2**64
#: (as signed 64-bit integers: the golden ratio's and a second odd constant's bits).
_MIX = 0x9E3779B97F4A7C15 - (1 << 64)
_OFFSET = 0x632BE59BD9B4E019
_CHUNK = 1 << 22  # elements per pass: at most 4 M x 8 bytes x 3 of scratch on the device


def parameter_checksums(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """One 64-bit checksum per tensor, computed where the tensors are: an int64 tensor there.

    A tensor's checksum is the sum, modulo 2**64, of its elements read as integers (their bits, sign
    extended), element i times its own odd multiplier: one changed bit changes the sum by that bit's value
    times an odd number, never by a multiple of 2**64, so it always changes the checksum; integer sums do
    not depend on the order of the reduction, so equal tensors give equal checksums on any such device.
    """
    import torch

    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    sums = []
    with torch.no_grad():
        for param in params:
            flat = param.detach().reshape(-1).view(ints[param.element_size()])
            total = torch.zeros((), dtype=torch.int64, device=flat.device)
            for start in range(0, flat.numel(), _CHUNK):
                part = flat[start : start + _CHUNK].to(torch.int64)
                index = torch.arange(start, start + part.numel(), dtype=torch.int64, device=flat.device)
                total += (part * ((index * _MIX + _OFFSET) | 1)).sum()
            sums.append(total)
    return torch.stack(sums) if sums else torch.zeros(0, dtype=torch.int64)


def parameter_digest(model: torch.nn.Module) -> str:
    """The replica's fingerprint (:data:`PARAM_DIGEST_HEX` hex digits): see "Replicas" above.

    On cuda, SHA-256 of the parameters' checksums (:func:`parameter_checksums`, computed on the GPU, one
    copy of 8 bytes a parameter to the host: milliseconds where copying BERT-large's 670 MB took 0.7 s);
    elsewhere SHA-256 of every parameter's bytes, copied to the host.
    """
    import hashlib

    import torch

    digest = hashlib.sha256()
    params = list(model.parameters())
    with torch.no_grad():
        if params and params[0].is_cuda:
            digest.update(parameter_checksums(params).cpu().numpy().data)
        else:
            for param in params:
                digest.update(param.detach().reshape(-1).view(torch.uint8).cpu().numpy().data)
    return digest.hexdigest()[:PARAM_DIGEST_HEX]


def flip_bit(param: torch.Tensor) -> None:
    """Flip the top mantissa bit of the first element of ``param`` in place, as a silent corruption would."""
    import torch

    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[param.element_size()]
    bit = round(-math.log2(torch.finfo(param.dtype).eps)) - 1
    with torch.no_grad():
        param.detach().view(-1)[:1].view(ints).bitwise_xor_(1 << bit)


@dataclass(frozen=True)
class Chatty:
    """``ROLLCALL_CHATTY``: which rank prints plain lines, and about how many bytes of them."""

    rank: int
    size: int


def chatty(environ: Mapping[str, str]) -> Chatty | None:
    """What ``ROLLCALL_CHATTY=<rank>:<bytes>`` asks for, or None; ValueError when malformed."""
    value = environ.get(CHATTY_ENV, "").strip()
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        rank, size = int(head), int(tail)
    except ValueError:
        rank, size = -1, -1
    if not sep or rank < 0 or size < 0:
        raise ValueError(f"{CHATTY_ENV}={value!r} is not valid; write {CHATTY_ENV}=<rank>:<bytes>")
    return Chatty(rank, size)


def check_fault_injection(environ: Mapping[str, str]) -> None:
    """Parse every fault-injection variable in ``environ``; ValueError naming the first malformed one."""
    for name in (FAIL_RANK_ENV, HANG_RANK_ENV):
        rank_list(name, environ)
    rank_list(HANG_NODE_ENV, environ, "node")
    chatty(environ)
    slow_ranks(environ)
    slow_link(environ)
    exit_rank(environ)
    for name in (CORRUPT_RANK_ENV, CORRUPT_COLLECTIVE_ENV):
        corrupted_rank(name, environ)
    node_ids(environ)


@dataclass(frozen=True)
class SlowRank:
    """``ROLLCALL_SLOW_RANK``: which rank to slow down, and by what factor."""

    rank: int
    factor: float


@dataclass(frozen=True)
class SlowLink:
    """``ROLLCALL_SLOW_LINK``: whose sends to delay in the bandwidth phase, and by how much."""

    node: int
    delay_ms: float


def _pair(name: str, environ: Mapping[str, str], what: str) -> tuple[int, float] | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        index, number = int(head), float(tail)
    except ValueError:
        index, number = -1, math.nan
    if not sep or index < 0 or not math.isfinite(number):
        raise ValueError(f"{name}={value!r} is not valid; write {name}=<{what}>")
    return index, number


def slow_rank(environ: Mapping[str, str]) -> SlowRank | None:
    """The rank ``ROLLCALL_SLOW_RANK=<rank>:<factor>`` slows down, or None; ValueError when malformed."""
    pair = _pair(SLOW_RANK_ENV, environ, "rank>:<factor >= 1")
    if pair is None:
        return None
    if pair[1] < 1:
        raise ValueError(f"{SLOW_RANK_ENV}: the factor must be at least 1, not {pair[1]:g}")
    return SlowRank(*pair)


def slow_ranks(environ: Mapping[str, str]) -> dict[int, float]:
    """Each rank ``ROLLCALL_SLOW_RANK=<rank>:<factor>[,<rank>:<factor>...]`` slows down, by its factor."""
    value = environ.get(SLOW_RANK_ENV, "").strip()
    factors: dict[int, float] = {}
    for part in value.split(",") if value else ():
        one = slow_rank({SLOW_RANK_ENV: part})
        if one is None:
            raise ValueError(
                f"{SLOW_RANK_ENV}={value!r} has an empty entry; "
                f"write {SLOW_RANK_ENV}=<rank>:<factor >= 1>[,<rank>:<factor>...]"
            )
        if one.rank in factors:
            raise ValueError(f"{SLOW_RANK_ENV}: rank {one.rank} is named twice; name each rank once")
        factors[one.rank] = one.factor
    return factors


def slow_link(environ: Mapping[str, str]) -> SlowLink | None:
    """The node ``ROLLCALL_SLOW_LINK=<node>:<ms>`` slows down, or None; ValueError when malformed."""
    pair = _pair(SLOW_LINK_ENV, environ, "node>:<milliseconds >= 0")
    if pair is None:
        return None
    if pair[1] < 0:
        raise ValueError(f"{SLOW_LINK_ENV}: the delay must not be negative, not {pair[1]:g}")
    return SlowLink(*pair)


def node_ids(environ: Mapping[str, str]) -> tuple[int, ...]:
    """``ROLLCALL_NODE_IDS=2,3``: each node rank's node in the larger world (empty: its own rank)."""
    value = environ.get(NODE_IDS_ENV, "").strip()
    if not value:
        return ()
    words = [w.strip() for w in value.split(",")]
    if not all(w.isdigit() for w in words) or len(set(words)) != len(words):
        raise ValueError(
            f"{NODE_IDS_ENV}={value!r} is not valid; write {NODE_IDS_ENV}=<node>[,<node>...], distinct "
            "whole numbers, one per node rank"
        )
    return tuple(int(w) for w in words)


def node_id(environ: Mapping[str, str], node_rank: int) -> int:
    """The node ``node_rank`` is in the world ``ROLLCALL_NODE_IDS`` names (``node_rank`` without it)."""
    ids = node_ids(environ)
    if not ids:
        return node_rank
    if node_rank >= len(ids):
        raise ValueError(f"{NODE_IDS_ENV} names {len(ids)} node(s), but this is node rank {node_rank}")
    return ids[node_rank]


@dataclass(frozen=True)
class ExitRank:
    """``ROLLCALL_EXIT_RANK``: which rank ends badly after its roll call, with which status or signal."""

    rank: int
    code: int = 0
    signal: str | None = None


def exit_rank(environ: Mapping[str, str]) -> ExitRank | None:
    """The rank ``ROLLCALL_EXIT_RANK=<rank>:<code|SIGNAL>`` ends badly, or None; ValueError when malformed."""
    value = environ.get(EXIT_RANK_ENV, "").strip()
    if not value:
        return None
    head, _, tail = value.partition(":")
    names = {s.name for s in signal.Signals}
    if head.isdigit() and tail.upper() in names:
        return ExitRank(int(head), signal=tail.upper())
    if head.isdigit() and tail.isdigit() and 1 <= int(tail) <= 255:
        return ExitRank(int(head), code=int(tail))
    raise ValueError(
        f"{EXIT_RANK_ENV}={value!r} is not valid; write {EXIT_RANK_ENV}=<rank>:<exit code 1-255> "
        f"or {EXIT_RANK_ENV}=<rank>:<signal name, e.g. SIGKILL>"
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated linearly between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def bus_bandwidth(nbytes: int, seconds: float, members: int) -> tuple[float, float]:
    """All-reduce (algbw, busbw) in GB/s as nccl-tests define them: bytes / time, and algbw x 2(n-1)/n."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (members - 1) / members


def compact_ranges(values: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` gives ``"0-3,8"``: a group's members, short enough for one line."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class CommGroup:
    """One group of the bandwidth phase: its scope and members."""

    scope: str
    nodes: tuple[int, ...]
    ranks: tuple[int, ...]


def bandwidth_groups(
    node_of_rank: Sequence[int], scopes: Sequence[str] = BANDWIDTH_SCOPES
) -> list[CommGroup]:
    """The world, each node of 2+ ranks, and (3+ nodes) each ring pair; later duplicates dropped.

    ``node_of_rank[r]`` is the node rank ``r`` runs on. Groups of fewer than two ranks measure nothing; only
    the groups of ``scopes`` are made.
    """
    nodes = sorted(set(node_of_rank))
    members = {n: tuple(r for r, m in enumerate(node_of_rank) if m == n) for n in nodes}
    candidates = [CommGroup("world", tuple(nodes), tuple(range(len(node_of_rank))))]
    candidates += [CommGroup("node", (n,), members[n]) for n in nodes]
    if len(nodes) >= 3:
        for i, n in enumerate(nodes):
            pair = tuple(sorted((n, nodes[(i + 1) % len(nodes)])))
            candidates.append(CommGroup("pair", pair, tuple(sorted(members[pair[0]] + members[pair[1]]))))
    groups: list[CommGroup] = []
    for group in candidates:
        if group.scope not in scopes:
            continue
        if len(group.ranks) >= 2 and all(g.ranks != group.ranks for g in groups):
            groups.append(group)
    return groups


def bandwidth_rounds(groups: Sequence[CommGroup]) -> list[list[int]]:
    """Indices of ``groups`` in rounds of groups that share no rank, each group in the first that fits."""
    rounds: list[list[int]] = []
    used: list[set[int]] = []
    for index, group in enumerate(groups):
        for members, chosen in zip(used, rounds, strict=True):
            if members.isdisjoint(group.ranks):
                members.update(group.ranks)
                chosen.append(index)
                break
        else:
            used.append(set(group.ranks))
            rounds.append([index])
    return rounds


class CommandLineError(ValueError):
    """An invalid command line; the message is argparse's own (``argument --seq-len: ...``)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises :class:`CommandLineError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(message)


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` (to ``high``, when given)."""
    bounds = f"from {low} to {high}" if high is not None else f">= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number {bounds}, not {text!r}")
        return value

    return parse


def _number(
    low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite number between ``low`` and ``high`` (each end included unless open)."""
    bounds = f"{'>' if low_open else '>='} {low:g}"
    if math.isfinite(high):
        bounds += f" and {'<' if high_open else '<='} {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (math.isfinite(value) and above and below):
            raise argparse.ArgumentTypeError(f"must be a number {bounds}, not {text!r}")
        return value

    return parse


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def _sizes(text: str) -> tuple[int, ...]:
    """An argparse type: ``MIN:MAX[:FACTOR]`` as the sizes of the sweep, in bytes, each a multiple of 4."""

    def size(word: str) -> int:
        match = re.fullmatch(r"(\d+)([KMG]?)B?", word.strip().upper())
        if not match:
            raise ValueError(word)
        return int(match[1]) * _SIZE_UNITS[match[2]] // 4 * 4

    parts = text.split(":")
    try:
        low, high = size(parts[0]), size(parts[1])
        factor = int(parts[2]) if len(parts) == 3 else 2
        if len(parts) not in (2, 3) or not 4 <= low <= high <= 4 * 2**30 or factor < 2:
            raise ValueError(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"must be MIN:MAX[:FACTOR], sizes from 4 bytes to 4G (e.g. 1M:2G:2), FACTOR >= 2, not {text!r}"
        ) from None
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return tuple(sizes)


def _scopes(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of :data:`BANDWIDTH_SCOPES`."""
    words = tuple(w.strip() for w in text.split(",") if w.strip())
    if not words or any(w not in BANDWIDTH_SCOPES for w in words):
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of {', '.join(BANDWIDTH_SCOPES)}, not {text!r}"
        )
    return words


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; sizes left unset get their device's defaults in :func:`apply_defaults`.

    Every value is checked here (a size must be positive, ``--seq-len`` fit BERT's position embeddings), so
    the suite can check a command line before it launches anything; :class:`CommandLineError` names the
    argument and what it must be.
    """
    p = _Parser(description="Distributed BERT pre-training roll call (run under torchrun).")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--model", choices=sorted(MODEL_PRESETS), help="tiny on cpu, large on cuda, base on xla")
    p.add_argument("--seq-len", type=_whole(5, 512), help="tokens per sample (64 on cpu, 128 otherwise)")
    p.add_argument(
        "--batch-size",
        type=_whole(1),
        help="samples per rank per step (8 cpu, by memory on cuda, 32 xla)",
    )
    p.add_argument(
        "--warmup-steps", type=_whole(0), help="most untimed steps before the epochs (2 cpu, 40 cuda, 10 xla)"
    )
    p.add_argument("--epochs", type=_whole(1), help="timed epochs (2 cpu, 3 otherwise)")
    p.add_argument("--steps-per-epoch", type=_whole(1), help="steps per timed epoch (3 cpu, 15 cuda, 50 xla)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=_number(0, low_open=True), default=1e-4)
    p.add_argument("--pretrained", metavar="PATH", help="local BertForPreTraining weights to start from")
    p.add_argument(
        "--peak-tflops",
        type=_number(0, low_open=True),
        help="device peak TFLOP/s for MFU (overrides the table)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model before DDP wraps it (cuda/cpu; on by default on cuda)",
    )
    p.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="torch.compile mode; reduce-overhead adds CUDA graphs (default: default)",
    )
    p.add_argument(
        "--compile-scope",
        choices=COMPILE_SCOPES,
        help="model: compile the whole model as one graph; layer: each encoder layer, the embeddings and "
        "the heads apart, the layers sharing one graph (half the cold compile; --impl compact only, "
        "and its default)",
    )
    p.add_argument(
        "--compile-cache",
        metavar="DIR",
        default=os.environ.get(COMPILE_CACHE_ENV) or None,
        help=f"keep the compiler's caches under DIR between runs (default: ${COMPILE_CACHE_ENV})",
    )
    p.add_argument(
        "--impl",
        choices=IMPLS,
        default=None,
        help="hf: Hugging Face BertForPreTraining; compact: the same model in bert_compact.py (cuda default)",
    )
    p.add_argument(
        "--attention",
        choices=("auto", "flash", "cudnn", "efficient", "math", "triton"),
        default="auto",
        help="the compact model's attention kernel: scaled_dot_product_attention's backend, or triton: "
        "bert_compact.py's kernels with their own dropout (auto: those to seq 128 on cuda, else PyTorch's)",
    )
    p.add_argument(
        "--fused-ln-dropout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the compact model's dropout+residual+LayerNorm as bert_compact.py's Triton kernels on cuda "
        "(one Philox call per eight elements, the mask redrawn in the backward; on by default with "
        "--impl compact on cuda)",
    )
    p.add_argument(
        "--fused-gelu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the compact model's bias+GELU as bert_compact.py's Triton kernels on cuda (the bias's "
        "gradient summed in the backward's kernel; on by default with --fused-ln-dropout)",
    )
    p.add_argument(
        "--fused-bias",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --fused-ln-dropout, the biases of the matmuls before it added in its kernels (their "
        "gradients summed there) instead of in the matmuls' epilogues (on by default with it)",
    )
    p.add_argument(
        "--fused-residual-grad",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the compact model's layer inputs' two gradients (the residual's and the matmul's) summed by "
        "the matmul's backward (addmm) instead of a kernel of their own (on by default with "
        "--fused-ln-dropout)",
    )
    p.add_argument(
        "--fused-adamw",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --precision bf16, the AdamW step through the fp32 masters as one Triton kernel of "
        "bert_compact.py instead of two copies and torch's fused AdamW (on by default on cuda)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="autocast: fp32 parameters under bf16 autocast; bf16: bf16 parameters, fp32 master weights "
        "in the optimizer (both bf16 on GPUs that have it, fp32 elsewhere)",
    )
    p.add_argument(
        "--warmup-settle",
        type=_whole(0),
        default=5,
        metavar="K",
        help="end warm-up once the last K step times agree (0: always --warmup-steps)",
    )
    p.add_argument(
        "--warmup-tolerance",
        type=_number(0, low_open=True),
        default=5.0,
        metavar="PCT",
        help="how close to their median, in percent, the last K step times must be",
    )
    p.add_argument(
        "--dropout",
        type=_number(0, 1, high_open=True),
        help="dropout of hidden states and attention (BERT's 0.1)",
    )
    p.add_argument(
        "--mlm-head",
        choices=("masked", "all"),
        default="masked",
        help="run the MLM head on the masked positions only (default) or on every token",
    )
    p.add_argument("--compute-steps", type=_whole(0), help="timed steps without communication (10; 0: off)")
    p.add_argument(
        "--bandwidth-mb",
        type=_number(0, 4096),
        help="MiB per all-reduce of the bandwidth phase (8 cpu, 64 otherwise; 0: off)",
    )
    p.add_argument(
        "--bandwidth-iters", type=_whole(1), help="timed all-reduces per group (10 cpu, 20 otherwise)"
    )
    p.add_argument(
        "--bandwidth-scopes",
        type=_scopes,
        default=BANDWIDTH_SCOPES,
        metavar="SCOPE[,SCOPE]",
        help=f"the groups the bandwidth phase measures, of {', '.join(BANDWIDTH_SCOPES)} (default: all)",
    )
    p.add_argument(
        "--bandwidth-sizes",
        type=_sizes,
        metavar="MIN:MAX[:FACTOR]",
        help="sweep all-reduce sizes from MIN to MAX bytes (K, M, G: powers of 1024), each FACTOR (2) times "
        "the last, as nccl-tests' -b/-e/-f; replaces --bandwidth-mb, the events report MAX",
    )
    p.add_argument(
        "--bandwidth-only",
        action="store_true",
        help="join the process group and run only the bandwidth phase (no model, no training)",
    )
    p.add_argument(
        "--hang-after",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="dump every thread's stack when no step or phase completes within SECONDS (default: "
        f"{HANG_STEP_MULTIPLE:g} x the median step time, at least {HANG_FLOOR_S:g})",
    )
    p.add_argument(
        "--first-step-hang-after",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="the same until the first step (which compiles) completes (default: "
        + ", ".join(f"{v:g} {k}" for k, v in FIRST_STEP_HANG_S.items())
        + "; never below --hang-after)",
    )
    p.add_argument(
        "--dist-backend",
        choices=("nccl", "gloo"),
        help="the process group's backend (the device's: nccl on cuda, gloo on cpu); gloo on cuda runs "
        "the collectives through host memory, e.g. for ranks that share one GPU, which NCCL refuses",
    )
    return p.parse_args(argv)


def apply_defaults(args: argparse.Namespace, device: str, memory_bytes: int | None = None) -> None:
    """Fill unset settings from :data:`RUN_DEFAULTS` for ``device`` and check what depends on the device.

    On cuda an unset batch is sized to the GPU's ``memory_bytes`` (:func:`cuda_batch_size`; 32 when
    unknown). Each value alone is checked by :func:`parse_args`; here only what depends on the device or on
    two arguments together.
    """
    for key, value in RUN_DEFAULTS[device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.batch_size is None:
        args.batch_size = cuda_batch_size(args.seq_len, memory_bytes) if memory_bytes else 32
    if args.compile_scope is None:  # layer where it was measured: same speed, half the cold compile
        args.compile_scope = "layer" if args.impl == "compact" else "model"
    elif args.compile_scope != "model" and args.impl != "compact":
        raise ValueError("--compile-scope layer compiles the compact model's layers: add --impl compact")
    if args.attention != "auto" and args.impl != "compact":
        raise ValueError("--attention picks the compact model's kernel: add --impl compact")
    if args.fused_ln_dropout is None:  # on where it was measured to help (bench/NOTES.md: +0.8% on an H200)
        args.fused_ln_dropout = device == "cuda" and args.impl == "compact"
    elif args.fused_ln_dropout and args.impl != "compact":
        raise ValueError("--fused-ln-dropout fuses the compact model's chains: add --impl compact")
    if args.fused_gelu is None:  # on where the dropout+LayerNorm kernels are (bench/NOTES.md)
        args.fused_gelu = bool(args.fused_ln_dropout)
    elif args.fused_gelu and args.impl != "compact":
        raise ValueError("--fused-gelu fuses the compact model's bias+GELU: add --impl compact")
    if args.fused_bias is None:
        args.fused_bias = bool(args.fused_ln_dropout)
    elif args.fused_bias and not args.fused_ln_dropout:
        raise ValueError("--fused-bias adds the biases in the --fused-ln-dropout kernels: add that")
    if args.fused_residual_grad is None:
        args.fused_residual_grad = bool(args.fused_ln_dropout)
    elif args.fused_residual_grad and args.impl != "compact":
        raise ValueError("--fused-residual-grad changes the compact model's layers: add --impl compact")
    if args.fused_adamw is None:  # where it was measured (bench/NOTES.md)
        args.fused_adamw = device == "cuda"
    elif args.fused_adamw and device != "cuda":
        raise ValueError("--fused-adamw runs a Triton kernel on a GPU: add --device cuda or drop it")
    if args.dist_backend and args.dist_backend != Accelerator.BACKENDS[device] and device != "cuda":
        raise ValueError(f"--dist-backend {args.dist_backend} is for --device cuda (cpu uses gloo, xla xla)")


# ---------------------------------------------------------------- device helpers


class Accelerator:
    """What differs between cuda, xla and cpu: device, synchronise, step boundary, barrier."""

    #: Each device's process-group backend, unless ``--dist-backend`` says otherwise.
    BACKENDS: ClassVar[dict[str, str]] = {"cuda": "nccl", "xla": "xla", "cpu": "gloo"}

    def __init__(self, kind: str, local_rank: int, backend: str | None = None) -> None:
        import torch

        self.kind = kind
        self.backend = backend or self.BACKENDS[kind]
        self._xm: Any = None
        self._sync: Callable[[], Any] = lambda: None
        self.host_collectives = False  # xla whose runtime spans one process: gloo on the host instead
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda but no CUDA device is available")
            if local_rank >= torch.cuda.device_count():
                count = torch.cuda.device_count()
                raise RuntimeError(f"LOCAL_RANK is {local_rank} but only {count} CUDA devices are visible")
            torch.cuda.set_device(local_rank)
            torch.set_float32_matmul_precision("high")  # TF32 for any matmul left outside autocast
            self.device = torch.device("cuda", local_rank)
            self.name = torch.cuda.get_device_name(self.device)
            self.bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        elif kind == "xla":
            if glob.glob("/dev/neuron[0-9]*"):
                os.environ.setdefault("PJRT_DEVICE", "NEURON")
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_backend  # registers the "xla" process-group backend

            self._xm = xm
            self._sync = getattr(torch_xla, "sync", xm.mark_step)
            self.device = torch_xla.device() if hasattr(torch_xla, "device") else xm.xla_device()
            self.name = os.environ.get("PJRT_DEVICE", "xla")
            # torch-xla's CPU runtime spans one process: see "Replicas" for why its ranks reduce on the host.
            self.host_collectives = self.name.upper() == "CPU"
            if self.host_collectives:
                self.backend = "gloo"
            self.bf16 = False  # the Neuron compiler picks matmul precision itself
        else:
            self.device = torch.device("cpu")
            self.name = "cpu"
            self.bf16 = False

    def init_process_group(self, env: DistEnv) -> None:
        """Join the default process group (torchrun's env:// rendezvous, or xla://)."""
        import torch.distributed as dist

        if self.kind == "xla" and not self.host_collectives:
            dist.init_process_group("xla", init_method="xla://")
        elif env.launched:
            if self.backend == "nccl":  # NCCL's flight recorder, where this torch has it (see the docstring)
                for name, value in FLIGHT_RECORDER_ENV.items():
                    os.environ.setdefault(name, value)
            device_id = self.device if self.backend == "nccl" else None
            dist.init_process_group(self.backend, device_id=device_id)
        else:  # plain `python train.py`: a one-rank group needing no rendezvous
            dist.init_process_group(self.backend, store=dist.HashStore(), rank=0, world_size=1)

    def synchronize(self) -> None:
        """Wait until the device has finished all queued work."""
        import torch

        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.kind == "xla":
            self._xm.wait_device_ops()

    def data_parallel(self, module: Any, ddp: Callable[..., Any], local_rank: int) -> Any:
        """DDP on cuda and cpu; on xla the module as it is, its gradients reduced in :meth:`optimizer_step`.

        torch-xla's own recipe all-reduces gradients in ``xm.optimizer_step``; DDP's reducer on XLA tensors
        failed here with "Expected to have finished reduction in the prior iteration".
        """
        if self.kind == "xla":
            return module
        device_ids = [local_rank] if self.kind == "cuda" else None
        return ddp(module, device_ids=device_ids, gradient_as_bucket_view=True, broadcast_buffers=False)

    def optimizer_step(self, optimizer: Any) -> None:
        """One optimizer step; on xla, all-reduce the gradients across ranks first."""
        if self.host_collectives:
            self._host_reduce_gradients(optimizer)
            optimizer.step()
        elif self.kind == "xla":
            self._xm.optimizer_step(optimizer)
        else:
            optimizer.step()

    def _host_reduce_gradients(self, optimizer: Any) -> None:
        """Average the gradients across ranks over gloo through host memory (one flat buffer)."""
        import torch
        import torch.distributed as dist

        if dist.get_world_size() < 2:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self._sync()  # run the traced backward: the gradients exist only once the graph has run
        flat = torch.cat([g.detach().reshape(-1).cpu() for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g).to(g.device))
            offset += g.numel()

    def step_boundary(self) -> None:
        """End of one training step: XLA compiles and runs the traced graph here."""
        if self.kind == "xla":
            self._sync()

    def barrier(self, tag: str) -> None:
        """Wait until every rank gets here."""
        import torch.distributed as dist

        if self.kind == "xla" and not self.host_collectives:
            self._xm.rendezvous(tag)  # the xla process group's barrier() does not wait
        else:
            dist.barrier()

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on cuda (when the GPU has bf16), nothing elsewhere."""
        import torch

        if self.kind == "cuda" and self.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def xla_configured(environ: Mapping[str, str]) -> bool:
    """Whether an XLA device is set up: PJRT_DEVICE set, or Neuron devices present."""
    return bool(environ.get("PJRT_DEVICE") or glob.glob("/dev/neuron[0-9]*"))


def xla_importable() -> bool:
    """Whether torch_xla is installed (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None


# ---------------------------------------------------------------- model and data


def compact_module() -> Any:
    """``bert_compact.py`` beside this file, imported once."""
    name = "rollcall_bert_compact"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("bert_compact.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"bert_compact.py not found beside {__file__}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build_model(args: argparse.Namespace) -> tuple[torch.nn.Module, BertShape]:
    """A randomly initialised preset, or local weights; with its shape for the FLOPs count.

    ``args.impl`` picks Hugging Face's ``BertForPreTraining`` (``hf``) or :mod:`bert_compact`'s model
    (``compact``; local weights are Hugging Face's, converted).
    """
    if getattr(args, "impl", "hf") == "compact":
        return _build_compact(args)
    from transformers import BertConfig, BertForPreTraining

    if args.pretrained:
        if not os.path.isdir(args.pretrained):
            raise FileNotFoundError(f"--pretrained {args.pretrained} is not a directory of saved weights")
        model = BertForPreTraining.from_pretrained(
            args.pretrained, local_files_only=True, attn_implementation="sdpa"
        )
    else:
        s = MODEL_PRESETS[args.model]
        config = BertConfig(
            vocab_size=s.vocab,
            hidden_size=s.hidden,
            num_hidden_layers=s.layers,
            num_attention_heads=s.heads,
            intermediate_size=s.intermediate,
            max_position_embeddings=512,
            attn_implementation="sdpa",
        )
        if getattr(args, "dropout", None) is not None:
            config.hidden_dropout_prob = config.attention_probs_dropout_prob = args.dropout
        model = BertForPreTraining(config)
    c = model.config
    shape = BertShape(
        hidden=c.hidden_size,
        layers=c.num_hidden_layers,
        heads=c.num_attention_heads,
        intermediate=c.intermediate_size,
        vocab=c.vocab_size,
    )
    if shape.vocab <= FIRST_WORD_ID + 1:
        raise ValueError(f"vocabulary of {shape.vocab} is too small for the synthetic data")
    return model, shape


def _build_compact(args: argparse.Namespace) -> tuple[torch.nn.Module, BertShape]:
    compact = compact_module()
    if args.pretrained:
        hf, shape = build_model(argparse.Namespace(**{**vars(args), "impl": "hf"}))
        c = hf.config
        dropout, attn_dropout = c.hidden_dropout_prob, c.attention_probs_dropout_prob
    else:
        shape = MODEL_PRESETS[args.model]
        dropout = attn_dropout = 0.1 if getattr(args, "dropout", None) is None else args.dropout
    model = compact.CompactBertForPreTraining(
        vocab=shape.vocab,
        hidden=shape.hidden,
        layers=shape.layers,
        heads=shape.heads,
        intermediate=shape.intermediate,
        dropout=dropout,
        attn_dropout=attn_dropout,
        attention=getattr(args, "attention", "auto"),
        fused_norm=bool(getattr(args, "fused_ln_dropout", False)),
        fused_gelu=bool(getattr(args, "fused_gelu", False)),
        fused_bias=bool(getattr(args, "fused_bias", False)),
        fused_residual=bool(getattr(args, "fused_residual_grad", False)),
    )
    if args.pretrained:
        compact.load_hf_state_dict(model, hf.state_dict())
    if shape.vocab <= FIRST_WORD_ID + 1:
        raise ValueError(f"vocabulary of {shape.vocab} is too small for the synthetic data")
    return model, shape


def mlm_predictions(seq_len: int) -> int:
    """Masked positions per sample: 15% of the word positions ([CLS] and two [SEP] excluded), at least 1.

    A fixed count (as in BERT's ``max_predictions_per_seq``) keeps every batch the same shape, so the MLM
    head can run on the masked positions only without dynamic shapes.
    """
    return max(1, round(MASK_PROB * (seq_len - 3)))


def make_batch(seed: int, batch_size: int, seq_len: int, vocab: int) -> dict[str, torch.Tensor]:
    """One synthetic pre-training batch: [CLS] A [SEP] B [SEP], 15% of word positions masked.

    Besides the full-length ``labels`` (-100 where not masked), ``masked_positions`` and ``masked_labels``
    ([batch, :func:`mlm_predictions`]) name the masked positions for a head that runs on those only.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, seq_len)
    ids = torch.randint(FIRST_WORD_ID, vocab, shape, generator=g)
    pos = torch.arange(seq_len).unsqueeze(0)
    sep = torch.randint(2, seq_len - 2, (batch_size, 1), generator=g)  # both sentences >= 1 token
    special = (pos == 0) | (pos == sep) | (pos == seq_len - 1)
    ids = torch.where(pos == 0, CLS_ID, torch.where(special, SEP_ID, ids))
    # Exactly k word positions per sample: the k highest random scores, specials never chosen.
    scores = torch.rand(shape, generator=g).masked_fill(special, -1.0)
    positions = scores.topk(mlm_predictions(seq_len), dim=1).indices.sort(dim=1).values
    masked = torch.zeros(shape, dtype=torch.bool).scatter_(1, positions, True)
    how = torch.rand(shape, generator=g)
    inputs = torch.where(masked & (how < 0.8), MASK_ID, ids)  # 80% [MASK], 10% random, 10% kept
    random_words = torch.randint(FIRST_WORD_ID, vocab, shape, generator=g)
    inputs = torch.where(masked & (how >= 0.8) & (how < 0.9), random_words, inputs)
    return {
        "input_ids": inputs,
        "token_type_ids": (pos > sep).long().expand(batch_size, -1).contiguous(),
        "labels": torch.where(masked, ids, -100),
        "next_sentence_label": torch.randint(0, 2, (batch_size,), generator=g),
        "masked_positions": positions,
        "masked_labels": ids.gather(1, positions),
    }


def pretraining_loss(model: Any, masked_head: bool) -> torch.nn.Module:
    """BERT's pre-training loss (MLM + NSP) as one module for DDP to wrap.

    With ``masked_head`` the MLM head (transform + vocabulary decoder) runs on the masked positions only,
    which is all the loss needs; otherwise on every token, as ``BertForPreTraining.forward`` does.
    The compact model computes this loss itself: it is returned as it is, set to ``masked_head``.
    """
    import torch
    import torch.nn.functional as F

    if "rollcall_bert_compact" in sys.modules and isinstance(
        model, sys.modules["rollcall_bert_compact"].CompactBertForPreTraining
    ):
        model.masked_head = masked_head
        return model  # type: ignore[no-any-return]

    class PreTrainingLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            if not masked_head:
                keys = ("input_ids", "token_type_ids", "labels", "next_sentence_label")
                return self.model(**{k: batch[k] for k in keys}).loss  # type: ignore[no-any-return]
            hidden, pooled = self.model.bert(
                input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], return_dict=False
            )[:2]
            index = batch["masked_positions"].unsqueeze(-1).expand(-1, -1, hidden.size(-1))
            logits = self.model.cls.predictions(hidden.gather(1, index))
            nsp = self.model.cls.seq_relationship(pooled)
            mlm_loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["masked_labels"].flatten())
            return mlm_loss + F.cross_entropy(nsp.float(), batch["next_sentence_label"])

    return PreTrainingLoss()


def batch_pool(args: argparse.Namespace, rank: int, vocab: int, device: Any) -> list[dict[str, Any]]:
    """Fixed pool of batches, made once and moved to the device before any timing."""
    return [
        {
            k: v.to(device)
            for k, v in make_batch(
                batch_seed(args.seed, rank, i), args.batch_size, args.seq_len, vocab
            ).items()
        }
        for i in range(DATA_POOL_BATCHES)
    ]


# ---------------------------------------------------------------- compute time and collective bandwidth


def no_sync(acc: Accelerator, model: Any) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync()`` (no gradient all-reduce in the backward); on xla nothing is reduced anyway."""
    if acc.kind != "xla" and hasattr(model, "no_sync"):
        return model.no_sync()  # type: ignore[no-any-return]
    return contextlib.nullcontext()


class StepClock:
    """Times one region in milliseconds: CUDA events on cuda, the wall clock after a synchronise elsewhere."""

    def __init__(self, acc: Accelerator) -> None:
        self.acc = acc
        self._event: Any = None
        self._started = 0.0

    def start(self) -> None:
        """Mark the start (the device is synchronised first)."""
        import torch

        self.acc.synchronize()
        if self.acc.kind == "cuda":
            self._event = torch.cuda.Event(enable_timing=True)
            self._event.record()
        self._started = time.perf_counter()

    def stop_ms(self) -> float:
        """Milliseconds since :meth:`start`, once the device has finished the work queued since."""
        import torch

        if self.acc.kind == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return float(self._event.elapsed_time(end))
        self.acc.synchronize()
        return (time.perf_counter() - self._started) * 1000


class ComputeTimer:
    """Each training step's forward + backward timed inside the timed epochs, where one rank trains alone.

    With one rank there is no DDP, so no collective runs within a training step and the timed epochs' own
    steps serve as the compute steps (see "Compute time"): on cuda a CUDA event is recorded before each
    step's forward and after its backward, and all are read once the epochs are over, so no step waits for
    the device; on the CPU the wall clock, the work being done when the calls return.
    """

    def __init__(self, acc: Accelerator) -> None:
        self.acc = acc
        self._marks: list[tuple[Any, Any]] = []
        self._start: Any = None

    def _now(self) -> Any:
        import torch

        if self.acc.kind == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self) -> None:
        """Before a step's forward."""
        self._start = self._now()

    def stop(self) -> None:
        """After the same step's backward."""
        self._marks.append((self._start, self._now()))

    def times_ms(self, last: int) -> list[float]:
        """Milliseconds of each of the last ``last`` steps timed (all of them when fewer ran)."""
        marks = self._marks[-last:] if last > 0 else []
        if self.acc.kind == "cuda" and marks:
            marks[-1][1].synchronize()
            return [float(a.elapsed_time(b)) for a, b in marks]
        return [(b - a) * 1000 for a, b in marks]


class Slowdown:
    """``ROLLCALL_SLOW_RANK`` on this rank: each step made ``factor`` times as long by extra work.

    :meth:`begin` and :meth:`end` bracket one step; ``end`` runs matmuls on the device for (factor - 1) times
    the wall-clock time the step took. With factor 1 both do nothing (and synchronise nothing).
    """

    def __init__(self, acc: Accelerator, factor: float = 1.0) -> None:
        self.acc = acc
        self.factor = factor
        self._started = 0.0
        self._operand: Any = None

    def begin(self) -> None:
        """Start of one step."""
        if self.factor > 1:
            self.acc.synchronize()
            self._started = time.perf_counter()

    def end(self) -> None:
        """End of the step: the extra work, then back to the caller."""
        if self.factor <= 1:
            return
        self.acc.synchronize()
        self.burn((self.factor - 1) * (time.perf_counter() - self._started))

    def burn(self, seconds: float) -> None:
        """Keep the device busy with matmuls for ``seconds`` of wall-clock time."""
        import torch

        if self._operand is None:
            size = 2048 if self.acc.kind == "cuda" else 128
            self._operand = torch.randn(size, size, device=self.acc.device)
        per_sync = 8 if self.acc.kind == "cuda" else 1
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(per_sync):
                product = self._operand @ self._operand
            del product
            self.acc.step_boundary()
            self.acc.synchronize()


def measure_compute(
    acc: Accelerator,
    step_model: Callable[..., Any],
    optimizer: Any,
    batches: Sequence[dict[str, Any]],
    *,
    steps: int,
    slowdown: Slowdown,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    cudagraphs: bool = False,
    watchdog: Watchdog | None = None,
) -> list[float]:
    """Milliseconds of each of ``steps`` forward + backward steps with no collective in them.

    ``autocast`` is the training steps' autocast context (``acc.autocast`` when None; a null context with
    bf16 weights); with ``cudagraphs`` each step is marked as a new CUDA-graph step, as in training.
    """
    import torch

    clock = StepClock(acc)
    times: list[float] = []
    for i in range(steps + 1 if steps else 0):  # the first one is untimed
        if watchdog is not None:
            watchdog.beat(f"compute step {i}")
        acc.barrier(f"rollcall-compute-{i}")
        with no_sync(acc, step_model):
            clock.start()
            slowdown.begin()
            if cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with (autocast or acc.autocast)():
                loss = step_model(batches[i % len(batches)])
            loss.backward()
            acc.step_boundary()
            slowdown.end()
            elapsed = clock.stop_ms()
        optimizer.zero_grad(set_to_none=True)
        if i:
            times.append(elapsed)
    return times


def compute_fields(times: Sequence[float]) -> dict[str, Any]:
    """The ``throughput`` event's compute fields for the step times ``times`` (ms)."""
    if not times:
        return {"compute_ms": None, "compute_ms_p90": None, "compute_steps": 0}
    return {
        "compute_ms": round(percentile(times, 50), 4),
        "compute_ms_p90": round(percentile(times, 90), 4),
        "compute_steps": len(times),
    }


def measure_bandwidth(
    acc: Accelerator,
    env: DistEnv,
    log: RollcallLog,
    args: argparse.Namespace,
    link: SlowLink | None,
    *,
    watchdog: Watchdog | None = None,
) -> None:
    """The bandwidth phase (see the docstring): one ``bandwidth`` event per group this rank is in."""
    import torch
    import torch.distributed as dist

    if acc.kind == "xla" or args.bandwidth_mb <= 0 or env.world_size < 2:
        return
    mine = torch.tensor([env.node_rank], dtype=torch.int64, device=acc.device)
    gathered = [torch.zeros_like(mine) for _ in range(env.world_size)]
    dist.all_gather(gathered, mine)
    groups = bandwidth_groups([int(t.item()) for t in gathered], args.bandwidth_scopes)
    handles = [dist.new_group(list(g.ranks)) for g in groups]  # every rank, every group, one order
    sizes = args.bandwidth_sizes or (max(4, int(args.bandwidth_mb * 2**20) // 4 * 4),)
    slowed = link is not None and link.node == node_id(os.environ, env.node_rank)
    delay_s = link.delay_ms / 1000 if link is not None and slowed else 0.0
    corrupt = corrupted_rank(CORRUPT_COLLECTIVE_ENV, os.environ) == env.rank
    # Simulated nodes on one CPU share its cores: there groups take turns, elsewhere disjoint ones overlap.
    rounds = [[i] for i in range(len(groups))] if acc.kind == "cpu" else bandwidth_rounds(groups)
    mine_in = {i: handles[i] for round_ in rounds for i in round_ if env.rank in groups[i].ranks}
    checks = {i: ResultCheck() for i in mine_in}
    warm = torch.zeros(max(sizes) // 4, dtype=torch.float32, device=acc.device)
    for handle in mine_in.values():  # untimed: connections made, buffers warm
        for _ in range(args.bandwidth_iters // 4 + 1):
            dist.all_reduce(warm, group=handle)
    del warm
    acc.synchronize()
    acc.barrier("rollcall-bandwidth")
    # Each size in turn, smallest first; the events report the largest, with the sweep beside it. Each rank
    # sends its own integer pattern and checks, after the clock stopped, that it received the exact sum.
    swept: dict[int, list[tuple[int, float, float, float]]] = {i: [] for i in mine_in}
    for size in sorted(sizes):
        numel = size // 4
        source = pattern_tensor(pattern_row(env.rank), numel, acc.device)  # what this rank sends, every time
        buffer = source.clone()
        expected = {i: pattern_tensor(expected_row(groups[i].ranks), numel, acc.device) for i in mine_in}
        times: dict[int, list[float]] = {i: [] for i in mine_in}
        # Interleaved: each pass visits every round once, so a busy moment of the host hits every group alike.
        for n in range(args.bandwidth_iters):
            for r, round_ in enumerate(rounds):
                if watchdog is not None:
                    watchdog.beat(f"bandwidth {size} bytes pass {n + 1} round {r + 1}")
                for index in round_:
                    if index in mine_in:
                        times[index].append(_time_all_reduce(acc, buffer, source, mine_in[index], delay_s))
                        if corrupt:
                            drop_chunk(
                                buffer
                            )  # ROLLCALL_CORRUPT_COLLECTIVE: this rank receives a chunk short
                        checks[index].check(buffer, expected[index])  # after the clock stopped
                acc.barrier("rollcall-bandwidth-round")
        for index, samples in times.items():
            seconds = percentile(samples, 50)
            algbw, busbw = bus_bandwidth(size, seconds, len(groups[index].ranks))
            swept[index].append((size, seconds, algbw, busbw))
        del source, buffer, expected
    for index, results in swept.items():
        group = groups[index]
        size, seconds, algbw, busbw = results[-1]
        sweep = {"sweep": [[b, float(f"{bw:.6g}")] for b, _, _, bw in results]} if len(results) > 1 else {}
        log.emit(
            "bandwidth",
            scope=group.scope,
            ranks=compact_ranges(group.ranks),
            nodes=compact_ranges(group.nodes),
            bytes=size,
            iters=args.bandwidth_iters,
            seconds=float(f"{seconds:.6g}"),
            algbw_gbps=float(f"{algbw:.6g}"),
            busbw_gbps=float(f"{busbw:.6g}"),
            **sweep,
            **checks[index].fields(),
        )


def _time_all_reduce(acc: Accelerator, buffer: Any, source: Any, group: Any, delay_s: float) -> float:
    """Seconds of one all-reduce of ``source`` (copied into ``buffer``) in ``group``, after an untimed one.

    The untimed all-reduce lines the members up; then ``buffer`` gets this rank's ``source`` again, so the
    timed all-reduce leaves in it the exact sum of the members' sources.
    """
    import torch.distributed as dist

    dist.all_reduce(buffer, group=group)
    buffer.copy_(source)
    acc.synchronize()
    started = time.perf_counter()
    if delay_s:
        time.sleep(delay_s)  # ROLLCALL_SLOW_LINK: this rank posts its part late
    dist.all_reduce(buffer, group=group)
    acc.synchronize()
    return time.perf_counter() - started


# ---------------------------------------------------------------- training


class MasterWeightAdamW:
    """AdamW on fp32 master copies of low-precision (bf16) parameters.

    Each step copies the gradients into the masters' fp32 gradients, steps the masters with a (fused)
    AdamW and copies them back into the parameters: two foreach copies a step instead of autocast's
    cast of every weight in every forward. With ``kernel`` (``--fused-adamw``, a GPU's default) all three
    are one Triton kernel of bert_compact.py that reads the bf16 gradients and writes the bf16 parameters.
    """

    def __init__(
        self, params: Iterable[torch.nn.Parameter], lr: float, fused: bool | None, kernel: bool = False
    ) -> None:
        import torch

        self.params = [p for p in params if p.requires_grad]
        #: ``kernel``: bert_compact's one-kernel AdamW (gradients read in bf16, parameters written there)
        self.kernel = compact_module().MasterAdamW(self.params, lr) if kernel else None
        if self.kernel is not None:
            self.master = self.kernel.master
            return
        self.master = [p.detach().to(torch.float32, copy=True).requires_grad_() for p in self.params]
        for m in self.master:
            m.grad = torch.zeros_like(m)
        self.optimizer = torch.optim.AdamW(self.master, lr=lr, fused=fused)

    def step(self) -> None:
        """One AdamW step of the masters, written back into the parameters."""
        import torch

        if self.kernel is not None:
            self.kernel.step()
            return
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            have = [(m.grad, g) for m, g in zip(self.master, grads, strict=True) if g is not None]
            torch._foreach_copy_([m for m, _ in have], [g for _, g in have])
            for m, g in zip(self.master, grads, strict=True):
                if g is None:
                    m.grad.zero_()  # type: ignore[union-attr]
            self.optimizer.step()
            torch._foreach_copy_(self.params, self.master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the parameters' gradients (the masters' are overwritten each step)."""
        for p in self.params:
            p.grad = None


@dataclass
class Training:
    """What one training step needs: the step's module, the optimizer, bf16 autocast or not."""

    model: torch.nn.Module  # the parameters every replica holds
    step_model: Callable[..., Any]
    optimizer: Any
    shape: BertShape
    precision: str  # "bf16-autocast", "bf16-master-fp32" or "fp32"
    autocast: bool
    cudagraphs: bool  # the compiled step replays CUDA graphs: mark each step's start


def build_training(args: argparse.Namespace, acc: Accelerator, env: DistEnv) -> Training:
    """The model of ``--impl`` on the device in ``--precision``, compiled if asked, DDP only when needed."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(args.seed)  # same initial weights everywhere; DDP also broadcasts rank 0's
    # On a GPU the weights are made and initialised there: seconds less start-up than on the host.
    with torch.device(acc.device) if acc.kind == "cuda" else contextlib.nullcontext():
        model, shape = build_model(args)
    bf16_weights = args.precision == "bf16" and acc.bf16
    model = model.to(acc.device, dtype=torch.bfloat16) if bf16_weights else model.to(acc.device)
    model.train()
    loss_module = pretraining_loss(model, masked_head=args.mlm_head == "masked")
    mode = None if args.compile_mode == "default" else args.compile_mode
    # Compile the model itself, then let DDP wrap it: DDP's hooks stay outside the compiled graph.
    step_module = loss_module
    if args.compile and getattr(args, "compile_scope", "model") == "layer":
        model.compile_regions(mode=mode, dynamic=False)
    elif args.compile:
        step_module = torch.compile(loss_module, mode=mode, dynamic=False)
    # One rank has no gradients to reduce: no DDP wrapper, no reducer, no bucket copies.
    step_model: Callable[..., Any] = (
        acc.data_parallel(step_module, DDP, env.local_rank) if env.world_size > 1 else step_module
    )
    fused = True if acc.kind == "cuda" else None
    optimizer: Any = (
        MasterWeightAdamW(
            model.parameters(),
            lr=args.lr,
            fused=fused,
            kernel=bool(getattr(args, "fused_adamw", False)) and acc.kind == "cuda",
        )
        if bf16_weights
        else torch.optim.AdamW(model.parameters(), lr=args.lr, fused=fused)
    )
    precision = precision_label(args.precision, acc.bf16)
    cudagraphs = bool(args.compile) and args.compile_mode in ("reduce-overhead", "max-autotune")
    return Training(model, step_model, optimizer, shape, precision, not bf16_weights, cudagraphs)


# ---------------------------------------------------------------- device facts

#: NVML's clock-event (throttle) reason bits, by the names ``facts`` reports (nvmlClocksEventReason*).
CLOCK_EVENTS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
#: The longest reason kept for an unknown fact, and the most bytes all of them may take before each is cut
#: to SHORT_REASON (the whole event stays one line under MAX_LINE_BYTES).
MAX_REASON = 100
MAX_UNKNOWN_BYTES = 1536
SHORT_REASON = 24


class FactSheet:
    """Facts as they are read: a value under its name, or the reason it could not be read."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.unknown: dict[str, str] = {}

    def read(self, name: str, reader: Callable[[], Any]) -> None:
        """Record ``reader()`` as ``name``; an exception (or None) records the fact unknown, with why."""
        try:
            value = reader()
        except Exception as exc:  # NVML raises its own errors for each unsupported query
            self.missing(name, str(exc) or type(exc).__name__)
            return
        if value is None:
            self.missing(name, "not reported")
        else:
            self.values[name] = value

    def missing(self, name: str, reason: str) -> None:
        """Record ``name`` as unknown because of ``reason``."""
        self.unknown[name] = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."

    def fields(self) -> dict[str, Any]:
        """The ``facts`` event's fields."""
        unknown = dict(self.unknown)
        if len(json.dumps(unknown)) > MAX_UNKNOWN_BYTES:
            unknown = {k: v[:SHORT_REASON] for k, v in unknown.items()}
        return {**self.values, "unknown": unknown}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def host_facts(sheet: FactSheet) -> None:
    """Host, kernel, OS, Python, torch and transformers, as this process sees them."""
    import platform
    from importlib import metadata

    sheet.read("host", socket.gethostname)
    sheet.read("kernel", platform.release)
    sheet.read("os", lambda: platform.freedesktop_os_release().get("PRETTY_NAME"))
    sheet.read("python", platform.python_version)
    sheet.read("torch", _torch_version)
    sheet.read("transformers", lambda: metadata.version("transformers"))


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def nccl_version() -> str:
    """NCCL's version as torch reports it (``2.27.3``)."""
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def gpu_facts(sheet: FactSheet, nvml: Any, handle: Any) -> None:
    """One GPU's facts through NVML: ``nvml`` is the ``pynvml`` module, initialised; ``handle`` the device."""
    const = functools.partial(getattr, nvml)
    uncorrected = const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    sm = const("NVML_CLOCK_SM", 1)
    sheet.read("driver", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
    sheet.read("cuda_driver", lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion()))
    sheet.read("gpus", nvml.nvmlDeviceGetCount)
    sheet.read("device_index", lambda: nvml.nvmlDeviceGetIndex(handle))
    sheet.read("gpu_name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
    sheet.read("gpu_uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    sheet.read("gpu_serial", lambda: _text(nvml.nvmlDeviceGetSerial(handle)))
    sheet.read("memory_mib", lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total // (1 << 20))
    sheet.read("pcie_gen", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
    sheet.read("pcie_gen_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
    sheet.read("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
    sheet.read("pcie_width_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    for name, default in (("volatile", 0), ("aggregate", 1)):
        counter = const(f"NVML_{name.upper()}_ECC", default)
        sheet.read(
            f"ecc_{name}_uncorrected",
            functools.partial(nvml.nvmlDeviceGetTotalEccErrors, handle, uncorrected, counter),
        )
    try:
        _corrected, _uncorrected, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    except Exception as exc:
        for name in ("remapped_pending", "remapped_failure"):
            sheet.missing(name, str(exc) or type(exc).__name__)
    else:
        sheet.values.update(remapped_pending=bool(pending), remapped_failure=bool(failure))
    sheet.read("retired_pending", lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)))

    def clock_events() -> list[str]:
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = int((reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)(handle))
        return [name for bit, name in CLOCK_EVENTS if mask & bit]

    sheet.read("clock_events", clock_events)
    sheet.read("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, sm))
    sheet.read("sm_clock_max_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, sm))
    sheet.read("power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000)
    sheet.read("power_default_w", lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000)
    sheet.read(
        "temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, const("NVML_TEMPERATURE_GPU", 0))
    )


def _cuda_version(value: int) -> str:
    """NVML's CUDA driver version (``13000``) as ``13.0``."""
    return f"{value // 1000}.{value % 1000 // 10}"


def load_nvml() -> Any:
    """The ``pynvml`` module, initialised; raises (ImportError, its NVMLError) where no driver answers."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def nvml_handle(nvml: Any, uuid: str | None, index: int) -> Any:
    """The NVML device of a CUDA device: by its UUID when torch knows it, else by index."""
    if uuid:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    return nvml.nvmlDeviceGetHandleByIndex(index)


def neuron_facts(sheet: FactSheet) -> None:
    """The Neuron driver (sysfs), runtime and compiler versions, and the devices and cores this rank sees."""
    from importlib import metadata

    sheet.read("neuron_driver", lambda: Path("/sys/module/neuron/version").read_text().strip())
    sheet.read("neuron_runtime", lambda: metadata.version("libneuronxla"))
    sheet.read("neuron_compiler", lambda: metadata.version("neuronx-cc"))
    sheet.read("neuron_devices", lambda: len(glob.glob("/dev/neuron[0-9]*")) or None)

    def cores() -> int:
        import torch_xla.runtime as xr

        return int(xr.addressable_runtime_device_count())

    sheet.read("neuron_cores", cores)


#: Where the EFA installer and the aws-ofi-nccl plugin install (``lib``, ``lib64`` and ``bin`` below each),
#: searched after ``LD_LIBRARY_PATH``.
FABRIC_PREFIXES: tuple[str, ...] = ("/opt/amazon/efa", "/opt/amazon/ofi-nccl", "/opt/aws-ofi-nccl", "/usr")
#: The version aws-ofi-nccl's library carries (its ``PACKAGE_STRING``, which it logs when NCCL loads it).
OFI_NCCL_VERSION = re.compile(rb"aws-ofi-nccl (\d+\.\d+\.\d+[0-9A-Za-z.+~-]*)")
#: The most of a plugin library read in search of its version.
MAX_LIBRARY_BYTES = 64 << 20


def library_dirs(env: Mapping[str, str], prefixes: Sequence[str] = FABRIC_PREFIXES) -> list[Path]:
    """The directories searched for libfabric and the NCCL net plugin, those that exist, each once.

    ``LD_LIBRARY_PATH``'s first (the NVIDIA image's ``/opt/nccl-net``, whose ``libnccl-net.so`` links to
    the plugin the EFA installer laid down), then each prefix's ``lib``, ``lib64`` and multiarch ``lib``.
    """
    import platform

    subs = ("lib", "lib64", f"lib/{platform.machine()}-linux-gnu")  # the last: Debian's multiarch layout
    dirs = [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [Path(p) / sub for p in prefixes for sub in subs]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def fi_info_version(env: Mapping[str, str], prefixes: Sequence[str] = FABRIC_PREFIXES) -> str | None:
    """``fi_info --version``'s output, from ``PATH`` or a prefix's ``bin``; None without an ``fi_info``."""
    import shutil
    import subprocess

    found = shutil.which("fi_info", path=env.get("PATH")) or next(
        (str(f) for p in prefixes if (f := Path(p) / "bin" / "fi_info").is_file() and os.access(f, os.X_OK)),
        None,
    )
    if found is None:
        return None
    return subprocess.run([found, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout


def libfabric_version(
    env: Mapping[str, str],
    prefixes: Sequence[str] = FABRIC_PREFIXES,
    fi_info: Callable[[Mapping[str, str], Sequence[str]], str | None] = fi_info_version,
) -> str:
    """The version of libfabric: ``fi_info --version``'s ``libfabric:`` line, else ``libfabric.pc``'s.

    The ``Version`` of the ``libfabric.pc`` beside the library (the EFA installer's
    ``/opt/amazon/efa/lib/pkgconfig``) stands in where no ``fi_info`` is installed.

    Raises:
        LookupError: naming where it looked, when neither is there.
    """
    said = fi_info(env, prefixes)
    if said and (m := re.search(r"^libfabric:\s*(\S+)", said, re.MULTILINE)):
        return m.group(1)
    dirs = library_dirs(env, prefixes)
    for d in dirs:
        pc = d / "pkgconfig" / "libfabric.pc"
        if pc.is_file() and (m := re.search(r"^Version:\s*(\S+)", pc.read_text(), re.MULTILINE)):
            return m.group(1)
    libs = [str(f) for d in dirs for f in sorted(d.glob("libfabric.so*"))]
    if libs:
        raise LookupError(f"no fi_info; {libs[0]} has no libfabric.pc beside it")
    raise LookupError(f"no fi_info; no libfabric.so* in {':'.join(map(str, dirs)) or 'no library directory'}")


def ofi_nccl_version(env: Mapping[str, str], prefixes: Sequence[str] = FABRIC_PREFIXES) -> str:
    """The version of aws-ofi-nccl: the ``aws-ofi-nccl X.Y.Z`` string of the net plugin NCCL would load.

    That plugin is ``NCCL_NET_PLUGIN`` (a path, or a name NCCL expands to ``libnccl-net-NAME.so``), else
    the first ``libnccl-net*.so*`` of :func:`library_dirs`.

    Raises:
        LookupError: naming the library, or where it looked, when no version is found.
    """
    dirs = library_dirs(env, prefixes)
    chosen = env.get("NCCL_NET_PLUGIN", "")
    if chosen.lower() == "none":
        raise LookupError("NCCL_NET_PLUGIN=none: no net plugin")
    if "/" in chosen:
        candidates = [Path(chosen)]
    elif chosen:
        names = (f"libnccl-net-{chosen}.so", chosen)
        candidates = [d / n for d in dirs for n in names]
    else:
        candidates = [f for d in dirs for f in sorted(d.glob("libnccl-net*.so*"))]
    found = [f for f in candidates if f.is_file()]
    if not found:
        what = f"NCCL_NET_PLUGIN={chosen}" if chosen else "libnccl-net*.so"
        raise LookupError(f"no {what} in {':'.join(map(str, dirs)) or 'no library directory'}")
    with found[0].open("rb") as f:
        m = OFI_NCCL_VERSION.search(f.read(MAX_LIBRARY_BYTES))
    if m is None:
        raise LookupError(f"{found[0]} carries no aws-ofi-nccl version")
    return m.group(1).decode()


def fabric_facts(
    sheet: FactSheet,
    *,
    nccl: bool = True,
    env: Mapping[str, str] | None = None,
    prefixes: Sequence[str] = FABRIC_PREFIXES,
) -> None:
    """The versions of libfabric and (with ``nccl``) aws-ofi-nccl, or why they are unknown."""
    env = os.environ if env is None else env
    sheet.read("libfabric", lambda: libfabric_version(env, prefixes))
    if nccl:
        sheet.read("aws_ofi_nccl", lambda: ofi_nccl_version(env, prefixes))


def device_facts(
    device: str,
    local_rank: int = 0,
    *,
    nvml_loader: Callable[[], Any] = load_nvml,
    uuid: str | None = None,
    cuda_devices: int | None = None,
    fabric: Callable[[FactSheet], None] | None = None,
) -> dict[str, Any]:
    """The ``facts`` event's fields for this process and its device (``cuda``, ``xla`` or ``cpu``).

    ``nvml_loader`` gives the initialised ``pynvml`` module (a test passes a fake); ``uuid`` is the CUDA
    device's UUID when torch knows it (CUDA and NVML may number devices differently); ``cuda_devices`` the
    devices CUDA lists (``torch.cuda.device_count()``); ``fabric`` reads the network libraries' versions
    (:func:`fabric_facts`).
    """
    sheet = FactSheet()
    host_facts(sheet)
    if fabric is not None:
        fabric(sheet)
    if device != "cuda":
        sheet.missing("nvml", f"no NVML: device is {device}")
    else:
        sheet.read("nccl", nccl_version)
        if cuda_devices is not None:
            sheet.values["cuda_devices"] = cuda_devices
        try:
            nvml = nvml_loader()
        except Exception as exc:  # ImportError without nvidia-ml-py; NVMLError without a driver
            sheet.missing("nvml", f"no NVML: {type(exc).__name__}: {exc}")
        else:
            try:
                gpu_facts(sheet, nvml, nvml_handle(nvml, uuid, local_rank))
            except Exception as exc:  # the device itself not found
                sheet.missing("nvml", f"no NVML device: {type(exc).__name__}: {exc}")
            finally:
                with contextlib.suppress(Exception):
                    nvml.nvmlShutdown()
    if device == "xla":
        neuron_facts(sheet)
    return sheet.fields()


def cuda_uuid(index: int) -> str | None:
    """CUDA device ``index``'s UUID as NVML writes it (``GPU-...``), when this torch reports it."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def report_facts(acc: Accelerator, local_rank: int, log: RollcallLog) -> None:
    """Emit ``facts`` with work queued on the device, so that PCIe and clocks are read while it is busy."""
    import torch

    uuid, count = None, None
    if acc.kind == "cuda":
        with contextlib.suppress(Exception):
            uuid = cuda_uuid(local_rank)
        count = torch.cuda.device_count()
        a = torch.randn(4096, 4096, device=acc.device, dtype=torch.float16)
        for _ in range(512):  # about 70 TFLOP of matmuls (0.1 s on an H200), queued before NVML is read
            a = (a @ a).clamp_(-1, 1)
    fabric = None if acc.kind == "cpu" else functools.partial(fabric_facts, nccl=acc.kind == "cuda")
    log.emit("facts", **device_facts(acc.kind, local_rank, uuid=uuid, cuda_devices=count, fabric=fabric))
    acc.synchronize()


def run(args: argparse.Namespace, env: DistEnv, log: RollcallLog) -> None:
    """Join the group, train, time and report; raises on any failure."""
    check_fault_injection(os.environ)  # a malformed variable fails every rank at once, before torch loads
    _maybe_hang_node(env)
    import torch
    import torch.distributed as dist

    stamps = {"python and torch imports": time.monotonic()}  # each phase of start-up, where it ended
    device = resolve_device(
        args.device, torch.cuda.is_available(), xla_importable(), xla_configured(os.environ)
    )
    memory = torch.cuda.get_device_properties(env.local_rank).total_memory if device == "cuda" else None
    apply_defaults(args, device, memory)
    first_step = args.first_step_hang_after or first_step_bound(device, bool(args.compile))
    # XLA compiles again whenever the graph changes (the first timed step too): there every step may take
    # as long as the first, so the default bound never falls below the first step's.
    floor = first_step if device == "xla" else HANG_FLOOR_S
    watchdog = Watchdog(log, args.hang_after, first_step, floor=floor).start()
    slow, link = slow_ranks(os.environ), slow_link(os.environ)
    corrupt_replica = corrupted_rank(CORRUPT_RANK_ENV, os.environ) == env.rank
    if device == "xla" and args.compile:
        raise ValueError("--compile is not supported with --device xla")
    if device == "xla" and args.precision == "bf16":
        raise ValueError("--precision bf16 is not supported with --device xla (the compiler picks precision)")
    if device == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
        # Without a launcher's OMP_NUM_THREADS, share this host's cores among the ranks on it.
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, cpus // max(1, env.local_world_size)))

    model_label = (
        f"pretrained:{os.path.basename(os.path.normpath(args.pretrained))}" if args.pretrained else args.model
    )
    acc = Accelerator(device, env.local_rank, args.dist_backend)
    watchdog.beat("rendezvous")
    acc.init_process_group(env)
    watchdog.beat("model and data")
    stamps["device and process group"] = time.monotonic()
    log.emit(
        "start",
        local_rank=env.local_rank,
        node_rank=env.node_rank,
        local_world_size=env.local_world_size,
        host=socket.gethostname(),
        node=os.environ.get(NODE_NAME_ENV) or os.environ.get(SLURM_NODE_ENV) or None,
        device=str(acc.device),
        device_name=acc.name,
        model=model_label,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        precision=precision_label(args.precision, acc.bf16),
        torch=torch.__version__,
        node_id=node_id(os.environ, env.node_rank),
    )

    def leave(**fields: Any) -> None:
        log.emit("complete", **fields)
        watchdog.beat("final barrier")
        acc.barrier("rollcall-complete")  # the rank hosting the store must not leave first
        watchdog.beat("leaving the process group")
        dist.destroy_process_group()
        watchdog.stop()

    if args.bandwidth_only:
        watchdog.beat("bandwidth")
        measure_bandwidth(acc, env, log, args, link, watchdog=watchdog)
        leave()
        return

    training = build_training(args, acc, env)
    stamps["model and optimizer"] = time.monotonic()
    step_model, optimizer, shape = training.step_model, training.optimizer, training.shape
    autocast = acc.autocast if training.autocast else contextlib.nullcontext
    batches = batch_pool(args, env.rank, shape.vocab, acc.device)
    steps = itertools.count()
    slowdown = Slowdown(acc, slow.get(env.rank, 1.0))

    # One rank alone times its compute within the timed epochs instead of in steps of their own.
    timer = ComputeTimer(acc) if env.world_size == 1 and device != "xla" and args.compute_steps else None

    def train_steps(
        count: int, label: str, first: int, clock: ComputeTimer | None = None
    ) -> torch.Tensor | None:
        loss = None
        for i in range(count):
            watchdog.beat(f"{label} step {first + i}")
            slowdown.begin()
            if clock is not None:
                clock.start()
            if training.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            with autocast():
                loss = step_model(batches[next(steps) % len(batches)])
            loss.backward()
            if clock is not None:
                slowdown.end()  # its extra work is compute, as in measure_compute
                clock.stop()
            acc.optimizer_step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            acc.step_boundary()
            if clock is None:
                slowdown.end()
            watchdog.first_step_done()
        return loss

    def every_rank(flag: bool) -> bool:
        if env.world_size == 1:
            return flag
        watchdog.beat("warm-up agreement")
        value = torch.tensor([int(flag)], device=acc.device)
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        return bool(value.item())

    stamps["data"] = time.monotonic()
    startup_s = time.monotonic() - PROCESS_STARTED
    if env.rank == 0:
        ends = [PROCESS_STARTED, *stamps.values()]
        parts = ", ".join(f"{k} {b - a:.1f}" for k, a, b in zip(stamps, ends, ends[1:], strict=False))
        print(f"rollcall: start-up {startup_s:.1f}s: {parts}", flush=True)
    # Warm-up: the first step alone (it compiles), then steps one by one until their times settle on
    # every rank, or (fixed count) the rest at once.
    adaptive = args.warmup_settle > 0 and device != "xla"
    step_seconds: list[float] = []
    warmup_count = 0
    compile_cache: dict[str, Any] | None = None
    while warmup_count < args.warmup_steps:
        count = 1 if adaptive or not step_seconds else args.warmup_steps - 1
        started = time.perf_counter()
        train_steps(count, "warm-up", warmup_count + 1)
        acc.synchronize()
        step_seconds.append(time.perf_counter() - started)
        if len(step_seconds) == 1:  # what the compile found in the cache, before any later recompile
            compile_cache = compile_cache_fields(bool(args.compile), _inductor_counters())
        if len(step_seconds) > 1:  # the first step compiles: not a step time
            watchdog.step_time(step_seconds[-1] / count)
        warmup_count += count
        if adaptive and every_rank(settled(step_seconds, args.warmup_settle, args.warmup_tolerance)):
            break
    compile_s = step_seconds[0] if step_seconds else 0.0
    warmup_s = sum(step_seconds[1:])
    watchdog.beat("facts")
    report_facts(acc, env.local_rank, log)

    timed_started = time.perf_counter()
    total_seconds = digest_s = 0.0
    for epoch in range(1, args.epochs + 1):
        watchdog.beat(f"epoch {epoch} barrier")
        acc.barrier(f"rollcall-epoch-{epoch}")  # all ranks start the epoch together
        acc.synchronize()
        started = time.perf_counter()
        label = f"epoch {epoch}"
        if epoch == 1 and corrupt_replica:  # ROLLCALL_CORRUPT_RANK: one bit flips after the first timed step
            loss = train_steps(1, label, 1, timer)
            _flip_replica_bit(training, env.rank)
            if args.steps_per_epoch > 1:
                loss = train_steps(args.steps_per_epoch - 1, label, 2, timer)
        else:
            loss = train_steps(args.steps_per_epoch, label, 1, timer)
        acc.synchronize()
        seconds = time.perf_counter() - started
        watchdog.beat(f"epoch {epoch} end")
        watchdog.step_time(seconds / args.steps_per_epoch)
        total_seconds += seconds
        loss_value = float(loss.detach().float().cpu()) if loss is not None else math.nan
        samples = args.steps_per_epoch * args.batch_size
        digest_started = time.perf_counter()
        digest = parameter_digest(training.model)
        digest_s += time.perf_counter() - digest_started
        log.emit(
            "epoch_time",
            epoch=epoch,
            seconds=round(seconds, 6),
            steps=args.steps_per_epoch,
            samples=samples,
            loss=round(loss_value, 4),
            param_digest=digest,
        )
        if env.rank == 0:
            print(f"rollcall: epoch {epoch}/{args.epochs} {seconds:.3f}s loss {loss_value:.4f}", flush=True)
        if not math.isfinite(loss_value):
            raise RuntimeError(f"loss is not finite in epoch {epoch}: {loss_value}")
        if epoch == 1:
            _chatter(env.rank, os.environ)
            _maybe_inject_fault(env.rank)

    timed_s = time.perf_counter() - timed_started - digest_s
    compute = (
        timer.times_ms(args.compute_steps)
        if timer is not None
        else measure_compute(
            acc,
            step_model,
            optimizer,
            batches,
            steps=args.compute_steps,
            slowdown=slowdown,
            autocast=autocast,
            cudagraphs=training.cudagraphs,
            watchdog=watchdog,
        )
    )
    watchdog.beat("throughput")
    samples_per_sec = args.epochs * args.steps_per_epoch * args.batch_size / total_seconds
    mlm_tokens = mlm_predictions(args.seq_len) if args.mlm_head == "masked" else None
    fps = flops_per_sample(shape, args.seq_len, mlm_tokens)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (peak_flops(acc.name) if acc.bf16 else None)
    log.emit(
        "throughput",
        samples_per_sec=round(samples_per_sec, 3),
        tflops=round(fps * samples_per_sec / 1e12, 4),
        mfu=_round(model_flops_utilization(fps, samples_per_sec, peak), 4),
        flops_per_sample=fps,
        model=model_label,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        mlm_head=args.mlm_head,
        compiled=bool(args.compile),
        compile_mode=args.compile_mode if args.compile else None,
        compile_scope=args.compile_scope if args.compile else None,
        impl=args.impl,
        precision=training.precision,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        startup_s=round(startup_s, 3),
        compile_s=round(compile_s, 3),
        # without warm-up the first timed step compiled: the counters after the epochs tell
        **(compile_cache or compile_cache_fields(bool(args.compile), _inductor_counters())),
        warmup_s=round(warmup_s, 3),
        warmup_steps=warmup_count,
        timed_s=round(timed_s, 3),
        digest_s=round(digest_s, 3),
        **compute_fields(compute),
    )
    watchdog.beat("bandwidth")
    measure_bandwidth(acc, env, log, args, link, watchdog=watchdog)
    leave(param_digest=parameter_digest(training.model))


def _inductor_counters() -> dict[str, int]:
    """Inductor's counters so far (its FX graph cache's hits and misses among them); empty without them."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without dynamo compiles nothing
        return {}
    return dict(counters["inductor"])


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _chatter(rank: int, environ: Mapping[str, str]) -> None:
    """Print the plain lines that ``ROLLCALL_CHATTY=<rank>:<bytes>`` asks of this rank, in 50 chunks."""
    asked = chatty(environ)
    if asked is None or asked.rank != rank:
        return
    line = f"rollcall: rank {rank} chatter " + "x" * 200 + "\n"
    lines_per_chunk = max(1, asked.size // len(line) // 50)
    for _ in range(50):
        sys.stdout.write(line * lines_per_chunk)
        sys.stdout.flush()
        time.sleep(0.1)


def _flip_replica_bit(training: Training, rank: int) -> None:
    """``ROLLCALL_CORRUPT_RANK``: flip one bit of this replica's first parameter (and of its fp32 master)."""
    flip_bit(next(training.model.parameters()))
    if isinstance(training.optimizer, MasterWeightAdamW):  # the master is written back each step
        flip_bit(training.optimizer.master[0])
    print(
        f"rollcall: rank {rank} flipped one bit of its first parameter as asked by {CORRUPT_RANK_ENV}",
        flush=True,
    )


def _maybe_inject_fault(rank: int) -> None:
    fault = injected_fault(rank, os.environ)
    if fault == "fail":
        raise RuntimeError(f"injected failure on rank {rank} ({FAIL_RANK_ENV})")
    if fault == "hang":
        print(f"rollcall: rank {rank} hangs as asked by {HANG_RANK_ENV}", flush=True)
        while True:
            time.sleep(3600)


def _maybe_hang_node(env: DistEnv) -> None:
    """``ROLLCALL_HANG_NODE``: this rank's node never reaches rendezvous (no watchdog, no event)."""
    node = hung_node(os.environ, env.node_rank)
    if node is None:
        return
    print(
        f"rollcall: rank {env.rank} of node {node} hangs before rendezvous as asked by {HANG_NODE_ENV}",
        flush=True,
    )
    while True:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    """Run one rank; returns the exit code, or ends the process with 1 after an ``error`` event."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub, even by accident
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        env = read_dist_env(os.environ)
    except ValueError as exc:
        env = DistEnv(rank=-1, local_rank=-1, world_size=-1, node_rank=-1, local_world_size=1, launched=False)
        RollcallLog(env.rank, env.world_size).emit("error", message=f"bad torchrun environment: {exc}")
        return 1
    log = RollcallLog(env.rank, env.world_size)
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help
        return 0 if exc.code in (0, None) else 2
    except CommandLineError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        log.emit("error", message=f"invalid command line: {exc}")
        return 2
    if args.compile_cache:  # before torch is imported, so that inductor and Triton see it
        os.environ.update(compile_cache_env(args.compile_cache))
        keep_bytecode(args.compile_cache)
    try:
        ending = exit_rank(os.environ)
        from torch.distributed.elastic.multiprocessing.errors import record

        record(run)(args, env, log)  # an exception is also written to TORCHELASTIC_ERROR_FILE
    except (Exception, KeyboardInterrupt) as exc:
        traceback.print_exc()
        log.emit("error", message=f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip process-group teardown and atexit hooks, which can hang after a failure
    if ending is not None and ending.rank == env.rank:
        print(f"rollcall: rank {env.rank} ends badly as asked by {EXIT_RANK_ENV}", flush=True)
        if ending.signal is not None:
            os.kill(os.getpid(), signal.Signals[ending.signal])
        return ending.code
    return 0


def end_process(code: int) -> NoReturn:
    """End this process with ``code`` once its output is out, skipping the interpreter's teardown.

    Called after :func:`main` returned: the process group is gone and every event written. Python's
    teardown frees every module's objects and, on cuda, the compiled graphs, the allocator's memory and
    the CUDA context; on one CPU rank it took 0.9 s after the last line (bench/NOTES.md), time the launcher
    and the suite would wait for. Inductor's compile workers are shut down first (they would see their
    parent gone within a second and leave anyway).
    """
    with contextlib.suppress(Exception):
        if "torch._inductor.async_compile" in sys.modules:
            sys.modules["torch._inductor.async_compile"].shutdown_compile_workers()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    end_process(main())
