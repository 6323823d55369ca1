"""The compiler's caches between runs (``--compile-cache``), and whether the first step's compile hit them."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rollcall_workload.contract import CompileCacheState

if TYPE_CHECKING:
    pass


COMPILE_CACHE_ENV = "ROLLCALL_COMPILE_CACHE"


def compile_cache_env(directory: str) -> dict[str, str]:
    """The environment that keeps inductor's and Triton's caches under ``directory``."""
    root = os.path.abspath(directory)
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(root, "triton"),
    }


def keep_bytecode(directory: str, module: str = "torch") -> str | None:
    """Keeps Python's bytecode under ``directory``/python where ``module`` has none; that directory, or None.

    An interpreter that finds no bytecode beside torch's modules (an image that ships none and sets
    ``PYTHONDONTWRITEBYTECODE``) compiles every module it imports from source, in every process of every
    run: about 8 s of a rank's start-up on an H200 host (``import torch._inductor.compile_fx`` 11.5-13.9 s
    from source, 3.2-3.6 s from bytecode; bench/NOTES.md). Then this process, and through
    ``PYTHONPYCACHEPREFIX`` its children (inductor's compile workers), read and write their bytecode under
    the compile cache instead, so a later run reads it. Nothing changes where ``module`` is already imported
    (the imports this is for are done), where a prefix is set, or where ``module`` has its bytecode beside
    it (a prefix would hide it: an image's own bytecode would go unread).
    """
    if module in sys.modules or sys.pycache_prefix is not None:
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    if os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return None
    prefix = os.path.join(os.path.abspath(directory), "python")
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    return prefix


#: What ``throughput``'s ``compile_cache`` says of the first step's compile.
def compile_cache_fields(compiled: bool, inductor: Mapping[str, int]) -> dict[str, Any]:
    """``throughput``'s compile-cache fields, from inductor's counters after the first step.

    Args:
        compiled: whether the model was compiled (``--compile``); without it nothing is cached: "off".
        inductor: ``torch._dynamo.utils.counters["inductor"]``: ``fxgraph_cache_hit``, ``fxgraph_cache_miss``.
    """
    if not compiled:
        return {"compile_cache": "off", "compile_cache_hits": None, "compile_cache_misses": None}
    hits, misses = int(inductor.get("fxgraph_cache_hit", 0)), int(inductor.get("fxgraph_cache_miss", 0))
    state: CompileCacheState = "hit" if hits > 0 and misses == 0 else "miss"
    return {"compile_cache": state, "compile_cache_hits": hits, "compile_cache_misses": misses}


def _inductor_counters() -> dict[str, int]:
    """Inductor's counters so far (its FX graph cache's hits and misses among them); empty without them."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without dynamo compiles nothing
        return {}
    return dict(counters["inductor"])
