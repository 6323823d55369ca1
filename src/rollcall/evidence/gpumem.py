"""GPU memory another process held before the run: who held how much; an out-of-memory told by its words.

Pure functions over a device's facts (the workload's ``memory_used_mib`` and ``gpu_processes``, read before
the rank created its CUDA context, see :mod:`rollcall_workload.rank.gpumem`): :func:`held_memory` names what
was held and by whom (a pid only where it resolved in the rank's own namespace, else "a process outside this
container"; never the rank itself nor a process of its own job); :func:`out_of_memory` tells an
out-of-memory error by what it says (torch's ``OutOfMemoryError``, CUDA's "out of memory").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Memory in use before the run, with no process NVML lists, that counts as held (MiB): below it, what the
#: driver itself keeps on a GPU NVML's older reading counts as used.
UNLISTED_FLOOR_MIB = 1024
#: Where a process NVML listed stands to the rank (the workload's ``Holder``): the strangers.
STRANGERS: tuple[str, ...] = ("container", "outside")
#: What an out-of-memory error says, torch's and CUDA's wording (matched case-insensitively).
OUT_OF_MEMORY = r"OutOfMemoryError|out of memory"
_OOM = re.compile(OUT_OF_MEMORY, re.IGNORECASE)


def out_of_memory(message: str) -> bool:
    """Whether ``message`` is an out-of-memory error."""
    return bool(_OOM.search(message))


def _gib(mib: int | None) -> str:
    return "memory unknown" if mib is None else f"{mib / 1024:.1f} GiB"


@dataclass(frozen=True)
class Holder:
    """A process that held memory on the GPU: its pid (where the rank could see it), its memory in MiB."""

    pid: int | None
    used_mib: int | None

    def __str__(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "a process outside this container"
        return f"{who} ({_gib(self.used_mib)})"


@dataclass(frozen=True)
class HeldMemory:
    """What others held on a GPU before the run: its memory in use (MiB) and the processes holding it."""

    used_mib: int | None
    holders: tuple[Holder, ...]

    @property
    def by(self) -> str:
        """``held by pid 1009 (110.5 GiB)``; ``by no process NVML lists`` when it listed none."""
        if not self.holders:
            return "by no process NVML lists"
        return f"held by {', '.join(map(str, self.holders))}"

    def __str__(self) -> str:
        used = f"{_gib(self.used_mib)} in use" if self.used_mib is not None else "memory in use"
        return f"{used} before the run, {self.by}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "used_mib": self.used_mib,
            "holders": [{"pid": h.pid, "used_mib": h.used_mib} for h in self.holders],
        }


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def held_memory(facts: Mapping[str, Any]) -> HeldMemory | None:
    """What others held on the device of ``facts`` before the run; None when nothing (or nothing read).

    A process the workload placed ``container`` is named by pid, ``outside`` as a process outside this
    container; the rank's own (``self``) and its job's (``job``) are never counted. Memory in use with no
    process listed at all counts from :data:`UNLISTED_FLOOR_MIB`.
    """
    used = _int(facts.get("memory_used_mib"))
    listed = facts.get("gpu_processes")
    processes = [p for p in listed if isinstance(p, list | tuple) and len(p) == 3] if listed else []
    holders = tuple(
        Holder(_int(pid) if holder == "container" else None, _int(mib))
        for pid, mib, holder in processes
        if holder in STRANGERS
    )
    if holders:
        return HeldMemory(used, holders)
    if not processes and "gpu_processes" in facts and used is not None and used >= UNLISTED_FLOOR_MIB:
        return HeldMemory(used, ())
    return None


__all__ = [
    "OUT_OF_MEMORY",
    "STRANGERS",
    "UNLISTED_FLOOR_MIB",
    "HeldMemory",
    "Holder",
    "held_memory",
    "out_of_memory",
]
