"""manifests/rbac/ gives the suite exactly what it needs: a run passes with those rights, and no more is allowed.

The test applies the ServiceAccount, ClusterRole, binding and admission policy to the real API server (RBAC and
admission on), runs the suite in a child pytest with a kubeconfig holding only a token of that ServiceAccount,
then tries what the suite must not be able to do: as that ServiceAccount, and as a user of the group
rollcall:runners (impersonated), whom the same binding and policies cover. The run namespaces' Pod Security
labels are shown to hold for any identity: a pod beyond the baseline level is refused in one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.kube import Kube, call, connect
from rollcall.backends.kubernetes.manifests import MANAGED_BY, MANAGED_BY_LABEL, Names, Rendered, render
from rollcall.backends.kubernetes.nightly import cronjob_template
from rollcall.jobspec import MANIFESTS_DIR, CacheVolume, JobSpec
from tests.cluster.controlplane import ControlPlane, ControlPlaneError
from tests.waiting import wait_until

from .conftest import IMAGE, TRN1, job_kind

pytestmark = pytest.mark.control_plane
pytest_plugins = ["pytester"]

RBAC_DIR = MANIFESTS_DIR / "rbac"
#: The group whose members run the suite with its rights (clusterrolebinding.yaml), and its confinement.
RUNNERS = "rollcall:runners"
#: Where the admission policy admits a directory of the node (rollcall-pod-profile's hostPathPrefixes).
CACHE_PREFIX = "/var/cache/rollcall"
#: A run as the suite renders it, for its objects created here.
SPEC = JobSpec(name="probe", nodes=1, procs_per_node=1, accelerator="neuron", image=IMAGE)

CHILD_TESTS = """
from rollcall.backends.kubernetes.manifests import PodExtras


def test_roll_call(rollcall):
    record = rollcall()
    assert record.result.passed, record.result.message()


def test_a_failure_is_reported_with_its_events(rollcall, rollcall_suite):
    rollcall_suite.backend.extras = PodExtras(
        labels={"rollcall.test/fail": "true"}, annotations={"rollcall.test/run-duration": "1s"}
    )
    attempt = rollcall().result.last
    assert not attempt.passed
    assert "exited with code 1" in attempt.status.reason
    assert (attempt.artifacts / "events.yaml").read_text().strip() not in ("", "[]")
"""


@pytest.fixture(scope="module")
def rbac(control_plane) -> Iterator[None]:
    control_plane.kubectl("apply", "-f", str(RBAC_DIR / "namespace.yaml"))
    control_plane.kubectl("apply", "-f", str(RBAC_DIR))
    yield
    control_plane.kubectl("delete", "-f", str(RBAC_DIR), "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane, rbac, tmp_path_factory) -> Path:
    """A kubeconfig for the same API server holding only a token of the rollcall ServiceAccount."""
    token = control_plane.kubectl(
        "create", "token", "rollcall", "-n", "rollcall-system", "--duration", "1h"
    ).strip()
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "rollcall", "user": {"token": token}}],
        "contexts": [{"name": "rollcall", "context": {"cluster": "local", "user": "rollcall"}}],
        "current-context": "rollcall",
    }
    path = tmp_path_factory.mktemp("rbac") / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def as_suite(sa_kubeconfig) -> Kube:
    return connect(str(sa_kubeconfig))


@pytest.fixture(scope="module")
def as_runner(control_plane, rbac) -> Iterator[Kube]:
    """A user of the group rollcall:runners, as a CI role bound by its group would be (impersonated)."""
    kube = connect(str(control_plane.kubeconfig))
    kube.api.set_default_header("Impersonate-User", "ci-runner")
    kube.api.set_default_header("Impersonate-Group", RUNNERS)
    yield kube
    kube.close()


@pytest.fixture(scope="module")
def jobsets(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[None]:
    """The JobSet API: the session's controller when the session runs JobSets, else one for this module."""
    if job_kind() == "jobset":
        request.getfixturevalue("jobset_controller")
        yield
        return
    control_plane.start_jobset()
    try:
        yield
    finally:
        control_plane.stop_jobset()


