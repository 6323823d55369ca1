"""The interrupted check: a run the suite was interrupted in names each rank not done, as it stood then."""

from __future__ import annotations

from rollcall.backends import JobState, JobStatus
from rollcall.checks.blame import blame
from rollcall.checks.interrupted import INTERRUPTED, interrupted
from rollcall.checks.job_state import JOB
from rollcall.checks.runview import RunView
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed, Owner, RankState
from rollcall_workload.rank import watchdog as workload_watchdog
from tests.unit.helpers import node_log, roll_of, two_by_two

REASON = "interrupted by signal SIGTERM 42s after the launch, before the job ended"
SIGNALLED = JobStatus(JobState.INTERRUPTED, REASON)
#: The main thread of a rank in ``init_process_group``, as its watchdog writes it (outermost first).
IN_INIT = [
    ["/workspace/rollcall_workload/rank/run.py", 100, "run", "acc.init_process_group(env)", True],
    [
        "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
        1500,
        "init_process_group",
        "",
        False,
    ],
]


def waiting_in_init(rank: int) -> str:
    line = workload_watchdog.encode_stack(
        rank, 8, IN_INIT, dump=1, thread="MainThread", main=True, threads=1, phase="rendezvous",
        stalled_s=121.0, hang_after=120.0,
    )  # fmt: skip
    return f"[{rank % 2}]:" + line.decode()


def test_each_rank_not_done_is_named_with_where_it_stood_and_the_run_comes_first():
    # 4 nodes x 2: node 0 completed; node 1 started and trained an epoch; ranks 4-5 wait in
    # init_process_group (their watchdogs dumped); node 3 never said anything
    done = node_log(0, 4, 2)
    running = node_log(1, 4, 2, skip={2: ("throughput", "complete"), 3: ("throughput", "complete")})
    waiting = "".join(waiting_in_init(r) for r in (4, 5))
    roll = roll_of(done, running, waiting)
    verdict = judge(Observed(roll, Layout(4, 2), SIGNALLED))

    first = verdict.findings[0]
    assert first.kind is INTERRUPTED
    assert first.message == (
        f"run {REASON}: ranks 0-1 answered; ranks 4-5 waiting; ranks 2-3 running; ranks 6-7 not started"
    )
    assert first.ranks == {
        2: "running (2 epoch(s) done) when interrupted",
        3: "running (2 epoch(s) done) when interrupted",
        4: "waiting in a collective (init_process_group) when interrupted",
        5: "waiting in a collective (init_process_group) when interrupted",
        6: "not started (no start: not in the process group) when interrupted",
        7: "not started (no start: not in the process group) when interrupted",
    }
    assert first.blame is not None and first.blame.owner is Owner.UNDETERMINED
    assert not verdict.of_kind(JOB)  # the job's end is said once, by this problem
    states = {r: res.state for r, res in verdict.ranks.items()}
    assert {r for r, s in states.items() if s is RankState.MISSING} == {2, 3, 6, 7}
    assert {r for r, s in states.items() if s is RankState.WAITING} == {4, 5}  # a state of its own
    assert verdict.answered == 2


def test_the_predicate_names_nothing_of_a_run_that_was_not_interrupted():
    for status in (
        None,
        JobStatus(JobState.SUCCEEDED),
        JobStatus(JobState.FAILED, "x"),
        JobStatus(JobState.STOPPED, "hung"),
    ):
        assert list(interrupted(RunView(Observed(two_by_two(), Layout(2, 2), status), Criteria()))) == []
    # every rank had completed: the run is still interrupted (its verdict came after the signal), naming none
    [problem] = interrupted(RunView(Observed(two_by_two(), Layout(2, 2), SIGNALLED), Criteria()))
    assert problem.message == f"run {REASON}: ranks 0-3 answered" and problem.ranks == {}
    assert problem.detail is SIGNALLED and blame(problem).owner is Owner.UNDETERMINED


def test_a_rank_that_never_said_anything_in_a_world_of_one():
    [problem] = interrupted(RunView(Observed(roll_of(""), Layout(1, 1), SIGNALLED), Criteria()))
    assert problem.message == f"run {REASON}: rank 0 not started"
