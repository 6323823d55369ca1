"""The bad node isolated: ``pytest tests/e2e --isolate`` on the local backend, 4 simulated nodes x 1 rank.

The roll call measures only the world's bus bandwidth (``--bandwidth-scopes world``), so a slow node makes the
world slow and no problem names a node; ``--isolate`` then re-runs the bandwidth phase alone on halves of
the nodes. ``ROLLCALL_SLOW_LINK=2:1000`` delays node 2's part of each timed all-reduce by a second, against a
few milliseconds that a 1 MiB all-reduce over gloo takes here (under 0.01 GB/s against about 0.1 and more),
so ``--min-busbw 0.01`` fails every group that holds node 2 and no other. The trials' node ranks are
renumbered; ``ROLLCALL_NODE_IDS`` keeps naming node 2 as the world's node 2.
"""

import json
import time
from pathlib import Path

import pytest

from tests.local import e2e

pytestmark = [pytest.mark.slow, pytest.mark.timeout(700)]

ROOT = Path(__file__).resolve().parents[2]
SHORT = (
    "--warmup-steps 1 --epochs 1 --steps-per-epoch 1 --compute-steps 0 "
    "--bandwidth-scopes world --bandwidth-mb 1 --bandwidth-iters 3"
)


def test_a_slow_node_in_a_slow_world_is_isolated_alone(tmp_path):
    started = time.monotonic()
    proc = e2e.roll_call(
        tmp_path,
        SHORT,
        "--min-busbw",
        "0.01",
        "--straggler-ratio",
        "0",
        "--isolate",
        workload_env=("ROLLCALL_SLOW_LINK=2:1000",),
        nodes=4,
        procs_per_node=1,
        job_timeout=300,
    )
    wall = time.monotonic() - started
    artifacts, output = proc.artifacts, proc.output
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
