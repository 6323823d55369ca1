"""Whose a rank's error is, from what the error says, not from PyTorch's hints; and an error beside a GPU event.

The real errors are the table's (:mod:`rollcall.checks.error_texts`, each with its source, held to its rule
by ``test_blame_table.py``). PyTorch ends every CUDA error with "Compile with `TORCH_USE_CUDA_DSA` to enable
device-side assertions.", whatever its cause, and 2.8+ names CUDA's error in a line of its own: no rule reads
a hint, and only an error whose assertion fired is the workload's. A GPU event is beside an error only within
the window :mod:`rollcall.evidence.gpu_events` states, both ends in.
"""

from __future__ import annotations

import re

import pytest

from rollcall.checks.blame import error_blame
from rollcall.checks.error_texts import CUDA_TAIL, ERROR_RULES, cuda_error
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.evidence.gpu_events import BESIDE_BEFORE_S, SAME_EVENT_S, beside
from rollcall.verdict import Owner
from tests.unit.checks.test_gpu_events import ERROR_AT, gpu_line, roll_of
from tests.unit.test_fitness import verdict_of

CLUSTER, PLATFORM, WORKLOAD, UNDETERMINED = Owner.CLUSTER, Owner.PLATFORM, Owner.WORKLOAD, Owner.UNDETERMINED

#: What PyTorch 2.x appends to a CUDA error (c10/cuda/CUDAException.cpp), and 2.8's pointer to CUDA's manual.
TAIL = CUDA_TAIL


def search(name: str) -> str:
    """PyTorch 2.8's line naming CUDA's error."""
    return cuda_error(name, "").split("\n", 1)[1].removesuffix(CUDA_TAIL)


ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered\n" + TAIL
ASSERT = "RuntimeError: CUDA error: device-side assert triggered\n" + TAIL
#: Every real error of the table (rollcall.checks.error_texts), with its rule's owner.
REAL = [(s.message, r.owner) for r in ERROR_RULES for s in r.said]
#: The CUDA errors the table names by CUDA's own name (PyTorch 2.8+ prints it in a hint line).
CUDA_NAMES = sorted(set(re.findall(r"Search for `(\w+)'", "".join(m for m, _ in REAL))))


def test_a_cuda_error_is_the_workloads_only_where_an_assertion_fired():
    cuda = [(m, o) for m, o in REAL if "CUDA error" in m and "out of memory" not in m]
    assert [m for m, o in cuda if o is WORKLOAD] == [
        m for m, _ in cuda if "device-side assert triggered" in m
    ]
    assert len(cuda) > 20


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: CUDA error: unknown error",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "RuntimeError: something nobody foresaw",
    ],
)
def test_pytorchs_hints_change_no_errors_owner(message):
    assert error_blame(message + "\n" + TAIL) == error_blame(message)
    assert error_blame(message + "\n" + search("cudaErrorUnknown") + TAIL) == error_blame(message)


#: The hints PyTorch and NCCL add to an error, whatever its cause, as they print them (PyTorch 2.x's
#: c10/cuda/CUDAException.cpp and CUDAFunctions, a build with device-side assertions, ROCm's, NCCL's).
HINT_LINES = (
    *TAIL.splitlines(),
    search("cudaErrorAssert").strip(),
    "Device-side assertion tracking was not enabled by user.",
    "Device-side assertions disabled because not all devices support managed memory.",
    "For more detailed error information, run with CUDA_LOG_FILE=stderr",
    "HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
    "be incorrect.",
    "For debugging consider passing AMD_SERIALIZE_KERNEL=3",
    "Compile with `TORCH_USE_HIP_DSA` to enable device-side assertions.",
)


@pytest.mark.parametrize("hint", [*HINT_LINES, *(search(name).strip() for name in CUDA_NAMES)])
def test_no_rule_reads_a_hint(hint):
    assert error_blame(hint).why == "no rule places this error"
    assert not any(re.search(r.pattern, hint, re.IGNORECASE) for r in ERROR_RULES)


def test_an_illegal_address_from_a_build_with_device_side_assertions_is_no_assertion():
    dsa = (
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        + search("cudaErrorIllegalAddress")
        + "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Device-side assertion tracking was not enabled by user."
    )
    assert error_blame(dsa).owner is UNDETERMINED


def test_the_specific_before_the_general():
    """An out-of-memory and an ECC error are CUDA errors too; an NCCL error names the CUDA error it met."""
    ecc_in_nccl = (
        "ncclUnhandledCudaError: Call to CUDA function failed.\nCuda failure 'uncorrectable ECC error'"
    )
    assert error_blame(ecc_in_nccl).why == "a GPU memory (ECC) error"
    assert error_blame("RuntimeError: CUDA error: out of memory\n" + TAIL).owner is WORKLOAD
    assert (
        error_blame("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.").owner
        is WORKLOAD
    )


def _root(events: list[str], fails: str = ILLEGAL):
    verdict = verdict_of(roll_of(events, fails=fails))
    root = next(p for p in verdict.findings if p.kind is ROOT_CAUSE)
    return verdict, root


