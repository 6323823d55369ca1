"""Who holds a GPU's memory before this rank uses it: ``facts``' ``memory_used_mib`` and ``gpu_processes``.

:func:`held_memory` reads, through NVML, the memory in use on the rank's GPU and the processes NVML
lists on it (compute and graphics). ``run.py`` calls it (through ``facts.held_before_context``) after torch
has counted the devices and before the rank creates its CUDA context (the ``Accelerator``,
``torch.cuda.set_device``): the rank's own process holds nothing yet, so whatever is in use is another's,
from a job that ran before or runs beside it.

NVML names a process by its pid in the host's pid namespace, which a container's does not see. A pid is
named only where it resolves in the rank's own namespace (``/proc/<pid>`` exists there); every process is
placed (:data:`Holder`): ``self`` (this rank: never a stranger), ``job`` (its launcher, another rank of the
same launcher, or any process whose environment carries this run's :data:`RUN_ID_ENV`, as the ranks of
simulated nodes that share one GPU do on the local backend: a process of this job), ``container`` (another
process this rank can see), ``outside`` (a pid this namespace does not have: "a process outside this
container"). In a container a host pid may happen to be some other process's pid there too; the pid is then
named as a process of the container: an honest reading of what the rank can see, never taken for the rank
itself.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rollcall_workload import procfs
from rollcall_workload.contract.env import RUN_ID_ENV

#: Where a process NVML lists on the GPU stands to the rank that reads it (see the module docstring).
Holder = Literal["self", "job", "container", "outside"]
HOLDERS: tuple[Holder, ...] = typing.get_args(Holder)
#: What NVML says of a process's memory when it cannot tell (``NVML_VALUE_NOT_AVAILABLE``, 64 bits).
NOT_AVAILABLE = (1 << 64) - 1
MIB = 1 << 20


@dataclass(frozen=True)
class GpuProcess:
    """One process NVML lists on the GPU: its pid (NVML's: the host's), its memory (MiB, None unknown)."""

    pid: int
    used_mib: int | None
    holder: Holder

    def as_list(self) -> list[Any]:
        """``[pid, used_mib, holder]``, as ``facts``' ``gpu_processes`` carries it."""
        return [self.pid, self.used_mib, self.holder]


def holder(
    pid: int, *, me: int, parent: int, proc: Path = Path("/proc"), run_id: str | None = None
) -> Holder:
    """Where process ``pid`` stands to the rank ``me`` whose launcher is ``parent`` (see :data:`Holder`).

    ``run_id``: this run's id (:data:`RUN_ID_ENV`), where the rank has one; a process carrying the same is
    the job's.
    """
    if pid == me:
        return "self"
    if pid == parent and parent > 1:
        return "job"
    stat = procfs.stat(pid, str(proc))
    if stat is None:  # no such pid in this namespace (or gone since NVML listed it)
        return "outside"
    if parent > 1 and stat.ppid == parent:
        return "job"
    env = procfs.environ(pid, str(proc)) if run_id else None
    return "job" if env is not None and env.get(RUN_ID_ENV) == run_id else "container"


def _mib(value: Any) -> int | None:
    if value is None or not isinstance(value, int) or value >= NOT_AVAILABLE:
        return None
    return value // MIB


def gpu_processes(
    nvml: Any,
    handle: Any,
    *,
    me: int,
    parent: int,
    proc: Path = Path("/proc"),
    run_id: str | None = None,
) -> list[GpuProcess]:
    """The compute and graphics processes NVML lists on ``handle``, each pid once, with its holder."""
    seen: dict[int, GpuProcess] = {}
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for info in getattr(nvml, query)(handle):
            pid = int(info.pid)
            used = _mib(getattr(info, "usedGpuMemory", None))
            if pid not in seen or (used or 0) > (seen[pid].used_mib or 0):
                seen[pid] = GpuProcess(pid, used, holder(pid, me=me, parent=parent, proc=proc, run_id=run_id))
    return sorted(seen.values(), key=lambda p: (-(p.used_mib or 0), p.pid))


def memory_used_mib(nvml: Any, handle: Any) -> int:
    """The GPU's memory in use, MiB: NVML's v2 reading (without the driver's reserve) where it has one."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return int(nvml.nvmlDeviceGetMemoryInfo(handle, version=version).used) // MIB
        except TypeError:  # an nvidia-ml-py without the version argument
            pass
    return int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // MIB


def held_memory(
    nvml: Any,
    handle: Any,
    *,
    me: int | None = None,
    parent: int | None = None,
    proc: Path = Path("/proc"),
) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``facts`` fields of the memory in use on ``handle`` and its processes, and those unknown, with why.

    ``me`` and ``parent`` default to this process and its parent (the rank and its launcher); the run id is
    this process's :data:`RUN_ID_ENV`.
    """
    me = os.getpid() if me is None else me
    parent = os.getppid() if parent is None else parent
    run_id = os.environ.get(RUN_ID_ENV) or None
    found: dict[str, Any] = {}
    unknown: dict[str, str] = {}
    for name, read in (
        ("memory_used_mib", lambda: memory_used_mib(nvml, handle)),
        (
            "gpu_processes",
            lambda: [
                p.as_list()
                for p in gpu_processes(nvml, handle, me=me, parent=parent, proc=proc, run_id=run_id)
            ],
        ),
    ):
        try:
            found[name] = read()
        except Exception as exc:  # NVML raises its own errors for each unsupported query
            unknown[name] = str(exc) or type(exc).__name__
    return found, unknown


def strangers(processes: Iterable[GpuProcess]) -> list[GpuProcess]:
    """The processes that are not this job's (neither the rank, its launcher nor its sibling ranks)."""
    return [p for p in processes if p.holder in ("container", "outside")]


__all__ = [
    "HOLDERS",
    "GpuProcess",
    "Holder",
    "gpu_processes",
    "held_memory",
    "holder",
    "memory_used_mib",
    "strangers",
]
