"""The compact BERT (rollcall_workload.compact) is Hugging Face's BertForPreTraining, on cpu.

Same parameters (count, shapes, one to one through the name map), and from the same weights and batch the
same loss and the same gradients, in float32: within 1e-5 relative for the loss and 1e-4 relative (as a
norm over each parameter, plus 1e-6 absolute) for the gradients.
"""

from __future__ import annotations

import argparse
import copy

import pytest
import torch
import transformers  # noqa: F401

from rollcall_workload import compact
from rollcall_workload import model as workload_model
from rollcall_workload import shape as workload_shape
from rollcall_workload.rank import training as workload_training

TINY = workload_shape.MODEL_PRESETS["tiny"]
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
GRAD_ATOL = 1e-6


def _models(dropout: float = 0.0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(7)
    args = argparse.Namespace(pretrained=None, model="tiny", dropout=dropout, impl="hf")
    hf, _ = workload_model.build_model(args)
    mine, shape = workload_model.build_model(argparse.Namespace(**{**vars(args), "impl": "compact"}))
    assert shape == TINY
    compact.load_hf_state_dict(mine, hf.state_dict())
    return hf.train(), mine.train()


def test_same_parameter_count_and_shapes():
    hf, mine = _models()
    hf_params = dict(hf.named_parameters())  # tied weights listed once
    mine_params = dict(mine.named_parameters())
    assert sum(p.numel() for p in hf_params.values()) == sum(p.numel() for p in mine_params.values())
    mapping = compact.hf_parameter_map(TINY.layers)
    assert set(mapping) == set(hf_params), set(mapping) ^ set(hf_params)
    covered: dict[str, int] = {}
    for hf_name, (name, first, end) in mapping.items():
        assert compact.rows(mine_params[name], first, end).shape == hf_params[hf_name].shape, hf_name
        covered[name] = covered.get(name, 0) + hf_params[hf_name].numel()
    assert covered == {name: p.numel() for name, p in mine_params.items()}  # every element, once


def test_tied_decoder_is_the_word_embedding():
    hf, mine = _models()
    assert hf.cls.predictions.decoder.weight is hf.bert.embeddings.word_embeddings.weight
    assert torch.equal(mine.word.weight, hf.cls.predictions.decoder.weight)
    assert torch.equal(mine.head_bias, hf.cls.predictions.decoder.bias)


def _batch(seed: int, seq_len: int = 48) -> dict[str, torch.Tensor]:
    return workload_model.make_batch(seed, 6, seq_len, TINY.vocab)


@pytest.mark.parametrize("masked_head", [True, False], ids=["masked-head", "head-on-all-tokens"])
def test_same_loss_and_gradients_from_the_same_weights(masked_head):
    hf, mine = _models()
    batch = _batch(11)
    hf_loss = workload_model.pretraining_loss(hf, masked_head=masked_head)(batch)
    mine_loss = workload_model.pretraining_loss(mine, masked_head=masked_head)(batch)
    assert hf_loss.item() == pytest.approx(mine_loss.item(), rel=LOSS_RTOL)
    hf_loss.backward()
    mine_loss.backward()
    mine_params = dict(mine.named_parameters())
    for hf_name, p in hf.named_parameters():
        name, first, end = compact.hf_parameter_map(TINY.layers)[hf_name]
        mine_grad = compact.rows(mine_params[name].grad, first, end)
        # The key bias's gradient is zero in exact arithmetic (softmax ignores a shift shared by all
        # keys): rounding noise there is held to an absolute bound.
        diff, size = float((mine_grad - p.grad).norm()), float(p.grad.norm())
        assert diff <= GRAD_RTOL * size + GRAD_ATOL, (hf_name, diff, size)


def test_head_on_all_tokens_is_the_hugging_face_loss():
    hf, mine = _models()
    batch = _batch(12)
    keys = ("input_ids", "token_type_ids", "labels", "next_sentence_label")
    reference = hf(**{k: batch[k] for k in keys}).loss
    mine.masked_head = False
    assert mine(batch).item() == pytest.approx(reference.item(), rel=LOSS_RTOL)


def test_dropout_is_applied_in_training_only():
    _, mine = _models(dropout=0.5)
    batch = _batch(13)
    torch.manual_seed(0)
    a, b = mine(batch).item(), mine(batch).item()
    assert a != b  # fresh dropout masks
    mine.eval()
    assert mine(batch).item() == mine(batch).item()


def test_loads_only_a_complete_state_dict():
    hf, mine = _models()
    state = hf.state_dict()
    del state["bert.encoder.layer.1.attention.self.key.weight"]
    with pytest.raises(KeyError, match="lacks 1 parameters"):
        compact.load_hf_state_dict(mine, state)


def test_master_weight_optimizer_matches_fp32_adamw():
    """bf16 parameters stepped through fp32 masters track plain fp32 AdamW on the same gradients."""
    torch.manual_seed(3)
    ref = torch.nn.Linear(16, 8)
    low = torch.nn.Linear(16, 8).to(torch.bfloat16)
    low.load_state_dict({k: v.to(torch.bfloat16) for k, v in ref.state_dict().items()})
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    low_opt = workload_training.MasterWeightAdamW(low.parameters(), lr=1e-2, fused=None)
    for step in range(5):
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(step))
        for model, opt, inp in ((ref, ref_opt, x), (low, low_opt, x.to(torch.bfloat16))):
            model(inp).float().square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert low.weight.dtype == torch.bfloat16 and low_opt.master[0].dtype == torch.float32
    # the masters keep fp32 precision; the bf16 parameters are their rounding
    assert torch.equal(low.weight, low_opt.master[0].to(torch.bfloat16))
    assert torch.allclose(low_opt.master[0], ref.weight, atol=2e-2)
    assert low.weight.grad is None


