"""Where a BERT training step's GPU time goes: kernels grouped into matmul, attention and the rest.

Usage (on a GPU machine): python bench/gpu_profile.py [--seq-len 128] [--batch-size 256] [--compile]
    [--dropout F] [--steps 6]
One process, no DDP: the workload's model, loss, bf16 autocast and fused AdamW, profiled after warm-up.
"""

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

TRAIN = Path(__file__).resolve().parents[1] / "images" / "bert-training" / "train.py"


def load_train():
    spec = importlib.util.spec_from_file_location("rollcall_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="large")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--dropout", type=float)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    train = load_train()
    margs = argparse.Namespace(pretrained=None, model=args.model, dropout=args.dropout)
    model, shape = train.build_model(margs)
    model = model.cuda().train()
    loss_fn = train.pretraining_loss(model, masked_head=True)
    step_fn = torch.compile(loss_fn) if args.compile else loss_fn
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch = {k: v.cuda() for k, v in train.make_batch(1, args.batch_size, args.seq_len, shape.vocab).items()}

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

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
        if dev and evt.device_type == torch.autograd.DeviceType.CUDA:
            totals[category(evt.key)] = totals.get(category(evt.key), 0.0) + dev
            kernels[evt.key] = kernels.get(evt.key, 0.0) + dev
    busy = sum(totals.values()) / args.steps / 1e3
    fps = train.flops_per_sample(shape, args.seq_len, train.mlm_predictions(args.seq_len))
    sps = args.batch_size / wall
    print(
        f"model {args.model} seq {args.seq_len} batch {args.batch_size} compile={args.compile} "
        f"dropout={args.dropout}: step {wall * 1e3:.1f} ms wall, GPU busy {busy:.1f} ms "
        f"({busy / (wall * 1e3):.0%}), {sps:.0f} samples/s, {fps * sps / 1e12:.0f} TFLOP/s"
    )
    for cat, us in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {us / args.steps / 1e3:8.1f} ms/step {us / sum(totals.values()):6.1%}  {cat}")
    print("  top kernels:")
    for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {us / args.steps / 1e3:8.2f} ms  {name[:110]}")


if __name__ == "__main__":
    main()
