"""Where a silent rank is detected: the node's monitor saw its heartbeat and progress stop, its process alive.

A rank stopped (SIGSTOP, a frozen container) or stuck in the kernel (uninterruptible sleep) runs no Python,
its watchdog neither, so it dumps no stack; the node's monitor names it from outside, with its process state
(:mod:`rollcall.evidence.silence` reads its ``silent`` events). A silent rank whose stack faulthandler took
(its interpreter held in C) is named hung where it stands, by the ``hangs`` check, instead; so is one whose
GPU the monitor read busy while it stood still (its GPU's own hang).
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.hangs import stall_of
from rollcall.evidence.silence import process_line, silences, silent_for
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: No heartbeat and no progress past its bound plus the monitor's margin, its process alive (stopped, frozen,
#: in uninterruptible sleep): the node's monitor said so.
SILENT = Kind(
    "silent",
    RankState.SILENT,
    Blame(Owner.CLUSTER, "the node or the process froze (stopped, or stuck in the kernel)"),
)


def silent(run: RunView) -> Iterable[Problem]:
    """No rank may fall silent: each named with its node, how long it said nothing, its process state."""
    for r, s in silences(run.reports).items():
        report = run.reports[r]
        if stall_of(report) is not None or s.on_gpu:  # its stack or its GPU says more: the hangs check's
            continue
        pod = f", {run.log_word} {sorted(report.sources)[0]}" if report.sources else ""
        state = f"process {s.state_name}" if s.state_name else "process alive"
        yield Problem(
            SILENT,
            f"rank {r} (node {run.node(r)}{pod}) silent: {silent_for(s)}; {process_line(s)}",
            {r: f"silent: {state}{f' in {s.phase}' if s.phase else ''}"},
            detail=s,
        )


CHECK = Check(
    silent,
    detects="a silent rank: no heartbeat, no progress, its process alive (stopped, frozen, in the kernel)",
    reads="`evidence/silence.py` (the node's monitor's `silent` events)",
    kinds=(SILENT,),
    in_trials=True,
)


__all__ = ["CHECK", "SILENT", "silent"]
