"""The fixtures' own clean-up: an interrupted script still cleans up; what dead sessions left is found."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests import children
from tests.cluster.conftest import SESSION_PREFIXES, dead_sessions_clusters
from tests.waiting import wait_until

SCRIPT = """
trap 'echo cleaned > "$1/cleaned"; exit 1' TERM INT
echo started > "$1/started"
while :; do sleep 0.1; done
"""


def test_an_interrupted_script_runs_its_own_clean_up_before_the_interrupt_goes_on(tmp_path):
    def interrupt_once_started() -> None:
        wait_until("the script to start", (tmp_path / "started").exists, timeout=60)
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C reaches pytest

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with children.ctrl_c_raises(), pytest.raises(KeyboardInterrupt):
        children.run(["bash", "-c", SCRIPT, "script", str(tmp_path)], timeout=120)
    assert (tmp_path / "cleaned").read_text() == "cleaned\n"  # its trap ran: it was not killed outright


def test_a_script_past_its_timeout_is_killed_and_the_timeout_raised(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(["bash", "-c", "exec sleep 60"], timeout=0.5)


def test_the_clusters_of_sessions_that_are_gone_are_found_and_no_other(tmp_path):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)
    names = [f"{p}{dead}" for p in SESSION_PREFIXES] + [
        f"{SESSION_PREFIXES[0]}{os.getpid()}",  # this session's own: alive
        "rollcall",  # a cluster a person started: never touched
        f"{SESSION_PREFIXES[0]}not-a-pid",
    ]
    for name in names:
        (tmp_path / name).mkdir()
    assert dead_sessions_clusters(tmp_path) == sorted(f"{p}{dead}" for p in SESSION_PREFIXES)


def test_a_missing_state_root_means_nothing_to_reclaim(tmp_path):
    assert dead_sessions_clusters(tmp_path / "none") == []
    assert not Path(tmp_path / "none").exists()
