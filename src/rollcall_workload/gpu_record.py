"""The ``gpu_event`` record: what the node's monitor heard from a GPU during the run (NVML's event set).

Declared here, with the standard library and the schema only, and registered among the contract's events
by :mod:`rollcall_workload.contract`; the listener that writes it is :mod:`rollcall_workload.gpu_events`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from rollcall_workload.schema import Event, optional, required

#: What a ``gpu_event`` reports: an Xid critical error, an ECC error, a clock change (a throttle reason
#: set or cleared), or the GPU lost (NVML answered GPU_IS_LOST, or it was gone from the count at the end).
GpuEventKind = Literal["xid", "single_bit_ecc", "double_bit_ecc", "clock", "lost"]
GPU_EVENT_KINDS: tuple[GpuEventKind, ...] = typing.get_args(GpuEventKind)
#: A line of the node's monitor names no rank: its ``rank`` and ``world_size`` are this.
NO_RANK = -1
GPU_EVENT_WHEN = (
    "written by the node's monitor, not a rank (rank -1): each NVML event of a GPU of the node, from before "
    "the ranks start until they all ended, and each GPU lost"
)


@dataclass(kw_only=True, slots=True)
class GpuEvent(Event):
    """One event of one GPU of the node: the suite ties it to the rank on that GPU by UUID (else index)."""

    kind: GpuEventKind = required("xid, single_bit_ecc, double_bit_ecc, clock (clock event reasons), or lost")
    gpu: int = required("the GPU's NVML index on the node; -1 when NVML could not name it")
    uuid: str | None = optional("the GPU's UUID, as the ranks' facts name it (gpu_uuid)")
    serial: str | None = optional("the GPU's serial number")
    node: str | None = optional("the node: NODE_NAME, else SLURMD_NODENAME, else the host name")
    xid: int | None = optional("the Xid, for kind xid (NVML's event data)")
    event_type: int | None = optional("NVML's event type bit (nvmlEventType*), e.g. 8 for an Xid")
    data: int | None = optional("NVML's event data as delivered (the Xid; the clock event reasons' mask)")
    reason: str = optional(
        'for lost: how it was seen, e.g. "NVML: GPU is lost", "7 GPUs at the end, 8 at the start"', ""
    )


__all__ = ["GPU_EVENT_KINDS", "GPU_EVENT_WHEN", "NO_RANK", "GpuEvent", "GpuEventKind"]
