"""Dropout's random numbers in Triton: Philox with one 64-bit product per multiply pair, and the keep test.

Shared by the dropout of :mod:`~rollcall_workload.kernels.norm` and of
:mod:`~rollcall_workload.kernels.attention`.
"""

# Triton's kernels take untyped arguments by design (a kernel's types come from its launch) and Triton ships
# no type information; the functions around the kernels are typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator"

from __future__ import annotations

from rollcall_workload.kernels import INTERPRETING, tl, triton

#
# One program per row in the forward: z = dropout(a) + x, y = LayerNorm(z); z (the normalised input, as
# LayerNorm's backward needs it), mean and 1/std are saved, the mask is not: element j of row r keeps its
# value when 16-bit number j % 8 (in the order of :func:`_keep`) of Philox call (seed, r * hidden / 8 +
# j // 8) is at least round(p * 65536) (:func:`_drop_threshold`), so each call of Philox (four 32-bit
# numbers, halved) serves eight elements and the backward draws the same mask again. The backward walks
# tiles of several rows per program (many rows in flight), its weight and bias gradients summed per
# program, then over programs.

#: Rounds of each Philox call (Random123's default; cuRAND's Philox4_32_10 has as many).
DROPOUT_ROUNDS = 10


def _drop_threshold(p: float) -> int:
    """Elements whose 16-bit number is below this are dropped: a rate of ``p`` to within 2**-17."""
    return min(1 << 16, max(0, round(p * (1 << 16))))


def _scale(p: float) -> float:
    """What a kept element is multiplied by: one over the rate kept (nothing is kept at ``p`` 1)."""
    threshold = _drop_threshold(p)
    return (1 << 16) / ((1 << 16) - threshold) if threshold < 1 << 16 else 0.0


if triton is not None:
    if INTERPRETING:

        @triton.jit
        def _mul_wide(x, m: tl.constexpr):  # pragma: no cover - Triton's interpreter
            """(high, low) 32 bits of ``x * m``, unsigned: two products, as the interpreter runs no PTX."""
            return tl.math.umulhi(x, m), x * m

    else:

        @triton.jit
        def _mul_wide(x, m: tl.constexpr):  # pragma: no cover - runs on a GPU
            """(high, low) 32 bits of ``x * m``, unsigned: one 64-bit product (IMAD.WIDE.U32 on Hopper)."""
            return tl.inline_asm_elementwise(
                "{ .reg .b64 w; mul.wide.u32 w, $2, $3; mov.b64 {$1, $0}, w; }",
                "=r,=r,r,r",
                [x, tl.full(x.shape, m, tl.uint32)],
                dtype=(tl.uint32, tl.uint32),
                is_pure=True,
                pack=1,
            )

    @triton.jit
    def _philox(seed, offset, ROUNDS: tl.constexpr):  # pragma: no cover - GPU or interpreter
        """``tl.randint4x(seed, offset, ROUNDS)``, the same four numbers, each round's products fewer.

        Triton's Philox takes a round's high and low halves of a 32 x 32-bit product as two multiplies
        (IMAD.HI and IMAD on Hopper); here each pair is one 64-bit product (``mul.wide.u32``: one
        IMAD.WIDE), and the first round, whose counter words 2 and 3 are zero, multiplies once.
        ``tests/unit/test_philox_gpu.py`` holds it to ``tl.randint4x`` on a GPU; the interpreter, which runs
        no inline PTX, takes the two halves apart.
        """
        seed = seed.to(tl.uint64)
        k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
        k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
        hi, c3 = _mul_wide(offset.to(tl.uint32), 0xD2511F53)
        if tl.constexpr(offset.dtype.primitive_bitwidth) > 32:
            c0 = (offset >> 32).to(tl.uint32) ^ k0
        else:  # no high word
            c0 = c3 * 0 ^ k0
        c2 = hi ^ k1
        c1 = c3 * 0
        for _ in tl.static_range(1, ROUNDS):
            k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
            k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
            hi_b, lo_b = _mul_wide(c2, 0xCD9E8D57)
            hi_a, lo_a = _mul_wide(c0, 0xD2511F53)
            c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        return c0, c1, c2, c3

    @triton.jit
    def _keep(seed, call, threshold, ROUNDS: tl.constexpr):  # pragma: no cover - GPU or interpreter
        """Whether each of the eight elements that every Philox call (``call``: their offsets) serves is kept.

        Shaped ``call.shape + (2, 2, 2)``; callers reshape it to ``call.shape[:-1] + (8 * call.shape[-1],)``,
        so the eight elements of a call lie side by side.
        """
        r0, r1, r2, r3 = _philox(seed, call, ROUNDS)
        low = 0xFFFF
        v = tl.join(
            tl.join(tl.join(r0 & low, r0 >> 16), tl.join(r1 & low, r1 >> 16)),
            tl.join(tl.join(r2 & low, r2 >> 16), tl.join(r3 & low, r3 >> 16)),
        )
        return v.to(tl.int32) >= threshold
else:  # the CPU image has no Triton: the names stay, each op takes PyTorch's path (see each kernel's module)
    _mul_wide = _philox = _keep = None
