"""Every report agrees with the verdict: no report says "ok" of a rank any problem names, whatever its kind.

Verdicts are generated (random layouts, kinds, ranks and problems) and judged by the one judge; then
``ranks.junit.xml``, ``results.json`` and ``report.html`` are written and parsed back.
"""

import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from html.parser import HTMLParser

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.compute_stragglers import COMPUTE_STRAGGLER
from rollcall.isolation.probe import ISOLATED
from rollcall.jobspec import JobSpec
from rollcall.judge import KINDS, judge
from rollcall.page import report as htmlreport
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, RunResult
from rollcall.verdict import Kind, Layout, Observed, Problem, RankState


class Cells(HTMLParser):
    """The rank cells of report.html: rank -> its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[int, dict[str, str]] = {}

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag in ("a", "span") and "data-rank" in a and "data-state" in a:
            self.cells[int(a["data-rank"])] = a


def problem(kind: Kind, ranks: set[int], n: int) -> Problem:
    """A problem of ``kind`` naming ``ranks`` (a compute straggler's detail is its stragglers: none here)."""
    detail = () if kind is COMPUTE_STRAGGLER else None
    return Problem(kind, f"{kind.value} problem {n}", dict.fromkeys(ranks, f"note {n}"), detail)


@st.composite
def verdicts(draw):
    """A layout and problems of random kinds, each naming random ranks of the world (or none)."""
    layout = Layout(draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    world = range(layout.world_size)
    problems = draw(
        st.lists(
            st.builds(
                problem,
                st.sampled_from([*KINDS, ISOLATED]),
                st.sets(st.sampled_from(list(world))),
                st.integers(0, 99),
            ),
            max_size=5,
        )
    )
    observed = Observed(RollCall(), layout, JobStatus(JobState.FAILED, "generated"))
    return judge(observed, checks=[lambda facts: problems])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verdict=verdicts())
def test_no_report_says_ok_of_a_rank_the_verdict_names(tmp_path, verdict):
    layout = verdict.layout
    spec = JobSpec("generated", layout.nodes, layout.procs_per_node)
    attempt = Attempt(spec, JobStatus(JobState.FAILED, "generated"), verdict, tmp_path, 1.0)
    record = reports.TestRecord("t.py::test_generated", RunResult("local", [attempt]), "cpu")
    named: dict[int, set[str]] = {}
    for p in verdict.findings:
        for r in p.ranks:
            named.setdefault(r, set()).add(p.kind.value)

    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    suite = ET.parse(tmp_path / "ranks.junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name", ""): c for c in suite.iter("testcase")}
    failing = {
        int(n.split()[1]) for n, c in cases.items() if n.startswith("rank ") and c.find("failure") is not None
    }
    skipped = {
        int(n.split()[1]) for n, c in cases.items() if n.startswith("rank ") and c.find("skipped") is not None
    }
    # the ranks at fault fail; the ranks that only waited or echoed are skipped beside them
    at_fault = {r for r, res in verdict.ranks.items() if res.at_fault}
    first = verdict.first_failure
    expected = at_fault or (set(first.ranks) if first is not None else set())
    assert failing == expected and skipped == set(named) - expected
    job_case = 1 if first is not None and not expected else 0  # a job-level fault: a "run" case fails
    assert suite.get("failures") == str(len(expected) + job_case)
    assert all(c.get("classname", "").startswith("rollcall.t.test_generated.") for c in cases.values())

    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert {int(r) for r in test["failed_ranks"]} == set(named)
    assert test["verdict"] == ("failed" if verdict.findings else "passed")
    missing = {r for r, res in verdict.ranks.items() if not res.state.answered}  # missing, hung, waiting...
    assert test["ranks_answered"] == layout.world_size - len(missing)
    assert test["rank_states"] == {str(r): res.state.value for r, res in verdict.ranks.items() if r in named}
    for state in ("hung", "waiting"):
        said = {r for r, v in test["rank_states"].items() if v == state}
        assert test["ranks_stalled"].get(state, 0) == len(said)
    for r, kinds in named.items():
        listed = {f["kind"] for f in test["findings"] if r in f["ranks"]}
        assert listed == kinds

    page = Cells()
    page.feed(htmlreport.render([record], {"backend": "local"}, tmp_path))
    assert set(page.cells) == set(range(layout.world_size))
    for r, cell in page.cells.items():
        if r in named:
            assert cell["data-state"] == test["rank_states"][str(r)] != RankState.OK.value
            assert set(cell["data-kinds"].split()) == named[r]
            assert "named" in cell["class"].split()
        else:
            assert (cell["data-state"], cell["data-kinds"]) == (RankState.OK.value, "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verdict=verdicts())
def test_every_failed_run_has_one_first_failure_that_every_report_leads_with(tmp_path, verdict):
    """results.json's ``root_cause``, the page's first box and the per-rank JUnit's ``first_failure`` say the
    verdict's first failure, whatever its class; the terminal says the same object's summary (the plugin)."""
    layout = verdict.layout
    spec = JobSpec("generated", layout.nodes, layout.procs_per_node)
    attempt = Attempt(spec, JobStatus(JobState.FAILED, "generated"), verdict, tmp_path, 1.0)
    record = reports.TestRecord("t.py::test_generated", RunResult("local", [attempt]), "cpu")
    first = verdict.first_failure
    assert (first is None) == (not verdict.findings)
    if first is None:
        return
    causes = [p for p in verdict.findings if not p.kind.follows]
    assert first.kind == (causes[0].kind.value if causes else "undetermined")
    assert first.summary.startswith("first failure: " if causes else "first failure undetermined: ")

    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert test["root_cause"]["summary"] == first.summary and test["root_cause"]["kind"] == first.kind
    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    suite = ET.parse(tmp_path / "ranks.junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["first_failure"] == first.summary
    html = htmlreport.render([record], {"backend": "local"}, tmp_path)
    box = re.search(r'<p class="root-cause">(.*?)</p>', html, re.S)
    assert box is not None and unescape(box[1]) == first.summary


def test_a_hang_has_a_first_failure_naming_the_hung_rank_in_every_report(tmp_path):
    """Rank 1 sleeps after its first epoch, the others wait in the next barrier: no rank said an error, so no
    analysis, yet results.json, the page and the per-rank JUnit lead with the hung rank, not the waiting."""
    from tests.unit.test_flight import SLEEPS, _world

    verdict = _world(SLEEPS, {"0": [[11, "all_reduce", True], [12, "all_reduce", True]]})
    assert verdict.root_cause is None  # no rank's error to analyse
    first = verdict.first_failure
    assert first is not None and first.kind == "hung" and first.ranks == (1,), verdict.message()
    assert first.summary.startswith("first failure: rank 1 (node 0, pod node-0) hung in a sleep")
    spec = JobSpec("hang", 2, 2)
    attempt = Attempt(spec, JobStatus(JobState.STOPPED, "rank(s) 1 hung"), verdict, tmp_path, 1.0)
    record = reports.TestRecord("t.py::test_hang", RunResult("local", [attempt]), "cpu")
    reports.write_results(tmp_path / "results.json", [record], {})
    root = json.loads((tmp_path / "results.json").read_text())["tests"][0]["root_cause"]
    assert (root["summary"], root["kind"], root["ranks"], root["owner"]) == (
        first.summary,
        "hung",
        [1],
        "undetermined",
    )
    html = htmlreport.render([record], {"backend": "local"}, tmp_path)
    assert unescape(re.search(r'<p class="root-cause">(.*?)</p>', html, re.S)[1]) == first.summary
