"""Ranks that cannot speak for themselves, named from outside: local backend, 2 nodes x 2 ranks, real torchrun.

- ``ROLLCALL_GIL_RANK=1``: rank 1 blocks in C holding the GIL after its first epoch; its watchdog thread cannot
  run, faulthandler's timer takes its stack (``--hang-after`` plus ``FAULTHANDLER_MARGIN_S`` after its last
  step), and node 0's monitor turns it into ``stack`` events: it is named hung where it blocks.
- ``ROLLCALL_STOP_RANK=1``: rank 1 stops itself (SIGSTOP); node 0's monitor names it silent, its process
  stopped, once its heartbeat and progress have stopped ``--hang-after`` plus ``SILENT_MARGIN_S``.
- ``ROLLCALL_NO_JOIN_RANK=1``: rank 1 never calls init_process_group; every rank's watchdog dumps after
  ``--join-hang-after``, and rank 1 is named as the one that never joined.
- ``ROLLCALL_HANG_NODE=1``: node 1's ranks stop as they begin, before their watchdogs start, and say nothing;
  node 0's ranks wait for them in init_process_group, and once those have waited twice ``--join-hang-after``
  (their second dump) node 1's ranks are named as never joined, never heard from (no rank is spawned before
  every node's launcher has joined the launchers' rendezvous, so by then they had been running that long).
- ``ROLLCALL_NO_LAUNCH_NODE=1``: node 1's command never starts its launcher (its monitor starts nothing and
  says nothing), so no rank is spawned anywhere; node 0's monitor says its launcher waits at the launchers'
  rendezvous, and at its second ``waiting`` (twice ``--join-hang-after``) node 1 is named, well before
  torchrun's rendezvous timeout (300 s).

Each job ends at its bound, not at the 600 s job timeout: the verdict's own stall times say so.
"""

from __future__ import annotations

import os
import re

import pytest

from rollcall import procs
from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.checks.never_joined import NEVER_JOINED
from rollcall.checks.never_started import NEVER_STARTED
from rollcall.checks.silent import SILENT
from rollcall.evidence.hangs import FAULTHANDLER_NOTE, SPEAKS_FIRST_S, NeverJoined, Stall
from rollcall.evidence.launchers import NeverStarted
from rollcall.jobspec import JobSpec
from rollcall.ranklog import Silence
from rollcall.runner import Attempt, run_once
from rollcall_workload.node.monitor import POLL_S, SILENT_MARGIN_S
from rollcall_workload.rank.watchdog import FAULTHANDLER_MARGIN_S
from tests.local.e2e import COMPACT

pytestmark = pytest.mark.slow

HANG_AFTER_S = 5
JOIN_AFTER_S = 10
JOB_TIMEOUT_S = 600
#: A dump or a silence is said within a poll or two of its bound on 2 shared, loaded cores.
SLACK_S = 3 * POLL_S + 2
FAST = (
    *("--warmup-steps", "1", "--epochs", "2", "--steps-per-epoch", "2"),
    *("--hang-after", str(HANG_AFTER_S), "--join-hang-after", str(JOIN_AFTER_S)),
    *COMPACT,
)


def _run(tmp_path, name: str, fault: str, rdzv_timeout_s: int = 60) -> Attempt:
    spec = JobSpec(
        name=name,
        nodes=2,
        procs_per_node=2,
        accelerator="cpu",
        workload_args=FAST,
        env={fault: "1"},
        job_timeout_s=JOB_TIMEOUT_S,
        rdzv_timeout_s=rdzv_timeout_s,
    )
    attempt = run_once(LocalBackend(), spec, tmp_path)
    mine = f"{spec.name}-{os.getpid()}-"  # the local backend's run id; other runs may share this machine
    assert [pid for pid, rid in procs.marked().items() if rid.startswith(mine)] == []
    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    return attempt


def test_a_rank_holding_the_gil_in_c_is_named_hung_from_the_stack_faulthandler_took(tmp_path):
    attempt = _run(tmp_path, "gil-held", "ROLLCALL_GIL_RANK")
    verdict = attempt.verdict
    first = verdict.findings[0]
    assert first.kind is HUNG and set(first.ranks) == {1}, verdict.message()
    assert first.message.startswith("rank 1 (node 0, log node-0) hung in a sleep, not in a collective")
    assert FAULTHANDLER_NOTE in first.message and "run.py:" in first.message, first.message
    assert "in hold_the_gil: libc.sleep(seconds)" in first.message, first.message
    stall = first.detail
    assert isinstance(stall, Stall) and stall.dump.source == "faulthandler"
    assert stall.dump.stalled_s is not None
    assert stall.dump.stalled_s <= HANG_AFTER_S + FAULTHANDLER_MARGIN_S + SLACK_S < JOB_TIMEOUT_S
    (waiting,) = verdict.of_kind(WAITING)
    assert re.fullmatch(
        r"ranks 0, 2-3 waiting in barrier #\d+ of the default group for rank 1 \(flight recorder\)",
        waiting.message,
    ), waiting.message  # the records name rank 1
    assert "rank(s) 1 hung" in attempt.status.reason


