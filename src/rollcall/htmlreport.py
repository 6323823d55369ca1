"""``report.html``: the session at a glance, in one self-contained file.

For each test: its verdict and figures (against the baseline, when there is one), the failure summary, a grid
of ranks by node coloured by what each rank did, per-rank throughput bars with the baseline's per-rank median
drawn, and links to every pod's (or local node's) log. Inline CSS and SVG only: no script, no font, no image,
no address outside the artifacts directory, so the file opens the same offline, from a CI artifact store or a
mail attachment.

A rank cell's ``data-state`` (and class) is one of:

- ``ok``: answered the roll call (green);
- ``missing``: missed an event, reported an error or an invalid value (red);
- ``straggler``: answered, but below ``--straggler-ratio`` of the median throughput, or its compute time
  above the median rank's by more than 1 / ``--straggler-ratio`` (amber);
- ``slow``: answered, but below ``--min-throughput``, or on a node or pair of nodes of low bus bandwidth
  (orange).

Below the throughput bars: compute time per rank (bars, with the median and the straggler line) and the bus
bandwidth of every all-reduce group and node, when the ranks reported them.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from rollcall.perf import median
from rollcall.ranklog import ranges

if TYPE_CHECKING:
    from rollcall.baseline import GateReport
    from rollcall.reports import TestRecord
    from rollcall.verdict import Verdict

REPORT_FILE = "report.html"
STATES = ("ok", "missing", "straggler", "slow")
_MISSING_REASONS = ("no ", "error", "invalid")
# How the collector names a log file after its source (a pod name, or node-<i> locally).
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1f2328;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.15em;margin:0 0 .4em}h3{font-size:1em;margin:1em 0 .3em}
.meta{color:#57606a;margin:.2em 0}
section.test{border:1px solid #d0d7de;border-radius:6px;padding:1em;margin:1em 0}
section.test.failed{border-left:6px solid #d32f2f}section.test.passed{border-left:6px solid #2e7d32}
.badge{display:inline-block;padding:0 .5em;border-radius:4px;color:#fff;font-weight:600;margin-right:.4em}
.badge.pass{background:#2e7d32}.badge.fail{background:#d32f2f}.badge.flaky{background:#b7791f}
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:.2em .6em;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.regressed td{background:#ffebe9}
pre.failure{background:#fff8f8;border:1px solid #ffcecb;padding:.6em;white-space:pre-wrap;margin:0}
.grid{display:flex;flex-direction:column;gap:3px}
.node{display:flex;flex-wrap:wrap;gap:3px;align-items:center}
.node-label{width:7em;color:#57606a;font-size:.9em}
.rank{display:inline-block;min-width:2.2em;padding:.15em .2em;text-align:center;border-radius:3px;
color:#fff;font-size:.85em;text-decoration:none;font-variant-numeric:tabular-nums}
.rank.ok{background:#2e7d32}.rank.missing{background:#d32f2f}
.rank.straggler{background:#f59e0b;color:#1f2328}.rank.slow{background:#ea580c}
.legend span{margin-right:1em}
svg .bar.ok{fill:#2e7d32}svg .bar.missing{fill:#d32f2f}
svg .bar.straggler{fill:#f59e0b}svg .bar.slow{fill:#ea580c}
svg .baseline{stroke:#0969da;stroke-width:2;stroke-dasharray:6 3}
svg .threshold{stroke:#f59e0b;stroke-dasharray:2 3}
svg .axis{stroke:#57606a}svg text{font-size:11px;fill:#57606a}
"""


