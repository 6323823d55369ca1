"""The optimizer step of the compact BERT-large's bf16 parameters through fp32 masters, alone (one GPU).

Usage (on a GPU machine): python bench/gpu_adamw.py [--steps 20]
Times ``rollcall_workload.rank.training.MasterWeightAdamW`` both ways, on the model's own parameter shapes with
gradients held: two copies around torch's fused AdamW, and rollcall_workload.compact's one Triton kernel at
several launch shapes (elements per program, warps); then checks the kernel against torch's over 5 steps.
Prints a table.
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.kernels import adamw
from rollcall_workload.model import build_model
from rollcall_workload.rank.cli import apply_defaults, parse_args
from rollcall_workload.rank.training import MasterWeightAdamW

SHAPES = ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    wargs = parse_args(["--device", "cuda", "--model", "large", "--impl", "compact"])
    apply_defaults(wargs, "cuda")
    with torch.device("cuda"):
        model, _ = build_model(wargs)
    params = [p.detach().to(torch.bfloat16).requires_grad_() for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in params)

    def time_steps(opt: object) -> float:
        opt.step()  # type: ignore[attr-defined]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.steps):
            opt.step()  # type: ignore[attr-defined]
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / args.steps

    print(f"{len(params)} parameters, {n / 1e6:.1f} M elements")
    print(f"{'optimizer step':<44} {'ms':>7} {'TB/s':>6}")
    ms = time_steps(MasterWeightAdamW(params, lr=1e-4, fused=True))
    print(f"{'copies + torch fused AdamW (40 B an element)':<44} {ms:7.3f} {40 * n / ms / 1e9:6.2f}")
    for block, warps in SHAPES:
        adamw.ADAMW_BLOCK, adamw.ADAMW_WARPS = block, warps
        ms = time_steps(MasterWeightAdamW(params, lr=1e-4, fused=True, kernel=True))
        label = f"kernel, {block} elements, {warps} warps (28 B)"
        print(f"{label:<44} {ms:7.3f} {28 * n / ms / 1e9:6.2f}")

    torch.manual_seed(0)
    a = [p.detach().clone().requires_grad_() for p in params[:6]]
    b = [p.detach().clone().requires_grad_() for p in params[:6]]
    ka = MasterWeightAdamW(a, lr=1e-3, fused=True, kernel=True)
    kb = MasterWeightAdamW(b, lr=1e-3, fused=True)
    for _ in range(5):
        for pa, pb in zip(a, b, strict=True):
            pa.grad = torch.randn_like(pa)
            pb.grad = pa.grad.clone()
        ka.step()
        kb.step()
    worst = max(
        ((x - y).abs().max() / y.abs().max()).item() for x, y in zip(ka.master, kb.master, strict=True)
    )
    differ = sum(int((pa != pb).sum()) for pa, pb in zip(a, b, strict=True))
    print(
        f"kernel against torch's over 5 steps: masters' largest relative difference {worst:.1e}, "
        f"bf16 parameters differing {differ} of {sum(p.numel() for p in a)}"
    )


if __name__ == "__main__":
    main()
