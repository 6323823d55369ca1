"""Typed records of JSON lines, with the standard library only: how the rank-log contract declares its events.

A record is a keyword-only dataclass of :class:`Event`; each field is declared by :func:`required` or
:func:`optional`, with a one-line description. A writer holds its lines to their record (:func:`problems`);
a reader takes a decoded line through it (:func:`take`), tolerant of what it does not know.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal


class ContractError(ValueError):
    """A line that breaks its event's record: a bug in the workload."""


class _Absent:
    """The default of a field whose absence a reader tells apart from null (``epoch_time``'s ``loss``)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def required(doc: str, *, partial: bool = False) -> Any:
    """A field every line of the event carries: a record without it does not count (``partial``: as below)."""
    return field(metadata={"doc": doc, "partial": partial})


def optional(doc: str, default: Any = None, *, partial: bool = False, strict: bool = False) -> Any:
    """A field a line may carry; ``default`` when absent.

    ``partial``: a list's or a mapping's malformed items are dropped by a reader, not the whole field.
    ``strict``: present with a value of another type, the record does not count (as if it were required).
    """
    meta = {"doc": doc, "partial": partial, "strict": strict}
    if isinstance(default, dict | list):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(kw_only=True, slots=True)
class Event:
    """The envelope every event carries."""

    #: The event's name (each record's ``NAME``), when in a rank's run it is said, and whether fields
    #: that no record declares are part of it (``facts``: one per fact).
    NAME: ClassVar[str] = ""
    WHEN: ClassVar[str] = ""
    OPEN: ClassVar[bool] = False

    event: str = required("the event's name")
    rank: int = required("the global rank")
    world_size: int | None = optional("the world's size (always written)")
    time: float | None = optional(
        "the wall clock when the line was written, seconds since the epoch (always written; the suite "
        "draws each rank's events over it and orders failures by it)"
    )


@dataclass(frozen=True)
class FieldSpec:
    """One field of a record, as a reader and a writer check it: ``hint`` is its resolved type."""

    name: str
    hint: Any
    required: bool
    doc: str
    default: Any = None
    partial: bool = False
    strict: bool = False


def fields_of(record: type[Event]) -> tuple[FieldSpec, ...]:
    """The fields of ``record``, the envelope's first."""
    return _fields(record)


def _fields(record: type[Event]) -> tuple[FieldSpec, ...]:
    cached = _FIELDS.get(record)
    if cached is None:
        hints = typing.get_type_hints(record)
        specs = []
        for f in dataclasses.fields(record):
            factory = f.default_factory
            default = factory() if factory is not dataclasses.MISSING else f.default
            specs.append(
                FieldSpec(
                    f.name,
                    hints[f.name],
                    default is dataclasses.MISSING,
                    f.metadata["doc"],
                    None if default is dataclasses.MISSING else default,
                    f.metadata.get("partial", False),
                    f.metadata.get("strict", False),
                )
            )
        cached = _FIELDS[record] = tuple(specs)
    return cached


_FIELDS: dict[type[Event], tuple[FieldSpec, ...]] = {}
_NO = object()  # what :func:`_take` gives for a value that is not of the type


def _take(value: Any, hint: Any, partial: bool = False) -> Any:
    """``value`` as a reader takes it for a field of type ``hint``, or ``_NO`` when it is not of that type.

    JSON's arrays become the hint's list or tuple, integers floats where a float is declared; with
    ``partial``, a list's or a mapping's items that are not of their type are left out instead.
    """
    if hint is Any:
        return value
    if hint is None or hint is type(None):
        return None if value is None else _NO
    if hint is bool:
        return value if isinstance(value, bool) else _NO
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return _NO
        return float(value)
    if hint is str:
        return value if isinstance(value, str) else _NO
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return value if any(value == a and type(value) is type(a) for a in args) else _NO
    if origin is typing.Union or origin is types.UnionType:
        for arg in args:
            taken = _take(value, arg)
            if taken is not _NO:
                return taken
        return _NO
    if origin is dict:
        if not isinstance(value, dict):
            return _NO
        out = {}
        for k, v in value.items():
            key, item = _take(k, args[0]), _take(v, args[1])
            if key is _NO or item is _NO:
                if partial:
                    continue
                return _NO
            out[key] = item
        return out
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return _NO
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):  # a fixed-length tuple
            if len(value) != len(args):
                return _NO
            items = [_take(v, a) for v, a in zip(value, args, strict=True)]
            return _NO if any(i is _NO for i in items) else tuple(items)
        taken = [_take(v, args[0]) for v in value]
        if not partial and any(t is _NO for t in taken):
            return _NO
        kept = [t for t in taken if t is not _NO]
        return kept if origin is list else tuple(kept)
    raise TypeError(f"the contract declares a type it cannot check: {hint!r}")


