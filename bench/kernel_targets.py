"""Every Triton kernel of the workload compiled for each GPU architecture, with no GPU: its registers, spills
and shared memory, and whether rollcall_workload.kernels.gate calls it proven there.

    python bench/kernel_targets.py [TARGET,...] [KERNEL...]     (default: every target of gate.TARGETS)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.kernels.gate import PROVEN, SHARED_MEMORY, TARGETS
from tests.unit import kernel_targets as kt


def main() -> None:
    targets = sys.argv[1].split(",") if len(sys.argv) > 1 else list(TARGETS)
    names = sys.argv[2:] or list(kt.kernels())
    print(f"{'target':7} {'kernel':32} {'regs':>4} {'spill':>5} {'shared':>7} {'limit':>7}  gate")
    for target in targets:
        for name in names:
            started = time.monotonic()
            with tempfile.TemporaryDirectory() as d:
                try:
                    u = kt.usage(name, target, Path(d))
                except Exception as exc:
                    print(f"{target:7} {name:32} failed: {type(exc).__name__}: {str(exc)[:200]}")
                    continue
            gate = "proven" if target in PROVEN[kt.GATE_NAME[name]] else "-"
            print(
                f"{target:7} {name:32} {u.registers:4} {u.spilled:5} {u.shared:7} {SHARED_MEMORY[target]:7}  "
                f"{gate}  ({time.monotonic() - started:.1f}s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
