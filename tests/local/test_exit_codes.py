"""A rank's own exit code: a rank that answers the whole roll call and then exits non-zero is a failed rank.

Real torchrun, gloo and BERT tiny on the CPU, 2 nodes x 2 ranks, kept short (seq-len 32, batch 4, one epoch
of two steps). ``ROLLCALL_EXIT_RANK`` (train.py's fault injection) ends the rank after ``complete``.
"""

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.checks.exited_nonzero import EXITED_NONZERO
from rollcall.jobspec import JobSpec
from rollcall.runner import run_once
from rollcall.verdict import RankState
from tests.local import e2e

ROOT = Path(__file__).resolve().parents[2]
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"


class Cells(HTMLParser):
    """The rank cells of report.html: rank -> its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[int, dict[str, str]] = {}

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if "data-rank" in a and "data-state" in a and tag in ("a", "span"):
            self.cells[int(a["data-rank"])] = a


def test_a_rank_that_exits_1_after_its_roll_call_is_named_in_every_report(tmp_path):
    proc = e2e.roll_call(tmp_path, SHORT, workload_env=("ROLLCALL_EXIT_RANK=0:1",))
    artifacts, output = proc.artifacts, proc.output
    assert proc.returncode == 1, output
    named = "rank 0's process (node 0, log node-0, host localhost) exited with code 1 after answering the roll call"
    assert f"first failure: {named}" in output
    # after the verdict, its own words: not the test's source, an assert, or a dump of the result
    assert "RunResult(" not in output and "assert result.passed" not in output, output

    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    assert test["root_cause"]["summary"] == f"first failure: {named}"
    assert test["root_cause"]["termination"]["rank"] == 0
    assert test["root_cause"]["termination"]["exit_code"] == 1
    assert test["failed_ranks"] == {"0": ["exited with code 1 after answering the roll call"]}
    assert [f["ranks"] for f in test["findings"] if f["kind"] == EXITED_NONZERO.value] == [[0]]

    suite = ET.parse(artifacts / "ranks.junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "1"
    failing = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failing == ["rank 0 (node 0)"]

    page = Cells()
    page.feed((artifacts / "report.html").read_text())
    assert page.cells[0]["data-state"] == RankState.FAILED.value
    assert EXITED_NONZERO.value in page.cells[0]["data-kinds"].split()
    assert "named" in page.cells[0]["class"].split()
    assert {r: c["data-state"] for r, c in page.cells.items() if r} == {1: "ok", 2: "ok", 3: "ok"}


def test_a_rank_killed_by_sigkill_after_its_roll_call_is_named_with_the_signal(tmp_path):
    spec = JobSpec(
        name="sigkill",
        nodes=2,
        procs_per_node=2,
        accelerator="cpu",
        workload_args=(*SHORT.split(), *e2e.COMPACT),
        env={"ROLLCALL_EXIT_RANK": "3:SIGKILL"},
        job_timeout_s=600,
        rdzv_timeout_s=60,
    )
    attempt = run_once(LocalBackend(), spec, tmp_path)
    assert attempt.status.state is JobState.FAILED, attempt.verdict.message()
    verdict = attempt.verdict
    assert verdict.problems[0] == (
        "first failure: rank 3's process (node 1, log node-1, host localhost) was killed by SIGKILL after "
        "answering the roll call"
    ), verdict.message()
    assert verdict.failed_ranks == {3: ["killed by SIGKILL after answering the roll call"]}
    assert verdict.ranks[3].state is RankState.FAILED


def test_a_rank_that_leaves_with_0_after_its_first_epoch_is_the_root_cause_ahead_of_the_others_errors(
    tmp_path,
):
    two_epochs = SHORT.replace("--epochs 1", "--epochs 2")
    proc = e2e.roll_call(tmp_path, two_epochs, workload_env=("ROLLCALL_LEAVE_RANK=3",))
    artifacts, output = proc.artifacts, proc.output
    assert proc.returncode == 1, output
    named = (
        "first failure: rank 3 (node 1) left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), "
        "before complete [log node-1, "
    )
    assert named in output, output
    assert "first failure unknown" not in output

    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    assert test["root_cause"]["summary"].startswith(named)
    left = test["root_cause"]["departure"]
    assert (left["rank"], left["node"], left["exit_code"], left["said"]) == (3, 1, 0, True)
    assert (left["last_event"], left["phase"]) == ("epoch_time of epoch 1", "epoch 1 end")
    root = test["findings"][0]
    assert root["kind"] == ROOT_CAUSE.value and root["ranks"] == [3]

    page = Cells()
    page.feed((artifacts / "report.html").read_text())
    assert page.cells[3]["data-role"] == "root"


def test_a_rank_that_vanishes_with_0_and_says_nothing_is_named_first_from_its_nodes_monitor(tmp_path):
    """``os._exit(0)`` after the first epoch: no ``exit`` line, no launcher record of a failure; the node's
    monitor saw its process gone, and that interval is the first failure, the others' errors its echoes."""
    spec = JobSpec(
        name="vanish",
        nodes=2,
        procs_per_node=2,
        accelerator="cpu",
        workload_args=(*SHORT.replace("--epochs 1", "--epochs 2").split(), *e2e.COMPACT),
        env={"ROLLCALL_VANISH_RANK": "3"},
        job_timeout_s=600,
    )
    attempt = run_once(LocalBackend(), spec, tmp_path)
    verdict = attempt.verdict
    assert not attempt.passed, verdict.message()
    first = verdict.problems[0]
    assert first.startswith("first failure: rank 3 (node 1) left after epoch_time of epoch 1, before complete "
                            "(its process gone between "), verdict.message()  # fmt: skip
    assert "seen by its node's monitor" in first and "first failure unknown" not in verdict.message()
    assert verdict.ranks[3].state is RankState.MISSING
