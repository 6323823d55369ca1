"""The pytest plugin: declares the options, validates them, exposes fixtures and writes the reports.

It is thin glue: everything real lives in the library modules (:mod:`rollcall.suite`, :mod:`rollcall.runner`,
:mod:`rollcall.verdict`, :mod:`rollcall.reports`).

Fixtures:
    rollcall_suite: the session's :class:`~rollcall.suite.Suite` (backend, discovery, records).
    rollcall: a function ``rollcall(**overrides) -> TestRecord`` that runs this test's training job.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from rollcall.options import OPTIONS, OptionError, resolve

if TYPE_CHECKING:
    from rollcall.reports import TestRecord
    from rollcall.suite import Suite

_SUITE = pytest.StashKey["Suite"]()
_NOTES = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every rollcall option, in one group; each also reads ROLLCALL_<NAME>."""
    group = parser.getgroup("rollcall", "rollcall: distributed training roll call")
    for spec in OPTIONS:
        help_text = f"{spec.help} [env {spec.env}; default {spec.default!r}]"
        dest = "rollcall_" + spec.name
        if spec.switch:
            group.addoption(spec.flag, action="store_true", default=False, dest=dest, help=help_text)
        elif spec.multiple:
            group.addoption(
                spec.flag, action="append", default=[], dest=dest, metavar=spec.metavar, help=help_text
            )
        else:
            group.addoption(spec.flag, default=None, dest=dest, metavar=spec.metavar, help=help_text)


def pytest_configure(config: pytest.Config) -> None:
    """Validate the options up front; a bad one stops the session with a message naming the fix."""
    from rollcall.suite import Suite

    cli = {s.name: config.getoption("rollcall_" + s.name) for s in OPTIONS}
    try:
        options = resolve(cli)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    suite = Suite.from_options(options)
    from rollcall.baseline import BaselineError

    try:
        suite.gate  # noqa: B018 - reads --baseline now: a bad file stops the session before any job runs
    except BaselineError as exc:
        raise pytest.UsageError(f"--baseline: {exc}") from None
    suite.progress = _terminal_writer(config)
    config.stash[_SUITE] = suite
    config.addinivalue_line("markers", "rollcall: a test that runs a distributed training job")
    if not hasattr(config, "workerinput"):
        _raise_on_sigterm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """An option only the cluster can refute (``--namespace``) stops the session as a usage error."""
    return (yield from _usage_error_on_option_error())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """As :func:`pytest_runtest_setup`: the backend is created on first use, in a fixture or a test."""
    return (yield from _usage_error_on_option_error())


def _usage_error_on_option_error() -> Iterator[None]:
    try:
        return (yield)
    except OptionError as exc:
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With a test that runs a job on a cluster, connect now: bad input stops the session before any run.

    A missing ``--image``, a kubeconfig that is missing, unreadable or malformed, an unknown ``--context``, an
    unreachable API server or a right it refuses is a usage error naming the option and the fix (exit 4).
    """
    suite = session.config.stash.get(_SUITE, None)
    if suite is None or suite.backend_name != "kubernetes" or session.config.option.collectonly:
        return
    if not any(
        {"rollcall", "rollcall_suite"} & set(getattr(item, "fixturenames", ())) for item in session.items
    ):
        return
    try:
        suite.backend  # noqa: B018 - connects and checks access on first use
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist the controller collects nothing: with ``--backend kubernetes`` it checks first.

    The same checks as :func:`pytest_collection_finish`, before any worker starts (a worker's usage error
    would read as its crash).
    """
    config = session.config
    suite = config.stash.get(_SUITE, None)
    if suite is None or hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("dsession"):
        return
    if suite.backend_name != "kubernetes" or suite.options.sources.get("backend") == "default":
        return
    from rollcall.backends.kubernetes.backend import KubernetesBackend

    try:
        KubernetesBackend.check(suite.options).close()
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def _terminal_writer(config: pytest.Config) -> Callable[[str], None]:
    """Write a progress line to the terminal now, past output capturing (as live logging does)."""

    def write(line: str) -> None:
        reporter = config.pluginmanager.getplugin("terminalreporter")
        capture = config.pluginmanager.getplugin("capturemanager")
        if reporter is None:
            return
        if capture is None:
            reporter.ensure_newline()
            reporter.write_line(line)
            return
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)

    return write


