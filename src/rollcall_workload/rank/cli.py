"""The workload's command line: its parser (which checks every value) and each device's defaults.

Imported by the suite without torch, to refuse ``--workload-args`` the ranks would refuse before a job starts.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    pass

from rollcall_workload.contract import BANDWIDTH_SCOPES
from rollcall_workload.kernels.gate import choose
from rollcall_workload.rank.compile_cache import COMPILE_CACHE_ENV
from rollcall_workload.rank.dist import Accelerator
from rollcall_workload.rank.watchdog import (
    FIRST_STEP_HANG_S,
    HANG_FLOOR_S,
    HANG_STEP_MULTIPLE,
    JOIN_HANG_S,
    START_SKEW_JOINS,
    start_skew_bound,
)
from rollcall_workload.shape import MODEL_PRESETS

DEVICES = ("auto", "cuda", "xla", "cpu")
IMPLS = ("hf", "compact")
PRECISIONS = ("autocast", "bf16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
COMPILE_SCOPES = ("model", "layer")  # --compile-scope: one graph for the model, or one shared by its layers

# Defaults that fit a small accelerator / a quick CPU run; every one can be overridden.
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    # A short run that proves the roll call on CPUs.
    "cpu": dict(
        model="tiny",
        seq_len=64,
        batch_size=8,
        warmup_steps=2,
        epochs=2,
        steps_per_epoch=3,
        compute_steps=10,
        bandwidth_mb=8.0,
        bandwidth_iters=10,
        impl="hf",
        precision="autocast",
        compile=False,
    ),
    # What keeps a GPU busy, so that a slow one shows: the compact BERT-large in bf16 with fp32 master
    # weights, compiled, with a batch sized to the GPU's memory (:func:`cuda_batch_size`); warm-up ends
    # once the step time settles (45% MFU on one H200, bench/NOTES.md).
    "cuda": dict(
        model="large",
        seq_len=128,
        warmup_steps=40,
        epochs=3,
        # the loss must fall over the 30 steps after the first epoch (the suite's LEARNING_STEPS)
        steps_per_epoch=15,
        compute_steps=10,
        bandwidth_mb=64.0,
        bandwidth_iters=20,
        impl="compact",
        precision="bf16",
        compile=True,
    ),
    # The Neuron path: Hugging Face's BERT-base, which the Neuron compiler takes as it is.
    "xla": dict(
        model="base",
        seq_len=128,
        batch_size=32,
        warmup_steps=10,
        epochs=3,
        steps_per_epoch=50,
        compute_steps=10,
        bandwidth_mb=64.0,
        bandwidth_iters=20,
        impl="hf",
        precision="autocast",
        compile=False,
    ),
}
#: Tokens per step (batch x sequence length) the default batch holds on a GPU of 128 GiB or more; less
#: memory, proportionally fewer (seq 128: 384 samples on an H200, 240 on an 80 GiB H100; seq 512: 96 and
#: 60). On one H200 this many tokens ran 2.9% faster than 32768 at seq 128 and 3.3% at seq 512 (the
#: optimizer and the step's fixed costs spread over more samples); 65536 gained nothing more
#: (bench/NOTES.md).
CUDA_TOKENS_PER_STEP = 49152
CUDA_FULL_MEMORY = 128 << 30


def cuda_batch_size(seq_len: int, memory_bytes: int) -> int:
    """The default batch on a GPU of ``memory_bytes``: :data:`CUDA_TOKENS_PER_STEP` scaled to its memory."""
    tokens = CUDA_TOKENS_PER_STEP * min(1.0, memory_bytes / CUDA_FULL_MEMORY)
    return max(1, int(tokens // seq_len))


class CommandLineError(ValueError):
    """An invalid command line; the message is argparse's own (``argument --seq-len: ...``)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises :class:`CommandLineError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(message)


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` (to ``high``, when given)."""
    bounds = f"from {low} to {high}" if high is not None else f">= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number {bounds}, not {text!r}")
        return value

    return parse


def _number(
    low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite number between ``low`` and ``high`` (each end included unless open)."""
    bounds = f"{'>' if low_open else '>='} {low:g}"
    if math.isfinite(high):
        bounds += f" and {'<' if high_open else '<='} {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (math.isfinite(value) and above and below):
            raise argparse.ArgumentTypeError(f"must be a number {bounds}, not {text!r}")
        return value

    return parse


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def _sizes(text: str) -> tuple[int, ...]:
    """An argparse type: ``MIN:MAX[:FACTOR]`` as the sizes of the sweep, in bytes, each a multiple of 4."""

    def size(word: str) -> int:
        match = re.fullmatch(r"(\d+)([KMG]?)B?", word.strip().upper())
        if not match:
            raise ValueError(word)
        return int(match[1]) * _SIZE_UNITS[match[2]] // 4 * 4

    parts = text.split(":")
    try:
        low, high = size(parts[0]), size(parts[1])
        factor = int(parts[2]) if len(parts) == 3 else 2
        if len(parts) not in (2, 3) or not 4 <= low <= high <= 4 * 2**30 or factor < 2:
            raise ValueError(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"must be MIN:MAX[:FACTOR], sizes from 4 bytes to 4G (e.g. 1M:2G:2), FACTOR >= 2, not {text!r}"
        ) from None
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return tuple(sizes)


def _scopes(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of :data:`BANDWIDTH_SCOPES`."""
    words = tuple(w.strip() for w in text.split(",") if w.strip())
    if not words or any(w not in BANDWIDTH_SCOPES for w in words):
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of {', '.join(BANDWIDTH_SCOPES)}, not {text!r}"
        )
    return words


#: PyTorch's default process-group timeout by backend (``torch.distributed.constants``), seconds: what
#: ``init_process_group`` waits for every rank to join, unless ``--pg-timeout`` says otherwise.
PG_TIMEOUT_S: dict[str, float] = {"nccl": 600.0, "gloo": 1800.0}


def _model_and_data(g: argparse._ArgumentGroup) -> None:
    """Add the options of the model and its data: the device, BERT's size, the batch, the precision."""
    g.add_argument("--device", choices=DEVICES, default="auto")
    g.add_argument("--model", choices=sorted(MODEL_PRESETS), help="tiny on cpu, large on cuda, base on xla")
    g.add_argument("--seq-len", type=_whole(5, 512), help="tokens per sample (64 on cpu, 128 otherwise)")
    g.add_argument(
        "--batch-size",
        type=_whole(1),
        help="samples per rank per step (8 cpu, by memory on cuda, 32 xla)",
    )
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--lr", type=_number(0, low_open=True), default=1e-4)
    g.add_argument("--pretrained", metavar="PATH", help="local BertForPreTraining weights to start from")
    g.add_argument(
        "--impl",
        choices=IMPLS,
        default=None,
        help="hf: Hugging Face BertForPreTraining; compact: the same model written for the compiler "
        "(cuda default)",
    )
    g.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="autocast: fp32 parameters under bf16 autocast; bf16: bf16 parameters, fp32 master weights "
        "in the optimizer (both bf16 on GPUs that have it, fp32 elsewhere)",
    )
    g.add_argument(
        "--dropout",
        type=_number(0, 1, high_open=True),
        help="dropout of hidden states and attention (BERT's 0.1)",
    )
    g.add_argument(
        "--mlm-head",
        choices=("masked", "all"),
        default="masked",
        help="run the MLM head on the masked positions only (default) or on every token",
    )


def _schedule(g: argparse._ArgumentGroup) -> None:
    """Add the options of the schedule: warm-up, the timed epochs, the compute steps, MFU's peak."""
    g.add_argument(
        "--warmup-steps", type=_whole(0), help="most untimed steps before the epochs (2 cpu, 40 cuda, 10 xla)"
    )
    g.add_argument(
        "--warmup-settle",
        type=_whole(0),
        default=5,
        metavar="K",
        help="end warm-up once the last K step times agree (0: always --warmup-steps)",
    )
    g.add_argument(
        "--warmup-tolerance",
        type=_number(0, low_open=True),
        default=5.0,
        metavar="PCT",
        help="how close to their median, in percent, the last K step times must be",
    )
    g.add_argument("--epochs", type=_whole(1), help="timed epochs (2 cpu, 3 otherwise)")
    g.add_argument("--steps-per-epoch", type=_whole(1), help="steps per timed epoch (3 cpu, 15 cuda, 50 xla)")
    g.add_argument("--compute-steps", type=_whole(0), help="timed steps without communication (10; 0: off)")
    g.add_argument(
        "--peak-tflops",
        type=_number(0, low_open=True),
        help="device peak TFLOP/s for MFU (overrides the table)",
    )


def _compiler(g: argparse._ArgumentGroup) -> None:
    """Add the options of the compiler: torch.compile, its mode and scope, its caches."""
    g.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the model before DDP wraps it (cuda/cpu; on by default on cuda)",
    )
    g.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="torch.compile mode; reduce-overhead adds CUDA graphs (default: default)",
    )
    g.add_argument(
        "--compile-scope",
        choices=COMPILE_SCOPES,
        help="model: compile the whole model as one graph; layer: each encoder layer, the embeddings and "
        "the heads apart, the layers sharing one graph (half the cold compile; --impl compact only, "
        "and its default)",
    )
    g.add_argument(
        "--compile-cache",
        metavar="DIR",
        default=os.environ.get(COMPILE_CACHE_ENV) or None,
        help=f"keep the compiler's caches under DIR between runs (default: ${COMPILE_CACHE_ENV})",
    )


def _kernels(g: argparse._ArgumentGroup) -> None:
    """Add the options of the kernels: the compact model's attention and the workload's Triton kernels."""
    g.add_argument(
        "--attention",
        choices=("auto", "sdpa", "flash", "cudnn", "efficient", "math", "triton"),
        default="auto",
        help="the compact model's attention: scaled_dot_product_attention with the backend it picks (sdpa) "
        "or one named, or triton: the workload's Triton kernels with their own dropout (auto: those in bf16 "
        "on cuda where they are proven, else sdpa)",
    )
    g.add_argument(
        "--fused-ln-dropout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the compact model's dropout+residual+LayerNorm as the workload's Triton kernels on cuda "
        "(one Philox call per eight elements, the mask redrawn in the backward; on by default with "
        "--impl compact on cuda)",
    )
    g.add_argument(
        "--fused-gelu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the compact model's bias+GELU as the workload's Triton kernels on cuda (the bias's "
        "gradient summed in the backward's kernel; on by default with --fused-ln-dropout)",
    )
    g.add_argument(
        "--fused-bias",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --fused-ln-dropout, the biases of the matmuls before it added in its kernels (their "
        "gradients summed there) instead of in the matmuls' epilogues (on by default with it)",
    )
    g.add_argument(
        "--fused-residual-grad",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the compact model's layer inputs' two gradients (the residual's and the matmul's) summed by "
        "the matmul's backward (addmm) instead of a kernel of their own (on by default with "
        "--fused-ln-dropout)",
    )
    g.add_argument(
        "--fused-adamw",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --precision bf16, the AdamW step through the fp32 masters as one of the "
        "workload's Triton kernels instead of two copies and torch's fused AdamW (on by default on cuda)",
    )


def _bandwidth(g: argparse._ArgumentGroup) -> None:
    """Add the options of the bandwidth phase: the all-reduces it times, their sizes and groups."""
    g.add_argument(
        "--bandwidth-mb",
        type=_number(0, 4096),
        help="MiB per all-reduce of the bandwidth phase (8 cpu, 64 otherwise; 0: off)",
    )
    g.add_argument(
        "--bandwidth-iters", type=_whole(1), help="timed all-reduces per group (10 cpu, 20 otherwise)"
    )
    g.add_argument(
        "--bandwidth-scopes",
        type=_scopes,
        default=BANDWIDTH_SCOPES,
        metavar="SCOPE[,SCOPE]",
        help=f"the groups the bandwidth phase measures, of {', '.join(BANDWIDTH_SCOPES)} (default: all)",
    )
    g.add_argument(
        "--bandwidth-sizes",
        type=_sizes,
        metavar="MIN:MAX[:FACTOR]",
        help="sweep all-reduce sizes from MIN to MAX bytes (K, M, G: powers of 1024), each FACTOR (2) times "
        "the last, as nccl-tests' -b/-e/-f; replaces --bandwidth-mb, the events report MAX",
    )
    g.add_argument(
        "--bandwidth-only",
        action="store_true",
        help="join the process group and run only the bandwidth phase (no model, no training)",
    )


def _bounds(g: argparse._ArgumentGroup) -> None:
    """Add the options of the bounds: what the watchdog waits for a step or phase, and the process group."""
    g.add_argument(
        "--hang-after",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="dump every thread's stack when no step or phase completes within SECONDS (default: "
        f"{HANG_STEP_MULTIPLE:g} x the median step time, at least {HANG_FLOOR_S:g})",
    )
    g.add_argument(
        "--first-step-hang-after",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="the same until the first step (which compiles) completes (default: "
        + ", ".join(f"{v:g} {k}" for k, v in FIRST_STEP_HANG_S.items())
        + "; never below --hang-after)",
    )
    g.add_argument(
        "--join-hang-after",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="the same from entering init_process_group until the rank has joined the process group, so that "
        f"a rank that never joins is named within it (default: {JOIN_HANG_S:g})",
    )
    g.add_argument(
        "--start-skew",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="the same from the rank's process start until it enters init_process_group (its imports and "
        f"device setup), the suite's start skew (default: {START_SKEW_JOINS:g} x --join-hang-after)",
    )
    g.add_argument(
        "--pg-timeout",
        type=_number(0, low_open=True),
        metavar="SECONDS",
        help="init_process_group's timeout, within which every rank must join the group and each collective "
        "complete (default: PyTorch's, " + ", ".join(f"{v:g} on {k}" for k, v in PG_TIMEOUT_S.items()) + ")",
    )
    g.add_argument(
        "--dist-backend",
        choices=("nccl", "gloo"),
        help="the process group's backend (the device's: nccl on cuda, gloo on cpu); gloo on cuda runs "
        "the collectives through host memory, e.g. for ranks that share one GPU, which NCCL refuses",
    )


#: The command line's groups, in ``--help``'s order: each one's title and what adds its options.
_GROUPS: tuple[tuple[str, Callable[[argparse._ArgumentGroup], None]], ...] = (
    ("the model and its data", _model_and_data),
    ("the schedule", _schedule),
    ("the compiler", _compiler),
    ("the kernels", _kernels),
    ("the bandwidth phase", _bandwidth),
    ("the bounds", _bounds),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; sizes left unset get their device's defaults in :func:`apply_defaults`.

    Every value is checked here (a size must be positive, ``--seq-len`` fit BERT's position embeddings), so
    the suite can check a command line before it launches anything; :class:`CommandLineError` names the
    argument and what it must be.
    """
    p = _Parser(description="Distributed BERT pre-training roll call (run under torchrun).")
    for title, add in _GROUPS:
        add(p.add_argument_group(title))
    return p.parse_args(argv)


def join_bound(argv: Sequence[str]) -> float:
    """The join bound (``--join-hang-after``) train.py's arguments ``argv`` give.

    The node's monitor waits for the launchers' rendezvous in steps of it. :data:`JOIN_HANG_S` where they
    give none, or do not parse (the suite refuses those before launch).
    """
    try:
        value = parse_args(list(argv)).join_hang_after
    except (CommandLineError, SystemExit):
        return JOIN_HANG_S
    return float(value) if value else JOIN_HANG_S


def start_skew(argv: Sequence[str], join: float | None = None) -> float:
    """The bound of the imports and device setup (``--start-skew``) train.py's arguments ``argv`` give.

    Where they give none, or do not parse (the suite refuses those before launch): twice the join bound
    (:func:`start_skew_bound`), ``join`` where given, else theirs.
    """
    try:
        value = parse_args(list(argv)).start_skew
    except (CommandLineError, SystemExit):
        value = None
    return float(value) if value else start_skew_bound(join or join_bound(argv))


def apply_defaults(
    args: argparse.Namespace, device: str, memory_bytes: int | None = None, arch: str | None = None
) -> dict[str, str]:
    """Fill unset settings from :data:`RUN_DEFAULTS` for ``device`` and check what depends on the device.

    On cuda an unset batch is sized to the GPU's ``memory_bytes`` (:func:`cuda_batch_size`; 32 when
    unknown), and the workload's own kernels are on by default only where
    :mod:`rollcall_workload.kernels.gate` says they are proven on the GPU's ``arch`` (``sm_90``; None:
    unknown, none is). Each value alone is checked by :func:`parse_args`; here only what depends on the
    device or on two arguments together. Returns each kernel's state and why (``start``'s ``kernels``).
    """
    for key, value in RUN_DEFAULTS[device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.batch_size is None:
        args.batch_size = cuda_batch_size(args.seq_len, memory_bytes) if memory_bytes else 32
    if args.compile_scope is None:  # layer where it was measured: same speed, half the cold compile
        args.compile_scope = "layer" if args.impl == "compact" else "model"
    elif args.compile_scope != "model" and args.impl != "compact":
        raise ValueError("--compile-scope layer compiles the compact model's layers: add --impl compact")
    if args.attention != "auto" and args.impl != "compact":
        raise ValueError("--attention picks the compact model's kernel: add --impl compact")
    if args.fused_ln_dropout and args.impl != "compact":
        raise ValueError("--fused-ln-dropout fuses the compact model's chains: add --impl compact")
    if args.fused_gelu and args.impl != "compact":
        raise ValueError("--fused-gelu fuses the compact model's bias+GELU: add --impl compact")
    if args.fused_residual_grad and args.impl != "compact":
        raise ValueError("--fused-residual-grad changes the compact model's layers: add --impl compact")
    if args.fused_adamw and device != "cuda":
        raise ValueError("--fused-adamw runs a Triton kernel on a GPU: add --device cuda or drop it")
    kernels = choose(args, device, arch)
    if args.fused_bias is None:
        args.fused_bias = bool(args.fused_ln_dropout)
    elif args.fused_bias and not args.fused_ln_dropout:
        raise ValueError("--fused-bias adds the biases in the --fused-ln-dropout kernels: add that")
    if args.fused_residual_grad is None:  # measured with the dropout+LayerNorm kernels (bench/NOTES.md)
        args.fused_residual_grad = bool(args.fused_ln_dropout)
    if args.dist_backend and args.dist_backend != Accelerator.BACKENDS[device] and device != "cuda":
        raise ValueError(f"--dist-backend {args.dist_backend} is for --device cuda (cpu uses gloo, xla xla)")
    return kernels
