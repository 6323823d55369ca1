"""The ``launcher`` record: what the node's monitor sees of the node's launcher at the launchers' rendezvous.

Declared here, with the standard library and the schema only, and registered among the contract's events
by :mod:`rollcall_workload.contract`; what writes it is :class:`rollcall_workload.monitor.LauncherWatch`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

from rollcall_workload.schema import Event, optional, required

#: What a node's launcher (its torchrun agent) is doing, as its monitor sees it (``launcher``'s ``state``).
LauncherState = Literal["started", "waiting", "spawned"]
LAUNCHER_STATES: tuple[LauncherState, ...] = typing.get_args(LauncherState)
LAUNCHER_WHEN = (
    "written by the node's monitor, not a rank (rank -1), where the monitor starts the node's launcher "
    "(local and Slurm): as it starts it (started), at each multiple of the join bound it waits with no "
    "rank of the node spawned (waiting: the launchers' rendezvous has not completed), and once it has "
    "spawned its ranks (spawned)"
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


__all__ = ["LAUNCHER_STATES", "LAUNCHER_WHEN", "Launcher", "LauncherState"]
