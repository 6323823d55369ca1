"""Fixtures for the kubernetes backend's tests against the local control plane (real API server, kwok nodes).

The cluster comes from tests/cluster (``control_plane``: started once per session, or reused through
``ROLLCALL_TEST_KUBECONFIG``). :class:`~tests.k8s.fakekubelet.FakeKubelet` serves every rollcall pod's log.
After each test, no namespace of the suite may be left.

The tests run the roll call as the session's job kind (``--job-kind``): ``ROLLCALL_TEST_JOB_KIND``, else
``job``, the Indexed Job. With ``jobset`` the JobSet controller runs against the cluster for the package
(hack/jobset.sh); ``make test-k8s-oldest`` runs the package so, ``make test`` with the Indexed Job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rollcall.backends.kubernetes.backend import KubernetesBackend
from rollcall.backends.kubernetes.kube import Kube, call, connect
from rollcall.backends.kubernetes.manifests import MANAGED_BY, MANAGED_BY_LABEL, Names, PodExtras
from rollcall.options import resolve
from rollcall.suite import Suite, backend_settings
from tests.cluster import conftest as cluster
from tests.cluster.controlplane import INSTANCE_TYPE_LABEL, ControlPlane
from tests.groups import pytest_xdist_make_scheduler  # noqa: F401 (the groups, tests/groups.py)
from tests.waiting import wait_until

from .fakekubelet import FakeKubelet

# The control plane's session fixture and marker, from tests/cluster.
control_plane = cluster.control_plane
_control_plane_marker = cluster._control_plane_marker
pytest_configure = cluster.pytest_configure


#: The session's ``--job-kind`` for the kubernetes backend's tests (a test setting, as the Kubernetes version is).
JOB_KIND_ENV = "ROLLCALL_TEST_JOB_KIND"
JOB_KINDS = ("job", "jobset")


def job_kind() -> str:
    """The session's job kind: ``ROLLCALL_TEST_JOB_KIND``, else ``job``."""
    kind = os.environ.get(JOB_KIND_ENV, "job")
    if kind not in JOB_KINDS:
        raise pytest.UsageError(f"{JOB_KIND_ENV}={kind}: one of {', '.join(JOB_KINDS)}")
    return kind


@pytest.fixture(scope="package")
def jobset_controller(control_plane: ControlPlane) -> Iterator[str]:
    """The session's job kind; with ``jobset``, the JobSet controller runs for the package."""
    kind = job_kind()
    if kind != "jobset":
        yield kind
        return
    control_plane.start_jobset()
    try:
        yield kind
    finally:
        control_plane.stop_jobset()


TRN1 = "trn1.32xlarge"
P5 = "p5.48xlarge"
IMAGE = "registry.invalid/rollcall-bert:never-pulled"


@pytest.fixture(scope="session")
def kubelet(control_plane: ControlPlane) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(control_plane).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Kube:
    return connect(str(control_plane.kubeconfig))


def suite_namespaces(kube: Kube) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = call(
        kube.core.list_namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    )["items"]
    return items


def suite_objects(kube: Kube, namespace: str) -> dict[str, dict[str, Any]]:
    """The suite's JobSets (where the cluster serves them), Jobs, Services and pods in ``namespace``, by
    ``kind/name``."""
    kinds = [
        ("job", kube.batch.list_namespaced_job),
        ("service", kube.core.list_namespaced_service),
        ("pod", kube.core.list_namespaced_pod),
    ]
    if job_kind() == "jobset":
        kinds.insert(0, ("jobset", kube.jobset.list_namespaced_job_set))
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    return {
        f"{kind}/{obj['metadata']['name']}": obj
        for kind, list_fn in kinds
        for obj in call(list_fn, namespace, label_selector=selector)["items"]
    }


def job_name(run: str) -> str:
    """The Job of a run named ``run`` (its JobSpec's name), of the session's job kind."""
    return Names.new("rollcall", run, kind=job_kind()).job


def run_objects(run: str) -> set[str]:
    """What a run named ``run`` creates with the suite's label, as ``kind/name``, of the session's job kind.

    A JobSet's Service is its controller's, without the suite's labels (it goes with the JobSet).
    """
    if job_kind() == "jobset":
        return {f"jobset/{run}", f"job/{job_name(run)}"}
    return {f"job/{run}", f"service/{run}"}


def active_suite_namespaces(kube: Kube) -> list[dict[str, Any]]:
    """The suite's namespaces not being deleted (an earlier test's may still be going)."""
    return [n for n in suite_namespaces(kube) if not n["metadata"].get("deletionTimestamp")]


