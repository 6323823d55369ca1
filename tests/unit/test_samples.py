"""The GPU sampled while the ranks train: the workload's sampler (a fake ``pynvml``), its ``samples`` event as the
suite keeps it, the held values a device's facts take from it, and the five rules that judge them."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import ONE_READING, RULES, unfit_devices
from rollcall.evidence.nodefacts import HELD_SHARE, node_facts, sampled_facts
from rollcall.gate import criteria_of
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.options import DEFAULTS
from rollcall.ranklog import RollCall, Sampled
from rollcall.verdict import Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank import samples as workload_samples
from rollcall_workload.rank.samples import DeviceSampler, report_samples, start_sampling

from .helpers import rank_lines
from .sampled import SAMPLES, held
from .test_fitness import facts_of, fake_nvml

#: The five rules the samples hold, and the one-reading facts that break each.
SAMPLED_RULES: dict[str, dict[str, Any]] = {
    "pcie_width": {"width": 8},
    "pcie_gen": {"gen": 3},
    "hw_slowdown": {"events": 0x8},
    "thermal": {"events": 0x40},
    "power_brake": {"events": 0x80},
}


def sequence_nvml(**answers: list[Any]) -> SimpleNamespace:
    """A ``pynvml`` whose sampled queries answer their list in turn (``events``, ``sm``, ``gen``, ``width``).

    An answer that is an exception is raised by its query instead; ``calls`` counts the queries.
    """
    series = {
        k: itertools.cycle(answers.get(k, [d]))
        for k, d in (("events", 0), ("sm", 1980), ("gen", 5), ("width", 16))
    }
    calls: list[str] = []

    def answer(key: str) -> Any:
        def query(*args: Any) -> Any:
            calls.append(key)
            value = next(series[key])
            if isinstance(value, Exception):
                raise value
            return value

        return query

    return SimpleNamespace(
        calls=calls,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("handle", u),
        nvmlDeviceGetCurrentClocksEventReasons=answer("events"),
        nvmlDeviceGetClockInfo=answer("sm"),
        nvmlDeviceGetCurrPcieLinkGeneration=answer("gen"),
        nvmlDeviceGetCurrPcieLinkWidth=answer("width"),
    )


class Clock:
    """Seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sampled(nvml: SimpleNamespace, reads: int) -> dict[str, Any]:
    """The ``samples`` fields after ``reads`` timed steps, one second apart."""
    clock = Clock()
    sampler = DeviceSampler(nvml, ("handle", 0), clock=clock)
    for _ in range(reads):
        sampler.tick()
        clock.now += 1.0
    fields = sampler.fields()
    assert fields is not None
    return fields


# ---------------------------------------------------------------- the workload's sampler


def test_the_sampler_summarises_each_reason_share_the_median_clock_and_the_links_extremes():
    nvml = sequence_nvml(events=[0x8 | 0x1] + [0x1] * 9, sm=[1980, 1200, 1980], gen=[3, 5], width=[16])
    fields = sampled(nvml, 10)
    assert fields["samples"] == 10 and fields["unknown"] == {}
    assert fields["clock_events_share"] == {"gpu_idle": 1.0, "hw_slowdown": 0.1}
    assert fields["sm_clock_mhz_median"] == 1980.0
    assert (fields["pcie_gen_min"], fields["pcie_gen_max"]) == (3, 5)
    assert (fields["pcie_width_min"], fields["pcie_width_max"]) == (16, 16)
    assert fields["span_s"] == 9.0 and fields["read_us"] >= 0
    assert nvml.calls.count("events") == 10  # one read of each quantity per sample
    assert contract.breaches("samples", {"event": "samples", "rank": 0, **fields}) == []


def test_the_sampler_reads_at_most_once_per_interval_and_names_a_query_that_fails():
    nvml = sequence_nvml(gen=[RuntimeError("Not Supported")])
    clock = Clock()
    sampler = DeviceSampler(nvml, ("handle", 0), interval_s=0.5, clock=clock)
    for _ in range(10):  # ten steps of 0.1 s: one read each 0.5 s
        sampler.tick()
        clock.now += 0.1
    fields = sampler.fields()
    assert fields is not None and fields["samples"] == 2
    assert fields["unknown"] == {"pcie_gen": "Not Supported"}
    assert fields["pcie_gen_min"] is None and fields["pcie_gen_max"] is None
    assert fields["clock_events_share"] == {}  # read, none active


def test_the_older_throttle_query_serves_where_the_clock_event_one_is_missing():
    nvml = sequence_nvml(events=[0x40])
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = nvml.nvmlDeviceGetCurrentClocksEventReasons
    del nvml.nvmlDeviceGetCurrentClocksEventReasons
    assert sampled(nvml, 3)["clock_events_share"] == {"hw_thermal": 1.0}


