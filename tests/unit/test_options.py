import re
import typing

import pytest

from rollcall.jobspec import CacheVolume, Scheduling, Toleration
from rollcall.options import GROUPS, OPTIONS, OptionError, env_name, resolve
from rollcall.options.values import duration, format_duration
from rollcall.suite import choose_backend


def test_defaults():
    o = resolve({}, {})
    assert (o.job.nodes, o.job.procs_per_node, o.job.backend, o.recovery.retries, o.job.keep) == (
        2,
        None,
        "auto",
        0,
        False,
    )
    assert o.sources["nodes"] == "default"


def test_environment_then_command_line():
    env = {
        "ROLLCALL_NODES": "4",
        "ROLLCALL_JOB_TIMEOUT": "60",
        "ROLLCALL_KEEP": "true",
        "ROLLCALL_WORKLOAD_ENV": "A=1 B='x y'",
        "ROLLCALL_WORKLOAD_ARGS": "--model base --seq-len 512",
    }
    o = resolve({}, env)
    assert (o.job.nodes, o.job.job_timeout, o.job.keep) == (4, 60.0, True)
    assert o.job.workload_env == {"A": "1", "B": "x y"}
    assert o.job.workload_args == ("--model", "base", "--seq-len", "512")
    assert o.sources["nodes"] == "ROLLCALL_NODES"
    o = resolve({"nodes": "8", "workload_env": ["C=3"]}, env)
    assert o.job.nodes == 8 and o.job.workload_env == {"C": "3"}
    assert o.sources["nodes"] == "--nodes"


@pytest.mark.parametrize(
    ("cli", "env", "fragment"),
    [
        ({"nodes": "0"}, {}, "invalid --nodes value '0' (from --nodes): must be >= 1; use --nodes N"),
        ({}, {"ROLLCALL_NODES": "two"}, "(from ROLLCALL_NODES): expected a whole number"),
        ({"accelerator": "tpu"}, {}, "must be one of auto, nvidia, neuron, cpu"),
        ({"job_timeout": "-1"}, {}, "--job-timeout"),
        ({"min_throughput": "nan"}, {}, "finite number > 0"),
        ({"namespace_prefix": "Bad_Prefix"}, {}, "lower-case letters"),
        ({"workload_env": ["NOEQUALS"]}, {}, "KEY=VALUE"),
        ({"workload_args": "'unclosed"}, {}, "shell-quoted"),
        ({"retries": "-1"}, {}, "must be >= 0"),
    ],
)
def test_bad_values_name_the_option_and_the_fix(cli, env, fragment):
    with pytest.raises(OptionError) as exc:
        resolve(cli, env)
    assert fragment in str(exc.value)


def test_env_name():
    assert env_name("--procs-per-node") == "ROLLCALL_PROCS_PER_NODE"


def test_backend_choice(tmp_path):
    o = resolve({}, {})
    assert choose_backend(o, {"HOME": str(tmp_path)})[0] == "local"
    assert choose_backend(o, {"HOME": str(tmp_path), "KUBECONFIG": "/k"}) == ("kubernetes", "KUBECONFIG=/k")
    assert (
        choose_backend(o, {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "10.0.0.1"})[1]
        == "in-cluster config"
    )
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert choose_backend(o, {"HOME": str(tmp_path)})[0] == "kubernetes"
    assert choose_backend(resolve({"backend": "local"}, {}), {"KUBECONFIG": "/k"})[0] == "local"


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("rollcall.local/rollcall-bert:cpu", True),
        ("123456789012.dkr.ecr.us-west-2.amazonaws.com/rollcall-bert:2026.12", True),
        ("localhost:5000/a_b/c@sha256:" + "0" * 64, True),
        ("nginx", True),
        ("bad image name!", False),
        ("Upper/case", False),
        ("repo:", False),
        ("a//b", False),
        ("", False),
    ],
)
def test_the_image_reference_is_checked_before_anything_is_created(image, ok):
    if ok:
        assert resolve({"image": image}, {}).job.image == image
    else:
        with pytest.raises(OptionError, match=r"invalid --image value .*: (not an image reference|an image)"):
            resolve({}, {"ROLLCALL_IMAGE": image})


