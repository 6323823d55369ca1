"""Capacity that can arrive: which of the cluster's provisioners could create the nodes a run needs.

When fewer usable nodes exist than ``--nodes`` (node pools that sit at zero between runs), a run may still
start if the cluster can provision them:

- a Karpenter ``NodePool`` (``karpenter.sh/v1``; EKS Auto Mode's pools are NodePools too, recognised by
  their ``eks.amazonaws.com`` node class) whose template can carry every label the Job selects on: the
  instance type and each ``--node-selector`` label. A label is carried when the template sets it, when a
  requirement allows it, or when Karpenter derives it itself (instance type, zone, arch, capacity type, and
  the instance family/category/generation labels, derived here from the instance type's name). A pool is
  out when it is not Ready, when its template taints are not tolerated by the Job, or when its limits on
  the accelerator resource or on ``nodes`` leave too little room;
- a cluster-autoscaler (its ``kube-system/cluster-autoscaler-status`` ConfigMap exists). Its status does
  not say which labels its node groups carry, so it is trusted only when ``--capacity-timeout`` was given
  explicitly: the user says that capacity will come.

:func:`find` gives a :class:`Lookup`: the matching :class:`Provisioner` records and a line for each thing
looked at, which the failure message shows when none matches. :func:`shape` says what a node of a known
instance type offers (from :mod:`.instances`), since no such node exists to read it from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes.utils import parse_quantity

from rollcall.backends.kubernetes.discovery import requested_resource
from rollcall.backends.kubernetes.instances import INSTANCE_TYPES, lookup
from rollcall.backends.kubernetes.nodeviews import INSTANCE_TYPE_LABEL, NodePool
from rollcall.jobspec import Accelerator

Obj = dict[str, Any]
ProvisionerKind = Literal["karpenter", "eks-auto-mode", "cluster-autoscaler"]

NODEPOOL_LABEL = "karpenter.sh/nodepool"
AUTOSCALER_STATUS = ("kube-system", "cluster-autoscaler-status")
#: Labels Karpenter sets on a node from the instance type and offering it picks, without the pool naming them.
_DERIVED = frozenset(
    {
        INSTANCE_TYPE_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
    }
)
_FAMILY_PREFIXES = ("karpenter.k8s.aws/", "eks.amazonaws.com/", "karpenter.kwok.sh/")
_TYPE_NAME = re.compile(r"^(?P<category>[a-z]+)(?P<generation>\d+)[a-z-]*\.(?P<size>\w+)$")


@dataclass(frozen=True)
class Provisioner:
    """Something that can create the nodes a run needs.

    Attributes:
        kind: a Karpenter NodePool, an EKS Auto Mode NodePool, or a cluster-autoscaler.
        name: the NodePool's name (``cluster-autoscaler`` for the autoscaler).
    """

    kind: ProvisionerKind
    name: str

    def __str__(self) -> str:
        if self.kind == "cluster-autoscaler":
            return "cluster-autoscaler (kube-system/cluster-autoscaler-status)"
        what = "EKS Auto Mode NodePool" if self.kind == "eks-auto-mode" else "Karpenter NodePool"
        return f"{what} {self.name}"


@dataclass(frozen=True)
class Lookup:
    """What can provision the missing nodes, and what was looked at (for the message when nothing can)."""

    provisioners: tuple[Provisioner, ...]
    looked: tuple[str, ...]

    @property
    def karpenter(self) -> bool:
        """Whether a NodePool will provision (so NodeClaims show the progress)."""
        return any(p.kind != "cluster-autoscaler" for p in self.provisioners)

    def describe(self) -> str:
        """One line: what the run waits for."""
        return ", ".join(map(str, self.provisioners)) or "nothing"

    def report(self) -> str:
        """The lines a failed discovery adds: what was looked for."""
        return "\n".join(["  no capacity can arrive; looked for:", *(f"    {line}" for line in self.looked)])


@dataclass(frozen=True)
class Shape:
    """What one node of an instance type offers a pod."""

    accelerator: Accelerator
    resource: str | None
    count: int
    efa: int = 0


def shape(instance_type: str | None) -> Shape | None:
    """What a node of ``instance_type`` offers a pod, when :mod:`.instances` knows its devices."""
    known = lookup(instance_type)
    if known is None:
        return None
    if known.gpus:
        return Shape("nvidia", requested_resource("nvidia"), known.gpus, known.efa)
    if known.neuron_cores:
        return Shape("neuron", requested_resource("neuron"), known.advertised_neuron_cores, known.efa)
    return None


def plannable() -> list[str]:
    """The instance types :func:`shape` can plan a pod for."""
    return sorted(name for name in INSTANCE_TYPES if shape(name) is not None)


def derived_labels(instance_type: str) -> dict[str, str]:
    """The family, category and generation labels a provisioner derives from an AWS-style type name."""
    m = _TYPE_NAME.match(instance_type)
    if not m:
        return {}
    values = {
        "instance-family": instance_type.split(".", maxsplit=1)[0],
        "instance-category": m.group("category"),
        "instance-generation": m.group("generation"),
        "instance-size": m.group("size"),
    }
    return {prefix + key: value for prefix in _FAMILY_PREFIXES for key, value in values.items()}


def allows(requirement: Mapping[str, Any], value: str | None) -> bool:
    """Whether a node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) admits ``value``."""
    op, values = requirement.get("operator"), list(requirement.get("values") or [])
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def nodepool_mismatch(
    pool: Obj,
    labels: Mapping[str, str],
    tolerates: Any,
    need: Mapping[str, int],
) -> str | None:
    """Why a NodePool cannot provision a node with ``labels`` and room for ``need``; None when it can.

    ``tolerates(taint)`` says whether the Job tolerates a taint; ``need`` is the total the run asks of the
    pool (the accelerator resource and ``nodes``), checked against its limits.
    """
    view = NodePool(pool)
    name, set_labels, requirements = view.name, view.template_labels, view.requirements
    ready = view.condition("Ready")
    if ready is not None and ready.status == "False":
        return f"not Ready ({ready.reason or ready.message or 'Ready=False'})"
    derived = derived_labels(labels.get(INSTANCE_TYPE_LABEL, ""))
    for key, value in labels.items():
        if key == NODEPOOL_LABEL:
            if value != name:
                return f"its nodes are labelled {NODEPOOL_LABEL}={name}, not {value}"
            continue
        if key in set_labels and set_labels[key] != value:
            return f"its template sets {key}={set_labels[key]}, not {value}"
        on_key = [r for r in requirements if r.get("key") == key]
        for r in on_key:
            if not allows(r, value):
                return f"it requires {key} {r.get('operator')} {r.get('values') or []}, not {value}"
        if key not in set_labels and not on_key and key not in _DERIVED:
            return f"its nodes would not carry {key}={value}"
    for r in requirements:
        key = r.get("key", "")
        if key in derived and not allows(r, derived[key]):
            return f"it requires {key} {r.get('operator')} {r.get('values') or []}, not {derived[key]}"
    for taint in view.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(taint):
            return f"its nodes are tainted {taint.get('key')}:{taint.get('effect')} (not tolerated)"
    limits, used = view.limits, view.used
    for resource, amount in need.items():
        if resource in limits:
            room = _number(limits[resource]) - _number(used.get(resource, 0))
            if room < amount:
                return f"its limit {resource}={limits[resource]} leaves room for {room:g}, {amount} needed"
    return None


def find(
    nodepools: Sequence[Obj] | None,
    autoscaler_status: Obj | None,
    *,
    labels: Mapping[str, str],
    tolerates: Any,
    need: Mapping[str, int],
    trust_autoscaler: bool,
    errors: Mapping[str, str] | None = None,
) -> Lookup:
    """The provisioners that can create nodes with ``labels``; see the module docstring.

    ``nodepools`` is None when the cluster has no NodePool API; ``errors`` holds what could not be read
    (``"nodepools"``, ``"autoscaler"``: the API's message).
    """
    errors = errors or {}
    found: list[Provisioner] = []
    looked: list[str] = []
    wanted = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "any labels"
    if "nodepools" in errors:
        looked.append(f"Karpenter NodePools (karpenter.sh/v1): could not list them: {errors['nodepools']}")
    elif nodepools is None:
        looked.append("Karpenter NodePools (karpenter.sh/v1): the API is not installed")
    elif not nodepools:
        looked.append("Karpenter NodePools (karpenter.sh/v1): none exist")
    else:
        out = []
        for pool in sorted(nodepools, key=lambda p: NodePool(p).name):
            why = nodepool_mismatch(pool, labels, tolerates, need)
            name = NodePool(pool).name
            if why is None:
                found.append(Provisioner(_pool_kind(pool), name))
            else:
                out.append(f"{name}: {why}")
        if out:
            looked.append(f"Karpenter NodePools (karpenter.sh/v1) for nodes with {wanted}:")
            looked += [f"  {line}" for line in out]
    if "autoscaler" in errors:
        looked.append(
            f"cluster-autoscaler: could not read {'/'.join(AUTOSCALER_STATUS)}: {errors['autoscaler']}"
        )
    elif autoscaler_status is None:
        looked.append(f"cluster-autoscaler: no {'/'.join(AUTOSCALER_STATUS)} ConfigMap (none runs)")
    elif trust_autoscaler:
        found.append(Provisioner("cluster-autoscaler", "cluster-autoscaler"))
    else:
        looked.append(
            "cluster-autoscaler: it runs, but its status does not say which labels its node groups carry; "
            "give --capacity-timeout to wait for it to scale up"
        )
    return Lookup(tuple(found), tuple(looked))


def _pool_kind(pool: Obj) -> ProvisionerKind:
    return "eks-auto-mode" if NodePool(pool).node_class_group == "eks.amazonaws.com" else "karpenter"


def _number(quantity: object) -> float:
    try:
        return float(parse_quantity(quantity))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError):
        return 0.0
