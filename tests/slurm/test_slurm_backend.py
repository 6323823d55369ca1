"""The slurm backend against a real slurmctld and two slurmd (hack/slurm.sh): real sbatch, srun and torchrun.

Every test ends with squeue empty and no process of any job of the cluster alive. Slurm's own TIMEOUT state
is read as a timeout by the unit tests: slurmctld checks time limits about once a minute, too slow to wait
for here; the suite's own deadline (``--job-timeout``) comes first anyway.
"""

import getpass
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rollcall.backends import DiscoveryError, JobState, PlacementRequest
from rollcall.backends.slurm.backend import SlurmBackend, SlurmCommands
from rollcall.backends.slurm.script import UNSHARED_EXIT, Settings, shared_token
from rollcall.checks.collective_mismatch import COLLECTIVE_MISMATCH
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.checks.exited_nonzero import EXITED_NONZERO
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.checks.job_state import JOB
from rollcall.checks.never_started import NEVER_STARTED
from rollcall.checks.replica_divergence import REPLICA_DIVERGENCE
from rollcall.evidence.hangs import FAULTHANDLER_NOTE, Stall
from rollcall.jobspec import DEFAULT_JOB_TIMEOUT_S, HangBounds, JobSpec
from rollcall.nodeverdicts import of_records
from rollcall.runner import run_once
from rollcall.verdict import Owner
from rollcall_workload.rank.watchdog import FAULTHANDLER_MARGIN_S
from tests import children
from tests.local.e2e import COMPACT
from tests.waiting import wait_until

#: Every test here runs real Slurm jobs, and most of them train.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: A few steps of the compact model (``tests.local.e2e.COMPACT``); ``make e2e-slurm`` runs the default one.
FAST = ("--warmup-steps", "1", "--epochs", "2", "--steps-per-epoch", "2", *COMPACT)


def spec(name, env=None, timeout=300.0):
    return JobSpec(
        name=f"{name}-{os.getpid()}",
        nodes=2,
        procs_per_node=1,
        accelerator="cpu",
        workload_args=FAST,
        env=env or {},
        job_timeout_s=timeout,
        rdzv_timeout_s=60,
    )


def environ(pid):
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def job_processes(conf):
    """Pids of live processes of any job of the cluster of ``conf``."""
    mark, found = f"SLURM_CONF={conf}".encode(), []
    for entry in Path("/proc").iterdir():
        try:
            env = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if mark in env and any(v.startswith(b"SLURM_JOB_ID=") for v in env):
            found.append(int(entry.name))
    return found


@pytest.fixture
def clean(slurm):
    """After the test: nothing in squeue, no job process left."""
    yield slurm
    assert slurm.queue() == []
    assert job_processes(slurm.conf) == []


def test_two_nodes_answer_each_in_its_own_log(tmp_path, clean):
    started = time.monotonic()
    attempt = run_once(SlurmBackend(), spec("pass"), tmp_path)
    assert attempt.status.state is JobState.SUCCEEDED, attempt.status
    assert attempt.passed, attempt.verdict.message()
    assert attempt.verdict.answered == 2
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["rc1.log", "rc2.log"]
    assert "[1]:ROLLCALL" in (tmp_path / "rc2.log").read_text()
    assert "[1]:ROLLCALL" not in (tmp_path / "rc1.log").read_text()
    assert "node 1 ran on slurm node rc2 (log rc2.log)" in attempt.status.details
    print(f"pass: {time.monotonic() - started:.1f}s")


# Its job may run to its 600 s job timeout, then be cancelled.
@pytest.mark.timeout(900)
def test_a_crashing_rank_fails_the_job_naming_rank_and_node(tmp_path, clean):
    attempt = run_once(SlurmBackend(), spec("crash", env={"ROLLCALL_FAIL_RANK": "1"}, timeout=600), tmp_path)
    assert attempt.status.state is JobState.FAILED
    assert "ended FAILED" in attempt.status.reason
    # srun tells of both tasks; which one ended first is a race: rank 0's agent often exits (1, its peer
    # gone) before rank 1's agent has seen its worker fail, and --kill-on-bad-exit then terminates rc2.
    # The verdict, not srun's order, names the rank that failed first.
    assert re.search(r"node rc2 \(task 1\): (Exited with exit code 1|Terminated)", attempt.status.reason)
    assert "node 1 ran on slurm node rc2 (log rc2.log)" in attempt.status.details
    message = attempt.verdict.message()
    assert "rank 1 (node 1) reported an error: RuntimeError: injected failure on rank 1" in message
    assert 1 in attempt.verdict.missing["complete"]
    (root,) = attempt.verdict.of_kind(ROOT_CAUSE)
    assert set(root.ranks) == {1} and root.message.startswith("first failure: rank 1 (node 1)"), message


