"""BERT-large's attention alone, forward + backward, through each scaled_dot_product_attention backend.

Usage (on a GPU machine): python bench/gpu_attention.py [--seq-len 128] [--batch-size 256] [--dropout 0.1]
q, k and v are views of one [batch, seq, 3, heads, 64] bf16 tensor, as the compact model's fused
projection makes them; times are CUDA-event medians of 20 runs after 5, times 24 layers for a step's share.
"""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args()
    b, s, heads, d = args.batch_size, args.seq_len, 16, 64
    qkv = torch.randn(b, s, 3, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16)
    flops = 4 * b * heads * s * s * d * 3  # two matmuls forward, twice that backward
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
        ("efficient", SDPBackend.EFFICIENT_ATTENTION),
    ):
        times = []
        try:
            for i in range(25):
                q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout)
                out.backward(grad)
                end.record()
                torch.cuda.synchronize()
                if i >= 5:
                    times.append(start.elapsed_time(end))
                qkv.grad = None
        except RuntimeError as exc:
            print(f"{name:>10}: not available ({str(exc).splitlines()[0][:80]})")
            continue
        ms = sorted(times)[len(times) // 2]
        print(
            f"{name:>10}: {ms:.3f} ms per layer, {24 * ms:.1f} ms per 24-layer step, {flops / ms / 1e9:.0f} TFLOP/s"
        )


if __name__ == "__main__":
    main()
