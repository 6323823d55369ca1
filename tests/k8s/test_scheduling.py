"""Scheduling a user shapes, against the real API server: what ``rollcall render`` prints is what the server
accepts, and a run inside an existing namespace (``--namespace``) leaves that namespace as it found it.

The render is checked by server-side dry runs (admission included): of its Service and Job, and of a pod
made from the Job's template, so that the PriorityClass and ServiceAccount it names must exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import yaml

from rollcall.backends import DiscoveryError
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.manifests import RUN_ID_LABEL
from rollcall.cli import main
from rollcall.options import OptionError
from tests.cluster.controlplane import INSTANCE_TYPE_LABEL, ControlPlane
from tests.waiting import wait_until

from .conftest import IMAGE, TRN1, run_objects, suite_namespaces, suite_objects

pytestmark = pytest.mark.control_plane

PRIORITY_CLASS = "rollcall-test-high"
ACCOUNT = "trainer"
TAINT = "rollcall.test/dedicated=ml:NoSchedule"


@pytest.fixture
def team_namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """An existing namespace, not the suite's, holding a ServiceAccount of its own."""
    name = f"team-{request.node.name.removeprefix('test_')[:20].replace('_', '-').strip('-')}"
    control_plane.create_namespace(name)
    control_plane.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": name}}
    )
    yield name
    control_plane.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def priority_class(control_plane: ControlPlane) -> Iterator[str]:
    control_plane.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS},
            "value": 1000,
        }
    )
    yield PRIORITY_CLASS
    control_plane.kubectl("delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found")