def test_a_job_pending_for_a_reason_that_cannot_clear_fails_after_the_grace_period(tmp_path, clean):
    backend = SlurmBackend(Settings(partition="held"), pending_grace_s=2)
    started = time.monotonic()
    attempt = run_once(backend, spec("held"), tmp_path)
    took = time.monotonic() - started
    assert attempt.status.state is JobState.FAILED
    assert "stayed PENDING for 2s with reason PartitionDown" in attempt.status.reason
    assert took < 30, took  # not the job timeout of 300s


def test_a_rank_that_skipped_a_barrier_is_named_from_the_flight_records(tmp_path, clean):
    """2 nodes x 2 ranks: rank 1 skips one barrier after its first epoch and goes on into DDP's all_reduce;
    its stack is in backward, the others' in a barrier. The ranks' flight records, said in their logs beside
    their stacks, name it and the collective."""
    skipped = spec("skip", env={"ROLLCALL_SKIP_COLLECTIVE": "1"}, timeout=600)
    skipped = replace(skipped, procs_per_node=2, workload_args=(*FAST, "--hang-after", "5"))
    attempt = run_once(SlurmBackend(), skipped, tmp_path)
    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    (hung,) = attempt.verdict.of_kind(HUNG)
    pattern = (
        r"rank 1 \(node 0, [^)]+\) entered all_reduce as #(\d+) of the default group, where ranks 0, 2-3 "
        r"\(nodes 0-1\) entered barrier and wait in it \(flight recorder\); its stack: backward"
    )
    assert (m := re.match(pattern, hung.message)), attempt.verdict.message()
    (waiting,) = attempt.verdict.of_kind(WAITING)
    assert (
        waiting.message
        == f"ranks 0, 2-3 waiting in barrier #{m[1]} of the default group for rank 1 (flight recorder)"
    )


def test_the_suites_deadline_cancels_a_hanging_job(tmp_path, clean):
    attempt = run_once(SlurmBackend(), spec("hang", env={"ROLLCALL_HANG_RANK": "0"}, timeout=20), tmp_path)
    assert attempt.status.state is JobState.TIMED_OUT
    assert (
        "did not finish within 20s" in attempt.status.reason and "RUNNING on rc[1-2]" in attempt.status.reason
    )
    assert 0 in attempt.verdict.missing["complete"]


def test_a_hung_rank_is_named_from_its_stack_and_the_job_is_cancelled_at_the_hang(tmp_path, clean):
    hang_after = 5
    hung = spec("hung", env={"ROLLCALL_HANG_RANK": "1"}, timeout=600)
    hung = replace(hung, workload_args=(*FAST, "--hang-after", str(hang_after)))
    started = time.monotonic()
    attempt = run_once(SlurmBackend(), hung, tmp_path)
    took = time.monotonic() - started
    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    assert "is cancelled" in attempt.status.reason
    first = attempt.verdict.findings[0]
    assert first.kind is HUNG and set(first.ranks) == {1}, attempt.verdict.message()
    assert "hung in a sleep" in first.message and "inject_fault: time.sleep(3600)" in first.message
    (waiting,) = attempt.verdict.of_kind(WAITING)
    assert waiting.message == "rank 0 waiting in a collective (barrier) for the hung rank"
    assert took < 300, took  # not the job timeout of 600 s


#: The issue's bound for naming each class of hang or departure, with the default job timeout.
NAMED_WITHIN_S = 180


