"""Rendering manifests/ from a JobSpec, and validating objects against the Kubernetes schema offline."""

import copy
import dataclasses

import pytest
import yaml
from kubernetes import client

from rollcall.backends import DiscoveryError
from rollcall.backends.kubernetes.api import JOBSET_API_VERSION
from rollcall.backends.kubernetes.discovery import discover
from rollcall.backends.kubernetes.manifests import (
    CONTAINER,
    ManifestError,
    Names,
    PodExtras,
    job_tolerations,
    render,
    validate,
)
from rollcall.jobspec import MANIFESTS_DIR, CacheVolume, JobSpec, Scheduling, Toleration

SPEC = JobSpec(
    name="bert-abc123",
    nodes=4,
    procs_per_node=32,
    accelerator="neuron",
    image="registry.example/rollcall-bert:1",
    resources={"aws.amazon.com/neuroncore": 32, "vpc.amazonaws.com/efa": 8},
    instance_type="trn1.32xlarge",
    job_timeout_s=900.5,
    env={"EXTRA": "1"},
)
NAMES = Names(namespace="rollcall-0a1b2c3d", job="bert-abc123", service="bert-abc123", run_id="0a1b2c3d")


def pod_of(rendered):
    return rendered.job["spec"]["template"]["spec"]


def test_the_job_is_indexed_one_pod_per_node_and_bounded():
    r = render(SPEC, NAMES)
    spec = r.job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 901
    pod = pod_of(r)
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == "bert-abc123"
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == {"rollcall/job": "bert-abc123"}
    assert r.job["spec"]["template"]["metadata"]["labels"]["rollcall/job"] == "bert-abc123"
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert r.job["metadata"]["namespace"] == NAMES.namespace


def test_the_nodes_monitor_is_a_native_sidecar_of_the_same_image_sharing_the_ranks_processes_and_files():
    r = render(SPEC, NAMES)
    pod = pod_of(r)
    (sidecar,) = pod["initContainers"]
    assert sidecar["name"] == "monitor" and sidecar["restartPolicy"] == "Always"  # started first, ended last
    assert sidecar["image"] == SPEC.image
    assert sidecar["command"] == [
        "python3",
        "-m",
        "rollcall_workload.node.monitor",
        "--dir",
        "/rollcall-monitor/node",  # made private inside the emptyDir, which anyone in the pod may write
        "--node-rank=$(JOB_COMPLETION_INDEX)",  # it watches its pod's launcher, in steps of the join bound
        "--join-hang-after=60",
    ]
    assert sidecar["workingDir"] == "/workspace"  # where the images keep the workload's package
    assert pod["shareProcessNamespace"] is True  # it reads the ranks' and the launcher's process states
    assert {"name": "monitor", "emptyDir": {}} in pod["volumes"]
    train = pod["containers"][0]
    for c in (sidecar, train):
        assert {"name": "monitor", "mountPath": "/rollcall-monitor"} in c["volumeMounts"]
    env = {e["name"]: e.get("value") for e in train["env"]}
    assert env["ROLLCALL_MONITOR_DIR"] == "/rollcall-monitor/node"
    resources = sidecar["resources"]
    assert resources["requests"] == resources["limits"]  # a Guaranteed training container stays Guaranteed
    # the Job's failure policy still acts on the training container's exit codes only
    (on_exit,) = [rule for rule in r.job["spec"]["podFailurePolicy"]["rules"] if "onExitCodes" in rule]
    assert on_exit["onExitCodes"]["containerName"] == "train"


def test_an_nvidia_pods_monitor_hears_the_nodes_gpus_without_holding_one():
    assert "env" not in pod_of(render(SPEC, NAMES))["initContainers"][0]  # a Neuron pod: NVML has nothing
    nvidia = dataclasses.replace(
        SPEC, accelerator="nvidia", resources={"nvidia.com/gpu": 8}, instance_type="p5.48xlarge"
    )
    (sidecar,) = pod_of(render(nvidia, NAMES))["initContainers"]
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    assert "resources" in sidecar and "nvidia.com/gpu" not in sidecar["resources"]["limits"]  # it holds none


