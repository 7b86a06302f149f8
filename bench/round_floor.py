#!/usr/bin/env python3
"""The vendor floor of a QuALITY round: what cuBLAS and cuDNN take, under the H200's power limit,
for the parts of a flide round that they can run.

A round of BATCH requests of a TRUNK-token context and QUESTIONS questions of QUESTION_LEN tokens
has R = BATCH (TRUNK + QUESTIONS QUESTION_LEN) token rows; --requests gives the round's requests
one by one instead, as TRUNK:QUESTIONS:BRANCH (BRANCH: the questions' token rows together), for
requests of different sizes such as real QuALITY articles. Every product a forward makes is listed
from the model's config, in the order the layers run them: a Gated DeltaNet layer's q/k/v, z and
a/b projections and its output projection (added into the residual, as flide's matmul_add), a
full-attention layer's q+gate, k and v projections and its output projection, each layer's MLP
(gate and up as one product, down added into the residual); the last layer's rows past its
attention are the readout rows only (one a question), as in flide. With `attention` in --parts,
each full-attention layer also runs cuDNN's attention (scaled_dot_product_attention,
CUDNN_ATTENTION), one call for the requests of each shape: each trunk causal, then the questions'
rows over their trunk's keys (their own few keys left out, slightly less work than flide's; the
last layer: the readout rows only). What is not here has no vendor kernel to stand in: the delta
rule, the conv, the norms and the gates.

The round is captured in one CUDA graph and replayed back to back for SECONDS, so the power limit
settles the clock as it does for a served round (bench/results/2026-12-02-served-power-tail.md).
Prints one JSON line per part set: the median ms a round over the first 20 rounds and over the
last half of the run (the sustained figure), and the products' TFLOP a round. With --fp8 (or --fp8 fused), the
products flide's `--quantization fp8` runs on FP8 (q/k/v, z, q+gate/k/v, gate+up) run as
torch._scaled_mm on e4m3 operands with a float scale a row and a column (their quantization not
timed), the rest as before; with --fp8 all, every product does, the output projections and the
GDN gates' product too (as vLLM's --quantization fp8 takes every linear layer).

  python3 bench/round_floor.py --config CONFIG.json [--batch 4] [--trunk 5000] [--questions 18]
      [--question-len 70] [--requests T:Q:B,...] [--seconds 10] [--parts gemm,gemm+attention]
      [--fp8 [fused|all]]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


class Round:
    """The round's buffers and its ops in forward order; run() issues them once."""

    def __init__(self, cfg, requests, attention, fp8):
        self.dev = torch.device("cuda")
        self.fp8 = fp8
        self.ops = []
        self.flop = 0.0
        H, I = cfg["hidden_size"], cfg["intermediate_size"]
        rows = sum(trunk + branch for trunk, _, branch in requests)
        readout = sum(questions for _, questions, _ in requests)
        heads, kv_heads, hd = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
                               cfg["head_dim"])
        kd = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
        vd = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
        hv = cfg["linear_num_value_heads"]
        self.rows = rows
        self.buffers = {}  # a product's input and output by (role, width), shared by the layers
        self.h = self.act(rows, H)  # the residual stream
        layers = cfg["layer_types"]
        for i, kind in enumerate(layers):
            last = i == len(layers) - 1
            if kind == "linear_attention":
                self.product(rows, H, 2 * kd + vd, quantized=True)  # q, k, v (then the conv)
                self.product(rows, H, vd, quantized=True)  # z (then the gated norm)
                self.product(rows, H, 2 * hv)  # a, b (the gates)
                self.product(readout if last else rows, vd, H, residual=True)  # out
            else:
                self.product(readout if last else rows, H, 2 * heads * hd, quantized=True)
                self.product(rows, H, 2 * kv_heads * hd, quantized=True)  # k and v
                if attention:
                    for shape in sorted(set(requests)):
                        self.attention(shape, requests.count(shape), heads, kv_heads, hd, last)
                self.product(readout if last else rows, heads * hd, H, residual=True)  # o
            n = readout if last else rows
            self.product(n, H, 2 * I, quantized=True)  # gate and up (then SiLU times up)
            self.product(n, I, H, residual=True)  # down

    def act(self, rows, cols):
        return torch.randn(rows, cols, device=self.dev, dtype=torch.bfloat16)

    def buffer(self, role, cols):
        if (role, cols) not in self.buffers:
            made = self.act(self.rows, cols)
            if role == "x8":  # an FP8 input and its row scales, made once (flide: each round)
                made = (made.to(torch.float8_e4m3fn),
                        torch.rand(self.rows, 1, device=self.dev) + 0.5)
            self.buffers[role, cols] = made
        return self.buffers[role, cols]

    def product(self, m, k, n, residual=False, quantized=False):
        """out[:m, :n] (+)= x[:m, :k] w^T with w [n, k] a weight of its own (random, std 0.02)."""
        self.flop += 2.0 * m * n * k
        w = torch.randn(n, k, device=self.dev, dtype=torch.bfloat16) * 0.02
        x = self.buffer("x", k)[:m]
        if self.fp8 == "all" or (self.fp8 == "fused" and quantized):
            x8, xs = (part[:m] for part in self.buffer("x8", k))
            w8 = (w * 64).to(torch.float8_e4m3fn)  # e4m3 keeps std-1 values at full precision
            ws = torch.full((1, n), 1 / 64, device=self.dev)
            self.ops.append(lambda: torch._scaled_mm(x8, w8.t(), scale_a=xs, scale_b=ws,
                                                     out_dtype=torch.bfloat16,
                                                     use_fast_accum=True))
        elif residual:
            h = self.h[:m]
            self.ops.append(lambda: h.addmm_(x, w.t()))
        else:
            out = self.buffer("y", n)[:m]
            self.ops.append(lambda: torch.matmul(x, w.t(), out=out))

    def attention(self, shape, B, heads, kv_heads, hd, last):
        """The attention of B requests of one shape (trunk, questions, branch rows)."""
        T, questions, branch = shape
        k = torch.randn(B, kv_heads, T, hd, device=self.dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        q_rows = questions if last else branch
        q_trunk = None if last else torch.randn(B, heads, T, hd, device=self.dev,
                                                dtype=torch.bfloat16)
        q_quest = torch.randn(B, heads, q_rows, hd, device=self.dev, dtype=torch.bfloat16)

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                if q_trunk is not None:
                    F.scaled_dot_product_attention(q_trunk, k, v, is_causal=True, enable_gqa=True)
                F.scaled_dot_product_attention(q_quest, k, v, enable_gqa=True)
        self.ops.append(run)

    def run(self):
        for op in self.ops:
            op()


def sustained(rnd, seconds):
    """Median ms a round over the first 20 replays and over the last half of `seconds`."""
    for _ in range(3):  # plans and workspaces made before capture
        rnd.run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rnd.run()
    times, pending = [], []
    end_at = time.monotonic() + seconds
    while time.monotonic() < end_at:
        for _ in range(8):  # a few rounds queued ahead, as a loaded server keeps the GPU busy
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            pending.append((start, stop))
        while len(pending) > 8:
            start, stop = pending.pop(0)
            stop.synchronize()
            times.append((time.monotonic(), start.elapsed_time(stop)))
    torch.cuda.synchronize()
    times += [(time.monotonic(), s.elapsed_time(e)) for s, e in pending]
    median = lambda xs: sorted(xs)[len(xs) // 2]
    first = median([ms for _, ms in times[:20]])
    t0 = times[0][0]
    late = [ms for t, ms in times if t - t0 >= (times[-1][0] - t0) / 2]
    return first, median(late), len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--trunk", type=int, default=5000)
    ap.add_argument("--questions", type=int, default=18)
    ap.add_argument("--question-len", type=int, default=70)
    ap.add_argument("--requests", help="TRUNK:QUESTIONS:BRANCH,... instead of --batch's shapes")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--parts", default="gemm,gemm+attention")
    ap.add_argument("--fp8", nargs="?", const="fused", choices=["fused", "all"])
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    if args.requests:
        requests = [tuple(int(n) for n in r.split(":")) for r in args.requests.split(",")]
    else:
        requests = [(args.trunk, args.questions, args.questions * args.question_len)] * args.batch
    torch.manual_seed(0)
    for parts in args.parts.split(","):
        rnd = Round(cfg, requests, attention="attention" in parts, fp8=args.fp8)
        first, late, n = sustained(rnd, args.seconds)
        print(json.dumps({"parts": parts, "fp8": args.fp8, "batch": len(requests),
                          "rows": rnd.rows, "ops": len(rnd.ops),
                          "product_tflop": round(rnd.flop / 1e12, 3),
                          "first_ms": round(first, 3), "sustained_ms": round(late, 3),
                          "rounds": n, "product_tflops_sustained": None if "attention" in parts
                          else round(rnd.flop / late / 1e9, 1), "torch": torch.__version__}),
              flush=True)
        del rnd
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