def test_a_rank_holding_the_gil_is_named_hung_from_the_stack_its_nodes_monitor_read(tmp_path, clean):
    """ROLLCALL_GIL_RANK=1 blocks rank 1 in C with the GIL held after its first epoch: its watchdog thread
    cannot dump, faulthandler's timer can, and the monitor in front of node 1's torchrun turns the dump into
    stack events in node 1's log."""
    hang_after = 5
    held = spec("gil", env={"ROLLCALL_GIL_RANK": "1"}, timeout=DEFAULT_JOB_TIMEOUT_S)
    held = replace(held, workload_args=(*FAST, "--hang-after", str(hang_after)))
    started = time.monotonic()
    attempt = run_once(SlurmBackend(), held, tmp_path)
    took = time.monotonic() - started
    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    first = attempt.verdict.findings[0]
    assert first.kind is HUNG and set(first.ranks) == {1}, attempt.verdict.message()
    assert first.message.startswith("rank 1 (node 1, log rc2) hung in a sleep"), first.message
    assert FAULTHANDLER_NOTE in first.message and "in hold_the_gil: libc.sleep(seconds)" in first.message
    stall = first.detail
    assert isinstance(stall, Stall) and stall.dump.source == "faulthandler"
    assert stall.dump.stalled_s is not None and stall.dump.stalled_s <= hang_after + FAULTHANDLER_MARGIN_S + 5
    (waiting,) = attempt.verdict.of_kind(WAITING)
    assert waiting.message == "rank 0 waiting in a collective (barrier) for the hung rank"
    assert took < NAMED_WITHIN_S, took
    print(f"gil held: {took:.1f}s")


def test_a_rank_that_exits_0_early_is_named_first_with_its_code_and_phase(tmp_path, clean):
    """ROLLCALL_LEAVE_RANK=1 ends rank 1 with status 0 after its first epoch: its node's agent, and so its
    Slurm task, succeed; rank 0 is left alone in the next collective."""
    left = spec("leaves", env={"ROLLCALL_LEAVE_RANK": "1"}, timeout=DEFAULT_JOB_TIMEOUT_S)
    left = replace(left, workload_args=(*FAST, "--hang-after", "5"))
    started = time.monotonic()
    attempt = run_once(SlurmBackend(), left, tmp_path)
    took = time.monotonic() - started
    assert attempt.status.state in (JobState.FAILED, JobState.STOPPED), attempt.verdict.message()
    (root,) = attempt.verdict.of_kind(ROOT_CAUSE)
    assert attempt.verdict.findings[0] is root, attempt.verdict.message()
    assert set(root.ranks) == {1} and root.message.startswith(
        "first failure: rank 1 (node 1) left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), "
        "before complete [log rc2, "
    ), root.message
    assert took < NAMED_WITHIN_S, took
    print(f"exit 0 early: {took:.1f}s")


def test_a_node_whose_launcher_never_starts_is_named_at_twice_the_join_bound(tmp_path, clean):
    """ROLLCALL_NO_LAUNCH_NODE=1: node 1's task (its monitor) starts no launcher and says nothing, so no
    rank is spawned anywhere; node 0's monitor says its launcher waits at the launchers' rendezvous (a line
    at each join bound J it waits), and node 1 is named at the start skew S = 2 J after node 0 was first
    heard, not at torchrun's rendezvous timeout. Node 0's launcher starts after its monitor's first line,
    so by then it has said it waited J, or 2 J where its second line was read first."""
    join_after = 10
    unlaunched = spec("nolaunch", env={"ROLLCALL_NO_LAUNCH_NODE": "1"}, timeout=DEFAULT_JOB_TIMEOUT_S)
    unlaunched = replace(
        unlaunched, workload_args=(*FAST, "--join-hang-after", str(join_after)), rdzv_timeout_s=300
    )
    attempt = run_once(SlurmBackend(), unlaunched, tmp_path)
    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    first = attempt.verdict.findings[0]
    assert first.kind is NEVER_STARTED and set(first.ranks) == {1}, attempt.verdict.message()
    said = "node 1 never started its launcher (nothing heard from it: no monitor line, no rank); node 0's "
    waited = re.match(rf"{re.escape(said)}launcher waited (\d+)s", first.message)
    # a line at each J it waits; a loaded machine writes the second one a second or two late
    assert waited and join_after <= int(waited[1]) <= 2 * join_after + 5, first.message
    assert attempt.duration_s < 2 * join_after + 60 < 300, attempt.duration_s
    print(f"launcher never started: {attempt.duration_s:.1f}s")


