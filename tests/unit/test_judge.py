"""judge(): each check's problems, typed; rank states from the kinds of problems, never from their text."""

from dataclasses import FrozenInstanceError

import pytest

from rollcall.backends import EfaUse, JobState, JobStatus
from rollcall.judge import CHECKS, Facts, judge
from rollcall.ranklog import RollCall
from rollcall.rootcause import Disruption, Termination
from rollcall.verdict import Criteria, Evidence, Kind, Layout, Problem, RankState
from tests.unit.helpers import event, node_log


def roll_of(*logs):
    roll = RollCall()
    for i, text in enumerate(logs):
        p = roll.parser(f"pod-{i}")
        p.feed(text.encode())
        p.close()
    return roll


def two_by_two(**kw):
    return roll_of(node_log(0, 2, 2, **kw), node_log(1, 2, 2, **kw))


def test_a_sound_run_has_no_problem_and_every_rank_is_ok():
    v = judge(Evidence(two_by_two(), Layout(2, 2), JobStatus(JobState.SUCCEEDED)))
    assert v.passed and v.findings == ()
    assert {r.state for r in v.ranks.values()} == {RankState.OK}
    assert [r.pod for r in v.ranks.values()] == ["pod-0", "pod-0", "pod-1", "pod-1"]
    assert v.ranks[3].reported == ("start", "throughput", "epoch_time", "complete")


def test_a_failed_job_comes_first_and_names_no_rank():
    status = JobStatus(JobState.FAILED, "pod x-1 (index 1) on node n1: OOMKilled")
    v = judge(Evidence(two_by_two(skip={3: ("complete",)}), Layout(2, 2), status))
    assert [p.kind for p in v.findings] == [Kind.JOB, Kind.MISSING_EVENT]
    assert v.problems[0] == "job failed: pod x-1 (index 1) on node n1: OOMKilled"
    assert v.failed_ranks == {3: ["no complete"]}


def test_efa_not_used_is_its_own_kind_not_a_job_failure():
    reason = "EFA was requested but NCCL did not use it on 1 pod(s): it fell back to TCP sockets"
    efa = EfaUse(fell_back={"x-0": "NET/Socket : Using [0]eth0"}, required=True, reason=reason)
    status = JobStatus(JobState.SUCCEEDED, efa=efa)  # the backend reports EFA; the job itself succeeded
    v = judge(Evidence(two_by_two(), Layout(2, 2), status))
    assert [p.kind for p in v.findings] == [Kind.EFA]
    assert v.findings[0].detail is efa and v.problems == [reason]
    unproven = EfaUse(unproven=("x-0",), required=False)  # Neuron: not proven is only a detail
    assert judge(Evidence(two_by_two(), Layout(2, 2), JobStatus(JobState.SUCCEEDED, efa=unproven))).passed


def test_a_job_that_failed_besides_efa_says_both_once_each():
    efa = EfaUse(fell_back={"x-0": "Using network Socket"}, required=True, reason="EFA was requested but ...")
    status = JobStatus(JobState.FAILED, "pod x-1 (index 1) on node n1: OOMKilled", efa=efa)
    v = judge(Evidence(two_by_two(), Layout(2, 2), status))
    assert [p.kind for p in v.findings] == [Kind.JOB, Kind.EFA]
    assert v.problems == ["job failed: pod x-1 (index 1) on node n1: OOMKilled", "EFA was requested but ..."]


def test_the_state_is_the_worst_kind_naming_the_rank():
    text = node_log(0, 1, 4, tp={1: 10.0, 2: 10.0}) + event("error", 2, 4, message="boom") + "\n"
    v = judge(Evidence(roll_of(text), Layout(1, 4)), Criteria(min_throughput=20, straggler_ratio=0.5))
    states = {r: res.state for r, res in v.ranks.items()}
    assert states == {0: RankState.OK, 1: RankState.STRAGGLER, 2: RankState.MISSING, 3: RankState.OK}
    assert [p.kind for p in v.ranks[1].problems] == [Kind.MIN_THROUGHPUT, Kind.STRAGGLER]
    assert v.ranks[2].notes == [
        "error: boom",
        "throughput 10.00 < 20",
        "straggler: 0.33 of the median throughput",
    ]


def test_a_rank_reporting_another_world_size_is_a_layout_problem():
    text = node_log(0, 1, 2).replace('"rank":1,"world_size":2', '"rank":1,"world_size":3')
    v = judge(Evidence(roll_of(text), Layout(1, 2)))
    assert [p.kind for p in v.findings] == [Kind.LAYOUT]
    assert v.problems == ["ranks 1 (node 0) reported a world size of 3, expected 2"]


