"""Release gating: baselines of each configuration's figures, the regression gate, and stragglers.

A baseline file holds, per configuration, the figures a release manager accepted as normal::

    {
      "version": 1,
      "entries": {
        "accelerator=nvidia,instance_type=p5.48xlarge,nodes=2,procs_per_node=8,model=base,seq_len=128": {
          "accelerator": "nvidia", "instance_type": "p5.48xlarge", "nodes": 2, "procs_per_node": 8,
          "model": "base", "seq_len": 128,
          "throughput_total": 6400.0, "throughput_median": 400.0, "epoch_time_mean": 0.31,
          "batch_size": 32, "test_id": "tests/e2e/...", "recorded_at": "2025-06-01T02:14:00Z"
        }
      }
    }

The key is the configuration: accelerator, instance type (``-`` when none was asked for), nodes, procs per
node, and the workload's model and sequence length (from the ranks' ``throughput`` events; ``?`` when the
ranks did not agree or did not say). Each entry repeats its key's fields; a key that does not match them is
an error.

The checks, applied by :meth:`ReleaseGate.judge` to the attempt that decided a test (after ``--retries``:
a regression or a straggler is never retried away):

- **Stragglers** (``--straggler-ratio R``, default 0.8; 0 turns the check off): a rank whose throughput is
  below R times the median of all ranks fails the run, named with its node; so does a rank whose compute
  time per step (measured without communication) exceeds the median rank's by more than 1/R, named with
  its node and pod (:mod:`rollcall.perf`: in synchronous DDP throughput is equal on every rank, compute
  time is not). A bad GPU or NeuronCore shows up this way long before a job fails.
- **Slow links** (``--min-busbw GBPS``, ``--busbw-ratio R``, default 0.5): a node whose all-reduce bus
  bandwidth is below GBPS or below R times the median node's, or a ring pair of nodes below either against
  the median pair, fails the run by name (:mod:`rollcall.perf`).
- **Regressions** (``--baseline FILE``, ``--max-regression PCT``, default 10): the run fails when its total
  or per-rank median throughput is more than PCT below the baseline entry of its configuration, or its mean
  epoch time more than PCT above it; each failure names the measure, the baseline, the value and the ratio.
  A configuration without an entry skips the gate, never the test, and the key is printed.

``--write-baseline FILE`` records the figures of every sound run (the job succeeded, every rank answered, no
straggler; a regression against an older baseline does not stop it) into FILE, merged with the entries FILE
already holds, so a release manager accepts a new normal deliberately.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollcall.perf import DEFAULT_BUSBW_RATIO, PerfReport
from rollcall.perf import judge as judge_perf
from rollcall.verdict import Stats, Verdict

if TYPE_CHECKING:
    from rollcall.jobspec import JobSpec
    from rollcall.options import Options
    from rollcall.runner import Attempt

BASELINE_VERSION = 1
DEFAULT_STRAGGLER_RATIO = 0.8
DEFAULT_MAX_REGRESSION_PCT = 10.0
UNKNOWN = "?"
NO_INSTANCE_TYPE = "-"


class BaselineError(ValueError):
    """A baseline file that cannot be read or does not hold what it should; the message names the fix."""


@dataclass(frozen=True)
class ConfigKey:
    """The configuration a baseline entry belongs to."""

    accelerator: str
    instance_type: str
    nodes: int
    procs_per_node: int
    model: str
    seq_len: int | None

    @classmethod
    def of(cls, spec: JobSpec, workload: Mapping[str, Any]) -> ConfigKey:
        """The key of a job and the workload settings its ranks agreed on."""
        model, seq_len = workload.get("model"), workload.get("seq_len")
        return cls(
            accelerator=spec.accelerator,
            instance_type=spec.instance_type or NO_INSTANCE_TYPE,
            nodes=spec.nodes,
            procs_per_node=spec.procs_per_node,
            model=model if isinstance(model, str) else UNKNOWN,
            seq_len=seq_len if isinstance(seq_len, int) and not isinstance(seq_len, bool) else None,
        )

    @classmethod
    def from_fields(cls, doc: Mapping[str, Any]) -> ConfigKey:
        """The key held by an entry's fields; ValueError naming a missing or wrong field."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = doc.get(f.name)
            if f.name == "seq_len":
                ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
            elif f.name in ("nodes", "procs_per_node"):
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            else:
                ok = isinstance(value, str) and bool(value)
            if not ok:
                raise ValueError(f"field {f.name!r} is {value!r}")
            values[f.name] = value
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The key's fields, JSON-ready."""
        return asdict(self)

    def __str__(self) -> str:
        return ",".join(f"{k}={UNKNOWN if v is None else v}" for k, v in self.as_dict().items())


