"""The roll call over wall-clock time: each rank's events (and the end of its process or pod), by node.

Every event of the rank-log contract carries ``time`` (:attr:`rollcall.verdict.RankResult.marks`); the
backends record when a worker or a container ended badly (:class:`~rollcall.evidence.endings.Termination`).
The timeline draws them on one time axis from the first of them:

- up to :data:`PER_RANK_MAX` ranks, one row per rank, grouped by node (a node's rows together, its label on
  its first row), one tick per event;
- above that, one row per node (ranks folded): for each event (``start``, ``epoch 2``, ``complete``...), a
  span from the first of the node's ranks to say it to the last, ticked at the last, its title saying how many
  of the node's ranks said it; each ``error`` and each end stays a tick of its own. 2,048 ranks of 8 per node
  are 256 rows.

Rows are coloured by the worst :class:`~rollcall.verdict.RankState` of their ranks (hung, waiting and silent
ranks have lanes of their own); the root cause's rank is marked (``data-role="root"``). The axis spans the
whole run, from its launch to its verdict (``window``), and every rank's last event; a stalled rank (hung or
waiting, :mod:`rollcall.evidence.hangs`) has a ``stalled`` span from its last progress to the verdict, and
a ``stack`` tick where each dump of its stacks was taken (``exit`` where a rank said it left early). A run
whose events carry no time has no timeline (:func:`timeline` is None).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rollcall.ranges import ranges
from rollcall.ranklog import MARKED_EVENTS

if TYPE_CHECKING:
    from rollcall.evidence.endings import Termination
    from rollcall.evidence.hangs import Stall
    from rollcall.verdict import RankResult, Verdict

#: Above this many ranks the timeline folds each node's ranks into one row.
PER_RANK_MAX = 64
#: The classes of what a tick stands for: the rank-log events, and ``ended`` (its process or pod ended).
TICK_CLASSES: tuple[str, ...] = (*MARKED_EVENTS, "stalled", "ended")

LEFT, WIDTH, PAD, AXIS_H = 150, 860, 8, 22


@dataclass(frozen=True)
class Ended:
    """A process or pod that ended badly, as its runtime recorded it, placed on the timeline."""

    node: int
    rank: int | None
    time: float
    text: str


def endings(verdict: Verdict, terminations: Iterable[Termination]) -> list[Ended]:
    """The terminations that carry a time, each placed on its rank (a worker) or its node (a pod).

    An ending is drawn no earlier than the last event its rank (or any rank of its pod) said: a process
    ends after what it wrote, and the API records a container's end to the second only, which would draw
    it before the error that caused it.
    """
    node_of_log = {pod: r.node for r in verdict.ranks.values() for pod in r.pods}
    last_of_rank = {r: max((m.time for m in res.marks), default=None) for r, res in verdict.ranks.items()}
    last_of_node: dict[int, float] = {}
    for r, res in verdict.ranks.items():
        if (said := last_of_rank[r]) is not None:
            last_of_node[res.node] = max(said, last_of_node.get(res.node, said))
    found = []
    for t in terminations:
        if t.time is None:
            continue
        if t.rank is not None and t.rank in verdict.ranks:
            after = last_of_rank[t.rank]
            at = t.time if after is None else max(t.time, after)
            found.append(Ended(verdict.ranks[t.rank].node, t.rank, at, t.describe()))
        elif t.node is not None or t.pod in node_of_log:
            node = t.node if t.node is not None else node_of_log[t.pod]
            found.append(Ended(node, None, max(t.time, last_of_node.get(node, t.time)), t.describe()))
    return found


def stalls(verdict: Verdict) -> dict[int, Stall]:
    """Each stalled rank's stall, from the verdict's ``hung`` and ``waiting`` problems (their details)."""
    from rollcall.evidence.hangs import Stall

    found: dict[int, Stall] = {}
    for p in verdict.findings:
        held = p.detail if isinstance(p.detail, tuple) else (p.detail,)
        for s in held:
            if isinstance(s, Stall) and s.dump.since is not None:
                found.setdefault(s.rank, s)
    return found


def clock(t: float) -> str:
    """``22:31:02.123 UTC``."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


