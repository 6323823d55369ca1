"""A run's verdict from what its watches hold: pure decisions of KubernetesJob, without a cluster."""

import json
import re
import threading
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from rollcall.backends import JobState, JobStatus, Waits
from rollcall.backends.kubernetes.capacity import Lookup, Provisioner
from rollcall.backends.kubernetes.discovery import node_info
from rollcall.backends.kubernetes.efa import EfaEvidence
from rollcall.backends.kubernetes.job import JobSettings, KubernetesJob
from rollcall.backends.kubernetes.jobsets import JOB_MADE_S
from rollcall.backends.kubernetes.manifests import Names, render
from rollcall.collect import Collector
from rollcall.jobspec import JobSpec
from tests.unit.helpers import event

INDEX = "batch.kubernetes.io/job-completion-index"


class NoLogs:
    """The core API as the job's wait reads it: no pod logs; the run's namespace and Service as ``owned``
    holds them (a name missing from it is gone)."""

    def __init__(self):
        self.owned = {"ns-1": {"metadata": {"name": "ns-1"}}, "bert": {"metadata": {"name": "bert"}}}

    def read_namespaced_pod_log(self, *args, **kwargs):
        raise ApiException(status=404, reason="Not Found")

    def _read(self, name):
        if name not in self.owned:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=json.dumps(self.owned[name]).encode())

    def read_namespace(self, name, **kwargs):
        return self._read(name)

    def read_namespaced_service(self, name, namespace, **kwargs):
        return self._read(name)


class FakeInformer:
    def __init__(self, *objs):
        self.items = {o["metadata"]["name"]: o for o in objs}
        self.synced = threading.Event()
        self.synced.set()
        self.error = None

    def objects(self):
        return list(self.items.values())

    def get(self, name):
        return self.items.get(name)

    def subscribe(self, fn):
        pass

    def unsubscribe(self, fn):
        pass

    def stop(self):
        pass


def pod(name, index, phase="Running", **status):
    return {
        "metadata": {"name": name, "labels": {INDEX: str(index)}},
        "spec": {"nodeName": f"node-{index}"},
        "status": {"phase": phase, **status},
    }


def job_obj(*conditions):
    return {"metadata": {"name": "bert"}, "status": {"conditions": list(conditions)}}


def make(tmp_path, pods=(), job=None, accelerator="nvidia", efa=True, grace=60.0, **settings):
    resources = {"nvidia.com/gpu": 8, **({"vpc.amazonaws.com/efa": 32} if efa else {})}
    spec = JobSpec("bert", 2, 8, accelerator=accelerator, image="i", resources=resources)
    names = Names("ns-1", "bert", "bert", "1")
    config = JobSettings(
        kube=SimpleNamespace(core=NoLogs()), unschedulable_grace_s=grace, drain_s=1.0, **settings
    )
    run = KubernetesJob(config, spec, names, render(spec, names), Collector(tmp_path))
    run.jobs = FakeInformer(job or job_obj())
    run.pods = FakeInformer(*pods)

    def read_job(name, namespace, **kwargs):  # a fresh read of the Job: what its watch holds
        return SimpleNamespace(data=json.dumps(run.jobs.get(name)).encode())

    config.kube.batch = SimpleNamespace(read_namespaced_job=read_job)
    return run


def test_running_pods_and_a_running_job_mean_wait(tmp_path):
    assert make(tmp_path, [pod("a", 0), pod("b", 1)])._verdict() is None


def test_a_complete_job_succeeds(tmp_path):
    run = make(tmp_path, [pod("a", 0, "Succeeded")], job_obj({"type": "Complete", "status": "True"}))
    assert run._verdict().state is JobState.SUCCEEDED


def test_a_deadline_is_a_timeout_and_a_deleted_job_a_failure(tmp_path):
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "DeadlineExceeded",
        "message": "past its deadline",
    }
    assert make(tmp_path, job=job_obj(failed))._verdict().state is JobState.TIMED_OUT
    run = make(tmp_path)
    run.jobs.items.clear()
    status = run._verdict()
    assert status.state is JobState.FAILED and status.disruption.deleted_under_run
    assert status.reason == (
        "deleted under the run: Job bert was deleted under the run (DeletedUnderRun): it is gone, while the "
        "run trained, and not by rollcall"
    )


