"""The kubernetes backend against a real API server, scheduler and Job controller, with kwok nodes.

Each test runs the suite's own path (discovery, Suite.run: provision, wait, collect, assess, clean up) and,
through the autouse ``nothing_left_behind`` fixture, proves that no namespace of the suite is left.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
import yaml

from rollcall.backends import DiscoveryError, JobState
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.manifests import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL, RUN_ID_LABEL
from rollcall.backends.kubernetes.reaper import Claim
from rollcall.checks.efa import EFA as EFA_KIND
from rollcall.checks.errors import ROOT_CAUSE
from tests.cluster.controlplane import (
    INSTANCE_TYPE_LABEL,
    RUN_DURATION_ANNOTATION,
)
from tests.waiting import wait_until

from .conftest import P5, TRN1, job_name, suite_namespaces
from .fakekubelet import LEAVE, LOG_SKIP, MONITOR_LINE, NCCL_NET

pytestmark = pytest.mark.control_plane


def run(suite, request, **overrides):
    started_at = time.monotonic()
    record = suite.run(request.node.nodeid, request.node.name, **overrides)
    return record.result.last, time.monotonic() - started_at


@pytest.mark.parametrize("nodes", [2, 8])
def test_every_rank_of_every_node_answers(make_suite, ensure_nodes, request, nodes):
    ensure_nodes(nodes)
    suite, backend = make_suite(nodes=nodes)
    attempt, _ = run(suite, request)

    assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
    assert attempt.status.state is JobState.SUCCEEDED and attempt.status.details == []
    assert attempt.spec.procs_per_node == 32 and attempt.verdict.layout.world_size == nodes * 32
    monitors = sorted(attempt.artifacts.glob("*.monitor.log"))
    logs = sorted(set(attempt.artifacts.glob("*.log")) - set(monitors))
    assert len(logs) == nodes, "one log per pod"
    assert len(monitors) == nodes, "and its monitor's beside it"
    assert all(p.read_text() == f"{MONITOR_LINE}\n" for p in monitors)
    assert all(p.name.startswith(attempt.spec.name) for p in logs)
    assert b"ROLLCALL " in logs[0].read_bytes() and not logs[0].read_bytes().startswith(b"20")
    assert not (attempt.artifacts / "events.yaml").exists(), "state is saved only on failure"
    progress = backend.progress_lines
    assert any(f"succeeded {nodes}, failed 0 of {nodes}" in line for line in progress), progress


def test_missing_ranks_fail_the_roll_call_by_name(make_suite, request):
    skip = {"37": ["throughput", "complete"], "40": ["epoch_time"]}
    suite, _ = make_suite(nodes=2, annotations={LOG_SKIP: json.dumps(skip)})
    attempt, _ = run(suite, request)

    assert attempt.status.state is JobState.SUCCEEDED, "the Job itself completed"
    assert not attempt.passed
    assert attempt.verdict.missing == {"throughput": [37], "epoch_time": [40], "complete": [37]}
    message = attempt.verdict.message(str(attempt.artifacts))
    assert "37" in message and "40" in message and "node 1" in message


def test_a_rank_that_exits_0_early_is_named_first_from_its_own_exit_event(make_suite, request):
    """The Job's failure policy acts on non-zero exits only, so a pod whose rank left with status 0 fails
    nothing by itself; the rank's own ``exit`` event names it as the first to leave."""
    suite, _ = make_suite(nodes=2, annotations={LEAVE: json.dumps([33])})
    attempt, _ = run(suite, request)

    assert attempt.status.state is JobState.SUCCEEDED, "nothing failed the Job itself"
    assert not attempt.passed
    first = attempt.verdict.findings[0]
    assert first.kind is ROOT_CAUSE and set(first.ranks) == {33}, attempt.verdict.message()
    assert first.message.startswith(
        "first failure: rank 33 (node 1) left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), "
        f"before complete [pod {job_name(attempt.spec.name)}-1-"
    ), first.message
    assert attempt.verdict.missing["complete"] == [33]


