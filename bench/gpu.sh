#!/usr/bin/env bash
# The roll call on real GPUs: the e2e suite on the local backend with cuda, BERT-large bf16.
#
#   bench/gpu.sh [CASE...]      CASE: s128-1 (1 GPU, seq 128), s512-1, s128-2 (2 simulated nodes x 1 GPU
#                               over NCCL), s512-2, s128-8 (1 node x 8), s128-2x4 (2 nodes x 4); default: all
#                               that fit the GPUs here. REPEAT=3 repeats the 1-GPU seq-128 case.
#
# Uses the machine's python3 (torch, transformers, pytest); the suite itself runs from src/. Results go to
# $OUT (or artifacts/gpu), one results.json per case, and a table is printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-artifacts/gpu}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Multicast NVLink stays off on shared hosts.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
repeat=${REPEAT:-3}
extra=${BENCH_ARGS:-}
# Per-GPU batch and steps: large enough to fill an H200 and to time a steady state after warm-up.
args_128="--compile --model large --seq-len 128 --batch-size ${BATCH_128:-256} --warmup-steps 15 --epochs 3 --steps-per-epoch 25"
# seq 512 runs eager: compiled it measured slower (bench/NOTES.md).
args_512="--model large --seq-len 512 --batch-size ${BATCH_512:-48} --warmup-steps 10 --epochs 3 --steps-per-epoch 15"

case_args() {  # name -> "nodes procs seqargs"
  case $1 in
    s128-1) echo "1 1 $args_128" ;;
    s512-1) echo "1 1 $args_512" ;;
    s128-2) echo "2 1 $args_128" ;;
    s512-2) echo "2 1 $args_512" ;;
    s128-8) echo "1 8 $args_128" ;;
    s128-2x4) echo "2 4 $args_128" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(s128-1 s512-1)
  [ "$gpus" -ge 2 ] && cases+=(s128-2 s512-2)
  [ "$gpus" -ge 8 ] && cases+=(s128-8 s128-2x4)
fi

run_case() {  # name dir
  read -r nodes procs wargs <<<"$(case_args "$1")"
  python3 -m pytest -p rollcall.plugin -p no:cacheprovider tests/e2e -q \
    --backend local --accelerator nvidia --nodes "$nodes" --procs-per-node "$procs" \
    --workload-args "$wargs $extra" --job-timeout 900 --artifacts-dir "$2" 2>&1 | tail -n 8 || true
}

for c in "${cases[@]}"; do
  n=1
  [ "$c" = s128-1 ] && n=$repeat
  for i in $(seq 1 "$n"); do
    name=$c; [ "$n" -gt 1 ] && name="$c-run$i"
    echo "== $name"
    run_case "$c" "$out/$name"
  done
done
python3 bench/gpu_table.py "$out" | tee "$out/table.txt"
