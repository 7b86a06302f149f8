#!/usr/bin/env python3
"""Hugging Face transformers on flide's synthetic decision workloads (the peer baseline for `flide bench`).

A request is one trunk plus Q questions, each read at its last token as a softmax over 4 label ids (2 for multirc):
race_all 450+4x50, race_one 450+1x50, quality_all 5000+18x70, quality_one 5000+1x70, multirc_all 330+58x35 tokens.
Token ids are random (seeded); weights are random (--config, HF init in bf16 on the GPU) or loaded (--model).
Methods (what a transformers user would do for one request):
  independent     each question as its own prompt trunk+question, all Q rows in one forward; unequal rows are
                  RIGHT-padded with a 2-D mask (GDN layers are causal and only zero masked hidden states; HF positions
                  are arange(T), which left padding would shift).
  prefix_cache    trunk once (use_cache=True), then each question in turn from copy.deepcopy of its cache (attention
                  KV + GDN conv/recurrent states); a tensor-cloning copy if deepcopy fails (field cache_copy).
  prefix_batched  trunk once, cache repeated Q times along the batch, all questions in one forward.
Only each question's last hidden state goes through lm_head (as logits_to_keep would). Before timing, every cell's label
distributions of its first and last question are checked against that question run alone (TVD < --tvd-tol); a start-up
self-test does the same on a ragged request (padding path). Timing: --warmup then --reps runs under inference_mode,
each between torch.cuda.synchronize() calls (perf_counter), including the softmax and the copy to the host.
GDN kernels: what transformers bound at import (fla / causal_conv1d when importable, else its torch reference;
--gdn torch forces the latter), reported as gdn_path / conv_path. Output: one JSON line per (workload, method) on stdout
(and appended to --out); a failing cell (OOM, failed check) gives a line with "error" and the run goes on.
Usage: python3 bench/peers/hf_decide.py --config CONFIG.json [--workloads race_all,...] [--methods independent,...]
       [--warmup 3] [--reps 10] [--out FILE] [--time-limit SECONDS]     (CUDA GPU, torch, transformers 5.17)
"""
import argparse
import copy
import gc
import importlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

WORKLOADS = {  # name: (trunk tokens, questions, tokens per question, labels)
    "race_all": (450, 4, 50, 4), "race_one": (450, 1, 50, 4), "quality_all": (5000, 18, 70, 4),
    "quality_one": (5000, 1, 70, 4), "multirc_all": (330, 58, 35, 2),
}
METHODS = ("independent", "prefix_cache", "prefix_batched")
LABEL_IDS = (32, 33, 34, 35)  # "A" "B" "C" "D" in Qwen's byte-level vocab; any ids do for random weights
GDN_FUNCS = ("torch_chunk_gated_delta_rule", "causal_conv1d_fn")  # what multi-token forwards call (not decode)
torch = None  # imported in main(), after --gdn torch may have blocked the optional kernel packages


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def package_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


class Model:
    """backbone: the text model (hidden states, cache); head: lm_head."""

    def __init__(self, args):
        import transformers
        from transformers import AutoConfig, Qwen3_5Config, Qwen3_5ForCausalLM
        if args.model:
            kwargs = dict(dtype=torch.bfloat16, attn_implementation=args.attn)
            try:
                model = transformers.AutoModelForCausalLM.from_pretrained(args.model, **kwargs)
            except Exception as e:  # multimodal checkpoint without a causal-LM auto mapping
                log(f"AutoModelForCausalLM failed ({type(e).__name__}: {e}); trying Qwen3_5ForConditionalGeneration")
                model = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(args.model, **kwargs)
        else:
            with tempfile.TemporaryDirectory() as tmp:  # AutoConfig: the loader path real checkpoints take
                shutil.copy(args.config, os.path.join(tmp, "config.json"))
                cfg = AutoConfig.from_pretrained(tmp)
            if isinstance(cfg, Qwen3_5Config):  # multimodal layout: the text model lives in text_config
                cfg = cfg.text_config
            torch.manual_seed(args.seed)
            default_dtype = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16)  # built and initialised in bf16 directly on the GPU
            try:
                with torch.device("cuda"):
                    model = Qwen3_5ForCausalLM(cfg)
            finally:
                torch.set_default_dtype(default_dtype)
        if getattr(model.config, "_attn_implementation", None) != args.attn:  # from_config picks its own default
            model.set_attn_implementation(args.attn)  # PreTrainedModel API in transformers 5
        model.to("cuda").eval().requires_grad_(False)  # .to(device) only: a dtype cast would also round inv_freq
        for name, p in model.named_parameters():
            if p.dtype != torch.bfloat16:
                log(f"casting {name} from {p.dtype} to bf16")
                p.data = p.data.to(torch.bfloat16)
        self.model, self.backbone, self.head = model, model.model, model.lm_head
        self.vocab = model.lm_head.weight.shape[0]
        self.attn = getattr(model.config, "_attn_implementation", "unknown")
        self.params_b = sum(p.numel() for p in model.parameters()) / 1e9


