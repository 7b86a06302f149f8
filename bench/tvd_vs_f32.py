#!/usr/bin/env python3
"""CUDA bf16 against CPU float32 on random weights of a real Qwen3.5 shape: option
distributions of synthetic decision requests (random token ids, race_all shape by default),
answered by `flide decide --config` on both devices. Prints the median and p99 total variation
distance and the top-1 agreement (also among the questions float32 answers with a margin) — the
closeness claims of a bf16 engine (shared/specs/flide.md).
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
import sys
import tempfile
from pathlib import Path


def add_request_args(ap, n_requests):
    """The synthetic requests' shape, as requests_of reads it."""
    ap.add_argument("--requests", type=int, default=n_requests)
    ap.add_argument("--trunk", type=int, default=450)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--question-len", type=int, default=50)
    ap.add_argument("--labels", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)


def requests_of(args, vocab_size):
    """The requests add_request_args' arguments describe: random token ids below the vocabulary
    (at most 200,000), the same for the same arguments."""
    rng = random.Random(args.seed)
    vocab = min(vocab_size, 200000)
    return [{
        "id": f"r{r}",
        "context_ids": [rng.randrange(vocab) for _ in range(args.trunk)],
        "questions": [
            {"id": f"q{q}", "ids": [rng.randrange(vocab) for _ in range(args.question_len)],
             "label_ids": rng.sample(range(vocab), args.labels)}
            for q in range(args.questions)
        ],
    } for r in range(args.requests)]


def decide(flide, source, path, device, mode="fork", extra=()):
    """Each request's option distributions from `flide decide`; source: ["--config", FILE] or
    ["--model", DIR]. On the CPU in float32."""
    cmd = [flide, "decide", *source, "--input", str(path), "--device", device, "--mode", mode]
    if device == "cpu":
        cmd += ["--dtype", "f32"]
    cmd += list(extra)
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    failed = [line for line in lines if "error" in line]
    if failed:  # e.g. non-finite probabilities: one bad answer makes the comparison meaningless
        sys.exit(f"flide decide ({device} {mode} {' '.join(extra)}) failed on {len(failed)} "
                 f"requests: {failed[0]['error']}")
    return [[q["probs"] for q in line["questions"]] for line in lines]


def top(p):
    return max(range(len(p)), key=p.__getitem__)


def compare(name, got, ref, **fields):
    """One JSON line: TVD and top-1 agreement of got against ref (per request, per question, the
    option probabilities), the agreement also among the questions whose reference answer has a
    margin (its top two options' probabilities differ by at least m): near-ties flip first.
    fields lead the line."""
    tvds, agree, margins = [], [], []
    for a, b in zip(got, ref):
        for pa, pb in zip(a, b):
            tvds.append(0.5 * sum(abs(x - y) for x, y in zip(pa, pb)))
            agree.append(top(pa) == top(pb))
            second, first = sorted(pb)[-2:]
            margins.append(first - second)
    by_margin = {}
    for m in (0.05, 0.1, 0.2):
        kept = [a for a, g in zip(agree, margins) if g >= m]
        by_margin[f"margin>={m}"] = [len(kept), sum(kept) / len(kept) if kept else None]
    tvds.sort()
    print(json.dumps({**fields, "compare": name, "questions": len(tvds),
                      "median_tvd": statistics.median(tvds),
                      "p99_tvd": tvds[min(len(tvds) - 1, int(0.99 * len(tvds)))],
                      "max_tvd": tvds[-1], "top1_agreement": sum(agree) / len(agree),
                      "top1_agreement_by_margin": by_margin}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flide", required=True)
    ap.add_argument("--config", required=True)
    add_request_args(ap, 8)
    ap.add_argument("--fp8", action="store_true", help="also CUDA with --quantization fp8")
    args = ap.parse_args()
    vocab = json.loads(Path(args.config).read_text()).get("vocab_size", 248320)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for req in requests_of(args, vocab):
            f.write(json.dumps(req) + "\n")
    source = ["--config", args.config]
    ref = decide(args.flide, source, f.name, "cpu")
    runs = {"cuda fork": decide(args.flide, source, f.name, "cuda"),
            "cuda independent": decide(args.flide, source, f.name, "cuda", "independent")}
    pairs = [(name, got, ref, "cpu f32 fork") for name, got in runs.items()]
    if args.fp8:
        fp8 = decide(args.flide, source, f.name, "cuda", extra=["--quantization", "fp8"])
        pairs += [("cuda fp8 fork", fp8, ref, "cpu f32 fork"),
                  ("cuda fp8 fork", fp8, runs["cuda fork"], "cuda bf16 fork")]
    for name, got, base, base_name in pairs:
        compare(f"{name} vs {base_name}", got, base, config=Path(args.config).name)


if __name__ == "__main__":
    main()
