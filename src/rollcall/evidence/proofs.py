"""Proof that every rank trained correctly: replicas that agree, exact all-reduces, a loss that falls.

Pure functions over the ranks' reports (:mod:`rollcall.ranklog`) that return typed findings;
:mod:`rollcall.judge` runs them as checks (problems of kinds ``replica_divergence``,
``collective_mismatch`` and ``loss``).

- **Replicas.** With DDP every rank applies the same averaged gradients to the same initial weights, so after
  each timed epoch and at completion every rank holds bitwise the same parameters and reports the same
  ``param_digest``. At each of those points the value most ranks hold is the replicas' (on a tie, the one the
  lowest rank holds: rank 0's weights are the ones DDP broadcast); a rank holding another diverged, and is
  named with the first epoch it did.
- **Collectives.** Each rank checked every result it received from the bandwidth phase's timed all-reduces
  against the exact sum; a ``mismatch`` names what was wrong. The findings are per group (scope, members),
  listing the ranks that received wrong data; when all of them are on one node, that node is named, else
  the one link (pair of nodes) that every wrong group crosses and no right group does, if there is one.
- **Loss.** A loss that is not finite fails. The loss must fall from the first timed epoch to the last when
  at least :data:`LEARNING_STEPS` training steps lie between the two (the steps of the epochs after the
  first): ``bench/learning.py`` measured how far it falls over such runs (``bench/NOTES.md``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rollcall.ranges import ranges
from rollcall.ranklog import CollectiveMismatch, RankReport

#: Training steps between the first timed epoch's loss and the last's from which the loss must fall.
LEARNING_STEPS = 30

NodeOf = Callable[[int], int]


@dataclass(frozen=True)
class Divergence:
    """A rank whose parameters differ from the replicas'.

    Attributes:
        rank: the rank.
        node: its node.
        epoch: the first epoch after which its digest differed (None: only at completion).
        digest: its digest there.
        reference: the replicas' digest there.
        agreeing: how many ranks held the replicas' digest there.
    """

    rank: int
    node: int
    epoch: int | None
    digest: str
    reference: str
    agreeing: int
    #: No digest is held by more ranks than every other (two replicas, or a split): which replica is wrong
    #: cannot be told, and every rank of the tie is named.
    tied: bool = False

    @property
    def when(self) -> str:
        """``from epoch 2 on`` or ``at completion``."""
        return f"from epoch {self.epoch} on" if self.epoch is not None else "at completion"

    def note(self) -> str:
        """What the rank's own junit case says."""
        if self.tied:
            return f"replicas disagree {self.when} with no majority (its param_digest {self.digest})"
        return f"replica diverged {self.when} (param_digest {self.digest}, the replicas' {self.reference})"


def digests_by_stage(reports: Mapping[int, RankReport]) -> dict[str, tuple[str, ...]]:
    """The distinct ``param_digest`` values after each epoch (``epoch 1``, ...) and at ``complete``.

    One value per stage is the proof that every replica held the same parameters there.
    """
    stages: dict[str, set[str]] = {}
    for e in sorted({e for rep in reports.values() for e in rep.digests}):
        stages[f"epoch {e}"] = {rep.digests[e] for rep in reports.values() if e in rep.digests}
    final = {rep.final_digest for rep in reports.values() if rep.final_digest is not None}
    if final:
        stages["complete"] = final
    return {stage: tuple(sorted(values)) for stage, values in stages.items()}


def find_divergence(reports: Mapping[int, RankReport], node_of: NodeOf) -> list[Divergence]:
    """The ranks whose ``param_digest`` differs from the replicas', each at the first point it did.

    The replicas' digest is the one most ranks hold; where no digest is held by more ranks than every other
    (two replicas that differ, an even split), every rank is named, as a tie: which is wrong cannot be told.
    """
    stages: list[tuple[int | None, dict[int, str]]] = [
        (e, {r: rep.digests[e] for r, rep in reports.items() if e in rep.digests})
        for e in sorted({e for rep in reports.values() for e in rep.digests})
    ]
    final = {r: rep.final_digest for r, rep in reports.items() if rep.final_digest is not None}
    stages.append((None, final))
    found: dict[int, Divergence] = {}
    for epoch, digests in stages:
        if len(digests) < 2:
            continue
        counts = Counter(digests.values())
        reference = min(counts, key=lambda d: (-counts[d], min(r for r, v in digests.items() if v == d)))
        tied = sum(1 for c in counts.values() if c == counts[reference]) > 1
        for rank, digest in sorted(digests.items()):
            if (tied or digest != reference) and rank not in found:
                agreeing = 0 if tied else counts[reference]
                found[rank] = Divergence(rank, node_of(rank), epoch, digest, reference, agreeing, tied)
    return [found[r] for r in sorted(found)]


@dataclass(frozen=True)
class WrongReceipt:
    """One rank that received wrong data from one group's all-reduce."""

    rank: int
    node: int
    mismatch: CollectiveMismatch

    def describe(self, elements: int) -> str:
        """``rank 1 (node 0) received 1024 of 2097152 elements wrong ...``."""
        m = self.mismatch
        wrong = f"{m.elements} of {elements}" if m.elements is not None else "some of its"
        iters = f" in {m.iters} timed all-reduce(s)" if m.iters is not None else ""
        first = f", first at index {m.index}" if m.index is not None else ""
        values = f" (expected {_num(m.expected)}, got {_num(m.got)})" if m.expected is not None else ""
        return f"rank {self.rank} (node {self.node}) received {wrong} elements wrong{iters}{first}{values}"