def kernel_paths():
    """The functions transformers' dispatch wrappers bound at import (the closure cell `implementation`)."""
    mod = importlib.import_module("transformers.models.qwen3_5.modeling_qwen3_5")
    paths = {}
    for name in GDN_FUNCS:
        f, impl = getattr(mod, name, None), None
        while f is not None and impl is None:  # through wrappers, to the dispatcher's closure
            code = getattr(f, "__code__", None)
            cells = dict(zip(code.co_freevars, f.__closure__ or ())) if code is not None else {}
            impl = cells["implementation"].cell_contents if "implementation" in cells else None
            f = getattr(f, "__wrapped__", None)
        impl = impl if impl is not None else getattr(mod, name, None)  # no dispatch wrapper: the function runs
        paths[name] = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', impl)}"

    def kind(path, fast):  # "fla" / "causal_conv1d", "torch" (transformers' reference), else the path itself
        return fast if path.startswith(fast) else "torch" if path.startswith(mod.__name__) else path
    return kind(paths["torch_chunk_gated_delta_rule"], "fla"), kind(paths["causal_conv1d_fn"], "causal_conv1d"), paths


def fork_cache(cache, n):
    """A copy of `cache` sharing no state tensor with it; per-row states (dim >= 3: KV, conv, recurrent) repeated n
    times along the batch. Works on the layer attributes, so it covers attention and linear-attention layers alike."""
    def fork(v):
        if torch.is_tensor(v):
            return v.repeat_interleave(n, dim=0) if n > 1 and v.dim() >= 3 else v.clone()
        if isinstance(v, dict):
            return {k: fork(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)) and any(torch.is_tensor(x) or isinstance(x, dict) for x in v):
            return type(v)(fork(x) for x in v)
        return copy.copy(v) if isinstance(v, (list, set)) else v

    def fork_object(obj):
        new = copy.copy(obj)
        new.__dict__.update({key: fork(value) for key, value in vars(obj).items()})
        if n > 1 and isinstance(vars(obj).get("batch_size"), int):
            new.__dict__["batch_size"] = obj.batch_size * n
        return new

    new = fork_object(cache)
    if isinstance(getattr(cache, "layers", None), list):
        new.layers = [fork_object(layer) for layer in cache.layers]
    return new


def read_labels(m, hidden, labels):
    """hidden [Q, H] at each question's last token -> label probabilities [Q, labels] (float32, host)."""
    return torch.softmax(m.head(hidden)[:, labels].float(), dim=-1).cpu()


def run_independent(m, trunk, questions, labels):
    rows = [torch.cat([trunk, q]) for q in questions]
    lengths = [len(r) for r in rows]
    ids, width = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True), max(lengths)
    mask = None
    if min(lengths) != width:  # ragged: right padding + 2-D mask (equal-length rows need none)
        mask = (torch.arange(width, device=ids.device)[None] < torch.tensor(lengths, device=ids.device)[:, None]).long()
    hidden = m.backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    last = torch.tensor(lengths, device=ids.device) - 1
    return read_labels(m, hidden[torch.arange(len(rows), device=ids.device), last], labels)


def trunk_cache(m, trunk):
    return m.backbone(input_ids=trunk[None], use_cache=True).past_key_values


