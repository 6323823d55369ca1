"""The node's GPU event listener: a :class:`~rollcall_workload.node.monitor.Source` of the node's monitor.

It registers one NVML event set on every GPU of the node (Xid critical errors, single- and double-bit ECC
errors, and clock changes, each where the GPU supports it) when the monitor starts, before any rank does,
and keeps it until the monitor ends, after the last rank ended: an event that kills a rank is not lost with
it. Each :meth:`GpuEvents.poll` drains the set without waiting (``nvmlEventSetWait_v2`` with a timeout of
0) and writes one ``gpu_event`` line (:class:`~rollcall_workload.contract.node.GpuEvent`) per event, with the
GPU's index, UUID and serial, the node and the wall clock. An NVML event carries no process: the suite ties
it to the rank on that GPU by UUID and to the rank's phase by time.

Xid 154 (a GPU's recovery action changed) is written with the action itself: where the GPU supports it, the
set holds ``nvmlEventTypeGpuRecoveryAction`` (0x8000) too, and on that event, or on an Xid 154, the listener
reads NVML's field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` (``nvmlDeviceGetFieldValues``) and writes one
``gpu_event`` of Xid 154 whose ``event_type`` is 0x8000 and whose ``data`` is the action (0 none, 1 GPU reset,
2 node reboot, ...; :data:`~rollcall_workload.contract.node.RECOVERY_ACTION_EVENT`); the same action of one
GPU delivered both ways within :data:`RECOVERY_SAME_S` is written once. Where the field cannot be read (an
older driver or ``pynvml``, a GPU that does not report it), an Xid 154 is written as NVML delivered it, and
:meth:`GpuEvents.describe` says why the action cannot be read. pynvml's names are used where it has them,
nvml.h's numbers where an older ``nvidia-ml-py`` lacks them.

A clock change is written only when the GPU's clock event reasons (throttle reasons) changed since the last
one written for it, at most once per :data:`CLOCK_EVERY_S` per GPU: clocks change all the time.

A GPU is written ``lost`` when NVML answers GPU_IS_LOST for it (an event wait that answers so is followed by
a query of each GPU, to name which, and a new event set over the others), and, at :meth:`GpuEvents.close`,
each GPU counted at the start that is not among those NVML counts at the end.

Without NVML (no ``pynvml``, no driver, no GPU) the listener is off: :attr:`GpuEvents.off` says why, and
it writes nothing.

:class:`GpuLoads` reads one GPU's load by its UUID when the monitor asks (:class:`Load`: NVML's utilisation
and the compute processes on it), for a rank whose heartbeat stopped (:mod:`rollcall_workload.node.ranks`);
any error of NVML's reads as unknown.
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
from rollcall_workload.contract.node import (
    NO_RANK,
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    RECOVERY_ACTION_EVENT,
    RECOVERY_XID,
    GpuEventKind,
)
from rollcall_workload.rank.facts import load_nvml

#: NVML's event types this listener registers, by the kind written (nvml.h's nvmlEventType* bits).
EVENT_TYPES: tuple[tuple[str, int, GpuEventKind], ...] = (
    ("nvmlEventTypeSingleBitEccError", 0x1, "single_bit_ecc"),
    ("nvmlEventTypeDoubleBitEccError", 0x2, "double_bit_ecc"),
    ("nvmlEventTypeXidCriticalError", 0x8, "xid"),
    ("nvmlEventTypeClock", 0x10, "clock"),
)
#: NVML's event type of a GPU's recovery action changed, and its field: pynvml's names, nvml.h's numbers.
RECOVERY_EVENT = ("nvmlEventTypeGpuRecoveryAction", RECOVERY_ACTION_EVENT)
RECOVERY_FIELD = ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
#: A field value's member of ``c_nvmlValue_t`` by its ``valueType`` (nvml.h's ``nvmlValueType_t``).
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
#: Seconds within which the same recovery action of one GPU, delivered as its event and as an Xid 154, is one.
RECOVERY_SAME_S = 5.0
#: NVML's return codes read here (nvml.h).
NVML_SUCCESS = 0
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
    recovery_event: bool = False  # nvmlEventTypeGpuRecoveryAction registered
    recovery_off: str | None = None  # why its recovery action cannot be read; None where it can
    recovery: tuple[int, float] | None = None  # the recovery action last written, and when


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
        gpu.recovery_event = self._register_recovery(gpu, supported)
        _, gpu.recovery_off = self._read_recovery(gpu)

    def _register_recovery(self, gpu: Gpu, supported: int) -> bool:
        """Register the recovery action's event where the GPU supports it."""
        mask = int(getattr(self.nvml, RECOVERY_EVENT[0], RECOVERY_EVENT[1]))
        if not supported & mask:
            return False
        try:
            self.nvml.nvmlDeviceRegisterEvents(gpu.handle, mask, self._set)
        except Exception:
            return False
        return True

    def _read_recovery(self, gpu: Gpu) -> tuple[int | None, str | None]:
        """The GPU's recovery action (NVML's field), or None and why it cannot be read."""
        read = getattr(self.nvml, "nvmlDeviceGetFieldValues", None)
        if read is None:
            return None, "this pynvml has no nvmlDeviceGetFieldValues"
        field_id = int(getattr(self.nvml, RECOVERY_FIELD[0], RECOVERY_FIELD[1]))
        try:
            value = read(gpu.handle, [field_id])[0]
        except Exception as exc:  # NVMLError_FunctionNotFound (an older driver), ...
            return None, f"NVML answered {type(exc).__name__}: {exc}"
        code = int(getattr(value, "nvmlReturn", NVML_SUCCESS))
        if code != NVML_SUCCESS:
            said = "not supported" if code == NVML_ERROR_NOT_SUPPORTED else f"error {code}"
            return None, f"NVML answered {said} for field {field_id}"
        member = VALUE_MEMBERS.get(int(getattr(value, "valueType", 1)), "uiVal")
        try:
            return int(getattr(value.value, member)), None
        except (AttributeError, TypeError, ValueError) as exc:
            return None, f"NVML's value of field {field_id} is unreadable: {exc}"

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
        if event_type == int(getattr(self.nvml, RECOVERY_EVENT[0], RECOVERY_EVENT[1])):
            lines = self._recovery_lines(gpu, now)
            if lines is None:  # the action unread: the event still says it changed
                lines = [self._line(gpu, "xid", now, event_type=RECOVERY_ACTION_EVENT, xid=RECOVERY_XID)]
            return lines
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
        if xid == RECOVERY_XID and (recovery := self._recovery_lines(gpu, now)) is not None:
            return recovery  # the action read, in place of the bare Xid 154
        return [self._line(gpu, kind, now, event_type=event_type, data=value, xid=xid)]

    def _recovery_lines(self, gpu: Gpu | None, now: float) -> list[bytes] | None:
        """Xid 154 with the GPU's recovery action read now: one line, none where just written; None unread."""
        action, why = self._read_recovery(gpu) if gpu is not None else (None, "NVML named no GPU")
        if action is None:
            if gpu is not None:
                gpu.recovery_off = why
            return None
        assert gpu is not None
        gpu.recovery_off, last = None, gpu.recovery
        if last is not None and last[0] == action and now - last[1] < RECOVERY_SAME_S:
            return []  # the same change, delivered as the event and as the Xid
        gpu.recovery = (action, now)
        return [self._line(gpu, "xid", now, event_type=RECOVERY_ACTION_EVENT, data=action, xid=RECOVERY_XID)]

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
        said = f"GPU events of {len(self.gpus)} GPUs on {self.node}: {', '.join(kinds) or 'none registered'}"
        recovery = self._describe_recovery()
        return f"{said}; {recovery}" if recovery else said

    def _describe_recovery(self) -> str:
        """How each GPU's recovery action (Xid 154) is read, GPUs that read it alike together; '' for none."""
        ways: dict[str, list[int]] = {}
        for gpu in self.gpus:
            if gpu.handle is None:
                continue
            if gpu.recovery_off is not None:
                way = f"cannot be read ({gpu.recovery_off})"
            elif gpu.recovery_event:
                way = "read on its event and on Xid 154"
            else:
                way = "read on Xid 154 (its event not supported)"
            ways.setdefault(way, []).append(gpu.index)
        if len(ways) <= 1:
            return "".join(f"recovery action {way}" for way in ways)
        return "recovery action " + "; ".join(
            f"{way} on GPU {', '.join(map(str, indexes))}" for way, indexes in ways.items()
        )

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


