"""Where the workload's start-up goes on one GPU, before its first step: each phase timed, then a profile.

    python3 bench/gpu_startup.py [train.py arguments]   # default: the cuda defaults (compact BERT-large,
                                                        # bf16 weights with fp32 masters, compiled)

Runs the start-up phases of ``rollcall_workload`` in one process without torchrun (world size 1), each closed
by ``torch.cuda.synchronize``: the device, ``build_training`` (the model made on the GPU, ``torch.compile``'s
wrapping, which imports the compiler, and the optimizer) and the data; then ``build_training`` again under
cProfile, whose 25 costliest calls (cumulative) are printed: the second time, with the compiler imported.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

started = time.monotonic()
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from rollcall_workload.model import batch_pool  # noqa: E402
from rollcall_workload.rank.cli import apply_defaults, parse_args  # noqa: E402
from rollcall_workload.rank.dist import Accelerator, DistEnv  # noqa: E402
from rollcall_workload.rank.training import build_training  # noqa: E402


def main() -> None:
    stamps = [("python and torch imports", time.monotonic() - started)]

    def phase(name: str, t0: float) -> float:
        torch.cuda.synchronize()
        now = time.monotonic()
        stamps.append((name, now - t0))
        return now

    args = parse_args(["--device", "cuda", *sys.argv[1:]])
    t = time.monotonic()
    apply_defaults(args, "cuda", torch.cuda.get_device_properties(0).total_memory)
    acc = Accelerator("cuda", 0)
    torch.zeros(1, device="cuda")
    t = phase("device (CUDA context)", t)
    env = DistEnv(rank=0, local_rank=0, world_size=1, node_rank=0, local_world_size=1, launched=False)
    training = build_training(args, acc, env)
    t = phase("model and optimizer (build_training)", t)
    batch_pool(args, 0, training.shape.vocab, acc.device)
    t = phase("data", t)
    for name, s in stamps:
        print(f"{name:40s} {s:7.2f} s")
    del training
    torch.cuda.empty_cache()
    profile = cProfile.Profile()
    profile.enable()
    build_training(args, acc, env)
    torch.cuda.synchronize()
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
