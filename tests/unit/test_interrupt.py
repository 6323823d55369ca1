"""An interrupted run (Ctrl-C, SIGTERM) is cleaned up whatever else arrives, judged as far as it got, and reported.

The runner's part with a fake backend in this process; the plugin's in a pytest session of its own (a
scripted backend whose wait never returns), signalled as CI runners and ``timeout`` do: more than once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.interrupted import INTERRUPTED
from rollcall.checks.job_state import JOB
from rollcall.collect import Collector
from rollcall.jobspec import JobSpec
from rollcall.page import report as htmlreport
from rollcall.runner import Interrupted, RunResult, run_once, run_with_retries
from rollcall.verdict import Owner, RankState
from tests import children
from tests.unit.helpers import node_log
from tests.unit.scripted import SCRIPTED_CONFTEST
from tests.waiting import wait_until

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]


class Second(Exception):
    """What a signal's own handler raised: the signal was acted on, not held."""


@pytest.fixture
def second_signal() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Second` in this test, as the plugin's handlers would interrupt."""

    def handler(signum: int, frame: object) -> None:
        raise Second(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, old in previous.items():
        signal.signal(sig, old)


@dataclass
class FakeJob:
    """A job whose ranks 0-1 completed and 2-3 said nothing; ``wait`` does what the test says."""

    wait_does: Callable[[], JobStatus]
    cleaning: Callable[[], None] = lambda: None
    cleaned: list[str] = field(default_factory=list)

    def wait(self, timeout_s: float, stop: object = None) -> JobStatus:
        return self.wait_does()

    def cleanup(self) -> None:
        self.cleaned.append("started")
        self.cleaning()  # a second signal arrives here
        self.cleaned.append("done")


@dataclass
class FakeBackend:
    jobs: list[FakeJob]
    name: str = "fake"
    unit: str = "node"

    def launch(self, spec: JobSpec, collector: Collector) -> FakeJob:
        sink = collector.sink("node-0")
        sink.write(node_log(0, 2, 2).encode())
        sink.close()
        return self.jobs.pop(0)


def interrupt(why: str = "signal SIGTERM") -> Callable[[], JobStatus]:
    def wait() -> JobStatus:
        raise KeyboardInterrupt(why)

    return wait


SPEC = JobSpec("interrupted", 2, 2)


def test_an_interrupted_wait_is_cleaned_up_whatever_arrives_then_judged_and_carried_up(
    tmp_path, second_signal
):
    job = FakeJob(interrupt(), cleaning=lambda: os.kill(os.getpid(), signal.SIGTERM))
    with pytest.raises(Interrupted) as caught:
        run_once(FakeBackend([job]), SPEC, tmp_path)
    assert job.cleaned == ["started", "done"]  # the second SIGTERM was held, not acted on
    exc = caught.value
    assert isinstance(exc, KeyboardInterrupt) and str(exc) == exc.why == "signal SIGTERM"
    status = exc.attempt.status
    assert status.state is JobState.INTERRUPTED
    assert status.reason.startswith("interrupted by signal SIGTERM ") and status.reason.endswith(
        "s after the launch, before the job ended"
    )
    verdict = exc.attempt.verdict
    first = verdict.findings[0]
    assert first.kind is INTERRUPTED and first.message == (
        f"run {status.reason}: ranks 0-1 answered; ranks 2-3 not started"
    )
    assert first.blame is not None and first.blame.owner is Owner.UNDETERMINED
    assert verdict.answered == 2 and verdict.ranks[0].state is RankState.OK
    assert verdict.ranks[2].notes[0] == "not started (no start: not in the process group) when interrupted"
    assert (tmp_path / "node-0.log").is_file()


@dataclass
class SignalledWhileLaunching(FakeBackend):
    """A backend that has made its job when the signal arrives, before ``launch`` returns it."""

    sig: signal.Signals = signal.SIGTERM

    def launch(self, spec: JobSpec, collector: Collector) -> FakeJob:
        job = super().launch(spec, collector)
        os.kill(os.getpid(), self.sig)  # acted on at once, were it not held: the job would be known to no one
        job.cleaned.append("launched")
        return job


@pytest.mark.parametrize(
    ("sig", "why"), [(signal.SIGTERM, "signal SIGTERM"), (signal.SIGINT, "signal SIGINT (Ctrl-C)")]
)
def test_a_signal_while_the_job_is_made_is_acted_on_once_it_is_made_so_its_clean_up_knows_it(
    tmp_path, second_signal, sig, why
):
    job = FakeJob(lambda: JobStatus(JobState.SUCCEEDED))
    with pytest.raises(Interrupted) as caught:
        run_once(SignalledWhileLaunching([job], sig=sig), SPEC, tmp_path)
    assert job.cleaned == ["launched", "started", "done"]  # made whole, never waited for, cleaned up
    assert caught.value.why == why
    assert caught.value.attempt.status.state is JobState.INTERRUPTED


def test_ctrl_c_says_so_when_the_interrupt_has_no_words(tmp_path):
    with pytest.raises(Interrupted) as caught:
        run_once(FakeBackend([FakeJob(interrupt(""))]), SPEC, tmp_path)
    assert caught.value.why == "signal SIGINT (Ctrl-C)"
    assert caught.value.attempt.status.reason.startswith("interrupted by signal SIGINT (Ctrl-C) ")


def test_a_signal_during_the_clean_up_of_a_job_that_ended_keeps_its_verdict_and_ends_the_session(
    tmp_path, second_signal
):
    job = FakeJob(
        lambda: JobStatus(JobState.FAILED, "node 1 exited"), lambda: os.kill(os.getpid(), signal.SIGINT)
    )
    with pytest.raises(Interrupted) as caught:
        run_once(FakeBackend([job]), SPEC, tmp_path)
    assert job.cleaned == ["started", "done"]
    attempt = caught.value.attempt
    assert caught.value.why == "signal SIGINT"
    assert attempt.status == JobStatus(JobState.FAILED, "node 1 exited")
    assert attempt.verdict.findings[0].kind is JOB and not attempt.verdict.of_kind(INTERRUPTED)


def test_another_exception_still_cleans_up_and_a_signal_held_meanwhile_is_not_lost(tmp_path, second_signal):
    def broken() -> JobStatus:
        raise RuntimeError("the API server went away")

    job = FakeJob(broken, lambda: os.kill(os.getpid(), signal.SIGTERM))
    with pytest.raises(KeyboardInterrupt, match="signal SIGTERM") as caught:
        run_once(FakeBackend([job]), SPEC, tmp_path)
    assert not isinstance(caught.value, Interrupted)  # nothing was judged: the wait failed
    assert isinstance(caught.value.__context__, RuntimeError)
    assert job.cleaned == ["started", "done"]


def test_the_attempts_before_an_interrupted_one_stay_in_the_result(tmp_path):
    failed = FakeJob(lambda: JobStatus(JobState.FAILED, "node 1 exited"))
    backend = FakeBackend([failed, FakeJob(interrupt())])
    with pytest.raises(Interrupted) as caught:
        run_with_retries(backend, lambda n: SPEC, tmp_path, retries=3)
    result = caught.value.result
    assert result is not None and len(result.attempts) == 2  # no third attempt after the interrupt
    assert result.attempts[1] is caught.value.attempt
    assert result.outcome == "interrupted" and not result.passed


def test_every_report_of_an_interrupted_run_says_so_and_agrees(tmp_path):
    with pytest.raises(Interrupted) as caught:
        run_once(FakeBackend([FakeJob(interrupt())]), SPEC, tmp_path)
    record = reports.TestRecord(
        "t.py::test_interrupted",
        RunResult("fake", [caught.value.attempt]),
        "cpu",
        {"interrupted": "signal SIGTERM"},
    )
    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert test["outcome"] == "interrupted" and test["interrupted"] == "signal SIGTERM"
    assert test["job"]["state"] == "interrupted" and test["verdict"] == "failed"
    assert test["findings"][0]["kind"] == "interrupted" and test["findings"][0]["owner"] == "undetermined"
    assert test["ranks_answered"] == 2 and set(test["failed_ranks"]) == {"2", "3"}

    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "ranks.junit.xml").iter("testcase")}
    failing = {name for name, c in cases.items() if c.find("failure") is not None}
    assert failing == {"rank 2 (node 1)", "rank 3 (node 1)"}
    message = cases["rank 2 (node 1)"].find("failure").get("message")  # type: ignore[union-attr]
    assert message.startswith(
        "not started (no start: not in the process group) when interrupted [undetermined"
    )

    page = htmlreport.render([record], {"backend": "fake"}, tmp_path)
    assert "FAIL (interrupted)" in page and 'data-interrupted="true"' in page
    assert test["findings"][0]["message"] in page
    assert reports.summary_table([record])[1].endswith("FAIL (interrupted)")


PAUSED_CLEAN_UP = """
import pathlib
import time

_cleanup = ScriptedJob.cleanup

def cleanup(self):
    # says it started, then waits until the test has sent its second signal
    pathlib.Path("cleaning").write_text(self.name)
    while not pathlib.Path("go-on").exists():
        time.sleep(0.01)
    _cleanup(self)
    pathlib.Path("cleaned").write_text(self.name)

ScriptedJob.cleanup = cleanup
"""

WEDGED = """
from conftest import PLAN

def test_wedged(rollcall):
    PLAN.append({"wedge": True, "skip": {3: ("throughput", "complete")}})
    rollcall()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_session_interrupted_twice_cleans_up_writes_every_report_and_exits_2(pytester, sig):
    pytester.makeconftest(SCRIPTED_CONFTEST + PAUSED_CLEAN_UP)
    pytester.makepyfile(test_roll=WEDGED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("PYTEST_CURRENT_TEST", None)
    env = {k: v for k, v in env.items() if not k.startswith(("ROLLCALL_", "PYTEST_ADDOPTS"))}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--timeout", "0"]
    out = pytester.path / "pytest.out"
    with open(out, "wb") as sink:
        child = subprocess.Popen(
            children.interruptible(cmd),  # Ctrl-C reaches it, however this session was started
            cwd=pytester.path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        logs = pytester.path / "artifacts" / "test_wedged"
        wait_until(
            lambda: f"the wedged job's logs; pytest said:\n{out.read_text()}", lambda: any(logs.glob("*.log"))
        )
        child.send_signal(sig)
        wait_until(
            lambda: f"the clean-up to start; pytest said:\n{out.read_text()}",
            (pytester.path / "cleaning").exists,
        )
        child.send_signal(sig)  # as `timeout` does: once to its child, once more to the group
        (pytester.path / "go-on").touch()
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    text = out.read_text()
    assert child.returncode == 2, text  # pytest's exit code for an interruption
    assert (pytester.path / "cleaned").exists(), text
    name = "SIGTERM" if sig is signal.SIGTERM else "SIGINT (Ctrl-C)"
    said = "KeyboardInterrupt: signal SIGTERM" if sig is signal.SIGTERM else "!! KeyboardInterrupt !!"
    assert said in text, text  # the interruption as it came, as pytest said it before
    assert (
        f"rollcall: interrupted by signal {name} during test_roll.py::test_wedged; the verdict so far is in "
        "artifacts/results.json, artifacts/ranks.junit.xml, artifacts/report.html"
    ) in text, text
    artifacts = pytester.path / "artifacts"
    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    assert test["outcome"] == "interrupted" and test["interrupted"] == f"signal {name}"
    assert test["findings"][0]["message"].startswith(f"run interrupted by signal {name} ")
    assert test["findings"][0]["message"].endswith(": ranks 0-2 answered; rank 3 running")
    junit = ET.parse(artifacts / "ranks.junit.xml").getroot()
    assert [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None] == [
        "rank 3 (node 1)"
    ]
    assert "FAIL (interrupted)" in (artifacts / "report.html").read_text()
