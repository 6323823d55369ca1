"""The GPU benchmark's table, from the results.json files that bench/gpu.sh left in one folder.

Usage: python bench/gpu_table.py DIR

One row per case: ranks that answered, samples/s per GPU, MFU, the ratio to the plain Hugging Face
reference of the same sequence length and layout (the case of the same name ending in -hf, measured in
the same call; a -std case, the standard path, is divided by the same), and where the run's time went, in seconds: rank 0's start-up, compile (first step),
warm-up (the other warm-up steps, with their count), timed epochs, the rest of the job (torchrun and
process start before start-up, teardown after the last epoch) and the whole pytest run (wall_s).
"""

import json
import statistics
import sys
from pathlib import Path

MARK = b"ROLLCALL "


def load(folder: Path) -> list[tuple[str, dict]]:
    rows = []
    for results in sorted(folder.glob("*/results.json")):
        for test in json.loads(results.read_text())["tests"]:
            rows.append((results.parent.name, test))
    return rows


def throughput_event(case_dir: Path) -> dict:
    """Rank 0's throughput event, read from the logs the run left (or {})."""
    decoder = json.JSONDecoder()
    for log in sorted(p for p in case_dir.rglob("*") if p.is_file() and p.suffix in (".log", ".txt", "")):
        for line in log.read_bytes().splitlines():
            at = line.find(MARK + b'{"event":"throughput"')
            if at < 0:
                continue
            try:
                event, _ = decoder.raw_decode(line[at + len(MARK) :].decode())
            except ValueError:
                continue
            if event.get("rank") == 0:
                return event
    return {}


def wall(case_dir: Path) -> float | None:
    try:
        return float((case_dir / "wall_s").read_text())
    except (OSError, ValueError):
        return None


def _s(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts/gpu")
    rows = load(folder)
    if not rows:
        print(f"no results.json under {folder}")
        return 1
    per_gpu: dict[str, list[float]] = {}
    for name, t in rows:
        per_gpu.setdefault(name.split("-run")[0], []).append(t["throughput"]["mean"] or 0.0)
    single = {
        seq: statistics.median(v)
        for seq, v in ((k.split("-")[0], v) for k, v in per_gpu.items() if k.endswith("-1"))
        if v
    }
    print(
        f"{'case':<16}{'ranks':>6}{'samples/s/GPU':>14}{'MFU':>7}{'vs hf':>7}{'scaling':>8}"
        f"{'start':>7}{'compile':>8}{'warm-up':>12}{'timed':>7}{'rest':>6}{'wall':>7}  verdict"
    )
    for name, t in rows:
        tp = t["throughput"]
        world = t["world_size"]
        answered = world - len(set().union(*map(set, t["missing"].values())))
        base = name.split("-run")[0]
        seq = name.split("-")[0]
        scaling = ""
        if world > 1 and single.get(seq) and tp["total"] and not base.endswith("-hf"):
            scaling = f"{tp['total'] / (world * single[seq]):.1%}"
        ratio = ""
        reference = per_gpu.get(f"{base.removesuffix('-std')}-hf")
        if reference and statistics.median(reference) and not base.endswith("-hf"):
            ratio = f"{(tp['mean'] or 0.0) / statistics.median(reference):.3f}"
        mfu = "-" if t.get("mfu_mean") is None else f"{t['mfu_mean']:.1%}"
        case_dir = folder / name
        ev = throughput_event(case_dir)
        parts = [ev.get(k) for k in ("startup_s", "compile_s", "warmup_s", "timed_s")]
        rest = None
        if all(p is not None for p in parts) and t.get("duration_s") is not None:
            rest = t["duration_s"] - sum(parts)
        warm = "-" if parts[2] is None else f"{parts[2]:.1f} ({ev.get('warmup_steps', '?')})"
        print(
            f"{name:<16}{f'{answered}/{world}':>6}{(tp['mean'] or 0):>14.1f}{mfu:>7}{ratio:>7}{scaling:>8}"
            f"{_s(parts[0]):>7}{_s(parts[1]):>8}{warm:>12}{_s(parts[3]):>7}{_s(rest):>6}{_s(wall(case_dir)):>7}"
            f"  {'PASS' if t['passed'] else 'FAIL'}"
        )
    for base, values in per_gpu.items():
        if len(values) > 1:
            med = statistics.median(values)
            print(
                f"{base} over {len(values)} runs: median {med:.1f} samples/s, spread (max-min)/median "
                f"{(max(values) - min(values)) / med:.2%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
