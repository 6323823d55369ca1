"""Read-only views of nodes and of what makes and serves them.

A Node and its health as the platform reports it, a Karpenter NodePool, a device plugin's DaemonSet; the
labels that name a node's instance type, image and group. Like every view (:mod:`.views`), each wraps the
API's JSON as it is, copies nothing and never writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rollcall.backends.kubernetes.views import Obj, View, as_obj, as_objs, as_str, count
from rollcall.jobspec import EFA_RESOURCE, GPU_RESOURCE

#: The label naming a node's instance type (``p5.48xlarge``), set by its cloud provider.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
#: The labels naming the capacity reservation a node runs in: Karpenter's (and EKS Auto Mode's), the EKS
#: managed node groups'.
RESERVATION_LABELS: tuple[str, ...] = (
    "karpenter.k8s.aws/capacity-reservation-id",
    "eks.amazonaws.com/capacity-reservation-id",
)
#: Labels naming a node's machine image (EKS's AMI, GKE's OS image), and its group; the first present counts.
IMAGE_LABELS: tuple[str, ...] = ("eks.amazonaws.com/nodegroup-image", "cloud.google.com/gke-os-distribution")
GROUP_LABELS: tuple[str, ...] = (
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
)
#: The condition the EKS node monitoring agent sets from the health of a node's GPUs or Neuron devices.
ACCELERATED_HARDWARE_READY = "AcceleratedHardwareReady"
#: The devices whose allocatable a node's health holds against its capacity, by the suffix of their facts.
HELD_BACK: tuple[tuple[str, str], ...] = (("gpus", GPU_RESOURCE), ("efa", EFA_RESOURCE))


@dataclass(frozen=True)
class NodeHealth:
    """A node's own health as the platform reports it.

    Attributes:
        hardware_ready: the status of :data:`ACCELERATED_HARDWARE_READY` (``"True"``, ``"False"``,
            ``"Unknown"``), None when the node has no such condition (no agent).
        hardware_reason: the condition's reason and message, ``"reason: message"``.
        counts: each resource of :data:`HELD_BACK` the node lists, as (allocatable, capacity): the kubelet
            leaves a device its plugin calls unhealthy out of allocatable.
    """

    hardware_ready: str | None = None
    hardware_reason: str = ""
    counts: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def lost(self) -> dict[str, int]:
        """How many of each resource the node holds back from allocatable (its capacity has them)."""
        return {r: capacity - alloc for r, (alloc, capacity) in self.counts.items() if alloc < capacity}

    @property
    def facts(self) -> dict[str, str]:
        """The facts ``hardware_ready``, ``hardware_ready_reason``, ``allocatable_<x>``, ``capacity_<x>``.

        Read by the fitness rules ``hardware_ready`` and ``lost_devices``
        (:data:`rollcall.evidence.nodefacts.OBSERVED_KEYS`).
        """
        found = {}
        if self.hardware_ready is not None:
            found["hardware_ready"] = self.hardware_ready
            if self.hardware_reason:
                found["hardware_ready_reason"] = self.hardware_reason
        for fact, resource in HELD_BACK:
            if resource in self.counts:
                alloc, capacity = self.counts[resource]
                found |= {f"allocatable_{fact}": str(alloc), f"capacity_{fact}": str(capacity)}
        return found


@dataclass(frozen=True)
class Node(View):
    """A Node."""

    @property
    def cordoned(self) -> bool:
        """Whether the node is cordoned (``spec.unschedulable``)."""
        return bool(self._spec.get("unschedulable"))

    @property
    def taints(self) -> tuple[Mapping[str, str], ...]:
        """The node's taints (``key``, ``value``, ``effect``)."""
        return tuple(as_objs(self._spec.get("taints")))

    @property
    def allocatable(self) -> Mapping[str, object]:
        """What the node can allocate, as the API's quantities (``"8"``, ``"2048Gi"``)."""
        return as_obj(self._status.get("allocatable"))

    @property
    def capacity(self) -> Mapping[str, object]:
        """What the node has, as the API's quantities: what its device plugins enumerated."""
        return as_obj(self._status.get("capacity"))

    def advertised(self, resource: str) -> int | None:
        """How many of ``resource`` the node advertises: the lesser of its capacity and its allocatable.

        The kubelet leaves a device its plugin calls unhealthy out of allocatable, and one the plugin did not
        enumerate out of both; None when neither lists the resource.
        """
        listed = [count(m[resource]) for m in (self.capacity, self.allocatable) if resource in m]
        return min(listed) if listed else None

    @property
    def health(self) -> NodeHealth:
        """Its health as the platform reports it: the EKS agent's condition, devices held back."""
        cond = self.condition(ACCELERATED_HARDWARE_READY)
        reason = ": ".join(w for w in (cond.reason, cond.message) if w) if cond is not None else ""
        counts = {
            resource: (count(self.allocatable[resource]), count(self.capacity[resource]))
            for _, resource in HELD_BACK
            if resource in self.allocatable and resource in self.capacity
        }
        return NodeHealth((cond.status or "Unknown") if cond is not None else None, reason, counts)

    @property
    def instance_type(self) -> str | None:
        """The node's ``node.kubernetes.io/instance-type`` label."""
        return self.labels.get(INSTANCE_TYPE_LABEL)

    @property
    def facts(self) -> dict[str, str]:
        """What the node says of itself, by the keys of :data:`rollcall.evidence.nodefacts.OBSERVED_KEYS`.

        The kubelet, container-runtime, kernel and OS image versions from ``status.nodeInfo``; its image
        and group from the first of :data:`IMAGE_LABELS` and of :data:`GROUP_LABELS` it carries; its
        instance type (``node.kubernetes.io/instance-type``).
        """
        info = as_obj(self._status.get("nodeInfo"))
        found = {
            "kubelet": as_str(info.get("kubeletVersion")),
            "container_runtime": as_str(info.get("containerRuntimeVersion")),
            "kernel_version": as_str(info.get("kernelVersion")),
            "os_image": as_str(info.get("osImage")),
            "image": next((self.labels[k] for k in IMAGE_LABELS if self.labels.get(k)), ""),
            "node_group": next((self.labels[k] for k in GROUP_LABELS if self.labels.get(k)), ""),
            "instance_type": self.instance_type or "",
            "zone": self.labels.get(ZONE_LABEL, ""),
            "instance_id": self.instance_id,
            "capacity_reservation": next(
                (self.labels[k] for k in RESERVATION_LABELS if self.labels.get(k)), ""
            ),
        }
        return {k: v for k, v in found.items() if v}

    @property
    def instance_id(self) -> str:
        """The cloud instance's ID: the last part of ``spec.providerID`` (``aws:///us-west-2a/i-0abc``)."""
        provider = str(self._spec.get("providerID") or "")
        return provider.rstrip("/").rsplit("/", 1)[-1] if "://" in provider else ""


