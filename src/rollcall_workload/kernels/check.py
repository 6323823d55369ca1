"""Each kernel a run would use, held on the rank's own GPU to the op it replaces before the run trusts it.

At the run's own shapes (sequence length, heads, hidden sizes, batch; the kernels' launch shapes follow
them and the GPU's multiprocessor count), with dropout on, each kernel's forward and backward are compared
with PyTorch's ops in float32 given the kernel's own dropout mask: the attention's is the bits its forward
keeps, the dropout+LayerNorm's is read from a second call on ones. A result further from the reference than
:data:`TOLERANCE`, or a kernel that fails to compile or launch, fails the check. The ranks then agree
(:func:`agree`): a kernel that failed on any rank is dropped on every rank, so that all replicas compute the
same function, and the run trains with the standard op, saying why in ``start``.

``ROLLCALL_KERNEL_MISMATCH=RANKS[:KERNEL,...]`` (:func:`rollcall_workload.faults.mismatched_kernels`) makes
those ranks' check of those kernels (all without a list) read a wrong result, so that the fallback can be
tried on any GPU.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rollcall_workload.kernels.attention import _attention, kept_mask
from rollcall_workload.kernels.gate import KERNEL_NAMES
from rollcall_workload.kernels.gelu import _bias_gelu
from rollcall_workload.kernels.norm import _fused_forward
from rollcall_workload.kernels.philox import _scale

#: The largest error allowed, relative to the reference's largest magnitude, of an output (bf16 holds 8
#: bits of mantissa: its rounding alone is 0.4%) and of a gradient (sums of many bf16 products).
TOLERANCE = {"output": 0.03, "gradient": 0.05}
#: The dropout rate of the checks: high enough that a mask laid out wrong changes every row.
CHECK_DROPOUT = 0.1
EPS = 1e-12
MAX_REASON = 160


@dataclass(frozen=True)
class Shapes:
    """What the kernels are specialised on in this run."""

    batch: int
    seq: int
    heads: int
    hidden: int
    intermediate: int
    fused_bias: bool


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got - want| / max |want|``, in float32."""
    want = want.float()
    return float((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-30))


def _compare(pairs: Sequence[tuple[str, str, torch.Tensor, torch.Tensor]], spoil: bool) -> float:
    """The largest error of ``(name, kind, got, want)`` over its kind's tolerance; ValueError past it."""
    worst = 0.0
    for i, (name, kind, result, want) in enumerate(pairs):
        got = result.detach().clone() if spoil and i == 0 else result
        if spoil and i == 0:  # the fault variable's wrong result
            got.view(-1)[0] += 1 + want.abs().max()
        error = relative_error(got, want)
        if not math.isfinite(error) or error > TOLERANCE[kind]:
            raise ValueError(f"{name} differs from PyTorch's by {error:.3g} of its largest value "
                             f"(at most {TOLERANCE[kind]})")  # fmt: skip
        worst = max(worst, error / TOLERANCE[kind])
    return worst


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().requires_grad_()


def _grads(out: torch.Tensor, inputs: Sequence[torch.Tensor], dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, inputs, dy)


