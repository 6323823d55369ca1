"""The workload's Triton kernels (dropout+residual+LayerNorm, bias+GELU) against PyTorch's ops, on the CPU.

Run by tests/unit/test_fused_norm.py in a process of its own with ``TRITON_INTERPRET=1`` (Triton reads it
when it is first imported, so not in a pytest process that has imported it already); float32, so the
kernels' results must match PyTorch's within float32 rounding.
"""

from __future__ import annotations

import argparse
import math

import pytest
import torch

from rollcall_workload import compact
from rollcall_workload import model as workload_model
from rollcall_workload.kernels import adamw as adamw_kernels
from rollcall_workload.kernels import attention as attention_kernels
from rollcall_workload.kernels import gelu, philox
from rollcall_workload.kernels import norm as norm_kernels
from rollcall_workload.rank import training

F = torch.nn.functional
TOL = {"rtol": 1e-5, "atol": 1e-5}
op = torch.ops.rollcall.dropout_add_layer_norm


def _inputs(hidden: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 7, hidden, generator=g)  # 21 rows: see BACKWARD_SHAPES
    x = torch.randn(3, 7, hidden, generator=g)
    w = 1 + 0.1 * torch.randn(hidden, generator=g)
    b = 0.1 * torch.randn(hidden, generator=g)
    return tuple(t.requires_grad_() for t in (a, x, w, b))


#: (tile elements, programs per unit, the sums added up each tile) of the backward: 21 rows of 64 on 2 CPU
#: "units" make 2 programs of one tile of 16 rows (the second with 5 live); or 2 programs of 6 tiles of 2
#: rows (the last 3 tiles empty).
BACKWARD_SHAPES = {"one tile": (8192, 4, True), "six tiles": (128, 1, False)}


@pytest.fixture(params=list(BACKWARD_SHAPES))
def backward_shape(request, monkeypatch):
    elements, per_unit, each = BACKWARD_SHAPES[request.param]
    monkeypatch.setattr(norm_kernels, "BACKWARD_TILE_ELEMENTS", elements)
    monkeypatch.setattr(norm_kernels, "BACKWARD_PROGRAMS_PER_UNIT", per_unit)
    monkeypatch.setattr(norm_kernels, "BACKWARD_SUM_EACH_TILE", each)
    return norm_kernels._backward_shape(21, 64, 2)


def test_the_backward_shapes(backward_shape):
    assert backward_shape in ((16, 1, 2), (2, 6, 2))  # (rows a tile, tiles a program, programs)


def test_the_backward_shape_of_bert_large():
    # seq 128, batch 384 on 132 multiprocessors: 1,046 programs of 47 tiles of one row, 2 warps each
    assert norm_kernels._backward_shape(49152, 1024, 132) == (1, 47, 1046)
    assert norm_kernels._backward_warps(1, 1024) == 2


def _seed(value: int) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.int64)


def _grads(out: torch.Tensor, inputs: tuple[torch.Tensor, ...], dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, inputs, dy)


def test_interpreter_is_on():
    assert norm_kernels.fused_norm_available(torch.zeros(2, 8))
    assert not norm_kernels.fused_norm_available(torch.zeros(2, 12))  # rows of a multiple of 8 only


