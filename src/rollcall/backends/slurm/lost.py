"""The job's nodes while it runs: a node counts as lost only once its state has held (:mod:`..held`).

Every :data:`NODE_LOOK_S` the wing reads its job's nodes (``scontrol show node -o <nodelist>``, one call for
all of them) and feeds each node's most decided lost state (:meth:`~.state.SlurmNode.lost`) to a
:class:`~rollcall.backends.held.Held`. A node ends the run only once that state has held for its bound:

- NOT_RESPONDING (a ping missed: a busy slurmd, a moment of network) for ``SlurmdTimeout`` +
  :data:`NODE_LOST_S`. slurmctld sets a node DOWN once it has not answered for ``SlurmdTimeout`` (300 s by
  default; read from ``scontrol show config``), and the flag comes only after a ping it missed, so by then
  Slurm has decided on its own: the suite never calls a node lost that Slurm still gives time to answer.
- DOWN, a reboot under way, powered down: :data:`NODE_LOST_S`. slurmctld ends a job on a DOWN node itself
  (NODE_FAIL), usually at once; the bound keeps one look (a node DOWN between an administrator's two
  commands) from ending a run.

Drained, draining and failing nodes run their jobs to the end: they are not lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rollcall.backends.held import Held, Holding, has_held
from rollcall.backends.slurm.state import SlurmNode

#: Seconds between two looks at the job's nodes.
NODE_LOOK_S = 10.0
#: How long a decided lost state (DOWN, a reboot under way, powered down) must hold; NOT_RESPONDING holds
#: ``SlurmdTimeout`` more.
NODE_LOST_S = 30.0


@dataclass
class LostNodes:
    """Each of the job's nodes in a lost state, and since when, from the looks the wing feeds it.

    Attributes:
        slurmd_timeout_s: the cluster's ``SlurmdTimeout`` (:func:`~.state.slurmd_timeout_s`).
        bound_s: how long a decided lost state must hold (:data:`NODE_LOST_S`).
    """

    slurmd_timeout_s: float
    bound_s: float = NODE_LOST_S
    held: Held[str] = field(init=False)
    reasons: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.held = Held(self.bound_s, {"NOT_RESPONDING": self.slurmd_timeout_s + self.bound_s})

    def look(self, nodes: Sequence[SlurmNode], now: float) -> list[str]:
        """One look at the job's nodes at ``now``; what changed since the last look, a phrase per node."""
        before = self.held.holdings()
        for node in nodes:
            self.held.see(node.name, node.lost(), now)
            self.reasons[node.name] = node.reason
        self.held.keep(n.name for n in nodes)
        after = self.held.holdings()
        changed = [
            f"slurm node {name}: {h.state} (counts past {h.bound_s:g}s)"
            for name, h in sorted(after.items())
            if name not in before or before[name].state != h.state
        ]
        cleared = [f"slurm node {name}: {h.state} no more" for name, h in before.items() if name not in after]
        return changed + cleared

    def lost(self, hosts: Sequence[str]) -> str | None:
        """The nodes whose lost state has held past its bound, in words; None while none has."""
        counted = {name: h for name, h in self.held.holdings().items() if has_held(h)}
        return self._line(counted, hosts) if counted else None

    def seen(self, hosts: Sequence[str]) -> str:
        """Every node seen in a lost state at the last look, held past its bound or not; empty when none."""
        return self._line(self.held.holdings(), hosts)

    def _line(self, holdings: dict[str, Holding], hosts: Sequence[str]) -> str:
        """``node 1 (slurm node rc2) lost: DOWN (Not responding) for 35s (counts past 30s)``."""
        parts = []
        for name, h in sorted(holdings.items(), key=lambda item: _index(item[0], hosts)):
            index = _index(name, hosts)
            who = f"node {index} (slurm node {name})" if index < len(hosts) else f"slurm node {name}"
            why = f" ({self.reasons[name]})" if self.reasons.get(name) else ""
            state = Holding(f"{h.state}{why}", h.since, h.held_s, h.bound_s, h.looks)
            parts.append(f"{who} lost: {state.line()}")
        return "; ".join(parts)


def _index(name: str, hosts: Sequence[str]) -> int:
    return hosts.index(name) if name in hosts else len(hosts)


__all__ = ["NODE_LOOK_S", "NODE_LOST_S", "LostNodes"]
