"""Root cause first: which failure came first, which errors are echoes of it, and the echoes folded.

Pure functions over typed failures, so every rule is unit-tested without a run:

- **Echoes.** An error is a consequence of another rank's failure (an *echo*) when its message matches one of
  :data:`ECHO_PATTERNS`: a connection closed or reset by a peer, an NCCL watchdog timeout or an aborted
  communicator, a barrier or store timeout, a signal from the launcher. Any other error is the rank's own.
- **The root cause** is the earliest own error by wall-clock time (the ``time`` of ``error`` events). Own
  errors with other messages are named too, as independent failures. Without any own error, the root cause is
  the earliest :class:`~.endings.Termination` the runtime recorded (a container OOM-killed or killed by a
  signal, which leaves no error line); without that either, the earliest echo, said to be one.
- **Departures.** A rank that left before ``complete`` without an error of its own, with any status, 0
  included (a :class:`~rollcall.evidence.departures.Departure`), takes its place in that order at its time:
  one that left before every own error (or, without any, before every silent kill) is the root cause, and
  the errors after it are folded as what followed; a departure without a time leads only where no rank
  reported an error of its own. Later departures are named after it, one line each.
- **Disruptions.** When the infrastructure took a pod away (a :class:`~.endings.Disruption`: evicted,
  preempted, its node deleted, lost, drained or reclaimed), that is the root cause, whatever the ranks said:
  every rank's error is a consequence, and all of them are folded.
- **Clocks.** When the root cause and the next own error are stamped within :data:`CLOCK_TOLERANCE_S` of each
  other, when a candidate carries no time, or when echoes on another node are stamped well before the error
  they echo, :attr:`Analysis.undecided` says why the order is uncertain rather than guess.
- **Folding.** Errors whose messages are the same once addresses, ports, ranks and numbers are taken out
  (:func:`shape`) become one :class:`Group`, shown as one line with its ranks per node.

:func:`summary` gives the lines of a failure message: at most ``1 + MAX_ROOTS + 1 + MAX_GROUPS + 1`` lines
(12) whatever the number of ranks, each at most :data:`MAX_MESSAGE` characters of message.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollcall.evidence.departures import Departure
from rollcall.evidence.endings import Disruption, Termination, clock
from rollcall.evidence.gpumem import HeldMemory
from rollcall.ranges import ranges

if TYPE_CHECKING:
    from rollcall.evidence.gpu_events import GpuEventSeen

#: The kinds of echo (consequences of another rank's failure) and the messages that are one, matched
#: case-insensitively in this order. Echoes fold by kind: one line for every rank that lost its peers.
ECHO_PATTERNS: dict[str, tuple[str, ...]] = {
    "lost the connection to a peer": (
        r"connection (was )?(closed|reset) by peer",
        r"\bECONNRESET\b|broken pipe|connection refused",
    ),
    "NCCL watchdog timeout": (
        # not "watchdog thread terminated with exception: ...": the exception it carries decides (a CUDA
        # error of the rank's own GPU is its own; a timeout is caught as one)
        r"watchdog caught|collective operation timeout",
        r"ProcessGroupNCCL.*(timeout|timed out)",
    ),
    "aborted communicator": (
        r"communicators? (was |were |has been )?abort|NCCL.*abort",
        r"ncclRemoteError|remote process exited",
    ),
    "barrier or store timeout": (
        r"barrier.*time(d)? ?out|time(d)? ?out.*barrier|store.*time(d)? ?out|time(d)? ?out.*store",
        r"wait timeout|socket timeout|timed out waiting",
    ),
    "signal from the launcher": (
        r"\bSIGTERM\b|\bSIGINT\b|got signal: ?(2|15)\b",
        r"SignalException|KeyboardInterrupt",
    ),
}
_ECHOES = [(kind, re.compile("|".join(ps), re.IGNORECASE)) for kind, ps in ECHO_PATTERNS.items()]
#: Two failures stamped closer than this cannot be ordered by their clocks.
CLOCK_TOLERANCE_S = 1.0
#: Independent failures named besides the root cause, and folded groups shown, in a failure message.
MAX_ROOTS = 3
MAX_GROUPS = 6
#: Characters of one error message shown in a failure message (results.json keeps it whole).
MAX_MESSAGE = 240

# What :func:`shape` takes out of a message: addresses (with their ports), hex, paths' line numbers, numbers.
_SHAPES = (
    (re.compile(r"\[?\b(?:\d{1,3}\.){3}\d{1,3}\]?(?::\d+)?"), "<addr>"),
    (re.compile(r"\[?[0-9a-f]*:[0-9a-f:]*:[0-9a-f]+\]?(?::\d+)?", re.IGNORECASE), "<addr>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


def echo_kind(message: str) -> str | None:
    """The kind of echo ``message`` is (a key of :data:`ECHO_PATTERNS`), or None for a rank's own error."""
    return next((kind for kind, pattern in _ECHOES if pattern.search(message)), None)


