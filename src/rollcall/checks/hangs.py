"""Where a hung rank is detected: a rank stalled past ``--hang-after`` (its watchdog dumped its stacks).

A rank stalled outside any collective is named hung, with its node, pod and innermost frames of the
workload's own code; the ranks stalled inside a collective are folded into one line as waiting
(:mod:`rollcall.evidence.hangs` reads the dumps).
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.flight import dumps, stuck
from rollcall.evidence.hangs import gpu_line, resolve, stalled_for, stalls, waiting_line
from rollcall.evidence.silence import silences
from rollcall.ranges import ranges
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: Stalled past its --hang-after outside any collective (its stack says where).
HUNG = Kind("hung", RankState.HUNG, Blame(Owner.UNDETERMINED, "a rank stopped making progress"))
#: Stalled past its --hang-after inside a collective or barrier, waiting for others (a victim).
WAITING = Kind(
    "waiting", RankState.WAITING, Blame(Owner.UNDETERMINED, "ranks waiting for another"), follows=True
)


def hangs(run: RunView) -> Iterable[Problem]:
    """No rank may stay stalled: each hung one named with where it stopped, the waiting ones in one line.

    Where the stalled ranks' flight records part (:mod:`rollcall.evidence.flight`), the ranks they name are
    the hung ones, with the collective they never entered or finished; the rest wait in it. The first line the
    records name a rank in ends with the command of torch's own analysis of their whole dumps, where they lie
    on this machine.
    """
    found, quiet = stalls(run.reports), silences(run.reports)
    hung, waiting = resolve(found)
    parted = stuck(run.reports, run.layout.world_size, found, quiet)
    named = {c.rank: (at, c) for at in parted for c in at.culprits}
    whole = dumps(run.reports, run.layout.world_size) if parted else None
    analysis = f"; torch's analysis of the whole dumps: {whole.command()}" if whole else ""
    # waiting by its stack, or in backward (computing or waiting): the records tell the story
    recorded = [s for s in (*hung, *waiting) if s.rank in named and (s.waiting or s.ambiguous)]
    hung = sorted({s.rank: s for s in (*hung, *recorded)}.values(), key=lambda s: s.rank)
    waiting = [s for s in waiting if s.rank not in named]
    for s in hung:
        report = run.reports[s.rank]
        pod = f", {run.log_word} {sorted(report.sources)[0]}" if report.sources else ""
        gpu = gpu_line(s.dump, run.node(s.rank), report.facts)  # the GPU's own hang, beside the host frame
        at, culprit = named.get(s.rank, (None, None))
        record = f"{at.line(culprit, run.node)} (flight recorder)" if at and culprit else ""
        if s in recorded:
            message = f"rank {s.rank} (node {run.node(s.rank)}{pod}) {record}; its stack: {s.where}"
        else:
            message = (
                f"rank {s.rank} (node {run.node(s.rank)}{pod}) hung in {s.where}"
                f"{', no rank hung elsewhere' if s.ambiguous else ', not in a collective'}"
            )
        message += f", {stalled_for(s.dump)}: {s.at()}{f'; {gpu}' if gpu else ''}"
        if record and s not in recorded:
            message += f"; it {record}"
        if record:
            message, analysis = message + analysis, ""  # once, on the first line the records name a rank in
        note = at.says(culprit) if at and culprit and s in recorded else f"hung in {s.where}"
        frame = s.frames[0] if s.frames else "no Python frame"
        yield Problem(HUNG, message, {s.rank: f"{note} at {frame}" + (f"; {gpu}" if gpu else "")}, detail=s)
    if waiting:
        line = waiting_line(waiting, len(hung), len(quiet))
        if parted:
            at = parted[0]
            whom = ranges(c.rank for c in at.culprits)
            line = (
                f"{'rank' if len(waiting) == 1 else 'ranks'} {ranges(s.rank for s in waiting)} waiting in "
                f"{at.collective()} for rank{'s' if len(at.culprits) > 1 else ''} {whom} (flight recorder)"
            )
        yield Problem(
            WAITING,
            line,
            {s.rank: f"waiting in a collective ({s.where})" for s in waiting},
            detail=tuple(waiting),
        )


CHECK = Check(
    hangs,
    detects="a hung rank, and the ranks waiting on it",
    reads=(
        "`evidence/hangs.py` (the watchdog's stack dumps, and faulthandler's that the node's monitor turned "
        "into events), `evidence/flight.py` (the ranks' flight records: the collective they part at)"
    ),
    kinds=(HUNG, WAITING),
)


__all__ = ["CHECK", "HUNG", "WAITING", "hangs"]