def test_too_few_nodes_fails_before_creating_anything(make_suite, kube, kubelet, request):
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    pods_before = len(kubelet.served)
    suite, _ = make_suite(nodes=50)
    with pytest.raises(DiscoveryError) as err:
        run(suite, request)
    text = str(err.value)
    assert text.startswith("need 50 usable node(s), found ")
    assert "trn1-32xlarge-0" in text
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before
    assert len(kubelet.served) == pods_before


def test_a_job_larger_than_discovery_found_is_refused_at_launch(make_suite, kube, request):
    suite, _ = make_suite(nodes=2)
    assert suite.placement.procs_per_node == 32
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    with pytest.raises(DiscoveryError, match="nothing was created: need 40 usable node"):
        run(suite, request, nodes=40)
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before


def test_discovery_says_why_nodes_are_not_usable(make_suite, control_plane, ensure_nodes, request):
    ensure_nodes(4)
    names = sorted(
        n["metadata"]["name"]
        for n in control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={TRN1}")["items"]
    )
    cordoned, tainted = names[-2:]
    control_plane.kubectl("cordon", cordoned)
    control_plane.kubectl("taint", "node", tainted, "dedicated=infra:NoSchedule")
    try:
        suite, _ = make_suite(nodes=len(names) - 1)
        with pytest.raises(DiscoveryError) as err:
            suite.placement  # noqa: B018 - discovery runs on first use
        text = str(err.value)
        assert f"need {len(names) - 1} usable node(s), found {len(names) - 2} for neuron" in text
        assert f"cordoned (spec.unschedulable): {cordoned} (1)" in text
        assert f"tainted dedicated=infra:NoSchedule (not tolerated): {tainted} (1)" in text
    finally:
        control_plane.kubectl("uncordon", cordoned)
        control_plane.kubectl("taint", "node", tainted, "dedicated-")


def test_an_unschedulable_request_fails_fast_with_the_schedulers_reason(make_suite, request):
    suite, _ = make_suite(nodes=2, job_timeout=600)
    attempt, took = run(suite, request, resources={"aws.amazon.com/neuroncore": 64})

    assert attempt.status.state is JobState.FAILED
    reason = attempt.status.reason
    assert "is Unschedulable after" in reason and "Insufficient aws.amazon.com/neuroncore" in reason
    assert "on node no node yet" in reason
    assert took < 30
    pods = yaml.safe_load((attempt.artifacts / "pods.yaml").read_text())
    assert len(pods) == 2 and all(p["status"]["phase"] == "Pending" for p in pods)
    events = yaml.safe_load((attempt.artifacts / "events.yaml").read_text())
    assert any(e.get("reason") == "FailedScheduling" for e in events)
    assert yaml.safe_load((attempt.artifacts / "job.yaml").read_text())["metadata"]["name"] == job_name(
        attempt.spec.name
    )


def test_the_job_timeout_ends_the_run(make_suite, request):
    suite, _ = make_suite(nodes=2, job_timeout=3, annotations={RUN_DURATION_ANNOTATION: "120s"})
    attempt, took = run(suite, request)

    assert attempt.status.state is JobState.TIMED_OUT
    assert "DeadlineExceeded" in attempt.status.reason or "--job-timeout" in attempt.status.reason
    assert took < 30


def test_the_suite_reconnects_when_the_api_server_restarts(make_suite, control_plane, kube, request, caplog):
    caplog.set_level(logging.INFO, logger="rollcall.backends.kubernetes.kube")
    suite, _ = make_suite(nodes=2, annotations={RUN_DURATION_ANNOTATION: "25s"})
    result: dict[str, Any] = {}

    def go() -> None:
        result["attempt"], _ = run(suite, request)

    runner = threading.Thread(target=go)
    runner.start()

    def running() -> bool:
        pods = call(kube.core.list_pod_for_all_namespaces, label_selector=JOB_LABEL)["items"]
        return len([p for p in pods if p["status"].get("phase") == "Running"]) >= 2

    wait_until("the job's pods to run", running, timeout=60)
    control_plane.restart_apiserver()
    runner.join(180)

    attempt = result["attempt"]
    assert attempt.status.state is JobState.SUCCEEDED, attempt.status
    assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
    assert any("retrying" in r.getMessage() for r in caplog.records), "the watches had to reconnect"


