"""Node facts on the local backend: real torchrun, gloo and BERT tiny on the CPU, 2 nodes x 1 rank, short.

Every rank reports its facts; results.json holds them per node, and ``--expect torch=0.0.*`` fails the run
naming each node and the torch it really runs, as the same line in an ``--expect-file`` does: the platform's,
no node unfit in nodes.json. A fact of the nodes' own that every node misses trips the breaker.
"""

import json
from pathlib import Path

import torch

from rollcall.checks.expectations import EXPECTATION
from tests.local import e2e

ROOT = Path(__file__).resolve().parents[2]
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"


def test_each_nodes_facts_are_recorded_and_expect_fails_naming_the_real_version_and_node(tmp_path):
    proc = e2e.roll_call(
        tmp_path, SHORT, "--expect", "torch=0.0.*", "--expect", "python=3.*", procs_per_node=1
    )
    artifacts, output = proc.artifacts, proc.output
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
    assert {f["kind"] for f in test["findings"]} == {EXPECTATION.value}  # python=3.* matched
    assert test["failed_ranks"] == {} and test["unfit_nodes"] == []
    assert not (artifacts / "unfit-nodes.txt").exists()
    # torch is what the run brought: the platform's, and no node is taken out for it
    assert test["root_cause"]["owner"] == "platform", test["root_cause"]
    nodes = json.loads((artifacts / "nodes.json").read_text())
    assert nodes["schema_version"] == 2 and nodes["breaker"]["tripped"] is False
    assert [(n["verdict"], n["owner"]) for n in nodes["nodes"]] == [("undetermined", "platform")] * 2, nodes
    assert all(any("torch is" in r for r in n["reasons"]) for n in nodes["nodes"]), nodes


def test_a_fact_of_the_nodes_own_that_every_node_misses_trips_the_breaker_and_marks_none(tmp_path):
    """The local nodes share one host: a kernel every node misses is a shared cause, not each node's own."""
    proc = e2e.roll_call(tmp_path, SHORT, "--expect", "kernel=0.0.*", procs_per_node=1)
    artifacts, output = proc.artifacts, proc.output
    assert proc.returncode == 1, output
    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    assert test["root_cause"]["owner"] == "cluster", test["root_cause"]  # the node's own fact
    assert len(test["unfit_nodes"]) == 2  # the run's own finding: each node misses it
    nodes = json.loads((artifacts / "nodes.json").read_text())
    breaker = nodes["breaker"]
    assert breaker["tripped"] is True and breaker["bound"] == 1, breaker  # auto: 10% of 2 nodes, at least 1
    assert json.loads((artifacts / "results.json").read_text())["breaker"] == breaker  # every report agrees
    assert breaker["common"].startswith("--expect kernel, on 2 of the 2"), breaker
    assert [(n["verdict"], n["owner"]) for n in nodes["nodes"]] == [("undetermined", "undetermined")] * 2
    assert all(n["reasons"][0].startswith("breaker: 2 of 2 nodes found unfit") for n in nodes["nodes"])
    assert not (artifacts / "unfit-nodes.txt").exists()
    assert "the cause looks shared (--expect kernel, on 2 of the 2); no node marked" in output, output


def test_an_unknown_fitness_rule_is_a_usage_error_listing_the_rules(tmp_path):
    proc = e2e.roll_call(tmp_path, SHORT, "--fitness-warn", "pcie_width,pcie_speed", artifacts=tmp_path / "a")
    output = proc.output
    assert proc.returncode == 4, output
    assert "unknown rule(s) pcie_speed; the rules are ecc_volatile, ecc_aggregate" in output
    assert not (tmp_path / "a").exists()


def test_expect_file_holds_the_nodes_to_its_lines_naming_the_real_version(tmp_path):
    golden = tmp_path / "golden.expect"
    golden.write_text("# the node image under test\n\npython=3.*\ntorch=0.0.*  # no torch is this old\n")
    proc = e2e.roll_call(tmp_path, SHORT, "--expect-file", str(golden), procs_per_node=1)
    output = proc.output
    assert proc.returncode == 1, output
    for node in (0, 1):
        assert f"expectation not met: node {node} (" in output, output
    assert f"torch is {torch.__version__}, expected torch=0.0.* (--expect)" in output
    assert "python is" not in output  # python=3.* matched
