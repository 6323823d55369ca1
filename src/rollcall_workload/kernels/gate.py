"""Which of the workload's own kernels a run may use: each runs by default only where it is proven.

A hand-written kernel is proven on a GPU architecture when it compiles there with no spills at the shapes
the run uses and has been measured there against the standard stack (PyTorch's SDPA with the backend it
picks, inductor's fusions, torch's fused AdamW). :data:`PROVEN` is that table; everywhere else the default is
the standard stack, so that a GPU the kernels were never tried on cannot fail the run, read as slow or compute
wrong numbers because of the workload's own code. A kernel asked for by its flag runs wherever it can.

``tests/unit/test_kernel_targets.py`` compiles every kernel for :data:`TARGETS` and fails when this table
claims a kernel proven where it spills, needs more shared memory than the architecture has, or does not
compile. Before a run uses a kernel, :mod:`rollcall_workload.kernels.check` holds it to the op it replaces on
the rank's own GPU, and every rank drops a kernel that failed there on any rank.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

#: The variable that makes the workload take its GPU for another architecture (``sm_86``): what it would
#: choose on an A10G, tried on any GPU.
ASSUME_ARCH_ENV = "ROLLCALL_ASSUME_ARCH"

#: The architectures the kernels are compiled for in CI: A100 (sm_80), A10G (sm_86), L4 and L40S (sm_89),
#: H100 and H200 (sm_90), B200 (sm_100).
TARGETS: tuple[str, ...] = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100")
#: Shared memory one block may use on each target, in bytes (CUDA's programming guide, "Compute
#: Capabilities": 163 KB on 8.0, 99 KB on 8.6 and 8.9, 227 KB on 9.0 and 10.0).
SHARED_MEMORY: Mapping[str, int] = {
    "sm_80": 163 << 10,
    "sm_86": 99 << 10,
    "sm_89": 99 << 10,
    "sm_90": 227 << 10,
    "sm_100": 227 << 10,
}


@dataclass(frozen=True)
class Kernel:
    """One of the workload's kernels and the flag that turns it on.

    Attributes:
        name: how ``start``'s ``kernels`` and the suite name it.
        flag: the :mod:`rollcall_workload.rank.cli` option that turns it on (its ``args`` attribute).
        replaces: the standard op it replaces, which runs where it is off.
    """

    name: str
    flag: str
    replaces: str


KERNELS: tuple[Kernel, ...] = (
    Kernel("attention", "attention", "PyTorch's scaled_dot_product_attention"),
    Kernel("dropout_layer_norm", "fused_ln_dropout", "PyTorch's dropout, residual and LayerNorm"),
    Kernel("bias_gelu", "fused_gelu", "PyTorch's bias and GELU"),
    Kernel("adamw", "fused_adamw", "torch's fused AdamW on the fp32 masters"),
)
KERNEL_NAMES: tuple[str, ...] = tuple(k.name for k in KERNELS)
KERNEL_BY_NAME: Mapping[str, Kernel] = {k.name: k for k in KERNELS}

#: Where each kernel is proven (bench/NOTES.md: compiled without spills and measured against the standard
#: stack on an H200, sm_90). Add an architecture only with both.
PROVEN: Mapping[str, frozenset[str]] = {
    "attention": frozenset({"sm_90"}),
    "dropout_layer_norm": frozenset({"sm_90"}),
    "bias_gelu": frozenset({"sm_90"}),
    "adamw": frozenset({"sm_90"}),
}


def arch_of(capability: tuple[int, int]) -> str:
    """``sm_90`` for compute capability (9, 0)."""
    major, minor = capability
    return f"sm_{major}{minor}"


def check_arch(text: str) -> str:
    """``text`` when it names an architecture as ``sm_<digits>``; else ValueError."""
    digits = text.removeprefix("sm_")
    if not text.startswith("sm_") or not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"{ASSUME_ARCH_ENV}={text!r}: name an architecture as sm_<major><minor>, e.g. sm_86")
    return text


def _asked(args: argparse.Namespace, kernel: Kernel) -> bool | None:
    """What the command line said of ``kernel``: True (on), False (off) or None (nothing: the default)."""
    if kernel.name == "attention":
        return {"triton": True, "auto": None}.get(args.attention, False)
    value = getattr(args, kernel.flag)
    return None if value is None else bool(value)


def _not_here(kernel: Kernel, device: str, args: argparse.Namespace) -> str | None:
    """Why ``kernel`` is never on by default for this device, model and precision, or None."""
    if device != "cuda":
        return "for cuda only"
    if kernel.name == "adamw" and args.precision != "bf16":
        return "for --precision bf16 only"
    if kernel.name != "adamw" and args.impl != "compact":
        return "for the compact model only"
    return None


def choose(args: argparse.Namespace, device: str, arch: str | None) -> dict[str, str]:
    """Turn on by default the kernels proven on ``arch``; each kernel's state and why, for ``start``.

    Only unset flags are set (``--attention auto`` is unset: it becomes ``sdpa`` where the attention kernel
    is not proven); a kernel asked for runs as asked. The bias+GELU kernel's default follows
    ``--fused-ln-dropout`` where that was asked for either way, as its help says, and ``--fused-bias``
    asks for the dropout kernels it adds its biases in.
    """
    states: dict[str, str] = {}
    if args.fused_ln_dropout is None and args.fused_bias:  # its companion asked for: the kernel is too
        args.fused_ln_dropout = True
    norm_asked = args.fused_ln_dropout  # before this sets it
    for kernel in KERNELS:
        asked = _asked(args, kernel)
        if asked is not None:
            on, why = asked, "asked for"
        elif (reason := _not_here(kernel, device, args)) is not None:
            on, why = False, reason
        elif kernel.name == "bias_gelu" and norm_asked is not None:  # it follows the dropout kernels asked
            on, why = norm_asked, "with --fused-ln-dropout" if norm_asked else "with --no-fused-ln-dropout"
        elif arch is not None and arch in PROVEN[kernel.name]:
            on, why = True, f"proven on {arch}"
        else:
            where = ", ".join(sorted(PROVEN[kernel.name])) or "nowhere"
            on, why = False, f"not proven on {arch or 'this GPU'} (proven on {where}): {kernel.replaces} runs"
        states[kernel.name] = f"{'on' if on else 'off'}: {why}"
        if asked is None:
            if kernel.name == "attention":
                args.attention = "auto" if on else "sdpa"
            else:
                setattr(args, kernel.flag, on)
    return states


def drop(args: argparse.Namespace, name: str) -> None:
    """Turn kernel ``name`` off: the standard op runs instead (after a failed check)."""
    kernel = KERNEL_BY_NAME[name]
    if kernel.name == "attention":
        args.attention = "sdpa"
    else:
        setattr(args, kernel.flag, False)
    if kernel.name == "dropout_layer_norm":  # its companions add to its kernels
        args.fused_bias = False


def in_use(args: argparse.Namespace) -> tuple[str, ...]:
    """The kernels ``args`` turns on, in :data:`KERNELS`' order (``--attention auto``: where it runs)."""
    return tuple(k.name for k in KERNELS if _asked(args, k) is not False)
