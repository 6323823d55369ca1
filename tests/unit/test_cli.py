import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from rollcall.cli import main
from tests.unit.helpers import node_log


@pytest.fixture
def logs(tmp_path):
    a, b = tmp_path / "pod-0.log", tmp_path / "pod-1.log"
    a.write_text(node_log(0, 2, 2))
    b.write_text(node_log(1, 2, 2, skip={3: ("complete",)}, tp={2: 20.0}))
    return a, b


def test_exit_0_when_every_rank_reported(logs, capsys):
    assert main(["check-logs", "--world-size", "2", str(logs[0])]) == 0
    out = capsys.readouterr().out
    assert "throughput  2/2 ranks" in out


def test_exit_1_and_json_shape_when_a_rank_is_missing(logs, capsys):
    assert main(["check-logs", "--world-size", "4", "--json", *map(str, logs)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["world_size"] == 4
    assert doc["missing"] == {"throughput": [], "epoch_time": [], "complete": [3]}
    assert doc["unexpected_ranks"] == []
    assert doc["ranks"]["2"] == {"throughput": 20.0, "epoch_time": pytest.approx(0.45), "complete": True}
    assert doc["ranks"]["3"]["complete"] is False
    assert doc["throughput_total"] == 170.0


def test_the_gpu_events_in_the_logs_are_listed_classified_without_changing_the_exit_code(
    logs, capsys, tmp_path
):
    """An Xid is a fault nothing here produces: the line the node's monitor writes for one is added to a log."""
    from rollcall_workload.contract import encode_event

    line = encode_event("gpu_event", -1, -1, kind="xid", gpu=0, uuid="GPU-x", node="n0", xid=79, time=5.0)
    logs[0].write_bytes(logs[0].read_bytes() + line)
    assert main(["check-logs", "--world-size", "2", str(logs[0])]) == 0
    out = capsys.readouterr().out
    assert "gpu event   Xid 79 (GPU has fallen off the bus, hardware) on node 0 (n0) GPU 0, UUID GPU-x" in out
    assert main(["check-logs", "--world-size", "2", "--json", str(logs[0])]) == 0
    [seen] = json.loads(capsys.readouterr().out)["gpu_events"]
    assert (seen["xid"], seen["class"], seen["rank"], seen["rule"]) == (
        79,
        "hardware",
        None,
        "hardware_event",
    )


def test_unexpected_ranks_are_listed_without_changing_the_exit_code(logs, capsys):
    assert main(["check-logs", "--world-size", "2", "--json", str(logs[0]), str(logs[1])]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unexpected_ranks"] == [2, 3]
    assert doc["throughput_total"] == 100.0


@pytest.mark.parametrize("args", [["--world-size", "0"], ["--world-size", "x"], []])
def test_usage_errors_exit_2(logs, args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check-logs", *args, str(logs[0])])
    assert exc.value.code == 2
    assert "world-size" in capsys.readouterr().err


def test_unreadable_file_exits_2(tmp_path, capsys):
    assert main(["check-logs", "--world-size", "1", str(tmp_path / "nope.log")]) == 2
    assert "nope.log" in capsys.readouterr().err


def test_legacy_format(tmp_path, capsys):
    f = tmp_path / "legacy.log"
    f.write_text(
        "[Rank 0] - local_samples=78.1, total_time=2.00s, local_throughput=50.00 samples/s, "
        "local_avg_epoch_time=0.40s\n[Rank 0] training complete. Exiting main().\n"
    )
    assert main(["check-logs", "--world-size", "1", "--format", "neuron-legacy", "--json", str(f)]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"]["0"]["throughput"] == 50.0


def test_console_script_is_installed(logs):
    exe = [sys.executable, "-m", "rollcall.cli"]
    proc = subprocess.run(
        [*exe, "check-logs", "--world-size", "4", *map(str, logs)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "complete    3/4 ranks; missing on ranks 3" in proc.stdout


SCHEDULING_ARGS = [
    *("--toleration", "dedicated=ml:NoSchedule", "--toleration", "spot:NoExecute"),
    *("--priority-class", "training-high", "--queue", "team-ml", "--image-pull-secret", "regcred"),
    *("--service-account", "trainer", "--node-selector", "karpenter.sh/nodepool=trn1"),
]
LAYOUT = ["--accelerator", "neuron", "--procs-per-node", "32", "--instance-type", "trn1.32xlarge"]


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """Any attempt to reach a cluster fails the test."""
    from rollcall.backends.kubernetes import backend, kube

    def refuse(*args, **kwargs):
        raise AssertionError("render contacted a cluster")

    # every module that took connect by name, imported before the patch so none binds the refusal for good
    for module in (kube, backend):
        monkeypatch.setattr(module, "connect", refuse)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


def render_docs(capsys, args):
    assert main(["render", *args]) == 0, capsys.readouterr().err
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_render_prints_the_runs_objects_with_every_scheduling_option(no_cluster, capsys):
    args = [*LAYOUT, "--image", "registry.example/bert:1", "--nodes", "4", "--name", "bert"]
    docs = render_docs(capsys, [*args, *SCHEDULING_ARGS, "--namespace", "ml-team"])
    assert [d["kind"] for d in docs] == ["Service", "Job"], "no Namespace: --namespace exists already"
    job = docs[1]
    assert job["metadata"] == {**job["metadata"], "name": "bert", "namespace": "ml-team"}
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml"
    assert job["spec"]["suspend"] is True and job["spec"]["completions"] == 4
    pod = job["spec"]["template"]["spec"]
    assert {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert {"key": "spot", "operator": "Exists", "effect": "NoExecute"} in pod["tolerations"]
    assert pod["priorityClassName"] == "training-high"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "trainer"
    assert pod["nodeSelector"] == {
        "karpenter.sh/nodepool": "trn1",
        "node.kubernetes.io/instance-type": "trn1.32xlarge",
    }
    resources = pod["containers"][0]["resources"]
    assert resources["limits"] == {"aws.amazon.com/neuroncore": "32"}


def test_render_reads_the_options_environment_and_gives_each_run_its_namespace(
    no_cluster, capsys, monkeypatch
):
    monkeypatch.setenv("ROLLCALL_IMAGE", "registry.example/bert:1")
    monkeypatch.setenv("ROLLCALL_TOLERATION", "dedicated=ml:NoSchedule")
    monkeypatch.setenv("ROLLCALL_NAMESPACE_PREFIX", "nightly")
    ns, service, job = render_docs(capsys, ["--accelerator", "cpu"])
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"].startswith("nightly-")
    assert service["metadata"]["namespace"] == job["metadata"]["namespace"] == ns["metadata"]["name"]
    pod = job["spec"]["template"]["spec"]
    assert pod["tolerations"][-1] == {
        "key": "dedicated",
        "operator": "Equal",
        "value": "ml",
        "effect": "NoSchedule",
    }
    assert pod["containers"][0]["resources"] == {} and "suspend" not in job["spec"]


@pytest.mark.parametrize("backend", ["kubernetes", "slurm"])
def test_render_builds_its_job_with_the_suites_own_job_spec(no_cluster, capsys, monkeypatch, backend):
    from rollcall import suite

    built = []

    def recording(options, placement, name):
        built.append((options.job.backend, placement.accelerator, placement.procs_per_node, name))
        return job_spec(options, placement, name)

    job_spec = suite.job_spec
    monkeypatch.setattr(suite, "job_spec", recording)
    args = ["--backend", backend, "--accelerator", "cpu", "--name", "probe", "--image", "r/x:1"]
    assert main(["render", *args, "--workload-env", "PROBE=1"]) == 0, capsys.readouterr().err
    assert built == [(backend, "cpu", 1, "probe")]
    assert "PROBE" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("accelerator", "limits"),
    [("nvidia", {"nvidia.com/gpu": "8"}), ("neuron", {"aws.amazon.com/neuroncore": "8"}), ("cpu", {})],
)
def test_render_requests_the_accelerators_resource_per_rank(no_cluster, capsys, accelerator, limits):
    args = ["--accelerator", accelerator, "--procs-per-node", "8", "--image", "r/x:1"]
    *_, job = render_docs(capsys, args)
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources.get("limits", {}) == limits


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([*LAYOUT], "the kubernetes backend needs --image"),
        ([*LAYOUT, "--image", "r/x:1", "--toleration", "gpu"], "invalid --toleration value 'gpu'"),
        ([*LAYOUT, "--image", "r/x:1", "--namespace", "Team"], "invalid --namespace value 'Team'"),
        ([*LAYOUT, "--image", "r/x:1", "--service-account", "sa"], "pass --namespace NAME"),
        ([*LAYOUT, "--image", "r/x:1", "--efa", "on"], "--efa on: the nodes' EFA devices are counted"),
        (["--backend", "local"], "submits nothing to render"),
    ],
)
def test_render_refuses_bad_values_with_exit_4(no_cluster, capsys, args, said):
    assert main(["render", *args]) == 4
    assert said in capsys.readouterr().err


def test_render_without_the_layout_discovers_it_on_the_cluster(capsys, monkeypatch):
    from rollcall.backends.kubernetes import backend, kube

    node = {
        "metadata": {"name": "trn1-0", "labels": {"node.kubernetes.io/instance-type": "trn1.32xlarge"}},
        "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"aws.amazon.com/neuroncore": "32", "vpc.amazonaws.com/efa": "8"},
        },
    }

    class Core:
        def list_node(self, **kwargs):
            return SimpleNamespace(data=json.dumps({"items": [node]}).encode())

        def read_namespaced_config_map(self, *args, **kwargs):
            raise ApiException(status=404, reason="Not Found")

    class Custom:  # no Karpenter: its NodePools are not a resource here
        def list_cluster_custom_object(self, *args, **kwargs):
            raise ApiException(status=404, reason="Not Found")

    fake = SimpleNamespace(core=Core(), custom=Custom(), source="fake", close=lambda: None)
    for module in (kube, backend):  # each that took connect by name
        monkeypatch.setattr(module, "connect", lambda kubeconfig, context: fake)
    args = ["--nodes", "1", "--image", "r/x:1"]
    assert main(["render", *args]) == 4
    assert "tainted dedicated=ml:NoSchedule (not tolerated)" in capsys.readouterr().err
    *_, job = render_docs(capsys, [*args, "--toleration", "dedicated=ml:NoSchedule"])
    resources = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"aws.amazon.com/neuroncore": "32", "vpc.amazonaws.com/efa": "8"}


def test_version_says_the_suite_the_workload_and_the_contract_and_exits_0(capsys):
    import rollcall
    from rollcall_workload.contract import CONTRACT_VERSION, WORKLOAD_VERSION

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == (
        f"rollcall {rollcall.__version__} (workload {WORKLOAD_VERSION}, rank-log contract {CONTRACT_VERSION})\n"
    )
