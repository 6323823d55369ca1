"""One run, in plain steps: provision -> wait -> collect -> judge -> clean up; and its retries.

Each attempt is judged exactly once (:func:`rollcall.judge.judge`), against the session's one
:class:`~rollcall.verdict.Criteria`. Whether to run it again is a separate decision over that verdict
(:func:`retriable`).

The wait ends early where a check's declared early stop says so (:func:`rollcall.judge.early_stops`, over the
live run as the logs arrive, about every second: a hang, a node whose launcher never started, a workload the
suite refuses): the backend ends the job, and the judge reads the roll call as it stood then, knowing which
check stopped it. The runner keeps no list of its own: it asks the checks it judges by.

Clean-up runs in ``finally`` (pass, fail, timeout, Ctrl-C, SIGTERM turned into an exception) unless
``keep`` is set, with Ctrl-C and SIGTERM held until it is done; its own errors are logged, never raised over
the real failure. A run that Ctrl-C or SIGTERM interrupted is still judged, as far as it got (its job
``interrupted`` when the signal came before the job ended), and :class:`Interrupted` carries it up so the
suite records it for the reports before the session ends (pytest's exit code 2). After a wait that ended (an
interrupted one deletes and waits, as the process is about to end), a backend that can confirm its clean-up
later (:class:`~rollcall.backends.ConfirmsLater`: the kubernetes backend, whose namespace takes seconds to
go) only asks for the deletion here; the confirmation runs on while the attempt is judged and the session
goes on, and :attr:`Attempt.cleanup_error` waits for it (within the backend's clean-up bound) when it is
first read, as the session's reports read it.

With ``--job-retries N`` a failed attempt is run again, up to N times, unless only the release gate failed it
(a straggler, a slow link, a regression: running again would hide them), or a check that declares its
failure final found it (a workload the suite refuses), each as the checks declare. An attempt the
infrastructure disrupted (a pod evicted, preempted, its node deleted, lost, drained or reclaimed) is
*disrupted, retried*: a pass after disruptions only is :data:`PASSED_AFTER_DISRUPTION`, not flaky; a pass
after a failed rank is flaky.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rollcall import procs
from rollcall.backends import Backend, CleanupError, ConfirmsLater, Job, JobState, JobStatus
from rollcall.collect import Collector
from rollcall.evidence.endings import Disruption
from rollcall.jobspec import JobSpec
from rollcall.judge import (
    CHECKS,
    Predicate,
    RunView,
    SiteStopError,
    StopReason,
    early_stops,
    final_kinds,
    gate_kinds,
    judge,
)
from rollcall.live.view import LiveRollCall, LiveView
from rollcall.ranklog import RollCall
from rollcall.torchrun import read_terminations
from rollcall.verdict import Criteria, Layout, Observed, Verdict

log = logging.getLogger(__name__)

#: How a test's attempts ended, in one word (``results.json``'s ``outcome``).
RunOutcome = Literal["passed", "passed_after_disruption", "flaky", "failed", "disrupted", "interrupted"]
PASSED_AFTER_DISRUPTION: RunOutcome = "passed_after_disruption"


@dataclass
class Attempt:
    """One try of the job and its verdict, judged once."""

    spec: JobSpec
    status: JobStatus
    verdict: Verdict
    artifacts: Path
    duration_s: float
    #: What clean-up could not remove or confirm gone, as far as known (read :attr:`cleanup_error`).
    cleanup_left: CleanupError | None = None
    #: Seconds from the launch until the first rank's ``start`` event was read (None: none was).
    first_rank_s: float | None = None
    #: The clean-up's confirmation, while it still runs (:class:`~rollcall.backends.ConfirmsLater`).
    confirming: Future[None] | None = field(default=None, repr=False, compare=False)
    #: When the attempt was launched and when it was judged (wall clock, epoch seconds): the page's timeline
    #: spans them.
    started_at: float | None = None
    judged_at: float | None = None

    @property
    def cleanup_error(self) -> CleanupError | None:
        """What clean-up could not remove or confirm gone (None: it left nothing, or ``--keep`` skipped it).

        Waits for a confirmation still running, within the backend's clean-up bound.
        """
        if self.confirming is not None:
            confirming, self.confirming = self.confirming, None
            try:
                confirming.result()
            except CleanupError as exc:  # the session fails for it (the plugin), not the roll call
                log.error("clean-up of job %s: %s", self.spec.name, exc)
                self.cleanup_left = exc
            except Exception as exc:
                log.error("clean-up of job %s failed: %s: %s", self.spec.name, type(exc).__name__, exc)
                self.cleanup_left = CleanupError(
                    f"clean-up of job {self.spec.name} failed: {type(exc).__name__}: {exc}"
                )
        return self.cleanup_left

    @property
    def passed(self) -> bool:
        """The job succeeded and every rank answered."""
        return self.status.state is JobState.SUCCEEDED and self.verdict.passed

    @property
    def disruption(self) -> Disruption | None:
        """What the infrastructure took away, when it disrupted this attempt."""
        return None if self.passed else self.status.disruption


@dataclass
class RunResult:
    """Every attempt of one test's job; the last one decides."""

    backend: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def last(self) -> Attempt:
        """The attempt that decides the verdict."""
        return self.attempts[-1]

    @property
    def passed(self) -> bool:
        """Whether the last attempt passed."""
        return self.last.passed

    @property
    def flaky(self) -> bool:
        """Passed, but only after an attempt that failed on its own (not disrupted)."""
        return self.passed and any(a.disruption is None for a in self.attempts[:-1])

    @property
    def disruptions(self) -> list[tuple[int, Disruption]]:
        """Each disrupted attempt (numbered from 1) and its disruption."""
        return [(n, a.disruption) for n, a in enumerate(self.attempts, 1) if a.disruption is not None]

    @property
    def outcome(self) -> RunOutcome:
        """``passed``, ``passed_after_disruption``, ``flaky``, ``failed``, ``disrupted`` or ``interrupted``.

        Of the last attempt; ``interrupted``: the session was interrupted before its job ended.
        """
        if self.last.status.state is JobState.INTERRUPTED:
            return "interrupted"
        if self.passed:
            if self.flaky:
                return "flaky"
            return PASSED_AFTER_DISRUPTION if len(self.attempts) > 1 else "passed"
        return "disrupted" if self.last.disruption is not None else "failed"

    def message(self) -> str:
        """What went wrong, attempt by attempt, with where the logs are."""
        parts = []
        for n, attempt in enumerate(self.attempts, 1):
            retried = " (disrupted, retried)" if attempt.disruption and n < len(self.attempts) else ""
            head = f"attempt {n}/{len(self.attempts)}{retried}: " if len(self.attempts) > 1 else ""
            lines = [head + attempt.verdict.message(str(attempt.artifacts))]
            lines += [f"  {d}" for d in attempt.status.details]
            parts.append("\n".join(lines))
        return "\n".join(parts)


