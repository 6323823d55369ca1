"""Throughput over time: several runs' ``results.json`` (one per nightly run) as one table per configuration.

``rollcall history [--json] PATH...`` takes directories holding a ``results.json`` (or the files themselves),
orders the runs by start time and prints, for each configuration (the baseline key: accelerator, instance
type, nodes, procs per node, model, sequence length), one row per run and test: total and per-rank median
throughput, the change of the total against that test's previous run, mean epoch time and the verdict.
``--html OUT`` draws the same runs as a trend page instead (:mod:`rollcall.page.trend`): throughput, compute
time and bus bandwidth per configuration, failed runs and regressions marked, each point linked to its run's
``report.html``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rollcall.collect import REPORT_FILE, RESULTS_FILE, read_results
from rollcall.evidence.baseline import MEASURES, NO_INSTANCE_TYPE, UNKNOWN, ConfigKey
from rollcall.reports import number


class HistoryError(ValueError):
    """A path that holds no readable ``results.json``."""


@dataclass(frozen=True)
class Point:
    """One test of one run."""

    config: str
    run: str
    started: float | None
    test: str
    passed: bool
    flaky: bool
    throughput_total: float | None
    throughput_median: float | None
    epoch_time_mean: float | None
    #: The median rank's compute time per step (ms) and the world's all-reduce bus bandwidth (GB/s).
    compute_ms_median: float | None = None
    busbw_world: float | None = None
    #: The release gate's regressions, as the figures' names (``throughput_total``, ...).
    regressions: tuple[str, ...] = ()
    #: The run's ``report.html``, where it is beside its ``results.json``.
    report: str | None = None


def results_path(path: str | Path) -> Path:
    """The ``results.json`` of ``path`` (a run's artifacts directory, or the file itself)."""
    p = Path(path)
    return p / RESULTS_FILE if p.is_dir() else p


def load_run(path: str | Path) -> list[Point]:
    """The points of one run; :class:`HistoryError` when its ``results.json`` cannot be read."""
    file = results_path(path)
    doc = read_results(file, HistoryError)
    started = doc.get("started")
    run = file.parent.name or str(file.parent)
    report = file.parent / REPORT_FILE
    points = []
    for test in doc["tests"]:
        if not isinstance(test, dict):
            continue
        tp = test.get("throughput") or {}
        gate = _mapping(test.get("release_gate"))
        figures = _mapping(gate.get("figures"))
        regressed = [r.get("measure") for r in gate.get("regressions") or () if isinstance(r, dict)]
        points.append(
            Point(
                config=config_of(test),
                run=run,
                started=float(started) if isinstance(started, int | float) else None,
                test=str(test.get("test_id", "?")).rsplit("::", 1)[-1],
                passed=bool(test.get("passed")),
                flaky=bool(test.get("flaky")),
                throughput_total=_float(tp.get("total")),
                throughput_median=_float(tp.get("median")),
                epoch_time_mean=_float(test.get("epoch_time_mean")),
                compute_ms_median=_float(figures.get("compute_ms_median")),
                busbw_world=_float(figures.get("busbw_world")),
                regressions=tuple(m.attr for m in MEASURES if m.name in regressed),
                report=str(report) if report.is_file() else None,
            )
        )
    return points


def config_of(test: Mapping[str, Any]) -> str:
    """A test's configuration: its release gate's key, else built from its fields (older results)."""
    gate = test.get("release_gate")
    key = gate.get("key") if isinstance(gate, dict) else None
    if isinstance(key, str):
        return key
    workload = test.get("workload") or {}
    fields = {
        "accelerator": test.get("accelerator") or UNKNOWN,
        "instance_type": test.get("instance_type") or NO_INSTANCE_TYPE,
        "nodes": test.get("nodes"),
        "procs_per_node": test.get("procs_per_node"),
        "model": workload.get("model") or UNKNOWN,
        "seq_len": workload.get("seq_len"),
    }
    try:
        return str(ConfigKey.from_fields(fields))
    except ValueError:
        return ",".join(f"{k}={UNKNOWN if v is None else v}" for k, v in fields.items())


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def collect(paths: Iterable[str | Path]) -> dict[str, list[Point]]:
    """Every run's points, by configuration, each list in time order (runs without a start time first)."""
    by_config: dict[str, list[Point]] = defaultdict(list)
    for path in paths:
        for point in load_run(path):
            by_config[point.config].append(point)
    for points in by_config.values():
        points.sort(key=lambda p: (p.started is not None, p.started or 0.0, p.run))
    return dict(sorted(by_config.items()))


def _when(started: float | None) -> str:
    if started is None:
        return "-"
    return datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M UTC")


def table(history: Mapping[str, Sequence[Point]]) -> list[str]:
    """The printed table: a block per configuration, a row per run and test."""
    header = ("started", "run", "test", "samples/s total", "change", "per-rank median", "epoch s", "verdict")
    lines: list[str] = []
    for config, points in history.items():
        rows: list[tuple[str, ...]] = [header]
        previous: dict[str, float | None] = {}
        for p in points:
            before = previous.get(p.test)
            change = (
                f"{100 * (p.throughput_total / before - 1):+.1f}%"
                if before and p.throughput_total is not None
                else "-"
            )
            previous[p.test] = p.throughput_total
            verdict = ("PASS (flaky)" if p.flaky else "PASS") if p.passed else "FAIL"
            rows.append(
                (
                    _when(p.started),
                    p.run,
                    p.test,
                    number(p.throughput_total, ".2f"),
                    change,
                    number(p.throughput_median, ".2f"),
                    number(p.epoch_time_mean, ".4f"),
                    verdict,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        if lines:
            lines.append("")
        lines.append(config)
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
    return lines


def as_json(history: Mapping[str, Sequence[Point]]) -> dict[str, Any]:
    """The ``--json`` document: ``{"configurations": {key: [point, ...]}}``."""
    return {"configurations": {k: [asdict(p) for p in points] for k, points in history.items()}}
