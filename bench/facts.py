"""The facts the workload reports about each local GPU, as one JSON list, through the workload's own reader.

Usage (on a GPU machine, with ``nvidia-ml-py`` installed): python bench/facts.py [--busy]
Prints ``rollcall_workload.rank.facts.device_facts("cuda", index)`` for every GPU NVML lists (by NVML's index), the
same fields a rank's ``facts`` event carries (with CUDA's device count, and the libfabric and aws-ofi-nccl
versions). ``--busy`` first queues matmuls on each GPU (as a training rank does, so that PCIe link and clocks
are read under load). Exit status 1 when NVML cannot be loaded.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.rank.facts import device_facts, fabric_facts, load_nvml


def cuda_count() -> int | None:
    """The devices CUDA lists, as a rank reports them; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.device_count()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", action="store_true", help="queue matmuls on each GPU while reading")
    args = ap.parse_args()
    try:
        nvml = load_nvml()
        count = nvml.nvmlDeviceGetCount()
        nvml.nvmlShutdown()
    except Exception as exc:
        print(f"facts: no NVML: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    facts = []
    for index in range(count):
        if args.busy:
            import torch

            a = torch.randn(4096, 4096, device=f"cuda:{index}", dtype=torch.float16)
            for _ in range(256):
                a = (a @ a).clamp_(-1, 1)
        facts.append(device_facts("cuda", index, cuda_devices=cuda_count(), fabric=fabric_facts))
        if args.busy:
            torch.cuda.synchronize(index)
    print(json.dumps(facts, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
