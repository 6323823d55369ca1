"""Whose an error is by its own words: the rules, each with the real errors it places, declared once.

:data:`ERROR_RULES` is the table :mod:`rollcall.checks.blame` reads: the first rule whose pattern matches an
error's message (case-insensitive) decides its owner and why. Each rule carries the errors it is there for
(:class:`Said`), in the words PyTorch, CUDA, NCCL, gloo, NVML, the Neuron runtime and torch_xla print them,
each with where the wording comes from: the texts are read from the libraries a run brings (PyTorch 2.11 with
CUDA 13.0 and NCCL 2.28.9, nvidia-ml-py 13.615, by their own strings), from the projects' sources, and from
public reports of real runs. A rank's ``error`` event carries ``Type: text`` (``type(exc).__name__`` and
``str(exc)``, as ``rollcall_workload/main.py`` writes it); a text without a type is a line the software logs
(NCCL's warnings, the Neuron runtime's), placed where an error quotes it, as PyTorch quotes NCCL's last
warning. ``tests/unit/test_blame_table.py`` holds every one of them to its rule, through the judge, and
``docs/blame.md`` is generated from this table (``python -m rollcall.checks.error_texts --markdown``).

The order is the rules' contract: rollcall's own words first, then the hardware's (an ECC error is a "CUDA
error" too), the device's and the image's, the kernel's, the workload's use of PyTorch, its own exceptions,
and only then the communication libraries and the network, whose words ("timed out", "socket") a message of
another cause may hold. :data:`UNPLACED` are real errors no rule places, on purpose: undetermined.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from rollcall.evidence.gpu_events import BESIDE_BEFORE_S, SAME_EVENT_S
from rollcall.evidence.rootcause import clip, is_echo
from rollcall.verdict import Owner

CLUSTER, PLATFORM, WORKLOAD, UNDETERMINED = Owner.CLUSTER, Owner.PLATFORM, Owner.WORKLOAD, Owner.UNDETERMINED


@dataclass(frozen=True)
class Said:
    """One real error: its exception's type (empty for a line the software logs), its text, its source."""

    raised: str
    text: str
    source: str

    @property
    def message(self) -> str:
        """The message of the rank's ``error`` event: ``Type: text``, or the logged line as it is."""
        return f"{self.raised}: {self.text}" if self.raised else self.text


@dataclass(frozen=True)
class Rule:
    """Errors whose message matches ``pattern`` (case-insensitive) are ``owner``'s, for ``why``."""

    pattern: str
    owner: Owner
    why: str
    said: tuple[Said, ...] = ()


#: What PyTorch 2.x appends to every CUDA error, whatever its cause (c10/cuda/CUDAException.cpp).
CUDA_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
    "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def cuda_error(name: str, text: str) -> str:
    """A CUDA error as PyTorch 2.8+ words it: CUDA's text, the line naming CUDA's error, :data:`CUDA_TAIL`."""
    return (
        f"CUDA error: {text}\nSearch for `{name}' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
        + CUDA_TAIL
    )


def nccl_error(where: str, short: str, code: str, long: str, last: str) -> str:
    """An NCCL error as PyTorch 2.x raises it (c10d/NCCLUtils): NCCL's text, its code, its last warning."""
    return (
        f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/{where}, {short}, NCCL version 2.28.9\n"
        f"{code}: {long}\nLast error:\n{last}"
    )


#: Where the texts read from the libraries come from (the run's own, by their strings).
TORCH = "PyTorch 2.11"
CUDART = "libcudart 13.0 (cudaGetErrorString) as PyTorch 2.11 raises it"
NCCL = "libnccl 2.28.9 (ncclGetErrorString, its warning) as PyTorch 2.11 raises it"
NVML = "nvidia-ml-py 13.615 (pynvml.NVMLError)"
NRT_DOC = "aws-neuron/aws-neuron-sdk neuron-runtime/nrt-troubleshoot.rst"
GH = "github.com/"
SYSTEM_ERROR = "System call (e.g. socket, malloc) or external library call failed or device error. "

