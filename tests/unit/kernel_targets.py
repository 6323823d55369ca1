"""The workload's Triton kernels compiled ahead of time for any GPU architecture, with no GPU here.

Triton's interpreter (tests/unit/fused_norm_cases.py) checks what the kernels compute, but not that they
compile for a GPU: this compiles each one through Triton for a target (``sm_80`` ... ``sm_100``) at the launch
shapes of a default BERT-large run, then runs the ptxas Triton itself picks for that target (its Blackwell
one from sm_100 on) with ``-v`` and reads its report: registers, spills; and Triton's own shared memory.
Used by tests/unit/test_kernel_targets.py and bench/hopper_sass.py.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollcall_workload.kernels import adamw as adamw_kernels
from rollcall_workload.kernels import attention, norm, philox, triton
from rollcall_workload.kernels import gelu as gelu_kernels

#: Multiprocessors of each target's GPU the fleet runs (A100, A10G, L4, H100/H200, B200): the backward
#: kernels' tiles follow them.
UNITS = {"sm_80": 108, "sm_86": 80, "sm_89": 58, "sm_90": 132, "sm_100": 148}
#: BERT-large at its default cuda batch: hidden 1,024, 16 heads of 64, intermediate 4,096, 384 x 128 tokens.
HIDDEN, HEADS, INTERMEDIATE, ROWS = 1024, 16, 4096, 384 * 128
#: Each test kernel's row of the gate (rollcall_workload.kernels.gate.PROVEN).
GATE_NAME = {
    "attention forward": "attention",
    "attention forward, seq 128": "attention",
    "attention backward, keys": "attention",
    "attention backward, queries": "attention",
    "attention backward, one block": "attention",
    "master AdamW": "adamw",
    "dropout+LayerNorm forward": "dropout_layer_norm",
    "dropout+LayerNorm backward": "dropout_layer_norm",
    "bias+GELU forward": "bias_gelu",
    "bias+GELU backward": "bias_gelu",
}

#: Integer arguments whose value at the default run's launch is a multiple of 16.
MULTIPLES_OF_16 = frozenset({"n_rows", "n_cols", "n_elements"})

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


@dataclass(frozen=True)
class Usage:
    """What one kernel needs of a multiprocessor, compiled for one target."""

    registers: int
    spilled: int
    shared: int


def kernels(target: str = "sm_90") -> dict[str, tuple[Any, dict[str, str], dict[str, object], int]]:
    """name: (kernel, signature, constexprs, warps) at the default run's launch shapes on ``target``."""
    seq = 512
    common = {
        "S": seq,
        "HEADS": HEADS,
        "D": HIDDEN // HEADS,
        "DROPOUT": True,
        "ROUNDS": philox.DROPOUT_ROUNDS,
    }
    fwd_m, fwd_n = attention.ATTENTION_FORWARD_BLOCKS
    bwd_m, bwd_n = attention.ATTENTION_BACKWARD_BLOCKS
    fwd_warps, bwd_warps = attention.ATTENTION_WARPS
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
    backward = {**common, "BLOCK_M": bwd_m, "BLOCK_N": bwd_n}
    del backward["ROUNDS"]  # the backward reads the forward's mask
    whole = {**backward, "S": attention.ATTENTION_WHOLE_SEQ, "BLOCK": attention.ATTENTION_WHOLE_SEQ}
    del whole["BLOCK_M"], whole["BLOCK_N"]
    eighth, norm_warps = norm._launch_shape(HIDDEN)
    block, tiles, _ = norm._backward_shape(ROWS, HIDDEN, UNITS[target])
    norm_forward = {
        **dict.fromkeys(("A", "X", "W", "B", "Y", "Z"), "*bf16"), "MEAN": "*fp32", "RSTD": "*fp32",
        "SEED": "*i64", "A_BIAS": "*bf16", "n_cols": "i32", "threshold": "i32", "scale": "fp32", "eps": "fp32",
        **dict.fromkeys(("EIGHTH", "HAS_BIAS", "ROUNDS"), "constexpr"),
    }  # fmt: skip
    norm_backward = {
        **dict.fromkeys(("DY", "Z"), "*bf16"), "MEAN": "*fp32", "RSTD": "*fp32", "W": "*bf16", "SEED": "*i64",
        "DA": "*bf16", "DX": "*bf16", **dict.fromkeys(("DW", "DB", "DA_SUM"), "*fp32"),
        "n_rows": "i32", "n_cols": "i32", "threshold": "i32", "scale": "fp32",
        **dict.fromkeys(("EIGHTH", "BLOCK_ROWS", "TILES", "SUM_EACH_TILE", "ROUNDS"), "constexpr"),
    }  # fmt: skip
    rows, cols, gelu_tiles, _, _ = gelu_kernels._gelu_backward_shape(ROWS, INTERMEDIATE, UNITS[target])
    gelu_forward = {"H": "*bf16", "B": "*bf16", "Y": "*bf16", "n_elements": "i32"}
    gelu_forward |= dict.fromkeys(("N", "BLOCK"), "constexpr")
    gelu_backward = {**dict.fromkeys(("DY", "H", "B", "DH"), "*bf16"), "DB": "*fp32", "n_rows": "i32"}
    gelu_backward |= dict.fromkeys(("N", "BLOCK_ROWS", "BLOCK_COLS", "TILES"), "constexpr")
    rounds = philox.DROPOUT_ROUNDS
    return {
        "attention forward": (attention._attention_fwd, forward, {**common, "BLOCK_M": fwd_m, "BLOCK_N": fwd_n}, fwd_warps),
        "attention forward, seq 128": (attention._attention_fwd, forward, {**common, "S": 128, "BLOCK_M": fwd_m, "BLOCK_N": fwd_n}, fwd_warps),
        "attention backward, keys": (attention._attention_bwd, BACKWARD, {**backward, "FOR_QUERIES": False}, bwd_warps),
        "attention backward, queries": (attention._attention_bwd, BACKWARD, {**backward, "FOR_QUERIES": True}, bwd_warps),
        "attention backward, one block": (attention._attention_bwd_whole, WHOLE, whole, attention.ATTENTION_WHOLE_WARPS),
        "master AdamW": (adamw_kernels._master_adamw, adamw, {"BLOCK": adamw_kernels.ADAMW_BLOCK}, adamw_kernels.ADAMW_WARPS),
        "dropout+LayerNorm forward": (norm._dropout_add_ln_fwd, norm_forward, {"EIGHTH": eighth, "HAS_BIAS": True, "ROUNDS": rounds}, norm_warps),
        "dropout+LayerNorm backward": (norm._dropout_add_ln_bwd, norm_backward, {"EIGHTH": eighth, "BLOCK_ROWS": block, "TILES": tiles, "SUM_EACH_TILE": norm.BACKWARD_SUM_EACH_TILE, "ROUNDS": rounds}, norm._backward_warps(block, HIDDEN)),
        "bias+GELU forward": (gelu_kernels._bias_gelu_fwd, gelu_forward, {"N": INTERMEDIATE, "BLOCK": gelu_kernels.GELU_BLOCK}, gelu_kernels.GELU_WARPS),
        "bias+GELU backward": (gelu_kernels._bias_gelu_bwd, gelu_backward, {"N": INTERMEDIATE, "BLOCK_ROWS": rows, "BLOCK_COLS": cols, "TILES": gelu_tiles}, gelu_kernels.GELU_WARPS),
    }  # fmt: skip


