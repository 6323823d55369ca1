"""The suite as CI runs it: a pytest process with the kubernetes backend, cancelled, timed out, or in parallel.

Each test starts a child pytest on a small test file that uses the ``rollcall`` fixture against the local
control plane, and checks what it leaves behind.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.manifests import JOB_LABEL
from tests.waiting import wait_until

from .conftest import IMAGE, TRN1, suite_namespaces, suite_objects

pytestmark = pytest.mark.control_plane
pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from rollcall.backends.kubernetes.manifests import PodExtras

@pytest.fixture(scope="session", autouse=True)
def steer_fake_nodes(rollcall_suite):
    rollcall_suite.backend.extras = PodExtras(annotations={{"rollcall.test/run-duration": "{duration}"}})
"""

# pytest-timeout's thread method fired on the parent's word: the parent sends SIGUSR1 once it saw the run's pods
# running, and the handler runs pytest-timeout's own timer function (stacks, then os._exit(1)) in a thread, as
# the timer would. The marker's long timeout only bounds a child that never gets the signal.
TIMEOUT_ON_SIGNAL = """
import signal
import threading

import pytest
import pytest_timeout


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    def fire(signum, frame):
        threading.Thread(target=pytest_timeout.timeout_timer, args=(item, settings), name="timeout").start()

    signal.signal(signal.SIGUSR1, fire)
    return None  # pytest-timeout still sets its own timer
"""
THREAD_TIMEOUT = '@pytest.mark.timeout(600, method="thread")'

ONE_TEST = """
import pytest

{marker}
def test_roll_call(rollcall):
    record = rollcall()
    assert record.result.passed, record.result.message()
"""

TWO_TESTS = (
    ONE_TEST
    + """

def test_roll_call_again(rollcall):
    record = rollcall()
    assert record.result.passed, record.result.message()
"""
)


def args(kubeconfig: Path, pytester: pytest.Pytester, *extra: str) -> list[str]:
    return [
        "-p",
        "no:cacheprovider",
        "--backend",
        "kubernetes",
        "--kubeconfig",
        str(kubeconfig),
        "--image",
        IMAGE,
        "--instance-type",
        TRN1,
        "--nodes",
        "2",
        "--artifacts-dir",
        str(pytester.path / "artifacts"),
        *extra,
    ]


def start(pytester: pytest.Pytester, cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *cmd],
        cwd=pytester.path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def new_namespaces(kube, before: set[str]) -> set[str]:
    return {n["metadata"]["name"] for n in suite_namespaces(kube)} - before


def running_pods(kube, namespace: str) -> int:
    pods = call(kube.core.list_namespaced_pod, namespace, label_selector=JOB_LABEL)["items"]
    return len([p for p in pods if p["status"].get("phase") == "Running"])


def test_sigterm_during_the_wait_deletes_the_namespace(pytester, control_plane, kube, kubelet):
    pytester.makeconftest(CONFTEST.format(duration="120s"))
    pytester.makepyfile(test_job=ONE_TEST.format(marker=""))
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    child = start(pytester, args(control_plane.kubeconfig, pytester))
    try:
        (namespace,) = wait_until("the child's namespace", lambda: new_namespaces(kube, before), timeout=60)
        wait_until("its pods to run", lambda: running_pods(kube, namespace) == 2, timeout=60)
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 2, out  # interrupted
    assert "KeyboardInterrupt" in out and "signal SIGTERM" in out, out
    assert "[rollcall] created " in out, "progress is shown on the terminal"
    assert re.search(
        r"\[rollcall\] rollcall-\S+ +\d+s: pending \d, running \d, succeeded 0, failed 0 of 2", out
    )
    assert namespace not in {n["metadata"]["name"] for n in suite_namespaces(kube)}, "deleted before exiting"


def time_out_once_running(child: subprocess.Popen[str], kube, namespace: str) -> str:
    """Fire the child's pytest-timeout (thread method) once the run's 2 pods run in ``namespace``; its output."""
    wait_until("the run's pods to run", lambda: running_pods(kube, namespace) == 2, timeout=60)
    child.send_signal(signal.SIGUSR1)
    out, _ = child.communicate(timeout=120)
    return out


