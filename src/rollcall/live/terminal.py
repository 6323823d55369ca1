"""The live roll call and progress lines on pytest's terminal, past output capturing (the plugin's view)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import pytest

from rollcall.live.view import LiveRollCall


def terminal_writer(config: pytest.Config) -> Callable[[str], None]:
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


class LiveLine:
    """The live roll call through the terminal reporter, past output capturing.

    On a terminal one line is rewritten as it changes; otherwise a plain line is written every ``every``
    seconds. The state when the job ended is always written, as a line of its own.
    """

    def __init__(self, config: pytest.Config, every: float) -> None:
        self.config = config
        self.every = every
        self.shown: str | None = None
        self.last = -math.inf

    def _write(self, line: str, *, final: bool) -> None:
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        if reporter is None:
            return
        capture = self.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if reporter.isatty():
                if self.shown is None:
                    reporter.ensure_newline()
                reporter.rewrite(line, erase=True)
                if final:
                    reporter.write("\n")
            else:
                reporter.ensure_newline()
                reporter.write_line(line)
        self.shown = None if final else line
        self.last = time.monotonic()

    def update(self, live: LiveRollCall) -> None:
        """Rewrite the line (a terminal) or write it when ``every`` seconds have passed."""
        line = live.line()
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        tty = reporter is not None and reporter.isatty()
        if (tty and line != self.shown) or (not tty and time.monotonic() - self.last >= self.every):
            self._write(line, final=False)

    def finish(self, live: LiveRollCall) -> None:
        """The roll call when the job ended."""
        self._write(live.line(), final=True)
        self.last = -math.inf
