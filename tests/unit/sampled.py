"""A ``samples`` event for a test's ranks: the one reading of ``facts`` held in every read, as the workload on
cuda says it after its timed epochs (for tests whose device must be judged as sampled)."""

from __future__ import annotations

from typing import Any

from rollcall_workload import contract

#: The reads a test's rank says it sampled.
SAMPLES = 10


def held(facts: dict[str, Any], samples: int = SAMPLES) -> dict[str, Any]:
    """The ``samples`` fields of a device whose every read found ``facts``' PCIe link and clock events."""
    fields: dict[str, Any] = {"samples": samples}
    if isinstance(events := facts.get("clock_events"), list):
        fields["clock_events_share"] = dict.fromkeys(events, 1.0)
    for key in ("pcie_gen", "pcie_width"):
        if key in facts:
            fields[f"{key}_min"] = fields[f"{key}_max"] = facts[key]
    return fields


def held_line(rank: int, world: int, facts: dict[str, Any], samples: int = SAMPLES) -> str:
    """The ``samples`` line (no newline, no prefix) of ``rank`` holding ``facts`` in every read."""
    return contract.encode_event("samples", rank, world, **held(facts, samples)).decode().rstrip("\n")
