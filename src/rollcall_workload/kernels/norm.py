"""Dropout + residual + LayerNorm (and the preceding matmul's bias) as Triton kernels: forward, backward."""

# Triton's kernels take untyped arguments by design (a kernel's types come from its launch) and Triton ships
# no type information; the functions around the kernels are typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator"

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rollcall_workload.kernels import INTERPRETING, tl, triton
from rollcall_workload.kernels.philox import DROPOUT_ROUNDS, _drop_threshold, _keep, _scale

if triton is not None:

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
    return triton is not None and t.size(-1) % 8 == 0 and (t.is_cuda or INTERPRETING)


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
