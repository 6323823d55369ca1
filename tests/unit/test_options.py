import pytest

from rollcall.options import OptionError, env_name, resolve
from rollcall.suite import choose_backend


def test_defaults():
    o = resolve({}, {})
    assert (o.nodes, o.procs_per_node, o.backend, o.retries, o.keep) == (2, None, "auto", 0, False)
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
    assert (o.nodes, o.job_timeout, o.keep) == (4, 60.0, True)
    assert o.workload_env == {"A": "1", "B": "x y"}
    assert o.workload_args == ("--model", "base", "--seq-len", "512")
    assert o.sources["nodes"] == "ROLLCALL_NODES"
    o = resolve({"nodes": "8", "workload_env": ["C=3"]}, env)
    assert o.nodes == 8 and o.workload_env == {"C": "3"}
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