def test_pytest_timeouts_thread_method_still_leaves_nothing_behind(pytester, control_plane, kube, kubelet):
    pytester.makeconftest(CONFTEST.format(duration="120s") + TIMEOUT_ON_SIGNAL)
    pytester.makepyfile(test_job=ONE_TEST.format(marker=THREAD_TIMEOUT))
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    child = start(pytester, args(control_plane.kubeconfig, pytester))
    try:
        (namespace,) = wait_until("the child's namespace", lambda: new_namespaces(kube, before), timeout=60)
        out = time_out_once_running(child, kube, namespace)
    finally:
        if child.poll() is None:
            child.kill()

    assert child.returncode == 1 and "+ Timeout +" in out, out  # os._exit: no teardown, no atexit
    wait_until(
        "the session's watcher process to delete the namespace",
        lambda: namespace not in {n["metadata"]["name"] for n in suite_namespaces(kube)},
        timeout=30,
    )


def test_a_session_killed_outright_in_an_existing_namespace_leaves_it_and_nothing_of_its_run(
    pytester, control_plane, kube, kubelet
):
    control_plane.create_namespace("team-reaped")
    try:
        pytester.makeconftest(CONFTEST.format(duration="120s") + TIMEOUT_ON_SIGNAL)
        pytester.makepyfile(test_job=ONE_TEST.format(marker=THREAD_TIMEOUT))
        child = start(pytester, args(control_plane.kubeconfig, pytester, "--namespace", "team-reaped"))
        try:
            out = time_out_once_running(child, kube, "team-reaped")
        finally:
            if child.poll() is None:
                child.kill()

        assert child.returncode == 1 and "+ Timeout +" in out, out  # os._exit: no teardown, no atexit
        assert any(ns == "team-reaped" for ns, _pod in kubelet.served), "the run's pods ran there"
        wait_until(
            "the session's watcher process to delete the run's objects",
            lambda: not suite_objects(kube, "team-reaped"),
            timeout=60,
        )
        assert control_plane.get("namespace", "team-reaped")["status"]["phase"] == "Active"
    finally:
        control_plane.kubectl("delete", "namespace", "team-reaped", "--wait=false")


def test_a_namespace_that_does_not_exist_stops_the_session_as_a_usage_error(pytester, control_plane, kube):
    pytester.makeconftest(CONFTEST.format(duration="1s"))
    pytester.makepyfile(test_job=ONE_TEST.format(marker=""))
    before = {n["metadata"]["name"] for n in suite_namespaces(kube)}
    child = start(pytester, args(control_plane.kubeconfig, pytester, "--namespace", "team-nowhere"))
    out, _ = child.communicate(timeout=120)

    assert child.returncode == 4, out
    assert "--namespace team-nowhere: there is no such namespace" in out, out
    assert "Traceback" not in out
    assert not new_namespaces(kube, before)


def test_two_runs_in_parallel_never_collide(pytester, control_plane, kube, kubelet, ensure_nodes):
    ensure_nodes(4)
    pytester.makeconftest(CONFTEST.format(duration="3s"))
    pytester.makepyfile(test_jobs=TWO_TESTS.format(marker=""))
    served_before = set(kubelet.served)
    started = time.monotonic()
    result = pytester.runpytest_subprocess(*args(control_plane.kubeconfig, pytester, "-n", "2"), timeout=300)

    result.assert_outcomes(passed=2)
    namespaces = {ns for ns, _pod in kubelet.served - served_before}
    assert len(namespaces) == 2, namespaces
    logs = sorted((pytester.path / "artifacts").glob("*/*.log"))
    logs = [p for p in logs if not p.name.endswith(".monitor.log")]  # each pod's monitor sidecar's
    assert len(logs) == 4 and len({p.parent for p in logs}) == 2
    assert time.monotonic() - started < 120


def test_the_terminal_and_reports_of_a_passing_run(pytester, control_plane, kube, kubelet):
    pytester.makeconftest(CONFTEST.format(duration="1s"))
    pytester.makepyfile(test_job=ONE_TEST.format(marker=""))
    result = pytester.runpytest_subprocess(*args(control_plane.kubeconfig, pytester), timeout=300)

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "rollcall: backend=kubernetes*",
            "*[[]rollcall[]] created rollcall-*/test-roll-call-*: 2 pod(s) x 32 ranks",
            "*[[]rollcall[]] rollcall-*s: pending 0, running 0, succeeded 2, failed 0 of 2",
        ]
    )
    results = json.loads((pytester.path / "artifacts" / "results.json").read_text())
    (entry,) = results["tests"]
    assert entry["passed"] and entry["world_size"] == 64 and entry["backend"] == "kubernetes"
