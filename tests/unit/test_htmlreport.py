"""report.html: one self-contained file per session, a grid of ranks by node, bars, summary and log links."""

import itertools
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.collect import Collector
from rollcall.evidence.baseline import Baselines
from rollcall.gate import GateReport
from rollcall.jobspec import JobSpec
from rollcall.page.report import REPORT_FILE, render, write_report
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
    assert (props["compute_stragglers"], props["slow_links"]) == ("1", "1")
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
        "first failure: replica divergence (silent data corruption): rank 5 (node 1) at completion"
    )
    assert record.as_dict()["replicas"] == {"complete": ["bad", "good"]}


# -- the timeline, rank labels, roles, names ------------------------------------------------------

T0 = 1_764_576_000.0


def stamped(text, t0=T0, step=0.5):
    """``text`` with every roll-call line stamped ``time``, ``step`` seconds after the one before."""
    clock = iter(t0 + i * step for i in range(10**7))
    return re.sub(r'("world_size":\d+)', lambda m: f'{m[1]},"time":{next(clock)}', text)


def stamped_record(
    root,
    name,
    nodes=2,
    ppn=2,
    extra=None,
    state=JobState.SUCCEEDED,
    start_fields="",
    step=0.5,
    terminations=(),
    **kw,
):
    """A record whose logs carry a time on every event; ``extra[node]`` lines are appended to a node's log."""
    collector = Collector(root / name)
    spec = JobSpec(name.replace("_", "-"), nodes, ppn, accelerator="cpu")
    for node in range(nodes):
        text = workload_log(node, nodes, ppn, **kw) + "".join(x + "\n" for x in (extra or {}).get(node, ()))
        text = text.replace('"device":"cpu"', '"device":"cpu"' + start_fields)
        collector.sink(f"{spec.name}-{node}").write(stamped(text, T0 + node * 0.1, step).encode())
    collector.close()
    status = JobStatus(state, "" if state is JobState.SUCCEEDED else "pod failed", terminations=terminations)
    attempt = judged(collector.roll, spec, status, root / name, 2.0)
    record = reports.TestRecord(f"tests/e2e/t.py::{name}", RunResult("scripted", [attempt]), "cpu")
    record.gate = GateReport.of(record.test_id, attempt)
    return record


def timeline_rows(doc):
    return [a for tag, a in doc.tags if tag == "g" and a.get("class") == "row"]


def timeline_ticks(doc):
    return [a for tag, a in doc.tags if tag == "line" and "data-event" in a]


def test_the_timeline_draws_every_ranks_events_by_node(tmp_path):
    doc = Elements(render([stamped_record(tmp_path, "test_time")], {}, tmp_path))
    rows = timeline_rows(doc)
    assert [(r["data-row"], r["data-node"]) for r in rows] == [("0", "0"), ("1", "0"), ("2", "1"), ("3", "1")]
    events = [t["data-event"] for t in timeline_ticks(doc)]
    # start, two epochs, throughput and complete for each of 4 ranks
    assert events.count("start") == 4 and events.count("epoch_time") == 8 and events.count("complete") == 4
    svg = next(a for tag, a in doc.tags if tag == "svg" and a.get("class") == "timeline")
    assert svg["data-folded"] == "false"
    xs = [float(t["x1"]) for t in timeline_ticks(doc)]
    assert min(xs) >= 150 and max(xs) <= 150 + 860  # on the time axis, first event at its left end
    assert min(xs) == 150.0


def test_a_failed_run_has_a_timeline_with_its_error_and_the_root_cause_marked(tmp_path):
    from tests.unit.helpers import event

    extra = {
        0: [event("error", 1, 4, message="injected failure on rank 1")],
        1: [
            event("error", 2, 4, message="Connection reset by peer"),
            event("error", 3, 4, message="Connection reset by peer"),
        ],
    }
    skip = {r: ("throughput", "complete") for r in range(4)}
    record = stamped_record(tmp_path, "test_err", extra=extra, skip=skip, state=JobState.FAILED)
    text = render([record], {}, tmp_path)
    doc = Elements(text)
    errors = [t for t in timeline_ticks(doc) if t["data-event"] == "error"]
    assert len(errors) == 3
    roles = {
        int(a["data-rank"]): a["data-role"]
        for tag, a in doc.tags
        if "rank" in a.get("class", "").split() and "data-role" in a
    }
    assert roles == {0: "", 1: "root", 2: "echo", 3: "echo"}
    assert [r["data-role"] for r in timeline_rows(doc)] == ["", "root", "", ""]
    cell = next(a for tag, a in doc.tags if a.get("data-rank") == "1" and "data-role" in a)
    assert cell["class"] == "rank raised named root" and cell["title"].startswith(
        "rank 1 (node 0): the root cause"
    )


