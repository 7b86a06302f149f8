#!/usr/bin/env python3
"""How far Hugging Face transformers' own bf16 forward lands from its float32 goldens.

The CUDA backend computes in bf16; its error against the float32 goldens is only meaningful next
to the error of the reference implementation run in bf16 on the same checkpoint and inputs. For
each fixture folder with a golden.json (tools/golden/make_fixtures.py), this loads the
checkpoint in bfloat16 on the GPU (torch GDN fallback, as the goldens), runs every golden case
and prints, per case and row, max |logit_bf16 - logit_f32| / max |logit_f32| — the metric of
tests/cuda/model_test.cpp — plus the TVD of the softmax over the row.

    python3 tools/golden/hf_bf16_error.py models/flide-tiny-random tests/data/golden_gqa ...
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration


def load(folder: Path):
    config = AutoConfig.from_pretrained(folder)
    cls = Qwen3_5ForConditionalGeneration if hasattr(config, "text_config") else Qwen3_5ForCausalLM
    return cls.from_pretrained(folder, dtype=torch.bfloat16).to("cuda").eval()


def main() -> None:
    for arg in sys.argv[1:]:
        folder = Path(arg)
        golden = json.loads((folder / "golden.json").read_text())
        model = load(folder)
        worst = 0.0
        for case in golden["cases"]:
            ids = torch.tensor([case["ids"]], device="cuda")
            with torch.inference_mode():
                logits = model(input_ids=ids).logits[0].float().cpu()
            rows = [(len(case["ids"]) - 1, case["logits_last"])]
            rows += list(zip(case.get("logits_all_rows", []), case.get("logits_rows", [])))
            for row, ref in rows:
                ref = torch.tensor(ref)
                err = float((logits[row] - ref).abs().max() / ref.abs().max())
                tvd = float(0.5 * (logits[row].softmax(-1) - ref.softmax(-1)).abs().sum())
                worst = max(worst, err)
                print(f"{folder.name} length {len(case['ids'])} row {row}: rel err {err:.4f} tvd {tvd:.4f}")
        print(f"{folder.name}: HF bf16 vs HF f32 worst max|dlogit|/max|logit| = {worst:.4f}")


if __name__ == "__main__":
    main()
