"""Bad input stops the pytest run with a usage error (exit code 4) naming the option and the fix, never a traceback.

Each case runs pytest itself (pytester, in process) on a test that uses the ``rollcall`` fixture, with the
kubernetes backend: nothing can be created, since no cluster is reachable or the input is refused first.
The kubeconfig and RBAC rules are also checked as plain functions. A Forbidden answer from a real API server
is tested against the local control plane (tests/k8s/test_bad_input.py).
"""

import os
from pathlib import Path

import pytest
import yaml

from rollcall.backends.kubernetes.access import Right, rights
from rollcall.backends.kubernetes.kubeconfig import KUBECONFIG_FIX, KubeconfigError, check

pytest_plugins = ["pytester"]

ROLL_CALL = """
def test_roll_call(rollcall):
    raise AssertionError("a run started despite bad input")
"""
IMAGE = "registry.invalid/rollcall-bert:never-pulled"


def kubeconfig(server: str = "https://127.0.0.1:1", current: str | None = "one") -> dict:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": "one", "context": {"cluster": "c", "user": "u"}},
            {"name": "two", "context": {"cluster": "c", "user": "u"}},
        ],
    }
    if current:
        doc["current-context"] = current
    return doc


def write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def usage_error(pytester: pytest.Pytester, *args: str) -> str:
    """Run pytest with the kubernetes backend and ``args``; assert exit code 4; the error's text."""
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest("-p", "no:cacheprovider", "--backend", "kubernetes", *args)
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert "Traceback" not in err and "Traceback" not in res.stdout.str()
    return err


