"""The workload's newer Triton kernels compiled for Hopper (sm_90) ahead of time, with no GPU here.

Triton's interpreter (tests/unit/fused_norm_cases.py) checks what the kernels compute but not that they
compile for a GPU: this compiles them through Triton and its ptxas for an H100/H200, at their default launch
shapes, and reads ptxas's report: no register spills, and the AdamW kernel's registers low enough for many
programs a multiprocessor (at 2,048 elements a program it needed 254 and ran at half the bandwidth).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from rollcall_workload.kernels import adamw as adamw_kernels  # noqa: E402
from rollcall_workload.kernels import attention as attention_kernels  # noqa: E402
from rollcall_workload.kernels import philox  # noqa: E402

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"

ATTENTION = {"S": 512, "HEADS": 16, "D": 64, "DROPOUT": True, "ROUNDS": philox.DROPOUT_ROUNDS}
SCALARS = {"threshold": "i32", "drop_scale": "fp32", "qk_scale": "fp32"}
BACKWARD_SCALARS = {"drop_scale": "fp32", "qk_scale": "fp32", "sm_scale": "fp32"}
BACKWARD = {
    **dict.fromkeys(("QKV", "OUT", "DO", "DQKV"), "*bf16"),
    **dict.fromkeys(("LSE", "DELTA", "DB"), "*fp32"),
    "KEPT": "*i32",
    "S": "constexpr",
    **BACKWARD_SCALARS,
    **dict.fromkeys(("HEADS", "D", "BLOCK_M", "BLOCK_N", "DROPOUT", "FOR_QUERIES"), "constexpr"),
}

WHOLE = {
    **dict.fromkeys(("QKV", "OUT", "DO", "DQKV"), "*bf16"),
    **dict.fromkeys(("LSE", "DB"), "*fp32"),
    "KEPT": "*i32",
    "S": "constexpr",
    **BACKWARD_SCALARS,
    **dict.fromkeys(("HEADS", "D", "BLOCK", "DROPOUT"), "constexpr"),
}


def _kernels() -> dict[str, tuple[object, dict[str, str], dict[str, object], int]]:
    """name: (kernel, signature, constexprs, warps) at the default launch shapes."""
    fwd_m, fwd_n = attention_kernels.ATTENTION_FORWARD_BLOCKS
    bwd_m, bwd_n = attention_kernels.ATTENTION_BACKWARD_BLOCKS
    fwd_warps, bwd_warps = attention_kernels.ATTENTION_WARPS
    forward = {
        "QKV": "*bf16", "OUT": "*bf16", "LSE": "*fp32", "KEPT": "*i32", "SEED": "*i64", "S": "constexpr", **SCALARS,
        **dict.fromkeys(("HEADS", "D", "BLOCK_M", "BLOCK_N", "DROPOUT", "ROUNDS"), "constexpr"),
    }  # fmt: skip
    adamw = {
        **dict.fromkeys(("BLOCK_PARAM",), "*i32"),
        **dict.fromkeys(("BLOCK_START", "NUMEL", "OFFSET", "PARAM_PTR", "GRAD_PTR"), "*i64"),
        **dict.fromkeys(("MASTER", "EXP_AVG", "EXP_AVG_SQ"), "*fp32"),
        **dict.fromkeys(
            ("lr", "beta1", "beta2", "eps", "weight_decay", "step_size", "bias_correction2_sqrt"), "fp32"
        ),
        "BLOCK": "constexpr",
    }
    backward = {**ATTENTION, "BLOCK_M": bwd_m, "BLOCK_N": bwd_n}
    del backward["ROUNDS"]  # the backward reads the forward's mask
    whole = {
        **backward,
        "S": attention_kernels.ATTENTION_WHOLE_SEQ,
        "BLOCK": attention_kernels.ATTENTION_WHOLE_SEQ,
    }
    del whole["BLOCK_M"], whole["BLOCK_N"]
    return {
        "attention forward": (attention_kernels._attention_fwd, forward, {**ATTENTION, "BLOCK_M": fwd_m, "BLOCK_N": fwd_n}, fwd_warps),
        "attention backward, keys": (attention_kernels._attention_bwd, BACKWARD, {**backward, "FOR_QUERIES": False}, bwd_warps),
        "attention backward, queries": (attention_kernels._attention_bwd, BACKWARD, {**backward, "FOR_QUERIES": True}, bwd_warps),
        "attention backward, one block": (attention_kernels._attention_bwd_whole, WHOLE, whole, attention_kernels.ATTENTION_WHOLE_WARPS),
        "master AdamW": (adamw_kernels._master_adamw, adamw, {"BLOCK": adamw_kernels.ADAMW_BLOCK}, adamw_kernels.ADAMW_WARPS),
    }  # fmt: skip


def compile_for_hopper(name: str, out_dir: Path) -> tuple[Path, str]:
    """Kernel ``name`` compiled for sm_90 at its default launch shape: (its cubin, ptxas's ``-v`` report)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, constexprs, warps = _kernels()[name]
    # pointers to 16-byte-aligned memory, as a launch on PyTorch's tensors specialises them: without that
    # Triton cannot prove its loads wide enough to pipeline, and compiles a kernel the GPU never runs
    aligned = {
        (i,): [["tt.divisibility", 16]] for i, arg in enumerate(fn.arg_names) if signature[arg][0] == "*"
    }
    kernel = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": warps},
    )
    ptx, cubin = out_dir / "kernel.ptx", out_dir / "kernel.cubin"
    ptx.write_text(kernel.asm["ptx"])
    report = subprocess.run(
        [str(PTXAS), "-arch=sm_90a", "-v", str(ptx), "-o", str(cubin)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stderr
    return cubin, report


def ptxas_usage(report: str) -> tuple[int, int]:
    """(registers a thread, bytes spilled) from ptxas's ``-v`` report."""
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", report)
    assert registers and spills, report
    return int(registers.group(1)), sum(int(s) for s in spills)


def _ptxas_report(name: str, tmp_path: Path) -> tuple[int, int]:
    """(registers a thread, bytes spilled) of kernel ``name`` compiled for sm_90."""
    return ptxas_usage(compile_for_hopper(name, tmp_path)[1])


@pytest.mark.slow
@pytest.mark.skipif(not PTXAS.exists(), reason="Triton without its CUDA backend's ptxas")
@pytest.mark.parametrize("name", list(_kernels()))
def test_the_kernel_compiles_for_hopper_without_spilling(name, tmp_path):
    registers, spilled = _ptxas_report(name, tmp_path)
    assert spilled == 0, f"{name}: {spilled} bytes spilled, {registers} registers"
    if name == "master AdamW":  # memory-bound: it needs many programs in flight
        assert registers <= 128, f"{name}: {registers} registers a thread"