def problems(record: type[Event], fields: Mapping[str, Any]) -> list[str]:
    """What is wrong with a line of ``record`` holding ``fields`` (envelope included); empty: none."""
    event = record.NAME
    specs = _fields(record)
    found = []
    for spec in specs:
        if spec.name not in fields:
            if spec.required:
                found.append(f"{event}: the required field {spec.name!r} is missing")
        elif _take(fields[spec.name], spec.hint) is _NO:
            found.append(f"{event}: {spec.name}={fields[spec.name]!r} is not {type_name(spec.hint)}")
    if not record.OPEN:
        names = {s.name for s in specs}
        found += [f"{event}: the field {k!r} is not in its record" for k in fields if k not in names]
    return found


def take(record: type[Event], obj: Mapping[str, Any]) -> Event | None:
    """``obj`` read as a ``record``, or None when it is not one.

    None for a line without a required field (or with a required or strict field of another type); an
    optional field of another type takes its default, and a partial field keeps its well-formed items.
    Fields the record does not declare are ignored.
    """
    values = {}
    for spec in _fields(record):
        if spec.name in obj:
            taken = _take(obj[spec.name], spec.hint, spec.partial)
            if taken is not _NO:
                values[spec.name] = taken
                continue
            if spec.required or spec.strict:
                return None
        elif spec.required:
            return None
    return record(**values)


def type_name(hint: Any) -> str:
    """``hint`` as docs/contract.md names it: JSON's words (``number``, ``string``, ``object``, ``array``)."""
    if hint is Any:
        return "any"
    if hint is None or hint is type(None):
        return "null"
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin is typing.Union or origin is types.UnionType:
        return " \\| ".join(type_name(a) for a in args)
    if origin is dict:
        return f"object of {type_name(args[1])}" if args[1] is not Any else "object"
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return "[" + ", ".join(type_name(a) for a in args) + "]"
    return f"array of {type_name(args[0])}"


def table(specs: tuple[FieldSpec, ...]) -> list[str]:
    """A Markdown table of ``specs``: each field's name, type, whether it is required, and description."""
    rows = ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for s in specs:
        need = "yes" if s.required else ("no; if present, of this type" if s.strict else "no")
        default = (
            ""
            if s.default in (None, (), {}) or s.default is ABSENT
            else f" ({json.dumps(s.default)} when absent)"
        )
        partial = " (a malformed item is dropped)" if s.partial else ""
        rows.append(f"| `{s.name}` | {type_name(s.hint)} | {need} | {s.doc}{default}{partial} |")
    return rows


def reference(intro: list[str], events: Mapping[str, type[Event]]) -> str:
    """Markdown for readers: ``intro``'s lines, the envelope's fields, then each event's."""
    out = [*intro, "", "Every event carries the envelope:", "", *table(_fields(Event)), ""]
    envelope = {s.name for s in _fields(Event)}
    for name, record in events.items():
        doc = (record.__doc__ or "").strip().splitlines()[0]
        out += [f"## `{name}`", "", f"{doc} When: {record.WHEN}.", ""]
        out += table(tuple(s for s in _fields(record) if s.name not in envelope))
        if record.OPEN:
            out += ["", "Further fields: one per fact the rank read, each under its name."]
        out.append("")
    return "\n".join(out)


def json_ready(value: Any) -> Any:
    """``value`` as a line writes it: a number that is not finite becomes None, tuples lists, keys strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value