@pytest.mark.parametrize("hidden", [64, 48])  # 48: an eighth row of 6 in a block of 8, masked
def test_no_dropout_is_layer_norm_of_the_sum(hidden, backward_shape):
    a, x, w, b = _inputs(hidden)
    dy = torch.randn(3, 7, hidden)
    y, z, mean, rstd = op(a, x, w, b, _seed(1), 0.0, 1e-12)
    ref = F.layer_norm(a + x, (hidden,), w, b, 1e-12)
    torch.testing.assert_close(y, ref, **TOL)
    torch.testing.assert_close(z, a + x, **TOL)
    rows = (a + x).reshape(-1, hidden)
    torch.testing.assert_close(mean, rows.mean(-1), **TOL)
    torch.testing.assert_close(rstd, torch.rsqrt(rows.var(-1, correction=0) + 1e-12), **TOL)
    for mine, theirs in zip(_grads(y, (a, x, w, b), dy), _grads(ref, (a, x, w, b), dy), strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


def test_dropout_mask_of_the_forward_is_the_backward_s(backward_shape):
    p, hidden = 0.3, 64
    a, x, w, b = _inputs(hidden)
    dy = torch.randn(3, 7, hidden)
    y, z, _, _ = op(a, x, w, b, _seed(5), p, 1e-12)
    dropped = (z - x) == 0  # a is nowhere zero: z - x is 0 exactly where dropped
    share = dropped.float().mean().item()
    assert abs(share - p) < 0.05, share  # 1,344 draws: the share's spread is about 0.0125
    da, dx, dw, db = _grads(y, (a, x, w, b), dy)
    assert torch.equal(da == 0, dropped)  # the gradient's zeros are the forward's
    keep = (~dropped).float()
    ref = F.layer_norm(a * keep * philox._scale(p) + x, (hidden,), w, b, 1e-12)
    torch.testing.assert_close(y, ref, **TOL)
    for mine, theirs in zip((da, dx, dw, db), _grads(ref, (a, x, w, b), dy), strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_the_matmul_bias_added_in_the_kernel(p, backward_shape):
    a, x, w, b = _inputs(64)
    bias = (0.5 * torch.randn(64)).requires_grad_()
    dy = torch.randn(3, 7, 64)
    y, z, _, _ = op(a, x, w, b, _seed(5), p, 1e-12, bias)
    dropped = (z - x) == 0
    keep = (~dropped).float()
    ref = F.layer_norm((a + bias) * keep * philox._scale(p) + x, (64,), w, b, 1e-12)
    torch.testing.assert_close(y, ref, **TOL)
    mine, theirs = _grads(y, (a, x, w, b, bias), dy), _grads(ref, (a, x, w, b, bias), dy)
    for g1, g2 in zip(mine, theirs, strict=True):
        torch.testing.assert_close(g1, g2, **TOL)
    torch.testing.assert_close(mine[-1], mine[0].sum((0, 1)), **TOL)  # the bias's: a's, summed


def test_the_drop_rate_is_p_to_16_bits():
    assert philox._drop_threshold(0.1) == 6554 and philox._drop_threshold(0.0) == 0
    assert philox._scale(0.1) == pytest.approx(1 / 0.9, rel=1e-5) and philox._scale(1.0) == 0.0
    assert philox._scale(0.0) == 1.0


def test_each_of_a_philox_calls_eight_elements_is_dropped_at_the_rate():
    # 64 rows of 1,024: 8,192 calls, each of the eight 16-bit numbers of a call dropping its element at p
    p = 0.5
    a, x = torch.ones(64, 1024), torch.zeros(64, 1024)
    _, z, _, _ = op(a, x, torch.ones(1024), torch.zeros(1024), _seed(11), p, 1e-12)
    dropped = (z == 0).reshape(-1, 8).float()  # an element's place among its call's eight
    assert abs(dropped.mean().item() - p) < 0.01  # 65,536 draws: a spread of about 0.002
    for share in dropped.mean(0).tolist():
        assert abs(share - p) < 0.03, share  # 8,192 draws each: about 0.0055


def test_the_seed_picks_the_mask():
    a, x, w, b = _inputs(64)
    masks = [(op(a, x, w, b, _seed(s), 0.5, 1e-12)[1] - x) == 0 for s in (7, 7, 8)]
    assert torch.equal(masks[0], masks[1])
    assert not torch.equal(masks[0], masks[2])


def test_op_registrations():
    a, x, w, b = _inputs(64)
    torch.library.opcheck(op, (a, x, w, b, _seed(3), 0.0, 1e-12))
    torch.library.opcheck(op, (a, x, w, b, _seed(3), 0.2, 1e-12, torch.randn(64, requires_grad=True)))


def test_compiles_in_one_graph():
    a, x, w, b = _inputs(64)
    norm = torch.nn.LayerNorm(64, eps=1e-12)
    with torch.no_grad():
        norm.weight.copy_(w)
        norm.bias.copy_(b)

    def step(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return norm_kernels.dropout_add_layer_norm(a, x, norm, 0.1, False, fused=True)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)  # a graph break fails here
    dy = torch.randn(3, 7, 64)
    mine, theirs = compiled(a, x), step(a, x)
    torch.testing.assert_close(mine, theirs, **TOL)
    for g1, g2 in zip(_grads(mine, (a, x), dy), _grads(theirs, (a, x), dy), strict=True):
        torch.testing.assert_close(g1, g2, **TOL)


# ---------------------------------------------------------------- bias + GELU

gelu_op = torch.ops.rollcall.bias_gelu


def _gelu_inputs(width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h = 2 * torch.randn(3, 7, width, generator=g)  # 21 rows, values across GELU's curve
    bias = 0.5 * torch.randn(width, generator=g)
    return h.requires_grad_(), bias.requires_grad_()


#: (rows, columns) of the backward's tile, programs per unit: 21 rows of 64 on 2 CPU "units" make 2 column
#: blocks of one tile of 32 rows (11 of them dead), or 1 column block x 2 groups of 3 tiles of 4 rows.
GELU_BACKWARD_SHAPES = {"one tile": ((32, 32), 1), "tiles": ((4, 64), 1)}


@pytest.fixture(params=list(GELU_BACKWARD_SHAPES))
def gelu_backward_shape(request, monkeypatch):
    tile, per_unit = GELU_BACKWARD_SHAPES[request.param]
    monkeypatch.setattr(gelu, "GELU_BACKWARD_TILE", tile)
    monkeypatch.setattr(gelu, "GELU_BACKWARD_PROGRAMS_PER_UNIT", per_unit)
    monkeypatch.setattr(gelu, "GELU_BLOCK", 128)  # 1,344 elements: 11 programs, the last one masked
    return gelu._gelu_backward_shape(21, 64, 2)


def test_the_gelu_backward_shapes(gelu_backward_shape):
    assert gelu_backward_shape in ((32, 32, 1, 2, 1), (4, 64, 3, 1, 2))


def test_the_gelu_backward_shape_of_bert_large():
    # seq 128, batch 384, intermediate 4,096 on 132 multiprocessors: 32 column blocks x 33 row groups
    assert gelu._gelu_backward_shape(49152, 4096, 132) == (32, 128, 47, 32, 33)


@pytest.mark.parametrize("width", [64, 48])  # 48: a column block of 64, masked
def test_bias_gelu_is_gelu_of_the_sum(width, gelu_backward_shape):
    h, bias = _gelu_inputs(width)
    dy = torch.randn(3, 7, width)
    y = gelu_op(h, bias)
    ref = F.gelu(h + bias)
    torch.testing.assert_close(y, ref, **TOL)
    for mine, theirs in zip(_grads(y, (h, bias), dy), _grads(ref, (h, bias), dy), strict=True):
        torch.testing.assert_close(mine, theirs, **TOL)


def test_the_gelu_cdf_is_within_a_millionth_of_float64():
    """GELU and its derivative across [-12, 12] against float64, in float32 in and out."""
    u64 = torch.linspace(-12, 12, 48 * 101, dtype=torch.float64).view(48, 101)
    h, zero = u64.float(), torch.zeros(101)
    phi = torch.special.ndtr(u64)
    dh, _ = torch.ops.rollcall.bias_gelu_backward(torch.ones_like(h), h, zero)
    errors = {
        "y": (gelu_op(h, zero).double() - u64 * phi).abs().max().item(),
        "dh": (dh.double() - (phi + u64 * torch.exp(-0.5 * u64 * u64) / math.sqrt(2 * math.pi)))
        .abs()
        .max()
        .item(),
    }
    assert max(errors.values()) < 1e-6, errors


def test_bias_gelu_op_registrations():
    torch.library.opcheck(gelu_op, _gelu_inputs(64))


def test_bias_gelu_falls_back_where_dtypes_differ():
    h, bias = _gelu_inputs(64)
    out = gelu.bias_gelu(h.detach().bfloat16(), bias.detach(), fused=True)  # autocast's case
    assert out.dtype == torch.float32  # PyTorch's promotion, not the kernel's single dtype
    torch.testing.assert_close(out, F.gelu(h.detach().bfloat16() + bias.detach()))


#: train.py's arguments -> the layer attribute each turns on
LAYER_SWITCHES = {
    "fused_ln_dropout": "fused_norm",
    "fused_gelu": "fused_gelu",
    "fused_bias": "fused_bias",
    "fused_residual_grad": "fused_residual",
}


@pytest.mark.parametrize(
    "variant",
    [
        {"fused_ln_dropout": True},
        {"fused_gelu": True},
        {"fused_ln_dropout": True, "fused_bias": True},
        {"fused_residual_grad": True},
        {"fused_ln_dropout": True, "fused_gelu": True, "fused_bias": True, "fused_residual_grad": True},
    ],
)
def test_compact_model_variants_equal_the_plain_model(variant):
    """Without dropout, the kernels' model is the plain one: the same loss and gradients."""
    torch.manual_seed(3)
    args = argparse.Namespace(pretrained=None, model="tiny", dropout=0.0, impl="compact")
    plain, shape = workload_model.build_model(args)
    other, _ = workload_model.build_model(argparse.Namespace(**vars(args), **variant))
    for layer in other.layers:
        assert all(getattr(layer, LAYER_SWITCHES[key]) for key in variant)
    other.load_state_dict(plain.state_dict())
    batch = workload_model.make_batch(11, 2, 16, shape.vocab)
    losses = []
    for model in (plain, other):
        model.train()
        loss = model(batch)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=0)
    for (name, p1), p2 in zip(plain.named_parameters(), other.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_bias_gelu_compiles_in_one_graph():
    h, bias = _gelu_inputs(64)

    def step(h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return gelu.bias_gelu(h * 1.5, bias, fused=True)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    dy = torch.randn(3, 7, 64)
    mine, theirs = compiled(h, bias), step(h, bias)
    torch.testing.assert_close(mine, theirs, **TOL)
    for g1, g2 in zip(_grads(mine, (h, bias), dy), _grads(theirs, (h, bias), dy), strict=True):
        torch.testing.assert_close(g1, g2, **TOL)


def test_the_adamw_kernel_steps_as_torchs_adamw(monkeypatch):
    """Every master, moment and bf16 parameter as torch's AdamW on fp32 copies, over blocks and parameters."""
    monkeypatch.setattr(adamw_kernels, "ADAMW_BLOCK", 64)  # 150 elements: 3 blocks, the last 22 live
    g = torch.Generator().manual_seed(5)
    shapes = [(10, 15), (64,), (7,)]
    params = [torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes]
    reference = [p.float().requires_grad_() for p in params]
    mine = training.MasterWeightAdamW([p.requires_grad_() for p in params], lr=1e-2, fused=None, kernel=True)
    theirs = torch.optim.AdamW(reference, lr=1e-2)
    for step in range(4):
        for i, (p, r) in enumerate(zip(params, reference, strict=True)):
            grad = torch.randn(p.shape, generator=g).to(torch.bfloat16)
            no_grad = step == 2 and i == 1  # steps as with a zero gradient, as the masters' optimizer does
            p.grad = None if no_grad else grad
            r.grad = torch.zeros_like(r) if no_grad else grad.float()
        mine.step()
        theirs.step()
        mine.zero_grad()
        for p, m, r in zip(params, mine.master, reference, strict=True):
            assert m.dtype == torch.float32 and p.grad is None
            torch.testing.assert_close(m, r.detach(), rtol=1e-5, atol=1e-6)
            assert torch.equal(p.detach(), m.to(torch.bfloat16))
    for at, r in zip((0, 192, 256), reference, strict=True):  # each segment padded to whole blocks of 64
        state, n = theirs.state[r], r.numel()
        torch.testing.assert_close(mine.kernel._exp_avg[at : at + n], state["exp_avg"].reshape(-1), **TOL)
        torch.testing.assert_close(
            mine.kernel._exp_avg_sq[at : at + n], state["exp_avg_sq"].reshape(-1), **TOL
        )


ATTENTION = {"batch": 2, "heads": 2}
#: 72 rows and keys: blocks of 64 with a partial last one; 128: whole blocks, compiled without those masks
ATTENTION_SEQS = [72, 128]


@pytest.fixture(params=["two backward kernels", "one backward kernel"])
def attention_blocks(monkeypatch, request):
    whole = request.param == "one backward kernel"  # every query and key of a head in one block (128)
    monkeypatch.setattr(attention_kernels, "ATTENTION_FORWARD_BLOCKS", (64, 64) if whole else (128, 64))
    monkeypatch.setattr(attention_kernels, "ATTENTION_BACKWARD_BLOCKS", (64, 64))
    monkeypatch.setattr(attention_kernels, "ATTENTION_WHOLE_SEQ", max(ATTENTION_SEQS) if whole else 0)


def _attention_kept(seed: torch.Tensor, p: float, s: int) -> torch.Tensor:
    """The kernel's own mask ([batch * heads, seq, seq]): zero queries and keys make every probability 1 / seq,
    and each key's value a one-hot of its position (head size 128 >= seq), so output (i, j) is keep(i, j) / seq
    times the dropout's scale."""
    n, heads = ATTENTION["batch"], ATTENTION["heads"]
    qkv = torch.zeros(n, s, 3, heads, 128)
    qkv[:, :, 2, :, :s] = torch.eye(s)[None, :, None, :]
    out = torch.ops.rollcall.attention(qkv.reshape(n, s, -1), torch.zeros(3 * heads * 128), seed, p, heads)[0]
    return out.view(n, s, heads, 128)[..., :s].permute(0, 2, 1, 3).reshape(n * heads, s, s) > 0


def _reference_attention(qkv: torch.Tensor, heads: int, kept: torch.Tensor | None, p: float) -> torch.Tensor:
    n, s, three_hidden = qkv.shape
    q, k, v = qkv.view(n, s, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1)
    if kept is not None:
        probs = probs * kept.view_as(probs) * philox._scale(p)
    return (probs @ v).transpose(1, 2).reshape(n, s, three_hidden // 3)


@pytest.mark.parametrize("s", ATTENTION_SEQS)
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_the_attention_kernels_match_pytorch(attention_blocks, p, s):
    """Forward and every gradient of the Triton attention against PyTorch's ops with the same dropout mask."""
    n, heads = ATTENTION["batch"], ATTENTION["heads"]
    g = torch.Generator().manual_seed(3)
    qkv = torch.randn(n, s, 3 * heads * 16, generator=g).requires_grad_()
    bias = torch.zeros(3 * heads * 16, requires_grad=True)  # already in qkv: only its gradient is summed
    grad = torch.randn(n, s, heads * 16, generator=g)
    seed = _seed(1234)
    kept = _attention_kept(seed, p, s) if p else None
    if kept is not None:  # the drop rate, and masks that differ between heads and rows
        assert abs(1 - kept.float().mean().item() - p) < 0.03
        assert not torch.equal(kept[0], kept[1]) and not torch.equal(kept[0, 0], kept[0, 1])
    out, _, bits = torch.ops.rollcall.attention(qkv, bias, seed, p, heads)
    if kept is not None:  # the bits the backward reads are the forward's mask
        assert bits.dtype == torch.int32 and torch.equal(attention_kernels.kept_mask(bits, s), kept)
    else:
        assert bits.numel() == 0
    out.backward(grad)
    mine = qkv.grad
    qkv.grad = None
    expected = _reference_attention(qkv, heads, kept, p)
    expected.backward(grad)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mine, qkv.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bias.grad, qkv.grad.sum((0, 1)), rtol=1e-4, atol=1e-5)


def test_a_layer_with_the_triton_attention_matches_pytorchs_without_dropout(attention_blocks):
    torch.manual_seed(0)
    mine = compact.EncoderLayer(32, 2, 64, dropout=0.0, attn_dropout=0.0, attention="triton")
    theirs = compact.EncoderLayer(32, 2, 64, dropout=0.0, attn_dropout=0.0, attention="math")
    theirs.load_state_dict(mine.state_dict())
    x = torch.randn(2, 24, 32)
    outs = []
    for layer in (mine, theirs):
        xi = x.clone().requires_grad_()
        y = layer(xi)
        y.square().sum().backward()
        outs.append((y, xi.grad))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-4, atol=1e-4)
    for (name, a), b in zip(mine.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4, msg=name)  # the q/k/v bias's too


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("seed", [0, 0x7EDC_BA98_7654_3210, -1])
def test_the_kernels_philox_is_tritons_in_the_interpreter(seed, dtype):
    from tests.unit.test_philox_gpu import philox_both

    ours, theirs = philox_both(seed, "cpu", dtype=dtype)
    assert theirs.unique().numel() > 4000
    assert torch.equal(ours, theirs)
