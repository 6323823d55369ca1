"""The local backend with real torchrun, real process groups and real BERT steps on the CPU."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rollcall import procs
from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.jobspec import JobSpec
from rollcall.ranges import ranges
from rollcall.runner import run_once
from tests import children
from tests.local.e2e import COMPACT
from tests.waiting import wait_until

#: Every test here trains: real torchrun runs of the workload on this machine's CPU.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FAST = ("--warmup-steps", "1", "--epochs", "2", "--steps-per-epoch", "2", *COMPACT)


def spec(name, nodes=2, procs_per_node=1, env=None, timeout=300.0):
    return JobSpec(
        name=name,
        nodes=nodes,
        procs_per_node=procs_per_node,
        accelerator="cpu",
        workload_args=FAST,
        env=env or {},
        job_timeout_s=timeout,
        rdzv_timeout_s=60,
    )


@pytest.fixture
def leftovers():
    """``leftovers(*suites)``: processes of rollcall runs started during this test that are still alive, the runs
    of this process (``run_once`` here) or of the suite processes ``suites`` (a ``pytest`` it started).

    A local run's id holds the pid of the suite process that started it: the runs of other sessions on this
    machine, such as another xdist worker's tests, are not this test's.
    """
    before = set(procs.marked())

    def left(*suites: int) -> dict[int, str]:
        owners = {str(pid) for pid in (os.getpid(), *suites)}
        return {
            pid: rid
            for pid, rid in procs.marked().items()
            if pid not in before and rid.rsplit("-", 2)[1:2] in ([o] for o in owners)
        }

    return left


def test_two_nodes_answer_and_leave_nothing_behind(tmp_path, leftovers):
    attempt = run_once(LocalBackend(), spec("two-nodes"), tmp_path)
    assert attempt.status.state is JobState.SUCCEEDED, attempt.verdict.message()
    assert attempt.passed, attempt.verdict.message()
    assert attempt.verdict.answered == 2
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["node-0.log", "node-1.log"]
    # each node's log holds exactly its own ranks, prefixed with the global rank by torchrun
    assert "[1]:ROLLCALL" in (tmp_path / "node-1.log").read_text()
    assert "[1]:ROLLCALL" not in (tmp_path / "node-0.log").read_text()
    # every event is stamped with the wall clock, in the order the rank said them, within the run
    for result in attempt.verdict.ranks.values():
        labels = [m.label for m in result.marks]
        assert labels[0] == "start" and labels[-1] == "complete", labels
        assert {"epoch 1", "epoch 2", "throughput"} <= set(labels), labels
        times = [m.time for m in result.marks]
        assert times[-1] - times[0] <= attempt.duration_s, times
    assert leftovers() == {}


# Its job may run to its 600 s job timeout, then be cleaned up.
@pytest.mark.timeout(900)
def test_a_crashing_rank_fails_the_job_fast_naming_rank_and_node(tmp_path, leftovers):
    attempt = run_once(LocalBackend(), spec("crash", env={"ROLLCALL_FAIL_RANK": "1"}, timeout=600), tmp_path)
    assert attempt.status.state is JobState.FAILED  # not a timeout: the other node was stopped at once
    # whichever agent noticed first is named; the rank that caused it is named by its own error event
    assert "(torchrun agent) exited with code" in attempt.status.reason
    message = attempt.verdict.message()
    assert "rank 1 (node 1) reported an error: RuntimeError: injected failure on rank 1" in message
    assert 1 in attempt.verdict.missing["complete"]
    # the page of the failed run: its timeline (rank 1's error after its first epoch), its logs by node and rank
    from rollcall import reports
    from rollcall.page.report import render
    from rollcall.runner import RunResult

    marks = {m.label: m.time for m in attempt.verdict.ranks[1].marks}
    assert marks["start"] < marks["epoch 1"] <= marks["error"], marks
    record = reports.TestRecord("tests/local/t.py::test_crash", RunResult("local", [attempt]), "cpu")
    page = render([record], {"backend": "local"}, tmp_path)
    assert '<svg class="timeline" data-folded="false"' in page
    assert 'data-row="1" data-node="1" data-ranks="1" data-state="raised" data-role="root"' in page
    assert "node 1 · rank 1 stderr" in page and ">node 0 · ranks 0 (node-0.log)<" in page
    assert "[log node-1, " in message and "pod" not in message  # a node's processes, not pods
    assert leftovers() == {}


# Its job may run to its 600 s job timeout, then be cleaned up.
@pytest.mark.timeout(900)
def test_one_failing_rank_of_eight_is_named_first_and_its_echoes_fold_into_one_line(tmp_path, leftovers):
    env = {"ROLLCALL_FAIL_RANK": "5"}
    attempt = run_once(LocalBackend(), spec("root", procs_per_node=4, env=env, timeout=600), tmp_path)
    assert attempt.status.state is JobState.FAILED
    first, *rest = attempt.verdict.problems
    assert first.startswith(
        "first failure: rank 5 (node 1) reported an error: RuntimeError: injected failure on rank 5"
    ), attempt.verdict.message()
    root = attempt.verdict.root_cause
    assert root is not None and root.first is not None and root.first.time is not None
    echoed = {f.rank for f in root.failures if f.echo}
    assert echoed and 5 not in echoed, attempt.verdict.message()
    # every echo, whichever way gloo worded it, is on one line that names its ranks
    (line,) = [p for p in rest if "echoes of another rank's failure" in p or "echo of another" in p]
    assert line.startswith(f"ranks {ranges(echoed)} ("), line
    assert leftovers() == {}


def test_a_hanging_rank_is_killed_at_the_timeout_and_reported(tmp_path, leftovers):
    attempt = run_once(LocalBackend(), spec("hang", env={"ROLLCALL_HANG_RANK": "0"}, timeout=45), tmp_path)
    assert attempt.status.state is JobState.TIMED_OUT
    assert "did not finish within 45s" in attempt.status.reason
    assert "complete missing on" in attempt.verdict.message()
    assert 0 in attempt.verdict.missing["complete"]
    assert leftovers() == {}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_leave_no_process_behind(tmp_path, leftovers, sig):
    artifacts = tmp_path / "artifacts"
    env = {
        **os.environ,
        "ROLLCALL_WORKLOAD_ENV": "ROLLCALL_HANG_RANK=1",
        "ROLLCALL_WORKLOAD_ARGS": " ".join(FAST),
    }
    output = tmp_path / "pytest.out"
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            children.interruptible(  # Ctrl-C reaches it, however this session was started
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    str(ROOT / "tests" / "e2e"),
                    "--backend",
                    "local",
                    "--nodes",
                    "2",
                    "--artifacts-dir",
                    str(artifacts),
                    "-p",
                    "no:cacheprovider",
                    "-q",
                ]
            ),
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    log = artifacts / "test_every_rank_answers_the_roll_call" / "node-1.log"
    try:
        # wait until rank 1 hangs after its first epoch: agents and workers are all up
        wait_until(
            lambda: (
                f"rank 1's first epoch; pytest said:\n{output.read_text()}\n"
                + subprocess.run(
                    ["ps", "-eo", "pid,ppid,stat,etime,cmd"], capture_output=True, text=True
                ).stdout
            ),
            lambda: log.is_file() and '"epoch_time"' in log.read_text(),
            timeout=120,
        )
        assert len(leftovers(proc.pid)) >= 4  # two agents, two workers
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, output.read_text()
    assert leftovers(proc.pid) == {}, output.read_text()