def test_a_namespace_service_or_pod_deleted_by_someone_else_is_named_as_that(tmp_path):
    gone = "2026-12-01T22:00:00Z"
    run = make(tmp_path, [pod("bert-0", 0), pod("bert-1", 1)])
    assert run._verdict() is None  # everything is there and runs
    run.settings.kube.core.owned["ns-1"]["metadata"]["deletionTimestamp"] = gone
    run.pods.items["bert-1"]["metadata"]["deletionTimestamp"] = gone  # the namespace takes its pods along
    status = run._verdict()
    assert status.disruption.kind == "namespace" and status.disruption.pod == "ns-1"
    assert status.reason.startswith(
        "deleted under the run: namespace ns-1 was deleted under the run (DeletedUnderRun): its deletion was "
        f"asked for at {gone}"
    )
    run = make(tmp_path, [pod("bert-0", 0), pod("bert-1", 1)])
    del run.settings.kube.core.owned["bert"]
    run.under_run.checked = -1e9  # the Service is read on its own schedule: now
    assert run._verdict().disruption.kind == "Service"
    run = make(tmp_path, [pod("bert-0", 0), pod("bert-1", 1)])
    run.pods.items["bert-1"]["metadata"]["deletionTimestamp"] = gone  # kubectl delete pod bert-1
    found = run._verdict().disruption
    assert (found.kind, found.pod, found.node, found.host) == ("pod", "bert-1", 1, "node-1")
    # the Job's own deletion of its pods once it has failed is no one else's
    failing = {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "m"}
    run = make(tmp_path, [pod("bert-0", 0), pod("bert-1", 1)], job=job_obj(failing))
    run.pods.items["bert-1"]["metadata"]["deletionTimestamp"] = gone
    assert run.under_run.find(run.jobs.get("bert"), run.pods.objects(), 0.0) is None
    # the Jobs' watch lags the pods': a fresh read of the Job shows it failing, so its pods are its own
    run = make(tmp_path, [pod("bert-0", 0), pod("bert-1", 1)])
    run.pods.items["bert-1"]["metadata"]["deletionTimestamp"] = gone
    stale = json.loads(json.dumps(run.jobs.get("bert")))
    run.jobs.get("bert")["status"]["conditions"] = [failing]
    assert run.under_run.find(stale, run.pods.objects(), 0.0) is None
    # a Job past its deadline on a cluster that marks it only after deleting its pods
    run = make(tmp_path, [pod("bert-0", 0), pod("bert-1", 1)])
    run.pods.items["bert-1"]["metadata"]["deletionTimestamp"] = gone
    run.jobs.get("bert")["spec"] = {"activeDeadlineSeconds": 3}
    run.jobs.get("bert")["status"]["startTime"] = "2026-01-01T00:00:00Z"
    assert run.under_run.find(run.jobs.get("bert"), run.pods.objects(), 0.0) is None


def test_unschedulable_fails_only_after_the_grace_period(tmp_path, monkeypatch):
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes fit"}
    run = make(tmp_path, [pod("a", 0, "Pending", conditions=[cond])], grace=30)
    clock = iter([100.0, 110.0, 131.0])
    monkeypatch.setattr("rollcall.backends.kubernetes.job.time.monotonic", lambda: next(clock))
    assert run._verdict() is None
    assert run._verdict() is None
    status = run._verdict()
    assert status.state is JobState.FAILED
    assert status.reason == "pod a (index 0) on node node-0 is Unschedulable after 31s: 0/2 nodes fit"


def test_a_pod_that_schedules_resets_its_grace(tmp_path, monkeypatch):
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    run = make(tmp_path, [pod("a", 0, "Pending", conditions=[cond])], grace=30)
    clock = iter([100.0, 120.0, 140.0, 160.0])
    monkeypatch.setattr("rollcall.backends.kubernetes.job.time.monotonic", lambda: next(clock))
    assert run._verdict() is None
    run.pods.items["a"] = pod("a", 0)
    assert run._verdict() is None
    run.pods.items["a"] = pod("a", 0, "Pending", conditions=[cond])
    assert run._verdict() is None and run._verdict() is None


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 fit"}
KARPENTER = Lookup((Provisioner("karpenter", "trn"),), ())


