"""Before anything is created: the API server answers, and it lets the suite do what a run does.

:func:`check` asks the server for its version (one request, bounded by :data:`PROBE_TIMEOUT_S`, not
retried), then, with one ``SelfSubjectAccessReview`` per right, whether the session's user may do each thing
the suite's ClusterRole (``manifests/rbac/clusterrole.yaml``, the one list of what a run needs) grants: the
rules there are read, not repeated here. A right only an option needs (``--check-device-plugins``) is asked
only with that option. The namespaced rights are asked of a namespace named as a run's
would be (each run creates its own, so none exists yet).

An unreachable server raises :class:`Unreachable` naming its URL and the kubeconfig and context it came from;
a right the server refuses raises :class:`Forbidden` naming the verb, the resource and the namespace, and
pointing at ``manifests/rbac/``. Both are :class:`~rollcall.options.values.OptionError`: a usage error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.api import JOBSET_API_VERSION
from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.backends.kubernetes.manifests import load
from rollcall.backends.kubernetes.views import AccessReview
from rollcall.options.values import OptionError

log = logging.getLogger(__name__)

#: Seconds to wait for the API server's first answer (connect, then read).
PROBE_TIMEOUT_S = (3.0, 10.0)
#: The suite's ClusterRole, in the manifests.
CLUSTER_ROLE = "rbac/clusterrole.yaml"
#: Resources without a namespace, and those the suite reads in every namespace at once.
CLUSTER_SCOPED = frozenset({"nodes", "namespaces"})
ALL_NAMESPACES = frozenset({"daemonsets"})
#: Rights only some options need, by the option's name (``check_device_plugins``: ``--check-device-plugins``).
ONLY_WITH = {
    ("apps", "daemonsets"): "check_device_plugins",
    ("jobset.x-k8s.io", "jobsets"): "jobset",
    ("", "secrets"): "secrets",  # a run whose workload has secret variables (rollcall.secrets)
}
#: Verbs of a resource only some options need (the others' verbs on it every run needs).
VERBS_ONLY_WITH = {
    ("", "nodes", "patch"): "mark_nodes",
    ("", "pods", "deletecollection"): "namespace",
    ("", "secrets", "delete"): "namespace",  # a run's own namespace goes whole, its Secret with it
}


class Unreachable(OptionError):
    """The API server did not answer, or refused the credentials."""


class Forbidden(OptionError):
    """The API server does not let the session's user do something a run does."""


@dataclass(frozen=True)
class Right:
    """One thing a run does: ``verb`` on ``resource`` (with ``subresource``) of API ``group``."""

    verb: str
    group: str
    resource: str
    subresource: str = ""

    def namespace(self, run: str) -> str | None:
        """Where the right is needed: ``run``'s namespace, ``""`` (all of them) or None (no namespace)."""
        if self.resource in CLUSTER_SCOPED:
            return None
        return "" if self.resource in ALL_NAMESPACES else run

    def where(self, run: str) -> str:
        """``in namespace x``, ``in every namespace`` or ``at the cluster scope``."""
        namespace = self.namespace(run)
        if namespace is None:
            return "at the cluster scope"
        return f"in namespace {namespace} (a run's own)" if namespace else "in every namespace"

    @property
    def what(self) -> str:
        """``pods/log``, ``jobs.batch``: the resource as kubectl names it."""
        group = f".{self.group}" if self.group else ""
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.resource}{sub}{group}"

    def __str__(self) -> str:
        return f"{self.verb} {self.what}"


def rights(options: Iterable[str] = ()) -> list[Right]:
    """Every right of the suite's ClusterRole, less those only an option not in ``options`` needs."""
    role = load(CLUSTER_ROLE)
    wanted = set(options)
    found = []
    for rule in role["rules"]:
        for group in rule.get("apiGroups") or [""]:
            for name in rule["resources"]:
                resource, _, sub = name.partition("/")
                needs = ONLY_WITH.get((group, resource))
                if needs is not None and needs not in wanted:
                    continue
                found += [
                    Right(verb, group, resource, sub)
                    for verb in rule["verbs"]
                    if VERBS_ONLY_WITH.get((group, resource, verb), "") in ("", *wanted)
                ]
    return found


def check(kube: Kube, namespace: str, options: Iterable[str] = ()) -> None:
    """The server answers and grants every right a run in ``namespace`` needs (see the module docstring).

    ``options`` are the options in use that need rights of their own (by name, as :data:`ONLY_WITH`).
    """
    probe(kube)
    needed = rights(options)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda r: _review(kube, r, namespace), needed))
    if None in answers:
        return  # the server does not answer access reviews: the run's own calls will say what is refused
    refused = [r for r, allowed in zip(needed, answers, strict=True) if allowed is False]
    if refused:
        raise Forbidden(_forbidden(kube, namespace, refused))


