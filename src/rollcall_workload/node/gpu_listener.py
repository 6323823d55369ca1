"""The node's GPU event listener: a :class:`~rollcall_workload.node.monitor.Source` of the node's monitor.

It registers one NVML event set on every GPU of the node (Xid critical errors, single- and double-bit ECC
errors, and clock changes, each where the GPU supports it) when the monitor starts, before any rank does,
and keeps it until the monitor ends, after the last rank ended: an event that kills a rank is not lost with
it. Each :meth:`GpuEvents.poll` drains the set without waiting (``nvmlEventSetWait_v2`` with a timeout of
0) and writes one ``gpu_event`` line (:class:`~rollcall_workload.contract.node.GpuEvent`) per event, with the
GPU's index, UUID and serial, the node and the wall clock. An NVML event carries no process: the suite ties
it to the rank on that GPU by UUID and to the rank's phase by time.

A clock change is written only when the GPU's clock event reasons (throttle reasons) changed since the last
one written for it, at most once per :data:`CLOCK_EVERY_S` per GPU: clocks change all the time.

A GPU is written ``lost`` when NVML answers GPU_IS_LOST for it (an event wait that answers so is followed by
a query of each GPU, to name which, and a new event set over the others), and, at :meth:`GpuEvents.close`,
each GPU counted at the start that is not among those NVML counts at the end.

Without NVML (no ``pynvml``, no driver, no GPU) the listener is off: :attr:`GpuEvents.off` says why, and
it writes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollcall_workload.contract import NODE_NAME_ENV, SLURM_NODE_ENV, encode_event
from rollcall_workload.contract.node import NO_RANK, GpuEventKind
from rollcall_workload.rank.facts import load_nvml

#: NVML's event types this listener registers, by the kind written (nvml.h's nvmlEventType* bits).
EVENT_TYPES: tuple[tuple[str, int, GpuEventKind], ...] = (
    ("nvmlEventTypeSingleBitEccError", 0x1, "single_bit_ecc"),
    ("nvmlEventTypeDoubleBitEccError", 0x2, "double_bit_ecc"),
    ("nvmlEventTypeXidCriticalError", 0x8, "xid"),
    ("nvmlEventTypeClock", 0x10, "clock"),
)
#: NVML's return codes read here (nvml.h).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
#: The most events one poll drains (the rest wait for the next poll).
MAX_PER_POLL = 256
#: A GPU's clock changes are written at most once per this many seconds, and only when its reasons changed.
CLOCK_EVERY_S = 10.0
LOST = "NVML: GPU is lost"


def node_name(env: dict[str, str] | None = None) -> str:
    """The node as the ranks' ``start`` names it: NODE_NAME, else SLURMD_NODENAME, else the host name."""
    env = dict(os.environ) if env is None else env
    return env.get(NODE_NAME_ENV) or env.get(SLURM_NODE_ENV) or socket.gethostname()


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key(handle: Any) -> Any:
    """A device handle as a dictionary key: pynvml's are ctypes pointers, equal only by address."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


@dataclass
class Gpu:
    """One GPU of the node as counted at the start: its handle, index, UUID and serial."""

    index: int
    handle: Any
    uuid: str | None
    serial: str | None
    lost: bool = False
    said_lost: bool = False
    reasons: int | None = None  # the clock event reasons last written
    clock_at: float = float("-inf")


@dataclass
class GpuEvents:
    """The node's GPUs' NVML events, as ``gpu_event`` lines (see the module's docstring)."""

    nvml: Any = None
    node: str = ""
    off: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    registered: dict[int, list[GpuEventKind]] = field(default_factory=dict)  # index: the kinds registered
    _set: Any = None
    _by_handle: dict[Any, Gpu] = field(default_factory=dict)

    @classmethod
    def open(cls, loader: Callable[[], Any] = load_nvml, node: str | None = None) -> GpuEvents:
        """Count the node's GPUs and register the event set on each; off, with why, where NVML cannot."""
        name = node if node is not None else node_name()
        try:
            nvml = loader()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, _DriverNotLoaded ...
            return cls(node=name, off=f"no NVML: {type(exc).__name__}: {exc}")
        self = cls(nvml, name)
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._set = nvml.nvmlEventSetCreate()
        except Exception as exc:
            self.off = f"NVML answered {type(exc).__name__}: {exc}"
            return self
        if count == 0:
            self.off = "NVML counts no GPU"
        for index in range(count):
            self._register(index)
        return self

    def _register(self, index: int) -> None:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            self.gpus.append(Gpu(index, None, None, None, lost=_code(exc) == NVML_ERROR_GPU_IS_LOST))
            return
        gpu = Gpu(index, handle, self._ask(nvml.nvmlDeviceGetUUID, handle), None)
        gpu.serial = self._ask(nvml.nvmlDeviceGetSerial, handle)
        self.gpus.append(gpu)
        self._by_handle[_key(handle)] = gpu
        self._listen(gpu)

    def _listen(self, gpu: Gpu) -> None:
        """Register the event set for each kind the GPU supports."""
        nvml = self.nvml
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(gpu.handle))
        except Exception:
            supported = sum(bit for _name, bit, _kind in EVENT_TYPES)
        kinds: list[GpuEventKind] = []
        for name, bit, kind in EVENT_TYPES:
            mask = int(getattr(nvml, name, bit))
            if not supported & mask:
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(gpu.handle, mask, self._set)
            except Exception as exc:
                if _code(exc) == NVML_ERROR_GPU_IS_LOST:
                    gpu.lost = True
                continue  # not supported here after all, or refused: the other kinds still register
            kinds.append(kind)
        self.registered[gpu.index] = kinds

    def _rebuild(self) -> None:
        """A new event set over the GPUs not lost: NVML answers GPU_IS_LOST to a set that holds a lost one."""
        with contextlib.suppress(Exception):
            self.nvml.nvmlEventSetFree(self._set)
        try:
            self._set = self.nvml.nvmlEventSetCreate()
        except Exception as exc:
            self._set, self.off = None, f"NVML answered {type(exc).__name__}: {exc} (after a GPU was lost)"
            return
        for gpu in self.gpus:
            if not gpu.lost and gpu.handle is not None:
                self._listen(gpu)

    @staticmethod
    def _ask(query: Callable[[Any], Any], handle: Any) -> str | None:
        try:
            return _text(query(handle))
        except Exception:
            return None

    def poll(self, now: float) -> list[bytes]:
        """Every event waiting in the set, as lines; a GPU that NVML answers is lost, once."""
        if self.off is not None or self._set is None:
            return []
        lines = self._lost(now, LOST)
        wait = getattr(self.nvml, "nvmlEventSetWait_v2", None) or self.nvml.nvmlEventSetWait
        for _ in range(MAX_PER_POLL):
            try:
                data = wait(self._set, 0)
            except Exception as exc:
                if _code(exc) == NVML_ERROR_GPU_IS_LOST:
                    self._find_lost()
                    lines += self._lost(now, LOST)
                    self._rebuild()  # the other GPUs' events still count
                break  # NVML_ERROR_TIMEOUT: nothing more now
            lines += self._event(data, now)
        return lines

    def _event(self, data: Any, now: float) -> list[bytes]:
        gpu = self._by_handle.get(_key(getattr(data, "device", None)))
        event_type, value = int(getattr(data, "eventType", 0)), int(getattr(data, "eventData", 0))
        kind = next(
            (k for name, bit, k in EVENT_TYPES if int(getattr(self.nvml, name, bit)) == event_type), None
        )
        if kind is None:
            return []
        if kind == "clock":
            if gpu is None or now - gpu.clock_at < CLOCK_EVERY_S:
                return []
            reasons = self._reasons(gpu)
            if reasons is None or reasons == gpu.reasons:
                return []
            gpu.reasons, gpu.clock_at, value = reasons, now, reasons
        xid = value if kind == "xid" else None
        return [self._line(gpu, kind, now, event_type=event_type, data=value, xid=xid)]

    def _reasons(self, gpu: Gpu) -> int | None:
        nvml = self.nvml
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        read = read or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        try:
            return int(read(gpu.handle)) if read is not None else None
        except Exception:
            return None

    def _lost(self, now: float, reason: str) -> list[bytes]:
        """A line for each GPU found lost and not yet said so."""
        lines = []
        for gpu in self.gpus:
            if gpu.lost and not gpu.said_lost:
                gpu.said_lost = True
                lines.append(self._line(gpu, "lost", now, reason=reason))
        return lines

    def _find_lost(self) -> None:
        """Mark each GPU that answers GPU_IS_LOST to a query now (the wait does not say which one did)."""
        for gpu in self.gpus:
            if gpu.lost or gpu.handle is None:
                continue
            try:
                self.nvml.nvmlDeviceGetTemperature(gpu.handle, getattr(self.nvml, "NVML_TEMPERATURE_GPU", 0))
            except Exception as exc:
                gpu.lost = _code(exc) == NVML_ERROR_GPU_IS_LOST

    def close(self, now: float) -> list[bytes]:
        """Count the GPUs again: each counted at the start and not now is lost; then free the event set."""
        if self.off is not None or self._set is None:
            return []
        lines = self.poll(now)
        nvml, start = self.nvml, len(self.gpus)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # the driver itself lost: no GPU is counted
            count = 0 if _code(exc) == NVML_ERROR_GPU_IS_LOST else start
        present = set()
        for index in range(count):
            with contextlib.suppress(Exception):
                present.add(_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))))
        if count < start:
            for gpu in self.gpus:
                gpu.lost = gpu.lost or gpu.uuid is None or gpu.uuid not in present
            lines += self._lost(now, f"{count} GPUs at the end, {start} at the start")
        with contextlib.suppress(Exception):
            nvml.nvmlEventSetFree(self._set)
        self._set = None
        return lines

    def describe(self) -> str:
        """What the listener watches, or why it is off: one line for the monitor's stderr."""
        if self.off is not None:
            return f"GPU events off: {self.off}"
        kinds = sorted({k for ks in self.registered.values() for k in ks})
        return f"GPU events of {len(self.gpus)} GPUs on {self.node}: {', '.join(kinds) or 'none registered'}"

    def _line(self, gpu: Gpu | None, kind: GpuEventKind, now: float, **fields: Any) -> bytes:
        return encode_event(
            "gpu_event",
            NO_RANK,
            NO_RANK,
            kind=kind,
            gpu=gpu.index if gpu is not None else -1,
            uuid=gpu.uuid if gpu is not None else None,
            serial=gpu.serial if gpu is not None else None,
            node=self.node,
            time=round(now, 6),
            **{k: v for k, v in fields.items() if v is not None},
        )


__all__ = ["CLOCK_EVERY_S", "EVENT_TYPES", "LOST", "Gpu", "GpuEvents", "node_name"]
