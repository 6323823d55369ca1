"""The never_started check: a node whose launcher never started, each node on its own clock.

Every time here is the suite's clock when it read the line (:mod:`rollcall.evidence.clocks`): T0 is when the
first part of the run was heard, S the start skew, J the join bound.
"""

from __future__ import annotations

from rollcall.checks.blame import blame
from rollcall.checks.never_started import NEVER_STARTED, never_started
from rollcall.checks.runview import RunView
from rollcall.evidence.clocks import Bounds, now_of
from rollcall.evidence.launchers import never_started as find
from rollcall.evidence.launchers import stop_reason
from rollcall.jobspec import HangBounds, JobSpec
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed, Owner
from rollcall_workload import contract
from tests.unit.helpers import on_the_way, roll_heard

J = 10.0  # the join bound of these runs: S, the start skew, is twice it
BOUNDS = Bounds(join_s=J, start_skew_s=2 * J)


def _launcher(node: int, state: str, waited: float, process: str = "S", held: float = 0.0) -> bytes:
    return contract.encode_event(
        "launcher",
        -1,
        -1,
        state=state,
        node_rank=node,
        node=f"n{node}",
        pid=100 + node,
        waited_s=waited,
        bound_s=J,
        process_state=process,
        process_state_name={"S": "sleeping", "T": "stopped", "D": "uninterruptible sleep"}[process],
        state_held_s=held,
    )


def _observed(timed, ended, layout: Layout | None = None) -> Observed:
    layout = layout or Layout(2, 2)
    spec = JobSpec("run", layout.nodes, layout.procs_per_node, hang_bounds=HangBounds(join_hang_after_s=J))
    return Observed(roll_heard(timed, ended), layout, spec=spec)


def _problems(timed, ended, layout: Layout | None = None):
    return list(never_started(RunView(_observed(timed, ended, layout), Criteria())))


#: Node 0's launcher heard at T0 = 100, waiting at each bound; node 1 never heard from.
ALONE = [(100.0, _launcher(0, "started", 0.0)), (110.2, _launcher(0, "waiting", 10.2))]


def test_a_node_never_heard_from_is_named_with_its_ranks_at_the_start_skew_after_t0():
    (problem,) = _problems(ALONE, ended=120.0)  # T0 + S
    assert problem.kind is NEVER_STARTED
    assert problem.ranks == {2: "its node's launcher never started", 3: "its node's launcher never started"}
    assert problem.message == (
        "node 1 never started its launcher (nothing heard from it: no monitor line, no rank); node 0's "
        "launcher waited 10s at the launchers' rendezvous, no rank spawned anywhere"
    )
    verdict = judge(_observed(ALONE, 120.0))
    assert verdict.findings[0].kind is NEVER_STARTED and not verdict.passed
    assert stop_reason(roll_heard(ALONE), 2, 4, BOUNDS, now=120.0) == (
        f"{problem.message}: ended at the start skew (--start-skew 20s after T0)"
    )


def test_within_the_start_skew_a_node_not_yet_heard_from_is_not_named():
    assert _problems(ALONE, ended=119.9) == []
    assert stop_reason(roll_heard(ALONE), 2, 4, BOUNDS, now=119.9) is None


def test_a_node_heard_late_gets_its_own_bound_counted_from_when_it_was_heard():
    """Node 1 starts 19 s after node 0 (within S) and its launcher is slow: every launcher waits for it."""
    late = [*ALONE, (119.0, _launcher(1, "started", 0.0)), (120.2, _launcher(0, "waiting", 20.2))]
    for now in (120.0, 130.0, 138.9):  # node 0 is past twice J from its own start, node 1 is not
        assert find(roll_heard(late), 2, 4, BOUNDS, now=now) is None
        assert stop_reason(roll_heard(late), 2, 4, BOUNDS, now=now) is None
    found = find(roll_heard(late), 2, 4, BOUNDS, now=139.0)  # 2 J after the last launcher was heard
    assert found is not None and found.named == () and found.missing == ()
    assert stop_reason(roll_heard(late), 2, 4, BOUNDS, now=139.0).endswith(
        "ended at twice the join bound (--join-hang-after 10s) after the last launcher was heard"
    )