ERROR_RULES: tuple[Rule, ...] = (
    Rule(r"^(invalid command line|bad torchrun environment): |environment variable \w+ expected, but not set",
         WORKLOAD, "the command line or environment rollcall gave the rank", (
        Said("", "invalid command line: argument --seq-len: must be a whole number from 5 to 512, not '1024'",
             "rollcall_workload/main.py, rank/cli.py"),
        Said("", "bad torchrun environment: invalid literal for int() with base 10: 'two'",
             "rollcall_workload/main.py, rank/dist.py"),
        Said("ValueError", "Error initializing torch.distributed using env:// rendezvous: "
             "environment variable MASTER_ADDR expected, but not set",
             f"{TORCH} torch/distributed/rendezvous.py"),
    )),
    Rule(r"injected (failure|fault)|as asked by ROLLCALL_", WORKLOAD, "a fault injected on purpose", (
        Said("RuntimeError", "injected failure on rank 1 (ROLLCALL_FAIL_RANK)",
             "rollcall_workload/faults.py"),
    )),
    Rule(r"uncorrectable ECC|ECC error|double.?bit|row.?remap", CLUSTER, "a GPU memory (ECC) error", (
        Said("AcceleratorError",
             cuda_error("cudaErrorECCUncorrectable", "uncorrectable ECC error encountered"),
             f"{CUDART}; {GH}vllm-project/vllm#5222"),
        Said("RuntimeError", "CUDA error: uncorrectable ECC error encountered\n" + CUDA_TAIL,
             f"PyTorch 2.1-2.7; {GH}ostris/ai-toolkit#470"),
    )),
    Rule(r"Uncorrectable memory error is detected on Neuron device", CLUSTER,
         "a Neuron device memory error (uncorrectable)", (
        Said("", "Uncorrectable memory error is detected on Neuron device: 5:1 metadata: 0x2. "
             "Failing execution.", NRT_DOC),
    )),
    Rule(r"uncorrectable NVLink|NVLink error", CLUSTER, "an NVLink error (the link between GPUs)", (
        Said("AcceleratorError", cuda_error("cudaErrorNvlinkUncorrectable",
             "uncorrectable NVLink error detected during the execution"), CUDART),
    )),
    Rule(r"\bXid\b|fallen off the bus|GPU is lost|GPU lost|GPU requires restart", CLUSTER,
         "the GPU failed (an Xid, or lost)", (
        Said("NVMLError_GpuIsLost", "GPU is lost", NVML),
        Said("NVMLError_ResetRequired", "GPU requires restart", NVML),
    )),
    Rule(r"busy or unavailable|NeuronCore\(s\) not available", CLUSTER,
         "the device (a GPU or NeuronCores) is held by another process or in exclusive mode", (
        Said("AcceleratorError", cuda_error("cudaErrorDevicesUnavailable",
             "CUDA-capable device(s) is/are busy or unavailable"), CUDART),
        Said("", "2021-Aug-27 23:22:12.0323 28078:28078 ERROR   NRT:nrt_allocate_neuron_cores               "
             "NeuronCore(s) not available - Requested:nc1-nc1 Available:0", NRT_DOC),
    )),
    Rule(r"out of shared memory|insufficient shared memory", PLATFORM,
         "the pod's shared memory (/dev/shm) is too small for the data loader's workers", (
        Said("RuntimeError", "DataLoader worker (pid 4242) is killed by signal: Bus error. "
             "It is possible that dataloader's workers are out of shared memory. "
             "Please try to raise your shared memory limit.", f"{TORCH} torch/csrc/DataLoader.cpp"),
    )),
    Rule(r"OutOfMemoryError|out of memory", WORKLOAD,
         "an out-of-memory from the batch the workload chose itself", (
        Said("OutOfMemoryError", "CUDA out of memory. Tried to allocate 22.00 MiB. "
             "GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. "
             "Including non-PyTorch memory, this process has 23.60 GiB memory in use. "
             "Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by "
             "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
             "See documentation for Memory Management  "
             "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
             f"{TORCH} c10/cuda/CUDACachingAllocator.cpp; {GH}pytorch/pytorch#16417"),
        Said("AcceleratorError", cuda_error("cudaErrorMemoryAllocation", "out of memory"), CUDART),
        Said("RuntimeError", "CUDA driver error: out of memory", f"{TORCH} c10/cuda/driver_api.h"),
        # NCCL's own allocation, as PyTorch quotes it: the batch left it no room
        Said("DistBackendError", nccl_error("NCCLUtils.cpp:77",
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "ncclUnhandledCudaError",
             "Call to CUDA function failed.", "Cuda failure 2 'out of memory'"), NCCL),
    )),
    Rule(r"driver version is insufficient|driver on your system is too old|"
         r"forward compatibility was attempted|requires Neuron Driver version", PLATFORM,
         "the image's CUDA (or Neuron runtime) is newer than the node's driver", (
        Said("RuntimeError", "The NVIDIA driver on your system is too old (found version 11040). "
             "Please update your GPU driver by downloading and installing a new version from the URL: "
             "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org "
             "to install a PyTorch version that has been compiled with your version of the CUDA driver.",
             f"{TORCH} c10/cuda/CUDAFunctions.cpp"),
        Said("AcceleratorError", cuda_error("cudaErrorInsufficientDriver",
             "CUDA driver version is insufficient for CUDA runtime version"), CUDART),
        Said("AcceleratorError", cuda_error("cudaErrorCompatNotSupportedOnDevice",
             "forward compatibility was attempted on non supported HW"), CUDART),
        Said("", "2021-Aug-11 19:18:21.0661 24616:24616 ERROR   NRT:nrt_init      "
             "This runtime requires Neuron Driver version 2.0 or greater. "
             "Please upgrade aws-neuron-dkms package.", NRT_DOC),
    )),
    Rule(r"no CUDA device|no CUDA-capable device|CUDA is not available|found no NVIDIA driver|"
         r"No CUDA GPUs are available|only supported with GPUs, no GPUs found|CUDA devices are visible|"
         r"Missing XLA configuration|Unable to determine Neuron Driver version|NVML Shared Library Not Found",
         PLATFORM, "the pod got no accelerator, or fewer than its ranks (resource request, device plugin or "
         "runtime)", (
        Said("RuntimeError", "Found no NVIDIA driver on your system. "
             "Please check that you have an NVIDIA GPU and installed a driver from "
             "http://www.nvidia.com/Download/index.aspx", f"{TORCH} c10/cuda"),
        Said("RuntimeError", "No CUDA GPUs are available", f"{TORCH} torch/csrc/cuda"),
        Said("AcceleratorError", cuda_error("cudaErrorNoDevice", "no CUDA-capable device is detected"),
             CUDART),
        Said("RuntimeError", "ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
             f"{TORCH} c10d/ProcessGroupNCCL.cpp"),
        Said("RuntimeError", "--device cuda but no CUDA device is available",
             "rollcall_workload/rank/dist.py"),
        Said("RuntimeError", "LOCAL_RANK is 3 but only 2 CUDA devices are visible",
             "rollcall_workload/rank/dist.py"),
        Said("NVMLError_LibraryNotFound", "NVML Shared Library Not Found", NVML),
        Said("RuntimeError", "tensorflow/compiler/xla/xla_client/computation_client.cc:274 : "
             "Missing XLA configuration", f"torch_xla (XRT); {GH}pytorch/xla#2035"),
        Said("", "2021-Aug-11 18:38:27.0917 13713:13713 ERROR   NRT:nrt_init      "
             "Unable to determine Neuron Driver version. Please check aws-neuron-dkms package is installed.",
             NRT_DOC),
    )),
    Rule(r"torch\._dynamo|torch\._inductor|InductorError|BackendCompilerFailed|CompilationError|"
         r"neuronx-cc (compilation )?failed", UNDETERMINED,
         "a compile failure inside torch, Triton or the Neuron compiler", (
        Said("BackendCompilerFailed", "backend='inductor' raised:\n"
             "CompilationError: at 12:4:\n    x = tl.load(in_ptr0 + (x0), xmask)\n    ^",
             f"{TORCH} torch/_dynamo/exc.py (triton's CompilationError)"),
        Said("RuntimeError", "neuronx-cc failed with 1", f"torch-neuronx; {GH}aws-neuron/aws-neuron-sdk#690"),
        Said("RuntimeError", "INTERNAL: From /job:localservice/replica:0/task:0:\n2 root error(s) found.\n"
             "  (0) INTERNAL: neuronx-cc compilation failed.",
             f"torch_xla; {GH}aws-neuron/aws-neuron-sdk#781"),
    )),
    Rule(r"NEFF version mismatch", PLATFORM, "the image's Neuron compiler and runtime do not match", (
        Said("", "NEFF version mismatch supported: 1.1 received: 2.0", NRT_DOC),
    )),
    Rule(r"no kernel image is available for execution", PLATFORM,
         "the image's PyTorch has no kernels for this GPU's architecture", (
        Said("AcceleratorError", cuda_error("cudaErrorNoKernelImageForDevice",
             "no kernel image is available for execution on the device"), CUDART),
    )),
    Rule(r"device-side assert triggered", WORKLOAD,
         "an assertion in a GPU kernel fired on what the workload gave it (device-side assert triggered)", (
        Said("RuntimeError", "CUDA error: device-side assert triggered\n" + CUDA_TAIL,
             f"PyTorch 2.x; {GH}mrdbourke/pytorch-deep-learning#1290"),
        Said("AcceleratorError", cuda_error("cudaErrorAssert", "device-side assert triggered"), CUDART),
    )),
    Rule(r"driver/library version mismatch|NVML/RM version mismatch|unsupported display driver / cuda driver|"
         r"driver (error|shutting down|not loaded)|NVML_ERROR|nvmlInit|NVML\S* (failed|error)", CLUSTER,
         "the GPU driver", (
        Said("NVMLError_DriverNotLoaded", "Driver Not Loaded", NVML),
        Said("NVMLError_LibRmVersionMismatch", "RM has detected an NVML/RM version mismatch.", NVML),
        Said("AcceleratorError", cuda_error("cudaErrorSystemDriverMismatch",
             "system has unsupported display driver / cuda driver combination"), CUDART),
    )),
    Rule(r"illegal memory access|illegal address|misaligned address|unspecified launch failure|"
         r"illegal instruction|launch timed out|hardware stack error", UNDETERMINED,
         "the GPU stopped a kernel (the kernel or the GPU)", (
        Said("RuntimeError", "CUDA error: an illegal memory access was encountered\n" + CUDA_TAIL,
             "PyTorch 2.1-2.7"),
        Said("AcceleratorError", cuda_error("cudaErrorIllegalAddress",
             "an illegal memory access was encountered"), CUDART),
        Said("RuntimeError", "CUDA error: misaligned address\n" + CUDA_TAIL, f"{GH}verl-project/verl#3558"),
        Said("AcceleratorError", cuda_error("cudaErrorLaunchFailure", "unspecified launch failure"),
             f"{CUDART}; {GH}flashinfer-ai/flashinfer#4957"),
        Said("AcceleratorError", cuda_error("cudaErrorIllegalInstruction",
             "an illegal instruction was encountered"), CUDART),
        Said("AcceleratorError", cuda_error("cudaErrorLaunchTimeout",
             "the launch timed out and was terminated"), CUDART),
        Said("AcceleratorError", cuda_error("cudaErrorHardwareStackError", "hardware stack error"), CUDART),
        # an NCCL error whose cause is a CUDA error is that CUDA error's
        Said("DistBackendError", nccl_error("NCCLUtils.cpp:77",
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "ncclUnhandledCudaError",
             "Call to CUDA function failed.", "Cuda failure 'an illegal memory access was encountered'"),
             NCCL),
        # the watchdog's thread ends with the CUDA error of the rank's own GPU: the rank's own failure
        Said("RuntimeError", "[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread "
             "terminated with exception: CUDA error: unspecified launch failure\n" + CUDA_TAIL,
             f"PyTorch 2.4-2.7; {GH}deepseek-ai/DeepSeek-MoE#47"),
    )),
    Rule(r"Nrt::(Load|Execute) failed|nrt_(load|execute):? status=", UNDETERMINED,
         "the Neuron runtime could not load or run the compiled graph (the graph or the device)", (
        Said("RuntimeError", "INTERNAL: From /job:c_localservice/replica:0/task:0:\n2 root error(s) found.\n"
             "  (0) INTERNAL: Nrt::Load failed on NeuronCores 0-0(2): nrt_load status=1, "
             "error message=\"Non specific failure\".", f"torch_xla; {GH}aws-neuron/aws-neuron-sdk#779"),
        Said("", "Execute failed: nrt_execute: status=1004, "
             "error message=\"Execution was completed with other errors\".",
             f"the Neuron runtime; {GH}aws-neuron/aws-neuron-sdk#351"),
    )),
    Rule(r"CUDA error: ", UNDETERMINED,
         "a CUDA error no rule above places (the GPU, its driver or the program)", (
        Said("AcceleratorError", cuda_error("cudaErrorUnknown", "unknown error"), CUDART),
        Said("AcceleratorError", cuda_error("cudaErrorTimeout", "wait operation timed out"), CUDART),
    )),
    Rule(r"invalid backend|Unknown c10d backend type", WORKLOAD,
         "the process group's backend the workload asked for (a configuration, not the network)", (
        Said("AssertionError", "Unknown c10d backend type GLOOO",
             f"{TORCH} torch/distributed/distributed_c10d.py"),
        Said("ValueError", "Invalid backend: 'glooo'", "PyTorch 1.x torch/distributed/distributed_c10d.py"),
    )),
    Rule(r"Distributed package doesn't have \w+ built in|\b\w+ backend is not available", PLATFORM,
         "the image's PyTorch was built without the process group's backend", (
        Said("RuntimeError", "Distributed package doesn't have NCCL built in",
             f"{TORCH} torch/distributed/distributed_c10d.py"),
        Said("ValueError", "NCCL backend is not available.", "PyTorch 1.0 torch/distributed/deprecated"),
    )),
    Rule(r"Expected all tensors to be on the same device|shapes cannot be multiplied|"
         r"The size of tensor a \(\d+\) must match|"
         r"Expected to have finished reduction in the prior iteration|"
         r"DDP expects same model|Detected mismatch between collectives|"
         r"Default process group has not been initialized", WORKLOAD,
         "the workload used PyTorch wrongly (its devices, shapes, DDP or process group)", (
        Said("RuntimeError", "Expected all tensors to be on the same device, but found at least two devices, "
             "cuda:0 and cpu! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)",
             f"{TORCH} aten (TensorIterator, device checks)"),
        Said("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (32x768 and 512x768)",
             f"{TORCH} aten"),
        Said("RuntimeError", "The size of tensor a (128) must match the size of tensor b (512) "
             "at non-singleton dimension 1", f"{TORCH} aten"),
        Said("RuntimeError", "Expected to have finished reduction in the prior iteration before starting a "
             "new one. This error indicates that your module has parameters that were not used in "
             "producing loss. ", f"{TORCH} c10d/reducer.cpp"),
        Said("RuntimeError", "DDP expects same model across all ranks, but Rank 0 has 201 params, "
             "while rank 1 has inconsistent 200 params.", f"{TORCH} c10d/reducer.cpp"),
        Said("RuntimeError", "Detected mismatch between collectives on ranks. Rank 0 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE), but Rank 1 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=3, OpType=BROADCAST).",
             f"{TORCH} c10d/ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG=DETAIL)"),
        Said("ValueError", "Default process group has not been initialized, please make sure to call "
             "init_process_group.", f"{TORCH} torch/distributed/distributed_c10d.py"),
    )),
    Rule(r"DataLoader timed out", WORKLOAD, "the workload's own data loader (it makes its data itself)", (
        Said("RuntimeError", "DataLoader timed out after 60 seconds",
             f"{TORCH} torch/utils/data/dataloader.py"),
    )),
    Rule(r"^(ValueError|TypeError|KeyError|AttributeError|IndexError|NameError|AssertionError|"
         r"ZeroDivisionError|NotImplementedError|RecursionError|UnboundLocalError|FileNotFoundError)\b",
         WORKLOAD, "an exception in the workload's own code", (
        # names nccl and gloo: only its type tells it from the communication libraries' errors
        Said("ValueError", "--dist-backend nccl is for --device cuda (cpu uses gloo, xla xla)",
             "rollcall_workload/rank/cli.py"),
        Said("ValueError", "--precision bf16 is not supported with --device xla "
             "(the compiler picks precision)", "rollcall_workload/rank/run.py"),
        Said("TypeError", "unsupported operand type(s) for +: 'NoneType' and 'int'", "CPython 3"),
        Said("KeyError", "'input_ids'", "CPython 3"),
    )),
    Rule(r"ncclInvalidUsage|ncclInvalidArgument", WORKLOAD, "NCCL was called wrongly", (
        Said("DistBackendError", nccl_error("NCCLUtils.cpp:77",
             "invalid usage (run with NCCL_DEBUG=WARN for details)", "ncclInvalidUsage",
             "This usually reflects invalid usage of NCCL library.",
             "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"), NCCL),
    )),
    Rule(r"\bNCCL\b|ProcessGroupNCCL|WorkNCCL|ncclSystemError|ncclRemoteError|ncclInternalError|"
         r"ncclUnhandledCudaError|Watchdog caught collective operation timeout", CLUSTER,
         "an NCCL (GPU communication or network) error", (
        Said("DistBackendError", nccl_error("NCCLUtils.cpp:77",
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "ncclUnhandledCudaError",
             "Call to CUDA function failed.", "Cuda failure 1 'invalid argument'"),
             f"{NCCL}; {GH}NVIDIA/nccl#1410"),
        Said("DistBackendError", nccl_error("ProcessGroupNCCL.cpp:1691",
             "unhandled system error (run with NCCL_DEBUG=INFO for details)", "ncclSystemError", SYSTEM_ERROR,
             "socketStartConnect: Connect to 10.0.0.2<43611> failed : Software caused connection abort"),
             f"{NCCL}; {GH}pytorch/pytorch#149984"),
        Said("DistBackendError", nccl_error("ProcessGroupNCCL.cpp:3356",
             "unhandled system error (run with NCCL_DEBUG=INFO for details)", "ncclSystemError", SYSTEM_ERROR,
             "NET/IB: Got completion from peer 10.0.0.1<46151> with status=IBV_WC_RETRY_EXC_ERR(12) "
             "opcode=IBV_WC_SEND(0) reqSize=0 vendor_err=129 req_type=Send hca mlx5_0"), NCCL),
        Said("DistBackendError", nccl_error("ProcessGroupNCCL.cpp:3356",
             "internal error - please report this issue to the NCCL developers", "ncclInternalError",
             "Internal check failed.", "Error : ring 0 does not loop back to start (3 != 0)"), NCCL),
        Said("DistBackendError", nccl_error("ProcessGroupNCCL.cpp:3356",
             "remote process exited or there was a network error", "ncclRemoteError",
             "A call failed possibly due to a network error or a remote process exiting prematurely.",
             "socketProgress: Connection closed by remote peer 10.0.0.1<46151>"), NCCL),
        Said("DistBackendError", "[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
             "Timeout(ms)=600000) ran for 600085 milliseconds before timing out.",
             f"{TORCH} c10d/ProcessGroupNCCL.cpp"),
        Said("DistBackendError", "NCCL communicator was aborted on rank 1.",
             f"{TORCH} c10d/ProcessGroupNCCL.cpp"),
    )),
    Rule(r"Connection (reset|refused|closed)|Broken pipe|DistNetworkError|DistStoreError|RendezvousTimeout|"
         r"(Read|Write) (error|timeout)|gloo/transport|Gloo connectFullMesh|timed out|socket|unreachable",
         CLUSTER, "the network between the ranks", (
        Said("RuntimeError", "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] "
             "Connection closed by peer [10.0.0.1]:4444", f"{TORCH} (gloo)"),
        Said("RuntimeError", "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] "
             "Read error [10.0.0.2]:3303: Connection reset by peer", f"{TORCH} (gloo)"),
        Said("RuntimeError", "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
             "Timed out waiting 1800000ms for recv operation to complete", f"{TORCH} (gloo)"),
        Said("RuntimeError", "Gloo connectFullMesh failed with "
             "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error", f"{TORCH} (gloo)"),
        Said("DistNetworkError", "The client socket has timed out after 600000ms while trying to connect to "
             "(10.10.12.11, 25000).", f"{TORCH} c10d/socket.cpp; {GH}vllm-project/vllm#19670"),
        Said("DistStoreError", "Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
             f"{TORCH} c10d/TCPStore.cpp"),
        Said("DistStoreError", "wait timeout after 600000ms, keys: /default_pg/0//cuda//0",
             f"{TORCH} c10d/TCPStore.cpp"),
        Said("DistNetworkError", "Connection reset by peer", f"{TORCH} c10d (the socket's errno)"),
        Said("", "RX, connection closed by remote peer", NRT_DOC),
    )),
    Rule(r"No module named|ModuleNotFoundError|ImportError|cannot import name", PLATFORM,
         "the image lacks a package", (
        Said("ModuleNotFoundError", "No module named 'torch_xla'", "CPython 3"),
        Said("ImportError", "libcudart.so.12: cannot open shared object file: No such file or directory",
             "CPython 3 (dlopen's message)"),
    )),
    Rule(r"another user could plant files there", CLUSTER,
         "a directory on the node another user made or may write (a shared host's), refused by the rank", (
        Said("UnsafePathError", "Permission denied: /tmp/rollcall-monitor-17/node-1-monitor is not the job "
             "user's (uid 65534): another user could plant files there; remove it, or run where no other "
             "user made it", "rollcall_workload.safefs"),
    )),
    Rule(r"No space left on device|Read-only file system|Permission denied", PLATFORM,
         "the pod's file system", (
        Said("OSError", "[Errno 28] No space left on device", "CPython 3 (errno)"),
        Said("OSError", "[Errno 30] Read-only file system: '/artifacts/rank-1.json'", "CPython 3 (errno)"),
        Said("PermissionError", "[Errno 13] Permission denied: '/artifacts'", "CPython 3 (errno)"),
    )),
)  # fmt: skip

