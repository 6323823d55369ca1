"""Prometheus metrics of a session's runs: the textfile node_exporter reads, and a push that fails."""

import socket
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollcall.backends import JobState, JobStatus
from rollcall.gate import GateReport
from rollcall.jobspec import JobSpec
from rollcall.metrics.prometheus import CONFIG, export, push, write_textfile
from rollcall.options import OptionError, resolve
from rollcall.ranklog import RollCall
from rollcall.reports import TestRecord as Record
from rollcall.runner import RunResult
from tests.unit.helpers import judged
from tests.unit.test_perf import perf_log


def record_of(nodes=2, ppn=2, skip_node=None, test_id="t.py::test_roll"):
    roll = RollCall()
    for node in range(nodes):
        if node == skip_node:
            continue
        parser = roll.parser(f"job-{node}")
        parser.feed(perf_log(node, nodes, ppn, compute={1: 12.5}).encode())
        parser.close()
    spec = JobSpec("job", nodes, ppn, accelerator="cpu")
    state = JobState.SUCCEEDED if skip_node is None else JobState.FAILED
    attempt = replace(judged(roll, spec, JobStatus(state), "artifacts/x", 3.5), first_rank_s=1.25)
    record = Record(test_id, RunResult("local", [attempt]), "cpu")
    record.gate = GateReport.of(test_id, attempt)
    return record


def samples(text, name):
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


def test_the_textfile_has_one_throughput_sample_per_rank_and_the_run_in_base_units(tmp_path):
    out = tmp_path / "textfile" / "rollcall.prom"
    write_textfile(out, [record_of(nodes=2, ppn=2)], finished=1_700_000_000.0)
    text = out.read_text()
    tp = samples(text, "rollcall_rank_throughput_samples_per_second")
    assert sorted(int(s.labels["rank"]) for s in tp) == [0, 1, 2, 3]
    assert {s.labels["node"] for s in tp} == {"0", "1"}
    assert all(s.value == 50.0 for s in tp)
    assert {s.labels["config"] for s in tp} == {
        "accelerator=cpu,instance_type=-,nodes=2,procs_per_node=2,model=?,seq_len=?"
    }
    compute = {
        (s.labels["rank"], s.labels["quantile"]): s.value
        for s in samples(text, "rollcall_rank_step_compute_seconds")
    }
    assert compute[("1", "0.5")] == 0.0125  # milliseconds in the log, seconds in the metric
    outcome = {s.labels["outcome"]: s.value for s in samples(text, "rollcall_run_outcome")}
    assert outcome["passed"] == 1.0 and sum(outcome.values()) == 1.0
    assert samples(text, "rollcall_run_ranks_answered")[0].value == 4.0
    assert samples(text, "rollcall_run_duration_seconds")[0].value == 3.5
    assert samples(text, "rollcall_run_time_to_first_rank_seconds")[0].value == 1.25
    assert samples(text, "rollcall_run_retries_total")[0].value == 0.0
    busbw = samples(text, "rollcall_node_allreduce_busbw_bytes_per_second")
    assert sorted(s.labels["node"] for s in busbw) == ["0", "1"]
    assert busbw[0].value == 1e9  # 1 GB/s in the log
    assert not list(tmp_path.glob("textfile/*.prom.*")), "the temporary file of the atomic write is gone"


def test_a_failed_run_says_so_per_outcome_and_per_missing_rank(tmp_path):
    out = tmp_path / "rollcall.prom"
    write_textfile(out, [record_of(nodes=2, ppn=1, skip_node=1)], finished=1.0)
    text = out.read_text()
    outcome = {s.labels["outcome"]: s.value for s in samples(text, "rollcall_run_outcome")}
    assert outcome["failed"] == 1.0 and outcome["passed"] == 0.0
    assert [int(s.labels["rank"]) for s in samples(text, "rollcall_rank_throughput_samples_per_second")] == [
        0
    ]
    answered = {s.labels["rank"]: s.value for s in samples(text, "rollcall_rank_answered")}
    assert answered == {"0": 1.0, "1": 0.0}
    assert samples(text, "rollcall_run_ranks_expected")[0].value == 2.0


