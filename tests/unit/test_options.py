import re

import pytest

from rollcall.jobspec import CacheVolume, Scheduling, Toleration
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
        assert resolve({"image": image}, {}).image == image
    else:
        with pytest.raises(OptionError, match=r"invalid --image value .*: (not an image reference|an image)"):
            resolve({}, {"ROLLCALL_IMAGE": image})


def test_node_selectors_requests_and_limits():
    o = resolve(
        {"node_selector": ["karpenter.sh/nodepool=gpu", "topology.kubernetes.io/zone=us-west-2a"]},
        {"ROLLCALL_REQUESTS": "cpu=4, memory=16Gi", "ROLLCALL_LIMITS": "memory=32Gi"},
    )
    assert o.node_selector == {"karpenter.sh/nodepool": "gpu", "topology.kubernetes.io/zone": "us-west-2a"}
    assert o.requests == {"cpu": "4", "memory": "16Gi"} and o.limits == {"memory": "32Gi"}
    with pytest.raises(OptionError, match="a request may not exceed its limit"):
        resolve({"requests": "memory=2Gi", "limits": "memory=1Gi"}, {})
    with pytest.raises(OptionError, match="not a Kubernetes quantity"):
        resolve({"limits": "memory=lots"}, {})
    with pytest.raises(OptionError, match="--node-selector"):
        resolve({"node_selector": ["no-equals"]}, {})


def test_neuron_cache_is_a_node_directory_or_an_nfs_export():
    o = resolve({"neuron_cache": "nfs:fs-0123.efs.us-east-1.amazonaws.com:/neuron/"}, {})
    assert o.neuron_cache == CacheVolume("nfs", "/neuron", "fs-0123.efs.us-east-1.amazonaws.com")
    o = resolve({}, {"ROLLCALL_NEURON_CACHE": "host:/var/tmp/neuron-compile-cache"})
    assert o.neuron_cache == CacheVolume("host", "/var/tmp/neuron-compile-cache")
    assert str(o.neuron_cache) == "host:/var/tmp/neuron-compile-cache"
    assert resolve({}, {}).neuron_cache is None


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
    assert o.compile_cache == CacheVolume("nfs", "/compile", "fs-0123.efs.us-east-1.amazonaws.com")
    o = resolve({}, {"ROLLCALL_COMPILE_CACHE": "host:/var/tmp/compile"})
    assert o.compile_cache == CacheVolume("host", "/var/tmp/compile")
    # a plain directory is a directory of each node (local, slurm)
    assert resolve({"compile_cache": "/srv/cache/"}, {}).compile_cache == CacheVolume("host", "/srv/cache")
    assert resolve({}, {}).compile_cache is None


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
    assert o.toleration == (
        Toleration("dedicated", "NoSchedule", "ml"),
        Toleration("spot", "NoExecute"),
    ), "a repeated toleration counts once"
    assert [t.manifest() for t in o.toleration] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ]
    env = {"ROLLCALL_TOLERATION": "nvidia.com/gpu=present:PreferNoSchedule example.com/empty=:NoSchedule"}
    assert [str(t) for t in resolve({}, env).toleration] == [
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
    assert o.scheduling == Scheduling(
        tolerations=(Toleration("spot", "NoSchedule"),),
        priority_class="training-high",
        queue="team-ml",
        image_pull_secrets=("regcred", "ecr.creds"),
        service_account="trainer",
    )
    assert o.namespace == "ml-team"
    assert resolve({}, {}).scheduling == Scheduling()


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
    assert resolve({"service_account": "default"}, {}).service_account == "default"
