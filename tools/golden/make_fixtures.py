#!/usr/bin/env python3
"""Write flide's tiny Qwen3.5 checkpoints and their Hugging Face transformers golden outputs.

What it writes (each folder is deleted and rewritten):
  models/flide-tiny-random/        the shipped demo model: RANDOM WEIGHTS, laid out like an official Qwen3.5
                                   download (Qwen3_5ForConditionalGeneration config with text_config/vision_config,
                                   tensors under model.language_model., tied lm_head, BF16 with F32 A_log and
                                   linear_attn.norm.weight, stray mtp.* / model.visual.* tensors), a byte-level BPE
                                   tokenizer trained here on text generated here, and golden.json.
  tests/data/golden_gqa/           flat Qwen3_5ForCausalLM checkpoint (model. prefix, explicit lm_head, all BF16),
                                   grouped GDN value heads (Hv = 3 Hk) with Dk != Dv, one kv head.
  tests/data/golden_tied_sharded/  multimodal layout, tied, two safetensors shards + index, mixed F32/BF16/F16.

Why: flide's model tests compare its logits with HF transformers on checkpoints shaped like the real ones
(shared/specs/qwen3_5.md). Goldens come from LOADING THE SAVED FILES BACK with transformers in float32 on CPU,
so they use the stored bf16/f16 values upcast exactly. The Gated DeltaNet runs HF's torch reference path: the
optional `fla` / `causal_conv1d` packages are blocked before transformers is imported and hub kernels are off.

Weights: HF builds each model (its parameter names and shapes are the contract, checked against the spec's
tensor table), then every tensor is re-drawn from a seeded generator, because HF initialises norms to 0/1 and
dt_bias to 1: linear weights N(0, 1/fan_in), (1+w) norms N(0, 0.1), the gated GDN norm 1 + N(0, 0.2),
embeddings/lm_head N(0, (2.5/sqrt(H))^2) so logits have std ~2.5, A_log = log U(1, 16), and dt_bias spread
over [-8, 0.5] per layer so some GDN heads decay slowly enough for state to cross the 64-token chunk boundary.

Run: python3 tools/golden/make_fixtures.py [--root REPO]
Needs Python 3.12, torch 2.11, transformers 5.17, tokenizers 0.23, safetensors 0.8.
"""
import argparse
import copy
import importlib.util
import json
import math
import os
import random
import shutil
import string
import sys
import unicodedata
from pathlib import Path

# Before torch/transformers load: a module set to None in sys.modules fails to import, so transformers'
# use_kernel_func_from_hub_with_fallback keeps its torch reference for the GDN and conv functions.
ACCEL_PACKAGES = ("fla", "causal_conv1d")
ACCEL_FOUND = [name for name in ACCEL_PACKAGES if importlib.util.find_spec(name) is not None]
for _name in ACCEL_PACKAGES:
    sys.modules[_name] = None
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # goldens are CPU float32 even on a GPU machine
os.environ["USE_HUB_KERNELS"] = "0"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import safetensors.torch  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoConfig, AutoTokenizer, Qwen3_5Config, Qwen3_5TextConfig  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration  # noqa: E402

QWEN35_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Qwen's order after the BPE vocab; the flag is Qwen's "special" (skipped by skip_special_tokens).
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]
BPE_VOCAB = 2000
# Minimal ChatML written for this model; generation prompt as in spec section 7.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

# Fixture sizes. mrope sections must sum to rotary_dim / 2 = head_dim * 0.25 / 2 (text-only: no effect).
TINY = dict(hidden=64, layers=8, inter=192, heads=4, kv_heads=2, head_dim=32, k_heads=2, v_heads=4,
            k_dim=16, v_dim=24, theta=10_000_000, mrope=[2, 1, 1], tied=True, seed=35_001)
GQA = dict(hidden=48, layers=4, inter=96, heads=4, kv_heads=1, head_dim=16, k_heads=2, v_heads=6,
           k_dim=8, v_dim=12, theta=10_000, mrope=[1, 1, 0], tied=False, seed=35_002, vocab=300)
TIED = dict(hidden=40, layers=8, inter=80, heads=2, kv_heads=2, head_dim=24, k_heads=1, v_heads=2,
            k_dim=16, v_dim=16, theta=1_000_000, mrope=[1, 1, 1], tied=True, seed=35_003, vocab=257)
VISION_HIDDEN = 32  # the small vision_config below; only its patch_embed shape matters here

# Sequence length -> logits rows stored besides the last one (chunk size is 64: 63/64 straddle it).
CASE_ROWS = {1: [0], 5: [0, 2], 64: [0, 31], 97: [0, 48, 63, 64], 150: [0, 64, 128]}
MAX_GOLDEN_BYTES = 3 * 2**20
MAX_TINY_FOLDER_BYTES = 6 * 2**20

# ----------------------------------------------------------------------------------------------------------
# Tokenizer: training text written here, byte-level BPE, Qwen3.5 pre-tokenizer and added tokens.

