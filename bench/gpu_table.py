"""The GPU benchmark's table, from the results.json files that bench/gpu.sh left in one folder.

Usage: python bench/gpu_table.py DIR
"""

import json
import statistics
import sys
from pathlib import Path


def load(folder: Path) -> list[tuple[str, dict]]:
    rows = []
    for results in sorted(folder.glob("*/results.json")):
        for test in json.loads(results.read_text())["tests"]:
            rows.append((results.parent.name, test))
    return rows


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts/gpu")
    rows = load(folder)
    if not rows:
        print(f"no results.json under {folder}")
        return 1
    per_gpu: dict[str, list[float]] = {}
    print(f"{'case':<14}{'ranks':>7}{'samples/s/GPU':>15}{'total':>10}{'MFU':>8}{'scaling':>9}  verdict")
    for name, t in rows:
        base = name.split("-run")[0]
        tp = t["throughput"]
        mean = tp["mean"] or 0.0
        per_gpu.setdefault(base, []).append(mean)
    single = {
        seq: statistics.median(v)
        for seq, v in ((k.split("-")[0], v) for k, v in per_gpu.items() if k.endswith("-1"))
        if v
    }
    for name, t in rows:
        tp = t["throughput"]
        world = t["world_size"]
        answered = world - len(set().union(*map(set, t["missing"].values())))
        seq = name.split("-")[0]
        scaling = ""
        if world > 1 and single.get(seq) and tp["total"]:
            scaling = f"{tp['total'] / (world * single[seq]):.1%}"
        mfu = "-" if t.get("mfu_mean") is None else f"{t['mfu_mean']:.1%}"
        total = tp["total"] or 0.0
        print(
            f"{name:<14}{f'{answered}/{world}':>7}{(tp['mean'] or 0):>15.1f}{total:>10.1f}{mfu:>8}{scaling:>9}"
            f"  {'PASS' if t['passed'] else 'FAIL'}"
        )
    repeats = per_gpu.get("s128-1", [])
    if len(repeats) > 1:
        med = statistics.median(repeats)
        print(
            f"s128-1 over {len(repeats)} runs: median {med:.1f} samples/s, spread (max-min)/median "
            f"{(max(repeats) - min(repeats)) / med:.2%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
