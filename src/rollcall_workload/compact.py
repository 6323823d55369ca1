"""A compact BERT for pre-training in plain PyTorch: the same model as Hugging Face's ``BertForPreTraining``.

The same parameters (count, shapes and, through :func:`hf_parameter_map`, one to one with the Hugging Face
names) and the same function, written for a compiler: one fused query/key/value projection per layer,
attention through ``scaled_dot_product_attention`` (flash attention on a GPU), and the bias+GELU and
dropout+residual+LayerNorm chains as plain expressions that ``torch.compile`` fuses into single kernels.
With ``fused_norm`` the dropout+residual+LayerNorm chain runs on CUDA as hand-written Triton kernels
instead (:func:`dropout_add_layer_norm`: one Philox call per eight elements, the mask regenerated in the
backward from the seed; with ``fused_bias`` the bias of the matmul before it too), and with
``fused_gelu`` the bias+GELU chain (:func:`bias_gelu`), the plain expressions remaining the path
everywhere else.
The module computes the pre-training loss (MLM + NSP) of a batch itself, with the MLM head on the masked
positions only (or on every token), so shapes are static and no logits over the whole sequence exist.

What is left out because the workload never uses it: attention masks (every token is real), decoders and
cross-attention, ``position_ids`` other than ``0..seq-1``. The test ``tests/unit/test_bert_compact.py``
holds it to the Hugging Face model: same parameter count and shapes, same loss and gradients from the same
weights and batch.
"""

# Triton's kernels take untyped arguments by design (a kernel's types come from its launch) and Triton ships
# no type information; the functions around the kernels are typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator,import-untyped"

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

try:  # torch's CUDA wheels ship Triton; without it the plain expression is the only path
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the CPU image has no Triton
    triton = None
#: Triton's interpreter (``TRITON_INTERPRET=1`` when Triton was imported) runs the kernels on CPU tensors.
_INTERPRETING = triton is not None and bool(triton.knobs.runtime.interpret)

LAYER_NORM_EPS = 1e-12  # BertConfig.layer_norm_eps
MAX_POSITIONS = 512  # BertConfig.max_position_embeddings as the workload sets it
TYPE_VOCAB = 2  # BertConfig.type_vocab_size
PAD_ID = 0  # BertConfig.pad_token_id: that embedding row starts at zero and gets no gradient
INIT_STD = 0.02  # BertConfig.initializer_range
#: The MLM decoder's matmuls run on the vocabulary padded to a multiple of this (16 bytes of bf16), the
#: padded logits sliced off before the loss: at BERT's 30,522 the logits' rows are not 16-byte aligned, and
#: eagerly cuBLAS's forward and backward took 5.8 ms where 30,528 takes 2.0 (one H200, bench/NOTES.md).
#: Compiled, inductor pads them itself where its benchmark says so; padded here, the step gained 0.2-0.5%.
VOCAB_ALIGN = 8
#: ``attention=`` names: which fused attention kernel ``scaled_dot_product_attention`` may use.
ATTENTION_BACKENDS: dict[str, SDPBackend | None] = {
    "auto": None,  # Triton's kernels in bf16/fp16 where they run, else PyTorch's
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "triton": None,  # this file's Triton kernels, with their own dropout (:func:`attention`)
}