def run_prefix_cache(m, trunk, questions, labels, copier):
    cache, last = trunk_cache(m, trunk), []
    for q in questions:
        out = m.backbone(input_ids=q[None], past_key_values=copier(cache), use_cache=True)
        last.append(out.last_hidden_state[0, -1])
    return read_labels(m, torch.stack(last), labels)


def run_prefix_batched(m, trunk, questions, labels):
    cache, n = trunk_cache(m, trunk), len(questions)
    cache = cache if n == 1 else fork_cache(cache, n)  # one request: the trunk cache need not survive
    lengths = [len(q) for q in questions]
    ids, width = torch.nn.utils.rnn.pad_sequence(questions, batch_first=True), max(lengths)
    mask = None
    if min(lengths) != width:  # HF convention: the 2-D mask spans cached + new tokens
        mask = torch.ones(n, len(trunk) + width, dtype=torch.long, device=ids.device)
        for i, length in enumerate(lengths):
            mask[i, len(trunk) + length:] = 0
    hidden = m.backbone(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).last_hidden_state
    last = torch.tensor(lengths, device=ids.device) - 1
    return read_labels(m, hidden[torch.arange(n, device=ids.device), last], labels)


def pick_copier(m, trunk):
    """copy.deepcopy if it works on this transformers/torch (inference tensors), else fork_cache(cache, 1)."""
    cache = trunk_cache(m, trunk)
    try:
        copy.deepcopy(cache)
        return copy.deepcopy, "deepcopy"
    except Exception as e:
        log(f"copy.deepcopy of the cache failed ({type(e).__name__}: {e}); prefix_cache clones tensors instead")
        return (lambda c: fork_cache(c, 1)), "clone"


def max_tvd(m, got, trunk, questions, labels, which):
    worst = 0.0
    for i in which:
        alone = run_independent(m, trunk, [questions[i]], labels)[0]
        worst = max(worst, 0.5 * (got[i] - alone).abs().sum().item())
    return worst


def make_request(trunk_len, question_lens, vocab, seed):
    gen, high = torch.Generator().manual_seed(seed), min(vocab, 150_000)
    trunk = torch.randint(100, high, (trunk_len,), generator=gen)
    questions = [torch.randint(100, high, (n,), generator=gen) for n in question_lens]
    return trunk.cuda(), [q.cuda() for q in questions]


def percentile(values, p):
    xs, k = sorted(values), (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (k - lo), 3)


def time_runs(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(reps, 1)):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def runners(m, trunk, questions, labels, copier):
    return {"independent": lambda: run_independent(m, trunk, questions, labels),
            "prefix_cache": lambda: run_prefix_cache(m, trunk, questions, labels, copier),
            "prefix_batched": lambda: run_prefix_batched(m, trunk, questions, labels)}


def padding_self_test(m, methods, copier):
    """Ragged request (questions of 20, 13, 6 tokens): every row of each method vs that question alone."""
    trunk, questions = make_request(70, [20, 13, 6], m.vocab, seed=12345)
    labels = torch.tensor(LABEL_IDS, device="cuda")
    fns, result = runners(m, trunk, questions, labels, copier), {}
    for method in methods:
        try:
            result[method] = round(max_tvd(m, fns[method](), trunk, questions, labels, range(3)), 6)
        except Exception as e:
            result[method] = f"error: {type(e).__name__}: {e}"[:300]
            log(traceback.format_exc())
    return result