def test_a_rank_that_exits_non_zero_after_its_roll_call_is_named_with_its_code(tmp_path, clean):
    attempt = run_once(
        SlurmBackend(), spec("exits", env={"ROLLCALL_EXIT_RANK": "1:3"}, timeout=600), tmp_path
    )
    assert attempt.status.state is JobState.FAILED, attempt.verdict.message()
    (exited,) = attempt.verdict.of_kind(EXITED_NONZERO)
    assert set(exited.ranks) == {1}, attempt.verdict.message()
    assert attempt.verdict.failed_ranks[1] == ["exited with code 3 after answering the roll call"]
    assert (
        exited.message.startswith("first failure: rank 1's process (node 1, ")
        and "exited with code 3" in exited.message
    )


def test_a_flipped_bit_makes_the_two_replicas_a_tie_that_names_both(tmp_path, clean):
    """ROLLCALL_CORRUPT_RANK=1 flips one bit of rank 1's parameters after its first timed step. Two nodes of
    one rank are two replicas: which one is wrong cannot be told, so both are named, each with its node (a
    third replica would outvote the wrong one: tests/local/test_proof.py)."""
    attempt = run_once(SlurmBackend(), spec("sdc", env={"ROLLCALL_CORRUPT_RANK": "1"}), tmp_path)
    assert attempt.status.state is JobState.SUCCEEDED, attempt.status  # a silent corruption: the job passes
    assert not attempt.passed
    first = attempt.verdict.findings[0]
    assert first.kind is REPLICA_DIVERGENCE and set(first.ranks) == {0, 1}, attempt.verdict.message()
    assert first.message.startswith(
        "replica divergence (silent data corruption): rank 0 (node 0) from epoch 1 on; rank 1 (node 1) from "
        "epoch 1 on: "
    ) and first.message.endswith("which replica is wrong cannot be told"), first.message
    assert sorted(attempt.verdict.failed_ranks) == [0, 1], attempt.verdict.failed_ranks
    assert "node 1 ran on slurm node rc2 (log rc2.log)" in attempt.status.details


def test_wrong_all_reduce_data_names_rank_1_and_its_node(tmp_path, clean):
    """ROLLCALL_CORRUPT_COLLECTIVE=1 zeroes 1024 elements, from a third of the 8 MiB buffer on, of every
    result rank 1 receives. Two nodes of one rank: the world is the only group (no node group, and the one
    pair is the world), so one problem names the world all-reduce and one rank 1's node."""
    elements = 8 * 2**20 // 4  # the cpu default --bandwidth-mb 8, in float32 elements
    attempt = run_once(SlurmBackend(), spec("wrong", env={"ROLLCALL_CORRUPT_COLLECTIVE": "1"}), tmp_path)
    assert attempt.status.state is JobState.SUCCEEDED, attempt.status
    assert not attempt.passed
    wrong = attempt.verdict.of_kind(COLLECTIVE_MISMATCH)
    assert [p.message for p in attempt.verdict.findings] == [p.message for p in wrong], "nothing else"
    world, where = (p.message for p in wrong)
    # element 699050 should sum to (699050 % 251 + 1) + ((699050 + 37) % 251 + 1) = 16 + 53 over ranks 0, 1
    assert world == (
        "collective mismatch: world all-reduce (ranks 0-1, nodes 0-1): rank 1 (node 1) received 1024 of "
        f"{elements} elements wrong in 10 timed all-reduce(s), first at index {elements // 3} "
        "(expected 69, got 0)"
    ), world
    assert where == (
        "collective mismatch: every rank that received wrong data (1) is on node 1: its device or its link"
    )
    assert [set(p.ranks) for p in wrong] == [{1}, set()]
    assert attempt.verdict.failed_ranks == {
        1: ["wrong data from the world all-reduce (ranks 0-1, nodes 0-1)"]
    }
    assert "node 1 ran on slurm node rc2 (log rc2.log)" in attempt.status.details


