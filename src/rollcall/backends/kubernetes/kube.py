"""Talking to the API server: the client and its configuration, retries, raw JSON calls, deletions.

Everything read from the server stays plain JSON (``dict``), as the API sends it: cheaper than the client's
models, and the same shape as the manifests. Requests go through the client's ``ApiClient`` alone
(:class:`.api.Api`: the generated typed APIs' method names, arguments and answers, without importing those
modules). Transient failures (HTTP 429 and 5xx, refused or reset connections, timeouts) are retried
with exponential backoff and jitter for at most :data:`API_RETRY_S` seconds; anything else is raised at once.
Watching and waiting on what the server holds: :mod:`.watch`.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from rollcall.backends.kubernetes.api import APPS, AUTHORIZATION, BATCH, CORE, CUSTOM, JOBSET, VERSION, Api
from rollcall.backends.kubernetes.kubeconfig import KubeconfigError, check, cluster_config, given
from rollcall.backends.kubernetes.views import View, items

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: How long transient API errors are retried before giving up (covers an API server restart).
API_RETRY_S = 120.0
#: Connect timeout, and read timeout of ordinary (non-streaming) requests.
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class KubeError(RuntimeError):
    """The API server refused or failed a request; the message says what and why."""


@dataclass
class Kube:
    """One API client and the APIs the suite uses (:class:`Api`: the generated typed APIs' methods)."""

    api: client.ApiClient
    source: str

    @property
    def server(self) -> str:
        """The API server's URL."""
        return str(self.api.configuration.host)

    @property
    def core(self) -> Api:
        """The core/v1 API."""
        return Api(self.api, CORE)

    @property
    def batch(self) -> Api:
        """The batch/v1 API."""
        return Api(self.api, BATCH)

    @property
    def apps(self) -> Api:
        """The apps/v1 API."""
        return Api(self.api, APPS)

    @property
    def jobset(self) -> Api:
        """sigs.k8s.io/jobset's API (jobset.x-k8s.io/v1alpha2)."""
        return Api(self.api, JOBSET)

    @property
    def custom(self) -> Api:
        """Custom resources (Karpenter's NodePools and NodeClaims)."""
        return Api(self.api, CUSTOM)

    @property
    def version(self) -> Api:
        """The server's version (``/version``)."""
        return Api(self.api, VERSION)

    @property
    def authorization(self) -> Api:
        """The authorization.k8s.io/v1 API (access reviews)."""
        return Api(self.api, AUTHORIZATION)

    def close(self) -> None:
        """Close the connection pool."""
        self.api.close()  # type: ignore[no-untyped-call]


def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    pool_size: int = 256,
    flag: str = "--kubeconfig",
) -> Kube:
    """A client from the configuration :func:`.kubeconfig.cluster_config` chooses.

    The kubeconfig and the context are checked first (:func:`.kubeconfig.check`): a bad one raises
    :class:`~.kubeconfig.KubeconfigError` naming ``flag`` (where ``kubeconfig`` came from) and the
    fix, as does one the client cannot load. ``pool_size`` bounds the connections kept open: every followed
    log holds one. Nothing is sent to the server.
    """
    cfg = client.Configuration()
    found = cluster_config(kubeconfig)
    if found is not None and found.in_cluster:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        source = found.reason
    else:
        checked = check(kubeconfig, context, flag=flag)
        where = given(flag, kubeconfig) if kubeconfig else (found.reason if found else "kubeconfig")
        source = where + (f", context {checked.context}" if checked else "")
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=found.kubeconfig if found else None,
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubeconfigError(
                f"{source}: the client cannot use it: {exc}; fix the kubeconfig's credentials or pass "
                "--context NAME of another context"
            ) from None
    cfg.connection_pool_maxsize = pool_size
    return Kube(client.ApiClient(cfg), source)


