"""The session: which backend runs, what each node offers, and one :meth:`Suite.run` per test.

The pytest plugin builds one :class:`Suite` per session from the validated options; tests call
:meth:`Suite.run`, which builds the :class:`~rollcall.jobspec.JobSpec`, runs it with retries (each attempt
judged once against the session's :attr:`Suite.criteria`), and records the result and what the deciding
verdict says of the release gate (:mod:`rollcall.gate`) for the reports. With ``--isolate``, a deciding
attempt that failed naming no node is followed by the search of :mod:`rollcall.isolation`. Every attempt is
judged by :attr:`Suite.checks`: the built-in checks, then the site's own (:attr:`Suite.site_checks`, which
the plugin gathers from its hook); the isolation's trials by theirs alone (a trial trains nothing).
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollcall.backends import (
    WINGS,
    Backend,
    BackendSettings,
    ChecksAtStart,
    Marking,
    MarkReport,
    MarksNodes,
    MountsSharedCache,
    NodeMark,
    Placement,
    PlacementRequest,
    Wing,
    choose,
    wing_named,
)
from rollcall.collect import UNFIT_NODES_FILE, safe_name
from rollcall.evidence.floors import floors_of, measure_args
from rollcall.gate import GateReport
from rollcall.isolation.probe import isolate, with_isolation
from rollcall.jobspec import JobSpec, Toleration
from rollcall.judge import CHECKS, Predicate, SiteCheck
from rollcall.nodeverdicts import (
    NODES_FILE,
    Breaker,
    NodeVerdict,
    merge_worker_files,
    write_nodes,
    write_unfit_nodes,
)
from rollcall.options import OPTIONS, OptionError, Options, Spec
from rollcall.options.job import check_bounds
from rollcall.options.values import format_duration
from rollcall.reports import TestRecord
from rollcall.runner import Interrupted, RunResult, run_with_retries
from rollcall.secrets import FromEnvironment, is_secret

if TYPE_CHECKING:
    from rollcall.live.view import LiveView
    from rollcall.verdict import Criteria


def choose_backend(options: Options, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The backend to use and why: ``--backend``, else a wing found (:func:`~rollcall.backends.choose`).

    Where ``--backend auto`` finds no wing, its fallback (local) runs only when nothing asks for a cluster
    (:func:`cluster_asks`): a green run that never touched the cluster it was meant for would pass a gate.
    Else an :class:`OptionError` names what asked, what was not found, and the fix.
    """
    environ = os.environ if environ is None else environ
    wing, reason = choose(options.job.backend, options.section, environ)
    if options.job.backend != "auto" or not wing.fallback:
        return wing.name, reason
    asks = cluster_asks(options)
    if asks:
        raise OptionError(no_cluster(asks, reason))
    return wing.name, f"--backend auto: {reason}, and nothing asks for a cluster"


def read_by(spec: Spec) -> tuple[str, ...]:
    """The backends that alone read option ``spec``; empty: every backend does.

    Those its declaration names (:attr:`~rollcall.options.Spec.backends`), else the wing given its section
    (:data:`~rollcall.backends.WINGS`: ``--instance-type`` is the kubernetes wing's).
    """
    return spec.backends or tuple(w.name for w in WINGS if w.section == spec.group)


@dataclass(frozen=True)
class ClusterAsk:
    """An option given (whatever its value) that ``--backend auto``'s fallback does not read: a cluster's.

    Attributes:
        spec: the option.
        source: where its value came from: its flag, its variable, ``ini rollcall_<name>``.
        value: its value.
        backends: the backends that read it (:func:`read_by`).
    """

    spec: Spec
    source: str
    value: Any
    backends: tuple[str, ...]

    def words(self) -> str:
        """``--instance-type p5.48xlarge (from ROLLCALL_INSTANCE_TYPE; the kubernetes backend's option)``."""
        shown = f"{self.spec.flag} {self.value}" if isinstance(self.value, str) else self.spec.flag
        where = "" if self.source == self.spec.flag else f"from {self.source}; "
        whose = " and ".join(self.backends) + (" backend's" if len(self.backends) == 1 else " backends'")
        return f"{shown} ({where}the {whose} option)"


