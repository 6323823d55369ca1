"""One rank's run: its set-up and its join here, then the phases, each a component of its own module.

:func:`run` composes them, in order: the set-up before the process group (:func:`set_up`: the fault
variables checked, torch imported, the device and its defaults, the GPU read before this rank's context, the
watchdog started, the settings checked against the device), the join (:func:`join`: the device's set-up, the
process group, ``start``), the kernels' checks (:mod:`.kernel_checks`), the model and its steps
(:mod:`.training`, :mod:`.steps`), warm-up and its agreement (:mod:`.warmup`), the device's facts, the timed
epochs and their proofs (:mod:`.epochs`; the faults injected after the first), compute and throughput
(:mod:`.throughput`), the bandwidth phase (:mod:`.bandwidth`), and ``complete`` (:func:`leave`). With
``--bandwidth-only`` the join, the bandwidth phase and ``complete`` alone. Any failure raises.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from rollcall_workload import faults
from rollcall_workload.contract import (
    CONTRACT_VERSION,
    JOIN_PHASE,
    MONITOR_DIR_ENV,
    NODE_NAME_ENV,
    SLURM_NODE_ENV,
    WORKLOAD_VERSION,
    RollcallLog,
)
from rollcall_workload.faults import (
    CORRUPT_RANK_ENV,
    SLOW_IMPORT_RANK_ENV,
    SLOW_SETUP_RANK_ENV,
    SlowLink,
    assumed_arch,
    check_fault_injection,
    corrupted_rank,
    node_id,
    slow_link,
    slow_ranks,
)
from rollcall_workload.kernels.gate import arch_of
from rollcall_workload.rank import flight, gpu_progress
from rollcall_workload.rank.bandwidth import measure_bandwidth
from rollcall_workload.rank.cli import apply_defaults
from rollcall_workload.rank.dist import Accelerator, DistEnv, resolve_device, xla_configured, xla_importable
from rollcall_workload.rank.epochs import Epochs
from rollcall_workload.rank.facts import Held, cuda_uuid, held_before_context, report_facts
from rollcall_workload.rank.flight import FlightRecorder
from rollcall_workload.rank.kernel_checks import check_kernels
from rollcall_workload.rank.proofs import parameter_digest
from rollcall_workload.rank.samples import report_samples, start_sampling
from rollcall_workload.rank.steps import Steps
from rollcall_workload.rank.throughput import RunTimes, compute_times, report_throughput
from rollcall_workload.rank.timing import PROCESS_STARTED, ComputeTimer
from rollcall_workload.rank.training import build_training, precision_label
from rollcall_workload.rank.warmup import warm_up
from rollcall_workload.rank.watchdog import (
    HANG_FLOOR_S,
    JOIN_HANG_S,
    Watchdog,
    first_step_bound,
    setup_bound,
)


def run(args: argparse.Namespace, env: DistEnv, log: RollcallLog) -> None:
    """Join the group, train, time and report; raises on any failure."""
    rank = set_up(args, env, log)
    acc = join(rank)
    watchdog = rank.watchdog
    # The kernels' checks come after start: their agreement is the first collective that moves data.
    if not args.bandwidth_only:
        watchdog.beat("kernel checks")
        if checked := check_kernels(args, acc, env):
            rank.kernels.update(checked)
            log.emit("kernels", kernels=rank.kernels)
    watchdog.beat("model and data")
    if args.bandwidth_only:
        watchdog.beat("bandwidth")
        measure_bandwidth(acc, env, log, args, rank.link, watchdog=watchdog)
        leave(acc, watchdog, log)
        return

    training = build_training(args, acc, env)
    rank.stamps["model and optimizer"] = time.monotonic()
    steps = Steps.of(training, args, env, acc, watchdog, slow=rank.slow.get(env.rank, 1.0))
    # One rank alone times its compute within the timed epochs instead of in steps of their own.
    timer = ComputeTimer(acc) if env.world_size == 1 and rank.device != "xla" and args.compute_steps else None
    rank.stamps["data"] = time.monotonic()
    startup_s = say_startup(rank.stamps, env.rank)
    warm = warm_up(steps, args, rank.device)
    watchdog.beat("facts")
    report_facts(acc, env.local_rank, log, rank.held)

    sampler = start_sampling(rank.device, env.local_rank)  # None off cuda, or without NVML
    epochs = Epochs(steps, args, log, env.rank, timer, sampler, rank.corrupt_replica)
    for epoch, loss in epochs.run():
        if not math.isfinite(loss):
            raise RuntimeError(f"loss is not finite in epoch {epoch}: {loss}")
        if epoch == 1:
            faults.chatter(env.rank, os.environ)
            faults.pause(env.rank)
            faults.inject_fault(env.rank)
            faults.skip_collective(env.rank, env.world_size, acc.device)
    report_samples(sampler, log)
    compute = compute_times(steps, args, timer)
    watchdog.beat("throughput")
    report_throughput(log, args, steps, rank.model_label, RunTimes(startup_s, warm, epochs, compute))
    watchdog.beat("bandwidth")
    measure_bandwidth(acc, env, log, args, rank.link, watchdog=watchdog)
    leave(acc, watchdog, log, param_digest=parameter_digest(training.model))


@dataclass
class Rank:
    """What a rank set up before it joins: its settings, its device, its watchdog, the faults asked of it."""

    args: argparse.Namespace
    env: DistEnv
    log: RollcallLog
    device: str  # cuda, xla or cpu
    arch: str | None  # the GPU's (``sm_90``), None off cuda
    kernels: dict[str, str]  # each of the workload's kernels' state and why (``start``'s ``kernels``)
    held: Held | None  # the GPU's memory in use and its processes, read before this rank's CUDA context
    watchdog: Watchdog
    slow: dict[int, float]  # ``ROLLCALL_SLOW_RANK``: each rank's slowdown
    link: SlowLink | None  # ``ROLLCALL_SLOW_LINK``
    corrupt_replica: bool  # ``ROLLCALL_CORRUPT_RANK`` names this rank
    model_label: str
    stamps: dict[str, float]  # each phase of start-up, where it ended


def set_up(args: argparse.Namespace, env: DistEnv, log: RollcallLog) -> Rank:
    """Everything before the device's set-up and the process group (see the module); the rank set up.

    The watchdog starts here: its first phase, the imports and device setup, counts from the process's start.
    """
    check_fault_injection(os.environ)  # a malformed variable fails every rank at once, before torch loads
    faults.hang_node(env.rank, env.node_rank)
    faults.slow_start(env.rank, SLOW_IMPORT_RANK_ENV)
    flight.enable(os.environ)  # before torch loads: it reads the recorder's size then
    import torch
    import torch.distributed

    stamps = {"python and torch imports": time.monotonic()}
    device = resolve_device(
        args.device, torch.cuda.is_available(), xla_importable(), xla_configured(os.environ)
    )
    memory = torch.cuda.get_device_properties(env.local_rank).total_memory if device == "cuda" else None
    held = None
    if device == "cuda":
        uuid = None
        with contextlib.suppress(Exception):
            uuid = cuda_uuid(env.local_rank)
        held = held_before_context(env.local_rank, uuid)
    arch = None
    if device == "cuda":
        arch = assumed_arch(os.environ) or arch_of(torch.cuda.get_device_capability(env.local_rank))
    kernels = apply_defaults(args, device, memory, arch)
    watchdog = start_watchdog(args, env, log, device)
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
    return Rank(
        args,
        env,
        log,
        device,
        arch,
        kernels,
        held,
        watchdog,
        slow,
        link,
        corrupt_replica,
        model_label,
        stamps,
    )


def start_watchdog(args: argparse.Namespace, env: DistEnv, log: RollcallLog, device: str) -> Watchdog:
    """The rank's watchdog, started, with each phase's bound from ``args`` or the device's defaults."""
    first_step = args.first_step_hang_after or first_step_bound(device, bool(args.compile))
    # XLA compiles again whenever the graph changes (the first timed step too): there every step may take
    # as long as the first, so the default bound never falls below the first step's.
    floor = first_step if device == "xla" else HANG_FLOOR_S
    join = args.join_hang_after or JOIN_HANG_S
    return Watchdog(  # its first phase, the imports and device setup, counts from the process's start
        log,
        args.hang_after,
        first_step,
        floor=floor,
        join=join,
        setup=setup_bound(args.start_skew, join),
        since=PROCESS_STARTED,
        monitor_dir=os.environ.get(MONITOR_DIR_ENV) or None,
        gpu=gpu_progress.for_device(env.local_rank) if device == "cuda" else None,
    ).start()


