"""Every report carries the GPUs' events during the run: results.json, ranks.junit.xml, the page, the metrics.

An Xid and a lost GPU are faults nothing here can produce (no GPU on this machine): the node's monitor's
``gpu_event`` lines are written into the node's log as it writes them (see tests/unit/checks/test_gpu_events.py),
and the whole roll call is judged and reported.
"""

from __future__ import annotations

import json
from xml.etree import ElementTree

from prometheus_client.parser import text_string_to_metric_families

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.jobspec import JobSpec
from rollcall.metrics.prometheus import write_textfile
from rollcall.page import report as htmlreport
from rollcall.runner import Attempt, RunResult
from tests.unit.checks.test_gpu_events import ILLEGAL, gpu_line, roll_of
from tests.unit.test_fitness import verdict_of


def record_of(tmp_path):
    events = [
        gpu_line(xid=31, data=31, event_type=8),
        gpu_line(xid=31, data=31, event_type=8, at=1006.0),
        gpu_line("lost", gpu=5, uuid="GPU-5bbb", reason="NVML: GPU is lost", at=1008.0),
    ]
    verdict = verdict_of(roll_of(events, fails=ILLEGAL))
    attempt = Attempt(
        JobSpec("job", 2, 1, accelerator="nvidia"), JobStatus(JobState.FAILED), verdict, tmp_path, 1.0
    )
    return reports.TestRecord("t.py::test_x", RunResult("local", [attempt]), "nvidia")


def test_results_json_carries_each_event_with_its_class_gpu_rank_and_phase(tmp_path):
    reports.write_results(tmp_path / "results.json", [record_of(tmp_path)], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    first, _, lost = test["gpu_events"]
    assert {k: first[k] for k in ("kind", "class", "xid", "xid_name", "node", "gpu", "gpu_uuid", "rank")} == {
        "kind": "xid",
        "class": "program",
        "xid": 31,
        "xid_name": "GPU memory page fault",
        "node": 1,
        "gpu": 1,
        "gpu_uuid": "GPU-1aaa",
        "rank": 1,
    }
    assert (first["phase"], first["time"], first["rule"]) == ("after epoch 1", 1005.0, None)
    assert (lost["class"], lost["rank"], lost["rule"], lost["gpu_serial"]) == (
        "hardware",
        None,
        "gpu_lost",
        "165005",
    )
    assert test["unfit_nodes"] == ["n1"]


def test_the_rank_junit_carries_the_events_on_each_ranks_gpu_and_a_case_for_a_gpu_of_no_rank(tmp_path):
    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record_of(tmp_path)])
    cases = {c.get("name"): c for c in ElementTree.parse(tmp_path / "ranks.junit.xml").iter("testcase")}
    rank1 = cases["rank 1 (node 1)"]
    out = rank1.findtext("system-out") or ""
    assert out.count("gpu event: Xid 31 (GPU memory page fault, program) on node 1 (n1) GPU 1") == 2
    failure = rank1.find("failure")
    assert failure is not None and "the GPU said: Xid 31" in failure.get("message", "")
    assert "gpu event" not in (cases["rank 0 (node 0)"].findtext("system-out") or "")
    gone = cases["node 1 (n1) GPU 5, UUID GPU-5bbb, serial 165005 (no rank)"].find("failure")
    assert gone is not None and "GPU lost (NVML: GPU is lost)" in gone.get("message", "")
    assert "(rule gpu_lost)" in gone.get("message", "")


def test_the_page_has_a_row_per_gpu_with_its_events_during_the_run(tmp_path):
    page = htmlreport.render([record_of(tmp_path)], {"backend": "local"}, tmp_path)
    assert "<h3>GPUs</h3>" in page and "events during the run" in page
    rows = page.split("<table class=gpus>", 1)[1].split("</table>", 1)[0].split("<tr")[2:]
    assert len(rows) == 3  # rank 0's GPU, rank 1's, and GPU 5 of no rank
    assert "GPU-0aaa" in rows[0] and "<td>none</td>" in rows[0]
    assert "Xid 31 (GPU memory page fault, program) at 00:16:45, after epoch 1" in rows[1]
    assert (
        "GPU-5bbb" in rows[2] and "GPU lost (NVML: GPU is lost)" in rows[2] and 'class="regressed"' in rows[2]
    )


def test_pytests_own_junit_properties_name_each_event_with_its_class(tmp_path):
    props = dict(reports.junit_properties(record_of(tmp_path)))
    assert props["gpu_event_0"] == (
        "Xid 31 (GPU memory page fault, program) on node 1 (n1) GPU 1, UUID GPU-1aaa, serial 165001 "
        "(rank 1, after epoch 1) [program]"
    )
    assert props["gpu_event_2"].endswith("[hardware]") and "gpu_event_3" not in props


def test_the_metrics_count_the_events_by_node_gpu_xid_and_class(tmp_path):
    out = tmp_path / "rollcall.prom"
    write_textfile(out, [record_of(tmp_path)], finished=1_700_000_000.0)
    found = {
        (s.labels["node"], s.labels["gpu"], s.labels["kind"], s.labels["xid"], s.labels["class"]): s.value
        for fam in text_string_to_metric_families(out.read_text())
        for s in fam.samples
        if s.name == "rollcall_gpu_events_total"
    }
    assert found == {("1", "1", "xid", "31", "program"): 2.0, ("1", "5", "lost", "", "hardware"): 1.0}
