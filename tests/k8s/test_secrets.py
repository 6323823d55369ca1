"""Secrets by reference on a real API server: the run's Secret, the pods' references to it, and a Secret of
another namespace copied in; the Job and every artifact hold no value."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from rollcall.backends.kubernetes.kube import Kube, call
from rollcall.backends.kubernetes.manifests import secret_name

from .conftest import suite_namespaces

pytestmark = pytest.mark.control_plane

PLANTED = "planted-value"
BY_REFERENCE = "planted-by-reference"
SOURCE = "ml-secrets"


@pytest.fixture
def source_secret(kube: Kube) -> Iterator[str]:
    """A namespace of the user's own holding the Secret ``hf`` (key ``token``)."""
    call(kube.core.create_namespace, body={"metadata": {"name": SOURCE}})
    secret = {"metadata": {"name": "hf"}, "stringData": {"token": BY_REFERENCE}}
    call(kube.core.create_namespaced_secret, SOURCE, body=secret)
    yield f"{SOURCE}/hf/token"
    call(kube.core.delete_namespace, SOURCE)


def test_the_pods_take_each_secret_from_the_runs_secret_and_the_job_holds_none(
    make_suite, ensure_nodes, kube, request, source_secret
):
    ensure_nodes(2)
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    suite, backend = make_suite(
        nodes=2, workload_env=f"HF_TOKEN={PLANTED} EXTRA=1", workload_secret=f"DB={source_secret}", keep=True
    )
    attempt = suite.run(request.node.nodeid, request.node.name).result.last
    try:
        assert attempt.passed, attempt.verdict.message(str(attempt.artifacts))
        (kept,) = {n["metadata"]["name"] for n in suite_namespaces(kube)} - before
        (job,) = call(kube.batch.list_namespaced_job, kept)["items"]
        assert PLANTED not in json.dumps(job) and BY_REFERENCE not in json.dumps(job)
        secret = secret_name(job["metadata"]["labels"]["rollcall/run-id"])
        template = job["spec"]["template"]["spec"]
        env = {e["name"]: e for e in template["containers"][0]["env"]}
        for name in ("HF_TOKEN", "DB"):
            assert env[name]["valueFrom"] == {"secretKeyRef": {"name": secret, "key": name}}
        assert env["EXTRA"]["value"] == "1"
        assert all("HF_TOKEN" not in json.dumps(c) for c in template["initContainers"])  # not the monitor's
        found = call(kube.core.read_namespaced_secret, secret, kept)  # as the admin
        values = {k: base64.b64decode(v).decode() for k, v in found["data"].items()}
        assert values == {"HF_TOKEN": PLANTED, "DB": BY_REFERENCE} and found["type"] == "Opaque"
        for path in attempt.artifacts.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert PLANTED.encode() not in data and BY_REFERENCE.encode() not in data, path
    finally:
        backend.sweep(0)
