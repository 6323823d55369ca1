#!/usr/bin/env bash
# The roll call on real GPUs: the e2e suite on the local backend with cuda, BERT-large bf16.
#
#   bench/gpu.sh [CASE...]      CASE: s128-1 (1 GPU, seq 128), s512-1, s128-2 (2 simulated nodes x 1 GPU
#                               over NCCL), s512-2, s128-8 (1 node x 8), s128-2x4 (2 nodes x 4); a case
#                               ending in -hf (s128-1-hf, ...) runs plain Hugging Face + torch.compile
#                               instead, the reference the table's "vs hf" column divides by; ending in
#                               -std (s128-1-std, ...), the workload on the standard path a GPU without its
#                               proven kernels takes (rollcall_workload.gate; here told it is an sm_86). Default:
#                               s128-1 s128-1-hf s128-1-std s512-1 s512-1-hf, and the 2-GPU cases where 2 GPUs are.
#                               default: the suite's default roll call on 1 GPU (the workload's own
#                               defaults, only the compile cache named), as a user's first run.
#                               REPEAT=3 repeats the 1-GPU seq-128 case and the default one.
#
# The workload runs as WORKLOAD_ARGS says (default: the compact BERT, bf16 weights with fp32 masters,
# compiled); the reference as REFERENCE_ARGS (BertForPreTraining, bf16 autocast, compiled; both with the
# MLM head on the masked positions only and no DDP at world size 1, so both do the same work). Both keep
# their compiler caches in COMPILE_CACHE (default ~/.cache/rollcall/compile); FRESH_CACHE=1 empties it
# first, so the first run of each case compiles cold.
#
# PYCACHE=DIR keeps Python's bytecode in DIR (PYTHONPYCACHEPREFIX), written by the first run even where
# PYTHONDONTWRITEBYTECODE is set and read by the later ones, as on a node whose image carries its bytecode
# (images/bert-training/Dockerfile.nvidia compiles it at build). Without it, on an image that ships its
# packages without bytecode and forbids writing it, every process compiles torch's modules from source
# (FRESH_CACHE=1 empties DIR too).
#
# Uses the machine's python3 (torch, transformers, pytest); the suite itself runs from src/. Results go to
# $OUT (or artifacts/gpu), one results.json per case and its wall time (pytest start to verdict) in
# wall_s, and a table is printed last: throughput, MFU, the ratio to the reference, and where each run's
# time went (start-up, compile, warm-up, timed, the rest of the job, the whole pytest run).
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
cache=${COMPILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rollcall/compile}
[ "${FRESH_CACHE:-0}" = 1 ] && rm -rf "$cache"
mkdir -p "$cache"
if [ -n "${PYCACHE:-}" ]; then
  [ "${FRESH_CACHE:-0}" = 1 ] && rm -rf "$PYCACHE"
  mkdir -p "$PYCACHE"
  export PYTHONPYCACHEPREFIX=$PYCACHE
  unset PYTHONDONTWRITEBYTECODE
fi
workload=${WORKLOAD_ARGS:---impl compact --precision bf16 --compile}
reference=${REFERENCE_ARGS:---impl hf --compile}
# Per-GPU batch and steps: the default batch of an H200 (rollcall_workload.cli.CUDA_TOKENS_PER_STEP tokens)
# and enough steps to time a steady state. Warm-up ends once 5
# step times agree within 5%, after 40 steps at the most.
common="--model large --warmup-steps 40 --warmup-settle 5 --warmup-tolerance 5 --compile-cache $cache"
args_128="$common --seq-len 128 --batch-size ${BATCH_128:-384} --epochs 3 --steps-per-epoch 20"
args_512="$common --seq-len 512 --batch-size ${BATCH_512:-96} --epochs 3 --steps-per-epoch 15"

case_args() {  # name -> "nodes procs args"
  local layout impl=$workload seq
  if [ "$1" = default ]; then echo "1 1 --compile-cache $cache"; return; fi
  seq=${1%%-*}
  layout=${1#*-}
  if [ "${layout%-hf}" != "$layout" ]; then layout=${layout%-hf}; impl=$reference; fi
  layout=${layout%-std}
  case $seq in
    s128) seq=$args_128 ;;
    s512) seq=$args_512 ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
  case $layout in
    1) echo "1 1 $seq $impl" ;;
    2) echo "2 1 $seq $impl" ;;
    8) echo "1 8 $seq $impl" ;;
    2x4) echo "2 4 $seq $impl" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(s128-1 s128-1-hf s128-1-std s512-1 s512-1-hf)
  [ "$gpus" -ge 2 ] && cases+=(s128-2 s512-2)
  [ "$gpus" -ge 8 ] && cases+=(s128-8 s128-2x4)
fi

run_case() {  # name dir
  local started std=()
  read -r nodes procs wargs <<<"$(case_args "$1")"
  # -std: the standard path a GPU without the workload's proven kernels takes (the gate, told it is an A10G)
  [ "${1%-std}" != "$1" ] && std=(--workload-env ROLLCALL_ASSUME_ARCH=sm_86)
  mkdir -p "$2"
  started=$(date +%s.%N)
  python3 -m pytest -p rollcall.plugin -p no:cacheprovider tests/e2e -q \
    --backend local --accelerator nvidia --nodes "$nodes" --procs-per-node "$procs" \
    --workload-args "$wargs $extra" "${std[@]}" --job-timeout 900 --artifacts-dir "$2" 2>&1 | tail -n 8 || true
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" "$started" "$(date +%s.%N)" \
    >"$2/wall_s"
}

for c in "${cases[@]}"; do
  n=1
  case $c in s128-1 | default) n=$repeat ;; esac
  for i in $(seq 1 "$n"); do
    name=$c; [ "$n" -gt 1 ] && name="$c-run$i"
    echo "== $name"
    run_case "$c" "$out/$name"
  done
done
python3 bench/gpu_table.py "$out" | tee "$out/table.txt"