@dataclass(frozen=True)
class Figures:
    """The figures a baseline holds and the gate compares."""

    throughput_total: float | None = None
    throughput_median: float | None = None
    epoch_time_mean: float | None = None

    @classmethod
    def of(cls, verdict: Verdict) -> Figures:
        """A run's figures."""
        return cls(verdict.throughput.total, verdict.throughput.median, verdict.epoch_time_mean)

    def as_dict(self) -> dict[str, float | None]:
        """The figures, JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class Measure:
    """One measure the gate compares: which figure, its unit, and which way is better."""

    name: str
    attr: str
    unit: str
    spec: str
    higher_is_better: bool

    def of(self, figures: Figures) -> float | None:
        """The value of this measure in ``figures``, or None when absent or not a finite positive number."""
        value: float | None = getattr(figures, self.attr)
        return value if value is not None and math.isfinite(value) and value > 0 else None

    def show(self, value: float) -> str:
        """``value`` with its unit."""
        return f"{value:{self.spec}} {self.unit}"


MEASURES: tuple[Measure, ...] = (
    Measure("total throughput", "throughput_total", "samples/s", ".2f", True),
    Measure("per-rank median throughput", "throughput_median", "samples/s", ".2f", True),
    Measure("mean epoch time", "epoch_time_mean", "s", ".4f", False),
)


@dataclass(frozen=True)
class Regression:
    """One measure worse than its baseline by more than the allowed percentage."""

    measure: Measure
    baseline: float
    value: float
    max_regression_pct: float

    @property
    def ratio(self) -> float:
        """Value over baseline."""
        return self.value / self.baseline

    def __str__(self) -> str:
        m = self.measure
        change = abs(1 - self.ratio) * 100
        worse = "below" if m.higher_is_better else "above"
        return (
            f"{m.name} regressed: {m.show(self.value)} against a baseline of {m.show(self.baseline)} "
            f"(ratio {self.ratio:.3f}, {change:.1f}% {worse} it; "
            f"--max-regression {self.max_regression_pct:g}%)"
        )

    def as_dict(self) -> dict[str, Any]:
        """The regression, JSON-ready."""
        return {
            "measure": self.measure.name,
            "baseline": self.baseline,
            "value": self.value,
            "ratio": self.ratio,
            "message": str(self),
        }


def regressions(current: Figures, baseline: Figures, max_regression_pct: float) -> list[Regression]:
    """Each measure of ``current`` worse than ``baseline`` by more than ``max_regression_pct`` percent.

    A measure missing on either side is not compared (a run without throughput already fails its roll call).
    """
    allowed = max_regression_pct / 100
    found = []
    for m in MEASURES:
        base, value = m.of(baseline), m.of(current)
        if base is None or value is None:
            continue
        worse = value < base * (1 - allowed) if m.higher_is_better else value > base * (1 + allowed)
        if worse:
            found.append(Regression(m, base, value, max_regression_pct))
    return found


@dataclass(frozen=True)
class Straggler:
    """A rank training slower than ``threshold`` times the median of all ranks."""

    rank: int
    node: int
    throughput: float
    median: float

    @property
    def ratio(self) -> float:
        """Throughput of this rank over the median."""
        return self.throughput / self.median

    def __str__(self) -> str:
        return (
            f"rank {self.rank} (node {self.node}) at {self.throughput:.2f} samples/s, "
            f"{self.ratio:.2f} of the median"
        )

    def as_dict(self) -> dict[str, Any]:
        """The straggler, JSON-ready."""
        return {**asdict(self), "ratio": self.ratio}


def find_stragglers(per_rank: Mapping[int, Mapping[str, Any]], ratio: float) -> list[Straggler]:
    """Ranks of ``per_rank`` (as :attr:`Verdict.per_rank` holds them) below ``ratio`` times the median.

    ``ratio`` 0 turns the check off; with fewer than two ranks measured there is no one to lag behind.
    """
    values = {
        r: float(info["throughput"])
        for r, info in per_rank.items()
        if isinstance(info.get("throughput"), int | float) and math.isfinite(info["throughput"])
    }
    median = Stats.of(list(values.values())).median
    if ratio <= 0 or len(values) < 2 or not median:
        return []
    return [
        Straggler(r, int(per_rank[r].get("node", -1)), tp, median)
        for r, tp in sorted(values.items())
        if tp < ratio * median
    ]


@dataclass(frozen=True)
class Entry:
    """One configuration's accepted figures, and where they came from."""

    key: ConfigKey
    figures: Figures
    info: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The entry as the baseline file holds it."""
        return {**self.key.as_dict(), **self.figures.as_dict(), **self.info}


@dataclass
class Baselines:
    """The entries of one baseline file, by configuration."""

    entries: dict[ConfigKey, Entry] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Baselines:
        """Read a baseline file; :class:`BaselineError` when it is unreadable or malformed."""
        try:
            doc = json.loads(Path(path).read_text())
        except OSError as exc:
            raise BaselineError(f"cannot read baseline file {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise BaselineError(f"baseline file {path} is not JSON: {exc}") from None
        return cls.from_dict(doc, str(path))

    @classmethod
    def from_dict(cls, doc: Any, where: str = "baseline") -> Baselines:
        """Entries from the parsed file; :class:`BaselineError` naming the first bad entry."""
        if not isinstance(doc, dict) or doc.get("version") != BASELINE_VERSION:
            raise BaselineError(
                f'{where}: expected an object with "version": {BASELINE_VERSION} and "entries" '
                "(write one with --write-baseline FILE)"
            )
        raw = doc.get("entries")
        if not isinstance(raw, dict):
            raise BaselineError(f'{where}: "entries" must be an object keyed by configuration')
        entries: dict[ConfigKey, Entry] = {}
        for name, item in raw.items():
            if not isinstance(item, dict):
                raise BaselineError(f"{where}: entry {name!r} is not an object")
            try:
                key = ConfigKey.from_fields(item)
                figures = Figures(**{m.attr: _number(item.get(m.attr), m.attr) for m in MEASURES})
            except ValueError as exc:
                raise BaselineError(f"{where}: entry {name!r}: {exc}") from None
            if str(key) != name:
                raise BaselineError(f"{where}: entry {name!r} holds the fields of {key}; make them agree")
            known = {f.name for f in fields(ConfigKey)} | {m.attr for m in MEASURES}
            entries[key] = Entry(key, figures, {k: v for k, v in item.items() if k not in known})
        return cls(entries)

    def get(self, key: ConfigKey) -> Entry | None:
        """The entry of ``key``, if any."""
        return self.entries.get(key)

    def merged(self, new: Iterable[Entry]) -> Baselines:
        """These entries with ``new`` ones added or replacing those of the same configuration."""
        entries = dict(self.entries)
        entries.update((e.key, e) for e in new)
        return Baselines(entries)

    def as_dict(self) -> dict[str, Any]:
        """The file's content, entries sorted by key."""
        ordered = sorted(self.entries.values(), key=lambda e: str(e.key))
        return {"version": BASELINE_VERSION, "entries": {str(e.key): e.as_dict() for e in ordered}}

    def save(self, path: str | Path) -> None:
        """Write the file at once (a reader never sees half of it)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "w") as out:
            json.dump(self.as_dict(), out, indent=2, allow_nan=False)
            out.write("\n")
        os.replace(tmp, target)


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"field {name!r} is {value!r}, expected a number or null")
    return float(value)


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
    #: Compute stragglers and slow links (:mod:`rollcall.perf`).
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


def straggler_problem(stragglers: list[Straggler], ratio: float) -> str:
    """The verdict's line naming every straggler."""
    median = stragglers[0].median
    return (
        f"{len(stragglers)} straggler(s) below {ratio:g} x the median throughput of {median:.2f} samples/s "
        f"(--straggler-ratio): " + "; ".join(str(s) for s in stragglers)
    )


