"""The unit tests' environment: an allowlist, and a trap behind it that a leak would reach."""

import os
import socket
from pathlib import Path

from rollcall.options import resolve
from rollcall.suite import choose_backend
from rollcall_workload.contract import STRICT_ENV
from tests.unit.conftest import ALLOWED, Trap


def test_a_test_sees_only_the_allowlist_and_a_home_of_its_own(test_home):
    assert set(os.environ) <= ALLOWED | {"HOME", STRICT_ENV}
    assert os.environ["HOME"] == str(test_home)
    assert not (test_home / ".kube").exists()


def test_the_trap_counts_a_connection():
    trap = Trap()
    try:
        with socket.create_connection(("127.0.0.1", trap.port), timeout=5):
            pass
        assert trap.reached.wait(timeout=30)
        assert trap.seen() == 1
    finally:
        trap.close()


def test_every_way_of_finding_a_cluster_points_at_the_trap_behind_the_allowlist(trap):
    assert trap.armed["KUBERNETES_SERVICE_PORT"] == str(trap.port)
    assert f"127.0.0.1:{trap.port}" in Path(trap.armed["KUBECONFIG"]).read_text()
    # what the session's environment holds, a test does not see
    assert not set(trap.armed) & set(os.environ)
    # with it, the suite would choose that cluster; without it, it chooses the local backend
    assert choose_backend(resolve({}, trap.armed), trap.armed)[0] == "kubernetes"
    backend, why = choose_backend(resolve({}, os.environ), os.environ)
    assert backend == "local", why