def denied(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The 403 message of a call that must be refused (admission policies may take a moment to apply)."""

    def attempt() -> str | None:
        try:
            call(fn, *args, retry_s=5, **kwargs)
        except ApiException as exc:
            assert exc.status == 403, exc
            return str(exc.body)
        return None

    message: str = wait_until(f"{fn.__name__} to be refused", attempt, timeout=20, every=0.5)
    return message


def test_the_suite_passes_with_exactly_those_rights(pytester, control_plane, kubelet, sa_kubeconfig):
    pytester.makepyfile(test_child=CHILD_TESTS)
    result = pytester.runpytest_subprocess(
        *("-p", "no:cacheprovider", "--backend", "kubernetes", "--kubeconfig", str(sa_kubeconfig)),
        *("--image", IMAGE, "--instance-type", TRN1, "--nodes", "2", "--sweep-older-than", "1d"),
        *("--artifacts-dir", str(pytester.path / "artifacts")),
        timeout=300,
    )
    result.assert_outcomes(passed=2)


def test_a_run_with_its_compile_cache_on_the_node_passes_with_those_rights(
    pytester, control_plane, kubelet, sa_kubeconfig
):
    """The run's namespace enforces privileged (a hostPath), and the policy admits the cache's directory."""
    pytester.makepyfile(test_child=CHILD_TESTS)
    result = pytester.runpytest_subprocess(
        *("-p", "no:cacheprovider", "--backend", "kubernetes", "--kubeconfig", str(sa_kubeconfig)),
        *("--image", IMAGE, "--instance-type", TRN1, "--nodes", "2", "--sweep-older-than", "1d"),
        *("--compile-cache", f"host:{CACHE_PREFIX}/compile", "-k", "test_roll_call"),
        *("--artifacts-dir", str(pytester.path / "artifacts")),
        timeout=300,
    )
    result.assert_outcomes(passed=1, deselected=1)


def test_a_run_with_its_compile_cache_elsewhere_on_the_node_is_refused_saying_where(
    pytester, control_plane, kubelet, sa_kubeconfig
):
    pytester.makepyfile(test_child=CHILD_TESTS)
    result = pytester.runpytest_subprocess(
        *("-p", "no:cacheprovider", "--backend", "kubernetes", "--kubeconfig", str(sa_kubeconfig)),
        *("--image", IMAGE, "--instance-type", TRN1, "--nodes", "2", "--sweep-older-than", "1d"),
        *("--compile-cache", "host:/tmp/rollcall-compile", "-k", "test_roll_call"),
        *("--artifacts-dir", str(pytester.path / "artifacts")),
        timeout=300,
    )
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "*BackendError: nothing was run: the API server refused it: HTTP 403: *"
            "only under /var/cache/rollcall, of type Directory or DirectoryOrCreate, "
            "not /tmp/rollcall-compile (DirectoryOrCreate): give --compile-cache or --neuron-cache "
            "host:/var/cache/rollcall/NAME, or nfs:SERVER:/PATH"
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


def test_the_suite_runs_in_a_namespace_opened_to_it_with_those_rights(
    pytester, control_plane, kubelet, sa_kubeconfig, kube
):
    control_plane.create_namespace("team-rbac-runs")
    control_plane.kubectl("label", "namespace", "team-rbac-runs", "rollcall/runs-allowed=true")
    try:
        pytester.makepyfile(test_child=CHILD_TESTS)
        result = pytester.runpytest_subprocess(
            *("-p", "no:cacheprovider", "--backend", "kubernetes", "--kubeconfig", str(sa_kubeconfig)),
            *("--image", IMAGE, "--instance-type", TRN1, "--nodes", "2", "--namespace", "team-rbac-runs"),
            *("--sweep-older-than", "1d", "--artifacts-dir", str(pytester.path / "artifacts")),
            timeout=300,
        )
        result.assert_outcomes(passed=2)
        assert control_plane.get("namespace", "team-rbac-runs")["status"]["phase"] == "Active"
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        for list_fn in (kube.batch.list_namespaced_job, kube.core.list_namespaced_service):
            assert call(list_fn, "team-rbac-runs", label_selector=selector)["items"] == []
    finally:
        control_plane.kubectl("delete", "namespace", "team-rbac-runs", "--wait=false")


def test_what_the_suite_reads(as_suite):
    assert call(as_suite.core.list_node)["items"]
    daemon_sets = call(as_suite.apps.list_daemon_set_for_all_namespaces)  # --check-device-plugins
    assert daemon_sets["kind"] == "DaemonSetList", daemon_sets


def test_secrets_and_configmaps_are_out_of_reach(as_suite):
    assert 'cannot list resource \\"secrets\\"' in denied(as_suite.core.list_secret_for_all_namespaces)
    denied(as_suite.core.list_namespaced_secret, "kube-system")
    denied(as_suite.core.read_namespaced_config_map, "kube-root-ca.crt", "kube-system")


def test_writes_are_confined_to_the_suites_own_namespaces(as_suite, control_plane):
    unlabelled = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rollcall-unlabelled"}}
    message = denied(as_suite.core.create_namespace, body=unlabelled)
    assert "may only create namespaces labelled app.kubernetes.io/managed-by=rollcall" in message

    control_plane.create_namespace("someone-elses")
    try:
        assert "may only delete namespaces labelled" in denied(
            as_suite.core.delete_namespace, "someone-elses"
        )
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "intruder"},
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
            },
        }
        assert "may only create jobs in namespaces labelled" in denied(
            as_suite.batch.create_namespaced_job, "someone-elses", body=job
        )
        # a run in an existing namespace deletes its pods in one request: only in a namespace opened to it
        theirs = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "theirs",
                "namespace": "someone-elses",
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            },
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
        control_plane.apply(theirs)
        assert "may only delete pods in namespaces labelled" in denied(
            as_suite.core.delete_collection_namespaced_pod, "someone-elses"
        )
        assert control_plane.get("pod", "theirs", "-n", "someone-elses")["metadata"]["name"] == "theirs"
    finally:
        control_plane.kubectl("delete", "namespace", "someone-elses", "--wait=false")

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    denied(as_suite.core.create_namespaced_pod, "default", body=pod)  # pods come from the Job controller
    # nodes may be patched (--label-nodes, --taint-unfit), but only rollcall's own keys
    merge = {"_content_type": "application/merge-patch+json"}
    for body in (
        {"metadata": {"labels": {"x": "y"}}},
        {"metadata": {"annotations": {"example.com/note": "y"}}},
        {"spec": {"unschedulable": True}},
    ):
        assert "may only change its own labels and annotations of nodes" in denied(
            as_suite.core.patch_node, "trn1-32xlarge-0", body, **merge
        ), body


def test_only_rollcalls_own_taints_labels_and_annotations_change_and_every_other_stays(
    as_suite, control_plane
):
    node = "trn1-32xlarge-0"
    merge = {"_content_type": "application/merge-patch+json"}
    held = {"key": "example.com/held", "value": "yes", "effect": "PreferNoSchedule"}
    unfit = {"key": "rollcall/unfit", "value": "true", "effect": "NoSchedule"}
    control_plane.kubectl("taint", "nodes", node, "example.com/held=yes:PreferNoSchedule", "--overwrite")
    try:
        own_taint = (
            "may only add or lift its own taints (rollcall/...), keeping every other taint a node holds"
        )
        for taints in ([unfit], [{**held, "value": "no"}, unfit], [held, unfit, {**held, "key": "x.io/y"}]):
            assert own_taint in denied(as_suite.core.patch_node, node, {"spec": {"taints": taints}}, **merge)
        marks = {
            "metadata": {
                "labels": {"rollcall/verdict": "unfit", "rollcall/checked-at": "20261206T170000Z"},
                "annotations": {"rollcall/unfit-reason": "pcie_width 8 of 16"},
            },
            "spec": {"taints": [held, unfit]},
        }
        call(as_suite.core.patch_node, node, marks, **merge)
        after = call(as_suite.core.read_node, node)
        assert unfit in after["spec"]["taints"] and held in after["spec"]["taints"]
        assert after["metadata"]["labels"]["rollcall/verdict"] == "unfit"
        lifted = {"metadata": {"annotations": {"rollcall/unfit-reason": None}}, "spec": {"taints": [held]}}
        call(as_suite.core.patch_node, node, lifted, **merge)  # a node found fit loses rollcall's taint
        after = call(as_suite.core.read_node, node)
        assert after["spec"]["taints"] == [held]
        assert "rollcall/unfit-reason" not in after["metadata"].get("annotations", {})
    finally:
        left = control_plane.get("node", node)["spec"].get("taints") or []
        kept = [t for t in left if t["key"] not in ("example.com/held", "rollcall/unfit")]
        undo = {
            "metadata": {"labels": {"rollcall/verdict": None, "rollcall/checked-at": None}},
            "spec": {"taints": kept},
        }
        control_plane.kubectl("patch", "node", node, "--type", "merge", "-p", json.dumps(undo))


def test_its_own_namespaces_can_be_created_and_deleted(as_suite):
    own = render(SPEC, Names("rollcall-rbac-own", "probe", "probe", "0a1b2c3d")).namespace
    call(as_suite.core.create_namespace, body=own)
    created = call(as_suite.core.read_namespace, "rollcall-rbac-own")
    assert created["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
    assert created["status"]["phase"] == "Active"

    call(as_suite.core.delete_namespace, "rollcall-rbac-own")
    assert_gone_or_terminating(as_suite, "rollcall-rbac-own")


def test_in_a_namespace_opened_to_the_suite_only_its_own_objects_are_written(as_suite, control_plane):
    control_plane.create_namespace("team-opened")
    control_plane.kubectl("label", "namespace", "team-opened", "rollcall/runs-allowed=true")

    def service(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"clusterIP": "None", "ports": [{"port": 29500}]},
        }

    try:
        own = service("rollcall-run", {MANAGED_BY_LABEL: MANAGED_BY})
        wait_until(
            "the suite's Service to be admitted",
            lambda: _admitted(as_suite.core.create_namespaced_service, "team-opened", own),
            timeout=20,
            every=0.5,
        )
        listed = call(as_suite.core.list_namespaced_service, "team-opened")["items"]
        assert [s["metadata"]["name"] for s in listed] == ["rollcall-run"]
        call(as_suite.core.delete_namespaced_service, "rollcall-run", "team-opened")
        assert call(as_suite.core.list_namespaced_service, "team-opened")["items"] == []
        message = denied(as_suite.core.create_namespaced_service, "team-opened", body=service("theirs", {}))
        assert "or its own (labelled so) in namespaces labelled rollcall/runs-allowed=true" in message
        assert "may only delete namespaces labelled" in denied(as_suite.core.delete_namespace, "team-opened")
    finally:
        control_plane.kubectl("delete", "namespace", "team-opened", "--wait=false")


# -- the pods' profile ------------------------------------------------------------------------------------


def rendered(namespace: str, kind: str, spec: JobSpec = SPEC) -> Rendered:
    """The suite's own objects for a run in ``namespace``, as a run of ``kind`` renders them."""
    return render(spec, Names.new("rollcall", "probe", namespace=namespace, kind=kind))


def workload(objects: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Job or JobSet to create, and the pod spec inside it."""
    if objects.jobset is not None:
        (replicated,) = objects.jobset["spec"]["replicatedJobs"]
        return objects.jobset, replicated["template"]["spec"]["template"]["spec"]
    return objects.job, objects.job["spec"]["template"]["spec"]


def creator(kube: Kube, kind: str) -> Callable[..., Any]:
    return kube.jobset.create_namespaced_job_set if kind == "jobset" else kube.batch.create_namespaced_job


def own_namespace(control_plane: ControlPlane, name: str, spec: JobSpec = SPEC) -> dict[str, Any]:
    """A namespace of the suite's, as a run renders it (its Pod Security labels), created as the admin."""
    namespace = render(spec, Names(name, "probe", "probe", "0a1b2c3d")).namespace
    assert namespace is not None
    control_plane.apply(namespace)

    def has_default_account() -> bool | None:  # pods are refused until it exists
        try:
            control_plane.kubectl("get", "serviceaccount", "default", "-n", name, "-o", "name")
        except ControlPlaneError:
            return None
        return True

    wait_until(f"namespace {name}'s default ServiceAccount", has_default_account, timeout=60, every=0.5)
    return namespace


def privileged(pod: dict[str, Any]) -> None:
    pod["containers"][0]["securityContext"] = {"privileged": True}


def host_root(pod: dict[str, Any]) -> None:
    pod["volumes"].append({"name": "root", "hostPath": {"path": "/", "type": "Directory"}})


def beside_the_cache(pod: dict[str, Any]) -> None:
    """A directory whose name only begins as the prefix does (the API server refuses '..' itself)."""
    pod["volumes"].append(
        {"name": "beside", "hostPath": {"path": f"{CACHE_PREFIX}-etc", "type": "Directory"}}
    )


def host_network(pod: dict[str, Any]) -> None:
    pod["hostNetwork"] = True


def host_pid(pod: dict[str, Any]) -> None:
    del pod["shareProcessNamespace"]  # the API server refuses it beside hostPID
    pod["hostPID"] = True


def capability(pod: dict[str, Any]) -> None:
    pod["initContainers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}


def host_port(pod: dict[str, Any]) -> None:
    pod["containers"][0]["ports"][0]["hostPort"] = 29500


def unconfined(pod: dict[str, Any]) -> None:
    pod["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}


BEYOND = [
    (privileged, "may not run a privileged container"),
    (host_root, "may mount a directory of the node (hostPath) only under /var/cache/rollcall,"),
    (beside_the_cache, "not /var/cache/rollcall-etc (Directory)"),
    (host_network, "may not share the node's network, process or IPC namespace"),
    (host_pid, "may not share the node's network, process or IPC namespace"),
    (capability, "may add no capability"),
    (host_port, "may not open a port of the node (hostPort)"),
    (unconfined, "stay within Pod Security's baseline level"),
]


@pytest.mark.parametrize("kind", ["job", "jobset"])
@pytest.mark.parametrize("who", ["as_suite", "as_runner"])
def test_a_pod_template_beyond_the_profile_is_refused_to_the_suites_identities(
    control_plane, jobsets, request, who, kind
):
    kube: Kube = request.getfixturevalue(who)
    name = f"rollcall-rbac-{kind}-{who.replace('_', '-')}"
    own_namespace(control_plane, name)
    try:
        obj, _ = workload(rendered(name, kind))
        wait_until(  # the suite's own is admitted: its identities hold the rights, and its pods are within
            f"the suite's own {kind} to be admitted",
            lambda: _admitted(creator(kube, kind), name, obj, dry_run="All"),
            timeout=20,
            every=0.5,
        )
        for mutate, message in BEYOND:
            objects = rendered(name, kind)
            obj, pod = workload(objects)
            mutate(pod)
            refused = denied(creator(kube, kind), name, body=obj, dry_run="All")
            assert "ValidatingAdmissionPolicy 'rollcall-pod-profile'" in refused, (mutate.__name__, refused)
            assert message in refused, (mutate.__name__, refused)
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false")


def test_the_runners_group_holds_the_suites_rights_and_no_user_by_name_does(control_plane, rbac, as_runner):
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "ci-runner",
            "resourceAttributes": {"verb": "create", "group": "batch", "resource": "jobs"},
        },
    }
    for groups, allowed in (([RUNNERS], True), ([], False)):
        answer = json.loads(
            control_plane.kubectl(
                "create",
                "-o",
                "json",
                "-f",
                "-",
                input=json.dumps({**review, "spec": {**review["spec"], "groups": groups}}),
            )
        )
        assert answer["status"]["allowed"] is allowed, (groups, answer["status"])


def test_a_runs_namespace_refuses_any_pod_beyond_baseline(control_plane, kube):
    """Pod Security's label holds for every identity, the controllers' included: the admin's bare pod here."""
    name = "rollcall-rbac-baseline"
    own_namespace(control_plane, name)
    try:
        for mutate in (privileged, host_root, host_network):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": rendered(name, "job").job["spec"]["template"]["spec"],
            }
            mutate(pod["spec"])
            refused = denied(kube.core.create_namespaced_pod, name, body=pod, dry_run="All")
            assert 'violates PodSecurity \\"baseline:latest\\"' in refused, (mutate.__name__, refused)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": rendered(name, "job").job["spec"]["template"]["spec"],
        }
        call(kube.core.create_namespaced_pod, name, body=pod, dry_run="All")  # the suite's own pod is within
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false")


