#!/usr/bin/env bash
# flide serve under load on the H200 (issue 4): builds flide with CUDA, then for each shape
# starts `flide serve` on random weights of that shape with the Qwen2 tokenizer and runs
# `flide bench-serve` against it, writing under $OUT (default ./h200-out), with the server's
# /metrics after each workload and every request's latency (requests_<shape>_<workload>.jsonl).
# From the repo root:
#   SHAPES=qwen3_5_0_8b,qwen3_5_4b WORKLOADS=quality_all,race_all bash bench/h200_serve.sh
# A workload may be a `flide decide` FILE.jsonl, e.g. the real QuALITY requests copied from
# ../shared/data/quality_leval_dev.jsonl into the git-ignored .devcarry/ (the device has no
# ../shared): WORKLOADS=.devcarry/quality_leval_dev.jsonl.
# Knobs: CLIENTS (1,8,64), RATES (open-loop request rates instead of CLIENTS, e.g. 40,60,70),
# DURATION (seconds per client count, 10), WARMUP (unmeasured seconds
# before each, 2; at 4B, 8 clients that start together take ~3 s to settle into rounds of equal
# size, warm-up or not), GRAPHS (on|off),
# SERVE_ARGS (more `flide serve` flags, e.g. --batch-invariant), FLIDE (the binary that serves
# and loads, default the fresh build-gpu one; e.g. a copy built from other sources),
# POWER_CLIENTS (client counts, e.g. 1,8, each run once more alone under bench/power_trace.py
# before the table: the GPU's power, clock and energy per request under that load, in
# serve_power.jsonl).
set -uo pipefail
cd "$(dirname "$0")/.."
POWER_CLIENTS=${POWER_CLIENTS:-}
out=${OUT:-h200-out}
mkdir -p "$out"
shapes=${SHAPES:-qwen3_5_0_8b}
workloads=${WORKLOADS:-quality_all}
flide=${FLIDE:-build-gpu/tools/cli/flide}
FLIDE_TARGETS=flide bash scripts/device_build.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
for shape in ${shapes//,/ }; do
  log="$out/serve_$shape.log"
  $flide serve --config ".devcarry/configs/$shape.json" --tokenizer .devcarry/qwen2_tokenizer.json \
      --device cuda --port 0 --graphs "${GRAPHS:-on}" --max-queue 256 ${SERVE_ARGS:-} > "$out/serve_$shape.stdout" 2> "$log" &
  server=$!
  port=
  for _ in $(seq 1 300); do
    port=$(grep -oE 'listening on http://[^ ]+:[0-9]+' "$out/serve_$shape.stdout" | grep -oE '[0-9]+$')
    [[ -n $port ]] && grep -q "ready in" "$log" && break
    sleep 0.2
  done
  for w in ${workloads//,/ }; do
    name=$(basename "$w" .jsonl)  # a FILE.jsonl workload's results are named after the file
    for c in ${POWER_CLIENTS//,/ }; do
      python3 bench/power_trace.py --csv "$out/power_${shape}_${name}_$c.csv" --window steady:3:-1 -- \
          $flide bench-serve --url "http://127.0.0.1:$port" --workload "$w" --clients "$c" \
          --duration "${DURATION:-10}" --json | tee -a "$out/serve_power.jsonl"
    done
    load=(--clients "${CLIENTS:-1,8,64}")
    [[ -n ${RATES:-} ]] && load=(--request-rate "$RATES")
    $flide bench-serve --url "http://127.0.0.1:$port" --workload "$w" "${load[@]}" \
        --duration "${DURATION:-10}" --warmup "${WARMUP:-2}" --save-requests "$out/requests_${shape}_$name.jsonl" --json \
        | tee -a "$out/bench_serve.jsonl"
    # The server's counters so far (round sizes, queue waits: cumulative over the workloads).
    python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
        "http://127.0.0.1:$port/metrics" > "$out/metrics_${shape}_$name.txt"
  done
  kill -TERM $server; wait $server
done
