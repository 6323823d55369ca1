"""The collective a hung rank skipped, named from torch.distributed's flight recorder: local backend, 2 x 2, gloo.

``ROLLCALL_SKIP_COLLECTIVE`` makes every rank run one more collective after its first epoch but the rank it
names, which goes on. With ``--hang-after 5`` every rank's watchdog dumps its stacks and its flight record;
the suite aligns the records by sequence number and names the rank that parted from the others, where its
stack alone cannot (it waits in DDP's backward, or in a barrier like the rest).

torch's own analyser (``fr_trace``) is run as the suite's line says, over the whole dumps in the artifacts
directory, and must name the same rank at the same collective. torch 2.11's analyser refuses an entry of any
backend but nccl and xccl (``name formatting error? gloo != 'nccl' or 'xccl'``): the test pins that refusal,
then runs the analyser with gloo's entries typed as NCCL's (its barrier as NCCL's ``all_reduce_barrier``), the
dumps and the names it prints unchanged.
"""

from __future__ import annotations

import json
import pickle
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.checks.hangs import GLOO_ANALYSIS, HUNG, WAITING
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


#: torch's analyser with gloo's entries typed as NCCL's, as a torch whose analyser reads gloo's would: only the
#: type it checks an op by is read so, the entry and the name it prints are gloo's own.
GLOO_AS_NCCL = """
import sys
from torch.distributed.flight_recorder import fr_trace
from torch.distributed.flight_recorder.components import types
init = types.Op.__init__
def typed(self, event, memberships, pg_name):
    name = event["profiling_name"]
    nccl = "nccl:all_reduce_barrier" if name == "gloo:barrier" else name.replace("gloo:", "nccl:", 1)
    init(self, {**event, "profiling_name": nccl}, memberships, pg_name)
    self.profiling_name = name
types.Op.__init__ = typed
fr_trace.main(sys.argv[1:])
"""


def _analysis(message):
    """torch's analyser run as the line says, as it is and then reading gloo's entries: its findings.

    Each finding: (sequence number, group, the ranks it names: the missing ones, or the culprits).
    """
    (command,) = re.findall(r"torch's analysis of the whole dumps(?: \(.*?\))?: (python -m \S+ .*)$", message)
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "torch.distributed.flight_recorder.fr_trace"], command
    plain = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=120)
    assert plain.returncode != 0 and "name formatting error? gloo != 'nccl' or 'xccl'" in plain.stderr, (
        "torch's analyser changed what it reads of gloo's dumps: update docs/hangs.md and this test\n"
        + plain.stderr[-2000:]
    )
    typed = subprocess.run(
        [sys.executable, "-c", GLOO_AS_NCCL, *argv[3:]], capture_output=True, text=True, timeout=120
    )
    assert typed.returncode == 0, typed.stderr[-4000:]
    findings = []
    for block in re.split(r"\n(?=Not all ranks joining collective|Collective sequence number)", typed.stderr):
        seq = re.search(r"(?:sequence number: |Collective sequence number: )(\d+)", block)
        group = re.search(r"^group info: (\S+)$", block, re.M)
        missing = re.search(r"^missing ranks: \{([\d, ]+)\}$", block, re.M)
        culprits = re.findall(r"Culprit rank (\d+);", block)
        if seq and group:
            named = {int(r) for r in missing[1].split(",")} if missing else {int(r) for r in culprits}
            findings.append((int(seq[1]), group[1], named))
    return findings


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
    assert {r: rec["file"] for r, rec in records.items()} == {
        r: str(tmp_path / f"node-{r // 2}-monitor" / "flight" / f"stall-1-rank-{r}") for r in range(4)
    }
    whole = pickle.loads(Path(records[1]["file"]).read_bytes())  # PyTorch's own dump, whole
    assert any(e["collective_seq_id"] == int(m[2]) for e in whole["entries"])
    assert hung.message.endswith(
        f"; torch's analysis of the whole dumps{GLOO_ANALYSIS}: python -m torch.distributed.flight_recorder.fr_trace "
        f"{tmp_path} --prefix stall-1-rank-"
    ), hung.message
    assert _analysis(hung.message)[0] == (int(m[2]), "0:default_pg", {1})  # rank 1 entered another op there


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
    assert _analysis(hung.message)[0] == (1, "1:rollcall_fault", {2})  # rank 2 never joined all_reduce #1
