"""Fault injection: the variables that make a rank fail, hang, slow down, corrupt or leave early, parsed.

Each variable and its grammar is described in :mod:`rollcall_workload.contract`. The suite checks them with
:func:`check_fault_injection` before a job starts, so a variable the ranks would refuse is refused first.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from rollcall_workload.contract import NODE_IDS_ENV
from rollcall_workload.gate import ASSUME_ARCH_ENV, KERNEL_NAMES, check_arch

FAIL_RANK_ENV = "ROLLCALL_FAIL_RANK"
KERNEL_MISMATCH_ENV = "ROLLCALL_KERNEL_MISMATCH"
CORRUPT_RANK_ENV = "ROLLCALL_CORRUPT_RANK"
CORRUPT_COLLECTIVE_ENV = "ROLLCALL_CORRUPT_COLLECTIVE"
HANG_RANK_ENV = "ROLLCALL_HANG_RANK"
HANG_NODE_ENV = "ROLLCALL_HANG_NODE"
CHATTY_ENV = "ROLLCALL_CHATTY"
SLOW_RANK_ENV = "ROLLCALL_SLOW_RANK"
SLOW_LINK_ENV = "ROLLCALL_SLOW_LINK"
EXIT_RANK_ENV = "ROLLCALL_EXIT_RANK"


def rank_list(name: str, environ: Mapping[str, str], what: str = "rank") -> frozenset[int]:
    """The ranks (or nodes: ``what``) ``<name>=<rank>[,<rank>...]`` names (none when unset).

    Raises:
        ValueError: the value is not a comma-separated list of non-negative integers.
    """
    value = environ.get(name, "").strip()
    if not value:
        return frozenset()
    try:
        ranks = [int(word) for word in value.split(",")]
    except ValueError:
        ranks = [-1]
    if any(rank < 0 for rank in ranks):
        raise ValueError(
            f"{name}={value!r} is not valid; write {name}=<{what}>[,<{what}>...], e.g. {name}=0,2"
        )
    return frozenset(ranks)


def hung_node(environ: Mapping[str, str], node_rank: int) -> int | None:
    """The node ``node_rank`` is (in ``ROLLCALL_NODE_IDS``' world), if ``ROLLCALL_HANG_NODE`` names it.

    Returns:
        The node, or None when the variable does not name it.

    Raises:
        ValueError: either variable is malformed.
    """
    nodes = rank_list(HANG_NODE_ENV, environ, "node")
    if not nodes:
        return None
    node = node_id(environ, node_rank)
    return node if node in nodes else None


def injected_fault(rank: int, environ: Mapping[str, str]) -> str | None:
    """``"fail"`` or ``"hang"`` when fault injection targets this rank, else None; ValueError when malformed.

    A rank named by both variables fails.
    """
    for name, fault in ((FAIL_RANK_ENV, "fail"), (HANG_RANK_ENV, "hang")):
        if rank in rank_list(name, environ):
            return fault
    return None


def corrupted_rank(name: str, environ: Mapping[str, str]) -> int | None:
    """The rank that ``name`` (``ROLLCALL_CORRUPT_RANK``, ``ROLLCALL_CORRUPT_COLLECTIVE``) targets, or None.

    Raises:
        ValueError: the value is not a rank (a non-negative integer).
    """
    value = environ.get(name, "").strip()
    if not value:
        return None
    rank = int(value) if value.isdigit() else -1
    if rank < 0:
        raise ValueError(f"{name}={value!r} is not valid; write {name}=<rank>")
    return rank


@dataclass(frozen=True)
class Chatty:
    """``ROLLCALL_CHATTY``: which rank prints plain lines, and about how many bytes of them."""

    rank: int
    size: int


def chatty(environ: Mapping[str, str]) -> Chatty | None:
    """What ``ROLLCALL_CHATTY=<rank>:<bytes>`` asks for, or None; ValueError when malformed."""
    value = environ.get(CHATTY_ENV, "").strip()
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        rank, size = int(head), int(tail)
    except ValueError:
        rank, size = -1, -1
    if not sep or rank < 0 or size < 0:
        raise ValueError(f"{CHATTY_ENV}={value!r} is not valid; write {CHATTY_ENV}=<rank>:<bytes>")
    return Chatty(rank, size)


def check_fault_injection(environ: Mapping[str, str]) -> None:
    """Parse every fault-injection variable in ``environ``; ValueError naming the first malformed one."""
    for name in (FAIL_RANK_ENV, HANG_RANK_ENV):
        rank_list(name, environ)
    rank_list(HANG_NODE_ENV, environ, "node")
    chatty(environ)
    slow_ranks(environ)
    slow_link(environ)
    exit_rank(environ)
    for name in (CORRUPT_RANK_ENV, CORRUPT_COLLECTIVE_ENV):
        corrupted_rank(name, environ)
    node_ids(environ)
    mismatched_kernels(environ, rank=0)
    assumed_arch(environ)


def mismatched_kernels(environ: Mapping[str, str], rank: int) -> frozenset[str]:
    """The kernels whose check ``rank`` makes fail (``ROLLCALL_KERNEL_MISMATCH=RANKS[:KERNEL,...]``).

    The kernels of the list, or every kernel without one, on each rank of RANKS; ValueError when malformed.
    """
    text = environ.get(KERNEL_MISMATCH_ENV, "")
    if not text:
        return frozenset()
    ranks, _, kernels = text.partition(":")
    chosen = rank_list(KERNEL_MISMATCH_ENV, {KERNEL_MISMATCH_ENV: ranks})
    names = set(kernels.split(",")) if kernels else set(KERNEL_NAMES)
    if unknown := sorted(names - set(KERNEL_NAMES)):
        raise ValueError(
            f"{KERNEL_MISMATCH_ENV}={text!r}: no kernel {', '.join(unknown)} (of {', '.join(KERNEL_NAMES)})"
        )
    return frozenset(names) if rank in chosen else frozenset()


def assumed_arch(environ: Mapping[str, str]) -> str | None:
    """The GPU architecture ``ROLLCALL_ASSUME_ARCH`` makes the workload take its GPU for, or None."""
    text = environ.get(ASSUME_ARCH_ENV, "")
    return check_arch(text) if text else None


@dataclass(frozen=True)
class SlowRank:
    """``ROLLCALL_SLOW_RANK``: which rank to slow down, and by what factor."""

    rank: int
    factor: float


@dataclass(frozen=True)
class SlowLink:
    """``ROLLCALL_SLOW_LINK``: whose sends to delay in the bandwidth phase, and by how much."""

    node: int
    delay_ms: float


def _pair(name: str, environ: Mapping[str, str], what: str) -> tuple[int, float] | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    head, sep, tail = value.partition(":")
    try:
        index, number = int(head), float(tail)
    except ValueError:
        index, number = -1, math.nan
    if not sep or index < 0 or not math.isfinite(number):
        raise ValueError(f"{name}={value!r} is not valid; write {name}=<{what}>")
    return index, number


def slow_rank(environ: Mapping[str, str]) -> SlowRank | None:
    """The rank ``ROLLCALL_SLOW_RANK=<rank>:<factor>`` slows down, or None; ValueError when malformed."""
    pair = _pair(SLOW_RANK_ENV, environ, "rank>:<factor >= 1")
    if pair is None:
        return None
    if pair[1] < 1:
        raise ValueError(f"{SLOW_RANK_ENV}: the factor must be at least 1, not {pair[1]:g}")
    return SlowRank(*pair)


def slow_ranks(environ: Mapping[str, str]) -> dict[int, float]:
    """Each rank ``ROLLCALL_SLOW_RANK=<rank>:<factor>[,<rank>:<factor>...]`` slows down, by its factor."""
    value = environ.get(SLOW_RANK_ENV, "").strip()
    factors: dict[int, float] = {}
    for part in value.split(",") if value else ():
        one = slow_rank({SLOW_RANK_ENV: part})
        if one is None:
            raise ValueError(
                f"{SLOW_RANK_ENV}={value!r} has an empty entry; "
                f"write {SLOW_RANK_ENV}=<rank>:<factor >= 1>[,<rank>:<factor>...]"
            )
        if one.rank in factors:
            raise ValueError(f"{SLOW_RANK_ENV}: rank {one.rank} is named twice; name each rank once")
        factors[one.rank] = one.factor
    return factors


def slow_link(environ: Mapping[str, str]) -> SlowLink | None:
    """The node ``ROLLCALL_SLOW_LINK=<node>:<ms>`` slows down, or None; ValueError when malformed."""
    pair = _pair(SLOW_LINK_ENV, environ, "node>:<milliseconds >= 0")
    if pair is None:
        return None
    if pair[1] < 0:
        raise ValueError(f"{SLOW_LINK_ENV}: the delay must not be negative, not {pair[1]:g}")
    return SlowLink(*pair)


def node_ids(environ: Mapping[str, str]) -> tuple[int, ...]:
    """``ROLLCALL_NODE_IDS=2,3``: each node rank's node in the larger world (empty: its own rank)."""
    value = environ.get(NODE_IDS_ENV, "").strip()
    if not value:
        return ()
    words = [w.strip() for w in value.split(",")]
    if not all(w.isdigit() for w in words) or len(set(words)) != len(words):
        raise ValueError(
            f"{NODE_IDS_ENV}={value!r} is not valid; write {NODE_IDS_ENV}=<node>[,<node>...], distinct "
            "whole numbers, one per node rank"
        )
    return tuple(int(w) for w in words)


def node_id(environ: Mapping[str, str], node_rank: int) -> int:
    """The node ``node_rank`` is in the world ``ROLLCALL_NODE_IDS`` names (``node_rank`` without it)."""
    ids = node_ids(environ)
    if not ids:
        return node_rank
    if node_rank >= len(ids):
        raise ValueError(f"{NODE_IDS_ENV} names {len(ids)} node(s), but this is node rank {node_rank}")
    return ids[node_rank]


@dataclass(frozen=True)
class ExitRank:
    """``ROLLCALL_EXIT_RANK``: which rank ends badly after its roll call, with which status or signal."""

    rank: int
    code: int = 0
    signal: str | None = None


def exit_rank(environ: Mapping[str, str]) -> ExitRank | None:
    """The rank ``ROLLCALL_EXIT_RANK=<rank>:<code|SIGNAL>`` ends badly, or None; ValueError when malformed."""
    value = environ.get(EXIT_RANK_ENV, "").strip()
    if not value:
        return None
    head, _, tail = value.partition(":")
    names = {s.name for s in signal.Signals}
    if head.isdigit() and tail.upper() in names:
        return ExitRank(int(head), signal=tail.upper())
    if head.isdigit() and tail.isdigit() and 1 <= int(tail) <= 255:
        return ExitRank(int(head), code=int(tail))
    raise ValueError(
        f"{EXIT_RANK_ENV}={value!r} is not valid; write {EXIT_RANK_ENV}=<rank>:<exit code 1-255> "
        f"or {EXIT_RANK_ENV}=<rank>:<signal name, e.g. SIGKILL>"
    )
