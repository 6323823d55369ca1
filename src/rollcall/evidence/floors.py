"""Published all-reduce bus-bandwidth floors, by instance type (``--min-busbw auto``).

A floor belongs to the *instance type* (``node.kubernetes.io/instance-type``, the run's
:attr:`~rollcall.jobspec.JobSpec.instance_type`), not to a backend: the judge reads it here, beside the
checks, and never from a wing. Each type may have two: one node, whose ranks all-reduce over NVLink, and two
nodes or more, whose all-reduces cross the fabric (EFA on AWS). Each floor says where it was published and at
which message size (nccl-tests' ``all_reduce_perf`` sizes, powers of two: "2 GB" is 2 GiB), or that its source
gives none.

A measured bandwidth depends on the message size: a small message never reaches the link's rate. The bandwidth
phase therefore measures at the floor's size, at most :data:`MAX_MEASURE_BYTES` (a 2 GiB buffer on a GPU), and
the largest size when the source names none (:func:`measure_bytes`); a measurement at a smaller size than the
floor's holds the link to a stricter test than the source did, never a looser one.

Sources (figures as their owners publish them):

- Azure/azurehpc-health-checks, ``conf/*.conf``: single-node NVLink all-reduce at 16 GB, ND H100 v5 at least
  460 GB/s, ND H200 v5 at least 431, ND A100 v4 at least 228. The EC2 types built on the same eight-GPU SXM
  boards (H100: p5.48xlarge; H200: p5e.48xlarge, p5en.48xlarge; A100: p4d.24xlarge, p4de.24xlarge) are held to
  the same NVLink floors.
- NVIDIA/aicr, ``recipes/overlays/h100-eks-training.yaml``: at least 300 GB/s all-reduce bus bandwidth for
  H100 on EKS, calibrated on p5.48xlarge over EFA (no message size given).
- GoogleCloudPlatform/cluster-health-scanner, its NCCL health check's ``BANDWIDTH_THRESHOLD``: two-node floors
  of 60 GB/s (a3-highgpu-8g), 150 (a3-megagpu-8g) and 250 (a3-ultragpu-8g) (no message size given).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollcall.evidence.perf import GroupBandwidth

#: The largest all-reduce buffer the bandwidth phase allocates on a GPU to meet a floor's size.
MAX_MEASURE_BYTES = 2 * 2**30
_GB = 2**30  # nccl-tests print sizes in powers of two

_AZURE = "Azure/azurehpc-health-checks conf (single-node NVLink all-reduce, {size})"
_AZURE_SAME_BOARD = _AZURE + ", held for {board}: the same eight-GPU SXM board"
_AICR = "NVIDIA/aicr recipes/overlays/h100-eks-training.yaml (H100 on EKS, calibrated on p5.48xlarge)"
_CHS = "GoogleCloudPlatform/cluster-health-scanner NCCL check BANDWIDTH_THRESHOLD (two nodes)"


class Fabric(enum.Enum):
    """What a group's all-reduce crosses: NVLink within one node, the network between nodes."""

    NVLINK = "NVLink"
    EFA = "EFA"
    NETWORK = "the network"


@dataclass(frozen=True)
class Floor:
    """One published bus-bandwidth floor.

    Attributes:
        busbw_gbps: the lowest all-reduce bus bandwidth, GB/s, a healthy group reaches.
        fabric: what the group's all-reduce crosses.
        source: where it was published.
        message_bytes: the all-reduce size it was published at (None: the source names none).
    """

    busbw_gbps: float
    fabric: Fabric
    source: str
    message_bytes: int | None = None

    def describe(self) -> str:
        """``300 GB/s over EFA (NVIDIA/aicr ..., no message size given)``."""
        size = f"at {size_label(self.message_bytes)}" if self.message_bytes else "no message size given"
        return f"{self.busbw_gbps:g} GB/s over {self.fabric.value} ({self.source}; {size})"

    def as_dict(self) -> dict[str, Any]:
        """The floor, JSON-ready."""
        return {
            "busbw_gbps": self.busbw_gbps,
            "fabric": self.fabric.value,
            "source": self.source,
            "message_bytes": self.message_bytes,
        }


@dataclass(frozen=True)
class InstanceFloors:
    """An instance type's floors: within one node, and for two nodes or more."""

    instance_type: str
    node: Floor | None = None
    nodes: Floor | None = None

    def as_dict(self, measured: Sequence[GroupBandwidth] = ()) -> dict[str, Any]:
        """The floors, JSON-ready, with the sizes the ``measured`` groups were measured at."""
        return {
            "instance_type": self.instance_type,
            "node": self.node.as_dict() if self.node else None,
            "nodes": self.nodes.as_dict() if self.nodes else None,
            "measured_bytes": sorted({g.bytes for g in measured}),
        }

    def for_group(self, scope: str, members: int) -> Floor | None:
        """The floor of a group of ``scope`` spanning ``members`` nodes: NVLink for one, the fabric beyond."""
        return self.node if scope == "node" or members == 1 else self.nodes


def _nvlink(busbw: float, board: str | None = None) -> Floor:
    size = "16 GB"
    source = _AZURE_SAME_BOARD.format(size=size, board=board) if board else _AZURE.format(size=size)
    return Floor(busbw, Fabric.NVLINK, source, 16 * _GB)


