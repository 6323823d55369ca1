"""The roll call on real nodes: pods really run the workload's image, torchrun really rendezvouses through
the headless Service's DNS name, and real faults (a pull that fails, a memory limit, a crash, a hang, a
lost node, a rotated log, Ctrl-C) are named by the verdict with the pod, its index and its node.

Every test goes through the suite's own path (discovery, Suite.run: provision, wait, collect, assess,
clean up); the autouse ``nothing_left_behind`` fixture then proves no namespace and no container is left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from rollcall.backends import JobState
from rollcall.backends.kubernetes.holds import READY_HOLD_S
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.manifests import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL, Names
from rollcall.checks.collective_mismatch import COLLECTIVE_MISMATCH
from rollcall.checks.errors import DISRUPTION, ROOT_CAUSE
from rollcall.checks.exited_nonzero import EXITED_NONZERO
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.checks.never_started import NEVER_STARTED
from rollcall.checks.replica_divergence import REPLICA_DIVERGENCE
from rollcall.checks.silent import SILENT
from rollcall.isolation.probe import ISOLATED
from rollcall.nodeverdicts import of_records
from rollcall.ranklog import RollCall, Silence
from rollcall_workload.contract import EVENT_PREFIX
from rollcall_workload.node.monitor import SILENT_MARGIN_S
from tests import children
from tests.cluster.controlplane import REPO_ROOT, cluster_sh
from tests.k8s.conftest import suite_namespaces
from tests.waiting import wait_until

from .conftest import IMAGE, NAMESPACE_LABEL, REAL, REAL_NODES, SHORT, WORKLOAD_ARGS, containers

# Each run may take its job timeout (300 s, real_options) plus start-up and the 90 s clean-up.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run(suite, request, **overrides):
    started_at = time.monotonic()
    record = suite.run(request.node.nodeid, request.node.name, **overrides)
    return record.result.last, time.monotonic() - started_at


def e2e_command(cp, tmp_path, *args: str) -> list[str]:
    """``pytest tests/e2e`` through the kubernetes backend against ``cp``, as a user would run it."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "tests/e2e",
        "-p",
        "no:cacheprovider",
        "--backend",
        "kubernetes",
        "--kubeconfig",
        str(cp.kubeconfig),
        "--artifacts-dir",
        str(tmp_path / "artifacts"),
        *args,
    ]


def training_containers(cp) -> list[str]:
    """The suite's running training containers (not sandboxes, not the stopped ones of earlier runs that
    the kubelets have not collected yet) in either runtime."""
    found = []
    for node in range(REAL_NODES):
        found += [
            c["id"]
            for c in containers(cp, node, live=True)
            if c["labels"].get(NAMESPACE_LABEL, "").startswith("rollcall-")
            and c["labels"].get("io.kubernetes.container.name") == "train"
        ]
    return found


def cleanup_began(kube, *, timeout: float) -> float:
    """When (monotonic) the run's clean-up was seen to begin: its namespace being deleted."""
    wait_until(
        "the run to delete its namespace",
        lambda: any(n["metadata"].get("deletionTimestamp") for n in suite_namespaces(kube)),
        timeout=timeout,
        every=0.5,
    )
    return time.monotonic()


def pod_of_index(kube, index: str) -> dict[str, Any] | None:
    """The run's pod of completion index ``index`` once it is bound to a node."""
    for pod in call(kube.core.list_pod_for_all_namespaces, label_selector=JOB_LABEL)["items"]:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("batch.kubernetes.io/job-completion-index") == index and pod["spec"].get("nodeName"):
            return pod
    return None


def run_freezing_pod_1(suite, request, real_cluster, kube, real_nodes, ready, what):
    """Run ``suite``; meanwhile freeze pod 1's training container (containerd pauses its task: runc freezes
    its cgroup) once ``ready(pod)``, and thaw it once the run's clean-up has begun, so it can end.

    Returns the attempt, the run's seconds, and the seconds from the freeze to the clean-up.
    """
    seen: dict[str, float] = {}

    def freeze() -> None:
        pod = wait_until("pod 1 to be scheduled", lambda: pod_of_index(kube, "1"), timeout=180, every=0.5)
        wait_until(what, lambda: ready(pod), timeout=240, every=0.5)
        node = real_nodes.index(pod["spec"]["nodeName"])
        (cid,) = [
            c["id"]
            for c in containers(real_cluster, node)
            if c["labels"].get("io.kubernetes.pod.name") == pod["metadata"]["name"]
            and c["labels"].get("io.kubernetes.container.name") == "train"
        ]
        ctr = ("ctr", "--name", real_cluster.name, str(node), "-n", "k8s.io", "tasks")
        cluster_sh(*ctr, "pause", cid)
        seen["frozen"] = time.monotonic()
        try:
            seen["cleanup"] = cleanup_began(kube, timeout=240)
        finally:
            cluster_sh(*ctr, "resume", cid)

    watcher = threading.Thread(target=freeze, daemon=True)
    watcher.start()
    try:
        attempt, took = run(suite, request)
    finally:
        watcher.join(300)
    assert "frozen" in seen and "cleanup" in seen, (seen, message(attempt))
    return attempt, took, seen["cleanup"] - seen["frozen"]


