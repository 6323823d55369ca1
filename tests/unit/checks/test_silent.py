"""The silent check: a rank the node's monitor found without heartbeat or progress, its process alive."""

from __future__ import annotations

from rollcall.checks.hangs import HUNG, WAITING
from rollcall.checks.runview import RunView
from rollcall.checks.silent import SILENT, silent
from rollcall.evidence.hangs import stop_reason
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed, Owner
from rollcall_workload import contract
from rollcall_workload.rank.watchdog import encode_stack
from tests.unit.helpers import roll_of_lines, two_by_two

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
BARRIER = [
    ["run.py", 230, "run", 'acc.barrier(f"rollcall-epoch-{epoch}")', True],
    [C10D, 4800, "barrier", "", False],
]


def _silent_line(rank: int, **fields) -> bytes:
    fields = {
        "phase": "epoch 1 end",
        "steps": 9,
        "stalled_s": 11.2,
        "heartbeat_s": 10.6,
        "hang_after": 5.0,
        "margin_s": 5.0,
        "pid": 4242,
        "state": "T",
        "state_name": "stopped",
        **fields,
    }
    return contract.encode_event("silent", rank, 4, **fields)


def _waiting(rank: int) -> bytes:
    return encode_stack(
        rank,
        4,
        BARRIER,
        dump=1,
        thread="MainThread",
        main=True,
        phase="epoch 2 barrier",
        stalled_s=6.0,
        hang_after=5.0,
    )


def _facts(roll: RollCall) -> RunView:
    return RunView(Observed(roll, Layout(2, 2)), Criteria())


def test_a_stopped_rank_is_named_silent_with_its_node_its_silence_and_its_process_state():
    roll = roll_of_lines([_silent_line(1), _waiting(0), _waiting(2), _waiting(3)])
    (problem,) = silent(_facts(roll))
    assert problem.kind is SILENT and set(problem.ranks) == {1}
    assert problem.message == (
        "rank 1 (node 0, pod node-0) silent: no heartbeat for 11s, no progress for 11s "
        "(--hang-after 5s + 5s margin, phase epoch 1 end); process 4242 is stopped (T)"
    )
    assert problem.ranks[1] == "silent: process stopped in epoch 1 end"


def test_a_rank_in_uninterruptible_sleep_says_so():
    roll = roll_of_lines([_silent_line(2, state="D", state_name="uninterruptible sleep")])
    (problem,) = silent(_facts(roll))
    assert problem.message.endswith("process 4242 is uninterruptible sleep (D)") and set(problem.ranks) == {2}


def test_a_sound_run_and_a_rank_that_came_back_are_not_silent():
    assert list(silent(_facts(two_by_two()))) == []
    back = contract.encode_event("resumed", 1, 4, dump=0, phase="epoch 2 barrier")
    assert list(silent(_facts(roll_of_lines([_silent_line(1), back])))) == []


def test_a_silent_rank_whose_stack_faulthandler_took_is_left_to_the_hangs_check():
    held = encode_stack(
        1,
        4,
        [["run.py", 379, "hold_the_gil", "libc.sleep(seconds)", True]],
        dump=1,
        thread="MainThread",
        main=True,
        phase="epoch 1 end",
        stalled_s=10.0,
        hang_after=5.0,
        source="faulthandler",
    )
    roll = roll_of_lines([held, _silent_line(1), _waiting(0), _waiting(2), _waiting(3)])
    assert list(silent(_facts(roll))) == []
    verdict = judge(Observed(roll, Layout(2, 2)))
    first = verdict.findings[0]
    assert first.kind is HUNG and set(first.ranks) == {1}
    assert "stack taken by faulthandler: no Python thread of the rank could run" in first.message


def test_the_job_ends_once_the_silent_rank_and_the_waiting_ones_account_for_every_open_rank():
    roll = roll_of_lines([_silent_line(1), _waiting(0), _waiting(2)])
    assert stop_reason(roll, 4) is None  # rank 3 has not waited its bound yet
    roll = roll_of_lines([_silent_line(1), _waiting(0), _waiting(2), _waiting(3)])
    assert stop_reason(roll, 4) == (
        "rank(s) 1 silent (process stopped), every other rank waited past its --hang-after: ended at the hang"
    )
    verdict = judge(Observed(roll, Layout(2, 2)))
    assert [p.kind for p in verdict.findings[:2]] == [SILENT, WAITING]
    assert verdict.findings[0].blame is not None and verdict.findings[0].blame.owner is Owner.CLUSTER
    assert verdict.findings[1].message == "ranks 0, 2-3 waiting in a collective (barrier) for the silent rank"


BACKWARD = [
    ["run.py", 300, "step", "loss.backward()", True],
    [
        "/venv/lib/python3.11/site-packages/torch/_tensor.py",
        625,
        "backward",
        "torch.autograd.backward(",
        False,
    ],
    [
        "/venv/lib/python3.11/site-packages/torch/autograd/__init__.py",
        354,
        "backward",
        "_engine_run_backward(",
        False,
    ],
]


def _in_backward(rank: int) -> bytes:
    return encode_stack(
        rank, 4, BACKWARD, dump=1, thread="MainThread", main=True, phase="epoch 2 step 3", stalled_s=11.0,
        hang_after=10.0,
    )  # fmt: skip


def test_ranks_stalled_in_backward_beside_silent_ones_are_not_named_hung_when_the_job_is_ended():
    """A frozen container (ranks 2-3 silent): ranks 0-1 stall in backward, where DDP's all-reduce waits for
    them. The stop reason names the silent ranks only, as the verdict does (tests/real's frozen container)."""
    roll = roll_of_lines([_in_backward(0), _in_backward(1), _silent_line(2), _silent_line(3)])
    assert stop_reason(roll, 4) == (
        "rank(s) 2-3 silent (process stopped), every other rank waited past its --hang-after: ended at the hang"
    )
    alone = roll_of_lines([_in_backward(0), _in_backward(1), _in_backward(2), _in_backward(3)])
    assert (stop_reason(alone, 4) or "").startswith("rank(s) 0-3 hung")  # no other culprit: they hang
