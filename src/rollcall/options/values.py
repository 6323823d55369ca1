"""How the options' text becomes values: numbers, durations, choices, switches, shell words, ``KEY=VALUE``.

Every parser takes the text a user gave (a flag's value, a ``ROLLCALL_*`` variable, an ini key) and returns
the value, or raises :class:`ValueError` saying what was expected; :func:`rollcall.options.resolve` turns that
into an :class:`OptionError` naming the option, where its value came from, and the fix. A duration is read the
same way wherever one is asked for: ``90`` (seconds), or Go's and kubectl's form (``90s``, ``2m30s``,
``1h30m``, ``1.5h``, ``2d``: :func:`duration`), and shown back so (:func:`format_duration`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any, get_args


class OptionError(ValueError):
    """A bad option value; the message says which option, where its value came from, and how to fix it."""


def env_name(option: str) -> str:
    """``--job-timeout`` reads ``ROLLCALL_JOB_TIMEOUT``."""
    return "ROLLCALL_" + option.lstrip("-").replace("-", "_").upper()


def attr_name(flag: str) -> str:
    """``--job-timeout`` is stored as ``job_timeout``."""
    return flag.lstrip("-").replace("-", "_")


# -- numbers ------------------------------------------------------------------------------------------------


def whole(minimum: int) -> Callable[[str], int]:
    """A parser of whole numbers from ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected a whole number >= {minimum}") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}")
        return value

    return parse


def whole_or_auto(minimum: int) -> Callable[[str], int | None]:
    """:func:`whole`, or ``auto`` (None: what the nodes offer)."""
    parse_whole = whole(minimum)

    def parse(text: str) -> int | None:
        if text.strip() == "auto":
            return None
        try:
            return parse_whole(text)
        except ValueError as exc:
            raise ValueError(f"{exc}, or auto") from None

    return parse


def positive_float(text: str) -> float:
    """A finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number > 0") from None
    if not value > 0 or value == float("inf"):
        raise ValueError("must be a finite number > 0")
    return value


def fraction(text: str) -> float:
    """A ratio from 0 (the check off) up to, not including, 1."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number from 0 to 1") from None
    if not 0 <= value < 1:
        raise ValueError("must be >= 0 and < 1 (0 turns the check off)")
    return value


def percent(text: str) -> float:
    """A percentage from 0 up to, not including, 100 (``10`` or ``10%``)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError("expected a percentage such as 10") from None
    if not 0 <= value < 100:
        raise ValueError("must be >= 0 and < 100")
    return value


def share_of_default(text: str) -> float:
    """A percentage above 0 up to 100 (``90`` or ``90%``), as a fraction (0.9): a floor of a default."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError("expected a percentage such as 90") from None
    if not 0 < value <= 100:
        raise ValueError("must be above 0 and at most 100")
    return value / 100


# -- durations ----------------------------------------------------------------------------------------------

_NUMBER = r"\d+(?:\.\d*)?|\.\d+"
_PART = rf"({_NUMBER})(ms|s|m|h|d)"
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
#: How a duration is written, in every message that asks for one.
DURATION_FORMS = (
    "seconds (90) or Go's and kubectl's form, parts of ms, s, m, h or d "
    "(90s, 30m, 1h, 2m30s, 1h30m, 1.5h, 2d)"
)


def duration(text: str) -> float:
    """Seconds (``90``), Go's form as kubectl takes it (``2m30s``, ``1h30m``, ``1.5h``, ``500ms``), or ``2d``.

    Spaces are ignored (``1h 30m``). The value is in seconds.
    """
    given = "".join(text.split())
    if re.fullmatch(_NUMBER, given):
        return float(given)
    if not re.fullmatch(rf"(?:{_PART})+", given):
        raise ValueError(f"expected a duration: {DURATION_FORMS}")
    return sum(float(number) * _UNIT_S[unit] for number, unit in re.findall(_PART, given))


def positive_duration(text: str) -> float:
    """A :func:`duration` above 0."""
    value = duration(text)
    if value <= 0:
        raise ValueError(f"expected a duration above 0: {DURATION_FORMS}")
    return value


def duration_or_off(text: str) -> float:
    """A :func:`duration`; ``0`` or ``off`` is 0 (off)."""
    return 0.0 if text.strip() in ("0", "off") else duration(text)


def duration_or_auto(text: str) -> float | None:
    """A :func:`positive_duration`, or ``auto`` (None: the default of whoever reads it)."""
    if text.strip() == "auto":
        return None
    try:
        return positive_duration(text)
    except ValueError:
        raise ValueError(f"expected auto or a duration above 0: {DURATION_FORMS}") from None


def format_duration(seconds: float) -> str:
    """A duration as a user writes it: ``30m`` for 1800, ``90s`` for 90, ``1h`` for 3600, ``0.5s``."""
    for unit in ("d", "h", "m"):
        size = _UNIT_S[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


# -- choices, switches, words -------------------------------------------------------------------------------


class Choice:
    """A parser accepting one of :attr:`choices` (the values of a ``Literal`` type, or any words given)."""

    def __init__(self, literal: Any = None, *, choices: Sequence[str] = ()) -> None:
        self.choices: tuple[str, ...] = tuple(choices) or get_args(literal)

    def __call__(self, text: str) -> str:
        """``text``, one of the choices; ValueError listing them otherwise."""
        if text not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}")
        return text


def switch(text: str) -> bool:
    """A switch's variable or ini key: ``true``/``false`` (also 1/0, yes/no, on/off)."""
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def shell_words(text: str) -> tuple[str, ...]:
    """Shell-quoted text as its words (what a repeatable option's variable holds)."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"not shell-quoted text: {exc}") from None


def word(text: str) -> str:
    """One word, without spaces."""
    if not text or any(c.isspace() for c in text):
        raise ValueError("must be one word, without spaces")
    return text


def env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``["A=1", "B=x=y"]`` gives ``{"A": "1", "B": "x=y"}``; a pair without ``=`` is an error."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ValueError(f"{pair!r} is not KEY=VALUE with KEY a variable name (e.g. A=1)")
        env[key] = value
    return env
