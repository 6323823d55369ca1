"""manifests/nightly/: the suite as a CronJob in the cluster, as the least-privilege ServiceAccount of manifests/rbac/.

The first tests read the files (no cluster): the CronJob runs ``pytest tests/e2e --nodes N --backend kubernetes``
from the suite's image as that ServiceAccount, writes to its claim, its environment is valid suite options,
and nothing of manifests/rbac/ is duplicated. The others apply both folders to the local control plane (a real
API server with RBAC and admission on) and show the CronJob, its ServiceAccount and its rights are accepted,
a Job made from the CronJob passes server-side validation, and the ServiceAccount can do what the suite needs
and nothing more. Running the suite inside a kwok pod is out of reach: kwok pods run no containers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollcall.jobspec import MANIFESTS_DIR
from rollcall.options import resolve
from tests.cluster.controlplane import ControlPlane, ControlPlaneError

NIGHTLY_DIR = MANIFESTS_DIR / "nightly"
RBAC_DIR = MANIFESTS_DIR / "rbac"
REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "images" / "suite" / "Dockerfile"
EXAMPLES_DIR = REPO / "examples"
NAMESPACE = "rollcall-system"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:rollcall"


def documents(directory: Path) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def cronjob() -> dict[str, Any]:
    return one(documents(NIGHTLY_DIR), "CronJob")


def pod_spec(cronjob: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return spec


# -- the files ----------------------------------------------------------------------------------


def test_the_cronjob_runs_the_suite_as_the_rbac_service_account(cronjob):
    account = one(documents(RBAC_DIR), "ServiceAccount")
    pod = pod_spec(cronjob)
    assert cronjob["metadata"]["namespace"] == account["metadata"]["namespace"] == NAMESPACE
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["restartPolicy"] == "Never" and cronjob["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    (container,) = pod["containers"]
    script = container["args"][0]
    for needle in ("python -m pytest", "tests/e2e", '--nodes "$ROLLCALL_NODES"', "--backend kubernetes"):
        assert needle in script
    assert 'exit "$status"' in script  # a failed roll call fails the Job


def test_results_go_to_the_claim_defined_beside_it(cronjob):
    claim = one(documents(NIGHTLY_DIR), "PersistentVolumeClaim")
    pod = pod_spec(cronjob)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert volumes[mounts["/results"]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert '--artifacts-dir "$run"' in pod["containers"][0]["args"][0]


def test_its_environment_is_valid_suite_options(cronjob):
    env = {e["name"]: e["value"] for e in pod_spec(cronjob)["containers"][0]["env"]}
    options = resolve({"backend": "kubernetes"}, environ=env)
    assert options.job.image and options.job.nodes == int(env["ROLLCALL_NODES"])
    assert options.kubernetes.sweep_older_than == 6 * 3600 and options.baselines.max_regression == 10.0
    assert {s for s in options.sources.values() if s.startswith("ROLLCALL_")} == set(env)


def test_the_rbac_is_reused_not_duplicated():
    kinds = {d["kind"] for d in documents(NIGHTLY_DIR)}
    assert kinds == {"CronJob", "PersistentVolumeClaim"}


def test_the_suite_image_has_no_torch():
    instructions = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = "\n".join(instructions)
    assert "[workload]" not in text and "pip install torch" not in text
    assert "! pip show torch" in text  # the build fails if torch slipped in
    assert '"tests/e2e"' in text and "ROLLCALL_BACKEND=kubernetes" in text


# -- the CI examples ---------------------------------------------------------------------------


def test_the_github_workflow_runs_the_suite_and_publishes_junit_and_the_report():
    workflow = yaml.safe_load((EXAMPLES_DIR / "github-actions" / "rollcall.yml").read_text())
    steps = workflow["jobs"]["roll-call"]["steps"]
    by_name = {s.get("name", s.get("uses")): s for s in steps}
    assert "secrets.KUBECONFIG" in by_name["Kubeconfig from the secret"]["env"]["KUBECONFIG_DATA"]
    run = by_name["Roll call"]["run"]
    assert "python -m pytest tests/e2e" in run and "--backend kubernetes" in run
    junit = by_name["Publish the junit files (per test, and per rank)"]
    assert junit["with"]["report_paths"] == "artifacts/junit.xml,artifacts/ranks.junit.xml"
    upload = by_name["Upload the HTML report, results and logs"]
    assert upload["with"]["path"] == "artifacts/" and upload["if"] == "always()"


def test_the_ci_snippet_exports_the_secret_kubeconfig_and_passes_arguments_on(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHON": sys.executable,
        "KUBECONFIG_DATA": "apiVersion: v1\nkind: Config\n",
        "OUT": str(tmp_path / "out"),
    }
    proc = subprocess.run(
        [str(EXAMPLES_DIR / "ci.sh"), "--backend", "auto", "--collect-only", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"rollcall: backend=kubernetes \(KUBECONFIG=\S+\)", proc.stdout), proc.stdout
    assert "test_every_rank_answers_the_roll_call" in proc.stdout
    assert f"html report {tmp_path}/out/report.html (exit 0)" in proc.stdout
    kubeconfig = re.search(r"KUBECONFIG=(\S+)\)", proc.stdout).group(1)
    assert not Path(kubeconfig).exists()  # the secret's copy is removed on exit


# -- against the API server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def applied(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.kubectl("apply", "-f", str(RBAC_DIR), "-f", str(NIGHTLY_DIR))
    yield control_plane
    control_plane.kubectl(
        *("delete", "-f", str(NIGHTLY_DIR), "-f", str(RBAC_DIR), "--ignore-not-found", "--timeout=120s"),
        timeout=180,
    )


def can_i(cp: ControlPlane, verb: str, resource: str, namespace: str | None = None) -> bool:
    where = ("-n", namespace) if namespace else ("--all-namespaces",)
    try:
        return cp.kubectl("auth", "can-i", verb, resource, *where, f"--as={SERVICE_ACCOUNT}").strip() == "yes"
    except ControlPlaneError as exc:  # `can-i` exits 1 for "no"
        if "no" in str(exc).split():
            return False
        raise


@pytest.mark.control_plane
def test_the_api_server_accepts_the_cronjob_and_its_claim(applied):
    cron = applied.get("cronjob", "rollcall-nightly", "-n", NAMESPACE)
    assert cron["spec"]["schedule"] == "0 2 * * *" and cron["spec"]["timeZone"] == "Etc/UTC"
    assert pod_spec(cron)["serviceAccountName"] == "rollcall"
    assert applied.get("serviceaccount", "rollcall", "-n", NAMESPACE)["metadata"]["name"] == "rollcall"
    assert applied.get("pvc", "rollcall-results", "-n", NAMESPACE)["spec"]["resources"]["requests"] == {
        "storage": "5Gi"
    }


@pytest.mark.control_plane
def test_a_job_made_from_the_cronjob_passes_server_side_validation(applied):
    out = applied.kubectl(
        *("create", "job", "rollcall-now", "--from=cronjob/rollcall-nightly", "-n", NAMESPACE),
        *("--dry-run=server", "-o", "json"),
    )
    job = json.loads(out)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rollcall" and job["spec"]["backoffLimit"] == 0
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.control_plane
def test_the_service_account_holds_the_suites_rights_and_no_more(applied):
    anywhere = "some-namespace"
    for verb, resource, ns in [
        ("list", "nodes", None),
        ("create", "namespaces", None),
        ("create", "jobs.batch", anywhere),
        ("create", "services", anywhere),
        ("watch", "pods", anywhere),
        ("get", "pods/log", anywhere),
        ("list", "events", anywhere),
        ("patch", "nodes", None),  # --taint-unfit; the admission policy lets it change taints only
    ]:
        assert can_i(applied, verb, resource, ns), (verb, resource)
    for verb, resource, ns in [
        ("get", "secrets", NAMESPACE),
        ("list", "configmaps", anywhere),
        ("create", "pods", anywhere),
        ("update", "cronjobs.batch", NAMESPACE),  # it cannot rewrite its own schedule or image
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ]:
        assert not can_i(applied, verb, resource, ns), (verb, resource)
