#!/usr/bin/env bash
# The roll call's checks on one GPU, as a user runs them: the default workload on the accelerator (its
# throughput, MFU and the device's facts through NVML), then two simulated nodes sharing the GPU over gloo
# with one replica corrupted (ROLLCALL_CORRUPT_RANK) and one all-reduce result corrupted
# (ROLLCALL_CORRUPT_COLLECTIVE). Uses the machine's python3 (torch, pytest); the suite runs from src/.
# Results go to $OUT (or artifacts/gpu-checks), one artifacts folder per case; a table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-artifacts/gpu-checks}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
small="--dist-backend gloo --impl hf --precision autocast --no-compile --model base --seq-len 128"
small="$small --batch-size 16 --warmup-steps 2 --epochs 2 --steps-per-epoch 5 --bandwidth-mb 16"
run() {  # name, then pytest's arguments
  local name=$1; shift
  local start=$SECONDS
  python3 -m pytest -p rollcall.plugin tests/e2e --backend local --accelerator nvidia --artifacts-dir "$out/$name" \
    -p no:cacheprovider -q "$@" >"$out/$name.log" 2>&1
  echo "$name exit=$? wall=$((SECONDS - start))s" >>"$out/summary.txt"
}
: >"$out/summary.txt"
run default --nodes 1
CUDA_VISIBLE_DEVICES=0,0 run corrupt-rank --nodes 2 --workload-args "$small" \
  --workload-env ROLLCALL_CORRUPT_RANK=1 --straggler-ratio 0 --busbw-ratio 0
CUDA_VISIBLE_DEVICES=0,0 run corrupt-collective --nodes 2 --workload-args "$small" \
  --workload-env ROLLCALL_CORRUPT_COLLECTIVE=1 --straggler-ratio 0 --busbw-ratio 0
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(out.joinpath("summary.txt").read_text())
for case in ("default", "corrupt-rank", "corrupt-collective"):
    path = out / case / "results.json"
    if not path.is_file():
        print(f"{case}: no results.json; its log ends:\n" + "\n".join((out / f"{case}.log").read_text().splitlines()[-15:]))
        continue
    t = json.loads(path.read_text())["tests"][0]
    print(f"== {case}: passed={t['passed']} workload={t['workload']} throughput={t['throughput']['total']} mfu={t['mfu_mean']}")
    for p in t["findings"][:3]:
        print(f"   {p['kind']}: {p['message'][:300]}")
    for node in t.get("nodes_detail", [])[:1]:
        print("   facts:", json.dumps(node)[:1500])
PY