def test_compiled_regions_share_one_graph_for_every_layer_and_keep_the_loss():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    _, eager = _models()
    _, regions = _models()
    layers = 4  # tiny has 2: more layers must still make no more graphs
    for model in (eager, regions):
        model.layers.extend(
            type(model.layers[0])(TINY.hidden, TINY.heads, TINY.intermediate, dropout=0.0, attn_dropout=0.0)
            for _ in range(layers - len(model.layers))
        )
    regions.load_state_dict(eager.state_dict())
    regions.compile_regions(backend="aot_eager", dynamic=False)
    batch = workload_model.make_batch(5, 2, 16, TINY.vocab)
    losses = []
    for model in (eager, regions):
        loss = model(batch)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=LOSS_RTOL, atol=0)
    for (name, p1), p2 in zip(eager.named_parameters(), regions.parameters(), strict=True):
        torch.testing.assert_close(p2.grad, p1.grad, rtol=GRAD_RTOL, atol=GRAD_ATOL, msg=name)
    # the embeddings, one layer's graph for all 4, the heads; a second step compiles nothing more
    assert counters["stats"]["unique_graphs"] == 3, dict(counters["stats"])
    regions(batch).backward()
    assert counters["stats"]["unique_graphs"] == 3, dict(counters["stats"])


def _layer_backward_ops(fused: bool) -> tuple[list[torch.Tensor], set[str]]:
    """One compiled layer's input and parameter gradients, and the ATen ops of its backward graph."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    ops: set[str] = set()

    def backward_compiler(gm: torch.fx.GraphModule, _inputs: object) -> object:
        for n in gm.graph.nodes:
            if n.op == "call_function":  # a mutating op's functional form names the op as its first argument
                ops.update(str(a) for a in (n.target, *n.args[:1]) if callable(a))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    torch.manual_seed(11)
    layer = compact.EncoderLayer(
        TINY.hidden, TINY.heads, TINY.intermediate, dropout=0.0, attn_dropout=0.0, fused_residual=fused
    )
    x = torch.randn(2, 16, TINY.hidden, requires_grad=True)

    def forward_compiler(gm: torch.fx.GraphModule, _inputs: object) -> object:
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)
    torch.compile(layer, backend=backend, fullgraph=True)(x).square().sum().backward()
    return [x.grad, *(p.grad for p in layer.parameters())], ops


def test_a_layer_inputs_two_gradients_are_summed_by_its_matmuls():
    """Same gradients; the residual's gradient is added by the matmul (addmm) instead of an add of its own."""
    plain, plain_ops = _layer_backward_ops(fused=False)
    fused, fused_ops = _layer_backward_ops(fused=True)
    for mine, theirs in zip(fused, plain, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=GRAD_RTOL, atol=GRAD_ATOL)
    assert "rollcall.addmm_into.default" in fused_ops  # traced: added into the residual's gradient
    assert "rollcall.addmm_into.default" not in plain_ops
    assert "aten.addmm.default" not in plain_ops  # the forward's biased matmuls are not in the backward