def test_a_node_on_its_way_is_not_named_however_long_and_its_skew_counts_from_its_arrival():
    """Node 1's pod pulls a large image from 100 s to 300 s (Kubernetes): nothing of it can be heard meanwhile,
    and nothing is named at any look, far past T0 + S; its pod's containers started after 300 s, and the
    backend's look at 310 saw it arrived (A), so it has S from then: named at 330, not before."""
    roll = roll_heard(ALONE)
    for t in range(100, 301, 10):
        on_the_way(roll, (float(t), {1}))
        assert find(roll, 2, 4, BOUNDS, now=t + 9.9) is None
        assert stop_reason(roll, 2, 4, BOUNDS, now=t + 9.9) is None
    on_the_way(roll, (310.0, set()))  # its containers started: it arrived, but says nothing
    assert find(roll, 2, 4, BOUNDS, now=329.9) is None
    found = find(roll, 2, 4, BOUNDS, now=330.0)
    assert found is not None and found.missing == (1,)
    # a node on its way before any part was heard: T0 is still the first part heard
    early = on_the_way(roll_heard([]), (50.0, {0, 1}), (60.0, {1}))
    early.parser("node-0").feed(_launcher(0, "started", 0.0))  # read at 60
    on_the_way(early, (70.0, set()))
    assert find(early, 2, 4, BOUNDS, now=89.9) is None  # A = 70 > T0 = 60: S from A
    assert find(early, 2, 4, BOUNDS, now=90.0) is not None


def test_nothing_is_named_once_a_launcher_spawned_its_ranks_or_a_rank_was_heard():
    waited = [(100.0, _launcher(0, "waiting", 20.1))]
    assert _problems([*waited, (101.0, _launcher(1, "spawned", 21.0))], ended=500.0) == []
    stack = contract.encode_event("stack", 0, 4, dump=1, thread="MainThread", main=True, frames=[])
    assert _problems([*waited, (101.0, stack)], ended=500.0) == []
    seen = contract.encode_event("rank_process", 2, 4, state="seen", pid=7, node_rank=1)
    assert _problems([*waited, (101.0, seen)], ended=500.0) == []  # its process exists: it was spawned
    assert _problems([], ended=500.0) == []  # no monitor in front of a launcher (Kubernetes): nothing to read


def test_nodes_are_named_in_the_jobs_range_and_several_missing_ones_together():
    timed = [
        (100.0, _launcher(1, "waiting", 25.0)),
        (100.0, _launcher(7, "waiting", 30.0)),
    ]  # 7: not the job's
    found = find(roll_heard(timed), 4, 4, BOUNDS, now=120.0)
    assert found is not None and found.missing == (0, 2, 3) and found.waiting == (1,)
    assert found.line().startswith(
        "nodes 0, 2-3 never started their launchers (nothing heard from them: no monitor line, no rank); "
        "node 1's launcher waited 25s"
    )
    (problem,) = _problems(timed, 120.0, Layout(4, 1))
    assert sorted(problem.ranks) == [0, 2, 3]


def test_a_launcher_is_stuck_only_in_a_state_held_at_every_look_for_the_join_bound():
    one_read = [(100.0, _launcher(0, "waiting", 20.0)), (100.0, _launcher(1, "waiting", 20.0, "D", held=0.0))]
    (problem,) = _problems(one_read, ended=120.0)
    assert problem.ranks == dict.fromkeys(range(4), "never spawned: the launchers never met")  # no node named
    stopped = [(100.0, _launcher(0, "waiting", 20.0)), (100.0, _launcher(1, "waiting", 20.0, "T", held=J))]
    (problem,) = _problems(stopped, ended=120.0)
    assert sorted(problem.ranks) == [2, 3]
    assert problem.ranks[2] == "its node's launcher is stuck at the launchers' rendezvous"
    assert problem.message.startswith(
        "node 1's launcher (pid 101) is stopped (T) at the launchers' rendezvous; nodes 0-1's launchers waited"
    )
    both = [(100.0, _launcher(0, "waiting", 20.0)), (100.0, _launcher(1, "waiting", 21.0))]
    (problem,) = _problems(both, ended=120.0)
    assert problem.ranks == dict.fromkeys(range(4), "never spawned: the launchers never met")
    assert problem.message.startswith(
        "no node's launcher got past the launchers' rendezvous: every node's is up, nodes 0-1 waited 21s"
    )


def test_whose_it_is_says_the_launcher_not_the_join():
    (problem,) = _problems(ALONE, ended=120.0)
    whose = blame(problem)
    assert whose.owner is Owner.UNDETERMINED and whose.why.startswith("a node's launcher never started")


# ---------------------------------------------------------------- each rule at its edge (`make mutants`)


