#!/usr/bin/env bash
# One device call on the H200: build with CUDA, run the GPU test suite, then `flide bench`
# (fork and independent side by side) and the HF transformers peer on the same workloads.
# Results land in $OUT (default ./h200-out). Usage, from the repo root on the device:
#   bash bench/h200_run.sh [SHAPES] [WORKLOADS] [PEER_SHAPES]
# SHAPES / PEER_SHAPES: comma lists of config names in .devcarry/configs (qwen3_5_0_8b, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-h200-out}
mkdir -p "$out"
shapes=${1:-qwen3_5_0_8b}
workloads=${2:-race_all,race_one,quality_all,quality_one,multirc_all}
peer_shapes=${3:-}
configs=.devcarry/configs

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
start=$(date +%s)
bash scripts/device_build.sh > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
flide=build-gpu/tools/cli/flide

# One process per test: a kernel fault cannot take the rest of the suite down with it.
FLIDE_CUDA_SYNC_CHECK=1 ctest --test-dir build-gpu -R Cuda -j4 --timeout 120 > "$out/test_cuda.log" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$out/test_cuda.log" | head -40
./build-gpu/tests/cuda/test_cuda --gtest_filter='*Model*' > "$out/test_cuda_model.log" 2>&1
grep -vE "^\[ +(RUN|OK) " "$out/test_cuda_model.log" | tail -40

for shape in ${shapes//,/ }; do
  for w in ${workloads//,/ }; do
    $flide bench --config "$configs/$shape.json" --workload "$w" --device cuda --mode both \
        --reps 20 --warmup 3 --json 2>&1 | tee -a "$out/bench.jsonl"
  done
done

for shape in ${peer_shapes//,/ }; do
  python3 bench/peers/hf_decide.py --config "$configs/$shape.json" --workloads "$workloads" \
      --reps 5 --warmup 2 --time-limit 200 --out "$out/peers.jsonl" 2>&1 | tail -20
done
echo "total: $(( $(date +%s) - start )) s"
