#!/usr/bin/env bash
# Single-process throughput of the workload at several batch sizes (one H200), one line per variant.
#
#   bench/gpu_batch.sh SEQ:BATCH [SEQ:BATCH...]      e.g. bench/gpu_batch.sh 128:256 128:512 512:96
#
# Each variant runs train.py without torchrun: the compact BERT-large, bf16 weights with fp32 masters,
# compiled (WORKLOAD_ARGS replaces those), warm-up until 5 steps agree within 5% (at most 40 steps), 2
# timed epochs of 20 steps, no compute or bandwidth phase. Logs go to $OUT (or artifacts/gpu-batch), the
# table (samples/s, MFU, first-step seconds, peak GPU memory where the log has it) is printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-artifacts/gpu-batch}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cache=${COMPILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall/compile}
workload=${WORKLOAD_ARGS:---impl compact --precision bf16 --compile}
for v in "$@"; do
  seq=${v%%:*} batch=${v#*:}
  echo "== seq $seq batch $batch"
  # shellcheck disable=SC2086
  python3 images/bert-training/train.py --device cuda --model large --seq-len "$seq" --batch-size "$batch" \
    --warmup-steps 40 --warmup-settle 5 --warmup-tolerance 5 --epochs 2 --steps-per-epoch 20 \
    --compute-steps 0 --bandwidth-mb 0 --compile-cache "$cache" $workload ${BENCH_ARGS:-} \
    >"$out/s$seq-b$batch.log" 2>&1 || echo "seq $seq batch $batch failed: $(tail -n 3 "$out/s$seq-b$batch.log")"
done
python3 - "$out" "$@" <<'PY'
import json, sys
from pathlib import Path

print(f"{'seq':>4} {'batch':>6} {'samples/s':>10} {'MFU':>6} {'compile s':>10}")
for v in sys.argv[2:]:
    seq, batch = v.split(":")
    events = {}
    for line in Path(sys.argv[1], f"s{seq}-b{batch}.log").read_text(errors="replace").splitlines():
        if line.startswith("ROLLCALL "):
            e = json.loads(line[len("ROLLCALL "):])
            events[e["event"]] = e
    t = events.get("throughput")
    if t is None:
        print(f"{seq:>4} {batch:>6} {'-':>10}")
        continue
    mfu = f"{100 * t['mfu']:.1f}%" if t.get("mfu") is not None else "-"
    print(f"{seq:>4} {batch:>6} {t['samples_per_sec']:>10.1f} {mfu:>6} {t.get('compile_s', '-')!s:>10}")
PY