def waiting(name, index):
    return {
        "metadata": {"name": name, "labels": {INDEX: str(index)}},
        "spec": {},
        "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]},
    }


def clocked(run, monkeypatch, *times):
    clock = iter(times)
    monkeypatch.setattr("rollcall.backends.kubernetes.job.time.monotonic", lambda: next(clock))
    run.started, run._timeout_s = 0.0, 600.0
    return run


def test_while_capacity_arrives_unschedulable_is_no_fault_until_the_capacity_timeout(tmp_path, monkeypatch):
    run = make(
        tmp_path, [waiting("a", 0), waiting("b", 1)], grace=30, capacity_timeout_s=300, arriving=KARPENTER
    )
    clocked(run, monkeypatch, 10.0, 299.0, 301.0)
    assert run._verdict() is None and run._verdict() is None
    status = run._verdict()
    assert status.state is JobState.NO_CAPACITY
    assert status.reason.startswith("Karpenter NodePool trn did not arrive within 300s (--capacity-timeout)")
    assert "the scheduler says: 0/2 fit" in status.reason
    assert run.waited() == Waits("Karpenter NodePool trn", None, None)


def test_the_job_timeout_counts_from_when_every_pod_is_scheduled(tmp_path, monkeypatch):
    run = make(tmp_path, [waiting("a", 0), waiting("b", 1)], capacity_timeout_s=900, arriving=KARPENTER)
    clocked(run, monkeypatch, 100.0, 500.0, 500.0 + 600 + 9, 500.0 + 600 + 10)
    assert run._verdict() is None
    run.pods.items = {p["metadata"]["name"]: p for p in (pod("a", 0), pod("b", 1))}
    assert run._verdict() is None, "scheduled after 500 s: --job-timeout starts now"
    assert run._verdict() is None
    status = run._verdict()
    assert (
        status.state is JobState.TIMED_OUT
        and "600s (--job-timeout) of its pods being scheduled" in status.reason
    )
    assert run.waited().scheduled_s == 500.0


def test_a_job_timeout_with_a_pod_still_pulling_names_that_node_late_not_hung(tmp_path, monkeypatch):
    """Pod b was bound an hour ago and no container of it has started: the timeout names node 1 as still
    pulling its image (or creating its containers), with the seconds so far, and node 0 started."""
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}
    started = {"running": {"startedAt": "2026-12-01T10:00:30Z"}}
    a = pod("a", 0, conditions=[scheduled], containerStatuses=[{"name": "train", "state": started}])
    b = pod("b", 1, "Pending", conditions=[scheduled])
    b["spec"]["containers"] = [{"name": "train", "image": "registry.example/bert:cuda"}]
    run = make(tmp_path, [a, b])
    clocked(run, monkeypatch, 0.0, 0.0 + 1800 + 10)
    assert run._verdict() is None
    status = run._verdict()
    assert status.state is JobState.TIMED_OUT, status
    assert re.search(
        r"; node 1 still pulling image registry.example/bert:cuda or creating its containers \(pod b on "
        r"node-1\) after \d+s: late, not hung$",
        status.reason,
    ), status.reason
    pulls = run.waited().pulls
    assert [(p.node, p.done) for p in pulls] == [(0, True), (1, False)] and pulls[0].seconds == 30.0


def test_a_suspended_job_waits_for_quota_under_the_capacity_timeout(tmp_path, monkeypatch):
    job = job_obj() | {"spec": {"suspend": True}}
    run = make(tmp_path, [], job, capacity_timeout_s=60)
    clocked(run, monkeypatch, 59.0, 60.0)
    assert run._verdict() is None and run._waiting_note() == "waiting for quota (Kueue): the Job is suspended"
    status = run._verdict()
    assert status.state is JobState.NO_CAPACITY
    assert status.reason.startswith(
        "quota (Kueue) did not arrive within 60s (--capacity-timeout): no pods yet"
    )


