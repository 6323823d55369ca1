"""The parameter digest on one GPU: SHA-256 of the bytes copied to the host, against the GPU's checksums.

    python3 bench/gpu_digest.py      # the compact BERT-large in bf16: median of 5 each, then a flipped bit

Prints each way's median time and digest, and whether one flipped bit changes the digest and flipping it
back restores it.
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload import compact
from rollcall_workload.contract import PARAM_DIGEST_HEX
from rollcall_workload.rank.proofs import flip_bit, parameter_digest
from rollcall_workload.shape import MODEL_PRESETS


def host_bytes(model: torch.nn.Module) -> str:
    """The digest as the CPU computes it: SHA-256 of every parameter's bytes, copied to the host."""
    digest = hashlib.sha256()
    for param in model.parameters():
        digest.update(param.detach().reshape(-1).view(torch.uint8).cpu().numpy().data)
    return digest.hexdigest()[:PARAM_DIGEST_HEX]


def main() -> None:
    s = MODEL_PRESETS["large"]
    with torch.device("cuda"):
        model = compact.CompactBertForPreTraining(
            vocab=s.vocab, hidden=s.hidden, layers=s.layers, heads=s.heads, intermediate=s.intermediate
        ).to(torch.bfloat16)
    ways: tuple[tuple[str, Callable[[torch.nn.Module], str]], ...] = (
        ("host bytes", host_bytes),
        ("GPU checksums", parameter_digest),
    )
    for name, digest_of in ways:
        digest_of(model)
        times = []
        for _ in range(5):
            started = time.perf_counter()
            out = digest_of(model)
            times.append(time.perf_counter() - started)
        print(f"{name}: median {statistics.median(times) * 1e3:.1f} ms, digest {out}")
    first = parameter_digest(model)
    param = next(model.parameters())
    flip_bit(param)
    print("a flipped bit changes it:", parameter_digest(model) != first)
    flip_bit(param)
    print("flipped back, the same again:", parameter_digest(model) == first)


if __name__ == "__main__":
    main()
