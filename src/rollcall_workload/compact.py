"""A compact BERT for pre-training in plain PyTorch: the same model as Hugging Face's ``BertForPreTraining``.

The same parameters (count, shapes and, through :func:`hf_parameter_map`, one to one with the Hugging Face
names) and the same function, written for a compiler: one fused query/key/value projection per layer,
attention through ``scaled_dot_product_attention`` (flash attention on a GPU), and the bias+GELU and
dropout+residual+LayerNorm chains as plain expressions that ``torch.compile`` fuses into single kernels.
With ``fused_norm`` the dropout+residual+LayerNorm chain runs on CUDA as hand-written Triton kernels
instead (:func:`~rollcall_workload.kernels.norm.dropout_add_layer_norm`: one Philox call per eight
elements, the mask regenerated in the backward from the seed; with ``fused_bias`` the bias of the matmul
before it too), and with ``fused_gelu`` the bias+GELU chain
(:func:`~rollcall_workload.kernels.gelu.bias_gelu`), the plain expressions remaining the path everywhere
else.
The module computes the pre-training loss (MLM + NSP) of a batch itself, with the MLM head on the masked
positions only (or on every token), so shapes are static and no logits over the whole sequence exist.

What is left out because the workload never uses it: attention masks (every token is real), decoders and
cross-attention, ``position_ids`` other than ``0..seq-1``. The test ``tests/unit/test_bert_compact.py``
holds it to the Hugging Face model: same parameter count and shapes, same loss and gradients from the same
weights and batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from rollcall_workload.kernels.attention import _half_precision, attention, triton_attention_available
from rollcall_workload.kernels.gelu import bias_gelu
from rollcall_workload.kernels.norm import dropout_add_layer_norm

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
    "auto": None,  # Triton's kernels in bf16 where they run (and are proven: the gate), else PyTorch's
    "sdpa": None,  # PyTorch's, with the backend it picks
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "triton": None,  # this file's Triton kernels, with their own dropout (:func:`attention`)
}


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
