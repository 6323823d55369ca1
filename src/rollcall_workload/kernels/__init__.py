"""The workload's own Triton kernels, each a module: used by the compact model only where they are proven.

Triton is optional: torch's CUDA wheels ship it, the CPU image has none, and then every op takes PyTorch's
path. Under Triton's interpreter (``TRITON_INTERPRET=1`` set before Triton is imported) the kernels run on
CPU tensors, which is how the tests hold them to PyTorch's ops without a GPU.
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["INTERPRETING", "tl", "triton"]

triton: Any = None
tl: Any = None
with contextlib.suppress(ImportError):  # torch's CUDA wheels ship Triton; the CPU image has none
    import triton  # type: ignore[no-redef]
    import triton.language as tl  # type: ignore[no-redef]
#: Triton's interpreter (``TRITON_INTERPRET=1`` when Triton was imported) runs the kernels on CPU tensors.
INTERPRETING = triton is not None and bool(triton.knobs.runtime.interpret)