def test_adding_a_check_is_one_function():
    def odd_ranks(facts: Facts):
        ranks = {r: "odd" for r in facts.reports if r % 2}
        yield Problem(Kind.LAYOUT, "odd ranks are not allowed", ranks)

    v = judge(Evidence(two_by_two(), Layout(2, 2)), checks=(*CHECKS, odd_ranks))
    assert v.problems == ["odd ranks are not allowed"]
    assert v.failed_ranks == {1: ["odd"], 3: ["odd"]}
    assert v.answered == 4  # every rank said every event: the new check fails the run, not the roll call


def test_the_verdict_is_frozen_and_judging_again_adds_criteria_without_touching_it():
    evidence = Evidence(two_by_two(tp={0: 10.0}), Layout(2, 2))
    first = judge(evidence)
    assert first.passed
    again = judge(evidence, Criteria(straggler_ratio=0.8))
    assert first.passed and [p.kind for p in again.findings] == [Kind.STRAGGLER]
    with pytest.raises(FrozenInstanceError):
        first.findings = ()  # type: ignore[misc]


GLOO = "RuntimeError: [../gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:{port}"
T0 = 1_764_576_000.0


def failing_logs(nodes, ppn, errors):
    """Each node's log: every rank starts and times an epoch; ``errors[rank]`` is (message, time)."""
    world = nodes * ppn
    logs = []
    for node in range(nodes):
        lines = []
        for r in range(node * ppn, (node + 1) * ppn):
            lines.append(f"[{r}]:" + event("start", r, world, local_rank=r % ppn, node_rank=node))
            lines.append(f"[{r}]:" + event("epoch_time", r, world, epoch=1, seconds=0.4))
            if r in errors:
                message, when = errors[r]
                lines.append(f"[{r}]:" + event("error", r, world, message=message, time=when))
        logs.append("\n".join(lines) + "\n")
    return logs


def judged(nodes, ppn, errors, status=None):
    roll = RollCall()
    for node, text in enumerate(failing_logs(nodes, ppn, errors)):
        p = roll.parser(f"job-{node}-abcde")
        p.feed(text.encode())
        p.close()
    return judge(Evidence(roll, Layout(nodes, ppn), status or JobStatus(JobState.FAILED, "pod job-1 failed")))


def test_the_root_cause_comes_first_and_each_rank_keeps_its_own_message():
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(8)}
    errors[5] = ("RuntimeError: injected failure on rank 5", T0 + 1)
    v = judged(2, 4, errors)
    assert [p.kind for p in v.findings[:3]] == [Kind.ROOT_CAUSE, Kind.ERROR, Kind.JOB]
    assert v.problems[0].startswith(
        "first failure: rank 5 (node 1) reported an error: RuntimeError: injected failure on rank 5 "
        "[pod job-1-abcde, 08:00:01.000 UTC]"
    )
    assert v.problems[1].startswith("ranks 0-4, 6-7 (nodes 0-1) [7 echoes of another rank's failure: ")
    assert v.failed_ranks[5][0] == "error: RuntimeError: injected failure on rank 5"
    assert v.failed_ranks[6][0] == "error: " + GLOO.format(port=40006)
    assert v.root_cause is not None and v.root_cause.first.rank == 5
    assert (
        v.message().splitlines()[-1].startswith("  every rank's own error: results.json (root_cause, errors)")
    )


def test_2048_ranks_one_root_cause_and_2047_echoes_give_a_short_message():
    errors = {r: (GLOO.format(port=20000 + r), T0 + 3 + (r % 50) / 100) for r in range(2048)}
    errors[1234] = ("RuntimeError: injected failure on rank 1234", T0 + 2)
    v = judged(64, 32, errors)
    message = v.message("artifacts/test_x")
    lines = message.splitlines()
    assert len(lines) <= 15, message
    assert lines[1] == (
        "  - first failure: rank 1234 (node 38) reported an error: RuntimeError: injected failure on rank 1234 "
        "[pod job-38-abcde, 08:00:02.000 UTC]"
    )
    assert lines[2] == "    whose: rollcall's own: a fault injected on purpose"
    assert lines[3].startswith(
        "  - ranks 0-1233, 1235-2047 (nodes 0-63) [2047 echoes of another rank's failure: lost the connection to "
        "a peer]: RuntimeError"
    )
    assert all(len(line) <= 400 for line in lines), message
    assert len(v.failed_ranks) == 2048