#: Every type with a published floor, by its ``node.kubernetes.io/instance-type``.
FLOORS: dict[str, InstanceFloors] = {
    f.instance_type: f
    for f in (
        InstanceFloors(
            "p5.48xlarge",
            node=_nvlink(460, "ND H100 v5 (H100)"),
            nodes=Floor(300, Fabric.EFA, _AICR),
        ),
        InstanceFloors("p5e.48xlarge", node=_nvlink(431, "ND H200 v5 (H200)")),
        InstanceFloors("p5en.48xlarge", node=_nvlink(431, "ND H200 v5 (H200)")),
        InstanceFloors("p4d.24xlarge", node=_nvlink(228, "ND A100 v4 (A100)")),
        InstanceFloors("p4de.24xlarge", node=_nvlink(228, "ND A100 v4 (A100)")),
        InstanceFloors("Standard_ND96isr_H100_v5", node=_nvlink(460)),
        InstanceFloors("Standard_ND96isr_H200_v5", node=_nvlink(431)),
        InstanceFloors("Standard_ND96asr_v4", node=_nvlink(228)),
        InstanceFloors("a3-highgpu-8g", nodes=Floor(60, Fabric.NETWORK, _CHS)),
        InstanceFloors("a3-megagpu-8g", nodes=Floor(150, Fabric.NETWORK, _CHS)),
        InstanceFloors("a3-ultragpu-8g", nodes=Floor(250, Fabric.NETWORK, _CHS)),
    )
}


def floors_of(instance_type: str | None) -> InstanceFloors | None:
    """The published floors of ``instance_type`` (None for a type without any, or no type)."""
    return FLOORS.get(instance_type) if instance_type else None


def measure_bytes(floors: InstanceFloors) -> int:
    """The all-reduce size to measure at: the largest size the type's floors name, capped, else the cap."""
    sizes = [f.message_bytes for f in (floors.node, floors.nodes) if f is not None and f.message_bytes]
    return min(max(sizes), MAX_MEASURE_BYTES) if sizes else MAX_MEASURE_BYTES


@dataclass(frozen=True)
class BelowFloor:
    """A node, ring pair or world whose bus bandwidth is below its instance type's published floor."""

    group: GroupBandwidth
    instance_type: str
    floor: Floor
    pods: tuple[str, ...] = ()

    def __str__(self) -> str:
        g = self.group
        pods = f" (pod(s) {', '.join(self.pods)})" if self.pods else ""
        return (
            f"{g.label}{pods}: bus bandwidth {g.busbw_gbps:.4g} GB/s at {size_label(g.bytes)}, below the "
            f"{self.instance_type} floor of {self.floor.describe()} (--min-busbw auto)"
        )

    def note(self) -> str:
        """What the junit case of each rank of the group says."""
        return (
            f"slow link: {self.group.label} at {self.group.busbw_gbps:.4g} GB/s, below the "
            f"{self.instance_type} floor of {self.floor.busbw_gbps:g} GB/s"
        )

    def as_dict(self) -> dict[str, Any]:
        """The finding, JSON-ready: the group, what it measured at which size, and the floor."""
        return {
            **self.group.finding(self.pods),
            "bytes": self.group.bytes,
            "instance_type": self.instance_type,
            "floor": self.floor.as_dict(),
            "message": str(self),
        }


def below_floors(
    groups: Sequence[GroupBandwidth],
    instance_type: str | None,
    pods: Mapping[int, Sequence[str]] | None = None,
) -> list[BelowFloor]:
    """The groups below the floor their scope has on ``instance_type`` (none without a known floor)."""
    floors = floors_of(instance_type)
    if floors is None or instance_type is None:
        return []
    pods = pods or {}
    found = []
    for g in groups:
        floor = floors.for_group(g.scope, len(g.nodes))
        if floor is not None and g.busbw_gbps < floor.busbw_gbps:
            found.append(BelowFloor(g, instance_type, floor, g.pods_of(pods)))
    return found


def measure_args(instance_type: str | None, accelerator: str) -> tuple[str, ...]:
    """train.py's arguments that measure the bandwidth phase at the size of the type's floors, on GPUs.

    Nothing on other devices or for a type without floors; ``--workload-args`` come after them, so a
    ``--bandwidth-mb`` of the user's own wins.
    """
    floors = floors_of(instance_type)
    if floors is None or accelerator != "nvidia":
        return ()
    return ("--bandwidth-mb", f"{measure_bytes(floors) / 2**20:g}")


def size_label(nbytes: int) -> str:
    """``2 GB``, ``64 MB``: an all-reduce size as nccl-tests print it (powers of two)."""
    return f"{nbytes / _GB:g} GB" if nbytes >= _GB else f"{nbytes / 2**20:g} MB"


__all__ = [
    "FLOORS",
    "MAX_MEASURE_BYTES",
    "BelowFloor",
    "Fabric",
    "Floor",
    "InstanceFloors",
    "below_floors",
    "floors_of",
    "measure_args",
    "measure_bytes",
    "size_label",
]
