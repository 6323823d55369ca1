"""API plumbing: what is retried, raw JSON calls, and the informer's list/watch/re-list cycle.

An expired resource version (410 Gone) or a reset mid-watch cannot be produced on cue by the local control
plane, so the informer is driven here by a scripted list function.
"""

import json
import threading

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState

from rollcall.backends.kubernetes import kube
from rollcall.backends.kubernetes.kube import call, create, is_transient, message_of
from rollcall.backends.kubernetes.watch import Informer, WaitTimeout, WatchLost, iter_lines, wait_for


class Body:
    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class Stream:
    """A watch response: one JSON event per line, in arbitrary chunks."""

    def __init__(self, events, error=None):
        self.payload = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.error = error

    def stream(self, amt, decode_content=False):
        for i in range(0, len(self.payload), 7):
            yield self.payload[i : i + 7]
        if self.error:
            raise self.error

    def shutdown(self):
        pass

    def close(self):
        pass


def api_error(status, message="m", headers=None):
    exc = ApiException(status=status, reason="r")
    exc.body = json.dumps({"kind": "Status", "message": message})
    exc.headers = headers
    return exc


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(kube, "_BACKOFF", lambda state: 0.01)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (api_error(429), True),
        (api_error(500), True),
        (api_error(503), True),
        (api_error(404), False),
        (api_error(403), False),
        (api_error(410), False),
        (ConnectionResetError(), True),
        (urllib3.exceptions.ProtocolError("reset"), True),
        (urllib3.exceptions.MaxRetryError(None, "/", "refused"), True),
        (TimeoutError(), True),
        (ValueError(), False),
    ],
)
def test_what_is_transient(exc, expected):
    assert is_transient(exc) is expected


def test_messages_are_the_servers():
    assert message_of(api_error(422, "Job.batch is invalid")) == "HTTP 422: Job.batch is invalid"
    assert message_of(ConnectionResetError("peer")) == "ConnectionResetError: peer"


def test_call_retries_transient_errors_then_returns_json():
    answers = [api_error(503), ConnectionResetError(), Body({"items": [1]})]

    def fn(*args, **kwargs):
        assert kwargs["_preload_content"] is False
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert call(fn) == {"items": [1]}
    assert answers == []


def test_call_raises_permanent_errors_at_once_and_gives_up_after_the_bound():
    calls = []

    def forbidden(**kw):
        calls.append(1)
        raise api_error(403)

    with pytest.raises(ApiException):
        call(forbidden)
    assert len(calls) == 1

    def down(**kw):
        calls.append(1)
        raise ConnectionRefusedError()

    with pytest.raises(ConnectionRefusedError):
        call(down, retry_s=0.2)
    assert len(calls) > 3


def test_retry_after_is_honoured():
    answers = [api_error(429, headers={"Retry-After": "0"}), Body({})]

    def fn(**kw):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert call(fn) == {}


@pytest.mark.parametrize(("header", "waits"), [("3", 3.0), ("60", 10.0), ("0", 0.0)])
def test_a_429s_retry_after_is_the_wait_capped_at_ten_seconds(header, waits):
    state = RetryCallState(kube.retrying(), fn=None, args=(), kwargs={})
    error = api_error(429, headers={"Retry-After": header})
    state.set_exception((type(error), error, None))
    assert kube._wait_retry_after(state) == waits


def test_without_retry_after_the_wait_is_the_backoff():
    state = RetryCallState(kube.retrying(), fn=None, args=(), kwargs={})
    error = api_error(503)
    state.set_exception((type(error), error, None))
    assert kube._wait_retry_after(state) == 0.01  # the backoff, made fast by the fixture


def test_create_treats_a_conflict_after_a_lost_reply_as_its_own():
    answers = [urllib3.exceptions.ProtocolError("reset after the server acted"), api_error(409)]

    def fn(**kw):
        assert kw["field_validation"] == "Strict"
        raise answers.pop(0)

    body = {"kind": "Namespace", "metadata": {"name": "x"}}
    assert create(fn, body=body) == body
    with pytest.raises(ApiException):
        create(lambda **kw: (_ for _ in ()).throw(api_error(409)), body=body)


def test_iter_lines_joins_chunks():
    class R:
        def stream(self, amt, decode_content=False):
            yield from [b'{"a"', b":1}\n\n{", b'"b":2}\n{"c"', b":3}"]

    assert list(iter_lines(R())) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def obj(name, rv):
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