# ---------------------------------------------------------------- dropout + residual + LayerNorm in Triton
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
    if _INTERPRETING:

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

    @triton.jit
    def _dropout_add_ln_fwd(  # noqa: PLR0917 - the kernel's and the op's schema are positional
        A,
        X,
        W,
        B,
        Y,
        Z,
        MEAN,
        RSTD,
        SEED,
        A_BIAS,
        n_cols,
        threshold,
        scale,
        eps,
        EIGHTH: tl.constexpr,
        HAS_BIAS: tl.constexpr,
        ROUNDS: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, 8 * EIGHTH)
        inside = cols < n_cols
        calls = row * (n_cols // 8) + tl.arange(0, EIGHTH)
        keep = tl.reshape(_keep(tl.load(SEED), calls, threshold, ROUNDS), (8 * EIGHTH,))
        a = tl.load(A + row * n_cols + cols, mask=inside, other=0.0).to(tl.float32)
        if HAS_BIAS:  # the bias of the matmul that made a, added here instead of in its epilogue
            a = (a.to(A.dtype.element_ty) + tl.load(A_BIAS + cols, mask=inside, other=0.0)).to(tl.float32)
        x = tl.load(X + row * n_cols + cols, mask=inside, other=0.0).to(tl.float32)
        z = tl.where(keep, a * scale, 0.0) + x
        z_stored = z.to(Z.dtype.element_ty)
        tl.store(Z + row * n_cols + cols, z_stored, mask=inside)
        z = z_stored.to(tl.float32)  # normalise what the backward will read back
        mean = tl.sum(z, axis=0) / n_cols
        d = tl.where(inside, z - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
        w = tl.load(W + cols, mask=inside, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=inside, other=0.0).to(tl.float32)
        tl.store(Y + row * n_cols + cols, (d * rstd * w + b).to(Y.dtype.element_ty), mask=inside)
        tl.store(MEAN + row, mean)
        tl.store(RSTD + row, rstd)

    @triton.jit
    def _dropout_add_ln_bwd(  # noqa: PLR0917 - the kernel's and the op's schema are positional
        DY,
        Z,
        MEAN,
        RSTD,
        W,
        SEED,
        DA,
        DX,
        DW,
        DB,
        DA_SUM,
        n_rows,
        n_cols,
        threshold,
        scale,
        EIGHTH: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        TILES: tl.constexpr,
        SUM_EACH_TILE: tl.constexpr,
        ROUNDS: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        program = tl.program_id(0)
        cols = tl.arange(0, 8 * EIGHTH)
        inside = cols < n_cols
        seed = tl.load(SEED)
        w = tl.load(W + cols, mask=inside, other=0.0).to(tl.float32)
        # the sums over rows: each tile's added up (SUM_EACH_TILE), or kept per row of the tile and added up
        # once at the end
        acc_rows: tl.constexpr = 1 if SUM_EACH_TILE else BLOCK_ROWS
        dw = tl.zeros((acc_rows, 8 * EIGHTH), dtype=tl.float32)
        db = tl.zeros((acc_rows, 8 * EIGHTH), dtype=tl.float32)
        da_sum = tl.zeros((acc_rows, 8 * EIGHTH), dtype=tl.float32)
        for tile in range(TILES):
            rows = (program.to(tl.int64) * TILES + tile) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            live = rows < n_rows
            here = live[:, None] & inside[None, :]
            at = rows[:, None] * n_cols + cols[None, :]
            dy = tl.load(DY + at, mask=here, other=0.0).to(tl.float32)
            z = tl.load(Z + at, mask=here, other=0.0).to(tl.float32)
            mean = tl.load(MEAN + rows, mask=live, other=0.0)
            rstd = tl.load(RSTD + rows, mask=live, other=0.0)
            xhat = tl.where(here, (z - mean[:, None]) * rstd[:, None], 0.0)
            g = dy * w[None, :]
            c1 = tl.sum(xhat * g, axis=1) / n_cols
            c2 = tl.sum(g, axis=1) / n_cols
            dz = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
            calls = rows[:, None] * (n_cols // 8) + tl.arange(0, EIGHTH)[None, :]
            keep = tl.reshape(_keep(seed, calls, threshold, ROUNDS), (BLOCK_ROWS, 8 * EIGHTH))
            tl.store(DX + at, dz.to(DX.dtype.element_ty), mask=here)
            da = tl.where(keep, dz * scale, 0.0).to(DA.dtype.element_ty)
            tl.store(DA + at, da, mask=here)
            if SUM_EACH_TILE:
                dw += tl.sum(dy * xhat, axis=0)[None, :]
                db += tl.sum(dy, axis=0)[None, :]
                da_sum += tl.sum(da.to(tl.float32), axis=0)[None, :]  # a's matmul's bias gradient
            else:
                dw += dy * xhat
                db += dy
                da_sum += da.to(tl.float32)
        tl.store(DW + program * n_cols + cols, tl.sum(dw, axis=0), mask=inside)
        tl.store(DB + program * n_cols + cols, tl.sum(db, axis=0), mask=inside)
        tl.store(DA_SUM + program * n_cols + cols, tl.sum(da_sum, axis=0), mask=inside)


def _launch_shape(n_cols: int) -> tuple[int, int]:
    """``(EIGHTH, num_warps)`` for rows of ``n_cols`` (a multiple of 8): an eighth row, a power of two."""
    eighth = triton.next_power_of_2(n_cols // 8)
    return eighth, min(8, max(1, eighth // 32))


#: The backward's tile: about this many elements (rows of a power of two), and programs per multiprocessor.
#: Measured on an H200 at 49,152 rows of 1,024 (bench/NOTES.md, ``bench/gpu_fused_norm.py --sweep``): one
#: row a tile, 8 programs per unit, 2 warps, 174 us; 2 rows 182-209 us, 4 rows 202-595 us.
BACKWARD_TILE_ELEMENTS = 1024
BACKWARD_PROGRAMS_PER_UNIT = 8


def _backward_shape(n_rows: int, n_cols: int, units: int) -> tuple[int, int, int]:
    """``(BLOCK_ROWS, TILES, programs)``: each program walks ``TILES`` tiles of ``BLOCK_ROWS`` rows.

    A tile holds about :data:`BACKWARD_TILE_ELEMENTS` elements (no more rows than a ``units``-th of all), so
    every load has many rows in flight; each program sums its tiles' weight and bias gradients, and there
    are about :data:`BACKWARD_PROGRAMS_PER_UNIT` programs per multiprocessor: few partial sums to add.
    """
    width = 8 * triton.next_power_of_2(n_cols // 8)
    block = max(1, min(BACKWARD_TILE_ELEMENTS // width, triton.next_power_of_2(triton.cdiv(n_rows, units))))
    block = 1 << (block.bit_length() - 1)  # a power of two
    tiles = triton.cdiv(triton.cdiv(n_rows, block), BACKWARD_PROGRAMS_PER_UNIT * units)
    return block, tiles, triton.cdiv(n_rows, block * tiles)


#: Elements of the backward's tile per thread (so its warps: 2 for 1,024 elements).
BACKWARD_ELEMENTS_PER_THREAD = 16
#: Whether the backward adds up each tile's rows for the weight, bias and matmul-bias gradients as it goes,
#: or keeps a sum per row of the tile and adds those up once at the end (the same at one row a tile).
BACKWARD_SUM_EACH_TILE = False


def _backward_warps(block: int, n_cols: int) -> int:
    """Warps for a tile of ``block`` rows: :data:`BACKWARD_ELEMENTS_PER_THREAD` per thread, 1 to 16 warps."""
    elements: int = block * 8 * triton.next_power_of_2(n_cols // 8)
    return min(16, max(1, elements // (32 * BACKWARD_ELEMENTS_PER_THREAD)))


@torch.library.custom_op("rollcall::dropout_add_layer_norm", mutates_args=())
def _fused_forward(  # noqa: PLR0917 - the kernel's and the op's schema are positional
    a: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    seed: torch.Tensor,
    p: float,
    eps: float,
    a_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(LayerNorm(dropout(a') + x), dropout(a') + x, mean, 1/std)`` over the last dimension; see above.

    ``a'`` is ``a + a_bias`` (the bias of the matmul that made ``a``), or ``a`` without ``a_bias``.
    """
    n_cols = a.size(-1)
    a2, x2 = a.reshape(-1, n_cols).contiguous(), x.reshape(-1, n_cols).contiguous()
    y, z = torch.empty_like(a2), torch.empty_like(a2)
    mean = torch.empty(a2.size(0), device=a.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    eighth, warps = _launch_shape(n_cols)
    _dropout_add_ln_fwd[(a2.size(0),)](
        a2,
        x2,
        weight,
        bias,
        y,
        z,
        mean,
        rstd,
        seed,
        a_bias if a_bias is not None else weight,  # not read without the bias
        n_cols,
        _drop_threshold(p),
        _scale(p),
        eps,
        EIGHTH=eighth,
        HAS_BIAS=a_bias is not None,
        ROUNDS=DROPOUT_ROUNDS,
        num_warps=warps,
    )
    return y.view_as(a), z.view_as(a), mean, rstd


@_fused_forward.register_fake
def _(  # noqa: PLR0917 - the kernel's and the op's schema are positional
    a: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    seed: torch.Tensor,
    p: float,
    eps: float,
    a_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = a.numel() // a.size(-1)
    stats = a.new_empty(rows, dtype=torch.float32)
    return torch.empty_like(a), torch.empty_like(a), stats, torch.empty_like(stats)


@torch.library.custom_op("rollcall::dropout_add_layer_norm_backward", mutates_args=())
def _fused_backward(  # noqa: PLR0917 - the kernel's and the op's schema are positional
    dy: torch.Tensor,
    z: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    seed: torch.Tensor,
    p: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_fused_forward` for ``(a, x, weight, bias, a_bias)`` from its first output's.

    ``a_bias``'s is the sum of ``a``'s over rows, whether the forward had that bias or not.
    """
    n_cols = z.size(-1)
    dy2, z2 = dy.reshape(-1, n_cols).contiguous(), z.reshape(-1, n_cols)
    n_rows = z2.size(0)
    units = torch.cuda.get_device_properties(z.device).multi_processor_count if z.is_cuda else 2
    block, tiles, programs = _backward_shape(n_rows, n_cols, units)
    da, dx = torch.empty_like(z2), torch.empty_like(z2)
    dw = torch.empty(programs, n_cols, device=z.device, dtype=torch.float32)
    db, da_sum = torch.empty_like(dw), torch.empty_like(dw)
    eighth, _ = _launch_shape(n_cols)
    _dropout_add_ln_bwd[(programs,)](
        dy2,
        z2,
        mean,
        rstd,
        weight,
        seed,
        da,
        dx,
        dw,
        db,
        da_sum,
        n_rows,
        n_cols,
        _drop_threshold(p),
        _scale(p),
        EIGHTH=eighth,
        BLOCK_ROWS=block,
        TILES=tiles,
        SUM_EACH_TILE=BACKWARD_SUM_EACH_TILE,
        ROUNDS=DROPOUT_ROUNDS,
        num_warps=_backward_warps(block, n_cols),
    )
    sums = (t.sum(0).to(weight.dtype) for t in (dw, db, da_sum))
    return (da.view_as(z), dx.view_as(z), *sums)  # type: ignore[return-value]


@_fused_backward.register_fake
def _(  # noqa: PLR0917 - the kernel's and the op's schema are positional
    dy: torch.Tensor,
    z: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    seed: torch.Tensor,
    p: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    sums = (torch.empty_like(weight) for _ in range(3))
    return (torch.empty_like(z), torch.empty_like(z), *sums)  # type: ignore[return-value]


def _setup_context(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:  # type: ignore[type-arg]
    _, _, weight, _, seed, p, _, a_bias = inputs
    _, z, mean, rstd = output
    ctx.save_for_backward(z, mean, rstd, weight, seed)
    ctx.p = p  # type: ignore[attr-defined]
    ctx.has_bias = a_bias is not None  # type: ignore[attr-defined]


def _autograd_backward(
    ctx: torch.autograd.function.FunctionCtx, dy: torch.Tensor, *_: torch.Tensor
) -> tuple[torch.Tensor | None, ...]:
    z, mean, rstd, weight, seed = ctx.saved_tensors  # type: ignore[attr-defined]
    da, dx, dw, db, d_bias = _fused_backward(dy, z, mean, rstd, weight, seed, ctx.p)  # type: ignore[attr-defined]
    return da, dx, dw, db, None, None, None, d_bias if ctx.has_bias else None  # type: ignore[attr-defined]


_fused_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def fused_norm_available(t: torch.Tensor) -> bool:
    """Whether :func:`dropout_add_layer_norm` runs the Triton kernels for ``t``: CUDA, or the interpreter."""
    return triton is not None and t.size(-1) % 8 == 0 and (t.is_cuda or _INTERPRETING)


def dropout_add_layer_norm(
    a: torch.Tensor,
    x: torch.Tensor,
    norm: nn.LayerNorm,
    p: float,
    training: bool,
    *,
    fused: bool,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``norm(dropout(a + bias, p) + x)``: the Triton kernels where ``fused`` and available, else PyTorch's.

    Without ``bias``, ``norm(dropout(a, p) + x)``.

    The kernels keep one dtype throughout, so tensors of several (autocast's bf16 activations beside fp32
    parameters) take PyTorch's ops, whose LayerNorm autocast runs in float32.
    """
    same_dtype = a.dtype == x.dtype == norm.weight.dtype and (bias is None or bias.dtype == a.dtype)
    if not (fused and same_dtype and fused_norm_available(a)):
        a = a if bias is None else a + bias
        return norm(F.dropout(a, p, training) + x)  # type: ignore[no-any-return]
    p = p if training else 0.0
    seed = torch.randint(0, 2**31 - 1, (1,), device=a.device, dtype=torch.int64)
    out: torch.Tensor = _fused_forward(a, x, norm.weight, norm.bias, seed, p, norm.eps, bias)[0]
    return out


# ---------------------------------------------------------------- bias + GELU in Triton
#
# The intermediate layer's GELU(h + b), h being its matmul's output without the bias (BERT's exact, erf
# GELU, computed in float32). The forward saves h; the backward adds the bias again, writes
# dh = dy * GELU'(h + b) and sums the bias's gradient per program over its rows in float32, then over
# programs. Against the compiler's fusion of the same chain, the backward neither writes GELU(h + b) again
# (the next matmul saved it as its input) nor reads dh a second time for the bias's gradient.

#: Launch shapes measured on an H200 at 49,152 rows of 4,096 (bench/NOTES.md, ``bench/gpu_fused_gelu.py
#: --sweep``): the forward's elements per program; the backward's tile (rows x columns) and programs per
#: multiprocessor; warps for both.
GELU_BLOCK = 2048
GELU_BACKWARD_TILE = (32, 128)
GELU_BACKWARD_PROGRAMS_PER_UNIT = 8
GELU_WARPS = 4

#: The standard normal's CDF in the kernels (``bench/gpu_fused_gelu.py --cdfs`` times each): ``"erf"``:
#: libdevice's erf; ``"series"``: an erfc series whose relative error is below 1.2e-7 (Numerical Recipes'
#: ``erfcc``: one exp, no branch; accurate in relative terms in the far left tail, where ``1 + erf``
#: cancels); ``"shared-exp"``: Abramowitz and Stegun's 7.1.26 in erfc form (absolute error below 1.5e-7,
#: as accurate as the others against float64 in float32, ``tests/unit/fused_norm_cases.py``), a
#: polynomial times exp(-u**2 / 2), the exp the backward's density needs too: one exp there, not two. On an
#: H200 the backward took 383 us with it against 593 (series) and 442 (erf), and the step ran 1.9% faster
#: (bench/NOTES.md).
GELU_CDF = "shared-exp"
GELU_CDFS = ("erf", "series", "shared-exp")

if triton is not None:

    @triton.jit
    def _normal_cdf_pdf(u, CDF: tl.constexpr):  # pragma: no cover - runs on a GPU, or in the interpreter
        """``(Phi(u), phi(u))``, Phi(u) = erfc(-u / sqrt(2)) / 2 and its derivative, in float32."""
        e = tl.exp(-0.5 * u * u)
        if CDF == "series":
            z = -u * 0.7071067811865476
            t = 1.0 / (1.0 + 0.5 * tl.abs(z))
            poly = 0.17087277 * t - 0.82215223
            poly = poly * t + 1.48851587
            poly = poly * t - 1.13520398
            poly = poly * t + 0.27886807
            poly = poly * t - 0.18628806
            poly = poly * t + 0.09678418
            poly = poly * t + 0.37409196
            poly = poly * t + 1.00002368
            poly = poly * t - 1.26551223
            r = t * tl.exp(poly - z * z)  # erfc(|z|)
            cdf = 0.5 * tl.where(z >= 0, r, 2.0 - r)
        elif CDF == "shared-exp":
            z = -u * 0.7071067811865476
            t = 1.0 / (1.0 + 0.3275911 * tl.abs(z))
            poly = 1.061405429 * t - 1.453152027
            poly = poly * t + 1.421413741
            poly = poly * t - 0.284496736
            poly = poly * t + 0.254829592
            r = t * poly * e  # erfc(|z|), e = exp(-z**2)
            cdf = 0.5 * tl.where(z >= 0, r, 2.0 - r)
        else:
            cdf = 0.5 * (1.0 + tl.math.erf(u * 0.7071067811865476))
        return cdf, e * 0.3989422804014327  # 1 / sqrt(2 pi)

    @triton.jit
    def _bias_gelu_fwd(  # noqa: PLR0917 - the kernel's and the op's schema are positional
        H, B, Y, n_elements, N: tl.constexpr, BLOCK: tl.constexpr, CDF: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        at = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = at < n_elements
        u = tl.load(H + at, mask=inside, other=0.0).to(tl.float32)
        u += tl.load(B + at % N, mask=inside, other=0.0).to(tl.float32)
        cdf, _ = _normal_cdf_pdf(u, CDF)
        y = u * cdf
        tl.store(Y + at, y.to(Y.dtype.element_ty), mask=inside)

    @triton.jit
    def _bias_gelu_bwd(  # noqa: PLR0917 - the kernel's and the op's schema are positional
        DY,
        H,
        B,
        DH,
        DB,
        n_rows,
        N: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_COLS: tl.constexpr,
        TILES: tl.constexpr,
        CDF: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        group = tl.program_id(1)
        cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        inside = cols < N
        b = tl.load(B + cols, mask=inside, other=0.0).to(tl.float32)
        db = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)  # reduced over rows once, at the end
        for tile in range(TILES):
            rows = (group.to(tl.int64) * TILES + tile) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            here = (rows < n_rows)[:, None] & inside[None, :]
            at = rows[:, None] * N + cols[None, :]
            dy = tl.load(DY + at, mask=here, other=0.0).to(tl.float32)
            u = tl.load(H + at, mask=here, other=0.0).to(tl.float32) + b[None, :]
            cdf, pdf = _normal_cdf_pdf(u, CDF)
            dh = (dy * (cdf + u * pdf)).to(DH.dtype.element_ty)
            tl.store(DH + at, dh, mask=here)
            db += dh.to(tl.float32)  # what the matmul's bias gradient sums: dh as stored
        tl.store(DB + group * N + cols, tl.sum(db, axis=0), mask=inside)


def _gelu_backward_shape(n_rows: int, n_cols: int, units: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK_ROWS, BLOCK_COLS, TILES, column blocks, row groups)`` of the bias+GELU backward's grid."""
    block_rows, block_cols = GELU_BACKWARD_TILE
    block_cols = min(block_cols, triton.next_power_of_2(n_cols))
    col_blocks = triton.cdiv(n_cols, block_cols)
    groups = max(1, triton.cdiv(GELU_BACKWARD_PROGRAMS_PER_UNIT * units, col_blocks))
    tiles = triton.cdiv(triton.cdiv(n_rows, block_rows), groups)
    return block_rows, block_cols, tiles, col_blocks, triton.cdiv(n_rows, block_rows * tiles)


@torch.library.custom_op("rollcall::bias_gelu", mutates_args=())
def _bias_gelu(h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``GELU(h + bias)`` (erf GELU) over ``h``'s last dimension; see above."""
    h2 = h.contiguous()
    y = torch.empty_like(h2)
    n = h2.numel()
    _bias_gelu_fwd[(triton.cdiv(n, GELU_BLOCK),)](
        h2, bias, y, n, N=h2.size(-1), BLOCK=GELU_BLOCK, CDF=GELU_CDF, num_warps=GELU_WARPS
    )
    return y


@_bias_gelu.register_fake
def _(h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(h, memory_format=torch.contiguous_format)


@torch.library.custom_op("rollcall::bias_gelu_backward", mutates_args=())
def _bias_gelu_backward(
    dy: torch.Tensor, h: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_bias_gelu` for ``(h, bias)`` from that of its output."""
    n_cols = h.size(-1)
    dy2, h2 = dy.reshape(-1, n_cols).contiguous(), h.reshape(-1, n_cols).contiguous()
    n_rows = h2.size(0)
    units = torch.cuda.get_device_properties(h.device).multi_processor_count if h.is_cuda else 2
    block_rows, block_cols, tiles, col_blocks, groups = _gelu_backward_shape(n_rows, n_cols, units)
    dh = torch.empty_like(h2)
    db = torch.empty(groups, n_cols, device=h.device, dtype=torch.float32)
    _bias_gelu_bwd[(col_blocks, groups)](
        dy2,
        h2,
        bias,
        dh,
        db,
        n_rows,
        N=n_cols,
        BLOCK_ROWS=block_rows,
        BLOCK_COLS=block_cols,
        TILES=tiles,
        CDF=GELU_CDF,
        num_warps=GELU_WARPS,
    )
    return dh.view(h.shape), db.sum(0).to(bias.dtype)


@_bias_gelu_backward.register_fake
def _(dy: torch.Tensor, h: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(h, memory_format=torch.contiguous_format), torch.empty_like(bias)


def _gelu_setup_context(
    ctx: torch.autograd.function.FunctionCtx,
    inputs: tuple,  # type: ignore[type-arg]
    output: torch.Tensor,
) -> None:
    ctx.save_for_backward(*inputs)


def _gelu_autograd_backward(
    ctx: torch.autograd.function.FunctionCtx, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    h, bias = ctx.saved_tensors  # type: ignore[attr-defined]
    return _bias_gelu_backward(dy, h, bias)  # type: ignore[no-any-return]


_bias_gelu.register_autograd(_gelu_autograd_backward, setup_context=_gelu_setup_context)


def bias_gelu(h: torch.Tensor, bias: torch.Tensor, *, fused: bool) -> torch.Tensor:
    """``GELU(h + bias)``: the Triton kernels where ``fused`` and available, else PyTorch's ops.

    The kernels keep one dtype, so autocast's bf16 ``h`` beside a float32 bias takes PyTorch's ops.
    """
    if fused and triton is not None and h.dtype == bias.dtype and (h.is_cuda or _INTERPRETING):
        return _bias_gelu(h, bias)  # type: ignore[no-any-return]
    return F.gelu(h + bias)


# ---------------------------------------------------------------- attention with dropout in Triton
#
# Scaled dot-product attention straight from the query/key/value projection's output ([batch, seq,
# 3 * hidden]: each row's queries, then keys, then values, head by head), no mask, dropout on the
# probabilities. The forward is flash attention's (an online softmax over blocks of keys; each row's
# log-sum-exp saved, base 2); the backward recomputes the probabilities from it, one kernel for the keys'
# and values' gradients (a block of keys walking the queries), one for the queries' (a block of queries
# walking the keys), and writes all three into one tensor laid out as the projection's output, so
# nothing stacks them. The dropout decisions are bits, 32 a word: each head's [seq, seq] probabilities in
# tiles of 64 x 64 (padded), tile (column c, row r) at words (c * tiles + r) * 128 on, and bit b + 2j + 16h
# of its word 32w + l is row 16w + 8h + l // 4, column 8j + 2 (l % 4) + b of the tile: the elements that
# thread l of warp w holds of a Hopper MMA's 64 x 64 result with four warps, so a kernel turns a tile's 128
# words into its mask without moving data between threads (where it used a byte of eight neighbours, the
# forward's mask went through shared memory). Byte c of the head's word g is Philox call (bh * tiles *
# tiles * 128 + g) * 4 + c's eight decisions, 16-bit halves below round(p * 65536) dropped, as the
# LayerNorm kernels' elements are. The forward draws them and stores the words; both backward kernels read
# them, drawing nothing, since Philox's ten rounds a call cost the forward as much again as its matmuls at
# seq 512 when drawn three times. Blocks are multiples of 64 both ways. ``--attention triton``.

#: Query and key block sizes of the forward and of the backward kernels, and (forward, backward) warps.
ATTENTION_FORWARD_BLOCKS = (128, 64)
ATTENTION_BACKWARD_BLOCKS = (64, 64)
ATTENTION_WARPS = (8, 4)
#: Sequences up to this long take one backward kernel (:func:`_attention_bwd_whole`), with these warps. The
#: kernels are ``--attention auto``'s choice in bf16 and fp16: faster than cuDNN's in the step at seq 128 and
#: 512 on an H200 (bench/NOTES.md).
ATTENTION_WHOLE_SEQ = 128
ATTENTION_WHOLE_WARPS = 8
_LOG2E = 1.4426950408889634

if triton is not None:

    @triton.jit
    def _attention_words(  # noqa: PLR0917 - a Triton function's arguments are positional
        bh, row0, col0, S: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """(the words of the tiles of rows ``row0``.. and columns ``col0``.. of head ``bh``; which exist).

        Shaped ``[COLS // 64, ROWS // 64, 128]``: a block's tiles, each tile's 128 words.
        """
        T: tl.constexpr = (S + 63) // 64  # tiles a side
        ct = col0 // 64 + tl.arange(0, COLS // 64)
        rt = row0 // 64 + tl.arange(0, ROWS // 64)
        tiles = (bh.to(tl.int64) * T + ct[:, None]) * T + rt[None, :]
        return tiles[:, :, None] * 128 + tl.arange(0, 128)[None, None, :], (rt < T)[None, :, None]

    @triton.jit
    def _attention_draw(
        seed, words, threshold, ROUNDS: tl.constexpr
    ):  # pragma: no cover - GPU or interpreter
        """The kept bits of ``words``: byte c of word g is Philox call 4g + c's eight decisions."""
        word = _attention_kept_byte(seed, words * 4, threshold, ROUNDS)
        for c in tl.static_range(1, 4):
            word |= _attention_kept_byte(seed, words * 4 + c, threshold, ROUNDS) << (8 * c)
        return word

    @triton.jit
    def _attention_kept_byte(
        seed, calls, threshold, ROUNDS: tl.constexpr
    ):  # pragma: no cover - GPU or interpreter
        """Eight decisions of each Philox call: bits 2i and 2i + 1 from number i's low and high halves."""
        r0, r1, r2, r3 = _philox(seed, calls, ROUNDS)
        bits = _attention_kept_pair(r0, threshold) | (_attention_kept_pair(r1, threshold) << 2)
        return bits | (_attention_kept_pair(r2, threshold) << 4) | (_attention_kept_pair(r3, threshold) << 6)

    @triton.jit
    def _attention_kept_pair(r, threshold):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """Bits 0 and 1: whether the low and the high 16-bit half of ``r`` keep their elements."""
        low = ((r & 0xFFFF).to(tl.int32) >= threshold).to(tl.int32)
        return low | (((r >> 16).to(tl.int32) >= threshold).to(tl.int32) << 1)

    @triton.jit
    def _attention_unpack(
        words, ROWS: tl.constexpr, COLS: tl.constexpr
    ):  # pragma: no cover - GPU or interpreter
        """A block's kept probabilities (``[ROWS, COLS]``) from its tiles' words (:func:`_attention_words`).

        Bit b + 2j + 16h of word 32w + l is row 16w + 8h + l // 4, column 8j + 2 (l % 4) + b of its tile.
        """
        e = tl.reshape(words, (COLS // 64, ROWS // 64, 4, 8, 4))  # tile column, tile row, w, l // 4, l % 4
        e = tl.join(e, e >> 1)  # b
        e = tl.join(e, e >> 2)  # the three bits of j
        e = tl.join(e, e >> 4)
        e = tl.join(e, e >> 8)
        e = tl.join(e, e >> 16)  # h
        e = tl.permute(e, (1, 2, 9, 3, 0, 8, 7, 6, 4, 5))
        return tl.reshape(e & 1, (ROWS, COLS)) != 0

    @triton.jit
    def _attention_fwd(  # noqa: PLR0917 - a kernel's arguments are positional
        QKV,
        OUT,
        LSE,
        KEPT,
        SEED,
        S: tl.constexpr,
        threshold,
        drop_scale,
        qk_scale,
        HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DROPOUT: tl.constexpr,
        ROUNDS: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        hidden: tl.constexpr = HEADS * D
        bh = tl.program_id(1)
        n, h = bh // HEADS, bh % HEADS
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, D)
        base = QKV + n.to(tl.int64) * S * 3 * hidden + h * D
        q = tl.load(base + rows[:, None] * 3 * hidden + dims[None, :], mask=rows[:, None] < S, other=0.0)
        seed = tl.load(SEED)
        m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, D), tl.float32)
        for start in range(0, S, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            at = cols[:, None] * 3 * hidden + dims[None, :]
            if DROPOUT:  # drawn before the scores, so Philox's registers are free again for them
                words, exist = _attention_words(bh, tl.program_id(0) * BLOCK_M, start, S, BLOCK_M, BLOCK_N)
                kept = _attention_draw(seed, words, threshold, ROUNDS)
                tl.store(KEPT + words, kept, mask=exist)
            k = tl.load(base + hidden + at, mask=cols[:, None] < S, other=0.0)
            v = tl.load(base + 2 * hidden + at, mask=cols[:, None] < S, other=0.0)
            qk = tl.dot(q, tl.trans(k))
            if S % BLOCK_N:  # a partial last block of keys
                qk = tl.where(cols[None, :] < S, qk, float("-inf"))
            # the scale (positive) applied to the row's maximum, then in the exponent's one FFMA
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            p = p.to(v.dtype)
            if DROPOUT:
                p = tl.where(_attention_unpack(kept, BLOCK_M, BLOCK_N), p, 0.0)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new
        out = acc * (drop_scale / l_i)[:, None]
        o_at = OUT + n.to(tl.int64) * S * hidden + h * D + rows[:, None] * hidden + dims[None, :]
        tl.store(o_at, out.to(OUT.dtype.element_ty), mask=rows[:, None] < S)
        tl.store(LSE + bh.to(tl.int64) * S + rows, m_i + tl.math.log2(l_i), mask=rows < S)

    @triton.jit
    def _attention_delta(
        OUT, o_at, inside, do, drop_scale
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """Each row's sum of dO * O (what softmax's backward subtracts) over the dropout's scale.

        :func:`_attention_bwd_scores` leaves that scale out; the callers apply it once to the sums.
        """
        o = tl.load(OUT + o_at, mask=inside, other=0.0).to(tl.float32)
        return tl.sum(o * do.to(tl.float32), 1) / drop_scale

    @triton.jit
    def _attention_keys(  # noqa: PLR0917 - a Triton function's arguments are positional
        QKV, base, cols, S, HIDDEN: tl.constexpr, D: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """The keys and values of ``cols`` (zero past ``S``) of the head at ``base``."""
        at = base + cols[:, None] * 3 * HIDDEN + tl.arange(0, D)[None, :]
        k = tl.load(QKV + HIDDEN + at, mask=cols[:, None] < S, other=0.0)
        v = tl.load(QKV + 2 * HIDDEN + at, mask=cols[:, None] < S, other=0.0)
        return k, v

    @triton.jit
    def _attention_queries(  # noqa: PLR0917 - a Triton function's arguments are positional
        QKV, DO, LSE, bh, base, o_base, rows, S, HIDDEN: tl.constexpr, D: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """The queries of ``rows`` (zero past ``S``), their output's gradient and log-sum-exp."""
        dims = tl.arange(0, D)
        inside = rows[:, None] < S
        q = tl.load(QKV + base + rows[:, None] * 3 * HIDDEN + dims[None, :], mask=inside, other=0.0)
        do = tl.load(DO + o_base + rows[:, None] * HIDDEN + dims[None, :], mask=inside, other=0.0)
        lse = tl.load(LSE + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
        return q, do, lse

    @triton.jit
    def _attention_bwd_scores(  # noqa: PLR0917 - the two backward kernels' shared step
        q,
        k,
        v,
        do,
        lse,
        delta,
        rows,
        row0,
        cols0,
        bh,
        KEPT,
        S: tl.constexpr,
        qk_scale,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DROPOUT: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """(the kept probabilities; the scores' gradient) of one block of queries by one of keys.

        Both without the dropout's scale, which the callers apply once to the sums they make of them
        (``delta``: :func:`_attention_delta`'s, over that scale).
        """
        cols = cols0 + tl.arange(0, BLOCK_N)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        p = tl.math.exp2(qk - lse[:, None])
        if S % BLOCK_M or S % BLOCK_N:  # a partial last block
            p = tl.where((rows[:, None] < S) & (cols[None, :] < S), p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        if DROPOUT:
            words, exist = _attention_words(bh, row0, cols0, S, BLOCK_M, BLOCK_N)
            keep = _attention_unpack(tl.load(KEPT + words, mask=exist, other=0), BLOCK_M, BLOCK_N)
            kept = tl.where(keep, p, 0.0)
            dp = tl.where(keep, dp, 0.0)
        else:
            kept = p
        return kept, p * (dp - delta[:, None])

    @triton.jit
    def _attention_bwd(  # noqa: PLR0917 - a kernel's arguments are positional
        QKV,
        OUT,
        DO,
        LSE,
        DELTA,
        DQKV,
        DB,
        KEPT,
        S: tl.constexpr,
        drop_scale,
        qk_scale,
        sm_scale,
        HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DROPOUT: tl.constexpr,
        FOR_QUERIES: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """The gradients of a block of keys and values, walking the queries; or (``FOR_QUERIES``) of queries.

        The queries' kernel runs first and stores each of its rows' sum of dO * O (the share of the
        probabilities' gradient that softmax's backward subtracts), which the keys' kernel reads. Either sums
        its block's rows into the projection's bias's gradient (rows past S are zero), one row of partial sums
        per block.
        """
        hidden: tl.constexpr = HEADS * D
        bh = tl.program_id(1)
        n, h = bh // HEADS, bh % HEADS
        dims = tl.arange(0, D)
        base = n.to(tl.int64) * S * 3 * hidden + h * D
        o_base = n.to(tl.int64) * S * hidden + h * D
        db = DB + (n.to(tl.int64) * tl.num_programs(0) + tl.program_id(0)) * 3 * hidden + h * D + dims
        if FOR_QUERIES:
            rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
            q, do, lse = _attention_queries(QKV, DO, LSE, bh, base, o_base, rows, S, hidden, D)
            delta = _attention_delta(
                OUT, o_base + rows[:, None] * hidden + dims[None, :], rows[:, None] < S, do, drop_scale
            )
            tl.store(DELTA + bh.to(tl.int64) * S + rows, delta, mask=rows < S)
            dq = tl.zeros((BLOCK_M, D), tl.float32)
            for start in range(0, S, BLOCK_N):
                k, v = _attention_keys(QKV, base, start + tl.arange(0, BLOCK_N), S, hidden, D)
                _, ds = _attention_bwd_scores(
                    q,
                    k,
                    v,
                    do,
                    lse,
                    delta,
                    rows,
                    tl.program_id(0) * BLOCK_M,
                    start,
                    bh,
                    KEPT,
                    S,
                    qk_scale,
                    BLOCK_M,
                    BLOCK_N,
                    DROPOUT,
                )
                dq += tl.dot(ds.to(k.dtype), k)
            dq = (dq * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
            tl.store(DQKV + base + rows[:, None] * 3 * hidden + dims[None, :], dq, mask=rows[:, None] < S)
            tl.store(db, tl.sum(dq.to(tl.float32), 0))
        else:
            cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
            at = base + cols[:, None] * 3 * hidden + dims[None, :]
            k, v = _attention_keys(QKV, base, cols, S, hidden, D)
            dk = tl.zeros((BLOCK_N, D), tl.float32)
            dv = tl.zeros((BLOCK_N, D), tl.float32)
            for start in range(0, S, BLOCK_M):
                rows = start + tl.arange(0, BLOCK_M)
                q, do, lse = _attention_queries(QKV, DO, LSE, bh, base, o_base, rows, S, hidden, D)
                delta = tl.load(DELTA + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
                kept, ds = _attention_bwd_scores(
                    q,
                    k,
                    v,
                    do,
                    lse,
                    delta,
                    rows,
                    start,
                    tl.program_id(0) * BLOCK_N,
                    bh,
                    KEPT,
                    S,
                    qk_scale,
                    BLOCK_M,
                    BLOCK_N,
                    DROPOUT,
                )
                dv += tl.dot(tl.trans(kept.to(do.dtype)), do)
                dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
            dk = (dk * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
            dv = (dv * drop_scale).to(DQKV.dtype.element_ty)
            tl.store(DQKV + hidden + at, dk, mask=cols[:, None] < S)
            tl.store(DQKV + 2 * hidden + at, dv, mask=cols[:, None] < S)
            tl.store(db + hidden, tl.sum(dk.to(tl.float32), 0))
            tl.store(db + 2 * hidden, tl.sum(dv.to(tl.float32), 0))

    @triton.jit
    def _attention_bwd_whole(  # noqa: PLR0917 - a kernel's arguments are positional
        QKV,
        OUT,
        DO,
        LSE,
        DQKV,
        DB,
        KEPT,
        S: tl.constexpr,
        drop_scale,
        qk_scale,
        sm_scale,
        HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        DROPOUT: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """Every gradient of one head whose queries and keys all fit one block (``S`` up to ``BLOCK``).

        The scores and their gradient are computed once rather than by each of the two kernels above, and
        each row's sum of dO * O here rather than by a kernel of its own; the bias's partial sums are one row
        a batch element.
        """
        hidden: tl.constexpr = HEADS * D
        bh = tl.program_id(0)
        n, h = bh // HEADS, bh % HEADS
        dims = tl.arange(0, D)
        rows = tl.arange(0, BLOCK)
        base = n.to(tl.int64) * S * 3 * hidden + h * D
        o_at = n.to(tl.int64) * S * hidden + h * D + rows[:, None] * hidden + dims[None, :]
        inside = rows[:, None] < S
        at = base + rows[:, None] * 3 * hidden + dims[None, :]
        q = tl.load(QKV + at, mask=inside, other=0.0)
        k, v = _attention_keys(QKV, base, rows, S, hidden, D)
        do = tl.load(DO + o_at, mask=inside, other=0.0)
        delta = _attention_delta(OUT, o_at, inside, do, drop_scale)
        lse = tl.load(LSE + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
        kept, ds = _attention_bwd_scores(
            q, k, v, do, lse, delta, rows, 0, 0, bh, KEPT, S, qk_scale, BLOCK, BLOCK, DROPOUT
        )
        dq = (tl.dot(ds.to(k.dtype), k) * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
        dk = (tl.dot(tl.trans(ds.to(q.dtype)), q) * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
        dv = (tl.dot(tl.trans(kept.to(do.dtype)), do) * drop_scale).to(DQKV.dtype.element_ty)
        tl.store(DQKV + at, dq, mask=inside)
        tl.store(DQKV + hidden + at, dk, mask=inside)
        tl.store(DQKV + 2 * hidden + at, dv, mask=inside)
        db = DB + n.to(tl.int64) * 3 * hidden + h * D + dims
        tl.store(db, tl.sum(dq.to(tl.float32), 0))
        tl.store(db + hidden, tl.sum(dk.to(tl.float32), 0))
        tl.store(db + 2 * hidden, tl.sum(dv.to(tl.float32), 0))


def _attention_shape(qkv: torch.Tensor, heads: int) -> tuple[int, int, int, int]:
    """(batch, seq, hidden, head size) of a ``[batch, seq, 3 * hidden]`` projection output."""
    batch, seq, three_hidden = qkv.shape
    return batch, seq, three_hidden // 3, three_hidden // 3 // heads


@torch.library.custom_op("rollcall::attention", mutates_args=())
def _attention(
    qkv: torch.Tensor, bias: torch.Tensor, seed: torch.Tensor, p: float, heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(attention output [batch, seq, hidden], each row's log-sum-exp (base 2), the kept probabilities)``.

    See above; the kept probabilities are bits, 32 a word (``[batch * heads, tiles * tiles * 128]`` int32 for
    ``tiles`` of 64 a side; empty at ``p`` 0), so the backward reads them rather than drawing them twice
    more. ``bias`` is the projection's (already in ``qkv``): not read, its gradient is the backward's.
    """
    batch, seq, hidden, d = _attention_shape(qkv, heads)
    qkv = qkv.contiguous()
    out = qkv.new_empty(batch, seq, hidden)
    lse = torch.empty(batch * heads, seq, device=qkv.device, dtype=torch.float32)
    kept = _attention_kept_bits(qkv, heads, p)
    block_m, block_n = ATTENTION_FORWARD_BLOCKS
    _attention_fwd[(triton.cdiv(seq, block_m), batch * heads)](
        qkv,
        out,
        lse,
        kept,
        seed,
        seq,
        _drop_threshold(p),
        _scale(p),
        d**-0.5 * _LOG2E,
        HEADS=heads,
        D=d,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        DROPOUT=p > 0,
        ROUNDS=DROPOUT_ROUNDS,
        num_warps=ATTENTION_WARPS[0],
    )
    return out, lse, kept


def _attention_kept_bits(qkv: torch.Tensor, heads: int, p: float) -> torch.Tensor:
    """Room for :func:`_attention`'s kept probabilities, a bit each (none without dropout)."""
    batch, seq, _, _ = _attention_shape(qkv, heads)
    tiles = -(-seq // 64)
    shape = (batch * heads, tiles * tiles * 128) if p > 0 else (0,)
    return torch.empty(shape, device=qkv.device, dtype=torch.int32)


@_attention.register_fake
def _(
    qkv: torch.Tensor, bias: torch.Tensor, seed: torch.Tensor, p: float, heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, seq, hidden, _ = _attention_shape(qkv, heads)
    lse = qkv.new_empty(batch * heads, seq, dtype=torch.float32)
    return qkv.new_empty(batch, seq, hidden), lse, _attention_kept_bits(qkv, heads, p)


@torch.library.custom_op("rollcall::attention_backward", mutates_args=())
def _attention_backward(  # noqa: PLR0917 - the op's schema is positional
    dout: torch.Tensor,
    qkv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    kept: torch.Tensor,
    p: float,
    heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_attention`'s input (laid out as it) and of the projection's bias (float32)."""
    batch, seq, _, d = _attention_shape(qkv, heads)
    qkv, dout = qkv.contiguous(), dout.contiguous()
    dqkv = torch.empty_like(qkv)
    if seq <= ATTENTION_WHOLE_SEQ:
        db = torch.empty(batch, qkv.size(-1), device=qkv.device, dtype=torch.float32)
        _attention_bwd_whole[(batch * heads,)](
            qkv,
            out,
            dout,
            lse,
            dqkv,
            db,
            kept,
            seq,
            _scale(p),
            d**-0.5 * _LOG2E,
            d**-0.5,
            HEADS=heads,
            D=d,
            BLOCK=max(64, triton.next_power_of_2(seq)),
            DROPOUT=p > 0,
            num_warps=ATTENTION_WHOLE_WARPS,
        )
        return dqkv, db.sum(0)
    delta = torch.empty_like(lse)
    block_m, block_n = ATTENTION_BACKWARD_BLOCKS
    # the bias's gradient summed per block of rows by both kernels, then over blocks
    blocks = max(triton.cdiv(seq, block_m), triton.cdiv(seq, block_n))
    db = torch.zeros(batch * blocks, qkv.size(-1), device=qkv.device, dtype=torch.float32)
    args = (
        qkv,
        out,
        dout,
        lse,
        delta,
        dqkv,
        db,
        kept,
        seq,
        _scale(p),
        d**-0.5 * _LOG2E,
        d**-0.5,
    )
    shape = {"HEADS": heads, "D": d, "BLOCK_M": block_m, "BLOCK_N": block_n, "DROPOUT": p > 0}
    for for_queries, block in ((True, block_m), (False, block_n)):  # the queries' first: they sum dO * O
        _attention_bwd[(triton.cdiv(seq, block), batch * heads)](
            *args, **shape, FOR_QUERIES=for_queries, num_warps=ATTENTION_WARPS[1]
        )
    return dqkv, db.sum(0)


@_attention_backward.register_fake
def _(  # noqa: PLR0917 - the op's schema is positional
    dout: torch.Tensor,
    qkv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    kept: torch.Tensor,
    p: float,
    heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    return dqkv, qkv.new_empty(qkv.size(-1), dtype=torch.float32)


def _attention_setup_context(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:  # type: ignore[type-arg]
    qkv, bias, _, p, heads = inputs
    out, lse, kept = output
    ctx.save_for_backward(qkv, out, lse, kept)
    ctx.p, ctx.heads, ctx.bias_dtype = p, heads, bias.dtype  # type: ignore[attr-defined]


def _attention_autograd_backward(
    ctx: torch.autograd.function.FunctionCtx, dout: torch.Tensor, *_: torch.Tensor
) -> tuple[torch.Tensor | None, ...]:
    qkv, out, lse, kept = ctx.saved_tensors  # type: ignore[attr-defined]
    dqkv, db = _attention_backward(dout, qkv, out, lse, kept, ctx.p, ctx.heads)  # type: ignore[attr-defined]
    return dqkv, db.to(ctx.bias_dtype), None, None, None  # type: ignore[attr-defined]


_attention.register_autograd(_attention_autograd_backward, setup_context=_attention_setup_context)


def triton_attention_available(device: torch.device, seq: int, head_size: int) -> bool:
    """Whether :func:`attention` can run here.

    On CUDA or in the interpreter, for a sequence length that is a multiple of 8 and a head size that is a
    power of two from 16.
    """
    return (
        triton is not None
        and (device.type == "cuda" or _INTERPRETING)
        and seq % 8 == 0
        and head_size >= 16
        and head_size & (head_size - 1) == 0
    )


def _half_precision(x: torch.Tensor) -> bool:
    """Whether a layer taking ``x`` computes in bf16 or fp16 (``x``'s own, or autocast's).

    The kernels' matmuls then match PyTorch's; in float32 they would round to tf32 where PyTorch's would not.
    """
    halves = (torch.bfloat16, torch.float16)
    kind = x.device.type
    return x.dtype in halves or (torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) in halves)


def attention(qkv: torch.Tensor, bias: torch.Tensor, heads: int, p: float) -> torch.Tensor:
    """Attention of ``qkv`` (``[batch, seq, 3 * hidden]``) with dropout ``p``: ``[batch, seq, hidden]``.

    The Triton kernels above (:func:`triton_attention_available`); ``bias`` is the projection's, already in
    ``qkv``, whose gradient they sum: the projection must not (pass it its bias detached).
    """
    seed = torch.randint(0, 2**31 - 1, (1,), device=qkv.device, dtype=torch.int64)
    return _attention(qkv, bias, seed, p, heads)[0]  # type: ignore[no-any-return]


# ---------------------------------------------------------------- AdamW on fp32 masters in one Triton kernel
#
# The bf16 parameters' AdamW step through fp32 masters, one kernel over every parameter: each program
# reads BLOCK elements of one parameter's bf16 gradient (its address from a table rebuilt each step, as
# autograd allocates the gradients), the fp32 master and both moments (flat buffers, each parameter's
# segment padded to whole blocks), and writes the master, the moments and the bf16 parameter. Against
# copying the gradients into fp32, torch's fused AdamW and copying the masters back (40 bytes an
# element), 28 bytes an element. The arithmetic is torch's fused AdamW's, in float32.

#: Elements per program of the AdamW kernel, and its warps.
ADAMW_BLOCK = 1024
ADAMW_WARPS = 4

if triton is not None:

    @triton.jit
    def _master_adamw(  # noqa: PLR0917 - a kernel's arguments are positional
        BLOCK_PARAM,
        BLOCK_START,
        NUMEL,
        OFFSET,
        PARAM_PTR,
        GRAD_PTR,
        MASTER,
        EXP_AVG,
        EXP_AVG_SQ,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        step_size,
        bias_correction2_sqrt,
        BLOCK: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/test_bert_compact.py)
        block = tl.program_id(0)
        i = tl.load(BLOCK_PARAM + block)
        at = tl.load(BLOCK_START + block) + tl.arange(0, BLOCK)
        inside = at < tl.load(NUMEL + i)
        state = tl.load(OFFSET + i) + at
        grad_ptr = tl.load(GRAD_PTR + i).to(tl.pointer_type(tl.bfloat16))
        param_ptr = tl.load(PARAM_PTR + i).to(tl.pointer_type(tl.uint16))  # bf16's bits
        g = tl.load(grad_ptr + at, mask=inside, other=0.0).to(tl.float32)
        w = tl.load(MASTER + state, mask=inside, other=0.0)
        m = tl.load(EXP_AVG + state, mask=inside, other=0.0)
        v = tl.load(EXP_AVG_SQ + state, mask=inside, other=0.0)
        w -= lr * weight_decay * w
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        w -= step_size * m / (tl.sqrt(v) / bias_correction2_sqrt + eps)
        tl.store(MASTER + state, w, mask=inside)
        tl.store(EXP_AVG + state, m, mask=inside)
        tl.store(EXP_AVG_SQ + state, v, mask=inside)
        # to bf16 rounding to nearest, ties to even, in integers (Triton's interpreter truncates a cast)
        bits = w.to(tl.uint32, bitcast=True)
        bits = tl.where(w != w, 0x7FC00000, bits + 0x7FFF + ((bits >> 16) & 1))  # noqa: PLR0124 - a NaN stays one
        tl.store(param_ptr + at, (bits >> 16).to(tl.uint16), mask=inside)


class MasterAdamW:
    """AdamW (torch's defaults but ``lr``) of bf16 parameters through fp32 masters, one Triton kernel a step.

    ``master`` holds each parameter's fp32 master, a view into one flat buffer. A parameter without a
    gradient steps with a zero one (as the masters' optimizer of ``train.MasterWeightAdamW`` does).
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if triton is None:
            raise RuntimeError("the AdamW kernel needs Triton")
        if any(p.dtype != torch.bfloat16 or not p.is_contiguous() for p in params):
            raise ValueError("the AdamW kernel steps contiguous bf16 parameters only")
        self.params = params
        self.lr, (self.beta1, self.beta2), self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.steps = 0
        device = params[0].device
        blocks = [triton.cdiv(p.numel(), ADAMW_BLOCK) for p in params]
        offsets = [0]
        for n in blocks:
            offsets.append(offsets[-1] + n * ADAMW_BLOCK)
        flat = torch.zeros(offsets[-1], device=device, dtype=torch.float32)
        self.master = [flat[o : o + p.numel()].view_as(p) for o, p in zip(offsets[:-1], params, strict=True)]
        with torch.no_grad():
            torch._foreach_copy_(self.master, params)
        self._flat = flat
        self._exp_avg, self._exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)

        def table(values: list[int], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        self._block_param = table([i for i, n in enumerate(blocks) for _ in range(n)], torch.int32)
        self._block_start = table([b * ADAMW_BLOCK for n in blocks for b in range(n)], torch.int64)
        self._numel = table([p.numel() for p in params], torch.int64)
        self._offset = table(offsets[:-1], torch.int64)
        self._param_ptr = table([p.data_ptr() for p in params], torch.int64)
        self._grad_addresses: list[int] = []
        self._grad_ptr = self._param_ptr

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step of every master from its parameter's gradient, written back into the parameter."""
        grads = [
            torch.zeros_like(p) if p.grad is None else p.grad.to(torch.bfloat16).contiguous()
            for p in self.params
        ]
        addresses = [g.data_ptr() for g in grads]
        if addresses != self._grad_addresses:  # the allocator tends to hand out the same ones each step
            table = torch.tensor(addresses, dtype=torch.int64)
            # a blocking copy from pageable memory would wait for the backward: no next step queued meanwhile
            table = table.pin_memory() if self._flat.is_cuda else table
            self._grad_ptr = table.to(self._flat.device, non_blocking=True)
            self._grad_addresses = addresses
        self.steps += 1
        bias_correction1 = 1.0 - self.beta1**self.steps
        bias_correction2 = 1.0 - self.beta2**self.steps
        _master_adamw[(self._block_param.numel(),)](
            self._block_param,
            self._block_start,
            self._numel,
            self._offset,
            self._param_ptr,
            self._grad_ptr,
            self._flat,
            self._exp_avg,
            self._exp_avg_sq,
            self.lr,
            self.beta1,
            self.beta2,
            self.eps,
            self.weight_decay,
            self.lr / bias_correction1,
            bias_correction2**0.5,
            BLOCK=ADAMW_BLOCK,
            num_warps=ADAMW_WARPS,
        )
        del grads  # freed in stream order, after the kernel


# ---------------------------------------------------------------- a layer input's two gradients in one matmul
#
# Each sublayer's input x feeds a matmul (the query/key/value projection, the intermediate layer) and the
# residual of the LayerNorm after it, so autograd adds two gradients for x: the residual's and the matmul's
# input gradient, a separate elementwise kernel that reads both and writes their sum. As one autograd node
# with two outputs, the matmul's backward gets both and lets the matmul add the residual's (cuBLAS's
# ``addmm`` with beta 1: one more read of the residual's gradient in its epilogue, one rounding). Compiled,
# the matmul adds into the residual's gradient in place (``addmm_into``): ``torch.addmm`` first copies its
# addend into a new tensor (a memcpy of the whole gradient, 2.3 ms a step at seq 128 on an H200), and the
# compiler does not make that in place on its own. Traced, the mutation is functionalised, so the
# compiler keeps it in place only where nothing else reads that gradient (and copies it where something
# does); eagerly ``torch.addmm``, since a gradient handed to a backward may be shared.


@torch.library.custom_op("rollcall::addmm_into", mutates_args=("acc",))
def addmm_into(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b`` in place (cuBLAS's epilogue reads ``acc``; nothing copies it first)."""
    acc.addmm_(a, b)


class _LinearAndResidual(torch.autograd.Function):
    """``(linear(x, weight, bias), x)``, the second output being x's use as a residual."""

    @staticmethod
    def forward(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return F.linear(x, weight, bias), x.view_as(x)

    @staticmethod
    def setup_context(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:  # type: ignore[type-arg]
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, dy: torch.Tensor, d_residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        x, weight = ctx.saved_tensors  # type: ignore[attr-defined]
        dy2, x2 = dy.reshape(-1, dy.size(-1)), x.reshape(-1, x.size(-1))
        if d_residual is None:
            dx = dy2 @ weight
        elif torch.compiler.is_compiling():
            dx = d_residual.reshape(-1, x.size(-1))
            addmm_into(dx, dy2, weight)
        else:
            dx = torch.addmm(d_residual.reshape(-1, x.size(-1)), dy2, weight)
        db = dy2.sum(0) if ctx.needs_input_grad[2] else None  # type: ignore[attr-defined]
        return dx.view_as(x), dy2.t() @ x2, db


def linear_and_residual(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *, fused: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(linear(x, weight, bias), x)``; ``fused``: x's two gradients summed by the matmul's backward."""
    if fused:
        return _LinearAndResidual.apply(x, weight, bias)  # type: ignore[no-any-return]
    return F.linear(x, weight, bias), x


class EncoderLayer(nn.Module):
    """One post-LayerNorm transformer layer, as BERT's."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        intermediate: int,
        *,
        dropout: float,
        attn_dropout: float,
        attention: str = "auto",
        fused_norm: bool = False,
        fused_gelu: bool = False,
        fused_bias: bool = False,
        fused_residual: bool = False,
    ) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
        if attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention {attention!r} is not one of {', '.join(ATTENTION_BACKENDS)}")
        self.heads = heads
        self.attention = attention
        self.backend = ATTENTION_BACKENDS[attention]
        self.dropout = dropout
        self.attn_dropout = attn_dropout
        self.fused_norm = fused_norm
        self.fused_gelu = fused_gelu
        self.fused_bias = fused_bias and fused_norm
        self.fused_residual = fused_residual
        self.qkv = nn.Linear(hidden, 3 * hidden)  # rows: query, then key, then value
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, hidden]`` in and out."""
        b, s, h = x.shape
        p = self.attn_dropout if self.training else 0.0
        triton_kernels = (
            self.attention in {"triton", "auto"}
            and triton_attention_available(x.device, s, h // self.heads)
            and (self.attention == "triton" or _half_precision(x))
        )
        # with the Triton attention its backward sums the projection's bias's gradient, not the projection
        bias = self.qkv.bias.detach() if triton_kernels else self.qkv.bias
        qkv, x = linear_and_residual(x, self.qkv.weight, bias, fused=self.fused_residual)
        if triton_kernels:
            a = attention(qkv, self.qkv.bias, self.heads, p)
        else:
            q, k, v = qkv.view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            with sdpa_kernel(self.backend) if self.backend is not None else contextlib.nullcontext():
                a = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
            a = a.transpose(1, 2).reshape(b, s, h)
        x = self._residual(self.attn_out, a, x, self.attn_norm)
        bias = None if self.fused_gelu else self.ffn_in.bias  # type: ignore[assignment]
        y, x = linear_and_residual(x, self.ffn_in.weight, bias, fused=self.fused_residual)
        y = bias_gelu(y, self.ffn_in.bias, fused=True) if self.fused_gelu else F.gelu(y)
        return self._residual(self.ffn_out, y, x, self.ffn_norm)

    def _residual(
        self, linear: nn.Linear, y: torch.Tensor, x: torch.Tensor, norm: nn.LayerNorm
    ) -> torch.Tensor:
        """``norm(dropout(linear(y)) + x)``; with ``fused_bias`` the fused kernel adds ``linear``'s bias."""
        if self.fused_bias:
            a, bias = F.linear(y, linear.weight), linear.bias
        else:
            a, bias = linear(y), None
        return dropout_add_layer_norm(
            a, x, norm, self.dropout, self.training, fused=self.fused_norm, bias=bias
        )


class CompactBertForPreTraining(nn.Module):
    """BERT with its pre-training heads; ``forward(batch)`` returns the MLM + NSP loss.

    ``batch`` holds ``input_ids``, ``token_type_ids``, ``next_sentence_label`` and either
    ``masked_positions`` + ``masked_labels`` (``masked_head``) or the full-length ``labels`` (-100 where
    not masked). The MLM decoder's weight is the word embedding (tied, as in Hugging Face's model).
    """

    def __init__(
        self,
        *,
        vocab: int,
        hidden: int,
        layers: int,
        heads: int,
        intermediate: int,
        dropout: float = 0.1,
        attn_dropout: float = 0.1,
        masked_head: bool = True,
        attention: str = "auto",
        fused_norm: bool = False,
        fused_gelu: bool = False,
        fused_bias: bool = False,
        fused_residual: bool = False,
    ) -> None:
        super().__init__()
        self.dropout = dropout
        self.masked_head = masked_head
        self.word = nn.Embedding(vocab, hidden, padding_idx=PAD_ID)
        self.position = nn.Embedding(MAX_POSITIONS, hidden)
        self.token_type = nn.Embedding(TYPE_VOCAB, hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)
        self.layers = nn.ModuleList(
            EncoderLayer(
                hidden,
                heads,
                intermediate,
                dropout=dropout,
                attn_dropout=attn_dropout,
                attention=attention,
                fused_norm=fused_norm,
                fused_gelu=fused_gelu,
                fused_bias=fused_bias,
                fused_residual=fused_residual,
            )
            for _ in range(layers)
        )
        self.pooler = nn.Linear(hidden, hidden)
        self.head_transform = nn.Linear(hidden, hidden)
        self.head_norm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)
        self.head_bias = nn.Parameter(torch.zeros(vocab))
        self.nsp = nn.Linear(hidden, 2)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """BERT's initialisation: normal(0, 0.02) weights, zero biases, unit LayerNorms, zero padding row."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, INIT_STD)
                module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, INIT_STD)
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        self.word.weight[PAD_ID].zero_()
        self.head_bias.zero_()

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The pre-training loss of ``batch`` (a scalar, float32)."""
        x = self.embed(batch)
        for layer in self.layers:
            x = layer(x)
        return self.pretraining_loss(x, batch)

    def embed(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The embeddings of ``batch``: ``[batch, seq, hidden]``, normalised, dropout applied."""
        ids = batch["input_ids"]
        x = self.word(ids) + self.token_type(batch["token_type_ids"])
        x = x + self.position.weight[: ids.size(1)]
        return F.dropout(self.embed_norm(x), self.dropout, self.training)

    def pretraining_loss(self, x: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """MLM + NSP loss from the encoder's output ``x``."""
        pooled = torch.tanh(self.pooler(x[:, 0]))
        if self.masked_head:
            index = batch["masked_positions"].unsqueeze(-1).expand(-1, -1, x.size(-1))
            x, labels = x.gather(1, index), batch["masked_labels"]
        else:
            labels = batch["labels"]
        t = self.head_norm(F.gelu(self.head_transform(x)))
        vocab = self.head_bias.numel()
        pad = -vocab % VOCAB_ALIGN
        logits = F.linear(t, F.pad(self.word.weight, (0, 0, 0, pad)), F.pad(self.head_bias, (0, pad)))
        mlm = F.cross_entropy(logits[..., :vocab].flatten(0, 1).float(), labels.flatten())
        nsp = F.cross_entropy(self.nsp(pooled).float(), batch["next_sentence_label"])
        return mlm + nsp

    def compile_regions(self, **options: object) -> None:
        """``torch.compile`` each layer, the embeddings and the heads apart (``options``: torch.compile's).

        The layers share one compiled graph (their code and shapes are the same; the parameters are its
        inputs), so a cold compile traces one layer instead of all of them; the loop over layers stays
        eager.
        """
        for layer in self.layers:
            layer.compile(**options)
        self.embed = torch.compile(self.embed, **options)  # type: ignore[method-assign,call-overload]
        self.pretraining_loss = torch.compile(self.pretraining_loss, **options)  # type: ignore[method-assign,call-overload]


def hf_parameter_map(layers: int) -> dict[str, tuple[str, int, int]]:
    """Each Hugging Face ``BertForPreTraining`` parameter -> (compact name, first row, end row).

    The rows are a slice of the compact tensor's first dimension (the query, key and value weights and
    biases share ``qkv``); a whole tensor maps to ``(name, 0, -1)``. The tied decoder weight and bias of
    the Hugging Face model are not listed: they are ``word.weight`` and ``head_bias``.
    """
    whole = -1
    names: dict[str, tuple[str, int, int]] = {
        "bert.embeddings.word_embeddings.weight": ("word.weight", 0, whole),
        "bert.embeddings.position_embeddings.weight": ("position.weight", 0, whole),
        "bert.embeddings.token_type_embeddings.weight": ("token_type.weight", 0, whole),
        "bert.embeddings.LayerNorm.weight": ("embed_norm.weight", 0, whole),
        "bert.embeddings.LayerNorm.bias": ("embed_norm.bias", 0, whole),
        "bert.pooler.dense.weight": ("pooler.weight", 0, whole),
        "bert.pooler.dense.bias": ("pooler.bias", 0, whole),
        "cls.predictions.bias": ("head_bias", 0, whole),
        "cls.predictions.transform.dense.weight": ("head_transform.weight", 0, whole),
        "cls.predictions.transform.dense.bias": ("head_transform.bias", 0, whole),
        "cls.predictions.transform.LayerNorm.weight": ("head_norm.weight", 0, whole),
        "cls.predictions.transform.LayerNorm.bias": ("head_norm.bias", 0, whole),
        "cls.seq_relationship.weight": ("nsp.weight", 0, whole),
        "cls.seq_relationship.bias": ("nsp.bias", 0, whole),
    }
    for i in range(layers):
        hf, mine = f"bert.encoder.layer.{i}.", f"layers.{i}."
        for part, j in (("query", 0), ("key", 1), ("value", 2)):
            for kind in ("weight", "bias"):
                names[f"{hf}attention.self.{part}.{kind}"] = (f"{mine}qkv.{kind}", j, j + 1)  # thirds
        for hf_part, part in (
            ("attention.output.dense", "attn_out"),
            ("attention.output.LayerNorm", "attn_norm"),
            ("intermediate.dense", "ffn_in"),
            ("output.dense", "ffn_out"),
            ("output.LayerNorm", "ffn_norm"),
        ):
            for kind in ("weight", "bias"):
                names[f"{hf}{hf_part}.{kind}"] = (f"{mine}{part}.{kind}", 0, whole)
    return names


def rows(tensor: torch.Tensor, first: int, end: int) -> torch.Tensor:
    """The part of a compact tensor that :func:`hf_parameter_map` names (``qkv`` thirds, or all)."""
    if end < 0:
        return tensor
    third = tensor.size(0) // 3
    return tensor[first * third : end * third]


@torch.no_grad()
def load_hf_state_dict(model: CompactBertForPreTraining, state: Mapping[str, torch.Tensor]) -> None:
    """Copy a Hugging Face ``BertForPreTraining`` state dict into ``model``; every parameter must be there."""
    own = dict(model.named_parameters())
    mapping = hf_parameter_map(len(model.layers))
    missing = sorted(set(mapping) - set(state))
    if missing:
        raise KeyError(f"Hugging Face state dict lacks {len(missing)} parameters, e.g. {missing[0]}")
    for hf_name, (name, first, end) in mapping.items():
        target = rows(own[name], first, end)
        if target.shape != state[hf_name].shape:
            raise ValueError(
                f"{hf_name}: shape {tuple(state[hf_name].shape)} != {name} {tuple(target.shape)}"
            )
        target.copy_(state[hf_name])