def test_keep_leaves_the_namespace_for_debugging(make_suite, kube, request):
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    suite, backend = make_suite(nodes=2, keep=True)
    attempt, _ = run(suite, request)
    assert attempt.passed, (attempt.status.reason, attempt.verdict.problems)
    (kept,) = {n["metadata"]["name"] for n in suite_namespaces(kube)} - before
    assert kept not in backend.ledger.pending(), "a kept namespace is not deleted at exit either"
    pods = call(kube.core.list_namespaced_pod, kept)["items"]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    backend.sweep(0)


def test_a_namespace_that_clean_up_cannot_remove_is_named_as_left_behind(make_suite, kube, request):
    """A finalizer nobody removes holds the run's namespace in Terminating: clean-up names it (the session
    then fails for it), while the roll call's own verdict stays a pass."""
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    suite, backend = make_suite(nodes=2)
    backend.cleanup_timeout_s = 5
    held: dict[str, str] = {}

    def hold_the_namespace() -> None:
        def new_namespaces() -> set[str]:
            return {n["metadata"]["name"] for n in suite_namespaces(kube)} - before

        wait_until("the run's namespace", new_namespaces, timeout=60, every=0.1)
        (ns,) = new_namespaces()
        body = {"metadata": {"name": "held", "finalizers": ["rollcall.test/hold"]}}
        call(kube.core.create_namespaced_config_map, ns, body=body)
        held["namespace"] = ns

    holder = threading.Thread(target=hold_the_namespace, daemon=True)
    holder.start()
    try:
        attempt, _ = run(suite, request)
    finally:
        holder.join(60)
        if "namespace" in held:  # let it go, so that nothing is left after the test
            patch = {"metadata": {"finalizers": None}}
            call(kube.core.patch_namespaced_config_map, "held", held["namespace"], body=patch)
    assert attempt.passed, attempt.verdict.message()
    left = attempt.cleanup_error
    assert left is not None and left.left == (f"namespace {held['namespace']}",), left
    assert f"namespace {held['namespace']} is not gone yet" in str(left)
    wait_until(
        "the namespace to go once its finalizer is removed",
        lambda: held["namespace"] not in {n["metadata"]["name"] for n in suite_namespaces(kube)},
        timeout=60,
    )
    # The claim stays listed (its deletion was never confirmed), so the session's exit would ask again, after
    # this cluster is gone; the test saw it go, and crosses it out as the confirmation would have.
    assert backend.ledger.pending() == [Claim(held["namespace"])]
    backend.ledger.remove(Claim(held["namespace"]))


def test_efa_that_nccl_did_not_use_fails_the_run(make_suite, ensure_nodes, request):
    ensure_nodes(2, P5)
    suite, _ = make_suite(nodes=2, instance_type=P5, annotations={NCCL_NET: "socket"})
    attempt, _ = run(suite, request)
    assert suite.placement.resources == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}

    # the job itself succeeded: the backend reports what NCCL did, the judge's efa check fails the run
    assert attempt.status.state is JobState.SUCCEEDED and not attempt.passed
    assert attempt.status.efa is not None and attempt.status.efa.failed
    assert [p.kind for p in attempt.verdict.findings] == [EFA_KIND]
    reason = attempt.verdict.problems[0]
    assert "EFA was requested but NCCL did not use it on 2 pod(s)" in reason
    # the pods' own NCCL lines say what was missing, and the fix
    assert "missing the aws-ofi-nccl network plugin (libnccl-net.so)" in reason
    assert "/opt/amazon/ofi-nccl/lib" in reason
    assert set(attempt.status.efa.causes) == set(attempt.status.efa.fell_back)
    assert any("Using network Socket" in d for d in attempt.status.details)
    assert attempt.verdict.missing == {"throughput": [], "epoch_time": [], "complete": []} or not any(
        attempt.verdict.missing.values()
    )


def test_efa_that_nccl_used_passes(make_suite, ensure_nodes, request):
    ensure_nodes(2, P5)
    suite, _ = make_suite(nodes=2, instance_type=P5)
    attempt, _ = run(suite, request)
    assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))


