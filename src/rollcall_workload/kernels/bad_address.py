"""``ROLLCALL_BAD_ADDRESS_RANK``'s fault: the rank's GPU reads an address nothing maps (an MMU fault).

One Triton program loads from 2**46 bytes past a one-element tensor: the GPU faults (the driver logs Xid 31,
which NVML's event set delivers to the node's monitor), and the rank's next synchronize raises CUDA's
"an illegal memory access was encountered", as a program's own bug would. Only on cuda with Triton; elsewhere
:func:`read_unmapped` raises naming the variable.
"""

# A Triton kernel takes untyped arguments by design (its types come from its launch), and Triton reads its
# annotations: a name such as ``Any`` there is a global it refuses to compile. The function around it is
# typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator"

from __future__ import annotations

from typing import Any

from rollcall_workload.kernels import tl, triton

#: Elements (of 4 bytes) past the tensor the program reads: 64 TiB away, beyond any mapping.
FAR = 1 << 44

_read_far: Any = None
if triton is not None:

    @triton.jit
    def _read_far(src, dst, far):
        tl.store(dst, tl.load(src + far))


def read_unmapped(device: Any, variable: str) -> None:
    """Make ``device``'s GPU read an unmapped address, then wait for it (which raises CUDA's error)."""
    import torch

    if _read_far is None or getattr(device, "type", None) != "cuda":
        raise RuntimeError(f"{variable} needs a CUDA device and Triton: this rank has {device}")
    src = torch.zeros(1, device=device)
    dst = torch.empty(1, device=device)
    _read_far[(1,)](src, dst, FAR)
    torch.cuda.synchronize(device)
