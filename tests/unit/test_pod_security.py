"""The pods' profile, offline: the Pod Security labels of a run's namespace, what the pods ask of their node,
and the suite's identities, the same in every admission policy and binding of manifests/rbac/.

tests/k8s/test_rbac.py shows the same on a real API server: what the policies and labels refuse, and that
the suite's runs pass within them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollcall.backends.kubernetes.manifests import (
    POD_SECURITY_REASON,
    Names,
    host_directories,
    render,
)
from rollcall.jobspec import MANIFESTS_DIR, CacheVolume, JobSpec

RBAC_DIR = MANIFESTS_DIR / "rbac"
DOCS = Path(__file__).resolve().parents[2] / "docs"
NVIDIA = JobSpec(
    name="bert-abc123",
    nodes=2,
    procs_per_node=8,
    accelerator="nvidia",
    image="registry.example/rollcall-bert:nvidia",
    resources={"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
    instance_type="p5.48xlarge",
)
NAMES = Names(namespace="rollcall-0a1b2c3d", job="bert-abc123", service="bert-abc123", run_id="0a1b2c3d")
LEVELS = ("enforce", "warn", "audit")


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((RBAC_DIR / name).read_text()) if d]


def policies() -> list[dict[str, Any]]:
    return [d for d in documents("admission-policy.yaml") if d["kind"] == "ValidatingAdmissionPolicy"]


def variable(policy: dict[str, Any], name: str) -> Any:
    (found,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == name]
    return json.loads(found)  # a CEL list literal of strings is JSON


def levels(namespace: dict[str, Any]) -> dict[str, str]:
    labels = namespace["metadata"]["labels"]
    return {level: labels[f"pod-security.kubernetes.io/{level}"] for level in LEVELS}


# -- the run's namespace --------------------------------------------------------------------------


def test_a_runs_namespace_enforces_baseline_and_warns_and_audits_restricted():
    ns = render(NVIDIA, NAMES).namespace
    assert levels(ns) == {"enforce": "baseline", "warn": "restricted", "audit": "restricted"}
    assert POD_SECURITY_REASON not in ns["metadata"]["annotations"]


def test_caches_on_nfs_keep_baseline():
    nfs = CacheVolume("nfs", "/compile", "fs-1.efs.us-west-2.amazonaws.com")
    spec = dataclasses.replace(NVIDIA, compile_cache=nfs, neuron_cache=nfs)
    assert host_directories(spec) == []
    assert levels(render(spec, NAMES).namespace)["enforce"] == "baseline"


@pytest.mark.parametrize(
    ("field", "option"), [("compile_cache", "--compile-cache"), ("neuron_cache", "--neuron-cache")]
)
def test_a_cache_on_the_node_enforces_privileged_and_says_why(field, option):
    spec = dataclasses.replace(NVIDIA, **{field: CacheVolume("host", "/var/cache/rollcall/c")})
    ns = render(spec, NAMES).namespace
    assert levels(ns) == {"enforce": "privileged", "warn": "restricted", "audit": "restricted"}
    reason = ns["metadata"]["annotations"][POD_SECURITY_REASON]
    assert reason.startswith(f"{option} host:/var/cache/rollcall/c: a directory of each node (hostPath)")
    assert "baseline level forbids" in reason


def test_both_caches_on_the_node_are_both_named():
    host = CacheVolume("host", "/var/cache/rollcall/x")
    spec = dataclasses.replace(NVIDIA, compile_cache=host, neuron_cache=host)
    reason = render(spec, NAMES).namespace["metadata"]["annotations"][POD_SECURITY_REASON]
    assert reason.startswith("--neuron-cache host:/var/cache/rollcall/x and --compile-cache host:")


def test_a_run_in_an_existing_namespace_leaves_its_labels_to_its_owner():
    names = Names.new("rollcall", "bert-abc123", namespace="ml-team")
    assert render(NVIDIA, names).namespace is None


# -- what the pods ask of their node --------------------------------------------------------------


def test_the_pods_ask_the_node_for_nothing_but_device_plugin_resources():
    pod = render(NVIDIA, NAMES).job["spec"]["template"]["spec"]
    for key in ("hostNetwork", "hostPID", "hostIPC", "securityContext"):
        assert key not in pod, key
    containers = pod["containers"] + pod["initContainers"]
    assert all("securityContext" not in c for c in containers)  # not privileged, no capability added
    assert all("hostPort" not in p for c in containers for p in c.get("ports", []))
    assert all(set(v) == {"name", "emptyDir"} for v in pod["volumes"]), pod["volumes"]
    (train,) = pod["containers"]
    # GPUs and EFA interfaces come through their device plugins, as resources, never as host mounts
    assert train["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}


def test_the_monitor_hears_every_gpu_of_its_node_through_nvml_only():
    pod = render(NVIDIA, NAMES).job["spec"]["template"]["spec"]
    (monitor,) = pod["initContainers"]
    env = {e["name"]: e["value"] for e in monitor["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    assert set(monitor["resources"]["limits"]) == {"cpu", "memory"}  # it holds no GPU


# -- the identities the policies confine ----------------------------------------------------------


def test_every_policy_matches_the_same_identities():
    conditions = {
        policy["metadata"]["name"]: [c["expression"] for c in policy["spec"]["matchConditions"]]
        for policy in policies()
    }
    assert set(conditions) == {"rollcall-own-namespaces", "rollcall-pod-profile", "rollcall-node-taints"}
    assert len({json.dumps(c) for c in conditions.values()}) == 1, conditions


def test_every_subject_of_the_suites_bindings_is_confined_by_the_policies():
    (condition,) = policies()[0]["spec"]["matchConditions"]
    expression = condition["expression"]
    bindings = [
        d
        for name in ("clusterrolebinding.yaml", "autoscaler-status.yaml")
        for d in documents(name)
        if d["kind"].endswith("Binding")
    ]
    subjects = [s for b in bindings for s in b["subjects"]]
    assert {s["kind"] for s in subjects} == {"ServiceAccount", "Group"}
    for subject in subjects:
        if subject["kind"] == "ServiceAccount":
            user = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
            assert f'request.userInfo.username == "{user}"' in expression, subject
        else:
            assert f'"{subject["name"]}" in request.userInfo.groups' in expression, subject
    # and the policies name no identity the bindings do not grant
    named = re.findall(r'"([^"]+)"', expression)
    assert len(named) == len({(s["kind"], s["name"]) for s in subjects}) == 2


def test_the_pods_may_add_no_capability_and_mount_the_node_only_under_the_cache_prefix():
    (profile,) = [p for p in policies() if p["metadata"]["name"] == "rollcall-pod-profile"]
    assert variable(profile, "capabilitiesAllowed") == []
    assert variable(profile, "hostPathPrefixes") == ["/var/cache/rollcall"]
    resources = {
        r for rule in profile["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]
    }
    assert resources == {"jobs", "jobsets", "pods"}


def test_the_docs_host_caches_lie_under_the_policys_prefix():
    (profile,) = [p for p in policies() if p["metadata"]["name"] == "rollcall-pod-profile"]
    (prefix,) = variable(profile, "hostPathPrefixes")
    # the examples' directories (the prose's host:/PATH is a placeholder)
    paths = re.findall(r"--(?:compile|neuron)-cache host:(/[a-z0-9/._-]+)", (DOCS / "eks.md").read_text())
    assert paths, "docs/eks.md shows no cache on the node"
    assert all(p.startswith(f"{prefix}/") for p in paths), paths


def test_the_suites_own_namespace_enforces_restricted():
    (namespace,) = documents("namespace.yaml")
    assert levels(namespace) == {"enforce": "restricted", "warn": "restricted", "audit": "restricted"}
