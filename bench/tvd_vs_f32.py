#!/usr/bin/env python3
"""CUDA bf16 against CPU float32 on random weights of a real Qwen3.5 shape: option
distributions of synthetic decision requests (random token ids, race_all shape by default),
answered by `flide decide --config` on both devices. Prints the median and p99 total variation
distance and the top-1 agreement — the closeness claims of a bf16 engine (shared/specs/flide.md).
With --fp8, CUDA with `--quantization fp8` too (its fused products on FP8 operands), against the
same float32 reference and against CUDA bf16.

    python3 bench/tvd_vs_f32.py --flide build-gpu/tools/cli/flide --config CONFIG.json \
        [--requests 8] [--trunk 450] [--questions 4] [--question-len 50] [--labels 4] [--fp8]
"""

import argparse
import json
import random
import statistics
import subprocess
import tempfile
from pathlib import Path


def requests(n, trunk, questions, qlen, labels, vocab, seed):
    rng = random.Random(seed)
    for r in range(n):
        yield {
            "id": f"r{r}",
            "context_ids": [rng.randrange(vocab) for _ in range(trunk)],
            "questions": [
                {"id": f"q{q}", "ids": [rng.randrange(vocab) for _ in range(qlen)],
                 "label_ids": rng.sample(range(vocab), labels)}
                for q in range(questions)
            ],
        }


def decide(flide, config, path, device, mode="fork", extra=()):
    cmd = [flide, "decide", "--config", config, "--input", path, "--device", device, "--mode", mode]
    if device == "cpu":
        cmd += ["--dtype", "f32"]
    cmd += list(extra)
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flide", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--trunk", type=int, default=450)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--question-len", type=int, default=50)
    ap.add_argument("--labels", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fp8", action="store_true", help="also CUDA with --quantization fp8")
    args = ap.parse_args()
    vocab = min(json.loads(Path(args.config).read_text()).get("vocab_size", 248320), 200000)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for req in requests(args.requests, args.trunk, args.questions, args.question_len,
                            args.labels, vocab, args.seed):
            f.write(json.dumps(req) + "\n")
    ref = decide(args.flide, args.config, f.name, "cpu")
    runs = {"cuda fork": decide(args.flide, args.config, f.name, "cuda"),
            "cuda independent": decide(args.flide, args.config, f.name, "cuda", "independent")}
    pairs = [(name, got, ref, "cpu f32 fork") for name, got in runs.items()]
    if args.fp8:
        fp8 = decide(args.flide, args.config, f.name, "cuda", extra=["--quantization", "fp8"])
        pairs += [("cuda fp8 fork", fp8, ref, "cpu f32 fork"),
                  ("cuda fp8 fork", fp8, runs["cuda fork"], "cuda bf16 fork")]
    for name, got, base, base_name in pairs:
        tvds, agree = [], 0
        for a, b in zip(got, base):
            for qa, qb in zip(a["questions"], b["questions"]):
                tvds.append(0.5 * sum(abs(x - y) for x, y in zip(qa["probs"], qb["probs"])))
                agree += qa["choice"] == qb["choice"]
        tvds.sort()
        p99 = tvds[min(len(tvds) - 1, int(0.99 * len(tvds)))]
        print(json.dumps({"config": Path(args.config).name, "compare": f"{name} vs {base_name}",
                          "questions": len(tvds), "median_tvd": statistics.median(tvds),
                          "p99_tvd": p99, "max_tvd": tvds[-1], "top1_agreement": agree / len(tvds)}))


if __name__ == "__main__":
    main()
