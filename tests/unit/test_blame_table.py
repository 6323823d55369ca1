"""The table of real errors (rollcall.checks.error_texts): each placed by its own rule, through the judge.

Every error of the table is written into a rank's log as the workload writes it when an exception ends the
rank (``rollcall_workload/main.py``: the traceback on the log, then the ``error`` event ``Type: text``), the
roll call judged whole, and the root cause's owner and why are the rule's: the first rule that matches is the
one the error is listed under, so a rule moved, widened or narrowed shows here by the error it misplaces. An
error that echoes another rank's failure is placed by that failure: alone, it is undetermined.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks import error_texts
from rollcall.checks.blame import error_blame
from rollcall.checks.error_texts import ERROR_RULES, UNPLACED, Rule, Said
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.evidence.rootcause import is_echo
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Blame, Layout, Observed, Owner
from tests.unit.helpers import event, node_log

ROOT = Path(__file__).resolve().parents[2]
ROWS = [pytest.param(rule, said, id=f"{n}.{i}") for n, rule in enumerate(ERROR_RULES, 1)
        for i, said in enumerate(rule.said, 1)]  # fmt: skip

#: The qualified names Python prints an exception's type by on the last line of its traceback.
QUALIFIED = {
    "AcceleratorError": "torch.AcceleratorError",
    "OutOfMemoryError": "torch.OutOfMemoryError",
    "DistBackendError": "torch.distributed.DistBackendError",
    "DistNetworkError": "torch.distributed.DistNetworkError",
    "DistStoreError": "torch.distributed.DistStoreError",
    "BackendCompilerFailed": "torch._dynamo.exc.BackendCompilerFailed",
}


def first_rule(message: str) -> Rule | None:
    return next((r for r in ERROR_RULES if re.search(r.pattern, message, re.IGNORECASE)), None)


def failed_run(said: Said) -> RollCall:
    """Rank 1 of two on one node ends with ``said``: its traceback on the log, then its ``error`` event."""
    last = f"{QUALIFIED.get(said.raised, said.raised)}: {said.text}" if said.raised else said.text
    traceback = [
        "Traceback (most recent call last):",
        '  File "/opt/rollcall/rollcall_workload/main.py", line 49, in main',
        "    record(run)(args, env, log)",
        '  File "/opt/rollcall/rollcall_workload/rank/run.py", line 230, in run',
        "    loss = trainer.step(batch)",
        *last.splitlines(),
    ]
    roll = RollCall()
    log = roll.parser("pod-0")
    log.feed(node_log(0, 1, 2, skip={1: ("throughput", "complete")}).encode())
    lines = [f"[1]:{line}" for line in traceback] + [event("error", 1, 2, message=said.message, time=1.0)]
    log.feed(("\n".join(lines) + "\n").encode())
    log.close()
    return roll


def placed(said: Said) -> Blame:
    verdict = judge(Observed(failed_run(said), Layout(1, 2), JobStatus(JobState.FAILED, "rank 1 failed")))
    root = verdict.findings[0]
    assert root.kind is ROOT_CAUSE and set(root.ranks) == {1} and root.blame is not None
    assert verdict.unfit_nodes == []  # an error's words never name a node unfit
    return root.blame


@pytest.mark.parametrize(("rule", "said"), ROWS)
def test_each_real_error_is_placed_by_the_rule_it_is_listed_under(rule, said):
    assert first_rule(said.message) is rule
    assert error_blame(said.message) == Blame(rule.owner, rule.why)


@pytest.mark.parametrize(("rule", "said"), ROWS)
def test_each_real_error_in_a_ranks_log_has_its_rules_owner_or_is_an_echo(rule, said):
    if is_echo(said.message):
        assert placed(said) == Blame(Owner.UNDETERMINED, "an echo of another rank's failure")
    else:
        assert placed(said) == Blame(rule.owner, rule.why)


@pytest.mark.parametrize("said", UNPLACED, ids=lambda s: s.text[:30])
def test_a_real_error_no_rule_places_is_undetermined(said):
    assert first_rule(said.message) is None
    assert placed(said) == Blame(Owner.UNDETERMINED, "no rule places this error")


#: Which errors of the table read as echoes of another rank's failure (placed by the failure they follow).
ECHOES = {
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer",
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error [10.0.0.2]:3303: "
    "Connection reset by peer",
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting",
    "DistStoreError: Timed out after 901 seconds waiting for clients.",
    "DistStoreError: wait timeout after 600000ms",
    "DistNetworkError: Connection reset by peer",
    "DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout",
    "DistBackendError: NCCL communicator was aborted on rank 1.",
    "DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote "
    "process exited",
}


def test_the_echoes_of_the_table_are_the_ones_it_says():
    said = [s for r in ERROR_RULES for s in r.said]
    echoes = {
        prefix for prefix in ECHOES for s in said if s.message.startswith(prefix) and is_echo(s.message)
    }
    assert echoes == ECHOES
    assert sum(is_echo(s.message) for s in said) == len(ECHOES)


def test_every_rule_places_a_real_error_and_each_error_is_listed_once():
    assert all(r.said and r.why and r.pattern for r in ERROR_RULES)
    messages = [s.message for r in ERROR_RULES for s in r.said] + [s.message for s in UNPLACED]
    assert len(messages) == len(set(messages))
    assert all(s.source for r in ERROR_RULES for s in r.said)
    assert {r.owner for r in ERROR_RULES} == set(Owner)


@pytest.mark.parametrize(
    ("message", "owner"),
    [
        # the network's words in another's error: the workload's own (the network rule read 'gloo', 'nccl',
        # 'timed out'), a CUDA error's, the image's
        ("ValueError: invalid backend 'gloo'", Owner.WORKLOAD),
        ("TimeoutError: DataLoader timed out after 120 seconds", Owner.WORKLOAD),
        ("invalid command line: --dist-backend nccl is for --device cuda (cpu uses gloo, xla xla)", Owner.WORKLOAD),
        ("AcceleratorError: CUDA error: wait operation timed out", Owner.UNDETERMINED),
        ("RuntimeError: Distributed package doesn't have NCCL built in", Owner.PLATFORM),
        # and the hardware's words are the hardware's
        ("AcceleratorError: CUDA error: uncorrectable NVLink error detected during the execution", Owner.CLUSTER),
    ],
)  # fmt: skip
def test_the_network_rule_reads_no_other_causes_words(message, owner):
    assert error_blame(message).owner is owner


def test_docs_blame_md_is_what_the_table_generates():
    assert (ROOT / "docs" / "blame.md").read_text() == error_texts.markdown(), (
        f"regenerate: {error_texts.REGENERATE}"
    )


def test_the_generator_refuses_another_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "rollcall.checks.error_texts", "--html"], capture_output=True, text=True
    )
    assert done.returncode == 4 and "--html" in done.stderr and error_texts.REGENERATE in done.stderr


def test_a_watchdog_that_ended_on_its_own_gpus_error_is_that_ranks_own_failure_not_an_echo():
    """The watchdog's thread ends with the exception it met: a CUDA error of the rank's own GPU is the rank's
    own failure, named first ahead of the others' timeouts; a timeout it carries is an echo."""
    own = (
        "RuntimeError: [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with "
        "exception: CUDA error: unspecified launch failure"
    )
    timeout = (
        "DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated "
        "with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600085 milliseconds before timing out."
    )
    assert not is_echo(own) and is_echo(timeout)
    roll = RollCall()
    log = roll.parser("pod-0")
    log.feed(node_log(0, 1, 2, skip={0: ("throughput", "complete"), 1: ("throughput", "complete")}).encode())
    errors = [event("error", 0, 2, message=timeout, time=1.0), event("error", 1, 2, message=own, time=2.0)]
    log.feed(("\n".join(errors) + "\n").encode())
    log.close()
    verdict = judge(Observed(roll, Layout(1, 2), JobStatus(JobState.FAILED, "rank 1 failed")))
    root = verdict.findings[0]
    assert root.kind is ROOT_CAUSE and root.message.startswith(
        "first failure: rank 1 (node 0) reported an error"
    )
    assert root.blame == Blame(Owner.UNDETERMINED, "the GPU stopped a kernel (the kernel or the GPU)")
