"""The regressions check: no figure worse than its baseline beyond --max-regression; baselines that know the
noise (a reference from the last sound runs of the same configuration)."""

from dataclasses import fields

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.regressions import REGRESSION
from rollcall.checks.regressions import regressions as regressions_check
from rollcall.checks.runview import RunView
from rollcall.evidence.baseline import BaselineError, ConfigKey, regressions
from rollcall.evidence.reference import history_baselines
from rollcall.gate import GateReport, criteria_of
from rollcall.jobspec import JobSpec
from rollcall.options import OptionError, resolve
from rollcall.ranklog import RollCall
from rollcall.reports import TestRecord as Record
from rollcall.reports import write_results
from rollcall.runner import RunResult
from rollcall.verdict import Criteria, Figures, Layout, Observed
from tests.unit.test_baseline import KEY, attempt_of, baselines, workload_log


def write_run(directory, n, tp, nodes=2, state=JobState.SUCCEEDED):
    """A past run's results.json, written by the suite's own writer, started at ``n``."""
    attempt = attempt_of(nodes=nodes, tp={r: tp for r in range(nodes * 2)}, state=state)
    record = Record("t.py::test_roll", RunResult("local", [attempt]), "cpu")
    record.gate = GateReport.of(record.test_id, attempt)
    write_results(directory / f"run-{n}" / "results.json", [record], {"started": 1_700_000_000.0 + n})


def judged_against(history, tp, **options):
    criteria = criteria_of(resolve({"baseline_history": str(history), **options}, environ={}))
    return attempt_of(
        tp={r: tp for r in range(4)}, **{f.name: getattr(criteria, f.name) for f in fields(criteria)}
    )


@pytest.fixture
def five_quiet_runs(tmp_path):
    """Five sound runs of one configuration within 1% of each other, beside runs that must not count."""
    for n, tp in enumerate((50.0, 50.2, 49.8, 50.1, 49.9)):
        write_run(tmp_path, n, tp)
    write_run(tmp_path, 10, 500.0, nodes=1)  # another configuration
    write_run(tmp_path, 11, 5.0, state=JobState.FAILED)  # not sound
    return tmp_path


def test_the_reference_is_the_median_of_the_sound_runs_of_its_own_configuration(five_quiet_runs):
    baselines = history_baselines(str(five_quiet_runs), runs=10, mads=3.0)
    entry = baselines.entries[next(k for k in baselines.entries if str(k) == KEY)]
    assert entry.figures.throughput_median == 50.0
    assert entry.reference is not None and entry.reference.runs["throughput_median"] == 5
    assert entry.reference.spread.throughput_median == pytest.approx(1.4826 * 0.1)
    other = [k for k in baselines.entries if k.nodes == 1]
    assert [baselines.entries[k].figures.throughput_median for k in other] == [500.0]


def test_a_healthy_run_passes_and_one_slowed_1_5x_fails_with_reference_spread_and_runs(five_quiet_runs):
    healthy = judged_against(five_quiet_runs, 49.7)
    assert healthy.verdict.passed, healthy.verdict.message()
    slowed = judged_against(five_quiet_runs, 50.0 / 1.5)
    found = slowed.verdict.of_kind(REGRESSION)
    assert [p.detail.measure.attr for p in found] == ["throughput_total", "throughput_median"]
    message = found[1].message
    assert "33.33 samples/s against a reference of 50.00 samples/s" in message
    assert "the median of the last 5 sound run(s)" in message
    assert "spread 0.15 samples/s (1.4826 x MAD)" in message
    assert "--baseline-mads 3" in message


def test_noise_within_the_spreads_passes_where_the_percentage_alone_would_fail(tmp_path):
    for n, tp in enumerate((50.0, 40.0, 60.0, 45.0, 55.0)):
        write_run(tmp_path, n, tp)
    noisy = judged_against(tmp_path, 42.0)  # 16% below the median, ~1.1 spreads
    assert noisy.verdict.passed, noisy.verdict.message()
    tight = judged_against(tmp_path, 42.0, baseline_mads="1")
    assert tight.verdict.of_kind(REGRESSION), "beyond 1 spread and 10%: a regression"


def test_the_last_n_runs_make_the_reference(tmp_path):
    for n, tp in enumerate((10.0, 10.0, 10.0, 50.0, 50.0, 50.0)):
        write_run(tmp_path, n, tp)
    baselines = history_baselines(str(tmp_path / "*" / "results.json"), runs=3, mads=3.0)
    (entry,) = baselines.entries.values()
    assert entry.figures.throughput_median == 50.0 and entry.info["runs"] == 3


def test_too_few_runs_say_so_and_the_percentage_judges_against_the_median(tmp_path):
    write_run(tmp_path, 0, 50.0)
    write_run(tmp_path, 1, 52.0)
    slowed = judged_against(tmp_path, 40.0)
    (problem, *_) = slowed.verdict.of_kind(REGRESSION)
    assert "the median of the last 2 sound run(s)" in problem.message
    assert "too few runs for a spread (fewer than 3): judged by --max-regression 10% alone" in problem.message
    assert judged_against(tmp_path, 48.0).verdict.passed  # within 10% of the median 51


def test_a_configuration_without_history_skips_the_gate(tmp_path):
    write_run(tmp_path, 0, 50.0, nodes=1)
    attempt = judged_against(tmp_path, 1.0)
    assert attempt.verdict.passed and attempt.verdict.baseline is None
    assert (
        ConfigKey.of(attempt.spec, attempt.verdict.workload)
        not in history_baselines(str(tmp_path), 10, 3.0).entries
    )