def is_echo(message: str) -> bool:
    """Whether ``message`` reads as a consequence of another rank's failure (see the module docstring)."""
    return echo_kind(message) is not None


def fold_key(message: str) -> str:
    """What errors fold by: an echo's kind, else the message's :func:`shape`."""
    kind = echo_kind(message)
    return f"echo: {kind}" if kind else shape(message)


def shape(message: str) -> str:
    """``message`` without addresses, ports, ranks and numbers: errors of one shape fold into one line."""
    text = message.strip()
    for pattern, placeholder in _SHAPES:
        text = pattern.sub(placeholder, text)
    return re.sub(r"\s+", " ", text)


@dataclass(frozen=True)
class Failure:
    """One rank's error event: who, where, what and when (wall clock, epoch seconds; None if unstamped)."""

    rank: int
    node: int
    pod: str | None
    message: str
    time: float | None = None
    #: What ran the rank's agent (:data:`.endings.UNITS`): its log is a ``pod``'s, or a ``node``'s processes'.
    unit: str = "pod"
    #: An out-of-memory's cause where others held the rank's GPU before the run (:mod:`.gpumem`).
    held: HeldMemory | None = None
    #: The Xid or ECC event on the rank's GPU the error is told with (:func:`.gpu_events.beside_error`).
    gpu: GpuEventSeen | None = None

    @property
    def echo(self) -> bool:
        """A consequence of another rank's failure."""
        return is_echo(self.message)

    def describe(self) -> str:
        """``rank 5 (node 1) reported an error: message [pod p, 09:00:01.234 UTC]``."""
        log = f"{'pod' if self.unit == 'pod' else 'log'} {self.pod}" if self.pod else ""
        where = ", ".join(w for w in (log, clock(self.time)) if w)
        cause = f"; its GPU had {self.held}" if self.held is not None else ""
        return (
            f"rank {self.rank} (node {self.node}) reported an error: {clip(self.message)}"
            + (f" [{where}]" if where else "")
            + cause
            + (f" ({self.gpu.told_beside(self.time)})" if self.gpu is not None else "")
        )

    def as_dict(self) -> dict[str, Any]:
        """The failure, JSON-ready."""
        return {
            "rank": self.rank,
            "node": self.node,
            "pod": self.pod,
            "message": self.message,
            "time": self.time,
            "echo": self.echo,
            "held": self.held.as_dict() if self.held is not None else None,
            "gpu_event": self.gpu.as_dict() if self.gpu is not None else None,
        }


