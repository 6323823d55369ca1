"""A state counts only once it has held: a node's Ready not True, a Slurm node DOWN, a pod stuck creating.

Slow is not broken: one look at a state that can flicker (a node's ``Ready`` turned ``Unknown`` by a kubelet
that missed its lease for a moment, a runtime hiccup, a Slurm node ``NOT_RESPONDING`` for a ping) must not end
a run. A backend feeds each look to :class:`Held` (``see(key, state, now)``) and acts only on a
:class:`Holding` that :func:`has_held`: the same state, seen without a break, for its bound. A state that
changes, or clears (None), starts again; so does a key not seen at all (:meth:`Held.keep`).

``now`` is the caller's clock (``time.monotonic`` in a run, any number in a test): a holding is timed by the
looks, never by a timestamp the cluster wrote (another machine's clock). This module imports no wing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K")


@dataclass(frozen=True)
class Holding:
    """One state of one key, as held so far.

    Attributes:
        state: what was seen (``Unknown``, ``DOWN``, ``ContainerCreating``, ...).
        since: when it was first seen, without a break since (the caller's clock).
        held_s: how long it has held, as of the last look.
        bound_s: how long it must hold before it counts.
        looks: how many looks have seen it so far.
    """

    state: str
    since: float
    held_s: float
    bound_s: float
    looks: int = 1

    @property
    def counts(self) -> bool:
        """Whether it has held past its bound (:func:`has_held`)."""
        return has_held(self)

    def line(self) -> str:
        """``Unknown for 95s (counts past 90s)``."""
        return f"{self.state} for {self.held_s:.0f}s (counts past {self.bound_s:g}s)"


def has_held(holding: Holding) -> bool:
    """The one predicate of a state that counts: seen more than once, and held for at least its bound."""
    return holding.looks > 1 and holding.held_s >= holding.bound_s


@dataclass
class Held(Generic[K]):
    """Each key's current state and since when, from the looks a caller feeds it.

    Attributes:
        bound_s: how long a state must hold before it counts.
        bounds: a bound of its own for some states (``{"Unknown": 90.0}``); others take ``bound_s``.
    """

    bound_s: float
    bounds: Mapping[str, float] = field(default_factory=dict)
    _seen: dict[K, Holding] = field(default_factory=dict)

    def bound_of(self, state: str) -> float:
        """How long ``state`` must hold."""
        return self.bounds.get(state, self.bound_s)

    def see(self, key: K, state: str | None, now: float) -> Holding | None:
        """One look: ``key`` is in ``state`` at ``now`` (None: in no state worth holding, which clears it).

        The same state as the last look extends its holding; another starts a new one. Returns the holding
        (None when cleared).
        """
        if state is None:
            self._seen.pop(key, None)
            return None
        last = self._seen.get(key)
        if last is None or last.state != state or now < last.since:
            found = Holding(state, now, 0.0, self.bound_of(state))
        else:
            found = Holding(state, last.since, now - last.since, last.bound_s, last.looks + 1)
        self._seen[key] = found
        return found

    def get(self, key: K) -> Holding | None:
        """``key``'s holding as of its last look, None when it holds nothing."""
        return self._seen.get(key)

    def keep(self, keys: Iterable[K]) -> None:
        """Forget every key not in ``keys``: one not looked at again starts again."""
        wanted = set(keys)
        for key in [k for k in self._seen if k not in wanted]:
            del self._seen[key]

    def holdings(self) -> dict[K, Holding]:
        """Every key's holding, as of its last look."""
        return dict(self._seen)


__all__ = ["Held", "Holding", "has_held"]
