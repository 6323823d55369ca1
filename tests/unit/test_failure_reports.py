"""The root cause and the folded errors in results.json, the per-rank junit and report.html."""

import json
import xml.etree.ElementTree as ET

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.layout import LAYOUT
from rollcall.checks.stragglers import STRAGGLER
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.page.report import render
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, RunResult
from rollcall.verdict import Layout, Observed
from rollcall_workload.contract import encode_event
from tests.unit.checks.test_errors import GLOO, T0, judged
from tests.unit.helpers import node_log
from tests.unit.test_htmlreport import Elements


def failed_record(tmp_path):
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(8)}
    errors[5] = ("RuntimeError: injected failure on rank 5", T0 + 1)
    status = JobStatus(JobState.FAILED, "node 1 (torchrun agent) exited with code 1")
    verdict = judged(2, 4, errors, status)
    attempt = Attempt(JobSpec("crash", 2, 4), status, verdict, tmp_path / "crash", 1.0)
    return reports.TestRecord("tests/e2e/t.py::test_crash", RunResult("local", [attempt]), "cpu")


def test_results_json_carries_the_root_cause_and_the_grouped_errors(tmp_path):
    path = tmp_path / "results.json"
    reports.write_results(path, [failed_record(tmp_path)], {})
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 2  # 2: kernels, and the start's versions judged
    (test,) = doc["tests"]
    root = test["root_cause"]
    assert root["first"]["rank"] == 5 and root["first"]["node"] == 1 and root["first"]["pod"] == "job-1-abcde"
    assert (
        root["first"]["message"] == "RuntimeError: injected failure on rank 5"
        and root["first"]["time"] == T0 + 1
    )
    assert root["summary"].startswith("first failure: rank 5 (node 1)") and root["undecided"] is None
    (echoes,) = test["errors"]
    assert echoes["echo"] and echoes["ranks"] == [0, 1, 2, 3, 4, 6, 7] and echoes["nodes"] == [0, 1]
    assert [f["message"] for f in echoes["failures"]][:2] == [
        GLOO.format(port=40000),
        GLOO.format(port=40001),
    ]
    assert test["problems"][0] == root["summary"] and test["findings"][0]["kind"] == "root_cause"


def test_each_ranks_junit_case_carries_its_own_message(tmp_path):
    path = tmp_path / "ranks.junit.xml"
    reports.write_rank_junit(path, [failed_record(tmp_path)])
    cases = {c.get("name"): c for c in ET.parse(path).iter("testcase")}
    crashed = cases["rank 5 (node 1)"].find("failure")  # the rank at fault fails, its message its own
    assert crashed.get("message").startswith("error: RuntimeError: injected failure on rank 5")
    assert crashed.text.startswith("error: RuntimeError")  # the body is the message, no runner's path
    echo = cases["rank 6 (node 1)"]  # it only echoed rank 5's failure: skipped beside it, not a failure
    assert echo.find("failure") is None
    assert echo.find("skipped").get("message").startswith("not at fault: error: " + GLOO.format(port=40006))
    failed = [n for n, c in cases.items() if c.find("failure") is not None]
    assert failed == ["rank 5 (node 1)"], failed  # one crash: one failed case


def test_the_page_puts_the_root_cause_on_top_and_draws_no_chart_when_nothing_was_measured(tmp_path):
    text = render([failed_record(tmp_path)], {"backend": "local"}, tmp_path)
    top = text.index('<p class="root-cause">')
    assert top < text.index("<table class=figures>") < text.index('<pre class="failure">')
    assert (
        "first failure: rank 5 (node 1) reported an error: RuntimeError: injected failure on rank 5" in text
    )
    errors = [a for tag, a in Elements(text).tags if tag == "ul" and a.get("class") == "errors"]
    assert len(errors) == 1 and "[7 echoes of another rank&#39;s failure" in text
    # no bar chart; the timeline (its errors' times) is drawn on a failed run too
    assert '<svg class="bars' not in text and "nothing to chart" in text and "1e-09" not in text
    assert '<svg class="timeline"' in text


def test_the_page_and_the_junit_read_the_kind_of_a_problem_never_its_text(tmp_path):
    from rollcall.judge import CHECKS, judge
    from rollcall.verdict import Problem
    from tests.unit.helpers import two_by_two

    def misleading(facts):
        yield Problem(STRAGGLER, "no throughput, error: invalid", {0: "no throughput; error: x; invalid y"})
        yield Problem(LAYOUT, "straggler", {1: "straggler: 0.10 of the median throughput"})

    verdict = judge(Observed(two_by_two(), Layout(2, 2)), checks=(*CHECKS, misleading))
    status = JobStatus(JobState.SUCCEEDED)
    attempt = Attempt(JobSpec("kinds", 2, 2), status, verdict, tmp_path / "kinds", 1.0)
    record = reports.TestRecord("t.py::test_kinds", RunResult("local", [attempt]), "cpu")
    states = {r: s for r, _, s, _ in Elements(render([record], {}, tmp_path)).ranks()}
    assert states == {0: "straggler", 1: "slow", 2: "ok", 3: "ok"}
    path = tmp_path / "ranks.junit.xml"
    reports.write_rank_junit(path, [record])
    failed = [c.get("name") for c in ET.parse(path).iter("testcase") if c.find("failure") is not None]
    assert failed == ["rank 0 (node 0)", "rank 1 (node 0)"]