class Server:
    """A scripted list/watch endpoint: each call takes the next answer."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []
        self.exhausted = threading.Event()

    def __call__(self, **kw):
        self.calls.append(kw)
        if not self.answers:
            self.exhausted.set()
            threading.Event().wait(5)
            raise ConnectionResetError()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_informer_lists_watches_relists_on_410_and_reconnects():
    server = Server(
        Body({"metadata": {"resourceVersion": "10"}, "items": [obj("a", 9)]}),
        Stream([{"type": "ADDED", "object": obj("b", 11)}, {"type": "BOOKMARK", "object": obj("", 12)}]),
        Stream([{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]),
        Body({"metadata": {"resourceVersion": "20"}, "items": [obj("b", 19), obj("c", 20)]}),
        Stream(
            [{"type": "DELETED", "object": obj("c", 21)}], error=urllib3.exceptions.ProtocolError("reset")
        ),
        Stream([{"type": "MODIFIED", "object": obj("b", 22)}]),
    )
    informer = Informer(server, "things", namespace="ns").start()
    assert server.exhausted.wait(5)
    informer.stop()

    assert [o["metadata"]["name"] for o in informer.objects()] == ["b"]
    assert informer.get("b")["metadata"]["resourceVersion"] == "22"
    watches = [c for c in server.calls if c.get("watch")]
    assert [c["resource_version"] for c in watches] == ["10", "12", "20", "21", "22"]
    assert all(c["namespace"] == "ns" for c in server.calls) and all(
        c["allow_watch_bookmarks"] for c in watches
    )
    assert informer.reconnects == 2 and informer.error is None


def test_informer_gives_up_on_permanent_errors_and_wait_for_says_so():
    informer = Informer(Server(api_error(403, "pods is forbidden")), "pods").start()
    with pytest.raises(WatchLost, match="lost the watch on pods: HTTP 403: pods is forbidden"):
        wait_for(lambda: None, informer, timeout_s=5)


def test_wait_for_returns_the_value_and_times_out_with_the_last_state():
    server = Server(Body({"metadata": {"resourceVersion": "1"}, "items": [obj("a", 1)]}))
    informer = Informer(server, "things").start()
    assert wait_for(lambda: informer.get("a"), informer, timeout_s=5)["metadata"]["name"] == "a"
    with pytest.raises(WaitTimeout, match=r"b to appear not met within 0.3s; last seen: only a"):
        wait_for(
            lambda: informer.get("b"),
            informer,
            timeout_s=0.3,
            poll_s=0.05,
            what="b to appear",
            describe=lambda: "only a",
        )
    informer.stop()


class Recorder:
    """Typed-API methods that record their calls and answer from a script (an exception is raised)."""

    def __init__(self, **answers):
        self.answers = answers
        self.calls = []

    def __getattr__(self, name):
        def method(*args, **kw):
            self.calls.append(
                (name, args, kw.get("label_selector"), (kw.get("body") or {}).get("propagationPolicy"))
            )
            answer = self.answers.get(name, {})
            if isinstance(answer, Exception):
                raise answer
            return Body(answer)

        return method


def test_delete_labelled_deletes_the_jobsets_then_the_jobs_and_services_foreground_then_the_pods_at_once():
    rec = Recorder(
        list_namespaced_job_set={"items": [obj("run", 0)]},
        list_namespaced_job={"items": [obj("run-job", 1)]},
        list_namespaced_service={"items": [obj("run-job", 2)]},
    )
    kb = kube.Kube(api=None, source="test")  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        for api in ("core", "batch", "jobset"):
            mp.setattr(kube.Kube, api, property(lambda self: rec))
        asked = kube.delete_labelled(kb, "team", "rollcall/run-id=abc")
    assert asked == ["jobset/run", "job/run-job", "service/run-job"]
    assert rec.calls == [
        # a JobSet first: its controller would make its Job again; its Job and Service go with it
        ("list_namespaced_job_set", ("team",), "rollcall/run-id=abc", None),
        ("delete_namespaced_job_set", ("run", "team"), None, "Background"),
        ("list_namespaced_job", ("team",), "rollcall/run-id=abc", None),
        ("delete_namespaced_job", ("run-job", "team"), None, "Foreground"),
        ("list_namespaced_service", ("team",), "rollcall/run-id=abc", None),
        ("delete_namespaced_service", ("run-job", "team"), None, "Foreground"),
        ("delete_collection_namespaced_pod", ("team",), "rollcall/run-id=abc", None),
    ]


@pytest.mark.parametrize("status", [403, 404])
def test_delete_labelled_leaves_the_pods_to_the_collector_when_their_request_is_refused(status):
    rec = Recorder(
        list_namespaced_job={"items": [obj("run-job", 1)]},
        delete_collection_namespaced_pod=api_error(status, "pods is forbidden"),
    )
    kb = kube.Kube(api=None, source="test")  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        for api in ("core", "batch", "jobset"):
            mp.setattr(kube.Kube, api, property(lambda self: rec))
        # a cluster without JobSets (404), or a user not granted them (403): none to delete
        rec.answers["list_namespaced_job_set"] = api_error(status, "jobsets")
        assert kube.delete_labelled(kb, "team", "rollcall/run-id=abc") == ["job/run-job"]
        rec.answers["delete_collection_namespaced_pod"] = api_error(422, "invalid selector")
        with pytest.raises(ApiException):
            kube.delete_labelled(kb, "team", "rollcall/run-id=abc")


class Sent:
    """A stand-in for the client's REST layer: records each request, answers ``status`` with ``body``."""

    def __init__(self, status=200, body=b"{}"):
        self.requests = []
        self.status, self.body = status, body

    def __call__(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        path, _, query = url.partition("?")  # the query's order is no matter
        sorted_query = sorted(query.split("&")) if query else []
        self.requests.append(
            (method, path, sorted_query, header_params.get("Content-Type"), body, _request_timeout)
        )
        raw = urllib3.HTTPResponse(body=self.body, status=self.status, preload_content=True)
        from kubernetes.client.rest import RESTResponse

        return RESTResponse(raw)


REVIEW = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SelfSubjectAccessReview",
    "spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "ns"}},
}
#: Calls the suite makes, each as the generated typed API's method takes them.
GENERATED_CALLS = [
    (
        "core",
        "list_namespaced_pod",
        ("ns",),
        {"label_selector": "a=b", "watch": True, "timeout_seconds": 240},
    ),
    ("core", "list_pod_for_all_namespaces", (), {"allow_watch_bookmarks": True, "resource_version": "7"}),
    ("core", "read_namespaced_pod_log", ("p", "ns"), {"container": "c", "follow": True, "timestamps": True}),
    ("core", "delete_namespace", ("ns",), {"body": {"propagationPolicy": "Foreground"}}),
    ("core", "create_namespaced_service", ("ns",), {"body": {"kind": "Service"}, "dry_run": "All"}),
    ("core", "delete_collection_namespaced_pod", ("ns",), {"label_selector": "rollcall/run-id=x"}),
    ("core", "patch_node", ("n", {"spec": {}}), {"_content_type": "application/merge-patch+json"}),
    ("core", "patch_namespaced_pod", ("p", "ns", {"metadata": {}}), {}),
    ("core", "list_namespaced_event", (), {"namespace": "ns", "field_selector": "involvedObject.name=x"}),
    ("batch", "create_namespaced_job", ("ns",), {"body": {"kind": "Job"}, "field_validation": "Strict"}),
    ("batch", "delete_namespaced_job", ("j", "ns"), {"body": {"propagationPolicy": "Background"}}),
    ("apps", "list_daemon_set_for_all_namespaces", (), {"_continue": "tok", "limit": 5}),
    ("custom", "list_cluster_custom_object", ("karpenter.sh", "v1", "nodepools"), {}),
    ("custom", "create_namespaced_custom_object", ("kwok.x-k8s.io", "v1alpha1", "ns", "logs", {"a": 1}), {}),
    ("version", "get_code", (), {}),
    ("authorization", "create_self_subject_access_review", (REVIEW,), {}),
]
GENERATED = {
    "core": "CoreV1Api",
    "batch": "BatchV1Api",
    "apps": "AppsV1Api",
    "custom": "CustomObjectsApi",
    "version": "VersionApi",
    "authorization": "AuthorizationV1Api",
}