def probe(kube: Kube) -> None:
    """One request to the server, not retried: :class:`Unreachable` when it does not answer."""
    try:
        call(kube.version.get_code, retry_s=0, timeout=PROBE_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 401 and not _sends_credentials(kube):
            raise Unreachable(
                f"the API server {kube.server} (from {kube.source}) refused the request: {message_of(exc)}: "
                "the kubeconfig's user gave no credentials (an exec credential plugin that fails, such as "
                "`aws eks get-token` without AWS credentials, gives none: run it to see why); fix that user, "
                "or pass --kubeconfig/--context of another"
            ) from None
        if exc.status == 401:
            raise Unreachable(
                f"the API server {kube.server} (from {kube.source}) refused the credentials: "
                f"{message_of(exc)}; renew them (e.g. `aws eks update-kubeconfig`), or pass "
                "--kubeconfig/--context of others"
            ) from None
        if exc.status and exc.status < 500:
            return  # it answered
        raise Unreachable(_unreachable(kube, message_of(exc))) from None
    except Exception as exc:  # refused, reset, timed out, TLS: urllib3 says why in its reason
        raise Unreachable(_unreachable(kube, str(getattr(exc, "reason", None) or message_of(exc)))) from None


#: What urllib3 and ssl say of a server certificate the client does not trust, or of another host's.
_CERTIFICATE_ERRORS = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "hostname mismatch")


def _sends_credentials(kube: Kube) -> bool:
    """Whether the client holds any credential to send: a token, a client certificate or a password."""
    c = kube.api.configuration
    return bool(any((c.api_key or {}).values()) or c.cert_file or c.username)


def _unreachable(kube: Kube, why: str) -> str:
    if any(e in why for e in _CERTIFICATE_ERRORS):
        return (
            f"the API server {kube.server} (from {kube.source}) answered with a certificate the kubeconfig "
            f"does not trust: {why}; fix the cluster's certificate-authority-data (or server address) in the "
            "kubeconfig (e.g. `aws eks update-kubeconfig` again), or pass --kubeconfig/--context of another"
        )
    return (
        f"cannot reach the API server {kube.server} (from {kube.source}): {why}; check that the cluster is "
        "up and reachable from here, or pass --kubeconfig/--context of another"
    )


def _review(kube: Kube, right: Right, run: str) -> bool | None:
    """Whether the server allows ``right``; None when it does not answer access reviews."""
    attributes: dict[str, Any] = {"verb": right.verb, "group": right.group, "resource": right.resource}
    if right.subresource:
        attributes["subresource"] = right.subresource
    namespace = right.namespace(run)
    if namespace is not None:
        attributes["namespace"] = namespace
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    try:
        answer = call(kube.authorization.create_self_subject_access_review, body, retry_s=10)
    except ApiException as exc:
        log.warning("could not review the suite's rights (%s): %s", right, message_of(exc))
        return None
    return AccessReview(answer).allowed


def _forbidden(kube: Kube, run: str, refused: list[Right]) -> str:
    verbs: dict[tuple[str, str], list[str]] = {}
    for right in refused:  # one entry per resource: ``get, list nodes at the cluster scope``
        verbs.setdefault((right.what, right.where(run)), []).append(right.verb)
    shown = "; ".join(f"{', '.join(vs)} {what} {where}" for (what, where), vs in verbs.items())
    return (
        f"Forbidden: the API server {kube.server} (from {kube.source}) does not let this user {shown}. "
        "The suite's RBAC must grant it: `kubectl apply -f manifests/rbac/` (ClusterRole rollcall), bound "
        "to this user or service account; or pass --kubeconfig/--context of one that has it"
    )


#: Where the JobSet controller comes from, for the message of a cluster without it.
JOBSET_INSTALL = (
    "kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"
)


class NoJobSetApi(OptionError):
    """``--job-kind jobset`` on a cluster that does not serve JobSet's API."""


def check_jobset_api(kube: Kube) -> None:
    """The server serves JobSets (``jobset.x-k8s.io/v1alpha2``): :class:`NoJobSetApi` when it does not.

    Asked before anything is created, with ``--job-kind jobset``; the CRD alone is not enough to run, but
    without it nothing could be created. A controller that is not running shows as a JobSet that makes no
    Job, which the run's own capacity bound names.
    """
    try:
        found = call(kube.jobset.get_api_resources, retry_s=10)
    except ApiException as exc:
        if exc.status != 404:
            raise
        found = {}
    if not any(r.get("name") == "jobsets" for r in found.get("resources", [])):
        raise NoJobSetApi(
            f"--job-kind jobset: the cluster ({kube.source}) does not serve JobSets "
            f"({JOBSET_API_VERSION}: no jobsets.jobset.x-k8s.io CRD); install the JobSet controller "
            f"(`{JOBSET_INSTALL}`), or leave --job-kind out to run the roll call as an Indexed Job"
        )
