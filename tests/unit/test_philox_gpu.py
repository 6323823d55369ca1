"""The dropout kernels' Philox (rollcall_workload.kernels.philox._philox) against Triton's ``tl.randint4x``, number for number.

``_philox`` takes each round's two products as one 64-bit multiply through inline PTX, which Triton's
interpreter cannot run, so the comparison runs where a CUDA GPU is (the device machine); on the CPU,
tests/unit/fused_norm_cases.py makes the same comparison in the interpreter, where ``_philox`` takes the
halves apart as Triton does, which holds the rounds' order and keys but not the PTX.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from rollcall_workload.kernels import philox

#: seeds with their high word set and not, and 0 (the keys start at zero)
SEEDS = (0, 1, 0x0123_4567, 0x7EDC_BA98_7654_3210, -1)
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="inline PTX: a CUDA GPU only")


@triton.jit
def _both(SEED, OFFSETS, OURS, THEIRS, N: tl.constexpr, ROUNDS: tl.constexpr):  # pragma: no cover - GPU
    i = tl.arange(0, N)
    seed = tl.load(SEED)
    offset = tl.load(OFFSETS + i)
    a0, a1, a2, a3 = philox._philox(seed, offset, ROUNDS)
    b0, b1, b2, b3 = tl.randint4x(seed, offset, ROUNDS)
    tl.store(OURS + i, a0.to(tl.int32, bitcast=True))
    tl.store(OURS + N + i, a1.to(tl.int32, bitcast=True))
    tl.store(OURS + 2 * N + i, a2.to(tl.int32, bitcast=True))
    tl.store(OURS + 3 * N + i, a3.to(tl.int32, bitcast=True))
    tl.store(THEIRS + i, b0.to(tl.int32, bitcast=True))
    tl.store(THEIRS + N + i, b1.to(tl.int32, bitcast=True))
    tl.store(THEIRS + 2 * N + i, b2.to(tl.int32, bitcast=True))
    tl.store(THEIRS + 3 * N + i, b3.to(tl.int32, bitcast=True))


def philox_both(
    seed: int, device: str, rounds: int = philox.DROPOUT_ROUNDS, dtype: torch.dtype = torch.int64
) -> tuple[torch.Tensor, torch.Tensor]:
    """(``_philox``'s, ``tl.randint4x``'s) four numbers for 1,024 offsets of ``dtype`` under ``seed``.

    int64 offsets reach past 2**32 (a high word); both kinds include the largest there is.
    """
    g = torch.Generator().manual_seed(seed & 0xFFFF)
    top = torch.iinfo(dtype).max
    offsets = torch.cat(
        [
            torch.arange(512, dtype=torch.int64),
            torch.randint(0, top, (508,), generator=g, dtype=torch.int64),
            torch.tensor([(1 << 31) - 1, 1 << 30, top, top - 1], dtype=torch.int64),
        ]
    ).to(device, dtype)
    n = offsets.numel()
    ours, theirs = (torch.empty(4, n, dtype=torch.int32, device=device) for _ in range(2))
    _both[(1,)](torch.tensor([seed], dtype=torch.int64, device=device), offsets, ours, theirs, n, rounds)
    return ours.cpu(), theirs.cpu()


@GPU
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("seed", SEEDS)
def test_the_kernels_philox_is_tritons_on_the_gpu(seed, dtype):
    ours, theirs = philox_both(seed, "cuda", dtype=dtype)
    assert theirs.unique().numel() > 4000  # numbers, not a constant
    assert torch.equal(ours, theirs)


@GPU
def test_the_rounds_count_on_the_gpu():
    seven, ten = philox_both(7, "cuda", rounds=7), philox_both(7, "cuda")
    assert torch.equal(*seven) and not torch.equal(seven[0], ten[0])
