"""Every Triton kernel of the workload compiled for each GPU architecture of the fleet, with no GPU here.

The gate (rollcall_workload.kernels.gate.PROVEN) may call a kernel proven on an architecture only where it compiles
there at the default run's shapes with no spills and within the shared memory a block may use; this test
compiles every kernel for every target of ``gate.TARGETS`` (with the ptxas Triton itself picks for each)
and fails when the gate's table and the compile results disagree. ``python bench/kernel_targets.py``
prints the whole table (registers, spills, shared memory).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollcall_workload.kernels.gate import PROVEN, SHARED_MEMORY, TARGETS
from tests.unit import kernel_targets as kt


def test_every_kernel_of_the_workload_is_compiled_and_has_a_row_in_the_gate():
    assert set(kt.kernels()) == set(kt.GATE_NAME)
    assert set(kt.GATE_NAME.values()) == set(PROVEN)
    assert set(kt.UNITS) == set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_each_kernel_compiles_for_the_target_and_where_the_gate_calls_it_proven_it_fits(target, tmp_path):
    assert kt.ptxas_for(target).is_file(), f"Triton's ptxas for {target} is missing: the install is broken"
    disagree = []
    for name, row in kt.GATE_NAME.items():
        (tmp_path / name).mkdir()
        usage = kt.usage(name, target, tmp_path / name)
        if target in PROVEN[row] and (usage.spilled or usage.shared > SHARED_MEMORY[target]):
            disagree.append(f"{name} ({row}): {usage}")
        if target == "sm_90" and name == "master AdamW":  # memory-bound: it needs many programs in flight
            assert usage.registers <= 128, f"{name}: {usage.registers} registers a thread"
    assert disagree == [], f"the gate calls these proven on {target}, but: {disagree}"


def test_the_gate_would_catch_a_kernel_that_spills(tmp_path):
    """The one-block attention backward spills on sm_86: a gate that claimed it proven there would fail."""
    usage = kt.usage("attention backward, one block", "sm_86", Path(tmp_path))
    assert usage.spilled > 0 and "sm_86" not in PROVEN["attention"]


def test_the_bad_address_faults_kernel_compiles_with_no_gpu():
    """ROLLCALL_BAD_ADDRESS_RANK's program is the workload's too: it must compile wherever it is asked for (an
    annotation Triton cannot resolve made it fail on the H200 before it read anything)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rollcall_workload.kernels import bad_address

    signature = {"src": "*fp32", "dst": "*fp32", "far": "i64"}
    kernel = triton.compile(
        ASTSource(fn=bad_address._read_far, signature=signature, constexprs={}),
        target=GPUTarget("cuda", kt.capability("sm_90"), 32),
    )
    assert "ld.global" in kernel.asm["ptx"]
