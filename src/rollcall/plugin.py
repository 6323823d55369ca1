"""The pytest plugin: declares the options, validates them, exposes fixtures and writes the reports.

It is thin glue: everything real lives in the library modules (:mod:`rollcall.suite`, :mod:`rollcall.runner`,
:mod:`rollcall.verdict`, :mod:`rollcall.reports`). A site's plugin adds checks and reports of its own through
the hooks of :mod:`rollcall.hookspecs` (``docs/extending.md``).

Fixtures:
    rollcall_suite: the session's :class:`~rollcall.suite.Suite` (backend, discovery, records).
    rollcall: a function ``rollcall(**overrides) -> TestRecord`` that runs this test's training job.

Marker:
    ``@pytest.mark.rollcall(**overrides)``: this test's job settings (fields of
    :class:`~rollcall.jobspec.JobSpec`, e.g. ``nodes=1``, ``workload_args=("--epochs", "1")``) over the
    session's options; the ``rollcall`` fixture's own keyword arguments override the marker's. An unknown
    setting, in the marker or the call, stops the session as a usage error (exit 4).

Bad input is a usage error (exit 4, no traceback) wherever it is found: the options and ``--baseline`` at
configure time, the markers at collection, the cluster (``Suite.prepare``) once collection shows that a
test runs a job (on the xdist controller: at session start), and what only a running test can find (a
``--namespace`` that does not exist, an override) through :func:`_usage_errors`.
Deadline: one source (:func:`rollcall.suite.deadline_of`) decides what ends each test that uses ``rollcall``
(or is marked ``rollcall``): its own deadline (per attempt ``--capacity-timeout`` on Kubernetes only + the job
timeout of its final job spec, its ``job_timeout_s`` over ``--job-timeout`` + a clean-up margin; re-armed
when the ``rollcall`` call's own ``job_timeout_s`` is longer), or a timeout the user gave (``--timeout``,
``PYTEST_TIMEOUT``, the test's own ``timeout`` marker) where that is shorter. An ini ``timeout`` (the suite's
own unit tests') never applies to a roll call. That one value is the test's only pytest-timeout, armed
through SIGALRM in the test's own thread, so a wedged watch or API call ends the test and the run's clean-up
(``finally``) still runs; the failure says what fired, and the header says the same value.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rollcall.live.terminal import LiveLine, terminal_writer
from rollcall.options import GROUPS, OPTIONS, OptionError, former_flags, resolve

if TYPE_CHECKING:
    from rollcall.reports import TestRecord
    from rollcall.suite import Deadline, Suite

_SUITE = pytest.StashKey["Suite"]()
_NOTES = pytest.StashKey[list[str]]()
_DEADLINE = pytest.StashKey["Deadline"]()


def _user_timeout(config: pytest.Config, item: pytest.Item | None = None) -> tuple[float, str] | None:
    """The timeout the user gave (``--timeout``, ``PYTEST_TIMEOUT``, ``item``'s own marker), and where.

    The ini ``timeout`` is not read: it is the suite's own unit tests', never a roll call's. A marker's
    or a value's 0 (pytest-timeout's "none") gives none.
    """
    marker = item.get_closest_marker("timeout") if item is not None else None
    for value, where in (
        (marker.args[0] if marker and marker.args else None, "the test's timeout marker"),
        (config.getoption("timeout", None), "--timeout"),
        (os.environ.get("PYTEST_TIMEOUT", "").strip(), "PYTEST_TIMEOUT"),
    ):
        if value not in (None, ""):
            try:
                seconds = float(value)
            except ValueError:  # pytest-timeout refuses it itself
                return None
            return (seconds, where) if seconds > 0 else None
    return None


def _ini(config: pytest.Config, name: str) -> Any:
    try:
        return config.getini(name)
    except ValueError:  # pytest-timeout not loaded
        return None


def _marked(item: pytest.Item) -> dict[str, Any]:
    """The job settings of ``item``'s ``rollcall`` markers, the closest winning."""
    marked: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("rollcall"))):
        marked.update(mark.kwargs)
    return marked