#: How long a namespace a test left may take to go, from the test's end.
NAMESPACE_BOUND_S = 30.0


@dataclass
class Leftovers:
    """The namespaces each test left still listed at its end: each must be gone within its bound.

    A namespace takes at least 5 s to go (the namespace controller waits that long before it starts, a
    constant of kube-controller-manager), so waiting after every test cost 5 s each; the next tests run
    meanwhile, and each teardown (and the package's end) checks what earlier tests left.
    """

    pending: dict[str, tuple[str, float]] = field(default_factory=dict)
    kube: Kube | None = None

    def add(self, kube: Kube, names: set[str], test: str) -> None:
        self.kube = kube
        for name in names:
            self.pending[name] = (test, time.monotonic() + NAMESPACE_BOUND_S)

    def settle(self, *, wait: bool) -> None:
        """Drop what is gone; fail naming each namespace still listed past its bound, and the test that left
        it (``wait``: until every one is gone or late)."""

        def all_gone() -> bool:
            assert self.kube is not None
            listed = {n["metadata"]["name"] for n in suite_namespaces(self.kube)}
            for name in [n for n in self.pending if n not in listed]:
                del self.pending[name]
            late = {n: t for n, (t, deadline) in self.pending.items() if time.monotonic() > deadline}
            for name in late:
                del self.pending[name]
            assert not late, f"namespaces still there {NAMESPACE_BOUND_S:g} s after their test ended: " + (
                ", ".join(f"{n} (left by {t})" for n, t in sorted(late.items()))
            )
            return not self.pending

        if not self.pending:
            return
        if wait:
            wait_until(
                "the namespaces the tests left to go", lambda: all_gone() or None, NAMESPACE_BOUND_S + 5
            )
        else:
            all_gone()


@pytest.fixture(scope="package")
def leftovers() -> Iterator[Leftovers]:
    """The package's :class:`Leftovers`; at its end, every namespace a test left is gone within its bound."""
    found = Leftovers()
    yield found
    found.settle(wait=True)


@pytest.fixture(autouse=True)
def nothing_left_behind(request: pytest.FixtureRequest, leftovers: Leftovers) -> Iterator[None]:
    """Every test must leave no namespace of the suite behind: each one it leaves still listed must be gone
    within :data:`NAMESPACE_BOUND_S` of its end, checked by the later tests' teardowns and at the end."""
    if not request.node.get_closest_marker("control_plane"):
        yield
        return
    kube = request.getfixturevalue("kube")
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    yield
    leftovers.add(kube, {n["metadata"]["name"] for n in suite_namespaces(kube)} - before, request.node.nodeid)
    leftovers.settle(wait=False)


@pytest.fixture
def ensure_nodes(control_plane: ControlPlane) -> Callable[[int, str], None]:
    """``ensure_nodes(n, profile)``: at least ``n`` Ready fake nodes of the profile exist."""

    def ensure(count: int, profile: str = TRN1) -> None:
        have = control_plane.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={profile}")["items"]
        if len(have) < count:
            control_plane.add_nodes(count - len(have), profile)

    return ensure


def options(control_plane: ControlPlane, artifacts: Path, **values: Any) -> Any:
    cli = {
        "backend": "kubernetes",
        "kubeconfig": str(control_plane.kubeconfig),
        "image": IMAGE,
        "instance_type": TRN1,
        "artifacts_dir": str(artifacts),
        "unschedulable_grace": "2",
        "job_kind": job_kind(),
        **{k: v if isinstance(v, bool) else str(v) for k, v in values.items()},
    }
    return resolve(cli, environ={})


@pytest.fixture
def make_suite(
    control_plane: ControlPlane, kubelet: FakeKubelet, jobset_controller: str, tmp_path: Path
) -> Callable[..., tuple[Suite, KubernetesBackend]]:
    """``make_suite(nodes=2, labels=..., annotations=..., **options)``: a session's Suite on this cluster."""

    def make(
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **values: Any
    ) -> tuple[Suite, KubernetesBackend]:
        opts = options(control_plane, tmp_path / "artifacts", **values)
        suite = Suite(opts, "kubernetes", "test")
        lines: list[str] = []
        suite.progress = lines.append
        backend = KubernetesBackend.from_options(opts.kubernetes, backend_settings(opts, lines.append))
        backend.extras = PodExtras(labels=labels or {}, annotations=annotations or {})
        backend.cleanup_timeout_s = 60
        suite.__dict__["backend"] = backend
        backend.progress_lines = lines  # type: ignore[attr-defined]
        return suite, backend

    return make