def test_node_selectors_requests_and_limits():
    o = resolve(
        {"node_selector": ["karpenter.sh/nodepool=gpu", "topology.kubernetes.io/zone=us-west-2a"]},
        {"ROLLCALL_REQUESTS": "cpu=4, memory=16Gi", "ROLLCALL_LIMITS": "memory=32Gi"},
    )
    assert o.kubernetes.node_selector == {
        "karpenter.sh/nodepool": "gpu",
        "topology.kubernetes.io/zone": "us-west-2a",
    }
    assert o.kubernetes.requests == {"cpu": "4", "memory": "16Gi"} and o.kubernetes.limits == {
        "memory": "32Gi"
    }
    with pytest.raises(OptionError, match="a request may not exceed its limit"):
        resolve({"requests": "memory=2Gi", "limits": "memory=1Gi"}, {})
    with pytest.raises(OptionError, match="not a Kubernetes quantity"):
        resolve({"limits": "memory=lots"}, {})
    with pytest.raises(OptionError, match="--node-selector"):
        resolve({"node_selector": ["no-equals"]}, {})


def test_neuron_cache_is_a_node_directory_or_an_nfs_export():
    o = resolve({"neuron_cache": "nfs:fs-0123.efs.us-east-1.amazonaws.com:/neuron/"}, {})
    assert o.kubernetes.neuron_cache == CacheVolume("nfs", "/neuron", "fs-0123.efs.us-east-1.amazonaws.com")
    o = resolve({}, {"ROLLCALL_NEURON_CACHE": "host:/var/tmp/neuron-compile-cache"})
    assert o.kubernetes.neuron_cache == CacheVolume("host", "/var/tmp/neuron-compile-cache")
    assert str(o.kubernetes.neuron_cache) == "host:/var/tmp/neuron-compile-cache"
    assert resolve({}, {}).kubernetes.neuron_cache is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("my-pvc", "expected host:/PATH (a directory of each node) or nfs:SERVER:/PATH"),
        ("host:relative/dir", "'relative/dir' is not an absolute path"),
        ("host:/a/../etc", "without '..'"),
        ("nfs::/export", "'' is not an NFS server name"),
        ("nfs:server/x:/export", "'server/x' is not an NFS server name"),
    ],
)
def test_a_bad_neuron_cache_names_the_option_and_the_forms(value, fragment):
    with pytest.raises(OptionError) as exc:
        resolve({"neuron_cache": value}, {})
    text = str(exc.value)
    assert text.startswith(f"invalid --neuron-cache value {value!r} (from --neuron-cache): ")
    assert fragment in text and text.endswith("use --neuron-cache host:/PATH|nfs:SERVER:/PATH")


def test_compile_cache_is_a_directory_or_a_volume_as_the_neuron_cache_is():
    o = resolve({"compile_cache": "nfs:fs-0123.efs.us-east-1.amazonaws.com:/compile/"}, {})
    assert o.job.compile_cache == CacheVolume("nfs", "/compile", "fs-0123.efs.us-east-1.amazonaws.com")
    o = resolve({}, {"ROLLCALL_COMPILE_CACHE": "host:/var/tmp/compile"})
    assert o.job.compile_cache == CacheVolume("host", "/var/tmp/compile")
    # a plain directory is a directory of each node (local, slurm)
    assert resolve({"compile_cache": "/srv/cache/"}, {}).job.compile_cache == CacheVolume(
        "host", "/srv/cache"
    )
    assert resolve({}, {}).job.compile_cache is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("my-pvc", "expected host:/PATH (a directory of each node) or nfs:SERVER:/PATH"),
        ("relative/dir", "expected host:/PATH"),
        ("host:relative/dir", "'relative/dir' is not an absolute path"),
        ("/a/../etc", "without '..'"),
        ("nfs::/export", "'' is not an NFS server name"),
    ],
)
def test_a_bad_compile_cache_names_the_option_and_the_forms(value, fragment):
    with pytest.raises(OptionError) as exc:
        resolve({"compile_cache": value}, {})
    text = str(exc.value)
    assert text.startswith(f"invalid --compile-cache value {value!r} (from --compile-cache): ")
    assert fragment in text and text.endswith("use --compile-cache host:/PATH|nfs:SERVER:/PATH")


