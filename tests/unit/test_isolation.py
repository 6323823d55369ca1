"""``--isolate``: the bisection over a fake runner, when it runs, the trials' jobs, and the verdict it adds to."""

import math
from dataclasses import replace

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.isolation.bisect import Trial, bisect, budget
from rollcall.isolation.probe import (
    ISOLATED,
    TRIAL_ARGS,
    TRIAL_TIMEOUT_S,
    reason_to_skip,
    trial_spec,
    with_isolation,
)
from rollcall.jobspec import NODE_IDS_ENV, JobSpec
from rollcall.ranklog import RollCall
from rollcall.verdict import Problem
from rollcall_workload import contract, faults
from rollcall_workload.rank import bandwidth as workload_bandwidth
from rollcall_workload.rank import cli
from tests.unit.helpers import judged, node_log


class Fake:
    """A runner on which every group holding one of ``bad`` fails (``together``: only all of them at once)."""

    def __init__(self, bad, together=False):
        self.bad, self.together, self.runs = set(bad), together, []

    def __call__(self, nodes, padding):
        held = self.bad <= set(nodes) if self.together else bool(self.bad & set(nodes))
        self.runs.append(nodes)
        return Trial(nodes, held, "slow" if held else "fine", padding)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 64])
def test_one_bad_node_is_named_alone_in_at_most_2_log2_n_runs(n):
    for bad in range(n):
        fake = Fake({bad})
        found = bisect(range(n), fake)
        assert [s.nodes for s in found.suspects] == [(bad,)], (n, bad)
        assert found.suspects[0].why == "fails alone" and found.alone
        assert len(found.trials) == len(fake.runs) <= 2 * math.ceil(math.log2(n)), (n, bad, fake.runs)
        assert bad not in found.cleared and set(found.cleared) | {bad} == set(range(n))


def test_with_one_rank_per_node_a_single_node_runs_beside_a_cleared_one():
    fake = Fake({2})
    found = bisect(range(4), fake, min_nodes=2)
    assert [s.nodes for s in found.suspects] == [(2,)]
    assert fake.runs == [(0, 1), (2, 3), (0, 2), (0, 3)]
    assert [t.padding for t in found.trials] == [(), (), (0,), (0,)]
    assert all(len(nodes) >= 2 for nodes in fake.runs)


def test_two_bad_nodes_are_both_named():
    found = bisect(range(8), Fake({1, 6}))
    assert [s.nodes for s in found.suspects] == [(1,), (6,)]
    assert found.suspect_nodes == (1, 6)


def test_a_fault_between_two_halves_names_the_group_whose_halves_pass_apart():
    # nodes 1 and 2 fail only together (a link between them); every group holding both fails
    found = bisect(range(8), Fake({2, 3}, together=True))
    assert [(s.nodes, s.why) for s in found.suspects] == [
        ((2, 3), "its halves pass apart: the fault needs nodes of both")
    ]
    assert not found.alone
    # a fault no short run shows again: the whole world stays suspected, and the line says why
    world = bisect(range(4), Fake({1, 2}, together=True))
    assert world.suspect_nodes == (0, 1, 2, 3)
    assert world.suspects[0].why.startswith("no trial failed: the short run does not reproduce the failure")


def test_two_nodes_of_one_rank_each_cannot_be_told_apart():
    fake = Fake({1})
    found = bisect(range(2), fake, min_nodes=2)
    assert fake.runs == [] and found.suspect_nodes == (0, 1)
    assert found.suspects[0].why == "not split further: a half could not be tried"


def test_the_search_stops_at_its_budget_and_names_what_is_left():
    fake = Fake(set(range(16)))  # every node bad: every trial fails
    found = bisect(range(16), fake, max_runs=3)
    assert len(fake.runs) == 3
    assert found.suspect_nodes == tuple(range(16))  # nothing cleared: all still suspected
    assert budget(16) == 16 and budget(1) == 4


