"""``rollcall render --cronjob``: the suite as a CronJob with the RBAC of manifests/rbac/, offline."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from rollcall.backends.kubernetes.manifests import validate
from rollcall.backends.kubernetes.nightly import KIND_ORDER, check_schedule
from rollcall.cli import main
from rollcall.jobspec import MANIFESTS_DIR
from rollcall.options import resolve

SUITE = "rollcall.local/rollcall-suite:1"
BERT = "rollcall.local/rollcall-bert:cpu"
BASE = ["render", "--cronjob", "30 1 * * 1-5", "--suite-image", SUITE, "--image", BERT]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch, tmp_path):
    """Any attempt to reach a cluster fails the test; no ROLLCALL_* of the caller's leaks in."""
    from rollcall.backends.kubernetes import backend, kube

    def refuse(*args, **kwargs):
        raise AssertionError("render --cronjob contacted a cluster")

    # every module that took connect by name, imported before the patch so none binds the refusal for good
    for module in (kube, backend):
        monkeypatch.setattr(module, "connect", refuse)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    import os

    for name in [n for n in os.environ if n.startswith("ROLLCALL_")]:
        monkeypatch.delenv(name)


def rendered(capsys, *args: str) -> tuple[str, list[dict[str, Any]]]:
    assert main([*BASE, *args]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    return out, list(yaml.safe_load_all(out))


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def pod_of(cron: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return pod


def env_of(cron: dict[str, Any]) -> dict[str, str]:
    (container,) = pod_of(cron)["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def rbac_files() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((MANIFESTS_DIR / "rbac").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def test_it_prints_the_rbac_of_the_files_then_the_cronjob_each_valid(capsys):
    _, docs = rendered(capsys, "--nodes", "2", "--accelerator", "cpu")
    kinds = [d["kind"] for d in docs]
    assert kinds[-1] == "CronJob" and kinds[0] == "Namespace"
    assert kinds == sorted(kinds, key=KIND_ORDER.index)  # what others live in comes first
    # the RBAC is manifests/rbac/ itself, every object of it and unchanged: declared once
    files = rbac_files()
    assert sorted(map(repr, docs[:-1])) == sorted(map(repr, files))
    for doc in docs:
        assert validate(doc, getattr(client, f"V1{doc['kind']}")) == [], doc["kind"]


def test_the_cronjob_runs_as_the_service_account_its_bindings_name(capsys):
    _, docs = rendered(capsys, "--accelerator", "cpu")
    account = by_kind(docs, "ServiceAccount")["metadata"]
    namespace = by_kind(docs, "Namespace")["metadata"]["name"]
    cron = by_kind(docs, "CronJob")
    assert cron["metadata"]["namespace"] == account["namespace"] == namespace
    assert pod_of(cron)["serviceAccountName"] == account["name"]
    for binding in (by_kind(docs, "ClusterRoleBinding"), by_kind(docs, "RoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "rollcall:runners"},
        ]
    assert (
        by_kind(docs, "ClusterRoleBinding")["roleRef"]["name"]
        == by_kind(docs, "ClusterRole")["metadata"]["name"]
    )
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    assert sorted(p["metadata"]["name"] for p in policies) == [
        "rollcall-node-taints",
        "rollcall-own-namespaces",
        "rollcall-pod-profile",
    ]
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        assert f"system:serviceaccount:{account['namespace']}:{account['name']}" in condition["expression"]


def test_the_schedule_image_and_the_given_options_reach_the_pod(capsys, monkeypatch):
    monkeypatch.setenv("ROLLCALL_JOB_TIMEOUT", "900")
    out, docs = rendered(
        capsys,
        *("--nodes", "3", "--accelerator", "cpu", "--pushgateway", "http://10.1.2.3:9091"),
        *("--node-selector", "pool=a", "--node-selector", "zone=z1", "--keep"),
        *("--workload-env", "NOTE=two words"),
        *("--kubeconfig", "/nowhere/kubeconfig", "--context", "here"),
    )
    cron = by_kind(docs, "CronJob")
    assert cron["spec"]["schedule"] == "30 1 * * 1-5"
    (container,) = pod_of(cron)["containers"]
    assert container["image"] == SUITE
    env = env_of(cron)
    assert env["ROLLCALL_NODES"] == "3" and env["ROLLCALL_IMAGE"] == BERT
    assert env["ROLLCALL_ACCELERATOR"] == "cpu" and env["ROLLCALL_KEEP"] == "true"
    assert env["ROLLCALL_JOB_TIMEOUT"] == "900"  # from the render's environment, overriding the template's
    assert shlex.split(env["ROLLCALL_NODE_SELECTOR"]) == ["pool=a", "zone=z1"]
    assert shlex.split(env["ROLLCALL_WORKLOAD_ENV"]) == ["NOTE=two words"]
    assert env["ROLLCALL_PUSHGATEWAY"] == "http://10.1.2.3:9091"
    # the pod uses its in-cluster config: no kubeconfig or context of the render's machine
    assert not {"ROLLCALL_KUBECONFIG", "ROLLCALL_CONTEXT", "ROLLCALL_BACKEND"} & set(env)
    # the suite in the pod reads them as the render did
    options = resolve({}, environ=env)
    assert options.job.nodes == 3 and options.kubernetes.node_selector == {"pool": "a", "zone": "z1"}
    assert options.job.workload_env == {"NOTE": "two words"}
    assert (
        options.reports.pushgateway == "http://10.1.2.3:9091"
        and options.job.job_timeout == 900
        and options.job.keep
    )
    assert (
        "python -m pytest -p no:cacheprovider tests/e2e" in container["args"][0]
        and "--backend kubernetes" in container["args"][0]
    )
    assert "# Metrics are pushed to http://10.1.2.3:9091." in out


def test_results_go_to_an_emptydir_unless_a_claim_is_named_and_the_output_says_which(capsys):
    out, docs = rendered(capsys, "--accelerator", "cpu")
    pod = pod_of(by_kind(docs, "CronJob"))
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/results"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "emptyDir": {}}
    assert "on an emptyDir" in out.split("apiVersion")[0]
    assert "No metrics are pushed" in out

    out, docs = rendered(capsys, "--accelerator", "cpu", "--results-pvc", "nightly-results")
    pod = pod_of(by_kind(docs, "CronJob"))
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "persistentVolumeClaim": {"claimName": "nightly-results"}}
    assert "on the PersistentVolumeClaim nightly-results" in out.split("apiVersion")[0]


def test_the_template_file_is_the_one_reused(capsys):
    _, docs = rendered(capsys, "--accelerator", "cpu")
    cron = by_kind(docs, "CronJob")
    (template,) = [
        d for d in yaml.safe_load_all((MANIFESTS_DIR / "nightly" / "cronjob.yaml").read_text()) if d
    ]
    assert cron["metadata"]["name"] == template["metadata"]["name"]
    assert pod_of(cron)["containers"][0]["args"] == pod_of(template)["containers"][0]["args"]
    assert cron["spec"]["concurrencyPolicy"] == template["spec"]["concurrencyPolicy"]


@pytest.mark.parametrize(
    ("schedule", "said"),
    [
        ("0 2 * *", "has 5 fields, got 4"),
        ("@daily", "has 5 fields, got 1"),
        ("61 * * * *", "minute '61': 61 is outside 0-59"),
        ("0 24 * * *", "hour '24': 24 is outside 0-23"),
        ("0 2 0 * *", "day of month '0': 0 is outside 1-31"),
        ("0 2 * FOO *", "month 'FOO': 'FOO' is not a number or a name"),
        ("5-1 * * * *", "runs backwards"),
        ("*/0 * * * *", "a step of 0"),
        ("0 2 * * MON,", "'' is not N"),
    ],
)
def test_a_bad_schedule_is_refused_with_exit_4_naming_cronjob_and_the_fix(capsys, schedule, said):
    assert main(["render", "--cronjob", schedule, "--suite-image", SUITE, "--image", BERT]) == 4
    err = capsys.readouterr().err
    assert f"--cronjob {schedule!r}" in err and said in err and "use e.g. --cronjob '0 2 * * *'" in err


def test_schedules_the_controller_takes_pass():
    for schedule in (
        "0 2 * * *",
        "*/15 0-6,22-23 * JAN-DEC mon-fri",
        "0 0 1 */2 0",
        "5 4 * * 7",
        "0 0 ? * SUN",
    ):
        assert check_schedule(schedule) == schedule


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--cronjob", "0 2 * * *", "--image", BERT], "--cronjob needs --suite-image IMAGE"),
        (["--cronjob", "0 2 * * *", "--suite-image", SUITE], "--cronjob needs --image IMAGE"),
        (
            ["--cronjob", "0 2 * * *", "--suite-image", "Bad Image", "--image", BERT],
            "--suite-image 'Bad Image'",
        ),
        (
            ["--cronjob", "0 2 * * *", "--suite-image", SUITE, "--image", BERT, "--backend", "slurm"],
            "leave --backend out",
        ),
        (
            ["--cronjob", "0 2 * * *", "--suite-image", SUITE, "--image", BERT, "--results-pvc", "Bad_Claim"],
            "--results-pvc 'Bad_Claim' is not a claim's name",
        ),
        (["--cronjob", "0 2 * * *", "--suite-image", SUITE, "--image", BERT, "--nodes", "0"], "--nodes"),
    ],
)
def test_bad_cronjob_input_is_refused_with_exit_4(capsys, args, said):
    assert main(["render", *args]) == 4
    err = capsys.readouterr().err
    assert said in err, err


def test_a_baseline_file_of_this_machine_is_refused_naming_the_configmap(capsys, tmp_path: Path):
    baseline = tmp_path / "baseline.json"
    baseline.write_text("{}")
    assert main([*BASE, "--baseline", str(baseline)]) == 4
    err = capsys.readouterr().err
    assert f"--baseline {baseline}" in err and "configmap rollcall-baseline" in err