def _arm(item: pytest.Item, deadline: Deadline) -> str:
    """Make ``deadline.ends_at`` the test's one pytest-timeout: a marker of its own outranks every other.

    Its method (returned) is the test's own timeout marker's, else ``signal`` (in the test's own thread).
    """
    marker = item.get_closest_marker("timeout")
    method = (marker.kwargs.get("method") if marker else None) or (
        "signal" if hasattr(signal, "SIGALRM") else "thread"
    )
    item.add_marker(pytest.mark.timeout(deadline.ends_at, method=method), append=False)
    item.stash[_DEADLINE] = deadline
    return str(method)


def _give_deadlines(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Arm each roll-call test at what ends it (see the module docstring)."""
    suite = config.stash.get(_SUITE, None)
    if suite is None or not config.pluginmanager.hasplugin("timeout"):
        return
    from rollcall.suite import deadline_of

    for item in items:
        uses = {"rollcall", "rollcall_suite"} & set(getattr(item, "fixturenames", ()))
        if uses or item.get_closest_marker("rollcall"):
            given = _user_timeout(config, item)
            _arm(item, deadline_of(suite.options, _marked(item), backend=suite.backend_name, given=given))


def _extend_deadline(item: pytest.Item, suite: Suite, settings: dict[str, Any]) -> None:
    """Re-arm the test's pytest-timeout when its job as called (``settings``) may run longer."""
    armed = item.stash.get(_DEADLINE, None)
    cancel = getattr(item, "cancel_timeout", None)
    if armed is None or cancel is None:
        return
    from pytest_timeout import Settings

    from rollcall.suite import deadline_of

    given = (armed.given_s, armed.given_from) if armed.given_s is not None else None
    deadline = deadline_of(suite.options, settings, backend=armed.backend, given=given)
    if deadline.ends_at <= armed.ends_at:
        return
    method = _arm(item, deadline)
    cancel()
    timer = Settings(
        deadline.ends_at,
        method,
        bool(_ini(item.config, "timeout_func_only")),
        bool(_ini(item.config, "timeout_disable_debugger_detection")),
    )
    item.ihook.pytest_timeout_set_timer(item=item, settings=timer)


def _deadline_line(config: pytest.Config, suite: Suite) -> str:
    """The header's line: what ends a roll-call test, the same value :func:`_give_deadlines` arms."""
    from rollcall.suite import deadline_of

    deadline = deadline_of(suite.options, backend=suite.backend_name, given=_user_timeout(config))
    if not config.pluginmanager.hasplugin("timeout"):
        return "rollcall: deadline: each run ends at its job timeout; no test deadline (no pytest-timeout)"
    return f"rollcall: deadline: {deadline.words()}"


def _timeout_failure() -> str:
    """How pytest-timeout's failure message starts (``Timeout (>``)."""
    from pytest_timeout import PYTEST_FAILURE_MESSAGE

    return str(PYTEST_FAILURE_MESSAGE).split("%s", 1)[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A roll-call test that its own deadline ended says which deadline that was."""
    report: pytest.TestReport = yield  # type: ignore[assignment]
    deadline = item.stash.get(_DEADLINE, None)
    excinfo = call.excinfo
    if (
        deadline is not None
        and excinfo is not None
        and excinfo.errisinstance(pytest.fail.Exception)
        and str(excinfo.value).startswith(_timeout_failure())
    ):
        report.sections.append(("rollcall deadline", deadline.describe()))
    return report  # type: ignore[return-value]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks a site's plugin implements (:mod:`rollcall.hookspecs`)."""
    from rollcall import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every rollcall option in its group; each also reads ROLLCALL_<NAME> and, where it can, an ini key."""
    groups = {name: parser.getgroup(f"rollcall-{name}", f"rollcall, {title}") for name, title in GROUPS}
    for spec in OPTIONS:
        group = groups[spec.group]
        help_text = f"{spec.argparse_help} [{spec.where}; default {spec.shown_default}]"
        dest = "rollcall_" + spec.name
        if spec.ini_name:
            ini_help = f"rollcall: {spec.help} (as {spec.flag}; {spec.flag} and {spec.env} win)"
            if spec.multiple:  # shell-quoted words, as its variable; a list in pyproject.toml
                parser.addini(spec.ini_name, ini_help, type="args", default=[])
            else:
                parser.addini(spec.ini_name, ini_help, type="string", default="")
        if spec.switch:
            group.addoption(spec.flag, action="store_true", default=False, dest=dest, help=help_text)
        elif spec.multiple:
            group.addoption(
                spec.flag, action="append", default=[], dest=dest, metavar=spec.placeholder, help=help_text
            )
        else:
            group.addoption(spec.flag, default=None, dest=dest, metavar=spec.placeholder, help=help_text)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """A former flag is answered with its new name: a usage error, a warning where another plugin has it."""
    for old, spec in former_flags(args):
        _, unknown = parser.parse_known_and_unknown_args([old, "1"])
        if old in unknown:
            raise pytest.UsageError(
                f"{old} is now {spec.flag} (renamed: pytest-retry's {old} re-runs a failed test in place); "
                f"{spec.env} (or {spec.former_env}) and the ini key {spec.ini_name} set it too"
            )
        warning = pytest.PytestConfigWarning(f"{old} is another plugin's here; rollcall's is {spec.flag}")
        early_config.issue_config_time_warning(warning, stacklevel=2)


def pytest_configure(config: pytest.Config) -> None:
    """Validate the options up front; a bad one stops the session with a message naming the fix."""
    from rollcall.hookspecs import gather_checks
    from rollcall.suite import Suite

    cli = {s.name: config.getoption("rollcall_" + s.name) for s in OPTIONS}
    ini = {s.name: config.getini(s.ini_name) for s in OPTIONS if s.ini_name}
    try:
        options = resolve(cli, ini=ini)
        suite = Suite.from_options(options)  # --backend auto finding no cluster that an option asks for
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    _prepare(suite, connect=False)
    suite.site_checks = gather_checks(config)  # a plugin's that breaks the contract: a usage error
    suite.progress = terminal_writer(config)
    every = options.reports.progress_every
    if every > 0 and not hasattr(config, "workerinput"):  # an xdist worker's output is lost
        suite.live = LiveLine(config, every)
    config.stash[_SUITE] = suite
    config.addinivalue_line(
        "markers",
        "rollcall(**overrides): this test's job settings over the options (rollcall.jobspec.JobSpec fields)",
    )
    if not hasattr(config, "workerinput"):
        from rollcall import procs

        procs.raise_on_sigterm()


def _prepare(suite: Suite, *, connect: bool) -> None:
    """:meth:`Suite.prepare`, its refusals turned into usage errors naming the option and the fix."""
    from rollcall.evidence.baseline import BaselineError

    try:
        suite.prepare(connect=connect)
    except BaselineError as exc:
        flag = "--baseline-history" if suite.options.baselines.baseline_history else "--baseline"
        raise pytest.UsageError(f"{flag}: {exc}") from None
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """What only a running test can refute (``--namespace``, an override) is a usage error, exit 4."""
    return (yield from _usage_errors())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """As :func:`pytest_runtest_setup`: the backend is created on first use, in a fixture or a test."""
    return (yield from _usage_errors())


def _usage_errors() -> Iterator[None]:
    try:
        return (yield)
    except OptionError as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every ``rollcall`` marker now (a typo stops the session before any run); give out deadlines."""
    from rollcall.suite import check_overrides

    for item in items:
        for mark in item.iter_markers("rollcall"):
            try:
                if mark.args:
                    raise OptionError(f"{item.nodeid}: @pytest.mark.rollcall takes keyword arguments only")
                check_overrides(mark.kwargs, f"{item.nodeid}: @pytest.mark.rollcall")
            except OptionError as exc:
                raise pytest.UsageError(str(exc)) from None
    _give_deadlines(config, items)


def _runs_jobs(items: list[pytest.Item]) -> bool:
    return any({"rollcall", "rollcall_suite"} & set(getattr(item, "fixturenames", ())) for item in items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With a test that runs a job on a cluster, connect now: bad input stops the session before any run.

    A missing ``--image``, a kubeconfig that is missing, unreadable or malformed, an unknown ``--context``, an
    unreachable API server or a right it refuses is a usage error naming the option and the fix (exit 4); so
    is ``--backend slurm`` without a slurm.conf naming a controller, found before any Slurm command runs.
    """
    suite = session.config.stash.get(_SUITE, None)
    if suite is None or session.config.option.collectonly or not _runs_jobs(session.items):
        return
    _prepare(suite, connect=True)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """End what earlier runs left (:func:`_reap_orphans`); under pytest-xdist, check the backend first.

    The controller collects nothing: with a backend that checks its configuration at start
    (:class:`~rollcall.backends.ChecksAtStart`: a cluster's, a scheduler's) it runs the same checks as
    :func:`pytest_collection_finish`, before any worker starts (a worker's usage error would read as its
    crash).
    """
    config = session.config
    suite = config.stash.get(_SUITE, None)
    if suite is not None and not hasattr(config, "workerinput"):
        _reap_orphans(config)
    if suite is None or hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("dsession"):
        return
    if not suite.options.given("backend"):
        return
    from rollcall.backends import ChecksAtStart
    from rollcall.suite import backend_settings

    wing = suite.wing.load()
    if not isinstance(wing, ChecksAtStart):
        return
    try:
        wing.check_config(suite.section, backend_settings(suite.options))
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def _reap_orphans(config: pytest.Config) -> None:
    """End the local runs whose suite died without ending them (SIGKILL, a lost machine), and say so.

    A session started from inside a test (pytester's, the suite's own end-to-end tests: pytest sets
    ``PYTEST_CURRENT_TEST``) leaves this to the outermost one, whose other tests may own such processes.
    """
    if os.environ.get("PYTEST_CURRENT_TEST"):
        return
    from rollcall import procs

    lines = [r.line() for r in procs.reap_orphans()]
    if lines:
        write = terminal_writer(config)
        for line in lines:
            write(line)
        config.stash.setdefault(_NOTES, []).extend(lines)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Interrupted once, the session is ending: a further Ctrl-C or SIGTERM must not cut the reports short."""
    from rollcall import procs

    procs.ignore_interrupts()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give back the Ctrl-C and SIGTERM handlers an interruption set aside."""
    from rollcall import procs

    procs.restore_signal_handlers()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Say which backend runs and why, and the run's real deadline."""
    suite = config.stash.get(_SUITE, None)
    return [suite.header(), _deadline_line(config, suite)] if suite else None


@pytest.fixture(scope="session")
def rollcall_suite(pytestconfig: pytest.Config) -> Suite:
    """The session's suite."""
    return pytestconfig.stash[_SUITE]


@pytest.fixture
def rollcall(rollcall_suite: Suite, request: pytest.FixtureRequest) -> Iterator[Callable[..., TestRecord]]:
    """Run this test's training job; its figures go to the junit properties and the reports."""
    from rollcall.backends import BackendError
    from rollcall.reports import junit_properties

    marked = _marked(request.node)

    def run(**overrides: Any) -> TestRecord:
        _extend_deadline(request.node, rollcall_suite, {**marked, **overrides})
        try:
            record = rollcall_suite.run(request.node.nodeid, request.node.name, **{**marked, **overrides})
        except BackendError as exc:  # the cluster cannot run the job: say why, no traceback
            pytest.fail(f"{type(exc).__name__}: {exc}", pytrace=False)
        request.node.user_properties.extend(junit_properties(record))
        return record

    yield run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """A table of every job run this session."""
    suite = config.stash.get(_SUITE, None)
    if not suite or not suite.records:
        return
    from rollcall.reports import interrupted_line, perf_summary, summary_table

    terminalreporter.section("rollcall")
    for line in summary_table(suite.records) + perf_summary(suite.records):
        terminalreporter.write_line(line)
    for record in suite.records:
        verdict = record.result.last.verdict
        for warning in verdict.warnings:
            terminalreporter.write_line(f"{record.test_id}: warning: {warning.message}")
        if record.result.passed:
            continue
        first = verdict.first_failure  # whatever its class: a crash, a hang, a corrupt replica, ...
        if first is not None:
            terminalreporter.write_line(f"{record.test_id}: {first.summary}")
        headline = verdict.root_cause.headline() if verdict.root_cause is not None else None
        if headline and (first is None or headline != first.summary):  # the ranks' errors, behind another
            terminalreporter.write_line(f"{record.test_id}: the ranks' errors: {headline}")
    for line in config.stash.get(_NOTES, []):
        terminalreporter.write_line(line)
    out = suite.options.reports.artifacts_dir
    terminalreporter.write_line(f"reports: {out}/")
    for record in suite.records:
        if why := record.extra.get("interrupted"):
            terminalreporter.write_line(interrupted_line(record.test_id, why, out))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the session's reports when any job ran; the xdist controller merges its workers' instead."""
    suite = session.config.stash.get(_SUITE, None)
    if suite and not suite.records and not hasattr(session.config, "workerinput"):
        _merge_workers(session, suite)
    if not suite or not suite.records:
        return
    finished = time.time()
    # Under pytest-xdist each worker writes files of its own, tagged; the controller merges them.
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    notes = session.config.stash.setdefault(_NOTES, [])
    missing = _write_reports(session, suite, finished, worker, notes)
    if not suite.options.job.keep:
        _fail_for(session, [line for r in suite.records for line in r.cleanup_errors()], left=True)
    missing += _export_metrics(suite, finished, worker, notes)
    _fail_for(session, missing)
    if path := suite.options.baselines.write_baseline:
        notes.extend(_write_baseline(path, suite))


def _merge_workers(session: pytest.Session, suite: Suite) -> None:
    """The xdist controller's: its workers' results merged into one results.json, their nodes marked once."""
    from rollcall.collect import RESULTS_FILE
    from rollcall.reports import left_behind, merge_worker_results

    merging: list[str] = []
    out = suite.options.reports.artifacts_dir
    with _report(merging, out / RESULTS_FILE):
        merged = merge_worker_results(out, since=suite.started)
        if merged is not None:
            _fail_for(session, left_behind(merged), left=True)
            session.config.stash.setdefault(_NOTES, []).extend(suite.conclude_workers())
    _fail_for(session, merging)


def _write_reports(
    session: pytest.Session, suite: Suite, finished: float, worker: str | None, notes: list[str]
) -> list[str]:
    """Write results.json, the per-rank junit file, nodes.json, unfit-nodes.txt, report.html, then the site's.

    The session's node verdicts and the breaker over them are marked once, here (by the controller under
    xdist: a ``worker``'s files are tagged with its name, and it marks nothing). Each report is written whole
    or not at all, each whatever became of the others (a full disk may still take the small junit file): each
    one that could not be written is returned, to fail the session.
    """
    from rollcall.collect import RANKS_JUNIT_FILE, REPORT_FILE, RESULTS_FILE, UNFIT_NODES_FILE
    from rollcall.hookspecs import write_reports
    from rollcall.nodeverdicts import NODES_FILE, of_records, write_nodes, write_unfit_nodes
    from rollcall.page.report import write_report
    from rollcall.reports import write_rank_junit, write_results

    out = suite.options.reports.artifacts_dir
    tag = f".{worker}" if worker else ""
    nodes, breaker = of_records(suite.records, suite.verdict_ttl_s, suite.options.recovery.max_unfit)
    marked, lines = (None, []) if worker else suite.conclude(nodes, breaker)
    notes.extend(lines)
    meta = {
        "backend": suite.backend_name,
        "backend_reason": suite.backend_reason,
        "started": suite.started,
        "finished": finished,
        "argv": sys.argv,
        "node_marks": marked.as_dict() if marked is not None else None,
        "breaker": breaker.as_dict(),  # the session's, over nodes.json's verdicts: what the marks followed
    }
    missing: list[str] = []
    with _report(missing, out / _tagged(RESULTS_FILE, tag)) as path:
        write_results(path, suite.records, meta)
    with _report(missing, out / _tagged(RANKS_JUNIT_FILE, tag)) as path:
        write_rank_junit(path, suite.records)
    with _report(missing, out / _tagged(NODES_FILE, tag)) as path:
        write_nodes(path, nodes, suite.verdict_ttl_s, breaker, marked.as_dict() if marked else None)
    with _report(missing, out / _tagged(UNFIT_NODES_FILE, tag)) as path:
        if write_unfit_nodes(path, nodes):
            notes.append(f"unfit nodes: {out / UNFIT_NODES_FILE}")
    with _report(missing, out / _tagged(REPORT_FILE, tag)) as path:
        write_report(path, suite.records, meta)
        notes.append(f"html report: {out / REPORT_FILE}")
    return missing + write_reports(session.config, suite.records, out)  # the site's own, after rollcall's


def _export_metrics(suite: Suite, finished: float, worker: str | None, notes: list[str]) -> list[str]:
    """``--metrics-file`` (tagged as the reports, under xdist) and ``--pushgateway``; the files not written.

    The gateway down is a warning: the reports on disk stand.
    """
    o = suite.options.reports
    missing: list[str] = []
    if o.metrics_file is not None:
        from rollcall.metrics.prometheus import write_textfile

        tag = f".{worker}" if worker else ""
        with _report(missing, o.metrics_file.with_name(_tagged(o.metrics_file.name, tag))) as path:
            write_textfile(path, suite.records, finished)
            notes.append(f"metrics: {path}")
    if o.pushgateway is not None:
        from rollcall.metrics.prometheus import export

        notes += export(
            suite.records,
            finished,
            metrics_file=None,
            pushgateway=o.pushgateway,
            job=o.pushgateway_job,
            cluster=suite.options.kubernetes.context or suite.backend_name,
        )
    return missing


def _write_baseline(path: str, suite: Suite) -> list[str]:
    """``--write-baseline``: each sound run's figures as the new baseline; what it did, or why nothing."""
    from rollcall.evidence.baseline import BaselineError
    from rollcall.gate import write_baseline

    gates = [r.gate for r in suite.records if r.gate is not None]
    try:
        return write_baseline(path, gates)
    except (BaselineError, OSError) as exc:
        return [f"--write-baseline: nothing written: {exc}"]


@contextlib.contextmanager
def _report(missing: list[str], path: Path) -> Iterator[Path]:
    """Write one report at ``path``; an :class:`OSError` doing so is added to ``missing``, never raised."""
    try:
        yield path
    except OSError as exc:
        missing.append(f"{path}: {exc.strerror or exc}")


def _fail_for(session: pytest.Session, lines: list[str], *, left: bool = False) -> None:
    """Reports not written (``left``: what clean-up left behind) fail the session (exit 1), each named."""
    if not lines:
        return
    notes = session.config.stash.setdefault(_NOTES, [])
    what = "clean-up left something behind" if left else "report not written"
    notes += [f"rollcall: {what}: {line}" for line in lines]
    if not left:  # the verdicts stay
        notes.append("rollcall: the reports above are incomplete; the verdicts are in the terminal's lines")
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _tagged(name: str, tag: str) -> str:
    """``results.json`` with tag ``.gw0`` is ``results.gw0.json``."""
    stem, dot, ext = name.partition(".")
    return f"{stem}{tag}{dot}{ext}"
