"""Each part of a run on its own clock: when the suite first heard it, and the bounds it is held to.

Slow is not broken: on a fleet, nodes start minutes apart, images pull at different speeds, imports read
cold filesystems. So no part of a run is held to another's clock. Every bound counts from when that part
(a node, its launcher, a rank) was first heard, and all of them are read on one clock, the suite's own
(monotonic, :attr:`rollcall.ranklog.RollCall.clock`): when the suite read a part's first line. No node's wall
clock is compared with another's, or with the suite's: a part heard late because its log arrived late is
only given more time, never less.

- **T0**: when any part of the run was first heard (:func:`t0`).
- **A**: when the backend first saw arrived the last node it had seen on its way (its pod waiting for
  capacity, pulling its image, creating its container: :attr:`rollcall.ranklog.RollCall.arriving`). While a
  node is on its way nothing of it can be heard, and the backend's own bounds hold it (the capacity
  timeout, an image pull's error, the job timeout): no part is named for not being heard, and the start
  skew counts from ``max(T0, A)`` (:func:`origin`).
- **S**, the start skew (``--start-skew``, by default twice the join bound): a part never heard from by
  ``max(T0, A) + S`` never started; a rank still in its imports and device setup S after its process
  started (its watchdog's bound there) is stuck in it.
- **J**, the join bound (``--join-hang-after``): a node's launcher first heard at ``h`` must have got past
  the launchers' rendezvous by ``h + 2 J``, counted from the *last* launcher heard (the rendezvous completes
  only once every node's launcher has joined it); a rank inside ``init_process_group`` J after it entered it
  never joined (its watchdog's bound there).
- **the process group's timeout** (``--pg-timeout``, PyTorch's by default): while every rank is inside
  ``init_process_group`` and none is missing, the ranks are joining, not hung: they are held to it.

:class:`Bounds` holds those of a run (``docs/hangs.md`` states each as a formula).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rollcall.jobspec import JobSpec
from rollcall.ranklog import Part, RollCall
from rollcall_workload.rank.cli import PG_TIMEOUT_S
from rollcall_workload.rank.watchdog import JOIN_HANG_S, start_skew_bound


@dataclass(frozen=True)
class Bounds:
    """The bounds a run's parts are held to, in seconds.

    Attributes:
        join_s: J, the join bound (``--join-hang-after``).
        start_skew_s: S, how long after T0 a part may be heard first (``--start-skew``).
        pg_timeout_s: how long the ranks may take to join the process group (``--pg-timeout``).
    """

    join_s: float = JOIN_HANG_S
    start_skew_s: float = start_skew_bound(JOIN_HANG_S)
    pg_timeout_s: float = max(PG_TIMEOUT_S.values())

    @classmethod
    def of(cls, spec: JobSpec | None) -> Bounds:
        """A run's bounds, from its spec (the defaults without one: saved logs judged alone)."""
        if spec is None:
            return cls()
        return cls(spec.join_bound_s, spec.start_skew_s, spec.pg_timeout_s)


def heard(roll: RollCall, part: Part) -> float | None:
    """When the suite first read a line of ``part`` (its clock), None when it never did."""
    receipt = roll.heard.get(part)
    return receipt.first if receipt is not None else None


def t0(roll: RollCall, parts: Iterable[Part] | None = None) -> float | None:
    """T0: when the suite first heard any part of the run (of ``parts``, where given); None: nothing yet."""
    heard_ = roll.heard
    if parts is None:
        firsts = [r.first for r in heard_.values()]
    else:
        firsts = [r.first for p in parts if (r := heard_.get(p)) is not None]
    return min(firsts) if firsts else None


def arrived(roll: RollCall) -> float | None:
    """A: when the backend first saw arrived the last node it saw on its way; None when it saw none.

    While a node is still on its way, its last look that saw it so.
    """
    lasts = [receipt.last for receipt in roll.arriving.values()]
    return max(lasts) if lasts else None


def on_the_way(roll: RollCall) -> bool:
    """Whether the backend saw a node on its way at its last look: nothing of it can be heard yet."""
    return bool(roll.arriving_now)


def origin(roll: RollCall, parts: Iterable[Part] | None = None) -> float | None:
    """Where the start skew counts from: T0 (of ``parts``, where given), or A if later; None: none heard."""
    first, came = t0(roll, parts), arrived(roll)
    if first is None or came is None:
        return first
    return max(first, came)


def now_of(roll: RollCall, now: float | None = None) -> float:
    """The moment a judgement is made at: ``now`` while the run goes on, else when its job ended.

    After the job, the judge reads the roll call as it stood when the job ended (:attr:`RollCall.ended`),
    or at the last piece of log read.
    """
    if now is not None:
        return now
    return roll.ended if roll.ended is not None else roll.now


__all__ = ["Bounds", "arrived", "heard", "now_of", "on_the_way", "origin", "t0"]