def test_discovery_reads_the_nodes_and_names_a_drained_one(slurm):
    backend = SlurmBackend()
    placement = backend.discover(PlacementRequest(nodes=2, accelerator="cpu"))
    assert (placement.accelerator, placement.procs_per_node, backend.usable) == ("cpu", 1, ["rc1", "rc2"])
    slurm.run("scontrol", "update", "nodename=rc2", "state=drain", "reason=rollcall test")
    try:
        with pytest.raises(DiscoveryError) as exc:
            backend.discover(PlacementRequest(nodes=2, accelerator="cpu"))
    finally:
        slurm.run("scontrol", "update", "nodename=rc2", "state=resume")
        # A resumed node may read IDLE+NOT_RESPONDING until slurmctld hears from its slurmd again; the next
        # test's discovery refused it then. The cluster is handed on as discovery found it: both usable.
        wait_until(
            lambda: (
                "both nodes usable again after the resume:\n" + slurm.run("scontrol", "show", "node", "rc2")
            ),
            lambda: usable(backend),
            timeout=120,
            every=0.5,
        )
    assert "need 2 usable node(s), found 1" in str(exc.value)
    assert "state IDLE+DRAIN (rollcall test" in str(exc.value) and "rc2 (1)" in str(exc.value)


def usable(backend: SlurmBackend) -> bool:
    try:
        backend.discover(PlacementRequest(nodes=2, accelerator="cpu"))
    except DiscoveryError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_and_sigterm_cancel_the_job_and_leave_squeue_empty(tmp_path, clean, sig):
    env = {
        **os.environ,
        "ROLLCALL_WORKLOAD_ENV": "ROLLCALL_HANG_RANK=1",
        "ROLLCALL_WORKLOAD_ARGS": " ".join(FAST),
        "SUBMITTER_ONLY": "must not reach the job",
    }
    output = tmp_path / "pytest.out"
    argv = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "e2e"), "--backend", "slurm"]
    argv += ["--accelerator", "cpu", "--nodes", "2", "--artifacts-dir", str(tmp_path / "artifacts")]
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            children.interruptible([*argv, "-p", "no:cacheprovider", "-q"]),  # Ctrl-C reaches it
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def workload_running():
        # the batch script's own shell sets the workload's environment for what it starts: wait for those
        assert proc.poll() is None, f"pytest ended (exit {proc.returncode}) first:\n{output.read_text()}"
        if not any(" RUNNING " in line for line in clean.queue()):
            return None
        pids = job_processes(clean.conf)
        return pids if any(b"ROLLCALL_HANG_RANK=1" in environ(pid) for pid in pids) else None

    try:
        pids = wait_until(
            lambda: (
                f"the job's workload to run with its environment; pytest said:\n{output.read_text()}\n"
                + clean.run("squeue", "-h", "-o", "%i %T %r %j")
                + clean.run("sinfo", "-N", "-h", "-o", "%N %T %E")
            ),
            workload_running,
            timeout=120,
        )
        # the job has the workload's environment and nothing else of the submitter's
        environs = [environ(pid) for pid in pids]
        assert not any(v.startswith(b"SUBMITTER_ONLY=") for e in environs for v in e)
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, output.read_text()
    assert clean.queue() == [], output.read_text()


def test_a_late_node_a_slow_launcher_and_a_slow_import_within_their_bounds_fail_nothing_on_slurm(
    tmp_path, clean
):
    """Slow is not broken, through sbatch and srun (tests/local/test_uneven.py on the local backend): with
    J = 10 s and S = 40 s, node 1's command starts 14 s late and its launcher 12 s slower on top, and rank 1
    imports for 24 s; each has its own clock (docs/hangs.md's formulas), torchrun's rendezvous timeout is set
    past them all (the spec's default, from S and J), and the run passes naming nobody."""
    uneven = JobSpec(
        name=f"uneven-{os.getpid()}",
        nodes=2,
        procs_per_node=1,
        accelerator="cpu",
        workload_args=FAST,
        env={
            "ROLLCALL_LATE_NODE": "1:14",
            "ROLLCALL_SLOW_LAUNCHER_NODE": "1:12",
            "ROLLCALL_SLOW_IMPORT_RANK": "1:24",
        },
        # S = 40 s: rank 1's process starts, sleeps 24 s, then imports torch, which under CI's load takes more
        # than 6 s, and sets up its device: S holds all of it from the process's start (as on local)
        hang_bounds=HangBounds(hang_after_s=10.0, join_hang_after_s=10.0, start_skew_s=40.0),
        job_timeout_s=300,
    )
    attempt = run_once(SlurmBackend(), uneven, tmp_path)
    assert attempt.passed, attempt.verdict.message()
    assert attempt.status.state is JobState.SUCCEEDED and attempt.verdict.findings == ()
    assert all(r.complete for r in attempt.verdict.ranks.values())


