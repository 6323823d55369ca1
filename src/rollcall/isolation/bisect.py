"""Bisection over nodes: name the node(s) that fail alone or in every group holding them.

The world failed. :func:`bisect` splits the nodes still suspected into two halves and tries each (a short
run of those nodes alone); a half that passes clears its nodes, a half that fails is split again, until the
failing groups are single nodes. A half too small to try alone (a run needs ``min_nodes`` nodes, e.g. two
when a node holds one rank and the bandwidth phase needs two) is tried beside nodes already cleared. With one
bad node that is two tries per level, ``2 * ceil(log2(N))`` in all.

When both halves of a failing group pass, the fault needs nodes of both (a link between them): the group's
nodes are every failing group's, and are named together. A group that cannot be tried (no cleared node to
pad it with) is named whole, and so is what is left once ``max_runs`` tries are spent. Pure: the tries are
a callable; nothing here runs a job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trial:
    """One short run of some nodes and what it showed.

    Attributes:
        nodes: the nodes it ran, as indices of the world.
        failed: whether the run failed.
        evidence: what its verdict said (its first problem, or its figures when it passed).
        padding: nodes already cleared that ran beside the suspects to make the run big enough.
        name: the job's name.
        duration_s: how long it took.
        machines: the machines it was pinned to (empty: where the backend placed it).
    """

    nodes: tuple[int, ...]
    failed: bool
    evidence: str
    padding: tuple[int, ...] = ()
    name: str = ""
    duration_s: float = 0.0
    machines: tuple[str, ...] = ()

    def line(self) -> str:
        """``nodes 2-3 failed: slow link: world ...``."""
        pad = f" (node(s) {_list(self.padding)} cleared before)" if self.padding else ""
        return f"nodes {_list(self.nodes)}{pad} {'failed' if self.failed else 'passed'}: {self.evidence}"

    def as_dict(self) -> dict[str, Any]:
        """The trial, JSON-ready."""
        return {
            "nodes": list(self.nodes),
            "padding": list(self.padding),
            "failed": self.failed,
            "evidence": self.evidence,
            "name": self.name,
            "duration_s": round(self.duration_s, 3),
            "machines": list(self.machines),
        }


#: Runs the given nodes (indices of the world; the second argument: the cleared ones among them) once.
Try = Callable[[tuple[int, ...], tuple[int, ...]], Trial]


@dataclass(frozen=True)
class Suspect:
    """Nodes named together: each one fails alone, or every failing group holds all of them."""

    nodes: tuple[int, ...]
    why: str

    def as_dict(self) -> dict[str, Any]:
        """The suspect, JSON-ready."""
        return {"nodes": list(self.nodes), "why": self.why}


@dataclass(frozen=True)
class Isolation:
    """What bisection found: the suspects, and every trial it ran, in order."""

    nodes: tuple[int, ...]
    suspects: tuple[Suspect, ...] = ()
    trials: tuple[Trial, ...] = ()
    cleared: tuple[int, ...] = ()

    @property
    def suspect_nodes(self) -> tuple[int, ...]:
        """Every suspected node, once each, in order."""
        return tuple(sorted({n for s in self.suspects for n in s.nodes}))

    @property
    def alone(self) -> bool:
        """Single nodes were named, each failing without the others."""
        return bool(self.suspects) and all(len(s.nodes) == 1 for s in self.suspects)

    def as_dict(self) -> dict[str, Any]:
        """The search, JSON-ready."""
        return {
            "nodes": list(self.nodes),
            "suspects": [s.as_dict() for s in self.suspects],
            "suspect_nodes": list(self.suspect_nodes),
            "cleared": list(self.cleared),
            "runs": [t.as_dict() for t in self.trials],
        }


def budget(nodes: int) -> int:
    """The most trials a search over ``nodes`` runs: twice the levels, as much again for a second fault."""
    return 4 * max(1, math.ceil(math.log2(max(2, nodes))))


def bisect(nodes: Sequence[int], trial: Try, *, min_nodes: int = 1, max_runs: int | None = None) -> Isolation:
    """Search ``nodes`` (a world that failed) with ``trial`` for the node(s) that fail alone or together.

    Args:
        nodes: the world's nodes.
        trial: runs the nodes it is given once and says whether they failed.
        min_nodes: the fewest nodes a trial may run (smaller groups are padded with cleared nodes).
        max_runs: the most trials (default :func:`budget`).
    """
    world = tuple(sorted(nodes))
    limit = budget(len(world)) if max_runs is None else max_runs
    cleared: set[int] = set()
    trials: list[Trial] = []
    suspects: list[Suspect] = []

    def attempt(group: tuple[int, ...]) -> Trial | None:
        padding: tuple[int, ...] = ()
        if len(group) < min_nodes:
            spare = sorted(cleared - set(group))
            if len(group) + len(spare) < min_nodes:
                return None
            padding = tuple(spare[: min_nodes - len(group)])
        if len(trials) >= limit:
            return None
        result = trial(tuple(sorted(group + padding)), padding)
        trials.append(result)
        if not result.failed:
            cleared.update(result.nodes)
        return result

    def search(group: tuple[int, ...]) -> None:  # ``group`` failed (alone, or beside cleared nodes)
        if len(group) == 1:
            suspects.append(Suspect(group, "fails alone"))
            return
        cut = (len(group) + 1) // 2
        halves = (group[:cut], group[cut:])
        # a half big enough to run alone goes first: if it passes, its nodes can pad the other
        order = sorted(halves, key=lambda h: len(h) < min_nodes)
        results = {h: attempt(h) for h in order}
        failing = [h for h in halves if (r := results[h]) is not None and r.failed]
        untried = [h for h in halves if results[h] is None]
        if failing:
            for half in failing:
                search(half)
            for half in untried:
                suspects.append(Suspect(half, "not tried: no cleared node to run beside, or no runs left"))
            return
        if untried:
            suspects.append(Suspect(group, "not split further: a half could not be tried"))
            return
        if group == world:  # nothing failed again: the short run does not show this fault, or it spans halves
            why = (
                "no trial failed: the short run does not reproduce the failure, or it needs nodes of both "
                "halves"
            )
        else:
            why = "its halves pass apart: the fault needs nodes of both"
        suspects.append(Suspect(group, why))

    if len(world) >= 2:
        search(world)
    elif world:
        suspects.append(Suspect(world, "the only node"))
    return Isolation(world, tuple(suspects), tuple(trials), tuple(sorted(cleared)))


def _list(nodes: Sequence[int]) -> str:
    ordered = sorted(nodes)
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


__all__ = ["Isolation", "Suspect", "Trial", "Try", "bisect", "budget"]
