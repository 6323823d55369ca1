"""Whose a rank's error is, from what the error says, not from PyTorch's hints; and an error beside a GPU event.

The texts are the errors as PyTorch 2.x and NCCL print them, hints and all, as reported in public issues
(github.com/: verl-project/verl#3558 misaligned address; flashinfer-ai/flashinfer#4957 unspecified launch
failure; mrdbourke/pytorch-deep-learning#1290 device-side assert; pytorch/pytorch#16417 out of memory;
vllm-project/vllm#5222 and ostris/ai-toolkit#470 uncorrectable ECC; NVIDIA/nccl#1410 ncclUnhandledCudaError;
pytorch/pytorch#149984 ncclSystemError; deepseek-ai/DeepSeek-MoE#47 a watchdog's CUDA error). PyTorch ends
every CUDA error with "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", whatever its
cause; only one whose assertion fired is the workload's.
"""

from __future__ import annotations

import re

import pytest

from rollcall.checks.blame import ERROR_RULES, error_blame
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.evidence.gpu_events import BESIDE_BEFORE_S, SAME_EVENT_S, beside
from rollcall.verdict import Owner
from tests.unit.checks.test_gpu_events import ERROR_AT, gpu_line, roll_of
from tests.unit.test_fitness import verdict_of

CLUSTER, PLATFORM, WORKLOAD, UNDETERMINED = Owner.CLUSTER, Owner.PLATFORM, Owner.WORKLOAD, Owner.UNDETERMINED

#: What PyTorch 2.x appends to a CUDA error (c10/cuda/CUDAException.cpp), and 2.8's pointer to CUDA's manual.
TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
    "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def search(name: str) -> str:
    """PyTorch 2.8's line naming CUDA's error."""
    return (
        f"Search for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for "
        "more information.\n"
    )


ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered\n" + TAIL
ASSERT = "RuntimeError: CUDA error: device-side assert triggered\n" + TAIL

#: Real errors, whose owner each is, and why.
REAL: list[tuple[str, Owner, str]] = [
    (ILLEGAL, UNDETERMINED, "the GPU stopped a kernel (the kernel or the GPU)"),
    ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
     + search("cudaErrorIllegalAddress") + TAIL, UNDETERMINED, "the GPU stopped a kernel (the kernel or the GPU)"),
    ("RuntimeError: CUDA error: misaligned address\n" + TAIL, UNDETERMINED,
     "the GPU stopped a kernel (the kernel or the GPU)"),
    ("torch.AcceleratorError: CUDA error: unspecified launch failure\n" + search("cudaErrorLaunchFailure") + TAIL,
     UNDETERMINED, "the GPU stopped a kernel (the kernel or the GPU)"),
    ("RuntimeError: CUDA error: an illegal instruction was encountered\n" + TAIL, UNDETERMINED,
     "the GPU stopped a kernel (the kernel or the GPU)"),
    ("RuntimeError: CUDA error: the launch timed out and was terminated\n" + TAIL, UNDETERMINED,
     "the GPU stopped a kernel (the kernel or the GPU)"),
    (ASSERT, WORKLOAD,
     "an assertion in a GPU kernel fired on what the workload gave it (device-side assert triggered)"),
    ("AcceleratorError: CUDA error: device-side assert triggered\n" + search("cudaErrorAssert") + TAIL, WORKLOAD,
     "an assertion in a GPU kernel fired on what the workload gave it (device-side assert triggered)"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of "
     "23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in "
     "use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but "
     "unallocated. If reserved but unallocated memory is large try setting "
     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
     "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)", WORKLOAD,
     "an out-of-memory from the batch the workload chose itself"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered\n" + TAIL, CLUSTER,
     "a GPU memory (ECC) error"),
    ("CUDA error: uncorrectable ECC error encountered\n" + search("cudaErrorECCUncorrectable") + TAIL, CLUSTER,
     "a GPU memory (ECC) error"),
    ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device\n"
     + search("cudaErrorNoKernelImageForDevice") + TAIL, PLATFORM,
     "the image's PyTorch has no kernels for this GPU's architecture"),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
     "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 1 'invalid argument'",
     CLUSTER, "an NCCL (GPU communication or network) error"),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
     "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
     "Last error:\nsocketStartConnect: Connect to 10.0.0.2<43611> failed : Software caused connection abort",
     CLUSTER, "an NCCL (GPU communication or network) error"),
    ("node155:3054646:3054695 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
     "10.0.0.1<0> with status=12 opcode=0 len=0 vendor err 129 (Recv)", CLUSTER,
     "an NCCL (GPU communication or network) error"),
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
     "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.", CLUSTER,
     "an NCCL (GPU communication or network) error"),
    # an NCCL error whose cause is a CUDA error is that CUDA error's
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
     "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
     "Cuda failure 'an illegal memory access was encountered'", UNDETERMINED,
     "the GPU stopped a kernel (the kernel or the GPU)"),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: CUDA error: "
     "unspecified launch failure\n" + TAIL, UNDETERMINED, "the GPU stopped a kernel (the kernel or the GPU)"),
    # CUDA's cudaErrorNvlinkUncorrectable, as the runtime words it
    ("torch.AcceleratorError: CUDA error: uncorrectable NVLink error detected during the execution\n"
     + search("cudaErrorNvlinkUncorrectable") + TAIL, CLUSTER, "an NVLink error (the link between GPUs)"),
    # a backend name the process group does not know, and the data loader's own timeout: not the network
    ("ValueError: invalid backend 'gloo'", WORKLOAD,
     "the process group's backend the workload asked for (a configuration, not the network)"),
    ("ValueError: Invalid backend: 'glooo'", WORKLOAD,
     "the process group's backend the workload asked for (a configuration, not the network)"),
    ("TimeoutError: DataLoader timed out after 120 seconds", WORKLOAD,
     "the workload's own data loader (it makes its data itself)"),
    ("RuntimeError: DataLoader timed out after 60 seconds", WORKLOAD,
     "the workload's own data loader (it makes its data itself)"),
    # and the network's own words still are the network's
    ("torch.distributed.DistNetworkError: Connection reset by peer", CLUSTER, "the network between the ranks"),
]  # fmt: skip


@pytest.mark.parametrize(("message", "owner", "why"), REAL)
def test_each_real_error_has_its_owner(message, owner, why):
    placed = error_blame(message)
    assert (placed.owner, placed.why) == (owner, why)


def test_a_cuda_error_is_the_workloads_only_where_an_assertion_fired():
    cuda = [(m, o) for m, o, _ in REAL if "CUDA" in m and "out of memory" not in m]
    assert [m for m, o in cuda if o is WORKLOAD] == [
        m for m, _ in cuda if "device-side assert triggered" in m
    ]
    assert len(cuda) > 10


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


@pytest.mark.parametrize("hint", HINT_LINES)
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
