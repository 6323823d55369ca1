"""The bad node isolated: ``pytest tests/e2e --isolate`` on the local backend, 4 simulated nodes x 1 rank.

The roll call measures only the world's bus bandwidth (``--bandwidth-scopes world``), so a slow node makes the
world slow and no problem names a node; ``--isolate`` then re-runs the bandwidth phase alone on halves of
the nodes. ``ROLLCALL_SLOW_LINK=2:1000`` delays node 2's part of each timed all-reduce by a second, against a
few milliseconds that a 1 MiB all-reduce over gloo takes here (under 0.01 GB/s against about 0.1 and more),
so ``--min-busbw 0.01`` fails every group that holds node 2 and no other. The trials' node ranks are
renumbered; ``ROLLCALL_NODE_IDS`` keeps naming node 2 as the world's node 2.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(700)]

ROOT = Path(__file__).resolve().parents[2]
SHORT = (
    "--warmup-steps 1 --epochs 1 --steps-per-epoch 1 --compute-steps 0 "
    "--bandwidth-scopes world --bandwidth-mb 1 --bandwidth-iters 3"
)


def test_a_slow_node_in_a_slow_world_is_isolated_alone(tmp_path):
    artifacts = tmp_path / "artifacts"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "tests" / "e2e"),
        "--backend",
        "local",
        "--nodes",
        "4",
        "--procs-per-node",
        "1",
        "--job-timeout",
        "300",
        "--artifacts-dir",
        str(artifacts),
        "--workload-args",
        SHORT,
        "--workload-env",
        "ROLLCALL_SLOW_LINK=2:1000",
        "--min-busbw",
        "0.01",
        "--straggler-ratio",
        "0",
        "--isolate",
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLCALL_")}
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    # the world was slow, and nothing in the roll call named a node
    assert [s["scope"] for s in test["perf"]["slow_links"]] == ["world"], output
    isolation = test["isolation"]
    assert isolation["ran"] is True, isolation
    assert isolation["suspects"] == [{"nodes": [2], "why": "fails alone"}], isolation
    runs = isolation["runs"]
    assert len(runs) <= 4, runs  # 2 log2(4)
    # every run holding node 2 failed, every other passed
    assert all(r["failed"] == (2 in r["nodes"]) for r in runs), runs
    assert "isolated in " in output and "node 2 (fails alone)" in output, output
    assert sorted(test["failed_ranks"]) == ["2"], test["failed_ranks"]
    print(f"wall time {wall:.1f}s for the roll call and {len(runs)} trial(s)")