@dataclass(frozen=True)
class WrongCollective:
    """A group of the bandwidth phase in which ranks received results that are not the exact sum."""

    scope: str
    ranks: tuple[int, ...]
    nodes: tuple[int, ...]
    elements: int  # float32 elements per all-reduce
    receivers: tuple[WrongReceipt, ...]

    @property
    def label(self) -> str:
        """``world all-reduce (ranks 0-3, nodes 0-1)``."""
        return f"{self.scope} all-reduce (ranks {ranges(self.ranks)}, nodes {ranges(self.nodes)})"

    def __str__(self) -> str:
        return f"{self.label}: " + "; ".join(r.describe(self.elements) for r in self.receivers)


def find_wrong_collectives(reports: Mapping[int, RankReport], node_of: NodeOf) -> list[WrongCollective]:
    """Every group in which a rank reported a ``mismatch``, with the ranks that did, in the groups' order."""
    groups: dict[tuple[str, tuple[int, ...]], WrongCollective] = {}
    for rank, report in sorted(reports.items()):
        for key, record in report.bandwidth.items():
            if record.mismatch is None:
                continue
            receipt = WrongReceipt(rank, node_of(rank), record.mismatch)
            known = groups.get(key)
            receivers = (*known.receivers, receipt) if known else (receipt,)
            groups[key] = WrongCollective(
                record.scope, record.ranks, record.nodes, record.bytes // 4, receivers
            )
    order = {"world": 0, "node": 1, "pair": 2}
    return sorted(groups.values(), key=lambda g: (order.get(g.scope, 3), g.nodes))


def receiving_node(found: list[WrongCollective]) -> int | None:
    """The node of every rank that received wrong data, when they are all on one."""
    nodes = {r.node for g in found for r in g.receivers}
    return nodes.pop() if len(nodes) == 1 else None


def suspect_link(reports: Mapping[int, RankReport], found: list[WrongCollective]) -> tuple[int, int] | None:
    """The one pair of nodes that every wrong group holds and no checked, right group does, if there is one.

    Wrong data that spreads to every member of the groups crossing one link (as partial sums do in a ring)
    points at that link: some group holding each of the two nodes without the other was right.
    """
    wrong = {(g.scope, g.nodes) for g in found}
    if not wrong:
        return None
    checked = {
        key: record.nodes
        for report in reports.values()
        for key, record in report.bandwidth.items()
        if record.checked
    }
    right = [nodes for key, nodes in checked.items() if key not in wrong]
    held = [set(nodes) for _, nodes in wrong]
    common = sorted(set.intersection(*held))
    links = [
        (a, b)
        for i, a in enumerate(common)
        for b in common[i + 1 :]
        if not any(a in nodes and b in nodes for nodes in right)
        and any(a in nodes for nodes in right)  # each node was right without the other
        and any(b in nodes for nodes in right)
    ]
    return links[0] if len(links) == 1 else None


@dataclass(frozen=True)
class LossFinding:
    """A rank whose loss was not finite, or did not fall from the first timed epoch to the last.

    Attributes:
        rank: the rank.
        node: its node.
        losses: its loss per epoch.
        steps: training steps between the first epoch's loss and the last's.
    """

    rank: int
    node: int
    losses: Mapping[int, float]
    steps: int

    @property
    def finite(self) -> bool:
        """Whether every loss was finite."""
        return all(math.isfinite(v) for v in self.losses.values())

    def note(self) -> str:
        """What the rank's own junit case says."""
        if not self.finite:
            bad = ", ".join(f"epoch {e} {v}" for e, v in sorted(self.losses.items()) if not math.isfinite(v))
            return f"loss not finite: {bad}"
        first, last = min(self.losses), max(self.losses)
        return (
            f"loss did not fall over {self.steps} steps: {self.losses[first]:.4f} (epoch {first}) -> "
            f"{self.losses[last]:.4f} (epoch {last})"
        )


def find_bad_losses(
    reports: Mapping[int, RankReport], node_of: NodeOf, learning_steps: int = LEARNING_STEPS
) -> list[LossFinding]:
    """Ranks whose loss was not finite, or (over ``learning_steps`` steps or more) did not fall."""
    found = []
    for rank, report in sorted(reports.items()):
        losses = report.losses
        if not losses:
            continue
        first, last = min(losses), max(losses)
        later = [report.epoch_steps.get(e) for e in losses if e != first]
        steps = sum(s for s in later if s is not None) if None not in later else 0
        finding = LossFinding(rank, node_of(rank), dict(losses), steps)
        falls = losses[last] < losses[first]
        if not finding.finite or (steps >= learning_steps and not falls):
            found.append(finding)
    return found


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


__all__ = [
    "LEARNING_STEPS",
    "Divergence",
    "LossFinding",
    "WrongCollective",
    "WrongReceipt",
    "digests_by_stage",
    "find_bad_losses",
    "find_divergence",
    "find_wrong_collectives",
    "receiving_node",
    "suspect_link",
]
