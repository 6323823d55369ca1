"""Slow is not broken: a run that is uneven but within every stated bound passes, naming nobody.

Real torchrun, gloo and BERT tiny on the CPU, 2 nodes x 2 ranks, with the bounds shortened so the runs stay
short (J = --join-hang-after 10 s, S = --start-skew 40 s; H = --hang-after 10 s) and each delay inside its bound
(docs/hangs.md's formulas): a node that starts late, a launcher slow to start, a rank slow to import, a rank
slow to set up its device, a rank that pauses in Python, one that pauses in C holding the GIL. The workload's own hooks make them
(``rollcall_workload.faults``: ROLLCALL_LATE_NODE, ...).
"""

from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.jobspec import HangBounds, JobSpec
from rollcall.runner import run_once

SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 2 --steps-per-epoch 2"
# S = 40 s, not twice J: a rank's delayed import is followed by its real one (torch, under CI's load of four
# integration workers on 2 cores once more than 6 s), and S, from the rank's process start, must hold both.
BOUNDS = HangBounds(hang_after_s=10.0, join_hang_after_s=10.0, start_skew_s=40.0)


def _run(tmp_path, name: str, env: dict[str, str]):
    spec = JobSpec(name=name, nodes=2, procs_per_node=2, accelerator="cpu", workload_args=tuple(SHORT.split()),
                   env=env, hang_bounds=BOUNDS, job_timeout_s=600)  # fmt: skip
    return run_once(LocalBackend(), spec, tmp_path)


def test_a_late_node_a_slow_launcher_and_a_slow_import_within_their_bounds_fail_nothing(tmp_path):
    """Node 1 heard 14 s after node 0 (S = 40) and its launcher 12 s slow on top: the launchers meet past 2 J
    of node 0's start, which once failed the run; each has 2 J after the last node was heard. Rank 3 sleeps
    24 s before its import (more than 2 J, which once named it never joined; it has S = 40 s from its
    process's start for that, its real import and its device setup).
    The ranks that joined early wait at the join past J and dump, as waiting ranks do; nothing is named."""
    env = {
        "ROLLCALL_LATE_NODE": "1:14",
        "ROLLCALL_SLOW_LAUNCHER_NODE": "1:12",
        "ROLLCALL_SLOW_IMPORT_RANK": "3:24",
    }
    attempt = _run(tmp_path, "late", env)
    assert attempt.passed, attempt.verdict.message()
    assert attempt.status.state is JobState.SUCCEEDED and attempt.verdict.findings == ()
    assert all(r.complete for r in attempt.verdict.ranks.values())


def test_pauses_in_python_and_in_c_below_the_hang_bound_fail_nothing(tmp_path):
    """Rank 0 sleeps 7 s in Python, rank 3 7 s in C with the GIL held (its heartbeat stops): both below H."""
    attempt = _run(tmp_path, "pauses", {"ROLLCALL_PAUSE_RANK": "0:7", "ROLLCALL_C_PAUSE_RANK": "3:7"})
    assert attempt.passed, attempt.verdict.message()
    assert attempt.verdict.findings == ()


def test_a_rank_slower_than_the_join_bound_to_set_up_its_device_fails_nothing_within_the_start_skew(tmp_path):
    """Rank 1 takes 15 s more to set up its device (a slow torch_xla import, a slow CUDA context), its watchdog
    running: more than J, which once named it never joined while the others waited at the join, but within S
    from its process's start. J counts from entering init_process_group: the others wait there past J and
    dump, as waiting ranks do, and go on once rank 1 joins; nothing is named."""
    attempt = _run(tmp_path, "slow-setup", {"ROLLCALL_SLOW_SETUP_RANK": "1:15"})
    assert attempt.passed, attempt.verdict.message()
    assert attempt.status.state is JobState.SUCCEEDED and attempt.verdict.findings == ()
    assert all(r.complete for r in attempt.verdict.ranks.values())
    lines = [line for log in sorted(tmp_path.glob("node-*.log")) for line in log.read_text().splitlines()]
    waited = [line for line in lines if '"event":"stack"' in line and '"phase":"init_process_group"' in line]
    assert waited, "no rank waited past J at the join: the run did not test what it means to"
    assert not any(
        '"phase":"imports and device setup"' in line for line in lines if '"event":"stack"' in line
    )
