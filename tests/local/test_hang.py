"""A hung rank named from its stack, and the job ended at the hang: local backend, 2 nodes x 2 ranks, real torchrun.

``ROLLCALL_HANG_RANK=1`` makes rank 1 sleep after its first epoch; the others wait for it in the next epoch's
barrier. With ``--hang-after 5`` every rank's watchdog dumps its stacks about 5 s after its last step, and the
suite ends the job once all four have: well before the job timeout, within twice ``--hang-after`` plus
clean-up of rank 1 going quiet.
"""

from __future__ import annotations

import os
import re
import threading
import time

from rollcall import procs
from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.jobspec import JobSpec
from rollcall.runner import Attempt, run_once
from tests.local.e2e import COMPACT
from tests.waiting import wait_until

HANG_AFTER_S = 5
#: Seconds the suite may take past twice --hang-after to end the job: its poll, SIGTERM's grace, the logs.
CLEAN_UP_S = 20
FAST = (
    "--warmup-steps",
    "1",
    "--epochs",
    "2",
    "--steps-per-epoch",
    "2",
    "--hang-after",
    str(HANG_AFTER_S),
    *COMPACT,
)


def test_a_hung_rank_is_named_where_it_sleeps_and_the_job_ends_at_the_hang(tmp_path):
    spec = JobSpec(
        name="hung-rank",
        nodes=2,
        procs_per_node=2,
        accelerator="cpu",
        workload_args=FAST,
        env={"ROLLCALL_HANG_RANK": "1"},
        job_timeout_s=600,
        rdzv_timeout_s=60,
    )
    ran: list[Attempt] = []
    runner = threading.Thread(
        target=lambda: ran.append(run_once(LocalBackend(), spec, tmp_path)), daemon=True
    )
    runner.start()
    log = tmp_path / "node-0.log"
    wait_until("rank 1 to hang", lambda: log.is_file() and "hangs as asked" in log.read_text(), timeout=300)
    hung_at = time.monotonic()
    runner.join(timeout=600)
    ended_after = time.monotonic() - hung_at
    (attempt,) = ran

    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    assert ended_after <= 2 * HANG_AFTER_S + CLEAN_UP_S, (ended_after, attempt.verdict.message())
    verdict = attempt.verdict
    first = verdict.findings[0]
    assert first.kind is HUNG and set(first.ranks) == {1}, verdict.message()
    assert first.message.startswith("rank 1 (node 0, log node-0) hung in a sleep, not in a collective")
    assert "in inject_fault: time.sleep(3600)" in first.message, first.message
    (waiting,) = verdict.of_kind(WAITING)
    # the flight records say which collective: rank 1 never entered the barrier the others wait in
    assert re.search(
        r"; it never entered barrier #(\d+) of the default group, which ranks 0, 2-3 \(nodes 0-1\) "
        r"entered and wait in \(flight recorder\); torch's analysis of the whole dumps \(PyTorch 2\.11's "
        r"fr_trace reads NCCL's and XCCL's dumps; a newer one is needed for gloo's\): "
        r"python -m torch\.distributed\.flight_recorder\.fr_trace \S+ --prefix stall-\d+-rank-"
        r"( --allow-incomplete-ranks)?$",
        first.message,
    ), first.message
    assert re.fullmatch(
        r"ranks 0, 2-3 waiting in barrier #\d+ of the default group for rank 1 \(flight recorder\)",
        waiting.message,
    ), verdict.message()
    assert not verdict.ranks[1].answered and "hung in a sleep" in verdict.ranks[1].notes[0]
    mine = f"{spec.name}-{os.getpid()}-"  # the local backend's run id; other runs may share this machine
    assert [pid for pid, rid in procs.marked().items() if rid.startswith(mine)] == []
