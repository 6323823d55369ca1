"""``rollcall history``: several nightly runs' results.json as throughput over time per configuration."""

import json
from datetime import UTC, datetime

from rollcall import reports
from rollcall.cli import main
from rollcall.gate import GateReport
from rollcall.runner import RunResult
from tests.unit.test_baseline import KEY, attempt_of

NIGHT = datetime(2026, 3, 1, 2, 0, tzinfo=UTC).timestamp()
DAY = 86400.0


def nightly(root, name, started, *attempts):
    """Write one night's results.json holding a test per attempt."""
    records = []
    for test, attempt in attempts:
        record = reports.TestRecord(
            f"tests/e2e/test_bert_training.py::{test}", RunResult("kubernetes", [attempt]), "cpu"
        )
        record.gate = GateReport.of(record.test_id, attempt)
        records.append(record)
    reports.write_results(
        root / name / "results.json", records, {"started": started, "backend": "kubernetes"}
    )
    return root / name


def test_runs_are_tabled_per_configuration_in_time_order(tmp_path, capsys):
    tp = lambda v: {r: v for r in range(4)}  # noqa: E731
    first = nightly(tmp_path, "2026-03-01", NIGHT, ("test_roll", attempt_of()))
    third = nightly(
        tmp_path,
        "2026-03-03",
        NIGHT + 2 * DAY,
        ("test_roll", attempt_of(tp={0: 40.0, 1: 40.0, 2: 40.0, 3: 40.0})),
        ("test_wide", attempt_of(nodes=1, ppn=4)),
    )
    second = nightly(tmp_path, "2026-03-02", NIGHT + DAY, ("test_roll", attempt_of(tp=tp(55.0))))

    assert main(["history", str(third), str(first), str(second / "results.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    wide = "accelerator=cpu,instance_type=-,nodes=1,procs_per_node=4,model=tiny,seq_len=64"
    assert out[:4] == [wide, out[1], out[2], ""]
    assert out[2].split()[3:6] == ["2026-03-03", "test_wide", "200.00"]
    assert out[4] == KEY
    assert out[5].split() == [
        *("started", "run", "test", "samples/s", "total", "change", "per-rank", "median", "epoch", "s"),
        "verdict",
    ]
    rows = [line.split() for line in out[6:9]]
    assert [r[3] for r in rows] == ["2026-03-01", "2026-03-02", "2026-03-03"]
    assert [(r[5], r[6], r[7]) for r in rows] == [
        ("200.00", "-", "50.00"),
        ("220.00", "+10.0%", "55.00"),
        ("160.00", "-27.3%", "40.00"),
    ]
    assert [r[-1] for r in rows] == ["PASS", "PASS", "PASS"]
    assert len(out) == 9


def test_failed_runs_show_as_failed_and_json_has_every_point(tmp_path, capsys):
    run = nightly(tmp_path, "n1", NIGHT, ("test_roll", attempt_of(skip={3: ("throughput", "complete")})))
    assert main(["history", "--json", str(run)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (point,) = doc["configurations"][KEY]
    assert point["run"] == "n1" and not point["passed"] and point["throughput_total"] == 150.0
    assert point["started"] == NIGHT


def test_older_results_without_a_gate_are_keyed_from_their_fields(tmp_path, capsys):
    old = tmp_path / "old"
    old.mkdir()
    test = {
        "test_id": "t::test_roll",
        "accelerator": "neuron",
        "nodes": 2,
        "procs_per_node": 32,
        "throughput": {"total": 3200.0, "median": 50.0},
        "epoch_time_mean": 1.5,
        "passed": True,
    }
    (old / "results.json").write_text(json.dumps({"tests": [test]}))
    assert main(["history", str(old)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "accelerator=neuron,instance_type=-,nodes=2,procs_per_node=32,model=?,seq_len=?"
    assert out[2].split()[:3] == ["-", "old", "test_roll"]


def test_a_path_without_results_is_a_usage_error(tmp_path, capsys):
    assert main(["history", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "results.json").write_text("[]")
    assert main(["history", str(tmp_path)]) == 2
    assert 'has no "tests" list' in capsys.readouterr().err


# -- the trend page ------------------------------------------------------------------------------


def test_the_trend_page_draws_each_configuration_marks_failures_and_regressions_and_links_runs(
    tmp_path, capsys
):
    from urllib.parse import unquote

    from tests.unit.test_baseline import baselines
    from tests.unit.test_htmlreport import Elements

    gated = {"baselines": baselines({"throughput_total": 200.0}), "max_regression_pct": 10.0}
    runs = [
        nightly(tmp_path, "n1", NIGHT, ("test_roll", attempt_of())),
        nightly(tmp_path, "n2", NIGHT + DAY, ("test_roll", attempt_of(skip={3: ("throughput", "complete")}))),
        nightly(tmp_path, "n3", NIGHT + 2 * DAY, ("test_roll", attempt_of(tp={0: 20.0}, **gated))),
    ]
    for run in runs[:2]:  # the third run has no report.html: its point links nowhere
        (run / "report.html").write_text("<!DOCTYPE html><title>report</title>")
    out = tmp_path / "site" / "trend.html"
    assert main(["history", "--html", str(out), *map(str, reversed(runs))]) == 0
    assert capsys.readouterr().out.strip() == f"trend page: {out}"
    text = out.read_text()
    doc = Elements(text)
    (section,) = [a for tag, a in doc.tags if tag == "section"]
    assert section["data-config"] == KEY
    charts = [a["data-measure"] for tag, a in doc.tags if tag == "svg"]
    assert charts == ["throughput_total"]  # these runs measured no compute time nor bus bandwidth
    assert 'data-measure="compute_ms_median">no run measured it' in text
    marks = [a for tag, a in doc.tags if tag == "g" and a.get("class") == "mark"]
    assert [(m["data-run"], m["data-outcome"], m["data-regressed"]) for m in marks] == [
        ("n1", "passed", "false"),
        ("n2", "failed", "false"),
        ("n3", "failed", "true"),
    ]
    links = [unquote(a["href"]) for tag, a in doc.tags if tag == "a"]
    assert links == ["../n1/report.html", "../n2/report.html"]
    for link in links:
        assert (out.parent / link).is_file()
    points = [a for tag, a in doc.tags if tag == "circle" and "point" in a["class"]]
    ys = [float(p["cy"]) for p in points]
    assert ys[0] < ys[2] < ys[1]  # 200, 150 and 170 samples/s: higher is up
    labels = [a for tag, a in doc.tags if tag == "text" and a.get("class") == "run-label"]
    assert len(labels) == 3
    for needle in ("http:", "https:", "<script", "<link", "<img", "src=", "url("):
        assert needle not in text.lower()


def test_the_trend_page_charts_compute_time_and_bus_bandwidth_where_runs_measured_them(tmp_path):
    from rollcall.page.trend import render
    from tests.unit.test_htmlreport import Elements, perf_record

    record = perf_record(tmp_path, compute={3: 31.5}, node_busbw={1: 0.05})
    reports.write_results(tmp_path / "p1" / "results.json", [record], {"started": NIGHT})
    from rollcall.page.history import collect

    doc = Elements(render(collect([tmp_path / "p1"]), tmp_path))
    assert [a["data-measure"] for tag, a in doc.tags if tag == "svg"] == [
        "throughput_total",
        "compute_ms_median",
        "busbw_world",
    ]


def test_an_unwritable_trend_page_is_a_usage_error(tmp_path, capsys):
    run = nightly(tmp_path, "n1", NIGHT, ("test_roll", attempt_of()))
    (tmp_path / "file").write_text("")
    assert main(["history", "--html", str(tmp_path / "file" / "trend.html"), str(run)]) == 2
    err = capsys.readouterr().err
    assert "cannot write --html" in err and "name a writable file" in err


def test_html_and_json_together_are_a_usage_error(tmp_path, capsys):
    run = nightly(tmp_path, "n1", NIGHT, ("test_roll", attempt_of()))
    try:
        main(["history", "--json", "--html", str(tmp_path / "t.html"), str(run)])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--json with --html was accepted")
    assert "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "t.html").exists()
