"""Silent ranks: what the node's monitor saw of a rank that says nothing and runs no Python.

The monitor (``rollcall_workload.node.monitor``, one per node, outside the ranks) names a rank ``silent``
when its heartbeat and its progress both stopped more than its bound plus the monitor's margin ago while its
process still exists (a process stopped, frozen in its cgroup, or in uninterruptible sleep in the kernel),
with the process state the node sees (:class:`~rollcall.ranklog.Silence`). A ``resumed`` withdraws it. A slow
rank is never silent: its watchdog thread keeps writing the heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping

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


__all__ = ["process_line", "silences", "silent_for"]