def test_at_2048_ranks_the_timeline_folds_each_node_and_the_bars_label_every_nth_rank(tmp_path):
    record = stamped_record(tmp_path, "test_big", nodes=256, ppn=8, step=0.001)
    doc = Elements(render([record], {}, tmp_path))
    rows = timeline_rows(doc)
    assert len(rows) == 256 and rows[0]["data-ranks"] == "0-7" and rows[-1]["data-ranks"] == "2040-2047"
    spans = [a for tag, a in doc.tags if tag == "line" and a.get("class", "").startswith("span ")]
    assert len(spans) == 256 * 5  # start, 2 epochs, throughput, complete: one span each per node
    labels = [int(a["data-rank"]) for tag, a in doc.tags if tag == "text" and a.get("class") == "rank-label"]
    throughput_labels = labels  # the only bar chart: these logs carry no compute time
    assert throughput_labels[0] == 0 and throughput_labels[-1] == 2047
    gaps = [b - a for a, b in itertools.pairwise(throughput_labels)]
    # 4-digit labels 34 px apart on 3 px bars: every 12th rank, not 2,048 labels on top of each other
    assert set(gaps[:-1]) == {12} and 12 <= gaps[-1] < 24


def test_at_2_ranks_every_bar_has_its_rank_label(tmp_path):
    doc = Elements(render([record_of(tmp_path, "test_two", nodes=1, ppn=2)], {}, tmp_path))
    labels = [a for tag, a in doc.tags if tag == "text" and a.get("class") == "rank-label"]
    assert [int(a["data-rank"]) for a in labels] == [0, 1]
    bars = [a for tag, a in doc.tags if tag == "rect" and "data-rank" in a]
    for label, bar in zip(labels, bars, strict=True):  # each label under the middle of its bar
        assert float(bar["x"]) < float(label["x"]) < float(bar["x"]) + float(bar.get("width") or 27)


def test_a_run_without_timed_events_says_so(failed_run):
    assert "no rank's events carried a time: nothing to draw" in failed_run[0].read_text()


def test_a_failed_run_shows_its_configuration_from_the_ranks_start_events(tmp_path):
    skip = {r: ("throughput", "complete") for r in range(4)}
    start = ',"model":"tiny","seq_len":64,"batch_size":8'
    record = stamped_record(tmp_path, "test_cfg", skip=skip, state=JobState.FAILED, start_fields=start)
    text = render([record], {}, tmp_path)
    assert "model=tiny,seq_len=64" in text and "model=?" not in text


def test_a_straggler_answered_too_slowly_and_a_rank_that_exited_nonzero_is_its_own_colour(failed_run):
    path, _ = failed_run
    doc = Elements(path.read_text())
    cell = next(a for tag, a in doc.tags if a.get("data-rank") == "2" and "data-role" in a)
    assert cell["title"].startswith("rank 2 (node 0): answered, too slow: ")
    assert "roll call: 7 of 8 ranks answered, 1 of them too slow" in path.read_text()
    css = re.search(r"\.rank\.failed\{background:(#[0-9a-f]+)\}", path.read_text()).group(1)
    missing = re.search(r"\.rank\.missing\{background:(#[0-9a-f]+)\}", path.read_text()).group(1)
    assert css != missing


def test_log_links_are_named_by_node_and_rank(tmp_path):
    record = record_of(tmp_path, "test_named", nodes=2, ppn=2)
    for node in range(2):
        for local in range(2):
            f = tmp_path / "test_named" / f"node-{node}-ranks" / "none_2yw1lavf" / "attempt_0" / str(local)
            f.mkdir(parents=True)
            (f / "stderr.log").write_text("")
    (tmp_path / "test_named" / "node-1-monitor" / "flight").mkdir(parents=True)
    (tmp_path / "test_named" / "node-1-monitor" / "flight" / "stall-2-rank-3").write_bytes(b"")
    doc = Elements(render([record], {}, tmp_path))
    shown = {}
    html = render([record], {}, tmp_path)
    for m in re.finditer(r'<li><a href="([^"]+)" title="([^"]+)">([^<]+)</a></li>', html):
        shown[m[2]] = m[3]
    assert shown["node-1-ranks/none_2yw1lavf/attempt_0/1/stderr.log"] == "node 1 · rank 3 stderr"
    assert shown["node-1-monitor/flight/stall-2-rank-3"] == "node 1 · rank 3 flight record of stall 2, whole"
    assert shown["test-named-0-x7k2p.log"] == "node 0 · ranks 0-1 (test-named-0-x7k2p.log)"
    assert doc.tags  # the page still parses


