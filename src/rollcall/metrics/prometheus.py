"""A session's runs as Prometheus metrics: a textfile for node_exporter, and a push to a Pushgateway.

Everything is read from the records the reports read (:class:`~rollcall.reports.TestRecord`: each test's
attempts and the deciding :class:`~rollcall.verdict.Verdict`); nothing parses a sentence. Names follow
Prometheus' conventions: base units (seconds, bytes per second), ``_seconds`` and ``_total`` suffixes, one
metric per measure and labels for what tells samples apart.

Per rank (labels ``test``, ``rank``, ``node``, and ``Hostname``: the node's name, the Kubernetes node or
the Slurm host, as dcgm-exporter names it, so that its series join; the node index stays, since the local
backend's nodes share one host and tonight's node 1 is not tomorrow's):
    ``rollcall_rank_throughput_samples_per_second``, ``rollcall_rank_step_compute_seconds`` (``quantile``
    0.5 and 0.9, compute per step without communication), ``rollcall_rank_epoch_seconds``,
    ``rollcall_rank_event_reported`` (``event``: 1 when the rank said it), ``rollcall_rank_answered``, and
    ``rollcall_rank_state`` (1, with ``state``: ok, hung, waiting, silent, raised, missing, failed, ...;
    ``kind``: the kind of the problem that puts it there, a cause before one that follows from another, empty
    when ok; ``owner``: cluster, platform, workload or undetermined).
Per node (labels ``test``, ``node``, ``Hostname``):
    ``rollcall_node_state`` (1, with ``state``: the worst of its ranks'),
    ``rollcall_node_allreduce_busbw_bytes_per_second``, and ``rollcall_gpu_events_total`` (also ``gpu``, its
    NVML index, ``UUID`` and ``modelName`` as dcgm-exporter names them; ``kind``: xid, single_bit_ecc,
    double_bit_ecc, clock or lost; ``xid``, empty for another kind; ``class``: hardware, program, system,
    unknown or info): the events the node's GPUs said during the run (``node`` ``?`` where no rank's log
    tied the event to a node).
Per run (label ``test``; ``rollcall_run_config_info`` also one label per configuration dimension:
``accelerator``, ``instance_type``, ``nodes``, ``procs_per_node``, ``model``, ``seq_len``):
    ``rollcall_run_outcome`` (``outcome``: 1 for the run's, 0 for each other),
    ``rollcall_run_ranks_expected``, ``rollcall_run_ranks_answered``, ``rollcall_run_duration_seconds``,
    ``rollcall_run_time_to_first_rank_seconds`` (launch until the first rank's ``start`` event was read),
    ``rollcall_run_allreduce_busbw_bytes_per_second`` (the world), ``rollcall_run_disruptions_total``,
    ``rollcall_run_retries_total``, ``rollcall_run_regressions_total`` (release-gate regressions) and
    ``rollcall_run_finished_timestamp_seconds``.

The textfile also labels every sample with ``config`` (the configuration key); a push groups by ``job``,
``cluster`` and ``config`` instead (the Pushgateway adds the grouping labels to each sample), one push per
configuration, each a PUT that replaces its group's metrics whole: a label added or dropped inside a group
leaves no stale series behind. A group of a configuration no longer run stays on the Pushgateway until it
is deleted (``curl -X DELETE <url>/metrics/job/<job>/cluster/<cluster>/config/<config>``). A push that
fails is returned as a warning, never raised: the verdict stands without it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import get_args

from prometheus_client import CollectorRegistry, push_to_gateway, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rollcall.evidence.baseline import ConfigKey
from rollcall.reports import TestRecord, rank_cause
from rollcall.runner import RunOutcome
from rollcall.verdict import RankState
from rollcall_workload.contract import REQUIRED_EVENTS

#: Every metric's name starts with this.
PREFIX = "rollcall"
#: The configuration's dimensions, each a label of ``rollcall_run_config_info``.
CONFIG: tuple[str, ...] = tuple(f.name for f in fields(ConfigKey))
#: Seconds a push may take before it counts as failed.
PUSH_TIMEOUT_S = 10.0
_GB = 1e9
_MS = 1e-3


def config_of(record: TestRecord) -> str:
    """The configuration key of a record (``?`` fields where the ranks did not say)."""
    return str(record.gate.key) if record.gate is not None else "?"


@dataclass(frozen=True, eq=False)
class RunMetrics(Collector):
    """A prometheus_client collector of the records' metrics.

    Attributes:
        records: the tests' runs.
        finished: when the session ended (seconds since the epoch).
        config_label: whether each sample carries the ``config`` label (the textfile; a push groups by it).
    """

    records: Sequence[TestRecord]
    finished: float
    config_label: bool = True

    def collect(self) -> Iterator[Metric]:
        """Every metric family, each with one sample per test (and rank, node, outcome where it applies)."""
        extra = ["config"] if self.config_label else []
        fams = _Families(extra)
        for record in self.records:
            fams.add(record, [config_of(record)] if self.config_label else [], self.finished)
        yield from fams.all()


class _Families:
    """The metric families, filled test by test."""

    def __init__(self, extra: list[str]) -> None:
        run = ["test", *extra]
        rank, node = [*run, "rank", "node", "Hostname"], [*run, "node", "Hostname"]

        def gauge(name: str, doc: str, labels: list[str], unit: str = "") -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=labels, unit=unit)

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=run)

        self.throughput = gauge(
            "rank_throughput_samples_per_second", "Training samples per second of one rank.", rank
        )
        self.compute = gauge(
            "rank_step_compute_seconds",
            "A rank's compute time per training step without communication, median and 90th percentile.",
            [*rank, "quantile"],
        )
        self.epoch = gauge("rank_epoch_seconds", "A rank's mean time per timed epoch.", rank)
        self.event = gauge(
            "rank_event_reported", "1 when the rank reported the roll-call event.", [*rank, "event"]
        )
        self.answered = gauge(
            "rank_answered", "1 when the rank answered the roll call with no problem.", rank
        )
        self.rank_state = gauge(
            "rank_state",
            "1 for the rank's state, with the kind and owner of the problem that puts it there.",
            [*rank, "state", "kind", "owner"],
        )
        self.node_state = gauge(
            "node_state", "1 for the node's state: the worst of its ranks'.", [*node, "state"]
        )
        self.config = gauge(
            "run_config_info", "1, with one label per dimension of the run's configuration.", [*run, *CONFIG]
        )
        self.node_busbw = gauge(
            "node_allreduce_busbw_bytes_per_second", "All-reduce bus bandwidth within one node.", node
        )
        self.outcome = gauge(
            "run_outcome", "1 for the run's outcome, 0 for each other outcome.", [*run, "outcome"]
        )
        self.expected = gauge("run_ranks_expected", "Ranks in the world.", run)
        self.ranks_answered = gauge("run_ranks_answered", "Ranks that answered the roll call.", run)
        self.duration = gauge("run_duration_seconds", "Wall time of every attempt of the run.", run)
        self.first = gauge(
            "run_time_to_first_rank_seconds",
            "From the deciding attempt's launch until its first rank's start event was read.",
            run,
        )
        self.world_busbw = gauge(
            "run_allreduce_busbw_bytes_per_second", "All-reduce bus bandwidth of the whole world.", run
        )
        self.mfu = gauge("run_mfu_ratio", "Model FLOPs utilisation, the ranks' mean, where 0 to 1.", run)
        self.untrusted = gauge(
            "run_figure_untrusted",
            "1 for a figure past its physical bound, not exported as a value; the peak it was held to, and "
            "where that came from.",
            [*run, "figure", "peak", "peak_from"],
        )
        self.gpu_events = CounterMetricFamily(
            f"{PREFIX}_gpu_events",
            "Events a GPU said during the run (NVML: Xid, ECC, clock changes, lost), by class.",
            labels=[*node, "gpu", "UUID", "modelName", "kind", "xid", "class"],
        )
        self.disruptions = counter("run_disruptions", "Attempts the infrastructure disrupted.")
        self.retries = counter("run_retries", "Attempts after the first.")
        self.regressions = counter("run_regressions", "Measures the release gate found regressed.")
        self.finished = gauge("run_finished_timestamp_seconds", "When the session ended.", run)

    def add(self, record: TestRecord, extra: list[str], finished: float) -> None:
        """The samples of one test."""
        result = record.result
        last = result.last
        verdict = last.verdict
        run = [record.test_id, *extra]
        names = {n.node: n.name for n in verdict.nodes_detail}
        models = {
            (d.node, str(d.facts.get("gpu_uuid", ""))): d.name
            for n in verdict.nodes_detail
            for d in n.devices
        }
        worst: dict[int, RankState] = {}
        for rank, r in sorted(verdict.ranks.items()):
            labels = [*run, str(rank), str(r.node), names.get(r.node, "")]
            if r.throughput is not None:
                self.throughput.add_metric(labels, r.throughput)
            if r.epoch_time is not None:
                self.epoch.add_metric(labels, r.epoch_time)
            for event in REQUIRED_EVENTS:
                self.event.add_metric([*labels, event], float(event in r.reported))
            self.answered.add_metric(labels, float(r.answered))
            self.rank_state.add_metric([*labels, r.state.value, *rank_cause(r)], 1.0)
            if r.node not in worst or r.state.severity > worst[r.node].severity:
                worst[r.node] = r.state
        for n, state in sorted(worst.items()):
            self.node_state.add_metric([*run, str(n), names.get(n, ""), state.value], 1.0)
        key = record.gate.key if record.gate is not None else None
        dims = [
            str(getattr(key, f)) if key is not None and getattr(key, f) is not None else "?" for f in CONFIG
        ]
        self.config.add_metric([*run, *dims], 1.0)
        for c in verdict.perf.compute:
            labels = [*run, str(c.rank), str(c.node), names.get(c.node, "")]
            self.compute.add_metric([*labels, "0.5"], c.compute_ms * _MS)
            if c.compute_ms_p90 is not None:
                self.compute.add_metric([*labels, "0.9"], c.compute_ms_p90 * _MS)
        for g in verdict.perf.scope("node"):
            self.node_busbw.add_metric([*run, str(g.nodes[0]), names.get(g.nodes[0], "")], g.busbw_gbps * _GB)
        counts: Counter[tuple[str, ...]] = Counter(
            (
                "?" if s.node is None else str(s.node),
                s.node_name or ("" if s.node is None else names.get(s.node, "")),
                str(s.heard.gpu),
                s.heard.uuid or "",
                models.get((s.node if s.node is not None else -1, s.heard.uuid or ""), ""),
                s.heard.kind,
                "" if s.heard.xid is None else str(s.heard.xid),
                s.klass,
            )
            for s in verdict.gpu_events
        )
        for key_, count in sorted(counts.items()):
            self.gpu_events.add_metric([*run, *key_], count)
        for g in verdict.perf.scope("world"):
            self.world_busbw.add_metric(run, g.busbw_gbps * _GB)
        mfu = verdict.mfu
        if mfu is not None and mfu.trusted:
            self.mfu.add_metric(run, mfu.value)
        elif mfu is not None:
            peak = f"{mfu.peak_tflops:.4g} TFLOPS" if mfu.peak_tflops is not None else ""
            self.untrusted.add_metric([*run, "mfu", peak, mfu.peak_from], 1.0)
        outcome: RunOutcome = result.outcome
        for name in get_args(RunOutcome):
            self.outcome.add_metric([*run, name], float(name == outcome))
        self.expected.add_metric(run, verdict.layout.world_size)
        self.ranks_answered.add_metric(run, verdict.answered)
        self.duration.add_metric(run, sum(a.duration_s for a in result.attempts))
        if last.first_rank_s is not None:
            self.first.add_metric(run, last.first_rank_s)
        self.disruptions.add_metric(run, len(result.disruptions))
        self.retries.add_metric(run, len(result.attempts) - 1)
        self.regressions.add_metric(run, len(record.gate.regressions) if record.gate else 0)
        self.finished.add_metric(run, finished)

    def all(self) -> Iterator[Metric]:
        return (m for m in vars(self).values() if isinstance(m, Metric) and m.samples)


def registry_of(
    records: Sequence[TestRecord], finished: float, *, config_label: bool = True
) -> CollectorRegistry:
    """A registry holding only the records' metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunMetrics(records, finished, config_label))
    return registry


