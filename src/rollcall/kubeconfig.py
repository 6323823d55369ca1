"""Which cluster configuration a session connects with: the one rule the backend choice and the client share.

In order: ``--kubeconfig``, then ``$KUBECONFIG``, then ``~/.kube/config`` when it exists, then the in-cluster
configuration when the pod's service environment is set. None of these: no cluster to talk to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


@dataclass(frozen=True)
class ClusterConfig:
    """Where the client's configuration comes from.

    Attributes:
        kubeconfig: the kubeconfig file to load (None with ``$KUBECONFIG``: the client reads it itself, or
            in-cluster).
        in_cluster: the pod's service account and environment.
        reason: what a person is told, e.g. ``KUBECONFIG=/k``.
    """

    kubeconfig: str | None
    in_cluster: bool
    reason: str


def cluster_config(kubeconfig: str | None, environ: Mapping[str, str] | None = None) -> ClusterConfig | None:
    """The configuration to connect with; None when there is none (see the module docstring)."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return ClusterConfig(kubeconfig, False, f"kubeconfig {kubeconfig}")
    if env.get("KUBECONFIG"):
        return ClusterConfig(None, False, f"KUBECONFIG={env['KUBECONFIG']}")
    default = Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"
    if default.is_file():
        return ClusterConfig(str(default), False, f"kubeconfig {default}")
    if env.get(IN_CLUSTER_ENV):
        return ClusterConfig(None, True, "in-cluster config")
    return None