def roll_of(nodes, ppn, skip=None):
    roll = RollCall()
    for node in range(nodes):
        parser = roll.parser(f"node-{node}")
        parser.feed(node_log(node, nodes, ppn, skip=skip).encode())
        parser.close()
    return roll


def test_a_search_runs_only_when_the_run_failed_naming_no_node():
    spec = JobSpec("job", 4, 1)
    assert reason_to_skip(judged(roll_of(4, 1), spec).verdict) == "the run passed"
    # one rank missed its roll call: the verdict names its node already
    one = judged(roll_of(4, 1, skip={2: ("complete",)}), spec).verdict
    assert reason_to_skip(one) == "the verdict already names node(s) 2"
    # every rank missed it (a world that never finished): no node named
    every = {r: ("complete",) for r in range(4)}
    timed_out = JobStatus(JobState.TIMED_OUT, "job did not finish")
    assert reason_to_skip(judged(roll_of(4, 1, skip=every), spec, timed_out).verdict) is None
    single = judged(roll_of(1, 2, skip={0: ("complete",), 1: ("complete",)}), JobSpec("job", 1, 2)).verdict
    assert reason_to_skip(single) == "the run had one node"


def test_ranks_waiting_for_a_silent_node_name_no_node():
    # node 2 hung before rendezvous and said nothing; the others wait there for it, as victims
    spec = JobSpec("job", 4, 1)
    every = {r: ("start", "epoch_time", "throughput", "complete") for r in range(4)}
    timed_out = JobStatus(JobState.TIMED_OUT, "job did not finish")
    verdict = judged(roll_of(4, 1, skip=every), spec, timed_out).verdict
    waiting = Problem(WAITING, "ranks 0-1, 3 waiting", {r: "waiting (rendezvous)" for r in (0, 1, 3)})
    assert reason_to_skip(replace(verdict, findings=(*verdict.findings, waiting))) is None
    hung = Problem(HUNG, "rank 2 hung in a sleep", {2: "hung in a sleep"})
    named = replace(verdict, findings=(*verdict.findings, waiting, hung))
    assert reason_to_skip(named) == "the verdict already names node(s) 2"
    # problems that between them name every node (node 2 never heard from, the others only late by the job's
    # timeout) name none apart: the search runs
    late = Problem(HUNG, "ranks 0-1, 3 hung in import", {r: "hung in import" for r in (0, 1, 3)})
    assert reason_to_skip(replace(verdict, findings=(*verdict.findings, hung, late))) is None


def test_a_trial_runs_the_bandwidth_phase_on_the_nodes_naming_their_places_in_the_world():
    spec = JobSpec("job-1a2b3c", 4, 2, workload_args=("--bandwidth-mb", "1"), job_timeout_s=1800)
    trial = trial_spec(spec, (0, 2), 3)
    assert (trial.name, trial.nodes, trial.procs_per_node, trial.node_ids) == ("job-1a2b3c-i3", 2, 2, (0, 2))
    assert trial.workload_args == ("--bandwidth-mb", "1", *TRIAL_ARGS)
    assert trial.job_timeout_s == TRIAL_TIMEOUT_S == 120
    # --isolate-timeout bounds each trial; the job's own timeout, when shorter, still holds
    assert trial_spec(spec, (0, 2), 3, timeout_s=45).job_timeout_s == 45
    assert trial_spec(replace(spec, job_timeout_s=30), (0, 2), 3, timeout_s=45).job_timeout_s == 30
    assert trial.workload_env()[NODE_IDS_ENV] == "0,2"
    assert NODE_IDS_ENV not in spec.workload_env()
    with pytest.raises(ValueError, match="one node per node rank"):
        JobSpec("job", 2, 1, node_ids=(3,))


