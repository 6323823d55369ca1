"""Baselines: their key and file, then the regression gate and stragglers through the plugin, end to end (scripted backend)."""

import json
import math

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.evidence.baseline import BaselineError, Baselines, ConfigKey, Entry
from rollcall.gate import GateReport, write_baseline
from rollcall.jobspec import JobSpec
from rollcall.judge import assess
from rollcall.ranklog import RollCall
from rollcall.verdict import Figures, Layout
from tests.unit.helpers import judged, node_log
from tests.unit.scripted import SCRIPTED_CONFTEST

pytest_plugins = ["pytester"]

WORKLOAD = '"model":"tiny","seq_len":64,"batch_size":8,'
KEY = "accelerator=cpu,instance_type=-,nodes=2,procs_per_node=2,model=tiny,seq_len=64"


def workload_log(node, nodes, procs_per_node, skip=None, tp=None):
    """A pod's log whose throughput events carry the workload's model, sequence length and batch size."""
    text = node_log(node, nodes, procs_per_node, skip=skip, tp=tp)
    return text.replace('"samples_per_sec":', WORKLOAD + '"samples_per_sec":')


def attempt_of(nodes=2, ppn=2, tp=None, skip=None, state=JobState.SUCCEEDED, **criteria):
    roll = RollCall()
    for node in range(nodes):
        parser = roll.parser(f"job-{node}")
        parser.feed(workload_log(node, nodes, ppn, skip=skip, tp=tp).encode())
        parser.close()
    spec = JobSpec("job", nodes, ppn, accelerator="cpu")
    return judged(roll, spec, JobStatus(state), "artifacts/x", 1.0, **criteria)


def baselines(figures, key=KEY):
    entry = {**ConfigKey.from_fields(_fields(key)).as_dict(), **figures}
    return Baselines.from_dict({"version": 1, "entries": {key: entry}})


def _fields(key):
    pairs = dict(item.split("=", 1) for item in key.split(","))
    return {k: int(v) if k in ("nodes", "procs_per_node", "seq_len") else v for k, v in pairs.items()}


# -- keys and files ----------------------------------------------------------------------------


def test_the_key_is_the_configuration_and_reads_the_workload_from_the_ranks():
    verdict = attempt_of().verdict
    assert verdict.workload == {"model": "tiny", "seq_len": 64, "batch_size": 8}
    key = ConfigKey.of(JobSpec("j", 2, 2, accelerator="cpu"), verdict.workload)
    assert str(key) == KEY
    spec = JobSpec("j", 4, 8, accelerator="nvidia", instance_type="p5.48xlarge")
    assert str(ConfigKey.of(spec, {})) == (
        "accelerator=nvidia,instance_type=p5.48xlarge,nodes=4,procs_per_node=8,model=?,seq_len=?"
    )


def test_ranks_that_disagree_on_the_model_give_no_model():
    roll = RollCall()
    for node, model in ((0, "tiny"), (1, "base")):
        p = roll.parser(f"pod-{node}")
        p.feed(workload_log(node, 2, 1).replace('"tiny"', f'"{model}"').encode())
        p.close()
    assert assess(roll, Layout(2, 1)).workload == {"seq_len": 64, "batch_size": 8}


def test_a_baseline_file_round_trips_and_merges_by_key(tmp_path):
    path = tmp_path / "baseline.json"
    write_baseline(path, [GateReport.of("t::a", attempt_of())])
    doc = json.loads(path.read_text())
    assert list(doc["entries"]) == [KEY]
    entry = doc["entries"][KEY]
    assert entry["throughput_total"] == 200.0 and entry["throughput_median"] == 50.0
    assert math.isclose(entry["epoch_time_mean"], 0.45)
    assert entry["model"] == "tiny" and entry["batch_size"] == 8 and entry["test_id"] == "t::a"

    # another configuration is added; the same one replaced
    lines = write_baseline(
        path,
        [
            GateReport.of("t::b", attempt_of(nodes=1, ppn=4)),
            GateReport.of("t::a", attempt_of(tp={0: 45.0, 1: 45.0, 2: 45.0, 3: 45.0})),
        ],
    )
    assert len(lines) == 2 and all("recorded" in line for line in lines)
    loaded = Baselines.load(path)
    assert len(loaded.entries) == 2
    assert loaded.entries[ConfigKey.from_fields(_fields(KEY))].figures.throughput_total == 180.0


def test_failed_runs_are_not_recorded(tmp_path):
    path = tmp_path / "baseline.json"
    lines = write_baseline(path, [GateReport.of("t::a", attempt_of(skip={3: ("complete",)}))])
    assert lines == [f"baseline {path}: not recorded from t::a: its run failed"]
    assert not path.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not JSON"),
        ('{"entries": {}}', '"version": 1'),
        ('{"version": 1, "entries": []}', "keyed by configuration"),
        ('{"version": 1, "entries": {"x": {"accelerator": "cpu"}}}', "entry 'x': field 'instance_type'"),
        (
            json.dumps({"version": 1, "entries": {"wrong": {**_fields(KEY)}}}),
            f"entry 'wrong' holds the fields of {KEY}",
        ),
        (
            json.dumps({"version": 1, "entries": {KEY: {**_fields(KEY), "throughput_total": "fast"}}}),
            "'throughput_total' is 'fast'",
        ),
    ],
)
def test_a_malformed_baseline_file_is_named(tmp_path, text, message):
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(BaselineError, match=message.replace("(", r"\(").replace("[", r"\[")):
        Baselines.load(path)