def run_once(
    backend: Backend,
    spec: JobSpec,
    artifacts: Path,
    *,
    criteria: Criteria | None = None,
    keep: bool = False,
    checks: Iterable[Predicate] = CHECKS,
    live: LiveView | None = None,
) -> Attempt:
    """Provision the job, wait for it, collect every node's log, judge it against ``criteria``, clean up.

    ``checks`` are the judge's checks (all of them unless a run that trains nothing asks for fewer).
    ``live`` is shown the live roll call about every second while the job runs, and once when it ended.
    """
    started, started_at = time.monotonic(), time.time()
    collector = Collector(artifacts)
    checks = tuple(checks)
    watch = _Watch(spec, started, collector, live, checks=checks, criteria=criteria, unit=backend.unit)
    job = None
    left: CleanupError | None = None
    confirming: Future[None] | None = None
    waited = ended = False
    interrupted: str | None = None
    caught: KeyboardInterrupt | None = None
    try:
        try:
            # A signal while the job is being created is held until it is, so the clean-up knows the whole
            # job (what launch had made so far would be known to no one), then acted on as during the wait.
            with procs.signals_held() as launching:
                job = backend.launch(spec, collector)
            if launching.signals:  # as the plugin's handlers raise them: Ctrl-C says nothing
                first = launching.signals[0]
                raise KeyboardInterrupt(f"signal {first.name}" if first is not signal.SIGINT else "")
            status = job.wait(spec.job_timeout_s, stop=watch.poll)
            collector.view(lambda roll: _ended(roll, status.state))
            waited = True
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as the plugin turns it: judged as far as it got
            interrupted, caught = str(exc) or "signal SIGINT (Ctrl-C)", exc
            collector.view(lambda roll: _ended(roll, JobState.STOPPED))
            when = f"{time.monotonic() - started:.0f}s after the launch" if job else "while launching the job"
            status = JobStatus(
                JobState.INTERRUPTED, f"interrupted by {interrupted} {when}, before the job ended"
            )
        ended = True
    finally:
        with procs.signals_held() as held:  # a second Ctrl-C or SIGTERM does not cut the clean-up short
            left, confirming = _clean_up(job, spec, keep=keep, waited=waited)
            collector.close()
        if held.signals and not ended:  # another exception is on its way: the signal must not be lost
            raise KeyboardInterrupt(f"signal {held.signals[0].name}")
    with procs.signals_held() as judging:
        attempt = _judged(
            backend=backend,
            spec=spec,
            artifacts=artifacts,
            collector=collector,
            status=status,
            watch=watch,
            started=started,
            started_at=started_at,
            live=live,
            checks=checks,
            criteria=criteria,
        )
        attempt.cleanup_left, attempt.confirming = left, confirming
    late = held.signals + judging.signals
    if interrupted is None and late:  # the job had ended: its verdict stands, the session ends
        interrupted = f"signal {late[0].name}"
    if interrupted is not None:
        raise Interrupted(interrupted, attempt, caught)
    return attempt


