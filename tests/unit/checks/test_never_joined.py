"""The never_joined check: ranks that never joined the process group, named from those that waited for them."""

from __future__ import annotations

from rollcall.checks.never_joined import NEVER_JOINED, STUCK_IN_SETUP, never_joined
from rollcall.checks.runview import RunView
from rollcall.evidence.clocks import Bounds
from rollcall.evidence.hangs import (
    PG_TIMEOUT_MARGIN_S,
    SETUP_WHERE,
    SPEAKS_FIRST_S,
    joining,
    stalled_for,
    stalls,
    stop_reason,
)
from rollcall.jobspec import HangBounds, JobSpec
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed, Owner
from rollcall_workload import contract
from rollcall_workload.rank.watchdog import encode_stack
from tests.unit.helpers import on_the_way, roll_heard, roll_of_lines, two_by_two

J = 10.0  # the runs' join bound; the start skew S is twice it
BOUNDS = Bounds(join_s=J, start_skew_s=2 * J, pg_timeout_s=300.0)

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
JOINING = [
    ["run.py", 116, "run", "acc.init_process_group(env)", True],
    ["dist.py", 121, "init_process_group", "dist.init_process_group(", True],
    ["/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 79, "wrapper", "", False],
    [C10D, 1520, "init_process_group", "store, rank, world_size = next(rendezvous_iterator)", False],
]
SLEEPING = [["run.py", 390, "_maybe_never_join", "time.sleep(3600)", True]]  # as it enters the join


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
    roll = roll_of_lines([_dump(1, SLEEPING, contract.JOIN_PHASE, 10.0), *_waited(0, 2, 3)])
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
    mixed = [(100.0, _dump(2, SLEEPING, contract.JOIN_PHASE, 10.0)), *timed]
    reason = stop_reason(roll_heard(mixed, 120.0), 4, BOUNDS)
    assert (
        reason is not None
        and "never joined (3 never heard from: stuck before the watchdog started)" in reason
    )


def test_ranks_of_a_node_on_its_way_are_not_named_and_their_skew_counts_from_its_arrival():
    """Ranks 0-1 wait at the join from T0 = 100; node 1's pod (ranks 2-3) waits for capacity or pulls its
    image until 400: no verdict while it is on its way, and S from the look that saw it arrived (410)."""
    roll = roll_heard([(100.0, line) for line in _waited(0, 1)])
    for t in range(100, 401, 20):
        on_the_way(roll, (float(t), {1}))
        assert stop_reason(roll, 4, BOUNDS, now=t + 19.9) is None
    on_the_way(roll, (410.0, set()))
    assert stop_reason(roll, 4, BOUNDS, now=429.9) is None  # A + S = 430
    reason = stop_reason(roll, 4, BOUNDS, now=430.0)
    assert reason is not None and reason.startswith("ranks 2, 3 never joined (never heard from")


def test_a_rank_whose_process_was_seen_gets_its_own_start_skew_and_join_bound_from_when_it_was_seen():
    """A rank importing from a cold filesystem says nothing, but its node's monitor saw its process: it may
    import and set up its device for up to S + J, past which its own dump says so first (m later)."""
    seen = contract.encode_event("rank_process", 3, 4, state="seen", pid=7, node_rank=1)
    timed = [
        (100.0, _dump(2, SLEEPING, contract.JOIN_PHASE, 10.0)),
        *[(100.0, line) for line in _waited(0, 1)],
        (115.0, seen),
    ]
    due = 115.0 + S + J + SPEAKS_FIRST_S  # seen at 115: S + J, and m for its own dump to come first
    assert stop_reason(roll_heard(timed, 120.0), 4, BOUNDS) is None
    assert stop_reason(roll_heard(timed, due - 0.1), 4, BOUNDS) is None
    reason = stop_reason(roll_heard(timed, due), 4, BOUNDS)
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
        Observed(roll_of_lines([_dump(1, SLEEPING, contract.JOIN_PHASE, 10.0)]), Layout(2, 2)), Criteria()
    )
    assert list(never_joined(quiet)) == []
    assert stop_reason(quiet.roll, 4, BOUNDS) is None
    assert list(never_joined(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []
    every = roll_of_lines(_waited(0, 1, 2, 3))  # all four wait: none is missing (the store host is elsewhere)
    assert list(never_joined(RunView(Observed(every, Layout(2, 2)), Criteria()))) == []


# ---------------------------------------------------------------- each rule at its edge (`make mutants`)


def test_a_rank_that_said_start_formed_the_group_and_only_the_worlds_ranks_wait_at_the_join():
    start = contract.encode_event("start", 1, 4, node_rank=0, host="n0")
    assert stop_reason(roll_of_lines([*_waited(0, 2, 3), start]), 4, BOUNDS) is None
    stray = _dump(4, JOINING, contract.JOIN_PHASE, 10.4)  # no rank of a world of 4
    sleeping = [_dump(r, SLEEPING, contract.JOIN_PHASE, 10.0) for r in range(4)]
    from rollcall.evidence.hangs import never_joined as find

    assert find(roll_of_lines([stray, *sleeping]), 4, BOUNDS) is None


def test_never_joined_is_judged_at_the_moment_given_and_the_suites_clock_may_start_at_zero():
    """The runner asks while the run goes on (``now``), the judge after it (when it ended); the suite's clock
    is any monotonic clock: a first line read at 0.0 is T0 = 0.0."""
    from rollcall.evidence.hangs import never_joined as find

    timed = [(0.0, line) for line in _waited(0, 1)]
    roll = roll_heard(timed, ended=500.0)
    assert find(roll, 4, BOUNDS, now=19.9) is None and stop_reason(roll, 4, BOUNDS, now=19.9) is None
    found = find(roll, 4, BOUNDS, now=20.0)
    assert found is not None and found.missing == (2, 3) and found.waited_s == 10.5
    unstamped = [encode_stack(r, 4, JOINING, dump=1, thread="MainThread", main=True, phase=contract.JOIN_PHASE)
                 for r in (0, 1)]  # fmt: skip
    found = find(roll_heard([(0.0, line) for line in unstamped], ended=500.0), 4, BOUNDS)
    assert found is not None and found.waited_s is None


def test_the_groups_timeout_counts_from_the_first_rank_heard_not_the_first_launcher():
    launcher = contract.encode_event("launcher", -1, -1, state="started", node_rank=0, node="n0", pid=9)
    timed = [(0.0, launcher), *[(100.0, line) for line in _waited(0, 1, 2, 3)]]
    limit = 100.0 + BOUNDS.pg_timeout_s + PG_TIMEOUT_MARGIN_S
    assert stop_reason(roll_heard(timed), 4, BOUNDS, now=limit - 0.1) is None
    assert stop_reason(roll_heard(timed, ended=limit - 0.1), 4, BOUNDS) is None
    assert stop_reason(roll_heard(timed, ended=limit), 4, BOUNDS) is not None


def test_a_hung_rank_and_a_silent_one_are_both_named_in_the_reason_to_end():
    hung = _dump(0, SLEEPING, "epoch 1 end", 61.0)
    waiting = [_dump(r, [[C10D, 9, "barrier", "work.wait()", False]], "epoch 1 end", 61.0) for r in (1, 2)]
    silent = contract.encode_event(
        "silent", 3, 4, phase="epoch 1 end", stalled_s=70.0, heartbeat_s=66.0, hang_after=60.0, state="T",
        state_name="stopped",
    )  # fmt: skip
    start = [contract.encode_event("start", r, 4, node_rank=r // 2, host="n") for r in range(4)]
    assert stop_reason(roll_of_lines([*start, hung, *waiting, silent]), 4, BOUNDS) == (
        "rank(s) 0 hung, rank(s) 3 silent (process stopped), every other rank waited past its --hang-after: "
        "ended at the hang"
    )


def test_a_rank_that_said_start_and_stalled_after_it_formed_the_group_whatever_the_others_last_dumps_say():
    from rollcall.evidence.hangs import never_joined as find

    start = contract.encode_event("start", 1, 4, node_rank=0, host="n0")
    stalled = _dump(1, SLEEPING, "epoch 1 end", 61.0)
    assert find(roll_of_lines([*_waited(0, 2, 3), start, stalled]), 4, BOUNDS) is None


# ---------------------------------------------------------------- the imports and device setup before the join

S = BOUNDS.start_skew_s
#: A rank's own bound in its imports and device setup: S + J from its process's start.
SETUP = S + J
#: A rank importing torch_xla as it sets up its device (torch.distributed's frames are an import's, no collective).
IMPORTING = [
    ["rank/run.py", 131, "run", "acc = Accelerator(device, env.local_rank, args.dist_backend)", True],
    ["rank/dist.py", 86, "__init__", "import torch_xla.distributed.xla_backend", True],
    ["/venv/lib/python3.11/site-packages/torch/distributed/__init__.py", 3, "<module>", "import os", False],
    ["<frozen importlib._bootstrap_external>", 1132, "get_data", "", False],
]


def _setup(rank: int, stalled: float) -> bytes:
    return encode_stack(rank, 4, IMPORTING, dump=1, thread="MainThread", main=True, phase=contract.SETUP_PHASE,
                        stalled_s=stalled, hang_after=min(stalled, SETUP))  # fmt: skip


def _spec_run(lines: list[bytes]) -> RunView:
    """A run judged with its spec's bounds (J = 10 s, S = 20 s), as the runner's own."""
    spec = JobSpec(name="t", nodes=2, procs_per_node=2, accelerator="cpu",
                   hang_bounds=HangBounds(join_hang_after_s=J, start_skew_s=S, pg_timeout_s=300.0))  # fmt: skip
    return RunView(Observed(roll_of_lines(lines), Layout(2, 2), spec=spec), Criteria())


def test_a_rank_still_importing_within_the_start_skew_is_not_named_though_the_others_waited_past_j():
    """Rank 1 dumped in its imports and device setup after J (a workload whose bound there was the join's):
    it may still be importing within S + J, so nothing is named and the job goes on; ranks 0, 2-3 only wait."""
    lines = [_setup(1, J + 0.5), *_waited(0, 2, 3)]
    assert list(never_joined(_spec_run(lines))) == []
    assert stop_reason(roll_of_lines(lines), 4, BOUNDS) is None
    stall = stalls(roll_of_lines(lines).ranks)[1]
    assert not stall.waiting and stall.where == SETUP_WHERE  # a torch.distributed import is no collective
    assert "(--start-skew + --join-hang-after 10.5s, phase imports and device setup)" in stalled_for(
        stall.dump
    )


def test_a_rank_still_importing_past_the_start_skew_is_named_stuck_in_its_setup_the_clusters():
    lines = [_setup(1, S), *_waited(0, 2, 3)]
    assert list(never_joined(_spec_run(lines))) == []  # S alone: it may still be within S + J
    lines = [_setup(1, SETUP), *_waited(0, 2, 3)]
    (problem,) = never_joined(_spec_run(lines))
    assert problem.kind is STUCK_IN_SETUP and set(problem.ranks) == {1}
    assert problem.message == (
        "rank 1 (node 0) never joined (still importing and setting up its device after 30s, past --start-skew "
        "+ --join-hang-after 30s); ranks 0, 2-3 waited 11s in init_process_group"
    )
    assert STUCK_IN_SETUP.owner is not None and STUCK_IN_SETUP.owner.owner is Owner.CLUSTER
    verdict = judge(Observed(roll_of_lines(lines), Layout(2, 2), spec=_spec_run(lines).observed.spec))
    first = verdict.findings[0]
    assert first.kind is STUCK_IN_SETUP and first.blame is not None and first.blame.owner is Owner.CLUSTER
    reason = stop_reason(roll_of_lines(lines), 4, BOUNDS)
    assert reason is not None and reason.endswith(
        "ended at the start skew and the join bound (--start-skew + --join-hang-after)"
    )


def test_a_rank_stuck_in_its_setup_and_one_that_never_joined_are_two_problems_each_with_its_owner():
    sleeping = _dump(3, SLEEPING, contract.JOIN_PHASE, 10.5)  # entered the join, never called it
    (setup, other) = never_joined(_spec_run([_setup(1, SETUP + 3), *_waited(0, 2), sleeping]))
    assert (setup.kind, set(setup.ranks)) == (STUCK_IN_SETUP, {1})
    assert (other.kind, set(other.ranks)) == (NEVER_JOINED, {3})
    assert setup.message.startswith("rank 1 (node 0) never joined (still importing and setting up its device")
    assert other.message == "rank 3 (node 1) never joined; ranks 0, 2 waited 11s in init_process_group"
