"""Before any rank: the nodes whose launcher never started, or never got past the launchers' rendezvous.

A node's launcher (its torchrun agent) spawns the node's ranks only once every node's launcher has joined the
launchers' rendezvous, so while one node's never starts, no rank is spawned anywhere and no rank can say a
word: the others' launchers wait (until torchrun's rendezvous timeout, 300 s, or the job's). Where the node's
monitor starts the launcher (local and Slurm), it says so (``launcher`` lines,
:class:`~rollcall.ranklog.LauncherHeard`): ``started``; ``waiting`` at each multiple of the join bound
(``--join-hang-after``) with no rank of the node spawned; ``spawned`` once its ranks run.

:func:`never_started` reads them, before any rank has been heard from, once a launcher has waited twice its
bound (its second ``waiting``; a node whose monitor merely started later gets the first bound):

- the nodes never heard from at all (no launcher line, no rank) never started their launcher (the node's
  command never ran: a task stuck in its prolog, an entrypoint that never runs; ``ROLLCALL_NO_LAUNCH_NODE``);
- a launcher heard from whose process is stopped (``T``) or in uninterruptible sleep (``D``) is stuck there;
- with every node's launcher up and none of them stuck, the launchers never met: no node is named (the
  rendezvous endpoint, node 0's, unreachable from some node, or a launcher stuck in its own code).

On Kubernetes the monitor is a sidecar beside the launcher, not in front of it, and writes no such line; a
pod that never started is named by the backend from its status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rollcall.ranges import ranges
from rollcall.ranklog import LauncherHeard, RankReport, RollCall

#: Launcher process states that say it cannot be the one merely waiting (``/proc/<pid>/stat``'s letter).
STUCK_STATES = frozenset({"T", "t", "D"})
#: The rendezvous the launchers wait at, in the lines.
RENDEZVOUS = "the launchers' rendezvous"


@dataclass(frozen=True)
class NeverStarted:
    """Nodes whose launcher never started or is stuck, and the launchers that waited for them.

    Attributes:
        missing: the nodes never heard from (no launcher line, no rank).
        stuck: the launchers heard from whose process is stopped or in uninterruptible sleep.
        waiting: the nodes whose launcher said it waits (its last line), stuck or not.
        waited_s: the longest any launcher had waited.
    """

    missing: tuple[int, ...]
    stuck: tuple[LauncherHeard, ...]
    waiting: tuple[int, ...]
    waited_s: float | None

    @property
    def named(self) -> tuple[int, ...]:
        """The nodes this names: the missing and the stuck; none when the launchers merely never met."""
        return tuple(sorted({*self.missing, *(s.node_rank for s in self.stuck)}))

    def line(self) -> str:
        """``node 1 never started its launcher (nothing heard from it ...); node 0's launcher waited ...``."""
        waited = f" {self.waited_s:.0f}s" if self.waited_s is not None else ""
        who = _nodes(self.waiting)
        parts = []
        if self.missing:
            one = len(self.missing) == 1
            parts.append(
                f"{_nodes(self.missing)} never started {'its launcher' if one else 'their launchers'} "
                f"(nothing heard from {'it' if one else 'them'}: no monitor line, no rank)"
            )
        for s in self.stuck:
            pid = f" (pid {s.pid})" if s.pid is not None else ""
            parts.append(
                f"node {s.node_rank}'s launcher{pid} is {s.process_state_name or s.process_state} "
                f"({s.process_state}) at {RENDEZVOUS}"
            )
        if not parts:
            return (
                f"no node's launcher got past {RENDEZVOUS}: every node's is up, {who} waited{waited} with no "
                "rank spawned anywhere (node 0's rendezvous endpoint unreachable from a node, or a launcher "
                "stuck in its own code)"
            )
        launchers = f"{who}'s launcher" if len(self.waiting) == 1 else f"{who}'s launchers"
        return f"{'; '.join(parts)}; {launchers} waited{waited} at {RENDEZVOUS}, no rank spawned anywhere"


def _nodes(nodes: tuple[int, ...]) -> str:
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {ranges(nodes)}"


def never_started(roll: RollCall, nodes: int, world_size: int) -> NeverStarted | None:
    """What the launchers say of the nodes that never started theirs, once it is certain; else None.

    Certain when no rank of the world has been heard from, no launcher says it spawned its ranks, and some
    launcher's last line says it waited at least twice its bound (see the module).
    """
    if _any_rank(roll.ranks, world_size):
        return None
    last: dict[int, LauncherHeard] = {}
    for heard in roll.launchers:
        if 0 <= heard.node_rank < nodes:
            last[heard.node_rank] = heard
    if not last or any(h.state == "spawned" for h in last.values()):
        return None
    waiting = sorted(n for n, h in last.items() if h.state == "waiting")
    if not any(_second_wait(last[n]) for n in waiting):
        return None
    missing = tuple(n for n in range(nodes) if n not in last)
    stuck = tuple(last[n] for n in waiting if last[n].process_state in STUCK_STATES)
    waited = [w for n in waiting if (w := last[n].waited_s) is not None]
    return NeverStarted(missing, stuck, tuple(waiting), max(waited) if waited else None)


def _any_rank(ranks: Mapping[int, RankReport], world_size: int) -> bool:
    return any(0 <= r < world_size for r in ranks)


def _second_wait(heard: LauncherHeard) -> bool:
    """Whether the launcher has waited at least twice its bound (its second ``waiting``)."""
    if heard.waited_s is None or heard.bound_s is None:
        return False
    return heard.waited_s >= 2 * heard.bound_s - 1.0


def stop_reason(roll: RollCall, nodes: int, world_size: int) -> str | None:
    """Why to end the job now: a node never started its launcher, or none got past the rendezvous."""
    found = never_started(roll, nodes, world_size)
    if found is None:
        return None
    return f"{found.line()}: ended at twice the join bound (--join-hang-after)"


__all__ = ["RENDEZVOUS", "STUCK_STATES", "NeverStarted", "never_started", "stop_reason"]
