"""``report.html``: the session at a glance, in one self-contained file.

For each test: its verdict and figures (against the baseline, when there is one), the failure summary, a grid
of ranks by node coloured by what each rank did, per-rank throughput bars with the baseline's per-rank median
drawn, compute time per rank (bars, with the median and the straggler line) and the bus bandwidth of every
all-reduce group and node when the ranks reported them, and links to every pod's (or local node's) log.
Inline CSS and SVG only: no script, no font, no image, no address outside the artifacts directory, so the
file opens the same offline, from a CI artifact store or a mail attachment.

The page is ``templates/report.html.j2`` rendered by jinja2 with autoescape on; this module only prepares
the values it shows. A rank cell's ``data-state`` (and class) is the rank's
:class:`~rollcall.verdict.RankState`: ``ok`` (green), ``missing`` (red), ``failed`` (magenta: answered, then
exited non-zero), ``straggler`` (amber: by throughput or compute time), ``slow`` (orange: below
``--min-throughput``, or on a node or pair of nodes of low bus bandwidth), ``wrong`` (purple: its replica
diverged, it received wrong data from an all-reduce, or its loss was not finite or did not fall), ``hung``
(dark brown: stalled outside any collective), ``waiting`` (grey: stalled in a collective, waiting for
another) or ``silent`` (slate: its heartbeat stopped while its process lived); the last three are counted as
such, not as missing. A rank any
problem names is never ``ok``: its cell is also outlined in red, its ``data-kinds`` lists the kinds of those
problems (:class:`~rollcall.verdict.Kind` values, e.g. ``exited_nonzero``), and its title says them. Its
``data-role`` tells the root cause's rank (``root``: dark red, outlined in black) from the ranks whose errors
only echo another's (``echo``: pale red); a straggler's title reads "answered, too slow".

The bars carry a rank axis (every rank while the labels fit, else every n-th, :mod:`rollcall.page.plot`);
the timeline (:mod:`rollcall.page.timeline`) draws each rank's events over wall-clock time, pass or fail;
the log links are named by node and rank, each with its path as its title.
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from markupsafe import Markup, escape

from rollcall.checks import INTERRUPTED
from rollcall.collect import REPORT_FILE, safe_name, write_whole
from rollcall.evidence.baseline import MEASURES
from rollcall.evidence.drift import DRIFT_KEYS, Drift
from rollcall.evidence.nodefacts import DEVICE_KEYS
from rollcall.evidence.perf import median as median_of
from rollcall.evidence.rootcause import lines
from rollcall.page import template
from rollcall.page.plot import Plot, hline
from rollcall.page.timeline import rank_roles, timeline
from rollcall.ranges import counted, ranges
from rollcall.reports import number, rank_cause
from rollcall.runner import PASSED_AFTER_DISRUPTION
from rollcall.verdict import RankState

if TYPE_CHECKING:
    from rollcall.gate import GateReport
    from rollcall.reports import TestRecord
    from rollcall.verdict import RankResult, Verdict

STATES = tuple(s.value for s in RankState)

__all__ = ["REPORT_FILE", "STATES", "rank_states", "render", "write_report"]


def write_report(path: Path, records: Sequence[TestRecord], meta: Mapping[str, Any]) -> None:
    """Write the session's report to ``path``."""
    write_whole(path, render(records, meta, path.parent))


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
    tests = [_test(r, base) for r in records]
    return template("report.html.j2").render(failed=failed, head=head, tests=tests)


def rank_states(verdict: Verdict) -> dict[int, str]:
    """The state of every rank in the world, as the page names it."""
    return {r: result.state.value for r, result in verdict.ranks.items()}


def _interrupted(record: TestRecord, verdict: Verdict) -> str:
    """The interrupted run's line (where each rank stood), or the signal after the job ended; else empty."""
    why = record.extra.get("interrupted")
    lines = [p.message for p in verdict.of_kind(INTERRUPTED)]
    if lines:
        return lines[0]
    return f"the session was interrupted ({why}) after this job ended; its verdict stands" if why else ""


