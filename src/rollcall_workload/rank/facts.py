"""What a rank reads of its device and software stack (the ``facts`` event): NVML, Neuron, EFA, versions."""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rollcall_workload.contract import RollcallLog
from rollcall_workload.rank.dist import Accelerator
from rollcall_workload.rank.gpumem import held_memory
from rollcall_workload.rank.neuron import hw_counters

#: What :func:`held_before_context` read: the ``facts`` fields, and those unknown with why.
Held = tuple[dict[str, Any], dict[str, str]]
#: The facts :func:`held_before_context` reads.
HELD_KEYS: tuple[str, ...] = ("memory_used_mib", "gpu_processes")

#: NVML's clock-event (throttle) reason bits, by the names ``facts`` reports (nvmlClocksEventReason*).
CLOCK_EVENTS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
#: The longest reason kept for an unknown fact, and the most bytes all of them may take before each is cut
#: to SHORT_REASON (the whole event stays one line under MAX_LINE_BYTES).
MAX_REASON = 100
MAX_UNKNOWN_BYTES = 1536
SHORT_REASON = 24


class FactSheet:
    """Facts as they are read: a value under its name, or the reason it could not be read."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.unknown: dict[str, str] = {}

    def read(self, name: str, reader: Callable[[], Any]) -> None:
        """Record ``reader()`` as ``name``; an exception (or None) records the fact unknown, with why."""
        try:
            value = reader()
        except Exception as exc:  # NVML raises its own errors for each unsupported query
            self.missing(name, str(exc) or type(exc).__name__)
            return
        if value is None:
            self.missing(name, "not reported")
        else:
            self.values[name] = value

    def missing(self, name: str, reason: str) -> None:
        """Record ``name`` as unknown because of ``reason``."""
        self.unknown[name] = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."

    def fields(self) -> dict[str, Any]:
        """The ``facts`` event's fields."""
        unknown = dict(self.unknown)
        if len(json.dumps(unknown)) > MAX_UNKNOWN_BYTES:
            unknown = {k: v[:SHORT_REASON] for k, v in unknown.items()}
        return {**self.values, "unknown": unknown}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def host_facts(sheet: FactSheet) -> None:
    """Host, kernel, OS, Python, torch and transformers, as this process sees them."""
    import platform
    from importlib import metadata

    sheet.read("host", socket.gethostname)
    sheet.read("kernel", platform.release)
    sheet.read("os", lambda: platform.freedesktop_os_release().get("PRETTY_NAME"))
    sheet.read("python", platform.python_version)
    sheet.read("torch", _torch_version)
    sheet.read("transformers", lambda: metadata.version("transformers"))


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def nccl_version() -> str:
    """NCCL's version as torch reports it (``2.27.3``)."""
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def gpu_facts(sheet: FactSheet, nvml: Any, handle: Any) -> None:
    """One GPU's facts through NVML: ``nvml`` is the ``pynvml`` module, initialised; ``handle`` the device."""
    const = functools.partial(getattr, nvml)
    uncorrected = const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    sm = const("NVML_CLOCK_SM", 1)
    sheet.read("driver", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
    sheet.read("cuda_driver", lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion()))
    sheet.read("gpus", nvml.nvmlDeviceGetCount)
    sheet.read("device_index", lambda: nvml.nvmlDeviceGetIndex(handle))
    sheet.read("gpu_name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
    sheet.read("gpu_uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
    sheet.read("gpu_serial", lambda: _text(nvml.nvmlDeviceGetSerial(handle)))
    sheet.read("memory_mib", lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total // (1 << 20))
    sheet.read("pcie_gen", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
    sheet.read("pcie_gen_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
    sheet.read("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
    sheet.read("pcie_width_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    for name, default in (("volatile", 0), ("aggregate", 1)):
        counter = const(f"NVML_{name.upper()}_ECC", default)
        sheet.read(
            f"ecc_{name}_uncorrected",
            functools.partial(nvml.nvmlDeviceGetTotalEccErrors, handle, uncorrected, counter),
        )
    try:
        _corrected, _uncorrected, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    except Exception as exc:
        for name in ("remapped_pending", "remapped_failure"):
            sheet.missing(name, str(exc) or type(exc).__name__)
    else:
        sheet.values.update(remapped_pending=bool(pending), remapped_failure=bool(failure))
    sheet.read("retired_pending", lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)))

    def clock_events() -> list[str]:
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = int((reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)(handle))
        return [name for bit, name in CLOCK_EVENTS if mask & bit]

    sheet.read("clock_events", clock_events)
    sheet.read("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, sm))
    sheet.read("sm_clock_max_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, sm))
    # the limit in force (the lowest of the administrator's, the board's and any other cap), not the one set
    sheet.read("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000)
    sheet.read("power_default_w", lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000)
    sheet.read(
        "temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, const("NVML_TEMPERATURE_GPU", 0))
    )


def _cuda_version(value: int) -> str:
    """NVML's CUDA driver version (``13000``) as ``13.0``."""
    return f"{value // 1000}.{value % 1000 // 10}"


def load_nvml() -> Any:
    """The ``pynvml`` module, initialised; raises (ImportError, its NVMLError) where no driver answers."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def nvml_handle(nvml: Any, uuid: str | None, index: int) -> Any:
    """The NVML device of a CUDA device: by its UUID when torch knows it, else by index."""
    if uuid:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    return nvml.nvmlDeviceGetHandleByIndex(index)


def held_before_context(
    local_rank: int, uuid: str | None = None, *, nvml_loader: Callable[[], Any] = load_nvml
) -> Held:
    """The memory in use on the rank's GPU and its processes (:mod:`.gpumem`), read before its CUDA context.

    The caller has not created the rank's context on the device yet: what is in use is another's.
    """
    try:
        nvml = nvml_loader()
    except Exception as exc:  # ImportError without nvidia-ml-py; NVMLError without a driver
        return {}, dict.fromkeys(HELD_KEYS, f"no NVML: {type(exc).__name__}: {exc}")
    try:
        return held_memory(nvml, nvml_handle(nvml, uuid, local_rank))
    except Exception as exc:  # the device itself not found
        return {}, dict.fromkeys(HELD_KEYS, f"no NVML device: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def neuron_facts(
    sheet: FactSheet, local_rank: int = 0, counters: Callable[[], dict[str, dict[str, int]]] = hw_counters
) -> None:
    """The Neuron driver (sysfs), runtime and compiler versions, and the devices and cores this rank sees.

    Local rank 0 also reads every Neuron device's hardware error counters (``counters``: neuron-monitor's,
    :mod:`.neuron`); the other ranks of the node leave them to it.
    """
    from importlib import metadata

    sheet.read("neuron_driver", lambda: Path("/sys/module/neuron/version").read_text().strip())
    sheet.read("neuron_runtime", lambda: metadata.version("libneuronxla"))
    sheet.read("neuron_compiler", lambda: metadata.version("neuronx-cc"))
    sheet.read("neuron_devices", lambda: len(glob.glob("/dev/neuron[0-9]*")) or None)

    def cores() -> int:
        import torch_xla.runtime as xr

        return int(xr.addressable_runtime_device_count())

    sheet.read("neuron_cores", cores)
    if local_rank == 0:
        sheet.read("neuron_hw_counters", counters)


#: Where the EFA installer and the aws-ofi-nccl plugin install (``lib``, ``lib64`` and ``bin`` below each),
#: searched after ``LD_LIBRARY_PATH``.
FABRIC_PREFIXES: tuple[str, ...] = ("/opt/amazon/efa", "/opt/amazon/ofi-nccl", "/opt/aws-ofi-nccl", "/usr")
#: The version aws-ofi-nccl's library carries (its ``PACKAGE_STRING``, which it logs when NCCL loads it).
OFI_NCCL_VERSION = re.compile(rb"aws-ofi-nccl (\d+\.\d+\.\d+[0-9A-Za-z.+~-]*)")
#: The most of a plugin library read in search of its version.
MAX_LIBRARY_BYTES = 64 << 20


def library_dirs(env: Mapping[str, str], prefixes: Sequence[str] = FABRIC_PREFIXES) -> list[Path]:
    """The directories searched for libfabric and the NCCL net plugin, those that exist, each once.

    ``LD_LIBRARY_PATH``'s first (the NVIDIA image's ``/opt/nccl-net``, whose ``libnccl-net.so`` links to
    the plugin the EFA installer laid down), then each prefix's ``lib``, ``lib64`` and multiarch ``lib``.
    """
    import platform

    subs = ("lib", "lib64", f"lib/{platform.machine()}-linux-gnu")  # the last: Debian's multiarch layout
    dirs = [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [Path(p) / sub for p in prefixes for sub in subs]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def fi_info_version(env: Mapping[str, str], prefixes: Sequence[str] = FABRIC_PREFIXES) -> str | None:
    """``fi_info --version``'s output, from ``PATH`` or a prefix's ``bin``; None without an ``fi_info``."""
    import shutil
    import subprocess

    found = shutil.which("fi_info", path=env.get("PATH")) or next(
        (str(f) for p in prefixes if (f := Path(p) / "bin" / "fi_info").is_file() and os.access(f, os.X_OK)),
        None,
    )
    if found is None:
        return None
    return subprocess.run([found, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout


def libfabric_version(
    env: Mapping[str, str],
    prefixes: Sequence[str] = FABRIC_PREFIXES,
    fi_info: Callable[[Mapping[str, str], Sequence[str]], str | None] = fi_info_version,
) -> str:
    """The version of libfabric: ``fi_info --version``'s ``libfabric:`` line, else ``libfabric.pc``'s.

    The ``Version`` of the ``libfabric.pc`` beside the library (the EFA installer's
    ``/opt/amazon/efa/lib/pkgconfig``) stands in where no ``fi_info`` is installed.

    Raises:
        LookupError: naming where it looked, when neither is there.
    """
    said = fi_info(env, prefixes)
    if said and (m := re.search(r"^libfabric:\s*(\S+)", said, re.MULTILINE)):
        return m.group(1)
    dirs = library_dirs(env, prefixes)
    for d in dirs:
        pc = d / "pkgconfig" / "libfabric.pc"
        if pc.is_file() and (m := re.search(r"^Version:\s*(\S+)", pc.read_text(), re.MULTILINE)):
            return m.group(1)
    libs = [str(f) for d in dirs for f in sorted(d.glob("libfabric.so*"))]
    if libs:
        raise LookupError(f"no fi_info; {libs[0]} has no libfabric.pc beside it")
    raise LookupError(f"no fi_info; no libfabric.so* in {':'.join(map(str, dirs)) or 'no library directory'}")


def ofi_nccl_version(env: Mapping[str, str], prefixes: Sequence[str] = FABRIC_PREFIXES) -> str:
    """The version of aws-ofi-nccl: the ``aws-ofi-nccl X.Y.Z`` string of the net plugin NCCL would load.

    That plugin is ``NCCL_NET_PLUGIN`` (a path, or a name NCCL expands to ``libnccl-net-NAME.so``), else
    the first ``libnccl-net*.so*`` of :func:`library_dirs`.

    Raises:
        LookupError: naming the library, or where it looked, when no version is found.
    """
    dirs = library_dirs(env, prefixes)
    chosen = env.get("NCCL_NET_PLUGIN", "")
    if chosen.lower() == "none":
        raise LookupError("NCCL_NET_PLUGIN=none: no net plugin")
    if "/" in chosen:
        candidates = [Path(chosen)]
    elif chosen:
        names = (f"libnccl-net-{chosen}.so", chosen)
        candidates = [d / n for d in dirs for n in names]
    else:
        candidates = [f for d in dirs for f in sorted(d.glob("libnccl-net*.so*"))]
    found = [f for f in candidates if f.is_file()]
    if not found:
        what = f"NCCL_NET_PLUGIN={chosen}" if chosen else "libnccl-net*.so"
        raise LookupError(f"no {what} in {':'.join(map(str, dirs)) or 'no library directory'}")
    with found[0].open("rb") as f:
        m = OFI_NCCL_VERSION.search(f.read(MAX_LIBRARY_BYTES))
    if m is None:
        raise LookupError(f"{found[0]} carries no aws-ofi-nccl version")
    return m.group(1).decode()


def fabric_facts(
    sheet: FactSheet,
    *,
    nccl: bool = True,
    env: Mapping[str, str] | None = None,
    prefixes: Sequence[str] = FABRIC_PREFIXES,
) -> None:
    """The versions of libfabric and (with ``nccl``) aws-ofi-nccl, or why they are unknown."""
    env = os.environ if env is None else env
    sheet.read("libfabric", lambda: libfabric_version(env, prefixes))
    if nccl:
        sheet.read("aws_ofi_nccl", lambda: ofi_nccl_version(env, prefixes))


def device_facts(
    device: str,
    local_rank: int = 0,
    *,
    nvml_loader: Callable[[], Any] = load_nvml,
    uuid: str | None = None,
    cuda_devices: int | None = None,
    fabric: Callable[[FactSheet], None] | None = None,
    held: Held | None = None,
    neuron_counters: Callable[[], dict[str, dict[str, int]]] = hw_counters,
) -> dict[str, Any]:
    """The ``facts`` event's fields for this process and its device (``cuda``, ``xla`` or ``cpu``).

    ``nvml_loader`` gives the initialised ``pynvml`` module (a test passes a fake); ``uuid`` is the CUDA
    device's UUID when torch knows it (CUDA and NVML may number devices differently); ``cuda_devices`` the
    devices CUDA lists (``torch.cuda.device_count()``); ``fabric`` reads the network libraries' versions
    (:func:`fabric_facts`); ``held`` what :func:`held_before_context` read before the rank's CUDA context,
    whose values ``start`` carries: here only why one was not read (None: not read then, said so; never read
    here, where the rank's own context holds memory);
    ``neuron_counters`` reads the Neuron devices' hardware error counters on xla
    (:func:`.neuron.hw_counters`).
    """
    sheet = FactSheet()
    host_facts(sheet)
    if fabric is not None:
        fabric(sheet)
    if device != "cuda":
        sheet.missing("nvml", f"no NVML: device is {device}")
    else:
        sheet.read("nccl", nccl_version)
        if cuda_devices is not None:
            sheet.values["cuda_devices"] = cuda_devices
        _, unknown = held or ({}, dict.fromkeys(HELD_KEYS, "not read before the rank's CUDA context"))
        for name, reason in unknown.items():  # the values read are start's
            sheet.missing(name, reason)
        try:
            nvml = nvml_loader()
        except Exception as exc:  # ImportError without nvidia-ml-py; NVMLError without a driver
            sheet.missing("nvml", f"no NVML: {type(exc).__name__}: {exc}")
        else:
            try:
                gpu_facts(sheet, nvml, nvml_handle(nvml, uuid, local_rank))
            except Exception as exc:  # the device itself not found
                sheet.missing("nvml", f"no NVML device: {type(exc).__name__}: {exc}")
            finally:
                with contextlib.suppress(Exception):
                    nvml.nvmlShutdown()
    if device == "xla":
        neuron_facts(sheet, local_rank, neuron_counters)
    return sheet.fields()


def cuda_uuid(index: int) -> str | None:
    """CUDA device ``index``'s UUID as NVML writes it (``GPU-...``), when this torch reports it."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def report_facts(acc: Accelerator, local_rank: int, log: RollcallLog, held: Held | None = None) -> None:
    """Emit ``facts`` with work queued on the device, so that PCIe and clocks are read while it is busy.

    ``held``: what :func:`held_before_context` read before the rank created its CUDA context.
    """
    import torch

    uuid, count = None, None
    if acc.kind == "cuda":
        with contextlib.suppress(Exception):
            uuid = cuda_uuid(local_rank)
        count = torch.cuda.device_count()
        a = torch.randn(4096, 4096, device=acc.device, dtype=torch.float16)
        for _ in range(512):  # about 70 TFLOP of matmuls (0.1 s on an H200), queued before NVML is read
            a = (a @ a).clamp_(-1, 1)
    fabric = None if acc.kind == "cpu" else functools.partial(fabric_facts, nccl=acc.kind == "cuda")
    log.emit(
        "facts",
        **device_facts(acc.kind, local_rank, uuid=uuid, cuda_devices=count, fabric=fabric, held=held),
    )
    acc.synchronize()