def pod_log_says(real_cluster, container: str, *needles: str):
    """A test of a pod: whether its ``container``'s log holds every one of ``needles`` yet (False before it
    starts)."""

    def says(pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        try:
            log = real_cluster.kubectl("logs", "-n", meta["namespace"], meta["name"], "-c", container)
        except Exception:  # not started yet
            return False
        return all(needle in log for needle in needles)

    return says


def roll_of(attempt) -> RollCall:
    """The roll call as the pods' followed logs (the artifacts) tell it."""
    roll = RollCall()
    for log in sorted(attempt.artifacts.glob("*.log")):
        roll.read_file(log)
    return roll


def message(attempt) -> str:
    return attempt.status.reason + "\n" + attempt.verdict.message(str(attempt.artifacts))


UNFIT_TAINT = "rollcall/unfit=true:NoSchedule"


def verdicts_shown(real_cluster, real_nodes) -> dict[str, str]:
    """What ``kubectl get nodes -L rollcall/verdict`` shows of each real node."""
    out = real_cluster.kubectl(
        "get", "nodes", "-L", "rollcall/verdict", "-L", "rollcall/valid-until", "--no-headers"
    )
    shown = {line.split()[0]: line.split()[-2] for line in out.splitlines() if line.split()[0] in real_nodes}
    return shown


def session_marks(suite) -> dict[str, Any]:
    """The session's end, as the plugin's: its nodes' verdicts (the breaker's over them), marked once."""
    nodes, breaker = of_records(suite.records, suite.verdict_ttl_s, suite.options.recovery.max_unfit)
    assert not breaker.tripped, breaker
    marked = suite.mark(nodes)
    assert marked is not None
    return marked.as_dict()


def test_nodes_no_expectation_can_meet_are_tainted_and_labelled_and_a_recheck_lifts_it_as_every_rank_answers(
    make_suite, real_cluster, kube, real_nodes, request, tmp_path
):
    """--label-nodes --taint-unfit with an expectation of the nodes' own no node can meet (--expect-file:
    their kernel; --max-unfit 2 lets the breaker take both): both nodes are unfit, tainted with the reason
    and labelled so, once, at the session's end. The expired verdict an earlier session left on one of them,
    in the old form, is gone: the fresh labels are integer epoch seconds. Then --recheck-tainted without it:
    the pods tolerate the taint and run on those nodes, every rank answers, and the taints are lifted (a CPU
    node is checked whole), the labels saying fit."""
    golden = tmp_path / "golden.expect"
    golden.write_text("# no node runs this kernel\nkernel=0.0\n")
    marks = {"taint_unfit": UNFIT_TAINT, "label_nodes": True, "max_unfit": "2"}
    stale = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 7200))
    old = {"rollcall/verdict": "fit", "rollcall/checked-at": stale, "rollcall/valid-until": stale}
    real_cluster.kubectl(
        "patch", "node", real_nodes[0], "--type", "merge", "-p", json.dumps({"metadata": {"labels": old}})
    )
    try:
        suite, _ = make_suite(
            workload_args=SHORT, expect_file=str(golden), artifacts_dir=str(tmp_path / "unfit"), **marks
        )
        started = time.time()
        unfit, _ = run(suite, request)
        assert not unfit.passed
        assert unfit.verdict.first_failure is not None and unfit.verdict.first_failure.owner == "cluster"
        done = session_marks(suite)
        assert sorted(done["tainted"]) == sorted(real_nodes), done
        for name in real_nodes:
            node = call(kube.core.read_node, name)
            assert {"key": "rollcall/unfit", "value": "true", "effect": "NoSchedule"} in node["spec"][
                "taints"
            ]
            assert (
                "expected kernel=0.0 (--expect)" in node["metadata"]["annotations"]["rollcall/unfit-reason"]
            )
            labels = node["metadata"]["labels"]
            checked, until = labels["rollcall/checked-at"], labels["rollcall/valid-until"]
            assert checked.isdigit() and until.isdigit(), labels  # the old form is gone, an integer written
            assert started - 1 <= int(checked) <= time.time() < int(until), labels
        assert verdicts_shown(real_cluster, real_nodes) == dict.fromkeys(real_nodes, "unfit")

        suite, _ = make_suite(workload_args=SHORT, recheck_tainted=True, **marks)  # the image's default model
        attempt, _ = run(suite, request)
        assert sorted(attempt.spec.machines) == sorted(real_nodes)
        assert sorted(session_marks(suite)["untainted"]) == sorted(real_nodes)
        for name in real_nodes:
            assert all(
                t["key"] != "rollcall/unfit"
                for t in call(kube.core.read_node, name)["spec"].get("taints") or []
            )
        assert verdicts_shown(real_cluster, real_nodes) == dict.fromkeys(real_nodes, "fit")
    finally:  # a failed test leaves no node tainted for the next
        for name in real_nodes:
            left = call(kube.core.read_node, name)["spec"].get("taints") or []
            kept = [t for t in left if t["key"] != "rollcall/unfit"]
            gone = {k: None for k in ("rollcall/verdict", "rollcall/checked-at", "rollcall/valid-until")}
            undo = {
                "metadata": {"labels": gone, "annotations": {"rollcall/unfit-reason": None}},
                "spec": {"taints": kept},
            }
            real_cluster.kubectl("patch", "node", name, "--type", "merge", "-p", json.dumps(undo))

    assert attempt.passed, message(attempt)
    assert attempt.verdict.layout.world_size == 4
    roll = roll_of(attempt)
    nodes = {rank: report.start["node"] for rank, report in roll.ranks.items() if report.start}
    assert sorted(nodes) == [0, 1, 2, 3], nodes
    assert {nodes[0], nodes[1]} != {nodes[2], nodes[3]} and set(nodes.values()) == set(real_nodes), nodes
    monitors = sorted(attempt.artifacts.glob("*.monitor.log"))  # each pod's monitor sidecar's: all well
    logs = sorted(set(attempt.artifacts.glob("*.log")) - set(monitors))
    assert len(logs) == 2 and all(b"ROLLCALL " in p.read_bytes() for p in logs)
    # each pod's monitor sidecar saw its pod's launcher start and spawn its ranks (launcher), its ranks'
    # processes (rank_process), and nothing amiss: no stack, no silence, no GPU event
    said = [
        json.loads(line.split(EVENT_PREFIX, 1)[1])
        for p in monitors
        for line in p.read_text().splitlines()
        if EVENT_PREFIX in line
    ]
    assert len(monitors) == 2 and {e["event"] for e in said} == {"launcher", "rank_process"}, said
    launchers = [(e["node_rank"], e["state"]) for e in said if e["event"] == "launcher"]
    for node in (0, 1):
        states = [state for n, state in launchers if n == node]
        assert states[0] == "started" and states[-1] == "spawned", launchers
    assert sorted(e["rank"] for e in said if e["state"] == "seen") == [0, 1, 2, 3], said


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def test_a_node_held_by_another_tenant_past_the_start_skew_is_waited_for_and_names_nobody(
    make_suite, real_cluster, kube, real_nodes, request
):
    """Slow is not broken, on Kubernetes: another tenant's pod holds node 1's CPU, so the run's pod 1 stays
    Pending (Unschedulable, within --unschedulable-grace) while pod 0 starts and its launcher waits at the
    rendezvous; the tenant leaves after more than the start skew S (2 J = 20 s) from pod 0's start. Pod 1
    was on its way all that time (no container started): nothing is named, torchrun's rendezvous outwaits
    it, and every rank answers."""
    tenant_ns = f"tenant-{os.getpid()}"
    cpu = real_cluster.get("node", real_nodes[1])["status"]["allocatable"]["cpu"]
    on_node = call(kube.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={real_nodes[1]}")
    used = sum(
        millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for p in on_node["items"]
        if p["status"].get("phase") in ("Pending", "Running")
        for c in p["spec"]["containers"]
    )
    hold = millicores(cpu) - used - 500  # leaves node 1 half a core: the run's pods ask a whole one
    assert hold > 0, (cpu, used)
    real_cluster.kubectl("create", "namespace", tenant_ns)
    tenant = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tenant", "namespace": tenant_ns},
        "spec": {
            "nodeName": real_nodes[1],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "tenant",
                    "image": IMAGE,
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": f"{hold}m"}},
                }
            ],
        },
    }
    J = 10
    suite, _ = make_suite(
        requests="cpu=1", unschedulable_grace="180", workload_args=f"{WORKLOAD_ARGS} --join-hang-after {J}"
    )
    seen: dict[str, float] = {}

    def run_pods(phase: str | None = None) -> list:
        pods = call(kube.core.list_pod_for_all_namespaces, label_selector=JOB_LABEL)["items"]
        return [p for p in pods if phase is None or p["status"].get("phase") == phase]

    def release_after_the_skew() -> None:
        wait_until("the run's pod 0 to run", lambda: bool(run_pods("Running")), timeout=180, every=0.5)
        seen["first"] = time.monotonic()
        # held past S from the first pod's start, however long the machine takes: then the tenant leaves
        wait_until(
            "the start skew and 10 s more to pass, pod 1 still pending",
            lambda: time.monotonic() - seen["first"] > 2 * J + 10 and len(run_pods("Pending")) == 1,
            timeout=120,
            every=0.5,
        )
        seen["released"] = time.monotonic()
        real_cluster.kubectl("delete", "pod", "-n", tenant_ns, "tenant", "--wait=false")

    try:
        real_cluster.kubectl("apply", "-f", "-", input=json.dumps(tenant))
        wait_until(
            "the tenant's pod to run",
            lambda: real_cluster.get("pod", "-n", tenant_ns, "tenant")["status"].get("phase") == "Running",
            timeout=120,
        )
        releaser = threading.Thread(target=release_after_the_skew, daemon=True)
        releaser.start()
        attempt, took = run(suite, request)
        releaser.join(10)
    finally:
        real_cluster.kubectl("delete", "namespace", tenant_ns, "--wait=false")
    assert "released" in seen, seen
    assert attempt.passed and attempt.verdict.findings == (), message(attempt)
    assert all(r.complete for r in attempt.verdict.ranks.values()) and len(attempt.verdict.ranks) == 4
    print(
        f"pod 1 held {seen['released'] - seen['first']:.0f}s past pod 0's start (S = {2 * J}s); run {took:.0f}s"
    )