def _raise_on_sigterm() -> None:
    """Turn SIGTERM (what CI sends on cancel) into KeyboardInterrupt, so clean-up in ``finally`` runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, handler)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say which backend runs and why."""
    suite = config.stash.get(_SUITE, None)
    return suite.header() if suite else None


@pytest.fixture(scope="session")
def rollcall_suite(pytestconfig: pytest.Config) -> Suite:
    """The session's suite."""
    return pytestconfig.stash[_SUITE]


@pytest.fixture
def rollcall(rollcall_suite: Suite, request: pytest.FixtureRequest) -> Iterator[Callable[..., TestRecord]]:
    """Run this test's training job; its figures go to the junit properties and the reports."""
    from rollcall.backends import DiscoveryError
    from rollcall.backends.slurm.backend import SlurmError
    from rollcall.reports import junit_properties

    def run(**overrides: Any) -> TestRecord:
        try:
            record = rollcall_suite.run(request.node.nodeid, request.node.name, **overrides)
        except (DiscoveryError, SlurmError) as exc:  # the cluster cannot run the job: say why, no traceback
            pytest.fail(f"{type(exc).__name__}: {exc}", pytrace=False)
        request.node.user_properties.extend(junit_properties(record))
        return record

    yield run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """A table of every job run this session."""
    suite = config.stash.get(_SUITE, None)
    if not suite or not suite.records:
        return
    from rollcall.reports import perf_summary, summary_table
    from rollcall.verdict import Kind

    terminalreporter.section("rollcall")
    for line in summary_table(suite.records) + perf_summary(suite.records):
        terminalreporter.write_line(line)
    for record in suite.records:
        verdict = record.result.last.verdict
        if record.result.passed:
            continue
        for problem in verdict.of_kind(Kind.REPLICA_DIVERGENCE):  # a silent data corruption: the root cause
            terminalreporter.write_line(f"{record.test_id}: {problem.message}")
        if verdict.root_cause is not None:
            terminalreporter.write_line(f"{record.test_id}: {verdict.root_cause.headline()}")
    for line in config.stash.get(_NOTES, []):
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"reports: {suite.options.artifacts_dir}/")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write results.json and the per-rank junit file when any job ran."""
    suite = session.config.stash.get(_SUITE, None)
    if suite and not suite.records and not hasattr(session.config, "workerinput"):
        from rollcall.reports import merge_worker_results

        merge_worker_results(suite.options.artifacts_dir, since=suite.started)
    if not suite or not suite.records:
        return
    import time

    from rollcall.collect import RANKS_JUNIT_FILE, REPORT_FILE, RESULTS_FILE
    from rollcall.reports import write_rank_junit, write_results

    out = suite.options.artifacts_dir
    meta = {
        "backend": suite.backend_name,
        "backend_reason": suite.backend_reason,
        "started": suite.started,
        "finished": time.time(),
        "argv": sys.argv,
    }
    # Under pytest-xdist each worker writes files of its own; the controller merges the results.
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    tag = f".{worker}" if worker else ""
    write_results(out / _tagged(RESULTS_FILE, tag), suite.records, meta)
    write_rank_junit(out / _tagged(RANKS_JUNIT_FILE, tag), suite.records)
    from rollcall.htmlreport import write_report

    write_report(out / _tagged(REPORT_FILE, tag), suite.records, meta)
    notes = session.config.stash.setdefault(_NOTES, [])
    notes.append(f"html report: {out / REPORT_FILE}")
    if suite.options.write_baseline:
        from rollcall.baseline import BaselineError
        from rollcall.gate import write_baseline

        gates = [r.gate for r in suite.records if r.gate is not None]
        try:
            notes.extend(write_baseline(suite.options.write_baseline, gates))
        except (BaselineError, OSError) as exc:
            notes.append(f"--write-baseline: nothing written: {exc}")


def _tagged(name: str, tag: str) -> str:
    """``results.json`` with tag ``.gw0`` is ``results.gw0.json``."""
    stem, dot, ext = name.partition(".")
    return f"{stem}{tag}{dot}{ext}"
