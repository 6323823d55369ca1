"""Talking to the API server: client configuration, retries, raw JSON calls, and one watch-driven wait.

Everything read from the server stays plain JSON (``dict``), as the API sends it: cheaper than the client's
models, and the same shape as the manifests. Requests go through the client's ``ApiClient`` alone
(:class:`Api`: the generated typed APIs' method names, arguments and answers, without importing those
modules, whose pydantic models and ``validate_call`` wrappers cost about 0.3 s at every start, 1 s on a
loaded machine). Transient failures (HTTP 429 and 5xx, refused or reset connections, timeouts) are retried
with exponential backoff and jitter for at most :data:`API_RETRY_S` seconds; anything else is raised at once.

:class:`Informer` lists then watches one kind of object, re-listing when the server says the resource
version has expired (410 Gone) and reconnecting after transient errors, and keeps the newest copy of each
object. :func:`wait_for` re-tests a condition on every change any informer sees (and every ``poll_s``) under
one deadline, like ``kr8s``'s waits and e2e-framework's ``wait.For``.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

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

from rollcall.backends.kubernetes.kubeconfig import KubeconfigError, check, cluster_config, given
from rollcall.backends.kubernetes.views import View, items

log = logging.getLogger(__name__)

T = TypeVar("T")
Obj = dict[str, Any]

#: How long transient API errors are retried before giving up (covers an API server restart).
API_RETRY_S = 120.0
#: Connect timeout, and read timeout of ordinary (non-streaming) requests.
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0
#: Server-side timeout of each watch request; the informer simply watches again after it.
WATCH_TIMEOUT_S = 240
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class KubeError(RuntimeError):
    """The API server refused or failed a request; the message says what and why."""


@dataclass(frozen=True)
class Endpoint:
    """One REST operation of the API server.

    Its HTTP method, its path, and the path's parameters in the order the generated client's method takes
    them positionally (``name`` before ``namespace``; a body may follow them).
    """

    method: str
    path: str
    args: tuple[str, ...]


def _endpoints(prefix: str, namespaced: Mapping[str, str], cluster: Mapping[str, str]) -> dict[str, Endpoint]:
    """The generated client's method names of an API group's resources (by snake-case kind: plural)."""
    found: dict[str, Endpoint] = {}
    for kind, plural in namespaced.items():
        many = f"{prefix}/namespaces/{{namespace}}/{plural}"
        one = f"{many}/{{name}}"
        found |= {
            f"list_{kind}_for_all_namespaces": Endpoint("GET", f"{prefix}/{plural}", ()),
            f"list_namespaced_{kind}": Endpoint("GET", many, ("namespace",)),
            f"create_namespaced_{kind}": Endpoint("POST", many, ("namespace",)),
            f"delete_collection_namespaced_{kind}": Endpoint("DELETE", many, ("namespace",)),
            f"read_namespaced_{kind}": Endpoint("GET", one, ("name", "namespace")),
            f"replace_namespaced_{kind}": Endpoint("PUT", one, ("name", "namespace")),
            f"patch_namespaced_{kind}": Endpoint("PATCH", one, ("name", "namespace")),
            f"delete_namespaced_{kind}": Endpoint("DELETE", one, ("name", "namespace")),
        }
    for kind, plural in cluster.items():
        many, one = f"{prefix}/{plural}", f"{prefix}/{plural}/{{name}}"
        found |= {
            f"list_{kind}": Endpoint("GET", many, ()),
            f"create_{kind}": Endpoint("POST", many, ()),
            f"delete_collection_{kind}": Endpoint("DELETE", many, ()),
            f"read_{kind}": Endpoint("GET", one, ("name",)),
            f"replace_{kind}": Endpoint("PUT", one, ("name",)),
            f"patch_{kind}": Endpoint("PATCH", one, ("name",)),
            f"delete_{kind}": Endpoint("DELETE", one, ("name",)),
        }
    return found


_POD = "/api/v1/namespaces/{namespace}/pods/{name}"
#: The methods of the generated CoreV1Api, BatchV1Api, AppsV1Api, CustomObjectsApi, VersionApi and
#: AuthorizationV1Api that the suite and its tests call.
CORE = _endpoints(
    "/api/v1",
    {
        "pod": "pods",
        "service": "services",
        "service_account": "serviceaccounts",
        "event": "events",
        "secret": "secrets",
        "config_map": "configmaps",
    },
    {"namespace": "namespaces", "node": "nodes"},
) | {
    "read_namespaced_pod_log": Endpoint("GET", f"{_POD}/log", ("name", "namespace")),
    "create_namespaced_pod_eviction": Endpoint("POST", f"{_POD}/eviction", ("name", "namespace")),
    "patch_node_status": Endpoint("PATCH", "/api/v1/nodes/{name}/status", ("name",)),
}
BATCH = _endpoints("/apis/batch/v1", {"job": "jobs"}, {})
APPS = _endpoints("/apis/apps/v1", {"daemon_set": "daemonsets"}, {})
_CUSTOM = "/apis/{group}/{version}"
CUSTOM = {
    "list_cluster_custom_object": Endpoint("GET", f"{_CUSTOM}/{{plural}}", ("group", "version", "plural")),
    "list_namespaced_custom_object": Endpoint(
        "GET", f"{_CUSTOM}/namespaces/{{namespace}}/{{plural}}", ("group", "version", "namespace", "plural")
    ),
    "create_namespaced_custom_object": Endpoint(
        "POST", f"{_CUSTOM}/namespaces/{{namespace}}/{{plural}}", ("group", "version", "namespace", "plural")
    ),
}
VERSION = {"get_code": Endpoint("GET", "/version/", ())}
AUTHORIZATION = {
    "create_self_subject_access_review": Endpoint(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ()
    )
}


def _camel(name: str) -> str:
    """A keyword argument's query parameter: ``label_selector`` -> ``labelSelector``."""
    first, *rest = name.lstrip("_").split("_")
    return first + "".join(part.capitalize() for part in rest)


