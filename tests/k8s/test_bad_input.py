"""A user the API server forbids what a run needs stops the pytest run with exit code 4, before anything is created.

The child pytest runs with a kubeconfig holding only a token of a ServiceAccount of the local control plane
(RBAC on): one with no rights at all, and one bound to the suite's ClusterRole less one verb. The message names
each refused verb, resource and namespace and points at manifests/rbac/.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from rollcall.backends.kubernetes.backend import KubernetesBackend
from rollcall.jobspec import MANIFESTS_DIR
from rollcall.options.values import OptionError
from rollcall.suite import backend_settings

from .conftest import IMAGE, TRN1, options, suite_namespaces

pytestmark = pytest.mark.control_plane
pytest_plugins = ["pytester"]

NAMESPACE = "rollcall-bad-input"
CHILD_TEST = """
def test_roll_call(rollcall):
    raise AssertionError("a run started without the rights it needs")
"""


@pytest.fixture(scope="module")
def service_account(control_plane, tmp_path_factory) -> Iterator[Callable[[str], Path]]:
    """``service_account(name)``: a kubeconfig with only a token of ServiceAccount ``name`` (no rights)."""
    control_plane.create_namespace(NAMESPACE)
    made = tmp_path_factory.mktemp("accounts")

    def make(name: str) -> Path:
        control_plane.kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
        token = control_plane.kubectl("create", "token", name, "-n", NAMESPACE, "--duration", "1h").strip()
        admin = yaml.safe_load(control_plane.kubeconfig.read_text())
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
            "current-context": name,
        }
        path = made / name
        path.write_text(yaml.safe_dump(doc))
        return path

    yield make
    control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    control_plane.kubectl(
        "delete", "clusterrole,clusterrolebinding", "-l", "rollcall.test/bad-input", "--ignore-not-found"
    )


def forbidden(pytester, kube, kubeconfig: Path) -> str:
    """Run the child; assert exit code 4 and that it created nothing; its error."""
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    pytester.makepyfile(test_child=CHILD_TEST)
    result = pytester.runpytest_subprocess(
        *("-p", "no:cacheprovider", "--backend", "kubernetes", "--kubeconfig", str(kubeconfig)),
        *("--image", IMAGE, "--instance-type", TRN1, "--nodes", "2"),
        *("--artifacts-dir", str(pytester.path / "artifacts")),
        timeout=120,
    )
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + err
    assert "Traceback" not in err + result.stdout.str()
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before, "nothing was created"
    return err


def test_a_user_without_rights_is_told_what_the_suites_rbac_must_grant(pytester, kube, service_account):
    path = service_account("nobody")
    err = forbidden(pytester, kube, path)
    assert (
        f"ERROR: Forbidden: the API server {kube.server} (from --kubeconfig {path}, context nobody) does "
        in err
    )
    assert "does not let this user get, list, watch nodes at the cluster scope; " in err
    assert "get, list, watch, create, delete namespaces at the cluster scope; " in err
    assert (
        "get, list, watch, create, delete jobs.batch in namespace rollcall-" in err and "(a run's own)" in err
    )
    assert "get pods/log in namespace rollcall-" in err
    assert "The suite's RBAC must grant it: `kubectl apply -f manifests/rbac/` (ClusterRole rollcall)" in err


def test_one_missing_verb_is_named_alone(pytester, kube, control_plane, service_account):
    path = service_account("almost")
    role = yaml.safe_load((MANIFESTS_DIR / "rbac" / "clusterrole.yaml").read_text())
    partial = copy.deepcopy(role)
    partial["metadata"] = {"name": "rollcall-almost", "labels": {"rollcall.test/bad-input": "true"}}
    for rule in partial["rules"]:
        if rule["resources"] == ["jobs"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "rollcall-almost", "labels": {"rollcall.test/bad-input": "true"}},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "rollcall-almost",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "almost", "namespace": NAMESPACE}],
    }
    control_plane.apply(partial, binding)

    err = forbidden(pytester, kube, path)
    only = r"does not let this user create jobs\.batch in namespace rollcall-[0-9a-f]+ \(a run's own\)\. The suite's"
    assert re.search(only, err), err


def test_the_jobset_kind_on_a_cluster_without_jobsets_names_what_to_install(
    kube, control_plane, jobset_controller, tmp_path
):
    """``--job-kind jobset`` where the API server serves no JobSets: a usage error (exit 4) at the session's
    start, before anything is created, naming the JobSet controller's install and the other kind. (A session
    of JobSets takes its controller and CRD away for the test, and back.)"""
    opts = options(control_plane, tmp_path / "artifacts", nodes=2, job_kind="jobset")
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    if jobset_controller == "jobset":
        control_plane.stop_jobset()
    try:
        crds = {c["metadata"]["name"] for c in control_plane.get("crd")["items"]}
        assert "jobsets.jobset.x-k8s.io" not in crds, crds
        with pytest.raises(OptionError) as refused:
            KubernetesBackend.check(opts.kubernetes, backend_settings(opts, lambda _: None))
    finally:
        if jobset_controller == "jobset":
            control_plane.start_jobset()
    err = str(refused.value)
    assert {n["metadata"]["name"] for n in suite_namespaces(kube)} <= before, "nothing was created"
    assert err.startswith(f"--job-kind jobset: the cluster (--kubeconfig {control_plane.kubeconfig}"), err
    assert "does not serve JobSets (jobset.x-k8s.io/v1alpha2: no jobsets.jobset.x-k8s.io CRD)" in err
    assert (
        "install the JobSet controller (`kubectl apply --server-side -f https://github.com/kubernetes-sigs/"
        "jobset/releases/download/v0.12.0/manifests.yaml`), or leave --job-kind out" in err
    )