def check_attention(s: Shapes, dtype: torch.dtype, device: torch.device, spoil: bool) -> float:
    """The Triton attention against softmax(QK^T/sqrt(d)) V with its own dropout mask."""
    g = torch.Generator(device=device).manual_seed(11)
    qkv = _leaf(torch.randn(s.batch, s.seq, 3 * s.hidden, device=device, dtype=dtype, generator=g))
    bias = torch.zeros(3 * s.hidden, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(s.batch, s.seq, s.hidden, device=device, dtype=dtype, generator=g)
    seed = torch.tensor([12345], device=device, dtype=torch.int64)
    out, _, bits = _attention(qkv, bias, seed, CHECK_DROPOUT, s.heads)
    dqkv, dbias = _grads(out, (qkv, bias), dy)
    ref_qkv = _leaf(qkv.detach().float())
    q, k, v = ref_qkv.view(s.batch, s.seq, 3, s.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)
    keep = kept_mask(bits, s.seq).view_as(probs)
    ref = ((probs * keep * _scale(CHECK_DROPOUT)) @ v).transpose(1, 2).reshape(s.batch, s.seq, s.hidden)
    (ref_dqkv,) = _grads(ref, (ref_qkv,), dy.float())
    pairs = [("the output", "output", out, ref), ("qkv's gradient", "gradient", dqkv, ref_dqkv)]
    pairs.append(("the bias's gradient", "gradient", dbias, ref_dqkv.sum((0, 1))))
    return _compare(pairs, spoil)


def check_dropout_layer_norm(s: Shapes, dtype: torch.dtype, device: torch.device, spoil: bool) -> float:
    """Dropout + residual + LayerNorm (+ the matmul's bias) against PyTorch's ops with the kernel's mask."""
    g = torch.Generator(device=device).manual_seed(12)
    shape = (s.batch, s.seq, s.hidden)

    def rand(*size: int, scale: float = 1.0) -> torch.Tensor:
        return _leaf(scale * torch.randn(*size, device=device, dtype=torch.float32, generator=g).to(dtype))

    a, x, dy = rand(*shape), rand(*shape), rand(*shape)
    w, b = rand(s.hidden, scale=0.5), rand(s.hidden, scale=0.5)
    a_bias = rand(s.hidden, scale=0.5) if s.fused_bias else None
    seed = torch.tensor([12346], device=device, dtype=torch.int64)
    ones, zeros = torch.ones_like(a), torch.zeros_like(a)
    keep = _fused_forward(ones, zeros, w.detach(), b.detach(), seed, CHECK_DROPOUT, EPS)[1] != 0
    inputs = [a, x, w, b, *([a_bias] if a_bias is not None else [])]
    y = _fused_forward(a, x, w, b, seed, CHECK_DROPOUT, EPS, a_bias)[0]
    got = _grads(y, inputs, dy)
    ref_inputs = [_leaf(t.detach().float()) for t in inputs]
    ra, rx, rw, rb, *rbias = ref_inputs
    dropped = (ra + rbias[0] if rbias else ra) * keep * _scale(CHECK_DROPOUT)
    ref = F.layer_norm(dropped + rx, (s.hidden,), rw, rb, EPS)
    want = _grads(ref, ref_inputs, dy.float())
    names = (
        "a's gradient",
        "x's gradient",
        "the weight's gradient",
        "the bias's gradient",
        "a_bias's gradient",
    )
    pairs = [("the output", "output", y, ref)]
    pairs += [(n, "gradient", mine, theirs) for n, mine, theirs in zip(names, got, want, strict=False)]
    return _compare(pairs, spoil)


def check_bias_gelu(s: Shapes, dtype: torch.dtype, device: torch.device, spoil: bool) -> float:
    """Bias + GELU against PyTorch's GELU (erf) of the sum."""
    g = torch.Generator(device=device).manual_seed(13)
    h = _leaf(torch.randn(s.batch * s.seq, s.intermediate, device=device, generator=g).to(dtype))
    bias = _leaf((0.5 * torch.randn(s.intermediate, device=device, generator=g)).to(dtype))
    dy = torch.randn(s.batch * s.seq, s.intermediate, device=device, generator=g).to(dtype)
    y = _bias_gelu(h, bias)
    dh, db = _grads(y, (h, bias), dy)
    rh, rbias = _leaf(h.detach().float()), _leaf(bias.detach().float())
    ref = F.gelu(rh + rbias)
    rdh, rdb = _grads(ref, (rh, rbias), dy.float())
    pairs = [("the output", "output", y, ref), ("h's gradient", "gradient", dh, rdh)]
    return _compare([*pairs, ("the bias's gradient", "gradient", db, rdb)], spoil)


def check_adamw(s: Shapes, dtype: torch.dtype, device: torch.device, spoil: bool) -> float:
    """Two steps of the AdamW kernel against torch's AdamW on float32 copies of a layer's parameters.

    What is compared is each step's update of the fp32 masters (weights minus where they started), so that a
    kernel that moves them wrongly, or not at all, is as far off as its update is large.
    """
    from rollcall_workload.kernels.adamw import MasterAdamW

    g = torch.Generator(device=device).manual_seed(14)
    sizes = [(s.intermediate, s.hidden), (s.hidden, s.intermediate), (s.hidden,), (3 * s.hidden,)]
    params = [torch.randn(*z, device=device, generator=g).to(torch.bfloat16) for z in sizes]
    masters = [torch.nn.Parameter(p.float()) for p in params]
    before = torch.cat([m.detach().view(-1) for m in masters])
    kernel = MasterAdamW(params, lr=1e-3)
    reference = torch.optim.AdamW(masters, lr=1e-3)
    for _ in range(2):
        grads = [torch.randn(*z, device=device, generator=g) for z in sizes]
        for p, m, grad in zip(params, masters, grads, strict=True):
            p.grad, m.grad = grad.to(torch.bfloat16), grad.to(torch.bfloat16).float()
        kernel.step()
        reference.step()
    moved = torch.cat([m.view(-1) for m in kernel.master]) - before
    expected = torch.cat([m.detach().view(-1) for m in masters]) - before
    return _compare([("the masters' update", "output", moved, expected)], spoil)


CHECKS: Mapping[str, Callable[[Shapes, torch.dtype, torch.device, bool], float]] = {
    "attention": check_attention,
    "dropout_layer_norm": check_dropout_layer_norm,
    "bias_gelu": check_bias_gelu,
    "adamw": check_adamw,
}


def check(
    names: Sequence[str], shapes: Shapes, dtype: torch.dtype, device: torch.device, spoiled: frozenset[str]
) -> dict[str, float | str]:
    """Each kernel of ``names`` checked here: why it failed (one line), or its largest error.

    The error is a fraction (0 to 1) of :data:`TOLERANCE`.
    """
    results: dict[str, float | str] = {}
    for name in names:
        try:
            results[name] = CHECKS[name](shapes, dtype, device, name in spoiled)
        except Exception as exc:  # a compile or launch error, or a result out of tolerance
            first = (str(exc).strip().splitlines() or [""])[0]
            results[name] = f"{type(exc).__name__}: {first}"[:MAX_REASON]
        finally:
            if device.type == "cuda":  # after a sticky CUDA error this raises too: the run fails later
                with contextlib.suppress(Exception):
                    torch.cuda.empty_cache()
    return results


#: What a rank says of each kernel in :func:`agree`'s table.
PASSED, UNUSED, FAILED = 0, 1, 2


def agree(local: Mapping[str, float | str], rank: int, world_size: int, device: Any) -> dict[str, str]:
    """The ranks' verdict on each kernel this rank checked: ``ok``, or why every rank drops it.

    A collective over the default process group that every rank joins, whatever it checked: a table of every
    kernel of :data:`~rollcall_workload.kernels.gate.KERNEL_NAMES` by rank, each rank's row saying of each
    kernel whether it passed here, failed here, or is not used here (another GPU: the gate chose otherwise). A
    kernel runs only where every rank passed it, so that every replica computes the same function.
    """
    import torch.distributed as dist

    table = torch.full((world_size, len(KERNEL_NAMES)), UNUSED, dtype=torch.int32, device=device)
    for i, name in enumerate(KERNEL_NAMES):
        if name in local:
            table[rank, i] = FAILED if isinstance(local[name], str) else PASSED
    if dist.is_initialized() and world_size > 1:
        mine = table[rank].clone()
        table.zero_()
        table[rank] = mine
        dist.all_reduce(table)
    rows = table.cpu().tolist()
    verdicts = {}
    for i, name in enumerate(KERNEL_NAMES):
        if name not in local:
            continue
        failed = [r for r in range(world_size) if rows[r][i] == FAILED]
        unused = [r for r in range(world_size) if rows[r][i] == UNUSED]
        if isinstance(local[name], str):
            verdicts[name] = f"failed its check here: {local[name]}"
        elif failed:
            verdicts[name] = f"failed its check on rank {', '.join(map(str, failed))}"
        elif unused:
            verdicts[name] = f"not used on rank {', '.join(map(str, unused))} (another GPU there)"
        else:
            verdicts[name] = "ok"
    return verdicts