def test_each_kubelet_serves_a_certificate_of_its_own_from_its_own_directory(real_cluster, real_nodes):
    """Two kubelets left at the default ``--cert-dir`` wrote the same host files at once, and one could start
    with the other's key ("private key does not match public key") and never become Ready. Each node's
    kubelet now keeps its self-signed serving pair under its node's state: the handshake with each one
    verifies against that node's own file, and the certificate names that node."""
    for i, name in enumerate(real_nodes):
        node_dir = REPO_ROOT / ".cluster" / real_cluster.name / "real" / f"node-{i}"
        pki = node_dir / "kubelet" / "pki" / "kubelet.crt"
        assert pki.is_file(), f"{name}: no serving certificate at {pki}"
        context = ssl.create_default_context(cafile=pki)
        context.check_hostname = False  # verified against its own CA; the name is checked below
        status = real_cluster.get("node", name)["status"]
        ip = next(a["address"] for a in status["addresses"] if a["type"] == "InternalIP")
        address = (ip, status["daemonEndpoints"]["kubeletEndpoint"]["Port"])
        with socket.create_connection(address, timeout=10) as raw, context.wrap_socket(raw) as tls:
            subject = dict(pair[0] for pair in tls.getpeercert()["subject"])
        assert subject["commonName"].split("@")[0] == name, (name, subject)