def test_an_error_beside_a_hardware_xid_on_its_gpu_is_told_with_it_and_is_the_clusters():
    verdict, root = _root([gpu_line(xid=79, data=79, event_type=8, at=ERROR_AT - 0.4)])
    beside = (
        "(beside Xid 79 on GPU 1, 0.4 s before it: GPU has fallen off the bus, hardware; reboot the node "
        "(NVIDIA: RESTART_BM))"
    )
    headline = verdict.root_cause.headline()  # the line the terminal prints
    assert headline.startswith(
        "first failure: rank 1 (node 1) reported an error: RuntimeError: CUDA error: an"
    )
    assert headline.endswith(beside) and root.message.endswith(beside)
    assert root.blame is not None and root.blame.owner is CLUSTER
    assert root.blame.why == "the GPU failed beside the error: Xid 79 (GPU has fallen off the bus, hardware)"
    assert f"  - {root.message}" in verdict.message()  # the failure message, in the terminal too
    first = verdict.root_cause.as_dict()["first"]
    assert first["gpu_event"]["xid"] == 79 and first["gpu_event"]["rank"] == 1


def test_an_error_beside_a_programs_xid_is_told_with_it_and_placed_by_what_it_says():
    verdict, root = _root([gpu_line(xid=31, data=31, event_type=8, at=ERROR_AT + 0.6)])
    assert verdict.root_cause.headline().endswith(
        "(beside Xid 31 on GPU 1, 0.6 s after it: GPU memory page fault, program; restart the application "
        "(NVIDIA: RESTART_APP))"
    )
    assert root.blame is not None and root.blame.owner is UNDETERMINED  # the kernel or the GPU
    _, asserted = _root([gpu_line(xid=43, data=43, event_type=8, at=ERROR_AT - 1.0)], fails=ASSERT)
    assert (
        asserted.blame is not None
        and asserted.blame.owner is WORKLOAD
        and "beside Xid 43" in asserted.message
    )


def test_an_error_beside_a_double_bit_ecc_event_is_the_clusters():
    _, root = _root([gpu_line("double_bit_ecc", event_type=2, data=0, at=ERROR_AT - 3.0)])
    assert "(beside double-bit ECC error on GPU 1, 3.0 s before it: hardware)" in root.message
    assert root.blame is not None and root.blame.owner is CLUSTER


def test_an_event_well_after_the_error_or_on_another_gpu_is_not_beside_it():
    after = gpu_line(xid=79, data=79, event_type=8, at=ERROR_AT + 2.5)
    elsewhere = gpu_line(xid=48, data=48, event_type=8, gpu=5, uuid="GPU-5bbb", at=ERROR_AT - 0.1)
    verdict, root = _root([after, elsewhere])
    assert "beside" not in root.message and verdict.root_cause.as_dict()["first"]["gpu_event"] is None
    assert root.blame is not None and root.blame.owner is UNDETERMINED


def test_of_several_events_beside_an_error_the_hardware_one_is_told():
    program = gpu_line(xid=31, data=31, event_type=8, at=ERROR_AT - 0.1)
    hardware = gpu_line(xid=95, data=95, event_type=8, at=ERROR_AT - 5.0)
    _, root = _root([program, hardware])
    assert "(beside Xid 95 on GPU 1, 5.0 s before it: Uncontained memory error, hardware" in root.message
    assert root.blame is not None and root.blame.owner is CLUSTER


def test_the_window_of_an_event_beside_an_error_is_a_minute_before_it_and_the_monitors_poll_after_it():
    assert (BESIDE_BEFORE_S, SAME_EVENT_S) == (60.0, 2.0)
    assert beside(1000.0 - 60.0, 1000.0) and beside(1000.0 + 2.0, 1000.0) and beside(1000.0, 1000.0)
    assert not beside(1000.0 - 60.001, 1000.0) and not beside(1000.0 + 2.001, 1000.0)
    assert beside(None, 1000.0) and beside(1000.0, None)  # unstamped: counts


@pytest.mark.parametrize(
    ("at", "told"),
    [
        (ERROR_AT - BESIDE_BEFORE_S, True),
        (ERROR_AT - BESIDE_BEFORE_S - 0.1, False),
        (ERROR_AT + SAME_EVENT_S, True),
        (ERROR_AT + SAME_EVENT_S + 0.1, False),
    ],
)
def test_a_hardware_xid_is_beside_an_error_and_makes_it_the_clusters_only_inside_the_window(at, told):
    verdict, root = _root([gpu_line(xid=79, data=79, event_type=8, at=at)])
    assert ("(beside Xid 79 on GPU 1" in root.message) is told
    assert (verdict.root_cause.as_dict()["first"]["gpu_event"] is not None) is told
    assert root.blame is not None and root.blame.owner is (CLUSTER if told else UNDETERMINED)
    assert [s.heard.xid for s in verdict.gpu_events] == [79]  # outside, still a fact of its GPU
