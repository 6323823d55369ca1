"""Before any rank: the nodes whose launcher never started, or never got past the launchers' rendezvous.

A node's launcher (its torchrun agent) spawns the node's ranks only once every node's launcher has joined the
launchers' rendezvous, so while one node's never starts, no rank is spawned anywhere and no rank can say a
word: the others' launchers wait. Where the node's monitor starts the launcher (local and Slurm), it says so
(``launcher`` lines, :class:`~rollcall.ranklog.LauncherHeard`): ``started``; ``waiting`` at each multiple of
the join bound J (``--join-hang-after``) with no rank of the node spawned; ``spawned`` once its ranks run.

Each node is on its own clock (:mod:`rollcall.evidence.clocks`): the suite notes when it first read a line
of it. :func:`never_started` is certain, before any rank of the world has been heard from, only when:

- some node was never heard from at all (no launcher line, no rank process), and the start skew S has
  passed since the first part of the run was heard (T0 + S): it never started its launcher (the node's
  command never ran: a task stuck in its prolog, an entrypoint that never runs; ``ROLLCALL_NO_LAUNCH_NODE``);
- or every node was heard from, and each launcher has had twice the join bound since the *last* one was
  heard (the rendezvous completes only once every launcher has joined it: a node started late, or slow to
  import, gives every other time): the launchers never met. A launcher whose process state is stopped
  (``T``) or in uninterruptible sleep (``D``), held at every look of its monitor for at least J, is named
  stuck there; one read of ``D`` is a page fault, never a stuck launcher. With none stuck, no node is named
  (the rendezvous endpoint, node 0's, unreachable from some node, or a launcher stuck in its own code).

On Kubernetes the monitor is a sidecar beside the launcher, not in front of it, and writes no such line; a
pod that never started is named by the backend from its status.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollcall.evidence.clocks import Bounds, heard, now_of, on_the_way, origin
from rollcall.ranges import ranges
from rollcall.ranklog import LauncherHeard, RollCall

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


def never_started(
    roll: RollCall, nodes: int, world_size: int, bounds: Bounds | None = None, now: float | None = None
) -> NeverStarted | None:
    """What the launchers say of the nodes that never started theirs, once it is certain; else None.

    ``now``: the suite's clock (while the run goes on; after it, when its job ended). Certain when no rank of
    the world has been heard from, no launcher says it spawned its ranks, and each stalled part is past its
    own deadline (see the module).
    """
    bounds = bounds or Bounds()
    if _any_rank(roll, world_size):
        return None
    last: dict[int, LauncherHeard] = {}
    for launcher in roll.launchers:
        if 0 <= launcher.node_rank < nodes:
            last[launcher.node_rank] = launcher
    if any(h.state == "spawned" for h in last.values()):
        return None
    if on_the_way(roll):
        return None  # a node on its way (its pod pulling its image): the backend's bounds hold it
    node_parts = [("node", n) for n in range(nodes)]
    first = origin(roll, node_parts)
    if first is None:
        return None
    moment = now_of(roll, now)
    missing = tuple(n for n in range(nodes) if heard(roll, ("node", n)) is None)
    if missing:
        if moment < first + bounds.start_skew_s:
            return None  # a node may yet be heard from: within the start skew
    else:
        latest = max(h for n in range(nodes) if (h := heard(roll, ("node", n))) is not None)
        if moment < latest + 2 * bounds.join_s:
            return None  # the last launcher heard still has its time to get through the rendezvous
    waiting = sorted(n for n, h in last.items() if h.state in ("waiting", "started"))
    stuck = tuple(last[n] for n in waiting if _stuck(last[n], bounds.join_s))
    waited = [w for n in waiting if (w := last[n].waited_s) is not None]
    return NeverStarted(missing, stuck, tuple(waiting), max(waited) if waited else None)


def _any_rank(roll: RollCall, world_size: int) -> bool:
    """Whether any rank of the world was heard from: a line of it, or its process seen by its node."""
    return any(0 <= r < world_size for r in roll.ranks) or any(
        kind == "rank" and 0 <= r < world_size for kind, r in roll.heard
    )


def _stuck(launcher: LauncherHeard, join_s: float) -> bool:
    """A launcher stopped or in the kernel, that state held at every look for at least the join bound."""
    held = launcher.state_held_s
    return launcher.process_state in STUCK_STATES and held is not None and held >= join_s


def stop_reason(
    roll: RollCall, nodes: int, world_size: int, bounds: Bounds | None = None, now: float | None = None
) -> str | None:
    """Why to end the job now: a node never started its launcher, or none got past the rendezvous."""
    bounds = bounds or Bounds()
    found = never_started(roll, nodes, world_size, bounds, now)
    if found is None:
        return None
    if found.missing:
        return f"{found.line()}: ended at the start skew (--start-skew {bounds.start_skew_s:g}s after T0)"
    return (
        f"{found.line()}: ended at twice the join bound (--join-hang-after {bounds.join_s:g}s) after the "
        "last launcher was heard"
    )


__all__ = ["RENDEZVOUS", "STUCK_STATES", "NeverStarted", "never_started", "stop_reason"]
