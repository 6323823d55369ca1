"""Rank and node lists as compact ranges: ``"1-3, 7"`` for people, ``"0-7,16"`` in the rank-log contract.

:func:`ranges` writes a list for a message or a report; :func:`parse_ranges` reads the contract's (a
``bandwidth`` group's members), and returns None for anything that is not one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator

#: The most members a group's compact range may expand to (a garbled record must not eat the memory).
MAX_GROUP_MEMBERS = 1 << 20


def ranges(ranks: Iterable[int]) -> str:
    """Compact, sorted rank list: ``[1, 2, 3, 7]`` gives ``"1-3, 7"``."""
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in _runs(sorted(set(ranks))))


def _runs(ranks: list[int]) -> Iterator[tuple[int, int]]:
    if not ranks:
        return
    first = prev = ranks[0]
    for r in ranks[1:]:
        if r != prev + 1:
            yield first, prev
            first = r
        prev = r
    yield first, prev


def counted(n: int, word: str) -> str:
    """``1 node``, ``2 nodes``: a count and its noun, singular or plural."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def named(word: str, items: Iterable[int]) -> str:
    """``node 0``, ``nodes 0-1, 3``: a noun, singular or plural, and its compact ranges."""
    listed = sorted(set(items))
    return f"{word} {ranges(listed)}" if len(listed) == 1 else f"{word}s {ranges(listed)}"


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_ranges(text: object) -> tuple[int, ...] | None:
    """``"0-3,8"`` gives ``(0, 1, 2, 3, 8)``; None for anything else (not text, empty, a bad or reversed run).

    Members past :data:`MAX_GROUP_MEMBERS` make it None too.
    """
    if not isinstance(text, str) or not text:
        return None
    return _members(text)


#: Distinct groups' ranges kept parsed: every rank of a group names the same members, so each group's are
#: parsed once and its ranks share one tuple (the world's 8192 members, not 8192 copies of them).
_MEMBERS_CACHED = 1 << 14


@functools.lru_cache(maxsize=_MEMBERS_CACHED)
def _members(text: str) -> tuple[int, ...] | None:
    members: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if last < first or len(members) + last - first >= MAX_GROUP_MEMBERS:
            return None
        members.update(range(first, last + 1))
    return tuple(sorted(members))