def main():
    global torch
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="Qwen3.5 config JSON (flat text config or with text_config): random weights")
    source.add_argument("--model", help="checkpoint folder for from_pretrained (real weights)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", help="also append the JSON lines to this file")
    parser.add_argument("--attn", default="sdpa", help="attn_implementation for the full-attention layers")
    parser.add_argument("--gdn", choices=("auto", "torch"), default="auto",
                        help="torch: hide fla/causal_conv1d from transformers (reference GDN path)")
    parser.add_argument("--tvd-tol", type=float, default=5e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=0, help="seconds; later cells are skipped (0: none)")
    args = parser.parse_args()
    workloads, methods = args.workloads.split(","), args.methods.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS] + [x for x in methods if x not in METHODS]
    if unknown:
        parser.error(f"unknown workload/method: {unknown}")
    if args.gdn == "torch":  # a module set to None fails to import, so transformers binds its torch reference
        sys.modules.update(fla=None, causal_conv1d=None)
        os.environ["USE_HUB_KERNELS"] = "0"
    torch = importlib.import_module("torch")
    import transformers
    if not torch.cuda.is_available():
        sys.exit("hf_decide.py: needs a CUDA GPU")
    started = time.perf_counter()
    m = Model(args)
    try:
        gdn_path, conv_path, paths = kernel_paths()
    except Exception as e:  # a failed probe must not cost the run
        gdn_path = conv_path = paths = f"unknown ({type(e).__name__}: {e})"
    env = {"engine": "hf-transformers", "version": transformers.__version__, "torch": torch.__version__,
           "model": os.path.basename(os.path.normpath(args.model or args.config)),
           "weights": "checkpoint" if args.model else "random", "dtype": "bfloat16", "attn": m.attn,
           "gdn_path": gdn_path, "conv_path": conv_path, "fla": package_version("flash-linear-attention"),
           "gpu": torch.cuda.get_device_name()}
    log(f"hf_decide: transformers {transformers.__version__}, torch {torch.__version__}, {env['gpu']}, "
        f"{m.params_b:.2f} B params, attention {m.attn}, GDN {gdn_path}, conv {conv_path}; "
        f"fla {package_version('flash-linear-attention')}, causal-conv1d {package_version('causal-conv1d')}, "
        f"kernels {package_version('kernels')}; bound: {json.dumps(paths)}")
    out = open(args.out, "a", encoding="utf-8") if args.out else None

    def emit(row):
        print(json.dumps(row), flush=True)
        if out:
            print(json.dumps(row), file=out, flush=True)

    with torch.inference_mode():
        probe_trunk, _ = make_request(70, [], m.vocab, seed=1)
        copier, copy_kind = pick_copier(m, probe_trunk)
        pad_check = padding_self_test(m, methods, copier)
        log(f"right-padding self-test, max TVD vs alone: {pad_check}")
        gc.collect()
        torch.cuda.empty_cache()
        for workload in workloads:  # tokens seeded per workload name: a subset run sees the same requests
            trunk_len, n_questions, question_len, n_labels = WORKLOADS[workload]
            trunk, questions = make_request(trunk_len, [question_len] * n_questions, m.vocab,
                                            seed=args.seed * 1000 + list(WORKLOADS).index(workload))
            labels = torch.tensor(LABEL_IDS[:n_labels], device="cuda")
            fns = runners(m, trunk, questions, labels, copier)
            for method in methods:
                row = {**env, "workload": workload, "method": method, "trunk": trunk_len, "questions": n_questions,
                       "question_len": question_len, "labels": n_labels, "reps": args.reps,
                       "pad_check_tvd": pad_check.get(method)}
                if method == "prefix_cache":
                    row["cache_copy"] = copy_kind
                if args.time_limit and time.perf_counter() - started > args.time_limit:
                    emit({**row, "error": "skipped: --time-limit reached"})
                    continue
                error = None  # set inside except, acted on after it: the traceback must not pin GPU memory
                try:
                    torch.cuda.reset_peak_memory_stats()
                    tvd = max_tvd(m, fns[method](), trunk, questions, labels, sorted({0, n_questions - 1}))
                    row["check_tvd"] = round(tvd, 6)
                    if not tvd < args.tvd_tol:
                        raise AssertionError(f"TVD {tvd:.3g} vs each question alone exceeds {args.tvd_tol}")
                    times = time_runs(fns[method], args.warmup, args.reps)
                    peak = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                    row.update(median_ms=percentile(times, 50), p10_ms=percentile(times, 10),
                               p90_ms=percentile(times, 90), peak_gib=peak)
                except Exception as e:  # OOM, failed check, API drift: report the cell and go on
                    error = f"{type(e).__name__}: {e}"[:500]
                    log(f"{workload}/{method} failed:\n{traceback.format_exc()}")
                gc.collect()
                torch.cuda.empty_cache()
                emit({**row, "error": error} if error else row)
                log(f"{workload}/{method}: " + (error or f"median {row['median_ms']} ms (p10 {row['p10_ms']}, "
                                                         f"p90 {row['p90_ms']}), check TVD {row['check_tvd']}"))


if __name__ == "__main__":
    main()