class Api:
    """The generated client's typed API methods, by name, sent through ``ApiClient`` alone.

    ``api.core.list_namespaced_pod("ns", label_selector="a=b", _preload_content=False)`` sends what
    ``CoreV1Api(api).list_namespaced_pod`` would: the path's parameters positionally (or by keyword), then
    the body (positionally or ``body=``), every other keyword a query parameter (camel-cased; booleans as
    ``true``/``false``), ``_request_timeout`` and ``_content_type`` as the generated methods take them. A
    status outside 2xx raises :class:`ApiException`. The answer: the raw response with
    ``_preload_content=False`` (as the generated methods give it), else the JSON body as a ``dict`` (never
    the client's models).
    """

    def __init__(self, api: client.ApiClient, endpoints: Mapping[str, Endpoint]) -> None:
        self.api = api
        self.endpoints = endpoints

    def __getattr__(self, name: str) -> Callable[..., Any]:
        endpoint = self.endpoints.get(name) if not name.startswith("__") else None
        if endpoint is None:
            raise AttributeError(f"no API method {name}")

        def method(*args: Any, **kwargs: Any) -> Any:
            return self.request(endpoint, *args, **kwargs)

        method.__name__ = method.__qualname__ = name
        return method

    def request(
        self,
        endpoint: Endpoint,
        *args: Any,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
        _content_type: str | None = None,
        **params: Any,
    ) -> Any:
        """Send one request to ``endpoint`` (see the class)."""
        if len(args) > len(endpoint.args) + 1 or (len(args) > len(endpoint.args) and body is not None):
            raise TypeError(f"{endpoint.path}: too many positional arguments {args!r}")
        path = dict(zip(endpoint.args, args, strict=False))
        if len(args) > len(endpoint.args):
            body = args[-1]
        for name in endpoint.args:
            if name not in path:
                if name not in params:
                    raise TypeError(f"{endpoint.path}: missing the argument {name!r}")
                path[name] = params.pop(name)
        headers = {"Accept": "application/json"}
        if _content_type or endpoint.method == "PATCH":
            # as the generated methods choose: a dict sent as a JSON patch becomes a strategic merge patch
            # (the client's REST layer, which also sends every other body as JSON)
            headers["Content-Type"] = _content_type or "application/json-patch+json"
        request = self.api.param_serialize(
            method=endpoint.method,
            resource_path=endpoint.path,
            path_params=path,
            query_params=[(_camel(k), v) for k, v in params.items() if v is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        if not _preload_content:
            return response.response
        data = response.read()  # type: ignore[no-untyped-call]
        return json.loads(data) if data else {}


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
    deletion removes pods before the Jobs that hold them.
    """
    try:
        jobs = items(call(kube.batch.list_namespaced_job, name, retry_s=10))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
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


def delete_labelled(kube: Kube, namespace: str, selector: str) -> list[str]:
    """Ask for the Jobs, Services and pods in ``namespace`` matching the label ``selector`` to be deleted.

    Jobs and Services go with foreground propagation (a Job's pods, a Service's EndpointSlices first). The
    pods are then deleted in one request (a ``deletecollection``, as the namespace controller does), each
    with its own grace period: left to the garbage collector, a Job's pods go one at a time, each a few
    requests at kube-controller-manager's client rate (20 per second by default): about 4 s for 64 pods. A
    server that refuses that request (a ClusterRole from before it) leaves them to the collector, as before.
    Returns the Jobs and Services asked, as ``job/<name>`` and ``service/<name>``.
    """
    kinds = (
        ("job", kube.batch.list_namespaced_job, kube.batch.delete_namespaced_job),
        ("service", kube.core.list_namespaced_service, kube.core.delete_namespaced_service),
    )
    asked = []
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
    try:
        call(kube.core.delete_collection_namespaced_pod, namespace, label_selector=selector)
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
        log.info("pods of %s in %s left to the garbage collector: %s", selector, namespace, message_of(exc))
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


# -- list, watch and wait -------------------------------------------------------------------------------


def iter_lines(resp: Any) -> Iterator[bytes]:
    """The newline-separated lines of a streaming response, as they arrive."""
    pending = b""
    for chunk in resp.stream(1 << 16, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line)
    if pending:
        yield pending


class Informer:
    """Lists, then watches, one kind of object; keeps the newest copy of each, by name.

    Args:
        list_fn: a ``list_*`` method of a typed API (e.g. ``core.list_namespaced_pod``).
        what: a name for messages, e.g. ``"pods of job x"``.
        retry_s: how long transient errors are retried before the informer gives up and sets ``error``.
        **selector: the list method's arguments (``namespace``, ``label_selector``, ``field_selector``).
    """

    def __init__(
        self, list_fn: Callable[..., Any], what: str, *, retry_s: float = API_RETRY_S, **selector: Any
    ) -> None:
        self.what = what
        self.error: BaseException | None = None
        self.synced = threading.Event()
        self.reconnects = 0
        self._list_fn = list_fn
        self._selector = selector
        self._retry_s = retry_s
        self._objects: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._stopped = threading.Event()
        self._resp: Any = None
        self._version: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"rollcall-watch {what}")

    def start(self) -> Informer:
        """Start listing and watching in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the open watch is shut down at once)."""
        self._stopped.set()
        shutdown(self._resp)

    def objects(self) -> list[Obj]:
        """A snapshot of the objects seen."""
        with self._lock:
            return list(self._objects.values())

    def get(self, name: str) -> Obj | None:
        """The newest copy of the object called ``name``, if it exists."""
        with self._lock:
            return self._objects.get(name)

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from the watch thread) after every change."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not end the watch
                log.exception("listener of %s failed", self.what)

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                for attempt in retrying(self._retry_s):
                    with attempt:
                        if self._stopped.is_set():
                            return
                        self._session()
        except BaseException as exc:
            if not self._stopped.is_set():
                log.warning("watching %s failed: %s", self.what, message_of(exc))
                self.error = exc
                self._notify()

    def _session(self) -> None:
        """List (when there is no version to resume from), then watch until the server ends the watch.

        ``_version`` follows every event, so a broken watch resumes where it stopped; an expired version
        (410 Gone) clears it, and the next session lists again.
        """
        if self._version is None:
            body = call(self._list_fn, retry_s=0, **self._selector)
            with self._lock:
                self._objects = {View(o).name: o for o in items(body)}
            self._version = View(body).resource_version or None  # none: the next session lists again
            self.synced.set()
            self._notify()
        try:
            resp = self._list_fn(
                watch=True,
                resource_version=self._version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_TIMEOUT_S,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_S, WATCH_TIMEOUT_S + 30),
                **self._selector,
            )
        except ApiException as exc:
            if exc.status == 410:
                self._version = None
                return
            raise
        self._resp = resp
        try:
            for line in iter_lines(resp):
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:  # expired: list again
                        self.reconnects += 1
                        self._version = None
                        return
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if kind != "BOOKMARK":
                    name = View(obj).name
                    with self._lock:
                        if kind == "DELETED":
                            self._objects.pop(name, None)
                        else:
                            self._objects[name] = obj
                self._version = View(obj).resource_version or self._version
                if kind != "BOOKMARK":
                    self._notify()
        except Exception:
            if self._stopped.is_set():
                return
            self.reconnects += 1
            raise
        finally:
            self._resp = None
            shutdown(resp)


def shutdown(resp: Any) -> None:
    """Unblock a read on a streaming response from another thread, and release it (None is fine)."""
    if resp is None:
        return
    try:
        unblock = getattr(resp, "shutdown", None)  # urllib3 >= 2.3
        if unblock is not None:
            unblock()
        resp.close()
    except Exception:  # best effort on a connection that may already be gone
        pass


class WaitTimeout(TimeoutError):
    """:func:`wait_for` ran out of time; ``last`` is the last state the caller's ``describe`` gave."""

    def __init__(self, message: str, last: str = "") -> None:
        super().__init__(f"{message}; last seen: {last}" if last else message)
        self.last = last


class WatchLost(KubeError):
    """An informer gave up: its watch failed for longer than the retry bound, or with a permanent error."""


def wait_for(
    condition: Callable[[], T | None],
    *informers: Informer,
    timeout_s: float,
    poll_s: float = 1.0,
    what: str = "condition",
    describe: Callable[[], str] | None = None,
) -> T:
    """Re-test ``condition`` on every change an informer sees (and every ``poll_s``) until it gives a value.

    ``condition`` runs on the calling thread, only once every informer has listed. Raises
    :class:`WaitTimeout` after ``timeout_s`` (with ``describe()`` as the last state seen), and
    :class:`WatchLost` when an informer gives up.
    """
    wake = threading.Event()
    for informer in informers:
        informer.subscribe(wake.set)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            wake.clear()
            for informer in informers:
                if informer.error is not None:
                    raise WatchLost(
                        f"lost the watch on {informer.what}: {message_of(informer.error)}"
                    ) from informer.error
            if all(i.synced.is_set() for i in informers):
                result = condition()
                if result is not None:
                    return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"{what} not met within {timeout_s:g}s", describe() if describe else "")
            wake.wait(min(poll_s, remaining))
    finally:
        for informer in informers:
            informer.unsubscribe(wake.set)
