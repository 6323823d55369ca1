"""The kernels' gate: each of the workload's kernels on by default only where it is proven, and why not elsewhere."""

from __future__ import annotations

import pytest

from rollcall import jobspec
from rollcall_workload import faults
from rollcall_workload.kernels import gate
from rollcall_workload.rank import cli

ON_SM90 = {"attention": "auto", "fused_ln_dropout": True, "fused_gelu": True, "fused_adamw": True}


def _defaults(argv: list[str], device: str = "cuda", arch: str | None = "sm_90"):
    args = cli.parse_args(argv)
    states = cli.apply_defaults(args, device, 141 * 10**9, arch)
    return args, states


def test_every_kernel_has_a_row_in_the_table_and_is_proven_only_on_targets_ci_compiles_for():
    assert set(gate.PROVEN) == set(gate.KERNEL_NAMES)
    for name, archs in gate.PROVEN.items():
        assert archs <= set(gate.TARGETS), name
    assert set(gate.SHARED_MEMORY) == set(gate.TARGETS)


def test_on_a_proven_architecture_every_kernel_is_on_by_default():
    args, states = _defaults([])
    assert {flag: getattr(args, flag) for flag in ON_SM90} == ON_SM90
    assert states == dict.fromkeys(gate.KERNEL_NAMES, "on: proven on sm_90")


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_100", None])
def test_elsewhere_the_standard_stack_runs_and_start_says_why(arch):
    args, states = _defaults([], arch=arch)
    assert (args.attention, args.fused_ln_dropout, args.fused_gelu, args.fused_adamw) == (
        "sdpa",
        False,
        False,
        False,
    )
    assert not args.fused_bias and not args.fused_residual_grad
    for kernel in gate.KERNELS:
        assert states[kernel.name] == (
            f"off: not proven on {arch or 'this GPU'} (proven on sm_90): {kernel.replaces} runs"
        )
    assert gate.in_use(args) == ()


def test_a_kernel_asked_for_runs_where_it_is_not_proven():
    args, states = _defaults(["--attention", "triton", "--fused-adamw"], arch="sm_86")
    assert args.attention == "triton" and args.fused_adamw and not args.fused_ln_dropout
    assert states["attention"] == states["adamw"] == "on: asked for"
    assert gate.in_use(args) == ("attention", "adamw")
    args, states = _defaults(["--no-fused-adamw", "--attention", "flash"])
    assert states["adamw"] == states["attention"] == "off: asked for" and args.attention == "flash"


def test_off_the_compact_model_and_off_cuda_no_kernel_is_on_by_default():
    _, states = _defaults(["--impl", "hf"])
    assert states["attention"] == "off: for the compact model only"
    assert states["adamw"] == "on: proven on sm_90"  # the optimizer's kernel steps any bf16 model
    for device in ("cpu", "xla"):
        _, states = _defaults([], device=device, arch=None)
        assert set(states.values()) == {"off: for cuda only"}


def test_gelu_follows_the_dropout_kernels_asked_for_either_way():
    args, states = _defaults(["--no-fused-ln-dropout"])
    assert not args.fused_gelu and states["bias_gelu"] == "off: with --no-fused-ln-dropout"
    args, states = _defaults(["--fused-ln-dropout"], arch="sm_86")
    assert args.fused_gelu and states["bias_gelu"] == "on: with --fused-ln-dropout"


def test_a_companion_asked_for_asks_for_its_kernel_and_adamw_needs_bf16_weights():
    args, states = _defaults(["--fused-bias"], arch="sm_86")  # refused after launch, on every rank, before
    assert args.fused_ln_dropout and args.fused_bias and states["dropout_layer_norm"] == "on: asked for"
    args, states = _defaults(["--precision", "autocast"])
    assert not args.fused_adamw and states["adamw"] == "off: for --precision bf16 only"


def test_a_dropped_kernel_is_off_with_its_companions():
    args, _ = _defaults([])
    for name in gate.KERNEL_NAMES:
        gate.drop(args, name)
    assert (args.attention, args.fused_ln_dropout, args.fused_bias, args.fused_gelu, args.fused_adamw) == (
        "sdpa",
        False,
        False,
        False,
        False,
    )
    assert gate.in_use(args) == ()


def test_the_architecture_of_a_capability():
    assert (
        gate.arch_of((9, 0)) == "sm_90"
        and gate.arch_of((10, 0)) == "sm_100"
        and gate.arch_of((8, 6)) == "sm_86"
    )


def test_the_fault_variables_of_the_gate_parse_and_bad_ones_are_refused_before_launch():
    env = {faults.KERNEL_MISMATCH_ENV: "1,3:attention,adamw", gate.ASSUME_ARCH_ENV: "sm_86"}
    assert faults.mismatched_kernels(env, 1) == {"attention", "adamw"}
    assert faults.mismatched_kernels(env, 0) == frozenset()
    assert faults.mismatched_kernels({faults.KERNEL_MISMATCH_ENV: "0"}, 0) == set(gate.KERNEL_NAMES)
    assert faults.assumed_arch(env) == "sm_86" and faults.assumed_arch({}) is None
    faults.check_fault_injection(env)
    for bad, message in (
        ({faults.KERNEL_MISMATCH_ENV: "x"}, "ROLLCALL_KERNEL_MISMATCH"),
        ({faults.KERNEL_MISMATCH_ENV: "1:flash"}, "no kernel flash"),
        ({gate.ASSUME_ARCH_ENV: "ampere"}, "ROLLCALL_ASSUME_ARCH='ampere': name an architecture as sm_"),
    ):
        with pytest.raises(ValueError, match=message):
            jobspec.check_env(bad)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kernel_failing_its_check_on_one_rank_is_dropped_on_both_and_the_run_passes(tmp_path):
    """Two CPU ranks run the kernels' checks in Triton's interpreter; rank 1's are made to fail.

    Rank 0's own checks pass (the kernels match PyTorch's ops there); both ranks drop both kernels, say why in
    ``start``, train on PyTorch's ops and finish with the same parameters.
    """
    import json
    import os
    import subprocess
    import sys

    from tests.unit.test_workload import TRAIN_PY

    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")
    }
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TRITON_INTERPRET="1")
    env[faults.KERNEL_MISMATCH_ENV] = "1"
    argv = ["--device", "cpu", "--impl", "compact", "--fused-ln-dropout", "--fused-gelu"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = subprocess.run([*cmd, str(TRAIN_PY), *argv], env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    events = [
        json.loads(line.partition("ROLLCALL ")[2])
        for line in proc.stdout.splitlines()
        if "ROLLCALL {" in line
    ]
    starts = {e["rank"]: e for e in events if e["event"] == "start"}
    settled = {e["rank"]: e for e in events if e["event"] == "kernels"}  # after the checks, after start
    for name, op in (
        ("dropout_layer_norm", "dropout, residual and LayerNorm"),
        ("bias_gelu", "bias and GELU"),
    ):
        assert starts[0]["kernels"][name] == starts[1]["kernels"][name] == "on: asked for"
        assert settled[1]["kernels"][name].startswith(
            "off: failed its check here: ValueError: the output differs"
        )
        assert settled[0]["kernels"][name] == f"off: failed its check on rank 1; PyTorch's {op} runs"
    digests = {e["param_digest"] for e in events if e["event"] == "complete"}
    assert len([e for e in events if e["event"] == "complete"]) == 2 and len(digests) == 1