@dataclass(frozen=True)
class Group:
    """Failures of one shape (:func:`shape`), earliest first."""

    key: str
    failures: tuple[Failure, ...]

    @property
    def message(self) -> str:
        """The earliest member's own message."""
        return self.failures[0].message

    @property
    def echo(self) -> bool:
        """Echoes of another rank's failure."""
        return self.failures[0].echo

    @property
    def ranks(self) -> list[int]:
        """The ranks, sorted."""
        return sorted(f.rank for f in self.failures)

    @property
    def kind(self) -> str | None:
        """The kind of echo (None for own errors)."""
        return echo_kind(self.message)

    def line(self) -> str:
        """``ranks 0-4, 6-7 (nodes 0-1) [7 echoes of another rank's failure: ...]: message``."""
        n = len(self.failures)
        if self.kind:
            what = f"{n} echo{'es' if n > 1 else ''} of another rank's failure: {self.kind}"
        else:
            what = f"{n} own error{'s' if n > 1 else ''}"
        nodes = sorted({f.node for f in self.failures})
        where = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {ranges(nodes)}"
        return f"ranks {ranges(self.ranks)} ({where}) [{what}]: {clip(self.message)}"

    def as_dict(self) -> dict[str, Any]:
        """The group, JSON-ready: its shape, one message, and every member with its own message."""
        return {
            "key": self.key,
            "message": self.message,
            "echo": self.echo,
            "ranks": self.ranks,
            "nodes": sorted({f.node for f in self.failures}),
            "count": len(self.failures),
            "failures": [f.as_dict() for f in self.failures],
        }


@dataclass(frozen=True)
class Analysis:
    """The failures of one run, first failure first.

    Attributes:
        first: the earliest own error, else the earliest echo (when no termination explains them).
        independent: own errors of other shapes than the first's, earliest of each shape first.
        termination: the root cause when no rank said why it failed (a silently killed container).
        disruption: the root cause when the infrastructure took a pod away: every rank's error then
            follows from it, and all of them are folded.
        groups: every failure but those named above, folded by shape, own errors before echoes.
        undecided: why the clocks cannot order the failures, when they cannot.
        departure: the root cause when a rank left before ``complete``, without an error, before any other
            rank failed on its own (``first`` is then None; ``independent`` the own errors of each shape).
        departures: every other rank that left before ``complete``, earliest first.
    """

    first: Failure | None = None
    independent: tuple[Failure, ...] = ()
    termination: Termination | None = None
    disruption: Disruption | None = None
    groups: tuple[Group, ...] = ()
    undecided: str | None = None
    failures: tuple[Failure, ...] = field(default=(), repr=False)
    departure: Departure | None = None
    departures: tuple[Departure, ...] = ()

    @property
    def roots(self) -> tuple[Failure, ...]:
        """The failures named as causes (the first, then the independent ones)."""
        if self.disruption is not None:
            return ()
        if self.departure is not None:
            return self.independent
        if self.first is None or self.first.echo:
            return ()
        return (self.first, *self.independent)

    def headline(self) -> str | None:
        """The root cause in one line."""
        if self.disruption is not None:
            n = len(self.failures)
            follow = f"; the {n} rank error(s) follow from it" if n else ""
            return f"first failure: {self.disruption.category}: {self.disruption.describe()}{follow}"
        if self.departure is not None:
            follow = "; the others' errors followed" if self.failures else ""
            return f"first failure: {self.departure.describe()}{follow}"
        if self.termination is not None and self.termination.answered:
            return f"first failure: {self.termination.describe()}"
        if self.termination is not None:
            who = (
                "it reported no error"
                if self.termination.rank is not None
                else "none of its ranks reported an error"
            )
            return f"first failure: {self.termination.describe()}, and {who}"
        if self.first is None:
            return None
        if self.first.echo:
            earliest = self.first.describe()
            return f"first failure unknown: every error is an echo of another's; the earliest: {earliest}"
        return f"first failure: {self.first.describe()}"

    def as_dict(self) -> dict[str, Any]:
        """The root cause, JSON-ready (``results.json``'s ``root_cause``)."""
        return {
            "summary": self.headline(),
            "first": self.first.as_dict() if self.first else None,
            "termination": self.termination.as_dict() if self.termination else None,
            "disruption": self.disruption.as_dict() if self.disruption else None,
            "independent": [f.as_dict() for f in self.independent],
            "undecided": self.undecided,
            "departure": self.departure.as_dict() if self.departure else None,
            "departures": [d.as_dict() for d in self.departures],
        }


