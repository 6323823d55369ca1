"""Parser throughput on the logs a run reads: prints MB/s on one core (wall clock and CPU time) and peak memory.

Usage: python bench/parser.py [--mb 200] [--marker-share 0.05]
Two logs, as the two workloads write them: torchrun-prefixed RFC 3339 timestamps, progress and warning junk,
NCCL-style lines and ANSI colour, with the rollcall workload's records in one and the legacy Neuron
workload's lines in the other, in the proportion given. Each is read in its own format and in ``auto`` (the
default), which reads both formats until a log shows which it is.
"""

import argparse
import json
import os
import random
import resource
import tempfile
import time

from rollcall.ranklog import RollCall

JUNK = [
    "INFO 2026-11-30 10:00:01,123 train.py:88 step {i} loss=7.{i} lr=1.0e-04",
    "ip-10-0-1-23:1234:1234 [3] NCCL INFO Channel 0{i}/32 : 3[3] -> 4[4] via P2P/IPC/read",
    "\x1b[33mWARNING\x1b[0m torch/distributed: collective timeout is {i}s",
    "epoch progress: " + "#" * 40 + " {i}%",
    "",
]


def make_log(path: str, mb: int, share: float, seed: int = 0, legacy: bool = False) -> int:
    rnd = random.Random(seed)
    target = mb << 20
    written = 0
    with open(path, "w") as f:
        i = 0
        while written < target:
            i += 1
            prefix = f"2026-11-30T10:00:{i % 60:02d}.{i:09d}Z [default{i % 32}]:"
            if rnd.random() < share:
                if not legacy:
                    obj = {
                        "event": "epoch_time",
                        "rank": i % 64,
                        "world_size": 64,
                        "epoch": i,
                        "seconds": 0.31,
                    }
                    body = "ROLLCALL " + json.dumps(obj, separators=(",", ":"))
                else:
                    body = (
                        f"[Rank {i % 64}] - local_samples=78.1, total_time=2.00s, "
                        "local_throughput=50.00 samples/s, local_avg_epoch_time=0.40s"
                    )
            else:
                body = rnd.choice(JUNK).format(i=i)
            line = prefix + body + "\n"
            f.write(line)
            written += len(line)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--marker-share", type=float, default=0.05)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rows = []
        for log, legacy, formats in (
            ("rollcall", False, ("auto", "rollcall")),
            ("legacy", True, ("auto", "neuron-legacy")),
        ):
            path = os.path.join(tmp, f"{log}.log")
            size = make_log(path, args.mb, args.marker_share, legacy=legacy)
            for fmt in formats:
                roll = RollCall()
                t0, c0 = time.perf_counter(), time.process_time()
                roll.read_file(path, fmt)
                dt, cpu = time.perf_counter() - t0, time.process_time() - c0
                rows.append((log, fmt, size / dt / 1e6, size / cpu / 1e6, roll.records, dt))
            os.unlink(path)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"logs of {size / 1e6:.0f} MB, {args.marker_share:.0%} record lines; target >= 400 MB/s on one core"
    )
    print(f"{'log':<10}{'format':<14}{'MB/s':>8}{'MB/s cpu':>10}{'records':>10}{'seconds':>9}")
    for log, fmt, rate, cpu_rate, records, dt in rows:
        print(f"{log:<10}{fmt:<14}{rate:>8.0f}{cpu_rate:>10.0f}{records:>10}{dt:>9.2f}")
    print(
        f"peak RSS {peak / 1024:.0f} MiB (before parsing {rss_before / 1024:.0f} MiB): streaming, not the whole log"
    )


if __name__ == "__main__":
    main()
