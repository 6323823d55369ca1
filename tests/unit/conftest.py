"""Every unit test starts from an allowlisted environment, with a trap armed behind it.

The environment a unit test sees is :data:`ALLOWED` of the one pytest was started in, a ``HOME`` of the
session's own (empty: no ``~/.kube/config``, no caches of the user's) and what the test sets itself. Nothing
of the user's cluster or settings leaks in: no ``KUBECONFIG``, ``KUBERNETES_SERVICE_*``, ``ROLLCALL_*``, proxy
variable, ``CUDA_VISIBLE_DEVICES``, ``XDG_CACHE_HOME`` or ``ROLLCALL_CACHE_DIR``.

Behind it, the session's own environment points every way of finding a cluster (``KUBECONFIG``, the
in-cluster ``KUBERNETES_SERVICE_HOST``/``PORT``, ``ROLLCALL_KUBECONFIG``) at :class:`Trap`, a local socket
that listens and records who connects: code that reads the environment around the allowlist (at import, in
a subprocess given a saved copy) reaches it, and the test that did fails by name.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollcall_workload.contract import STRICT_ENV

#: What a unit test keeps of the environment pytest started in: the executable search path, the locale and
#: the temporary directory, whether it runs in CI (tests fail rather than skip there), the interpreter's
#: own path, pytest's (and pytest-xdist's) own variables, and Triton's interpreter switch.
ALLOWED = frozenset(
    {
        "PATH",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TMPDIR",
        "CI",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "PYTEST_CURRENT_TEST",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        # a test that runs pytest in a process of its own for Triton's interpreter sets it there
        "TRITON_INTERPRET",
    }
)


class Trap:
    """A local listening socket that records every connection made to it (and answers none)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        #: The session's environment variables that point at it.
        self.armed: dict[str, str] = {}
        self.connections = 0
        #: Set at the first connection.
        self.reached = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="rollcall-test-trap", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            with self._lock:
                self.connections += 1
            self.reached.set()
            conn.close()

    def seen(self) -> int:
        """How many connections reached the trap so far."""
        with self._lock:
            return self.connections

    def close(self) -> None:
        self._sock.close()


def trap_kubeconfig(path: Path, port: int) -> Path:
    """A kubeconfig whose one cluster is the trap."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: trap\n"
        f"clusters:\n- name: trap\n  cluster:\n    server: https://127.0.0.1:{port}\n"
        "    insecure-skip-tls-verify: true\n"
        "contexts:\n- name: trap\n  context:\n    cluster: trap\n    user: trap\n"
        "users:\n- name: trap\n  user:\n    token: trap\n"
    )
    return path


@pytest.fixture(scope="session")
def trap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trap]:
    """The trap, armed in the session's own environment behind every test's allowlist."""
    t = Trap()
    config = trap_kubeconfig(tmp_path_factory.mktemp("trap") / "kubeconfig", t.port)
    armed = {
        "KUBECONFIG": str(config),
        "ROLLCALL_KUBECONFIG": str(config),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(t.port),
    }
    t.armed = armed
    saved = {k: os.environ.get(k) for k in armed}
    os.environ.update(armed)
    try:
        yield t
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        t.close()


@pytest.fixture(scope="session")
def test_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``HOME`` every unit test gets: the session's own, empty at its start."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch: pytest.MonkeyPatch, trap: Trap, test_home: Path) -> Iterator[None]:
    """Only :data:`ALLOWED` of the environment and the session's ``HOME``; no connection to the trap."""
    for name in list(os.environ):
        if name not in ALLOWED:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(test_home))
    # the workload's lines are held strictly to the contract's records, in every workload a test starts too
    monkeypatch.setenv(STRICT_ENV, "1")
    before = trap.seen()
    yield
    reached = trap.seen() - before
    assert reached == 0, (
        f"this test connected {reached} time(s) to the cluster the session's environment names "
        "(KUBECONFIG, KUBERNETES_SERVICE_HOST): it read the environment around the allowlist"
    )
