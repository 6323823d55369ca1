"""Device facts and node fitness: the workload's NVML reading (a fake ``pynvml`` at the boundary), their parsing,
the options that steer the unfit_device, config_drift and expectations checks (whose own tests are under
tests/unit/checks/), and the reports."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from rollcall import nodeverdicts, reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.config_drift import CONFIG_DRIFT
from rollcall.checks.expectations import EXPECTATION
from rollcall.evidence.fitness import RULE_NAMES
from rollcall.evidence.nodefacts import node_facts
from rollcall.gate import criteria_of
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.options import DEFAULTS, OptionError, resolve
from rollcall.page import report as htmlreport
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, RunResult
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank import facts as workload_facts
from tests.unit.sampled import held_line

from .helpers import event, rank_lines


class NVMLError(Exception):
    """What pynvml raises for a query the device does not answer."""


def fake_nvml(**over: Any) -> SimpleNamespace:
    """A ``pynvml`` module whose one healthy H200 answers every query; ``over`` replaces answers.

    A value that is an exception is raised by its query instead.
    """
    answers: dict[str, Any] = {
        "driver": "580.159.04",
        "cuda": 13000,
        "index": 3,
        "name": "NVIDIA H200",
        "uuid": "GPU-5f0c3e2a-0000-1111-2222-333344445555",
        "serial": "1654123456789",
        "memory": 150_000 << 20,
        "gen": 5,
        "gen_max": 5,
        "width": 16,
        "width_max": 16,
        "ecc_volatile": 0,
        "ecc_aggregate": 0,
        "remapped": (0, 0, 0, 0),
        "retired_pending": 0,
        "events": 0,
        "sm": 1980,
        "sm_max": 1980,
        "power": 700_000,
        "power_default": 700_000,
        "temperature": 41,
        "count": 8,
        "used": 0,
        "compute": [],
        "graphics": [],
        **over,
    }
    calls: list[str] = []

    def answer(key: str) -> Any:
        def query(*args: Any) -> Any:
            calls.append(key)
            value = answers[key]
            if isinstance(value, Exception):
                raise value
            return value

        return query

    def ecc(handle: Any, error_type: int, counter: int) -> Any:
        assert error_type == 1  # uncorrected
        return answer("ecc_volatile" if counter == 0 else "ecc_aggregate")()

    return SimpleNamespace(
        NVMLError=NVMLError,
        calls=calls,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=answer("driver"),
        nvmlSystemGetCudaDriverVersion=answer("cuda"),
        nvmlDeviceGetCount=answer("count"),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("handle", u),
        nvmlDeviceGetIndex=answer("index"),
        nvmlDeviceGetName=answer("name"),
        nvmlDeviceGetUUID=answer("uuid"),
        nvmlDeviceGetSerial=answer("serial"),
        nvmlMemory_v2=0x02000028,
        nvmlDeviceGetMemoryInfo=lambda h, version=None: SimpleNamespace(
            total=answer("memory")(), used=answer("used")()
        ),
        nvmlDeviceGetComputeRunningProcesses=answer("compute"),
        nvmlDeviceGetGraphicsRunningProcesses=answer("graphics"),
        nvmlDeviceGetCurrPcieLinkGeneration=answer("gen"),
        nvmlDeviceGetMaxPcieLinkGeneration=answer("gen_max"),
        nvmlDeviceGetCurrPcieLinkWidth=answer("width"),
        nvmlDeviceGetMaxPcieLinkWidth=answer("width_max"),
        nvmlDeviceGetTotalEccErrors=ecc,
        nvmlDeviceGetRemappedRows=answer("remapped"),
        nvmlDeviceGetRetiredPagesPendingStatus=answer("retired_pending"),
        nvmlDeviceGetCurrentClocksEventReasons=answer("events"),
        nvmlDeviceGetClockInfo=lambda h, clock: answer("sm")(),
        nvmlDeviceGetMaxClockInfo=lambda h, clock: answer("sm_max")(),
        nvmlDeviceGetEnforcedPowerLimit=answer("power"),
        nvmlDeviceGetPowerManagementDefaultLimit=answer("power_default"),
        nvmlDeviceGetTemperature=lambda h, sensor: answer("temperature")(),
    )


def facts_of(nvml: SimpleNamespace) -> dict[str, Any]:
    """The ``facts`` fields the workload reads on cuda through ``nvml``, its memory in use read first."""
    held = workload_facts.held_before_context(0, nvml_loader=lambda: nvml)
    return workload_facts.device_facts("cuda", 0, nvml_loader=lambda: nvml, held=held)


def roll_with(
    per_rank: dict[int, dict[str, Any]], nodes: int = 2, ppn: int = 1, sampled: bool = True
) -> RollCall:
    """A whole roll call whose ranks also report ``facts`` (by rank), through the workload's own encoder.

    ``sampled``: each rank that read a GPU also says its ``samples`` after the timed epochs, as the workload
    on cuda does, every read holding its one reading (tests/unit/sampled.py).
    """
    world = nodes * ppn
    text = []
    for r in range(world):
        text += rank_lines(r, world, ppn)
        if r in per_rank:
            text.append(contract.encode_event("facts", r, world, **per_rank[r]).decode().rstrip("\n"))
            if sampled and "gpu_uuid" in per_rank[r]:
                text.append(held_line(r, world, per_rank[r]))
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed(("\n".join(text) + "\n").encode())
    parser.close()
    return roll


def verdict_of(roll: RollCall, nodes: int = 2, ppn: int = 1, **criteria: Any):
    spec = JobSpec("job", nodes, ppn, accelerator="nvidia")
    observed = Observed(roll, Layout(nodes, ppn), JobStatus(JobState.SUCCEEDED), spec)
    return judge(observed, replace(criteria_of(DEFAULTS), **criteria))


# ---------------------------------------------------------------- the workload's reading


def test_a_healthy_gpu_reads_every_fact_and_none_unknown():
    nvml = fake_nvml()
    facts = facts_of(nvml)
    assert facts["unknown"] == {}
    assert facts["driver"] == "580.159.04" and facts["cuda_driver"] == "13.0"
    assert (facts["pcie_gen"], facts["pcie_gen_max"], facts["pcie_width"], facts["pcie_width_max"]) == (
        5,
        5,
        16,
        16,
    )
    assert facts["remapped_pending"] is False and facts["remapped_failure"] is False
    assert facts["power_limit_w"] == 700.0 and facts["memory_mib"] == 150_000
    assert facts["clock_events"] == [] and facts["gpu_uuid"].startswith("GPU-")
    assert "shutdown" in nvml.calls
    assert len(contract.encode_event("facts", 0, 1, **facts)) < contract.MAX_LINE_BYTES


def test_a_fact_nvml_cannot_read_is_unknown_with_the_reason_never_healthy():
    facts = facts_of(
        fake_nvml(retired_pending=NVMLError("Not Supported"), remapped=NVMLError("Unknown Error"))
    )
    assert "retired_pending" not in facts and facts["unknown"]["retired_pending"] == "Not Supported"
    assert facts["unknown"]["remapped_pending"] == facts["unknown"]["remapped_failure"] == "Unknown Error"
    nodes = node_facts(roll_with({0: facts}).ranks, lambda r: r)
    assert nodes[0].why_unknown("retired_pending") == "Not Supported"


def test_without_nvml_or_a_gpu_the_facts_say_why():
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    on_cuda = workload_facts.device_facts("cuda", 0, nvml_loader=missing)
    assert on_cuda["unknown"]["nvml"] == "no NVML: ImportError: No module named 'pynvml'"
    assert "driver" not in on_cuda
    on_cpu = workload_facts.device_facts("cpu")
    assert on_cpu["unknown"] == {"nvml": "no NVML: device is cpu"}
    assert on_cpu["python"] and on_cpu["kernel"] and on_cpu["torch"]


def test_a_gpu_that_answers_nothing_still_fits_one_line():
    lost = NVMLError("GPU is lost: " + "the device fell off the bus and no query reaches it any more " * 3)
    every = ("cuda", "index", "name", "uuid", "serial", "memory", "gen", "gen_max", "width", "width_max")
    every += ("ecc_volatile", "ecc_aggregate", "remapped", "retired_pending", "events", "sm", "sm_max")
    facts = facts_of(fake_nvml(**dict.fromkeys((*every, "power", "power_default", "temperature"), lost)))
    assert len(facts["unknown"]) == 22 and all(v.startswith("GPU is lost") for v in facts["unknown"].values())
    assert all(
        len(v) == workload_facts.SHORT_REASON for v in facts["unknown"].values()
    )  # cut to keep the line whole
    assert len(contract.encode_event("facts", 1023, 1024, **facts)) < contract.MAX_LINE_BYTES


def test_on_xla_without_neuron_every_neuron_fact_is_unknown_with_why():
    facts = workload_facts.device_facts("xla")
    unknown = facts["unknown"]
    assert {"neuron_driver", "neuron_runtime", "neuron_compiler", "neuron_devices", "neuron_cores"} <= set(
        unknown
    )
    assert "libneuronxla" in unknown["neuron_runtime"] and "neuronx-cc" in unknown["neuron_compiler"]
    assert not any(k.startswith("neuron_") for k in facts if k != "unknown")


def test_clock_event_bits_are_named():
    facts = facts_of(fake_nvml(events=0x8 | 0x40 | 0x80 | 0x1))
    assert facts["clock_events"] == ["gpu_idle", "hw_slowdown", "hw_thermal", "hw_power_brake"]


# ---------------------------------------------------------------- each rule names node, device, UUID, fact


UNHEALTHY = {  # rule: the fake's answer that breaks it, and the fact=value its message must name
    "ecc_volatile": ({"ecc_volatile": 2}, "ecc_volatile_uncorrected=2"),
    "ecc_aggregate": ({"ecc_aggregate": 7}, "ecc_aggregate_uncorrected=7"),
    "remapped_failure": ({"remapped": (0, 1, 0, 1)}, "remapped_failure=True"),
    "remapped_pending": ({"remapped": (0, 1, 1, 0)}, "remapped_pending=True"),
    "retired_pending": ({"retired_pending": 1}, "retired_pending=True"),
    "pcie_width": ({"width": 8}, "pcie_width=8 below its max 16"),
    "pcie_gen": ({"gen": 3}, "pcie_gen=3 below its max 5"),
    "hw_slowdown": ({"events": 0x8}, "clock_events=hw_slowdown"),
    "thermal": ({"events": 0x40}, "clock_events=hw_thermal"),
    "power_brake": ({"events": 0x80}, "clock_events=hw_power_brake"),
    "power_limit": ({"power": 500_000}, "power_limit_w=500.0 below its default 700.0"),
}


def test_every_rule_has_an_unhealthy_case():
    node_wide = {"device_count", "advertised_devices"}  # test_node_fitness.py
    node_wide |= {"hardware_ready", "lost_devices"}  # test_node_health.py
    neuron = {"neuron_ecc_uncorrected", "neuron_ecc_corrected"}  # test_neuron_counters.py
    warn_by_default = {"gpu_in_use"}  # test_gpu_in_use.py
    events = {"gpu_lost", "hardware_event"}  # the GPUs' events during the run: checks/test_gpu_events.py
    assert set(UNHEALTHY) | node_wide | neuron | warn_by_default | events == set(RULE_NAMES)


# ---------------------------------------------------------------- the options that steer the checks


def test_the_options_refuse_unknown_rules_and_keys_listing_the_known_ones():
    with pytest.raises(
        OptionError, match=r"--fitness-warn.*unknown rule\(s\) pcie_speed; the rules are ecc_volatile"
    ):
        resolve({"fitness_warn": ["pcie_speed"]}, environ={})
    with pytest.raises(OptionError, match=r"--fitness-off.*unknown rule"):
        resolve({}, environ={"ROLLCALL_FITNESS_OFF": "thermal,bogus"})
    with pytest.raises(OptionError, match=r"--expect.*unknown key 'torchh'; the keys are host, kernel"):
        resolve({"expect": ["torchh=2.*"]}, environ={})
    with pytest.raises(OptionError, match=r"--expect.*'torch' is not KEY=GLOB"):
        resolve({"expect": ["torch"]}, environ={})
    with pytest.raises(OptionError, match=r"--drift.*must be one of fail, warn, off"):
        resolve({"drift": "loud"}, environ={})
    options = resolve(
        {"fitness_warn": ["pcie_width,thermal", "power_limit"], "expect": ["torch=2.*"]}, environ={}
    )
    assert options.judging.fitness_warn == {"pcie_width", "thermal", "power_limit"}
    assert criteria_of(options).expect == (("torch", "2.*"),) and criteria_of(options).drift == "warn"


# ---------------------------------------------------------------- parsing and the reports


def test_the_facts_event_is_parsed_whole_and_a_malformed_unknown_dropped():
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed(
        (
            event("facts", 0, 2, host="h", driver="580", unknown={"retired_pending": "Not Supported"}) + "\n"
        ).encode()
    )
    parser.feed((event("facts", 1, 2, host="g", unknown=["not", "a", "mapping"]) + "\n").encode())
    parser.close()
    assert roll.ranks[0].facts == {"host": "h", "driver": "580"}
    assert roll.ranks[0].unknown == {"retired_pending": "Not Supported"}
    assert roll.ranks[1].facts == {"host": "g"} and roll.ranks[1].unknown == {}
    assert roll.records == 2


def test_results_json_the_page_and_junit_carry_each_nodes_facts_and_unfit_nodes_txt_lists_the_unfit(tmp_path):
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml(ecc_volatile=4))})
    spec = JobSpec("job", 2, 1, accelerator="nvidia")
    verdict = verdict_of(roll)
    attempt = Attempt(spec, JobStatus(JobState.SUCCEEDED), verdict, tmp_path, 1.0)
    record = reports.TestRecord("t.py::test_x", RunResult("local", [attempt]), "nvidia")
    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert test["nodes"] == 2
    detail = test["nodes_detail"]
    assert [(n["node"], n["name"], n["verdict"]) for n in detail] == [(0, "n0", "fit"), (1, "n1", "unfit")]
    assert detail[1]["facts"]["driver"] == "580.159.04"
    assert detail[1]["devices"][0]["ecc_volatile_uncorrected"] == 4
    assert "ecc_volatile_uncorrected=4" in detail[1]["reasons"][0]
    assert test["unfit_nodes"] == ["n1"]
    props = dict(reports.junit_properties(record))
    assert (
        props["node_1_driver"] == "580.159.04"
        and props["unfit_nodes"] == "n1"
        and props["unfit_devices"] == "1"
    )
    page = htmlreport.render([record], {"backend": "local"}, tmp_path)
    assert "<h3>Node facts</h3>" in page and "580.159.04" in page and ">unfit<" in page
    nodes, breaker = nodeverdicts.of_records([record], 3600.0)
    assert not breaker.tripped and breaker.unfit == ("n1",)
    assert nodeverdicts.write_unfit_nodes(tmp_path / "unfit-nodes.txt", nodes)
    assert (tmp_path / "unfit-nodes.txt").read_text() == "n1\n"
    healthy = replace(attempt, verdict=verdict_of(roll_with({0: facts_of(fake_nvml())})))
    fit = reports.TestRecord("t.py::test_y", RunResult("local", [healthy]), "nvidia")
    fit_nodes, _ = nodeverdicts.of_records([fit], 3600.0)
    assert (
        not nodeverdicts.write_unfit_nodes(tmp_path / "none.txt", fit_nodes)
        and not (tmp_path / "none.txt").exists()
    )


def test_the_backends_observed_node_facts_join_the_ranks_own():
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    spec = JobSpec("job", 2, 1, accelerator="nvidia")
    observed = {"n0": {"kubelet": "v1.34.1"}, "n1": {"kubelet": "v1.33.5"}}
    status = JobStatus(JobState.SUCCEEDED, node_info=observed)
    verdict = judge(Observed(roll, Layout(2, 1), status, spec), Criteria(drift="fail"))
    assert verdict.nodes_detail[0].facts["kubelet"] == "v1.34.1"
    assert [p.message for p in verdict.of_kind(CONFIG_DRIFT)] == [
        "config drift: kubelet differs between nodes: v1.33.5 (node 1); v1.34.1 (node 0)"
    ]


#: What one H200 reported through NVML (``device_facts`` with work queued; bench/NOTES.md), as a rank sends it.
H200 = {
    "host": "vm",
    "kernel": "6.18.44-fc-v973-gpu",
    "os": "Ubuntu 24.04.3 LTS",
    "python": "3.12.3",
    "torch": "2.11.0+cu130",
    "transformers": "5.17.0",
    "nccl": "2.28.9",
    "driver": "580.159.04",
    "cuda_driver": "13.0",
    "device_index": 0,
    "gpu_name": "NVIDIA H200",
    "gpu_uuid": "GPU-51eab044-212d-ab30-73f0-9994fc217c82",
    "gpu_serial": "1653924089931",
    "memory_mib": 143771,
    "pcie_gen": 5,
    "pcie_gen_max": 5,
    "pcie_width": 16,
    "pcie_width_max": 16,
    "ecc_volatile_uncorrected": 0,
    "ecc_aggregate_uncorrected": 0,
    "remapped_pending": False,
    "remapped_failure": False,
    "clock_events": [],
    "sm_clock_mhz": 1755,
    "sm_clock_max_mhz": 1980,
    "power_limit_w": 700.0,
    "power_default_w": 700.0,
    "temperature_c": 39,
    "unknown": {"retired_pending": "Not Supported"},
}


def test_a_real_h200s_reading_passes_every_rule_and_keeps_what_it_could_not_read():
    verdict = verdict_of(roll_with({0: H200, 1: H200}), expect=(("driver", "580.*"), ("gpu_name", "*H200*")))
    assert verdict.passed and verdict.warnings == ()
    [device] = verdict.nodes_detail[0].devices
    assert device.unknown == {"retired_pending": "Not Supported"}
    assert verdict.node_verdicts()[0]["verdict"] == "fit"
    with_retired = replace(verdict.criteria, expect=(("retired_pending", "False"),))
    again = judge(Observed(roll_with({0: H200, 1: H200}), Layout(2, 1)), with_retired)
    messages = [p.message for p in again.of_kind(EXPECTATION)]
    assert len(messages) == 2 and messages[0].endswith(
        "retired_pending unknown (Not Supported), expected retired_pending=False (--expect)"
    )
