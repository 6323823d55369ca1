"""One judge: what was observed of a run and its criteria in, a frozen :class:`~rollcall.verdict.Verdict` out.

:func:`judge` gathers the :class:`~rollcall.checks.runview.RunView` once, runs every check of :data:`CHECKS`
over it, gives each problem its owner (:mod:`rollcall.checks.blame`), and builds the verdict rank by rank. A
check is a named predicate in a module of its own under :mod:`rollcall.checks`, which declares it once
(``CHECK``: what it detects, what it reads, the kinds of problem it declares with their rank state and owner;
``docs/checks.md`` is generated from them); adding one is writing that module and its tests, and placing its
name in :data:`ORDER`. A run ``PASSED`` when no check found anything. A check may raise a problem as a warning
(``Problem.warning``): the verdict keeps it in ``warnings``, where every report shows it, and it fails
nothing.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable
from dataclasses import replace

from rollcall.checks.blame import blame
from rollcall.checks.runview import Check, Predicate, RunView
from rollcall.evidence import kernels
from rollcall.evidence.proofs import digests_by_stage
from rollcall.ranklog import RankReport, RollCall
from rollcall.verdict import Criteria, Kind, Layout, Observed, RankResult, Verdict
from rollcall_workload.contract import REQUIRED_EVENTS

#: Every check, in the order their problems are listed: each the module ``rollcall.checks.<name>``, which
#: declares it once (its ``CHECK``).
ORDER: tuple[str, ...] = (
    "workload_version",
    "gpu_events",
    "replica_divergence",
    "collective_mismatch",
    "interrupted",
    "never_started",
    "never_joined",
    "silent",
    "hangs",
    "errors",
    "exited_nonzero",
    "job_state",
    "efa",
    "missing_events",
    "unexpected_ranks",
    "invalid_values",
    "loss",
    "min_throughput",
    "layout",
    "stragglers",
    "compute_stragglers",
    "slow_links",
    "busbw_floors",
    "regressions",
    "unfit_device",
    "config_drift",
    "expectations",
    "kernel_fallbacks",
)


def declared(name: str) -> Check:
    """The check the module ``rollcall.checks.<name>`` declares."""
    check = getattr(importlib.import_module(f"rollcall.checks.{name}"), "CHECK", None)
    if not isinstance(check, Check) or check.name != name:
        raise TypeError(f"rollcall.checks.{name} declares no CHECK named {name!r}: {check!r}")
    return check


#: Every check, in :data:`ORDER`.
CHECKS: tuple[Check, ...] = tuple(declared(name) for name in ORDER)

#: The checks that need no job, only logs: what ``rollcall check-logs`` holds saved logs to.
LOG_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if c.logs_only)

#: Every kind of problem the checks declare, in their order (``isolated``, which no check raises, aside).
KINDS: tuple[Kind, ...] = tuple(k for c in CHECKS for k in c.kinds)


def judge(
    observed: Observed, criteria: Criteria | None = None, checks: Iterable[Predicate] = CHECKS
) -> Verdict:
    """The verdict on what was ``observed``, held to ``criteria``: every check's problems, rank by rank."""
    run = RunView(observed, criteria or Criteria())
    raised = [replace(p, blame=blame(p)) for check in checks for p in check(run)]
    found = tuple(p for p in raised if not p.warning)
    world = run.layout.world_size
    ranks = {}
    for r in range(world):
        report = run.reports.get(r)
        sound = run.sound.get(r)
        ranks[r] = RankResult(
            rank=r,
            node=run.node(r),
            pods=tuple(sorted(report.sources)) if report else (),
            reported=_reported(report),
            throughput=sound.throughput if sound else None,
            epoch_time=sound.epoch_time if sound else None,
            complete=bool(report and report.complete),
            problems=tuple(p for p in found if r in p.ranks),
            marks=tuple(sorted(report.marks.values(), key=lambda m: m.time)) if report else (),
            compile_cache=report.compile_cache if report else None,
        )
    mfus = [m for rep in run.sound.values() if (m := _finite(rep.details.get("mfu"))) is not None]
    return Verdict(
        layout=run.layout,
        ranks=ranks,
        findings=found,
        missing=run.roll.missing(world),
        unexpected_ranks=run.roll.unexpected(world),
        throughput=run.throughput,
        epoch_time_mean=run.epoch_time_mean,
        mfu_mean=math.fsum(mfus) / len(mfus) if mfus else None,
        workload=run.workload,
        perf=run.perf,
        replicas=digests_by_stage(run.reports),
        criteria=run.criteria,
        config=run.config,
        baseline=run.baseline,
        warnings=tuple(p for p in raised if p.warning),
        nodes_detail=run.nodes_detail,
        kernels=kernels.kernels_used(run.reports),
        gpu_events=run.gpu_events,
    )


def assess(roll: RollCall, layout: Layout, *, min_throughput: float | None = None) -> Verdict:
    """Judge a roll call against the layout asked for (the job's end unknown)."""
    return judge(Observed(roll, layout), Criteria(min_throughput=min_throughput))


def _reported(report: RankReport | None) -> tuple[str, ...]:
    if report is None:
        return ()
    said = ["start"] if report.start is not None else []
    said += [e for e in REQUIRED_EVENTS if report.has(e)]
    return (*said, "error") if report.errors else tuple(said)


def _finite(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


__all__ = [
    "CHECKS",
    "KINDS",
    "LOG_CHECKS",
    "ORDER",
    "Check",
    "Predicate",
    "RunView",
    "assess",
    "declared",
    "judge",
]
