"""The never_started check: a node whose launcher never started, named from the launchers that waited for it."""

from __future__ import annotations

from rollcall.checks.blame import blame
from rollcall.checks.never_started import NEVER_STARTED, never_started
from rollcall.checks.runview import RunView
from rollcall.evidence.launchers import never_started as find
from rollcall.evidence.launchers import stop_reason
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed, Owner
from rollcall_workload import contract
from tests.unit.helpers import roll_of_lines

BOUND = 10.0


def _launcher(node: int, state: str, waited: float, process: str = "S") -> bytes:
    return contract.encode_event(
        "launcher",
        -1,
        -1,
        state=state,
        node_rank=node,
        node=f"n{node}",
        pid=100 + node,
        waited_s=waited,
        bound_s=BOUND,
        process_state=process,
        process_state_name={"S": "sleeping", "T": "stopped"}[process],
    )


def _problems(lines: list[bytes], layout: Layout | None = None):
    observed = Observed(roll_of_lines(lines), layout or Layout(2, 2))
    return list(never_started(RunView(observed, Criteria())))


def test_a_node_never_heard_from_is_named_with_its_ranks_once_another_launcher_waited_twice_its_bound():
    lines = [_launcher(0, "started", 0.0), _launcher(0, "waiting", 10.2), _launcher(0, "waiting", 20.1)]
    (problem,) = _problems(lines)
    assert problem.kind is NEVER_STARTED
    assert problem.ranks == {2: "its node's launcher never started", 3: "its node's launcher never started"}
    assert problem.message == (
        "node 1 never started its launcher (nothing heard from it: no monitor line, no rank); node 0's "
        "launcher waited 20s at the launchers' rendezvous, no rank spawned anywhere"
    )
    verdict = judge(Observed(roll_of_lines(lines), Layout(2, 2)))
    assert verdict.findings[0].kind is NEVER_STARTED and not verdict.passed
    assert stop_reason(roll_of_lines(lines), 2, 4) == (
        f"{problem.message}: ended at twice the join bound (--join-hang-after)"
    )


def test_one_wait_is_not_enough_a_node_whose_monitor_starts_later_gets_a_bound():
    lines = [_launcher(0, "started", 0.0), _launcher(0, "waiting", 10.2)]
    assert _problems(lines) == [] and stop_reason(roll_of_lines(lines), 2, 4) is None


def test_nothing_is_named_once_a_launcher_spawned_its_ranks_or_a_rank_spoke():
    waited = [_launcher(0, "waiting", 20.1)]
    assert _problems([*waited, _launcher(1, "spawned", 21.0)]) == []
    start = contract.encode_event("stack", 0, 4, dump=1, thread="MainThread", main=True, frames=[])
    assert _problems([*waited, start]) == []
    assert _problems([]) == []  # no monitor in front of a launcher (Kubernetes): nothing to read


def test_nodes_are_named_in_the_jobs_range_and_several_missing_ones_together():
    lines = [_launcher(1, "waiting", 25.0), _launcher(7, "waiting", 30.0)]  # node 7 is outside the job
    found = find(roll_of_lines(lines), 4, 4)
    assert found is not None and found.missing == (0, 2, 3) and found.waiting == (1,)
    assert found.line().startswith(
        "nodes 0, 2-3 never started their launchers (nothing heard from them: no monitor line, no rank); "
        "node 1's launcher waited 25s"
    )
    (problem,) = _problems(lines, Layout(4, 1))
    assert sorted(problem.ranks) == [0, 2, 3]


def test_a_stopped_launcher_is_named_and_launchers_that_never_met_name_every_rank_and_no_node():
    stopped = [_launcher(0, "waiting", 20.0), _launcher(1, "waiting", 20.0, "T")]
    (problem,) = _problems(stopped)
    assert sorted(problem.ranks) == [2, 3]
    assert problem.ranks[2] == "its node's launcher is stuck at the launchers' rendezvous"
    assert problem.message.startswith(
        "node 1's launcher (pid 101) is stopped (T) at the launchers' rendezvous; nodes 0-1's launchers waited"
    )
    both = [_launcher(0, "waiting", 20.0), _launcher(1, "waiting", 21.0)]
    (problem,) = _problems(both)
    assert problem.ranks == dict.fromkeys(range(4), "never spawned: the launchers never met")
    assert problem.message.startswith(
        "no node's launcher got past the launchers' rendezvous: every node's is up, nodes 0-1 waited 21s"
    )


def test_whose_it_is_says_the_launcher_not_the_join():
    (problem,) = _problems([_launcher(0, "waiting", 20.1)])
    whose = blame(problem)
    assert whose.owner is Owner.UNDETERMINED and whose.why.startswith("a node's launcher never started")