def test_tolerations_take_kubectls_taint_syntax():
    o = resolve(
        {"toleration": ["dedicated=ml:NoSchedule", "spot:NoExecute", "dedicated=ml:NoSchedule"]},
        {},
    )
    assert o.kubernetes.toleration == (
        Toleration("dedicated", "NoSchedule", "ml"),
        Toleration("spot", "NoExecute"),
    ), "a repeated toleration counts once"
    assert [t.manifest() for t in o.kubernetes.toleration] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ]
    env = {"ROLLCALL_TOLERATION": "nvidia.com/gpu=present:PreferNoSchedule example.com/empty=:NoSchedule"}
    assert [str(t) for t in resolve({}, env).kubernetes.toleration] == [
        "nvidia.com/gpu=present:PreferNoSchedule",
        "example.com/empty=:NoSchedule",
    ]
    assert resolve({}, env).sources["toleration"] == "ROLLCALL_TOLERATION"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("dedicated=ml", "has no :EFFECT"),
        ("dedicated:NoRun", "'NoRun' (in 'dedicated:NoRun') is not a taint effect: one of NoSchedule"),
        ("Bad_Prefix/key:NoSchedule", "is not a taint key"),
        (f"{'k' * 64}:NoSchedule", "is not a taint key"),
        ("key=two words:NoSchedule", "is not a taint value"),
        (":NoSchedule", "is not a taint key"),
    ],
)
def test_a_bad_toleration_names_the_option_and_the_syntax(value, said):
    with pytest.raises(OptionError) as exc:
        resolve({"toleration": [value]}, {})
    message = str(exc.value)
    assert message.startswith("invalid --toleration value") and said in message
    assert message.endswith("use --toleration KEY[=VALUE]:EFFECT")


def test_the_scheduling_options_are_carried_together():
    o = resolve(
        {
            "priority_class": "training-high",
            "queue": "team-ml",
            "image_pull_secret": ["regcred", "ecr.creds", "regcred"],
            "service_account": "trainer",
            "namespace": "ml-team",
        },
        {"ROLLCALL_TOLERATION": "spot:NoSchedule"},
    )
    assert o.kubernetes.scheduling == Scheduling(
        tolerations=(Toleration("spot", "NoSchedule"),),
        priority_class="training-high",
        queue="team-ml",
        image_pull_secrets=("regcred", "ecr.creds"),
        service_account="trainer",
    )
    assert o.kubernetes.namespace == "ml-team"
    assert resolve({}, {}).kubernetes.scheduling == Scheduling()


@pytest.mark.parametrize(
    ("cli", "said"),
    [
        ({"priority_class": "High"}, "invalid --priority-class value 'High'"),
        ({"queue": "q" * 64}, "at most 63 lower-case letters"),
        ({"image_pull_secret": ["reg_cred"]}, "invalid --image-pull-secret value 'reg_cred'"),
        ({"service_account": "-sa", "namespace": "ml"}, "invalid --service-account value '-sa'"),
        ({"namespace": "ml.team"}, "must be a namespace name"),
        ({"namespace": "n" * 64}, "must be a namespace name"),
        ({"service_account": "trainer"}, "pass --namespace NAME, the existing namespace that holds it"),
    ],
)
def test_bad_scheduling_values_name_the_option(cli, said):
    with pytest.raises(OptionError, match=re.escape(said)):
        resolve(cli, {})


def test_the_default_service_account_needs_no_namespace():
    assert resolve({"service_account": "default"}, {}).kubernetes.service_account == "default"


DURATIONS = [s for s in OPTIONS if s.metavar == "DURATION"]


def test_every_duration_option_says_so_and_they_are_the_ones_that_take_seconds():
    assert {s.flag for s in DURATIONS} >= {
        "--job-timeout",
        "--unschedulable-grace",
        "--capacity-timeout",
        "--sweep-older-than",
        "--isolate-timeout",
        "--progress-every",
        "--hang-after",
        "--first-step-hang-after",
        "--join-hang-after",
    }
    assert not [s.flag for s in OPTIONS if "SECONDS" in (s.metavar or "")]


