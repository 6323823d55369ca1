"""Rendering manifests/ from a JobSpec, and validating objects against the Kubernetes schema offline."""

import copy
import dataclasses

import pytest
import yaml
from kubernetes import client

from rollcall.jobspec import JobSpec
from rollcall.manifests import MANIFESTS_DIR, ManifestError, Names, PodExtras, render, validate

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


def test_the_container_runs_the_one_torchrun_command_with_static_rendezvous():
    r = render(SPEC, NAMES)
    c = pod_of(r)["containers"][0]
    assert c["image"] == SPEC.image
    assert c["command"] == SPEC.torchrun_command(
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
    kinds = {"Namespace": client.V1Namespace, "Service": client.V1Service, "Job": client.V1Job}
    for path in sorted(MANIFESTS_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert validate(doc, kinds[doc["kind"]]) == [], path


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
    from rollcall import manifests

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
    with pytest.raises(ManifestError, match="set ROLLCALL_MANIFESTS_DIR to a copy"):
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