# Node 1's task begins 150 s after the step: the test takes about three minutes.
@pytest.mark.timeout(600)
def test_a_node_whose_task_begins_150s_after_the_step_is_on_its_way_and_the_run_names_nobody(tmp_path, clean):
    """ROLLCALL_LATE_NODE=1:150: node 1's task writes nothing for 150 s after the roll call's step began, as
    one whose pyxis import of a large image takes that long (Slurm shows the step RUNNING meanwhile; nothing
    of the node, whose monitor runs in the container, can be heard). With J = 10 s and S = 20 s,
    the node is on its way until its first line, held by the backend's start bound I = max(S, job timeout /
    2) = 200 s, not by S; torchrun's rendezvous on node 0 waits for it (its timeout the job timeout)."""
    late = JobSpec(
        name=f"import-{os.getpid()}",
        nodes=2,
        procs_per_node=1,
        accelerator="cpu",
        workload_args=FAST,
        env={"ROLLCALL_LATE_NODE": "1:150"},
        hang_bounds=HangBounds(join_hang_after_s=10.0, start_skew_s=20.0),
        job_timeout_s=400,
    )
    attempt = run_once(SlurmBackend(), late, tmp_path)
    assert attempt.passed, attempt.verdict.message()
    assert attempt.status.state is JobState.SUCCEEDED and attempt.verdict.findings == ()
    assert all(r.complete for r in attempt.verdict.ranks.values())
    assert attempt.duration_s > 150, attempt.duration_s
    print(f"a node 150 s late: {attempt.duration_s:.1f}s")


def test_a_node_whose_task_never_begins_is_named_by_the_backend_at_its_start_bound(tmp_path, clean):
    """ROLLCALL_LATE_NODE=1:3600: node 1's task writes nothing (an import that never ends). With J = 10 s,
    S = 20 s and a job timeout of 90 s, the start bound I is 45 s: the run fails then, naming node 1, its
    Slurm node and what it waited for, the platform's; the judge names nobody for silence meanwhile."""
    stuck = JobSpec(
        name=f"noimport-{os.getpid()}",
        nodes=2,
        procs_per_node=1,
        accelerator="cpu",
        workload_args=FAST,
        env={"ROLLCALL_LATE_NODE": "1:3600"},
        hang_bounds=HangBounds(join_hang_after_s=10.0, start_skew_s=20.0),
        job_timeout_s=90,
    )
    attempt = run_once(SlurmBackend(), stuck, tmp_path)
    assert attempt.status.state is JobState.FAILED, attempt.status
    assert attempt.status.reason.startswith(
        "node 1 (slurm node rc2) did not begin its task within 45s of the roll call's step (waited "
    ), attempt.status.reason
    (first, *_) = attempt.verdict.findings
    assert first.kind is JOB and first.blame is not None and first.blame.owner is Owner.PLATFORM
    assert not attempt.verdict.of_kind(NEVER_STARTED), attempt.verdict.message()
    assert 45 <= attempt.duration_s < 90, attempt.duration_s
    print(f"a node whose task never begins: {attempt.duration_s:.1f}s")


