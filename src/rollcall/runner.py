"""One run, in plain steps: provision -> wait -> collect -> assess -> clean up.

Clean-up runs in ``finally`` (pass, fail, timeout, Ctrl-C, SIGTERM turned into an exception) unless
``keep`` is set; its own errors are logged, never raised over the real failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rollcall.backends import Backend, JobState, JobStatus
from rollcall.collect import Collector
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.torchrun import read_terminations
from rollcall.verdict import Criteria, Evidence, Layout, Verdict

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One try of the job; the release gate may replace its verdict with one judged against more criteria."""

    spec: JobSpec
    status: JobStatus
    verdict: Verdict
    artifacts: Path
    duration_s: float

    @property
    def passed(self) -> bool:
        """The job succeeded and every rank answered."""
        return self.status.state is JobState.SUCCEEDED and self.verdict.passed


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
        """Passed, but only after a retry."""
        return self.passed and len(self.attempts) > 1

    def message(self) -> str:
        """What went wrong, attempt by attempt, with where the logs are."""
        parts = []
        for n, attempt in enumerate(self.attempts, 1):
            head = f"attempt {n}/{len(self.attempts)}: " if len(self.attempts) > 1 else ""
            lines = [head + attempt.verdict.message(str(attempt.artifacts))]
            lines += [f"  {d}" for d in attempt.status.details]
            parts.append("\n".join(lines))
        return "\n".join(parts)


def run_once(
    backend: Backend,
    spec: JobSpec,
    artifacts: Path,
    *,
    keep: bool = False,
    min_throughput: float | None = None,
) -> Attempt:
    """Provision the job, wait for it, collect every node's log, assess, and clean up."""
    started = time.monotonic()
    collector = Collector(artifacts)
    job = None
    try:
        job = backend.launch(spec, collector)
        status = job.wait(spec.job_timeout_s)
    finally:
        if job is not None and not keep:
            try:
                job.cleanup()
            except Exception:
                log.exception("clean-up of job %s failed", spec.name)
        elif job is not None:
            log.warning("--keep: leaving job %s in place for debugging", spec.name)
        collector.close()
    if status.state is not JobState.SUCCEEDED:  # the launcher's own records of the workers that failed
        for sink in collector.sinks:
            status.terminations += read_terminations(sink.path, sink.name)
    evidence = Evidence(collector.roll, Layout(spec.nodes, spec.procs_per_node), status)
    verdict = judge(evidence, Criteria(min_throughput=min_throughput))
    return Attempt(spec, status, verdict, artifacts, time.monotonic() - started)


def run_with_retries(
    backend: Backend,
    make_spec: Callable[[int], JobSpec],
    artifacts: Path,
    *,
    retries: int = 0,
    keep: bool = False,
    min_throughput: float | None = None,
) -> RunResult:
    """Run up to ``retries + 1`` attempts, each with fresh names; stop at the first pass."""
    result = RunResult(backend.name)
    for attempt in range(retries + 1):
        spec = make_spec(attempt)
        where = artifacts if retries == 0 else artifacts / f"attempt-{attempt + 1}"
        result.attempts.append(run_once(backend, spec, where, keep=keep, min_throughput=min_throughput))
        if result.passed:
            break
    return result
