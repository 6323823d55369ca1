"""Where a hung rank is detected: a rank stalled past ``--hang-after`` (its watchdog dumped its stacks).

A rank stalled outside any collective is named hung, with its node, pod and innermost frames of the
workload's own code; the ranks stalled inside a collective are folded into one line as waiting
(:mod:`rollcall.evidence.hangs` reads the dumps).
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.hangs import gpu_line, resolve, stalled_for, stalls, waiting_line
from rollcall.evidence.silence import silences
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: Stalled past its --hang-after outside any collective (its stack says where).
HUNG = Kind("hung", RankState.HUNG, Blame(Owner.UNDETERMINED, "a rank stopped making progress"))
#: Stalled past its --hang-after inside a collective or barrier, waiting for others (a victim).
WAITING = Kind("waiting", RankState.WAITING, Blame(Owner.UNDETERMINED, "ranks waiting for another"))


def hangs(run: RunView) -> Iterable[Problem]:
    """No rank may stay stalled: each hung one named with where it stopped, the waiting ones in one line."""
    hung, waiting = resolve(stalls(run.reports))
    for s in hung:
        report = run.reports[s.rank]
        pod = f", {run.log_word} {sorted(report.sources)[0]}" if report.sources else ""
        gpu = gpu_line(s.dump, run.node(s.rank), report.facts)  # the GPU's own hang, beside the host frame
        yield Problem(
            HUNG,
            f"rank {s.rank} (node {run.node(s.rank)}{pod}) hung in {s.where}"
            f"{', no rank hung elsewhere' if s.ambiguous else ', not in a collective'}, "
            f"{stalled_for(s.dump)}: {s.at()}{f'; {gpu}' if gpu else ''}",
            {
                s.rank: f"hung in {s.where} at {s.frames[0] if s.frames else 'no Python frame'}"
                + (f"; {gpu}" if gpu else "")
            },
            detail=s,
        )
    if waiting:
        yield Problem(
            WAITING,
            waiting_line(waiting, len(hung), len(silences(run.reports))),
            {s.rank: f"waiting in a collective ({s.where})" for s in waiting},
            detail=tuple(waiting),
        )


CHECK = Check(
    hangs,
    detects="a hung rank, and the ranks waiting on it",
    reads=(
        "`evidence/hangs.py` (the watchdog's stack dumps, and faulthandler's that the node's monitor turned "
        "into events)"
    ),
    kinds=(HUNG, WAITING),
)


__all__ = ["CHECK", "HUNG", "WAITING", "hangs"]