def test_the_verdict_lists_the_suspects_with_every_trials_evidence():
    spec = JobSpec("job", 4, 2)
    every = {r: ("complete",) for r in range(8)}
    verdict = judged(roll_of(4, 2, skip=every), spec).verdict
    found = bisect(range(4), Fake({3}))
    added = with_isolation(verdict, found)
    problem = added.of_kind(ISOLATED)[0]
    assert problem.message.startswith("isolated in 4 bandwidth-only run(s): node 3 (fails alone); runs: ")
    assert "nodes 0-1 passed: fine" in problem.message and "nodes 3 failed: slow" in problem.message
    assert sorted(problem.ranks) == [6, 7] and problem.detail is found
    assert added.findings[: len(verdict.findings)] == verdict.findings
    assert added.ranks[6].notes[-1] == "isolated: node 3 is a suspect" and added.ranks[0] == verdict.ranks[0]


# -- the workload's side: node ids, the scopes, the bandwidth-only mode ------------------------------


def test_the_workload_maps_node_ranks_to_the_worlds_nodes():
    assert faults.node_ids({}) == () and faults.node_id({}, 1) == 1
    assert faults.node_ids({NODE_IDS_ENV: "2,3"}) == (2, 3)
    assert faults.node_id({NODE_IDS_ENV: "2,3"}, 0) == 2
    for bad in ("2,x", "1,1", "-1"):
        with pytest.raises(ValueError, match=f"{NODE_IDS_ENV}="):
            faults.check_fault_injection({NODE_IDS_ENV: bad})
    with pytest.raises(ValueError, match="names 2 node"):
        faults.node_id({NODE_IDS_ENV: "2,3"}, 2)


def test_the_workload_measures_only_the_scopes_asked_for():
    nodes = [0, 0, 1, 1, 2, 2]
    assert [g.scope for g in workload_bandwidth.bandwidth_groups(nodes)] == [
        "world",
        "node",
        "node",
        "node",
        "pair",
        "pair",
        "pair",
    ]
    assert [g.scope for g in workload_bandwidth.bandwidth_groups(nodes, ("world",))] == ["world"]
    args = cli.parse_args(["--bandwidth-only", "--bandwidth-scopes", "world,pair"])
    assert args.bandwidth_only and args.bandwidth_scopes == ("world", "pair")
    assert (
        cli.parse_args([]).bandwidth_scopes == contract.BANDWIDTH_SCOPES
        and not cli.parse_args([]).bandwidth_only
    )
    with pytest.raises(cli.CommandLineError, match="--bandwidth-scopes: must be a comma-separated list"):
        cli.parse_args(["--bandwidth-scopes", "rack"])


def test_a_trial_of_nodes_whose_machines_are_known_is_pinned_to_them():
    from rollcall.backends.kubernetes.manifests import Names, render

    spec = JobSpec("job-1a2b3c", 4, 1, image="r/i:1")
    machines = {0: "ip-10-0-0-1", 1: "ip-10-0-0-2", 2: "ip-10-0-0-3", 3: "ip-10-0-0-4"}
    trial = trial_spec(spec, (1, 3), 1, machines)
    assert trial.machines == ("ip-10-0-0-2", "ip-10-0-0-4")
    assert trial_spec(spec, (1, 3), 1, {1: "ip-10-0-0-2"}).machines == ()  # one unknown: none pinned
    pod = render(trial, Names("ns", "job-1a2b3c-i1", "svc", "r1")).job["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # one term per machine, ORed: the API server takes one value only in a node field selector's In
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [m]}]}
            for m in trial.machines
        ]
    }
    unpinned = render(spec, Names("ns", "job-1a2b3c", "svc", "r1")).job["spec"]["template"]["spec"]
    assert "nodeAffinity" not in unpinned["affinity"]