def cluster_asks(options: Options) -> tuple[ClusterAsk, ...]:
    """Each option given that only backends other than ``--backend auto``'s fallback read, in their order."""
    fallback = next(w.name for w in WINGS if w.fallback)
    asks: list[ClusterAsk] = []
    for spec in OPTIONS:
        readers = read_by(spec)
        if readers and fallback not in readers and options.given(spec.name):
            value = getattr(options.section(spec.group), spec.name)
            asks.append(ClusterAsk(spec, options.source(spec.name), value, readers))
    return tuple(asks)


def no_cluster(asks: Sequence[ClusterAsk], missing: str) -> str:
    """The refusal of ``--backend auto`` finding no wing (``missing``: what it looked for), yet ``asks``."""
    wanted = {name for ask in asks for name in ask.backends}
    wings = [w for w in WINGS if w.name in wanted]
    unfound = [f"{w.name} is chosen only when asked for" for w in wings if not w.detect]
    fixes = [w.found_by if w.detect and w.found_by else f"pass --backend {w.name}" for w in wings]
    asking = ", ".join(ask.words() for ask in asks)
    return (
        f"--backend auto found no cluster ({'; '.join([missing, *unfound])}), but {asking} "
        f"{'asks' if len(asks) == 1 else 'ask'} for one; {' or '.join(fixes)}, or --backend local to run "
        "here on purpose"
    )


#: Seconds each attempt may take past its capacity and job timeouts: clean-up, log collection, reports.
CLEAN_UP_MARGIN_S = 300.0


@dataclass(frozen=True)
class Deadline:
    """What ends a roll-call test: its own deadline, or a shorter timeout the user gave (the one source).

    Attributes:
        seconds: the suite's own deadline (:func:`deadline_of`).
        job_timeout_from: ``--job-timeout``, or the test's own ``job_timeout_s`` (its marker or its call).
        backend: the backend that runs the job; waits: whether it waits for capacity (reads the option).
        given_s: a timeout the user gave (``--timeout``, ``PYTEST_TIMEOUT``, the test's ``timeout`` marker).
        given_from: where ``given_s`` came from.
    """

    seconds: float
    attempts: int
    capacity_timeout_s: float
    job_timeout_s: float
    margin_s: float
    job_timeout_from: str = "--job-timeout"
    backend: str = ""
    waits: bool = True
    given_s: float | None = None
    given_from: str = ""

    @property
    def cut_short(self) -> bool:
        """Whether the timeout the user gave ends the test before its own deadline."""
        return self.given_s is not None and self.given_s < self.seconds

    @property
    def ends_at(self) -> float:
        """Seconds after its start at which the test ends: the one timer armed."""
        return self.given_s if self.given_s is not None and self.cut_short else self.seconds

    def sum(self) -> str:
        """``--capacity-timeout 15m (kubernetes) + --job-timeout 30m + 5m clean-up margin``, per attempt."""
        job = (
            f"--job-timeout {format_duration(self.job_timeout_s)}"
            if self.job_timeout_from == "--job-timeout"
            else f"the test's job_timeout_s {format_duration(self.job_timeout_s)}"
        )
        parts = [f"{job} + {format_duration(self.margin_s)} clean-up margin"]
        if self.waits:
            parts.insert(0, f"--capacity-timeout {format_duration(self.capacity_timeout_s)} ({self.backend})")
        per = " + ".join(parts)
        return f"{self.attempts} attempt(s) x ({per})" if self.attempts > 1 else per

    def words(self) -> str:
        """The header's words: when a roll-call test ends, and why."""
        since = "its pods are scheduled" if self.waits else "the job starts"
        line = (
            f"each roll-call test ends at its deadline, {format_duration(self.seconds)}: {self.sum()} "
            f"(a job timeout counts from when {since}; a test's job_timeout_s lengthens it)"
        )
        if self.given_s is None:
            return line
        given = f"{self.given_from} {format_duration(self.given_s)} given"
        if self.cut_short:
            return f"{line}; {given}: ends at {format_duration(self.given_s)}, with its clean-up"
        return f"{line}; {given}: longer, so the deadline ends it"

    def describe(self) -> str:
        """What fired, for the failure report."""
        if self.cut_short:
            return (
                f"{self.given_from} {format_duration(self.given_s or 0)} given ended the test before its own "
                f"deadline ({format_duration(self.seconds)} = {self.sum()}); clean-up ran as the test unwound"
            )
        return (
            f"the test's own deadline fired: {self.seconds:g}s = {self.sum()}; neither the job timeout nor "
            "the hang watch ended the run (a wedged call to the backend?); clean-up ran as the test unwound"
        )