def test_no_sampler_off_cuda_or_without_nvml_and_no_event_without_a_read():
    def no_nvml() -> Any:
        raise ImportError("No module named 'pynvml'")

    assert start_sampling("cpu", 0, nvml_loader=sequence_nvml) is None
    assert start_sampling("xla", 0, nvml_loader=sequence_nvml) is None
    assert start_sampling("cuda", 0, nvml_loader=no_nvml) is None
    nvml = sequence_nvml()
    sampler = start_sampling("cuda", 0, nvml_loader=lambda: nvml, uuid=lambda i: "GPU-x")
    assert sampler is not None and sampler.handle == ("handle", "GPU-x")
    said: list[tuple[str, dict[str, Any]]] = []
    log = SimpleNamespace(emit=lambda name, **fields: said.append((name, fields)))
    report_samples(sampler, log)  # type: ignore[arg-type]
    assert said == [] and nvml.calls == ["shutdown"]
    sampler = start_sampling("cuda", 0, nvml_loader=lambda: nvml, uuid=lambda i: None)
    assert sampler is not None
    sampler.tick()
    report_samples(sampler, log)  # type: ignore[arg-type]
    [(name, fields)] = said
    assert name == "samples" and fields["samples"] == 1 and nvml.calls[-1] == "shutdown"


def test_the_samples_line_is_one_line_under_the_limit():
    every = sequence_nvml(events=[0x1FF])
    line = contract.encode_event("samples", 1023, 1024, **sampled(every, 50))
    assert line.count(b"\n") == 1 and len(line) < contract.MAX_LINE_BYTES


# ---------------------------------------------------------------- the suite's reading


def samples_line(rank: int, world: int, **fields: Any) -> str:
    return contract.encode_event("samples", rank, world, **fields).decode().rstrip("\n")


def facts_line(rank: int, world: int, facts: dict[str, Any]) -> str:
    return contract.encode_event("facts", rank, world, **facts).decode().rstrip("\n")


def roll(per_rank: dict[int, tuple[dict[str, Any], dict[str, Any] | None]], nodes: int = 2) -> RollCall:
    """Two nodes of one rank each; each rank of ``per_rank`` says (facts, samples or None)."""
    text = []
    for r in range(nodes):
        text += rank_lines(r, nodes, 1)
        if r in per_rank:
            facts, samples = per_rank[r]
            text.append(facts_line(r, nodes, facts))
            if samples is not None:
                text.append(samples_line(r, nodes, **samples))
    call = RollCall()
    parser = call.parser("pod-0")
    parser.feed(("\n".join(text) + "\n").encode())
    parser.close()
    return call


def verdict_of(call: RollCall, nodes: int = 2) -> Any:
    spec = JobSpec("job", nodes, 1, accelerator="nvidia")
    observed = Observed(call, Layout(nodes, 1), JobStatus(JobState.SUCCEEDED), spec)
    return judge(observed, replace(criteria_of(DEFAULTS)))


def healthy_samples(n: int = 10, **over: Any) -> dict[str, Any]:
    return {
        "samples": n,
        "clock_events_share": {},
        "sm_clock_mhz_median": 1980,
        "pcie_gen_min": 5,
        "pcie_gen_max": 5,
        "pcie_width_min": 16,
        "pcie_width_max": 16,
        **over,
    }


def test_the_event_is_kept_on_the_ranks_report_and_one_of_no_reads_is_not():
    call = roll({0: (facts_of(fake_nvml()), healthy_samples(40, clock_events_share={"hw_slowdown": 0.8})),
                 1: (facts_of(fake_nvml()), healthy_samples(0))})  # fmt: skip
    assert call.ranks[0].samples == Sampled(40, {"hw_slowdown": 0.8}, 1980.0, 5, 5, 16, 16)
    assert call.ranks[1].samples is None


def test_a_devices_facts_take_the_held_reasons_the_median_clock_and_the_most_the_link_reached():
    s = Sampled(10, {"gpu_idle": 0.3, "hw_slowdown": HELD_SHARE, "sw_thermal": 0.9}, 1410.0, 4, 5, 8, 16)
    assert sampled_facts(s) == {
        "samples": 10,
        "sampled": ["clock_events", "sm_clock_mhz", "pcie_gen", "pcie_width"],
        "clock_events_share": {"gpu_idle": 0.3, "hw_slowdown": 0.5, "sw_thermal": 0.9},
        "clock_events": ["hw_slowdown", "sw_thermal"],
        "sm_clock_mhz": 1410.0,
        "pcie_gen": 5,
        "pcie_width": 16,
    }
    unread = sampled_facts(Sampled(3, None, None, 5, 5, None, None))
    assert unread == {"samples": 3, "sampled": ["pcie_gen"], "pcie_gen": 5}  # the reasons: the one reading
    assert sampled_facts(None) == {} and sampled_facts(Sampled(0)) == {}


