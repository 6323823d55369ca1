"""The workload (the package rollcall_workload): its pure helpers, and real 2-rank torchrun runs on cpu."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rollcall_workload import contract, faults
from rollcall_workload import main as workload_main
from rollcall_workload import model as workload_model
from rollcall_workload import shape as workload_shape
from rollcall_workload.rank import bandwidth as workload_bandwidth
from rollcall_workload.rank import cli, proofs, timing
from rollcall_workload.rank import compile_cache as workload_compile_cache
from rollcall_workload.rank import dist as workload_dist
from rollcall_workload.rank import training as workload_training

#: The entry point torchrun runs in the images and from the checkout.
TRAIN_PY = Path(__file__).resolve().parents[2] / "images" / "bert-training" / "train.py"


def _events(output: str) -> list[dict]:
    """Every roll-call record in ``output`` (the script's lines start with the marker)."""
    records = []
    for line in output.splitlines():
        if line.startswith(contract.EVENT_PREFIX):
            records.append(json.loads(line[len(contract.EVENT_PREFIX) :]))
    return records


# ------------------------------------------------------------------------------------------- pure helpers


def test_module_imports_without_torch():
    code = (
        "import sys, runpy\n"
        "import rollcall_workload.main, rollcall_workload.rank.cli, rollcall_workload.shape as m\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'imported torch'\n"
        "print(m.flops_per_sample(m.MODEL_PRESETS['large'], 128))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert float(out.stdout) > 0


def test_flops_bert_large_seq128_mlm_head_on_all_tokens():
    flops = workload_shape.flops_per_sample(workload_shape.MODEL_PRESETS["large"], 128)
    assert flops / 1e9 == pytest.approx(261.6, abs=0.05)


def test_flops_parts():
    shape = workload_shape.BertShape(hidden=64, layers=3, heads=2, intermediate=256, vocab=1000)
    seq = 32
    encoder = 3 * (4 * 64 * 64 + 2 * 64 * 256)
    head = 64 * 64 + 64 * 1000
    pooler = 64 * 64 + 2 * 64
    attention = 12 * 3 * 64 * seq * seq
    assert (
        workload_shape.flops_per_sample(shape, seq) == 6 * (encoder * seq + head * seq + pooler) + attention
    )
    # the MLM head on 5 tokens only
    assert (
        workload_shape.flops_per_sample(shape, seq, mlm_tokens=5)
        == 6 * (encoder * seq + head * 5 + pooler) + attention
    )


def test_flops_grow_with_model_and_sequence():
    presets = workload_shape.MODEL_PRESETS
    assert (
        workload_shape.flops_per_sample(presets["tiny"], 128)
        < workload_shape.flops_per_sample(presets["base"], 128)
        < workload_shape.flops_per_sample(presets["large"], 128)
    )
    assert workload_shape.flops_per_sample(presets["base"], 512) > 4 * workload_shape.flops_per_sample(
        presets["base"], 128
    )


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4e12),
        ("NVIDIA H200", 989.4e12),
        ("NVIDIA GH200 480GB", 989.4e12),
        ("NVIDIA H100 PCIe", 756.5e12),
        ("NVIDIA H100 NVL", 835.5e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100 80GB PCIe", 312e12),
        ("NVIDIA A10G", 70e12),
        ("NVIDIA A10", 125e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA L40S", 362.05e12),
        ("NVIDIA B200", 2.25e15),
        ("nvidia h100 80gb hbm3", 989.4e12),
        ("NVIDIA RTX A1000", None),
        ("Tesla V100-SXM2-16GB", None),
        ("cpu", None),
        ("", None),
    ],
)
def test_peak_lookup(name, peak):
    assert workload_shape.peak_flops(name) == peak


def test_mfu():
    assert workload_shape.model_flops_utilization(1e9, 100.0, 1e12) == pytest.approx(0.1)
    assert workload_shape.model_flops_utilization(1e9, 100.0, None) is None
    assert workload_shape.model_flops_utilization(1e9, 100.0, 0.0) is None


def test_event_line_is_one_json_line_under_pipe_buf():
    data = contract.encode_event("epoch_time", 3, 64, epoch=1, seconds=0.31)
    assert data.startswith(b"ROLLCALL ") and data.endswith(b"\n") and data.count(b"\n") == 1
    assert len(data) < 4096
    record = json.loads(data[len(b"ROLLCALL ") :])
    stamp = record.pop("time")
    assert isinstance(stamp, float) and abs(stamp - time.time()) < 60  # every event is stamped
    assert record == {"event": "epoch_time", "rank": 3, "world_size": 64, "epoch": 1, "seconds": 0.31}
    assert b", " not in data and b": " not in data  # compact


@pytest.mark.parametrize(
    "message", ["x" * 100_000, "line one\nline two\r\n" * 2000, "\u00e9\u4e2d\U0001f600" * 3000]
)
def test_long_error_message_stays_one_line(message):
    data = contract.encode_event("error", 1, 2, message=message)
    assert len(data) < 4096 and data.count(b"\n") == 1
    record = json.loads(data[len(b"ROLLCALL ") :])
    assert record["event"] == "error" and record["rank"] == 1 and record["world_size"] == 2
    assert record["message"].endswith("...")


def test_non_finite_numbers_become_null():
    data = contract.encode_event("throughput", 0, 1, samples_per_sec=math.inf, mfu=math.nan)
    record = json.loads(data[len(b"ROLLCALL ") :])
    assert record["samples_per_sec"] is None and record["mfu"] is None


def test_log_writes_each_line_whole():
    read_fd, write_fd = os.pipe()
    try:
        log = contract.RollcallLog(rank=5, world_size=8, fd=write_fd)
        log.emit("start", host="h", device="cuda:5")
        log.emit("complete")
        os.close(write_fd)
        out = os.read(read_fd, 65536).decode()
    finally:
        os.close(read_fd)
    assert [r["event"] for r in _events(out)] == ["start", "complete"]
    assert all(r["rank"] == 5 and r["world_size"] == 8 for r in _events(out))


def test_dist_env_from_torchrun():
    env = workload_dist.read_dist_env(
        {"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "GROUP_RANK": "4", "LOCAL_WORLD_SIZE": "2"}
    )
    assert env == workload_dist.DistEnv(
        rank=9, local_rank=1, world_size=16, node_rank=4, local_world_size=2, launched=True
    )


@pytest.mark.parametrize(
    ("environ", "node_rank"),
    [
        ({"GROUP_RANK": "2", "NODE_RANK": "3", "JOB_COMPLETION_INDEX": "4"}, 2),
        ({"NODE_RANK": "3", "JOB_COMPLETION_INDEX": "4"}, 3),
        ({"JOB_COMPLETION_INDEX": "4"}, 4),
        ({"GROUP_RANK": ""}, 0),
        ({}, 0),
    ],
)
def test_node_rank_fallbacks(environ, node_rank):
    assert workload_dist.read_dist_env(environ).node_rank == node_rank


def test_dist_env_without_torchrun_is_one_process():
    env = workload_dist.read_dist_env(
        {"OMPI_COMM_WORLD_RANK": "3", "PMI_RANK": "3"}
    )  # MPI variables are ignored
    assert (env.rank, env.world_size, env.local_world_size, env.launched) == (0, 1, 1, False)


@pytest.mark.parametrize(
    ("requested", "cuda", "xla_importable", "xla_configured", "device"),
    [
        ("auto", True, True, True, "cuda"),
        ("auto", False, True, True, "xla"),
        ("auto", False, True, False, "cpu"),
        ("auto", False, False, True, "cpu"),
        ("auto", False, False, False, "cpu"),
        ("cpu", True, True, True, "cpu"),
        ("xla", False, False, False, "xla"),
    ],
)
def test_resolve_device(requested, cuda, xla_importable, xla_configured, device):
    assert workload_dist.resolve_device(requested, cuda, xla_importable, xla_configured) == device


def test_xla_configured_by_pjrt_device():
    assert workload_dist.xla_configured({"PJRT_DEVICE": "NEURON"})


def test_the_default_workload_fits_the_accelerator():
    """cpu: a short proof; cuda: what keeps a GPU busy, its batch sized to its memory; xla: the Neuron path."""
    args = cli.parse_args([])
    cli.apply_defaults(args, "cuda", 141 * 10**9)  # an H200
    assert (args.model, args.impl, args.precision, args.compile, args.seq_len, args.batch_size) == (
        "large",
        "compact",
        "bf16",
        True,
        128,
        384,
    )
    args = cli.parse_args(["--seq-len", "512"])
    cli.apply_defaults(args, "cuda", 80 * 2**30)  # 80 GiB: proportionally fewer tokens per step
    assert args.batch_size == 60
    args = cli.parse_args(["--no-compile", "--impl", "hf"])
    cli.apply_defaults(args, "cuda", None)  # memory unknown; what the user said stays
    assert (args.compile, args.impl, args.precision, args.batch_size) == (False, "hf", "bf16", 32)
    for device, expected in (
        ("cpu", ("tiny", "hf", "autocast", False)),
        ("xla", ("base", "hf", "autocast", False)),
    ):
        args = cli.parse_args([])
        cli.apply_defaults(args, device)
        assert (args.model, args.impl, args.precision, args.compile) == expected


def test_fused_ln_dropout_is_on_for_the_compact_model_on_cuda_only_where_proven():
    for argv, device, arch, on in (
        ([], "cuda", "sm_90", True),
        ([], "cuda", "sm_86", False),  # not proven there: PyTorch's ops
        ([], "cuda", None, False),  # an architecture unknown is not a proven one
        (["--impl", "hf"], "cuda", "sm_90", False),
        (["--no-fused-ln-dropout"], "cuda", "sm_90", False),
        (["--fused-ln-dropout"], "cuda", "sm_86", True),  # asked for: it runs where it can
        ([], "cpu", None, False),
        (["--impl", "compact"], "cpu", None, False),
        (
            ["--impl", "compact", "--fused-ln-dropout"],
            "cpu",
            None,
            True,
        ),  # asked for: the CPU takes PyTorch's ops
        ([], "xla", None, False),
    ):
        args = cli.parse_args(argv)
        cli.apply_defaults(args, device, arch=arch)
        assert args.fused_ln_dropout is on, (argv, device, arch)
        assert args.fused_residual_grad is on, (argv, device)  # measured with the kernels (bench/NOTES.md)


def test_the_compact_model_compiles_layer_by_layer_unless_told():
    for argv, device, scope in (
        ([], "cuda", "layer"),
        (["--impl", "hf"], "cuda", "model"),
        (["--compile-scope", "model"], "cuda", "model"),
        ([], "cpu", "model"),
        (["--impl", "compact"], "cpu", "layer"),
    ):
        args = cli.parse_args(argv)
        cli.apply_defaults(args, device)
        assert args.compile_scope == scope, (argv, device)


def test_the_accelerators_default_runs_are_long_enough_to_prove_learning():
    from rollcall.evidence.proofs import LEARNING_STEPS

    for device in ("cuda", "xla"):
        d = cli.RUN_DEFAULTS[device]
        assert (d["epochs"] - 1) * d["steps_per_epoch"] >= LEARNING_STEPS, device


def test_cli_and_device_defaults():
    args = cli.parse_args(["--device", "cpu"])
    cli.apply_defaults(args, "cpu")
    assert (
        args.model,
        args.seq_len,
        args.batch_size,
        args.warmup_steps,
        args.epochs,
        args.steps_per_epoch,
    ) == ("tiny", 64, 8, 2, 2, 3)
    assert (args.compute_steps, args.bandwidth_mb, args.bandwidth_iters) == (10, 8.0, 10)
    args = cli.parse_args(["--batch-size", "4", "--model", "large", "--peak-tflops", "500", "--compile"])
    cli.apply_defaults(args, "cuda")
    assert (args.model, args.seq_len, args.batch_size, args.peak_tflops, args.compile) == (
        "large",
        128,
        4,
        500.0,
        True,
    )
    assert args.device == "auto" and args.pretrained is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--seq-len", "513"],
        ["--seq-len", "4"],
        ["--epochs", "0"],
        ["--warmup-steps", "-1"],
        ["--compute-steps", "-1"],
        ["--bandwidth-mb", "-1"],
        ["--bandwidth-mb", "nan"],
        ["--bandwidth-iters", "0"],
    ],
)
def test_bad_sizes_are_refused(argv):
    # refused by the parser itself, so the suite can check a command line before launch
    with pytest.raises(cli.CommandLineError, match=f"argument {argv[0]}: must be a"):
        cli.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seq-len", "-3"], "argument --seq-len: must be a whole number from 5 to 512, not '-3'"),
        (["--batch-size", "0"], "argument --batch-size: must be a whole number >= 1, not '0'"),
        (["--steps-per-epoch", "x"], "argument --steps-per-epoch: must be a whole number >= 1, not 'x'"),
        (["--lr", "0"], "argument --lr: must be a number > 0, not '0'"),
        (["--dropout", "1"], "argument --dropout: must be a number >= 0 and < 1, not '1'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_the_parser_names_the_argument_and_what_it_must_be(argv, message):
    with pytest.raises(cli.CommandLineError) as caught:
        cli.parse_args(argv)
    assert str(caught.value) == message


def test_dist_backend_overrides_only_cudas_nccl():
    for device, backend in (("cuda", "gloo"), ("cuda", "nccl"), ("cpu", "gloo")):
        cli.apply_defaults(cli.parse_args(["--dist-backend", backend]), device)
    for device, backend in (("cpu", "nccl"), ("xla", "gloo")):
        with pytest.raises(ValueError, match=f"--dist-backend {backend} is for --device cuda"):
            cli.apply_defaults(cli.parse_args(["--dist-backend", backend]), device)
    assert workload_dist.Accelerator.BACKENDS == {"cuda": "nccl", "xla": "xla", "cpu": "gloo"}


def test_invalid_command_line_prints_error_and_returns_2(capfd, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert workload_main.main(["--model", "huge"]) == 2
    records = _events(capfd.readouterr().out)
    assert [(r["event"], r["rank"], r["world_size"]) for r in records] == [("error", 1, 2)]
    assert records[0]["message"].startswith("invalid command line: argument --model: invalid choice: 'huge'")


def test_an_error_is_stamped_with_the_wall_clock_time(capfd, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    before = time.time()
    workload_main.main(["--model", "huge"])
    after = time.time()
    (record,) = _events(capfd.readouterr().out)
    assert isinstance(record["time"], float) and before - 1e-3 <= record["time"] <= after + 1e-3


def test_fault_injection_targets_one_rank():
    assert faults.injected_fault(1, {faults.FAIL_RANK_ENV: "1"}) == "fail"
    assert faults.injected_fault(0, {faults.FAIL_RANK_ENV: "1"}) is None
    assert faults.injected_fault(2, {faults.HANG_RANK_ENV: "2"}) == "hang"
    assert faults.injected_fault(2, {}) is None
    assert faults.FAIL_RANK_ENV == "ROLLCALL_FAIL_RANK" and faults.HANG_RANK_ENV == "ROLLCALL_HANG_RANK"


def test_fault_injection_takes_a_list_of_ranks():
    env = {faults.FAIL_RANK_ENV: "0,2", faults.HANG_RANK_ENV: " 1, 5 "}
    assert [faults.injected_fault(rank, env) for rank in range(6)] == [
        "fail",
        "hang",
        "fail",
        None,
        None,
        "hang",
    ]
    assert faults.injected_fault(3, {faults.FAIL_RANK_ENV: "3", faults.HANG_RANK_ENV: "3"}) == "fail"


def test_fault_injection_makes_a_rank_leave():
    env = {faults.LEAVE_RANK_ENV: "3"}
    assert [faults.injected_fault(rank, env) for rank in range(4)] == [None, None, None, "leave"]
    assert faults.LEAVE_RANK_ENV == "ROLLCALL_LEAVE_RANK"
    with pytest.raises(ValueError, match="ROLLCALL_LEAVE_RANK='x' is not valid"):
        faults.check_fault_injection({faults.LEAVE_RANK_ENV: "x"})


def test_the_gpus_own_faults_name_their_ranks_and_refuse_a_rank_without_a_gpu():
    env = {faults.GPU_HANG_RANK_ENV: "1", faults.BAD_ADDRESS_RANK_ENV: "2"}
    assert [faults.injected_fault(rank, env) for rank in range(3)] == [None, "gpu_hang", "bad_address"]
    from rollcall_workload.kernels.bad_address import read_unmapped

    with pytest.raises(RuntimeError, match="ROLLCALL_BAD_ADDRESS_RANK needs a CUDA device and Triton"):
        read_unmapped(torch.device("cpu"), faults.BAD_ADDRESS_RANK_ENV)


def test_the_gpus_own_faults_raise_their_own_errors_where_the_rank_has_no_gpu(monkeypatch):
    """Through the run's own injection point, as a rank meets it: each says what it needs, nothing else
    (no NameError of a module the run imports only for type checking)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(faults.GPU_HANG_RANK_ENV, "1")
    with pytest.raises(RuntimeError, match="ROLLCALL_GPU_HANG_RANK names rank 1, which has no CUDA device"):
        faults.inject_fault(1)
    monkeypatch.delenv(faults.GPU_HANG_RANK_ENV)
    monkeypatch.setenv(faults.BAD_ADDRESS_RANK_ENV, "2")
    with pytest.raises(RuntimeError, match="ROLLCALL_BAD_ADDRESS_RANK needs a CUDA device and Triton"):
        faults.inject_fault(2)
    faults.inject_fault(0)  # a rank no fault names goes on


def _leaving_run(*, code: object = None, complete: bool = False):
    """A stand-in for :func:`rollcall_workload.rank.run.run` that says start, then ends as asked."""

    def run(args, env, log):
        log.emit("start")
        log.phase = "epoch 1 end"
        if complete:
            log.emit("complete")
            return
        raise SystemExit(code)

    return run


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), ("bye", 1)])
def test_a_rank_that_ends_before_complete_says_exit_with_its_status_and_phase(
    capfd, monkeypatch, code, status
):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setattr(workload_main, "run", _leaving_run(code=code))
    if code == 0:  # torchelastic's record turns sys.exit(0) into a return
        assert workload_main.main([]) == 0
    else:
        with pytest.raises(SystemExit):
            workload_main.main([])
    records = _events(capfd.readouterr().out)
    assert [r["event"] for r in records] == ["start", "exit"]
    assert (records[1]["code"], records[1]["phase"], records[1]["rank"]) == (status, "epoch 1 end", 3)
    assert contract.read(records[1]) is not None


def test_a_rank_that_completed_says_no_exit(capfd, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(workload_main, "run", _leaving_run(complete=True))
    assert workload_main.main([]) == 0
    assert [r["event"] for r in _events(capfd.readouterr().out)] == ["start", "complete"]


def test_a_hung_node_is_named_in_the_world_its_node_ids_give():
    env = {faults.HANG_NODE_ENV: "2"}
    assert [faults.hung_node(env, n) for n in range(4)] == [None, None, 2, None]
    # a trial of nodes 2 and 3 of a larger world: node rank 0 is node 2
    subset = {**env, contract.NODE_IDS_ENV: "2,3"}
    assert [faults.hung_node(subset, n) for n in range(2)] == [2, None]
    assert faults.hung_node({**env, contract.NODE_IDS_ENV: "0,3"}, 0) is None
    assert faults.hung_node({}, 2) is None and faults.HANG_NODE_ENV == "ROLLCALL_HANG_NODE"
    with pytest.raises(ValueError) as caught:
        faults.check_fault_injection({faults.HANG_NODE_ENV: "node2"})
    assert str(caught.value) == (
        "ROLLCALL_HANG_NODE='node2' is not valid; write ROLLCALL_HANG_NODE=<node>[,<node>...], "
        "e.g. ROLLCALL_HANG_NODE=0,2"
    )


@pytest.mark.parametrize("bad", ["x", "0,", "0;2", "-1", "1.5", "0,,2"])
def test_a_malformed_rank_list_is_refused_by_name(bad):
    with pytest.raises(ValueError) as caught:
        faults.injected_fault(0, {faults.HANG_RANK_ENV: bad})
    assert str(caught.value) == (
        f"ROLLCALL_HANG_RANK={bad!r} is not valid; write ROLLCALL_HANG_RANK=<rank>[,<rank>...], "
        "e.g. ROLLCALL_HANG_RANK=0,2"
    )


def test_a_malformed_fault_injection_variable_fails_the_rank_at_start_naming_it():
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", faults.HANG_RANK_ENV: "1;5"}
    proc = subprocess.run(
        [sys.executable, str(TRAIN_PY), "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (record,) = _events(proc.stdout)
    assert record["event"] == "error" and record["message"] == (
        "ValueError: ROLLCALL_HANG_RANK='1;5' is not valid; write ROLLCALL_HANG_RANK=<rank>[,<rank>...], "
        "e.g. ROLLCALL_HANG_RANK=0,2"
    )


def test_chatty_is_parsed_or_refused_by_name():
    assert faults.chatty({}) is None
    assert faults.chatty({"ROLLCALL_CHATTY": "1:3000000"}) == faults.Chatty(rank=1, size=3000000)
    for bad in ("1", "x:10", "1:-1", "-1:10", "1:2:3"):
        with pytest.raises(
            ValueError, match=r"^ROLLCALL_CHATTY=.* is not valid; write ROLLCALL_CHATTY=<rank>:<bytes>$"
        ):
            faults.chatty({"ROLLCALL_CHATTY": bad})


def test_every_fault_injection_variable_is_checked_at_once():
    faults.check_fault_injection({"ROLLCALL_FAIL_RANK": "0,2", "ROLLCALL_SLOW_RANK": "1:2", "OTHER": "x"})
    for name, bad in (
        ("ROLLCALL_FAIL_RANK", "0-2"),
        ("ROLLCALL_HANG_RANK", "one"),
        ("ROLLCALL_CHATTY", "1"),
        ("ROLLCALL_SLOW_RANK", "1"),
        ("ROLLCALL_SLOW_LINK", "1:-1"),
    ):
        with pytest.raises(ValueError, match=f"^{name}"):
            faults.check_fault_injection({name: bad})


def test_slow_rank_and_slow_link_are_parsed_or_refused_by_name():
    assert faults.slow_rank({}) is None and faults.slow_link({"ROLLCALL_SLOW_LINK": " "}) is None
    assert faults.slow_rank({"ROLLCALL_SLOW_RANK": "3:2.5"}) == faults.SlowRank(rank=3, factor=2.5)
    assert faults.slow_link({"ROLLCALL_SLOW_LINK": "1:40"}) == faults.SlowLink(node=1, delay_ms=40.0)
    for bad in ("3", "3:", "x:2", "-1:2", "3:nan", "3:inf"):
        with pytest.raises(ValueError, match=r"ROLLCALL_SLOW_RANK=.*write ROLLCALL_SLOW_RANK=<rank>:<factor"):
            faults.slow_rank({"ROLLCALL_SLOW_RANK": bad})
    with pytest.raises(ValueError, match="factor must be at least 1"):
        faults.slow_rank({"ROLLCALL_SLOW_RANK": "3:0.5"})
    assert faults.slow_ranks({}) == {} and faults.slow_ranks({"ROLLCALL_SLOW_RANK": "3:2.5"}) == {3: 2.5}
    assert faults.slow_ranks({"ROLLCALL_SLOW_RANK": "0:1.5, 1:1.5"}) == {0: 1.5, 1: 1.5}
    with pytest.raises(ValueError, match="rank 1 is named twice"):
        faults.slow_ranks({"ROLLCALL_SLOW_RANK": "1:2,1:3"})
    with pytest.raises(ValueError, match="has an empty entry; write ROLLCALL_SLOW_RANK=<rank>"):
        faults.slow_ranks({"ROLLCALL_SLOW_RANK": "0:2,"})
    with pytest.raises(ValueError, match=r"ROLLCALL_SLOW_RANK='x:2' is not valid"):
        faults.check_fault_injection({"ROLLCALL_SLOW_RANK": "0:2,x:2"})
    with pytest.raises(ValueError, match="delay must not be negative"):
        faults.slow_link({"ROLLCALL_SLOW_LINK": "1:-5"})


def test_percentile_interpolates_between_closest_ranks():
    assert timing.percentile([3.0], 90) == 3.0
    assert timing.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert timing.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert timing.percentile([float(v) for v in range(11)], 90) == pytest.approx(9.0)
    assert timing.percentile([1.0, 2.0], 90) == pytest.approx(1.9)
    with pytest.raises(ValueError):
        timing.percentile([], 50)


def test_compute_fields():
    assert timing.compute_fields([]) == {"compute_ms": None, "compute_ms_p90": None, "compute_steps": 0}
    fields = timing.compute_fields([10.0, 12.0, 11.0, 30.0, 10.5])
    assert fields == {"compute_ms": 11.0, "compute_ms_p90": pytest.approx(22.8), "compute_steps": 5}


def test_bus_bandwidth_follows_nccl_tests():
    # 1 GB in 0.1 s: algbw 10 GB/s; busbw = algbw x 2(n-1)/n
    assert workload_bandwidth.bus_bandwidth(10**9, 0.1, 2) == pytest.approx((10.0, 10.0))
    assert workload_bandwidth.bus_bandwidth(10**9, 0.1, 8) == pytest.approx((10.0, 17.5))
    assert workload_bandwidth.bus_bandwidth(10**9, 0.1, 1) == pytest.approx((10.0, 0.0))


def test_compact_ranges():
    assert workload_bandwidth.compact_ranges([]) == ""
    assert workload_bandwidth.compact_ranges([3, 0, 1, 2, 8, 10, 9]) == "0-3,8-10"
    assert workload_bandwidth.compact_ranges([5]) == "5"


def test_bandwidth_groups_world_nodes_and_ring_pairs():
    G = workload_bandwidth.CommGroup
    # 2 nodes x 2 ranks: the world and each node; the one pair of nodes would be the world again
    assert workload_bandwidth.bandwidth_groups([0, 0, 1, 1]) == [
        G("world", (0, 1), (0, 1, 2, 3)),
        G("node", (0,), (0, 1)),
        G("node", (1,), (2, 3)),
    ]
    # one rank per node: no node group measures anything; 3 nodes make a ring of 3 pairs
    assert workload_bandwidth.bandwidth_groups([0, 1, 2]) == [
        G("world", (0, 1, 2), (0, 1, 2)),
        G("pair", (0, 1), (0, 1)),
        G("pair", (1, 2), (1, 2)),
        G("pair", (0, 2), (0, 2)),
    ]
    # one node: only the node (the world is the same group)
    assert workload_bandwidth.bandwidth_groups([0, 0]) == [G("world", (0,), (0, 1))]
    assert workload_bandwidth.bandwidth_groups([0]) == []
    groups = workload_bandwidth.bandwidth_groups([n for n in range(4) for _ in range(2)])
    assert [g.scope for g in groups] == ["world"] + ["node"] * 4 + ["pair"] * 4
    assert groups[-1] == G("pair", (0, 3), (0, 1, 6, 7))


def test_bandwidth_rounds_run_disjoint_groups_together():
    groups = workload_bandwidth.bandwidth_groups([n for n in range(4) for _ in range(2)])
    rounds = workload_bandwidth.bandwidth_rounds(groups)
    assert rounds == [[0], [1, 2, 3, 4], [5, 7], [6, 8]]  # world; nodes; pairs (0,1)+(2,3); (1,2)+(0,3)
    for chosen in rounds:
        members = [r for i in chosen for r in groups[i].ranks]
        assert len(members) == len(set(members))
    odd = workload_bandwidth.bandwidth_rounds(workload_bandwidth.bandwidth_groups([0, 1, 2]))
    assert odd == [[0], [1], [2], [3]]  # a ring of 3 pairs: every two share a node


def test_batch_seeds_differ_per_seed_rank_and_index():
    seeds = {workload_model.batch_seed(s, r, i) for s in range(3) for r in range(64) for i in range(4)}
    assert len(seeds) == 3 * 64 * 4


def test_warm_up_settles_when_the_last_k_steps_agree():
    compile_then_steady = [40.0, 0.2, 0.14, 0.137, 0.138, 0.136, 0.137]
    assert not timing.settled(compile_then_steady[:6], 5, 5.0)  # 0.2 is still in the window
    assert timing.settled(compile_then_steady, 5, 5.0)
    assert not timing.settled(compile_then_steady, 5, 0.5)  # 0.14 is 2% off the median
    assert not timing.settled([0.1] * 4, 5, 5.0)  # fewer than k times
    assert not timing.settled([0.1] * 8, 0, 5.0)  # k = 0: never (a fixed count instead)
    assert not timing.settled([0.0] * 5, 5, 5.0)


def test_compile_cache_env_points_inductor_and_triton_under_one_directory(tmp_path):
    env = workload_compile_cache.compile_cache_env(str(tmp_path))
    assert env == {
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
    }


def test_compile_cache_defaults_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(workload_compile_cache.COMPILE_CACHE_ENV, str(tmp_path))
    assert cli.parse_args([]).compile_cache == str(tmp_path)
    monkeypatch.delenv(workload_compile_cache.COMPILE_CACHE_ENV)
    assert cli.parse_args([]).compile_cache is None


_KEEP_BYTECODE = """
import sys
from rollcall_workload.rank.compile_cache import keep_bytecode
print(keep_bytecode(sys.argv[1], "fakepkg"))
import fakepkg
"""


@pytest.mark.parametrize("shipped", [False, True], ids=["no-bytecode", "bytecode-beside-it"])
def test_the_compile_cache_keeps_bytecode_only_for_modules_shipped_without_it(tmp_path, shipped):
    """A process that would compile a package from source, bytecode writing forbidden, writes it under the cache."""
    package = tmp_path / "site" / "fakepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    if shipped:
        import py_compile

        py_compile.compile(
            str(package / "__init__.py"), cfile=importlib.util.cache_from_source(str(package / "__init__.py"))
        )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env.update(PYTHONPATH=str(tmp_path / "site"), PYTHONDONTWRITEBYTECODE="1")
    cache = tmp_path / "cache"
    out = subprocess.run(
        [sys.executable, "-c", _KEEP_BYTECODE, str(cache)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    written = [p for p in cache.rglob("*.pyc") if p.parent.name == "fakepkg"]
    if shipped:
        assert out == ["None"] and not cache.exists()
    else:
        assert out == [str(cache / "python")]
        assert [p.name.split(".")[0] for p in written] == ["__init__"], written


def test_precision_labels():
    assert workload_training.precision_label("autocast", bf16=True) == "bf16-autocast"
    assert workload_training.precision_label("bf16", bf16=True) == "bf16-master-fp32"
    assert workload_training.precision_label("bf16", bf16=False) == "fp32"
    assert workload_training.precision_label("autocast", bf16=False) == "fp32"


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--warmup-settle", "-1"], "warmup"),
        (["--warmup-tolerance", "0"], "warmup"),
        (["--attention", "flash"], "--impl compact"),
        (["--fused-ln-dropout"], "--impl compact"),
        (["--compile-scope", "layer"], "--impl compact"),
    ],
)
def test_bad_warm_up_rules_and_options_are_refused(argv, match):
    with pytest.raises(ValueError, match=match):
        cli.apply_defaults(cli.parse_args(argv), "cpu")
    cli.apply_defaults(cli.parse_args(["--attention", "flash", "--impl", "compact"]), "cpu")


def test_the_manual_and_the_contract_say_what_a_rank_does_and_says():
    """docs/workload.md (what a rank does) and the contract's reference (what it says) name each of these."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "workload.md").read_text() + contract.markdown()
    for word in (
        "ROLLCALL",
        "start",
        "epoch_time",
        "throughput",
        "complete",
        "error",
        "facts",
        "Device facts",
        "GROUP_RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "ROLLCALL_FAIL_RANK",
        "ROLLCALL_HANG_RANK",
        "ROLLCALL_SLOW_RANK",
        "ROLLCALL_SLOW_LINK",
        "compute_ms",
        "compute_ms_p90",
        "no_sync()",
        "bandwidth",
        "busbw_gbps",
        "Exit codes",
        "startup_s",
        "compile_s",
        "warmup_s",
        "warmup_steps",
        "timed_s",
        "--warmup-settle",
        "--compile-cache",
        "stack",
        "resumed",
        "--hang-after",
        "--first-step-hang-after",
        "Watchdog",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
    ):
        assert word in doc


# ----------------------------------------------------------------------------- synthetic data (needs torch)


def test_synthetic_batch():
    import torch

    batch = workload_model.make_batch(seed=7, batch_size=16, seq_len=64, vocab=8192)
    again = workload_model.make_batch(seed=7, batch_size=16, seq_len=64, vocab=8192)
    other = workload_model.make_batch(seed=8, batch_size=16, seq_len=64, vocab=8192)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert not torch.equal(batch["input_ids"], other["input_ids"])

    ids, labels, types = batch["input_ids"], batch["labels"], batch["token_type_ids"]
    assert ids.shape == labels.shape == types.shape == (16, 64) and batch["next_sentence_label"].shape == (
        16,
    )
    assert (ids[:, 0] == workload_model.CLS_ID).all() and (ids[:, -1] == workload_model.SEP_ID).all()
    assert ((ids == workload_model.SEP_ID).sum(dim=1) == 2).all()  # [CLS] A [SEP] B [SEP]
    assert int(ids.min()) >= 0 and int(ids.max()) < 8192
    masked = labels != -100
    assert 0.08 < masked.float().mean().item() < 0.22
    assert (labels[masked] >= workload_model.FIRST_WORD_ID).all()  # only words are masked, never [CLS]/[SEP]
    assert (ids[masked] == workload_model.MASK_ID).float().mean().item() > 0.6
    assert (ids[~masked] != workload_model.MASK_ID).all()
    assert set(types.unique().tolist()) == {0, 1} and (types[:, 0] == 0).all() and (types[:, -1] == 1).all()
    assert set(batch["next_sentence_label"].unique().tolist()) <= {0, 1}


# ------------------------------------------------------------------------------- real 2-rank torchrun runs


def _torchrun(extra_env: dict[str, str]) -> subprocess.Popen[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")
    }
    env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra_env})
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(TRAIN_PY),
        "--device",
        "cpu",
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def torchrun_runs():
    """A clean run and a run with an injected failure, one after the other (on few cores, running them
    side by side is no faster: both are bound by importing torch and transformers)."""
    results = {}
    for name, extra_env in (("ok", {}), ("fail", {faults.FAIL_RANK_ENV: "1"})):
        proc = _torchrun(extra_env)
        try:
            out, _ = proc.communicate(timeout=170)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"torchrun ({name}) did not finish in time:\n{out}")
        results[name] = (proc.returncode, out)
    return results


