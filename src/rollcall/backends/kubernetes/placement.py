"""Kubernetes placement, one pipeline: what each pod gets, from the request and what the API says.

:func:`place` is the whole walk of a :class:`~rollcall.backends.PlacementRequest`, each step a function of
this module, in order:

1. :func:`tolerations`: the Job's tolerations (its manifest's, then ``--toleration``), by which every taint is
   judged, of a node or of a NodePool's template;
2. :func:`choose_nodes`: the nodes that exist (:mod:`.discovery`: Ready, schedulable, of the type and labels
   asked, advertising the accelerator and EFA); when too few are usable,
3. :func:`plan_arriving`: the capacity that can make up for them (:mod:`.capacity`: NodePools, a
   cluster-autoscaler), each pod planned from the instance type (:mod:`.instances`) or ``--procs-per-node``;
   with none, discovery fails naming what it looked for;
4. :func:`check_plugins`: with ``--check-device-plugins``, the device-plugin DaemonSets the pods rely on;
5. :meth:`.discovery.Discovery.warnings`: the nodes advertising fewer devices than their type has.

The API is read through :class:`Cluster` (:class:`ApiCluster` over the client): the nodes once, the
provisioners only when too few nodes are usable, the DaemonSets only when asked to check them; each step
reads those objects through the typed views of :mod:`.views`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from rollcall.backends import DiscoveryError, Placement, PlacementRequest
from rollcall.backends.kubernetes import capacity
from rollcall.backends.kubernetes.capacity import AUTOSCALER_STATUS, Lookup
from rollcall.backends.kubernetes.discovery import (
    Discovery,
    TooFewNodes,
    check_device_plugins,
    discover,
    requested_resource,
    tolerates,
)
from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.backends.kubernetes.manifests import job_tolerations
from rollcall.backends.kubernetes.nodeviews import INSTANCE_TYPE_LABEL, Node
from rollcall.backends.kubernetes.views import items
from rollcall.jobspec import EFA_RESOURCE, Taint

Obj = dict[str, Any]
#: Where the pipeline's progress lines go (the terminal, through the plugin).
Say = Callable[[str], None]


@dataclass(frozen=True)
class Provisioning:
    """What the API says of what can provision nodes.

    Attributes:
        nodepools: the Karpenter NodePools (None: the cluster has no NodePool API).
        autoscaler_status: the cluster-autoscaler's status ConfigMap (None: no cluster-autoscaler runs).
        errors: what could not be read (``"nodepools"``, ``"autoscaler"``: the API's message).
    """

    nodepools: Sequence[Obj] | None = None
    autoscaler_status: Obj | None = None
    errors: Mapping[str, str] = field(default_factory=dict)


class Cluster(Protocol):
    """The API objects placement reads, each read when a step first needs it."""

    def nodes(self) -> list[Obj]:
        """Every Node."""
        ...

    def provisioning(self) -> Provisioning:
        """The NodePools and the cluster-autoscaler's status."""
        ...

    def daemonsets(self) -> list[Obj]:
        """Every DaemonSet, in every namespace."""
        ...


@dataclass(frozen=True)
class ApiCluster:
    """:class:`Cluster` over the API's client."""

    kube: Kube

    def nodes(self) -> list[Obj]:
        """Every Node."""
        return items(call(self.kube.core.list_node))

    def provisioning(self) -> Provisioning:
        """Read the NodePools and the cluster-autoscaler's status (404: not there)."""
        errors: dict[str, str] = {}
        pools: list[Obj] | None = None
        try:
            pools = items(
                call(self.kube.custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodepools")
            )
        except ApiException as exc:
            if exc.status != 404:
                errors["nodepools"] = message_of(exc)
        status = None
        try:
            status = call(
                self.kube.core.read_namespaced_config_map, AUTOSCALER_STATUS[1], AUTOSCALER_STATUS[0]
            )
        except ApiException as exc:
            if exc.status != 404:
                errors["autoscaler"] = message_of(exc)
        return Provisioning(pools, status, errors)

    def daemonsets(self) -> list[Obj]:
        """Every DaemonSet, in every namespace."""
        return items(call(self.kube.apps.list_daemon_set_for_all_namespaces))


@dataclass(frozen=True)
class Planned:
    """The pipeline's outcome: the discovery, and the capacity that can arrive when too few nodes exist."""

    discovery: Discovery
    arriving: Lookup | None = None

    @property
    def placement(self) -> Placement:
        """What each pod gets."""
        return self.discovery.placement


def place(request: PlacementRequest, cluster: Cluster, say: Say = lambda line: None) -> Planned:
    """The whole pipeline (see the module docstring); raises :class:`DiscoveryError` when nothing can run.

    With ``request.recheck`` (``--recheck-tainted``) only the nodes holding that taint are considered, and
    the job is pinned to the first ``request.nodes`` of them by name; no capacity can arrive for them.
    """
    tolerated = tolerations(request)
    arriving = None
    if request.recheck is not None:
        found = choose_nodes(request, tainted(cluster.nodes(), request.recheck, request.nodes), tolerated)
        chosen = tuple(sorted(found.usable)[: request.nodes])
        say(f"re-checking node(s) {', '.join(chosen)}, which hold {request.recheck}")
        return Planned(replace(found, placement=replace(found.placement, machines=chosen)))
    try:
        found = choose_nodes(request, cluster.nodes(), tolerated)
    except TooFewNodes as short:
        found, arriving = plan_arriving(request, short, cluster.provisioning(), tolerated, say)
    check_plugins(request, found, arriving, cluster, say)
    for line in found.warnings():
        say(f"warning: {line}")
    return Planned(found, arriving)


def tainted(nodes: Sequence[Obj], taint: Taint, wanted: int) -> list[Obj]:
    """The nodes holding ``taint`` (by key and effect); :class:`DiscoveryError` when fewer than ``wanted``."""

    def holds(node: Obj) -> bool:
        return any(t.get("key") == taint.key and t.get("effect") == taint.effect for t in Node(node).taints)

    holding = [n for n in nodes if holds(n)]
    if len(holding) < wanted:
        names = ", ".join(sorted(Node(n).name for n in holding)) or "none"
        if not holding:
            raise DiscoveryError(
                f"--recheck-tainted: no node holds {taint}: nothing to re-check, nothing created"
            )
        raise DiscoveryError(
            f"--recheck-tainted: {len(holding)} node(s) hold {taint} ({names}) but --nodes asks {wanted}; "
            f"nothing was created: run with --nodes {len(holding)}"
        )
    return holding


def tolerations(request: PlacementRequest) -> list[Obj]:
    """The Job's tolerations: its manifest's, then the request's (:func:`.manifests.job_tolerations`)."""
    return job_tolerations(request.tolerations)


def choose_nodes(request: PlacementRequest, nodes: Sequence[Obj], tolerated: Sequence[Obj]) -> Discovery:
    """The usable nodes and what each pod gets on them (:func:`.discovery.discover`); too few raise."""
    return discover(
        nodes,
        nodes=request.nodes,
        accelerator=request.accelerator,
        instance_type=request.instance_type,
        procs_per_node=request.procs_per_node,
        efa=request.efa,
        tolerations=tolerated,
        node_selector=request.node_selector,
    )


def plan_arriving(
    request: PlacementRequest,
    short: TooFewNodes,
    provisioning: Provisioning,
    tolerated: Sequence[Obj],
    say: Say = lambda line: None,
) -> tuple[Discovery, Lookup]:
    """Capacity that can make up for the missing nodes, else ``short`` with what was looked for."""
    need = request.nodes - len(short.usable)
    shape = capacity.shape(request.instance_type)
    accel = short.accelerator or (
        request.accelerator if request.accelerator != "auto" else (shape.accelerator if shape else None)
    )
    resource = None
    if accel is not None:
        resource = (shape.resource if shape and accel != "cpu" else None) or requested_resource(accel)
    procs = request.procs_per_node or (shape.count if shape and shape.accelerator == accel else None)
    if accel == "cpu":
        procs = procs or 1
    labels = dict(request.node_selector)
    if request.instance_type:
        labels[INSTANCE_TYPE_LABEL] = request.instance_type
    amounts = {"nodes": need} | ({resource: need * procs} if resource and procs else {})
    lookup = capacity.find(
        provisioning.nodepools,
        provisioning.autoscaler_status,
        labels=labels,
        tolerates=lambda taint: tolerates(tolerated, taint),
        need=amounts,
        trust_autoscaler=request.trust_autoscaler,
        errors=provisioning.errors,
    )
    if not lookup.provisioners:
        raise DiscoveryError(f"{short}\n{lookup.report()}") from None
    if accel is None or procs is None:
        raise DiscoveryError(
            f"{short}\n  capacity can arrive ({lookup.describe()}), but what its nodes offer is unknown: "
            f"give --accelerator and --procs-per-node, or an --instance-type rollcall knows "
            f"({', '.join(capacity.plannable())})"
        ) from None
    requests: dict[str, int] = {resource: procs} if resource else {}
    if request.efa == "on":
        requests[EFA_RESOURCE] = shape.efa if shape and shape.efa else 1
    offer = ", ".join(f"{v} {k}" for k, v in requests.items()) or "cpu only"
    description = (
        f"{len(short.usable)} usable node(s); {need} more can arrive from {lookup.describe()}; "
        f"each pod gets {offer}; {procs} rank(s) per node"
    )
    say(
        f"too few nodes ({len(short.usable)} of {request.nodes}); {need} can arrive from "
        f"{lookup.describe()}: the run will wait up to {request.capacity_timeout_s:g}s for them"
    )
    placement = Placement(accel, procs, requests, request.instance_type, description)
    return Discovery(placement, short.usable, short.rejected, EFA_RESOURCE in requests), lookup


def check_plugins(
    request: PlacementRequest,
    found: Discovery,
    arriving: Lookup | None,
    cluster: Cluster,
    say: Say = lambda line: None,
) -> None:
    """With ``--check-device-plugins``: the DaemonSets serving the pods' resources are ready, else raise.

    EKS Auto Mode nodes run none (their plugins are part of the node), and nodes that do not exist yet cannot
    be checked: each is said, and the pods rely on the resources advertised.
    """
    if not request.check_device_plugins:
        return
    if found.auto_mode:
        say(
            "--check-device-plugins: EKS Auto Mode nodes run no device-plugin DaemonSets; "
            "relying on the resources they advertise"
        )
    elif arriving is not None:
        say(
            "--check-device-plugins: the nodes do not exist yet, so their device plugins cannot be "
            "checked; the pods are scheduled only where the resources they request are advertised"
        )
    else:
        problems = check_device_plugins(cluster.daemonsets(), found.placement.accelerator, found.efa)
        if problems:
            raise DiscoveryError("device plugins are not ready:\n  " + "\n  ".join(problems))
