#!/usr/bin/env bash
# One device call on the H200: build with CUDA, then the steps asked for, each writing under
# $OUT (default ./h200-out). Run from the repo root on the device:
#   STEPS=tests,bench,peers SHAPES=qwen3_5_0_8b bash bench/h200_run.sh
# steps: tests (GPU suite, one process per test), model_tests (the model-level GPU tests only),
#   bf16ref (HF transformers' own bf16 error on the fixtures), bench (flide bench, fork and
#   independent), batch (flide bench --batch 1 and BATCH, default 8: rounds of several
#   requests, as the server packs concurrent ones), profile (per-op GPU time of one round),
#   tvd (CUDA bf16 vs CPU f32 on random weights of each shape), peers (HF transformers on the
#   same workloads).
# SHAPES / PEER_SHAPES: comma lists of config names in .devcarry/configs; WORKLOADS, REPS;
# GRAPHS (flide bench --graphs: on, off or both, the default).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-h200-out}
mkdir -p "$out"
steps=",${STEPS:-tests,bench},"
shapes=${SHAPES:-qwen3_5_0_8b}
peer_shapes=${PEER_SHAPES:-$shapes}
workloads=${WORKLOADS:-race_all,race_one,quality_all,quality_one,multirc_all}
reps=${REPS:-20}
configs=.devcarry/configs
flide=build-gpu/tools/cli/flide
has() { [[ $steps == *",$1,"* ]]; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
start=$(date +%s)
bash scripts/device_build.sh > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

if has tests; then
  # One process per test: a kernel fault cannot take the rest of the suite down with it.
  FLIDE_CUDA_SYNC_CHECK=1 ctest --test-dir build-gpu -R Cuda -j4 --timeout 120 > "$out/test_cuda.log" 2>&1
  grep -E "tests passed|Failed|\*\*\*" "$out/test_cuda.log" | head -40
fi
if has tests || has model_tests; then
  ./build-gpu/tests/cuda/test_cuda --gtest_filter='*CudaModel*' > "$out/test_cuda_model.log" 2>&1
  grep -vE "^\[ +(RUN|OK) " "$out/test_cuda_model.log" | tail -25
fi
has bf16ref && python3 tools/golden/hf_bf16_error.py models/flide-tiny-random \
    tests/data/golden_gqa tests/data/golden_tied_sharded 2>&1 | tee "$out/hf_bf16.txt" | grep worst
for shape in ${shapes//,/ }; do
  if has bench; then
    for w in ${workloads//,/ }; do
      $flide bench --config "$configs/$shape.json" --workload "$w" --device cuda --mode both \
          --graphs "${GRAPHS:-both}" \
          --reps "$reps" --warmup 3 --json 2>&1 | tee -a "$out/bench.jsonl" | cut -c1-400
    done
  fi
  if has batch; then
    for w in quality_all race_all; do
      for b in 1 "${BATCH:-8}"; do
        $flide bench --config "$configs/$shape.json" --workload "$w" --device cuda --mode fork \
            --graphs off --batch "$b" --reps "$reps" --warmup 3 --json 2>&1 | tee -a "$out/batch.jsonl" | cut -c1-300
      done
    done
  fi
  if has profile; then
    for w in race_all quality_all; do
      $flide bench --config "$configs/$shape.json" --workload "$w" --device cuda --mode fork \
          --reps 3 --warmup 2 --profile > /dev/null 2>> "$out/profile.txt"
    done
    tail -60 "$out/profile.txt"
  fi
  has tvd && python3 bench/tvd_vs_f32.py --flide "$flide" --config "$configs/$shape.json" \
      --requests "${TVD_REQUESTS:-6}" 2>&1 | tee -a "$out/tvd.jsonl"
done
if has peers; then
  for shape in ${peer_shapes//,/ }; do
    python3 bench/peers/hf_decide.py --config "$configs/$shape.json" --workloads "$workloads" \
        --reps 5 --warmup 2 --time-limit "${PEER_SECONDS:-150}" --out "$out/peers.jsonl" 2>&1 | tail -12
  done
fi
echo "total: $(( $(date +%s) - start )) s"
