#!/usr/bin/env python3
"""Which products' FP8 operands move the answers, on an independent implementation.

Hugging Face transformers' Qwen3.5 at a real shape, with HF's own random initialisation rounded to
bf16, answers synthetic decision requests (random token ids, tvd_vs_f32.py's generator: each
question run as trunk ++ question, its option distribution the softmax over its label ids at the
last row) in float32 (TF32 off) as the reference. Then again with the operands of chosen linear
layers rounded to FP8 e4m3 the way flide's `--quantization fp8` rounds them (a scale per
activation row and per weight row: the row's largest magnitude over 448, each value times
1 / scale rounded to nearest-even e4m3; the products in float32), one set of layers at a time.
It saves the checkpoint, so with --flide `flide decide --model` answers the same requests on CUDA
bf16 and CUDA FP8 (which should sit as far from float32 as HF does with flide's set of layers in
FP8: then the error is the scheme's, not the kernels'), and with --cpu on CPU float32 too (which
must agree with HF float32: the checkpoint is read as HF reads it).
Prints one JSON line a comparison: median / p99 / max TVD and top-1 agreement, the latter also
among the questions whose float32 answer has a margin (questions, agreement).

    python3 bench/fp8_ablation.py --config CONFIG.json --dir /tmp/ckpt [--flide PATH [--cpu]]
        [--requests 32] [--trunk 450] [--questions 4] [--question-len 50] [--labels 4]
"""

import argparse
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, Qwen3_5ForCausalLM

from tvd_vs_f32 import add_request_args, compare, decide, requests_of

GDN_QKV = ["linear_attn.in_proj_qkv"]
GDN_Z = ["linear_attn.in_proj_z"]
ATTN_QKV = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
MLP_UP = ["mlp.gate_proj", "mlp.up_proj"]
FLIDE_FP8 = GDN_QKV + GDN_Z + ATTN_QKV + MLP_UP  # the four fused products of --quantization fp8
OUTPUTS = ["linear_attn.out_proj", "self_attn.o_proj", "mlp.down_proj"]
FLIDE_SET = "fp8 flide's set (qkv, z, attention q/k/v, gate/up)"
VARIANTS = {
    FLIDE_SET: FLIDE_FP8,
    "fp8 gdn in_proj_qkv only": GDN_QKV,
    "fp8 gdn in_proj_z only": GDN_Z,
    "fp8 attention q/k/v only": ATTN_QKV,
    "fp8 mlp gate/up only": MLP_UP,
    "fp8 mlp gate/up/down": MLP_UP + ["mlp.down_proj"],
    "fp8 flide's set + output projections": FLIDE_FP8 + OUTPUTS,
}


def e4m3(t: torch.Tensor) -> torch.Tensor:
    """Rows of the last dimension through e4m3 at flide's scale (fp8_rows.cuh), back in float32."""
    amax = t.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return (t * (1.0 / scale)).to(torch.float8_e4m3fn).float() * scale


class Fp8Layers:
    """Within the block, the named linear layers take e4m3-rounded weights and inputs."""

    def __init__(self, model, suffixes):
        self.layers = [m for n, m in model.named_modules()
                       if isinstance(m, torch.nn.Linear) and any(n.endswith(s) for s in suffixes)]
        if not self.layers:
            raise SystemExit(f"no linear layer ends in any of {suffixes}")

    def __enter__(self):
        self.saved = [m.weight.data for m in self.layers]
        self.hooks = []
        for m in self.layers:
            m.weight.data = e4m3(m.weight.data)
            self.hooks.append(m.register_forward_pre_hook(lambda _, args: (e4m3(args[0]),)))
        return self

    def __exit__(self, *exc):
        for m, w, h in zip(self.layers, self.saved, self.hooks):
            m.weight.data = w
            h.remove()


def answer(model, reqs):
    """Per request, per question, the option probabilities (float64 lists)."""
    out = []
    for req in reqs:
        ids = torch.tensor([req["context_ids"] + q["ids"] for q in req["questions"]], device="cuda")
        with torch.inference_mode():
            last = model(input_ids=ids, logits_to_keep=1).logits[:, -1].double()
        out.append([last[i, q["label_ids"]].softmax(-1).tolist()
                    for i, q in enumerate(req["questions"])])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--dir", required=True, help="where to write the checkpoint (replaced)")
    ap.add_argument("--flide", help="also answer with `flide decide --model DIR`")
    ap.add_argument("--cpu", action="store_true", help="with --flide, also CPU float32")
    add_request_args(ap, 32)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(args.config, folder / "config.json")
    torch.manual_seed(args.seed)
    with torch.device("cuda"):
        model = Qwen3_5ForCausalLM(AutoConfig.from_pretrained(folder)).to(torch.bfloat16)
    model.save_pretrained(folder)
    bf16 = model.eval()
    f32 = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32).to("cuda").eval()

    reqs = requests_of(args, f32.config.vocab_size)
    path = folder / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reqs))

    ref = answer(f32, reqs)
    compare("hf bf16 vs hf f32", answer(bf16, reqs), ref)
    fp8 = {}
    for name, suffixes in VARIANTS.items():
        with Fp8Layers(f32, suffixes):
            fp8[name] = answer(f32, reqs)
        compare(f"hf {name} vs hf f32", fp8[name], ref)
    if args.flide:
        source = ["--model", str(folder)]
        if args.cpu:
            compare("flide cpu f32 vs hf f32", decide(args.flide, source, path, "cpu"), ref)
        compare("flide cuda bf16 vs hf f32", decide(args.flide, source, path, "cuda"), ref)
        flide_fp8 = decide(args.flide, source, path, "cuda", extra=["--quantization", "fp8"])
        compare("flide cuda fp8 vs hf f32", flide_fp8, ref)
        compare("flide cuda fp8 vs hf fp8 flide's set", flide_fp8, fp8[FLIDE_SET])


if __name__ == "__main__":
    main()