def test_bad_history_input_names_the_input_and_the_fix(tmp_path):
    with pytest.raises(BaselineError, match=r"matches no file: name a directory of past runs"):
        history_baselines(str(tmp_path / "nightly" / "*" / "results.json"), 10, 3.0)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{")
    with pytest.raises(BaselineError, match=r"results.json is not JSON"):
        history_baselines(str(tmp_path / "bad"), 10, 3.0)
    with pytest.raises(OptionError, match=r"pass one of them"):
        resolve({"baseline": "b.json", "baseline_history": str(tmp_path)}, environ={})
    with pytest.raises(OptionError, match=r"invalid --baseline-mads value '0'"):
        resolve({"baseline_mads": "0"}, environ={})


def test_a_baseline_20_percent_above_fails_on_every_measure_naming_it():
    now = Figures(200.0, 50.0, 0.45)
    base = Figures(240.0, 60.0, 0.375)
    found = regressions(now, base, 10)
    assert [r.measure.name for r in found] == [
        "total throughput",
        "per-rank median throughput",
        "mean epoch time",
    ]
    assert str(found[0]) == (
        "total throughput regressed: 200.00 samples/s against a baseline of 240.00 samples/s "
        "(ratio 0.833, 16.7% below it; --max-regression 10%)"
    )
    assert "mean epoch time regressed: 0.4500 s against a baseline of 0.3750 s (ratio 1.200, 20.0% above" in (
        str(found[2])
    )


def test_within_the_allowed_regression_or_better_passes():
    assert regressions(Figures(200.0, 50.0, 0.45), Figures(220.0, 55.0, 0.41), 10) == []
    assert regressions(Figures(400.0, 100.0, 0.2), Figures(200.0, 50.0, 0.45), 0) == []
    # a measure absent on either side is not compared
    assert regressions(Figures(None, 50.0, None), Figures(240.0, None, 0.3), 10) == []


def test_a_slower_compute_time_or_a_lower_world_bus_bandwidth_regresses():
    base = Figures(200.0, 50.0, 0.45, compute_ms_median=40.0, busbw_world=100.0)
    slow = Figures(200.0, 50.0, 0.45, compute_ms_median=46.0, busbw_world=85.0)
    found = regressions(slow, base, 10)
    assert [r.measure.name for r in found] == [
        "median compute time per step",
        "world all-reduce bus bandwidth",
    ]
    assert str(found[0]).startswith(
        "median compute time per step regressed: 46.00 ms against a baseline of 40.00 ms"
    )
    assert "85.00 GB/s against a baseline of 100.00 GB/s (ratio 0.850, 15.0% below it" in str(found[1])
    # within the allowed 10%, or an entry written before these figures existed: not compared
    assert regressions(Figures(200.0, 50.0, 0.45, 43.0, 92.0), base, 10) == []
    assert regressions(slow, Figures(200.0, 50.0, 0.45), 10) == []


def test_the_gate_adds_regressions_to_the_verdict_and_skips_an_unknown_configuration():
    high = baselines({"throughput_total": 240.0, "throughput_median": 60.0, "epoch_time_mean": 0.375})
    attempt = attempt_of(baselines=high, baseline_file="b.json", max_regression_pct=10)
    report = GateReport.of("t::a", attempt)
    assert report.gate == "failed" and not attempt.passed
    assert report.sound  # the roll call itself was sound: --write-baseline may record it
    assert any(p.startswith("total throughput regressed: 200.00") for p in attempt.verdict.problems)
    assert "regression gate failed" in report.note()

    other = GateReport.of("t::b", attempt_of(nodes=1, ppn=4, baselines=high, baseline_file="b.json"))
    assert other.gate == "skipped" and other.regressions == []
    assert other.note() == (
        "rollcall: no baseline for accelerator=cpu,instance_type=-,nodes=1,procs_per_node=4,model=tiny,"
        "seq_len=64 in b.json: regression gate skipped for t::b (record one with --write-baseline)"
    )
    assert GateReport.of("t::c", attempt_of()).gate == "off"


def baseline_facts(**criteria):
    roll = RollCall()
    for node in range(2):
        parser = roll.parser(f"job-{node}")
        parser.feed(workload_log(node, 2, 2).encode())
        parser.close()
    spec = JobSpec("job", 2, 2, accelerator="cpu")
    return RunView(Observed(roll, Layout(2, 2), JobStatus(JobState.SUCCEEDED), spec), Criteria(**criteria))


def test_the_predicate_names_each_figure_worse_than_the_baseline_and_nothing_within_it_or_without_one():
    high = baselines({"throughput_total": 240.0, "throughput_median": 60.0, "epoch_time_mean": 0.375})
    found = list(regressions_check(baseline_facts(baselines=high, max_regression_pct=10)))
    assert [p.kind for p in found] == [REGRESSION] * 3 and all(p.ranks == {} for p in found)
    assert found[0].message.startswith(
        "total throughput regressed: 200.00 samples/s against a baseline of 240.00"
    )
    assert [p.detail.measure.name for p in found] == [
        "total throughput",
        "per-rank median throughput",
        "mean epoch time",
    ]
    assert list(regressions_check(baseline_facts(baselines=high, max_regression_pct=25))) == []
    assert list(regressions_check(baseline_facts())) == []  # no baselines: no gate
    elsewhere = baselines({"throughput_total": 240.0}, key=KEY.replace("nodes=2", "nodes=3"))
    assert list(regressions_check(baseline_facts(baselines=elsewhere, max_regression_pct=10))) == []
