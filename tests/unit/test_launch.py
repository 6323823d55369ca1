"""The launch wrapper on Kubernetes: the node's launch faults, then the launcher itself (exec)."""

from __future__ import annotations

import signal
import subprocess
import sys

from rollcall.jobspec import LAUNCH_MODULE
from rollcall_workload.node import launch
from rollcall_workload.node.launcher import is_launcher
from tests.waiting import wait_until

WRAP = [sys.executable, "-m", LAUNCH_MODULE]


def test_the_suite_names_the_wrapper_the_workload_declares():
    assert LAUNCH_MODULE == launch.MODULE


def test_the_wrapper_becomes_the_launcher_and_is_never_taken_for_it():
    code = "import os; print(os.getpid())"
    out = subprocess.run(
        [*WRAP, "--node-rank=1", "--", sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip().isdigit(), out
    assert not is_launcher([*WRAP, "--node-rank=1", "--", "torchrun", "--nnodes=2"])
    assert is_launcher(["/usr/bin/python3", "/venv/bin/torchrun", "--nnodes=2"])


def test_a_node_asked_to_launch_nothing_starts_nothing_and_ends_when_told(tmp_path):
    marker = tmp_path / "ran"
    env = {"ROLLCALL_NO_LAUNCH_NODE": "1", "PATH": "/usr/bin:/bin"}
    command = [*WRAP, "--node-rank=1", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = wait_until("its one line", proc.stderr.readline, timeout=60)
        assert line.strip() == "rollcall: node 1 starts no launcher as asked by ROLLCALL_NO_LAUNCH_NODE"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert not marker.exists()


def test_a_malformed_command_line_is_a_usage_error():
    out = subprocess.run([*WRAP, "torchrun"], capture_output=True, text=True, timeout=60)
    assert (
        out.returncode == 1
        and "usage: python -m rollcall_workload.node.launch --node-rank=N --" in out.stderr
    )