def test_node_facts_put_the_sampled_values_over_the_one_reading():
    one = facts_of(fake_nvml(width=8, events=0x8))
    [node] = node_facts(roll({0: (one, healthy_samples(40))}).ranks, lambda r: r)
    [device] = node.devices
    assert (device.facts["pcie_width"], device.facts["clock_events"], device.facts["samples"]) == (16, [], 40)
    assert node.values("samples") == [40]


def unfit_of(facts: dict[str, Any], samples: dict[str, Any] | None) -> list[Any]:
    return unfit_devices(node_facts(roll({0: (facts, samples)}).ranks, lambda r: r))


def test_a_throttle_reason_active_in_one_of_ten_samples_finds_nothing():
    flicker = healthy_samples(10, clock_events_share={"hw_slowdown": 0.1, "hw_thermal": 0.1})
    assert unfit_of(facts_of(fake_nvml(events=0x8 | 0x40)), flicker) == []


def test_a_throttle_reason_held_in_nine_of_ten_samples_fails_the_run_and_takes_its_node_out():
    held = healthy_samples(10, clock_events_share={"hw_slowdown": 0.9})
    call = roll({0: (facts_of(fake_nvml()), healthy_samples()), 1: (facts_of(fake_nvml()), held)})
    verdict = verdict_of(call)
    assert not verdict.passed
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert "clock_events=hw_slowdown held in 90% of 10 samples (rule hw_slowdown)" in problem.message
    assert problem.blame is not None and problem.blame.owner.value == "cluster"
    [unfit] = verdict.unfit
    assert (unfit.rule, unfit.severity, unfit.out) == ("hw_slowdown", "fail", "node")
    assert verdict.unfit_nodes == ["n1"]
    assert [n["verdict"] for n in verdict.node_verdicts()] == ["fit", "unfit"]


def test_a_pcie_link_low_in_one_sample_and_at_its_max_in_the_others_finds_nothing():
    dipped = healthy_samples(10, pcie_gen_min=3, pcie_width_min=8)
    assert unfit_of(facts_of(fake_nvml(gen=3, width=8)), dipped) == []


def test_a_pcie_link_low_in_every_sample_fails_saying_so():
    low = healthy_samples(20, pcie_width_min=8, pcie_width_max=8)
    [unfit] = unfit_of(facts_of(fake_nvml()), low)
    assert (unfit.rule, unfit.severity, unfit.out) == ("pcie_width", "fail", "node")
    assert "pcie_width=8 below its max 16 (pcie_width_max) in all 20 samples" in str(unfit)


@pytest.mark.parametrize("rule", sorted(SAMPLED_RULES))
def test_without_samples_each_sampled_rule_warns_on_the_one_reading_and_takes_nothing_out(rule):
    [unfit] = unfit_of(facts_of(fake_nvml(**SAMPLED_RULES[rule])), None)
    assert (unfit.rule, unfit.severity, unfit.out) == (rule, "warn", None)
    assert ONE_READING in str(unfit) and ONE_READING == "in one reading, not held"


def test_without_samples_the_run_passes_with_a_warning_and_no_node_is_marked():
    call = roll({0: (facts_of(fake_nvml()), None), 1: (facts_of(fake_nvml(events=0x8)), None)})
    verdict = verdict_of(call)
    assert verdict.passed and verdict.unfit_nodes == [] and verdict.of_kind(UNFIT_DEVICE) == []
    [warning] = verdict.warnings
    assert warning.kind is UNFIT_DEVICE and "not held" in warning.message


def test_the_sampled_rules_are_the_five_and_each_says_so_in_its_help():
    assert [r.name for r in RULES if r.sampled] == [
        "pcie_width",
        "pcie_gen",
        "hw_slowdown",
        "thermal",
        "power_brake",
    ]
    assert all("one reading: warns" in r.help for r in RULES if r.sampled)


def test_the_module_reads_each_quantity_the_suite_names():
    from rollcall.evidence.nodefacts import SAMPLED_KEYS

    assert workload_samples.SAMPLED == SAMPLED_KEYS
    assert json.loads(json.dumps(healthy_samples()))  # plain JSON


@pytest.mark.parametrize("rule", sorted(SAMPLED_RULES))
def test_the_one_reading_held_in_every_sample_fails_each_sampled_rule_and_takes_its_node_out(rule):
    bad = facts_of(fake_nvml(**SAMPLED_RULES[rule]))
    call = roll({0: (facts_of(fake_nvml()), held(facts_of(fake_nvml()))), 1: (bad, held(bad))})
    verdict = verdict_of(call)
    assert not verdict.passed and verdict.unfit_nodes == ["n1"]
    [unfit] = verdict.unfit
    assert (unfit.rule, unfit.severity, unfit.out) == (rule, "fail", "node")
    assert f"of {SAMPLES} samples" in str(unfit) or f"in all {SAMPLES} samples" in str(unfit)
