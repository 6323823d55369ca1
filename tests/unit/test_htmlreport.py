"""report.html: one self-contained file per session, a grid of ranks by node, bars, summary and log links."""

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.baseline import Baselines
from rollcall.collect import Collector
from rollcall.gate import GateReport
from rollcall.htmlreport import REPORT_FILE, render, write_report
from rollcall.jobspec import JobSpec
from rollcall.runner import RunResult
from tests.unit.helpers import judged
from tests.unit.scripted import SCRIPTED_CONFTEST
from tests.unit.test_baseline import KEY, ROLL_CALL, _fields, workload_log

pytest_plugins = ["pytester"]


class Elements(HTMLParser):
    """Every start tag as (tag, attributes); enough to read the report back."""

    def __init__(self, text):
        super().__init__()
        self.tags = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def ranks(self, test=0):
        """The grid cells of the ``test``-th section: [(rank, node, state, href)]."""
        section, cells = -1, []
        for tag, attrs in self.tags:
            if tag == "section":
                section += 1
            classes = attrs.get("class", "").split()
            if section == test and "rank" in classes and "data-rank" in attrs:
                cells.append(
                    (int(attrs["data-rank"]), int(attrs["data-node"]), attrs["data-state"], attrs.get("href"))
                )
        return cells


def record_of(root, name, nodes=2, ppn=4, tp=None, skip=None, criteria=None, state=JobState.SUCCEEDED):
    """A test's record whose pods' logs really are in ``root/name``."""
    collector = Collector(root / name)
    spec = JobSpec(name.replace("_", "-"), nodes, ppn, accelerator="cpu")
    for node in range(nodes):
        sink = collector.sink(f"{spec.name}-{node}-x7k2p")
        sink.write(workload_log(node, nodes, ppn, skip=skip, tp=tp).encode())
    collector.close()
    status = JobStatus(state, "" if state is JobState.SUCCEEDED else f"pod {spec.name}-1 failed")
    attempt = judged(collector.roll, spec, status, root / name, 2.0, **(criteria or {}))
    record = reports.TestRecord(f"tests/e2e/t.py::{name}", RunResult("scripted", [attempt]), "cpu")
    record.gate = GateReport.of(record.test_id, attempt)
    return record


@pytest.fixture
def failed_run(tmp_path):
    """Two nodes of 4: rank 5 never reported throughput or completion, rank 2 is a straggler."""
    record = record_of(tmp_path, "test_broken", tp={2: 20.0}, skip={5: ("throughput", "complete")})
    path = tmp_path / REPORT_FILE
    write_report(path, [record], {"backend": "scripted", "started": 0})
    return path, record


