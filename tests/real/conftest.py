"""Fixtures for the roll call on real nodes: kubelets, containerd, the CNI bridge and CoreDNS on this machine.

``real_cluster`` starts one cluster for the package (``hack/cluster.sh up --real-nodes 2``, one kwok node
beside them) and tears it down after its last test, also after failures; ``ROLLCALL_TEST_REAL_KUBECONFIG`` (with
``ROLLCALL_TEST_REAL_CLUSTER_NAME``) reuses a running one. The pods run the workload's own CPU image
(``hack/image.sh bert``). After each test no namespace of the suite may be left, and neither runtime may
run a container of one (a task still there), nor may they after the package's last test. A stopped container
outlives its pod until the kubelet's garbage collection, which runs once a minute (a period the kubelet
does not let one set): that is the kubelet's work, not the suite's, and waiting for it cost about 45 s a
test, then up to two minutes at the package's end, the longest path of CI; the cluster's teardown removes
them.

The real nodes' bridge, network namespaces, addresses and cgroups exist once per machine
(``hack/realnodes.sh``): under pytest-xdist every test here runs on one worker (:mod:`tests.groups`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollcall.backends.kubernetes.backend import KubernetesBackend
from rollcall.backends.kubernetes.kube import Kube, connect
from rollcall.options import resolve
from rollcall.suite import Suite, backend_settings
from tests.ci import ci
from tests.cluster.conftest import start_owned
from tests.cluster.controlplane import ControlPlane, ControlPlaneError, cluster_sh
from tests.groups import pytest_xdist_make_scheduler  # noqa: F401 (the groups, tests/groups.py)
from tests.k8s.conftest import suite_namespaces
from tests.local.e2e import COMPACT
from tests.waiting import wait_until

REAL_NODES = 2
PROFILE = "trn1.32xlarge"
IMAGE = "rollcall.local/rollcall-bert:cpu"
#: The label hack/realnodes.sh gives real nodes (kwok nodes have the same instance type).
REAL = "rollcall.test/node=real"
#: BERT tiny, a few steps: every rank still builds, joins, trains and reports for real. The image's default
#: model (hf) is the roll call's in test_every_rank_answers_from_two_real_nodes and the compile cache's.
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 2 --steps-per-epoch 2"
#: The other tests' workload: the compact model, whose ranks import no transformers (:data:`COMPACT`).
WORKLOAD_ARGS = " ".join((SHORT, *COMPACT))
NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_LABEL = "io.kubernetes.pod.name"


@pytest.fixture(scope="package")
def real_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """The package's cluster: down after its last test (its kubelets idle no longer while the worker runs on)."""
    reuse = os.environ.get("ROLLCALL_TEST_REAL_KUBECONFIG")
    if reuse:
        name = os.environ.get("ROLLCALL_TEST_REAL_CLUSTER_NAME", "rollcall")
        yield ControlPlane.attach(Path(reuse), name, tmp_path_factory.mktemp("pod-logs"))
        return
    try:
        cp = start_owned(
            request.config,
            "rollcall-real-",
            tmp_path_factory.mktemp("real-cluster"),
            nodes=1,
            real_nodes=REAL_NODES,
            log_max_size="1Mi",
        )
    except ControlPlaneError as exc:
        message = f"real nodes unavailable: {exc}"
        if ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    yield cp
    cp.stop()  # the session's end would too (start_owned): a cluster already down is a no-op


@pytest.fixture(scope="package")
def kube(real_cluster: ControlPlane) -> Kube:
    return connect(str(real_cluster.kubeconfig))


@pytest.fixture(scope="package")
def real_nodes(real_cluster: ControlPlane) -> list[str]:
    """The real nodes' names, index order."""
    items = real_cluster.get("nodes", "-l", REAL)["items"]
    names = sorted(n["metadata"]["name"] for n in items)
    assert len(names) == REAL_NODES, names
    return names


#: ctr's filter of the containers of the suite's namespaces: one call lists them, however many others the
#: runtime holds (the kubelets keep the stopped ones of earlier tests until their garbage collection).
SUITE_FILTER = f'labels."{NAMESPACE_LABEL}"~="^rollcall-"'


def containers(cp: ControlPlane, node: int, *, live: bool = False) -> list[dict[str, Any]]:
    """The containers (sandboxes too) of the suite's namespaces in real node ``node``'s containerd, with their
    labels; ``live``: only those whose task is not stopped (a process still there)."""
    ls = ("containers", "ls", "-q", SUITE_FILTER)
    ids = cluster_sh("ctr", "--name", cp.name, str(node), "-n", "k8s.io", *ls).split()
    if live and ids:
        running = live_tasks(cp, node)
        ids = [cid for cid in ids if cid in running]
    found = []
    for cid in ids:
        try:
            info = json.loads(
                cluster_sh("ctr", "--name", cp.name, str(node), "-n", "k8s.io", "containers", "info", cid)
            )
        except ControlPlaneError:  # removed meanwhile
            continue
        found.append({"id": cid, "labels": info.get("Labels") or {}})
    return found


