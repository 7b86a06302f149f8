#!/usr/bin/env bash
# Are two or more built source trees bitwise the same on the GPU? Each tree's `flide decide`
# answers one fixed set of token-id decision requests (random ids below 240,000, inside every
# Qwen3.5 vocabulary of 248,320; trunks of 4,000-5,000 tokens, six questions each) on random
# weights of a real shape, and the answers (every probability as printed, to the digits that
# read back exactly; the timing field dropped) are hashed. Equal hashes: the change left every
# bit of the answers as it was. For changes claimed "same bits" (a different instruction for the
# same sums), next to bench/h200_ab.sh's timings:
#   TREES="ab/main ." bash bench/h200_ab.sh && bash bench/h200_bitcheck.sh ab/main .
# Knobs: SHAPE (qwen3_5_0_8b, a config under .devcarry/configs), FLAGS (more `flide decide`
# flags, e.g. FLAGS="--quantization fp8" for the FP8 products' bits). Run from the repo root.
set -uo pipefail
config=.devcarry/configs/${SHAPE:-qwen3_5_0_8b}.json
requests=$(mktemp --suffix=.jsonl)
python3 - "$requests" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for r in range(3):
        ids = lambda n: [rng.randrange(1000, 240000) for _ in range(n)]
        context = ids(4000 + 500 * r)
        questions = [{"ids": ids(60 + 7 * q), "label_ids": ids(4)} for q in range(6)]
        f.write(json.dumps({"id": r, "context_ids": context, "questions": questions}) + "\n")
PY
for tree in "$@"; do
  # shellcheck disable=SC2086  # FLAGS: words on purpose
  "$tree/build-gpu/tools/cli/flide" decide --config "$config" --input "$requests" --device cuda \
      ${FLAGS:-} 2>/dev/null | python3 -c "
import hashlib, json, sys
h, lines = hashlib.sha256(), 0
for line in sys.stdin:
    answer = json.loads(line)
    answer.pop('ms', None)
    h.update(json.dumps(answer).encode())
    lines += 1
print(sys.argv[1], h.hexdigest()[:16], lines, 'answers')" "$tree"
done
rm -f "$requests"