def analyse(
    failures: Iterable[Failure],
    terminations: Iterable[Termination] = (),
    disruption: Disruption | None = None,
    departures: Iterable[Departure] = (),
) -> Analysis:
    """Order ``failures``, name the root cause, and fold the rest (see the module docstring).

    A ``disruption`` is the root cause whatever the ranks said: their errors are its consequences. A
    departure (a rank that left before ``complete``) leads when it came before every own error.
    """
    ordered = tuple(sorted(failures, key=_when))
    own = [f for f in ordered if not f.echo]
    left = tuple(d for d in sorted(departures, key=_when) if _may_lead(d, own))
    if disruption is not None:
        return Analysis(disruption=disruption, groups=fold(ordered), failures=ordered, departures=left)
    if not ordered and not left:
        return Analysis()
    leader = _leader(left, own, terminations)
    if leader is not None:
        independent = _shapes(own)
        named = {id(f) for f in independent}
        return Analysis(
            independent=tuple(independent),
            groups=fold(f for f in ordered if id(f) not in named),
            undecided=_undecided_departure(leader, own),
            failures=ordered,
            departure=leader,
            departures=tuple(d for d in left if d is not leader),
        )
    termination = None
    if own:
        first = own[0]
        independent = _independent(own)
    else:
        first, independent = ordered[0], []
        killed = sorted((t for t in terminations if t.silent_kill), key=_when)
        termination = killed[0] if killed else None
    named = {id(f) for f in (first, *independent)} if termination is None else set()
    rest = [f for f in ordered if id(f) not in named]
    return Analysis(
        first=first,
        independent=tuple(independent),
        termination=termination,
        groups=fold(rest),
        undecided=_undecided(first, own, ordered) if termination is None else None,
        failures=ordered,
        departures=left,
    )


def _leader(
    left: Sequence[Departure], own: Sequence[Failure], terminations: Iterable[Termination]
) -> Departure | None:
    """The departure that came first of every failure of the run's own, when one did."""
    if not left:
        return None
    first = left[0]
    if own:
        return (
            first if first.time is not None and own[0].time is not None and first.time < own[0].time else None
        )
    killed = sorted((t for t in terminations if t.silent_kill), key=_when)
    if killed and killed[0].time is not None and (first.time is None or killed[0].time < first.time):
        return None
    return first


def _shapes(own: Sequence[Failure]) -> list[Failure]:
    """The earliest own error of each shape."""
    return [own[0], *_independent(own)] if own else []


def _may_lead(departure: Departure, own: Sequence[Failure]) -> bool:
    """A departure its node's monitor saw (no status of its own) counts only before the run's first own error.

    One that left after it (within the clocks' tolerance) is the launcher stopping its ranks: an echo.
    """
    if departure.gone_at is None or not own or own[0].time is None or departure.time is None:
        return True
    return departure.time < own[0].time + CLOCK_TOLERANCE_S


def _undecided_departure(leader: Departure, own: Sequence[Failure]) -> str | None:
    if leader.gone_at is not None and leader.time is not None:
        low, high = leader.time - CLOCK_TOLERANCE_S, leader.gone_at + CLOCK_TOLERANCE_S
        # equivalent mutant: "low < f.time": a leader came before every own error (_leader), so none is at low
        inside = next((f for f in own if f.time is not None and low <= f.time <= high), None)
        if inside is not None:
            return (
                f"rank {inside.rank} failed while rank {leader.rank}'s process was leaving (between two "
                f"looks of its node's monitor, {leader.gone_at - leader.time:.1f} s apart, and within "
                f"{CLOCK_TOLERANCE_S:g} s by their clocks): which came first cannot be decided, both are "
                "named"
            )
        return None
    if leader.time is not None:
        other = next((f for f in own if f.time is not None), None)
        gap = other.time - leader.time if other is not None and other.time is not None else None
        if other is not None and gap is not None and gap < CLOCK_TOLERANCE_S:
            return (
                f"rank {leader.rank} left and rank {other.rank} failed within {CLOCK_TOLERANCE_S:g} s of "
                "each other by their clocks; either may have come first"
            )
        return None
    return f"rank {leader.rank}'s departure carries no time; no rank reported an error of its own"