def test_device_plugin_check(make_suite, control_plane, request):
    suite, _ = make_suite(nodes=2, check_device_plugins=True)
    with pytest.raises(DiscoveryError) as err:
        suite.placement  # noqa: B018 - discovery runs on first use
    assert "no neuron device-plugin DaemonSet" in str(err.value)
    assert "no efa device-plugin DaemonSet" in str(err.value)

    names = ["neuron-device-plugin-daemonset", "aws-efa-k8s-device-plugin-daemonset"]
    for name in names:
        control_plane.apply(daemonset(name))
    try:
        wait_until("the device plugins to be ready", lambda: plugins_ready(control_plane, names), timeout=60)
        suite, _ = make_suite(nodes=2, check_device_plugins=True)
        assert suite.placement.accelerator == "neuron"
    finally:
        for name in names:
            control_plane.kubectl("delete", "daemonset", name, "-n", "kube-system", "--wait=false")


def daemonset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"node.kubernetes.io/instance-type": TRN1},
                    "containers": [{"name": "plugin", "image": "registry.invalid/plugin:1"}],
                },
            },
        },
    }


def plugins_ready(control_plane, names) -> bool:
    for name in names:
        status = control_plane.get("daemonset", name, "-n", "kube-system").get("status", {})
        if (
            not status.get("desiredNumberScheduled")
            or status.get("numberReady") != status["desiredNumberScheduled"]
        ):
            return False
    return True


def test_the_sweep_removes_only_old_namespaces_of_the_suite(make_suite, control_plane, kube):
    labels = {
        "rollcall-left-behind": {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: "0a1b2c3d"},
        # labelled as the suite's by its owner, but no run created it: never swept
        "rollcall-users-own": {MANAGED_BY_LABEL: MANAGED_BY},
        "other-team": {},
    }
    for name, its in labels.items():
        control_plane.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": its}}
        )
    try:
        _, backend = make_suite(nodes=2)
        assert "rollcall-left-behind" not in backend.sweep(3600)
        swept: list[str] = []  # by age: the sweep takes it once the API server says it is a second old
        wait_until(
            "the left-behind namespace to be a second old and swept",
            lambda: bool(swept.extend(backend.sweep(1)) or swept),
            timeout=30,
        )
        assert swept == ["rollcall-left-behind"]
        wait_until(
            "the swept namespace to go",
            lambda: (
                control_plane.kubectl("get", "ns", "-o", "name").count("namespace/rollcall-left-behind\n")
                == 0
            ),
            timeout=60,
        )
        left = control_plane.kubectl("get", "ns", "-o", "name")
        assert "namespace/other-team" in left and "namespace/rollcall-users-own" in left
    finally:
        control_plane.kubectl("delete", "ns", *labels, "--ignore-not-found", "--wait=false")


def test_the_status_carries_what_each_node_the_pods_ran_on_says_of_itself(
    make_suite, ensure_nodes, kube, request
):
    from rollcall.backends.kubernetes.instances import advertised_counts, count_facts
    from rollcall.backends.kubernetes.nodeviews import Node

    ensure_nodes(2)
    suite, _ = make_suite(nodes=2)
    attempt, _ = run(suite, request)

    assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
    info = attempt.status.node_info
    assert len(info) == 2, info  # one entry per node a pod ran on
    for name, facts in info.items():
        node = call(kube.core.read_node, name)
        # with the devices a pod given every NeuronCore of its trn1.32xlarge must see (the device_count rule),
        # and what it advertises beside what its type has (the advertised_devices rule)
        seen = Node(node)
        counts = count_facts(seen.instance_type, advertised_counts(seen.advertised))
        assert counts["advertised_neuroncores"] == counts["type_neuroncores"] == "32"
        # and its own health as the platform reports it (allocatable against capacity: the lost_devices rule)
        assert seen.health.facts == {"allocatable_efa": "8", "capacity_efa": "8"}
        assert facts == {**seen.facts, **seen.health.facts, **counts, "expected_neuron_devices": "16"}
        assert facts["instance_type"] == "trn1.32xlarge"
        assert facts["kubelet"].startswith("kwok-") and facts["container_runtime"].startswith("kwok-")
