"""Baseline files: each configuration's accepted figures, and how a run's figures compare with them.

A baseline file holds, per configuration, the figures a release manager accepted as normal::

    {
      "version": 1,
      "entries": {
        "accelerator=nvidia,instance_type=p5.48xlarge,nodes=2,procs_per_node=8,model=base,seq_len=128": {
          "accelerator": "nvidia", "instance_type": "p5.48xlarge", "nodes": 2, "procs_per_node": 8,
          "model": "base", "seq_len": 128,
          "throughput_total": 6400.0, "throughput_median": 400.0, "epoch_time_mean": 0.31,
          "compute_ms_median": 71.5, "busbw_world": 182.4,
          "batch_size": 32, "test_id": "tests/e2e/...", "recorded_at": "2025-06-01T02:14:00Z"
        }
      }
    }

The key is the configuration: accelerator, instance type (``-`` when none was asked for), nodes, procs per
node, and the workload's model and sequence length (from the ranks' ``throughput`` events; ``?`` when the
ranks did not agree or did not say). Each entry repeats its key's fields; a key that does not match them is
an error. A figure an entry lacks (files written before it was measured, or a run with ``--compute-steps 0``
or ``--bandwidth-mb 0``) is not compared.

:data:`MEASURES` are the figures compared; :func:`regressions` names each that is worse than its baseline by
more than the allowed percentage (the release gate, :mod:`rollcall.gate`, applies it).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollcall.evidence.perf import PerfFigures
    from rollcall.jobspec import JobSpec

BASELINE_VERSION = 1
UNKNOWN = "?"
NO_INSTANCE_TYPE = "-"


@dataclass(frozen=True)
class Figures:
    """The figures a baseline holds and the regression gate compares."""

    throughput_total: float | None = None
    throughput_median: float | None = None
    epoch_time_mean: float | None = None
    #: The median rank's compute time per step without communication, in ms (:mod:`rollcall.evidence.perf`).
    compute_ms_median: float | None = None
    #: The all-reduce bus bandwidth of the whole world, in GB/s (the slowest rank's view of it).
    busbw_world: float | None = None

    @classmethod
    def of(
        cls,
        throughput_total: float | None,
        throughput_median: float | None,
        epoch_time_mean: float | None,
        perf: PerfFigures,
    ) -> Figures:
        """The figures of a judged run."""
        world = perf.scope("world")
        return cls(
            throughput_total=throughput_total,
            throughput_median=throughput_median,
            epoch_time_mean=epoch_time_mean,
            compute_ms_median=perf.compute_median,
            busbw_world=world[0].busbw_gbps if world else None,
        )

    def as_dict(self) -> dict[str, float | None]:
        """The figures, JSON-ready."""
        return asdict(self)


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
    Measure("median compute time per step", "compute_ms_median", "ms", ".2f", False),
    Measure("world all-reduce bus bandwidth", "busbw_world", "GB/s", ".2f", True),
)


#: A spread is the median absolute deviation times this: for normal noise, its standard deviation.
MAD_SCALE = 1.4826
#: A reference from fewer sound runs than this has no spread: the percentage alone judges against its median.
MIN_SPREAD_RUNS = 3


@dataclass(frozen=True)
class Reference:
    """How a configuration's reference figures came from its history (``--baseline-history``).

    Attributes:
        runs: for each measure (its :attr:`Measure.attr`), how many sound runs had it.
        spread: for each measure, :data:`MAD_SCALE` times the median absolute deviation over those runs
            (None where fewer than :data:`MIN_SPREAD_RUNS` had it).
        mads: how many spreads worse than the median a figure must also be to regress (``--baseline-mads``).
    """

    runs: Mapping[str, int]
    spread: Figures
    mads: float

    def spread_of(self, measure: Measure) -> float | None:
        """The measure's spread, when enough runs had it."""
        if self.runs.get(measure.attr, 0) < MIN_SPREAD_RUNS:
            return None
        value: float | None = getattr(self.spread, measure.attr)
        return value

    @classmethod
    def of(cls, history: Iterable[Figures], mads: float) -> tuple[Figures, Reference]:
        """The median of each measure over ``history`` and the reference it came from."""
        medians: dict[str, float | None] = {}
        spreads: dict[str, float | None] = {}
        runs: dict[str, int] = {}
        figures = list(history)
        for m in MEASURES:
            values = [v for v in (m.of(f) for f in figures) if v is not None]
            runs[m.attr] = len(values)
            mid = _median(values)
            medians[m.attr] = mid
            spreads[m.attr] = (
                MAD_SCALE * _median([abs(v - mid) for v in values])  # type: ignore[operator]
                if mid is not None and len(values) >= MIN_SPREAD_RUNS
                else None
            )
        return Figures(**medians), cls(runs, Figures(**spreads), mads)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class Regression:
    """One measure worse than its baseline by more than the allowed percentage (and spreads, with history)."""

    measure: Measure
    baseline: float
    value: float
    max_regression_pct: float
    #: The reference's history, when the baseline is the median of past runs (``--baseline-history``).
    reference: Reference | None = None

    @property
    def ratio(self) -> float:
        """Value over baseline."""
        return self.value / self.baseline

    def __str__(self) -> str:
        m = self.measure
        change = abs(1 - self.ratio) * 100
        worse = "below" if m.higher_is_better else "above"
        if self.reference is None:
            return (
                f"{m.name} regressed: {m.show(self.value)} against a baseline of {m.show(self.baseline)} "
                f"(ratio {self.ratio:.3f}, {change:.1f}% {worse} it; "
                f"--max-regression {self.max_regression_pct:g}%)"
            )
        ref = self.reference
        runs, spread = ref.runs.get(m.attr, 0), ref.spread_of(m)
        if spread is None:
            how = (
                f"too few runs for a spread (fewer than {MIN_SPREAD_RUNS}): judged by "
                f"--max-regression {self.max_regression_pct:g}% alone"
            )
        else:
            away = abs(self.value - self.baseline) / spread if spread > 0 else math.inf
            how = (
                f"spread {m.show(spread)} (1.4826 x MAD), {away:.1f} spreads {worse} it; "
                f"--max-regression {self.max_regression_pct:g}% and --baseline-mads {ref.mads:g}"
            )
        return (
            f"{m.name} regressed: {m.show(self.value)} against a reference of {m.show(self.baseline)}, "
            f"the median of the last {runs} sound run(s) (ratio {self.ratio:.3f}, {change:.1f}% {worse} it; "
            f"{how})"
        )

    def as_dict(self) -> dict[str, Any]:
        """The regression, JSON-ready."""
        return {
            "measure": self.measure.name,
            "baseline": self.baseline,
            "value": self.value,
            "ratio": self.ratio,
            "message": str(self),
            **(
                {
                    "runs": self.reference.runs.get(self.measure.attr, 0),
                    "spread": self.reference.spread_of(self.measure),
                    "baseline_mads": self.reference.mads,
                }
                if self.reference is not None
                else {}
            ),
        }