def test_one_crash_among_2048_ranks_is_one_failed_junit_case(tmp_path):
    """64 nodes x 32 ranks: rank 1000 reports an error after its first epoch, every other rank then misses
    its throughput and complete (waiting on it). ranks.junit.xml fails one case, the crashed rank's, and
    skips the 2,047 beside it, each saying why it is not at fault."""
    nodes, ppn = 64, 32
    skip = {r: ("throughput", "complete") for r in range(nodes * ppn)}
    roll = RollCall()
    for node in range(nodes):
        parser = roll.parser(f"pod-{node}")
        parser.feed(node_log(node, nodes, ppn, skip=skip).encode())
        if node == 31:
            failure = "RuntimeError: injected failure on rank 1000"
            parser.feed(b"[1000]:" + encode_event("error", 1000, nodes * ppn, message=failure))
        parser.close()
    status = JobStatus(JobState.FAILED, "pod pod-31 failed")
    verdict = judge(Observed(roll, Layout(nodes, ppn), status))
    attempt = Attempt(JobSpec("crash", nodes, ppn), status, verdict, tmp_path, 1.0)
    record = reports.TestRecord(
        "tests/e2e/test_rollcall.py::test_roll", RunResult("kubernetes", [attempt]), "cpu"
    )
    path = tmp_path / "ranks.junit.xml"
    reports.write_rank_junit(path, [record])
    assert junit_shape_errors(ET.parse(path).getroot()) == []
    suite = ET.parse(path).getroot().find("testsuite")
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    skipped = [c for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert failed == ["rank 1000 (node 31)"], failed[:5]
    assert len(skipped) == nodes * ppn - 1 and suite.get("failures") == "1"
    assert all(c.find("skipped").get("message").startswith("not at fault: ") for c in skipped)
    classes = {c.get("classname") for c in suite.iter("testcase")}
    assert "rollcall.tests.e2e.test_rollcall.test_roll.node-31" in classes


def junit_shape_errors(root: ET.Element) -> list[str]:
    """Where ``ranks.junit.xml`` breaks the shape Jenkins' and GitLab's JUnit readers take (the junit-10
    schema's elements and attributes): testsuites > testsuite (name, tests, failures, errors, skipped
    that count its cases) > testcase (name, classname, a non-negative time where it has one) holding at most one of failure,
    error or skipped, each with a message."""
    found = []
    suites = [root] if root.tag == "testsuite" else list(root)
    if root.tag not in ("testsuites", "testsuite"):
        found.append(f"root is {root.tag}")
    for suite in suites:
        cases = suite.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(c.find("failure") is not None for c in cases),
            "errors": sum(c.find("error") is not None for c in cases),
            "skipped": sum(c.find("skipped") is not None for c in cases),
        }
        found += [
            f"{suite.get('name')}: {k}={suite.get(k)} for {n}"
            for k, n in counts.items()
            if suite.get(k) != str(n)
        ]
        for case in cases:
            if not case.get("name") or not case.get("classname"):
                found.append(f"a case without name or classname: {case.attrib}")
            if case.get("time") is not None and float(case.get("time", "0")) < 0:  # optional in the schema
                found.append(f"{case.get('name')}: time {case.get('time')}")
            outcomes = [e for e in case if e.tag in ("failure", "error", "skipped")]
            if len(outcomes) > 1 or any(e.get("message") is None for e in outcomes):
                found.append(f"{case.get('name')}: {[e.tag for e in outcomes]}")
            if "None" in (case.findtext("system-out") or ""):
                found.append(f"{case.get('name')}: None in its output")
    return found


def test_the_rank_junit_has_the_shape_ci_dashboards_read(tmp_path):
    path = tmp_path / "ranks.junit.xml"
    reports.write_rank_junit(path, [failed_record(tmp_path)])
    assert junit_shape_errors(ET.parse(path).getroot()) == []
    broken = ET.fromstring(
        '<testsuites><testsuite name="t" tests="2" failures="0"><testcase name="a"/></testsuite></testsuites>'
    )
    assert (
        len(junit_shape_errors(broken)) >= 2
    )  # the checker itself catches a wrong count and a missing class