def _test(record: TestRecord, base: Path) -> dict[str, Any]:
    attempt = record.result.last
    verdict, spec = attempt.verdict, attempt.spec
    states = rank_states(verdict)
    logs = _log_links(attempt.artifacts, base)
    roles = rank_roles(verdict)
    meta = (
        f"backend {record.result.backend}; {spec.accelerator}; {counted(spec.nodes, 'node')} x "
        f"{counted(spec.procs_per_node, 'proc')} = {counted(spec.world_size, 'rank')}; "
        f"job {spec.name} {attempt.status.state.value}; {counted(len(record.result.attempts), 'attempt')}, "
        f"{sum(a.duration_s for a in record.result.attempts):.1f} s"
    )
    if attempt.status.waits is not None and (waited := attempt.status.waits.line()):
        meta += f"; {waited}"  # what the run waited for: capacity, each pod's image pull
    counts = {s: sum(1 for v in states.values() if v == s) for s in STATES}
    gate = record.gate
    analysis = verdict.root_cause
    error_lines = [line.text for line in lines(analysis)] if analysis else []
    # The first failure, whatever its class (a silent data corruption even when no rank failed of it), then
    # how the ranks' errors came about.
    first = verdict.first_failure
    head = first.summary if first is not None else ""
    error_lines = [head, *(line for line in error_lines if line != head)] if head else error_lines
    return {
        "root_cause": error_lines[0] if error_lines else "",
        # Whose the first problem is: the cluster's, the platform's, rollcall's own, undetermined.
        "whose": next((p.blame.line for p in verdict.findings if p.blame is not None), ""),
        "errors": error_lines[1:],
        "test_id": record.test_id,
        "passed": record.result.passed,
        "flaky": record.result.flaky,
        "after_disruption": record.result.outcome == PASSED_AFTER_DISRUPTION,
        "outcome": "passed" if record.result.passed else "failed",
        # The session was interrupted (Ctrl-C, SIGTERM) while this test ran: what the page says of it.
        "interrupted": _interrupted(record, verdict),
        "meta": meta,
        "config": f"configuration {gate.key}" if gate else "",
        "has_baseline": bool(gate and gate.baseline),
        "figures": _figures(verdict, gate),
        "mfu": verdict.mfu.text if verdict.mfu is not None else "",
        "gate_line": (
            f"regression gate: {gate.gate} ({gate.baseline_file or ''})"
            if gate and gate.gate != "off"
            else ""
        ),
        "failure": record.result.message() if not record.result.passed else "",
        "world_size": verdict.layout.world_size,
        "nodes": _grid(verdict, states, logs, roles),
        "legend": [{"state": s, "count": counts[s]} for s in STATES if counts[s] or s == "ok"],
        "unexpected": ranges(verdict.unexpected_ranks),
        "roles_legend": bool(roles) or any(v == RankState.FAILED.value for v in states.values()),
        "bars": _bars(verdict, states, gate),
        "compute": _compute_bars(verdict, states),
        "bandwidth": _bandwidth_tables(verdict),
        "node_facts": _node_facts(verdict),
        "gpus": _gpu_rows(verdict),
        "warnings": [p.message for p in verdict.warnings],
        "logs": _log_names(verdict, logs),
        "timeline": timeline(
            verdict,
            attempt.status.terminations,
            [r for r, role in roles.items() if role == "root"],
            window=(attempt.started_at, attempt.judged_at),
        ),
    }


def _node_facts(verdict: Verdict) -> dict[str, Any] | None:
    """Each node's versions (the keys some node knows), its devices and its fitness; None without facts."""
    nodes = verdict.node_verdicts()
    if not nodes:
        return None
    columns = [k for k in DRIFT_KEYS if any(k in n["facts"] for n in nodes)]
    drifted = {d.detail.key for d in (*verdict.findings, *verdict.warnings) if isinstance(d.detail, Drift)}
    rows = []
    for n in nodes:
        names = sorted({str(d.get("gpu_name", "?")) for d in n["devices"]})
        cells = [
            {
                "value": str(n["facts"].get(k, "unknown")),
                "title": n["unknown"].get(k, ""),
                "drift": k in drifted,
            }
            for k in columns
        ]
        rows.append(
            {
                "node": n["node"],
                "name": n["name"],
                "verdict": n["verdict"],
                "cells": cells,
                "devices": f"{len(n['devices'])} x {', '.join(names)}"
                if names
                else n["unknown"].get("nvml", "-"),
                "reasons": n["reasons"],
            }
        )
    return {"columns": columns, "rows": rows}


