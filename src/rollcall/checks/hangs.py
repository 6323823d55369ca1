"""Where a hung rank is detected: a rank stalled past ``--hang-after`` (its watchdog dumped its stacks).

A rank stalled outside any collective is named hung, with its node, pod and innermost frames of the
workload's own code; the ranks stalled inside a collective are folded into one line as waiting
(:mod:`rollcall.evidence.hangs` reads the dumps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from rollcall.checks.never_joined import NEVER_JOINED, STUCK_IN_SETUP
from rollcall.checks.runview import Check, EarlyStop, RunView
from rollcall.checks.silent import SILENT
from rollcall.evidence.flight import dumps, stuck
from rollcall.evidence.hangs import (
    DDP_WAIT,
    Stall,
    gpu_line,
    resolve,
    stalled_for,
    stalls,
    stop_reason,
    waiting_line,
)
from rollcall.evidence.silence import gpu_busy, process_line, silences
from rollcall.ranges import ranges
from rollcall.ranklog import Silence
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: Stalled past its --hang-after outside any collective (its stack says where).
HUNG = Kind("hung", RankState.HUNG, Blame(Owner.UNDETERMINED, "a rank stopped making progress"))
#: Stalled past its --hang-after inside a collective or barrier, waiting for others (a victim).
WAITING = Kind(
    "waiting", RankState.WAITING, Blame(Owner.UNDETERMINED, "ranks waiting for another"), follows=True
)


#: What torch's own analyser reads of gloo's dumps: PyTorch 2.11's ``fr_trace`` refuses their entries
#: (``name formatting error? gloo != 'nccl' or 'xccl'``), so a gloo run's command says so beside it.
GLOO_ANALYSIS = " (PyTorch 2.11's fr_trace reads NCCL's and XCCL's dumps; a newer one is needed for gloo's)"


def _reads(run: RunView) -> str:
    """What torch's analyser reads of this run's dumps: a note where the ranks ran gloo (on the CPU)."""
    devices = [str((rep.start or {}).get("device") or "") for rep in run.reports.values()]
    return GLOO_ANALYSIS if any(d.startswith("cpu") for d in devices) else ""


def hangs(run: RunView) -> Iterable[Problem]:
    """No rank may stay stalled: each hung one named with where it stopped, the waiting ones in one line.

    Where the stalled ranks' flight records part (:mod:`rollcall.evidence.flight`), the ranks they name are
    the hung ones, with the collective they never entered or finished; the rest wait in it. The first line the
    records name a rank in ends with the command of torch's own analysis of their whole dumps, where they lie
    on this machine.
    """
    found, quiet = stalls(run.reports), silences(run.reports)
    hung, waiting = resolve(found)
    on_gpu = {r: q for r, q in quiet.items() if q.on_gpu and r not in found}  # its GPU's hang, no stack yet
    certain = any(not s.ambiguous for s in hung)
    if on_gpu and not certain:  # stalled in backward while a rank's GPU hangs: they wait for it
        waiting = sorted([*waiting, *(replace(s, waiting=True, where=DDP_WAIT) for s in hung)], key=_rank)
        hung = []
    parted = stuck(run.reports, run.layout.world_size, found, quiet)
    named = {c.rank: (at, c) for at in parted for c in at.culprits}
    whole = dumps(run.reports, run.layout.world_size) if parted else None
    analysis = f"; torch's analysis of the whole dumps{_reads(run)}: {whole.command()}" if whole else ""
    # waiting by its stack, or in backward (computing or waiting): the records tell the story
    recorded = [s for s in (*hung, *waiting) if s.rank in named and (s.waiting or s.ambiguous)]
    hung = sorted({s.rank: s for s in (*hung, *recorded)}.values(), key=lambda s: s.rank)
    waiting = [s for s in waiting if s.rank not in named]
    for s in hung:
        report = run.reports[s.rank]
        pod = f", {run.log_word} {sorted(report.sources)[0]}" if report.sources else ""
        busy = quiet[s.rank] if s.rank in quiet and quiet[s.rank].on_gpu else None  # the monitor's reading
        gpu = gpu_line(s.dump, run.node(s.rank), report.facts)  # the GPU's own hang, beside the host frame
        gpu = gpu or (gpu_busy(busy, run.node(s.rank), report.facts) if busy is not None else None)
        at, culprit = named.get(s.rank, (None, None))
        record = f"{at.line(culprit, run.node)} (flight recorder)" if at and culprit else ""
        if s in recorded:
            message = f"rank {s.rank} (node {run.node(s.rank)}{pod}) {record}; its stack: {s.where}"
        else:
            message = (
                f"rank {s.rank} (node {run.node(s.rank)}{pod}) hung in {s.where}"
                f"{', no rank hung elsewhere' if s.ambiguous else ', not in a collective'}"
            )
        message += f", {stalled_for(s.dump, busy is not None)}: {s.at()}{f'; {gpu}' if gpu else ''}"
        if record and s not in recorded:
            message += f"; it {record}"
        if record:
            message, analysis = message + analysis, ""  # once, on the first line the records name a rank in
        note = at.says(culprit) if at and culprit and s in recorded else f"hung in {s.where}"
        frame = s.frames[0] if s.frames else "no Python frame"
        yield Problem(HUNG, message, {s.rank: f"{note} at {frame}" + (f"; {gpu}" if gpu else "")}, detail=s)
    yield from _on_gpu(run, on_gpu, certain)
    if waiting:
        line = waiting_line(waiting, len(hung) + (0 if certain else len(on_gpu)), len(quiet))
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


def _on_gpu(run: RunView, on_gpu: Mapping[int, Silence], certain: bool) -> Iterable[Problem]:
    """The ranks whose node's monitor read their GPU busy while they stood still, before any stack of theirs.

    Each is hung on its GPU, unless another rank is hung for certain by its stack: then it waits for that
    rank (a collective's kernel keeps a GPU busy while it waits for a peer).
    """
    for r, q in on_gpu.items():
        report = run.reports[r]
        pod = f", {run.log_word} {sorted(report.sources)[0]}" if report.sources else ""
        gpu = gpu_busy(q, run.node(r), report.facts)
        bound = f" (--hang-after {q.hang_after:g}s)" if q.hang_after is not None else ""
        if certain:
            yield Problem(
                WAITING,
                f"rank {r} (node {run.node(r)}{pod}) stood still with its GPU busy, waiting for the hung "
                f"rank: {gpu}",
                {r: "waiting, its GPU busy"},
                detail=q,
            )
            continue
        stood = f" for {q.stalled_s:.0f}s" if q.stalled_s is not None else ""
        yield Problem(
            HUNG,
            f"rank {r} (node {run.node(r)}{pod}) hung waiting on its GPU{stood}{bound}, seen by its node's "
            f"monitor: {gpu}; {process_line(q)}",
            {r: f"hung waiting on its GPU; {gpu}"},
            detail=q,
        )


def _rank(s: Stall) -> int:
    return s.rank


def _hang(run: RunView, now: float) -> str | None:
    """Why to end the job now: every rank not complete is hung, waiting or silent, or one never joined."""
    return stop_reason(run.roll, run.layout.world_size, run.bounds, now)


CHECK = Check(
    hangs,
    detects="a hung rank, and the ranks waiting on it",
    reads=(
        "`evidence/hangs.py` (the watchdog's stack dumps, and faulthandler's that the node's monitor turned "
        "into events), `evidence/flight.py` (the ranks' flight records: the collective they part at), "
        "`evidence/silence.py` (a rank whose GPU its node's monitor read busy while it stood still)"
    ),
    kinds=(HUNG, WAITING),
    stops=EarlyStop(
        _hang,
        when=(
            "once every rank not complete has stalled or fallen silent past its `--hang-after`, or another "
            "never joined past its bound (the join bound; the start skew and it, in its setup), or every "
            "rank waited to join past the process group's timeout and a minute"
        ),
        judged_as=(NEVER_JOINED, STUCK_IN_SETUP, SILENT),
    ),
    in_trials=True,
)


__all__ = ["CHECK", "HUNG", "WAITING", "hangs"]
