"""The never_joined check: ranks that never joined the process group, named from those that waited for them."""

from __future__ import annotations

from rollcall.checks.never_joined import NEVER_JOINED, never_joined
from rollcall.checks.runview import RunView
from rollcall.evidence.clocks import Bounds
from rollcall.evidence.hangs import PG_TIMEOUT_MARGIN_S, joining, stop_reason
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank.watchdog import encode_stack
from tests.unit.helpers import roll_heard, roll_of_lines, two_by_two

J = 10.0  # the runs' join bound; the start skew S is twice it
BOUNDS = Bounds(join_s=J, start_skew_s=2 * J, pg_timeout_s=300.0)

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
    assert stop_reason(roll, 4, BOUNDS) == (
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


def _run(timed, ended: float) -> RunView:
    roll = roll_heard(timed, ended)
    return RunView(Observed(roll, Layout(2, 2)), Criteria())


def test_ranks_never_heard_from_while_the_others_wait_at_the_join_never_joined_at_the_start_skew():
    """Ranks 0-1 were first heard at T0 = 100 and wait in init_process_group; ranks 2-3 never said a word.
    They may be late (a node started later, a slow image pull): they are named only at T0 + S, and the job
    ends then, not at the job timeout."""
    timed = [(100.0, line) for line in _waited(0, 1)]
    early = _run(timed, 119.9)
    assert list(never_joined(early)) == [] and stop_reason(early.roll, 4, BOUNDS) is None
    # the check reads the run's own bounds: without a spec (saved logs), the defaults, S = 120 s
    assert list(never_joined(_run(timed, 219.9))) == []
    (problem,) = never_joined(_run(timed, 220.0))
    assert set(problem.ranks) == {2, 3}
    assert stop_reason(roll_heard(timed, 120.0), 4, BOUNDS) == (
        "ranks 2, 3 never joined (never heard from: stuck before the watchdog started); ranks 0-1 waited 10s "
        "in init_process_group: ended at the join bound (--join-hang-after)"
    )
    # one heard from (stalled before the join), one not: both named, the unheard one said so
    mixed = [(100.0, _dump(2, SLEEPING, contract.START_PHASE, 10.0)), *timed]
    reason = stop_reason(roll_heard(mixed, 120.0), 4, BOUNDS)
    assert (
        reason is not None
        and "never joined (3 never heard from: stuck before the watchdog started)" in reason
    )


def test_a_rank_whose_process_was_seen_gets_its_own_start_skew_and_join_bound_from_when_it_was_seen():
    """A rank importing from a cold filesystem says nothing, but its node's monitor saw its process: it may
    import for up to S, then wait at the join for J before its first dump."""
    seen = contract.encode_event("rank_process", 3, 4, state="seen", pid=7, node_rank=1)
    timed = [
        (100.0, _dump(2, SLEEPING, contract.START_PHASE, 10.0)),
        *[(100.0, line) for line in _waited(0, 1)],
        (115.0, seen),
    ]
    assert stop_reason(roll_heard(timed, 120.0), 4, BOUNDS) is None  # seen at 115: its bound runs to 145
    assert stop_reason(roll_heard(timed, 144.9), 4, BOUNDS) is None
    reason = stop_reason(roll_heard(timed, 145.0), 4, BOUNDS)
    assert reason is not None and reason.startswith(
        "ranks 2, 3 never joined (3 its process seen, never a word: stuck before the watchdog started)"
    )


def test_every_rank_inside_init_process_group_is_joining_not_hung_until_the_groups_timeout():
    """Slow NCCL initialisation or a TCPStore fan-in at scale: none missing, all waiting in the join."""
    timed = [(100.0, line) for line in _waited(0, 1, 2, 3)]
    assert joining(roll_heard(timed), 4)
    assert list(never_joined(_run(timed, 100_000.0))) == []
    limit = 100.0 + BOUNDS.pg_timeout_s + PG_TIMEOUT_MARGIN_S
    assert stop_reason(roll_heard(timed), 4, BOUNDS, now=limit - 0.1) is None
    assert stop_reason(roll_heard(timed), 4, BOUNDS, now=limit) == (
        "every rank waited in init_process_group past the process group's timeout (--pg-timeout 300s) and a "
        "minute more: the group never formed"
    )


def test_nothing_is_said_while_a_rank_heard_from_still_moves_or_once_the_group_formed():
    # rank 1 said something but is neither stalled nor silent: it may still join
    roll = roll_of_lines([*_waited(0, 2, 3), contract.encode_event("resumed", 1, 4, dump=1)])
    run = RunView(Observed(roll, Layout(2, 2)), Criteria())
    assert list(never_joined(run)) == []
    assert stop_reason(run.roll, 4, BOUNDS) is None
    # nobody waits at the join yet: a rank unheard may not have started
    quiet = RunView(
        Observed(roll_of_lines([_dump(1, SLEEPING, contract.START_PHASE, 10.0)]), Layout(2, 2)), Criteria()
    )
    assert list(never_joined(quiet)) == []
    assert stop_reason(quiet.roll, 4, BOUNDS) is None
    assert list(never_joined(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []
    every = roll_of_lines(_waited(0, 1, 2, 3))  # all four wait: none is missing (the store host is elsewhere)
    assert list(never_joined(RunView(Observed(every, Layout(2, 2)), Criteria()))) == []
