"""The release gate: the deciding attempt of each test judged again, with stragglers and the baseline.

:meth:`ReleaseGate.judge` applies to the attempt that decided a test (after ``--retries``: a regression or a
straggler is never retried away) and replaces its verdict with one judged (:func:`rollcall.judge.judge`) from
the same evidence against more criteria:

- **Stragglers** (``--straggler-ratio R``; 0 turns the check off; :mod:`rollcall.stragglers`): by throughput,
  and by compute time per step measured without communication (a rank above the median rank's by more than
  1/R, named with its node and pod; :mod:`rollcall.perf`: in synchronous DDP throughput is equal on every
  rank, compute time is not).
- **Slow links** (``--min-busbw GBPS``, ``--busbw-ratio R``): a node whose all-reduce bus bandwidth is below
  GBPS or below R times the median node's, or a ring pair of nodes below either against the median pair, or
  the world below GBPS, fails the run by name (:mod:`rollcall.perf`).
- **Regressions** (``--baseline FILE``, ``--max-regression PCT``): the run fails when its total or per-rank
  median throughput is more than PCT below the baseline entry of its configuration, or its mean epoch time
  more than PCT above it; each failure names the measure, the baseline, the value and the ratio. A
  configuration without an entry skips the gate, never the test, and the key is printed.

``--write-baseline FILE`` records the figures of every sound run (the job succeeded, every rank answered, no
straggler; a regression against an older baseline does not stop it) into FILE, merged with the entries FILE
already holds, so a release manager accepts a new normal deliberately.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollcall.backends import JobState
from rollcall.baseline import Baselines, ConfigKey, Entry, Regression
from rollcall.judge import judge
from rollcall.options import DEFAULTS
from rollcall.perf import PerfReport
from rollcall.stragglers import Straggler
from rollcall.verdict import Figures, Kind, Verdict

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
    #: Compute times and bus bandwidth, with the compute stragglers and slow links (:mod:`rollcall.perf`).
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
            "compute_stragglers": len(self.perf.stragglers) if self.perf else 0,
            "slow_links": len(self.perf.slow) if self.perf else 0,
        }

    def entry(self, recorded_at: datetime | None = None) -> Entry:
        """The figures of this run as a baseline entry."""
        when = (recorded_at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        info = {"batch_size": self.workload.get("batch_size"), "test_id": self.test_id, "recorded_at": when}
        return Entry(self.key, self.figures, info)


@dataclass(frozen=True)
class ReleaseGate:
    """The session's straggler check and regression gate."""

    straggler_ratio: float = DEFAULTS.straggler_ratio
    max_regression_pct: float = DEFAULTS.max_regression
    baselines: Baselines | None = None
    baseline_file: str | None = None
    min_busbw: float | None = DEFAULTS.min_busbw
    busbw_ratio: float = DEFAULTS.busbw_ratio

    @classmethod
    def from_options(cls, options: Options) -> ReleaseGate:
        """The gate of the session's straggler, bandwidth and baseline options (reads ``--baseline`` now)."""
        path = options.baseline
        return cls(
            straggler_ratio=options.straggler_ratio,
            max_regression_pct=options.max_regression,
            baselines=Baselines.load(path) if path else None,
            baseline_file=path,
            min_busbw=options.min_busbw,
            busbw_ratio=options.busbw_ratio,
        )

    def judge(self, test_id: str, attempt: Attempt) -> GateReport:
        """Judge the attempt that decided a test again with the gate's criteria; say what was found."""
        first = attempt.verdict
        key = ConfigKey.of(attempt.spec, first.workload)
        entry = self.baselines.get(key) if self.baselines is not None else None
        criteria = replace(
            first.criteria,
            straggler_ratio=self.straggler_ratio,
            min_busbw=self.min_busbw,
            busbw_ratio=self.busbw_ratio,
            baseline=entry.figures if entry else None,
            max_regression_pct=self.max_regression_pct,
        )
        verdict = judge(first.evidence, criteria) if first.evidence is not None else first
        attempt.verdict = verdict
        return GateReport(
            test_id=test_id,
            key=key,
            figures=verdict.figures,
            workload=dict(verdict.workload),
            straggler_ratio=self.straggler_ratio,
            stragglers=[s for p in verdict.of_kind(Kind.STRAGGLER) for s in p.detail],
            baseline_file=self.baseline_file,
            baseline=entry.figures if entry else None,
            max_regression_pct=self.max_regression_pct if entry else None,
            regressions=[p.detail for p in verdict.of_kind(Kind.REGRESSION)],
            sound=attempt.status.state is JobState.SUCCEEDED and _sound(verdict),
            perf=verdict.perf_report,
        )


def _sound(verdict: Verdict) -> bool:
    """No problem but regressions: the roll call itself was sound."""
    return all(p.kind is Kind.REGRESSION for p in verdict.findings)


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
