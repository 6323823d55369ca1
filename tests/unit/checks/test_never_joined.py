"""The never_joined check: ranks that never joined the process group, named from those that waited for them."""

from __future__ import annotations

from rollcall.checks.never_joined import NEVER_JOINED, never_joined
from rollcall.checks.runview import RunView
from rollcall.evidence.hangs import stop_reason
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank.watchdog import encode_stack
from tests.unit.helpers import roll_of_lines, two_by_two

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
JOINING = [
    ["run.py", 116, "run", "acc.init_process_group(env)", True],
    ["dist.py", 121, "init_process_group", "dist.init_process_group(", True],
    ["/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 79, "wrapper", "", False],
    [C10D, 1520, "init_process_group", "store, rank, world_size = next(rendezvous_iterator)", False],
]
SLEEPING = [["run.py", 390, "_maybe_never_join", "time.sleep(3600)", True]]


def _dump(rank: int, frames: list, phase: str, stalled: float) -> bytes:
    return encode_stack(
        rank,
        4,
        frames,
        dump=1,
        thread="MainThread",
        main=True,
        phase=phase,
        stalled_s=stalled,
        hang_after=10.0,
    )


def _waited(*ranks: int) -> list[bytes]:
    return [_dump(r, JOINING, contract.JOIN_PHASE, 10.4 + r / 10) for r in ranks]


def test_the_rank_that_never_joined_is_named_with_its_node_and_how_long_the_others_waited():
    roll = roll_of_lines([_dump(1, SLEEPING, contract.START_PHASE, 10.0), *_waited(0, 2, 3)])
    (problem,) = never_joined(RunView(Observed(roll, Layout(2, 2)), Criteria()))
    assert problem.kind is NEVER_JOINED and set(problem.ranks) == {1}
    assert problem.message == "rank 1 (node 0) never joined; ranks 0, 2-3 waited 11s in init_process_group"
    verdict = judge(Observed(roll, Layout(2, 2)))
    assert verdict.findings[0].kind is NEVER_JOINED
    assert stop_reason(roll.ranks, 4) == (
        "rank 1 never joined; ranks 0, 2-3 waited 11s in init_process_group: ended at the join bound "
        "(--join-hang-after)"
    )


def test_a_silent_rank_before_the_join_never_joined_either():
    stopped = contract.encode_event(
        "silent",
        3,
        4,
        phase=contract.JOIN_PHASE,
        stalled_s=16.0,
        heartbeat_s=15.5,
        hang_after=10.0,
        state="T",
    )
    roll = roll_of_lines([stopped, *_waited(0, 1, 2)])
    (problem,) = never_joined(RunView(Observed(roll, Layout(2, 2)), Criteria()))
    assert problem.message == "rank 3 (node 1) never joined; ranks 0-2 waited 11s in init_process_group"


def _waited_twice(*ranks: int) -> list[bytes]:
    """The waiting ranks' second dumps: they have waited twice their 10 s bound."""
    return [_dump(r, JOINING, contract.JOIN_PHASE, 20.4 + r / 10) for r in ranks]


def test_ranks_never_heard_from_while_the_others_wait_at_the_join_never_joined():
    """Ranks wait in init_process_group only once every launcher has joined the launchers' rendezvous, and
    no rank is spawned before that: a rank still unheard when the others have waited twice their bound is
    stuck before its watchdog (a node frozen as it began), not late. It is named, and the job ends then, not
    at the job timeout; after one bound only, a rank whose first dump merely comes later is waited for."""
    early = RunView(Observed(roll_of_lines(_waited(0, 1)), Layout(2, 2)), Criteria())
    assert list(never_joined(early)) == [] and stop_reason(early.reports, 4) is None
    run = RunView(Observed(roll_of_lines(_waited_twice(0, 1)), Layout(2, 2)), Criteria())
    (problem,) = never_joined(run)
    assert set(problem.ranks) == {2, 3}
    assert problem.message == (
        "ranks 2 (node 1), 3 (node 1) never joined (never heard from: stuck before the watchdog started); "
        "ranks 0-1 waited 20s in init_process_group"
    )
    assert stop_reason(run.reports, 4) == (
        "ranks 2, 3 never joined (never heard from: stuck before the watchdog started); ranks 0-1 waited 20s "
        "in init_process_group: ended at the join bound (--join-hang-after)"
    )
    # one heard from (stalled before the join), one not: both named, the unheard one said so
    mixed = roll_of_lines([_dump(2, SLEEPING, contract.START_PHASE, 10.0), *_waited_twice(0, 1)])
    (problem,) = never_joined(RunView(Observed(mixed, Layout(2, 2)), Criteria()))
    assert set(problem.ranks) == {2, 3}
    assert "never joined (3 never heard from: stuck before the watchdog started)" in problem.message


def test_nothing_is_said_while_a_rank_heard_from_still_moves_or_once_the_group_formed():
    # rank 1 said something but is neither stalled nor silent: it may still join
    roll = roll_of_lines([*_waited(0, 2, 3), contract.encode_event("resumed", 1, 4, dump=1)])
    run = RunView(Observed(roll, Layout(2, 2)), Criteria())
    assert list(never_joined(run)) == []
    assert stop_reason(run.reports, 4) is None
    # nobody waits at the join yet: a rank unheard may not have started
    quiet = RunView(
        Observed(roll_of_lines([_dump(1, SLEEPING, contract.START_PHASE, 10.0)]), Layout(2, 2)), Criteria()
    )
    assert list(never_joined(quiet)) == []
    assert stop_reason(quiet.reports, 4) is None
    assert list(never_joined(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []
    every = roll_of_lines(_waited(0, 1, 2, 3))  # all four wait: none is missing (the store host is elsewhere)
    assert list(never_joined(RunView(Observed(every, Layout(2, 2)), Criteria()))) == []