@pytest.mark.parametrize("spec", DURATIONS, ids=lambda s: s.flag)
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("2m30s", 150.0),
        ("1.5h", 5400.0),
    ],
)
def test_every_duration_takes_seconds_and_units_alike(spec, text, seconds):
    options = resolve({spec.name: text}, {})
    assert getattr(options.section(spec.group), spec.name) == seconds
    from_env = resolve({}, {spec.env: text})
    assert getattr(from_env.section(spec.group), spec.name) == seconds


def test_job_timeout_30m_works_and_a_bad_duration_says_the_forms():
    assert resolve({"job_timeout": "30m"}, {}).job.job_timeout == 1800.0
    with pytest.raises(OptionError) as exc:
        resolve({}, {"ROLLCALL_JOB_TIMEOUT": "half an hour"})
    assert str(exc.value) == (
        "invalid --job-timeout value 'half an hour' (from ROLLCALL_JOB_TIMEOUT): expected a duration: "
        "seconds (90) or Go's and kubectl's form, parts of ms, s, m, h or d (90s, 30m, 1h, 2m30s, 1h30m, 1.5h, 2d); "
        "use --job-timeout DURATION"
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h30m", 5400.0),
        ("2m30s", 150.0),
        ("1.5h", 5400.0),
        ("90s", 90.0),
        ("500ms", 0.5),
        ("1h 30m", 5400.0),
    ],
)
def test_a_duration_in_gos_and_kubectls_form(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["1h30", "h", "-5s", "1x", "", "1.2.3s", "30 minutes"])
def test_a_duration_not_in_a_known_form_is_refused_naming_the_forms(text):
    with pytest.raises(OptionError) as exc:
        resolve({"capacity_timeout": text}, {})
    assert (
        f"invalid --capacity-timeout value {text!r} (from --capacity-timeout): expected a duration: "
        in str(exc.value)
    )
    assert "1h30m" in str(exc.value)


def test_every_option_reads_the_variable_of_its_flag_and_a_former_flags_after_it():
    assert not [s.flag for s in OPTIONS if s.env != env_name(s.flag)]
    retries = next(s for s in OPTIONS if s.flag == "--job-retries")
    assert (retries.env, retries.former_env) == ("ROLLCALL_JOB_RETRIES", "ROLLCALL_RETRIES")
    assert resolve({}, {"ROLLCALL_RETRIES": "2"}).recovery.retries == 2
    assert resolve({}, {"ROLLCALL_RETRIES": "2", "ROLLCALL_JOB_RETRIES": "1"}).recovery.retries == 1
    for variable in ("ROLLCALL_JOB_RETRIES", "ROLLCALL_RETRIES"):
        with pytest.raises(OptionError) as exc:
            resolve({}, {variable: "abc"})
        assert str(exc.value) == (
            f"invalid --job-retries value 'abc' (from {variable}): expected a whole number >= 0; "
            "use --job-retries N"
        )


@pytest.mark.parametrize(
    ("seconds", "shown"), [(1800.0, "30m"), (900.0, "15m"), (90.0, "90s"), (3600.0, "1h"), (0.5, "0.5s")]
)
def test_a_duration_is_shown_as_a_user_writes_it(seconds, shown):
    assert format_duration(seconds) == shown
    assert duration(shown) == seconds


def test_defaults_are_shown_as_a_user_types_them_never_as_python():
    shown = {s.flag: s.shown_default for s in OPTIONS}
    assert shown["--job-timeout"] == "30m" and shown["--capacity-timeout"] == "15m"
    assert shown["--artifacts-dir"] == "artifacts" and shown["--keep"] == "off"
    assert shown["--procs-per-node"] == shown["--hang-after"] == "auto"
    assert shown["--image"] == shown["--workload-env"] == shown["--fitness-warn"] == "none"
    for flag, text in shown.items():
        assert not re.search(r"None|\(\)|\{\}|frozenset|PosixPath|^\d+\.0$", text), f"{flag}: {text}"


def test_procs_per_node_auto_is_the_default():
    assert resolve({"procs_per_node": "auto"}, {}).job.procs_per_node is None
    assert resolve({"procs_per_node": "4"}, {}).job.procs_per_node == 4


