"""The trend page of ``rollcall history --html OUT``: each configuration's figures over its runs.

For each configuration (:func:`rollcall.page.history.collect`), one chart per figure of :data:`TRENDS`: total
throughput, the median rank's compute time per step and the world's all-reduce bus bandwidth, a point per
run and test in time order, drawn with the report's own plot geometry (:class:`~rollcall.page.plot.Plot`),
the runs named on the axis. A failed run's point is red (``data-outcome="failed"``), a point the release
gate found regressed is ringed (``data-regressed="true"``), and each point links to its run's
``report.html`` (relative to the page) when the run has one. A figure no run measured is no chart, and says
so. Self-contained, as the report: inline CSS and SVG only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from rollcall.page import template
from rollcall.page.plot import Plot
from rollcall.reports import number

if TYPE_CHECKING:
    from rollcall.page.history import Point


@dataclass(frozen=True)
class Trend:
    """One figure the trend page draws: a :class:`~rollcall.page.history.Point` field, its title and unit."""

    attr: str
    title: str
    unit: str
    spec: str


TRENDS: tuple[Trend, ...] = (
    Trend("throughput_total", "total throughput", "samples/s", ".2f"),
    Trend("compute_ms_median", "median compute time per step", "ms", ".2f"),
    Trend("busbw_world", "world all-reduce bus bandwidth", "GB/s", ".3g"),
)


def write_trend(path: Path, history: Mapping[str, Sequence[Point]]) -> None:
    """Write the trend page of ``history`` to ``path`` (its links relative to ``path``'s directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(history, path.parent))


def render(history: Mapping[str, Sequence[Point]], base: Path) -> str:
    """The whole HTML document; links are relative to ``base``."""
    configs = [
        {"key": key, "index": i, "runs": len(points), "charts": [_chart(t, points, base) for t in TRENDS]}
        for i, (key, points) in enumerate(history.items())
    ]
    runs = sum(len(p) for p in history.values())
    failed = sum(1 for points in history.values() for p in points if not p.passed)
    head = f"{len(configs)} configuration(s), {runs} point(s), {failed} failed"
    return template("trend.html.j2").render(head=head, configs=configs)


def _when(started: float | None) -> str:
    return datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M UTC") if started is not None else "-"


def _link(report: str | None, base: Path) -> str | None:
    if report is None:
        return None
    return quote(Path(os.path.relpath(Path(report).resolve(), base.resolve())).as_posix())


def _chart(trend: Trend, points: Sequence[Point], base: Path) -> dict[str, Any]:
    values: list[float | None] = [getattr(p, trend.attr) for p in points]
    measured = [v for v in values if v is not None]
    plot = Plot(len(points), max([*measured, 1e-9]) * 1.1, width=900, min_bar=10, max_bar=72)
    marks = []
    for i, (p, v) in enumerate(zip(points, values, strict=True)):
        outcome = ("flaky" if p.flaky else "passed") if p.passed else "failed"
        regressed = trend.attr in p.regressions
        shown = number(v, trend.spec)
        title = (
            f"{p.run} ({_when(p.started)}) {p.test}: {shown} {trend.unit}; {outcome}"
            + (", regressed against the baseline" if regressed else "")
            + ("" if p.report else "; no report.html beside its results.json")
        )
        cx = plot.x(i) + (plot.bar_w - 1) / 2
        cy = plot.y(v) if v is not None else plot.bottom - 2
        marks.append(
            {
                "slot": i,
                "run": p.run,
                "test": p.test,
                "outcome": outcome,
                "regressed": regressed,
                "measured": v is not None,
                "cx": f"{cx:.1f}",
                "cy": f"{cy:.1f}",
                "href": _link(p.report, base),
                "title": title,
            }
        )
    path = " ".join(f"{m['cx']},{m['cy']}" for m in marks if m["measured"])
    return {
        "attr": trend.attr,
        "title": f"{trend.title} ({trend.unit})",
        "measured": bool(measured),
        "path": path,
        "marks": marks,
        **plot.chart([], [], [p.run for p in points]),
    }