@pytest.mark.slow
def test_two_ranks_answer_the_roll_call(torchrun_runs):
    code, out = torchrun_runs["ok"]
    assert code == 0, out
    records = _events(out)
    for rank in (0, 1):
        mine = [r for r in records if r["rank"] == rank]
        assert all(r["world_size"] == 2 for r in mine), out
        events = [r["event"] for r in mine]
        assert events == [
            "start",
            "facts",
            "epoch_time",
            "epoch_time",
            "throughput",
            "bandwidth",
            "complete",
        ], out
        facts = mine[1]
        assert facts["unknown"] == {"nvml": "no NVML: device is cpu"} and facts["torch"] and facts["kernel"]
        start = mine[0]
        assert (start["local_rank"], start["node_rank"], start["device"]) == (rank, 0, "cpu")
        assert [r["epoch"] for r in mine if r["event"] == "epoch_time"] == [1, 2]
        assert all(r["seconds"] > 0 and math.isfinite(r["loss"]) for r in mine if r["event"] == "epoch_time")
        throughput = mine[4]
        assert throughput["samples_per_sec"] > 0 and throughput["mfu"] is None
        assert (throughput["model"], throughput["seq_len"], throughput["batch_size"]) == ("tiny", 64, 8)
        epoch_seconds = sum(r["seconds"] for r in mine if r["event"] == "epoch_time")
        assert throughput["samples_per_sec"] == pytest.approx(2 * 3 * 8 / epoch_seconds, rel=1e-3)
        assert throughput["compute_steps"] == 10
        assert 0 < throughput["compute_ms"] <= throughput["compute_ms_p90"]
        # one node of two ranks: the world is the node, and the duplicate group is dropped
        bandwidth = mine[5]
        assert (bandwidth["scope"], bandwidth["ranks"], bandwidth["nodes"]) == ("world", "0-1", "0"), out
        assert (bandwidth["bytes"], bandwidth["iters"]) == (8 * 2**20, 10)
        assert bandwidth["algbw_gbps"] == pytest.approx(
            bandwidth["bytes"] / bandwidth["seconds"] / 1e9, rel=1e-3
        )
        assert bandwidth["busbw_gbps"] == pytest.approx(bandwidth["algbw_gbps"], rel=1e-3)  # 2(n-1)/n = 1
        # the split of this rank's time: the timed part holds the epochs; warm-up ran 2 steps (cpu default)
        assert throughput["startup_s"] > 0 and throughput["compile_s"] > 0 and throughput["warmup_s"] >= 0
        assert throughput["timed_s"] >= epoch_seconds - 1e-3 and throughput["warmup_steps"] == 2
        assert (throughput["impl"], throughput["precision"]) == ("hf", "fp32")