def live_tasks(cp: ControlPlane, node: int) -> set[str]:
    """The containers (sandboxes too) of real node ``node`` whose task is not stopped: a process still there."""
    out = cluster_sh("ctr", "--name", cp.name, str(node), "-n", "k8s.io", "tasks", "ls")
    rows = [line.split() for line in out.splitlines()[1:]]  # TASK PID STATUS
    return {row[0] for row in rows if row and row[-1] != "STOPPED"}


def suite_containers(cp: ControlPlane, *, running: bool = False) -> list[str]:
    """Containers of the suite's namespaces left in either runtime (``running``: with a live task), as
    ``node:namespace/pod/id``."""
    found = []
    for node in range(REAL_NODES):
        for c in containers(cp, node, live=running):
            labels = c["labels"]
            if labels.get(NAMESPACE_LABEL, "").startswith("rollcall-"):
                found.append(f"{node}:{labels[NAMESPACE_LABEL]}/{labels.get(POD_LABEL, '?')}/{c['id'][:12]}")
    return found


@pytest.fixture(scope="package", autouse=True)
def no_container_left(real_cluster: ControlPlane) -> Iterator[None]:
    """After the package's last test, neither runtime runs a container of the suite, sandboxes included
    (stopped ones are the kubelets' to collect, once a minute)."""
    yield
    running = suite_containers(real_cluster, running=True)
    assert not running, f"containers of the suite still running after the package: {running}"


@pytest.fixture(autouse=True)
def nothing_left_behind(real_cluster: ControlPlane, kube: Kube) -> Iterator[None]:
    """No namespace of the suite and no running container of one may outlive a test (the kubelets get a
    bound)."""
    yield
    assert wait_until(
        "the suite's namespaces to be gone", lambda: not suite_namespaces(kube) or None, timeout=90
    )
    assert wait_until(
        lambda: f"no container of the suite to run; running: {suite_containers(real_cluster, running=True)}",
        lambda: not suite_containers(real_cluster, running=True) or None,
        timeout=60,
        every=1,
    )


def real_options(cp: ControlPlane, artifacts: Path, **values: Any) -> Any:
    cli = {
        "backend": "kubernetes",
        "kubeconfig": str(cp.kubeconfig),
        "image": IMAGE,
        "accelerator": "cpu",
        "procs_per_node": "2",
        "node_selector": [REAL],
        "artifacts_dir": str(artifacts),
        "job_timeout": "300",
        "unschedulable_grace": "30",
        "workload_args": WORKLOAD_ARGS,
        # 4 ranks share 2 loaded cores: a healthy rank strays 1.3 x the median compute time now and then.
        # The tests judge the roll call; the one that slows a rank sets its own ratio.
        "straggler_ratio": "0",
        "busbw_ratio": "0",
        **{k: v if isinstance(v, (bool, list)) else str(v) for k, v in values.items()},
    }
    env = ["OMP_NUM_THREADS=1", *cli.pop("workload_env", [])]
    return resolve({**cli, "workload_env": env}, environ={})


@pytest.fixture(scope="package")
def jobset_controller(real_cluster: ControlPlane) -> Iterator[None]:
    """The JobSet controller against the real nodes' cluster, from the first test of ``--job-kind jobset``."""
    real_cluster.start_jobset()
    yield
    real_cluster.stop_jobset()


@pytest.fixture
def make_suite(
    real_cluster: ControlPlane, tmp_path: Path, request: pytest.FixtureRequest
) -> Callable[..., tuple[Suite, KubernetesBackend]]:
    """``make_suite(**options)``: a session's Suite on the real nodes, its progress lines kept; with
    ``job_kind="jobset"`` the JobSet controller runs (:func:`jobset_controller`)."""

    def make(**values: Any) -> tuple[Suite, KubernetesBackend]:
        if values.get("job_kind") == "jobset":
            request.getfixturevalue("jobset_controller")
        opts = real_options(real_cluster, tmp_path / "artifacts", **values)
        suite = Suite(opts, "kubernetes", "test")
        lines: list[str] = []
        suite.progress = lines.append
        backend = KubernetesBackend.from_options(opts.kubernetes, backend_settings(opts, lines.append))
        backend.cleanup_timeout_s = 90
        suite.__dict__["backend"] = backend
        return suite, backend

    return make