def test_a_slowed_rank_is_named_by_its_compute_time_with_its_node_pod_and_machine(
    make_suite, real_nodes, request
):
    # 2 cores run all 4 ranks: --straggler-ratio 0.5 fails a rank above 2 x the median compute time, and
    # rank 3's every step takes 4 x its own time (tests/local/test_slow_rank_and_link.py says why).
    suite, _ = make_suite(workload_env=["ROLLCALL_SLOW_RANK=3:4"], straggler_ratio="0.5")
    attempt, _ = run(suite, request)

    assert attempt.status.state is JobState.SUCCEEDED, message(attempt)  # the job ran; the verdict fails it
    assert not attempt.passed and attempt.verdict.failed_ranks.keys() == {3}, message(attempt)
    (straggler,) = attempt.verdict.perf_report.stragglers
    assert (straggler.rank, straggler.node) == (3, 1) and straggler.ratio > 2, straggler
    assert straggler.pod and straggler.pod.startswith(f"{attempt.spec.name}-1-"), straggler
    machine = roll_of(attempt).ranks[3].start["node"]
    assert machine in real_nodes and straggler.machine == machine, straggler
    assert f"rank 3 (node 1 on {machine}, pod {straggler.pod}) at " in attempt.verdict.problems[0]
    # each node's bus bandwidth was measured through the pods' own network, and named by its pod
    nodes = attempt.verdict.perf.nodes()
    assert [n.node for n in nodes] == [0, 1] and all(n.busbw_gbps and n.busbw_gbps > 0 for n in nodes)
    assert all(len(n.pods) == 1 and n.pods[0].startswith(f"{attempt.spec.name}-{n.node}-") for n in nodes), (
        nodes
    )


def test_an_image_that_cannot_be_pulled_fails_fast_with_the_runtimes_reason(make_suite, real_nodes, request):
    image = "registry.invalid/rollcall/missing:404"
    suite, _ = make_suite(image=image)
    attempt, took = run(suite, request)

    assert attempt.status.state is JobState.FAILED
    reason = attempt.status.reason
    assert "cannot start: ErrImagePull" in reason or "cannot start: ImagePullBackOff" in reason, reason
    assert image in reason and "registry.invalid" in reason.split(image, 1)[1], "the runtime's own message"
    assert f"pod {attempt.spec.name}-" in reason and "(index " in reason
    assert any(f"on node {n}" in reason for n in real_nodes), reason
    assert took < 30, took


def test_an_invalid_image_reference_is_refused_before_anything_is_created(real_cluster, kube, tmp_path):
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    proc = subprocess.run(
        e2e_command(real_cluster, tmp_path, "--image", "bad image name!"),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4, output
    assert "--image" in output and "'bad image name!'" in output and "Traceback" not in output
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} == before


def test_a_container_over_its_memory_limit_is_named_oomkilled(make_suite, real_nodes, request):
    suite, _ = make_suite(requests="cpu=100m,memory=150Mi", limits="memory=150Mi")
    attempt, _ = run(suite, request)

    assert attempt.status.state is JobState.FAILED
    reason = attempt.status.reason
    assert "was OOMKilled" in reason, reason
    assert "(index " in reason and any(f"on node {n}" in reason for n in real_nodes), reason


@pytest.mark.parametrize(("kind", "rank"), [("job", 3), ("jobset", 1)])
def test_a_crashing_rank_is_named_with_its_pod_index_and_node(make_suite, real_nodes, request, kind, rank):
    suite, _ = make_suite(workload_env=[f"ROLLCALL_FAIL_RANK={rank}"], job_kind=kind)
    attempt, _ = run(suite, request)

    assert attempt.status.state is JobState.FAILED
    reason = attempt.status.reason
    job, node = Names.new("rollcall", attempt.spec.name, kind=kind).job, rank // 2
    # Which pod's exit the API shows first is a race: the rank's own pod, or the other whose ranks lost it.
    assert f"pod {job}-" in reason and "(index " in reason, reason
    assert any(f"on node {n}" in reason for n in real_nodes) and "exited with code" in reason, reason
    roll = roll_of(attempt)
    assert any(f"injected failure on rank {rank}" in e.message for e in roll.ranks[rank].errors), roll.ranks
    cause = attempt.verdict.root_cause
    assert cause is not None and cause.first is not None, message(attempt)
    assert (cause.first.rank, cause.first.node) == (rank, node) and "injected failure" in cause.first.message
    assert cause.first.pod and cause.first.pod.startswith(f"{job}-{node}-")


def test_a_rank_that_exits_non_zero_after_its_roll_call_is_named_with_its_code(make_suite, request):
    """Rank 3 answers the whole roll call and exits 1: its own exit code, read from torchrun's records in
    its pod's log, names it as the root cause with its node and pod."""
    suite, _ = make_suite(workload_env=["ROLLCALL_EXIT_RANK=3:1"])
    attempt, _ = run(suite, request)

    assert attempt.status.state is JobState.FAILED, message(attempt)
    (exited,) = attempt.verdict.of_kind(EXITED_NONZERO)
    assert set(exited.ranks) == {3}, message(attempt)
    assert exited.message.startswith("first failure: rank 3"), exited.message
    assert "exited with code 1 after answering the roll call" in exited.message
    assert attempt.verdict.failed_ranks[3] == ["exited with code 1 after answering the roll call"]


