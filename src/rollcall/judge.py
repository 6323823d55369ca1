"""One judge: what was observed of a run and its criteria in, a frozen :class:`~rollcall.verdict.Verdict` out.

:func:`judge` gathers the :class:`~rollcall.checks.runview.RunView` once, runs every check of :data:`CHECKS`
over it, gives each problem its owner (:mod:`rollcall.checks.blame`), and builds the verdict rank by rank. A
check is a named predicate in a module of its own under :mod:`rollcall.checks`, which declares it once
(``CHECK``: what it detects, what it reads, the kinds of problem it declares with their rank state and owner;
``docs/checks.md`` is generated from them); adding one is writing that module and its tests, and placing its
name in :data:`ORDER`. A run ``PASSED`` when no check found anything. A check may raise a problem as a warning
(``Problem.warning``): the verdict keeps it in ``warnings``, where every report shows it, and it fails
nothing.

A site's own checks (a plugin's ``pytest_rollcall_checks``: :mod:`rollcall.hookspecs`, ``docs/extending.md``)
are :class:`Check` declarations too: :func:`site_checks` holds what a plugin returned to that contract (else a
:class:`SiteCheckError` naming the plugin and the fix), and each runs as a :class:`SiteCheck`, after every
built-in check, over the same run; a site check that raises, or returns what it did not declare, is a
``site_check_error`` problem (the platform's), never a crash of the judge.

How a check acts on a run beyond its problems is its declaration's too, built-in or a site's, and what reads
it asks here: :func:`declaration` (a check's own), :func:`early_stops` (what the runner asks while the job
runs), :func:`gate_kinds` and :func:`final_kinds` (what :func:`rollcall.runner.retriable` weighs). A run a
check's early stop ended is judged knowing which (``stopped_by``): that check's problems come before the
job's own line, and a site check that stopped a run yet names nothing in it broke its contract.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from rollcall.checks.blame import blame
from rollcall.checks.runview import Check, EarlyStop, Predicate, RunView, StopReason
from rollcall.evidence import kernels
from rollcall.evidence.proofs import digests_by_stage
from rollcall.ranklog import RankReport, RollCall
from rollcall.verdict import (
    Blame,
    Criteria,
    Kind,
    Layout,
    Observed,
    Owner,
    Problem,
    RankResult,
    RankState,
    Verdict,
)
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


#: The check whose line of a job that did not succeed follows the problem of a check that stopped it.
JOB_STATE = "job_state"


def judge(
    observed: Observed,
    criteria: Criteria | None = None,
    checks: Iterable[Predicate] = CHECKS,
    *,
    stopped_by: str | None = None,
) -> Verdict:
    """The verdict on what was ``observed``, held to ``criteria``: every check's problems, rank by rank.

    ``stopped_by``: the check whose early stop ended the job (:func:`early_stops`), if one did.
    """
    run = RunView(observed, criteria or Criteria(), stopped_by)
    found_by = [(_name(check), list(check(run))) for check in checks]
    ordered = _stopper_first(found_by, stopped_by)
    raised = [replace(p, blame=blame(p)) for _, problems in ordered for p in problems]
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


def _name(check: Predicate) -> str:
    named = declaration(check)
    return named.name if named is not None else getattr(check, "__name__", "")


def _stopper_first(
    found_by: list[tuple[str, list[Problem]]], stopped_by: str | None
) -> list[tuple[str, list[Problem]]]:
    """The checks' problems in their order, but those of the check that stopped the job before the job's line.

    The job's line says only that the suite stopped it; the stopping check names why, so it leads. Every
    built-in check that may stop a run comes before :data:`JOB_STATE` in :data:`ORDER` already; a site check
    comes after every built-in one.
    """
    names = [name for name, _ in found_by]
    if stopped_by not in names or JOB_STATE not in names:
        return found_by
    job, stopper = names.index(JOB_STATE), names.index(stopped_by)
    if stopper < job:
        return found_by
    return [*found_by[:job], found_by[stopper], *found_by[job:stopper], *found_by[stopper + 1 :]]


def declaration(check: Predicate) -> Check | None:
    """What ``check`` declares of itself: a built-in check is its declaration, a site check its plugin's.

    A bare predicate (a test's) declares nothing: it never stops a run, and its problems are retried.
    """
    if isinstance(check, SiteCheck):
        return check.check
    return check if isinstance(check, Check) else None


def early_stops(checks: Iterable[Predicate]) -> tuple[tuple[str, StopReason], ...]:
    """What the runner asks about every second while the job runs: each check's early stop, with its name.

    In the checks' order. A site check's is held to its contract (:meth:`SiteCheck.stop`).
    """
    stops: list[tuple[str, StopReason]] = []
    for check in checks:
        named = declaration(check)
        if named is None or named.stops is None:
            continue
        stops.append((named.name, check.stop if isinstance(check, SiteCheck) else named.stops.reason))
    return tuple(stops)


def gate_kinds(checks: Iterable[Predicate] = CHECKS) -> frozenset[Kind]:
    """The kinds only the release gate finds: those of the checks that declare ``gate_only``."""
    return frozenset(k for c in map(declaration, checks) if c is not None and c.gate_only for k in c.kinds)


def final_kinds(checks: Iterable[Predicate] = CHECKS) -> frozenset[Kind]:
    """The kinds whose run is not run again: those of the checks that declare ``retried=False``."""
    return frozenset(k for c in map(declaration, checks) if c is not None and not c.retried for k in c.kinds)


def assess(roll: RollCall, layout: Layout, *, min_throughput: float | None = None) -> Verdict:
    """Judge a roll call against the layout asked for (the job's end unknown)."""
    return judge(Observed(roll, layout), Criteria(min_throughput=min_throughput))


#: A site's check that raised, or returned what it does not declare: its findings are unknown, so the run
#: fails, the platform's (the site's plugin), naming no rank.
SITE_CHECK_ERROR = Kind(
    "site_check_error", RankState.FAILED, Blame(Owner.PLATFORM, "a site's own check could not judge the run")
)
#: What a site's kind may be named: lower case, as every kind (``dataset_too_small``).
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")


class SiteCheckError(ValueError):
    """A plugin's ``pytest_rollcall_checks`` returned no site check; the message says what and the fix."""


class SiteStopError(RuntimeError):
    """A site check's early stop raised, or said something other than a reason or None, while the job ran."""


@dataclass(frozen=True)
class SiteCheck:
    """A site's own check (a :class:`Check` a plugin returned), held to its declaration while it runs.

    It is a predicate as the built-in checks are: the judge runs it over the same :class:`RunView`. What it
    finds is kept as it is when each problem is a :class:`Problem` of a kind it declares, its ``ranks`` rank
    numbers with what it says of each, its ``detail`` None, a string, a number or a mapping (the reports read
    rollcall's own details: a site's may not take a node out); else, or when it raises, it found one
    :data:`SITE_CHECK_ERROR` problem saying so. So does a check whose early stop ended the job and that then
    names no failure of its kinds in it: the stop and the verdict are one judgement.
    """

    check: Check
    #: The plugin that returned it, as pytest names it.
    plugin: str

    @property
    def name(self) -> str:
        """The check's name: its predicate's."""
        return self.check.name

    def __call__(self, run: RunView) -> list[Problem]:
        """Its problems in ``run``, or the one problem of its failing its contract."""
        try:
            found = list(self.check(run))
        except Exception as exc:  # the site's code: its failure is the run's finding, never the judge's crash
            return [self._broke(f"raised {type(exc).__name__}: {exc}")]
        for p in found:
            why = _breaks(p, self.check.kinds)
            if why is not None:
                return [self._broke(why)]
        if run.stopped_by == self.name and all(p.warning for p in found):
            return [self._broke("ended the job early, yet names no failure of the run it ended")]
        return found

    def stop(self, run: RunView, now: float) -> str | None:
        """Its early stop's reason to end the job now, or None; :class:`SiteStopError` when it breaks.

        The runner sets a stop that broke aside for the rest of the run (its check still judges the run).
        """
        stops = self.check.stops
        if stops is None:
            return None
        try:
            reason = stops.reason(run, now)
        except Exception as exc:  # the site's code: it loses its early stop, never the run
            raise SiteStopError(
                f"site check {self.name} (plugin {self.plugin}): its early stop raised {type(exc).__name__}: "
                f"{exc}; it stops nothing more in this run, which its check still judges"
            ) from exc
        if reason is not None and not (isinstance(reason, str) and reason):
            raise SiteStopError(
                f"site check {self.name} (plugin {self.plugin}): its early stop returned {reason!r:.80}, "
                "not a reason (a non-empty string) or None; it stops nothing more in this run"
            )
        return reason

    def _broke(self, why: str) -> Problem:
        return Problem(
            SITE_CHECK_ERROR,
            f"site check {self.name} (plugin {self.plugin}) {why}: its findings are unknown, so the run "
            "is not passed; fix the check (docs/extending.md)",
        )


def _breaks(p: object, kinds: tuple[Kind, ...]) -> str | None:
    """How a site check's finding ``p`` breaks its contract, or None."""
    if not isinstance(p, Problem):
        return f"returned a {type(p).__name__}, not a Problem"
    if p.kind not in kinds:
        return f"returned a problem of kind {p.kind}, which it does not declare"
    if not isinstance(p.message, str) or not p.message:
        return f"returned a {p.kind} problem without a message"
    if not isinstance(p.ranks, Mapping) or not all(
        isinstance(r, int) and isinstance(n, str) for r, n in p.ranks.items()
    ):
        return f"returned a {p.kind} problem whose ranks are not rank numbers, each with a note"
    if p.detail is not None and not isinstance(p.detail, str | int | float | Mapping):
        return f"returned a {p.kind} problem whose detail is a {type(p.detail).__name__}"
    return None


def site_checks(given: Iterable[tuple[str, object]]) -> tuple[SiteCheck, ...]:
    """The site checks the plugins returned, each ``(plugin, what its hook returned)``, in that order.

    A plugin may return None or an empty list (nothing to check here). Raises :class:`SiteCheckError` at the
    first thing that is not a :class:`Check` a judge can run: its name or a kind's taken (by a built-in check
    or another site's), no kind declared, a kind without its owner, no word of what it detects.
    """
    taken = {c.name: "a built-in check" for c in CHECKS}
    kinds = {k.value: "rollcall's own" for k in (*KINDS, SITE_CHECK_ERROR)}
    out: list[SiteCheck] = []
    for plugin, returned in given:
        if returned is None:
            continue
        if isinstance(returned, Check | str | bytes) or not isinstance(returned, Iterable):
            raise SiteCheckError(
                f"plugin {plugin}: pytest_rollcall_checks returned {type(returned).__name__} "
                f"{returned!r:.80}; return a list of rollcall.checks.runview.Check (or None)"
            )
        for check in returned:
            out.append(SiteCheck(_site_check(plugin, check, taken, kinds), plugin))
    return tuple(out)


def _site_check(plugin: str, check: object, taken: dict[str, str], kinds: dict[str, str]) -> Check:
    """``check`` as a plugin returned it, held to the contract of a site check (see :func:`site_checks`)."""
    where = f"plugin {plugin}: pytest_rollcall_checks"
    if not isinstance(check, Check):
        raise SiteCheckError(
            f"{where} returned {type(check).__name__} {check!r:.80} among its checks; declare each as "
            "rollcall.checks.runview.Check(predicate, detects=..., reads=..., kinds=(...))"
        )
    name = getattr(check.predicate, "__name__", "")
    if not callable(check.predicate) or not name.isidentifier():
        raise SiteCheckError(f"{where}: a check's predicate {check.predicate!r:.80} is no named function")
    where = f"{where}: check {name}"
    if name in taken:
        raise SiteCheckError(f"{where}: the name is taken by {taken[name]}; name the predicate otherwise")
    said = [check.detects, check.reads]
    if not all(isinstance(words, str) and words for words in said):
        raise SiteCheckError(f"{where}: say what it detects and what it reads (detects=..., reads=...)")
    if not check.kinds or not all(isinstance(k, Kind) for k in check.kinds):
        raise SiteCheckError(
            f"{where}: declares no kind of problem ({check.kinds!r:.80}); give kinds=(Kind(name, rank_state, "
            "Blame(owner, why)),)"
        )
    for kind in check.kinds:
        if not (isinstance(kind.value, str) and _KIND_NAME.fullmatch(kind.value)):
            raise SiteCheckError(f"{where}: kind {kind.value!r} is no lower-case name (dataset_too_small)")
        if kind.value in kinds:
            raise SiteCheckError(f"{where}: kind {kind.value} is {kinds[kind.value]}; name one of its own")
        if not isinstance(kind.rank_state, RankState):
            raise SiteCheckError(f"{where}: kind {kind.value}'s rank_state is no RankState")
        if not (isinstance(kind.owner, Blame) and isinstance(kind.owner.owner, Owner) and kind.owner.why):
            raise SiteCheckError(
                f"{where}: kind {kind.value} says not whose it is; give it Blame(Owner.CLUSTER, why), or "
                "Owner.PLATFORM, Owner.WORKLOAD, Owner.UNDETERMINED"
            )
        if kind.too_slow and not kind.rank_state.answered:
            raise SiteCheckError(f"{where}: kind {kind.value} is too_slow, yet a rank it names is unanswered")
        kinds[kind.value] = f"check {name}'s of plugin {plugin}"
    _site_acts(where, check)
    taken[name] = f"plugin {plugin}"
    return check


def _site_acts(where: str, check: Check) -> None:
    """``check``'s declaration of how it acts on a run, held to what a site check may declare."""
    for field in ("retried", "gate_only", "logs_only", "in_trials"):
        if not isinstance(getattr(check, field), bool):
            raise SiteCheckError(f"{where}: {field} is {getattr(check, field)!r:.40}; give True or False")
    if check.in_trials or check.in_trials_as is not None:
        raise SiteCheckError(
            f"{where}: in_trials: the trials of --isolate are judged by rollcall's own checks alone (a trial "
            "trains nothing, and each names the nodes it ran on by their places in the trial); leave it False"
        )
    stops = check.stops
    if stops is None:
        return
    if not isinstance(stops, EarlyStop) or not callable(stops.reason):
        raise SiteCheckError(
            f"{where}: stops is {stops!r:.80}; give stops=EarlyStop(reason, when=...), reason(run, now) "
            "returning why to end the job now or None"
        )
    if not (isinstance(stops.when, str) and stops.when):
        raise SiteCheckError(f"{where}: its early stop says not when it fires (EarlyStop(..., when=...))")
    if stops.judged_as:
        raise SiteCheckError(
            f"{where}: its early stop's judged_as names kinds; a site check's stop is judged by its own kinds"
        )


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
    "SITE_CHECK_ERROR",
    "Check",
    "EarlyStop",
    "Predicate",
    "RunView",
    "SiteCheck",
    "SiteCheckError",
    "SiteStopError",
    "StopReason",
    "assess",
    "declaration",
    "declared",
    "early_stops",
    "final_kinds",
    "gate_kinds",
    "judge",
    "site_checks",
]
