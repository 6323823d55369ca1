"""The errors check: a rank's error named, the first failure first (the root cause), its echoes folded; a disruption."""

from rollcall.backends import JobState, JobStatus
from rollcall.checks.errors import DISRUPTION, ERROR, LEFT_EARLY, ROOT_CAUSE, errors
from rollcall.checks.job_state import JOB
from rollcall.checks.missing_events import MISSING_EVENT
from rollcall.checks.runview import RunView
from rollcall.evidence.endings import Disruption, Termination
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import event, node_log, roll_of, two_by_two

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
    return judge(Observed(roll, Layout(nodes, ppn), status or JobStatus(JobState.FAILED, "pod job-1 failed")))


def test_the_root_cause_comes_first_and_each_rank_keeps_its_own_message():
    errors = {r: (GLOO.format(port=40000 + r), T0 + 2) for r in range(8)}
    errors[5] = ("RuntimeError: injected failure on rank 5", T0 + 1)
    v = judged(2, 4, errors)
    assert [p.kind for p in v.findings[:3]] == [ROOT_CAUSE, ERROR, JOB]
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
    assert lines[2] == "    whose: the workload's (rollcall's own): a fault injected on purpose"
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
    roots = v.of_kind(ROOT_CAUSE)
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

    assert v.findings[0].kind is DISRUPTION and v.findings[0].ranks == {}
    assert v.problems[0] == (
        "first failure: infrastructure disruption: pod job-1-abcde (index 1) on node ip-10-0-1-7 was disrupted "
        "(EvictionByEvictionAPI): Eviction API: evicting; the 8 rank error(s) follow from it"
    )
    assert ROOT_CAUSE not in {p.kind for p in v.findings}, "no rank's error is a root cause"
    assert JOB not in {p.kind for p in v.findings}, "the disruption is the job's end, named once"
    assert {p.kind for p in v.findings[1:3]} == {ERROR}
    assert v.disruption == evicted and v.root_cause is not None and v.root_cause.roots == ()
    assert v.root_cause.as_dict()["disruption"]["host"] == "ip-10-0-1-7"


def test_a_disruption_without_any_rank_error_is_still_named_first():
    lost = Disruption("job-0-abcde", 0, "n0", "NodeDeleted", "node n0 was deleted while the pod ran")
    v = judge(Observed(two_by_two(skip={0: ("complete",)}), Layout(2, 2), JobStatus.disrupted(lost)))
    assert [p.kind for p in v.findings] == [DISRUPTION, MISSING_EVENT]
    assert v.problems[0].startswith("first failure: infrastructure disruption: pod job-0-abcde (index 0)")


def test_on_a_node_of_processes_an_error_names_the_nodes_log_not_a_pod():
    roll = RollCall()
    for node, extra in ((0, ""), (1, event("error", 3, 4, message="injected failure on rank 3") + "\n")):
        parser = roll.parser(f"node-{node}")
        parser.feed((node_log(node, 2, 2, skip={3: ("throughput", "complete")}) + extra).encode())
        parser.close()
    status = JobStatus(JobState.FAILED, "node 1 (torchrun agent) exited with code 1")
    on_nodes = judge(Observed(roll, Layout(2, 2), status, unit="node"))
    in_pods = judge(Observed(roll, Layout(2, 2), status))
    assert "rank 3 (node 1) reported an error: injected failure on rank 3 [log node-1]" in on_nodes.message()
    assert "pod" not in on_nodes.message()
    assert "[pod node-1]" in in_pods.message()


def test_the_predicate_names_the_rank_that_reported_an_error_first_and_nothing_of_a_run_without_one():
    text = (
        node_log(0, 1, 2)
        + event("error", 1, 2, message="RuntimeError: injected failure on rank 1", time=T0)
        + "\n"
    )
    [problem] = list(errors(RunView(Observed(roll_of(text), Layout(1, 2)), Criteria())))
    assert problem.kind is ROOT_CAUSE
    assert problem.ranks == {1: "error: RuntimeError: injected failure on rank 1"}
    assert problem.message.startswith(
        "first failure: rank 1 (node 0) reported an error: RuntimeError: injected failure on rank 1"
    )
    assert (
        list(errors(RunView(Observed(two_by_two(), Layout(2, 2), JobStatus(JobState.SUCCEEDED)), Criteria())))
        == []
    )