NAMES = "Anna Ben Carlos Dana Elif Farid Grace Hiro Ines Jonas Kemal Lena Maya Noah Olga Pavel Quinn Rosa".split()
NOUNS = """apple garden river window teacher bicycle kitchen market letter mountain village computer picture blanket
    bridge candle doctor engine forest guitar harbor island jacket kettle ladder meadow notebook orange pencil question
    rabbit station tomato umbrella violin wallet yogurt zebra school library museum bakery train ticket coffee sandwich
    weather morning holiday friend family neighbor planet ocean cloud flower table chair door basket""".split()
ADJECTIVES = """small bright quiet heavy warm cold old new green yellow empty busy gentle strange simple careful happy
    tired famous narrow wooden shiny fresh sweet bitter loud soft early late clever""".split()
VERBS = [v.split("/") for v in """walk/walked/walking paint/painted/painting clean/cleaned/cleaning visit/visited/visiting
    open/opened/opening carry/carried/carrying watch/watched/watching cook/cooked/cooking fix/fixed/fixing
    plant/planted/planting find/found/finding buy/bought/buying read/read/reading write/wrote/writing
    bring/brought/bringing see/saw/seeing take/took/taking make/made/making sell/sold/selling draw/drew/drawing""".split()]
FOODS = """bread cheese soup rice noodles pancakes salad butter chocolate cookies lemonade potatoes carrots pepper
    strawberries mushrooms chicken beans porridge dumplings""".split()
JOBS = """farmer pilot nurse carpenter engineer gardener journalist musician painter baker mechanic scientist librarian
    photographer plumber""".split()
CITIES = "Lisbon Nairobi Oslo Kyoto Lima Cairo Dublin Hanoi Quito Vienna Sydney Toronto Warsaw Seoul Tunis".split()
ANIMALS = "otter falcon beaver dolphin hedgehog penguin squirrel tortoise giraffe kangaroo lizard parrot".split()
HOBBIES = "swimming chess knitting gardening climbing dancing fishing singing cycling hiking juggling baking".split()
WEATHER = "sunny cloudy rainy windy foggy stormy snowy humid chilly mild".split()
PLACES = ["in the garden", "near the station", "at school", "in the kitchen", "by the river", "at the market",
          "on the bridge", "in the library", "at home", "in the village"]
TIMES = ["every morning", "on Sunday", "after lunch", "in the evening", "during the winter", "before breakfast",
         "last week", "tomorrow", "at night", "on Friday afternoon"]
FACTS = [line.split("|") for line in """Which of these is a fruit?|apple|carrot|bread|stone
    Which animal can fly?|eagle|horse|shark|cow
    What color is the sky on a clear day?|blue|green|red|brown
    How many legs does a spider have?|eight|six|four|ten
    Which season is usually the coldest?|winter|summer|spring|autumn
    What do bees make?|honey|milk|silk|wool
    What is frozen water called?|ice|steam|sand|glass
    Which tool is used to cut paper?|scissors|hammer|spoon|brush
    Where do fish live?|water|trees|deserts|clouds
    What is the opposite of hot?|cold|warm|loud|tall
    Which instrument has black and white keys?|piano|drum|flute|violin
    How many days are in a week?|seven|five|ten|twelve
    Which vehicle runs on rails?|train|boat|bicycle|truck
    Which organ pumps blood?|heart|lung|stomach|skin
    What is 3 plus 4?|7|6|8|12
    Which month comes after March?|April|May|February|June""".strip().split("\n")]
FOREIGN = ["Der Hund schläft unter dem großen Tisch.", "Wir gehen morgen früh in den Park.",
           "Je voudrais un café au lait, s'il vous plaît.", "La bibliothèque ferme à dix-huit heures.",
           "¿Dónde está la estación de tren?", "Mañana vamos a la playa con mis amigos.",
           "Il gatto dorme sul divano.", "Eu gosto de ler livros à noite.", "Привет! Как у тебя дела?",
           "Сегодня очень холодно.", "Καλημέρα, τι κάνεις;", "今天天气很好，我们去公园吧。", "我喜欢喝茶。",
           "ありがとうございます。", "東京は大きな都市です。", "안녕하세요, 만나서 반갑습니다.",
           "مرحبا بك في بيتنا.", "नमस्ते, आप कैसे हैं?", "Tôi thích ăn phở.", "Viel Glück! 🍀 Gute Reise 🚆"]
LETTERS = list(string.ascii_uppercase + string.ascii_lowercase)
TOKENIZER_SAMPLES = [
    "Hello world", "Answer: B", "don't I'M we'll THEY'RE", "Numbers: 12345 and 3.14, -7!",
    "Café naïve e\u0301 (combining accent)", "  leading spaces\n\n\ttabs\r\nend  ", "日本語のテキスト 🙂",
    "नमस्ते दुनिया", "def f(x):\n    return x + 1\n",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>",
]
CHAT_TEXT = ("<|im_start|>user\nQuestion: Which animal can fly?\nOptions: [A] horse [B] eagle [C] shark [D] cow\n"
             "Answer with the letter of the best option only.<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
             "</think>\n\n")


