"""The Triton bias+GELU of rollcall_workload.compact alone on a GPU, against the compiler's fusion of the same chain.

    python3 bench/gpu_fused_gelu.py [--rows 49152] [--width 4096]

bf16 as the compact BERT-large's intermediate layer has it at seq 128, batch 384 (49,152 rows of 4,096).
Prints the largest difference from a float32 reference (forward, input and bias gradients) for the kernels
and for PyTorch's bf16 ops, then the forward's and the backward's times (triton.testing.do_bench, median)
with the bytes each must move per second, beside ``torch.compile`` of ``gelu(h + b)`` (its backward
writes the input's gradient and sums the bias's) and a plain copy of the same bytes. ``--sweep`` then
times the kernels' other launch shapes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.kernels import gelu as gelu_kernels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=384 * 128)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--sweep", action="store_true", help="time the kernels' other launch shapes")
    args = ap.parse_args()
    n, w = args.rows, args.width
    h = torch.randn(n, w, device="cuda", dtype=torch.bfloat16)
    bias = (0.1 * torch.randn(w, device="cuda")).to(torch.bfloat16)
    dy = torch.randn(n, w, device="cuda", dtype=torch.bfloat16)
    fwd, bwd = torch.ops.rollcall.bias_gelu, torch.ops.rollcall.bias_gelu_backward

    hf, bf = h.float().requires_grad_(), bias.float().requires_grad_()
    ref = F.gelu(hf + bf)
    ref_dh, ref_db = torch.autograd.grad(ref, (hf, bf), dy.float())
    hb, bb = h.clone().requires_grad_(), bias.clone().requires_grad_()
    plain = F.gelu(hb + bb)
    plain_dh, plain_db = torch.autograd.grad(plain, (hb, bb), dy)
    dh, db = bwd(dy, h, bias)
    for name, (y, gh, gb) in (
        ("kernels", (fwd(h, bias), dh, db)),
        ("PyTorch bf16", (plain, plain_dh, plain_db)),
    ):
        diffs = [(t.float() - r).abs().max().item() for t, r in ((y, ref), (gh, ref_dh), (gb, ref_db))]
        print(
            f"{name}: largest difference from float32: y {diffs[0]:.4g}, dh {diffs[1]:.4g}, db {diffs[2]:.4g}"
        )

    compiled = torch.compile(lambda h, b: F.gelu(h + b))
    hc, bc = h.clone().requires_grad_(), bias.clone().requires_grad_()
    out = compiled(hc, bc)

    def compiled_backward() -> None:
        torch.autograd.grad(out, (hc, bc), dy, retain_graph=True)

    element = h.element_size()
    rows = (
        ("forward, kernel", lambda: fwd(h, bias), 2),  # h in, y out
        ("forward, compiled", lambda: compiled(h, bias), 2),
        ("backward, kernel", lambda: bwd(dy, h, bias), 3),  # dy, h in, dh out
        ("backward, compiled", compiled_backward, 3),
        ("copy of h", h.clone, 2),
    )
    for name, fn, tensors in rows:
        ms = triton.testing.do_bench(fn, return_mode="median")
        print(f"{name:>20}: {ms * 1e3:7.1f} us, {tensors * n * w * element / (ms * 1e-3) / 1e12:.2f} TB/s")
    if not args.sweep:
        return
    for block, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (8192, 8), (8192, 16)):
        gelu_kernels.GELU_BLOCK, gelu_kernels.GELU_WARPS = block, warps
        ms = triton.testing.do_bench(lambda: fwd(h, bias), return_mode="median")
        print(f"forward, {block} elements, {warps} warps: {ms * 1e3:.1f} us")
    for tile in ((8, 256), (16, 256), (32, 128), (16, 512), (32, 256)):
        for per_unit in (2, 4, 8):
            for warps in (4, 8):
                gelu_kernels.GELU_BACKWARD_TILE, gelu_kernels.GELU_BACKWARD_PROGRAMS_PER_UNIT = tile, per_unit
                gelu_kernels.GELU_WARPS = warps
                ms = triton.testing.do_bench(lambda: bwd(dy, h, bias), return_mode="median")
                print(f"backward, tile {tile}, {per_unit} a unit, {warps} warps: {ms * 1e3:.1f} us")


if __name__ == "__main__":
    main()