@pytest.fixture(autouse=True)
def no_ambient_cluster(monkeypatch, tmp_path):
    """No kubeconfig of the machine's own may be picked up."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "ROLLCALL_KUBECONFIG", "ROLLCALL_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_a_missing_kubeconfig(pytester):
    err = usage_error(pytester, "--kubeconfig", "/nonexistent", "--image", IMAGE)
    assert f"ERROR: --kubeconfig /nonexistent: no such file; {KUBECONFIG_FIX}" in err


def test_a_kubeconfig_from_the_environment_is_named_by_its_variable(pytester, monkeypatch):
    monkeypatch.setenv("ROLLCALL_KUBECONFIG", "/nonexistent")
    err = usage_error(pytester, "--image", IMAGE)
    assert "ERROR: ROLLCALL_KUBECONFIG=/nonexistent: no such file" in err


def test_a_kubeconfig_that_is_not_yaml(pytester, tmp_path):
    (tmp_path / "bad").write_text("clusters: [unclosed\n")
    err = usage_error(pytester, "--kubeconfig", str(tmp_path / "bad"), "--image", IMAGE)
    assert (
        f"--kubeconfig {tmp_path / 'bad'}: not YAML (" in err and "at line 2); pass --kubeconfig PATH" in err
    )


@pytest.mark.parametrize("content", ["- just\n- a list\n", "answer: 42\n", ""])
def test_yaml_that_is_not_a_kubeconfig(pytester, tmp_path, content):
    (tmp_path / "other.yaml").write_text(content)
    err = usage_error(pytester, "--kubeconfig", str(tmp_path / "other.yaml"), "--image", IMAGE)
    assert (
        "other.yaml: not a kubeconfig (no clusters, contexts or users in it); pass --kubeconfig PATH" in err
    )


def test_an_unreadable_kubeconfig(pytester, tmp_path):
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00garbage")
    err = usage_error(pytester, "--kubeconfig", str(tmp_path / "binary"), "--image", IMAGE)
    assert "binary: cannot be read (" in err and "make it readable, or pass --kubeconfig PATH" in err
    err = usage_error(pytester, "--kubeconfig", str(tmp_path), "--image", IMAGE)
    assert f"--kubeconfig {tmp_path}: is a directory, not a kubeconfig file" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_a_kubeconfig_without_read_permission(pytester, tmp_path):
    path = write(tmp_path / "secret", kubeconfig())
    path.chmod(0)
    err = usage_error(pytester, "--kubeconfig", str(path), "--image", IMAGE)
    assert "secret: cannot be read (Permission denied)" in err


def test_an_unknown_context_lists_the_contexts_there_are(pytester, tmp_path):
    path = write(tmp_path / "kubeconfig", kubeconfig())
    err = usage_error(pytester, "--kubeconfig", str(path), "--context", "nosuch", "--image", IMAGE)
    assert (
        f"ERROR: --context nosuch: no such context in --kubeconfig {path}; its contexts: one, two "
        "(current: one); use --context NAME with one of them"
    ) in err


def test_an_unreachable_api_server_is_named_with_where_it_came_from(pytester, tmp_path):
    path = write(tmp_path / "kubeconfig", kubeconfig("https://127.0.0.1:1"))
    err = usage_error(pytester, "--kubeconfig", str(path), "--context", "two", "--image", IMAGE)
    assert (
        f"ERROR: cannot reach the API server https://127.0.0.1:1 (from --kubeconfig {path}, context two): "
    ) in err
    assert "Connection refused" in err and "check that the cluster is up and reachable from here" in err


def test_an_invalid_image_reference(pytester, tmp_path):
    path = write(tmp_path / "kubeconfig", kubeconfig())
    err = usage_error(pytester, "--kubeconfig", str(path), "--image", "Not An/Image")
    assert "ERROR: invalid --image value 'Not An/Image' (from --image): not an image reference" in err
    assert "use --image IMAGE" in err


def test_no_image_with_the_kubernetes_backend(pytester, tmp_path):
    path = write(tmp_path / "kubeconfig", kubeconfig())
    err = usage_error(pytester, "--kubeconfig", str(path))
    assert "ERROR: the kubernetes backend needs --image IMAGE" in err


def test_under_xdist_the_controller_stops_the_session_before_any_worker_starts(pytester):
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest_subprocess(
        *("-p", "no:cacheprovider", "-n", "2", "--backend", "kubernetes"),
        *("--kubeconfig", "/nonexistent", "--image", IMAGE),
        timeout=120,
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    assert "ERROR: --kubeconfig /nonexistent: no such file" in res.stderr.str()
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()


def test_sessions_without_a_roll_call_do_not_connect(pytester, tmp_path):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    res = pytester.runpytest(
        "-p", "no:cacheprovider", "--backend", "kubernetes", "--kubeconfig", "/nonexistent"
    )
    res.assert_outcomes(passed=1)


# -- the kubeconfig's rules, as functions ------------------------------------------------------------------


def test_the_current_context_and_its_server(tmp_path):
    path = write(tmp_path / "kubeconfig", kubeconfig("https://api.example:6443"))
    found = check(str(path), None, environ={})
    assert found is not None and (found.context, found.server) == ("one", "https://api.example:6443")
    assert found.contexts == ("one", "two")


def test_a_kubeconfig_without_a_current_context_asks_for_one(tmp_path):
    path = write(tmp_path / "kubeconfig", kubeconfig(current=None))
    with pytest.raises(
        KubeconfigError, match=r"has no current-context; pass --context NAME \(its contexts: one, two\)"
    ):
        check(str(path), None, environ={})
    found = check(str(path), "two", environ={})
    assert found is not None and (found.context, found.server) == ("two", "https://127.0.0.1:1")


def test_a_context_whose_cluster_has_no_server(tmp_path):
    doc = kubeconfig()
    doc["clusters"] = []
    path = write(tmp_path / "kubeconfig", doc)
    with pytest.raises(KubeconfigError, match="context one names cluster c, which has no server URL"):
        check(str(path), None, environ={})


def test_kubeconfig_lists_merge_and_missing_files_are_skipped(tmp_path):
    first = kubeconfig()
    first["contexts"] = first["contexts"][:1]
    second = kubeconfig(current="two")
    second["contexts"] = second["contexts"][1:]
    paths = [write(tmp_path / "a", first), tmp_path / "missing", write(tmp_path / "b", second)]
    env = {"KUBECONFIG": os.pathsep.join(map(str, paths))}
    found = check(None, None, environ=env)
    assert found is not None and found.context == "one" and found.contexts == ("one", "two")
    with pytest.raises(KubeconfigError, match=r"^KUBECONFIG=.*: none of its files exists"):
        check(None, None, environ={"KUBECONFIG": str(tmp_path / "missing")})


def test_no_configuration_at_all_says_where_it_looked(tmp_path):
    with pytest.raises(
        KubeconfigError, match=r"no --kubeconfig, KUBECONFIG is not set, there is no ~/\.kube/config"
    ):
        check(None, None, environ={"HOME": str(tmp_path)})


def test_the_rights_checked_are_the_cluster_roles():
    needed = rights()
    assert Right("create", "batch", "jobs") in needed and Right("get", "", "pods", "log") in needed
    assert Right("watch", "", "nodes") in needed
    assert not any(r.resource == "daemonsets" for r in needed), "only --check-device-plugins reads them"
    assert Right("list", "apps", "daemonsets") in rights(["check_device_plugins"])
    assert Right("deletecollection", "", "pods") not in needed, "only a run in an existing namespace asks it"
    assert Right("deletecollection", "", "pods") in rights(["namespace"])
    assert not any(r.resource == "jobsets" for r in needed), "only --job-kind jobset makes them"
    assert {r.verb for r in rights(["jobset"]) if r.resource == "jobsets"} == {
        "get",
        "list",
        "watch",
        "create",
        "delete",
    }
    assert Right("create", "", "namespaces").where("rollcall-x") == "at the cluster scope"
    assert Right("create", "batch", "jobs").where("rollcall-x") == "in namespace rollcall-x (a run's own)"
    assert str(Right("get", "", "pods", "log")) == "get pods/log"
    assert str(Right("create", "batch", "jobs")) == "create jobs.batch"


# -- the workload's own input, checked by the workload's own parsing before launch ---------------------------


def local_usage_error(pytester: pytest.Pytester, *args: str) -> str:
    """As :func:`usage_error` with the local backend: nothing may start (the test would fail)."""
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest("-p", "no:cacheprovider", "--backend", "local", *args)
    out, err = res.stdout.str(), res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, out + err
    assert "Traceback" not in err + out and "a run started" not in out
    return err


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_an_nfs_compile_cache_without_pods_to_mount_it_is_refused(pytester, backend):
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest(
        "-p", "no:cacheprovider", "--backend", backend, "--compile-cache", "nfs:fs-1.example:/compile"
    )
    out, err = res.stdout.str(), res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, out + err
    assert "Traceback" not in err + out and "a run started" not in out
    assert (
        f"--compile-cache nfs:fs-1.example:/compile: the {backend} backend mounts no volume; "
        "use --compile-cache /PATH"
    ) in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--workload-args", "--seq-len -3"),
            "ERROR: invalid --workload-args value '--seq-len -3' (from --workload-args): train.py refuses it: "
            "argument --seq-len: must be a whole number from 5 to 512, not '-3'; use --workload-args ARGS",
        ),
        (
            ("--workload-args=--no-such-flag",),
            "ERROR: invalid --workload-args value '--no-such-flag' (from --workload-args): train.py refuses it: "
            "unrecognized arguments: --no-such-flag; use --workload-args ARGS",
        ),
        (
            ("--workload-args", "--epochs 0"),
            "train.py refuses it: argument --epochs: must be a whole number >= 1, not '0'",
        ),
        (
            ("--workload-args=--help",),
            "train.py prints its help and exits instead of training; use --workload-args ARGS",
        ),
    ],
)
def test_workload_args_are_parsed_by_the_workloads_own_parser(pytester, args, message):
    assert message in local_usage_error(pytester, *args)


def test_workload_args_from_the_environment_are_named_by_their_variable(pytester, monkeypatch):
    monkeypatch.setenv("ROLLCALL_WORKLOAD_ARGS", "--batch-size -1")
    err = local_usage_error(pytester)
    assert "(from ROLLCALL_WORKLOAD_ARGS): train.py refuses it: argument --batch-size: must be a whole" in err


@pytest.mark.parametrize(
    ("pair", "fix"),
    [
        (
            "ROLLCALL_FAIL_RANK=0-2",
            "write ROLLCALL_FAIL_RANK=<rank>[,<rank>...], e.g. ROLLCALL_FAIL_RANK=0,2",
        ),
        (
            "ROLLCALL_HANG_RANK=one",
            "write ROLLCALL_HANG_RANK=<rank>[,<rank>...], e.g. ROLLCALL_HANG_RANK=0,2",
        ),
        ("ROLLCALL_CHATTY=1", "write ROLLCALL_CHATTY=<rank>:<bytes>"),
        ("ROLLCALL_SLOW_RANK=1", "write ROLLCALL_SLOW_RANK=<rank>:<factor >= 1>"),
    ],
)
def test_a_malformed_fault_injection_variable_is_refused(pytester, pair, fix):
    err = local_usage_error(pytester, "--workload-env", pair)
    name, _, value = pair.partition("=")
    assert (
        f"ERROR: invalid --workload-env value '{pair}' (from --workload-env): {name}={value!r} is not valid; "
        in err
    )
    assert f"{fix}; use --workload-env KEY=VALUE" in err


def test_fault_injection_lists_are_accepted():
    from rollcall.options import resolve

    options = resolve(
        {
            "workload_env": ["ROLLCALL_FAIL_RANK=0,2", "ROLLCALL_HANG_RANK=1,5"],
            "workload_args": "--seq-len 128",
        },
        {},
    )
    assert options.job.workload_env == {"ROLLCALL_FAIL_RANK": "0,2", "ROLLCALL_HANG_RANK": "1,5"}
    assert options.job.workload_args == ("--seq-len", "128")


def test_the_workload_input_is_checked_by_the_installed_package_not_a_file_of_the_checkout():
    """The suite imports the workload's parser as a module: no checkout file is needed to check the input."""
    from rollcall import jobspec

    with pytest.raises(ValueError, match=r"train\.py refuses it: unrecognized arguments: --no-such-flag"):
        jobspec.check_args(["--no-such-flag"])
    with pytest.raises(ValueError, match="ROLLCALL_FAIL_RANK"):
        jobspec.check_env({"ROLLCALL_FAIL_RANK": "x"})