def render(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["render", *args]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_render_output_is_accepted_by_a_server_side_dry_run(
    control_plane, capsys, team_namespace, priority_class, jobset_controller
):
    text = render(
        capsys,
        *("--job-kind", jobset_controller),
        *("--accelerator", "neuron", "--procs-per-node", "32", "--instance-type", TRN1, "--nodes", "2"),
        *("--image", IMAGE, "--namespace", team_namespace, "--name", "bert-dry-run"),
        *("--toleration", "dedicated=ml:NoSchedule", "--toleration", "spot:NoExecute"),
        *("--priority-class", priority_class, "--queue", "team-ml", "--image-pull-secret", "regcred"),
        *("--service-account", ACCOUNT, "--node-selector", "karpenter.sh/nodepool=trn1"),
    )
    applied = json.loads(
        control_plane.kubectl(
            "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-", input=text
        )
    )
    if jobset_controller == "jobset":  # one JobSet, Kueue's label and suspend its own; its Job the template
        queued = applied  # kubectl prints one object as itself, not as a List
        assert queued["kind"] == "JobSet" and "suspend" not in queued["spec"]["replicatedJobs"][0]["template"]
        job = queued["spec"]["replicatedJobs"][0]["template"]
    else:
        service, job = applied["items"]
        assert (service["kind"], job["kind"]) == ("Service", "Job")
        queued = job
    assert queued["metadata"]["namespace"] == team_namespace
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml"
    assert queued["spec"]["suspend"] is True
    pod = job["spec"]["template"]["spec"]
    assert {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert {"key": "spot", "operator": "Exists", "effect": "NoExecute"} in pod["tolerations"]
    assert pod["priorityClassName"] == priority_class and pod["serviceAccountName"] == ACCOUNT
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"]["karpenter.sh/nodepool"] == "trn1"
    assert not control_plane.get("jobs", "-n", team_namespace)["items"], "a dry run creates nothing"

    # Admission resolves the PriorityClass and the ServiceAccount only for pods: dry-run one of the template.
    template = yaml.safe_load_all(text)
    workload = next(d for d in template if d["kind"] in ("Job", "JobSet"))
    if workload["kind"] == "JobSet":
        workload = workload["spec"]["replicatedJobs"][0]["template"]
    job_doc = workload["spec"]["template"]
    as_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bert-dry-run-0"}, **job_doc}
    as_pod["metadata"] = {**job_doc["metadata"], "name": "bert-dry-run-0", "namespace": team_namespace}
    created = json.loads(
        control_plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(as_pod))
    )
    assert created["spec"]["priority"] == 1000, "the PriorityClass was resolved"
    assert created["spec"]["serviceAccountName"] == ACCOUNT


def test_the_pods_tolerate_a_taint_only_when_told(make_suite, control_plane, ensure_nodes):
    ensure_nodes(2)
    names = nodes_of(control_plane, TRN1)
    for name in names:
        control_plane.kubectl("taint", "node", name, TAINT, "--overwrite")
    try:
        suite, _ = make_suite(nodes=2)
        with pytest.raises(DiscoveryError, match=re.escape("tainted rollcall.test/dedicated=ml:NoSchedule")):
            suite.placement  # noqa: B018 - discovery runs on first use
        suite, _ = make_suite(nodes=2, toleration=TAINT)
        assert suite.placement.procs_per_node == 32
    finally:
        for name in names:
            control_plane.kubectl("taint", "node", name, "rollcall.test/dedicated-")


def test_a_run_in_an_existing_namespace_leaves_it_and_nothing_of_the_runs(
    make_suite, control_plane, kube, ensure_nodes, team_namespace, request
):
    ensure_nodes(2)
    names = nodes_of(control_plane, TRN1)
    for name in names:
        control_plane.kubectl("taint", "node", name, TAINT, "--overwrite")
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    try:
        suite, backend = make_suite(
            nodes=2, namespace=team_namespace, service_account=ACCOUNT, toleration=TAINT
        )
        record = suite.run(request.node.nodeid, request.node.name)
    finally:
        for name in names:
            control_plane.kubectl("taint", "node", name, "rollcall.test/dedicated-")
    attempt = record.result.last
    assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
    logs = set(attempt.artifacts.glob("*.log")) - set(attempt.artifacts.glob("*.monitor.log"))
    assert len(logs) == 2, "one log per pod, besides its monitor sidecar's"

    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before, "no namespace was created"
    namespace = control_plane.get("namespace", team_namespace)
    assert namespace["status"]["phase"] == "Active" and "deletionTimestamp" not in namespace["metadata"]
    assert suite_objects(kube, team_namespace) == {}, "the run's Job, Service and pods are gone"
    assert control_plane.get("serviceaccount", ACCOUNT, "-n", team_namespace)["metadata"]["name"] == ACCOUNT
    assert backend.ledger.pending() == []


def test_the_sweep_clears_old_runs_from_an_existing_namespace_but_never_the_namespace(
    make_suite, control_plane, kube, team_namespace, request
):
    suite, backend = make_suite(nodes=2, namespace=team_namespace, keep=True)
    record = suite.run(request.node.nodeid, request.node.name)
    assert record.result.passed
    kept = suite_objects(kube, team_namespace)
    assert {k for k in kept if not k.startswith("pod/")} == run_objects(record.result.last.spec.name), (
        "--keep leaves the run's objects"
    )
    (run_id,) = {
        o["metadata"]["labels"][RUN_ID_LABEL]
        for o in call(kube.batch.list_namespaced_job, team_namespace)["items"]
    }
    assert backend.sweep(3600) == [], "nothing is that old"
    assert backend.sweep(0) == [f"{team_namespace}/{run_id}"]
    wait_until("the swept run to go", lambda: suite_objects(kube, team_namespace) == {}, timeout=60)
    assert control_plane.get("namespace", team_namespace)["status"]["phase"] == "Active"


def test_a_namespace_that_does_not_exist_is_refused_before_anything_is_created(make_suite, kube):
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    with pytest.raises(OptionError, match="--namespace rollcall-test-missing: there is no such namespace"):
        make_suite(nodes=2, namespace="rollcall-test-missing")
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before


def test_a_service_account_that_does_not_exist_is_refused(make_suite, team_namespace):
    with pytest.raises(OptionError, match=f"--service-account nobody: .* in namespace {team_namespace}"):
        make_suite(nodes=2, namespace=team_namespace, service_account="nobody")


def nodes_of(control_plane: ControlPlane, instance_type: str) -> list[str]:
    items = control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={instance_type}")["items"]
    return sorted(n["metadata"]["name"] for n in items)
