#!/usr/bin/env python3
"""What PyTorch's attention kernels reach on the H200 for the attention of a QuALITY round.

flide's hd-256 attention (attention_wgmma.cu) runs a full layer of a round of 4 QuALITY requests,
trunks and questions in one launch, in ~1.13 ms (0.618 TFLOP; bench/results/
2026-12-02-attention-vs-cudnn.md). This times
torch.nn.functional.scaled_dot_product_attention on the causal trunks of that round: 4 requests of
TOKENS tokens, 8 query heads over 2 key/value heads of 256 (the Qwen3.5 0.8B layout), bf16. Each
backend that takes the shape (flash, cuDNN, memory-efficient) runs alone. Then the questions'
rows over their trunk: QUESTION_ROWS query rows a request (18 questions of 70 tokens) attending
to all TOKENS keys, not causal; their own few keys are left out, so that part is one dense call.
The figure is the median of REPS timed calls after WARMUP; FLOP counts 4 D a query row, key and
head (two products), over the causal half for the trunk. The output is a JSON line per backend
and part.

  python3 bench/torch_attention_baseline.py [--tokens 5011] [--question-rows 1260] [--batch 4]
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_timing import median_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=5011)
    ap.add_argument("--question-rows", type=int, default=1260)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    torch.manual_seed(0)
    B, T, H, Hkv, D = args.batch, args.tokens, args.heads, args.kv_heads, args.head_dim
    k = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16)
    # Backends that do not take grouped heads get them expanded (the same math).
    k_full = k.repeat_interleave(H // Hkv, dim=1)
    v_full = v.repeat_interleave(H // Hkv, dim=1)
    Q = args.question_rows
    parts = [("trunk", torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16), True,
              2.0 * T * T * D * H * B),
             ("questions", torch.randn(B, H, Q, D, device="cuda", dtype=torch.bfloat16), False,
              4.0 * Q * T * D * H * B)]

    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for part, q, causal, flop in parts:
        for name, backend in backends:
            for gqa in (True, False):
                kk, vv = (k, v) if gqa else (k_full, v_full)
                label = {"part": part, "backend": name, "gqa": gqa}
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda: F.scaled_dot_product_attention(
                            q, kk, vv, is_causal=causal, enable_gqa=gqa), args.reps, args.warmup)
                except RuntimeError as e:
                    print(json.dumps({**label, "error": str(e).splitlines()[0]}))
                    continue
                print(json.dumps({**label, "tokens": T, "query_rows": q.shape[2], "batch": B,
                                  "ms": round(ms, 4), "tflops": round(flop / ms / 1e9, 1),
                                  "torch": torch.__version__}))


if __name__ == "__main__":
    main()