class SlowNodeBackend:
    """A backend whose every group holding node ``bad`` of the world measures a low bus bandwidth."""

    name = "fake"
    unit = "node"

    def __init__(self, bad):
        self.bad, self.launched = bad, []

    def discover(self, request):  # pragma: no cover - never discovered here
        raise NotImplementedError

    def launch(self, spec, collector):
        from rollcall.backends import JobState, JobStatus
        from tests.unit.helpers import event, rank_lines

        self.launched.append(spec)
        world = spec.node_ids or tuple(range(spec.nodes))
        busbw = 0.001 if self.bad in world else 1.0
        size = spec.world_size
        for node in range(spec.nodes):
            sink = collector.sink(f"{spec.name}-{node}")
            for r in range(node * spec.procs_per_node, (node + 1) * spec.procs_per_node):
                lines = rank_lines(r, size, spec.procs_per_node)
                if "--bandwidth-only" in spec.workload_args:
                    lines = [lines[0], lines[-1]]  # start and complete: no training
                bandwidth = event(
                    "bandwidth", r, size, scope="world", ranks=f"0-{size - 1}", nodes=f"0-{spec.nodes - 1}",
                    bytes=2**20, algbw_gbps=busbw, busbw_gbps=busbw,
                )  # fmt: skip
                lines.insert(-1, bandwidth)
                sink.write("".join(f"[{r}]:{line}\n" for line in lines).encode())
            sink.close()

        class Done:
            def wait(self, timeout_s, stop=None):
                return JobStatus(JobState.SUCCEEDED)

            def cleanup(self):
                pass

        return Done()


def test_isolate_drives_short_runs_through_a_backend_and_names_the_slow_node(tmp_path):
    from rollcall.isolation.probe import isolate
    from rollcall.runner import run_once
    from rollcall.verdict import Criteria

    backend = SlowNodeBackend(bad=5)
    criteria = Criteria(min_busbw=0.1)
    spec = JobSpec("job-abc123", 8, 1, workload_args=("--bandwidth-mb", "1"))
    attempt = run_once(backend, spec, tmp_path / "run", criteria=criteria)
    assert attempt.verdict.problems == [
        "slow link: world: bus bandwidth 0.001 GB/s, below --min-busbw 0.1 GB/s"
    ], attempt.verdict.problems
    report = isolate(backend, attempt, tmp_path / "isolate", criteria=criteria)
    assert report.ran and report.isolation is not None
    assert [s.nodes for s in report.isolation.suspects] == [(5,)]
    trials = backend.launched[1:]
    assert 0 < len(trials) <= 2 * 3  # 2 log2(8)
    assert all(t.workload_args == ("--bandwidth-mb", "1", "--bandwidth-only") for t in trials)
    assert all(t.nodes == len(t.node_ids) >= 2 for t in trials)  # one rank per node: two nodes a trial
    assert [t.failed for t in report.isolation.trials] == [5 in t.node_ids for t in trials]
    assert (tmp_path / "isolate" / "run-1-nodes-0-1-2-3").is_dir()
    doc = report.as_dict()
    assert doc["suspect_nodes"] == [5] and len(doc["runs"]) == len(trials)
    assert doc["pinned"] is False  # its ranks named no machine


def test_a_pinned_trial_asks_slurm_for_its_machines(tmp_path):
    from rollcall.backends.slurm.script import Settings, render

    pinned = JobSpec("job-1a2b3c-i1", 2, 1, machines=("gpu-003", "gpu-007"))
    script = render(pinned, Settings(), tmp_path)
    assert "#SBATCH --nodelist=gpu-003,gpu-007\n" in script
    assert "--nodelist" not in render(JobSpec("job-1a2b3c", 2, 1), Settings(), tmp_path)
    with pytest.raises(ValueError, match="cannot be passed to --nodelist"):
        render(JobSpec("job-1a2b3c-i1", 2, 1, machines=("gpu-003", "a b")), Settings(), tmp_path)


def test_the_machines_come_from_the_start_events_even_of_ranks_that_never_trained():
    from rollcall.isolation.probe import machines_of
    from tests.unit.helpers import event

    roll = RollCall()
    for node, machine in enumerate(("ip-10-0-0-1", "ip-10-0-0-2")):
        parser = roll.parser(f"pod-{node}")
        start = event("start", node, 2, local_rank=0, node_rank=node, node=machine)
        parser.feed(f"[{node}]:{start}\n".encode())
        parser.close()
    verdict = judged(roll, JobSpec("job", 2, 1)).verdict
    assert not verdict.passed
    assert machines_of(verdict) == {0: "ip-10-0-0-1", 1: "ip-10-0-0-2"}