def fold(failures: Iterable[Failure]) -> tuple[Group, ...]:
    """Failures folded by shape; own errors first, then echoes, each by their earliest member."""
    by_shape: dict[str, list[Failure]] = defaultdict(list)
    for f in sorted(failures, key=_when):
        by_shape[fold_key(f.message)].append(f)
    groups = [Group(key, tuple(members)) for key, members in by_shape.items()]
    return tuple(sorted(groups, key=lambda g: (g.echo, _when(g.failures[0]))))


@dataclass(frozen=True)
class Line:
    """One line of a failure message and the failures it stands for (every failure is in exactly one).

    ``departure`` is the rank that left early the line names, when it names one.
    """

    text: str
    failures: tuple[Failure, ...] = ()
    root: bool = False
    departure: Departure | None = None


def lines(analysis: Analysis, *, max_roots: int = MAX_ROOTS, max_groups: int = MAX_GROUPS) -> list[Line]:
    """The lines of a failure message: root cause, independent failures, clock doubt, the folded groups."""
    head = analysis.headline()
    if head is None:
        return []
    named = analysis.first is not None and analysis.termination is None and analysis.disruption is None
    first = (analysis.first,) if named and analysis.first is not None else ()
    out = [Line(head, first, root=True, departure=analysis.departure)]
    shown, hidden = analysis.independent[:max_roots], analysis.independent[max_roots:]
    out += [Line(f"independent failure: {f.describe()}", (f,), root=True) for f in shown]
    if hidden:
        out.append(Line(f"and {len(hidden)} more independent failure(s)", hidden, root=True))
    if analysis.undecided:
        out.append(Line(f"order uncertain: {analysis.undecided}"))
    out += [Line(f"left early too: {d.describe()}", departure=d) for d in analysis.departures]
    out += [Line(g.line(), g.failures) for g in analysis.groups[:max_groups]]
    rest = analysis.groups[max_groups:]
    if rest:
        failures = tuple(f for g in rest for f in g.failures)
        out.append(Line(f"and {len(rest)} more kind(s) of error on {len(failures)} rank(s)", failures))
    return out


def summary(analysis: Analysis, *, max_roots: int = MAX_ROOTS, max_groups: int = MAX_GROUPS) -> list[str]:
    """The text of :func:`lines`."""
    return [line.text for line in lines(analysis, max_roots=max_roots, max_groups=max_groups)]


def clip(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` on one line, at most ``limit`` characters."""
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _independent(own: Sequence[Failure]) -> list[Failure]:
    """The earliest own error of each shape but the first's."""
    seen = {shape(own[0].message)}
    found = []
    for f in own[1:]:
        key = shape(f.message)
        if key not in seen:
            seen.add(key)
            found.append(f)
    return found


def _undecided(first: Failure, own: Sequence[Failure], ordered: Sequence[Failure]) -> str | None:
    if first.time is None:
        return f"rank {first.rank}'s error carries no time, so errors were ordered by rank"
    rivals = [f for f in own if f is not first and shape(f.message) != shape(first.message)]
    close = [f for f in rivals if f.time is None or f.time - first.time < CLOCK_TOLERANCE_S]
    if close:
        other = close[0]
        if other.time is None:
            return (
                f"rank {other.rank}'s error carries no time, so it may have come before rank {first.rank}'s"
            )
        return (
            f"rank {first.rank} and rank {other.rank} failed within {CLOCK_TOLERANCE_S:g} s of each other "
            "by their clocks; either may have come first"
        )
    early = [
        f
        for f in ordered
        if f.echo and f.node != first.node and f.time is not None and f.time < first.time - CLOCK_TOLERANCE_S
    ]
    if early and not first.echo:
        nodes = ", ".join(str(n) for n in sorted({f.node for f in early}))
        lead = first.time - min(f.time for f in early if f.time is not None)
        return (
            f"echoes on node(s) {nodes} are stamped up to {lead:.1f} s before the error they echo: "
            "the nodes' clocks may differ"
        )
    return None


def _when(item: Failure | Termination | Departure) -> tuple[bool, float, int]:
    """Sort key: stamped ones first by time, then unstamped ones (failures and departures by rank)."""
    rank = item.rank if isinstance(item, Failure | Departure) else 0
    return (item.time is None, item.time or 0.0, rank)
