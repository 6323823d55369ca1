"""The JobSet controller in the local cluster (hack/jobset.sh): built from its Go module, its webhooks served
over TLS with a CA made here, its CRD the module's own.

A JobSet of one replicated job of 2 pods makes its Job and its headless Service; the mutating webhook defaults
it; the validating webhook refuses a success policy that targets no replicated job of it; after ``down`` no webhook is left to refuse pods.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.waiting import wait_until

from .controlplane import ControlPlane, ControlPlaneError
from .test_control_plane import indexed_job, job_finished

pytestmark = pytest.mark.control_plane


@pytest.fixture
def jobset_controller(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.start_jobset()
    try:
        yield control_plane
    finally:
        control_plane.stop_jobset()


def jobset(name: str, namespace: str) -> dict:
    job = indexed_job("unused", 2)["spec"]
    del job["template"]["spec"]["subdomain"]  # the JobSet sets its pods' subdomain to its Service
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}],
        },
    }


def test_a_jobset_makes_its_job_and_headless_service_through_its_webhooks(jobset_controller):
    cp = jobset_controller
    namespace = f"js-{uuid.uuid4().hex[:8]}"
    cp.create_namespace(namespace)
    try:
        cp.apply(jobset("roll", namespace))
        made = cp.get("jobset", "roll", "-n", namespace)
        # the mutating webhook defaulted it: DNS hostnames on, the success policy of all jobs
        assert made["spec"]["network"]["enableDNSHostnames"] is True
        assert made["spec"]["successPolicy"]["operator"] == "All"
        wait_until("the JobSet's Job", lambda: _exists(cp, "job", "roll-node-0", namespace), timeout=60)
        job = cp.get("job", "roll-node-0", "-n", namespace)
        assert (job["spec"]["completions"], job["spec"]["completionMode"]) == (2, "Indexed")
        service = wait_until(
            "the JobSet's Service", lambda: _exists(cp, "service", "roll", namespace), timeout=60
        )
        assert service["spec"]["clusterIP"] == "None"
        assert wait_until("the Job to end", lambda: job_finished(cp, namespace, "roll-node-0")) == "Complete"
        pods = cp.get("pods", "-n", namespace, "-l", "jobset.sigs.k8s.io/jobset-name=roll")["items"]
        assert sorted(p["spec"]["hostname"] for p in pods) == ["roll-node-0-0", "roll-node-0-1"]
        assert {p["spec"]["subdomain"] for p in pods} == {"roll"}
        # the validating webhook (no schema can say it) refuses a success policy naming no replicated job of it
        bad = jobset("bad", namespace)
        bad["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["nope"]}
        with pytest.raises(ControlPlaneError, match="invalid replicatedJob name 'nope' does not appear"):
            cp.apply(bad)
    finally:
        cp.kubectl("delete", "namespace", namespace, "--wait=false")


def test_down_leaves_no_webhook_to_refuse_pods(control_plane):
    control_plane.start_jobset()
    control_plane.stop_jobset()
    hooks = control_plane.get("mutatingwebhookconfigurations")["items"]
    hooks += control_plane.get("validatingwebhookconfigurations")["items"]
    assert not [h for h in hooks if h["metadata"]["name"].startswith("rollcall-jobset")]
    crds = [c["metadata"]["name"] for c in control_plane.get("crd")["items"]]
    assert "jobsets.jobset.x-k8s.io" not in crds


def _exists(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict | None:
    try:
        return cp.get(kind, name, "-n", namespace)
    except ControlPlaneError:
        return None