def _ended(roll: RollCall, state: JobState) -> None:
    """Note on the roll call's clock when its job ended, unless the suite ended it earlier.

    A job the suite ended (its timeout) ended when the suite asked it to.
    """
    if roll.ended is None:
        roll.ended = roll.clock()
    if roll.stopped is None and state in (JobState.TIMED_OUT, JobState.STOPPED):
        roll.stopped = roll.ended


def _clean_up(
    job: Job | None, spec: JobSpec, *, keep: bool, waited: bool
) -> tuple[CleanupError | None, Future[None] | None]:
    """End the job (unless ``keep``); what it left behind, and the confirmation still running, if any."""
    if job is None:
        return None, None
    if keep:
        log.warning("--keep: leaving job %s in place for debugging", spec.name)
        return None, None
    try:
        # Interrupted (Ctrl-C, SIGTERM, a timeout): the process is about to end, so the deletion is
        # waited for here, never left to a confirmation nobody would wait for.
        if waited and isinstance(job, ConfirmsLater):
            return None, job.cleanup_later()
        job.cleanup()
    except CleanupError as exc:  # the session fails for it (the plugin), not the roll call
        log.error("clean-up of job %s: %s", spec.name, exc)
        return exc, None
    except Exception as exc:
        log.exception("clean-up of job %s failed", spec.name)
        return CleanupError(f"clean-up of job {spec.name} failed: {type(exc).__name__}: {exc}"), None
    return None, None