def test_a_rank_that_exits_0_early_is_named_first_with_its_code_and_phase(make_suite, request):
    """Rank 3 ends with status 0 after its first epoch, without ``complete``: the Job's failure policy acts
    on non-zero exits only, so the rank's own ``exit`` event names it, ahead of what its peers then hit, and
    the run ends as its peers' next collective fails or hangs (``--hang-after 10`` bounds a hang), not at
    the job timeout (10.8 s here)."""
    suite, _ = make_suite(
        workload_env=["ROLLCALL_LEAVE_RANK=3"],
        workload_args=f"{WORKLOAD_ARGS} --hang-after 10",
        job_timeout="600",
    )
    attempt, took = run(suite, request)

    assert not attempt.passed, message(attempt)
    (root,) = attempt.verdict.of_kind(ROOT_CAUSE)
    assert attempt.verdict.findings[0] is root, message(attempt)
    assert set(root.ranks) == {3} and root.message.startswith(
        "first failure: rank 3 (node 1) left with exit code 0 after epoch_time of epoch 1 (in epoch 1 end), "
        "before complete"
    ), root.message
    assert took < 300, took  # not the 600 s job timeout
    print(f"exit 0 early on real nodes: {took:.1f}s ({attempt.status.state.value})")


def test_a_replica_corrupted_on_one_rank_is_named_first_as_a_divergence(make_suite, request):
    """Rank 3 flips one bit of its parameters after its first timed step: the replicas' digests differ and
    the verdict names rank 3, on node 1, first (a silent data corruption)."""
    suite, _ = make_suite(workload_env=["ROLLCALL_CORRUPT_RANK=3"], straggler_ratio="0", busbw_ratio="0")
    attempt, _ = run(suite, request)

    first = attempt.verdict.findings[0]
    assert first.kind is REPLICA_DIVERGENCE and set(first.ranks) == {3}, message(attempt)
    assert first.message.startswith("replica divergence (silent data corruption): rank 3 (node 1)"), (
        first.message
    )


def test_a_collective_corrupted_on_one_rank_names_the_rank_and_its_node(make_suite, request):
    """Rank 1 receives a chunk of zeros from every timed all-reduce: it is named as receiving wrong data,
    with its node."""
    suite, _ = make_suite(
        workload_env=["ROLLCALL_CORRUPT_COLLECTIVE=1"], straggler_ratio="0", busbw_ratio="0"
    )
    attempt, _ = run(suite, request)

    wrong = attempt.verdict.of_kind(COLLECTIVE_MISMATCH)
    assert wrong and all(set(p.ranks) <= {1} for p in wrong), message(attempt)
    assert any("rank 1 (node 0) received" in p.message for p in wrong), message(attempt)


def test_a_hung_rank_is_ended_by_the_job_timeout(make_suite, request):
    suite, _ = make_suite(workload_env=["ROLLCALL_HANG_RANK=1"], job_timeout="60")
    attempt, took = run(suite, request)

    assert attempt.status.state is JobState.TIMED_OUT, message(attempt)
    assert "DeadlineExceeded" in attempt.status.reason or "--job-timeout" in attempt.status.reason
    assert 1 in attempt.verdict.missing["complete"], attempt.verdict.missing
    assert took < 60 + 45, took


def test_a_hung_rank_is_named_from_its_stack_and_the_run_ends_at_the_hang(make_suite, request):
    """Rank 1 sleeps after its first epoch; with ``--hang-after 10`` the run ends within twice that plus
    clean-up of the hang, long before the job timeout, naming rank 1 where it sleeps."""
    hang_after = 10
    suite, _ = make_suite(
        workload_env=["ROLLCALL_HANG_RANK=1"],
        workload_args=f"{WORKLOAD_ARGS} --hang-after {hang_after}",
        job_timeout="600",
    )
    attempt, took = run(suite, request)

    assert attempt.status.state is JobState.STOPPED, message(attempt)
    first = attempt.verdict.findings[0]
    assert first.kind is HUNG and set(first.ranks) == {1}, message(attempt)
    assert first.message.startswith(f"rank 1 (node 0, pod {attempt.spec.name}-0"), first.message
    assert "hung in a sleep" in first.message and "inject_fault: time.sleep(3600)" in first.message
    (waiting,) = attempt.verdict.of_kind(WAITING)
    assert re.fullmatch(
        r"ranks 0, 2-3 waiting in barrier #\d+ of the default group for rank 1 \(flight recorder\)",
        waiting.message,
    ), waiting.message  # the records name rank 1
    assert took < 300, took  # start-up, the first epoch, 2 x --hang-after and clean-up: not the 600 s