def test_compiled_the_matmul_adds_into_the_residuals_gradient_in_place():
    """Inductor keeps the sum in place: no copy of the residual's gradient before the matmul adds to it."""
    from torch._dynamo.utils import ReinplaceCounters
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    ReinplaceCounters.clear()
    torch.manual_seed(11)
    layer = compact.EncoderLayer(
        TINY.hidden, TINY.heads, TINY.intermediate, dropout=0.0, attn_dropout=0.0, fused_residual=True
    )
    reference = copy.deepcopy(layer)
    x = torch.randn(2, 16, TINY.hidden, requires_grad=True)
    compiled = torch.compile(layer, fullgraph=True)
    _, code = run_and_get_code(lambda: compiled(x).square().sum().backward())
    backward = "\n".join(code)
    assert backward.count("torch.ops.rollcall.addmm_into.default(") == 2  # the q/k/v and intermediate inputs
    assert ReinplaceCounters.get_total_missed() == 0
    x2 = x.detach().clone().requires_grad_()
    reference(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=GRAD_RTOL, atol=GRAD_ATOL)


@pytest.mark.parametrize(
    ("attention", "seq", "dtype", "autocast", "triton"),
    [
        ("auto", 128, torch.bfloat16, False, True),  # bf16 weights (--precision bf16)
        ("auto", 64, torch.float32, True, True),  # autocast to bf16
        ("auto", 512, torch.bfloat16, False, True),  # longer than one backward kernel's block
        ("auto", 64, torch.float32, False, False),  # float32: PyTorch's attention, not tf32 matmuls
        ("math", 64, torch.bfloat16, False, False),
        ("triton", 256, torch.float32, False, True),
    ],
)
def test_auto_attention_takes_the_triton_kernels_only_where_they_were_measured_faster(
    monkeypatch, attention, seq, dtype, autocast, triton
):
    """Where the kernels can run (here pretended), ``auto`` takes them at half precision, at any length."""
    calls = []

    def fake(qkv, bias, heads, p):
        calls.append(qkv.shape)
        return qkv[..., : qkv.size(-1) // 3]

    monkeypatch.setattr(compact, "triton_attention_available", lambda device, s, d: True)
    monkeypatch.setattr(compact, "attention", fake)
    layer = compact.EncoderLayer(32, 2, 64, dropout=0.0, attn_dropout=0.0, attention=attention).to(dtype)
    x = torch.randn(2, seq, 32, dtype=dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        layer(x)
    assert bool(calls) == triton


def test_the_mlm_decoder_multiplies_a_vocabulary_padded_to_16_bytes_of_bf16():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Shapes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[int, ...]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
                self.seen.append(tuple(args[-1].shape))
            return func(*args, **(kwargs or {}))

    vocab = 1018  # as BERT's 30,522: not a multiple of 8
    torch.manual_seed(3)
    mine = compact.CompactBertForPreTraining(
        vocab=vocab, hidden=TINY.hidden, layers=1, heads=TINY.heads, intermediate=TINY.intermediate
    )
    with Shapes() as shapes:
        loss = mine(workload_model.make_batch(14, 6, 48, vocab))
    padded = vocab + -vocab % compact.VOCAB_ALIGN
    assert (mine.word.weight.size(1), padded) in shapes.seen  # the decoder's matmul, its weight transposed
    assert all(vocab not in shape for shape in shapes.seen)
    loss.backward()
    assert mine.word.weight.grad is not None and mine.word.weight.grad.shape == (vocab, TINY.hidden)
