#!/usr/bin/env bash
# call 4: more questions for the margin claim: short shape x 128 requests (seed 1), QuALITY shape seed 2
set -uo pipefail
export FLIDE_DEPS=/tmp/flide-deps-0
t0=$(date +%s)
FLIDE_TARGETS="flide" bash scripts/device_build.sh > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 240 python3 bench/fp8_ablation.py --config .devcarry/configs/qwen3_5_0_8b.json --dir /tmp/ckpt \
    --flide build-gpu/tools/cli/flide --requests 128 > $OUT/short128.jsonl 2> $OUT/short128.err; echo "short128 rc $?"
cat $OUT/short128.jsonl
echo "short128 done $(( $(date +%s) - t0 )) s"
left=$(( 540 - ($(date +%s) - t0) ))
timeout $left python3 bench/fp8_ablation.py --config .devcarry/configs/qwen3_5_0_8b.json --dir /tmp/ckpt \
    --flide build-gpu/tools/cli/flide --requests 6 --trunk 5000 --questions 18 --question-len 70 --seed 2 \
    > $OUT/quality_seed2.jsonl 2> $OUT/quality_seed2.err; echo "quality seed 2 rc $?"
cat $OUT/quality_seed2.jsonl
echo "all done $(( $(date +%s) - t0 )) s"