def test_a_pod_whose_launcher_never_starts_is_named_at_its_deadline_not_torchruns(make_suite, request):
    """ROLLCALL_NO_LAUNCH_NODE=1: pod 1's training container runs the launch wrapper, which starts no launcher
    and waits; its sidecar never finds torchrun among the pod's processes, pod 0's sidecar finds its own
    waiting at the launchers' rendezvous. Node 1 is named by the never-started check at the start skew
    (S = 2 J) after node 0 was heard, as on local and Slurm, not at torchrun's 300 s rendezvous timeout."""
    join_after = 10
    suite, _ = make_suite(
        workload_env=["ROLLCALL_NO_LAUNCH_NODE=1"],
        workload_args=f"{WORKLOAD_ARGS} --join-hang-after {join_after}",
        job_timeout="600",
    )
    attempt, took = run(suite, request)

    assert attempt.status.state is JobState.STOPPED, message(attempt)
    first = attempt.verdict.findings[0]
    assert first.kind is NEVER_STARTED and set(first.ranks) == {2, 3}, message(attempt)
    assert first.message.startswith("node 1 never started its launcher"), first.message
    assert "node 0's launcher waited" in first.message, first.message
    assert took < 2 * join_after + 120 < 300, took  # start-up, S = 2 J, clean-up: not torchrun's 300 s


def test_a_frozen_launcher_is_named_stuck_at_the_rendezvous_by_its_pods_sidecar(
    make_suite, real_cluster, kube, real_nodes, request
):
    """Pod 1's launcher starts late (``ROLLCALL_SLOW_LAUNCHER_NODE=1:120``: slow, not broken) and its training
    container is frozen once the pod's sidecar has found the launcher (containerd pauses the task): the
    sidecar, outside the frozen container, reads the launcher's process state held past the join bound and
    node 1 is named stuck before the launchers' rendezvous, within about two minutes, not at torchrun's 300 s
    nor after the late start. The task is thawed once the run's clean-up has begun."""
    join_after = 10
    suite, _ = make_suite(
        workload_env=["ROLLCALL_SLOW_LAUNCHER_NODE=1:120"],
        workload_args=f"{WORKLOAD_ARGS} --join-hang-after {join_after}",
        job_timeout="600",
    )
    found = pod_log_says(real_cluster, "monitor", '"event":"launcher"', '"state":"started"')
    attempt, took, frozen = run_freezing_pod_1(
        suite, request, real_cluster, kube, real_nodes, found, "pod 1's sidecar to find its launcher"
    )
    assert attempt.status.state is JobState.STOPPED, message(attempt)
    first = attempt.verdict.findings[0]
    assert first.kind is NEVER_STARTED and set(first.ranks) == {2, 3}, message(attempt)
    assert re.search(r"node 1's launcher \(pid \d+\) is [^;]* \([DT]\) at ", first.message), first.message
    assert frozen < 2 * join_after + 60, frozen
    assert took < 300, took
    print(f"launcher frozen to clean-up {frozen:.1f}s, run {took:.1f}s")


def test_a_frozen_container_is_named_silent_within_its_bound(
    make_suite, real_cluster, kube, real_nodes, request
):
    """Pod 1's training container is frozen once it has trained an epoch (containerd pauses its task: runc
    freezes its cgroup, as a node whose kernel stalls would). Nothing can run in it, its watchdog neither;
    the pod's monitor sidecar, outside it, names ranks 2-3 silent once their heartbeats have stopped
    ``--hang-after`` + ``SILENT_MARGIN_S``, and the run ends then, not at the job timeout (a frozen
    container still reads Running). The task is thawed once the run's clean-up has begun, so it can end."""
    hang_after = 10
    suite, _ = make_suite(workload_args=f"{WORKLOAD_ARGS} --hang-after {hang_after}", job_timeout="600")
    trained = pod_log_says(real_cluster, "train", '"event":"epoch_time"')
    attempt, took, frozen = run_freezing_pod_1(
        suite, request, real_cluster, kube, real_nodes, trained, "pod 1 to train an epoch"
    )
    assert attempt.status.state is JobState.STOPPED, message(attempt)
    first = attempt.verdict.findings[0]
    silent = attempt.verdict.of_kind(SILENT)
    assert first.kind is SILENT and {r for p in silent for r in p.ranks} == {2, 3}, message(attempt)
    for problem in silent:
        (r,) = problem.ranks
        assert problem.message.startswith(f"rank {r} (node 1, pod {attempt.spec.name}-1"), problem.message
        assert "silent: no heartbeat for " in problem.message, problem.message
        assert isinstance(problem.detail, Silence) and problem.detail.heartbeat_s is not None
        assert hang_after + SILENT_MARGIN_S < problem.detail.heartbeat_s, problem.detail
    # named within the bound of the freeze, plus the polls and the pods' log reads: not at the 600 s timeout
    assert frozen < hang_after + SILENT_MARGIN_S + 45, frozen
    assert attempt.status.reason.startswith("rank(s) 2-3 silent"), attempt.status.reason
    assert took < 400, took
    print(f"frozen to clean-up {frozen:.1f}s, run {took:.1f}s: {first.message}")