def _judged(
    *,
    backend: Backend,
    spec: JobSpec,
    artifacts: Path,
    collector: Collector,
    status: JobStatus,
    watch: _Watch,
    started: float,
    started_at: float,
    live: LiveView | None,
    checks: Iterable[Predicate],
    criteria: Criteria | None,
) -> Attempt:
    """The attempt, judged once from what the logs said and how the job ended."""
    if status.state is not JobState.SUCCEEDED:  # the launcher's own records of the workers that failed
        for sink in collector.sinks:
            status.terminations += read_terminations(sink.path, sink.name, backend.unit)
    if live is not None:
        live.finish(LiveRollCall.of(collector.roll, spec.world_size))
    evidence = Observed(collector.roll, Layout(spec.nodes, spec.procs_per_node), status, spec, backend.unit)
    stopped_by = watch.stopped_by if status.state is JobState.STOPPED else None
    verdict = judge(evidence, criteria, checks, stopped_by=stopped_by)
    first = watch.first_rank_s
    if first is None and any(r.start is not None for r in collector.roll.ranks.values()):
        first = time.monotonic() - started  # a job shorter than one poll: its end bounds the first start
    duration = time.monotonic() - started
    return Attempt(
        spec, status, verdict, artifacts, duration, None, first, None, started_at, started_at + duration
    )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (which the plugin turns into Ctrl-C) interrupted a run.

    The job was ended and the attempt judged as far as it got (:attr:`attempt`; its job ``interrupted`` when
    the signal came before the job ended); :func:`run_with_retries` adds the attempts before it
    (:attr:`result`), and the suite records the run for the reports, then raises :attr:`signal` again, the
    interruption as it came (pytest reports it as before, and ends the session).
    """

    def __init__(self, why: str, attempt: Attempt, signal: KeyboardInterrupt | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.attempt = attempt
        self.signal = signal if signal is not None else KeyboardInterrupt(why)
        self.result: RunResult | None = None


class _Watch:
    """What the wait tests about every second over the live roll call: the checks' stops, the first start.

    Each early stop of ``checks`` (:func:`rollcall.judge.early_stops`, in their order) is asked over the run
    as it stands (:class:`~rollcall.checks.runview.RunView` of the live roll call, the layout and the spec,
    its job's end unknown), the same view its check judges the ended run by. It also shows the live roll call
    (:class:`~rollcall.live.view.LiveRollCall`) to ``live``, outside the collector's lock.
    """

    def __init__(
        self,
        spec: JobSpec,
        started: float,
        collector: Collector,
        live: LiveView | None,
        *,
        checks: Iterable[Predicate] = CHECKS,
        criteria: Criteria | None = None,
        unit: str = "pod",
    ) -> None:
        self.spec = spec
        self.layout = Layout(spec.nodes, spec.procs_per_node)
        self.criteria = criteria or Criteria()
        self.unit = unit
        self.stops: list[tuple[str, StopReason]] = list(early_stops(checks))
        self.started = started
        self.collector = collector
        self.live = live
        self.first_rank_s: float | None = None
        #: The check whose early stop ended the job (None: none did).
        self.stopped_by: str | None = None

    def poll(self) -> str | None:
        """The reason to end the job now, or None: the first early stop of the checks that gives one."""
        reason, now = self.collector.view(self._look)
        if self.live is not None and now is not None:
            self.live.update(now)
        return reason

    def _look(self, roll: RollCall) -> tuple[str | None, LiveRollCall | None]:
        if self.first_rank_s is None and any(r.start is not None for r in roll.ranks.values()):
            self.first_rank_s = time.monotonic() - self.started
        now = LiveRollCall.of(roll, self.layout.world_size) if self.live is not None else None
        moment = roll.clock()  # every part's bound is read on the clock the roll call heard them on
        run = RunView(Observed(roll, self.layout, None, self.spec, self.unit), self.criteria)
        reason = None
        for name, stop in list(self.stops):
            try:
                reason = stop(run, moment)
            except SiteStopError as exc:  # it stops nothing more in this run; its check still judges it
                log.error("%s", exc)
                self.stops.remove((name, stop))
                continue
            if reason is not None:
                self.stopped_by = self.stopped_by or name
                break
        if reason is not None and roll.ended is None:
            roll.ended = roll.stopped = moment  # the judge reads the roll call as it stood then
        return reason, now


def run_with_retries(
    backend: Backend,
    make_spec: Callable[[int], JobSpec],
    artifacts: Path,
    *,
    criteria: Criteria | None = None,
    retries: int = 0,
    keep: bool = False,
    live: LiveView | None = None,
    checks: Iterable[Predicate] = CHECKS,
) -> RunResult:
    """Run up to ``retries + 1`` attempts, each with fresh names, while :func:`retriable` says so.

    A disrupted attempt is retried like a failed one; the result tells them apart (:attr:`RunResult.outcome`).
    Each attempt is judged by ``checks`` (the session's: :attr:`rollcall.suite.Suite.checks`).
    """
    result = RunResult(backend.name)
    for attempt in range(retries + 1):
        spec = make_spec(attempt)
        where = artifacts if retries == 0 else artifacts / f"attempt-{attempt + 1}"
        try:
            ran = run_once(backend, spec, where, criteria=criteria, keep=keep, checks=checks, live=live)
            result.attempts.append(ran)
        except Interrupted as exc:  # no further attempt: the session ends, with this run in its reports
            result.attempts.append(exc.attempt)
            exc.result = result
            raise
        if not retriable(result.last, checks):
            break
    return result


def retriable(attempt: Attempt, checks: Iterable[Predicate] = CHECKS) -> bool:
    """Whether another attempt may help: this one failed, and not only the release gate (a retry hides that).

    As ``checks`` (the ones that judged it) declare: a problem of a check whose failure is final
    (``retried=False``: a workload the suite refuses, which the same image would be again) is not run again;
    a job that did not succeed, or any problem outside the kinds of the ``gate_only`` checks (a missing event,
    an error, a disruption, a throughput below ``--min-throughput``), is worth another attempt.
    """
    if attempt.passed:
        return False
    checks = tuple(checks)
    if any(p.kind in final_kinds(checks) for p in attempt.verdict.findings):
        return False
    if attempt.status.state is not JobState.SUCCEEDED:
        return True
    gate = gate_kinds(checks)
    return any(p.kind not in gate for p in attempt.verdict.findings)
