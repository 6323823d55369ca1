"""Node facts on the local backend: real torchrun, gloo and BERT tiny on the CPU, 2 nodes x 1 rank, short.

Every rank reports its facts; results.json holds them per node, and ``--expect torch=0.0.*`` fails the run
naming each node and the torch it really runs.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rollcall.verdict import Kind

ROOT = Path(__file__).resolve().parents[2]
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "e2e"), "--backend", "local", *args]
    cmd += ["-p", "no:cacheprovider", "-q"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLCALL_")}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def test_each_nodes_facts_are_recorded_and_expect_fails_naming_the_real_version_and_node(tmp_path):
    artifacts = tmp_path / "artifacts"
    proc = _pytest(
        tmp_path,
        "--nodes",
        "2",
        "--procs-per-node",
        "1",
        "--job-timeout",
        "600",
        "--artifacts-dir",
        str(artifacts),
        "--workload-args",
        SHORT,
        "--expect",
        "torch=0.0.*",
        "--expect",
        "python=3.*",
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    for node in (0, 1):
        assert f"expectation not met: node {node} (" in output, output
    assert f"torch is {torch.__version__}, expected torch=0.0.* (--expect)" in output

    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    assert test["nodes"] == 2
    detail = test["nodes_detail"]
    assert [n["node"] for n in detail] == [0, 1]
    for n in detail:
        assert n["facts"]["torch"] == torch.__version__
        assert n["facts"]["python"].startswith("3.") and n["facts"]["kernel"] and n["facts"]["host"]
        assert n["unknown"]["nvml"] == "no NVML: device is cpu"
        assert n["devices"] == [] and n["verdict"] == "fit"
    assert {f["kind"] for f in test["findings"]} == {Kind.EXPECTATION.value}  # python=3.* matched
    assert test["failed_ranks"] == {} and test["unfit_nodes"] == []
    assert not (artifacts / "unfit-nodes.txt").exists()


def test_an_unknown_fitness_rule_is_a_usage_error_listing_the_rules(tmp_path):
    proc = _pytest(
        tmp_path, "--fitness-warn", "pcie_width,pcie_speed", "--artifacts-dir", str(tmp_path / "a")
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4, output
    assert "unknown rule(s) pcie_speed; the rules are ecc_volatile, ecc_aggregate" in output
    assert not (tmp_path / "a").exists()