#: Real errors no rule places: undetermined, as :func:`rollcall.checks.blame.error_blame` says of them.
UNPLACED: tuple[Said, ...] = (
    Said("RuntimeError", "loss is not finite in epoch 1: nan",
         "rollcall_workload/rank/run.py (the GPU or the model)"),
    Said("RuntimeError", "The following operation failed in the TorchScript interpreter.",
         f"torch-neuron; {GH}aws-neuron/aws-neuron-sdk#364"),
)  # fmt: skip

#: What regenerates ``docs/blame.md``.
REGENERATE = "python -m rollcall.checks.error_texts --markdown > docs/blame.md"
#: Characters of one error shown in a row of the docs' tables.
SHOWN = 400


def shown(said: Said) -> str:
    """``said``'s message on one line, clipped, without the hints PyTorch ends every CUDA error with.

    Its characters of markdown are escaped: it is plain text, as a code span would read as a command.
    """
    lines = said.message.replace(CUDA_TAIL, "").splitlines()
    kept = " / ".join(line.strip() for line in lines if line.strip() and not line.startswith("Search for `"))
    return re.sub(r"([\\`*_\[\]<>|])", r"\\\1", clip(kept, SHOWN))


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(said: tuple[Said, ...], owner: Owner) -> list[str]:
    return [
        _row("the error, as the rank reports it", "placed alone", "source"),
        _row("---", "---", "---"),
        *(
            _row(
                shown(s),
                "undetermined: an echo of another's failure" if is_echo(s.message) else owner.words,
                s.source,
            )
            for s in said
        ),
        "",
    ]


