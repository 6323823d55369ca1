"""Whose each failure is: one table (rollcall.checks.blame), a class per test, shown by every report."""

from __future__ import annotations

import json

import pytest

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.blame import ERROR_RULES, blame, error_blame
from rollcall.checks.errors import ERROR, LEFT_EARLY, ROOT_CAUSE
from rollcall.checks.exited_nonzero import EXITED_NONZERO
from rollcall.checks.expectations import EXPECTATION
from rollcall.checks.job_state import JOB
from rollcall.checks.kernel_fallbacks import KERNEL_FALLBACK
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.drift import Mismatch
from rollcall.isolation.probe import ISOLATED
from rollcall.jobspec import JobSpec
from rollcall.judge import KINDS, judge
from rollcall.ranklog import RollCall
from rollcall.runner import RunResult
from rollcall.verdict import Layout, Observed, Owner, Problem
from tests.unit.helpers import event, judged, node_log

CLUSTER, PLATFORM, WORKLOAD, UNDETERMINED = Owner.CLUSTER, Owner.PLATFORM, Owner.WORKLOAD, Owner.UNDETERMINED


@pytest.mark.parametrize(
    ("message", "owner"),
    [
        # the cluster's: hardware, driver, GPU communication, the network
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", CLUSTER),
        ("RuntimeError: CUDA error: unknown error (Xid 79: GPU has fallen off the bus)", CLUSTER),
        ("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", CLUSTER),
        ("DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there was a "
         "network error, NCCL version 2.27.5 ncclRemoteError", CLUSTER),
        ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer", CLUSTER),
        ("RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED: driver/library version mismatch", CLUSTER),
        ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU", PLATFORM),
        ("RuntimeError: CUDA driver error: out of memory", WORKLOAD),
        ("torch._inductor.exc.InductorError: RuntimeError: in triton/backends/nvidia/driver.py", UNDETERMINED),
        # the platform's: the image, the pod's devices and files
        ("ModuleNotFoundError: No module named 'transformers'", PLATFORM),
        ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040): CUDA driver version is "
         "insufficient for CUDA runtime version", PLATFORM),
        ("RuntimeError: --device cuda but no CUDA device is available", PLATFORM),
        ("OSError: [Errno 28] No space left on device", PLATFORM),
        # rollcall's own: its code, its own batch, its kernels
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB", WORKLOAD),
        ("ValueError: --precision bf16 is not supported with --device xla", WORKLOAD),
        ("TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'", WORKLOAD),
        ("RuntimeError: CUDA error: device-side assert triggered", WORKLOAD),
        ("RuntimeError: injected failure on rank 1 (ROLLCALL_FAIL_RANK)", WORKLOAD),
        # undetermined: the kernel or the GPU, a compiler, anything else
        ("AcceleratorError: CUDA error: an illegal memory access was encountered", UNDETERMINED),
        ("torch._inductor.exc.InductorError: CompilationError: at 12:4", UNDETERMINED),
        ("RuntimeError: something nobody foresaw", UNDETERMINED),
    ],
)  # fmt: skip
def test_each_class_of_error_has_its_owner(message, owner):
    assert error_blame(message).owner is owner, error_blame(message)


def test_every_kind_of_problem_has_an_owner_and_only_the_clusters_name_a_node_unfit():
    placed_by_detail = {
        ROOT_CAUSE,
        ERROR,
        EXITED_NONZERO,
        KERNEL_FALLBACK,
        JOB,
        LEFT_EARLY,
        EXPECTATION,  # per problem: a fact of the node's own is the cluster's, one the run brought the platform's
    }
    assert {k for k in (*KINDS, ISOLATED) if k.owner is None} == placed_by_detail
    assert all(blame(Problem(k, "x")).owner is not None for k in (*KINDS, ISOLATED))
    assert (
        blame(Problem(UNFIT_DEVICE, "x")).owner is CLUSTER and blame(Problem(ISOLATED, "x")).owner is CLUSTER
    )
    assert blame(Problem(ERROR, "x")).owner is UNDETERMINED  # no detail to place it by
    assert all(r.why and r.pattern for r in ERROR_RULES)


@pytest.mark.parametrize(
    ("key", "owner"),
    [("driver", CLUSTER), ("kernel", CLUSTER), ("gpu_name", CLUSTER), ("torch", PLATFORM), ("image", PLATFORM),
     ("zone", PLATFORM), ("capacity_reservation", PLATFORM)],
)  # fmt: skip
def test_an_expectation_not_met_is_the_clusters_for_the_nodes_own_fact_else_the_platforms(key, owner):
    missed = Mismatch(1, "n1", key, "1*", "2")
    assert blame(Problem(EXPECTATION, f"expectation not met: {missed}", detail=missed)).owner is owner
    assert blame(Problem(EXPECTATION, "--expect driver=1: no rank reported its facts")).owner is PLATFORM


