"""The MLM decoder's matmul alone on a GPU, at BERT's vocabulary and at it padded.

    python3 bench/gpu_decoder.py [--rows 7392] [--hidden 1024] [--vocab 30522 30528 30592]

bf16, as the compact BERT-large's masked head has it at seq 512, batch 96 (77 masked positions a sample:
7,392 rows): ``F.linear(x, w, b)`` for each vocabulary, forward alone and forward + backward (the input's,
the weight's and the bias's gradients), CUDA-event medians of 20 runs after 5, eager. At 30,522 the
logits' rows are 61,044 bytes, not a multiple of 16, and cuBLAS takes slower kernels;
rollcall_workload.compact pads the vocabulary to ``VOCAB_ALIGN``.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def median_ms(fn, runs: int = 25, skip: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for i in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= skip:
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=7392)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, nargs="+", default=[30522, 30528, 30592])
    args = ap.parse_args()
    print(f"{'vocab':>7} {'forward ms':>11} {'fwd+bwd ms':>11} {'TFLOP/s':>8}")
    for vocab in args.vocab:
        bf16 = {"device": "cuda", "dtype": torch.bfloat16}
        x = torch.randn(args.rows, args.hidden, **bf16, requires_grad=True)
        w = torch.randn(vocab, args.hidden, **bf16, requires_grad=True)
        b = torch.zeros(vocab, **bf16, requires_grad=True)
        dy = torch.randn(args.rows, vocab, **bf16)
        forward = median_ms(lambda: F.linear(x, w, b))  # noqa: B023 - timed here, in this iteration
        both = median_ms(lambda: torch.autograd.grad(F.linear(x, w, b), (x, w, b), dy))  # noqa: B023
        flops = 6 * args.rows * args.hidden * vocab
        print(f"{vocab:>7} {forward:>11.3f} {both:>11.3f} {flops / both / 1e9:>8.0f}")


if __name__ == "__main__":
    main()
