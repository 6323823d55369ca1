"""Bias + GELU as Triton kernels, forward and backward (the backward sums the bias's gradient as it goes)."""

# Triton's kernels take untyped arguments by design (a kernel's types come from its launch) and Triton ships
# no type information; the functions around the kernels are typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator"

from __future__ import annotations

import torch
import torch.nn.functional as F

from rollcall_workload.kernels import INTERPRETING, tl, triton

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

#: The standard normal's CDF in the kernels is Abramowitz and Stegun's 7.1.26 in erfc form (absolute error
#: below 1.5e-7, as accurate as libdevice's erf against float64 in float32: tests/unit/fused_norm_cases.py):
#: a polynomial times exp(-u**2 / 2), the exp the backward's density needs too, so one exp there, not two. On
#: an H200 the backward took 383 us with it against 442 with libdevice's erf and 593 with an erfc series, and
#: the step ran 1.9% faster (bench/NOTES.md); those two variants are gone.

if triton is not None:

    @triton.jit
    def _normal_cdf_pdf(u):  # pragma: no cover - runs on a GPU, or in the interpreter
        """``(Phi(u), phi(u))``, Phi(u) = erfc(-u / sqrt(2)) / 2 and its derivative, in float32."""
        e = tl.exp(-0.5 * u * u)
        z = -u * 0.7071067811865476
        t = 1.0 / (1.0 + 0.3275911 * tl.abs(z))
        poly = 1.061405429 * t - 1.453152027
        poly = poly * t + 1.421413741
        poly = poly * t - 0.284496736
        poly = poly * t + 0.254829592
        r = t * poly * e  # erfc(|z|), e = exp(-z**2)
        cdf = 0.5 * tl.where(z >= 0, r, 2.0 - r)
        return cdf, e * 0.3989422804014327  # 1 / sqrt(2 pi)

    @triton.jit
    def _bias_gelu_fwd(  # noqa: PLR0917 - the kernel's and the op's schema are positional
        H, B, Y, n_elements, N: tl.constexpr, BLOCK: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        at = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = at < n_elements
        u = tl.load(H + at, mask=inside, other=0.0).to(tl.float32)
        u += tl.load(B + at % N, mask=inside, other=0.0).to(tl.float32)
        cdf, _ = _normal_cdf_pdf(u)
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
            cdf, pdf = _normal_cdf_pdf(u)
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
        h2, bias, y, n, N=h2.size(-1), BLOCK=GELU_BLOCK, num_warps=GELU_WARPS
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
    if fused and triton is not None and h.dtype == bias.dtype and (h.is_cuda or INTERPRETING):
        return _bias_gelu(h, bias)  # type: ignore[no-any-return]
    return F.gelu(h + bias)
