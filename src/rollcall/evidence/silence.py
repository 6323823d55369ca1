"""Silent ranks: what the node's monitor saw of a rank that says nothing and runs no Python.

The monitor (``rollcall_workload.node.monitor``, one per node, outside the ranks) names a rank ``silent``
when its heartbeat and its progress both stopped more than its bound plus the monitor's margin ago while its
process still exists (a process stopped, frozen in its cgroup, or in uninterruptible sleep in the kernel),
with the process state the node sees (:class:`~rollcall.ranklog.Silence`). A ``resumed`` withdraws it. A slow
rank is never silent: its watchdog thread keeps writing the heartbeat.

On cuda the monitor says a rank silent sooner, with its GPU's reading (:attr:`Silence.on_gpu`), where the rank
stood still past its bound while NVML read its GPU busy at every look of the confirmation window: the GPU's
own hang, the host waiting on it with no Python thread able to run (:func:`gpu_busy` tells it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollcall.ranklog import RankReport, Silence


def silences(reports: Mapping[int, RankReport]) -> dict[int, Silence]:
    """Every rank whose ``silent`` stands (and which has not completed), by rank."""
    return {
        r: rep.silent for r, rep in sorted(reports.items()) if rep.silent is not None and not rep.complete
    }


def process_line(s: Silence) -> str:
    """``process 1234 is stopped (T)``: what the node sees of the rank's process."""
    who = f"process {s.pid}" if s.pid is not None else "its process"
    if not s.state:
        return f"{who} still exists"
    return f"{who} is {s.state_name or s.state} ({s.state})"


def silent_for(s: Silence) -> str:
    """``no heartbeat for 11s, no progress for 12s (--hang-after 5s + 5s margin, phase epoch 1 end)``."""
    quiet = f"no heartbeat for {s.heartbeat_s:.0f}s" if s.heartbeat_s is not None else "no heartbeat"
    still = f"no progress for {s.stalled_s:.0f}s" if s.stalled_s is not None else "no progress"
    parts = []
    if s.hang_after is not None:
        margin = f" + {s.margin_s:g}s margin" if s.margin_s is not None else ""
        parts.append(f"--hang-after {s.hang_after:g}s{margin}")
    if s.phase:
        parts.append(f"phase {s.phase}")
    return f"{quiet}, {still}" + (f" ({', '.join(parts)})" if parts else "")


def gpu_named(gpu: int | None, node: int, facts: Mapping[str, Any] | None, uuid: str | None = None) -> str:
    """``GPU 5 of node 1 (UUID GPU-abc)``: a rank's GPU, named as the node names it.

    NVML's index from the rank's ``facts`` where it sent them, else its CUDA device ``gpu``; the UUID given,
    else the facts'.
    """
    index = (facts or {}).get("device_index", gpu)
    uuid = uuid or (facts or {}).get("gpu_uuid")
    return f"GPU {index} of node {node}" + (f" (UUID {uuid})" if uuid else "")


def gpu_busy(s: Silence, node: int, facts: Mapping[str, Any] | None = None) -> str | None:
    """What the monitor read of a silent rank's GPU, where it read it busy; None where it did not.

    ``GPU 0 of node 0 (UUID GPU-...) busy (NVML utilisation 100% at 4 reads over 3s), its work queued since
    epoch 1 step 10 unfinished for 13s: the host waits on the GPU``.
    """
    if s.gpu_busy_pct is None:
        return None
    least = f"{s.gpu_busy_pct}%" if s.gpu_busy_pct >= 100 else f"at least {s.gpu_busy_pct}%"
    reads = f" at {s.gpu_reads} reads" if s.gpu_reads is not None else ""
    window = f" over {s.gpu_confirm_s:.0f}s" if s.gpu_confirm_s is not None else ""
    since = f" since {s.phase}" if s.phase else ""
    stood = f" for {s.stalled_s:.0f}s" if s.stalled_s is not None else ""
    return (
        f"{gpu_named(s.gpu, node, facts, s.gpu_uuid)} busy (NVML utilisation {least}{reads}{window}), its "
        f"work queued{since} unfinished{stood}: the host waits on the GPU"
    )


__all__ = ["gpu_busy", "gpu_named", "process_line", "silences", "silent_for"]
