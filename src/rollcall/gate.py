"""The release gate: the session's criteria, and what each test's deciding verdict says of them.

:func:`criteria_of` builds the one :class:`~rollcall.verdict.Criteria` of a session from its options (it reads
``--baseline`` then, so a bad file stops the session before any job runs); every attempt is judged once
against it (:func:`rollcall.judge.judge`, in :func:`rollcall.runner.run_once`). Which checks are the release
gate's is each check's own declaration (``gate_only``: the "gate only" column of ``docs/checks.md``), and a
failure of those alone is never retried away (:func:`rollcall.runner.retriable`). :meth:`GateReport.of` reads
what the deciding verdict found of the gate's criteria, for the reports; nothing here judges. The criteria:

- **Stragglers** (``--straggler-ratio R``; 0 turns the check off; :mod:`rollcall.checks.stragglers`): by
  throughput, and by compute time per step measured without communication (a rank above the median rank's by
  more than 1/R, named with its node and pod; :mod:`rollcall.evidence.perf`: in synchronous DDP throughput is
  equal on every rank, compute time is not).
- **Slow links** (``--min-busbw GBPS``, ``--busbw-ratio R``): a node whose all-reduce bus bandwidth is below
  GBPS or below R times the median node's, or a ring pair of nodes below either against the median pair, or
  the world below GBPS, fails the run by name (:mod:`rollcall.evidence.perf`). ``--min-busbw auto`` (the
  default) holds them to the published floor of the run's instance type instead, where one is known
  (:mod:`rollcall.evidence.floors`), naming the floor's source.
- **Regressions** (``--baseline FILE``, ``--max-regression PCT``): the run fails when its total or per-rank
  median throughput is more than PCT below the baseline entry of its configuration, or its mean epoch time
  more than PCT above it; each failure names the measure, the baseline, the value and the ratio. A
  configuration without an entry skips the gate, never the test, and the key is printed. With
  ``--baseline-history`` instead, each configuration's baseline is the median of its last sound runs and a
  figure must also be worse by more than ``--baseline-mads`` spreads (:mod:`rollcall.evidence.reference`).

``--write-baseline FILE`` records the figures of every sound run (the job succeeded, every rank answered, no
straggler; a regression against an older baseline does not stop it) into FILE, merged with the entries FILE
already holds, so a release manager accepts a new normal deliberately.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollcall.backends import JobState
from rollcall.checks import REGRESSION, STRAGGLER, Straggler
from rollcall.evidence.baseline import Baselines, ConfigKey, Entry, Figures, Regression
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.evidence.perf import PerfReport
from rollcall.evidence.reference import history_baselines
from rollcall.evidence.xids import XidPolicy
from rollcall.verdict import Criteria, Verdict

if TYPE_CHECKING:
    from rollcall.options import Options
    from rollcall.runner import Attempt


@dataclass
class GateReport:
    """What the release gate found for one test's deciding attempt."""

    test_id: str
    key: ConfigKey
    figures: Figures
    workload: dict[str, Any]
    straggler_ratio: float
    stragglers: list[Straggler] = field(default_factory=list)
    baseline_file: str | None = None
    baseline: Figures | None = None
    max_regression_pct: float | None = None
    regressions: list[Regression] = field(default_factory=list)
    #: The run was sound apart from regressions: its figures may become a baseline.
    sound: bool = False
    #: Compute times and bus bandwidth, with the compute stragglers and slow links
    #: (:mod:`rollcall.evidence.perf`).
    perf: PerfReport | None = None

    @property
    def gate(self) -> str:
        """``passed``, ``failed``, ``skipped`` (no entry for the key) or ``off`` (no ``--baseline``)."""
        if self.baseline_file is None:
            return "off"
        if self.baseline is None:
            return "skipped"
        return "failed" if self.regressions else "passed"

    def note(self) -> str | None:
        """The line to print about the regression gate, when there is something to say."""
        if self.gate == "skipped":
            return (
                f"rollcall: no baseline for {self.key} in {self.baseline_file}: regression gate skipped "
                f"for {self.test_id} (record one with --write-baseline)"
            )
        if self.gate == "off":
            return None
        return f"rollcall: regression gate {self.gate} for {self.test_id} against {self.key}"

    def as_dict(self) -> dict[str, Any]:
        """The report, JSON-ready."""
        return {
            "key": str(self.key),
            "config": self.key.as_dict(),
            "figures": self.figures.as_dict(),
            "straggler_ratio": self.straggler_ratio,
            "stragglers": [s.as_dict() for s in self.stragglers],
            "gate": self.gate,
            "baseline_file": self.baseline_file,
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "max_regression_pct": self.max_regression_pct,
            "regressions": [r.as_dict() for r in self.regressions],
            "sound": self.sound,
            "compute_stragglers": len(self.perf.stragglers) if self.perf else 0,
            "slow_links": len(self.perf.slow) if self.perf else 0,
        }

    @classmethod
    def of(cls, test_id: str, attempt: Attempt) -> GateReport:
        """What the attempt that decided a test found of the release gate's criteria."""
        verdict, criteria = attempt.verdict, attempt.verdict.criteria
        return cls(
            test_id=test_id,
            key=verdict.config or ConfigKey.of(attempt.spec, verdict.workload),
            figures=verdict.figures,
            workload=dict(verdict.workload),
            straggler_ratio=criteria.straggler_ratio,
            stragglers=[s for p in verdict.of_kind(STRAGGLER) for s in p.detail],
            baseline_file=criteria.baseline_file,
            baseline=verdict.baseline,
            max_regression_pct=criteria.max_regression_pct if verdict.baseline else None,
            regressions=[p.detail for p in verdict.of_kind(REGRESSION)],
            sound=attempt.status.state is JobState.SUCCEEDED and _sound(verdict),
            perf=verdict.perf_report,
        )

    def entry(self, recorded_at: datetime | None = None) -> Entry:
        """The figures of this run as a baseline entry."""
        when = (recorded_at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        info = {"batch_size": self.workload.get("batch_size"), "test_id": self.test_id, "recorded_at": when}
        return Entry(self.key, self.figures, info)


def criteria_of(options: Options) -> Criteria:
    """The session's criteria from its options; reads ``--baseline`` or ``--baseline-history`` now.

    A bad file raises BaselineError. With ``--baseline-history`` each configuration's baseline is the
    median of its last ``--baseline-runs`` sound runs, with their spreads
    (:mod:`rollcall.evidence.reference`).
    """
    b, j = options.baselines, options.judging
    path, history = b.baseline, b.baseline_history
    if history:
        baselines: Baselines | None = history_baselines(history, b.baseline_runs, b.baseline_mads)
    else:
        baselines = Baselines.load(path) if path else None
    return Criteria(
        min_throughput=j.min_throughput,
        straggler_ratio=j.straggler_ratio,
        min_busbw=None if j.min_busbw == "auto" else j.min_busbw,
        busbw_floors=j.min_busbw == "auto",
        busbw_ratio=j.busbw_ratio,
        baselines=baselines,
        baseline_file=history or path,
        max_regression_pct=b.max_regression,
        fitness=FitnessPolicy(
            warn=j.fitness_warn,
            off=j.fitness_off,
            fail=j.fitness_fail,
            floors={"power_limit": j.power_floor} if j.power_floor is not None else {},
        ),
        xids=XidPolicy(tuple(sorted(j.xid_class.items()))),
        drift=j.drift,
        expect=j.expect + j.expect_file,
    )


def _sound(verdict: Verdict) -> bool:
    """No problem but regressions: the roll call itself was sound."""
    return all(p.kind is REGRESSION for p in verdict.findings)


def write_baseline(path: str | Path, reports: Iterable[GateReport]) -> list[str]:
    """Merge every sound run's figures into the baseline file at ``path``; the lines say what was done."""
    target = Path(path)
    current = Baselines.load(target) if target.exists() else Baselines()
    lines, new = [], []
    for report in reports:
        if report.sound:
            new.append(report.entry())
            lines.append(f"baseline {target}: recorded {report.key} from {report.test_id}")
        else:
            lines.append(f"baseline {target}: not recorded from {report.test_id}: its run failed")
    if new:
        current.merged(new).save(target)
    return lines
