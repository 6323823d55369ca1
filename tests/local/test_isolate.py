"""The bad node isolated: ``pytest tests/e2e --isolate`` on the local backend, 4 simulated nodes x 1 rank.

The roll call measures only the world's bus bandwidth (``--bandwidth-scopes world``), so a slow node makes the
world slow and no problem names a node; ``--isolate`` then re-runs the bandwidth phase alone on halves of
the nodes. ``ROLLCALL_SLOW_LINK=2:1000`` delays node 2's part of each timed all-reduce by a second, against a
few milliseconds that a 1 MiB all-reduce over gloo takes here (under 0.01 GB/s against about 0.1 and more),
so ``--min-busbw 0.01`` fails every group that holds node 2 and no other. The trials' node ranks are
renumbered; ``ROLLCALL_NODE_IDS`` keeps naming node 2 as the world's node 2.

``ROLLCALL_HANG_NODE=2`` stops node 2's rank before rendezvous and before its watchdog starts: it says
nothing, the others wait for it, and the run times out naming no node. Each trial is bounded by
``--isolate-timeout``; one holding node 2 runs into it and fails, as its group.
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


def test_a_node_hung_before_rendezvous_is_isolated_alone_each_trial_bounded(tmp_path):
    bound = 45  # a passing trial of two nodes took 5-19 s here on 2 shared cores
    started = time.monotonic()
    proc = e2e.roll_call(
        tmp_path,
        SHORT,
        "--straggler-ratio",
        "0",
        "--isolate",
        "--isolate-timeout",
        str(bound),
        workload_env=("ROLLCALL_HANG_NODE=2",),
        nodes=4,
        procs_per_node=1,
        job_timeout=bound,
    )
    wall = time.monotonic() - started
    artifacts, output = proc.artifacts, proc.output
    assert proc.returncode == 1, output
    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    isolation = test["isolation"]
    assert isolation["ran"] is True, isolation  # the deciding run named no node
    assert isolation["suspects"] == [{"nodes": [2], "why": "fails alone"}], isolation
    assert isolation["suspect_nodes"] == [2] and 2 not in isolation["cleared"], isolation
    runs = isolation["runs"]
    assert 2 <= len(runs) <= 4, runs  # 2 log2(4)
    assert all(r["failed"] == (2 in r["nodes"]) for r in runs), runs
    for run in runs:
        if run["failed"]:  # ended at the bound: the hung node held the others at rendezvous
            assert run["evidence"].startswith(f"hung: still running at its {bound}s bound"), run
            assert "0 of 2 rank(s) past rendezvous" in run["evidence"], run
            assert bound <= run["duration_s"] < bound + 60, run
    assert "isolated in " in output and "node 2 (fails alone)" in output, output
    print(f"wall time {wall:.1f}s for the roll call and {len(runs)} trial(s)")
