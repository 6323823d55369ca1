"""``--min-busbw auto``: no group below the published floor of the run's instance type, where known."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.checks.slow_links import SLOW_LINK
from rollcall.evidence.floors import below_floors
from rollcall.verdict import Problem


def busbw_floors(run: RunView) -> Iterable[Problem]:
    """``--min-busbw auto``: no group below the published floor of the run's instance type, where known.

    Only a run on the type's GPUs is held to them. A node is held to the type's one-node (NVLink) floor, a
    pair and a world of two nodes or more to its fabric's (EFA); the line names the group, what it measured
    at which size, the floor and its source.
    """
    c, spec, perf = run.criteria, run.observed.spec, run.perf
    if not c.busbw_floors or c.min_busbw is not None or spec is None or spec.accelerator != "nvidia":
        return  # the floors are NCCL's on the type's GPUs: a run on its CPUs is not held to them
    world = run.layout.world_size
    for found in below_floors(perf.groups, spec.instance_type, perf.pods):
        g = found.group
        named = [r for r in g.ranks if 0 <= r < world] if g.scope != "world" else []
        yield Problem(SLOW_LINK, f"slow link: {found}", dict.fromkeys(named, found.note()), detail=found)


CHECK = Check(
    busbw_floors,
    detects="a group below its instance type's published floor, as a `slow_link`",
    reads="`evidence/floors.py`",
    gate_only=True,
    in_trials=True,
)


__all__ = ["CHECK", "busbw_floors"]
