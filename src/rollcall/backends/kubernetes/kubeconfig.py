"""Which cluster configuration a session connects with: the one rule the backend choice and the client share.

In order: ``--kubeconfig``, then ``$KUBECONFIG``, then ``~/.kube/config`` when it exists, then the in-cluster
configuration when the pod's service environment is set. None of these: no cluster to talk to.

:func:`check` reads the chosen kubeconfig before the client does, so that a file that is missing, unreadable,
not YAML or not a kubeconfig, and a ``--context`` it does not hold, each raise :class:`KubeconfigError`
naming the option and the fix (the client's own errors say neither).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollcall.options.kubernetes import KubernetesOptions
from rollcall.options.values import OptionError

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
#: What a person can do about a kubeconfig that cannot be used.
KUBECONFIG_FIX = (
    "pass --kubeconfig PATH of a kubeconfig file (e.g. written by `aws eks update-kubeconfig`), "
    "or leave --kubeconfig out to use $KUBECONFIG or ~/.kube/config"
)


class KubeconfigError(OptionError):
    """The kubeconfig or the context cannot be used; the message names the option and the fix."""


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


def detect(options: KubernetesOptions, environ: Mapping[str, str]) -> str | None:
    """Why ``--backend auto`` finds a cluster (``KUBECONFIG=/k``), or None: the wing's detection."""
    found = cluster_config(options.kubeconfig, environ)
    return found.reason if found is not None else None


@dataclass(frozen=True)
class Kubeconfig:
    """What :func:`check` found: the context to use and the API server it points at.

    Attributes:
        context: the context (``--context``, else the file's ``current-context``).
        server: the API server's URL.
        contexts: every context the files hold.
    """

    context: str
    server: str
    contexts: tuple[str, ...]


def check(
    kubeconfig: str | None,
    context: str | None,
    *,
    flag: str = "--kubeconfig",
    environ: Mapping[str, str] | None = None,
) -> Kubeconfig | None:
    """Read the kubeconfig :func:`cluster_config` chooses; check that ``context`` (or its current) is usable.

    ``flag`` says where ``kubeconfig`` came from (``--kubeconfig`` or ``ROLLCALL_KUBECONFIG``). None for the
    in-cluster configuration, which has no file. Raises :class:`KubeconfigError`.
    """
    env = os.environ if environ is None else environ
    found = cluster_config(kubeconfig, env)
    if found is None:
        raise KubeconfigError(
            "no cluster configuration: no --kubeconfig, KUBECONFIG is not set, there is no ~/.kube/config "
            f"and this is not a pod; {KUBECONFIG_FIX}"
        )
    if found.in_cluster:
        return None
    if found.kubeconfig is not None:
        where = given(flag, kubeconfig) if kubeconfig else found.reason
        return _context([_read(found.kubeconfig, where)], context, where)
    where = found.reason
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    existing = [p for p in paths if Path(p).expanduser().exists()]
    if not existing:
        raise KubeconfigError(
            f"{where}: none of its files exists; set KUBECONFIG to a kubeconfig file, or {KUBECONFIG_FIX}"
        )
    return _context([_read(p, f"{where}: {p}") for p in existing], context, where)


def given(flag: str, value: str) -> str:
    """``--kubeconfig /k`` or, from the environment, ``ROLLCALL_KUBECONFIG=/k``."""
    return f"{flag}={value}" if flag.isupper() else f"{flag} {value}"


def _read(path: str, named: str) -> dict[str, Any]:
    """The kubeconfig file at ``path`` as a mapping; else :class:`KubeconfigError` saying what is wrong."""
    file = Path(path).expanduser()
    if not file.exists():
        raise KubeconfigError(f"{named}: no such file; {KUBECONFIG_FIX}")
    if file.is_dir():
        raise KubeconfigError(f"{named}: is a directory, not a kubeconfig file; {KUBECONFIG_FIX}")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise KubeconfigError(
            f"{named}: cannot be read ({why}); make it readable, or {KUBECONFIG_FIX}"
        ) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "unreadable"
        raise KubeconfigError(f"{named}: not YAML ({problem}{at}); {KUBECONFIG_FIX}") from None
    if not isinstance(doc, dict) or not any(key in doc for key in ("clusters", "contexts", "users")):
        raise KubeconfigError(
            f"{named}: not a kubeconfig (no clusters, contexts or users in it); {KUBECONFIG_FIX}"
        )
    return doc


def _named(items: Any) -> dict[str, dict[str, Any]]:
    """A kubeconfig list (``[{name, context|cluster|user}]``) by name; the first of a name wins."""
    out: dict[str, dict[str, Any]] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.setdefault(item["name"], item)
    return out


def _context(docs: Sequence[dict[str, Any]], context: str | None, where: str) -> Kubeconfig:
    contexts: dict[str, dict[str, Any]] = {}
    clusters: dict[str, dict[str, Any]] = {}
    current = None
    for doc in docs:
        for name, item in _named(doc.get("contexts")).items():
            contexts.setdefault(name, item)
        for name, item in _named(doc.get("clusters")).items():
            clusters.setdefault(name, item)
        current = current or doc.get("current-context") or None
    names = tuple(contexts)
    listed = ", ".join(names) if names else "none"
    if context is not None and context not in contexts:
        raise KubeconfigError(
            f"--context {context}: no such context in {where}; its contexts: {listed}"
            + (f" (current: {current})" if current else "")
            + "; use --context NAME with one of them"
        )
    chosen = context or current
    if not chosen:
        raise KubeconfigError(f"{where} has no current-context; pass --context NAME (its contexts: {listed})")
    if chosen not in contexts:
        raise KubeconfigError(
            f"{where}: its current-context {chosen} is not among its contexts ({listed}); pass --context NAME"
        )
    cluster_name = (contexts[chosen].get("context") or {}).get("cluster")
    cluster = (clusters.get(cluster_name) or {}).get("cluster") if cluster_name else None
    server = cluster.get("server") if isinstance(cluster, dict) else None
    if not server:
        raise KubeconfigError(
            f"{where}: context {chosen} names cluster {cluster_name or '(none)'}, which has no server URL; "
            "fix the kubeconfig or pass --context NAME of another context"
        )
    return Kubeconfig(chosen, str(server), names)
