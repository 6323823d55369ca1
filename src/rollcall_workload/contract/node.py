"""The events the node's monitor writes into the node's log beside its ranks' (rank -1 where it names none).

The monitor (``python -m rollcall_workload.node.monitor``) watches the node's ranks from outside them: a rank
whose heartbeat and progress stopped (``silent``), the node's launcher at the launchers' rendezvous
(``launcher``), and each GPU's events through NVML (``gpu_event``).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from rollcall_workload.contract.events import event
from rollcall_workload.contract.schema import Event, optional, required

#: What a ``gpu_event`` reports: an Xid critical error, an ECC error, a clock change (a throttle reason
#: set or cleared), or the GPU lost (NVML answered GPU_IS_LOST, or it was gone from the count at the end).
GpuEventKind = Literal["xid", "single_bit_ecc", "double_bit_ecc", "clock", "lost"]
GPU_EVENT_KINDS: tuple[GpuEventKind, ...] = typing.get_args(GpuEventKind)
#: A line of the node's monitor names no rank: its ``rank`` and ``world_size`` are this.
NO_RANK = -1
#: What the node's monitor saw of a rank's process: there (first seen alive), or gone (first seen gone).
RankProcessState = Literal["seen", "gone"]
RANK_PROCESS_STATES: tuple[RankProcessState, ...] = typing.get_args(RankProcessState)
#: What a node's launcher (its torchrun agent) is doing, as its monitor sees it (``launcher``'s ``state``).
LauncherState = Literal["started", "waiting", "spawned"]
LAUNCHER_STATES: tuple[LauncherState, ...] = typing.get_args(LauncherState)
#: NVML's event type bit of a GPU's recovery action changed (nvml.h's ``nvmlEventTypeGpuRecoveryAction``):
#: a ``gpu_event`` of this ``event_type`` is of Xid :data:`RECOVERY_XID` and carries NVML's recovery action
#: in its ``data`` (the value of :data:`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`, an
#: ``nvmlDeviceGpuRecoveryAction_t``).
RECOVERY_ACTION_EVENT = 0x8000
#: The Xid the driver logs when a GPU's recovery action changed ("GPU Recovery Action Changed").
RECOVERY_XID = 154
#: NVML's field of a GPU's recovery action (``nvmlDeviceGetFieldValues``; pynvml's name for it).
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230


@event(
    "silent",
    "written by the node's monitor, not the rank: when the rank's heartbeat and progress both stopped past "
    "its bound plus the monitor's margin while its process still exists; on cuda, as soon as its progress "
    "stopped past its bound, where its heartbeat stopped and NVML read its GPU busy at every look of the "
    "confirmation window (the gpu_ fields: the GPU's own hang, the host waiting on it)",
)
@dataclass(kw_only=True, slots=True)
class Silent(Event):
    """The rank says nothing and runs no Python: its heartbeat stopped, its process lives (see Heartbeat)."""

    phase: str = optional("the phase its last heartbeat named", "")
    steps: int | None = optional("the steps and phases it had completed by then")
    stalled_s: float | None = optional("seconds since its last step or phase completed")
    heartbeat_s: float | None = optional("seconds since its last heartbeat")
    hang_after: float | None = optional("the rank's bound then, seconds")
    margin_s: float | None = optional("the monitor's margin past the bound, seconds")
    pid: int | None = optional("the rank's process")
    state: str = optional(
        "its process state as the node sees it: the letter of /proc/<pid>/stat (T stopped, t traced, "
        "D uninterruptible sleep, R running, S sleeping); empty where the node cannot tell",
        "",
    )
    state_name: str = optional('the same in words, e.g. "stopped", "uninterruptible sleep"', "")
    held_s: float | None = optional(
        "seconds the monitor itself has seen the heartbeat unchanged, on its own clock (a clock step or a "
        "pause of the monitor counts for nothing)"
    )
    gpu: int | None = optional("the rank's CUDA device, as its heartbeat named it")
    gpu_uuid: str | None = optional("that GPU's UUID, by which NVML read it")
    gpu_busy_pct: int | None = optional(
        "set only where the GPU read busy: the least NVML utilisation (percent) of the reads over the "
        "confirmation window, each at or above the monitor's threshold"
    )
    gpu_reads: int | None = optional("the NVML reads the window held, one per look")
    gpu_confirm_s: float | None = optional("seconds from the window's first read to its last")


@event(
    "launcher",
    "written by the node's monitor, not a rank (rank -1), where the monitor starts the node's launcher "
    "(local and Slurm): as it starts it (started), at each multiple of the join bound it waits with no "
    "rank of the node spawned (waiting: the launchers' rendezvous has not completed), and once it has "
    "spawned its ranks (spawned)",
)
@dataclass(kw_only=True, slots=True)
class Launcher(Event):
    """The node's launcher: up, waiting at the launchers' rendezvous, or past it (its ranks spawned)."""

    state: LauncherState = required("started, waiting or spawned")
    node_rank: int = required("the node's rank in the job (torchrun's --node-rank)")
    node: str | None = optional("the node: NODE_NAME, else SLURMD_NODENAME, else the host name")
    pid: int | None = optional("the launcher's process")
    waited_s: float | None = optional("seconds since the monitor started the launcher")
    bound_s: float | None = optional("the join bound it waits in steps of (--join-hang-after), seconds")
    process_state: str = optional(
        "the launcher's process state, the letter of /proc/<pid>/stat (as silent's state)", ""
    )
    process_state_name: str = optional("the same in words", "")
    state_held_s: float | None = optional(
        "seconds that state has held at every one of the monitor's looks (its own clock), since it was "
        "first seen; a state seen once holds 0"
    )


@event(
    "gpu_event",
    "written by the node's monitor, not a rank (rank -1): each NVML event of a GPU of the node, from before "
    "the ranks start until they all ended, and each GPU lost",
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
    data: int | None = optional(
        "NVML's event data as delivered (the Xid; the clock event reasons' mask); for event_type 0x8000 (a "
        "recovery action, Xid 154), NVML's recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"
    )
    reason: str = optional(
        'for lost: how it was seen, e.g. "NVML: GPU is lost", "7 GPUs at the end, 8 at the start"', ""
    )


@event(
    "rank_process",
    "written by the node's monitor, not the rank (under the rank's number): when it first sees the rank's "
    "process (seen: the rank is heard from before it can say a word), and when it first sees it gone "
    "(gone: however it left, with the interval it left in)",
)
@dataclass(kw_only=True, slots=True)
class RankProcess(Event):
    """A rank's process as the node sees it: there, or gone (its departure, between two looks)."""

    state: RankProcessState = required("seen or gone")
    pid: int = required("the rank's process (in the monitor's pid namespace)")
    node_rank: int | None = optional("the node's rank in the job, where the monitor knows it")
    node: str | None = optional("the node: NODE_NAME, else SLURMD_NODENAME, else the host name")
    local_rank: int | None = optional("the rank on its node (LOCAL_RANK)")
    visible_devices: str | None = optional(
        "the devices the rank may use, as its environment names them: NVIDIA_VISIBLE_DEVICES where it names "
        "UUIDs (the node's own names, whatever the container counts from), else CUDA_VISIBLE_DEVICES, else "
        "NVIDIA_VISIBLE_DEVICES (indexes); null where it names none"
    )
    alive_at: float | None = optional(
        "gone: the wall clock of the monitor's last look that saw the process alive (epoch seconds)"
    )
    gone_at: float | None = optional(
        "gone: the wall clock of the first look that saw it gone (epoch seconds); it left in between"
    )