def roles_record(root, name="test_roles"):
    """Rank 1 fails first (the root cause), rank 2 echoes it, rank 3 answered and then exited with code 1."""
    from rollcall.evidence.endings import Termination
    from tests.unit.helpers import event

    extra = {
        0: [event("error", 1, 4, message="injected failure on rank 1")],
        1: [event("error", 2, 4, message="Connection reset by peer")],
    }
    skip = {1: ("throughput", "complete"), 2: ("throughput", "complete")}
    exited = Termination(f"{name.replace('_', '-')}-1", None, "h1", "Error", 1, T0 + 30, rank=3)
    return stamped_record(root, name, extra=extra, skip=skip, state=JobState.FAILED, terminations=[exited])


def test_the_root_cause_its_echo_and_a_rank_that_exited_nonzero_are_three_different_tiles(tmp_path):
    text = render([roles_record(tmp_path)], {}, tmp_path)
    doc = Elements(text)
    cells = {int(a["data-rank"]): a for tag, a in doc.tags if "data-role" in a and "data-rank" in a}
    seen = {r: (c["data-state"], c["data-role"]) for r, c in cells.items()}
    assert seen == {0: ("ok", ""), 1: ("raised", "root"), 2: ("raised", "echo"), 3: ("failed", "")}
    assert "exited with code 1 after answering the roll call" in cells[3]["title"]
    ended = [t for t in timeline_ticks(doc) if t["data-event"] == "ended"]
    assert len(ended) == 1  # the moment rank 3's process ended, on its own row
    assert "<title>rank 3 (pod test-roles-1 on node h1) was ended by Error (exit code 1)" in text


def test_the_terminal_table_and_results_json_count_a_straggler_as_answered_too_slowly(failed_run, tmp_path):
    import json

    _, record = failed_run
    _, row = reports.summary_table([record])
    assert row.split()[:4] == ["test_broken", "scripted", "7/8", "(1"]  # rank 5 missed events, 2 is slow
    assert "7/8 (1 too slow)" in row
    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert (test["verdict"], test["ranks_answered"], test["ranks_too_slow"]) == ("failed", 7, 1)


def test_each_ranks_compile_cache_answer_is_in_results_json_and_on_its_tile(tmp_path):
    collector = Collector(tmp_path / "test_cached")
    spec = JobSpec("test-cached", 2, 2, accelerator="cpu")
    answers = ['"compile_cache":"hit","compile_cache_hits":2,"compile_cache_misses":0,"compile_s":2.5,', ""]
    for node in range(2):
        text = workload_log(node, 2, 2).replace('"samples_per_sec":', answers[node] + '"samples_per_sec":')
        collector.sink(f"{spec.name}-{node}-x7k2p").write(text.encode())
    collector.close()
    attempt = judged(collector.roll, spec, JobStatus(JobState.SUCCEEDED), tmp_path / "test_cached", 2.0)
    record = reports.TestRecord("tests/e2e/t.py::test_cached", RunResult("scripted", [attempt]), "cpu")
    cache = {"state": "hit", "compile_s": 2.5, "hits": 2, "misses": 0}
    assert record.as_dict()["compile_cache"] == {"0": cache, "1": cache}  # node 1's ranks did not say
    text = render([record], {}, tmp_path)
    assert text.count("; compile cache hit, 2.5 s") == 2


def test_the_legend_says_its_counts_in_words_beside_an_empty_swatch(failed_run):
    """A count in a rank-shaped chip reads as a rank ("0 ok" as rank 0 ok): the chip is a bare swatch."""
    path, _ = failed_run
    legend = re.search(r'<p class="legend">(.*?)</p>', path.read_text(), re.S)[1]
    entry = re.compile(
        r'<span data-state="(\w+)" data-count="(\d+)"><span class="rank (\w+) swatch" aria-hidden="true">'
        r"</span> (\w+): (\d+) ranks?</span>"
    )
    found = entry.findall(legend)
    assert found and "".join(m.group(0) for m in entry.finditer(legend)) == legend, legend
    for state, count, swatch, said, said_count in found:
        assert state == swatch == said and count == said_count