@dataclass(frozen=True)
class DaemonSet(View):
    """A DaemonSet (a device plugin's)."""

    @property
    def desired(self) -> int:
        """How many of its pods should run (``desiredNumberScheduled``)."""
        return int(self._status.get("desiredNumberScheduled") or 0)

    @property
    def ready(self) -> int:
        """How many of its pods are ready (``numberReady``)."""
        return int(self._status.get("numberReady") or 0)


@dataclass(frozen=True)
class NodePool(View):
    """A Karpenter (or EKS Auto Mode) NodePool: the nodes it makes and how many it may."""

    @property
    def _template(self) -> Obj:
        return as_obj(self._spec.get("template"))

    @property
    def _template_spec(self) -> Obj:
        return as_obj(self._template.get("spec"))

    @property
    def template_labels(self) -> Mapping[str, str]:
        """The labels its template sets on each node."""
        return as_obj(as_obj(self._template.get("metadata")).get("labels"))

    @property
    def requirements(self) -> list[Obj]:
        """Its node selector requirements (``key``, ``operator``, ``values``)."""
        return as_objs(self._template_spec.get("requirements"))

    @property
    def taints(self) -> list[Obj]:
        """The taints its nodes get."""
        return as_objs(self._template_spec.get("taints"))

    @property
    def node_class_group(self) -> str:
        """The API group of its node class (``eks.amazonaws.com`` for EKS Auto Mode)."""
        return as_str(as_obj(self._template_spec.get("nodeClassRef")).get("group"))

    @property
    def limits(self) -> Mapping[str, object]:
        """The most of each resource its nodes may add up to."""
        return as_obj(self._spec.get("limits"))

    @property
    def used(self) -> Mapping[str, object]:
        """What its nodes hold now."""
        return as_obj(self._status.get("resources"))
