"""The ``control_plane`` session fixture: a real local Kubernetes control plane.

Mark tests with ``@pytest.mark.control_plane`` and take the ``control_plane`` fixture. The
cluster is started once per session (``hack/cluster.sh up``) and torn down at the end, also
when tests fail. ``ROLLCALL_TEST_KUBECONFIG=<path>`` reuses a running cluster instead (then
``ROLLCALL_TEST_CLUSTER_NAME`` names it for :meth:`ControlPlane.restart_apiserver`);
``ROLLCALL_TEST_K8S_VERSION=oldest`` starts it at the oldest Kubernetes the suite supports. When it
cannot be built or started, its tests fail under ``CI=true`` and are skipped elsewhere.

Under pytest-xdist the tests of tests/cluster and tests/k8s run on one worker, on its one cluster
(:mod:`tests.groups`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.ci import ci
from tests.groups import pytest_xdist_make_scheduler  # noqa: F401 (the groups, tests/groups.py)

from .controlplane import ControlPlane, ControlPlaneError, cluster_sh

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


#: Where hack/cluster.sh keeps each cluster's state, by name.
STATE_ROOT = Path(__file__).resolve().parents[2] / ".cluster"

#: The names of the clusters test sessions start, each ending in the session's pid, so that a dead session's
#: is known as such: the control plane's, and the real nodes' (tests/real).
SESSION_PREFIXES = ("rollcall-test-", "rollcall-real-")


def dead_sessions_clusters(root: Path = STATE_ROOT) -> list[str]:
    """The clusters that test sessions no longer running started and left (killed before their teardown)."""
    found = []
    for state in sorted(root.glob("rollcall-*")):
        prefix = next((p for p in SESSION_PREFIXES if state.name.startswith(p)), None)
        pid = state.name.removeprefix(prefix) if prefix else ""
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            found.append(state.name)
    return found


def _reclaim() -> None:
    """Remove what dead sessions left (their real nodes' bridge and namespaces would refuse a new start)."""
    for name in dead_sessions_clusters():
        warnings.warn(f"removing cluster {name!r}, left by a test session that is gone", stacklevel=1)
        _stop_name(name)


def start_owned(config: pytest.Config, prefix: str, workdir: Path, **kwargs: Any) -> ControlPlane:
    """Start this session's cluster ``<prefix><pid>``, its removal registered before anything starts.

    What dead sessions left is removed first. The removal runs at the very end of the session, also after
    failures, Ctrl-C and an interrupted start (removing a cluster that is not there is a no-op).
    """
    assert prefix in SESSION_PREFIXES, prefix
    _reclaim()
    name = f"{prefix}{os.getpid()}"
    config.add_cleanup(lambda: _stop_name(name))
    return ControlPlane.start(name, workdir, **kwargs)


def _start_or_attach(config: pytest.Config, workdir: Path) -> ControlPlane:
    reuse = os.environ.get("ROLLCALL_TEST_KUBECONFIG")
    if reuse:
        name = os.environ.get("ROLLCALL_TEST_CLUSTER_NAME", "rollcall")
        return ControlPlane.attach(Path(reuse), name, workdir / "pod-logs")
    return start_owned(config, "rollcall-test-", workdir)


def _stop_name(name: str) -> None:
    try:
        cluster_sh("down", "--name", name, timeout=300)
    except ControlPlaneError as exc:
        warnings.warn(f"could not tear down the local control plane {name!r}: {exc}", stacklevel=1)


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
