"""A crash's reports agree on each rank: the rank that raised is ``raised``, one that never reported ``missing``.

One judged crash (rank 5 raises, the others echo it, rank 2 never says a word) is written as ``results.json``,
the metrics' text, ``ranks.junit.xml`` and ``report.html``; each is parsed back and every rank's state and
owner compared across them.
"""

import json
import re
import xml.etree.ElementTree as ET

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.jobspec import JobSpec
from rollcall.metrics.prometheus import write_textfile
from rollcall.page.report import write_report
from rollcall.runner import Attempt, RunResult
from tests.unit.checks.test_errors import GLOO, T0, failing_logs, judged_logs
from tests.unit.test_reports_agree import Cells

SILENT_RANK = 2


def crash_record(tmp_path):
    """Rank 5 raises first, the others echo it, rank 2 never says anything at all."""
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(8) if r != SILENT_RANK}
    errors[5] = ("RuntimeError: injected failure on rank 5", T0 + 1)
    logs = [
        "".join(line + "\n" for line in text.splitlines() if not line.startswith(f"[{SILENT_RANK}]:"))
        for text in failing_logs(2, 4, errors)
    ]
    status = JobStatus(JobState.FAILED, "node 1 (torchrun agent) exited with code 1")
    verdict = judged_logs(logs, 2, 4, status)
    attempt = Attempt(JobSpec("crash", 2, 4), status, verdict, tmp_path / "crash", 1.0)
    return reports.TestRecord("tests/e2e/t.py::test_crash", RunResult("local", [attempt]), "cpu")


def every_report(tmp_path):
    """Each report's view of each rank: report name -> rank -> (state, owner)."""
    record = crash_record(tmp_path)
    reports.write_results(tmp_path / "results.json", [record], {})
    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    write_report(tmp_path / "report.html", [record], {})
    write_textfile(tmp_path / "metrics.prom", [record], finished=1_700_000_000.0)

    (test,) = json.loads((tmp_path / "results.json").read_text())["tests"]
    results = {int(r): (s, test["rank_causes"][r]["owner"]) for r, s in test["rank_states"].items()}

    metrics = {}
    for line in (tmp_path / "metrics.prom").read_text().splitlines():
        if line.startswith("rollcall_rank_state{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            metrics[int(labels["rank"])] = (labels["state"], labels["owner"])

    junit = {}
    for case in ET.parse(tmp_path / "ranks.junit.xml").iter("testcase"):
        said = dict(re.findall(r"(\w+)=(\S*)", (case.findtext("system-out") or "").splitlines()[0]))
        junit[int(case.get("name").split()[1])] = (case.get("status"), said["owner"])
        assert said["state"] == case.get("status")

    cells = Cells()
    cells.feed((tmp_path / "report.html").read_text())
    page = {r: (a["data-state"], a["data-owner"]) for r, a in cells.cells.items()}
    return {"results.json": results, "metrics": metrics, "ranks.junit.xml": junit, "report.html": page}


def test_the_rank_that_raised_is_raised_and_the_silent_one_missing_in_every_report(tmp_path):
    seen = every_report(tmp_path)
    for name, ranks in seen.items():
        assert sorted(ranks) == list(range(8)), name
        assert ranks[5] == ("raised", "workload"), (name, ranks[5])  # the injected failure: the workload's
        assert ranks[SILENT_RANK][0] == "missing", (name, ranks[SILENT_RANK])  # said nothing: not raised
        echoes = {r: s for r, (s, _) in ranks.items() if r not in (5, SILENT_RANK)}
        assert set(echoes.values()) == {"raised"}, (name, echoes)  # each echo raised its own error
    first = seen["results.json"]
    assert all(ranks == first for ranks in seen.values()), seen