#: The cadence ``--verdict-ttl auto`` assumes: a nightly run's.
NIGHTLY_S = 24 * 3600.0


def deadline_of(
    options: Options,
    overrides: Mapping[str, Any] | None = None,
    *,
    backend: str,
    given: tuple[float, str] | None = None,
) -> Deadline:
    """What ends one roll-call test: its own deadline, or ``given`` (seconds, where from) where shorter.

    Its own deadline is, per attempt, the capacity timeout (where ``backend`` waits for it), the job timeout
    and a clean-up margin. The job timeout is the final job spec's: a test's own ``job_timeout_s``
    (``overrides``, its marker's and its call's) over ``--job-timeout``.
    """
    attempts = options.recovery.retries + 1
    capacity_spec = next(spec for spec in OPTIONS if spec.name == "capacity_timeout")
    waits = backend in read_by(capacity_spec)  # the backends that read --capacity-timeout wait for capacity
    capacity = options.kubernetes.capacity_timeout if waits else 0.0
    job, where = options.job.job_timeout, "--job-timeout"
    if overrides and overrides.get("job_timeout_s") is not None:
        job, where = float(overrides["job_timeout_s"]), "job_timeout_s"
    per = capacity + job + CLEAN_UP_MARGIN_S
    return Deadline(
        attempts * per, attempts, capacity, job, CLEAN_UP_MARGIN_S, where, backend, waits, *given or ()
    )


#: What one test may change of its job (``rollcall(**overrides)``, ``@pytest.mark.rollcall(**overrides)``):
#: every field of :class:`~rollcall.jobspec.JobSpec` but its name, which each run draws afresh.
OVERRIDABLE: frozenset[str] = frozenset(f.name for f in fields(JobSpec)) - {"name"}


def check_overrides(overrides: Mapping[str, Any], where: str) -> None:
    """OptionError naming ``where`` and the fix when ``overrides`` holds a key no job has."""
    unknown = sorted(set(overrides) - OVERRIDABLE)
    if unknown:
        raise OptionError(
            f"{where}: no such job setting {', '.join(map(repr, unknown))}; a test may override "
            + ", ".join(sorted(OVERRIDABLE))
        )


def slug(text: str, limit: int = 30) -> str:
    """A DNS-label-safe piece of ``text``."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    s = s[:limit].strip("-") or "job"
    return s if s[0].isalpha() else f"t{s}"[:limit]


def tolerated(options: Options) -> tuple[Toleration, ...]:
    """The taints the pods tolerate: ``--toleration``'s, and rollcall's own with ``--recheck-tainted``."""
    taint = options.recovery.taint_unfit
    if not options.recovery.recheck_tainted or taint is None:
        return options.kubernetes.toleration
    return (*options.kubernetes.toleration, Toleration(taint.key, taint.effect, taint.value or None))


def placement_request(options: Options) -> PlacementRequest:
    """What discovery is asked for, of ``options``: the one place a backend's request is built."""
    job, k = options.job, options.kubernetes
    return PlacementRequest(
        nodes=job.nodes,
        accelerator=job.accelerator,
        procs_per_node=job.procs_per_node,
        instance_type=k.instance_type,
        efa=k.efa,
        node_selector=dict(k.node_selector),
        tolerations=tolerated(options),
        check_device_plugins=k.check_device_plugins,
        capacity_timeout_s=k.capacity_timeout,
        trust_autoscaler=k.given("capacity_timeout"),
        recheck=options.recovery.taint_unfit if options.recovery.recheck_tainted else None,
    )


def backend_settings(options: Options, progress: Callable[[str], None] | None = None) -> BackendSettings:
    """What every backend is given of ``options`` besides its own section: the one place it is built."""
    return BackendSettings(
        image=options.job.image,
        keep=options.job.keep,
        unschedulable_grace_s=options.job.unschedulable_grace,
        marks=marking(options),
        progress=progress,
        secrets=bool(options.job.workload_secret) or any(map(is_secret, options.job.workload_env)),
    )