def multiple_choice(rng):
    question, right, *wrong = (part.strip() for part in rng.choice(FACTS))
    options = [right] + wrong
    rng.shuffle(options)
    listing = " ".join(f"[{letter}] {option}" for letter, option in zip("ABCD", options))
    return (f"Question: {question}\nOptions: {listing}\nAnswer with the letter of the best option only.\n"
            f"Answer: {'ABCD'[options.index(right)]}")


def corpus_document(rng):
    name, noun, noun2, adj = rng.choice(NAMES), rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(ADJECTIVES)
    (verb, past, verbing), place, time = rng.choice(VERBS), rng.choice(PLACES), rng.choice(TIMES)
    city, food = rng.choice(CITIES), rng.choice(FOODS)
    kind = rng.randrange(16)
    if kind == 0:
        return f"{name} {past} the {adj} {noun} {place} {time}."
    if kind == 1:
        return f"Did {name} {verb} a {adj} {noun} {time}? Yes, and then {name} {past} the {noun2} too."
    if kind == 2:
        return f"The {adj} {noun} costs {rng.randint(1, 999)} dollars and {rng.randint(0, 99)} cents."
    if kind == 3:
        return multiple_choice(rng)
    if kind == 4:
        items = "\n".join(f"- {rng.randint(1, 12)} {rng.choice(NOUNS)}s" for _ in range(rng.randint(2, 5)))
        return f"Shopping list for {name}\n\n{items}\n"
    if kind == 5:
        return f"User: Can you {verb} the {noun} {time}?\nAssistant: Sure, I will {verb} the {adj} {noun} {place}.\n"
    if kind == 6:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        return f"{a} + {b} = {a + b}\n{a} x {b} = {a * b}\n{a} - {b} = {a - b}"
    if kind == 7:
        return (f"Meeting on {rng.randint(2000, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} at "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}, room {rng.randint(1, 500)}!")
    if kind == 8:
        return " ".join(rng.sample(FOREIGN, 2))
    if kind == 9:  # every letter as its own word, so " A" ... " z" become single tokens
        return " ".join(rng.sample(LETTERS, len(LETTERS)))
    if kind == 10:
        return f"def {verb}_{noun}(x, y):\n    # {adj} helper\n    return x * {rng.randint(2, 9)} + y\n"
    if kind == 11:
        return f"Weather in {city}: {rng.randint(-20, 40)} degrees, {rng.choice(WEATHER)}, wind {rng.randint(0, 90)} km/h"
    if kind == 12:
        return (f"Recipe: mix {rng.randint(1, 4)} cups of {food} with {rng.choice(FOODS)}, then bake for "
                f"{rng.randint(5, 60)} minutes.")
    if kind == 13:
        return f"{name} works as a {rng.choice(JOBS)} in {city} and is {verbing} the {noun} {time}."
    if kind == 14:
        return f"{name}'s {rng.choice(ANIMALS)} enjoys {rng.choice(HOBBIES)}; the {rng.choice(ANIMALS)} prefers {food}."
    return f"A {adj} story\n\n{name} {past} a {noun} {place}.\n\nThe {noun2} was {rng.choice(ADJECTIVES)} {time}"


def build_tokenizer(folder, seed):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    rng = random.Random(seed)
    tok.train_from_iterator([corpus_document(rng) for _ in range(6000)], trainer=trainer)
    n_bpe = tok.get_vocab_size(with_added_tokens=True)
    assert 1000 <= n_bpe <= BPE_VOCAB, f"BPE vocab {n_bpe}: training text too small or trainer changed"
    for offset, (content, special) in enumerate(ADDED_TOKENS):
        token = AddedToken(content, special=special, normalized=False)
        added = tok.add_special_tokens([token]) if special else tok.add_tokens([token])
        assert added == 1 and tok.token_to_id(content) == n_bpe + offset, f"added token {content} misplaced"
    tok.save(str(folder / "tokenizer.json"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = {content: tok.token_to_id(content) for content, _ in ADDED_TOKENS}
    write_json(folder / "tokenizer_config.json", {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(ids[c]): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": s} for c, s in ADDED_TOKENS},
        "bos_token": None, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 262144,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "TokenizersBackend",
        "unk_token": None,
    })
    return tok, ids


def check_tokenizer(tok, ids, folder):
    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    for letter in LETTERS:
        assert len(enc(letter)) == 1 and len(enc(" " + letter)) == 1, f"{letter!r} or ' {letter}' is not one token"
    newlines = enc("\n\n")
    assert len(newlines) == 1, f"'\\n\\n' tokenises as {newlines}"
    think = enc("<think>\n\n</think>\n\n")
    assert think == [ids["<think>"], newlines[0], ids["</think>"], newlines[0]], f"think block tokenises as {think}"
    assert enc("<|im_end|><|endoftext|>") == [ids["<|im_end|>"], ids["<|endoftext|>"]]
    assert tok.encode("Hi").ids == enc("Hi"), "encode must add no tokens (no post-processor)"
    for text in TOKENIZER_SAMPLES + [CHAT_TEXT]:
        back = tok.decode(enc(text), skip_special_tokens=False)
        assert back == unicodedata.normalize("NFC", text), f"round trip changed {text!r} into {back!r}"
    hf = AutoTokenizer.from_pretrained(str(folder))
    for text in TOKENIZER_SAMPLES:
        got = hf.encode(text, add_special_tokens=False)
        assert got == enc(text), f"AutoTokenizer disagrees with tokenizer.json on {text!r}: {got} vs {enc(text)}"
    chat = [{"role": "user", "content": "Hi!"}]
    prompt = "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == prompt
    assert hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True,
                                  enable_thinking=False) == prompt + "\n</think>\n\n"


# ----------------------------------------------------------------------------------------------------------
# Configs, weights, files.

def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def reset_dir(path):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def text_config(spec, vocab_size, eos_id):
    n = spec["layers"]
    assert sum(spec["mrope"]) * 2 == int(spec["head_dim"] * 0.25), "mrope_section must cover rotary_dim / 2"
    cfg = {
        "model_type": "qwen3_5_text", "vocab_size": vocab_size, "hidden_size": spec["hidden"],
        "intermediate_size": spec["inter"], "num_hidden_layers": n, "num_attention_heads": spec["heads"],
        "num_key_value_heads": spec["kv_heads"], "head_dim": spec["head_dim"],
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)],
        "full_attention_interval": 4, "linear_num_key_heads": spec["k_heads"],
        "linear_num_value_heads": spec["v_heads"], "linear_key_head_dim": spec["k_dim"],
        "linear_value_head_dim": spec["v_dim"], "linear_conv_kernel_dim": 4, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec["theta"], "partial_rotary_factor": 0.25,
                            "mrope_section": spec["mrope"], "mrope_interleaved": True},
        "max_position_embeddings": 262144, "initializer_range": 0.02, "tie_word_embeddings": spec["tied"],
        "use_cache": True, "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
        "mamba_ssm_dtype": "float32", "dtype": "bfloat16",
    }
    if eos_id is not None:
        cfg["eos_token_id"] = eos_id
    return cfg