def test_a_cache_on_the_node_is_admitted_under_the_policys_prefix_only(control_plane, as_suite, kube):
    name = "rollcall-rbac-cache"
    cached = dataclasses.replace(SPEC, compile_cache=CacheVolume("host", f"{CACHE_PREFIX}/compile"))
    namespace = own_namespace(control_plane, name, cached)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    try:
        obj, _ = workload(rendered(name, "job", cached))
        wait_until(
            "a Job with its cache under the prefix to be admitted",
            lambda: _admitted(as_suite.batch.create_namespaced_job, name, obj, dry_run="All"),
            timeout=20,
            every=0.5,
        )
        elsewhere = dataclasses.replace(SPEC, compile_cache=CacheVolume("host", "/tmp/compile"))
        obj, _ = workload(rendered(name, "job", elsewhere))
        refused = denied(as_suite.batch.create_namespaced_job, name, body=obj, dry_run="All")
        assert (
            "only under /var/cache/rollcall, of type Directory or DirectoryOrCreate, not /tmp/compile"
            in refused
        )
        # the namespace's privileged level lets the policy decide: beyond it, a pod there is the same as elsewhere
        obj, pod = workload(rendered(name, "job", cached))
        privileged(pod)
        assert "may not run a privileged container" in denied(
            as_suite.batch.create_namespaced_job, name, body=obj, dry_run="All"
        )
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false")