def delete_namespace(kube: Kube, name: str) -> bool:
    """Ask for ``name`` to be deleted (foreground propagation); False when it was already gone.

    Its Jobs are deleted first, their pods in the background, so that the pods lose the Jobs' tracking
    finalizer at once. A Job with a ``podFailurePolicy`` keeps that finalizer on a pod being deleted until the
    pod reaches a terminal phase, which no kubelet reports for a pod of a lost node; and the namespace's own
    deletion removes pods before the Jobs that hold them. Its JobSets go before their Jobs, whose
    controller would make them again.
    """
    try:
        jobs = items(call(kube.batch.list_namespaced_job, name, retry_s=10))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    delete_jobsets(kube, name)
    for job in jobs:
        try:
            call(
                kube.batch.delete_namespaced_job,
                View(job).name,
                name,
                body={"propagationPolicy": "Background"},
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
    try:
        call(kube.core.delete_namespace, name, body={"propagationPolicy": "Foreground"})
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def delete_labelled(kube: Kube, namespace: str, selector: str, secret: str | None = None) -> list[str]:
    """Ask for the Jobs, Services and pods in ``namespace`` matching the label ``selector`` to be deleted.

    Jobs and Services go with foreground propagation (a Job's pods, a Service's EndpointSlices first). The
    pods are then deleted in one request (a ``deletecollection``, as the namespace controller does), each
    with its own grace period: left to the garbage collector, a Job's pods go one at a time, each a few
    requests at kube-controller-manager's client rate (20 per second by default): about 4 s for 64 pods. A
    server that refuses that request (a ClusterRole from before it) leaves them to the collector, as before.
    Returns the JobSets, Jobs and Services asked, as ``jobset/<name>``, ``job/<name>`` and ``service/<name>``
    (JobSets first: their controller would make their Jobs again). The run's Secret ``secret`` is deleted by
    its name (the suite may not list Secrets), ``secret/<name>`` where it was there.
    """
    asked = [f"jobset/{name}" for name in delete_jobsets(kube, namespace, selector)]
    kinds = (
        ("job", kube.batch.list_namespaced_job, kube.batch.delete_namespaced_job),
        ("service", kube.core.list_namespaced_service, kube.core.delete_namespaced_service),
    )
    for kind, list_fn, delete_fn in kinds:
        for obj in items(call(list_fn, namespace, label_selector=selector)):
            name = View(obj).name
            try:
                call(delete_fn, name, namespace, body={"propagationPolicy": "Foreground"})
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            asked.append(f"{kind}/{name}")
    if secret is not None:
        try:
            call(kube.core.delete_namespaced_secret, secret, namespace)
            asked.append(f"secret/{secret}")
        except ApiException as exc:
            if exc.status != 404:
                raise
    try:
        call(kube.core.delete_collection_namespaced_pod, namespace, label_selector=selector)
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
        log.info("pods of %s in %s left to the garbage collector: %s", selector, namespace, message_of(exc))
    return asked


def delete_jobsets(kube: Kube, namespace: str, selector: str | None = None) -> list[str]:
    """Ask for the JobSets in ``namespace`` (matching ``selector``) to be deleted; returns those asked.

    In the background: their Jobs and Services go with them. None where the cluster serves no JobSets, or the
    user may not list them (only ``--job-kind jobset`` is granted that).
    """
    api = kube.jobset
    try:
        found = items(call(api.list_namespaced_job_set, namespace, label_selector=selector, retry_s=10))
    except ApiException as exc:
        if exc.status in (403, 404):
            return []
        raise
    asked = []
    for jobset in found:
        name = View(jobset).name
        try:
            call(api.delete_namespaced_job_set, name, namespace, body={"propagationPolicy": "Background"})
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        asked.append(name)
    return asked


# -- errors and retries ---------------------------------------------------------------------------------

_TRANSIENT_ERRORS = (
    ConnectionError,
    TimeoutError,
    http.client.HTTPException,
    urllib3.exceptions.HTTPError,
    ssl.SSLEOFError,
)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying ``exc`` may help: 429, 5xx, or a connection that failed, reset or timed out."""
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUS or not exc.status
    return isinstance(exc, _TRANSIENT_ERRORS)


def message_of(exc: BaseException) -> str:
    """The server's message for an API error (``Status.message``), else ``str(exc)``, on one line."""
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "")
            text = str(body.get("message") or exc.reason)
        except (ValueError, AttributeError):
            text = f"{exc.reason}: {exc.body}" if exc.body else str(exc.reason)
        return f"HTTP {exc.status}: {text}"
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def _wait_retry_after(state: RetryCallState) -> float:
    """Honour a 429's Retry-After header (capped), else back off exponentially with jitter."""
    exc = state.outcome.exception() if state.outcome else None
    headers = getattr(exc, "headers", None) or {}
    try:
        return min(float(headers.get("Retry-After", "")), 10.0)
    except (TypeError, ValueError):
        return float(_BACKOFF(state))


_BACKOFF = wait_exponential(multiplier=0.2, max=5.0) + wait_random(0, 0.5)


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    if exc is not None:
        log.info("API call failed (attempt %d), retrying: %s", state.attempt_number, message_of(exc))


def retrying(bound_s: float = API_RETRY_S) -> Retrying:
    """A tenacity loop that retries transient API errors for at most ``bound_s`` seconds."""
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=_wait_retry_after,
        stop=stop_after_delay(bound_s),
        before_sleep=_log_retry,
        reraise=True,
    )


def call(
    fn: Callable[..., Any],
    *args: Any,
    retry_s: float = API_RETRY_S,
    timeout: tuple[float, float] = (CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
    **kwargs: Any,
) -> Obj:
    """Call an API method with retries and return its JSON body as a dict (``{}`` when empty).

    ``timeout`` is the connect and read timeout of each request.
    """
    for attempt in retrying(retry_s):
        with attempt:
            resp = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            data = resp.data
            body: Obj = json.loads(data) if data else {}
            return body
    raise AssertionError("unreachable")  # pragma: no cover


def create(fn: Callable[..., Any], *args: Any, body: Obj, **kwargs: Any) -> Obj:
    """Create an object with retries; a 409 after a failed attempt means that attempt did create it."""
    attempts = 0

    def once(*a: Any, **kw: Any) -> Any:
        nonlocal attempts
        attempts += 1
        return fn(*a, **kw)

    try:
        return call(once, *args, body=body, field_validation="Strict", **kwargs)
    except ApiException as exc:
        if exc.status == 409 and attempts > 1:
            log.info("%s %s was created by an earlier attempt", body.get("kind"), View(body).name)
            return body
        raise
