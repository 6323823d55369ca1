"""Secrets by reference, their values written nowhere: what looks secret, the redaction every writer uses, and
each renderer (the Kubernetes objects, the sbatch script and its secrets' file, the CronJob, ``rollcall
render``, results.json's command line) given ``--workload-env HF_TOKEN=planted-value``."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rollcall.backends import BackendError
from rollcall.backends.kubernetes.manifests import Names, render
from rollcall.backends.kubernetes.nightly import NIGHTLY_SECRET, Nightly, render_text
from rollcall.backends.kubernetes.secretrefs import read_values
from rollcall.backends.slurm import script as sbatch
from rollcall.cli import main
from rollcall.jobspec import JobSpec
from rollcall.options import OptionError, resolve
from rollcall.reports import write_results
from rollcall.secrets import (
    REDACTED,
    FromEnvironment,
    FromSecret,
    is_secret,
    parse_secret,
    redact,
    redact_argv,
    redact_env,
)

PLANTED = "planted-value"
SPEC = JobSpec(
    name="bert-abc123",
    nodes=2,
    procs_per_node=1,
    accelerator="cpu",
    image="registry.example/rollcall-bert:1",
    env={"HF_TOKEN": PLANTED, "EXTRA": "1"},
)
NAMES = Names(namespace="rollcall-0a1b2c3d", job="bert-abc123", service="bert-abc123", run_id="0a1b2c3d")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("api_key", True),
        ("DB-PASSWORD", True),
        ("REGISTRY.CREDENTIALS", True),
        ("TOKEN", True),
        ("MONKEY", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("NCCL_IB_PKEY", False),
        ("KEYBOARD_LAYOUT", False),
        ("NCCL_DEBUG", False),
    ],
)
def test_a_name_looks_secret_when_one_of_its_parts_is_a_secrets_word(name, secret):
    assert is_secret(name) is secret
    assert is_secret(name, declared={name})  # a --workload-secret is one whatever its name


def test_every_writer_redacts_a_secrets_value_and_keeps_the_rest():
    assert redact(f"--workload-env=HF_TOKEN={PLANTED}") == f"--workload-env=HF_TOKEN={REDACTED}"
    assert (
        redact(f"rollcall_workload_env=HF_TOKEN={PLANTED} A=b")
        == f"rollcall_workload_env=HF_TOKEN={REDACTED} A=b"
    )
    assert redact(f"A=b API_KEY='{PLANTED} x' C=d") == f"A=b API_KEY={REDACTED} C=d"
    assert redact("MONKEY=1 NCCL_DEBUG=INFO") == "MONKEY=1 NCCL_DEBUG=INFO"
    argv = ["pytest", "--workload-env", f"HF_TOKEN={PLANTED} spaced", f"--workload-env=DB_PASSWORD={PLANTED}"]
    assert redact_argv(argv) == [
        "pytest",
        "--workload-env",
        f"HF_TOKEN={REDACTED}",
        f"--workload-env=DB_PASSWORD={REDACTED}",
    ]
    assert redact_env({"HF_TOKEN": PLANTED, "MINE": PLANTED, "A": "b"}, {"MINE"}) == {
        "HF_TOKEN": REDACTED,
        "MINE": REDACTED,
        "A": "b",
    }


def test_a_secret_is_named_with_where_its_value_comes_from_never_the_value():
    assert parse_secret("HF_TOKEN") == ("HF_TOKEN", FromEnvironment())
    assert parse_secret("HF_TOKEN=ml-secrets/hf/token") == (
        "HF_TOKEN",
        FromSecret("ml-secrets", "hf", "token"),
    )
    for word, says in (
        (
            f"HF_TOKEN={PLANTED}",
            "HF_TOKEN=...: what follows the = is not NAMESPACE/SECRET/KEY (a value is never",
        ),
        ("1X=ns/s/k", "'1X' is not an environment variable's name"),
        ("X=Ns/s/k", "X=...: the namespace is not a Kubernetes namespace name"),
        ("X=ns/s/k y", "X=...: the key is not a Kubernetes key name"),
    ):
        with pytest.raises(
            ValueError, match=r"give NAME \(its value from the suite's own environment\)"
        ) as e:
            parse_secret(word)
        assert says in str(e.value) and PLANTED not in str(e.value)
    with pytest.raises(OptionError, match=r"^invalid --workload-secret value 'HF_TOKEN=<redacted>'") as e:
        resolve({"workload_secret": [f"HF_TOKEN={PLANTED}"]})
    assert PLANTED not in str(e.value)
    options = resolve({"workload_secret": ["HF_TOKEN", "DB=ml/db/password"]})
    assert options.job.workload_secret == {
        "HF_TOKEN": FromEnvironment(),
        "DB": FromSecret("ml", "db", "password"),
    }


def test_the_job_refers_to_the_runs_secret_and_holds_no_value():
    spec = JobSpec(
        **{**vars(SPEC), "secrets": {"MINE": FromEnvironment(), "DB": FromSecret("ml", "db", "pw")}}
    )
    r = render(spec, NAMES)
    for obj in (r.job, r.service, r.namespace):
        assert PLANTED not in yaml.safe_dump(obj)
    (train,) = r.job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in train["env"]}
    assert env["EXTRA"] == {"name": "EXTRA", "value": "1"}
    for name in ("HF_TOKEN", "MINE", "DB"):
        assert env[name] == {
            "name": name,
            "valueFrom": {"secretKeyRef": {"name": "rollcall-env-0a1b2c3d", "key": name}},
        }
    secret = r.secret
    assert secret is not None and secret["metadata"]["namespace"] == NAMES.namespace
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "rollcall"
    assert [o["kind"] for o in r.objects()] == ["Namespace", "Secret", "Service", "Job"]  # before the pods
    assert secret["stringData"] == {"HF_TOKEN": PLANTED}  # the created Secret holds it; nothing printed does
    shown = yaml.safe_dump_all(r.shown())
    assert PLANTED not in shown and shown.count(REDACTED) == 3
    with pytest.raises(ValueError, match="no value for DB, MINE"):
        r.fill({})
    r.fill({"MINE": "m", "DB": "d"})
    assert secret["stringData"] == {"HF_TOKEN": PLANTED, "MINE": "m", "DB": "d"}
    assert render(JobSpec(**{**vars(SPEC), "env": {"EXTRA": "1"}}), NAMES).secret is None


class FakeCore:
    def __init__(self, answers):
        self.answers = answers
        self.read = []

    def read_namespaced_secret(self, name, namespace, **_):
        self.read.append((namespace, name))
        answer = self.answers[(namespace, name)]
        if isinstance(answer, Exception):
            raise answer
        return SimpleNamespace(data=json.dumps(answer).encode())


class FakeKube:
    def __init__(self, answers):
        self.core = FakeCore(answers)


def test_a_secret_of_the_cluster_is_read_by_its_name_alone_and_a_refusal_names_the_role_to_create():
    from kubernetes.client.exceptions import ApiException

    data = {"data": {"token": base64.b64encode(PLANTED.encode()).decode()}}
    kube = FakeKube({("ml", "hf"): data, ("ml", "no"): ApiException(status=403, reason="Forbidden")})
    sources = {"HF_TOKEN": FromSecret("ml", "hf", "token"), "MINE": FromEnvironment()}
    assert read_values(kube, sources, {"MINE": "m"}) == {"HF_TOKEN": PLANTED, "MINE": "m"}
    assert kube.core.read == [("ml", "hf")]
    with pytest.raises(BackendError, match="the suite's environment has no MINE; set it"):
        read_values(kube, {"MINE": FromEnvironment()}, {})
    with pytest.raises(BackendError, match="has no key 'other' \\(its keys: token\\)"):
        read_values(kube, {"X": FromSecret("ml", "hf", "other")}, {})
    with pytest.raises(BackendError, match=r"create the Role and RoleBinding of docs/security.md .* in ml"):
        read_values(kube, {"X": FromSecret("ml", "no", "k")}, {})


def test_the_sbatch_script_holds_no_secret_and_reads_them_from_a_file_of_the_users_alone(tmp_path):
    spec = JobSpec(**{**vars(SPEC), "secrets": {"MINE": FromEnvironment()}})
    script = sbatch.render(spec, sbatch.Settings(), tmp_path)
    assert PLANTED not in script and "HF_TOKEN" not in script and "export EXTRA=1" in script
    path = sbatch.write_secrets(spec, tmp_path, {"MINE": "it's mine"})
    assert path == tmp_path / sbatch.SECRETS_FILE
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    # the script's lines up to the rendezvous, run: the variables are there, the file is gone
    head = script.split("# Rendezvous on the first node", 1)[0]
    shown = subprocess.run(
        ["bash", "-c", head + 'printf "%s|%s\\n" "$HF_TOKEN" "$MINE"'],
        env={"SLURM_CPUS_ON_NODE": "2", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == f"{PLANTED}|it's mine\n"
    assert not path.exists()
    with pytest.raises(ValueError, match="a Kubernetes Secret, which the slurm backend cannot read"):
        sbatch.render(
            JobSpec(**{**vars(SPEC), "secrets": {"X": FromSecret("ml", "s", "k")}}),
            sbatch.Settings(),
            tmp_path,
        )
    assert sbatch.write_secrets(JobSpec(**{**vars(SPEC), "env": {}}), tmp_path) is None


def test_a_container_images_logs_lie_in_the_jobs_own_directory_under_tmp(tmp_path):
    script = sbatch.render(
        SPEC, sbatch.Settings(container_image="nvcr.io#nvidia/pytorch:24.01-py3"), tmp_path
    )
    head = script.split("# Rendezvous on the first node", 1)[0].replace("source ", ": ").replace("rm -f", ":")
    shown = subprocess.run(
        ["bash", "-c", head + 'printf "%s\\n" "$TORCHELASTIC_ERROR_FILE"'],
        env={"SLURM_JOB_ID": "77", "SLURM_CPUS_ON_NODE": "2", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == "/tmp/rollcall-monitor-77/logs/agent-error.json\n"
    command = script.replace("\\\n", " ")
    assert '--log-dir=/tmp/rollcall-monitor-"$SLURM_JOB_ID"/logs ' in command  # expanded on the node


def test_the_cronjob_takes_each_secret_from_a_secret_of_its_namespace_and_prints_none():
    env = {
        "ROLLCALL_WORKLOAD_ENV": f"HF_TOKEN={PLANTED} EXTRA=1",
        "ROLLCALL_WORKLOAD_SECRET": "DB=ml/db/pw MINE",
    }
    text = render_text(Nightly("0 2 * * *", "rollcall.local/suite:1", env))
    assert PLANTED not in text
    cron = next(d for d in yaml.safe_load_all(text) if d["kind"] == "CronJob")
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    given = {e["name"]: e for e in container["env"]}
    assert given["ROLLCALL_WORKLOAD_ENV"]["value"] == "EXTRA=1"
    assert given["ROLLCALL_WORKLOAD_SECRET"]["value"] == "DB=ml/db/pw MINE HF_TOKEN"
    for name in ("MINE", "HF_TOKEN"):
        assert given[name]["valueFrom"] == {"secretKeyRef": {"name": NIGHTLY_SECRET, "key": name}}
    assert "DB" not in given  # read by the suite in the pod, through the Role of its namespace
    assert (
        f"create secret generic {NIGHTLY_SECRET} --from-literal=MINE=... --from-literal=HF_TOKEN=..." in text
    )


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    from rollcall.backends.kubernetes import backend, kube

    def refuse(*args, **kwargs):
        raise AssertionError("render contacted a cluster")

    # every module that took connect by name, imported before the patch so none binds the refusal for good
    for module in (kube, backend):
        monkeypatch.setattr(module, "connect", refuse)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    for name in [n for n in os.environ if n.startswith("ROLLCALL_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    "args",
    [
        ["--backend", "kubernetes", "--accelerator", "cpu", "--image", "registry.example/bert:1"],
        [
            "--backend",
            "kubernetes",
            "--accelerator",
            "cpu",
            "--image",
            "registry.example/bert:1",
            "--job-kind",
            "jobset",
        ],
        ["--backend", "slurm", "--accelerator", "cpu"],
        [
            "--cronjob",
            "0 2 * * *",
            "--suite-image",
            "rollcall.local/suite:1",
            "--image",
            "registry.example/bert:1",
        ],
    ],
)
def test_rollcall_render_prints_no_secrets_value(no_cluster, capsys, args):
    assert main(["render", *args, "--workload-env", f"HF_TOKEN={PLANTED}", "--workload-env", "EXTRA=1"]) == 0
    out = capsys.readouterr().out
    assert PLANTED not in out and "EXTRA" in out
    assert ("HF_TOKEN" in out) != ("slurm" in args)  # the sbatch script does not even name it: its file does


def test_results_json_holds_the_command_line_without_a_secrets_value(tmp_path):
    path = tmp_path / "results.json"
    write_results(path, [], {"argv": ["pytest", "--workload-env", f"HF_TOKEN={PLANTED}"], "backend": "local"})
    assert PLANTED not in path.read_text()
    assert json.loads(path.read_text())["argv"] == ["pytest", "--workload-env", f"HF_TOKEN={REDACTED}"]


def test_a_secret_from_the_suites_environment_must_be_there_before_anything_runs(monkeypatch, tmp_path):
    from rollcall.suite import Suite

    monkeypatch.delenv("ROLLCALL_TEST_ABSENT_TOKEN", raising=False)
    options = resolve(
        {
            "workload_secret": ["ROLLCALL_TEST_ABSENT_TOKEN"],
            "backend": "local",
            "artifacts_dir": str(tmp_path),
        }
    )
    with pytest.raises(
        OptionError, match="the suite's environment has no ROLLCALL_TEST_ABSENT_TOKEN; set it"
    ):
        Suite.from_options(options).prepare(connect=True)
    assert not Path(tmp_path / sbatch.SECRETS_FILE).exists()
