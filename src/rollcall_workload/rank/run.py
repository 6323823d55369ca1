"""One rank's run, phase by phase: join, build, warm up, time the epochs, measure, prove, complete."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import socket
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

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
    assumed_arch,
    check_fault_injection,
    corrupted_rank,
    mismatched_kernels,
    node_id,
    slow_link,
    slow_ranks,
)
from rollcall_workload.kernels.gate import KERNEL_BY_NAME, arch_of, drop, in_use
from rollcall_workload.model import batch_pool, mlm_predictions, model_shape
from rollcall_workload.rank import flight, gpu_progress
from rollcall_workload.rank.bandwidth import measure_bandwidth
from rollcall_workload.rank.cli import apply_defaults
from rollcall_workload.rank.compile_cache import _inductor_counters, compile_cache_fields
from rollcall_workload.rank.dist import Accelerator, DistEnv, resolve_device, xla_configured, xla_importable
from rollcall_workload.rank.facts import cuda_uuid, held_before_context, report_facts
from rollcall_workload.rank.flight import FlightRecorder
from rollcall_workload.rank.proofs import parameter_digest
from rollcall_workload.rank.samples import DeviceSampler, report_samples, start_sampling
from rollcall_workload.rank.timing import (
    PROCESS_STARTED,
    ComputeTimer,
    Slowdown,
    compute_fields,
    measure_compute,
    settled,
)
from rollcall_workload.rank.training import build_training, precision_label
from rollcall_workload.rank.watchdog import (
    HANG_FLOOR_S,
    JOIN_HANG_S,
    Watchdog,
    first_step_bound,
    setup_bound,
)
from rollcall_workload.shape import flops_per_sample, model_flops_utilization, peak_flops


def run(args: argparse.Namespace, env: DistEnv, log: RollcallLog) -> None:
    """Join the group, train, time and report; raises on any failure."""
    check_fault_injection(os.environ)  # a malformed variable fails every rank at once, before torch loads
    faults.hang_node(env.rank, env.node_rank)
    faults.slow_start(env.rank, SLOW_IMPORT_RANK_ENV)
    flight.enable(os.environ)  # before torch loads: it reads the recorder's size then
    import torch
    import torch.distributed as dist

    stamps = {"python and torch imports": time.monotonic()}  # each phase of start-up, where it ended
    device = resolve_device(
        args.device, torch.cuda.is_available(), xla_importable(), xla_configured(os.environ)
    )
    memory = torch.cuda.get_device_properties(env.local_rank).total_memory if device == "cuda" else None
    held = None  # the GPU's memory in use and its processes, read before this rank's CUDA context exists
    if device == "cuda":
        uuid = None
        with contextlib.suppress(Exception):
            uuid = cuda_uuid(env.local_rank)
        held = held_before_context(env.local_rank, uuid)
    arch = None
    if device == "cuda":
        arch = assumed_arch(os.environ) or arch_of(torch.cuda.get_device_capability(env.local_rank))
    kernels = apply_defaults(args, device, memory, arch)
    first_step = args.first_step_hang_after or first_step_bound(device, bool(args.compile))
    # XLA compiles again whenever the graph changes (the first timed step too): there every step may take
    # as long as the first, so the default bound never falls below the first step's.
    floor = first_step if device == "xla" else HANG_FLOOR_S
    join = args.join_hang_after or JOIN_HANG_S
    watchdog = Watchdog(  # its first phase, the imports and device setup, counts from the process's start
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
    faults.slow_start(env.rank, SLOW_SETUP_RANK_ENV)
    acc = Accelerator(device, env.local_rank, args.dist_backend)  # torch_xla's import, the device's set-up
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
        arch=arch,
        kernels=kernels,
        workload_version=WORKLOAD_VERSION,
        contract_version=CONTRACT_VERSION,
        join_s=round(join_s, 3),
        **(held[0] if held else {}),  # what others held on the GPU, said before anything runs out of memory
    )
    # The kernels' checks come after start: their agreement is the first collective that moves data.
    if not args.bandwidth_only:
        watchdog.beat("kernel checks")
        if checked := check_kernels(args, acc, env):
            kernels.update(checked)
            log.emit("kernels", kernels=kernels)
    watchdog.beat("model and data")

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
        count: int,
        label: str,
        first: int,
        clock: ComputeTimer | None = None,
        sampler: DeviceSampler | None = None,
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
            if sampler is not None:  # the step's work queued: the GPU is busy with it
                sampler.tick()
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
    report_facts(acc, env.local_rank, log, held)

    sampler = start_sampling(device, env.local_rank)  # None off cuda, or without NVML
    timed_started = time.perf_counter()
    total_seconds = digest_s = 0.0
    for epoch in range(1, args.epochs + 1):
        watchdog.beat(f"epoch {epoch} barrier")
        acc.barrier(f"rollcall-epoch-{epoch}")  # all ranks start the epoch together
        acc.synchronize()
        started = time.perf_counter()
        label = f"epoch {epoch}"
        if epoch == 1 and corrupt_replica:  # ROLLCALL_CORRUPT_RANK: one bit flips after the first timed step
            loss = train_steps(1, label, 1, timer, sampler)
            faults.flip_replica_bit(training, env.rank)
            if args.steps_per_epoch > 1:
                loss = train_steps(args.steps_per_epoch - 1, label, 2, timer, sampler)
        else:
            loss = train_steps(args.steps_per_epoch, label, 1, timer, sampler)
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
            faults.chatter(env.rank, os.environ)
            faults.pause(env.rank)
            faults.inject_fault(env.rank)
            faults.skip_collective(env.rank, env.world_size, acc.device)

    timed_s = time.perf_counter() - timed_started - digest_s
    report_samples(sampler, log)
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


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def check_kernels(args: argparse.Namespace, acc: Accelerator, env: DistEnv) -> dict[str, str]:
    """Hold each kernel the run would use to the op it replaces on this GPU; each one's new state, and why.

    A kernel that failed its check on any rank, or that another rank does not use (another GPU there), is
    dropped on every rank (:mod:`rollcall_workload.kernels.check`). Every rank on cuda joins the ranks'
    agreement, whatever it checked.
    """
    import torch

    from rollcall_workload.kernels import INTERPRETING

    if acc.kind != "cuda" and not INTERPRETING:  # no kernel of ours runs: no rank checks any
        return {}
    from rollcall_workload.kernels.attention import triton_attention_available
    from rollcall_workload.kernels.check import Shapes, agree, check

    names, s = list(in_use(args)), model_shape(args)
    if "attention" in names and not triton_attention_available(acc.device, args.seq_len, s.hidden // s.heads):
        names.remove("attention")  # ``auto`` takes PyTorch's here: nothing of ours runs
    dtype = torch.bfloat16 if acc.bf16 and acc.kind == "cuda" else torch.float32
    shapes = Shapes(args.batch_size, args.seq_len, s.heads, s.hidden, s.intermediate, bool(args.fused_bias))
    local = check(names, shapes, dtype, acc.device, mismatched_kernels(os.environ, env.rank))
    states = {}
    for name, verdict in agree(local, env.rank, env.world_size, acc.device).items():
        if verdict == "ok":
            error = local[name]
            states[name] = (
                f"on: checked against {KERNEL_BY_NAME[name].replaces} (error {error:.0%} of the tolerance)"
            )
        else:
            drop(args, name)
            states[name] = f"off: {verdict}; {KERNEL_BY_NAME[name].replaces} runs"
    return states
