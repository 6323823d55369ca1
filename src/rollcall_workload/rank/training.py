"""The training step's parts: the model wrapped for the device and DDP, its optimizer and precision."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from rollcall_workload.model import build_model, pretraining_loss
from rollcall_workload.rank.dist import Accelerator, DistEnv
from rollcall_workload.shape import BertShape


def precision_label(precision: str, bf16: bool) -> str:
    """How a run of ``--precision`` computes on a device with (``bf16``) or without bf16 support."""
    if not bf16:
        return "fp32"
    return "bf16-master-fp32" if precision == "bf16" else "bf16-autocast"


class MasterWeightAdamW:
    """AdamW on fp32 master copies of low-precision (bf16) parameters.

    Each step copies the gradients into the masters' fp32 gradients, steps the masters with a (fused)
    AdamW and copies them back into the parameters: two foreach copies a step instead of autocast's
    cast of every weight in every forward. With ``kernel`` (``--fused-adamw``, a GPU's default) all three
    are one Triton kernel (:mod:`rollcall_workload.compact`) that reads the bf16 gradients and writes the
    bf16 parameters.
    """

    def __init__(
        self, params: Iterable[torch.nn.Parameter], lr: float, fused: bool | None, kernel: bool = False
    ) -> None:
        import torch

        self.params: list[torch.Tensor] = [p for p in params if p.requires_grad]
        #: ``kernel``: the workload's one-kernel AdamW (gradients read in bf16, parameters written there)
        if kernel:
            from rollcall_workload.kernels.adamw import MasterAdamW  # imports torch and Triton

            self.kernel: Any = MasterAdamW(self.params, lr)
        else:
            self.kernel = None
        if self.kernel is not None:
            self.master = self.kernel.master
            return
        self.master = [p.detach().to(torch.float32, copy=True).requires_grad_() for p in self.params]
        for m in self.master:
            m.grad = torch.zeros_like(m)
        self.optimizer = torch.optim.AdamW(self.master, lr=lr, fused=fused)

    def step(self) -> None:
        """One AdamW step of the masters, written back into the parameters."""
        import torch

        if self.kernel is not None:
            self.kernel.step()
            return
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            have = [(m.grad, g) for m, g in zip(self.master, grads, strict=True) if g is not None]
            torch._foreach_copy_([m for m, _ in have], [g for _, g in have])
            for m, g in zip(self.master, grads, strict=True):
                if g is None:
                    m.grad.zero_()
            self.optimizer.step()
            torch._foreach_copy_(self.params, self.master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the parameters' gradients (the masters' are overwritten each step)."""
        for p in self.params:
            p.grad = None


@dataclass
class Training:
    """What one training step needs: the step's module, the optimizer, bf16 autocast or not."""

    model: torch.nn.Module  # the parameters every replica holds
    step_model: Callable[..., Any]
    optimizer: Any
    shape: BertShape
    precision: str  # "bf16-autocast", "bf16-master-fp32" or "fp32"
    autocast: bool
    cudagraphs: bool  # the compiled step replays CUDA graphs: mark each step's start


def build_training(args: argparse.Namespace, acc: Accelerator, env: DistEnv) -> Training:
    """The model of ``--impl`` on the device in ``--precision``, compiled if asked, DDP only when needed."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(args.seed)  # same initial weights everywhere; DDP also broadcasts rank 0's
    # On a GPU the weights are made and initialised there: seconds less start-up than on the host.
    with torch.device(acc.device) if acc.kind == "cuda" else contextlib.nullcontext():
        model, shape = build_model(args)
    bf16_weights = args.precision == "bf16" and acc.bf16
    model = model.to(acc.device, dtype=torch.bfloat16) if bf16_weights else model.to(acc.device)
    model.train()
    loss_module = pretraining_loss(model, masked_head=args.mlm_head == "masked")
    mode = None if args.compile_mode == "default" else args.compile_mode
    # Compile the model itself, then let DDP wrap it: DDP's hooks stay outside the compiled graph.
    step_module: Any = loss_module
    if args.compile and getattr(args, "compile_scope", "model") == "layer":
        model.compile_regions(mode=mode, dynamic=False)  # type: ignore[operator]
    elif args.compile:
        step_module = torch.compile(loss_module, mode=mode, dynamic=False)
    # One rank has no gradients to reduce: no DDP wrapper, no reducer, no bucket copies.
    step_model: Callable[..., Any] = (
        acc.data_parallel(step_module, DDP, env.local_rank) if env.world_size > 1 else step_module
    )
    fused = True if acc.kind == "cuda" else None
    optimizer: Any = (
        MasterWeightAdamW(
            model.parameters(),
            lr=args.lr,
            fused=fused,
            kernel=bool(getattr(args, "fused_adamw", False)) and acc.kind == "cuda",
        )
        if bf16_weights
        else torch.optim.AdamW(model.parameters(), lr=args.lr, fused=fused)
    )
    precision = precision_label(args.precision, acc.bf16)
    cudagraphs = bool(args.compile) and args.compile_mode in ("reduce-overhead", "max-autotune")
    return Training(model, step_model, optimizer, shape, precision, not bf16_weights, cudagraphs)
