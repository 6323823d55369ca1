"""``--compile-cache``: a second compiled run compiles from the first one's cache, and each rank says so.

The suite runs the roll call twice on the local backend (1 node x 1 rank, BERT tiny of the compact model's
code compiled by inductor on the CPU) with the same ``--compile-cache`` directory, empty at first. Each rank's ``throughput`` says what its
first step found in the cache: the first run compiles every graph afresh (``miss``), the second finds every
one (``hit``), and results.json reports it per rank beside the first step's seconds. A cold CPU compile on
shared cores takes minutes, so the test is slow.
"""

import json

import pytest

from tests.local import e2e

pytestmark = pytest.mark.slow

COMPILED = (
    "--model tiny --compile --seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 1"
)


def compile_cache_of(tmp_path, cache, run):
    """Run the roll call with ``cache`` as the compile cache; rank 0's compile-cache answer in results.json."""
    ran = e2e.roll_call(
        tmp_path,
        COMPILED,
        "--compile-cache",
        str(cache),
        "--straggler-ratio",
        "0",
        "--busbw-ratio",
        "0",
        nodes=1,
        procs_per_node=1,
        artifacts=tmp_path / f"artifacts-{run}",
        # the compact model's compiled regions (one graph for every layer): the real nodes' test compiles
        # the default model's (hf) through its pods; both here took CI's longest integration test to 275 s
    )
    assert ran.returncode == 0, ran.output
    test = json.loads((ran.artifacts / "results.json").read_text())["tests"][0]
    assert sorted(test["compile_cache"]) == ["0"], test["compile_cache"]
    return test["compile_cache"]["0"]


def test_the_second_run_compiles_from_the_first_runs_cache(tmp_path):
    cache = tmp_path / "compile-cache"
    first = compile_cache_of(tmp_path, cache, 1)
    assert first["state"] == "miss" and first["misses"] > 0 and first["hits"] == 0, first
    assert any((cache / "inductor").iterdir()), "inductor kept nothing under --compile-cache"
    second = compile_cache_of(tmp_path, cache, 2)
    assert second["state"] == "hit" and second["hits"] == first["misses"] and second["misses"] == 0, second
    assert first["compile_s"] > 0 and second["compile_s"] > 0
