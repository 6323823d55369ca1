"""The proofs that a rank trained correctly: the collectives' exact pattern, and its parameters' digest."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from rollcall_workload.contract import PARAM_DIGEST_HEX

#: The bandwidth phase's data: rank r sends (i + PATTERN_STRIDE * r) % PATTERN_PERIOD + 1 at element i, small
#: integers whose sums float32 holds exactly (up to 2**24 / PATTERN_PERIOD ranks) in any order of reduction.
PATTERN_PERIOD = 251  # prime: a chunk moved by any power-of-two offset lands on other values
PATTERN_STRIDE = 37
#: Elements ROLLCALL_CORRUPT_COLLECTIVE zeroes in each result its rank receives (from a third of the buffer).
CORRUPT_CHUNK = 1024


def pattern_row(rank: int) -> list[int]:
    """One period of what ``rank`` all-reduces in the bandwidth phase: element i is ``row[i % len(row)]``."""
    return [(i + PATTERN_STRIDE * rank) % PATTERN_PERIOD + 1 for i in range(PATTERN_PERIOD)]


def expected_row(ranks: Iterable[int]) -> list[int]:
    """One period of the exact sum an all-reduce of the patterns of ``ranks`` returns."""
    total = [0] * PATTERN_PERIOD
    for rank in ranks:
        for i, value in enumerate(pattern_row(rank)):
            total[i] += value
    return total


@dataclass(frozen=True)
class Mismatch:
    """A result that differs from the exact sum: how many elements, and the first of them."""

    elements: int
    index: int
    expected: float
    got: float


def mismatch(received: torch.Tensor, expected: torch.Tensor) -> Mismatch | None:
    """How ``received`` differs from ``expected`` (NaN counts as wrong), or None when they are equal."""
    import torch

    if torch.equal(received, expected):
        return None
    wrong = received.ne(expected)
    index = int(wrong.to(torch.uint8).argmax())  # the first wrong element
    return Mismatch(int(wrong.sum()), index, float(expected[index]), float(received[index]))


@dataclass
class ResultCheck:
    """The check of every timed all-reduce's result one rank received from one group."""

    checked: int = 0
    wrong: int = 0
    first: Mismatch | None = None

    def check(self, received: torch.Tensor, expected: torch.Tensor) -> None:
        """Compare one received result with the exact sum."""
        self.checked += 1
        found = mismatch(received, expected)
        if found is not None:
            self.wrong += 1
            self.first = self.first or found

    def fields(self) -> dict[str, Any]:
        """The ``bandwidth`` event's ``checked`` and ``mismatch`` fields."""
        found = None
        if self.first is not None:
            found = {"iters": self.wrong, **asdict(self.first)}
        return {"checked": self.checked, "mismatch": found}


def pattern_tensor(row: Sequence[int], numel: int, device: Any) -> torch.Tensor:
    """``numel`` float32 elements repeating ``row``, on ``device``."""
    import torch

    period = torch.tensor(row, dtype=torch.float32, device=device)
    return period.repeat(-(-numel // len(row)))[:numel].contiguous()


def drop_chunk(received: torch.Tensor) -> None:
    """``ROLLCALL_CORRUPT_COLLECTIVE``: zero :data:`CORRUPT_CHUNK` elements from a third of ``received``."""
    start = received.numel() // 3
    received[start : start + CORRUPT_CHUNK].zero_()


#: The checksums' odd multipliers: element i of a parameter is weighted by (i * _MIX + _OFFSET) | 1, mod 2**64
#: (as signed 64-bit integers: the golden ratio's and a second odd constant's bits).
_MIX = 0x9E3779B97F4A7C15 - (1 << 64)
_OFFSET = 0x632BE59BD9B4E019
_CHUNK = 1 << 22  # elements per pass: at most 4 M x 8 bytes x 3 of scratch on the device


def parameter_checksums(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """One 64-bit checksum per tensor, computed where the tensors are: an int64 tensor there.

    A tensor's checksum is the sum, modulo 2**64, of its elements read as integers (their bits, sign
    extended), element i times its own odd multiplier: one changed bit changes the sum by that bit's value
    times an odd number, never by a multiple of 2**64, so it always changes the checksum; integer sums do
    not depend on the order of the reduction, so equal tensors give equal checksums on any such device.
    """
    import torch

    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    sums = []
    with torch.no_grad():
        for param in params:
            flat = param.detach().reshape(-1).view(ints[param.element_size()])
            total = torch.zeros((), dtype=torch.int64, device=flat.device)
            for start in range(0, flat.numel(), _CHUNK):
                part = flat[start : start + _CHUNK].to(torch.int64)
                index = torch.arange(start, start + part.numel(), dtype=torch.int64, device=flat.device)
                total += (part * ((index * _MIX + _OFFSET) | 1)).sum()
            sums.append(total)
    return torch.stack(sums) if sums else torch.zeros(0, dtype=torch.int64)


def parameter_digest(model: torch.nn.Module) -> str:
    """The replica's fingerprint (:data:`PARAM_DIGEST_HEX` hex digits): see "Replicas" above.

    On cuda, SHA-256 of the parameters' checksums (:func:`parameter_checksums`, computed on the GPU, one
    copy of 8 bytes a parameter to the host: milliseconds where copying BERT-large's 670 MB took 0.7 s);
    elsewhere SHA-256 of every parameter's bytes, copied to the host.
    """
    import hashlib

    import torch

    digest = hashlib.sha256()
    params = list(model.parameters())
    with torch.no_grad():
        if params and params[0].is_cuda:
            digest.update(parameter_checksums(params).cpu().numpy().data)
        else:
            for param in params:
                digest.update(param.detach().reshape(-1).view(torch.uint8).cpu().numpy().data)
    return digest.hexdigest()[:PARAM_DIGEST_HEX]


def flip_bit(param: torch.Tensor) -> None:
    """Flip the top mantissa bit of the first element of ``param`` in place, as a silent corruption would."""
    import torch

    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[param.element_size()]
    bit = round(-math.log2(torch.finfo(param.dtype).eps)) - 1
    with torch.no_grad():
        param.detach().view(-1)[:1].view(ints).bitwise_xor_(1 << bit)