def marking(options: Options) -> Marking:
    """How the session marks nodes after a verdict: --label-nodes, --taint-unfit, --drain-unfit."""
    r = options.recovery
    return Marking(label=r.label_nodes, taint=r.taint_unfit, drain=r.drain_unfit)


#: Each mark, the option asking for it, and what it does to nodes, in the words of a refusal.
MARKS: dict[str, tuple[str, str]] = {
    "label": ("--label-nodes", "labels"),
    "taint": ("--taint-unfit", "taints"),
    "drain": ("--drain-unfit", "drains"),
}


def node_marks(verdicts: Sequence[NodeVerdict]) -> list[NodeMark]:
    """What each node's session verdict (``nodes.json``'s, the breaker's over it) asks its backend to mark."""
    return [
        NodeMark(v.name, v.verdict, "; ".join(v.reasons), v.checked_at, v.valid_until, v.whole)
        for v in verdicts
    ]


def job_spec(options: Options, placement: Placement, name: str) -> JobSpec:
    """The job named ``name`` that ``options`` ask for, on nodes offering ``placement``."""
    o, k, p = options.job, options.kubernetes, placement
    return JobSpec(
        name=name,
        nodes=o.nodes,
        procs_per_node=p.procs_per_node,
        accelerator=p.accelerator,
        image=o.image,
        # --min-busbw auto measures at the size the instance type's floors were published at
        workload_args=(
            *(measure_args(p.instance_type, p.accelerator) if options.judging.min_busbw == "auto" else ()),
            *o.workload_args,
        ),
        hang_bounds=o.hang_bounds,
        env=o.workload_env,
        secrets=o.workload_secret,
        resources=p.resources,
        instance_type=p.instance_type,
        node_selector=k.node_selector,
        neuron_cache=k.neuron_cache,
        compile_cache=o.compile_cache,
        requests=k.requests or {},
        limits=k.limits or {},
        scheduling=replace(k.scheduling, tolerations=tolerated(options)),
        job_timeout_s=o.job_timeout,
        machines=p.machines,
    )