def regressions(
    current: Figures, baseline: Figures, max_regression_pct: float, reference: Reference | None = None
) -> list[Regression]:
    """Each measure of ``current`` worse than ``baseline`` by more than ``max_regression_pct`` percent.

    With a ``reference`` (the baseline is the median of past runs), a measure that had a spread must also be
    worse than the median by more than ``reference.mads`` spreads: run-to-run noise alone does not fail a run.
    A measure missing on either side is not compared (a run without throughput already fails its roll call).
    """
    allowed = max_regression_pct / 100
    found = []
    for m in MEASURES:
        base, value = m.of(baseline), m.of(current)
        if base is None or value is None:
            continue
        worse = value < base * (1 - allowed) if m.higher_is_better else value > base * (1 + allowed)
        spread = reference.spread_of(m) if reference is not None else None
        if worse and spread is not None and reference is not None:
            worse = abs(value - base) > reference.mads * spread
        if worse:
            found.append(Regression(m, base, value, max_regression_pct, reference))
    return found


@dataclass(frozen=True)
class Entry:
    """One configuration's accepted figures, and where they came from."""

    key: ConfigKey
    figures: Figures
    info: Mapping[str, Any] = field(default_factory=dict)
    #: Set when ``figures`` are the medians of past runs (``--baseline-history``): their spreads and count.
    reference: Reference | None = None

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