@pytest.mark.slow
def test_injected_failure_is_reported_and_fails_the_job(torchrun_runs):
    code, out = torchrun_runs["fail"]
    assert code != 0, out
    rank1 = [r for r in _events(out) if r["rank"] == 1]
    assert [r["event"] for r in rank1][:3] == ["start", "facts", "epoch_time"], out
    assert rank1[-1]["event"] == "error", out
    assert isinstance(rank1[-1]["time"], float), out
    assert "injected failure" in rank1[-1]["message"] and faults.FAIL_RANK_ENV in rank1[-1]["message"]
    assert not any(r["event"] == "complete" for r in _events(out)), out


def test_masked_positions_are_static_and_match_labels():
    import torch

    batch = workload_model.make_batch(seed=3, batch_size=8, seq_len=128, vocab=8192)
    k = workload_model.mlm_predictions(128)
    assert k == 19
    assert batch["masked_positions"].shape == batch["masked_labels"].shape == (8, k)
    masked = batch["labels"] != -100
    assert (masked.sum(dim=1) == k).all()
    assert torch.equal(batch["labels"].gather(1, batch["masked_positions"]), batch["masked_labels"])


@pytest.mark.parametrize("masked_head", [True, False])
def test_pretraining_loss_reaches_every_parameter(masked_head):
    import argparse

    import torch  # noqa: F401
    import transformers  # noqa: F401

    args = argparse.Namespace(pretrained=None, model="tiny")
    model, shape = workload_model.build_model(args)
    batch = workload_model.make_batch(seed=1, batch_size=4, seq_len=32, vocab=shape.vocab)
    loss = workload_model.pretraining_loss(model, masked_head=masked_head)(batch)
    loss.backward()
    assert loss.isfinite()
    assert all(p.grad is not None for p in model.parameters())


