"""The collective a hung rank skipped, named from torch.distributed's flight recorder: local backend, 2 x 2, gloo.

``ROLLCALL_SKIP_COLLECTIVE`` makes every rank run one more collective after its first epoch but the rank it
names, which goes on. With ``--hang-after 5`` every rank's watchdog dumps its stacks and its flight record;
the suite aligns the records by sequence number and names the rank that parted from the others, where its
stack alone cannot (it waits in DDP's backward, or in a barrier like the rest).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.jobspec import JobSpec
from rollcall.runner import run_once
from tests.local.e2e import COMPACT

FAST = ("--warmup-steps", "1", "--epochs", "2", "--steps-per-epoch", "2", "--hang-after", "5", *COMPACT)


def _run(tmp_path, name, env):
    spec = JobSpec(
        name=name,
        nodes=2,
        procs_per_node=2,
        accelerator="cpu",
        workload_args=FAST,
        env=env,
        job_timeout_s=600,
        rdzv_timeout_s=60,
    )
    attempt = run_once(LocalBackend(), spec, tmp_path)
    assert attempt.status.state is JobState.STOPPED, attempt.verdict.message()
    return attempt.verdict


def _records(tmp_path):
    said = [
        json.loads(line.split(" ", 1)[1])
        for log in sorted(tmp_path.glob("node-*.log"))
        for line in log.read_text().splitlines()
        if '"event":"collectives"' in line
    ]
    return {r["rank"]: r for r in said}


@pytest.mark.parametrize("op", ["barrier", "all_reduce"])
def test_a_rank_that_skipped_a_collective_under_ddp_is_named_from_the_records_not_its_backward(tmp_path, op):
    """Rank 1's next collective after the skip is one the others entered as something else: its stack is in
    DDP's backward (it could be computing), the records show it went on without them."""
    verdict = _run(tmp_path, f"skip-{op.replace('_', '-')}", {"ROLLCALL_SKIP_COLLECTIVE": f"1:{op}"})
    (hung,) = verdict.of_kind(HUNG)
    assert set(hung.ranks) == {1}, verdict.message()
    pattern = (
        r"rank 1 \(node 0, log node-0\) entered (\w+) as #(\d+) of the default group, where ranks 0, 2-3 "
        r"\(nodes 0-1\) entered (\w+) and wait in it \(flight recorder\); its stack: "
    )
    assert (m := re.match(pattern, hung.message)), hung.message
    assert m[1] != m[3], hung.message
    (waiting,) = verdict.of_kind(WAITING)
    assert (
        waiting.message
        == f"ranks 0, 2-3 waiting in {m[3]} #{m[2]} of the default group for rank 1 (flight recorder)"
    )
    records = _records(tmp_path)
    assert sorted(records) == [0, 1, 2, 3] and all(
        r["file"].endswith(".flight.json") for r in records.values()
    )
    whole = json.loads(
        Path(records[1]["file"]).read_text()
    )  # PyTorch's own dump, whole, in the node's directory
    assert any(e["collective_seq_id"] == int(m[2]) for e in whole["entries"])


def test_a_skip_in_another_group_with_a_wrapped_buffer_names_the_rank_and_the_group(tmp_path):
    """Rank 2 skips an all_reduce of a second group and waits in the default group's next barrier, like the
    others' stacks in the second group: only the records tell it apart, from a ring buffer of 8 entries that
    wrapped long before."""
    env = {"ROLLCALL_SKIP_COLLECTIVE": "2:all_reduce:fault", "TORCH_FR_BUFFER_SIZE": "8"}
    verdict = _run(tmp_path, "skip-fault-group", env)
    (hung,) = verdict.of_kind(HUNG)
    assert hung.message.startswith(
        "rank 2 (node 1, log node-1) never entered all_reduce #1 of group 1 (rollcall_fault), which ranks 0-1, 3 "
        "(nodes 0-1) entered and wait in (flight recorder); its stack: barrier"
    ), verdict.message()
    records = _records(tmp_path)
    assert all(r["wrapped"] and r["entries"] == 8 for r in records.values()), records
