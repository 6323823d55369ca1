"""The kernels' checks: each of the workload's own kernels held to the op it replaces, on this rank's GPU.

The first phase after ``start``: the ranks' agreement on the kernels is the first collective that moves data.
A kernel that failed its check on any rank, or that another rank does not use (another GPU there), is
dropped on every rank (:mod:`rollcall_workload.kernels.check`); the run says ``kernels`` with each one's new
state.
"""

from __future__ import annotations

import argparse
import os

from rollcall_workload.faults import mismatched_kernels
from rollcall_workload.kernels.gate import KERNEL_BY_NAME, drop, in_use
from rollcall_workload.model import model_shape
from rollcall_workload.rank.dist import Accelerator, DistEnv


def check_kernels(args: argparse.Namespace, acc: Accelerator, env: DistEnv) -> dict[str, str]:
    """Hold each kernel the run would use to the op it replaces on this GPU; each one's new state, and why.

    A kernel that failed its check on any rank, or that another rank does not use (another GPU there), is
    dropped on every rank (:mod:`rollcall_workload.kernels.check`). Every rank on cuda joins the ranks'
    agreement, whatever it checked.
    """
    import torch

    from rollcall_workload.kernels import INTERPRETING

    if acc.kind != "cuda" and not INTERPRETING:  # no kernel of ours runs: no rank checks any
        return {}
    from rollcall_workload.kernels.attention import triton_attention_available
    from rollcall_workload.kernels.check import Shapes, agree, check

    names, s = list(in_use(args)), model_shape(args)
    if "attention" in names and not triton_attention_available(acc.device, args.seq_len, s.hidden // s.heads):
        names.remove("attention")  # ``auto`` takes PyTorch's here: nothing of ours runs
    dtype = torch.bfloat16 if acc.bf16 and acc.kind == "cuda" else torch.float32
    shapes = Shapes(args.batch_size, args.seq_len, s.heads, s.hidden, s.intermediate, bool(args.fused_bias))
    local = check(names, shapes, dtype, acc.device, mismatched_kernels(os.environ, env.rank))
    states = {}
    for name, verdict in agree(local, env.rank, env.world_size, acc.device).items():
        if verdict == "ok":
            error = local[name]
            states[name] = (
                f"on: checked against {KERNEL_BY_NAME[name].replaces} (error {error:.0%} of the tolerance)"
            )
        else:
            drop(args, name)
            states[name] = f"off: {verdict}; {KERNEL_BY_NAME[name].replaces} runs"
    return states
