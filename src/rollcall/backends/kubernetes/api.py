"""The API server's REST operations, sent through the client's ``ApiClient`` alone.

:class:`Api` gives the generated typed APIs' method names, arguments and answers (``core.list_namespaced_pod``
...), from the tables of :class:`Endpoint` here, without importing those modules, whose pydantic models and
``validate_call`` wrappers cost about 0.3 s at every start, 1 s on a loaded machine. Everything read stays
plain JSON (``dict``), as the API sends it. :class:`.kube.Kube` holds one :class:`Api` per group.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException


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
#: AuthorizationV1Api that the suite and its tests call, and JobSet's as its own client names them.
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
#: sigs.k8s.io/jobset's API (``--job-kind jobset``): its group and version, as a JobSet's apiVersion.
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET = _endpoints(f"/apis/{JOBSET_API_VERSION}", {"job_set": "jobsets"}, {}) | {
    # the group version's resources: a 404 where the JobSet CRD is not installed
    "get_api_resources": Endpoint("GET", f"/apis/{JOBSET_API_VERSION}", ()),
}
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
