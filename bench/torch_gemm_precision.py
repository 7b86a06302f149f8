#!/usr/bin/env python3
"""What a QuALITY round's products cost in bf16 and in FP8 on the H200, by PyTorch's cuBLAS.

A round of 4 QuALITY requests on the 0.8B model is 25,040 token rows, and its products (the
forward's gemm_shapes: 18 GDN layers, 5 attention layers on every row, the last layer's k and v,
23 MLPs) are ~24 TFLOP, which flide runs at 652-723 TFLOP/s under the 700 W limit. This times
the same mix of products back to back, as a round issues them, so that the power limit engages:
once with bf16 operands (torch.matmul), once with FP8 e4m3 operands and per-tensor scales
(torch._scaled_mm, bf16 out). Each shape is also timed alone. The figure is the median of REPS
passes over the mix after WARMUP passes; a JSON line per shape and one per precision's mix.
It answers one question: how much of a round's time a change of operand precision could take
off, set against the rest of the round (bench/results/2026-12-02-gate-proj-tanh-silu.md).

  python3 bench/torch_gemm_precision.py [--rows 25040] [--reps 10] [--warmup 3]
"""
import argparse
import json

import torch

from torch_timing import median_ms

# (N, K, calls a round): the 0.8B forward's products on every row (model/qwen3_5.cpp
# gemm_shapes), gate and up as one product of 2 x 3,584 columns.
SHAPES = [
    (6144, 1024, 18),  # GDN in_proj_qkv
    (32, 1024, 18),    # GDN in_proj_a | in_proj_b
    (2048, 1024, 18),  # GDN in_proj_z
    (1024, 2048, 18),  # GDN out_proj
    (4096, 1024, 5),   # attention q_proj (query | gate)
    (512, 1024, 12),   # attention k_proj, v_proj (the last layer's too)
    (1024, 2048, 5),   # attention o_proj
    (7168, 1024, 23),  # MLP gate_proj | up_proj
    (1024, 3584, 23),  # MLP down_proj
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=25040)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    M = args.rows
    fp8 = torch.float8_e4m3fn
    one = torch.ones((), device="cuda", dtype=torch.float32)
    ops = {}
    for N, K, calls in SHAPES:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        x8, w8 = x.to(fp8), w.to(fp8)
        ops[(N, K)] = {
            "bf16": lambda x=x, w=w: torch.matmul(x, w.t()),
            # w8.t() is w in column-major order, as _scaled_mm wants its second operand.
            "fp8": lambda x8=x8, w8=w8: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                         out_dtype=torch.bfloat16),
        }
    flop_mix = sum(2.0 * M * N * K * calls for N, K, calls in SHAPES)
    for precision in ("bf16", "fp8"):
        for N, K, calls in SHAPES:
            ms = median_ms(ops[(N, K)][precision], args.reps, args.warmup)
            print(json.dumps({"precision": precision, "M": M, "N": N, "K": K, "ms": round(ms, 4),
                              "tflop_s": round(2.0 * M * N * K / ms / 1e9, 1)}))

        def mix(precision=precision):
            for N, K, calls in SHAPES:
                for _ in range(calls):
                    ops[(N, K)][precision]()

        ms = median_ms(mix, args.reps, args.warmup)
        print(json.dumps({"precision": precision, "mix_ms": round(ms, 3),
                          "mix_tflop": round(flop_mix / 1e12, 3),
                          "tflop_s": round(flop_mix / ms / 1e9, 1)}))


if __name__ == "__main__":
    main()