def join(rank: Rank) -> Accelerator:
    """Set up the device (torch_xla's import on Neuron), join the process group and say ``start``.

    The join bound counts from entering ``init_process_group``; ``start`` says the rank's place, its device,
    the run's settings, the kernels' states and what others held on its GPU before anything ran out of memory.
    """
    import torch

    args, env, log, watchdog = rank.args, rank.env, rank.log, rank.watchdog
    faults.slow_start(env.rank, SLOW_SETUP_RANK_ENV)
    acc = Accelerator(rank.device, env.local_rank, args.dist_backend)
    own_xla = acc.kind == "xla" and not acc.host_collectives
    watchdog.recorder = FlightRecorder(
        log,
        acc.backend,
        os.environ.get(MONITOR_DIR_ENV) or None,
        unavailable="torch_xla's own process group keeps no flight record" if own_xla else "",
    )
    watchdog.beat(JOIN_PHASE)  # the join bound counts from here
    faults.never_join(env.rank)
    joining = time.monotonic()
    acc.init_process_group(env, args.pg_timeout)
    join_s = time.monotonic() - joining
    watchdog.joined()
    rank.stamps["device and process group"] = time.monotonic()
    log.emit(
        "start",
        local_rank=env.local_rank,
        node_rank=env.node_rank,
        local_world_size=env.local_world_size,
        host=socket.gethostname(),
        node=os.environ.get(NODE_NAME_ENV) or os.environ.get(SLURM_NODE_ENV) or None,
        device=str(acc.device),
        device_name=acc.name,
        model=rank.model_label,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        precision=precision_label(args.precision, acc.bf16),
        torch=torch.__version__,
        node_id=node_id(os.environ, env.node_rank),
        arch=rank.arch,
        kernels=rank.kernels,
        workload_version=WORKLOAD_VERSION,
        contract_version=CONTRACT_VERSION,
        join_s=round(join_s, 3),
        **(
            rank.held[0] if rank.held else {}
        ),  # what others held on the GPU, said before anything runs out of memory
    )
    return acc


def say_startup(stamps: dict[str, float], rank: int) -> float:
    """The seconds from the process's start until now; rank 0 prints where they went, by ``stamps``."""
    startup_s = time.monotonic() - PROCESS_STARTED
    if rank == 0:
        ends = [PROCESS_STARTED, *stamps.values()]
        parts = ", ".join(f"{k} {b - a:.1f}" for k, a, b in zip(stamps, ends, ends[1:], strict=False))
        print(f"rollcall: start-up {startup_s:.1f}s: {parts}", flush=True)
    return startup_s


def leave(acc: Accelerator, watchdog: Watchdog, log: RollcallLog, **fields: Any) -> None:
    """Say ``complete``, wait for every rank at the final barrier, leave the process group, stop watching.

    The rank hosting the store must not leave first: the barrier holds it until every rank has said
    ``complete``.
    """
    import torch.distributed as dist

    log.emit("complete", **fields)
    watchdog.beat("final barrier")
    acc.barrier("rollcall-complete")  # the rank hosting the store must not leave first
    watchdog.beat("leaving the process group")
    dist.destroy_process_group()
    watchdog.stop()