def test_flops_count_the_mlm_head_on_masked_tokens_only():
    large = workload_shape.MODEL_PRESETS["large"]
    full = workload_shape.flops_per_sample(large, 128)
    masked = workload_shape.flops_per_sample(large, 128, workload_model.mlm_predictions(128))
    head = 1024 * 1024 + 1024 * 30522
    assert full - masked == pytest.approx(6 * head * (128 - 19))


# ------------------------------------------------------------------- proof that every rank trained correctly


def test_each_rank_sends_a_pattern_of_small_integers_whose_sums_are_exact():
    assert proofs.pattern_row(0)[:3] == [1, 2, 3] and proofs.pattern_row(0)[-1] == 251
    assert proofs.pattern_row(1)[:2] == [38, 39]  # 37 further on: rank-distinct
    assert sorted(proofs.pattern_row(5)) == list(range(1, 252))  # each value once per period
    assert proofs.expected_row([0, 1])[:2] == [39, 41]
    assert proofs.expected_row(range(2048))[0] == sum((37 * r) % 251 + 1 for r in range(2048))
    assert max(proofs.expected_row(range(2**16))) < 2**24  # float32 holds every sum exactly


def test_a_received_result_is_checked_against_the_exact_sum():
    import torch

    expected = proofs.pattern_tensor(proofs.expected_row([0, 1, 2]), 4096, "cpu")
    assert expected.shape == (4096,) and expected[251].item() == expected[0].item() == 1 + 38 + 75
    check = proofs.ResultCheck()
    check.check(expected.clone(), expected)
    assert check.fields() == {"checked": 1, "mismatch": None}
    received = expected.clone()
    proofs.drop_chunk(received)
    check.check(received, expected)
    received[5] = torch.nan
    check.check(received, expected)
    assert check.fields() == {
        "checked": 3,
        # element 1365 is 110 into its period: ranks 0, 1 and 2 sent 111, 148 and 185
        "mismatch": {"iters": 2, "elements": 1024, "index": 4096 // 3, "expected": 444.0, "got": 0.0},
    }
    found = proofs.mismatch(received, expected)  # NaN is wrong too, and now the first wrong element
    assert (found.elements, found.index, found.expected) == (1025, 5, 6.0 + 43.0 + 80.0)
    assert math.isnan(found.got)


def test_the_device_checksums_change_with_any_bit_and_not_with_the_chunking(monkeypatch):
    import torch

    torch.manual_seed(0)
    tensors = [torch.randn(5, 3), torch.randn(7).to(torch.bfloat16), torch.randn(4, dtype=torch.float64)]
    sums = proofs.parameter_checksums(tensors)
    assert sums.dtype == torch.int64 and sums.shape == (3,)
    assert torch.equal(sums, proofs.parameter_checksums([t.clone() for t in tensors]))
    monkeypatch.setattr(proofs, "_CHUNK", 2)  # several passes per tensor: the same sums
    assert torch.equal(sums, proofs.parameter_checksums(tensors))
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    for which, tensor in enumerate(tensors):
        bits = 8 * tensor.element_size()
        for element in (0, tensor.numel() - 1):
            for bit in range(bits):
                flipped = tensor.clone()
                word = flipped.view(-1)[element : element + 1].view(ints[tensor.element_size()])
                word.bitwise_xor_(torch.tensor(1 << bit if bit < bits - 1 else -(1 << bit), dtype=word.dtype))
                changed = proofs.parameter_checksums([flipped])[0]
                assert changed != sums[which], (which, element, bit)
    swapped = tensors[0].clone().view(-1)
    swapped[[0, 1]] = swapped[[1, 0]]
    assert proofs.parameter_checksums([swapped.view(5, 3)])[0] != sums[0]  # where a value sits counts


def test_a_flipped_bit_changes_the_parameter_digest_and_nothing_else_does():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    digest = proofs.parameter_digest(model)
    assert len(digest) == 16 and digest == proofs.parameter_digest(model)
    first = next(model.parameters())
    before = first.detach().clone()
    proofs.flip_bit(first)
    changed = (first != before).nonzero().tolist()
    assert changed == [[0, 0]]
    assert first[0, 0].item() != before[0, 0].item() and abs(first[0, 0].item()) < 2 * abs(
        before[0, 0].item()
    )
    assert proofs.parameter_digest(model) != digest
    proofs.flip_bit(first)
    assert proofs.parameter_digest(model) == digest
    bf16 = torch.ones(2, dtype=torch.bfloat16)
    proofs.flip_bit(bf16)
    assert bf16.tolist() == [1.5, 1.0]  # the highest mantissa bit of bf16's 7


def test_the_corruption_variables_name_a_rank():
    assert faults.corrupted_rank(faults.CORRUPT_RANK_ENV, {}) is None
    assert faults.corrupted_rank(faults.CORRUPT_RANK_ENV, {"ROLLCALL_CORRUPT_RANK": " 3 "}) == 3
    for bad in ("-1", "one", "1:2"):
        with pytest.raises(ValueError, match=r"ROLLCALL_CORRUPT_COLLECTIVE='.*' is not valid; write "):
            faults.corrupted_rank(faults.CORRUPT_COLLECTIVE_ENV, {"ROLLCALL_CORRUPT_COLLECTIVE": bad})


def test_the_compile_cache_is_hit_only_when_every_graph_came_from_it():
    fields = workload_compile_cache.compile_cache_fields
    assert fields(True, {"fxgraph_cache_hit": 2}) == {
        "compile_cache": "hit",
        "compile_cache_hits": 2,
        "compile_cache_misses": 0,
    }
    assert fields(True, {"fxgraph_cache_hit": 1, "fxgraph_cache_miss": 1})["compile_cache"] == "miss"
    assert fields(True, {})["compile_cache"] == "miss"  # compiled, and nothing came from the cache
    assert fields(False, {"fxgraph_cache_hit": 5}) == {
        "compile_cache": "off",
        "compile_cache_hits": None,
        "compile_cache_misses": None,
    }
    manual = (Path(__file__).resolve().parents[2] / "docs" / "workload.md").read_text()
    assert "compile_cache" in contract.__doc__ and "fxgraph_cache_hit" in manual


def test_the_compute_timer_keeps_the_last_steps_it_was_asked_for():
    acc = workload_dist.Accelerator("cpu", 0)
    timer = timing.ComputeTimer(acc)
    for _ in range(3):
        timer.start()
        timer.stop()
    assert len(timer.times_ms(2)) == 2
    assert len(timer.times_ms(10)) == 3  # fewer steps ran than asked for: all of them
    assert timer.times_ms(0) == []
    assert all(ms >= 0 for ms in timer.times_ms(3))


@pytest.mark.slow
def test_a_rank_alone_times_its_compute_within_the_timed_epochs():
    # One process, no torchrun: world size 1, so no compute steps of their own run (the last 4 of the 6
    # timed steps are timed); the process ends with the code main returned.
    import torch  # noqa: F401

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [sys.executable, str(TRAIN_PY), "--device", "cpu", "--compute-steps", "4"],
        env={**env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = _events(proc.stdout)
    assert [r["event"] for r in records] == [
        "start",
        "facts",
        "epoch_time",
        "epoch_time",
        "throughput",
        "complete",
    ]
    throughput = records[4]
    assert throughput["compute_steps"] == 4
    assert 0 < throughput["compute_ms"] <= throughput["compute_ms_p90"]
    # each timed step's forward + backward is part of its epoch: 4 of them fit in the two epochs' time
    epochs_ms = 1000 * sum(r["seconds"] for r in records if r["event"] == "epoch_time")
    assert 4 * throughput["compute_ms"] < epochs_ms


def test_the_compact_model_trains_without_triton():
    """The CPU and Neuron images have no Triton: every kernel module imports, and the model takes PyTorch's ops."""
    import torch  # noqa: F401

    code = (
        "import sys, argparse\n"
        "sys.modules['triton'] = sys.modules['triton.language'] = None  # importing Triton raises ImportError\n"
        "import torch\n"
        "import rollcall_workload.kernels.check\n"
        "from rollcall_workload.model import build_model, make_batch, pretraining_loss\n"
        "args = argparse.Namespace(pretrained=None, model='tiny', impl='compact', fused_ln_dropout=True, fused_gelu=True)\n"
        "model, shape = build_model(args)\n"
        "loss = pretraining_loss(model, masked_head=True)(make_batch(1, 2, 16, shape.vocab))\n"
        "loss.backward()\n"
        "print(float(loss))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert math.isfinite(float(out.stdout.split()[-1]))


def test_a_frame_of_the_workloads_kernels_is_its_own_and_named_within_the_package():
    import traceback

    from rollcall_workload.rank import watchdog

    check = Path(watchdog.__file__).parents[1] / "kernels" / "check.py"
    mine = watchdog.frame_entry(traceback.FrameSummary(str(check), 10, "check", line="x = 1"))
    theirs = watchdog.frame_entry(traceback.FrameSummary("/usr/lib/python3/threading.py", 5, "run", line=""))
    assert mine == ["kernels/check.py", 10, "check", "x = 1", True]
    assert theirs == ["/usr/lib/python3/threading.py", 5, "run", "", False]