def test_the_first_broken_pod_fails_the_run(tmp_path):
    oom = {"name": "train", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
    run = make(tmp_path, [pod("a", 0), pod("b", 1, "Failed", containerStatuses=[oom])])
    status = run._verdict()
    assert status.state is JobState.FAILED and "pod b (index 1) on node node-1" in status.reason
    assert "OOMKilled" in status.reason


def node_obj(name, ready="True", **spec):
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_a_disruption_is_judged_before_the_ranks_it_brought_down(tmp_path):
    # pod a's peer b was evicted; a's ranks then failed (exit 1): the eviction is the run's end, not a's exit
    crashed = {"name": "train", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    evicted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "m",
    }
    run = make(
        tmp_path,
        [pod("a", 0, "Failed", containerStatuses=[crashed]), pod("b", 1, conditions=[evicted])],
    )
    status = run._verdict()
    assert status.state is JobState.FAILED and status.disruption is not None
    assert (status.disruption.pod, status.disruption.host) == ("b", "node-1")
    assert (
        status.reason
        == "infrastructure disruption: pod b (index 1) on node node-1 was disrupted (EvictionByEvictionAPI): m"
    )


def test_a_lost_node_is_a_disruption_once_the_nodes_are_listed(tmp_path):
    run = make(tmp_path, [pod("a", 0), pod("b", 1)])
    run.nodes = FakeInformer(node_obj("node-0"))
    run.nodes.synced.clear()
    assert run._verdict() is None, "the nodes' watch has not listed yet: node-1 is not known to be gone"
    run.nodes.synced.set()
    status = run._verdict()
    assert status.disruption is not None and status.disruption.reason == "NodeDeleted"
    assert status.disruption.host == "node-1"


def test_a_job_failed_by_its_pod_failure_policy_for_a_disruption_reads_as_one(tmp_path):
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": "Pod ns-1/b has condition DisruptionTarget matching FailJob rule at index 0",
    }
    status = make(tmp_path, [pod("a", 0)], job_obj(failed))._verdict()
    assert status.state is JobState.FAILED and status.disruption is not None
    assert status.disruption.pod == "b" and status.disruption.reason == "DisruptionTarget"


@pytest.mark.parametrize(
    ("accelerator", "evidence", "failed", "says"),
    [
        ("nvidia", {"a": EfaEvidence(efa=True), "b": EfaEvidence(efa=True)}, False, None),
        (
            "nvidia",
            {"a": EfaEvidence(efa=True), "b": EfaEvidence()},
            True,
            "never logged NCCL selecting it",
        ),
        (
            "nvidia",
            {"a": EfaEvidence(fallback="Using network Socket")},
            True,
            "fell back to TCP sockets",
        ),
        (
            "neuron",
            {"a": EfaEvidence(fallback="Using network Socket")},
            True,
            "fell back to TCP sockets",
        ),
        (
            "neuron",
            {"a": EfaEvidence(), "b": EfaEvidence()},
            False,
            "EFA use not proven on 2 pod(s)",
        ),
    ],
)
def test_efa_must_have_been_used(tmp_path, accelerator, evidence, failed, says):
    run = make(tmp_path, accelerator=accelerator)
    run.evidence = evidence
    status = JobStatus(JobState.SUCCEEDED)
    run._report_efa(status)
    # the job reports what it saw; its state never says it twice (the judge's efa check does)
    assert status.state is JobState.SUCCEEDED and status.reason == ""
    assert status.efa is not None and status.efa.failed is failed
    assert bool(status.efa.reason) is failed
    text = " ".join([status.efa.reason, *status.details])
    assert says is None or says in text


def test_the_efa_failure_names_what_was_missing_from_the_pods_nccl_lines(tmp_path):
    run = make(tmp_path)
    lines = {
        "bert-0": b"h:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.\n",
        "bert-1": b"h:1:2 [0] NCCL INFO NET/OFI No eligible providers were found\n",
    }
    for pod_name, line in lines.items():
        run.evidence[pod_name] = EfaEvidence()
        run.evidence[pod_name].scan(line + b"h:1:2 [0] NCCL INFO Using network Socket\n")
    status = JobStatus(JobState.SUCCEEDED)
    run._report_efa(status)
    assert status.state is JobState.SUCCEEDED and status.efa is not None and status.efa.failed
    reason = status.efa.reason
    assert reason.startswith("EFA was requested but NCCL did not use it on 2 pod(s): it fell back to TCP")
    assert "missing the aws-ofi-nccl network plugin (libnccl-net.so) ('NET/Plugin: Could not find: " in reason
    assert "/opt/amazon/ofi-nccl/lib" in reason and "[bert-0]" in reason
    assert "missing an EFA device in the container" in reason and "[bert-1]" in reason
    assert set(status.efa.causes) == {"bert-0", "bert-1"}
    assert status.details == ["bert-0: 'Using network Socket'", "bert-1: 'Using network Socket'"]


