"""Whether a stalled rank's GPU has finished the work it was given: the GPU's own hang told from the host's.

A rank whose host thread waits on its GPU (a synchronize, a ``.item()``, a copy to the host) shows the same
Python stack whether the GPU is still busy, is stuck in a kernel that never ends, or finished long ago and the
host is stuck on its own. The watchdog tells them apart with CUDA events, which no Python thread of the rank
needs to wait on:

- :meth:`GpuProgress.mark`, on the training thread at each step or phase it completes, records an event on
  the device's current stream, remembering when (the last :data:`KEEP` of them).
- :meth:`GpuProgress.probe`, on the watchdog's thread when it dumps the stacks, records one more event on
  the device's default stream (the legacy default stream waits for the work of every blocking stream before
  it; NCCL's streams do not block, so a collective waiting for a peer is not taken for the GPU's hang) and
  polls it for up to :data:`PROBE_S`. Finished: the GPU had finished all work queued before the dump, and
  the wait is the host's. Not finished: the GPU has not finished work queued since the oldest mark still
  unfinished (or since the last mark, all of them finished): :attr:`Probe.pending_s` seconds ago.

``cudaEventQuery`` returns at once and torch releases the GIL in its waits, so this runs while the training
thread waits; an error from CUDA (a context lost to an Xid) reads as unknown, never as a finding. Where no
CUDA device is used, the watchdog has no :class:`GpuProgress` and its dumps say nothing of a GPU.

Where no Python thread of the rank can run (a CUDA call that blocks with the GIL held: a wait on the GPU
through a library that keeps it, an event recorded on a launch queue full behind a kernel that never ends),
the watchdog cannot probe. Its heartbeat names the GPU (:attr:`GpuProgress.gpu` and :attr:`GpuProgress.uuid`,
NVML's name) so that the node's monitor, another process, reads the GPU's own state through NVML instead
(:mod:`rollcall_workload.node.ranks`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

#: Marks kept: the oldest unfinished is what a dump reads; finished ones are dropped as they are seen.
KEEP = 16
#: Seconds the watchdog's probe waits for the GPU to finish what was queued before the dump.
PROBE_S = 1.0
#: Seconds between two looks at the probe.
PROBE_POLL_S = 0.05


class Marker(Protocol):
    """What is used of ``torch.cuda.Event``: recorded on a stream, asked whether the GPU has reached it."""

    def record(self) -> None:
        """Record the marker on the stream: the GPU reaches it once the work queued before it is done."""

    def query(self) -> bool:
        """Whether the GPU has reached it (returns at once)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Probe:
    """What a dump found of the GPU: its index, and how long its oldest unfinished work has waited."""

    gpu: int
    #: Seconds since the oldest work the GPU has not finished was queued; 0.0 when it had finished all of it.
    pending_s: float


class GpuProgress:
    """The marks of one rank's GPU; :meth:`probe` says whether it finished them (see the module)."""

    def __init__(
        self,
        gpu: int,
        make_mark: Callable[[], Marker],
        make_probe: Callable[[], Marker] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        probe_s: float = PROBE_S,
        uuid: str | None = None,
    ) -> None:
        self.gpu = gpu
        #: The GPU's UUID as NVML names it (``GPU-...``), where torch reports it: the node's monitor reads it.
        self.uuid = uuid
        self._make_mark = make_mark
        self._make_probe = make_probe or make_mark
        self._clock = clock
        self._sleep = sleep
        self._probe_s = probe_s
        self._marks: deque[tuple[float, Marker]] = deque()
        self._last_finished: float | None = None  # when the newest mark the GPU has reached was made
        self._lock = threading.Lock()

    def mark(self) -> None:
        """A step or phase completed on the training thread: mark the work queued until now."""
        try:
            marker = self._make_mark()
            marker.record()
            with self._lock:
                self._drop_finished()
                if len(self._marks) >= KEEP:  # the oldest unfinished stays: it is the one a dump reads
                    del self._marks[1]
                self._marks.append((self._clock(), marker))
        except Exception:  # CUDA's error (a lost context) is the run's to report, not this
            return

    def probe(self) -> Probe | None:
        """Whether the GPU finishes what was queued before now within :data:`PROBE_S`; None when unknown."""
        try:
            probe = self._make_probe()
            probe.record()
            deadline = self._clock() + self._probe_s
            while not probe.query():
                if self._clock() >= deadline:
                    break
                self._sleep(PROBE_POLL_S)
            else:
                return Probe(self.gpu, 0.0)
            with self._lock:
                self._drop_finished()
                # the oldest mark unfinished; every mark finished: the work came after the last of them
                since = self._marks[0][0] if self._marks else self._last_finished
        except Exception:  # unknown, never a finding
            return None
        return Probe(self.gpu, round(max(0.0, self._clock() - since), 3)) if since is not None else None

    def _drop_finished(self) -> None:
        """Drop the marks the GPU has reached, oldest first, remembering when the last of them was made."""
        while self._marks and self._marks[0][1].query():
            self._last_finished = self._marks.popleft()[0]


def for_device(gpu: int) -> GpuProgress | None:
    """The progress of CUDA device ``gpu`` (the rank's own), or None where torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    from rollcall_workload.rank.facts import cuda_uuid

    uuid = None
    with contextlib.suppress(Exception):  # an older torch, a device that does not say: NVML's reads are off
        uuid = cuda_uuid(gpu)

    def on_current() -> Marker:
        return torch.cuda.Event()  # recorded on the device's current stream: the work of this step

    def on_default() -> Marker:
        event = torch.cuda.Event()
        stream = torch.cuda.default_stream(gpu)

        class OnDefault:
            def record(self) -> None:
                event.record(stream)

            def query(self) -> bool:
                return bool(event.query())

        return OnDefault()

    return GpuProgress(gpu, on_current, on_default, uuid=uuid)


__all__ = ["KEEP", "PROBE_S", "GpuProgress", "Marker", "Probe", "for_device"]