def test_a_push_to_a_gateway_that_is_down_is_a_warning_not_an_error(tmp_path):
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        pushed = push(url, [record_of()], 1.0, job="rollcall", cluster="local", timeout_s=5)
        lines = export(
            [record_of()], 1.0, metrics_file=tmp_path / "m.prom", pushgateway=url, job="j", cluster="c"
        )
    assert len(pushed) == 1 and pushed[0].error is not None
    assert pushed[0].grouping["config"].startswith("accelerator=cpu,")
    assert lines[0] == f"metrics: {tmp_path / 'm.prom'}"
    assert lines[1].startswith(
        f"warning: metrics not pushed to {url} (job=j,cluster=c,config=accelerator=cpu"
    )
    assert (tmp_path / "m.prom").exists()


@pytest.mark.parametrize(
    ("cli", "says"),
    [
        ({"metrics_file": "out/rollcall.txt"}, "invalid --metrics-file value 'out/rollcall.txt'"),
        ({"pushgateway": "pushgateway:9091"}, "invalid --pushgateway value 'pushgateway:9091'"),
        ({"pushgateway": "http://127.0.0.1:port"}, "invalid --pushgateway value"),
        ({"pushgateway_job": "a b"}, "invalid --pushgateway-job value 'a b'"),
    ],
)
def test_a_bad_metrics_option_names_itself_and_the_fix(cli, says):
    with pytest.raises(OptionError) as exc:
        resolve(cli, environ={})
    assert says in str(exc.value) and "use --" in str(exc.value)


def _record_of_verdict(verdict, test_id):
    spec = JobSpec("job", verdict.layout.nodes, verdict.layout.procs_per_node, accelerator="cpu")
    attempt = judged(RollCall(), spec, JobStatus(JobState.FAILED), "artifacts/x", 3.5)
    return Record(test_id, RunResult("local", [replace(attempt, verdict=verdict)]), "cpu")


def test_a_crash_and_a_hang_differ_in_state_kind_and_owner_and_every_node_series_names_its_node(tmp_path):
    from tests.unit.checks.test_errors import GLOO, T0
    from tests.unit.checks.test_errors import judged as crashed_run
    from tests.unit.test_flight import SLEEPS, _world

    hang = _world(SLEEPS, {"0": [[11, "all_reduce", True], [12, "all_reduce", True]]})
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(4)}
    errors[1] = ("RuntimeError: injected failure on rank 1", T0 + 1)
    crash = crashed_run(2, 2, errors)
    out = tmp_path / "m.prom"
    write_textfile(
        out, [_record_of_verdict(hang, "t.py::hang"), _record_of_verdict(crash, "t.py::crash")], 1.0
    )
    text = out.read_text()
    states = {
        (s.labels["test"], s.labels["rank"]): (s.labels["state"], s.labels["kind"], s.labels["owner"])
        for s in samples(text, "rollcall_rank_state")
    }
    assert states[("t.py::hang", "1")] == ("hung", "hung", "undetermined")
    assert states[("t.py::hang", "0")][:2] == ("waiting", "waiting")
    assert states[("t.py::crash", "1")][1] == "root_cause", states  # the rank whose error is the root cause
    assert states[("t.py::crash", "1")][0] != states[("t.py::hang", "1")][0]  # failed or missing, not hung
    nodes = {
        (s.labels["test"], s.labels["node"]): s.labels["state"] for s in samples(text, "rollcall_node_state")
    }
    assert nodes[("t.py::hang", "0")] == "hung"
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "node" in s.labels:  # every per-node and per-rank series carries the node's name label
                assert "Hostname" in s.labels, s
    info = samples(text, "rollcall_run_config_info")
    assert len(info) == 2 and all(set(CONFIG) <= set(s.labels) for s in info)


def test_each_configuration_dimension_is_a_label_of_its_own(tmp_path):
    out = tmp_path / "m.prom"
    write_textfile(out, [record_of()], finished=1.0)
    (info,) = samples(out.read_text(), "rollcall_run_config_info")
    dims = {k: info.labels[k] for k in CONFIG}
    assert dims == {
        "accelerator": "cpu",
        "instance_type": "-",
        "nodes": "2",
        "procs_per_node": "2",
        "model": "?",
        "seq_len": "?",
    }
