"""32 ranks on this machine, 5 times: does every rank answer every time?

Usage: python bench/ranks32.py [--runs 5] [--nodes 2] [--procs-per-node 16]
Runs the local backend (real torchrun, gloo, BERT tiny, few steps) and prints, per run, how many ranks
answered all three events. The legacy suite parsed a different, incomplete count each run.
"""

import argparse
import resource
import tempfile
import time
from pathlib import Path

from rollcall.backends.local import LocalBackend
from rollcall.jobspec import JobSpec
from rollcall.runner import run_once

FEW_STEPS = ("--warmup-steps", "1", "--epochs", "2", "--steps-per-epoch", "1", "--batch-size", "2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--procs-per-node", type=int, default=16)
    args = ap.parse_args()
    world = args.nodes * args.procs_per_node
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(1, args.runs + 1):
            spec = JobSpec(
                name=f"ranks{world}-run{run}",
                nodes=args.nodes,
                procs_per_node=args.procs_per_node,
                workload_args=FEW_STEPS,
                job_timeout_s=900,
                rdzv_timeout_s=600,
            )
            t0 = time.monotonic()
            attempt = run_once(LocalBackend(), spec, Path(tmp) / f"run{run}")
            rows.append(
                (
                    run,
                    attempt.verdict.answered,
                    attempt.status.state.value,
                    time.monotonic() - t0,
                    attempt.verdict.message() if not attempt.passed else "",
                )
            )
            print(f"run {run}: {attempt.verdict.answered}/{world} ranks answered", flush=True)
    print(f"\n{args.nodes} nodes x {args.procs_per_node} ranks = {world} ranks, {args.runs} runs")
    print(f"{'run':<5}{'answered':>10}{'job':>11}{'seconds':>9}")
    for run, answered, state, secs, _ in rows:
        print(f"{run:<5}{f'{answered}/{world}':>10}{state:>11}{secs:>9.1f}")
    full = sum(1 for r in rows if r[1] == world)
    print(
        f"every rank answered in {full} of {args.runs} runs; peak RSS of this process "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    for row in rows:
        if row[4]:
            print(row[4])


if __name__ == "__main__":
    main()