def test_the_grid_has_every_rank_by_node_coloured_by_what_it_did(failed_run):
    path, _ = failed_run
    cells = Elements(path.read_text()).ranks()
    assert [(r, n) for r, n, _, _ in cells] == [(r, r // 4) for r in range(8)]
    states = {r: s for r, _, s, _ in cells}
    assert states == {0: "ok", 1: "ok", 2: "straggler", 3: "ok", 4: "ok", 5: "missing", 6: "ok", 7: "ok"}
    assert 'data-world-size="8"' in path.read_text()


def test_each_rank_links_to_its_pods_log_and_every_log_is_listed(failed_run):
    path, _ = failed_run
    doc = Elements(path.read_text())
    hrefs = {r: h for r, _, _, h in doc.ranks()}
    assert unquote(hrefs[0]) == "test_broken/test-broken-0-x7k2p.log"
    assert unquote(hrefs[5]) == "test_broken/test-broken-1-x7k2p.log"  # missing, linked to its node's log
    links = [
        unquote(a["href"])
        for tag, a in doc.tags
        if tag == "a" and "href" in a and not a["href"].startswith("#")
    ]
    assert {link for link in links if "rank" not in link} >= {
        "test_broken/test-broken-0-x7k2p.log",
        "test_broken/test-broken-1-x7k2p.log",
    }
    for link in links:
        assert (path.parent / link).is_file(), link


def test_the_failure_summary_names_the_missing_and_the_straggler(failed_run):
    text = failed_run[0].read_text()
    assert '<span class="badge fail">FAIL</span>' in text
    summary = re.search(r'<pre class="failure">(.*?)</pre>', text, re.S).group(1)
    assert "throughput missing on 1 rank(s): 5 (node 1)" in summary
    assert "rank 2 (node 0) at 20.00 samples/s, 0.40 of the median" in summary


def test_bars_draw_each_rank_and_the_baseline(tmp_path):
    figures = {"throughput_total": 240.0, "throughput_median": 60.0, "epoch_time_mean": 0.375}
    entry = {**_fields(KEY), **figures}
    base = Baselines.from_dict({"version": 1, "entries": {KEY: entry}})
    criteria = {"baselines": base, "baseline_file": "baseline.json"}
    record = record_of(tmp_path, "test_gated", nodes=2, ppn=2, criteria=criteria)
    text = render([record], {}, tmp_path)
    bars = [a for tag, a in Elements(text).tags if tag == "rect" and "bar" in a.get("class", "")]
    assert [int(b["data-rank"]) for b in bars] == [0, 1, 2, 3]
    assert '<line class="baseline"' in text and "baseline median 60.00" in text
    assert "straggler &lt; 40.00" in text  # 0.8 x the median of 50
    assert '<tr class="regressed"><td>total throughput</td>' in text
    assert "regression gate: failed (baseline.json)" in text


def test_a_passing_run_has_no_failure_summary(tmp_path):
    text = render([record_of(tmp_path, "test_fine")], {"backend": "scripted"}, tmp_path)
    assert '<span class="badge pass">PASS</span>' in text and 'class="failure"' not in text
    assert {s for _, _, s, _ in Elements(text).ranks()} == {"ok"}


def test_the_report_is_self_contained(failed_run):
    text = failed_run[0].read_text().lower()
    for needle in ("http:", "https:", "//", "<script", "<link", "<img", "src=", "url(", "@import"):
        assert needle not in text, needle


def test_a_lost_node_is_all_missing_and_unlinked(tmp_path):
    skip = {r: ("start", "epoch_time", "throughput", "complete") for r in range(4, 8)}
    record = record_of(tmp_path, "test_lost", skip=skip, state=JobState.FAILED)
    cells = Elements(render([record], {}, tmp_path)).ranks()
    assert [(s, h) for r, _, s, h in cells if r >= 4] == [("missing", None)] * 4


def test_the_plugin_writes_it_for_every_run_pass_or_fail(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile(
        test_roll=ROLL_CALL
        + """
from conftest import PLAN
def test_missing(rollcall):
    PLAN.append({"skip": {3: ("throughput", "complete")}})
    r = rollcall()
    assert r.result.passed, r.result.message()
"""
    )
    res = pytester.runpytest("--nodes", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["html report: artifacts/report.html"])
    doc = Elements((pytester.path / "artifacts" / REPORT_FILE).read_text())
    assert [s for _, _, s, _ in doc.ranks(0)] == ["ok"] * 4
    assert [s for _, _, s, _ in doc.ranks(1)] == ["ok", "ok", "ok", "missing"]
    assert Path(pytester.path / "artifacts" / "test_missing").is_dir()


# -- compute time and bandwidth ------------------------------------------------------------------


def perf_record(root, compute=None, node_busbw=None):
    from tests.unit.test_perf import perf_log

    collector = Collector(root / "test_perf")
    spec = JobSpec("test-perf", 2, 2, accelerator="cpu")
    for node in range(2):
        sink = collector.sink(f"test-perf-{node}")
        sink.write(perf_log(node, compute=compute, node_busbw=node_busbw).encode())
    collector.close()
    attempt = judged(collector.roll, spec, JobStatus(JobState.SUCCEEDED), root, 2.0)
    record = reports.TestRecord("tests/e2e/t.py::test_perf", RunResult("scripted", [attempt]), "cpu")
    record.gate = GateReport.of(record.test_id, attempt)
    return record


def test_compute_bars_show_the_median_and_the_straggler_line(tmp_path):
    record = perf_record(tmp_path, compute={3: 31.5}, node_busbw={1: 0.05})
    text = render([record], {"backend": "scripted"}, tmp_path)
    doc = Elements(text)
    svg = [a for tag, a in doc.tags if tag == "svg" and "compute" in a.get("class", "")]
    assert len(svg) == 1
    bars = {
        int(a["data-rank"]): a["class"]
        for tag, a in doc.tags
        if tag == "rect" and "data-rank" in a and float(a["height"]) > 4
    }
    assert "Compute time per rank (ms per step, no communication)" in text
    assert "median 10.00 ms" in text and "straggler &gt; 12.50 ms" in text  # 10 / 0.8
    assert "rank 3 (node 1): 31.50 ms" in text
    states = {r: s for r, _, s, _ in doc.ranks()}
    assert states == {0: "ok", 1: "ok", 2: "slow", 3: "straggler"}  # 2 and 3 share the slow node
    assert bars[3] == "bar straggler"


def test_bandwidth_tables_list_every_group_and_node_marking_the_slow_one(tmp_path):
    record = perf_record(tmp_path, node_busbw={1: 0.05})
    doc = Elements(render([record], {"backend": "scripted"}, tmp_path))
    rows = [(a["data-scope"], a["class"]) for tag, a in doc.tags if tag == "tr" and "data-scope" in a]
    assert rows == [("world", "ok"), ("node", "ok"), ("node", "regressed")]
    assert [a["data-node"] for tag, a in doc.tags if tag == "tr" and "data-node" in a] == ["0", "1"]


def test_without_perf_figures_there_is_no_compute_or_bandwidth_section(failed_run):
    path, _ = failed_run
    text = path.read_text()
    assert "Compute time per rank" not in text and "All-reduce bandwidth" not in text


def test_results_json_carries_compute_per_rank_and_busbw_per_node(tmp_path):
    import json

    record = perf_record(tmp_path, compute={3: 31.5}, node_busbw={1: 0.05})
    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    perf = test["perf"]
    assert [(f["kind"], f["ranks"]) for f in test["findings"]] == [
        ("compute_straggler", [3]),
        ("slow_link", [2, 3]),
    ]
    assert [(c["rank"], c["node"], c["pod"], c["compute_ms"]) for c in perf["compute"]] == [
        (0, 0, "test-perf-0", 10.0),
        (1, 0, "test-perf-0", 10.0),
        (2, 1, "test-perf-1", 10.0),
        (3, 1, "test-perf-1", 31.5),
    ]
    assert [(n["node"], n["busbw_gbps"]) for n in perf["bandwidth"]["nodes"]] == [(0, 1.0), (1, 0.05)]
    assert [s["rank"] for s in perf["compute_stragglers"]] == [3]
    assert [s["nodes"] for s in perf["slow_links"]] == [[1]]
    props = dict(reports.junit_properties(record))
    assert (props["compute_stragglers"], props["slow_links"]) == (1, 1)
    assert reports.perf_summary([record]) == [
        "test_perf: slowest rank: 3 (node 1, pod test-perf-1), 31.50 ms compute per step, 3.15 x the median "
        "of 10.00 ms",
        "test_perf: lowest bus bandwidth: node 1 (pod(s) test-perf-1), 0.05 GB/s, 0.10 x the median of "
        "0.525 GB/s",
    ]


def test_a_diverged_replica_is_wrong_on_the_page_and_its_root_cause(tmp_path):
    collector = Collector(tmp_path / "test_sdc")
    spec = JobSpec("test-sdc", 2, 4, accelerator="cpu")
    for node in range(2):
        text = re.sub(  # every rank's completion carries its digest; rank 5's differs
            r'("event":"complete","rank":(\d+),"world_size":8)',
            lambda m: m.group(1) + f',"param_digest":"{"bad" if m.group(2) == "5" else "good"}"',
            workload_log(node, 2, 4),
        )
        collector.sink(f"test-sdc-{node}").write(text.encode())
    collector.close()
    attempt = judged(collector.roll, spec, JobStatus(JobState.SUCCEEDED), tmp_path, 2.0)
    record = reports.TestRecord("tests/e2e/t.py::test_sdc", RunResult("scripted", [attempt]), "cpu")
    path = tmp_path / REPORT_FILE
    write_report(path, [record], {"backend": "scripted", "started": 0})
    states = {r: s for r, _, s, _ in Elements(path.read_text()).ranks()}
    assert states == {r: "wrong" if r == 5 else "ok" for r in range(8)}
    root = re.search(r'<p class="root-cause">([^<]*)</p>', path.read_text())
    assert root is not None and root.group(1).startswith(
        "replica divergence (silent data corruption): rank 5 (node 1) at completion"
    )
    assert record.as_dict()["replicas"] == {"complete": ["bad", "good"]}