def test_the_container_runs_the_one_torchrun_command_with_static_rendezvous():
    r = render(SPEC, NAMES)
    c = pod_of(r)["containers"][0]
    assert c["image"] == SPEC.image
    wrapper = ["python3", "-m", "rollcall_workload.node.launch", "--node-rank=$(JOB_COMPLETION_INDEX)", "--"]
    assert c["command"][:5] == wrapper  # the launch faults, then exec torchrun
    assert c["command"][5:] == SPEC.torchrun_command(
        node_rank="$(JOB_COMPLETION_INDEX)", master_addr="bert-abc123-0.bert-abc123"
    )
    assert "--node-rank=$(JOB_COMPLETION_INDEX)" in c["command"]
    assert "--master-port=29500" in c["command"]
    assert "--rdzv-conf=timeout=300" in c["command"]
    assert (
        c["resources"]["requests"]
        == c["resources"]["limits"]
        == {
            "aws.amazon.com/neuroncore": "32",
            "vpc.amazonaws.com/efa": "8",
        }
    )
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["EXTRA"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert r.efa


def test_on_kubernetes_torchrun_s_rendezvous_outwaits_a_pod_on_its_way():
    """The pods start apart (capacity arriving, a cold image pull), each held by the backend's bounds: the
    pods already up wait at the rendezvous for the job's timeout and the capacity wait, not S + 2 J + 60 s
    (300 s at the defaults); a timeout given on the spec is kept, and never lowered."""
    spec = dataclasses.replace(SPEC, job_timeout_s=1800.0)
    assert spec.rendezvous_timeout_s == 300
    assert spec.outwaiting(0.0).rendezvous_timeout_s == 1800
    assert spec.outwaiting(600.0).rendezvous_timeout_s == 2400
    c = pod_of(render(spec.outwaiting(600.0), NAMES))["containers"][0]
    assert "--rdzv-conf=timeout=2400" in c["command"]
    assert dataclasses.replace(SPEC, job_timeout_s=60.0).outwaiting(0.0).rendezvous_timeout_s == 300
    assert dataclasses.replace(spec, rdzv_timeout_s=90).outwaiting(600.0).rendezvous_timeout_s == 90


def test_efa_off_sets_no_nccl_debug_and_the_user_wins():
    spec = JobSpec(
        name="j",
        nodes=2,
        procs_per_node=1,
        accelerator="nvidia",
        image="i",
        resources={"nvidia.com/gpu": 1},
        env={"NCCL_DEBUG": "WARN"},
    )
    r = render(spec, Names("ns-x", "j", "j", "x"))
    env = {e["name"]: e.get("value") for e in pod_of(r)["containers"][0]["env"]}
    assert env["NCCL_DEBUG"] == "WARN" and "FI_EFA_FORK_SAFE" not in env
    assert not r.efa
    assert "nodeSelector" not in pod_of(r)


def test_the_service_is_headless_and_publishes_not_ready_addresses():
    svc = render(SPEC, NAMES).service
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"rollcall/job": "bert-abc123"}
    assert svc["metadata"]["name"] == NAMES.service


