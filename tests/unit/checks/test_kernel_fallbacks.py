"""The workload's kernels in the verdict: what the run trained with, and a kernel one GPU's check dropped."""

from __future__ import annotations

import json

from rollcall.backends import JobState, JobStatus
from rollcall.checks.kernel_fallbacks import KERNEL_FALLBACK
from rollcall.checks.kernel_fallbacks import kernel_fallbacks as kernel_fallbacks_check
from rollcall.checks.runview import RunView
from rollcall.evidence.kernels import kernel_fallbacks
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import event

ON = "on: checked against PyTorch's scaled_dot_product_attention"
HERE = "off: failed its check here: ValueError: the output differs from PyTorch's by 1.2 of its largest value"
THERE = "off: failed its check on rank 1; PyTorch's scaled_dot_product_attention runs"


def _verdict(states: dict[int, dict[str, str]]):
    roll = RollCall()
    world = len(states)
    for rank, kernels in states.items():
        p = roll.parser(f"pod-{rank}")
        lines = [
            event("start", rank, world, local_rank=0, node_rank=rank, device="cuda:0", kernels=kernels),
            event("epoch_time", rank, world, epoch=1, seconds=0.5),
            event("throughput", rank, world, samples_per_sec=50.0),
            event("complete", rank, world),
        ]
        p.feed(("\n".join(lines) + "\n").encode())
        p.close()
    return judge(Observed(roll, Layout(world, 1), JobStatus(JobState.SUCCEEDED)))


def test_a_run_that_trained_with_its_kernels_says_so_and_warns_of_nothing():
    v = _verdict({0: {"attention": ON}, 1: {"attention": ON}})
    assert v.passed and v.warnings == () and v.kernels == {"attention": ON}


def test_a_kernel_that_failed_on_one_gpu_only_is_that_devices_warning_and_fails_nothing():
    v = _verdict({0: {"attention": THERE, "adamw": ON}, 1: {"attention": HERE, "adamw": ON}})
    assert v.passed and v.findings == () and v.unfit_nodes == []
    (warning,) = v.warnings
    assert warning.kind is KERNEL_FALLBACK and dict(warning.ranks) == {
        1: "its attention kernel failed its check"
    }
    assert warning.message == (
        "the workload's attention kernel failed its check on rank(s) 1 only, its peers' passed: rank 1 "
        "(cuda:0 of node 1): ValueError: the output differs from PyTorch's by 1.2 of its largest value; every "
        "rank trained with the standard op"
    )
    assert v.kernels == {"attention": THERE, "adamw": ON}


def test_a_kernel_that_failed_everywhere_is_the_workloads_own_fault_and_names_no_device():
    v = _verdict({0: {"attention": HERE}, 1: {"attention": HERE}})
    (warning,) = v.warnings
    assert (
        warning.ranks == {} and "every rank" in warning.message and "rollcall's own fault" in warning.message
    )
    assert v.passed


def test_a_start_without_kernels_or_with_garbled_ones_says_nothing():
    assert _verdict({0: {}, 1: {}}).kernels == {}
    roll = RollCall()
    p = roll.parser("pod-0")
    p.feed((event("start", 0, 1, kernels=["attention"]) + "\n").encode())
    p.feed((event("start", 1, 1, kernels={"attention": 3}) + "\n").encode())
    p.close()
    assert kernel_fallbacks(roll.ranks) == []


def test_results_json_carries_the_kernels_and_the_warning():
    from rollcall import reports
    from rollcall.jobspec import JobSpec
    from rollcall.runner import RunResult
    from tests.unit.helpers import judged

    roll = RollCall()
    for rank, state in ((0, THERE), (1, HERE)):
        p = roll.parser(f"pod-{rank}")
        p.feed((event("start", rank, 2, node_rank=rank, kernels={"attention": state}) + "\n").encode())
        p.close()
    attempt = judged(roll, JobSpec("job-abc123", 2, 1))
    doc = json.loads(
        json.dumps(reports.TestRecord("t.py::test_k", RunResult("local", [attempt]), "nvidia").as_dict())
    )
    assert doc["kernels"] == {"attention": THERE}
    assert [w["kind"] for w in doc["warnings"]] == ["kernel_fallback"] and doc["warnings"][0]["ranks"] == [1]
    assert reports.SCHEMA_VERSION == 2


def test_the_kernels_event_after_the_checks_settles_what_start_chose():
    roll = RollCall()
    p = roll.parser("pod-0")
    for rank, settled in ((0, HERE), (1, THERE)):
        p.feed(
            (
                event("start", rank, 2, node_rank=rank, kernels={"attention": "on: proven on sm_90"}) + "\n"
            ).encode()
        )
        p.feed((event("kernels", rank, 2, kernels={"attention": settled}) + "\n").encode())
    p.close()
    assert roll.ranks[0].kernels == {"attention": HERE}
    assert roll.ranks[0].start["kernels"] == {"attention": "on: proven on sm_90"}
    (fallback,) = kernel_fallbacks(roll.ranks)
    assert (fallback.kernel, sorted(fallback.failed), fallback.everywhere) == ("attention", [0], False)


def _roll(states: dict[int, dict[str, str]]) -> RollCall:
    roll = RollCall()
    world = len(states)
    for rank, kernels in states.items():
        p = roll.parser(f"pod-{rank}")
        p.feed(
            (
                event("start", rank, world, local_rank=0, node_rank=rank, device="cuda:0", kernels=kernels)
                + "\n"
            ).encode()
        )
        p.close()
    return roll


def test_the_predicate_warns_of_the_kernel_one_gpu_dropped_naming_its_rank_and_nothing_of_kernels_that_held():
    roll = _roll({0: {"attention": THERE}, 1: {"attention": HERE}})
    [warning] = list(kernel_fallbacks_check(RunView(Observed(roll, Layout(2, 1)), Criteria())))
    assert warning.kind is KERNEL_FALLBACK and warning.warning
    assert warning.ranks == {1: "its attention kernel failed its check"}
    assert "attention kernel failed its check on rank(s) 1 only" in warning.message
    assert "cuda:0 of node 1" in warning.message
    held = _roll({0: {"attention": ON}, 1: {"attention": ON}})
    assert list(kernel_fallbacks_check(RunView(Observed(held, Layout(2, 1)), Criteria()))) == []