@pytest.mark.parametrize(
    ("where", "why"),
    [("/proc/rollcall-reports", "No such file or directory"), ("{file}/reports", "Not a directory")],
)
def test_an_artifacts_directory_that_cannot_be_written_is_refused_before_any_run(
    pytester, tmp_path, where, why
):
    file = tmp_path / "a-file"
    file.write_text("")
    where = where.format(file=file)
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest("-p", "no:cacheprovider", "--backend", "local", "--artifacts-dir", where)
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert f"ERROR: --artifacts-dir {where}: cannot be written ({why}); name a directory" in err
    assert "Traceback" not in err + res.stdout.str()


@pytest.mark.parametrize(
    ("how", "said"),
    [
        (
            ("--job-timeout", "soon"),
            "invalid --job-timeout value 'soon' (from --job-timeout): expected a duration",
        ),
        (
            ("--hang-after", "0"),
            "invalid --hang-after value '0' (from --hang-after): expected auto or a duration",
        ),
        (
            "ROLLCALL_JOIN_HANG_AFTER=never",
            "invalid --join-hang-after value 'never' (from ROLLCALL_JOIN_HANG_AFTER)",
        ),
        (
            "[pytest]\nrollcall_job_timeout = 30 minutes\n",
            "(from ini rollcall_job_timeout): expected a duration",
        ),
    ],
)
def test_a_bad_duration_names_the_option_where_it_came_from_and_the_forms(pytester, monkeypatch, how, said):
    args: tuple[str, ...] = ()
    if isinstance(how, tuple):
        args = how
    elif how.startswith("[pytest]"):
        pytester.makeini(how)
    else:
        monkeypatch.setenv(*how.split("=", 1))
    err = local_usage_error(pytester, *args)
    assert said in err and "90s, 30m, 1h" in err and "DURATION" in err


def test_a_hang_bound_given_twice_is_a_usage_error_naming_both(pytester, monkeypatch):
    monkeypatch.setenv("ROLLCALL_WORKLOAD_ARGS", "--epochs 1 --join-hang-after 30")
    err = local_usage_error(pytester, "--join-hang-after", "2m")
    assert (
        "ERROR: --join-hang-after 2m (from --join-hang-after) and --join-hang-after 30 in the workload's arguments "
        "(from ROLLCALL_WORKLOAD_ARGS: --epochs 1 --join-hang-after 30) set one bound twice" in err
    )


def test_a_tests_own_workload_args_that_set_a_bound_otherwise_are_a_usage_error(
    pytester, monkeypatch, request
):
    from tests.unit.scripted import SCRIPTED_CONFTEST

    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile(
        test_roll="""
import pytest

@pytest.mark.rollcall(workload_args=("--hang-after", "5"))
def test_marked(rollcall):
    rollcall()
"""
    )
    res = pytester.runpytest("-p", "no:cacheprovider", "--hang-after", "1m")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    out = res.stdout.str() + res.stderr.str()
    assert "--hang-after 1m (from --hang-after) and --hang-after 5 in the workload's arguments (from " in out
    assert "Traceback" not in out