def test_the_namespace_is_labelled_as_the_suites_with_the_run_id():
    ns = render(SPEC, NAMES).namespace
    assert ns["metadata"]["name"] == "rollcall-0a1b2c3d"
    assert ns["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "rollcall"
    assert ns["metadata"]["labels"]["rollcall/run-id"] == "0a1b2c3d"


def test_user_text_stays_data():
    spec = JobSpec(
        name="j", nodes=1, procs_per_node=1, image='x"\n  hostNetwork: true', workload_args=("--x", "{{y}}")
    )
    r = render(spec, Names("ns-x", "j", "j", "x"))
    assert "hostNetwork" not in pod_of(r)
    assert pod_of(r)["containers"][0]["image"] == 'x"\n  hostNetwork: true'
    assert pod_of(r)["containers"][0]["command"][-2:] == ["--x", "{{y}}"]


def test_extras_reach_the_pods_but_never_replace_the_suites_labels():
    extras = PodExtras(labels={"rollcall/job": "other", "team": "ml"}, annotations={"a": "b"})
    meta = render(SPEC, NAMES, extras=extras).job["spec"]["template"]["metadata"]
    assert meta["labels"]["rollcall/job"] == "bert-abc123" and meta["labels"]["team"] == "ml"
    assert meta["annotations"] == {"karpenter.sh/do-not-disrupt": "true", "a": "b"}


def test_names_are_unique_per_run():
    names = {Names.new("rollcall", "j").namespace for _ in range(200)}
    assert len(names) == 200 and all(n.startswith("rollcall-") for n in names)


def test_render_refuses_a_missing_image_and_bad_names():
    with pytest.raises(ManifestError, match="--image"):
        render(JobSpec(name="j", nodes=1, procs_per_node=1), NAMES)
    with pytest.raises(ManifestError, match="not a DNS label"):
        render(SPEC, Names("Bad_NS", "j", "j", "x"))


def test_every_shipped_manifest_matches_the_schema():
    """The JobSet's schema is its CRD's, not the client's: the server's strict dry run checks it
    (tests/k8s/test_render.py, in a session of JobSets)."""
    kinds = {"Namespace": client.V1Namespace, "Service": client.V1Service, "Job": client.V1Job}
    shipped = set()
    for path in sorted(MANIFESTS_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        shipped.add(doc["kind"])
        if doc["kind"] == "JobSet":
            assert doc["apiVersion"] == JOBSET_API_VERSION, path
            continue
        assert validate(doc, kinds[doc["kind"]]) == [], path
    assert shipped == {*kinds, "JobSet"}


def test_validate_names_unknown_fields_wrong_types_and_missing_required():
    job = copy.deepcopy(render(SPEC, NAMES).job)
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["imagePullPolcy"] = "Always"
    pod["restartPolicy"] = 3
    pod["tolerations"][0]["tolerationSeconds"] = "60"
    pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    pod["hostNetwork"] = "yes"
    job["spec"]["completions"] = True
    del pod["volumes"][0]["name"]
    pod["containers"].append({"image": "x"})
    problems = validate(job, client.V1Job)
    assert sorted(problems) == [
        "spec.completions: expected int, got a boolean",
        "spec.template.spec.containers[0].imagePullPolcy: unknown field of V1Container",
        "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu: expected str, got int",
        "spec.template.spec.containers[1]: missing required field name",
        "spec.template.spec.hostNetwork: expected bool, got str",
        "spec.template.spec.restartPolicy: expected str, got int",
        "spec.template.spec.tolerations[0].tolerationSeconds: expected int, got str",
        "spec.template.spec.volumes[0]: missing required field name",
    ]


def test_snake_case_names_are_unknown_fields():
    assert validate({"api_version": "v1", "kind": "Namespace"}, client.V1Namespace) == [
        "api_version: unknown field of V1Namespace"
    ]


def test_render_refuses_a_manifest_that_departs_from_the_schema(monkeypatch):
    from rollcall.backends.kubernetes import manifests

    real = manifests.load

    def typo(name):
        doc = real(name)
        if name == "job.yaml":
            doc["spec"]["template"]["spec"]["containers"][0]["volumMounts"] = []
        return doc

    monkeypatch.setattr(manifests, "load", typo)
    with pytest.raises(ManifestError) as err:
        render(SPEC, NAMES)
    assert str(err.value) == (
        "Job bert-abc123 does not match the Kubernetes schema:\n"
        "  spec.template.spec.containers[0].volumMounts: unknown field of V1Container"
    )


def test_the_manifests_directory_can_be_moved(tmp_path, monkeypatch):
    import shutil

    for name in ("job.yaml", "service.yaml", "namespace.yaml"):
        shutil.copy(MANIFESTS_DIR / name, tmp_path / name)
    doc = yaml.safe_load((tmp_path / "job.yaml").read_text())
    doc["spec"]["backoffLimit"] = 0
    doc["metadata"]["labels"]["copied"] = "yes"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("ROLLCALL_MANIFESTS_DIR", str(tmp_path))
    assert render(SPEC, NAMES).job["metadata"]["labels"]["copied"] == "yes"
    monkeypatch.setenv("ROLLCALL_MANIFESTS_DIR", str(tmp_path / "missing"))
    with pytest.raises(ManifestError, match=r"ROLLCALL_MANIFESTS_DIR .*set it to a copy"):
        render(SPEC, NAMES)


def test_node_selectors_requests_and_limits_reach_the_pod():
    spec = dataclasses.replace(
        SPEC,
        node_selector={"karpenter.sh/nodepool": "trn1"},
        requests={"cpu": "4", "memory": "16Gi"},
        limits={"memory": "32Gi"},
    )
    pod = pod_of(render(spec, NAMES))
    assert pod["nodeSelector"] == {
        "karpenter.sh/nodepool": "trn1",
        "node.kubernetes.io/instance-type": "trn1.32xlarge",
    }
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == {
        "cpu": "4",
        "memory": "16Gi",
        "aws.amazon.com/neuroncore": "32",
        "vpc.amazonaws.com/efa": "8",
    }
    assert resources["limits"] == {
        "memory": "32Gi",
        "aws.amazon.com/neuroncore": "32",
        "vpc.amazonaws.com/efa": "8",
    }


def test_a_cpu_job_without_requests_is_best_effort():
    spec = dataclasses.replace(SPEC, accelerator="cpu", resources={}, instance_type=None)
    pod = pod_of(render(spec, NAMES))
    assert pod["containers"][0]["resources"] == {} and "nodeSelector" not in pod


def env_of(rendered):
    return {e["name"]: e.get("value") for e in pod_of(rendered)["containers"][0]["env"]}


P5_SPEC = JobSpec(
    name="j",
    nodes=2,
    procs_per_node=8,
    accelerator="nvidia",
    image="i",
    resources={"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
    instance_type="p5.48xlarge",
)


def test_efa_selects_the_efa_provider_and_rdma_where_the_type_has_it():
    env = env_of(render(P5_SPEC, NAMES))
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert "CCOM_SOCKET_IFNAME" not in env
    unknown = dataclasses.replace(P5_SPEC, instance_type="x9.big")
    env = env_of(render(unknown, NAMES))
    assert env["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in env
    mine = dataclasses.replace(P5_SPEC, env={"FI_PROVIDER": "efa;ofi_rxd", "FI_EFA_USE_DEVICE_RDMA": "0"})
    env = env_of(render(mine, NAMES))
    assert (env["FI_PROVIDER"], env["FI_EFA_USE_DEVICE_RDMA"]) == ("efa;ofi_rxd", "0")


def test_neuron_pods_bootstrap_collectives_over_their_own_interface_unless_told_otherwise():
    assert env_of(render(SPEC, NAMES))["CCOM_SOCKET_IFNAME"] == "eth0"
    mine = dataclasses.replace(SPEC, env={"CCOM_SOCKET_IFNAME": "ens5"})
    assert env_of(render(mine, NAMES))["CCOM_SOCKET_IFNAME"] == "ens5"
    assert env_of(render(SPEC, NAMES))["FI_EFA_USE_DEVICE_RDMA"] == "1"  # trn1.32xlarge


@pytest.mark.parametrize(
    ("cache", "volume"),
    [
        (
            CacheVolume("host", "/var/tmp/neuron"),
            {"hostPath": {"path": "/var/tmp/neuron", "type": "DirectoryOrCreate"}},
        ),
        (
            CacheVolume("nfs", "/neuron", "fs-1.efs.us-east-1.amazonaws.com"),
            {"nfs": {"server": "fs-1.efs.us-east-1.amazonaws.com", "path": "/neuron"}},
        ),
    ],
)
def test_the_neuron_cache_volume_is_mounted_and_named_to_the_compiler(cache, volume):
    r = render(dataclasses.replace(SPEC, neuron_cache=cache), NAMES)  # validated offline by render
    pod = pod_of(r)
    assert {"name": "neuron-cache", **volume} in pod["volumes"]
    mount = {"name": "neuron-cache", "mountPath": "/var/cache/neuron-compile-cache"}
    assert mount in pod["containers"][0]["volumeMounts"]
    assert env_of(r)["NEURON_COMPILE_CACHE_URL"] == "/var/cache/neuron-compile-cache"
    no_cache = pod_of(render(SPEC, NAMES))
    assert [v["name"] for v in no_cache["volumes"]] == ["dshm", "monitor"]
    assert "NEURON_COMPILE_CACHE_URL" not in env_of(render(SPEC, NAMES))


@pytest.mark.parametrize(
    ("cache", "volume"),
    [
        (
            CacheVolume("host", "/var/cache/inductor"),
            {"hostPath": {"path": "/var/cache/inductor", "type": "DirectoryOrCreate"}},
        ),
        (
            CacheVolume("nfs", "/compile", "fs-2.efs.us-east-1.amazonaws.com"),
            {"nfs": {"server": "fs-2.efs.us-east-1.amazonaws.com", "path": "/compile"}},
        ),
    ],
)
def test_the_compile_cache_volume_is_mounted_and_given_to_the_workload(cache, volume):
    r = render(dataclasses.replace(SPEC, compile_cache=cache, neuron_cache=None), NAMES)  # validated offline
    pod = pod_of(r)
    assert {"name": "compile-cache", **volume} in pod["volumes"]
    mount = {"name": "compile-cache", "mountPath": "/var/cache/rollcall-compile-cache"}
    assert mount in pod["containers"][0]["volumeMounts"]
    command = pod["containers"][0]["command"]
    # the mount's path, never the node's or the export's own, after the device and before the user's own
    at = command.index("--compile-cache")
    assert command[at + 1] == "/var/cache/rollcall-compile-cache"
    assert command[at - 2 : at] == ["--device", "xla"] and command[at + 2 :] == list(SPEC.workload_args)
    assert "--compile-cache" not in pod_of(render(SPEC, NAMES))["containers"][0]["command"]


def test_both_cache_volumes_mount_side_by_side():
    both = dataclasses.replace(
        SPEC, neuron_cache=CacheVolume("host", "/var/tmp/neuron"), compile_cache=CacheVolume("host", "/c")
    )
    pod = pod_of(render(both, NAMES))
    assert [v["name"] for v in pod["volumes"]] == ["dshm", "monitor", "neuron-cache", "compile-cache"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["neuron-cache"] != mounts["compile-cache"]


def test_a_backend_without_pods_gives_the_workload_the_directory_itself():
    spec = dataclasses.replace(SPEC, compile_cache=CacheVolume("host", "/srv/compile"))
    argv = spec.workload_argv()
    assert argv[argv.index("--compile-cache") + 1] == "/srv/compile"


def test_the_job_tolerates_every_accelerator_and_efa_taint():
    keys = {t["key"] for t in pod_of(render(SPEC, NAMES))["tolerations"]}
    assert keys >= {
        "nvidia.com/gpu",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "aws.amazon.com/neurondevice",
        "vpc.amazonaws.com/efa",
        "aws.amazon.com/efa",
    }


#: The accelerators' and EFA's taints, tolerated by every run (manifests/job.yaml), spelled out.
MANIFEST_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists"},
    {"key": "aws.amazon.com/neuron", "operator": "Exists"},
    {"key": "aws.amazon.com/neuroncore", "operator": "Exists"},
    {"key": "aws.amazon.com/neurondevice", "operator": "Exists"},
    {"key": "vpc.amazonaws.com/efa", "operator": "Exists"},
    {"key": "aws.amazon.com/efa", "operator": "Exists"},
]

SCHEDULING = Scheduling(
    tolerations=(Toleration("dedicated", "NoSchedule", "ml"), Toleration("spot", "NoExecute")),
    priority_class="training-high",
    queue="team-ml",
    image_pull_secrets=("regcred", "ecr"),
    service_account="trainer",
)


def test_the_scheduling_a_user_shapes_reaches_the_job_and_its_pods():
    rendered = render(dataclasses.replace(SPEC, scheduling=SCHEDULING), NAMES)
    job, pod = rendered.job, pod_of(rendered)
    assert pod["tolerations"][-2:] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ]
    assert pod["tolerations"][:-2] == MANIFEST_TOLERATIONS, "the accelerators' tolerations stay"
    assert pod["priorityClassName"] == "training-high"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "ecr"}]
    assert pod["serviceAccountName"] == "trainer"
    assert pod["automountServiceAccountToken"] is False, "the workload never calls the API"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml"
    assert job["spec"]["suspend"] is True, "Kueue admits a Job created suspended"


def test_a_jobset_carries_the_queue_and_suspend_itself_and_its_job_the_rest():
    names = Names.new("rollcall", "bert-abc123", kind="jobset")
    rendered = render(dataclasses.replace(SPEC, scheduling=SCHEDULING), names)
    jobset, job = rendered.jobset, rendered.job
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml"
    assert jobset["spec"]["suspend"] is True, "Kueue admits the JobSet whole"
    assert "suspend" not in job["spec"] and "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    template = jobset["spec"]["replicatedJobs"][0]["template"]
    assert template["metadata"]["labels"] == job["metadata"]["labels"]
    assert template["metadata"]["labels"]["rollcall/run-id"] == names.run_id  # the sweep finds its Job
    assert jobset["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "bert-abc123",
        "publishNotReadyAddresses": True,
    }
    assert jobset["spec"]["failurePolicy"] == {"maxRestarts": 0}, "one failed pod fails the JobSet at once"
    assert pod_of(rendered)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        0
    ]["labelSelector"]["matchLabels"] == {"rollcall/job": "bert-abc123-node-0"}
    assert validate(job, client.V1Job) == []