def write_report(path: Path, records: Sequence[TestRecord], meta: Mapping[str, Any]) -> None:
    """Write the session's report to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(records, meta, path.parent))


def render(records: Sequence[TestRecord], meta: Mapping[str, Any], base: Path) -> str:
    """The whole HTML document; links are relative to ``base``, the directory the report is written to."""
    failed = sum(1 for r in records if not r.result.passed)
    started = meta.get("started")
    when = (
        datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if isinstance(started, int | float)
        else ""
    )
    head = f"{len(records)} test(s), {failed} failed; backend {meta.get('backend', '?')}" + (
        f"; started {when}" if when else ""
    )
    index = "".join(
        f'<li><a href="#test-{i}">{_badge(r)}{escape(r.test_id)}</a></li>' for i, r in enumerate(records)
    )
    sections = "".join(_section(i, r, base) for i, r in enumerate(records))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>rollcall report: {'FAIL' if failed else 'PASS'}</title><style>{CSS}</style></head><body>"
        f'<h1>rollcall report</h1><p class="meta">{escape(head)}</p><ul class="index">{index}</ul>'
        f"{sections}</body></html>\n"
    )


def _badge(record: TestRecord) -> str:
    if not record.result.passed:
        return '<span class="badge fail">FAIL</span>'
    if record.result.flaky:
        return '<span class="badge flaky">PASS (flaky)</span>'
    return '<span class="badge pass">PASS</span>'


def rank_states(verdict: Verdict, gate: GateReport | None) -> dict[int, str]:
    """The state of every rank in the world (see the module docstring)."""
    stragglers = {s.rank for s in gate.stragglers} if gate else set()
    if gate and gate.perf:
        stragglers |= {s.rank for s in gate.perf.stragglers}
    states = {}
    for rank in range(verdict.layout.world_size):
        why = verdict.failed_ranks.get(rank, [])
        if any(w.startswith(_MISSING_REASONS) for w in why):
            states[rank] = "missing"
        elif rank in stragglers:
            states[rank] = "straggler"
        elif why:
            states[rank] = "slow"
        else:
            states[rank] = "ok"
    return states


def _section(index: int, record: TestRecord, base: Path) -> str:
    attempt = record.result.last
    verdict, spec = attempt.verdict, attempt.spec
    states = rank_states(verdict, record.gate)
    logs = _log_links(attempt.artifacts, base)
    meta = (
        f"backend {record.result.backend}; {spec.accelerator}; {spec.nodes} node(s) x {spec.procs_per_node} "
        f"procs = {spec.world_size} ranks; job {spec.name} {attempt.status.state.value}; "
        f"{len(record.result.attempts)} attempt(s), {sum(a.duration_s for a in record.result.attempts):.1f} s"
    )
    config = f"configuration {record.gate.key}" if record.gate else ""
    failure = (
        f'<h3>Failure summary</h3><pre class="failure">{escape(record.result.message())}</pre>'
        if not record.result.passed
        else ""
    )
    counts = {s: sum(1 for v in states.values() if v == s) for s in STATES}
    legend = "".join(
        f'<span><span class="rank {s}">{counts[s]}</span> {s}</span>'
        for s in STATES
        if counts[s] or s == "ok"
    )
    unexpected = (
        f'<p class="meta">ranks outside the world reported: {escape(ranges(verdict.unexpected_ranks))}</p>'
        if verdict.unexpected_ranks
        else ""
    )
    outcome = "passed" if record.result.passed else "failed"
    return (
        f'<section class="test {outcome}" id="test-{index}" data-test="{escape(record.test_id)}" '
        f'data-outcome="{outcome}">'
        f"<h2>{_badge(record)}{escape(record.test_id)}</h2>"
        f'<p class="meta">{escape(meta)}</p><p class="meta">{escape(config)}</p>'
        f"{_figures(record)}{failure}"
        f"<h3>Ranks by node</h3>{_grid(verdict, states, logs)}"
        f'<p class="legend">{legend}</p>{unexpected}'
        f"<h3>Throughput per rank (samples/s)</h3>{_bars(verdict, states, record.gate)}"
        f"{_compute_bars(verdict, states, record.gate)}{_bandwidth_tables(verdict, record.gate)}"
        f"<h3>Logs</h3>{_log_list(logs)}</section>"
    )


def _figures(record: TestRecord) -> str:
    verdict, gate = record.result.last.verdict, record.gate
    base = gate.baseline if gate else None
    regressed = {r.measure.name for r in gate.regressions} if gate else set()
    rows = [
        ("total throughput", verdict.throughput.total, "throughput_total", ".2f", " samples/s"),
        ("per-rank median throughput", verdict.throughput.median, "throughput_median", ".2f", " samples/s"),
        ("mean epoch time", verdict.epoch_time_mean, "epoch_time_mean", ".4f", " s"),
    ]
    head = "<tr><th>measure</th><th>value</th>" + ("<th>baseline</th><th>ratio</th>" if base else "")
    head += "</tr>"
    body = []
    for name, value, attr, spec, unit in rows:
        cells = f"<td>{name}</td><td class=num>{_num(value, spec)}{unit}</td>"
        if base:
            b = getattr(base, attr)
            ratio = value / b if value is not None and b else None
            cells += f"<td class=num>{_num(b, spec)}{unit}</td><td class=num>{_num(ratio, '.3f')}</td>"
        cls = ' class="regressed"' if name in regressed else ""
        body.append(f"<tr{cls}>{cells}</tr>")
    if verdict.mfu_mean is not None:
        body.append(f"<tr><td>MFU (mean)</td><td class=num>{100 * verdict.mfu_mean:.1f}%</td></tr>")
    gate_line = ""
    if gate and gate.gate != "off":
        gate_line = f'<p class="meta">regression gate: {gate.gate} ({escape(gate.baseline_file or "")})</p>'
    return f"<table class=figures>{head}{''.join(body)}</table>{gate_line}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _node_of(verdict: Verdict, rank: int) -> int:
    node = verdict.per_rank.get(rank, {}).get("node")
    return node if isinstance(node, int) else verdict.layout.node_of(rank)


def _grid(verdict: Verdict, states: Mapping[int, str], logs: Mapping[str, str]) -> str:
    by_node: dict[int, list[int]] = defaultdict(list)
    for n in range(verdict.layout.nodes):
        by_node[n] = []
    for rank in range(verdict.layout.world_size):
        by_node[_node_of(verdict, rank)].append(rank)
    node_logs = {n: _rank_log(verdict, rs, logs) for n, rs in by_node.items()}
    rows = []
    for node, ranks in sorted(by_node.items()):
        cells = []
        for rank in ranks:
            state = states[rank]
            info = verdict.per_rank.get(rank, {})
            why = "; ".join(verdict.failed_ranks.get(rank, [])) or "answered"
            tp = info.get("throughput")
            title = f"rank {rank} (node {node}): {why}" + (f"; {tp:.2f} samples/s" if tp else "")
            href = _rank_log(verdict, [rank], logs) or node_logs[node]
            tag, link = ("a", f' href="{href}"') if href else ("span", "")
            cells.append(
                f'<{tag} class="rank {state}" data-rank="{rank}" data-node="{node}" data-state="{state}" '
                f'title="{escape(title)}"{link}>{rank}</{tag}>'
            )
        rows.append(
            f'<div class="node" data-node="{node}"><span class="node-label">node {node}</span>'
            f"{''.join(cells)}</div>"
        )
    return f'<div class="grid" data-world-size="{verdict.layout.world_size}">{"".join(rows)}</div>'


def _rank_log(verdict: Verdict, ranks: Iterable[int], logs: Mapping[str, str]) -> str | None:
    """The link of the first log any of ``ranks`` was read from."""
    for rank in ranks:
        for source in verdict.per_rank.get(rank, {}).get("logs", []):
            href = logs.get(_UNSAFE.sub("_", source) + ".log")
            if href:
                return href
    return None


def _bars(verdict: Verdict, states: Mapping[int, str], gate: GateReport | None) -> str:
    world = verdict.layout.world_size
    values = {r: verdict.per_rank.get(r, {}).get("throughput") for r in range(world)}
    measured = [v for v in values.values() if isinstance(v, int | float) and math.isfinite(v)]
    baseline = gate.baseline.throughput_median if gate and gate.baseline else None
    median = verdict.throughput.median
    top = max([*measured, (baseline or 0) * 1.1, 1e-9])
    bar_w = max(3, min(28, 900 // max(world, 1)))
    left, plot_h, pad = 48, 160, 18
    width, height = left + world * bar_w + 160, plot_h + 2 * pad

    def y(v: float) -> float:
        return pad + plot_h * (1 - v / top)

    right = left + world * bar_w
    parts = [
        f'<svg class="bars" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="throughput per rank">',
        f'<line class="axis" x1="{left}" y1="{pad + plot_h}" x2="{right}" y2="{pad + plot_h}"/>',
        f'<text x="{left - 4}" y="{pad + 4}" text-anchor="end">{top:.4g}</text>',
        f'<text x="{left - 4}" y="{pad + plot_h}" text-anchor="end">0</text>',
    ]
    for rank in range(world):
        v, state, x = values[rank], states[rank], left + rank * bar_w
        if isinstance(v, int | float) and math.isfinite(v) and v > 0:
            parts.append(
                f'<rect class="bar {state}" data-rank="{rank}" x="{x}" y="{y(v):.1f}" width="{bar_w - 1}" '
                f'height="{pad + plot_h - y(v):.1f}"><title>rank {rank}: {v:.2f} samples/s</title></rect>'
            )
        else:
            parts.append(
                f'<rect class="bar missing" data-rank="{rank}" x="{x}" y="{pad + plot_h - 4}" '
                f'width="{bar_w - 1}" height="4"><title>rank {rank}: no throughput</title></rect>'
            )
    if baseline:
        parts.append(_hline("baseline", y(baseline), left, right, f"baseline median {baseline:.2f}"))
    if median and gate and gate.straggler_ratio > 0:
        cut = median * gate.straggler_ratio
        parts.append(_hline("threshold", y(cut), left, right, f"straggler < {cut:.2f}"))
    parts.append("</svg>")
    return "".join(parts)


def _compute_bars(verdict: Verdict, states: Mapping[int, str], gate: GateReport | None) -> str:
    """Compute time per rank (ms per step, no communication), with the median and the straggler line."""
    compute = {c.rank: c for c in verdict.perf.compute}
    if not compute:
        return ""
    world = verdict.layout.world_size
    mid = median([c.compute_ms for c in compute.values()]) or 0.0
    ratio = gate.straggler_ratio if gate else 0.0
    cut = mid / ratio if ratio > 0 else None
    top = max([c.compute_ms for c in compute.values()] + [(cut or 0) * 1.1, 1e-9])
    bar_w = max(3, min(28, 900 // max(world, 1)))
    left, plot_h, pad = 48, 160, 18
    right = left + world * bar_w

    def y(v: float) -> float:
        return pad + plot_h * (1 - v / top)

    parts = [
        f'<svg class="bars compute" width="{right + 160}" height="{plot_h + 2 * pad}" '
        f'viewBox="0 0 {right + 160} {plot_h + 2 * pad}" role="img" aria-label="compute time per rank">',
        f'<line class="axis" x1="{left}" y1="{pad + plot_h}" x2="{right}" y2="{pad + plot_h}"/>',
        f'<text x="{left - 4}" y="{pad + 4}" text-anchor="end">{top:.4g}</text>',
        f'<text x="{left - 4}" y="{pad + plot_h}" text-anchor="end">0</text>',
    ]
    for rank, c in sorted(compute.items()):
        x, p90 = left + rank * bar_w, f", p90 {c.compute_ms_p90:.2f}" if c.compute_ms_p90 else ""
        top_y = y(c.compute_ms)
        parts.append(
            f'<rect class="bar {states.get(rank, "ok")}" data-rank="{rank}" x="{x}" y="{top_y:.1f}" '
            f'width="{bar_w - 1}" height="{pad + plot_h - top_y:.1f}"><title>rank {rank} '
            f"(node {c.node}): {c.compute_ms:.2f} ms{p90}</title></rect>"
        )
    parts.append(_hline("baseline median", y(mid), left, right, f"median {mid:.2f} ms"))
    if cut is not None:
        parts.append(_hline("threshold", y(cut), left, right, f"straggler > {cut:.2f} ms"))
    parts.append("</svg>")
    return f"<h3>Compute time per rank (ms per step, no communication)</h3>{''.join(parts)}"


def _bandwidth_tables(verdict: Verdict, gate: GateReport | None) -> str:
    """The bus bandwidth of every all-reduce group, then of every node; slow ones marked."""
    figures = verdict.perf
    if not figures.groups:
        return ""
    slow = {(s.group.scope, s.group.nodes) for s in gate.perf.slow} if gate and gate.perf else set()
    rows = "".join(
        f'<tr class="{"regressed" if (g.scope, g.nodes) in slow else "ok"}" data-scope="{g.scope}">'
        f"<td>{escape(g.label)}</td><td>{escape(ranges(g.ranks))}</td>"
        f"<td class=num>{g.bytes / 2**20:.4g} MiB</td>"
        f"<td class=num>{g.algbw_gbps:.4g}</td><td class=num>{g.busbw_gbps:.4g}</td></tr>"
        for g in figures.groups
    )
    nodes = "".join(
        f'<tr data-node="{n.node}"><td>node {n.node}</td><td>{escape(", ".join(n.pods))}</td>'
        f"<td class=num>{_num(n.busbw_gbps, '.4g')}</td>"
        f"<td class=num>{_num(n.pair_busbw_gbps, '.4g')}</td></tr>"
        for n in figures.nodes()
    )
    return (
        "<h3>All-reduce bandwidth (GB/s)</h3><table class=bandwidth><tr><th>group</th><th>ranks</th>"
        f"<th>size</th><th>algbw</th><th>busbw</th></tr>{rows}</table>"
        + (
            "<table class=node-bandwidth><tr><th>node</th><th>pods</th><th>busbw in the node</th>"
            f"<th>lowest pair busbw</th></tr>{nodes}</table>"
            if nodes
            else ""
        )
    )


def _hline(cls: str, y: float, x1: int, x2: int, label: str) -> str:
    return (
        f'<line class="{cls}" x1="{x1}" y1="{y:.1f}" x2="{x2}" y2="{y:.1f}"/>'
        f'<text x="{x2 + 4}" y="{y + 4:.1f}">{escape(label)}</text>'
    )


def _log_links(directory: Path, base: Path) -> dict[str, str]:
    """Every file of a test's artifacts directory (its pods' logs, events) by name, linked from ``base``."""
    if not directory.is_dir():
        return {}
    links = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = os.path.relpath(path.resolve(), base.resolve())
        links[path.relative_to(directory).as_posix()] = quote(Path(rel).as_posix())
    return links


def _log_list(logs: Mapping[str, str]) -> str:
    if not logs:
        return '<p class="meta">no log was collected</p>'
    items = "".join(f'<li><a href="{href}">{escape(name)}</a></li>' for name, href in logs.items())
    return f'<ul class="logs">{items}</ul>'
