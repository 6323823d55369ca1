"""Where a BERT training step's GPU time goes: kernels grouped into matmul, attention and the rest.

Usage (on a GPU machine): python bench/gpu_profile.py [--steps 6] [--top 15] [train.py's arguments]
    e.g. --seq-len 128 --batch-size 256 --impl compact --precision bf16 --compile
One process, no DDP: the workload's own step (rollcall_workload.rank.training.build_training: model, loss,
precision, compile mode, optimizer), profiled after warm-up.
"""

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.model import batch_pool, mlm_predictions
from rollcall_workload.rank.cli import apply_defaults, parse_args
from rollcall_workload.rank.compile_cache import compile_cache_env
from rollcall_workload.rank.dist import Accelerator, DistEnv
from rollcall_workload.rank.training import build_training
from rollcall_workload.shape import flops_per_sample


def category(name: str) -> str:
    low = name.lower()
    if any(k in low for k in ("flash", "fmha", "attention", "sdpa")):
        return "attention"
    if any(k in low for k in ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas", "matmul")):
        return "matmul"
    if "adam" in low or "multi_tensor" in low:
        return "optimizer"
    if "nccl" in low:
        return "nccl"
    return "other (elementwise, norms, reductions, copies)"


def main() -> None:
    ap = argparse.ArgumentParser(
        epilog="other arguments go to train.py (e.g. --impl compact --precision bf16 --compile-mode ...)"
    )
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--ops", type=int, default=0, help="also the N operators with the most GPU time")
    ap.add_argument("--gaps", type=int, default=0, help="also the GPU's idle time and its N longest gaps")
    args, workload = ap.parse_known_args()
    wargs = parse_args(
        ["--device", "cuda", "--model", "large", "--seq-len", "128", "--batch-size", "256", *workload]
    )
    apply_defaults(wargs, "cuda")
    if wargs.compile_cache:
        os.environ.update(compile_cache_env(wargs.compile_cache))
    acc = Accelerator("cuda", 0)
    env = DistEnv(rank=0, local_rank=0, world_size=1, node_rank=0, local_world_size=1, launched=False)
    t = build_training(wargs, acc, env)
    batches = batch_pool(wargs, 0, t.shape.vocab, acc.device)
    autocast = acc.autocast if t.autocast else contextlib.nullcontext
    count = [0]

    def step():
        if t.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with autocast():
            loss = t.step_model(batches[count[0] % len(batches)])
        count[0] += 1
        loss.backward()
        t.optimizer.step()
        t.optimizer.zero_grad(set_to_none=True)

    for _ in range(8):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / args.steps
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    kernels: dict[str, float] = {}
    for evt in prof.key_averages():
        dev = getattr(evt, "self_device_time_total", None) or getattr(evt, "self_cuda_time_total", 0)
        # "Optimizer.step#AdamW.step" and the like are the profiler's ranges over kernels, not kernels
        if dev and evt.device_type == torch.autograd.DeviceType.CUDA and "#" not in evt.key:
            totals[category(evt.key)] = totals.get(category(evt.key), 0.0) + dev
            kernels[evt.key] = kernels.get(evt.key, 0.0) + dev
    busy = sum(totals.values()) / args.steps / 1e3
    mlm = mlm_predictions(wargs.seq_len) if wargs.mlm_head == "masked" else None
    fps = flops_per_sample(t.shape, wargs.seq_len, mlm)
    sps = wargs.batch_size / wall
    print(
        f"model {wargs.model} seq {wargs.seq_len} batch {wargs.batch_size} impl {wargs.impl} {t.precision} "
        f"compile={wargs.compile}/{wargs.compile_mode} dropout={wargs.dropout}: step {wall * 1e3:.1f} ms wall, "
        f"GPU busy {busy:.1f} ms ({busy / (wall * 1e3):.0%}), {sps:.0f} samples/s, {fps * sps / 1e12:.0f} TFLOP/s, "
        f"MFU {fps * sps / 989.4e12:.1%}"
    )
    for cat, us in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {us / args.steps / 1e3:8.1f} ms/step {us / sum(totals.values()):6.1%}  {cat}")
    print("  top kernels:")
    for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {us / args.steps / 1e3:8.2f} ms  {name[:110]}")
    if args.ops:
        # the operators that launched the kernels (a copy's or a memcpy's source, say), by GPU time
        ops = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CPU]
        gpu = [(getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0), e.key) for e in ops]
        print("  top operators (GPU time of all they launched):")
        for us, name in sorted(gpu, reverse=True)[: args.ops]:
            print(f"  {us / args.steps / 1e3:8.2f} ms  {name[:110]}")
    if args.gaps:
        print_gaps(prof, args.steps, args.gaps)


def print_gaps(prof: profile, steps: int, longest: int) -> None:
    """The GPU's idle time a step between its kernels and copies, and the longest gaps with their neighbours.

    The profiler's own overhead lengthens the host's side, so a gap here is at most what the step without
    the profiler has; a gap where the host waits for the device (a synchronising call) shows as one long one.
    """
    spans = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and "#" not in e.name
    )
    if not spans:
        return
    gaps: list[tuple[float, str, str]] = []
    end, last = spans[0][1], spans[0][2]
    for start, stop, name in spans[1:]:
        if start > end:
            gaps.append((start - end, last, name))
        if stop > end:
            end, last = stop, name
    idle = sum(g for g, _, _ in gaps)
    small = sum(g for g, _, _ in gaps if g < 20)
    print(
        f"  GPU idle between its work: {idle / steps / 1e3:.2f} ms/step in {len(gaps) / steps:.0f} gaps, "
        f"{small / steps / 1e3:.2f} ms of it in gaps under 20 us; the longest:"
    )
    for gap, before, after in sorted(gaps, reverse=True)[:longest]:
        print(f"  {gap:8.1f} us  after {before[:50]}  before {after[:50]}")


if __name__ == "__main__":
    main()
