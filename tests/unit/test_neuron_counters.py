"""The Neuron devices' hardware error counters, from neuron-monitor: the workload's reading and the rules
``neuron_ecc_uncorrected`` (unfit) and ``neuron_ecc_corrected`` (a warning).

No Neuron device is here. ``data/neuron-monitor-report.json`` is neuron-monitor's report as AWS publishes it:
the ``neuron_hw_counters``, ``instance_info`` and ``neuron_hardware_info`` samples of the Neuron Monitor User
Guide (aws-neuron/aws-neuron-sdk, ``tools/neuron-sys-tools/neuron-monitor-user-guide.rst``, "The JSON output
format" and "neuron_hw_counters"), put together in the structure the guide gives. ECC events on a Neuron
device cannot be produced here: the tests write counts into that sample. Running neuron-monitor is tested with
a stand-in executable that streams the sample as neuron-monitor does (one report a line, never ending).
"""

from __future__ import annotations

import copy
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.evidence.nodefacts import node_facts
from rollcall_workload import contract
from rollcall_workload.rank import facts as workload_facts
from rollcall_workload.rank.neuron import first_report, hw_counters, parse_hw_counters

from .test_fitness import roll_with, verdict_of
from .test_node_fitness import cut

SAMPLE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "neuron-monitor-report.json").read_text()
)


def with_counts(**by_device: dict[str, int]) -> dict[str, Any]:
    """The sample with these devices' counters (``d3={"mem_ecc_uncorrected": 2}``), device 0 as published."""
    report = copy.deepcopy(SAMPLE)
    devices = report["system_data"]["neuron_hw_counters"]["neuron_devices"]
    for name, counts in by_device.items():
        devices.append({**devices[0], "neuron_device_index": int(name.removeprefix("d")), **counts})
    return report


def test_the_published_sample_parses_to_each_devices_counters():
    assert parse_hw_counters(SAMPLE) == {
        "0": {
            "mem_ecc_corrected": 0,
            "mem_ecc_uncorrected": 0,
            "sram_ecc_uncorrected": 0,
            "sram_ecc_corrected": 0,
        }
    }
    assert set(parse_hw_counters(with_counts(d5={"sram_ecc_uncorrected": 1}))) == {"0", "5"}


def test_a_report_without_counters_or_with_neuron_monitors_error_says_why():
    broken = copy.deepcopy(SAMPLE)
    broken["system_data"]["neuron_hw_counters"]["error"] = "failed to read the driver's counters"
    with pytest.raises(LookupError, match="neuron-monitor: failed to read the driver's counters"):
        parse_hw_counters(broken)
    with pytest.raises(LookupError, match="holds no neuron_hw_counters"):
        parse_hw_counters({"system_data": {}})


def stand_in(tmp_path: Path, report: dict[str, Any]) -> Path:
    """An executable named neuron-monitor that streams ``report`` once a second, as neuron-monitor does."""
    line = json.dumps(report)
    script = tmp_path / "bin" / "neuron-monitor"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\nimport sys, time\nassert sys.argv[1] == '-c'\n"
        f"while True:\n    print({line!r}, flush=True)\n    time.sleep(1)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_neuron_monitor_is_run_once_its_first_report_read_and_it_is_ended(tmp_path):
    script = stand_in(tmp_path, with_counts(d1={"mem_ecc_uncorrected": 3}))
    found = hw_counters({"PATH": str(script.parent)}, timeout_s=30, bin_dir=str(tmp_path / "none"))
    assert found["1"]["mem_ecc_uncorrected"] == 3 and found["0"]["mem_ecc_uncorrected"] == 0


def test_a_monitor_that_says_nothing_times_out(tmp_path):
    with pytest.raises(TimeoutError, match=r"wrote no report within 0\.5 s"):
        first_report([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=0.5)


def test_without_neuron_monitor_the_facts_say_so_and_only_local_rank_0_reads_them(tmp_path):
    def absent() -> dict[str, dict[str, int]]:
        return hw_counters({"PATH": str(tmp_path)}, bin_dir=str(tmp_path / "none"))

    facts = workload_facts.device_facts("xla", 0, neuron_counters=absent)
    assert "neuron_hw_counters" not in facts
    said = f"no neuron-monitor on PATH or in {tmp_path / 'none'}"
    assert facts["unknown"]["neuron_hw_counters"] == cut(said)  # a long temporary path is cut

    def never() -> dict[str, dict[str, int]]:
        raise AssertionError("only local rank 0 runs neuron-monitor")

    assert "neuron_hw_counters" not in workload_facts.device_facts("xla", 3, neuron_counters=never)["unknown"]
    read = workload_facts.device_facts("xla", 0, neuron_counters=lambda: parse_hw_counters(SAMPLE))
    line = contract.encode_event("facts", 0, 1, **read)
    assert b'"neuron_hw_counters":{"0":{"mem_ecc_corrected":0' in line


# ---------------------------------------------------------------- the rules


def neuron_ranks(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Two trn nodes' local rank 0 facts: node 1's counters from ``report``, node 0's as published."""
    return {
        0: {"host": "n0", "neuron_hw_counters": parse_hw_counters(SAMPLE)},
        1: {"host": "n1", "neuron_hw_counters": parse_hw_counters(report)},
    }


def test_uncorrected_ecc_events_make_that_neuron_device_unfit():
    roll = roll_with(neuron_ranks(with_counts(d7={"mem_ecc_uncorrected": 2})))
    nodes = node_facts(roll.ranks, lambda r: r)
    assert [d.label for d in nodes[1].neuron_devices] == [
        "node 1 (n1) Neuron device 0",
        "node 1 (n1) Neuron device 7",
    ]
    verdict = verdict_of(roll)
    assert not verdict.passed and verdict.unfit_nodes == ["n1"]
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.message == (
        "unfit device: node 1 (n1) Neuron device 7: mem_ecc_uncorrected=2 above 0 (rule neuron_ecc_uncorrected)"
    )
    sram = verdict_of(roll_with(neuron_ranks(with_counts(d2={"sram_ecc_uncorrected": 1}))))
    assert "Neuron device 2: sram_ecc_uncorrected=1 above 0" in sram.of_kind(UNFIT_DEVICE)[0].message


def test_corrected_ecc_events_are_a_warning_and_can_be_made_to_fail():
    roll = roll_with(neuron_ranks(with_counts(d4={"sram_ecc_corrected": 9})))
    verdict = verdict_of(roll)
    assert verdict.passed and verdict.unfit_nodes == []
    [warning] = verdict.warnings
    assert "Neuron device 4: sram_ecc_corrected=9 above 0 (rule neuron_ecc_corrected)" in warning.message
    failed = verdict_of(roll, fitness=FitnessPolicy(fail=frozenset({"neuron_ecc_corrected"})))
    assert not failed.passed and failed.unfit_nodes == ["n1"]


def test_the_published_sample_is_healthy():
    assert verdict_of(roll_with(neuron_ranks(SAMPLE))).warnings == ()