@dataclass(frozen=True)
class ReleaseGate:
    """The session's straggler check and regression gate."""

    straggler_ratio: float = DEFAULT_STRAGGLER_RATIO
    max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT
    baselines: Baselines | None = None
    baseline_file: str | None = None
    min_busbw: float | None = None
    busbw_ratio: float = DEFAULT_BUSBW_RATIO

    @classmethod
    def from_options(cls, options: Options) -> ReleaseGate:
        """The gate of ``--straggler-ratio``, ``--baseline`` and ``--max-regression`` (reads the file now)."""
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
        """Check the attempt that decided a test, add what fails to its verdict, and say what was found."""
        verdict = attempt.verdict
        report = GateReport(
            test_id=test_id,
            key=ConfigKey.of(attempt.spec, verdict.workload),
            figures=Figures.of(verdict),
            workload=dict(verdict.workload),
            straggler_ratio=self.straggler_ratio,
            stragglers=find_stragglers(verdict.per_rank, self.straggler_ratio),
            baseline_file=self.baseline_file,
        )
        if report.stragglers:
            for s in report.stragglers:
                verdict.failed_ranks.setdefault(s.rank, []).append(
                    f"straggler: {s.ratio:.2f} of the median throughput"
                )
            verdict.problems.append(straggler_problem(report.stragglers, self.straggler_ratio))
        report.perf = judge_perf(
            verdict.perf,
            straggler_ratio=self.straggler_ratio,
            min_busbw=self.min_busbw,
            busbw_ratio=self.busbw_ratio,
        )
        for rank, reasons in report.perf.rank_reasons().items():
            verdict.failed_ranks.setdefault(rank, []).extend(reasons)
        verdict.problems.extend(report.perf.problems())
        report.sound = attempt.passed
        entry = self.baselines.get(report.key) if self.baselines is not None else None
        if entry is not None:
            report.baseline = entry.figures
            report.max_regression_pct = self.max_regression_pct
            report.regressions = regressions(report.figures, entry.figures, self.max_regression_pct)
            verdict.problems.extend(str(r) for r in report.regressions)
        return report


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