def write_textfile(path: str | Path, records: Sequence[TestRecord], finished: float) -> None:
    """Write the metrics for node_exporter's textfile collector, atomically (a scrape never sees half)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(target), registry_of(records, finished))


@dataclass(frozen=True)
class Push:
    """What one push to the Pushgateway did."""

    grouping: dict[str, str]
    error: str | None = None

    def line(self, url: str) -> str:
        """One line for the report: pushed, or the warning."""
        group = ",".join(f"{k}={v}" for k, v in self.grouping.items())
        if self.error is None:
            return f"metrics pushed to {url} ({group})"
        return f"warning: metrics not pushed to {url} ({group}): {self.error}"


def push(
    url: str,
    records: Sequence[TestRecord],
    finished: float,
    *,
    job: str,
    cluster: str,
    timeout_s: float = PUSH_TIMEOUT_S,
) -> list[Push]:
    """Push each configuration's runs to the Pushgateway at ``url`` (PUT: it replaces that group's metrics).

    The grouping key is ``job``, ``cluster`` and ``config``. A failure (the gateway down, refusing) is in
    the returned :class:`Push`, never raised.
    """
    by_config: dict[str, list[TestRecord]] = {}
    for record in records:
        by_config.setdefault(config_of(record), []).append(record)
    done = []
    for config, group in by_config.items():
        grouping = {"cluster": cluster, "config": config}
        try:
            push_to_gateway(
                url,
                job=job,
                registry=registry_of(group, finished, config_label=False),
                grouping_key=grouping,
                timeout=timeout_s,
            )
        except OSError as exc:  # urllib's URLError and HTTPError are OSErrors
            done.append(Push({"job": job, **grouping}, str(exc)))
        else:
            done.append(Push({"job": job, **grouping}))
    return done


def export(
    records: Sequence[TestRecord],
    finished: float,
    *,
    metrics_file: Path | None,
    pushgateway: str | None,
    job: str,
    cluster: str,
) -> list[str]:
    """``--metrics-file`` and ``--pushgateway``: the lines to report (a failure is a warning, not raised)."""
    lines = []
    if metrics_file is not None:
        try:
            write_textfile(metrics_file, records, finished)
        except OSError as exc:
            lines.append(f"warning: --metrics-file {metrics_file}: not written: {exc}")
        else:
            lines.append(f"metrics: {metrics_file}")
    if pushgateway is not None:
        lines += [p.line(pushgateway) for p in push(pushgateway, records, finished, job=job, cluster=cluster)]
    return lines
