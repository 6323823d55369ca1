"""BERT-large's attention alone, forward + backward, through each scaled_dot_product_attention backend.

Usage (on a GPU machine): python bench/gpu_attention.py [--seq-len 128] [--batch-size 256] [--dropout 0.1]
q, k and v are views of one [batch, seq, 3, heads, 64] bf16 tensor, as the compact model's fused
projection makes them; times are CUDA-event medians of 20 runs after 5, times 24 layers for a step's share.
``triton`` is rollcall_workload.compact's kernels (``--attention triton``), which take that tensor as it
is; at dropout 0 its output and gradient are compared with cuDNN's. The forward's share is timed in the same
runs. ``--sweep`` also times the Triton kernels at other block sizes and warps, and with the two backward
kernels where one would do.
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.kernels import attention as attention_kernels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--sweep", action="store_true", help="the Triton kernels at other launch shapes too")
    args = ap.parse_args()
    b, s, heads, d = args.batch_size, args.seq_len, 16, 64
    qkv = torch.randn(b, s, 3, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16)
    bias = torch.zeros(3 * heads * d, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # its gradient
    flops = 4 * b * heads * s * s * d * 3  # two matmuls forward, twice that backward
    results = {}
    backends: list[tuple[str, SDPBackend | None, tuple | None]] = [
        ("cudnn", SDPBackend.CUDNN_ATTENTION, None),
        ("flash", SDPBackend.FLASH_ATTENTION, None),
        ("efficient", SDPBackend.EFFICIENT_ATTENTION, None),
        ("triton", None, None),
    ]
    if args.sweep:
        # (forward blocks, backward blocks, (forward, backward) warps, longest one-kernel backward)
        backends += [
            (f"triton {shape}", None, shape)
            for shape in (
                ((128, 64), (64, 64), (4, 4), 0),
                ((64, 64), (64, 64), (4, 4), 0),
                ((128, 64), (64, 64), (8, 4), 0),
                ((128, 128), (64, 64), (8, 4), 0),
                ((64, 128), (64, 64), (4, 4), 0),
                ((64, 64), (128, 64), (4, 8), 0),
                ((128, 64), (64, 64), (4, 4), 128),
                ((64, 64), (64, 64), (4, 4), 128),
            )
        ]
    for name, backend, shape in backends:
        if shape is not None:
            (
                attention_kernels.ATTENTION_FORWARD_BLOCKS,
                attention_kernels.ATTENTION_BACKWARD_BLOCKS,
                attention_kernels.ATTENTION_WARPS,
                attention_kernels.ATTENTION_WHOLE_SEQ,
            ) = shape
        times, forward_times = [], []
        try:
            for i in range(25):
                start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                start.record()
                if backend is None:
                    out = attention_kernels.attention(qkv.view(b, s, -1), bias, heads, args.dropout)
                    mid.record()
                    out.backward(grad.transpose(1, 2).reshape(b, s, heads * d))
                else:
                    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
                    with sdpa_kernel(backend):
                        out = F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout)
                    mid.record()
                    out.backward(grad)
                end.record()
                torch.cuda.synchronize()
                if i >= 5:
                    times.append(start.elapsed_time(end))
                    forward_times.append(start.elapsed_time(mid))
                if i == 24:
                    results[name] = (
                        out.detach().view(b, s, heads * d)
                        if backend is None
                        else out.detach().transpose(1, 2).reshape(b, s, heads * d),
                        qkv.grad,
                    )
                qkv.grad = None
        except Exception as exc:  # a backend or kernel that cannot run here is reported
            print(f"{name:>10}: not available ({str(exc).splitlines()[0][:80]})")
            continue
        ms, forward_ms = (sorted(t)[len(t) // 2] for t in (times, forward_times))
        print(
            f"{name:>10}: {ms:.3f} ms per layer (forward {forward_ms:.3f}), {24 * ms:.1f} ms per 24-layer step,"
            f" {flops / ms / 1e9:.0f} TFLOP/s"
        )

    if args.dropout == 0 and "triton" in results and "cudnn" in results:
        (o1, g1), (o2, g2) = results["triton"], results["cudnn"]
        print(
            f"triton against cudnn at dropout 0: output largest difference {(o1 - o2).abs().max().item():.4f}"
            f" (largest value {o2.abs().max().item():.2f}), gradient {(g1 - g2).abs().max().item():.4f}"
            f" (largest {g2.abs().max().item():.2f})"
        )


if __name__ == "__main__":
    main()