def test_a_node_lost_mid_run_fails_the_run_naming_it(make_suite, real_cluster, kube, real_nodes, request):
    """Node 1's kubelet and runtime stop while it trains: the run fails naming that node once the node
    controller marks it not Ready (the local cluster's node-monitor grace period: 20 s) and that has held
    for its bound (READY_HOLD_S, its pod unheard), and its clean-up (which starts when the verdict is in)
    begins within those plus 25 s of the stop: the controller's 5 s monitor period, the watch, and at most
    10 s of reading the other pod's log to its end."""
    suite, _ = make_suite(workload_env=["ROLLCALL_HANG_RANK=2"], job_timeout="240")
    seen: dict[str, float] = {}

    def pods_of_run() -> list:
        return call(kube.core.list_pod_for_all_namespaces, label_selector=JOB_LABEL)["items"]

    def stop_node_when_training() -> None:
        wait_until(
            "a pod running on the node to stop",
            lambda: any(
                p["spec"].get("nodeName") == real_nodes[1] and p["status"].get("phase") == "Running"
                for p in pods_of_run()
            ),
            timeout=180,
            every=0.5,
        )
        real_cluster.stop_node(1)
        seen["stopped"] = time.monotonic()
        seen["cleanup"] = cleanup_began(kube, timeout=180)

    watcher = threading.Thread(target=stop_node_when_training, daemon=True)
    watcher.start()
    try:
        attempt, _ = run(suite, request)
    finally:
        watcher.join(200)
        real_cluster.start_node(1)  # its kubelet then ends the run's containers there
    assert "stopped" in seen and "cleanup" in seen, seen
    reason = attempt.status.reason
    assert attempt.status.state is JobState.FAILED, message(attempt)
    lost = attempt.status.disruption
    assert lost is not None and lost.reason == "NodeLost" and lost.host == real_nodes[1], reason
    assert f"on node {real_nodes[1]} was disrupted (NodeLost): node {real_nodes[1]} was lost" in reason, (
        reason
    )
    assert f"past {READY_HOLD_S:g}s, its pods unheard" in reason, reason
    assert seen["cleanup"] - seen["stopped"] < 20 + READY_HOLD_S + 25, seen["cleanup"] - seen["stopped"]
    wait_until(
        f"{real_nodes[1]} to be Ready again",
        lambda: (
            real_cluster.kubectl(
                "get", "node", real_nodes[1], "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
            )
            == "True"
        ),
        timeout=60,
    )


def test_a_nodes_ready_turned_false_by_its_admin_is_set_back_by_its_kubelet_and_the_run_passes(
    make_suite, real_cluster, kube, real_nodes, request
):
    """The cluster's admin turns node 1's Ready False while its pod trains (a runtime's hiccup, as the node
    would say it); its kubelet sets it True again at its next status update (10 s at most), well inside the
    bound (READY_HOLD_S). The run saw it, trains on and passes."""
    suite, backend = make_suite()
    said: list[str] = []
    backend.progress = said.append
    seen: dict[str, float] = {}

    def ready_of(node: str) -> str:
        return real_cluster.kubectl(
            "get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        )

    def flap_when_training() -> None:
        wait_until(
            "pod 1 to run on node 1",
            lambda: (
                (pod := pod_of_index(kube, "1")) is not None
                and pod["spec"]["nodeName"] == real_nodes[1]
                and pod["status"].get("phase") == "Running"
            ),
            timeout=180,
            every=0.5,
        )
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}
        ready |= {"message": "container runtime is down", "lastHeartbeatTime": now, "lastTransitionTime": now}
        patch = json.dumps({"status": {"conditions": [ready]}})
        real_cluster.kubectl(
            "patch", "node", real_nodes[1], "--subresource=status", "--type=strategic", "-p", patch
        )
        seen["turned"] = time.monotonic()
        wait_until(
            f"{real_nodes[1]}'s kubelet to set its Ready True again",
            lambda: ready_of(real_nodes[1]) == "True",
            timeout=60,
            every=0.5,
        )
        seen["back"] = time.monotonic()

    watcher = threading.Thread(target=flap_when_training, daemon=True)
    watcher.start()
    try:
        attempt, took = run(suite, request)
    finally:
        watcher.join(120)
    assert "turned" in seen and "back" in seen, seen
    assert attempt.passed and attempt.status.state is JobState.SUCCEEDED, message(attempt)
    assert attempt.disruption is None, message(attempt)
    turned = (
        f"node {real_nodes[1]} Ready=False: lost only if that holds {READY_HOLD_S:g}s with its pods unheard"
    )
    assert any(turned in line for line in said), said
    flap = seen["back"] - seen["turned"]
    assert flap < READY_HOLD_S, flap
    print(f"Ready=False for {flap:.1f}s, run {took:.1f}s: passed")


@pytest.mark.parametrize(("kind", "deleting"), [("job", "namespace"), ("jobset", "JobSet")])
def test_a_namespace_or_jobset_deleted_under_the_run_is_named_as_deleted(
    make_suite, kube, request, kind, deleting
):
    """Someone deletes the run's namespace (or its JobSet, which takes its Job and pods) while its ranks
    train: the run fails as exactly that, first in the root cause, naming what was deleted, never as a rank's
    exit code (its containers then exit non-zero)."""
    suite, _ = make_suite(workload_env=["ROLLCALL_HANG_RANK=1"], job_timeout="240", job_kind=kind)
    deleted: dict[str, str] = {}

    def delete_when_training() -> None:
        def training() -> list:
            return [
                p
                for p in call(kube.core.list_pod_for_all_namespaces, label_selector=JOB_LABEL)["items"]
                if p["status"].get("phase") == "Running"
            ]

        wait_until("a pod of the run to be running", training, timeout=180, every=0.5)
        namespace = training()[0]["metadata"]["namespace"]
        if deleting == "JobSet":
            (jobset,) = call(kube.jobset.list_namespaced_job_set, namespace)["items"]
            call(kube.jobset.delete_namespaced_job_set, jobset["metadata"]["name"], namespace)
            deleted[deleting] = jobset["metadata"]["name"]
        else:
            call(kube.core.delete_namespace, namespace)
            deleted[deleting] = namespace

    deleter = threading.Thread(target=delete_when_training, daemon=True)
    deleter.start()
    try:
        attempt, took = run(suite, request)
    finally:
        deleter.join(200)
    assert deleting in deleted, deleted
    found = attempt.status.disruption
    assert found is not None and found.deleted_under_run and found.kind == deleting, message(attempt)
    assert found.pod == deleted[deleting]
    first = attempt.verdict.findings[0]
    assert first.kind is DISRUPTION, message(attempt)
    assert f"{deleting} {deleted[deleting]} was deleted under the run (DeletedUnderRun)" in first.message
    assert "exit code" not in first.message
    assert took < 240, took  # named at the deletion, not at the job timeout