@dataclass(frozen=True)
class Load:
    """One NVML read of a GPU: its utilisation, and how many compute processes NVML lists on it.

    ``utilisation``: the percent of NVML's last sample period (a sixth of a second to a second) during which
    a kernel ran on it; ``processes``: None where NVML does not list them.
    """

    utilisation: int
    processes: int | None


@dataclass
class GpuLoads:
    """A GPU's :class:`Load` by its UUID, through the ``pynvml`` the monitor loaded (see the module)."""

    nvml: Any
    _handles: dict[str, Any] = field(default_factory=dict)

    def read(self, uuid: str) -> Load | None:
        """The GPU's load now; None where NVML cannot say (no such GPU, MIG, an error)."""
        try:
            handle = self._handles.get(uuid)
            if handle is None:
                handle = self._handles[uuid] = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
            utilisation = int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # NOT_FOUND, NOT_SUPPORTED (a MIG instance), GPU_IS_LOST: unknown
            return None
        try:
            processes: int | None = len(self.nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except Exception:
            processes = None
        return Load(utilisation, processes)


__all__ = [
    "CLOCK_EVERY_S",
    "EVENT_TYPES",
    "LOST",
    "RECOVERY_EVENT",
    "RECOVERY_FIELD",
    "RECOVERY_SAME_S",
    "Gpu",
    "GpuEvents",
    "GpuLoads",
    "Load",
    "node_name",
]