def leaving_logs(nodes, ppn, leaver, code, others):
    """Every rank starts and times epoch 1; ``leaver`` then says exit with ``code``, the others ``others``."""
    world = nodes * ppn
    logs = []
    for node in range(nodes):
        lines = []
        for r in range(node * ppn, (node + 1) * ppn):
            lines.append(event("start", r, world, local_rank=r % ppn, node_rank=node, time=T0))
            lines.append(event("epoch_time", r, world, epoch=1, seconds=0.4, time=T0 + 1))
            if r == leaver:
                lines.append(event("exit", r, world, code=code, phase="epoch 1 end", time=T0 + 2))
            elif r in others:
                lines.append(event("error", r, world, message=others[r], time=T0 + 3))
        logs.append("\n".join(lines) + "\n")
    return logs


def judged_logs(logs, nodes, ppn, status=None):
    roll = RollCall()
    for node, text in enumerate(logs):
        p = roll.parser(f"node-{node}")
        p.feed(text.encode())
        p.close()
    observed = Observed(
        roll, Layout(nodes, ppn), status or JobStatus(JobState.FAILED, "node 1 failed"), None, "node"
    )
    return judge(observed)


def test_the_first_rank_to_leave_with_0_is_the_root_cause_ahead_of_the_echoes_it_caused():
    echoes = {r: GLOO.format(port=40000 + r) for r in (0, 1, 2)}
    v = judged_logs(leaving_logs(2, 2, 3, 0, echoes), 2, 2)
    assert v.findings[0].kind is ROOT_CAUSE
    assert v.problems[0] == (
        "first failure: rank 3 (node 1) left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), "
        "before complete [log node-1, 08:00:02.000 UTC]; the others' errors followed"
    )
    assert v.problems[1].startswith("ranks 0-2 (nodes 0-1) [3 echoes of another rank's failure: ")
    assert v.findings[0].ranks == {
        3: "left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), before complete"
    }
    assert v.root_cause is not None and v.root_cause.departure is not None
    assert (v.root_cause.departure.rank, v.root_cause.departure.exit_code) == (3, 0)
    assert v.root_cause.as_dict()["departure"]["phase"] == "epoch 1 end"
    assert v.findings[0].blame is not None and v.findings[0].blame.owner.value == "workload"
    assert v.ranks[3].state.value == "missing" and not v.ranks[3].answered


def test_a_rank_that_left_after_another_failed_on_its_own_is_named_after_that_failure():
    others = {0: "RuntimeError: injected failure on rank 0"}
    logs = leaving_logs(1, 2, 1, 0, {})
    logs[0] += event("error", 0, 2, message=others[0], time=T0 + 1.5) + "\n"
    v = judged_logs(logs, 1, 2)
    assert v.problems[0].startswith(
        "first failure: rank 0 (node 0) reported an error: RuntimeError: injected"
    )
    left = [p for p in v.findings if p.kind is LEFT_EARLY]
    assert [p.message for p in left] == [
        "left early too: rank 1 (node 0) left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), "
        "before complete [log node-0, 08:00:02.000 UTC]"
    ]
    assert list(left[0].ranks) == [1]


def test_a_rank_the_launcher_alone_saw_leave_with_0_is_named_and_undetermined():
    # no exit event (a workload that does not say it): torchrun's SUCCEEDED record of the node's workers
    logs = [
        text.replace('"event":"exit"', '"event":"unsaid"') for text in leaving_logs(2, 1, 1, 0, {0: GLOO})
    ]
    ended = Termination("node-1", None, "h", "Exited", 0, None, rank=1, unit="node")
    v = judged_logs(logs, 2, 1, JobStatus(JobState.FAILED, "node 0 failed", terminations=[ended]))
    assert v.problems[0] == (
        "first failure: rank 1 (node 1) left with exit code 0 after epoch_time of epoch 1, before complete "
        "[log node-1]; the others' errors followed"
    )
    assert v.findings[0].blame is not None and v.findings[0].blame.owner.value == "undetermined"
    assert "order uncertain: rank 1's departure carries no time" in v.problems[1]
