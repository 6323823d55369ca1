"""Discovery: which nodes can take one training pod each, and what each offers.

Nodes are read once per session. A node is usable when it is Ready, schedulable (not cordoned, and every
``NoSchedule``/``NoExecute`` taint is tolerated by the Job's tolerations), of the chosen instance type, and
advertises the accelerator in its allocatable resources (``nvidia.com/gpu``; for Neuron, in this order of
preference, ``aws.amazon.com/neuroncore``, ``aws.amazon.com/neurondevice``, ``aws.amazon.com/neuron``).
Ranks per node are the GPUs or NeuronCores (else whole Neuron devices) those nodes offer.

A usable node of a known instance type (:mod:`.instances`) that advertises fewer GPUs, Neuron devices,
NeuronCores or EFA interfaces than its type has stays usable, but is named (:attr:`Discovery.short`,
:meth:`Discovery.warnings`): the pods' requests follow what the nodes offer, so its ranks see all they are
given, and the ``advertised_devices`` fitness rule fails the node after the run. Where that lowered the
request, the placement's description names the nodes. A usable node whose own health says something is wrong
(:attr:`.nodeviews.Node.health`: the EKS node monitoring agent's ``AcceleratedHardwareReady`` condition False,
or GPUs or EFA interfaces its kubelet holds back from allocatable) stays usable too, and is named
(:attr:`Discovery.unhealthy`): the ``hardware_ready`` and ``lost_devices`` rules fail it after the run.

EFA: each pod requests every ``vpc.amazonaws.com/efa`` interface its instance type has
(:mod:`.instances`); a node advertising fewer is unusable, named with both numbers. For a type the
table does not know, the pods request what the nodes advertise, and a node advertising fewer than the others
is unusable. ``--efa on`` leaves out nodes without EFA; ``--efa auto`` uses EFA when every usable node has
it, goes without when none has, and refuses, naming the nodes that lack it, when only some have it: EFA is
never dropped silently.

When fewer than ``--nodes`` nodes are usable, :class:`TooFewNodes` (a :class:`DiscoveryError`) lists the
usable ones and why each other node is not, before anything is created; the kubernetes backend then looks
for capacity that can arrive (:mod:`.capacity`). :func:`check_device_plugins` optionally verifies
that the device-plugin DaemonSets serving those resources are ready; on EKS Auto Mode nodes (label
``eks.amazonaws.com/compute-type=auto``) the plugins are part of the node, not DaemonSets, so the check
rests on the allocatable resources read above.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollcall.backends import DiscoveryError, Placement, PlacementRequest, shown_names, unusable_nodes
from rollcall.backends.kubernetes import nodeviews
from rollcall.backends.kubernetes.instances import (
    Shortfall,
    advertised_counts,
    count_facts,
    expected_devices,
    lookup,
    shortfalls,
)
from rollcall.backends.kubernetes.views import Pod, count
from rollcall.jobspec import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    NEURON_RESOURCES,
    Accelerator,
    AcceleratorChoice,
    EfaChoice,
)

#: EKS Auto Mode nodes: their device plugins are part of the node, not DaemonSets.
AUTO_MODE_LABEL = ("eks.amazonaws.com/compute-type", "auto")
#: Taint effects that keep a pod off a node unless tolerated.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
#: Substrings of the names of the device-plugin DaemonSets (upstream manifests, Helm charts, GPU operator).
DEVICE_PLUGINS: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidia-device-plugin",),
    "neuron": ("neuron-device-plugin",),
    "efa": ("efa-k8s-device-plugin", "efa-device-plugin"),
}

Obj = dict[str, Any]
#: The resources each accelerator's device plugins advertise, in order of preference: a pod requests the
#: first its nodes offer, and the first of all when no node is there yet to say.
ACCELERATOR_RESOURCES: dict[Accelerator, tuple[str, ...]] = {
    "nvidia": (GPU_RESOURCE,),
    "neuron": NEURON_RESOURCES,
    "cpu": (),
}


def requested_resource(accelerator: Accelerator) -> str | None:
    """The resource a pod requests per rank of ``accelerator`` when no node says which; None on cpu."""
    return next(iter(ACCELERATOR_RESOURCES[accelerator]), None)


class TooFewNodes(DiscoveryError):
    """Fewer nodes are usable than asked for; capacity that can arrive may still make up for them.

    Attributes:
        usable: the usable nodes; ``rejected``: why each other node is not.
        accelerator: the accelerator chosen (None when ``auto`` found no node offering one).
    """

    def __init__(
        self, message: str, usable: list[str], rejected: dict[str, str], accelerator: Accelerator | None
    ) -> None:
        super().__init__(message)
        self.usable, self.rejected, self.accelerator = usable, rejected, accelerator


@dataclass(frozen=True)
class Node:
    """What discovery needs of one node."""

    name: str
    instance_type: str | None
    ready: bool
    ready_reason: str
    cordoned: bool
    taints: tuple[Mapping[str, str], ...]
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)
    health: nodeviews.NodeHealth = field(default_factory=nodeviews.NodeHealth)

    @classmethod
    def of(cls, obj: Obj) -> Node:
        """From a Node object as the API returns it (JSON)."""
        node = nodeviews.Node(obj)
        ready = node.condition("Ready")
        reason = "no Ready condition"
        if ready is not None:
            reason = ready.reason or f"Ready={ready.status or None}"
            if ready.message:
                reason += f": {ready.message}"
        return cls(
            name=node.name,
            instance_type=node.instance_type,
            ready=ready is not None and ready.true,
            ready_reason=reason,
            cordoned=node.cordoned,
            taints=node.taints,
            allocatable={k: count(v) for k, v in node.allocatable.items()},
            labels=dict(node.labels),
            counts=advertised_counts(node.advertised),
            health=node.health,
        )

    @property
    def short(self) -> list[Shortfall]:
        """What the node advertises fewer of than its instance type has (:func:`.instances.shortfalls`)."""
        return shortfalls(self.instance_type, self.counts)

    def offers(self, resource: str) -> int:
        """How many of ``resource`` the node can allocate."""
        return self.allocatable.get(resource, 0)


@dataclass
class Discovery:
    """The outcome: what each pod gets, the usable nodes, and why each other node was left out.

    ``short`` holds the usable nodes advertising fewer GPUs, Neuron devices, NeuronCores or EFA interfaces
    than their instance type has, each with what it lacks: the run goes on (the pods request what the nodes
    offer), and the ``advertised_devices`` fitness rule names those its pods ran on.
    """

    placement: Placement
    usable: list[str]
    rejected: dict[str, str] = field(default_factory=dict)
    efa: bool = False
    auto_mode: bool = False
    short: dict[str, list[Shortfall]] = field(default_factory=dict)
    #: Why each pod requests fewer of its accelerator than the type has (empty where it does not).
    lowered: str = ""
    #: The usable nodes whose own health says something is wrong (:func:`health_warning`), by name.
    unhealthy: dict[str, nodeviews.NodeHealth] = field(default_factory=dict)

    def warnings(self) -> list[str]:
        """The warnings to show: each node of :attr:`short`, :attr:`lowered`, each node of :attr:`unhealthy`.

        :attr:`lowered` says why each pod requests fewer than the type has, where it does.
        """
        return (
            [
                f"node {name} {'; '.join(map(str, lacks))} (a device lost, or a device plugin that did not "
                "enumerate it): rule advertised_devices names it after a run on it"
                for name, lacks in self.short.items()
            ]
            + ([self.lowered] if self.lowered else [])
            + [f"node {name} {said}" for name, h in self.unhealthy.items() if (said := health_warning(h))]
        )


def health_warning(health: nodeviews.NodeHealth) -> str | None:
    """What a node's own health says is wrong, in words; None when nothing (the condition Unknown or absent).

    The node stays usable: rules ``hardware_ready`` and ``lost_devices`` name it after a run on it.
    """
    said = []
    if health.hardware_ready == "False":
        why = f" ({health.hardware_reason})" if health.hardware_reason else ""
        said.append(f"is {nodeviews.ACCELERATED_HARDWARE_READY}=False{why}: rule hardware_ready")
    if health.lost:
        lost = ", ".join(f"{n} {r}" for r, n in health.lost.items())
        said.append(f"holds {lost} back from allocatable (unhealthy): rule lost_devices")
    if not said:
        return None
    return "; ".join(said) + " names it after a run on it"


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    """Whether any toleration matches ``taint`` (the scheduler's rules for key, operator, value, effect)."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        operator = tol.get("operator", "Equal")
        if not tol.get("key"):
            if operator == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if operator == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _blocking_taint(node: Node, tolerations: Sequence[Mapping[str, Any]]) -> str | None:
    for taint in node.taints:
        if taint.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"tainted {taint.get('key')}{value}:{taint.get('effect')} (not tolerated)"
    return None


def accelerator_resource(node: Node, accelerator: Accelerator) -> str | None:
    """The resource a node advertises for ``accelerator`` (NeuronCores before whole Neuron devices)."""
    return next((r for r in ACCELERATOR_RESOURCES[accelerator] if node.offers(r)), None)


def discover(
    objs: Iterable[Obj],
    *,
    nodes: int,
    accelerator: AcceleratorChoice = PlacementRequest.accelerator,
    instance_type: str | None = None,
    procs_per_node: int | None = None,
    efa: EfaChoice = PlacementRequest.efa,
    tolerations: Sequence[Mapping[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
) -> Discovery:
    """Choose the nodes and derive what each pod runs and requests; see the module docstring."""
    all_nodes = sorted((Node.of(o) for o in objs), key=lambda n: n.name)
    rejected: dict[str, str] = {}
    candidates: list[Node] = []
    for node in all_nodes:
        reason = _unusable(node, instance_type, tolerations, node_selector or {})
        if reason:
            rejected[node.name] = reason
        else:
            candidates.append(node)

    accel = _choose_accelerator(accelerator, candidates, rejected, nodes)
    if accel != "cpu":
        kept = []
        for node in candidates:
            if accelerator_resource(node, accel) is None:
                rejected[node.name] = f"no {_resource_names(accel)} allocatable"
            else:
                kept.append(node)
        candidates = kept
    if efa == "on":
        for node in [n for n in candidates if not n.offers(EFA_RESOURCE)]:
            rejected[node.name] = f"no {EFA_RESOURCE} allocatable (--efa on)"
            candidates.remove(node)

    types = Counter(n.instance_type or "<unlabelled>" for n in candidates)
    if instance_type is None and len(types) > 1:
        raise DiscoveryError(
            "the usable nodes are of mixed instance types: "
            + ", ".join(f"{t} x{c}" for t, c in sorted(types.items()))
            + "; choose one with --instance-type"
        )

    resource, need = _procs(accel, candidates, nodes, procs_per_node)
    if resource is not None:
        for node in [n for n in candidates if n.offers(resource) < need]:
            rejected[node.name] = f"only {node.offers(resource)} {resource} allocatable, {need} needed"
            candidates.remove(node)

    kind = candidates[0].instance_type if candidates else None
    chosen_type = instance_type or kind
    use_efa = _use_efa(efa, candidates)
    efa_need = _efa_need(chosen_type, candidates, rejected) if use_efa else 0

    if len(candidates) < nodes:
        usable = [n.name for n in candidates]
        raise TooFewNodes(unusable_nodes(nodes, usable, rejected, accel), usable, rejected, accel)

    requests: dict[str, int] = {resource: need} if resource else {}
    if use_efa:
        requests[EFA_RESOURCE] = efa_need
    offer = ", ".join(f"{v} {k}" for k, v in requests.items()) or "cpu only"
    short = {n.name: lacks for n in candidates if (lacks := n.short)}
    lowered = _lowered(resource if procs_per_node is None else None, need, short)
    description = (
        f"{len(candidates)} usable node(s) of {len(all_nodes)} ({chosen_type or 'any type'}); "
        f"each pod gets {offer}; {need} rank(s) per node"
        + (f" ({lowered})" if lowered else "")
        + _efa_note(efa, use_efa, chosen_type)
    )
    placement = Placement(accel, need, requests, chosen_type, description)
    key, value = AUTO_MODE_LABEL
    auto_mode = bool(candidates) and all(n.labels.get(key) == value for n in candidates)
    unhealthy = {n.name: n.health for n in candidates if health_warning(n.health)}
    return Discovery(
        placement, [n.name for n in candidates], rejected, use_efa, auto_mode, short, lowered, unhealthy
    )


def _unusable(
    node: Node,
    instance_type: str | None,
    tolerations: Sequence[Mapping[str, Any]],
    node_selector: Mapping[str, str],
) -> str | None:
    if not node.ready:
        return f"NotReady ({node.ready_reason})"
    if node.cordoned:
        return "cordoned (spec.unschedulable)"
    taint = _blocking_taint(node, tolerations)
    if taint:
        return taint
    if instance_type is not None and node.instance_type != instance_type:
        return f"instance type {node.instance_type or '<unlabelled>'}, not {instance_type}"
    for key, value in node_selector.items():
        if node.labels.get(key) != value:
            return f"label {key}={node.labels.get(key, '<unset>')}, not {value} (--node-selector)"
    return None


def _use_efa(efa: EfaChoice, candidates: list[Node]) -> bool:
    """``--efa on``; or ``auto`` with every usable node offering EFA (none: off; only some: refused)."""
    if efa != "auto":
        return efa == "on"
    lacking = [n.name for n in candidates if not n.offers(EFA_RESOURCE)]
    if not lacking or len(lacking) == len(candidates):
        return bool(candidates) and not lacking
    having = len(candidates) - len(lacking)
    raise DiscoveryError(
        f"--efa auto: {having} usable node(s) advertise {EFA_RESOURCE} but {len(lacking)} do not: "
        f"{shown_names(lacking)}; a run across both would train without EFA on some pods. Choose: --efa on "
        "(use only the nodes with EFA), --efa off (train without it), or --instance-type / "
        "--node-selector to pick nodes of one kind"
    )


def _efa_need(instance_type: str | None, candidates: list[Node], rejected: dict[str, str]) -> int:
    """EFA interfaces each pod requests: all its type has; nodes advertising fewer are left out."""
    known = lookup(instance_type)
    offers = Counter(n.offers(EFA_RESOURCE) for n in candidates)
    if known is not None and known.efa:
        need = known.efa
        why = f"its type {known.name} has {need}"
    else:
        # most common count, the larger on a tie
        need = max(offers.items(), key=lambda kv: (kv[1], kv[0]))[0] if offers else 0
        why = f"the other {instance_type or 'usable'} nodes offer {need} (type not in the instance table)"
    for node in [n for n in candidates if n.offers(EFA_RESOURCE) < need]:
        rejected[node.name] = f"offers {node.offers(EFA_RESOURCE)} {EFA_RESOURCE}, {why}"
        candidates.remove(node)
    return need


def _lowered(resource: str | None, need: int, short: Mapping[str, list[Shortfall]]) -> str:
    """Why each pod requests fewer of ``resource`` than the type has: the nodes advertising fewer, named."""
    lowered = {
        name: lack
        for name, lacks in short.items()
        for lack in lacks
        if resource in lack.counted.resources and need < lack.has
    }
    if not lowered:
        return ""
    has = max(lack.has for lack in lowered.values())
    return (
        f"each pod requests {need} {resource}, fewer than the {has} of its instance type: "
        f"{shown_names(list(lowered))} advertise fewer (rule advertised_devices)"
    )


def _efa_note(efa: EfaChoice, use_efa: bool, instance_type: str | None) -> str:
    known = lookup(instance_type)
    if efa != "auto" or use_efa or known is None or not known.efa:
        return ""
    return (
        f"; EFA off although {known.name} has {known.efa} interfaces: no node advertises {EFA_RESOURCE} "
        "(is the EFA device plugin running?)"
    )


def _resource_names(accel: Accelerator) -> str:
    return " or ".join(ACCELERATOR_RESOURCES[accel])


def _choose_accelerator(
    wanted: AcceleratorChoice, candidates: list[Node], rejected: dict[str, str], n: int
) -> Accelerator:
    if wanted != "auto":
        return wanted
    accelerators: tuple[Accelerator, ...] = ("nvidia", "neuron")
    kinds = [a for a in accelerators if any(accelerator_resource(x, a) for x in candidates)]
    if len(kinds) == 1:
        return kinds[0]
    if kinds:
        raise DiscoveryError(
            "both NVIDIA GPU and Neuron nodes are usable; choose with --accelerator or --instance-type"
        )
    rejected |= {x.name: "no accelerator allocatable" for x in candidates}
    raise TooFewNodes(
        f"--accelerator auto: no usable node advertises {_resource_names('nvidia')} or "
        f"{_resource_names('neuron')} "
        "(use --accelerator cpu to train on CPUs)\n" + unusable_nodes(n, [], rejected, None),
        [],
        rejected,
        None,
    )


def _procs(
    accel: Accelerator, candidates: list[Node], nodes: int, procs_per_node: int | None
) -> tuple[str | None, int]:
    """The resource a pod requests and how many: ``--procs-per-node``, else what ``nodes`` nodes offer."""
    if accel == "cpu":
        return None, procs_per_node or 1
    resources = Counter(accelerator_resource(n, accel) for n in candidates)
    resource = resources.most_common(1)[0][0] if resources else None
    if resource is None:
        return requested_resource(accel), procs_per_node or 1
    if procs_per_node is not None:
        return resource, procs_per_node
    offers = sorted((n.offers(resource) for n in candidates), reverse=True)
    return resource, offers[min(nodes, len(offers)) - 1] if offers else 1


def owns_nodes(pods: Iterable[Obj], node: Callable[[str], Obj | None]) -> bool | None:
    """Whether the run's pods had every GPU of each node they ran on (``JobStatus.owns_nodes``).

    The pods placed on a node (one, mostly) requested together at least the ``nvidia.com/gpu`` the node has
    allocatable: True where that holds of every node, False where a node kept a GPU none of them requested (a
    GPU no rank used may be another tenant's), None where a node is not known or no pod was placed. ``node``
    gives a node's object by name (the informer's copy).
    """
    requested: dict[str, int] = defaultdict(int)
    for pod in map(Pod, pods):
        if pod.node_name is not None:  # a pod never placed ran nothing and heard no GPU
            requested[pod.node_name] += pod.limits.get(GPU_RESOURCE, 0)
    unknown = not requested
    for name, gpus in requested.items():
        obj = node(name)
        if obj is None:
            unknown = True
        elif gpus < Node.of(obj).offers(GPU_RESOURCE):
            return False
    return None if unknown else True


def node_info(pods: Iterable[Obj], node: Callable[[str], Obj | None]) -> dict[str, dict[str, str]]:
    """What each node the pods ran on says of itself (:attr:`.nodeviews.Node.facts`), by node name.

    With its own health as the platform reports it (:attr:`.nodeviews.Node.health`), and what it advertises
    of its accelerators and EFA beside what its instance type has (:func:`.instances.count_facts`), and the
    devices its pod must see where the pod was given all its instance type has
    (:func:`.instances.expected_devices`). ``node`` gives a node's object by name (the informer's copy).
    """
    found = {}
    for pod in map(Pod, pods):
        obj = node(pod.node_name) if pod.node_name else None
        if pod.node_name and obj is not None:
            seen = nodeviews.Node(obj)
            found[pod.node_name] = {
                **seen.facts,
                **seen.health.facts,
                **count_facts(seen.instance_type, advertised_counts(seen.advertised)),
                **expected_devices(seen.instance_type, pod.limits),
            }
    return found


def check_device_plugins(daemonsets: Iterable[Obj], accelerator: Accelerator, efa: bool) -> list[str]:
    """Problems with the device-plugin DaemonSets the job relies on (empty when all are ready)."""
    needed = ([accelerator] if accelerator in ("nvidia", "neuron") else []) + (["efa"] if efa else [])
    found: dict[str, list[Obj]] = defaultdict(list)
    for ds in daemonsets:
        name = nodeviews.DaemonSet(ds).name
        for plugin in needed:
            if any(part in name for part in DEVICE_PLUGINS[plugin]):
                found[plugin].append(ds)
    problems = []
    for plugin in needed:
        if not found[plugin]:
            problems.append(
                f"no {plugin} device-plugin DaemonSet (looked for names containing "
                f"{' or '.join(DEVICE_PLUGINS[plugin])} in every namespace)"
            )
            continue
        for daemonset in map(nodeviews.DaemonSet, found[plugin]):
            desired, ready = daemonset.desired, daemonset.ready
            if desired == 0 or ready < desired:
                name = f"{daemonset.namespace or None}/{daemonset.name}"
                problems.append(f"{plugin} device plugin {name}: {ready} of {desired} pod(s) ready")
    return problems
