#!/usr/bin/env bash
# CPU wall time of `flide decide`, forked vs independent, on the first N requests of a dataset
# file (default: the first 50 lines of ../shared/data/race_middle_dev.jsonl) with a model
# (default: the shipped random-weight model). Both modes run back to back in one invocation of
# this script, same binary, same threads; prints per-mode wall time, summed per-request ms and
# the ratio. Usage: bench/cpu_decide.sh [N] [DATA.jsonl] [MODEL_DIR] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
data=${2:-../shared/data/race_middle_dev.jsonl}
model=${3:-models/flide-tiny-random}
threads=${4:-$(nproc)}
if [[ ! -f $data ]]; then echo "bench/cpu_decide.sh: $data not found (needs ../shared); skipped"; exit 0; fi
[[ -x build/tools/cli/flide ]] || scripts/setup.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n "$n" "$data" > "$tmp/in.jsonl"
echo "commit $(git rev-parse --short HEAD), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), threads $threads, $n requests of $data, model $model"
declare -A wall
for mode in fork independent; do
  start=$(date +%s.%N)
  ./build/tools/cli/flide decide --model "$model" --input "$tmp/in.jsonl" --mode "$mode" \
      --threads "$threads" > "$tmp/$mode.jsonl" 2> "$tmp/$mode.err" || true
  wall[$mode]=$(echo "$(date +%s.%N) - $start" | bc -l)
  summed=$(grep -o '"ms":[0-9.]*' "$tmp/$mode.jsonl" | cut -d: -f2 | paste -sd+ | bc -l)
  printf '%-12s wall %7.2f s   sum of per-request ms %9.1f   %s\n' "$mode" "${wall[$mode]}" \
      "$summed" "$(grep accuracy "$tmp/$mode.err" || true)"
done
printf 'independent / fork wall-time ratio: %.2f\n' "$(echo "${wall[independent]} / ${wall[fork]}" | bc -l)"
