"""BERT's sizes, the FLOPs a sample costs, and each device's dense bf16 peak: what MFU is measured against."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class BertShape:
    """The sizes of a BERT that the FLOPs count needs."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int


MODEL_PRESETS: dict[str, BertShape] = {
    "tiny": BertShape(hidden=128, layers=2, heads=2, intermediate=512, vocab=8192),
    "base": BertShape(hidden=768, layers=12, heads=12, intermediate=3072, vocab=30522),
    "large": BertShape(hidden=1024, layers=24, heads=16, intermediate=4096, vocab=30522),
}


# Dense bf16 tensor peak per device, FLOP/s, matched as whole words of the device name, first match.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("H100 PCIe", 756.5e12),
    ("H100 NVL", 835.5e12),
    ("H200 NVL", 835.5e12),
    ("GH200", 989.4e12),
    ("H200", 989.4e12),
    ("H100", 989.4e12),
    ("H800", 989.4e12),
    ("H20", 148e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362.05e12),
    ("L40", 181.05e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("MI300X", 1307.4e12),
    ("MI325X", 1307.4e12),
)


def flops_per_sample(shape: BertShape, seq_len: int, mlm_tokens: int | None = None) -> float:
    """Training FLOPs (forward + backward = 6 x matmul params x tokens, plus attention) per sample.

    The encoder and the MLM head (transform + decoder) run on every token, or the MLM head on
    ``mlm_tokens`` only; the pooler and NSP classifier run once per sample. Attention scores and
    their weighted sum add 2 x 2 x seq^2 x hidden per layer forward, times 3 with the backward.
    """
    h = shape.hidden
    heads_tokens = seq_len if mlm_tokens is None else mlm_tokens
    encoder = shape.layers * (4 * h * h + 2 * h * shape.intermediate)
    mlm_head = h * h + h * shape.vocab
    pooler_nsp = h * h + 2 * h
    matmul = encoder * seq_len + mlm_head * heads_tokens + pooler_nsp
    return 6.0 * matmul + 12.0 * shape.layers * h * seq_len * seq_len


def peak_entry(device_name: str) -> tuple[str, float] | None:
    """The entry of :data:`PEAK_BF16_FLOPS` a device's name matches (its key and FLOP/s), or None."""
    for key, flops in PEAK_BF16_FLOPS:
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", device_name, re.IGNORECASE):
            return key, flops
    return None


def peak_flops(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of a device named like ``torch.cuda.get_device_name()``, or None."""
    entry = peak_entry(device_name)
    return entry[1] if entry is not None else None


def model_flops_utilization(flops_sample: float, samples_per_sec: float, peak: float | None) -> float | None:
    """Achieved model FLOP/s over the device's peak, or None when the peak is unknown."""
    if not peak or peak <= 0:
        return None
    return flops_sample * samples_per_sec / peak