def test_the_suites_namespaces_must_enforce_a_pod_security_level(as_suite):
    def namespace(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "rollcall-rbac-levels",
                "labels": {MANAGED_BY_LABEL: MANAGED_BY, **labels},
                "annotations": annotations,
            },
        }

    enforce = "pod-security.kubernetes.io/enforce"
    level = "must enforce a Pod Security level"
    assert level in denied(as_suite.core.create_namespace, body=namespace({}, {}))
    assert level in denied(as_suite.core.create_namespace, body=namespace({enforce: "privileged"}, {}))
    reason = {"rollcall/pod-security-reason": "--compile-cache host:/var/cache/rollcall/c"}
    call(as_suite.core.create_namespace, body=namespace({enforce: "privileged"}, reason), dry_run="All")


def test_the_nightly_pod_meets_restricted_which_its_namespace_enforces(control_plane, rbac, kube):
    template = cronjob_template()["spec"]["jobTemplate"]["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nightly"}, "spec": template["spec"]}
    wait_until(
        "the nightly pod to be admitted",
        lambda: _admitted(kube.core.create_namespaced_pod, "rollcall-system", pod, dry_run="All"),
        timeout=20,
        every=0.5,
    )
    del pod["spec"]["securityContext"]["runAsNonRoot"]
    refused = denied(kube.core.create_namespaced_pod, "rollcall-system", body=pod, dry_run="All")
    assert 'violates PodSecurity \\"restricted:latest\\": runAsNonRoot != true' in refused


def assert_gone_or_terminating(kube: Kube, name: str) -> None:
    """Namespace ``name`` no longer exists, or is being deleted (its finalizers may still run)."""
    try:
        namespace = call(kube.core.read_namespace, name)
    except ApiException as exc:
        assert exc.status == 404, exc
        return
    assert namespace["metadata"].get("deletionTimestamp"), namespace["metadata"]
    assert namespace["status"]["phase"] == "Terminating", namespace["status"]


def _admitted(create: Callable[..., Any], namespace: str, body: dict[str, Any], **kwargs: Any) -> bool | None:
    """True once ``create`` succeeds (a just-labelled namespace may take a moment to be seen)."""
    try:
        call(create, namespace, body=body, retry_s=5, **kwargs)
    except ApiException as exc:
        assert exc.status == 403, exc
        return None
    return True