def test_the_hang_bounds_are_auto_unless_given_and_then_passed_to_the_workload():
    from rollcall.jobspec import HangBounds, JobSpec

    assert resolve({}, {}).job.hang_bounds == HangBounds()
    assert JobSpec("j", 1, 1).workload_argv() == ["--device", "cpu"]  # auto: the workload's own
    o = resolve({"hang_after": "2m", "join_hang_after": "90"}, {"ROLLCALL_FIRST_STEP_HANG_AFTER": "auto"})
    assert o.job.hang_bounds == HangBounds(120.0, None, 90.0)
    spec = JobSpec("j", 1, 1, workload_args=("--epochs", "1"), hang_bounds=o.job.hang_bounds)
    assert spec.workload_argv() == [
        "--device",
        "cpu",
        "--hang-after=120",
        "--join-hang-after=90",
        "--epochs",
        "1",
    ]
    monitor = spec.node_command(monitor_dir="/m", node_rank="0", master_addr="h")
    assert monitor[monitor.index("--") - 1] == "--join-hang-after=90"  # the node's monitor waits in its steps


def test_a_bound_set_twice_to_two_values_names_both_and_one_value_twice_is_fine():
    with pytest.raises(OptionError) as exc:
        resolve({"hang_after": "1m"}, {"ROLLCALL_WORKLOAD_ARGS": "--epochs 1 --hang-after 30"})
    assert str(exc.value) == (
        "--hang-after 1m (from --hang-after) and --hang-after 30 in the workload's arguments (from "
        "ROLLCALL_WORKLOAD_ARGS: --epochs 1 --hang-after 30) set one bound twice; give it once: "
        "--hang-after DURATION, or leave it to the workload's arguments"
    )
    with pytest.raises(OptionError, match=r"--join-hang-after 2m .* --join-hang-after 60 in the workload"):
        resolve({"join_hang_after": "2m", "workload_args": "--join-hang-after=60"}, {})
    same = resolve({"hang_after": "1m", "workload_args": "--hang-after 60"}, {})
    assert same.job.hang_after == 60.0
    mine = resolve({"workload_args": "--hang-after 60"}, {})  # auto: the workload's arguments say it
    assert mine.job.hang_after is None and mine.job.workload_args == ("--hang-after", "60")


@pytest.mark.parametrize("value", ["0", "-5", "soon", "0s"])
def test_a_bad_hang_bound_names_the_option_and_the_forms(value):
    with pytest.raises(OptionError) as exc:
        resolve({}, {"ROLLCALL_HANG_AFTER": value})
    assert str(exc.value).startswith(f"invalid --hang-after value {value!r} (from ROLLCALL_HANG_AFTER): ")
    assert "expected auto or a duration above 0" in str(exc.value)
    assert str(exc.value).endswith("use --hang-after DURATION")


def test_options_are_sections_each_a_typed_dataclass_of_its_own_module():
    import dataclasses

    from rollcall.options import SECTIONS, Options

    assert [f.name for f in dataclasses.fields(Options)] == [g for g, _ in GROUPS] == list(SECTIONS)
    for group, section in SECTIONS.items():
        assert section.__module__ == f"rollcall.options.{group}", section
        assert dataclasses.is_dataclass(section) and section.__dataclass_params__.frozen
        hints = typing.get_type_hints(section)
        assert all(spec.name in hints for spec in section.specs())


def test_python_m_rollcall_options_prints_the_reference_docs_options_md_holds():
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run(
        [sys.executable, "-m", "rollcall.options", "--markdown"], capture_output=True, text=True, check=True
    )
    assert done.stdout == (Path(__file__).resolve().parents[2] / "docs" / "options.md").read_text()


@pytest.mark.parametrize(
    ("variable", "value"), [("ROLLCALL_JOB_RETRIES", "abc"), ("ROLLCALL_JOB_TIMEOUT", "1h30")]
)
def test_a_bad_variable_stops_the_session_as_its_flag_would(pytester, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    res = pytester.runpytest("-p", "no:cacheprovider", "--backend", "local")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: invalid --* value '{value}' (from {variable}): expected *; use --*"])
    assert "Traceback" not in res.stderr.str()
