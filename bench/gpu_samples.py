"""One GPU sampled under load as a training rank samples it: the reads, what one read costs, the held values.

Usage (on a GPU machine, with torch and ``nvidia-ml-py``): python bench/gpu_samples.py [--seconds 5]
[--gpu 0] [--interval 0.5] [--out PATH]

Runs bf16 matmuls on the GPU for ``--seconds`` (nothing is trained) and, after each batch of them is queued
(a "step"), ticks the workload's own sampler (:class:`rollcall_workload.rank.samples.DeviceSampler`, at most
one read every ``--interval`` seconds, the workload's 0.5 s by default). Prints one JSON object: each read
(seconds since the start, the clock-event reasons active, SM clock, PCIe generation and width), the
``samples`` event's fields the rank would say, the microseconds one read took (mean, median, max), the
device facts the suite would take from them (``rollcall.evidence.nodefacts.sampled_facts``: the reasons
held, the median clock, the most the link reached) and the step time with and without the sampler's tick.
Writes nothing but stdout, and ``--out`` when given (the same JSON). Exit status 1 without CUDA or NVML.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall.evidence.nodefacts import sampled_facts
from rollcall.ranklog import Sampled
from rollcall_workload.rank.facts import CLOCK_EVENTS, cuda_uuid, load_nvml, nvml_handle
from rollcall_workload.rank.samples import SAMPLE_INTERVAL_S, DeviceSampler


class RecordingSampler(DeviceSampler):
    """The workload's sampler, keeping each read and its cost besides its summary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[dict[str, Any]] = []
        self.costs_us: list[float] = []
        self.started = time.monotonic()

    def sample(self) -> None:
        before = {k: len(v) for k, v in self.values.items()}
        started = time.perf_counter()
        super().sample()
        self.costs_us.append((time.perf_counter() - started) * 1e6)
        read = {k: (v[-1] if len(v) > before[k] else None) for k, v in self.values.items()}
        mask = read.pop("clock_events")
        self.reads.append(
            {
                "t_s": round(time.monotonic() - self.started, 3),
                "clock_events": None if mask is None else [n for bit, n in CLOCK_EVENTS if mask & bit],
                **read,
            }
        )


def steps(seconds: float, gpu: int, tick: Any) -> list[float]:
    """Queue matmul steps for ``seconds``, calling ``tick`` after each is queued; each step's seconds."""
    import torch

    device = torch.device("cuda", gpu)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    times, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        for _ in range(8):
            a = (a @ a).clamp_(-1, 1)
        tick()
        torch.cuda.synchronize(device)  # a step's end, as the loss's read back ends a training step
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds of matmuls with the sampler (5)")
    ap.add_argument("--gpu", type=int, default=0, help="the CUDA device (0)")
    ap.add_argument("--interval", type=float, default=SAMPLE_INTERVAL_S, help="least seconds between reads")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        nvml = load_nvml()
    except Exception as exc:
        print(f"gpu_samples: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        handle = nvml_handle(nvml, cuda_uuid(args.gpu), args.gpu)
        steps(1.0, args.gpu, lambda: None)  # warm up: clocks and link up, kernels chosen
        bare = steps(args.seconds / 2, args.gpu, lambda: None)
        sampler = RecordingSampler(nvml, handle, interval_s=args.interval)
        sampled_steps = steps(args.seconds, args.gpu, sampler.tick)
        every = RecordingSampler(nvml, handle, interval_s=0.0)  # a read on every step: the worst case
        every_steps = steps(args.seconds / 2, args.gpu, every.tick)
        fields = sampler.fields() or {}
    finally:
        nvml.nvmlShutdown()
    kept = Sampled(
        fields.get("samples", 0),
        fields.get("clock_events_share"),
        fields.get("sm_clock_mhz_median"),
        fields.get("pcie_gen_min"),
        fields.get("pcie_gen_max"),
        fields.get("pcie_width_min"),
        fields.get("pcie_width_max"),
    )
    costs = sampler.costs_us + every.costs_us

    def ms(times: list[float]) -> float:
        return round(statistics.median(times) * 1e3, 3) if times else float("nan")

    report = {
        "gpu": args.gpu,
        "gpu_name": torch.cuda.get_device_name(args.gpu),
        "interval_s": args.interval,
        "reads": sampler.reads,
        "event": fields,
        "read_us": {
            "mean": round(statistics.fmean(costs), 1),
            "median": round(statistics.median(costs), 1),
            "max": round(max(costs), 1),
            "reads": len(costs),
        },
        "held": sampled_facts(kept),
        "step_ms_median": {
            "no_sampler": ms(bare),
            "paced_sampler": ms(sampled_steps),
            "read_every_step": ms(every_steps),
        },
        "steps": {
            "no_sampler": len(bare),
            "paced_sampler": len(sampled_steps),
            "read_every_step": len(every_steps),
        },
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