def markdown() -> str:
    """``docs/blame.md``: how an error is placed, a GPU event's window beside it, the rules, their errors."""
    out = [
        "# Whose an error is",
        "",
        "<!-- Generated from ERROR_RULES and UNPLACED in src/rollcall/checks/error_texts.py and the window "
        f"in src/rollcall/evidence/gpu_events.py; do not edit. Regenerate: {REGENERATE} -->",
        "",
        "A rank's error (its `error` event: `Type: text`) is placed by its own words: the first rule below "
        "whose pattern matches the message, case-insensitive, gives its owner and why (`checks/blame.py`). "
        "The rules are in the order they are tried: rollcall's own words first, then the hardware's, the "
        "device's and the image's, the kernel's, the workload's use of PyTorch and its own exceptions, and "
        "only then the communication libraries' and the network's, whose words (`timed out`, `socket`) a "
        "message of another cause may hold. Each rule lists the real errors it is there for, each in the "
        "words the software prints (a line without a type is one the software logs, placed where an error "
        "quotes it), with its source; a unit test holds each to its rule through the judge.",
        "",
        "Three things come before the words:",
        "",
        "- an out-of-memory on a GPU another process held before the run is the cluster's, whatever it says;",
        "- an error beside a hardware event on the rank's GPU (an Xid of the hardware class, a double-bit "
        "ECC error, the GPU lost) is the cluster's, and is told with it. An event is beside an error when it "
        f"is stamped at most {BESIDE_BEFORE_S:g} s before the error and at most {SAME_EVENT_S:g} s after it, "
        "both ends in (the node's monitor stamps an event when it polls, about once a second, on the clock "
        "of the node the rank runs on); an event of an earlier phase of the run is no cause of the error, "
        "and stays a fact of its GPU;",
        "- an error that echoes another rank's failure (a peer's connection lost, a watchdog or store "
        "timeout, an aborted communicator: `ECHO_PATTERNS` in `evidence/rootcause.py`) is placed by the "
        "failure it follows: alone it is undetermined (the column *placed alone*).",
        "",
    ]
    for n, rule in enumerate(ERROR_RULES, 1):
        out += [f"## {n}. {rule.owner.words}: {rule.why}", "", f"Pattern: `{rule.pattern}`", ""]
        out += _table(rule.said, rule.owner)
    out += ["## Placed by no rule: undetermined", ""]
    out += _table(UNPLACED, UNDETERMINED)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    """Print ``docs/blame.md``; 4 on any other command line."""
    if argv != ["--markdown"]:
        print(f"error_texts: unknown arguments {argv}; run: {REGENERATE}", file=sys.stderr)
        return 4
    sys.stdout.write(markdown())
    return 0


__all__ = [
    "CUDA_TAIL",
    "ERROR_RULES",
    "REGENERATE",
    "UNPLACED",
    "Rule",
    "Said",
    "cuda_error",
    "main",
    "markdown",
    "nccl_error",
    "shown",
]

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
