"""The ``control_plane`` session fixture: a real local Kubernetes control plane.

Mark tests with ``@pytest.mark.control_plane`` and take the ``control_plane`` fixture. The
cluster is started once per session (``hack/cluster.sh up``) and torn down at the end, also
when tests fail. ``ROLLCALL_TEST_KUBECONFIG=<path>`` reuses a running cluster instead (then
``ROLLCALL_TEST_CLUSTER_NAME`` names it for :meth:`ControlPlane.restart_apiserver`). When it
cannot be built or started, its tests fail under ``CI=true`` and are skipped elsewhere.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import NoReturn

import pytest

from tests.ci import ci

from .controlplane import ControlPlane, ControlPlaneError

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


# One cluster per test session, even when another conftest re-exports the fixture (which gives
# pytest a second fixture definition): the outcome is kept on the config.
_SESSION_CLUSTER = pytest.StashKey["ControlPlane | ControlPlaneError"]()


def _start_or_attach(config: pytest.Config, workdir: Path) -> ControlPlane:
    reuse = os.environ.get("ROLLCALL_TEST_KUBECONFIG")
    if reuse:
        name = os.environ.get("ROLLCALL_TEST_CLUSTER_NAME", "rollcall")
        return ControlPlane.attach(Path(reuse), name, workdir / "pod-logs")
    cp = ControlPlane.start(f"rollcall-test-{os.getpid()}", workdir)
    # Runs at the very end of the session, also after failures and Ctrl-C.
    config.add_cleanup(lambda: _stop(cp))
    return cp


def _stop(cp: ControlPlane) -> None:
    try:
        cp.stop()
    except ControlPlaneError as exc:
        warnings.warn(f"could not tear down the local control plane: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ControlPlane:
    config = request.config
    outcome = config.stash.get(_SESSION_CLUSTER, None)
    if outcome is None:
        try:
            outcome = _start_or_attach(config, tmp_path_factory.mktemp("control-plane"))
        except ControlPlaneError as exc:
            outcome = exc
        config.stash[_SESSION_CLUSTER] = outcome
    if isinstance(outcome, ControlPlaneError):
        _unavailable(str(outcome))
    return outcome


@pytest.fixture(autouse=True)
def _control_plane_marker(request: pytest.FixtureRequest) -> None:
    """Start the cluster for marked tests even if they do not take the fixture."""
    if request.node.get_closest_marker(MARKER):
        request.getfixturevalue("control_plane")
