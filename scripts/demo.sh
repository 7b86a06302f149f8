#!/usr/bin/env bash
# The main job on the model shipped in the repo: set up, build, and answer the example
# decision requests (forked execution, float32, CPU). models/flide-tiny-random has RANDOM
# weights: the probabilities exercise the engine, they carry no meaning.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
./build/tools/cli/flide decide --model models/flide-tiny-random --input examples/requests.jsonl