@dataclass
class Suite:
    """One pytest session's view of where and how jobs run."""

    options: Options
    backend_name: str
    backend_reason: str
    records: list[TestRecord] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    progress: Callable[[str], None] | None = None
    #: Where the live roll call of each running job goes (the plugin's terminal view), if anywhere.
    live: LiveView | None = None
    #: The site's own checks, from the plugins' hook, held to :func:`rollcall.judge.site_checks`.
    site_checks: tuple[SiteCheck, ...] = ()

    @classmethod
    def from_options(cls, options: Options) -> Suite:
        """Choose the backend (cheap; nothing is contacted yet)."""
        name, reason = choose_backend(options)
        return cls(options, name, reason)

    @property
    def wing(self) -> Wing:
        """The chosen backend's wing (:data:`rollcall.backends.WINGS`)."""
        return wing_named(self.backend_name)

    @property
    def section(self) -> Any:
        """The section of the options the chosen backend is given (None for a wing given none)."""
        wing = self.wing
        return self.options.section(wing.section) if wing.section else None

    @cached_property
    def backend(self) -> Backend:
        """The backend, created on first use from its wing, its section and the session's settings."""
        return self.wing.load().from_options(self.section, backend_settings(self.options, self.progress))

    @property
    def verdict_ttl_s(self) -> float:
        """How long each node's verdict holds (``--verdict-ttl``; auto: a day plus a test's deadline)."""
        given = self.options.recovery.verdict_ttl
        return (
            given
            if given is not None
            else NIGHTLY_S + deadline_of(self.options, backend=self.backend_name).seconds
        )

    @cached_property
    def criteria(self) -> Criteria:
        """What every run is held to, built once; reads ``--baseline`` (a bad file raises BaselineError)."""
        from rollcall.gate import criteria_of

        return criteria_of(self.options)

    @property
    def checks(self) -> tuple[Predicate, ...]:
        """What every attempt is judged by: the built-in checks in their order, then the site's."""
        return (*CHECKS, *self.site_checks)

    @cached_property
    def placement(self) -> Placement:
        """What each node offers, discovered once per session."""
        return self.backend.discover(placement_request(self.options))

    def spec(self, test_name: str, **overrides: Any) -> JobSpec:
        """The job of ``test_name``: options and discovery, then the test's own overrides (checked).

        Overrides that set a hang bound their ``workload_args`` set otherwise are refused (OptionError).
        """
        where = f"rollcall({', '.join(f'{k}=...' for k in overrides)})"
        check_overrides(overrides, where)
        spec = job_spec(self.options, self.placement, f"{slug(test_name)}-{secrets.token_hex(3)}")
        if not overrides:
            return spec
        spec = replace(spec, **overrides)
        check_bounds(spec.hang_bounds, spec.workload_args, where, self.options.job.sources)
        return spec

    def run(self, test_id: str, test_name: str, **overrides: Any) -> TestRecord:
        """Run the test's job (with ``--job-retries``) and record it for the reports.

        Interrupted (Ctrl-C, SIGTERM: :class:`~rollcall.runner.Interrupted`), the run is recorded as judged so
        far, with why (``interrupted`` in ``results.json``), without isolation, taint or release gate, and
        the interruption goes on up to end the session.
        """
        base = self.spec(test_name, **overrides)
        artifacts = self.options.reports.artifacts_dir / safe_name(test_name)[:100]

        def make_spec(attempt: int) -> JobSpec:
            return base if attempt == 0 else replace(base, name=f"{base.name}-r{attempt}")

        try:
            result: RunResult = run_with_retries(
                self.backend,
                make_spec,
                artifacts,
                criteria=self.criteria,
                retries=self.options.recovery.retries,
                keep=self.options.job.keep,
                live=self.live,
                checks=self.checks,
            )
        except Interrupted as exc:  # recorded as judged so far, for the reports; the session ends
            record = TestRecord(
                test_id, exc.result or RunResult(self.backend.name, [exc.attempt]), base.accelerator
            )
            record.extra["interrupted"] = exc.why
            self.records.append(record)
            raise exc.signal from None
        extra: dict[str, Any] = {}
        if self.options.recovery.isolate:  # the deciding attempt failed naming no node: bisect the nodes
            found = isolate(
                self.backend,
                result.last,
                artifacts / "isolate",
                criteria=self.criteria,
                keep=self.options.job.keep,
                timeout_s=self.options.recovery.isolate_timeout,
            )
            if found.isolation is not None:
                result.last.verdict = with_isolation(result.last.verdict, found.isolation)
            extra["isolation"] = found.as_dict()
        extra["nodes_given"] = [*result.last.spec.machines]
        floors = floors_of(base.instance_type) if self.criteria.busbw_floors else None
        if floors is not None:  # the floors held to, and the sizes measured at
            extra["busbw_floors"] = floors.as_dict(result.last.verdict.perf.groups)
        record = TestRecord(test_id, result, base.accelerator, extra)
        record.gate = GateReport.of(test_id, result.last)
        note = record.gate.note()
        if note and self.progress:
            self.progress(note)
        self.records.append(record)
        return record

    def mark(self, nodes: Sequence[NodeVerdict]) -> MarkReport | None:
        """Mark the session's ``nodes`` (``nodes.json``'s, the breaker's over them), once; what it did.

        None without a mark asked for, on a backend that makes none, or after an interrupted test (its
        verdict is not whole).
        """
        how = marking(self.options)
        if not how or not isinstance(self.wing.load(), MarksNodes):  # prepare refuses a backend that cannot
            return None
        if any("interrupted" in r.extra for r in self.records):
            return None
        backend = self.backend
        assert isinstance(backend, MarksNodes)
        marked = backend.mark_nodes(node_marks(nodes), how)
        if self.progress:
            self.progress(marked.line())
        return marked

    def conclude(self, nodes: Sequence[NodeVerdict], breaker: Breaker) -> tuple[MarkReport | None, list[str]]:
        """Mark the session's ``nodes`` once (:meth:`mark`); what it did, and the terminal's lines of it."""
        marked = self.mark(nodes)
        lines = [f"rollcall: {breaker.line()}"] if breaker.tripped else []
        return marked, [*lines, *([f"nodes: {marked.line()}"] if marked is not None else [])]

    def conclude_workers(self) -> list[str]:
        """The xdist controller's: the nodes of every worker's file, marked once, written as nodes.json."""
        out = self.options.reports.artifacts_dir
        found = merge_worker_files(out, self.started, self.options.recovery.max_unfit)
        if found is None:
            return []
        nodes, breaker, ttl = found
        marked, lines = self.conclude(nodes, breaker)
        write_nodes(out / NODES_FILE, nodes, ttl, breaker, marked.as_dict() if marked else None)
        write_unfit_nodes(out / UNFIT_NODES_FILE, nodes)
        return lines

    def prepare(self, *, connect: bool) -> None:
        """Everything that can refute the options before a job runs; OptionError or BaselineError if so.

        Refuses ``--taint-unfit`` where the backend taints no node and an NFS ``--compile-cache`` where no
        node mounts it (the wing's capabilities, :mod:`rollcall.backends`), reads ``--baseline``
        (:attr:`criteria`), and with ``connect`` (a test will run a job) creates a backend that checks its
        configuration at start (:class:`~rollcall.backends.ChecksAtStart`: a cluster's kubeconfig, context,
        server and rights; a scheduler's slurm.conf, before any of its commands runs).
        """
        how, cls = marking(self.options), self.wing.load()
        wanted = {"label": how.label, "taint": how.taint is not None, "drain": how.drain}
        for kind, (flag, does) in MARKS.items():
            if wanted[kind] and kind not in (cls.MARKS if isinstance(cls, MarksNodes) else ()):
                able = [w.name for w in WINGS if kind in getattr(w.load(), "MARKS", ())]
                given = f"{flag} {how.taint}" if kind == "taint" else flag
                raise OptionError(
                    f"{given}: {does} a cluster's nodes, but the backend is {self.backend_name} "
                    f"({self.backend_reason}), which {does} none; drop {flag}, or run on a backend that "
                    f"does (--backend {'|'.join(able)})"
                )

        cache = self.options.job.compile_cache
        if cache is not None and cache.kind == "nfs" and not isinstance(self.wing.load(), MountsSharedCache):
            raise OptionError(
                f"--compile-cache {cache}: the {self.backend_name} backend mounts no volume; "
                "use --compile-cache /PATH, a directory its nodes can write (shared, or one of each node)"
            )
        self.criteria  # noqa: B018 - reads --baseline
        if connect:
            out = self.options.reports.artifacts_dir
            unwritable = _unwritable(out)
            if unwritable is not None:
                raise OptionError(
                    f"--artifacts-dir {out}: {unwritable}; name a directory this user "
                    "can create and write (--artifacts-dir DIR or ROLLCALL_ARTIFACTS_DIR)"
                )
        secrets = self.options.job.workload_secret
        unset = [n for n, s in secrets.items() if isinstance(s, FromEnvironment) and n not in os.environ]
        if connect and unset:
            raise OptionError(
                f"--workload-secret {unset[0]}: the suite's environment has no {unset[0]}; set it (a CI's "
                f"secret), or take it from a Kubernetes Secret: --workload-secret {unset[0]}=NS/SECRET/KEY"
            )
        if connect and isinstance(self.wing.load(), ChecksAtStart):
            self.backend  # noqa: B018 - connects, or checks the configuration

    def header(self) -> str:
        """The pytest header line."""
        o, found = self.options.job, self.__dict__.get("placement")  # discovery's, where it ran already
        accelerator, workload = o.words(found.accelerator if found else None)
        where = (
            f"backend={self.backend_name} ({self.backend_reason}), nodes={o.nodes}, accelerator={accelerator}"
        )
        return f"rollcall: {where}, artifacts={self.options.reports.artifacts_dir}, workload={workload}"


def _unwritable(directory: Path) -> str | None:
    """Why ``directory`` cannot hold the reports (None: it can): made as the run would, and written once.

    The one way to know, whoever the user is (root passes every permission check that a read-only mount or
    ``/proc`` still refuses).
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return f"cannot be written ({exc.strerror or exc})"
    return None