class _Axis:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0 = t0
        self.span = max(t1 - t0, 1e-3)

    def x(self, t: float) -> float:
        return LEFT + WIDTH * (t - self.t0) / self.span

    def ticks(self) -> list[dict[str, str]]:
        step = _nice(self.span / 6)
        out = []
        n = 0
        while n * step <= self.span + 1e-9:
            out.append({"x": f"{self.x(self.t0 + n * step):.1f}", "text": f"+{n * step:g} s"})
            n += 1
        return out


def _nice(raw: float) -> float:
    """The round step (1, 2 or 5 times a power of ten) at or above ``raw``."""
    power = 10.0 ** _floor_log10(raw)
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _floor_log10(value: float) -> int:
    exp = 0
    while value >= 10:
        value, exp = value / 10, exp + 1
    while value < 1:
        value, exp = value * 10, exp - 1
    return exp


def timeline(
    verdict: Verdict,
    terminations: Iterable[Termination] = (),
    roots: Iterable[int] = (),
    *,
    window: tuple[float | None, float | None] = (None, None),
    per_rank_max: int = PER_RANK_MAX,
) -> dict[str, Any] | None:
    """What the template draws of the timeline; None when no event carried a time.

    ``window`` is the run's launch and its verdict (wall clock): the axis spans them and every event.
    """
    ended = endings(verdict, terminations)
    times = [m.time for r in verdict.ranks.values() for m in r.marks] + [e.time for e in ended]
    if not times:
        return None
    held = stalls(verdict)
    times += [t for t in window if t is not None] + [s.dump.since for s in held.values() if s.dump.since]
    axis = _Axis(min(times), max(times))
    end = window[1] if window[1] is not None else max(times)
    root_set = set(roots)
    by_node: dict[int, list[RankResult]] = defaultdict(list)
    for rank in sorted(verdict.ranks):
        by_node[verdict.ranks[rank].node].append(verdict.ranks[rank])
    folded = len(verdict.ranks) > per_rank_max
    rows = (
        [_node_row(node, results, ended, axis, root_set) for node, results in sorted(by_node.items())]
        if folded
        else [
            _rank_row(result, i == 0, ended, axis, root_set)
            for _, results in sorted(by_node.items())
            for i, result in enumerate(results)
        ]
    )
    for row in rows:
        _stalled(row, [held[r] for r in row["members"] if r in held], axis, end)
        row["marks"].sort(key=lambda t: float(t["x"]))
    row_h = 14 if len(rows) <= 64 else 8
    for i, row in enumerate(rows):
        row["y"] = PAD + i * row_h
        row["mid"] = f"{PAD + i * row_h + row_h / 2:.1f}"
        row["text_y"] = f"{PAD + i * row_h + row_h - 3:.1f}"
    label_every = 1 if row_h >= 14 else max(1, len(rows) // 32)
    for i, row in enumerate(rows):
        row["labelled"] = row["labelled"] and (i % label_every == 0 or i == len(rows) - 1)
    bottom = PAD + len(rows) * row_h
    return {
        "folded": folded,
        "rows": rows,
        "row_h": row_h,
        "tick_h": row_h - 2,
        "left": LEFT,
        "right": LEFT + WIDTH,
        "bottom": bottom,
        "axis_y": bottom + AXIS_H - 6,
        "width": LEFT + WIDTH + 16,
        "height": bottom + AXIS_H,
        "ticks": axis.ticks(),
        "start": clock(axis.t0),
        "verdict_x": f"{axis.x(window[1]):.1f}" if window[1] is not None else None,
        "verdict_title": f"the verdict at +{window[1] - axis.t0:.2f} s" if window[1] is not None else "",
        "events": [c for c in TICK_CLASSES if any(c == tick["cls"] for row in rows for tick in row["marks"])],
    }


def _stalled(row: dict[str, Any], held: Sequence[Stall], axis: _Axis, end: float) -> None:
    """A ``stalled`` span from the earliest last progress of ``held`` (the row's stalled ranks) to ``end``."""
    since = [s.dump.since for s in held if s.dump.since is not None]
    if not since:
        return
    first = min(since)
    what = "; ".join(
        f"rank {s.rank} {'waiting in' if s.waiting else 'hung in'} {s.where} ({s.dump.phase or 'phase?'})"
        for s in held[:3]
    ) + (f"; and {len(held) - 3} more" if len(held) > 3 else "")
    title = f"stalled from +{first - axis.t0:.2f} s to the verdict at +{end - axis.t0:.2f} s: {what}"
    row["marks"].append(_tick("stalled", axis.x(end), title, axis.x(first)))


def _state(results: Sequence[RankResult]) -> str:
    return max((r.state for r in results), key=lambda s: s.severity).value


def _tick(cls: str, x: float, title: str, x0: float | None = None) -> dict[str, Any]:
    return {"cls": cls, "x": f"{x:.1f}", "x0": f"{x0:.1f}" if x0 is not None else None, "title": title}


def _rank_row(
    result: RankResult, first: bool, ended: Sequence[Ended], axis: _Axis, roots: set[int]
) -> dict[str, Any]:
    who = f"rank {result.rank} (node {result.node})"
    marks = [
        _tick(m.event, axis.x(m.time), f"{who}: {m.label} at +{m.time - axis.t0:.2f} s ({clock(m.time)})")
        for m in result.marks
    ]
    marks += [
        _tick("ended", axis.x(e.time), f"{e.text} (+{e.time - axis.t0:.2f} s)")
        for e in ended
        if e.rank == result.rank or (e.rank is None and e.node == result.node)
    ]
    return {
        "key": str(result.rank),
        "members": [result.rank],
        "node": result.node,
        "ranks": str(result.rank),
        "label": (f"node {result.node} · " if first else "") + f"rank {result.rank}",
        "labelled": True,
        "state": result.state.value,
        "role": "root" if result.rank in roots else "",
        "marks": marks,
    }


def _node_row(
    node: int, results: Sequence[RankResult], ended: Sequence[Ended], axis: _Axis, roots: set[int]
) -> dict[str, Any]:
    spans: dict[str, list[float]] = defaultdict(list)
    events: dict[str, str] = {}
    marks = []
    for result in results:
        for m in result.marks:
            if m.event in ("error", "exit"):
                at = f"+{m.time - axis.t0:.2f} s ({clock(m.time)})"
                title = f"rank {result.rank} (node {node}): {m.event} at {at}"
                marks.append(_tick(m.event, axis.x(m.time), title))
            else:
                spans[m.label].append(m.time)
                events[m.label] = m.event
    for label, ts in spans.items():
        first, last = min(ts), max(ts)
        title = (
            f"node {node}: {label} said by {len(ts)} of {len(results)} rank(s), "
            f"+{first - axis.t0:.2f} s to +{last - axis.t0:.2f} s"
        )
        marks.append(_tick(events[label], axis.x(last), title, axis.x(first)))
    marks += [
        _tick("ended", axis.x(e.time), f"{e.text} (+{e.time - axis.t0:.2f} s)")
        for e in ended
        if e.node == node
    ]
    marks.sort(key=lambda t: float(t["x"]))
    ranks = [r.rank for r in results]
    return {
        "key": f"node-{node}",
        "members": ranks,
        "node": node,
        "ranks": ranges(ranks),
        "label": f"node {node} · ranks {ranges(ranks)}",
        "labelled": True,
        "state": _state(results),
        "role": "root" if roots & set(ranks) else "",
        "marks": marks,
    }


def rank_roles(verdict: Verdict) -> Mapping[int, str]:
    """``root`` for the ranks the root cause names (or the first to leave), ``echo`` for mere echoes."""
    analysis = verdict.root_cause
    if analysis is None:
        return {}
    roles: dict[int, str] = {f.rank: "echo" for f in analysis.failures if f.echo}
    for f in analysis.roots:
        roles[f.rank] = "root"
    t = analysis.termination
    if t is not None and t.rank is not None:
        roles[t.rank] = "root"
    if analysis.departure is not None:  # the first to leave, before complete
        roles[analysis.departure.rank] = "root"
    return roles
