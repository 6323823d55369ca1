"""Baselines that know the noise: each configuration's reference from its last sound runs.

``--baseline-history SOURCE`` names past runs: a directory (every ``results.json`` under it) or a glob of
``results.json`` files. For each configuration (:class:`~rollcall.evidence.baseline.ConfigKey`, from each
test's ``release_gate``) the last ``--baseline-runs`` sound runs, by start time, give each measure's
reference: the median, and a spread (1.4826 x the median absolute deviation). A run regresses only when it is
worse than the median by more than ``--max-regression`` percent *and* more than ``--baseline-mads`` spreads
(:func:`rollcall.evidence.baseline.regressions`); with fewer than three runs there is no spread, the message
says so, and the percentage alone judges against the median. Runs of another configuration never mix in; a run
that was not sound (the job failed, a rank missed the roll call, a straggler) is left out.
"""

from __future__ import annotations

import glob
import math
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollcall.collect import RESULTS_FILE, read_results
from rollcall.evidence.baseline import (
    MEASURES,
    BaselineError,
    Baselines,
    ConfigKey,
    Entry,
    Figures,
    Reference,
)


def history_files(source: str) -> list[Path]:
    """The ``results.json`` files ``source`` names; BaselineError when a glob matches none."""
    root = Path(source)
    if root.is_dir():
        return sorted(root.rglob(RESULTS_FILE))
    if root.is_file():
        return [root]
    found = sorted(Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file())
    if not found:
        raise BaselineError(
            f"{source} is no directory and matches no file: name a directory of past runs' artifacts "
            f"or a glob of their {RESULTS_FILE} files (e.g. 'nightly/*/{RESULTS_FILE}')"
        )
    return found


def _sound(test: Mapping[str, Any]) -> bool:
    """The run's roll call was sound: the job succeeded, and nothing but regressions was found."""
    gate = test.get("release_gate")
    if isinstance(gate, dict) and isinstance(gate.get("sound"), bool):
        return bool(gate["sound"])
    job = test.get("job")
    findings = test.get("findings")
    return (
        isinstance(job, dict)
        and job.get("state") == "succeeded"
        and isinstance(findings, list)
        and all(isinstance(f, dict) and f.get("kind") == "regression" for f in findings)
    )


def _figures(doc: Any) -> Figures:
    values: dict[str, float | None] = {}
    for m in MEASURES:
        v = doc.get(m.attr) if isinstance(doc, dict) else None
        values[m.attr] = (
            float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None
        )
    return Figures(**values)


def sound_runs(files: list[Path]) -> dict[ConfigKey, list[tuple[float, Figures]]]:
    """Each configuration's sound runs: (start time, figures), oldest first; BaselineError on a bad file."""
    runs: dict[ConfigKey, list[tuple[float, Figures]]] = defaultdict(list)
    for file in files:
        doc = read_results(file, BaselineError)
        started = doc.get("started")
        when = float(started) if isinstance(started, int | float) else 0.0
        for test in doc["tests"]:
            gate = test.get("release_gate") if isinstance(test, dict) else None
            if not isinstance(gate, dict) or not _sound(test):
                continue
            try:
                key = ConfigKey.from_fields(gate.get("config") or {})
            except ValueError:
                continue  # a configuration the ranks did not say cannot be compared with anything
            runs[key].append((when, _figures(gate.get("figures"))))
    for found in runs.values():
        found.sort(key=lambda r: r[0])
    return dict(runs)


def history_baselines(source: str, runs: int, mads: float) -> Baselines:
    """Each configuration's reference from the last ``runs`` sound runs ``source`` names."""
    entries = {}
    for key, found in sound_runs(history_files(source)).items():
        last = [figures for _, figures in found[-runs:]]
        medians, reference = Reference.of(last, mads)
        entries[key] = Entry(key, medians, {"history": source, "runs": len(last)}, reference)
    return Baselines(entries)