def multimodal_config(tc, token_ids, eos_id):
    vision = {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": VISION_HIDDEN,
              "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 64, "num_heads": 2, "in_channels": 3,
              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
              "out_hidden_size": tc["hidden_size"], "num_position_embeddings": 64, "initializer_range": 0.02,
              "deepstack_visual_indexes": []}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", **token_ids,
            "text_config": tc, "vision_config": vision, "tie_word_embeddings": tc["tie_word_embeddings"],
            "eos_token_id": eos_id, "transformers_version": transformers.__version__}


def expected_shapes(cfg):
    """Tensor names/shapes of spec section 3, in Qwen3_5ForCausalLM naming (model. prefix)."""
    H, I, V, hd = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.head_dim
    kd = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    vd, hv = cfg.linear_num_value_heads * cfg.linear_value_head_dim, cfg.linear_num_value_heads
    conv, q, kv = 2 * kd + vd, cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (V, H)
    for i, kind in enumerate(cfg.layer_types):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                       p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                       p + "mlp.down_proj.weight": (H, I)})
        if kind == "linear_attention":
            a = p + "linear_attn."
            shapes.update({a + "in_proj_qkv.weight": (conv, H), a + "in_proj_z.weight": (vd, H),
                           a + "in_proj_b.weight": (hv, H), a + "in_proj_a.weight": (hv, H),
                           a + "conv1d.weight": (conv, 1, cfg.linear_conv_kernel_dim), a + "A_log": (hv,),
                           a + "dt_bias": (hv,), a + "norm.weight": (cfg.linear_value_head_dim,),
                           a + "out_proj.weight": (H, vd)})
        else:
            assert kind == "full_attention", kind
            a = p + "self_attn."
            shapes.update({a + "q_proj.weight": (2 * q, H), a + "k_proj.weight": (kv, H),
                           a + "v_proj.weight": (kv, H), a + "o_proj.weight": (H, q),
                           a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)})
    return shapes


