"""The ``control_plane`` session fixture: a real local Kubernetes control plane.

Mark tests with ``@pytest.mark.control_plane`` and take the ``control_plane`` fixture. The
cluster is started once per session (``hack/cluster.sh up``) and torn down at the end, also
when tests fail. ``ROLLCALL_TEST_KUBECONFIG=<path>`` reuses a running cluster instead (then
``ROLLCALL_TEST_CLUSTER_NAME`` names it for :meth:`ControlPlane.restart_apiserver`). When it
cannot be built or started, its tests fail under ``CI=true`` and are skipped elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from .controlplane import ControlPlane, ControlPlaneError, ci

MARKER = "control_plane"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: needs the local Kubernetes control plane (hack/cluster.sh, kwok)"
    )


def _unavailable(reason: str) -> NoReturn:
    message = f"local control plane unavailable: {reason}"
    if ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    workdir = tmp_path_factory.mktemp("control-plane")
    reuse = os.environ.get("ROLLCALL_TEST_KUBECONFIG")
    if reuse:
        name = os.environ.get("ROLLCALL_TEST_CLUSTER_NAME", "rollcall")
        try:
            cp = ControlPlane.attach(Path(reuse), name, workdir / "pod-logs")
        except ControlPlaneError as exc:
            _unavailable(str(exc))
        yield cp
        return
    try:
        cp = ControlPlane.start(f"rollcall-test-{os.getpid()}", workdir)
    except ControlPlaneError as exc:
        _unavailable(str(exc))
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(autouse=True)
def _control_plane_marker(request: pytest.FixtureRequest) -> None:
    """Start the cluster for marked tests even if they do not take the fixture."""
    if request.node.get_closest_marker(MARKER):
        request.getfixturevalue("control_plane")