@pytest.mark.parametrize(
    ("group", "name", "args", "kwargs"), GENERATED_CALLS, ids=[c[1] for c in GENERATED_CALLS]
)
def test_the_api_sends_what_the_generated_client_sends(group, name, args, kwargs):
    from kubernetes import client

    cfg = client.Configuration(host="https://k8s.example:6443")
    cfg.api_key = {"BearerToken": "Bearer t"}
    api = client.ApiClient(cfg)
    sent = Sent()
    api.call_api = sent
    generated = getattr(getattr(client, GENERATED[group])(api), name)
    ours = getattr(getattr(kube.Kube(api, "test"), group), name)
    assert ours.__name__ == name
    kw = {**kwargs, "_preload_content": False, "_request_timeout": (10.0, 60.0)}
    generated(*args, **kw)
    answer = ours(*args, **kw)
    assert sent.requests[0] == sent.requests[1]
    assert isinstance(answer, urllib3.HTTPResponse) and json.loads(answer.data) == {}


def test_the_api_answers_json_raises_the_servers_errors_and_refuses_what_it_cannot_send():
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host="https://k8s.example:6443"))
    api.call_api = Sent(body=b'{"kind": "Namespace", "metadata": {"name": "x"}}')
    core = kube.Kube(api, "test").core
    assert core.read_namespace("x") == {"kind": "Namespace", "metadata": {"name": "x"}}
    assert call(core.read_namespace, "x")["metadata"]["name"] == "x"

    api.call_api = Sent(status=404, body=b'{"kind": "Status", "message": "namespaces \\"x\\" not found"}')
    with pytest.raises(ApiException) as err:
        call(core.read_namespace, "x")
    assert err.value.status == 404 and message_of(err.value) == 'HTTP 404: namespaces "x" not found'

    with pytest.raises(AttributeError, match="no API method read_namespaced_widget"):
        core.read_namespaced_widget  # noqa: B018
    with pytest.raises(TypeError, match="missing the argument 'namespace'"):
        core.list_namespaced_pod()
    with pytest.raises(TypeError, match="too many positional arguments"):
        core.read_namespace("x", {}, {})