def _gpu_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """A row per GPU of each node: its facts (ECC, remaps, PCIe, clocks and throttle reasons), its events.

    A GPU no rank used but that said something during the run has a row of its own.
    """
    events: dict[tuple[int | None, Any], list[str]] = {}
    unfit: set[tuple[int | None, Any]] = set()
    for seen in verdict.gpu_events:
        key = (seen.node, seen.heard.uuid or seen.heard.gpu)
        at = f" at {_clock(seen.heard.time)}" if seen.heard.time is not None else ""
        events.setdefault(key, []).append(f"{seen.what}{at}{', ' + seen.phase if seen.phase else ''}")
        if seen.rule is not None:
            unfit.add(key)
    rows = []
    for node in verdict.nodes_detail:
        for d in node.devices:
            f = {k: "?" for k in DEVICE_KEYS} | dict(d.facts)
            key = (node.node, f.get("gpu_uuid") or d.index)
            rows.append(
                {
                    "node": f"node {node.node} ({node.name})",
                    "rank": str(d.rank),
                    "gpu": f"GPU {d.index if d.index is not None else '?'}",
                    "uuid": str(f["gpu_uuid"]),
                    "ecc": f"{f['ecc_volatile_uncorrected']} / {f['ecc_aggregate_uncorrected']}",
                    "remaps": f"pending {f['remapped_pending']}, failed {f['remapped_failure']}",
                    "pcie": f"gen {f['pcie_gen']}/{f['pcie_gen_max']} "
                    f"x{f['pcie_width']}/{f['pcie_width_max']}",
                    "clocks": f"{f['sm_clock_mhz']}/{f['sm_clock_max_mhz']} MHz, "
                    + _reasons(f["clock_events"]),
                    "events": events.pop(key, []),
                    "unfit": key in unfit,
                }
            )
    for seen in verdict.gpu_events:  # the GPUs no rank's facts named
        key = (seen.node, seen.heard.uuid or seen.heard.gpu)
        if key in events:
            rows.append(
                {
                    "node": seen.gpu_label.split(" GPU ", 1)[0],
                    "rank": "-",
                    "gpu": f"GPU {seen.heard.gpu}",
                    "uuid": seen.heard.uuid or "unknown",
                    **dict.fromkeys(("ecc", "remaps", "pcie", "clocks"), "-"),
                    "events": events.pop(key),
                    "unfit": key in unfit,
                }
            )
    return rows


def _reasons(active: object) -> str:
    """The clock event reasons a device read active: ``sw_thermal, hw_slowdown``, ``none`` or ``?``."""
    return (", ".join(map(str, active)) or "none") if isinstance(active, list) else "?"


def _clock(when: float) -> str:
    """``12:03:04`` UTC."""
    return datetime.fromtimestamp(when, tz=UTC).strftime("%H:%M:%S")


def _figures(verdict: Verdict, gate: GateReport | None) -> list[dict[str, Any]]:
    base = gate.baseline if gate else None
    regressed = {r.measure.name for r in gate.regressions} if gate else set()
    rows = []
    for m in MEASURES:
        value = getattr(verdict.figures, m.attr)
        b = getattr(base, m.attr) if base else None
        ratio = value / b if value is not None and b else None
        rows.append(
            {
                "name": m.name,
                "value": f"{number(value, m.spec)} {m.unit}",
                "baseline": f"{number(b, m.spec)} {m.unit}",
                "ratio": number(ratio, ".3f"),
                "regressed": m.name in regressed,
            }
        )
    return rows