def _failed_run(message: str):
    roll = RollCall()
    p = roll.parser("pod-0")
    p.feed(node_log(0, 1, 2, skip={1: ("throughput", "complete")}).encode())
    p.feed((event("error", 1, 2, message=message, time=1.0) + "\n").encode())
    p.close()
    return roll


@pytest.mark.parametrize(
    ("message", "owner", "words"),
    [
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", CLUSTER, "the cluster's"),
        ("ModuleNotFoundError: No module named 'transformers'", PLATFORM, "the platform's"),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB",
            WORKLOAD,
            "the workload's (rollcall's own)",
        ),
        ("ValueError: a bug of the workload's", WORKLOAD, "the workload's (rollcall's own)"),
        (
            "AcceleratorError: CUDA error: an illegal memory access was encountered",
            UNDETERMINED,
            "undetermined",
        ),
    ],
)
def test_the_root_cause_carries_its_owner_in_every_report(message, owner, words):
    roll = _failed_run(message)
    v = judge(Observed(roll, Layout(1, 2), JobStatus(JobState.FAILED, "rank 1 failed")))
    root = v.findings[0]
    assert root.kind is ROOT_CAUSE and root.blame is not None and root.blame.owner is owner
    line, whose = v.message().splitlines()[1:3]
    assert line.startswith(f"  - first failure: rank 1 (node 0) reported an error: {message} [pod pod-0, ")
    assert whose == f"    whose: {words}: {root.blame.why}"
    attempt = judged(roll, JobSpec("job-abc123", 1, 2), JobStatus(JobState.FAILED, "rank 1 failed"))
    doc = json.loads(
        json.dumps(reports.TestRecord("t.py::t", RunResult("local", [attempt]), "nvidia").as_dict())
    )
    assert doc["findings"][0]["owner"] == owner.value and doc["findings"][0]["why"] == root.blame.why
    assert v.unfit_nodes == []  # an error never names a node unfit; only a fitness rule does


def test_echoes_of_another_ranks_failure_are_nobodys_cause():
    from rollcall.evidence.rootcause import Failure, Line

    echo = Failure(2, 0, None, "RuntimeError: Connection closed by peer [10.0.0.1]:4444")
    assert echo.echo
    placed = blame(Problem(ERROR, "x", detail=Line("x", (echo,))))
    assert (placed.owner, placed.why) == (UNDETERMINED, "an echo of another rank's failure")


@pytest.mark.parametrize(
    ("reason", "owner"),
    [
        ("pod job-1 is Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu", PLATFORM),
        ("pod job-0: ImagePullBackOff: rollcall-bert:nvidia not found", PLATFORM),
        ("node ip-10-0-0-1 NotReady: NodeLost", CLUSTER),
        (
            "pod job-1 (index 1) on node n1 was still creating its containers after 483s (bound 483s: volumes "
            "that never attach or mount), waiting for volume data to attach and mount (FailedMount: ...)",
            CLUSTER,
        ),
        ("node 1 (slurm node rc2) did not begin its task within 45s of the roll call's step", PLATFORM),
        ("pod job-1 failed", UNDETERMINED),  # a rank failed: named before it
    ],
)
def test_how_the_job_ended_is_the_platforms_the_clusters_or_its_ranks(reason, owner):
    assert blame(Problem(JOB, f"job failed: {reason}")).owner is owner


def test_the_page_and_the_rank_junit_say_whose(tmp_path):
    import xml.etree.ElementTree as ET

    from rollcall.page import report as htmlreport

    roll = _failed_run("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB")
    attempt = judged(roll, JobSpec("job-abc123", 1, 2), JobStatus(JobState.FAILED, "rank 1 failed"))
    record = reports.TestRecord("t.py::t", RunResult("local", [attempt]), "nvidia")
    page = htmlreport.render([record], {}, tmp_path)
    assert (
        "whose: the workload&#39;s (rollcall&#39;s own): an out-of-memory from the batch the workload chose itself"
        in page
    )
    reports.write_rank_junit(tmp_path / "ranks.junit.xml", [record])
    failures = [f.get("message") for f in ET.parse(tmp_path / "ranks.junit.xml").iter("failure")]
    assert any(
        "[the workload's (rollcall's own): an out-of-memory from the batch the workload chose itself]" in m
        for m in failures
    )
