"""The hooks a site's own pytest plugin implements: checks of its own, and reports of its own.

pytest learns them from :func:`rollcall.plugin.pytest_addhooks`. A plugin (an installed package's ``pytest11``
entry point, ``-p module``, or the rootdir's ``conftest.py``: a plugin pytest has loaded when it configures
the session) implements either or both; ``docs/extending.md`` is the contract, ``examples/site-check/`` a
plugin that meets it.

- :func:`pytest_rollcall_checks`: called once per session (each pytest-xdist worker calls it too), while
  rollcall configures it. What a plugin returns is held to the contract of a site check
  (:func:`rollcall.judge.site_checks`); anything else stops the session as a usage error naming the plugin,
  what is wrong and the fix (exit 4). Every attempt of every test is then judged by the built-in checks and
  then the site's (:attr:`rollcall.suite.Suite.checks`).
- :func:`pytest_rollcall_report`: called at the session's end, once per test that ran a job, with its
  deciding verdict, after rollcall's own reports are written. A report that raises is named, and fails the
  session as a report rollcall could not write does (exit 1).

rollcall calls each plugin's implementation on its own (:func:`gather_checks`, :func:`write_reports`), so
that a message names the plugin; an implementation must be a plain hook, not a wrapper.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pluggy import HookImpl

    from rollcall.checks.runview import Check
    from rollcall.judge import SiteCheck
    from rollcall.reports import TestRecord
    from rollcall.verdict import Verdict


@pytest.hookspec
def pytest_rollcall_checks(config: pytest.Config) -> Iterable[Check] | None:
    """The site's own checks: :class:`~rollcall.checks.runview.Check` declarations, or None for none.

    Each is a predicate over the run (:class:`~rollcall.checks.runview.RunView`, the evidence every built-in
    check reads) named after what it checks, what it detects and reads, and the kinds of problem it raises
    (:class:`~rollcall.verdict.Kind`: a name of its own, the state of a rank it names, and whose it is).
    """


@pytest.hookspec
def pytest_rollcall_report(
    config: pytest.Config, test_id: str, verdict: Verdict, record: TestRecord, artifacts_dir: Path
) -> None:
    """Write a report of the site's own from one test's deciding ``verdict`` (``record``: all its attempts).

    ``artifacts_dir`` is where rollcall's own reports lie (``--artifacts-dir``); under pytest-xdist each
    worker calls it for the tests it ran.
    """


def _implementations(config: pytest.Config, name: str) -> list[HookImpl]:
    """The plugins' implementations of hook ``name``; a wrapper among them is a usage error."""
    impls: list[HookImpl] = getattr(config.hook, name).get_hookimpls()
    for impl in impls:
        if impl.hookwrapper or impl.wrapper:
            raise pytest.UsageError(
                f"plugin {impl.plugin_name}: {name} is a hook wrapper; implement it as a plain hook"
            )
    return impls


def _call(impl: HookImpl, given: dict[str, Any]) -> object:
    """``impl`` called with the arguments it names (as pluggy calls a hook)."""
    return impl.function(*(given[a] for a in impl.argnames))


def gather_checks(config: pytest.Config) -> tuple[SiteCheck, ...]:
    """Every plugin's site checks, held to their contract; else a usage error naming the plugin (exit 4)."""
    from rollcall.judge import SiteCheckError, site_checks

    returned: list[tuple[str, object]] = []
    for impl in _implementations(config, "pytest_rollcall_checks"):  # in the order the plugins registered
        try:
            returned.append((impl.plugin_name, _call(impl, {"config": config})))
        except pytest.UsageError:
            raise
        except Exception as exc:
            raise pytest.UsageError(
                f"plugin {impl.plugin_name}: pytest_rollcall_checks raised {type(exc).__name__}: {exc}"
            ) from exc
    try:
        return site_checks(returned)
    except SiteCheckError as exc:
        raise pytest.UsageError(str(exc)) from None


def write_reports(config: pytest.Config, records: Sequence[TestRecord], artifacts_dir: Path) -> list[str]:
    """Call every plugin's report hook for each of ``records``; what each one that raised said, by plugin."""
    failed: list[str] = []
    impls = _implementations(config, "pytest_rollcall_report")
    for record in records:
        given = {
            "config": config,
            "test_id": record.test_id,
            "verdict": record.result.last.verdict,
            "record": record,
            "artifacts_dir": artifacts_dir,
        }
        for impl in impls:
            try:
                _call(impl, given)
            except Exception as exc:  # the site's report is lost, not rollcall's, nor the session's end
                failed.append(
                    f"plugin {impl.plugin_name}'s report of {record.test_id}: {type(exc).__name__}: {exc}"
                )
    return failed


__all__ = ["gather_checks", "pytest_rollcall_checks", "pytest_rollcall_report", "write_reports"]
