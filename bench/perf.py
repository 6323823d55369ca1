"""Compute time per rank and bus bandwidth per node on this machine: healthy runs and injected faults.

    python bench/perf.py [--runs N] [--nodes 2] [--procs-per-node 2] [--slow-rank 3:3] [--slow-link 1:50]
                         [--accelerator cpu|nvidia] [--workload-args ARGS] [--out DIR]

Runs the roll call (``pytest tests/e2e --backend local``) ``--runs`` times healthy, then once with each fault
(an empty ``--slow-rank`` or ``--slow-link`` leaves that one out), reads each run's results.json and prints
one row per run: the median rank's compute time, the spread of the ranks' compute times ((max - min) /
median), the largest p90 / median of a rank's own steps, the slowest rank and its ratio to the median, each
node's bus bandwidth within the node and the lowest node's ratio to the median node, and the verdict; then
each failed run's problems as the verdict says them. ``--out DIR`` keeps each run's artifacts there (else they go to a temporary directory).

On a machine with fewer GPUs than ranks, ``CUDA_VISIBLE_DEVICES=0,0`` gives each of two simulated nodes GPU 0
(the local backend hands each node its share of that list), and ``--dist-backend gloo`` in the workload's
arguments lets their ranks share it (NCCL refuses two ranks on one GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.local.e2e import roll_call


def run(
    nodes: int, ppn: int, accelerator: str, env_pairs: list[str], workload_args: str, artifacts: Path
) -> tuple[dict, float]:
    started = time.monotonic()
    done = roll_call(
        artifacts.parent,
        workload_args,
        "--accelerator",
        accelerator,
        workload_env=tuple(env_pairs),
        nodes=nodes,
        procs_per_node=ppn,
        job_timeout=900,
        artifacts=artifacts,
        timeout=1200,
    )
    results = artifacts / "results.json"
    if not results.is_file():
        sys.exit(f"no {results}: pytest exited with {done.returncode}\n{done.output[-3000:]}")
    return json.loads(results.read_text())["tests"][0], time.monotonic() - started


def row(name: str, test: dict, seconds: float) -> tuple[str, ...]:
    perf = test["perf"]
    compute = {c["rank"]: c["compute_ms"] for c in perf["compute"]}
    steps = [c["compute_ms_p90"] / c["compute_ms"] for c in perf["compute"] if c.get("compute_ms_p90")]
    mid = statistics.median(compute.values()) if compute else float("nan")
    slowest = max(compute, key=compute.__getitem__) if compute else None
    nodes = {n["node"]: n["busbw_gbps"] for n in perf["bandwidth"]["nodes"] if n["busbw_gbps"]}
    node_mid = statistics.median(nodes.values()) if nodes else float("nan")
    low = min(nodes, key=nodes.__getitem__) if nodes else None
    return (
        name,
        f"{mid:.1f}",
        f"{100 * (max(compute.values()) - min(compute.values())) / mid:.2f}%" if compute else "-",
        f"{max(steps):.3f}" if steps else "-",
        f"{slowest} ({compute[slowest] / mid:.2f}x)" if slowest is not None else "-",
        " ".join(f"{n}:{v:.3g}" for n, v in sorted(nodes.items())) or "-",
        f"{low} ({nodes[low] / node_mid:.2f}x)" if low is not None else "-",
        "PASS" if test["passed"] else "FAIL",
        f"{seconds:.0f}",
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--procs-per-node", type=int, default=2)
    p.add_argument("--slow-rank", default="3:3")
    p.add_argument("--slow-link", default="1:50")
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "nvidia"))
    p.add_argument("--workload-args", default="--warmup-steps 1 --epochs 2 --steps-per-epoch 2")
    p.add_argument("--out", type=Path, help="keep each run's artifacts under this directory")
    a = p.parse_args()
    cases = [(f"healthy-{i + 1}", []) for i in range(a.runs)]
    if a.slow_rank:
        cases += [(f"slow-rank {a.slow_rank}", [f"ROLLCALL_SLOW_RANK={a.slow_rank}"])]
    if a.slow_link:
        cases += [(f"slow-link {a.slow_link}", [f"ROLLCALL_SLOW_LINK={a.slow_link}"])]
    header = (
        "case",
        "compute ms (median)",
        "spread",
        "p90/median",
        "slowest rank",
        "node busbw GB/s",
        "lowest node",
        "verdict",
        "s",
    )
    rows = [header]
    why: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rollcall-perf-") as tmp:
        for i, (name, env_pairs) in enumerate(cases):
            artifacts = (a.out or Path(tmp)) / f"case-{i}" / "artifacts"
            artifacts.parent.mkdir(parents=True, exist_ok=True)
            test, seconds = run(
                a.nodes, a.procs_per_node, a.accelerator, env_pairs, a.workload_args, artifacts
            )
            rows.append(row(name, test, seconds))
            why += [f"{name}: {problem}" for problem in test["problems"]]
            print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for line in why:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
