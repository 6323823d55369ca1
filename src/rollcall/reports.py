"""Reports of a session: ``results.json``, a per-rank junit file and the terminal summary table.

pytest's own ``--junitxml`` gets each test's figures as properties (see :func:`junit_properties`); the
per-rank junit file has one test case per rank, failed with the events it missed, so a CI dashboard shows
which rank failed.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from rollcall.collect import RANKS_JUNIT_FILE, REPORT_FILE, RESULTS_FILE, printable, write_whole
from rollcall.evidence.perf import shallow
from rollcall.runner import RunOutcome, RunResult
from rollcall.secrets import redact_argv

if TYPE_CHECKING:
    from rollcall.evidence.gpu_events import GpuEventSeen
    from rollcall.gate import GateReport
    from rollcall.verdict import RankResult, Verdict

#: The version of ``results.json``'s layout: fields are only ever added (a rename would be version 2).
SCHEMA_VERSION = 2


@dataclass
class TestRecord:
    """One test's run, as the reports show it."""

    test_id: str
    result: RunResult
    accelerator: str
    extra: dict[str, Any] = field(default_factory=dict)
    gate: GateReport | None = None

    def cleanup_errors(self) -> list[str]:
        """What each attempt's clean-up left behind or could not do, one line each (empty: nothing)."""
        return [
            f"{self.test_id}: {a.cleanup_error}" for a in self.result.attempts if a.cleanup_error is not None
        ]

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` entry of this test."""
        last = self.result.last
        verdict, spec = last.verdict, last.spec
        mfu = verdict.mfu
        return {
            "test_id": self.test_id,
            "backend": self.result.backend,
            "accelerator": self.accelerator,
            "nodes": spec.nodes,
            "procs_per_node": spec.procs_per_node,
            "world_size": spec.world_size,
            "instance_type": spec.instance_type,
            "workload": verdict.workload,
            "missing": verdict.missing,
            "unexpected_ranks": verdict.unexpected_ranks,
            "failed_ranks": {str(r): why for r, why in sorted(verdict.failed_ranks.items())},
            "throughput": verdict.throughput.as_dict(),
            "epoch_time_mean": verdict.epoch_time_mean,
            # The MFU where it can be (0 to 100%), else null; the peak it was held to and, past its bound, the
            # figure as untrusted_mean beside its flag (rollcall.evidence.perf.Mfu).
            "mfu_mean": mfu.value if mfu is not None and mfu.trusted else None,
            "mfu": mfu.as_dict() if mfu is not None else None,
            "job": {
                "name": spec.name,
                "state": last.status.state.value,
                "reason": last.status.reason,
                # What the job waited for before training: quota, nodes, image pulls (kubernetes).
                "waits": last.status.waits.as_dict() if last.status.waits else None,
            },
            # The deciding attempt's verdict (passed or failed) and its roll call: ranks that said every event
            # (stragglers included), and those of them too slow.
            "verdict": verdict.outcome.value,
            "ranks_answered": verdict.answered,
            "ranks_too_slow": verdict.too_slow,
            # Each rank's state (its tile on the page) where not ok; how many are hung, waiting or silent.
            "rank_states": {
                str(r): res.state.value for r, res in sorted(verdict.ranks.items()) if res.problems
            },
            # Each such rank's cause: the kind of the problem that puts it there and whose it is.
            "rank_causes": {
                str(r): dict(zip(("kind", "owner"), rank_cause(res), strict=True))
                for r, res in sorted(verdict.ranks.items())
                if res.problems
            },
            "ranks_stalled": verdict.stalled,
            "problems": verdict.problems,
            "findings": [p.as_dict() for p in verdict.findings],
            "passed": self.result.passed,
            "flaky": self.result.flaky,
            # passed, passed_after_disruption, flaky, failed, disrupted or interrupted (the session was,
            # before the job ended); each disrupted attempt's disruption
            "outcome": self.result.outcome,
            # Why the session was interrupted while this test ran (a signal), or None.
            "interrupted": self.extra.get("interrupted"),
            "disruptions": [{"attempt": n, **d.as_dict()} for n, d in self.result.disruptions],
            "attempts": len(self.result.attempts),
            "duration_s": round(sum(a.duration_s for a in self.result.attempts), 3),
            "artifacts": str(last.artifacts),
            "release_gate": self.gate.as_dict() if self.gate else None,
            # What clean-up left behind (the session fails for it, not the test's verdict).
            "cleanup_errors": self.cleanup_errors(),
            "root_cause": verdict.first_failure.as_dict() if verdict.first_failure else None,
            "errors": [g.as_dict() for g in verdict.root_cause.groups] if verdict.root_cause else [],
            # Per-rank compute times, per-group and per-node bus bandwidth, and what the checks found.
            "perf": verdict.perf_report.as_dict(),
            # The distinct parameter digests after each epoch and at completion: one each when replicas agree.
            "replicas": {stage: list(digests) for stage, digests in verdict.replicas.items()},
            # By rank: whether the first step compiled from the compiler's cache, and its seconds.
            "compile_cache": {
                str(r): shallow(result.compile_cache)
                for r, result in sorted(verdict.ranks.items())
                if result.compile_cache is not None
            },
            # Each node's facts (devices, versions, what could not be read and why), verdict and reasons.
            "nodes_detail": verdict.node_verdicts(),
            "unfit_nodes": verdict.unfit_nodes,
            "warnings": [p.as_dict() for p in verdict.warnings],
            # Each of the workload's own kernels: whether the run trained with it, and why.
            "kernels": dict(verdict.kernels),
            # What the nodes' GPUs said during the run (NVML's events): class, node, GPU, rank, phase, time.
            "gpu_events": [s.as_dict() for s in verdict.gpu_events],
            **self.extra,
        }


def junit_properties(record: TestRecord) -> list[tuple[str, str]]:
    """Properties for pytest's own junit report, each value a string (:func:`property_value`).

    Read from the record, not :meth:`TestRecord.as_dict`: that waits for the clean-up's confirmation, which
    the session's end reads instead. An unknown (a figure never measured) is left out, not written ``None``.
    """
    said = ((name, property_value(value)) for name, value in _properties(record))
    return [(name, text) for name, text in said if text is not None]


def property_value(value: object) -> str | None:
    """A report's text of a value: ``true``/``false`` for a boolean, None (leave it out) for an unknown."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _properties(record: TestRecord) -> list[tuple[str, object]]:
    last = record.result.last
    tp = last.verdict.throughput.as_dict()
    props: list[tuple[str, object]] = [
        ("backend", record.result.backend),
        ("accelerator", record.accelerator),
        ("world_size", last.spec.world_size),
        ("ranks_answered", last.verdict.answered),
        ("throughput_total", tp["total"]),
        ("throughput_mean", tp["mean"]),
        ("throughput_min", tp["min"]),
        ("throughput_max", tp["max"]),
        ("epoch_time_mean", last.verdict.epoch_time_mean),
        ("flaky", record.result.flaky),
        ("outcome", record.result.outcome),
    ]
    mfu = last.verdict.mfu
    if mfu is not None:
        props.append(("mfu_mean", mfu.value) if mfu.flag is None else ("mfu_flag", mfu.flag))
    if record.gate is not None:
        props.append(("config", str(record.gate.key)))
        props.append(("stragglers", len(record.gate.stragglers)))
        props.append(("regression_gate", record.gate.gate))
    verdict = record.result.last.verdict
    props.append(("warnings", len(verdict.warnings)))
    props.append(("unfit_devices", len(verdict.unfit)))
    if verdict.unfit_nodes:
        props.append(("unfit_nodes", ",".join(verdict.unfit_nodes)))
    for n, seen in enumerate(verdict.gpu_events):  # what the GPUs said during the run
        props.append((f"gpu_event_{n}", f"{seen} [{seen.klass}]"))
    for node in verdict.nodes_detail:
        for key, value in node.facts.items():
            props.append((f"node_{node.node}_{key}", value))
        props.append((f"node_{node.node}_devices", len(node.devices)))
    if record.gate is not None and record.gate.perf is not None:
        props.append(("compute_stragglers", len(record.gate.perf.stragglers)))
        props.append(("slow_links", len(record.gate.perf.slow)))
    return props


def write_results(path: Path, records: Sequence[TestRecord], meta: dict[str, Any]) -> None:
    """Write ``results.json``: ``{"tests": [...], **meta}``; a secret in the command line ``<redacted>``."""
    if "argv" in meta:  # --workload-env HF_TOKEN=...: no value of a secret in any artifact (rollcall.secrets)
        meta = {**meta, "argv": redact_argv(meta["argv"])}
    doc = {"schema_version": SCHEMA_VERSION, "tests": [r.as_dict() for r in records], **meta}
    write_whole(path, json.dumps(_finite(doc), indent=2, allow_nan=False, default=str) + "\n")


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such a float becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


XML_DECLARATION = '<?xml version="1.0" encoding="utf-8"?>\n'


def write_rank_junit(path: Path, records: Sequence[TestRecord]) -> None:
    """Write the per-rank junit file: a suite per test, a case per rank.

    A rank at fault (a problem of it follows from no other: :attr:`RankResult.at_fault`) is a failure, its
    notes the message and the body; a rank that only waited for another or echoed its error is *skipped*,
    its notes the reason: Jenkins' and GitLab's JUnit views count and list skipped cases apart from failed
    ones, so one crash among 2,048 ranks is one failed case, the 2,047 that waited for it skipped beside it.
    Where no rank is at fault, the ranks the first failure names fail; where it names none (a job-level
    fault), a ``run`` case fails with it. A case's class is ``rollcall.<test>.<node>`` (the node's name
    where the nodes' names tell them apart), its time the rank's own wall time.
    """
    suites = []
    for record in records:
        last = record.result.last
        verdict = last.verdict
        first = verdict.first_failure
        cases = []
        width = len(str(verdict.layout.world_size - 1))
        on_gpu: dict[int | None, list[GpuEventSeen]] = defaultdict(list)  # by rank; None: no rank's GPU
        for seen in verdict.gpu_events:
            on_gpu[seen.rank].append(seen)
        test = _dotted(record.test_id)
        nodes = _node_names(verdict)
        faulty = {r for r, result in verdict.ranks.items() if result.at_fault}
        if not faulty and first is not None:
            faulty = set(first.ranks)
        for rank, result in sorted(verdict.ranks.items()):
            case = TestCase(
                name=f"rank {rank:0{width}d} (node {result.node})",
                classname=f"rollcall.{test}.{nodes.get(result.node, f'node-{result.node}')}",
                elapsed_sec=result.wall_s or 0.0,
                stdout=_rank_stdout(result, on_gpu.get(rank, ())),
                status=result.state.value,
            )
            if result.problems:
                notes = printable(
                    "; ".join(
                        n + (f" [{p.blame.line}]" if p.blame else "")
                        for p, n in zip(result.problems, result.notes, strict=True)
                    )
                )
                if rank in faulty:
                    case.add_failure_info(message=notes, output=notes)
                else:
                    case.add_skipped_info(message=f"not at fault: {notes}")
            cases.append(case)
        if first is not None and not faulty:  # a job-level fault: no rank's
            case = TestCase(name="run", classname=f"rollcall.{test}.run")
            case.add_failure_info(message=printable(first.summary), output=printable(first.summary))
            cases.append(case)
        for seen in on_gpu.get(None, ()):
            case = TestCase(
                name=f"{seen.gpu_label} (no rank)", classname=f"rollcall.{test}.gpus", stdout=str(seen)
            )
            if seen.rule is not None:
                case.add_failure_info(message=printable(f"unfit device: {seen} (rule {seen.rule})"))
            cases.append(case)
        for rank in verdict.unexpected_ranks:
            case = TestCase(name=f"rank {rank} (unexpected)", classname=f"rollcall.{test}.unexpected")
            case.add_failure_info(message=f"rank {rank} is outside 0..{verdict.layout.world_size - 1}")
            cases.append(case)
        properties = {"backend": record.result.backend}
        if first is not None:
            properties["first_failure"] = printable(first.summary)
        suites.append(TestSuite(record.test_id, cases, properties=properties))
    # Not pretty-printed: junit_xml's pretty printer parses the whole document again through minidom, the
    # larger part of this file's cost at thousands of ranks; the content is the same.
    write_whole(path, XML_DECLARATION + to_xml_report_string(suites, prettyprint=False) + "\n")


def _dotted(name: str) -> str:
    """A pytest node id or a node's name as one dotted name's part: ``tests.e2e.test_roll.test_roll_2``."""
    name = name.replace(".py::", ".").replace("::", ".").replace("/", ".")
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name).strip("._") or "unnamed"


def _node_names(verdict: Verdict) -> dict[int, str]:
    """Each node's name as a class name's part, where the nodes' names tell them apart (else none)."""
    names = {n.node: _dotted(n.name).replace(".", "_") for n in verdict.nodes_detail if n.name}
    return names if len(set(names.values())) == len(names) == verdict.layout.nodes else {}


def rank_cause(result: RankResult) -> tuple[str, str]:
    """The kind of the problem that puts a rank in its state, and whose it is (``""`` each without one).

    Its first problem that follows from no other (a cause, before its waiting or its missing events), else its
    first; the owner is the problem's :class:`~rollcall.verdict.Owner` value (``""`` where it has no blame).
    """
    problems = result.problems
    cause = next((p for p in problems if not p.follows), problems[0] if problems else None)
    if cause is None:
        return "", ""
    return cause.kind.value, cause.blame.owner.value if cause.blame is not None else ""


def _rank_stdout(result: RankResult, gpu_events: Iterable[GpuEventSeen] = ()) -> str | None:
    """Its state and cause (where it has one), its figures (where it was heard), then its GPU's events."""
    kind, owner = rank_cause(result)
    figures = [f"throughput={result.throughput} samples/s"] if result.throughput is not None else []
    figures += [f"epoch_time={result.epoch_time} s"] if result.epoch_time is not None else []
    said = [f"state={result.state.value} cause={kind} owner={owner}"] if kind else []
    said += [" ".join(figures)] if figures and result.pods else []
    said += [f"gpu event: {s}" for s in gpu_events]
    return "\n".join(said) or None


#: The summary table's verdict of each outcome.
VERDICT_LABELS: dict[RunOutcome, str] = {
    "passed": "PASS",
    "passed_after_disruption": "PASS (after disruption)",
    "flaky": "PASS (flaky)",
    "failed": "FAIL",
    "disrupted": "FAIL (disrupted)",
    "interrupted": "FAIL (interrupted)",
}


def number(value: float | None, spec: str = ".1f") -> str:
    """``value`` formatted by ``spec``, or ``-`` when there is none (or it is not finite)."""
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def summary_table(records: Iterable[TestRecord]) -> list[str]:
    """The terminal summary: one row per test."""
    header = (
        "test",
        "backend",
        "ranks",
        "samples/s total",
        "per rank (min/mean/max)",
        "epoch s",
        "MFU",
        "verdict",
    )
    rows = [header]
    for record in records:
        d = record.as_dict()
        tp = d["throughput"]
        verdict = VERDICT_LABELS[d["outcome"]]
        rows.append(
            (
                d["test_id"].rsplit("::", 1)[-1],
                d["backend"],
                f"{d['ranks_answered']}/{d['world_size']}"
                + (f" ({d['ranks_too_slow']} too slow)" if d["ranks_too_slow"] else "")
                + "".join(f" ({n} {state})" for state, n in d["ranks_stalled"].items()),
                number(tp["total"]),
                f"{number(tp['min'])}/{number(tp['mean'])}/{number(tp['max'])}",
                number(d["epoch_time_mean"], ".3f"),
                mfu.text if (mfu := record.result.last.verdict.mfu) is not None else "-",
                verdict,
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def perf_summary(records: Iterable[TestRecord]) -> list[str]:
    """For each test, its slowest rank and its node of lowest bus bandwidth, whether it passed or not."""
    lines = []
    for record in records:
        if record.gate is None or record.gate.perf is None:
            continue
        name = record.test_id.rsplit("::", 1)[-1]
        lines += [f"{name}: {line}" for line in record.gate.perf.summary()]
    return lines


def interrupted_line(test_id: str, why: str, out: Path) -> str:
    """What the terminal says of a run the session was interrupted in, and where its reports are."""
    where = ", ".join(str(out / name) for name in (RESULTS_FILE, RANKS_JUNIT_FILE, REPORT_FILE))
    return f"rollcall: interrupted by {why} during {test_id}; the verdict so far is in {where}"


def left_behind(results: Path) -> list[str]:
    """The clean-up errors a results.json records, one line each."""
    doc = json.loads(results.read_text())
    return [line for t in doc.get("tests", []) for line in t.get("cleanup_errors", [])]


def merge_worker_results(directory: Path, since: float) -> Path | None:
    """Merge the ``results.<worker>.json`` files xdist workers wrote since ``since`` into results.json."""
    parts = sorted(p for p in directory.glob("results.gw*.json") if p.stat().st_mtime >= since)
    if not parts:
        return None
    docs = [json.loads(p.read_text()) for p in parts]
    merged = {**docs[0], "tests": [t for d in docs for t in d.get("tests", [])], "workers": len(docs)}
    target = directory / RESULTS_FILE
    write_whole(target, json.dumps(merged, indent=2) + "\n")
    return target