def test_details_name_duplicate_indexes_and_pods_without_logs(tmp_path):
    started = [{"name": "train", "state": {"terminated": {"exitCode": 0}}}]
    run = make(
        tmp_path,
        [
            pod("bert-0-x", 0, "Failed", containerStatuses=started),
            pod("bert-0-y", 0, "Succeeded", containerStatuses=started),
            pod("bert-1-z", 1, "Pending"),
        ],
    )
    assert run._details() == [
        "index 0 ran in 2 pods (bert-0-x, bert-0-y); all logs are kept",
        "pod(s) that never started, so left no log: bert-1-z",
    ]


def test_each_look_tells_the_roll_call_which_nodes_are_on_their_way(tmp_path):
    """A node none of whose pods has started a container (not yet created, waiting for capacity, pulling its
    image, creating its container) is on its way; a started container (the monitor sidecar's first), or a
    pod that already ended, has arrived. The roll call's start-skew checks read it (evidence/clocks.py)."""
    started = {
        "name": "monitor",
        "started": True,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }
    waiting = {"name": "bert", "state": {"waiting": {"reason": "ContainerCreating"}}}
    up = pod("a", 0, "Pending", initContainerStatuses=[started], containerStatuses=[waiting])
    pulling = pod(
        "b", 1, "Pending", containerStatuses=[{**waiting, "state": {"waiting": {"reason": "Pulling"}}}]
    )
    run = make(tmp_path, [up, pulling])
    assert run._verdict() is None
    roll = run.collector.roll
    assert roll.arriving_now == {1} and set(roll.arriving) == {1}
    run.pods = FakeInformer(up, pod("b", 1, "Failed"))  # it ended before a look saw it run: it arrived
    run._verdict()
    assert roll.arriving_now == frozenset() and roll.arriving[1].last >= roll.arriving[1].first
    alone = make(tmp_path, [up])  # node 1's pod not created yet
    alone._verdict()
    assert alone.collector.roll.arriving_now == {1}


def test_a_stop_reason_ends_a_running_job_as_stopped_and_a_finished_one_keeps_its_end(tmp_path):
    run = make(tmp_path, [pod("a", 0), pod("b", 1)])
    run._stop_test = lambda: "rank(s) 1 hung"
    status = run._verdict()
    assert status.state is JobState.STOPPED and status.reason == "rank(s) 1 hung; job ns-1/bert is deleted"
    done = make(tmp_path, [pod("a", 0, "Succeeded")], job_obj({"type": "Complete", "status": "True"}))
    done._stop_test = lambda: "rank(s) 1 hung"
    assert done._verdict().state is JobState.SUCCEEDED


