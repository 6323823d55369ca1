"""Bytes that are not UTF-8, and control characters, from a rank's log reach every report intact and valid.

A node's log is whatever its processes wrote: a rank's error may carry bytes of another encoding, terminal
colour escapes or a NUL. The verdict keeps what can be read; results.json stays JSON, ranks.junit.xml stays
well-formed XML 1.0 (which forbids most control characters) and the page stays one HTML document.
"""

import json
import xml.etree.ElementTree as ET

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.errors import ERROR, ROOT_CAUSE
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.page import report as page
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, RunResult
from rollcall.verdict import Layout, Observed
from tests.unit.helpers import event, node_log

#: An error message as a rank's Python may hold it: bytes of no encoding kept as lone surrogates (what
#: ``surrogateescape`` decoding leaves), colour escapes, a NUL and a bell, as JSON escapes them.
MESSAGE = "boom \udcff\udcfe caf\xe9, colour: \x1b[31mred\x1b[0m, nul: \x00, bell: \x07"


def test_a_ranks_error_in_bytes_of_any_kind_reaches_every_report(tmp_path):
    good = node_log(0, 1, 2).encode()
    error = event("error", 1, 2, message=MESSAGE).encode()
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed(good + b"junk \xc3\x28 \xff line\n" + error + b"\n")
    parser.close()
    verdict = judge(Observed(roll, Layout(1, 2), JobStatus(JobState.FAILED, "rank 1 failed")))
    assert not verdict.passed
    messages = [p.message for p in verdict.findings]
    assert any("boom" in m and "red" in m for m in messages), messages
    assert any(p.kind in (ROOT_CAUSE, ERROR) and 1 in p.ranks for p in verdict.findings)

    spec = JobSpec("bytes", 1, 2)
    attempt = Attempt(spec, JobStatus(JobState.FAILED, "rank 1 failed"), verdict, tmp_path, 1.0)
    record = reports.TestRecord("t.py::test_bytes", RunResult("local", [attempt]), "cpu")

    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["tests"][0]
    assert test["verdict"] == "failed" and 1 in {int(r) for r in test["failed_ranks"]}

    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    suite = ET.parse(tmp_path / "ranks.junit.xml").getroot().find("testsuite")  # well-formed, or it raises
    assert suite is not None
    failing = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert any(name and name.split()[1] == "1" for name in failing), failing
    text = (tmp_path / "ranks.junit.xml").read_text(encoding="utf-8")
    assert "boom" in text and "\x00" not in text and "\x1b" not in text

    html = page.render([record], {"backend": "local"}, tmp_path)
    html.encode("utf-8")  # one valid document: every character encodable
    assert "boom" in html and "\x00" not in html and "\x1b" not in html
