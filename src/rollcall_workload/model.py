"""The model and its data: BERT built from a preset (no downloads), synthetic MLM + NSP batches, the loss."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from rollcall_workload.shape import MODEL_PRESETS, BertShape

DATA_POOL_BATCHES = 4  # batches generated once per rank, reused in turn
MASK_PROB = 0.15
CLS_ID, SEP_ID, MASK_ID = 101, 102, 103  # BERT's uncased vocabulary ids
FIRST_WORD_ID = 1000  # synthetic "words" are drawn from [FIRST_WORD_ID, vocab_size)


def batch_seed(seed: int, rank: int, index: int) -> int:
    """Distinct generator seed for each (seed, rank, batch index)."""
    return ((seed & 0xFFFFF) << 40 | (rank & 0xFFFFF) << 20 | (index & 0xFFFFF)) & (2**63 - 1)


def model_shape(args: argparse.Namespace) -> BertShape:
    """The shape :func:`build_model` will build: the preset's, or the local weights' configuration."""
    if not args.pretrained:
        return MODEL_PRESETS[args.model]
    from transformers import BertConfig

    return shape_of(BertConfig.from_pretrained(args.pretrained, local_files_only=True))


def shape_of(config: Any) -> BertShape:
    """The shape of a ``transformers.BertConfig``."""
    c = config
    return BertShape(
        c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size, c.vocab_size
    )


def build_model(args: argparse.Namespace) -> tuple[torch.nn.Module, BertShape]:
    """A randomly initialised preset, or local weights; with its shape for the FLOPs count.

    ``args.impl`` picks Hugging Face's ``BertForPreTraining`` (``hf``) or the compact model of
    :mod:`rollcall_workload.compact` (``compact``; local weights are Hugging Face's, converted).
    """
    if getattr(args, "impl", "hf") == "compact":
        return _build_compact(args)
    from transformers import BertConfig, BertForPreTraining

    if args.pretrained:
        if not os.path.isdir(args.pretrained):
            raise FileNotFoundError(f"--pretrained {args.pretrained} is not a directory of saved weights")
        model = BertForPreTraining.from_pretrained(
            args.pretrained, local_files_only=True, attn_implementation="sdpa"
        )
    else:
        s = MODEL_PRESETS[args.model]
        config = BertConfig(
            vocab_size=s.vocab,
            hidden_size=s.hidden,
            num_hidden_layers=s.layers,
            num_attention_heads=s.heads,
            intermediate_size=s.intermediate,
            max_position_embeddings=512,
            attn_implementation="sdpa",
        )  # type: ignore[call-arg]
        if getattr(args, "dropout", None) is not None:
            config.hidden_dropout_prob = config.attention_probs_dropout_prob = args.dropout
        model = BertForPreTraining(config)
    shape = shape_of(model.config)
    if shape.vocab <= FIRST_WORD_ID + 1:
        raise ValueError(f"vocabulary of {shape.vocab} is too small for the synthetic data")
    return model, shape


def _build_compact(args: argparse.Namespace) -> tuple[torch.nn.Module, BertShape]:
    from rollcall_workload import compact  # imports torch

    if args.pretrained:
        hf, shape = build_model(argparse.Namespace(**{**vars(args), "impl": "hf"}))
        c: Any = hf.config
        dropout, attn_dropout = c.hidden_dropout_prob, c.attention_probs_dropout_prob
    else:
        shape = MODEL_PRESETS[args.model]
        dropout = attn_dropout = 0.1 if getattr(args, "dropout", None) is None else args.dropout
    model = compact.CompactBertForPreTraining(
        vocab=shape.vocab,
        hidden=shape.hidden,
        layers=shape.layers,
        heads=shape.heads,
        intermediate=shape.intermediate,
        dropout=dropout,
        attn_dropout=attn_dropout,
        attention=getattr(args, "attention", "auto"),
        fused_norm=bool(getattr(args, "fused_ln_dropout", False)),
        fused_gelu=bool(getattr(args, "fused_gelu", False)),
        fused_bias=bool(getattr(args, "fused_bias", False)),
        fused_residual=bool(getattr(args, "fused_residual_grad", False)),
    )
    if args.pretrained:
        compact.load_hf_state_dict(model, hf.state_dict())
    if shape.vocab <= FIRST_WORD_ID + 1:
        raise ValueError(f"vocabulary of {shape.vocab} is too small for the synthetic data")
    return model, shape


def mlm_predictions(seq_len: int) -> int:
    """Masked positions per sample: 15% of the word positions ([CLS] and two [SEP] excluded), at least 1.

    A fixed count (as in BERT's ``max_predictions_per_seq``) keeps every batch the same shape, so the MLM
    head can run on the masked positions only without dynamic shapes.
    """
    return max(1, round(MASK_PROB * (seq_len - 3)))


def make_batch(seed: int, batch_size: int, seq_len: int, vocab: int) -> dict[str, torch.Tensor]:
    """One synthetic pre-training batch: [CLS] A [SEP] B [SEP], 15% of word positions masked.

    Besides the full-length ``labels`` (-100 where not masked), ``masked_positions`` and ``masked_labels``
    ([batch, :func:`mlm_predictions`]) name the masked positions for a head that runs on those only.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    shape = (batch_size, seq_len)
    ids = torch.randint(FIRST_WORD_ID, vocab, shape, generator=g)
    pos = torch.arange(seq_len).unsqueeze(0)
    sep = torch.randint(2, seq_len - 2, (batch_size, 1), generator=g)  # both sentences >= 1 token
    special = (pos == 0) | (pos == sep) | (pos == seq_len - 1)
    ids = torch.where(pos == 0, CLS_ID, torch.where(special, SEP_ID, ids))
    # Exactly k word positions per sample: the k highest random scores, specials never chosen.
    scores = torch.rand(shape, generator=g).masked_fill(special, -1.0)
    positions = scores.topk(mlm_predictions(seq_len), dim=1).indices.sort(dim=1).values
    masked = torch.zeros(shape, dtype=torch.bool).scatter_(1, positions, True)
    how = torch.rand(shape, generator=g)
    inputs = torch.where(masked & (how < 0.8), MASK_ID, ids)  # 80% [MASK], 10% random, 10% kept
    random_words = torch.randint(FIRST_WORD_ID, vocab, shape, generator=g)
    inputs = torch.where(masked & (how >= 0.8) & (how < 0.9), random_words, inputs)
    return {
        "input_ids": inputs,
        "token_type_ids": (pos > sep).long().expand(batch_size, -1).contiguous(),
        "labels": torch.where(masked, ids, -100),
        "next_sentence_label": torch.randint(0, 2, (batch_size,), generator=g),
        "masked_positions": positions,
        "masked_labels": ids.gather(1, positions),
    }


def pretraining_loss(model: Any, masked_head: bool) -> torch.nn.Module:
    """BERT's pre-training loss (MLM + NSP) as one module for DDP to wrap.

    With ``masked_head`` the MLM head (transform + vocabulary decoder) runs on the masked positions only,
    which is all the loss needs; otherwise on every token, as ``BertForPreTraining.forward`` does.
    The compact model computes this loss itself: it is returned as it is, set to ``masked_head``.
    """
    import torch
    import torch.nn.functional as F

    compact = sys.modules.get("rollcall_workload.compact")  # loaded if the model is compact
    if compact is not None and isinstance(model, compact.CompactBertForPreTraining):
        model.masked_head = masked_head
        return model  # type: ignore[no-any-return]

    class PreTrainingLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            if not masked_head:
                keys = ("input_ids", "token_type_ids", "labels", "next_sentence_label")
                return self.model(**{k: batch[k] for k in keys}).loss  # type: ignore[no-any-return]
            hidden, pooled = self.model.bert(
                input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], return_dict=False
            )[:2]
            index = batch["masked_positions"].unsqueeze(-1).expand(-1, -1, hidden.size(-1))
            logits = self.model.cls.predictions(hidden.gather(1, index))
            nsp = self.model.cls.seq_relationship(pooled)
            mlm_loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["masked_labels"].flatten())
            return mlm_loss + F.cross_entropy(nsp.float(), batch["next_sentence_label"])

    return PreTrainingLoss()


def batch_pool(args: argparse.Namespace, rank: int, vocab: int, device: Any) -> list[dict[str, Any]]:
    """Fixed pool of batches, made once and moved to the device before any timing."""
    return [
        {
            k: v.to(device)
            for k, v in make_batch(
                batch_seed(args.seed, rank, i), args.batch_size, args.seq_len, vocab
            ).items()
        }
        for i in range(DATA_POOL_BATCHES)
    ]