def test_each_nodes_facts_carry_its_type_and_the_gpus_a_pod_given_all_of_them_must_see(tmp_path):
    def gpu_pod(name, index, gpus):
        p = pod(name, index)
        p["spec"]["containers"] = [{"name": "bert", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
        return p

    run = make(tmp_path, [gpu_pod("a", 0, 8), gpu_pod("b", 1, 4)])
    nodes = [node_obj(f"node-{i}") for i in (0, 1)]
    for n in nodes:
        n["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    run.nodes = FakeInformer(*nodes)
    # with its type's counts (the advertised_devices rule), and what it advertises where it says
    of_type = {"instance_type": "p5.48xlarge", "type_gpus": "8", "type_efa": "32"}
    assert node_info(run.pods.objects(), run.nodes.get) == {
        "node-0": {**of_type, "expected_gpus": "8"},
        "node-1": of_type,  # given 4 of its 8: it sees its share, nothing is expected
    }


def test_each_nodes_facts_carry_what_it_advertises_beside_what_its_type_has(tmp_path):
    """A GPU a node does not advertise is a fault nothing here can produce: the Node's status is written."""
    run = make(tmp_path, [pod("a", 0)])
    short = node_obj("node-0")
    short["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    short["status"] |= {
        "capacity": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        "allocatable": {"nvidia.com/gpu": "7", "vpc.amazonaws.com/efa": "32"},  # one unhealthy
    }
    run.nodes = FakeInformer(short)
    assert node_info(run.pods.objects(), run.nodes.get) == {
        "node-0": {
            "instance_type": "p5.48xlarge",
            "advertised_gpus": "7",
            "advertised_efa": "32",
            "type_gpus": "8",
            "type_efa": "32",
            # its own health: allocatable against capacity (the lost_devices rule)
            "allocatable_gpus": "7",
            "capacity_gpus": "8",
            "allocatable_efa": "32",
            "capacity_efa": "32",
        }
    }


class LogsByContainer(NoLogs):
    """The core API serving each container's whole log at once, by (pod, container)."""

    def __init__(self, logs):
        super().__init__()
        self.logs = logs

    def read_namespaced_pod_log(self, pod, namespace, container=None, **kwargs):
        data = self.logs[(pod, container)]
        return SimpleNamespace(stream=lambda *a, **k: iter([data]), release_conn=lambda: None)


def test_the_monitor_sidecars_log_is_followed_into_its_pods_node(tmp_path):
    train = f"[1]:{event('start', 1, 16, phase='start')}\n".encode()
    silent = event("silent", 1, 16, phase="epoch 1 end", steps=3, stalled_s=12.0, heartbeat_s=11.0,
                   hang_after=5.0, margin_s=5.0, pid=42, state="T", state_name="stopped")  # fmt: skip
    ended = {"state": {"terminated": {"exitCode": 0}}}
    p = pod(
        "bert-0-x",
        0,
        initContainerStatuses=[{"name": "monitor", **ended}],
        containerStatuses=[{"name": "train", **ended}],
    )
    run = make(tmp_path, [p])
    run.settings.kube.core = LogsByContainer(
        {("bert-0-x", "train"): train, ("bert-0-x", "monitor"): f"{silent}\n".encode()}
    )
    run._observe()
    assert set(run.followers) == {("bert-0-x", "train"), ("bert-0-x", "monitor")}
    run._drain(close_running=False)
    report = run.collector.roll.ranks[1]
    assert report.silent is not None and report.silent.state == "T"
    assert report.sources == {"bert-0-x"}  # one node, one log name: the pod's
    assert (tmp_path / "bert-0-x.monitor.log").read_text() == f"{silent}\n"


@pytest.mark.parametrize(("gpus", "owns"), [(8, True), (4, False)])
def test_the_jobs_end_says_whether_its_pods_had_every_gpu_of_their_nodes(tmp_path, gpus, owns):
    """Each pod given every GPU its node has allocatable: the run owns its nodes, and an Xid on any GPU of
    them is its own; given fewer, a GPU no rank used may be another tenant's."""

    def placed(name, index, node):
        p = pod(name, index, "Succeeded")
        limits = {"nvidia.com/gpu": str(gpus)}
        p["spec"] = {"nodeName": node, "containers": [{"name": "bert", "resources": {"limits": limits}}]}
        return p

    complete = job_obj({"type": "Complete", "status": "True"})
    run = make(tmp_path, [placed("a", 0, "node-0"), placed("b", 1, "node-1")], complete)
    nodes = [node_obj(f"node-{i}") for i in (0, 1)]
    for n in nodes:
        n["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    run.nodes = FakeInformer(*nodes)
    status = run._wait(30)
    assert status.state is JobState.SUCCEEDED and status.owns_nodes is owns


# -- --job-kind jobset: the JobSet's controller makes the Job after the JobSet ----------------------------


class JobSetCore(NoLogs):
    """The core API of a JobSet's run: its Service ``bert`` (the JobSet's), and the namespace's events."""

    def __init__(self, events=()):
        super().__init__()
        self.events = list(events)
        self.asked = []

    def list_namespaced_event(self, namespace, field_selector=None, **kwargs):
        self.asked.append(field_selector)
        return SimpleNamespace(data=json.dumps({"items": self.events}).encode())


def make_jobset(tmp_path, jobset=None, events=()):
    spec = JobSpec("bert", 2, 8, accelerator="nvidia", image="i", resources={"nvidia.com/gpu": 8})
    names = Names.new("rollcall", "bert", "ns-1", kind="jobset")
    names = Names("ns-1", names.job, names.service, "1", own_namespace=False, jobset=names.jobset)
    config = JobSettings(
        kube=SimpleNamespace(core=JobSetCore(events)), unschedulable_grace_s=60.0, drain_s=1.0
    )
    run = KubernetesJob(config, spec, names, render(spec, names), Collector(tmp_path))
    run.jobs = FakeInformer()
    run.pods = FakeInformer()
    run.jobsets = FakeInformer(jobset or {"metadata": {"name": "bert"}, "status": {}})

    def read_job(name, namespace, **kwargs):
        return SimpleNamespace(data=json.dumps(run.jobs.get(name)).encode())

    config.kube.batch = SimpleNamespace(read_namespaced_job=read_job)
    return run


def test_a_jobset_renders_its_job_as_its_one_replicated_job_and_makes_its_own_service(tmp_path):
    run = make_jobset(tmp_path)
    assert run.names.job == "bert-node-0" and run.names.workload == "JobSet ns-1/bert"
    assert [o["kind"] for o in run.rendered.objects()] == ["JobSet"] and run.rendered.service is None
    (replicated,) = run.rendered.jobset["spec"]["replicatedJobs"]
    assert (
        replicated["template"]["spec"] is run.rendered.job["spec"]
    )  # one spec: its deadline is the JobSet's
    run.rendered.extend_deadline(60)
    assert (
        replicated["template"]["spec"]["activeDeadlineSeconds"]
        == run.rendered.job["spec"]["activeDeadlineSeconds"]
    )
    command = " ".join(run.rendered.job["spec"]["template"]["spec"]["containers"][0]["command"])
    assert "--master-addr=bert-node-0-0.bert" in command or "--master_addr=bert-node-0-0.bert" in command, (
        command
    )


def test_before_the_jobsets_controller_makes_the_job_the_run_waits_naming_nothing(tmp_path):
    run = make_jobset(tmp_path)
    assert run._verdict() is None  # no Job yet is not a Job deleted
    assert not run.job_seen


def test_a_jobset_deleted_before_or_after_making_its_job_is_named_as_deleted_under_the_run(tmp_path):
    run = make_jobset(tmp_path)
    run.jobsets.items.clear()
    status = run._verdict()
    assert status.disruption.deleted_under_run and status.disruption.kind == "JobSet"
    assert status.reason.startswith("deleted under the run: JobSet bert was deleted under the run")

    run = make_jobset(tmp_path)
    run.jobs = FakeInformer(job_obj() | {"metadata": {"name": "bert-node-0"}})
    run.pods = FakeInformer(pod("bert-node-0-0-x", 0), pod("bert-node-0-1-y", 1))
    assert run._verdict() is None and run.job_seen
    gone = "2026-12-06T20:00:00Z"
    run.jobsets.items["bert"]["metadata"]["deletionTimestamp"] = gone
    status = run._verdict()
    assert status.disruption.kind == "JobSet" and status.disruption.pod == "bert", status.reason
    assert f"its deletion was asked for at {gone}" in status.reason


def test_a_jobset_that_failed_or_made_no_job_in_time_fails_naming_why(tmp_path):
    failed = {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "no Job could be made"}
    run = make_jobset(tmp_path, {"metadata": {"name": "bert"}, "status": {"conditions": [failed]}})
    status = run._verdict()
    assert status.state is JobState.FAILED
    assert status.reason == "JobSet ns-1/bert failed before making its Job: FailedJobs: no Job could be made"

    warning = {
        "metadata": {"name": "bert.1"},
        "type": "Warning",
        "reason": "JobCreationFailed",
        "message": 'admission webhook "x" denied the request',
        "involvedObject": {"kind": "JobSet", "name": "bert"},
        "lastTimestamp": "2026-12-06T20:00:00Z",
    }
    run = make_jobset(tmp_path, events=[warning])
    run.started -= JOB_MADE_S - 1
    assert run._verdict() is None  # the controller may yet
    run.started -= 2
    status = run._verdict()
    assert status.state is JobState.FAILED and status.reason.startswith(
        f"JobSet ns-1/bert made no Job within {JOB_MADE_S:g}s of its creation: the JobSet controller "
        "(sigs.k8s.io/jobset) is not running or cannot create Jobs here; its events: JobCreationFailed: "
        'admission webhook "x" denied the request'
    ), status.reason
    assert run.settings.kube.core.asked == [
        "involvedObject.kind=JobSet,involvedObject.name=bert,type=Warning"
    ]