def test_a_stopped_rank_is_named_silent_with_its_process_stopped(tmp_path):
    attempt = _run(tmp_path, "stopped-rank", "ROLLCALL_STOP_RANK")
    verdict = attempt.verdict
    first = verdict.findings[0]
    assert first.kind is SILENT and set(first.ranks) == {1}, verdict.message()
    assert first.message.startswith("rank 1 (node 0, log node-0) silent: no heartbeat for "), first.message
    assert first.message.endswith("is stopped (T)"), first.message
    silence = first.detail
    assert isinstance(silence, Silence) and silence.state == "T"
    assert silence.stalled_s is not None and silence.heartbeat_s is not None
    assert HANG_AFTER_S + SILENT_MARGIN_S < silence.heartbeat_s <= silence.stalled_s
    assert silence.stalled_s <= HANG_AFTER_S + SILENT_MARGIN_S + SLACK_S < JOB_TIMEOUT_S
    (waiting,) = verdict.of_kind(WAITING)
    assert re.fullmatch(
        r"ranks 0, 2-3 waiting in barrier #\d+ of the default group for rank 1 \(flight recorder\)",
        waiting.message,
    ), waiting.message  # the records name rank 1
    assert not verdict.ranks[1].answered and verdict.ranks[1].notes[0].startswith("silent: process stopped")
    assert attempt.status.reason.startswith("rank(s) 1 silent (process stopped)")


def test_a_rank_that_never_joins_the_process_group_is_named_within_the_join_bound(tmp_path):
    attempt = _run(tmp_path, "never-joined", "ROLLCALL_NO_JOIN_RANK")
    verdict = attempt.verdict
    first = verdict.findings[0]
    assert first.kind is NEVER_JOINED and set(first.ranks) == {1}, verdict.message()
    found = first.detail
    assert isinstance(found, NeverJoined) and found.waiting == (0, 2, 3) and found.waited_s is not None
    assert JOIN_AFTER_S <= found.waited_s <= JOIN_AFTER_S + SLACK_S < JOB_TIMEOUT_S
    assert first.message == (
        f"rank 1 (node 0) never joined; ranks 0, 2-3 waited {found.waited_s:.0f}s in init_process_group"
    )
    assert attempt.status.reason.startswith("rank 1 never joined; ranks 0, 2-3 waited")
    hung = verdict.of_kind(HUNG)
    assert [set(p.ranks) for p in hung] == [{1}] and "--join-hang-after" in hung[0].message


def test_a_node_whose_ranks_never_say_a_word_is_named_within_the_join_bound(tmp_path):
    attempt = _run(tmp_path, "hung-node", "ROLLCALL_HANG_NODE")
    verdict = attempt.verdict
    first = verdict.findings[0]
    assert first.kind is NEVER_JOINED and set(first.ranks) == {2, 3}, verdict.message()
    found = first.detail
    # their processes live from the start, sleeping: node 1's monitor sees them (rank_process), never a word
    assert (
        isinstance(found, NeverJoined) and found.waiting == (0, 1) and found.unheard == found.seen == (2, 3)
    )
    # named once S + J + m passed after node 1's monitor saw them (S = 2 J by default; m for a rank's own dump
    # to come first), which was before the others entered init_process_group (they imported torch first): the
    # others waited at least one join bound and at most S + J + m (their imports took the rest, slow under load)
    late = 3 * JOIN_AFTER_S + SPEAKS_FIRST_S + SLACK_S
    assert found.waited_s is not None and JOIN_AFTER_S - 1 <= found.waited_s <= late
    assert first.message == (
        "ranks 2 (node 1), 3 (node 1) never joined (its process seen, never a word: stuck before the watchdog "
        f"started); ranks 0-1 waited {found.waited_s:.0f}s in init_process_group"
    )
    assert attempt.status.reason.startswith("ranks 2, 3 never joined (its process seen, never a word"), (
        attempt.status.reason
    )
    assert attempt.duration_s < 2 * JOIN_AFTER_S + 60 < JOB_TIMEOUT_S, attempt.duration_s
    print(f"waited {found.waited_s:.1f}s, run {attempt.duration_s:.1f}s: {first.message}")


def test_a_node_that_never_starts_its_launcher_is_named_within_twice_the_join_bound(tmp_path):
    attempt = _run(tmp_path, "no-launch", "ROLLCALL_NO_LAUNCH_NODE", rdzv_timeout_s=300)
    verdict = attempt.verdict
    first = verdict.findings[0]
    assert first.kind is NEVER_STARTED and set(first.ranks) == {2, 3}, verdict.message()
    found = first.detail
    assert isinstance(found, NeverStarted) and found.missing == (1,) and found.waiting == (0,), found
    assert found.stuck == () and found.named == (1,)
    assert found.waited_s is not None and 2 * JOIN_AFTER_S - 1 <= found.waited_s <= 2 * JOIN_AFTER_S + SLACK_S
    assert first.message == (
        "node 1 never started its launcher (nothing heard from it: no monitor line, no rank); node 0's "
        f"launcher waited {found.waited_s:.0f}s at the launchers' rendezvous, no rank spawned anywhere"
    )
    assert verdict.ranks[2].problems[0].ranks[2] == "its node's launcher never started"
    assert attempt.status.reason.startswith("node 1 never started its launcher"), attempt.status.reason
    assert attempt.duration_s < 2 * JOIN_AFTER_S + 60 < 300, attempt.duration_s
    print(f"waited {found.waited_s:.1f}s, run {attempt.duration_s:.1f}s: {first.message}")
