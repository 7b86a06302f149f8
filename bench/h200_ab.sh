#!/usr/bin/env bash
# Side-by-side timing of several source trees in one device call (METHOD.md: a ratio measured in
# one run): builds every tree in parallel, runs the GPU tests of TESTS on each (optional), then
# times `flide bench` on each tree in turn, REPEATS times over, so that drift of the machine
# spreads over all trees alike. The device gets no git history, so prepare the trees on the
# development machine first, e.g. for the checkout against main:
#   mkdir -p ab/main && git archive main | tar -x -C ab/main
# (ab/ must not be git-ignored, or the device call must carry it), then on the device:
#   TREES="ab/main ." WORKLOADS=quality_all BATCHES=8,4,1 bash bench/h200_ab.sh
# Knobs: TREES (space-separated tree roots, "." is this one), WORKLOADS, BATCHES, REPEATS (2),
# REPS (10, per flide bench: such short runs end before the power limit settles the clock and
# read ~2% faster than serving; 150 gives the sustained round,
# bench/results/2026-12-02-served-power-tail.md), SHAPE (qwen3_5_0_8b), TESTS (a gtest filter run
# on every tree; empty: none), FLAGS (flag sets of `flide bench`, separated by |, each timed on
# every tree, e.g. FLAGS="|--quantization fp8": bf16 and FP8 side by side; default: one, empty).
# Results under $OUT (default ./h200-out): build logs, test logs,
# ab.jsonl and ab.txt (tree, repeat, workload, batch, ms per round, ms per request).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-h200-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
trees=${TREES:-.}
workloads=${WORKLOADS:-quality_all}
batches=${BATCHES:-8,1}
repeats=${REPEATS:-2}
reps=${REPS:-10}
config=$root/.devcarry/configs/${SHAPE:-qwen3_5_0_8b}.json
tests=${TESTS:-}
flag_sets=${FLAGS:-}
name_of() { echo "$1" | tr '/.' '__'; }  # a tree root as a file-name part

i=0
for t in $trees; do
  name=$(name_of "$t")
  (
    cd "$t" || exit 1
    [[ -e .devcarry ]] || ln -sfn "$root/.devcarry" .devcarry
    targets=flide
    [[ -n $tests ]] && targets="flide test_cuda"
    FLIDE_DEPS=/tmp/flide-deps-$i FLIDE_TARGETS="$targets" bash scripts/device_build.sh \
        > "$out/build_$name.log" 2>&1
    echo "build $t: rc $?"
  ) &
  i=$((i + 1))
done
wait

if [[ -n $tests ]]; then
  for t in $trees; do
    name=$(name_of "$t")
    "$t/build-gpu/tests/cuda/test_cuda" --gtest_filter="$tests" > "$out/test_$name.log" 2>&1
    echo "tests $t: $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_$name.log" | tr '\n' ' ')"
  done
fi

IFS='|' read -r -a flag_list <<< "$flag_sets"
[[ ${#flag_list[@]} -eq 0 ]] && flag_list=("")
for rep in $(seq 1 "$repeats"); do
  for t in $trees; do
    for flags in "${flag_list[@]}"; do
      label="$t${flags:+ $flags}"
      for w in ${workloads//,/ }; do
        for b in ${batches//,/ }; do
          # shellcheck disable=SC2086  # flags: words on purpose
          line=$("$t/build-gpu/tools/cli/flide" bench --config "$config" --workload "$w" \
              --device cuda --mode fork --graphs off --batch "$b" --reps "$reps" --warmup 3 \
              $flags --json 2>/dev/null | tail -1)
          if [[ -z $line ]]; then
            echo "$label rep$rep $w b$b: flide bench failed" | tee -a "$out/ab.txt"
            continue
          fi
          echo "$line" >> "$out/ab.jsonl"
          echo "$line" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read())['runs'][0]
print('$label rep$rep $w b$b', round(r['median_ms'], 3), round(r['median_ms_per_request'], 3))
" | tee -a "$out/ab.txt"
        done
      done
    done
  done
done