def redraw(name, shape, gen, hidden):
    def normal(std, mean=0.0):
        return torch.randn(shape, generator=gen) * std + mean

    if name.endswith("linear_attn.A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
    if name.endswith("linear_attn.dt_bias"):  # softplus(dt_bias) from ~3e-4 (slow decay) to ~1 (fast)
        return torch.linspace(-8.0, 0.5, shape[0])[torch.randperm(shape[0], generator=gen)] + normal(0.1)
    if name.endswith("linear_attn.norm.weight"):  # plain weight
        return normal(0.2, 1.0)
    if name.endswith("norm.weight"):  # zero-centred (1 + w): input/post_attention/final/q/k norms
        return normal(0.1)
    if name.endswith(("embed_tokens.weight", "lm_head.weight")):
        return normal(2.5 / math.sqrt(hidden))
    if name.endswith("conv1d.weight"):
        return normal(1.0 / math.sqrt(shape[-1]))
    if len(shape) == 2:  # nn.Linear [out, in]
        return normal(1.0 / math.sqrt(shape[1]))
    raise AssertionError(f"no init rule for {name} {shape}")


def draw_weights(cfg, seed):
    """HF's own model fixes the names and shapes; every tensor is then re-drawn. Returns flat names -> fp32."""
    torch.manual_seed(seed)
    state = Qwen3_5ForCausalLM(copy.deepcopy(cfg)).state_dict()
    if cfg.tie_word_embeddings:
        assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr(), "HF did not tie"
        del state["lm_head.weight"]
    got, want = {k: tuple(v.shape) for k, v in state.items()}, expected_shapes(cfg)
    assert got == want, f"HF tensors differ from the spec: {sorted(set(got.items()) ^ set(want.items()))}"
    gen = torch.Generator().manual_seed(seed + 1)
    weights = {name: redraw(name, want[name], gen, cfg.hidden_size) for name in sorted(want)}
    for name, t in weights.items():
        assert torch.isfinite(t).all() and t.unique().numel() > 1, f"{name} is constant"
    return weights


def multimodal_name(name):
    return name if name == "lm_head.weight" else "model.language_model." + name.removeprefix("model.")


def save_checkpoint(folder, tensors, dtype_of, shards=None):
    """tensors: name -> fp32; dtype_of(name) -> stored dtype; shards: list of name lists (None: one file)."""
    stored = {name: t.to(dtype_of(name)).contiguous() for name, t in tensors.items()}
    if shards is None:
        safetensors.torch.save_file(stored, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    assert sorted(n for shard in shards for n in shard) == sorted(stored), "shards must partition the tensors"
    weight_map = {}
    for i, names in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors.torch.save_file({n: stored[n] for n in names}, str(folder / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in names})
    total = sum(t.numel() * t.element_size() for t in stored.values())
    write_json(folder / "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def read_checkpoint(folder, dtype_of):
    """Tensors as stored on disk; checks the index and every stored dtype."""
    index = folder / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"] if index.exists() else None
    files = sorted(set(weight_map.values())) if weight_map else ["model.safetensors"]
    tensors = {}
    for fname in files:
        part = safetensors.torch.load_file(str(folder / fname))
        assert not part.keys() & tensors.keys(), f"{fname} repeats tensors"
        assert weight_map is None or all(weight_map[n] == fname for n in part), f"index disagrees with {fname}"
        tensors.update(part)
    assert weight_map is None or set(weight_map) == set(tensors), "index names tensors that no shard holds"
    for name, t in tensors.items():
        assert t.dtype == dtype_of(name), f"{name} stored as {t.dtype}, wanted {dtype_of(name)}"
    return tensors


# ----------------------------------------------------------------------------------------------------------
# Loading back with transformers and computing goldens.

def text_model(model):
    return model.model.language_model if isinstance(model, Qwen3_5ForConditionalGeneration) else model.model


def load_back(folder, cls, file_tensors, tc):
    """from_pretrained in float32 on CPU; every text tensor must equal the file's, bit for bit."""
    model, info = cls.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    model.eval()

    def info_list(key):
        value = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
        return list(value or [])

    multimodal, tied = cls is Qwen3_5ForConditionalGeneration, tc["tie_word_embeddings"]
    assert not info_list("mismatched_keys") and not info_list("error_msgs"), info
    assert all(k.startswith("mtp.") for k in info_list("unexpected_keys")), info_list("unexpected_keys")
    assert all((multimodal and k.startswith("model.visual.")) or (tied and k == "lm_head.weight")
               for k in info_list("missing_keys")), info_list("missing_keys")
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    cfg = model.config.text_config if multimodal else model.config
    for key, value in tc.items():
        if key not in ("model_type", "rope_parameters", "dtype") and hasattr(cfg, key):
            assert getattr(cfg, key) == value, f"config {key}: HF parsed {getattr(cfg, key)!r}, wrote {value!r}"
    assert cfg.rope_parameters["rope_theta"] == tc["rope_parameters"]["rope_theta"]
    text = text_model(model)
    assert text.rotary_emb.inv_freq.numel() == int(tc["head_dim"] * 0.25) // 2, "partial rotary not applied"
    for layer, kind in zip(text.layers, tc["layer_types"]):
        assert hasattr(layer, "linear_attn") == (kind == "linear_attention"), "layer_types not honoured"

    state = model.state_dict()
    for name, t in file_tensors.items():
        if name.startswith("mtp."):
            assert name not in state, name
            continue
        assert name in state and torch.equal(state[name], t.float()), f"{name} did not load exactly"
    prefix = "model.language_model." if multimodal else "model."
    for name in state:
        if name.startswith(prefix) or (name == "lm_head.weight" and not tied):
            assert name in file_tensors, f"{name} was initialised by HF, not loaded"
    same = model.lm_head.weight.data_ptr() == text.embed_tokens.weight.data_ptr()
    assert same == tied, f"lm_head tied={same}, config says {tied}"
    return model


def flat_twin(model, file_tensors):
    """A Qwen3_5ForCausalLM state_dict-loaded with the same language-model tensors, as a cross-check."""
    cfg = copy.deepcopy(model.config.text_config)
    flat = Qwen3_5ForCausalLM(cfg).eval()
    prefix = "model.language_model."
    state = {"model." + k.removeprefix(prefix): v.float() for k, v in file_tensors.items() if k.startswith(prefix)}
    if "lm_head.weight" in file_tensors:
        state["lm_head.weight"] = file_tensors["lm_head.weight"].float()
    result = flat.load_state_dict(state, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    assert set(result.missing_keys) <= ({"lm_head.weight"} if cfg.tie_word_embeddings else set()), result
    assert (flat.lm_head.weight.data_ptr() == flat.model.embed_tokens.weight.data_ptr()) == cfg.tie_word_embeddings
    assert all(p.dtype == torch.float32 for p in flat.parameters())
    return flat


class LastRowRecorder:
    """Forward hooks: last row of the embedding, of every decoder layer's output and of the final norm."""

    def __init__(self, text):
        self.rows = {}
        modules = [("embedding", text.embed_tokens), ("final_norm", text.norm)]
        modules += [(f"layer{i}", layer) for i, layer in enumerate(text.layers)]
        self.handles = [module.register_forward_hook(self._hook(name)) for name, module in modules]

    def _hook(self, name):
        def hook(module, inputs, output):
            t = output[0] if isinstance(output, tuple) else output
            self.rows[name] = t[0, -1].detach().clone()
        return hook

    def finish(self):
        for handle in self.handles:
            handle.remove()
        return self.rows


def forward_logits(model, ids, output_hidden_states=False):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False,
                    output_hidden_states=output_hidden_states)
    assert out.logits.dtype == torch.float32 and out.logits.shape[:2] == (1, len(ids)), out.logits.shape
    assert torch.isfinite(out.logits).all(), "non-finite logits"
    return out.logits[0], out.hidden_states


def entropy(logits):
    logp = torch.log_softmax(logits.double(), dim=-1)
    return float(-(logp.exp() * logp).sum())


def random_cases(seed, id_high):
    gen = torch.Generator().manual_seed(seed)
    return [{"ids": torch.randint(0, id_high, (n,), generator=gen).tolist(), "rows": rows}
            for n, rows in CASE_ROWS.items()]


def write_golden(folder, model, cases, gdn_path, record_hidden=False, twin=None, extra=None):
    vocab = model.lm_head.weight.shape[0]
    out, entropies, max_abs = [], [], 0.0
    for case in cases:
        ids, rows = case["ids"], case["rows"]
        recorder = LastRowRecorder(text_model(model)) if record_hidden else None
        logits, hf_hidden = forward_logits(model, ids, output_hidden_states=record_hidden)
        assert logits.shape == (len(ids), vocab)
        if twin is not None:
            diff = (forward_logits(twin, ids)[0] - logits).abs().max().item()
            assert diff <= 1e-4, f"multimodal vs flat Qwen3_5ForCausalLM logits differ by {diff}"
        h = entropy(logits[-1])
        assert 0.5 < h < math.log(vocab) - 0.1 and logits[-1].std() > 0.3, (
            f"degenerate next-token distribution (entropy {h:.3f}, log V {math.log(vocab):.3f}): fix init scales")
        entropies.append(h)
        max_abs = max(max_abs, logits.abs().max().item())
        entry = {"text": case["text"]} if "text" in case else {}
        entry.update({"ids": ids, "logits_last": logits[-1].tolist(), "logits_all_rows": rows,
                      "logits_rows": [logits[r].tolist() for r in rows]})
        if recorder is not None:
            hidden, n = recorder.finish(), len(text_model(model).layers)
            # HF's output_hidden_states: embedding, layers 0..n-2, then the final norm's output.
            mine = [hidden["embedding"]] + [hidden[f"layer{i}"] for i in range(n - 1)] + [hidden["final_norm"]]
            assert len(hf_hidden) == n + 1 and all(torch.equal(h[0, -1], m) for h, m in zip(hf_hidden, mine)), (
                "output_hidden_states no longer matches the decoder-layer hooks")
            entry["hidden_states"] = [hidden[f"layer{i}"].tolist() for i in range(n)]
            entry["embedding_last_row"] = hidden["embedding"].tolist()
            entry["final_norm_last_row"] = hidden["final_norm"].tolist()
        out.append(entry)
    golden = {
        "dtype": "float32",
        "source": f"transformers {transformers.__version__} torch {torch.__version__}",
        "model_class": type(model).__name__, "attn_implementation": "eager", "gdn_path": gdn_path,
        "vocab_size": vocab,
        "notes": ("Full-sequence forward per case (use_cache=False, positions 0..T-1), float32 on CPU, weights "
                  "as stored in this folder upcast exactly. logits_rows[i] is the logits row logits_all_rows[i]. "
                  "hidden_states (if present): last row of each decoder layer's output (residual stream; for the "
                  "last layer before the final norm, unlike HF's output_hidden_states[-1], which is "
                  "final_norm_last_row); embedding_last_row is output_hidden_states[0]."),
        "cases": out, **(extra or {}),
    }
    text = json.dumps(golden, allow_nan=False, ensure_ascii=False, separators=(",", ":")) + "\n"
    assert len(text.encode()) < MAX_GOLDEN_BYTES, f"golden.json would be {len(text.encode())} bytes"
    (folder / "golden.json").write_text(text, encoding="utf-8")
    return {"folder": folder, "entropies": entropies, "max_abs_logit": max_abs, "vocab": vocab}


def gdn_kernel_path():
    """Which implementation transformers bound to its GDN/conv functions; anything but the torch one is fatal."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as mq

    found = {}
    for fname in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                  "causal_conv1d_update"):
        fn = getattr(mq, fname)
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        names = code.co_freevars if code is not None else ()
        impl = next((c.cell_contents for n, c in zip(names, cells) if n == "implementation"), None)
        if impl is None:
            found[fname] = "not introspectable (fla/causal_conv1d blocked, hub kernels off)"
        elif getattr(impl, "__module__", None) == mq.__name__:
            found[fname] = "torch reference"
        else:
            raise SystemExit(f"{fname} is bound to {impl.__module__}.{impl.__qualname__}, not HF's torch reference")
    return found


# ----------------------------------------------------------------------------------------------------------
# The three fixtures.

TINY_README = """# flide-tiny-random: RANDOM WEIGHTS, NOT A TRAINED MODEL

Every weight in this checkpoint is a random number. It writes gibberish. It exists so that flide can be built,
run and tested end to end (CLI, server, tokenizer, loader) without downloading a real model.

- Made by `tools/golden/make_fixtures.py` (seed {seed}) with transformers {tv}, torch {ptv}, tokenizers {tkv}.
  Rerun that script to regenerate this folder; do not edit it by hand.
- Layout as official Qwen3.5 downloads: `config.json` for `Qwen3_5ForConditionalGeneration` (text keys in
  `text_config`, a small `vision_config`), `model.safetensors` in BF16 with `A_log` and `linear_attn.norm.weight`
  in F32, text tensors under `model.language_model.`, tied embeddings (no `lm_head.weight`), plus stray `mtp.*`
  and `model.visual.*` tensors that a text-only loader must skip.
- Sizes: hidden {hidden}, {layers} layers (3 Gated DeltaNet + 1 gated attention, repeated), intermediate {inter},
  attention {heads} heads / {kv_heads} kv heads of dim {head_dim} (rotary dim {rot}), GDN {k_heads} key heads of
  dim {k_dim} and {v_heads} value heads of dim {v_dim}, conv kernel 4, RoPE theta {theta}.
- Tokenizer: byte-level BPE with the Qwen3.5 pre-tokenizer, trained by the script on text the script generates
  ({n_bpe} tokens) followed by the 26 Qwen added tokens (ids {first_added}..{last_added}); the model's vocab is
  {vocab} rows, the rows past the tokenizer are padding, as in the real 248320-row models. Stop tokens:
  `<|endoftext|>` = {eos} (config `eos_token_id`) and `<|im_end|>` = {im_end}. The chat template in
  `tokenizer_config.json` is a minimal ChatML written for this model.
- `golden.json`: logits from HF transformers (float32, CPU) for flide's tests.
"""


def make_tiny(root, gdn_path):
    folder = root / "models" / "flide-tiny-random"
    reset_dir(folder)
    tok, ids = build_tokenizer(folder, TINY["seed"])
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    vocab = (n_tok // 64 + 1) * 64  # at least one padding row
    eos, im_end = ids["<|endoftext|>"], ids["<|im_end|>"]
    tc = text_config(TINY, vocab, eos)
    token_ids = {"image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
                 "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"]}
    write_json(folder / "config.json", multimodal_config(tc, token_ids, eos))
    write_json(folder / "generation_config.json",
               {"eos_token_id": [im_end, eos], "pad_token_id": eos, "transformers_version": transformers.__version__})
    check_tokenizer(tok, ids, folder)  # with config.json present, as a user's AutoTokenizer would see it
    cfg = AutoConfig.from_pretrained(str(folder))
    assert isinstance(cfg, Qwen3_5Config) and isinstance(cfg.text_config, Qwen3_5TextConfig), type(cfg)

    tensors = {multimodal_name(n): t for n, t in draw_weights(cfg.text_config, TINY["seed"]).items()}
    gen, H = torch.Generator().manual_seed(TINY["seed"] + 2), TINY["hidden"]
    tensors["mtp.fc.weight"] = torch.randn(H, 2 * H, generator=gen) * 0.05
    tensors["mtp.norm.weight"] = torch.randn(H, generator=gen) * 0.1
    tensors["model.visual.patch_embed.proj.weight"] = torch.randn(VISION_HIDDEN, 3, 2, 16, 16, generator=gen) * 0.02

    def dtype_of(name):
        return torch.float32 if name.endswith(("linear_attn.A_log", "linear_attn.norm.weight")) else torch.bfloat16

    save_checkpoint(folder, tensors, dtype_of)
    stored = read_checkpoint(folder, dtype_of)
    added = [ids[c] for c, _ in ADDED_TOKENS]
    (folder / "README.md").write_text(TINY_README.format(
        tv=transformers.__version__, ptv=torch.__version__,
        tkv=tokenizers.__version__, rot=int(TINY["head_dim"] * 0.25), n_bpe=n_tok - len(added),
        first_added=added[0], last_added=added[-1], vocab=vocab, eos=eos, im_end=im_end, **TINY), encoding="utf-8")

    model = load_back(folder, Qwen3_5ForConditionalGeneration, stored, tc)
    cases = random_cases(TINY["seed"] + 3, n_tok)
    chat_ids = tok.encode(CHAT_TEXT, add_special_tokens=False).ids
    cases.append({"text": CHAT_TEXT, "ids": chat_ids, "rows": [0, len(chat_ids) // 2]})
    samples = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TOKENIZER_SAMPLES]
    extra = {"tokenizer_cases": samples, "eos_token_ids": [im_end, eos]}
    result = write_golden(folder, model, cases, gdn_path, twin=flat_twin(model, stored), extra=extra)
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size < MAX_TINY_FOLDER_BYTES, f"{folder} is {size} bytes"
    return result


def make_gqa(root, gdn_path):
    folder = root / "tests" / "data" / "golden_gqa"
    reset_dir(folder)
    tc = text_config(GQA, GQA["vocab"], None)
    write_json(folder / "config.json", {"architectures": ["Qwen3_5ForCausalLM"], **tc,
                                        "transformers_version": transformers.__version__})
    cfg = AutoConfig.from_pretrained(str(folder))
    assert isinstance(cfg, Qwen3_5TextConfig), type(cfg)

    def dtype_of(name):
        return torch.bfloat16

    save_checkpoint(folder, draw_weights(cfg, GQA["seed"]), dtype_of)
    stored = read_checkpoint(folder, dtype_of)
    assert "lm_head.weight" in stored and not any(n.startswith("model.language_model.") for n in stored)
    model = load_back(folder, Qwen3_5ForCausalLM, stored, tc)
    return write_golden(folder, model, random_cases(GQA["seed"] + 3, GQA["vocab"]), gdn_path, record_hidden=True)


def make_tied_sharded(root, gdn_path):
    folder = root / "tests" / "data" / "golden_tied_sharded"
    reset_dir(folder)
    vocab = TIED["vocab"]
    tc = text_config(TIED, vocab, vocab - 7)
    token_ids = {"image_token_id": vocab - 2, "video_token_id": vocab - 1, "vision_start_token_id": vocab - 5,
                 "vision_end_token_id": vocab - 4}
    write_json(folder / "config.json", multimodal_config(tc, token_ids, vocab - 7))
    cfg = AutoConfig.from_pretrained(str(folder))
    assert isinstance(cfg, Qwen3_5Config), type(cfg)
    tensors = {multimodal_name(n): t for n, t in draw_weights(cfg.text_config, TIED["seed"]).items()}

    def layer_of(name):
        return int(name.split(".layers.")[1].split(".")[0]) if ".layers." in name else None

    def dtype_of(name):  # norms and GDN gate parameters in F32; layer i's matrices cycle BF16, F32, F16
        if name.endswith(("norm.weight", "A_log", "dt_bias")):
            return torch.float32
        layer = layer_of(name)
        return torch.bfloat16 if layer is None else (torch.bfloat16, torch.float32, torch.float16)[layer % 3]

    first = sorted(n for n in tensors if "embed_tokens" in n or (layer_of(n) is not None and layer_of(n) < 4))
    save_checkpoint(folder, tensors, dtype_of, shards=[first, sorted(set(tensors) - set(first))])
    stored = read_checkpoint(folder, dtype_of)
    assert {t.dtype for t in stored.values()} == {torch.float32, torch.bfloat16, torch.float16}
    assert "lm_head.weight" not in stored
    model = load_back(folder, Qwen3_5ForConditionalGeneration, stored, tc)
    return write_golden(folder, model, random_cases(TIED["seed"] + 3, vocab), gdn_path,
                        twin=flat_twin(model, stored))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="repository root to write into (default: this script's repository)")
    root = parser.parse_args().root.resolve()
    torch.set_num_threads(1)  # fixed reduction order, so reruns reproduce the files
    print(f"root {root}\npython {sys.version.split()[0]}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, tokenizers {tokenizers.__version__}, "
          f"safetensors {safetensors.__version__}", flush=True)
    for name in ACCEL_FOUND:
        print(f"WARNING: {name} is installed; it was blocked so the goldens use HF's torch reference path")
    kernels = gdn_kernel_path()
    for fname, path in kernels.items():
        print(f"GDN path: {fname}: {path}")
    gdn_path = "; ".join(f"{fname}: {path}" for fname, path in kernels.items())

    results = []
    for make in (make_tiny, make_gqa, make_tied_sharded):
        print(f"\n== {make.__name__}", flush=True)
        results.append(make(root, gdn_path))

    print("\nsummary")
    for r in results:
        folder = r["folder"]
        print(f"{folder.relative_to(root) if folder.is_relative_to(root) else folder}: vocab {r['vocab']}, "
              f"max |logit| {r['max_abs_logit']:.3f}, last-row entropy "
              f"{', '.join(f'{h:.2f}' for h in r['entropies'])} nats (log V = {math.log(r['vocab']):.2f})")
        for path in sorted(folder.iterdir()):
            print(f"  {path.name:40s} {path.stat().st_size:>10,d} bytes")


if __name__ == "__main__":
    main()
