"""AdamW through fp32 master weights as one Triton kernel: bf16 gradients read, bf16 parameters written."""

# Triton's kernels take untyped arguments by design (a kernel's types come from its launch) and Triton ships
# no type information; the functions around the kernels are typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator"

from __future__ import annotations

import torch

from rollcall_workload.kernels import tl, triton

#
# The bf16 parameters' AdamW step through fp32 masters, one kernel over every parameter: each program
# reads BLOCK elements of one parameter's bf16 gradient (its address from a table rebuilt each step, as
# autograd allocates the gradients), the fp32 master and both moments (flat buffers, each parameter's
# segment padded to whole blocks), and writes the master, the moments and the bf16 parameter. Against
# copying the gradients into fp32, torch's fused AdamW and copying the masters back (40 bytes an
# element), 28 bytes an element. The arithmetic is torch's fused AdamW's, in float32.

#: Elements per program of the AdamW kernel, and its warps.
ADAMW_BLOCK = 1024
ADAMW_WARPS = 4

if triton is not None:

    @triton.jit
    def _master_adamw(  # noqa: PLR0917 - a kernel's arguments are positional
        BLOCK_PARAM,
        BLOCK_START,
        NUMEL,
        OFFSET,
        PARAM_PTR,
        GRAD_PTR,
        MASTER,
        EXP_AVG,
        EXP_AVG_SQ,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        step_size,
        bias_correction2_sqrt,
        BLOCK: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/test_bert_compact.py)
        block = tl.program_id(0)
        i = tl.load(BLOCK_PARAM + block)
        at = tl.load(BLOCK_START + block) + tl.arange(0, BLOCK)
        inside = at < tl.load(NUMEL + i)
        state = tl.load(OFFSET + i) + at
        grad_ptr = tl.load(GRAD_PTR + i).to(tl.pointer_type(tl.bfloat16))
        param_ptr = tl.load(PARAM_PTR + i).to(tl.pointer_type(tl.uint16))  # bf16's bits
        g = tl.load(grad_ptr + at, mask=inside, other=0.0).to(tl.float32)
        w = tl.load(MASTER + state, mask=inside, other=0.0)
        m = tl.load(EXP_AVG + state, mask=inside, other=0.0)
        v = tl.load(EXP_AVG_SQ + state, mask=inside, other=0.0)
        w -= lr * weight_decay * w
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        w -= step_size * m / (tl.sqrt(v) / bias_correction2_sqrt + eps)
        tl.store(MASTER + state, w, mask=inside)
        tl.store(EXP_AVG + state, m, mask=inside)
        tl.store(EXP_AVG_SQ + state, v, mask=inside)
        # to bf16 rounding to nearest, ties to even, in integers (Triton's interpreter truncates a cast)
        bits = w.to(tl.uint32, bitcast=True)
        bits = tl.where(w != w, 0x7FC00000, bits + 0x7FFF + ((bits >> 16) & 1))  # noqa: PLR0124 - a NaN stays one
        tl.store(param_ptr + at, (bits >> 16).to(tl.uint16), mask=inside)


class MasterAdamW:
    """AdamW (torch's defaults but ``lr``) of bf16 parameters through fp32 masters, one Triton kernel a step.

    ``master`` holds each parameter's fp32 master, a view into one flat buffer. A parameter without a
    gradient steps with a zero one (as the masters' optimizer of ``train.MasterWeightAdamW`` does).
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if triton is None:
            raise RuntimeError("the AdamW kernel needs Triton")
        if any(p.dtype != torch.bfloat16 or not p.is_contiguous() for p in params):
            raise ValueError("the AdamW kernel steps contiguous bf16 parameters only")
        self.params = params
        self.lr, (self.beta1, self.beta2), self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.steps = 0
        device = params[0].device
        blocks = [triton.cdiv(p.numel(), ADAMW_BLOCK) for p in params]
        offsets = [0]
        for n in blocks:
            offsets.append(offsets[-1] + n * ADAMW_BLOCK)
        flat = torch.zeros(offsets[-1], device=device, dtype=torch.float32)
        self.master = [flat[o : o + p.numel()].view_as(p) for o, p in zip(offsets[:-1], params, strict=True)]
        with torch.no_grad():
            torch._foreach_copy_(self.master, params)
        self._flat = flat
        self._exp_avg, self._exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)

        def table(values: list[int], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device)

        self._block_param = table([i for i, n in enumerate(blocks) for _ in range(n)], torch.int32)
        self._block_start = table([b * ADAMW_BLOCK for n in blocks for b in range(n)], torch.int64)
        self._numel = table([p.numel() for p in params], torch.int64)
        self._offset = table(offsets[:-1], torch.int64)
        self._param_ptr = table([p.data_ptr() for p in params], torch.int64)
        self._grad_addresses: list[int] = []
        self._grad_ptr = self._param_ptr

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW step of every master from its parameter's gradient, written back into the parameter."""
        grads = [
            torch.zeros_like(p) if p.grad is None else p.grad.to(torch.bfloat16).contiguous()
            for p in self.params
        ]
        addresses = [g.data_ptr() for g in grads]
        if addresses != self._grad_addresses:  # the allocator tends to hand out the same ones each step
            table = torch.tensor(addresses, dtype=torch.int64)
            # a blocking copy from pageable memory would wait for the backward: no next step queued meanwhile
            table = table.pin_memory() if self._flat.is_cuda else table
            self._grad_ptr = table.to(self._flat.device, non_blocking=True)
            self._grad_addresses = addresses
        self.steps += 1
        bias_correction1 = 1.0 - self.beta1**self.steps
        bias_correction2 = 1.0 - self.beta2**self.steps
        _master_adamw[(self._block_param.numel(),)](
            self._block_param,
            self._block_start,
            self._numel,
            self._offset,
            self._param_ptr,
            self._grad_ptr,
            self._flat,
            self._exp_avg,
            self._exp_avg_sq,
            self.lr,
            self.beta1,
            self.beta2,
            self.eps,
            self.weight_decay,
            self.lr / bias_correction1,
            bias_correction2**0.5,
            BLOCK=ADAMW_BLOCK,
            num_warps=ADAMW_WARPS,
        )
        del grads  # freed in stream order, after the kernel