def test_two_independent_failures_are_both_named_as_roots():
    errors = {r: (GLOO.format(port=40000 + r), T0 + 5) for r in range(8)}
    errors[1] = ("RuntimeError: injected failure on rank 1", T0 + 1)
    errors[6] = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", T0 + 3)
    v = judged(2, 4, errors)
    roots = v.of_kind(Kind.ROOT_CAUSE)
    assert [p.message.split(" reported")[0] for p in roots] == [
        "first failure: rank 1 (node 0)",
        "independent failure: rank 6 (node 1)",
    ]
    assert [sorted(p.ranks) for p in roots] == [[1], [6]]


def test_an_echo_of_a_silently_killed_pod_names_the_pod_from_its_termination_record():
    # node 1's pod was OOM-killed: its ranks wrote no error; node 0's ranks echo the lost peer.
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(4)}
    killed = Termination("job-1-abcde", 1, "ip-10-0-1-7", "OOMKilled", 137, T0 + 1)
    status = JobStatus(
        JobState.FAILED, "pod job-1-abcde (index 1) on node ip-10-0-1-7: OOMKilled", terminations=[killed]
    )
    v = judged(2, 4, errors, status)
    assert v.problems[0] == (
        "first failure: pod job-1-abcde (index 1) on node ip-10-0-1-7 ended OOMKilled (exit code 137) at "
        "08:00:01.000 UTC, and none of its ranks reported an error"
    )
    assert v.findings[0].ranks == {}
    assert v.problems[1].startswith(
        "ranks 0-3 (node 0) [4 echoes of another rank's failure: lost the connection"
    )


def test_a_disruption_comes_first_and_the_ranks_errors_are_its_consequences():
    # node 1's pod was evicted; every rank, its own too, then lost its peers or was signalled.
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(8)}
    errors[5] = ("RuntimeError: injected failure on rank 5", T0 + 3)
    evicted = Disruption("job-1-abcde", 1, "ip-10-0-1-7", "EvictionByEvictionAPI", "Eviction API: evicting")
    v = judged(2, 4, errors, JobStatus.disrupted(evicted))

    assert v.findings[0].kind is Kind.DISRUPTION and v.findings[0].ranks == {}
    assert v.problems[0] == (
        "first failure: infrastructure disruption: pod job-1-abcde (index 1) on node ip-10-0-1-7 was disrupted "
        "(EvictionByEvictionAPI): Eviction API: evicting; the 8 rank error(s) follow from it"
    )
    assert Kind.ROOT_CAUSE not in {p.kind for p in v.findings}, "no rank's error is a root cause"
    assert Kind.JOB not in {p.kind for p in v.findings}, "the disruption is the job's end, named once"
    assert {p.kind for p in v.findings[1:3]} == {Kind.ERROR}
    assert v.disruption == evicted and v.root_cause is not None and v.root_cause.roots == ()
    assert v.root_cause.as_dict()["disruption"]["host"] == "ip-10-0-1-7"


def test_a_disruption_without_any_rank_error_is_still_named_first():
    lost = Disruption("job-0-abcde", 0, "n0", "NodeDeleted", "node n0 was deleted while the pod ran")
    v = judge(Evidence(two_by_two(skip={0: ("complete",)}), Layout(2, 2), JobStatus.disrupted(lost)))
    assert [p.kind for p in v.findings] == [Kind.DISRUPTION, Kind.MISSING_EVENT]
    assert v.problems[0].startswith("first failure: infrastructure disruption: pod job-0-abcde (index 0)")


def test_on_a_node_of_processes_an_error_names_the_nodes_log_not_a_pod():
    roll = RollCall()
    for node, extra in ((0, ""), (1, event("error", 3, 4, message="injected failure on rank 3") + "\n")):
        parser = roll.parser(f"node-{node}")
        parser.feed((node_log(node, 2, 2, skip={3: ("throughput", "complete")}) + extra).encode())
        parser.close()
    status = JobStatus(JobState.FAILED, "node 1 (torchrun agent) exited with code 1")
    on_nodes = judge(Evidence(roll, Layout(2, 2), status, unit="node"))
    in_pods = judge(Evidence(roll, Layout(2, 2), status))
    assert "rank 3 (node 1) reported an error: injected failure on rank 3 [log node-1]" in on_nodes.message()
    assert "pod" not in on_nodes.message()
    assert "[pod node-1]" in in_pods.message()
