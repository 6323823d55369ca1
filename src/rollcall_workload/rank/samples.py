"""What a rank samples of its own GPU while it trains (the ``samples`` event): NVML's flickering facts, held.

``facts`` reads each fact once; a clock-event (throttle) reason or a PCIe link's training can flicker, so on
cuda with NVML the rank also reads the clock-event reasons, the SM clock and the PCIe link's current
generation and width during the timed epochs (:class:`DeviceSampler`: one read per timed step, at most every
:data:`SAMPLE_INTERVAL_S`), and says their summary once after them.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from rollcall_workload.contract import RollcallLog
from rollcall_workload.rank.facts import CLOCK_EVENTS, MAX_REASON, cuda_uuid, load_nvml, nvml_handle

#: The least time between two reads: a step shorter than this is not sampled each time.
SAMPLE_INTERVAL_S = 0.5
#: The quantities each sample reads, by the name ``unknown`` gives them.
SAMPLED: tuple[str, ...] = ("clock_events", "sm_clock_mhz", "pcie_gen", "pcie_width")


class DeviceSampler:
    """Reads one GPU's clock-event reasons mask, SM clock and PCIe link now and then; summarises them.

    ``nvml`` is the ``pynvml`` module, initialised; ``handle`` the device; ``clock`` the seconds it paces
    reads by (``time.monotonic``). :meth:`tick` reads unless the last read was under ``interval_s`` ago.
    """

    def __init__(
        self,
        nvml: Any,
        handle: Any,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml, self.handle, self.interval_s, self.clock = nvml, handle, interval_s, clock
        self._events = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self._sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        self.values: dict[str, list[int]] = {name: [] for name in SAMPLED}
        self.unknown: dict[str, str] = {}
        self.samples = 0
        self.read_s = 0.0  # spent in the reads, summed
        self._first: float | None = None
        self._last: float | None = None

    def tick(self) -> None:
        """One timed step queued: read now, unless the last read was under ``interval_s`` ago."""
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._first = now if self._first is None else self._first
        self._last = now
        self.sample()

    def sample(self) -> None:
        """Read each quantity once; one that fails is left out of this sample, and named in ``unknown``."""
        started = time.perf_counter()
        h = self.handle
        readers: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("clock_events", lambda: self._events(h) if self._events else None),
            ("sm_clock_mhz", lambda: self.nvml.nvmlDeviceGetClockInfo(h, self._sm)),
            ("pcie_gen", lambda: self.nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            ("pcie_width", lambda: self.nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
        )
        for name, read in readers:
            try:
                value = read()
            except Exception as exc:  # NVML raises its own errors for each unsupported query
                self.unknown.setdefault(name, (str(exc) or type(exc).__name__)[:MAX_REASON])
                continue
            if value is None:
                self.unknown.setdefault(name, "not reported")
            else:
                self.values[name].append(int(value))
        self.samples += 1
        self.read_s += time.perf_counter() - started

    def fields(self) -> dict[str, Any] | None:
        """The ``samples`` event's fields; None when nothing was sampled."""
        if not self.samples:
            return None
        masks, sm = self.values["clock_events"], self.values["sm_clock_mhz"]
        gens, widths = self.values["pcie_gen"], self.values["pcie_width"]
        share = None
        if masks:
            share = {
                name: round(active / len(masks), 3)
                for bit, name in CLOCK_EVENTS
                if (active := sum(1 for m in masks if m & bit))
            }
        return {
            "samples": self.samples,
            "span_s": round((self._last or 0.0) - (self._first or 0.0), 3),
            "read_us": round(self.read_s / self.samples * 1e6, 1),
            "clock_events_share": share,
            "sm_clock_mhz_median": float(statistics.median(sm)) if sm else None,
            "pcie_gen_min": min(gens, default=None),
            "pcie_gen_max": max(gens, default=None),
            "pcie_width_min": min(widths, default=None),
            "pcie_width_max": max(widths, default=None),
            "unknown": dict(self.unknown),
        }

    def close(self) -> None:
        """Let NVML go (the rank's own ``nvmlInit``)."""
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


def start_sampling(
    device: str,
    local_rank: int,
    *,
    nvml_loader: Callable[[], Any] = load_nvml,
    uuid: Callable[[int], str | None] = cuda_uuid,
    interval_s: float = SAMPLE_INTERVAL_S,
) -> DeviceSampler | None:
    """A sampler of the rank's GPU, on cuda where NVML answers; None elsewhere (cpu, xla, no driver)."""
    if device != "cuda":
        return None
    try:
        nvml = nvml_loader()
    except Exception:  # ImportError without nvidia-ml-py; NVMLError without a driver: facts says why
        return None
    try:
        known = None
        with contextlib.suppress(Exception):
            known = uuid(local_rank)
        return DeviceSampler(nvml, nvml_handle(nvml, known, local_rank), interval_s=interval_s)
    except Exception:  # the device itself not found: facts says so
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
        return None


def report_samples(sampler: DeviceSampler | None, log: RollcallLog) -> None:
    """Say ``samples`` (one line) where the sampler read anything, and let NVML go."""
    if sampler is None:
        return
    try:
        if (fields := sampler.fields()) is not None:
            log.emit("samples", **fields)
    finally:
        sampler.close()
