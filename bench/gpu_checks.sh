#!/usr/bin/env bash
# The roll call's checks on one GPU, as a user runs them: the default workload on the accelerator (its
# throughput, MFU and the device's facts through NVML), then two simulated nodes sharing the GPU over gloo
# with one replica corrupted (ROLLCALL_CORRUPT_RANK) and one all-reduce result corrupted
# (ROLLCALL_CORRUPT_COLLECTIVE). Uses the machine's python3 (torch, pytest); the suite runs from src/.
# Results go to $OUT (or artifacts/gpu-checks), one artifacts folder per case; a table is printed last.
# CASES="xid-31 gpu-in-use" runs only those (all six by default).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-artifacts/gpu-checks}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
small="--dist-backend gloo --impl hf --precision autocast --no-compile --model base --seq-len 128"
small="$small --batch-size 16 --warmup-steps 2 --epochs 2 --steps-per-epoch 5 --bandwidth-mb 16"
cases=${CASES:-default corrupt-rank corrupt-collective gpu-hang xid-31 gpu-in-use}
run() {  # name, then pytest's arguments; a case that CASES does not list is passed over
  local name=$1; shift
  [[ " $cases " == *" $name "* ]] || return 0
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
# the GPU's own hang: rank 1 queues a kernel that never ends and waits on it; its dump must say the GPU has
# not finished work queued about --hang-after seconds ago, beside the host frame (the synchronize)
CUDA_VISIBLE_DEVICES=0,0 run gpu-hang --nodes 2 --workload-args "$small --hang-after 30" \
  --workload-env ROLLCALL_GPU_HANG_RANK=1 --straggler-ratio 0 --busbw-ratio 0 --job-timeout 300
# an illegal address on rank 1's GPU mid-run: the verdict must name Xid 31 on that GPU (UUID, time, phase)
# beside rank 1's error, heard by the node's monitor through NVML
CUDA_VISIBLE_DEVICES=0,0 run xid-31 --nodes 2 --workload-args "$small" \
  --workload-env ROLLCALL_BAD_ADDRESS_RANK=1 --straggler-ratio 0 --busbw-ratio 0 --job-timeout 300
# another process holding 20 GB of the GPU before the run: gpu_in_use must name its pid and memory
if [[ " $cases " == *" gpu-in-use "* ]]; then
  python3 -c 'import time, torch; x = torch.empty(20 << 30, dtype=torch.uint8, device="cuda"); print("held", flush=True); time.sleep(900)' \
    >"$out/holder.log" 2>&1 &
  holder=$!
  until grep -q held "$out/holder.log" 2>/dev/null || ! kill -0 "$holder" 2>/dev/null; do sleep 1; done
  echo "holder pid $holder" >>"$out/summary.txt"
  run gpu-in-use --nodes 1 --workload-args "$small"
  kill "$holder"; wait "$holder" 2>/dev/null
fi
python3 - "$out" "$cases" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(out.joinpath("summary.txt").read_text())
for case in sys.argv[2].split():
    path = out / case / "results.json"
    if not path.is_file():
        print(f"{case}: no results.json; its log ends:\n" + "\n".join((out / f"{case}.log").read_text().splitlines()[-15:]))
        continue
    t = json.loads(path.read_text())["tests"][0]
    print(f"== {case}: passed={t['passed']} workload={t['workload']} throughput={t['throughput']['total']} mfu={t['mfu_mean']}")
    for p in t["findings"][:3] + t.get("warnings", [])[:3]:
        print(f"   {p['kind']}: {p['message'][:300]}")
    for e in t.get("gpu_events", [])[:5]:
        print(f"   gpu_event: {e['message'][:300]}")
    for node in t.get("nodes_detail", [])[:1]:
        print("   facts:", json.dumps(node)[:1500])
PY
