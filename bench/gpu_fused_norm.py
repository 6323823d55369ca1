"""The Triton dropout+residual+LayerNorm of rollcall_workload.compact alone on a GPU: its numerics and its speed.

    python3 bench/gpu_fused_norm.py [--rows 49152] [--hidden 1024] [--dropout 0.1]
    TRITON_INTERPRET=1 python3 bench/gpu_fused_norm.py --device cpu --rows 64 --hidden 64   # numerics only

bf16 rows as the compact BERT-large has them at seq 128, batch 384 (49,152 rows of 1,024). Prints the
forward's largest difference from PyTorch's ops at dropout 0 (against float32), the share dropped and
whether the gradient's zeros are the forward's at the given dropout, then the forward and backward times
(triton.testing.do_bench, median) with the bytes each moves per second, and PyTorch's eager ops beside.
``--sweep`` then times the backward for other tiles (elements a tile, programs per multiprocessor,
elements per thread, the sums over rows added up each tile or at the end); ``--rounds 7`` both kernels
with that many rounds of Philox instead of ``DROPOUT_ROUNDS``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.kernels import norm, philox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=384 * 128)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--device", default="cuda", help="cpu: the numerics only, in Triton's interpreter")
    ap.add_argument("--sweep", action="store_true", help="time the backward's other tile shapes too")
    ap.add_argument("--rounds", type=int, nargs="*", default=[], help="time both with these Philox rounds")
    args = ap.parse_args()
    n, h, p = args.rows, args.hidden, args.dropout
    dev, dt = args.device, torch.bfloat16
    a = torch.randn(n, h, device=dev).to(dt)
    x = torch.randn(n, h, device=dev, dtype=dt)
    w = (1 + 0.1 * torch.randn(h, device=dev)).to(dt)
    b = (0.1 * torch.randn(h, device=dev)).to(dt)
    dy = torch.randn(n, h, device=dev, dtype=dt)
    seed = torch.tensor([1234], device=dev, dtype=torch.int64)
    op, bwd = torch.ops.rollcall.dropout_add_layer_norm, torch.ops.rollcall.dropout_add_layer_norm_backward

    y, z, mean, rstd = op(a, x, w, b, seed, 0.0, 1e-12)
    ref = F.layer_norm(a.float() + x.float(), (h,), w.float(), b.float(), 1e-12)
    plain = F.layer_norm(a + x, (h,), w, b, 1e-12)
    print(
        f"dropout 0: largest |y - fp32 ref| {(y.float() - ref).abs().max().item():.4g}, "
        f"PyTorch's bf16 ops {(plain.float() - ref).abs().max().item():.4g}"
    )
    zero = torch.zeros_like(x)  # with no residual, z is exactly 0 where dropped and a's multiple elsewhere
    _, z0, mean0, rstd0 = op(a, zero, w, b, seed, p, 1e-12)
    da, dx, *_ = bwd(dy, z0, mean0, rstd0, w, seed, p)
    dropped = z0 == 0
    mismatch = ((da == 0) != dropped)[a != 0].sum().item()  # where a is 0, z is 0 kept or not
    print(
        f"dropout {p}: dropped share {dropped.float().mean().item():.5f}, elements where the gradient's "
        f"zeros differ from the forward's {mismatch} (dx is exactly 0 at {(dx == 0).sum().item()})"
    )
    y, z, mean, rstd = op(a, x, w, b, seed, p, 1e-12)
    if dev != "cuda":
        return
    fwd_ms = triton.testing.do_bench(lambda: op(a, x, w, b, seed, p, 1e-12), return_mode="median")
    bwd_ms = triton.testing.do_bench(lambda: bwd(dy, z, mean, rstd, w, seed, p), return_mode="median")
    eager_ms = triton.testing.do_bench(
        lambda: F.layer_norm(F.dropout(a, p) + x, (h,), w, b, 1e-12), return_mode="median"
    )
    moved = 4 * n * h * a.element_size()  # forward: a, x in, y, z out; backward: dy, z in, da, dx out
    for name, ms in (("forward", fwd_ms), ("backward", bwd_ms)):
        print(f"{name}: {ms * 1e3:.1f} us, {moved / (ms * 1e-3) / 1e12:.2f} TB/s")
    print(f"PyTorch eager forward (dropout, add, layer_norm): {eager_ms * 1e3:.1f} us")
    rounds = philox.DROPOUT_ROUNDS
    for philox.DROPOUT_ROUNDS in args.rounds:
        fwd_ms = triton.testing.do_bench(lambda: op(a, x, w, b, seed, p, 1e-12), return_mode="median")
        bwd_ms = triton.testing.do_bench(lambda: bwd(dy, z, mean, rstd, w, seed, p), return_mode="median")
        print(
            f"{philox.DROPOUT_ROUNDS} rounds: forward {fwd_ms * 1e3:.1f} us, backward {bwd_ms * 1e3:.1f} us"
        )
    philox.DROPOUT_ROUNDS = rounds
    if not args.sweep:
        return
    units = torch.cuda.get_device_properties(a.device).multi_processor_count
    shapes = [
        (e, u, t, each) for e in (1024, 2048, 4096) for u in (4, 8) for t in (16, 32) for each in (0, 1)
    ]
    for elements, per_unit, per_thread, each in shapes:
        norm.BACKWARD_TILE_ELEMENTS, norm.BACKWARD_PROGRAMS_PER_UNIT = elements, per_unit
        norm.BACKWARD_ELEMENTS_PER_THREAD, norm.BACKWARD_SUM_EACH_TILE = per_thread, bool(each)
        block, tiles, programs = norm._backward_shape(n, h, units)
        ms = triton.testing.do_bench(lambda: bwd(dy, z, mean, rstd, w, seed, p), return_mode="median")
        print(
            f"backward, tiles of {elements} elements ({block} rows) x {tiles} a program, {programs} programs, "
            f"{norm._backward_warps(block, h)} warps, {'sums each tile' if each else 'sums at the end'}: "
            f"{ms * 1e3:.1f} us, {moved / (ms * 1e-3) / 1e12:.2f} TB/s"
        )


if __name__ == "__main__":
    main()