def _grid(
    verdict: Verdict, states: Mapping[int, str], logs: Mapping[str, str], roles: Mapping[int, str]
) -> list[dict[str, Any]]:
    by_node: dict[int, list[int]] = defaultdict(list)
    for n in range(verdict.layout.nodes):
        by_node[n] = []
    for rank, result in sorted(verdict.ranks.items()):
        by_node[result.node].append(rank)
    nodes = []
    for node, ranks in sorted(by_node.items()):
        node_log = _rank_log(verdict, ranks, logs)
        cells = []
        for rank in ranks:
            result = verdict.ranks[rank]
            notes = "; ".join(result.notes)
            why = f"answered, too slow: {notes}" if result.too_slow else notes or "answered"
            role = roles.get(rank, "")
            tp = result.throughput
            kinds = list(dict.fromkeys(p.kind.value for p in result.problems))
            cells.append(
                {
                    "rank": rank,
                    "state": states[rank],
                    "owner": rank_cause(result)[1],
                    "kinds": " ".join(kinds),
                    "role": role,
                    "title": f"rank {rank} (node {node}): "
                    + {"root": "the root cause: ", "echo": "an echo of another rank's failure: "}.get(
                        role, ""
                    )
                    + why
                    + (f" [{', '.join(kinds)}]" if kinds else "")
                    + (f"; {tp:.2f} samples/s" if tp else "")
                    + _compile_note(result),
                    "href": _rank_log(verdict, [rank], logs) or node_log,
                }
            )
        nodes.append({"index": node, "tiles": Markup("").join(_tile(c, node) for c in cells)})
    return nodes


def _tile(cell: Mapping[str, Any], node: int) -> Markup:
    """One rank's tile of the grid: a link to its log, or a plain tile without one.

    Written here rather than in the template: a page of thousands of ranks spent most of its rendering
    looking up each tile's fields through the template engine.
    """
    e = escape
    classes = (
        f"rank {cell['state']}"
        + (" named" if cell["kinds"] else "")
        + (f" {cell['role']}" if cell["role"] else "")
    )
    attrs = (
        f'class="{e(classes)}" data-rank="{e(cell["rank"])}" data-node="{e(node)}" '
        f'data-state="{e(cell["state"])}" data-owner="{e(cell["owner"])}" data-kinds="{e(cell["kinds"])}" '
        f'data-role="{e(cell["role"])}" '
        f'title="{e(cell["title"])}"'
    )
    if cell["href"]:
        return Markup(f'<a {attrs} href="{e(cell["href"])}">{e(cell["rank"])}</a>')
    return Markup(f"<span {attrs}>{e(cell['rank'])}</span>")


def _compile_note(result: RankResult) -> str:
    """What a rank's tile says of its compile: the cache's answer and the first step's seconds."""
    cache = result.compile_cache
    if cache is None or cache.state == "off":
        return ""
    seconds = f", {cache.compile_s:.1f} s" if cache.compile_s is not None else ""
    return f"; compile cache {cache.state}{seconds}"


def _rank_log(verdict: Verdict, ranks: Iterable[int], logs: Mapping[str, str]) -> str | None:
    """The link of the first log any of ``ranks`` was read from."""
    for rank in ranks:
        for source in verdict.ranks[rank].pods:
            href = logs.get(safe_name(source) + ".log")
            if href:
                return href
    return None


def _bars(verdict: Verdict, states: Mapping[int, str], gate: GateReport | None) -> dict[str, Any]:
    world = verdict.layout.world_size
    values = {r: verdict.ranks[r].throughput for r in range(world)}
    measured = [v for v in values.values() if isinstance(v, int | float) and math.isfinite(v)]
    baseline = gate.baseline.throughput_median if gate and gate.baseline else None
    median = verdict.throughput.median
    plot = Plot(world, max([*measured, (baseline or 0) * 1.1, 1e-9]))
    bars = []
    for rank in range(world):
        v = values[rank]
        if isinstance(v, int | float) and math.isfinite(v) and v > 0:
            bars.append(plot.bar(rank, states[rank], v, f"rank {rank}: {v:.2f} samples/s"))
        else:
            bars.append(plot.stub(rank, RankState.MISSING.value, f"rank {rank}: no throughput"))
    lines = []
    if baseline:
        lines.append(hline("baseline", plot.y(baseline), f"baseline median {baseline:.2f}"))
    if median and gate and gate.straggler_ratio > 0:
        cut = median * gate.straggler_ratio
        lines.append(hline("threshold", plot.y(cut), f"straggler < {cut:.2f}"))
    return {"measured": bool(measured), **plot.chart(bars, lines)}