def test_a_slurmd_that_stops_answering_for_a_while_fails_nothing(tmp_path, clean):
    """rc2's slurmd is stopped (SIGSTOP) while the job trains, until slurmctld shows the node NOT_RESPONDING
    (a ping it missed) and the backend has said so, then let go: the job's tasks run on (slurmstepd is not
    slurmd) and the run passes naming nobody. NOT_RESPONDING counts only once held for SlurmdTimeout (60 s
    on this cluster) + 30 s, past the moment slurmctld itself would set the node DOWN."""
    slurmd = int((clean.state / "run" / "slurmd-rc2.pid").read_text())
    said: list[str] = []
    failed: list[BaseException] = []

    def not_responding():
        return "NOT_RESPONDING" in clean.run("scontrol", "-o", "show", "node", "rc2")

    def stop_a_while():
        try:
            began = tmp_path / "slurm" / "node-1.out"  # rc2 launched its task: slurmd's part is done
            wait_until("node 1's task begun", lambda: began.is_file() and began.stat().st_size, timeout=120)
            os.kill(slurmd, signal.SIGSTOP)
            try:
                wait_until("rc2 NOT_RESPONDING", not_responding, timeout=90, every=1)
                seen = "slurm node rc2: NOT_RESPONDING (counts past 90s)"
                wait_until(f"the backend saying {seen!r}", lambda: seen in said, timeout=30)
            finally:
                os.kill(slurmd, signal.SIGCONT)
        except BaseException as exc:  # told after the run
            failed.append(exc)

    paused = JobSpec(
        name=f"unanswered-{os.getpid()}",
        nodes=2,
        procs_per_node=1,
        accelerator="cpu",
        workload_args=FAST,
        env={"ROLLCALL_PAUSE_RANK": "0:100,1:100"},  # the ranks wait in Python: the job runs on meanwhile
        hang_bounds=HangBounds(hang_after_s=200.0),
        job_timeout_s=400,
    )
    stopper = threading.Thread(target=stop_a_while, daemon=True)
    stopper.start()
    attempt = run_once(SlurmBackend(progress=said.append), paused, tmp_path)
    stopper.join(timeout=30)
    assert failed == [], failed
    assert attempt.passed, attempt.verdict.message()
    assert attempt.status.state is JobState.SUCCEEDED and attempt.verdict.findings == ()
    assert "slurm node rc2: NOT_RESPONDING no more" in said, said
    print(f"a slurmd stopped a while: {attempt.duration_s:.1f}s")


def job_id(attempt_dir):
    """The id of the job whose batch log is in ``attempt_dir`` (its first line names it)."""
    return re.search(r"^rollcall: job (\d+) on ", (attempt_dir / "slurm" / "batch.out").read_text(), re.M)[1]


def test_a_reservation_confines_the_run_to_its_node(tmp_path, clean):
    """A reservation of rc2 for this user: the one-node run, which Slurm would otherwise start on rc1, runs
    on rc2 only."""
    name = f"rollcall-{os.getpid()}"
    clean.run(
        "scontrol", "create", "reservation", f"ReservationName={name}", f"Users={getpass.getuser()}",
        "Nodes=rc2", "StartTime=now", "Duration=30", "Flags=IGNORE_JOBS",
    )  # fmt: skip
    try:
        attempt = run_once(
            SlurmBackend(Settings(reservation=name)), replace(spec("reserved"), nodes=1), tmp_path
        )
        record = clean.run("scontrol", "show", "job", "-o", job_id(tmp_path))
    finally:
        clean.run("scontrol", "delete", f"ReservationName={name}")
    assert attempt.passed, attempt.verdict.message()
    assert f"Reservation={name} " in record and " NodeList=rc2 " in record
    assert "node 0 ran on slurm node rc2 (log rc2.log)" in attempt.status.details
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["rc2.log"]


def test_a_node_list_confines_the_run_and_a_slurm_arg_reaches_sbatch_as_it_is(tmp_path, clean):
    settings = Settings(nodelist="rc2", sbatch_args=("--comment=nodelist|rc2",))
    attempt = run_once(SlurmBackend(settings), replace(spec("nodelist"), nodes=1), tmp_path)
    assert attempt.passed, attempt.verdict.message()
    assert "node 0 ran on slurm node rc2 (log rc2.log)" in attempt.status.details
    record = clean.run("scontrol", "show", "job", "-o", job_id(tmp_path))
    assert " NodeList=rc2 " in record and " Comment=nodelist|rc2 " in record  # sbatch read the quoted word


def test_nodes_that_do_not_see_the_artifacts_directory_fail_the_job_at_its_first_step(tmp_path, clean):
    """Every slurmd of the test cluster shares this host's file system, so a node that sees another directory
    at the artifacts path is made by what it reads there: the token is overwritten between the backend
    writing it and sbatch, and every node reads one that is not this run's. The real first step, exit code,
    scontrol record and batch log then tell the suite which nodes did not see it."""
    job = spec("unshared")
    commands = SlurmCommands.configured()

    def elsewhere(argv, timeout_s=60.0):
        if argv[0] == "sbatch":
            shared_token(job, Path(argv[-1]).parent)[0].write_text("another directory at the same path\n")
        return commands(argv, timeout_s)

    started = time.monotonic()
    attempt = run_once(SlurmBackend(run=elsewhere), job, tmp_path)
    took = time.monotonic() - started
    assert attempt.status.state is JobState.FAILED
    host = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    assert attempt.status.reason.startswith(
        f"the artifacts directory {tmp_path / 'slurm'} is not on storage every node shares: node(s) rc1 (host "
        f"{host}), rc2 (host {host}) do not see it; point --artifacts-dir at a shared file system (slurm job "
    ) and attempt.status.reason.endswith(f"ended at its first step, exit code {UNSHARED_EXIT}:0)")
    first = attempt.verdict.findings[0]
    assert first.kind is JOB and first.message == f"job failed: {attempt.status.reason}"
    assert not (tmp_path / "slurm" / "node-0.out").exists()  # the roll call's own step never started
    assert took < 60, took