def test_without_scheduling_options_the_pods_are_as_the_manifest_says():
    rendered = render(SPEC, NAMES)
    pod = pod_of(rendered)
    assert pod["tolerations"] == MANIFEST_TOLERATIONS
    assert not {"priorityClassName", "imagePullSecrets", "serviceAccountName"} & pod.keys()
    assert "suspend" not in rendered.job["spec"]
    assert "kueue.x-k8s.io/queue-name" not in rendered.job["metadata"]["labels"]


def test_efa_and_accelerator_taints_are_tolerated_and_the_users_are_added_once():
    keys = {t["key"] for t in job_tolerations()}
    assert {"aws.amazon.com/efa", "vpc.amazonaws.com/efa", "nvidia.com/gpu", "aws.amazon.com/neuron"} <= keys
    spot = Toleration("spot", "NoSchedule")
    assert job_tolerations((spot, spot)) == [*job_tolerations(), spot.manifest()]


def test_user_tolerations_make_tainted_nodes_usable_in_discovery():
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    nodes = [
        {
            "metadata": {"name": name, "labels": {}},
            "spec": {"taints": [taint]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "8"}},
        }
        for name in ("a", "b")
    ]
    with pytest.raises(DiscoveryError, match="tainted dedicated=ml:NoSchedule"):
        discover(nodes, nodes=2, accelerator="cpu", tolerations=job_tolerations())
    tolerated = job_tolerations((Toleration("dedicated", "NoSchedule", "ml"),))
    assert discover(nodes, nodes=2, accelerator="cpu", tolerations=tolerated).usable == ["a", "b"]