def _compute_bars(verdict: Verdict, states: Mapping[int, str]) -> dict[str, Any] | None:
    """Compute time per rank (ms per step, no communication), with the median and the straggler line."""
    report = verdict.perf_report
    compute = {c.rank: c for c in report.figures.compute}
    if not compute:
        return None
    mid = median_of([c.compute_ms for c in compute.values()]) or 0.0
    ratio = report.straggler_ratio
    cut = mid / ratio if ratio > 0 else None
    top = max([c.compute_ms for c in compute.values()] + [(cut or 0) * 1.1, 1e-9])
    plot = Plot(verdict.layout.world_size, top)
    bars = []
    for rank, c in sorted(compute.items()):
        p90 = f", p90 {c.compute_ms_p90:.2f}" if c.compute_ms_p90 else ""
        title = f"rank {rank} (node {c.node}): {c.compute_ms:.2f} ms{p90}"
        bars.append(plot.bar(rank, states.get(rank, RankState.OK.value), c.compute_ms, title))
    lines = [hline("baseline median", plot.y(mid), f"median {mid:.2f} ms")]
    if cut is not None:
        lines.append(hline("threshold", plot.y(cut), f"straggler > {cut:.2f} ms"))
    return plot.chart(bars, lines)


def _bandwidth_tables(verdict: Verdict) -> dict[str, Any] | None:
    """The bus bandwidth of every all-reduce group, then of every node; the slow groups marked."""
    report = verdict.perf_report
    if not report.figures.groups:
        return None
    slow = {(s.group.scope, s.group.nodes) for s in report.slow}
    groups = [
        {
            "scope": g.scope,
            "slow": (g.scope, g.nodes) in slow,
            "label": g.label,
            "ranks": ranges(g.ranks),
            "size": f"{g.bytes / 2**20:.4g} MiB",
            "algbw": f"{g.algbw_gbps:.4g}",
            "busbw": f"{g.busbw_gbps:.4g}",
        }
        for g in report.figures.groups
    ]
    nodes = [
        {
            "node": n.node,
            "pods": ", ".join(n.pods),
            "busbw": number(n.busbw_gbps, ".4g"),
            "pair_busbw": number(n.pair_busbw_gbps, ".4g"),
        }
        for n in report.figures.nodes()
    ]
    return {"groups": groups, "nodes": nodes}


def _log_links(directory: Path, base: Path) -> dict[str, str]:
    """Every file of a test's artifacts directory (its pods' logs, events) by name, linked from ``base``."""
    if not directory.is_dir():
        return {}
    links = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = os.path.relpath(path.resolve(), base.resolve())
        links[path.relative_to(directory).as_posix()] = quote(Path(rel).as_posix())
    return links


#: A rank's own output under torchrun's ``--log-dir`` of a local node: ``node-N-ranks/<run>/attempt_A/L/...``.
_RANK_FILE = re.compile(r"^node-(\d+)-ranks/(?:.*/)?attempt_(\d+)/(\d+)/(stdout|stderr)\.log$")
#: A rank's whole flight record of a stall, in its node's monitor directory (rank/flight.py's FILE).
_FLIGHT_FILE = re.compile(r"^node-(\d+)-monitor/flight/stall-(\d+)-rank-(\d+)$")


def _log_names(verdict: Verdict, logs: Mapping[str, str]) -> list[dict[str, str]]:
    """Every log link named by node and rank (``node 1 · ranks 4-7``, ``node 0 · rank 1 stderr``).

    A node's (pod's) log is known from the ranks read from it; a rank's own file from torchrun's layout of
    ``--log-dir`` (its local rank, on the node the directory is named after). Any other file keeps its path.
    """
    ppn = verdict.layout.procs_per_node
    by_log: dict[str, list[int]] = defaultdict(list)
    for rank, result in sorted(verdict.ranks.items()):
        for source in result.pods:
            by_log[safe_name(source) + ".log"].append(rank)
    named = []
    for path, href in logs.items():
        m = _RANK_FILE.match(path)
        ranks = by_log.get(path)
        if flight := _FLIGHT_FILE.match(path):
            name = f"node {flight[1]} · rank {flight[3]} flight record of stall {flight[2]}, whole"
        elif m:
            node, attempt, local, stream = int(m[1]), int(m[2]), int(m[3]), m[4]
            again = f" (restart {attempt})" if attempt else ""
            name = f"node {node} · rank {node * ppn + local} {stream}{again}"
        elif ranks:
            nodes = sorted({verdict.ranks[r].node for r in ranks})
            where = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {ranges(nodes)}"
            name = f"{where} · ranks {ranges(ranks)} ({path})"
        else:
            name = path
        named.append({"name": name, "href": href, "path": path})
    return named
