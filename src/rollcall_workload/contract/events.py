"""The contract's events by name: each record declares itself here with :func:`event`, once.

A record of the rank (:mod:`.rank`) or of the node's monitor (:mod:`.node`) is a keyword-only dataclass of
:class:`~rollcall_workload.contract.schema.Event`; ``@event(name, when)`` names it and registers it in
:data:`EVENTS`, which the writer holds its lines to (:func:`breaches`) and the reader takes them through
(:func:`read`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from rollcall_workload.contract.schema import Event, problems, take

#: The records, by event name, in the order a rank says them (the rank's, then the node's monitor's).
EVENTS: dict[str, type[Event]] = {}
_E = TypeVar("_E", bound=type[Event])


def event(name: str, when: str, *, open_: bool = False) -> Callable[[_E], _E]:
    """Declare a record as the event ``name``, said ``when``.

    ``open_``: fields that no record declares are part of the event too (``facts``: one field per fact).
    """

    def declare(cls: _E) -> _E:
        if name in EVENTS:
            raise ValueError(f"the event {name!r} is declared twice: {EVENTS[name].__name__}, {cls.__name__}")
        cls.NAME, cls.WHEN, cls.OPEN = name, when, open_
        EVENTS[name] = cls
        return cls

    return declare


def breaches(name: str, fields: Mapping[str, Any]) -> list[str]:
    """What is wrong with a line of ``name`` holding ``fields`` (the envelope's included); empty: nothing."""
    record = EVENTS.get(name)
    if record is None:
        return [f"no event {name!r} in the contract (one of {', '.join(EVENTS)})"]
    return problems(record, fields)


def read(obj: Mapping[str, Any]) -> Event | None:
    """The record of one decoded line as the suite reads it, or None when it is not one.

    None for an event the contract does not declare, or a record that does not count
    (:func:`rollcall_workload.contract.schema.take`).
    """
    record = EVENTS.get(obj.get("event"))  # type: ignore[arg-type]
    return None if record is None else take(record, obj)