def capability(target: str) -> int:
    """``90`` for ``sm_90``."""
    return int(target.removeprefix("sm_"))


def ptxas_for(target: str) -> Path:
    """The ptxas Triton itself runs for ``target`` (from sm_100 on, its Blackwell one)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return Path(get_ptxas(capability(target)).path)


def compile_for(name: str, target: str, out_dir: Path) -> tuple[Path, str, int]:
    """Kernel ``name`` compiled for ``target``: (its cubin, ptxas's ``-v`` report, Triton's shared memory)."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import sm_arch_from_capability
    from triton.compiler import ASTSource

    fn, signature, constexprs, warps = kernels(target)[name]
    # pointers to 16-byte-aligned memory, as a launch on PyTorch's tensors specialises them: without that
    # Triton cannot prove its loads wide enough to pipeline, and compiles a kernel the GPU never runs
    # and integers a multiple of 16 (the rows' and columns' counts), as Triton specialises them at a launch
    aligned = {
        (i,): [["tt.divisibility", 16]]
        for i, arg in enumerate(fn.arg_names)
        if signature[arg][0] == "*" or arg in MULTIPLES_OF_16
    }
    kernel = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned),
        target=GPUTarget("cuda", capability(target), 32),
        options={"num_warps": warps},
    )
    ptx, cubin = out_dir / "kernel.ptx", out_dir / "kernel.cubin"
    ptx.write_text(kernel.asm["ptx"])
    arch = sm_arch_from_capability(capability(target))
    report = subprocess.run(
        [str(ptxas_for(target)), f"-arch={arch}", "-v", str(ptx), "-o", str(cubin)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stderr
    return cubin, report, int(kernel.metadata.shared)


def ptxas_usage(report: str) -> tuple[int, int]:
    """(registers a thread, bytes spilled) from ptxas's ``-v`` report."""
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", report)
    assert registers and spills, report
    return int(registers.group(1)), sum(int(s) for s in spills)


def usage(name: str, target: str, out_dir: Path) -> Usage:
    """What kernel ``name`` needs, compiled for ``target``."""
    _, report, shared = compile_for(name, target, out_dir)
    registers, spilled = ptxas_usage(report)
    return Usage(registers, spilled, shared)