# -- the plugin, end to end with a scripted backend ----------------------------------------------


ROLL_CALL = """
def test_roll_call(rollcall):
    r = rollcall()
    assert r.result.passed, r.result.message()
"""


@pytest.fixture
def scripted(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile(test_roll=ROLL_CALL)
    return pytester


def run(pytester, *args):
    return pytester.runpytest("--nodes", "2", "-p", "no:cacheprovider", *args)


def high_baseline(path):
    figures = {"throughput_total": 240.0, "throughput_median": 60.0, "epoch_time_mean": 0.375}
    path.write_text(json.dumps(baselines(figures).as_dict()))
    return path


def test_a_baseline_20_percent_above_fails_and_write_baseline_makes_the_same_run_pass(scripted):
    base = high_baseline(scripted.path / "baseline.json")

    failed = run(scripted, "--baseline", str(base), "--max-regression", "10")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(
        [
            f"rollcall: regression gate failed for test_roll.py::test_roll_call against {KEY}",
            "*total throughput regressed: 200.00 samples/s against a baseline of 240.00 samples/s "
            "(ratio 0.833, 16.7% below it; --max-regression 10%)",
            "*per-rank median throughput regressed: 50.00 samples/s against a baseline of 60.00*",
            "*mean epoch time regressed: 0.4500 s against a baseline of 0.3750 s (ratio 1.200*",
        ]
    )
    gate = json.loads((scripted.path / "artifacts" / "results.json").read_text())["tests"][0]["release_gate"]
    assert gate["gate"] == "failed" and gate["key"] == KEY
    assert [r["measure"] for r in gate["regressions"]] == [
        "total throughput",
        "per-rank median throughput",
        "mean epoch time",
    ]

    # the release manager accepts the new normal: the run still fails against the old baseline, but is recorded
    accepted = run(scripted, "--baseline", str(base), "--write-baseline", str(base))
    accepted.assert_outcomes(failed=1)
    accepted.stdout.fnmatch_lines([f"baseline {base}: recorded {KEY} from test_roll.py::test_roll_call"])
    assert json.loads(base.read_text())["entries"][KEY]["throughput_total"] == 200.0

    passed = run(scripted, "--baseline", str(base), "--max-regression", "10")
    passed.assert_outcomes(passed=1)
    passed.stdout.fnmatch_lines(
        [f"rollcall: regression gate passed for test_roll.py::test_roll_call against {KEY}"]
    )


def test_a_missing_entry_skips_the_gate_not_the_test_and_prints_the_key(scripted):
    base = scripted.path / "other.json"
    base.write_text(json.dumps({"version": 1, "entries": {}}))
    res = run(scripted, "--baseline", str(base))
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines([f"rollcall: no baseline for {KEY} in {base}: regression gate skipped*"])


def test_a_straggler_fails_the_test_and_is_named(scripted):
    scripted.makepyfile(
        test_roll="""
from conftest import PLAN
def test_straggler(rollcall):
    PLAN.append({"tp": {1: 30.0}})
    r = rollcall()
    assert r.result.passed, r.result.message()
"""
    )
    res = run(scripted, "--junitxml", "junit.xml")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        [
            "*1 straggler(s) below 0.8 x the median throughput of 50.00 samples/s (--straggler-ratio): "
            "rank 1 (node 0) at 30.00 samples/s, 0.60 of the median",
        ]
    )
    ranks = (scripted.path / "artifacts" / "ranks.junit.xml").read_text()
    assert "straggler: 0.60 of the median throughput" in ranks
    assert 'name="stragglers" value="1"' in (scripted.path / "junit.xml").read_text()

    off = run(scripted, "--straggler-ratio", "0")
    off.assert_outcomes(passed=1)


def test_write_baseline_skips_failed_runs(scripted):
    scripted.makepyfile(
        test_roll="""
from conftest import PLAN
def test_broken(rollcall):
    PLAN.append({"skip": {3: ("complete",)}})
    rollcall()
"""
    )
    out = scripted.path / "new.json"
    res = run(scripted, "--write-baseline", str(out))
    res.stdout.fnmatch_lines([f"baseline {out}: not recorded from test_roll.py::test_broken: its run failed"])
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--baseline", "missing.json"), "*--baseline: cannot read baseline file missing.json*"),
        (("--max-regression", "150"), "*invalid --max-regression value '150'*must be >= 0 and < 100*"),
        (("--straggler-ratio", "1.5"), "*invalid --straggler-ratio value '1.5'*0 turns the check off*"),
        (
            ("--min-busbw", "0"),
            "*invalid --min-busbw value '0'*must be a finite number > 0*--min-busbw GBPS*",
        ),
        (("--busbw-ratio", "2"), "*invalid --busbw-ratio value '2'*0 turns the check off*"),
    ],
)
def test_bad_gate_options_are_usage_errors(pytester, args, message):
    res = pytester.runpytest(*args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])


def test_baseline_entries_are_ordered_and_carry_their_source():
    entry = Entry(ConfigKey.from_fields(_fields(KEY)), Figures(1.0, 1.0, 1.0), {"test_id": "t"})
    doc = Baselines({entry.key: entry}).as_dict()
    assert doc["entries"][KEY]["test_id"] == "t" and doc["version"] == 1