def slurm_suite(tmp_path, **values):
    """A session's Suite on the test Slurm (the options as a user gives them), its progress lines kept."""
    from rollcall.options import resolve
    from rollcall.suite import Suite

    given = {
        "backend": "slurm", "nodes": "2", "procs_per_node": "1", "accelerator": "cpu", "job_timeout": "300",
        "workload_args": " ".join(FAST), "artifacts_dir": str(tmp_path), **values,
    }  # fmt: skip
    suite = Suite(resolve(given, {}), "slurm", "test")
    suite.progress = (lines := []).append
    suite.prepare(connect=True)
    return suite, lines


def state_of(slurm, node):
    line = slurm.run("scontrol", "-o", "show", "node", node)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", line)
    return re.search(r"\bState=(\S+)", line)[1], reason[1] if reason else ""


def test_unfit_nodes_are_drained_and_a_recheck_in_a_reservation_resumes_those_that_pass(tmp_path, clean):
    """--drain-unfit: a run whose expectation of the nodes' own no node meets (--expect kernel=0.0, the breaker
    let to take both: --max-unfit 2) drains both nodes with the reason, at the session's end; a second run in
    a maintenance reservation holding them, with no such expectation, resumes them for the re-check, passes,
    and leaves them resumed; nodes.json says each verdict."""
    try:
        suite, lines = slurm_suite(tmp_path / "first", drain_unfit=True, expect=["kernel=0.0"], max_unfit="2")
        record = suite.run("t.py::test_unfit", "test_unfit")
        assert not record.result.passed
        nodes, breaker = of_records(suite.records, suite.verdict_ttl_s, suite.options.recovery.max_unfit)
        assert not breaker.tripped and [n.verdict for n in nodes] == ["unfit", "unfit"], nodes
        marked = suite.mark(nodes)
        assert marked is not None and marked.as_dict()["drained"] == ["rc1", "rc2"], marked
        for node in ("rc1", "rc2"):
            state, reason = state_of(clean, node)
            assert "DRAIN" in state and reason.startswith("rollcall: ") and "kernel" in reason, (
                state,
                reason,
            )
        clean.run(
            "scontrol", "create", "reservation", "ReservationName=rollcall-maint", f"Users={getpass.getuser()}",
            "Nodes=rc1,rc2", "StartTime=now", "Duration=30", "Flags=MAINT,IGNORE_JOBS",
        )  # fmt: skip
        suite, lines = slurm_suite(tmp_path / "again", drain_unfit=True, slurm_reservation="rollcall-maint")
        record = suite.run("t.py::test_recheck", "test_recheck")
        assert record.result.passed, record.result.last.verdict.message()
        assert any(
            "resumed rc1, rc2 (rollcall drained them) to re-check in rollcall-maint" in x for x in lines
        )
        nodes, _ = of_records(suite.records, 3600)
        assert suite.mark(nodes) is not None  # fit, checked whole: nothing left to resume, nothing drained
        for node in ("rc1", "rc2"):
            assert "DRAIN" not in state_of(clean, node)[0]
        assert {(n.name, n.verdict) for n in nodes} == {
            ("rc1", "fit"),
            ("rc2", "fit"),
        }
    finally:
        subprocess.run(["scontrol", "delete", "ReservationName=rollcall-maint"], env=clean.env, check=False)
        resume = ["scontrol", "update", "NodeName=rc1,rc2", "State=RESUME"]
        subprocess.run(resume, env=clean.env, capture_output=True, check=False)  # refused when not drained
