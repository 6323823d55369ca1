"""The suite's own overhead at scale: 64 kwok nodes x 32 ranks (2048 ranks) on the local control plane.

Usage: python bench/scale.py [--nodes 64] [--runs 3] [--run-seconds 5] [--namespace NAME] [--profile DIR]
                             [--kubeconfig PATH --name NAME]

Each run is a child ``pytest`` (the plugin and the kubernetes backend) running one roll call of ``--nodes``
trn1.32xlarge pods; every pod's log holds its 32 ranks' lines. Overhead is the child's wall time minus the
time pods spent running (the first pod Running to the last Succeeded, watched from here): discovery,
namespace, dry runs, scheduling, watches, log streaming and parsing, the verdict, reports and the deletion
of the namespace, plus Python's start-up. Peak memory is the child's maximum RSS. Targets (:data:`TARGETS`):
at 64 nodes overhead < 6 s and peak < 150 MiB, at 256 nodes < 15 s and < 300 MiB. The namespace's deletion,
from the ask to gone, is printed apart: the child waits for it before its end, and kube-controller-manager's
namespace controller starts on a namespace only 5 s after its deletion was asked (a constant of its own).

``--namespace NAME`` runs every child inside one existing namespace instead (the suite's ``--namespace``):
the bench creates it before the runs (not counted) and deletes it at the end; each run creates and deletes
only its Job and Service there. After each run the bench compares everything listable in the namespace with
what was there before the runs and fails, naming them, if any object is left: the run's Job, Service, pods,
and what controllers made of them (EndpointSlices, Endpoints; Events excepted: the event TTL removes them).
The clean-up column is then the run's objects' deletion, from the Job's deletion asked to the last of the
Job, its pods and the Service gone (watched from the bench).

``--profile DIR`` runs each child under cProfile (its main thread, wall-clock timer), keeps each run's
profile as ``DIR/run-N.prof`` (for ``python -m pstats``) and prints where its seconds
went, phase by phase (:data:`PHASES`: start-up and imports, connecting, discovery, the namespace, the dry
runs and creations, waiting for the pods, draining the logs, judging, clean-up, the reports); the rest is
pytest's own work and what the table names no phase for.

Without ``--kubeconfig`` a cluster is started (hack/cluster.sh) and removed at the end.
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from rollcall.backends.kubernetes.manifests import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL  # noqa: E402
from rollcall.backends.kubernetes.watch import Informer  # noqa: E402
from tests.cluster.controlplane import ControlPlane  # noqa: E402
from tests.k8s.fakekubelet import FakeKubelet  # noqa: E402

IMAGE = "registry.invalid/rollcall-bert:bench"
TRN1 = "trn1.32xlarge"
#: The goals by node count: overhead seconds and peak RSS MiB.
TARGETS = {64: (6.0, 150.0), 256: (15.0, 300.0)}

CONFTEST = """
import pytest
from rollcall.backends.kubernetes.manifests import PodExtras

@pytest.fixture(scope="session", autouse=True)
def steer_fake_nodes(rollcall_suite):
    rollcall_suite.backend.extras = PodExtras(annotations={{"rollcall.test/run-duration": "{seconds}s"}})
"""
TEST = """
def test_roll_call(rollcall):
    record = rollcall()
    assert record.result.passed, record.result.message()