def test_a_rotated_log_loses_no_roll_call_line(make_suite, real_cluster, kube, request):
    """The kubelets rotate at 1Mi: rank 1 prints 3 MB after its first epoch line; the followed log keeps
    every event while the kubelet, asked afterwards, has lost that rank's first epoch line. The run is a
    JobSet of 2 pods x 2 ranks that passes, kept (``--keep``), then swept with its Job and pods."""
    suite, backend = make_suite(workload_env=["ROLLCALL_CHATTY=1:3000000"], keep=True, job_kind="jobset")
    attempt, _ = run(suite, request)
    try:
        assert attempt.passed, message(attempt)
        (namespace,) = [
            n["metadata"]["name"]
            for n in suite_namespaces(kube)
            if n["metadata"]["annotations"].get(JOB_LABEL) == attempt.spec.name
        ]
        assert {
            j["metadata"]["name"] for j in call(kube.jobset.list_namespaced_job_set, namespace)["items"]
        } == {attempt.spec.name}
        pod0 = f"{Names.new('rollcall', attempt.spec.name, kind='jobset').job}-0"
        (followed,) = [
            p
            for p in attempt.artifacts.glob("*.log")
            if p.stem.startswith(pod0) and not p.name.endswith(".monitor.log")
        ]
        late = RollCall()
        late.parser("late").feed(real_cluster.kubectl("logs", "-n", namespace, followed.stem).encode())
        assert followed.stat().st_size > 3_000_000
        assert 1 not in late.ranks or 1 not in late.ranks[1].epoch_times, "the fetch after rotation lost it"
        assert 1 in roll_of(attempt).ranks[1].epoch_times
    finally:
        backend.sweep(0)


@pytest.mark.parametrize(
    ("sig", "kind"), [(signal.SIGINT, "job"), (signal.SIGTERM, "jobset")], ids=["ctrl-c", "sigterm-jobset"]
)
def test_an_interrupted_session_leaves_no_namespace_or_container(
    real_cluster, kube, tmp_path, sig, kind, request
):
    if kind == "jobset":
        request.getfixturevalue("jobset_controller")
    env = {**os.environ, "ROLLCALL_WORKLOAD_ENV": "OMP_NUM_THREADS=1 ROLLCALL_HANG_RANK=0"}
    proc = subprocess.Popen(
        children.interruptible(  # Ctrl-C reaches it, however this session was started
            e2e_command(
                real_cluster,
                tmp_path,
                "--image",
                IMAGE,
                "--accelerator",
                "cpu",
                "--procs-per-node",
                "2",
                "--node-selector",
                REAL,
                "--workload-args",
                WORKLOAD_ARGS,
                "--job-kind",
                kind,
            )
        ),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until("a training container of the run", lambda: training_containers(real_cluster), 180, 1)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    assert not call(kube.core.list_namespace, label_selector=selector)["items"] or wait_until(
        "the namespace to be gone", lambda: not suite_namespaces(kube) or None, timeout=60
    )


def test_isolate_names_the_slowed_node_of_two_on_its_machine(make_suite, real_nodes, request):
    # Only the world's bandwidth is measured, so node 1's slow link (every one of its ranks posts each timed
    # all-reduce a second late: under 0.01 GB/s against about 0.1 and more for 1 MiB through the pods'
    # network) makes the world slow and names no node; --isolate then runs each node alone, on its machine.
    workload = (
        "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 1 --compute-steps 0 "
        "--bandwidth-scopes world --bandwidth-mb 1 --bandwidth-iters 3"
    )
    suite, _ = make_suite(
        workload_args=workload,
        workload_env=["ROLLCALL_SLOW_LINK=1:1000"],
        min_busbw="0.01",
        straggler_ratio="0",
        isolate=True,
    )
    record = suite.run(request.node.nodeid, request.node.name)
    attempt = record.result.last

    assert attempt.status.state is JobState.SUCCEEDED, message(attempt)  # the job ran; the verdict fails it
    assert [s.group.scope for s in attempt.verdict.perf_report.slow] == ["world"], message(attempt)
    isolation = record.extra["isolation"]
    assert isolation["ran"] is True and isolation["pinned"] is True, isolation
    assert isolation["suspects"] == [{"nodes": [1], "why": "fails alone"}], isolation
    machines = {rank: report.start["node"] for rank, report in roll_of(attempt).ranks.items() if report.start}
    runs = isolation["runs"]
    assert [(r["nodes"], r["failed"]) for r in runs] == [([0], False), ([1], True)], runs
    # each short run ran on the machine its node had run on
    assert [r["machines"] for r in runs] == [[machines[0]], [machines[2]]], (runs, machines)
    assert machines[2] in real_nodes and machines[0] != machines[2], machines
    (isolated,) = attempt.verdict.of_kind(ISOLATED)
    assert "node 1 (fails alone)" in isolated.message and sorted(isolated.ranks) == [2, 3], isolated.message
