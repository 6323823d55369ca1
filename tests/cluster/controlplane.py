"""Handle on a local Kubernetes control plane started by hack/cluster.sh.

The cluster runs upstream kube-apiserver, kube-controller-manager, kube-scheduler and etcd as
local processes; kwok fakes the nodes and the pods' lifecycle (see hack/kwok/stages.yaml):

* pods go Pending -> Running (with a pod IP) -> Succeeded for Job pods, after the cluster's
  default run time or the pod's ``rollcall.test/run-duration`` annotation (e.g. ``"5s"``);
* pods labelled ``rollcall.test/fail: "true"`` go Failed instead (exit code from the
  ``rollcall.test/exit-code`` annotation, default 1);
* ``kubectl logs`` serves whatever file a kwok ``Logs`` object names (see :meth:`serve_logs`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests import children
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO_ROOT / "hack" / "cluster.sh"
KARPENTER_SH = REPO_ROOT / "hack" / "karpenter.sh"
JOBSET_SH = REPO_ROOT / "hack" / "jobset.sh"
PROFILES_DIR = REPO_ROOT / "hack" / "profiles"

FAIL_LABEL = "rollcall.test/fail"
RUN_DURATION_ANNOTATION = "rollcall.test/run-duration"
EXIT_CODE_ANNOTATION = "rollcall.test/exit-code"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: The taint the node lifecycle controller keeps on a node until it has seen it Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
#: Which Kubernetes the tests' clusters run: ``newest`` (unset: hack/cluster.sh's default), ``oldest``, or
#: either's version; handed to hack/cluster.sh (and hack/karpenter.sh, through it) as ``K8S_VERSION``.
K8S_VERSION_ENV = "ROLLCALL_TEST_K8S_VERSION"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or driven."""


def _env() -> dict[str, str] | None:
    """The environment of the scripts: ``K8S_VERSION`` from :data:`K8S_VERSION_ENV` when that is set."""
    version = os.environ.get(K8S_VERSION_ENV, "").strip()
    return {**os.environ, "K8S_VERSION": version} if version else None