def test_in_an_existing_namespace_no_namespace_is_rendered_and_the_run_keeps_its_labels():
    names = Names.new("rollcall", "bert-abc123", namespace="ml-team")
    assert not names.own_namespace and names.namespace == "ml-team"
    assert names.selector == f"rollcall/run-id={names.run_id}"
    rendered = render(SPEC, names)
    assert rendered.namespace is None
    assert [o["kind"] for o in rendered.objects()] == ["Service", "Job"]
    for obj in rendered.objects():
        assert obj["metadata"]["namespace"] == "ml-team"
        assert obj["metadata"]["labels"]["rollcall/run-id"] == names.run_id
    assert pod_of(rendered)["subdomain"] == "bert-abc123"
    own = Names.new("rollcall", "bert-abc123")
    assert own.own_namespace and own.namespace == f"rollcall-{own.run_id}"
    assert [o["kind"] for o in render(SPEC, own).objects()] == ["Namespace", "Service", "Job"]


def test_the_jobs_pod_failure_policy_fails_it_on_a_disruption_and_on_a_failed_rank():
    from rollcall.backends.kubernetes.pod_state import DISRUPTION_TARGET

    job = render(JobSpec("bert", 2, 8, image="registry.example/bert:1"), Names.new("rollcall", "bert")).job
    disruption, rank = job["spec"]["podFailurePolicy"]["rules"]
    assert disruption == {
        "action": "FailJob",
        "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}],
    }
    assert rank["action"] == "FailJob"
    assert rank["onExitCodes"] == {"containerName": CONTAINER, "operator": "NotIn", "values": [0]}
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never", "a podFailurePolicy requires it"