"""


#: The child's phases under ``--profile``: a name and the functions (``file suffix``, ``name``) whose
#: cumulative wall time, summed, is the phase's (none of them calls another; a row indented is part of the
#: row above it).
PHASES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("imports (all, wherever they run)", (("<frozen importlib._bootstrap>", "_find_and_load"),)),
    ("connect and access check", (("kubernetes/backend.py", "from_options"),)),
    ("discovery", (("kubernetes/backend.py", "discover"),)),
    ("namespace + default ServiceAccount", (("kubernetes/job.py", "_await_default_service_account"),)),
    ("provision (all: namespace, dry runs, creations, watches)", (("kubernetes/job.py", "provision"),)),
    ("wait for the job (watches)", (("kubernetes/watch.py", "wait_for"),)),
    ("drain the logs", (("kubernetes/job.py", "_drain"),)),
    ("judge", (("rollcall/judge.py", "judge"),)),
    ("clean-up asked (the deletion's ask, watches started)", (("kubernetes/job.py", "_ask_deletion"),)),
    ("reports at session end", (("rollcall/plugin.py", "pytest_sessionfinish"),)),
    ("  of them, the clean-up's confirmation awaited", (("rollcall/runner.py", "cleanup_error"),)),
)


def phase_table(profile: Path) -> list[tuple[str, float]]:
    """Each of :data:`PHASES` with its seconds in ``profile`` (cProfile's output), and the whole.

    A row indented under another is part of it (the clean-up's confirmation is awaited by the reports).
    """
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    rows = []
    for name, functions in PHASES:
        seconds = sum(
            ct
            for (file, _line, fn), (_cc, _nc, _tt, ct, _callers) in stats.items()
            if any(file.endswith(suffix) and fn == want for suffix, want in functions)
        )
        rows.append((name, seconds))
    rows.append(("whole child (profiled)", max(ct for (_cc, _nc, _tt, ct, _c) in stats.values())))
    return rows


class PodClock:
    """When each pod was first seen Running and Succeeded, when each namespace of the suite was asked to go
    and was gone, and when each of the suite's Jobs, Services and pods was asked to go and was gone (watched
    from this process)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.running: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.deleting: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        core = client.CoreV1Api(api)
        self.pods = Informer(core.list_pod_for_all_namespaces, "pods", label_selector=JOB_LABEL)
        self.pods.subscribe(self._tick)
        self.namespaces = Informer(
            core.list_namespace, "namespaces", label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        )
        self.namespaces.subscribe(self._tick_namespaces)
        batch = client.BatchV1Api(api)
        managed = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        self.objects = {
            "job": Informer(batch.list_job_for_all_namespaces, "jobs", label_selector=managed),
            "service": Informer(core.list_service_for_all_namespaces, "services", label_selector=managed),
            "pod": self.pods,
        }
        #: ``kind/namespace/name``: when first seen, seen with a deletionTimestamp, seen gone.
        self.seen: dict[str, float] = {}
        self.asked: dict[str, float] = {}
        self.went: dict[str, float] = {}
        for kind, informer in self.objects.items():
            informer.subscribe(lambda kind=kind, informer=informer: self._tick_objects(kind, informer))

    def start(self) -> None:
        for informer in (*self.objects.values(), self.namespaces):
            informer.start()
        for informer in (*self.objects.values(), self.namespaces):
            informer.synced.wait(30)

    def stop(self) -> None:
        for informer in (*self.objects.values(), self.namespaces):
            informer.stop()

    def _tick_objects(self, kind: str, informer: Informer) -> None:
        now = time.monotonic()
        listed = set()
        for obj in informer.objects():
            key = f"{kind}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            listed.add(key)
            self.seen.setdefault(key, now)
            if obj["metadata"].get("deletionTimestamp"):
                self.asked.setdefault(key, now)
        for key in self.seen.keys() - listed:
            if key.startswith(f"{kind}/"):
                self.went.setdefault(key, now)

    def _tick(self) -> None:
        now = time.monotonic()
        for pod in self.pods.objects():
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            phase = pod["status"].get("phase")
            if phase in ("Running", "Succeeded"):
                self.running.setdefault(key, now)
            if phase == "Succeeded":
                self.done.setdefault(key, now)

    def _tick_namespaces(self) -> None:
        now = time.monotonic()
        listed = set()
        for ns in self.namespaces.objects():
            listed.add(ns["metadata"]["name"])
            if ns["metadata"].get("deletionTimestamp"):
                self.deleting.setdefault(ns["metadata"]["name"], now)
        for name in self.deleting.keys() - listed:
            self.gone.setdefault(name, now)

    def span(self, since: float) -> tuple[float, int]:
        starts = [t for t in self.running.values() if t >= since]
        ends = [t for t in self.done.values() if t >= since]
        return (max(ends) - min(starts) if starts and ends else 0.0), len(ends)

    def deletion(self, since: float) -> float:
        """How long the namespaces asked to go since ``since`` took, from the ask to gone (the longest)."""
        spans = [self.gone[n] - t for n, t in self.deleting.items() if t >= since and n in self.gone]
        return max(spans, default=0.0)

    def objects_deletion(self, since: float) -> float:
        """How long the Jobs, Services and pods first seen since ``since`` took to go: from the first Job's
        deletion seen (asked, or gone) to the last of them gone."""
        keys = [k for k, t in self.seen.items() if t >= since]
        jobs = [self.asked.get(k, self.went.get(k)) for k in keys if k.startswith("job/")]
        starts = [t for t in jobs if t is not None]
        ends = [self.went[k] for k in keys if k in self.went]
        return max(ends) - min(starts) if starts and ends else 0.0


#: Kinds that a run's objects leave behind on purpose: events expire by the API server's event TTL, and the
#: fake kubelet's Logs (kwok) are the bench's own, deleted by it after each run.
NOT_LEFTOVERS = ("events", "events.events.k8s.io", "logs.kwok.x-k8s.io")


class Namespace:
    """The existing namespace of ``--namespace``: created before the runs, its contents compared after each
    run with those before the first, deleted at the end."""

    def __init__(self, cp: ControlPlane, name: str) -> None:
        self.cp, self.name = cp, name
        kinds = cp.kubectl("api-resources", "--verbs=list,delete", "--namespaced", "-o", "name").split()
        self.kinds = [k for k in kinds if k not in NOT_LEFTOVERS]
        cp.create_namespace(name)
        self.before = self.contents()

    def contents(self) -> set[str]:
        """Every object in the namespace (of the kinds that can be listed and deleted), as ``kind/name``."""
        items = self.cp.get(",".join(self.kinds), "-n", self.name)["items"]
        return {f"{o['kind']}/{o['metadata']['name']}" for o in items}

    def left(self) -> list[str]:
        """What the run left in the namespace, right after it; then the fake kubelet's Logs go (not counted)."""
        left = sorted(self.contents() - self.before)
        self.cp.kubectl("delete", "logs.kwok.x-k8s.io", "--all", "-n", self.name, "--wait=true")
        return left

    def delete(self) -> None:
        self.cp.kubectl("delete", "namespace", self.name, "--ignore-not-found", "--wait=true", timeout=300)


def run_once(
    cp: ControlPlane,
    clock: PodClock,
    nodes: int,
    seconds: float,
    workdir: Path,
    profile: Path | None = None,
    namespace: Namespace | None = None,
) -> dict[str, float]:
    workdir.mkdir(parents=True)
    (workdir / "conftest.py").write_text(CONFTEST.format(seconds=seconds))
    (workdir / "test_scale.py").write_text(TEST)
    profiler = ["-m", "cProfile", "-o", str(profile / f"{workdir.name}.prof")] if profile else []
    cmd = [
        sys.executable,
        *profiler,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(workdir),
        *("--backend", "kubernetes", "--kubeconfig", str(cp.kubeconfig), "--image", IMAGE),
        *("--nodes", str(nodes), "--instance-type", TRN1, "--artifacts-dir", str(workdir / "artifacts")),
        *(("--namespace", namespace.name) if namespace else ()),
        str(workdir),
    ]
    env = {**os.environ, "PYTHONPATH": ""}
    started = time.monotonic()
    with open(workdir / "pytest.out", "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    span, pods = clock.span(started)
    deletion = clock.objects_deletion(started) if namespace else clock.deletion(started)
    if proc.returncode != 0:
        sys.stderr.write((workdir / "pytest.out").read_text()[-4000:])
        raise SystemExit(f"the suite failed (exit {proc.returncode}); see above")
    if namespace:
        left = namespace.left()
        if left:
            raise SystemExit(
                f"{workdir.name} left {len(left)} object(s) in namespace {namespace.name}: " + ", ".join(left)
            )
    return {
        "wall": wall,
        "running": span,
        "overhead": wall - span,
        "deletion": deletion,
        "rss_mib": usage.ru_maxrss / 1024,
        "pods": pods,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--run-seconds", type=float, default=5.0, help="how long each fake pod runs")
    ap.add_argument(
        "--profile", type=Path, metavar="DIR", help="profile each child into DIR; print its phases"
    )
    ap.add_argument("--kubeconfig", type=Path, help="use this running local cluster (its nodes are added to)")
    ap.add_argument("--name", default="rollcall", help="name of that cluster (hack/cluster.sh --name)")
    ap.add_argument(
        "--namespace",
        metavar="NAME",
        help="run every child inside this namespace (the suite's --namespace), created before the runs and "
        "deleted after them; fail if a run leaves anything in it",
    )
    args = ap.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="rollcall-scale-") as tmp:
        work = Path(tmp)
        if args.kubeconfig:
            cp = ControlPlane.attach(args.kubeconfig, args.name, work / "pod-logs")
        else:
            print(f"starting a local control plane with {args.nodes} {TRN1} nodes ...", flush=True)
            cp = ControlPlane.start(f"rollcall-scale-{os.getpid()}", work)
        try:
            have = len(cp.get("nodes", "-l", f"node.kubernetes.io/instance-type={TRN1}")["items"])
            if have < args.nodes:
                cp.add_nodes(args.nodes - have, TRN1)
            api = cp.api_client()
            kubelet = FakeKubelet(cp).start()
            clock = PodClock(api)
            clock.start()
            namespace = Namespace(cp, args.namespace) if args.namespace else None
            try:
                rows = [
                    run_once(
                        cp, clock, args.nodes, args.run_seconds, work / f"run-{i}", args.profile, namespace
                    )
                    for i in range(args.runs)
                ]
            finally:
                if namespace:
                    namespace.delete()
            phases = (
                [phase_table(args.profile / f"run-{i}.prof") for i in range(args.runs)]
                if args.profile
                else []
            )
            kubelet.stop()
            clock.stop()
        finally:
            cp.stop()

    ranks = args.nodes * 32
    print(f"\nkubernetes backend, {args.nodes} kwok nodes x 32 ranks = {ranks} ranks", end="")
    print(f"; each pod runs {args.run_seconds:g} s")
    target = TARGETS.get(args.nodes)
    if target:
        print(f"targets at {args.nodes} nodes: overhead < {target[0]:g} s, peak RSS < {target[1]:g} MiB\n")
    if args.namespace:
        print(
            f"mode: one existing namespace ({args.namespace}, --namespace), each run's Job and Service created "
            "and deleted there;\nnothing of any run was left in it\n"
            "clean-up: from the Job's deletion asked to the last of the Job, its pods and the Service gone;\n"
            "the child waits for it before its end, so it is part of the overhead\n"
        )
    else:
        print(
            "mode: a namespace per run, created and deleted by the run\n"
            "ns deletion: from the namespace's deletion asked to gone (kube-controller-manager starts on it "
            "5 s after the ask);\nthe child waits for it before its end, so it is part of the overhead\n"
        )
    columns = ("wall", "running", "overhead", "deletion", "rss_mib")
    heads = ("wall s", "pods ran s", "overhead s", "clean-up s" if args.namespace else "ns deletion s")
    heads += ("peak RSS MiB",)
    print(f"{'run':<7}" + "".join(f"{h:>15}" for h in heads) + f"{'pods':>6}")
    for i, r in enumerate(rows, 1):
        print(f"{i:<7}" + "".join(f"{r[c]:>15.1f}" for c in columns) + f"{r['pods']:>6.0f}")
    med = {c: statistics.median(r[c] for r in rows) for c in columns}
    print(f"{'median':<7}" + "".join(f"{med[c]:>15.1f}" for c in columns))
    if phases:
        print("\nwhere the child's seconds went (cProfile, main thread, wall clock; median of the runs)")
        for n, (name, _) in enumerate(phases[0]):
            print(f"  {name:<58}{statistics.median(p[n][1] for p in phases):>7.2f} s")


if __name__ == "__main__":
    main()
