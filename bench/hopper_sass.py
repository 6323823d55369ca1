"""The Triton kernels' machine code for Hopper, read with no GPU: what each loop of each kernel issues.

Usage: python bench/hopper_sass.py [KERNEL...] [--mix 8]

Each kernel of ``tests/unit/kernel_targets.py`` (the attention's forward and backward, the master
AdamW) is compiled for sm_90 at its default launch shape, as that test compiles it, and disassembled with
the cuobjdump Triton's CUDA backend carries. One row per loop (a branch back to a lower address): its
instructions a thread per iteration, how many of them come before the loop's first warpgroup matmul, and
the loop's most frequent opcodes. Where a kernel is bound by issue slots rather than by memory or the
tensor cores, the count is what a change to it moves (bench/NOTES.md).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit import kernel_targets as hopper

CUOBJDUMP = hopper.ptxas_for("sm_90").with_name("cuobjdump")
#: ``/*0ce0*/   @!P0 IMAD.HI.U32 R21, ...``: an instruction's address and its opcode with modifiers.
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
BRANCH_BACK = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?BRA\s+0x([0-9a-f]+)")


def loops(sass: str) -> list[tuple[int, int]]:
    """(first, last) addresses of each loop: a branch to an address below its own (not to itself)."""
    found = []
    for m in BRANCH_BACK.finditer(sass):
        at, target = int(m.group(1), 16), int(m.group(2), 16)
        if target < at:
            found.append((target, at))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels", nargs="*", help=f"of: {', '.join(hopper.kernels())} (default: all)")
    ap.add_argument("--mix", type=int, default=8, help="the loop's N most frequent opcodes")
    args = ap.parse_args()
    names = args.kernels or list(hopper.kernels())
    unknown = sorted(set(names) - set(hopper.kernels()))
    if unknown:
        sys.exit(f"no kernel {', '.join(unknown)}; the kernels: {', '.join(hopper.kernels())}")
    if not (hopper.ptxas_for("sm_90").exists() and CUOBJDUMP.exists()):
        sys.exit(
            "Triton's CUDA backend has no ptxas or cuobjdump here: install triton with its nvidia backend"
        )
    print(
        f"{'kernel':<30} {'regs':>4} {'spill':>5} {'sass':>5} {'loop':>11} {'iter':>5} {'pre-MMA':>7}  loop mix"
    )
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            cubin, report, _ = hopper.compile_for(name, "sm_90", Path(tmp))
            sass = subprocess.run(
                [str(CUOBJDUMP), "--dump-sass", str(cubin)], capture_output=True, text=True, check=True
            ).stdout
        registers, spilled = hopper.ptxas_usage(report)
        code = [(int(a, 16), op) for a, op in INSTRUCTION.findall(sass)]
        head = f"{name:<30} {registers:>4} {spilled:>5} {len(code):>5}"
        if not loops(sass):
            print(f"{head} {'no loop':>11}")
        for first, last in loops(sass):
            body = [op for at, op in code if first <= at <= last]
            mma = next((i for i, op in enumerate(body) if op.startswith("WARPGROUP.ARRIVE")), None)
            span = f"{first:#06x}-{last:#06x}"
            print(
                f"{head} {span:>11} {len(body):>5} {mma if mma is not None else '-':>7}  {mix(body, args.mix)}"
            )
            if mma:
                print(f"{'':>{len(head) + 27}}  before it: {mix(body[:mma], args.mix)}")
            head = " " * len(head)


def mix(ops: list[str], top: int) -> str:
    """The ``top`` most frequent opcodes of ``ops``, with their counts."""
    return ", ".join(f"{op} {n}" for op, n in Counter(ops).most_common(top))


if __name__ == "__main__":
    main()
