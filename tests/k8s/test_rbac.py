"""manifests/rbac/ gives the suite exactly what it needs: a run passes with those rights, and no more is allowed.

The test applies the ServiceAccount, ClusterRole, binding and admission policy to the real API server (RBAC and
admission on), runs the suite in a child pytest with a kubeconfig holding only a token of that ServiceAccount,
then tries what the suite must not be able to do.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.kube import Kube, call, connect
from rollcall.backends.kubernetes.manifests import MANAGED_BY, MANAGED_BY_LABEL
from rollcall.jobspec import MANIFESTS_DIR
from tests.waiting import wait_until

from .conftest import IMAGE, TRN1

pytestmark = pytest.mark.control_plane
pytest_plugins = ["pytester"]

RBAC_DIR = MANIFESTS_DIR / "rbac"

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
    own = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "rollcall-rbac-own", "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
    }
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


def assert_gone_or_terminating(kube: Kube, name: str) -> None:
    """Namespace ``name`` no longer exists, or is being deleted (its finalizers may still run)."""
    try:
        namespace = call(kube.core.read_namespace, name)
    except ApiException as exc:
        assert exc.status == 404, exc
        return
    assert namespace["metadata"].get("deletionTimestamp"), namespace["metadata"]
    assert namespace["status"]["phase"] == "Terminating", namespace["status"]


def _admitted(create: Callable[..., Any], namespace: str, body: dict[str, Any]) -> bool | None:
    """True once ``create`` succeeds (a just-labelled namespace may take a moment to be seen)."""
    try:
        call(create, namespace, body=body, retry_s=5)
    except ApiException as exc:
        assert exc.status == 403, exc
        return None
    return True