def _run(args: Sequence[str], *, input: str | None = None, timeout: float = 600) -> str:
    """Run ``args``; an interrupt lets the child finish its own clean-up first (:func:`tests.children.run`)."""
    try:
        proc = children.run(args, input=input, env=_env(), timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ControlPlaneError(f"{' '.join(args[:3])} ...: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise ControlPlaneError(f"{' '.join(args[:3])} ... exited {proc.returncode}:\n{tail}")
    return proc.stdout


def cluster_sh(*args: str, timeout: float = 3600) -> str:
    """Run hack/cluster.sh; the build step alone can take half an hour on a cold machine."""
    return _run([str(CLUSTER_SH), *args], timeout=timeout)


def cri_log_line(line: str, *, stream: str = "stdout", when: datetime | None = None) -> str:
    """One line in the CRI container log format that kwok reads: ``<time> <stream> F <line>``."""
    ts = (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{ts} {stream} F {line}\n"


@dataclass
class ControlPlane:
    """A running cluster: ``kubeconfig`` is all most tests need."""

    name: str
    kubeconfig: Path
    log_dir: Path
    owned: bool = True
    bin_dir: Path = field(default_factory=lambda: Path(cluster_sh("bin-dir").strip()))

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        name: str,
        workdir: Path,
        *,
        nodes: int = 2,
        profile: str = "trn1.32xlarge",
        pod_run_ms: int = 2000,
        real_nodes: int = 0,
        log_max_size: str = "10Mi",
    ) -> ControlPlane:
        """Build (or reuse) the binaries and start a fresh cluster called ``name``.

        ``real_nodes`` real kubelets (hack/realnodes.sh) join the ``nodes`` fake ones, with the labels and
        accelerator capacity of ``profile``; ``log_max_size`` is their ``containerLogMaxSize``.
        """
        cluster_sh("build")
        kubeconfig = workdir / "kubeconfig"
        try:
            cluster_sh(
                "up",
                *("--name", name, "--nodes", str(nodes), "--profile", profile),
                *("--kubeconfig", str(kubeconfig), "--pod-run-ms", str(pod_run_ms)),
                *("--real-nodes", str(real_nodes), "--log-max-size", log_max_size),
                timeout=900,
            )
        except (
            BaseException
        ):  # failed, timed out or interrupted: `up` cleans up after itself, and this makes sure
            with contextlib.suppress(ControlPlaneError):
                cluster_sh("down", "--name", name, timeout=300)
            raise
        log_dir = workdir / "pod-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        return cls(name=name, kubeconfig=kubeconfig, log_dir=log_dir)

    @classmethod
    def attach(cls, kubeconfig: Path, name: str, log_dir: Path) -> ControlPlane:
        """Use a cluster that someone else started (it is never torn down from here)."""
        if not kubeconfig.is_file():
            raise ControlPlaneError(f"kubeconfig {kubeconfig} does not exist")
        log_dir.mkdir(parents=True, exist_ok=True)
        cp = cls(name=name, kubeconfig=kubeconfig, log_dir=log_dir, owned=False)
        cp.kubectl("get", "--raw", "/readyz")
        return cp

    def stop(self) -> None:
        """Stop every process of the cluster and remove its files (only if we started it)."""
        if self.owned:
            cluster_sh("down", "--name", self.name, timeout=300)

    def stop_node(self, index: int) -> None:
        """Stop real node ``index``'s kubelet and container runtime (its containers keep running)."""
        cluster_sh("stop-node", "--name", self.name, str(index), timeout=120)

    def start_node(self, index: int) -> None:
        """Start real node ``index``'s runtime and kubelet again."""
        cluster_sh("start-node", "--name", self.name, str(index), timeout=120)

    def restart_apiserver(self) -> None:
        """Kill kube-apiserver and start it again on the same port and etcd data."""
        cluster_sh("restart-apiserver", "--name", self.name, timeout=300)

    def start_karpenter(self) -> None:
        """Run Karpenter with its kwok provider against this cluster (hack/karpenter.sh; builds it once)."""
        _run([str(KARPENTER_SH), "up", "--name", self.name], timeout=1800)

    def stop_karpenter(self) -> None:
        """Delete Karpenter's NodePools and NodeClaims (so its nodes) and stop it."""
        _run([str(KARPENTER_SH), "down", "--name", self.name], timeout=300)

    def start_jobset(self) -> None:
        """Run the JobSet controller and its webhooks against this cluster (hack/jobset.sh; builds it once)."""
        _run([str(JOBSET_SH), "up", "--name", self.name], timeout=1800)

    def stop_jobset(self) -> None:
        """Delete every JobSet, the webhooks and the CRD, and stop the controller."""
        _run([str(JOBSET_SH), "down", "--name", self.name], timeout=300)

    # -- API access ------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        return _run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            timeout=timeout,
        )

    def get(self, *args: str) -> dict[str, Any]:
        """``kubectl get <args> -o json``, parsed."""
        result: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return result

    def apply(self, *objects: dict[str, Any]) -> None:
        """``kubectl apply`` the given objects (plain dicts)."""
        self.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        )

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this cluster (needs the kubernetes package)."""
        from kubernetes import config  # optional dependency

        return config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]

    def create_namespace(self, name: str, timeout: float = 60) -> None:
        """Create a namespace and wait until pods can be created in it (default ServiceAccount)."""
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

        def has_default_account() -> bool:
            try:
                self.kubectl("get", "serviceaccount", "default", "-n", name, "-o", "name")
            except ControlPlaneError:
                return False
            return True

        wait_until(f"namespace {name}'s default ServiceAccount", has_default_account, timeout=timeout)

    # -- fake nodes ------------------------------------------------------------------------

    def add_nodes(self, count: int, profile: str = "trn1.32xlarge", timeout: float = 300) -> list[str]:
        """Add ``count`` Ready fake nodes of a hack/profiles/<profile>.yaml; returns their names."""
        existing = self.kubectl(
            "get", "nodes", "-l", f"{INSTANCE_TYPE_LABEL}={profile}", "-o", "name"
        ).split()
        prefix = profile.replace(".", "-")
        names = [f"{prefix}-{i}" for i in range(len(existing), len(existing) + count)]
        return self.add_named_nodes(names, profile, timeout)

    def add_named_nodes(
        self, names: list[str], profile: str = "trn1.32xlarge", timeout: float = 300
    ) -> list[str]:
        """Add (or restore, after a test deleted them) the fake nodes ``names`` of a profile; wait until they
        are Ready and schedulable: the node lifecycle controller lifts the ``not-ready`` taint after the
        Ready condition, and at a few hundred nodes it lags by seconds."""
        if not names:
            return []
        template = (PROFILES_DIR / f"{profile}.yaml").read_text()
        docs = "".join("---\n" + template.replace("__NODE_NAME__", n) for n in names)
        self.kubectl("apply", "-f", "-", input=docs)
        self.kubectl(
            "wait",
            "--for=condition=Ready",
            f"--timeout={int(timeout)}s",
            *(f"node/{n}" for n in names),
            timeout=timeout + 30,
        )
        added = set(names)

        def not_ready() -> list[str]:
            nodes = self.get("nodes", "-l", f"{INSTANCE_TYPE_LABEL}={profile}")["items"]
            return sorted(
                n["metadata"]["name"]
                for n in nodes
                if n["metadata"]["name"] in added
                and any(t["key"] == NOT_READY_TAINT for t in n["spec"].get("taints") or [])
            )

        wait_until(
            lambda: f"{NOT_READY_TAINT} to be lifted from {not_ready()}",
            lambda: not not_ready() or None,
            timeout,
            every=1,
        )
        return names

    # -- pod logs --------------------------------------------------------------------------

    def write_log_file(self, lines: Iterable[str], name: str, *, stream: str = "stdout") -> Path:
        """Write ``lines`` as a CRI-format log file under :attr:`log_dir` and return its path."""
        path = self.log_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(cri_log_line(line, stream=stream) for line in lines))
        return path

    def serve_logs(
        self,
        namespace: str,
        pod: str,
        lines: Iterable[str] | None = None,
        *,
        logs_file: Path | None = None,
        container: str | None = None,
        follow: bool = False,
    ) -> Path:
        """Make ``kubectl logs <pod>`` return ``lines`` (or an existing CRI ``logs_file``).

        Creates a kwok ``Logs`` object named after the pod; it may exist before the pod does.
        """
        if logs_file is None:
            logs_file = self.write_log_file(lines or [], f"{namespace}/{pod}/{container or 'all'}.log")
        entry: dict[str, Any] = {"logsFile": str(logs_file), "follow": follow}
        if container:
            entry["containers"] = [container]
        self.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": [entry]},
            }
        )
        return logs_file