def test_a_launcher_held_stopped_traced_or_in_uninterruptible_sleep_for_the_join_bound_is_stuck():
    for state, name in (("T", "stopped"), ("t", "stopped by a tracer"), ("D", "uninterruptible sleep")):
        line = contract.encode_event(
            "launcher", -1, -1, state="waiting", node_rank=1, node="n1", pid=101, waited_s=20.0, bound_s=J,
            process_state=state, process_state_name=name, state_held_s=J,
        )  # fmt: skip
        found = find(
            roll_heard([(100.0, _launcher(0, "waiting", 20.0)), (100.0, line)]), 2, 4, BOUNDS, now=120.0
        )
        assert found is not None and found.named == (1,), state
        assert f"node 1's launcher (pid 101) is {name} ({state}) at the launchers' rendezvous" in found.line()
    asleep = [(100.0, _launcher(0, "waiting", 20.0)), (100.0, _launcher(1, "waiting", 20.0, "S", held=J))]
    assert find(roll_heard(asleep), 2, 4, BOUNDS, now=120.0).named == ()  # waiting, as launchers do


def test_a_launcher_that_only_said_it_started_is_one_that_waits_and_a_line_without_its_wait_says_none():
    started = [(100.0, _launcher(0, "started", 0.0)), (100.0, _launcher(1, "started", 0.0))]
    found = find(roll_heard(started), 2, 4, BOUNDS, now=120.0)
    assert found is not None and found.waiting == (0, 1) and found.waited_s == 0.0
    unsaid = contract.encode_event("launcher", -1, -1, state="waiting", node_rank=1, node="n1", bound_s=J)
    found = find(roll_heard([(100.0, unsaid)]), 2, 4, BOUNDS, now=120.0)
    assert found is not None and found.waiting == (1,) and found.waited_s is None


def test_only_the_jobs_nodes_and_ranks_count_t0_and_a_launcher_past_the_rendezvous():
    """A line of node 2 or rank 4 is no part of a run of 2 nodes and 4 ranks: it sets no T0, and its
    ``spawned`` or its words do not say the run's launchers got past the rendezvous; rank 0's do."""
    stray_node = _launcher(2, "spawned", 0.0)
    stray_rank = contract.encode_event("stack", 4, 8, dump=1, thread="MainThread", main=True, frames=[])
    stray_seen = contract.encode_event("rank_process", 4, 8, state="seen", pid=9, node_rank=5)
    timed = [(0.0, stray_node), (0.0, stray_rank), (0.0, stray_seen), *ALONE]
    assert find(roll_heard(timed), 2, 4, BOUNDS, now=119.9) is None  # T0 is node 0's, at 100
    found = find(roll_heard(timed), 2, 4, BOUNDS, now=120.0)
    assert found is not None and found.missing == (1,)
    rank_0 = contract.encode_event("stack", 0, 4, dump=1, thread="MainThread", main=True, frames=[])
    seen_0 = contract.encode_event("rank_process", 0, 4, state="seen", pid=7, node_rank=0)
    for said in (rank_0, seen_0):
        assert find(roll_heard([*ALONE, (101.0, said)]), 2, 4, BOUNDS, now=500.0) is None
        assert stop_reason(roll_heard([*ALONE, (101.0, said)]), 2, 4, BOUNDS, now=500.0) is None


def test_a_runs_bounds_are_its_specs_and_it_is_judged_at_its_end_or_at_the_last_log_read():
    spec = JobSpec("run", 2, 2, hang_bounds=HangBounds(join_hang_after_s=7, pg_timeout_s=90, start_skew_s=30))
    assert Bounds.of(spec) == Bounds(join_s=7.0, start_skew_s=30.0, pg_timeout_s=90.0)
    assert Bounds.of(None) == Bounds()
    roll = roll_heard(ALONE)
    roll.ended = None
    assert now_of(roll) == roll.now and now_of(roll, 5.0) == 5.0
    roll.ended = 150.0
    assert now_of(roll) == 150.0


def test_a_rank_in_the_roll_call_counts_as_heard_whether_or_not_its_receipt_was_noted():
    from rollcall.ranklog import RankReport, Receipt, RollCall

    nodes = {("node", n): Receipt(100.0, 100.0) for n in (0, 1)}
    assert find(RollCall(ranks={0: RankReport(0)}, heard=dict(nodes)), 2, 4, BOUNDS, now=500.0) is None
    assert find(RollCall(ranks={4: RankReport(4)}, heard=dict(nodes)), 2, 4, BOUNDS, now=500.0) is not None
