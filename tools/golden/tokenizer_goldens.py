#!/usr/bin/env python3
"""Token-id goldens from HF `tokenizers` for tests/tokenizer/golden_test.cpp.

Encodes a fixed, deterministic set of >= 250 strings (many scripts, NFC-sensitive accents,
emoji sequences, numbers, code, whitespace runs, contractions, added tokens embedded in text,
random code points) with the reference implementation and records, per string, the ids of
`encode(text, add_special_tokens=False)` and HF's own `decode(ids, skip_special_tokens=False)`.

    python3 tools/golden/tokenizer_goldens.py --tokenizer PATH/tokenizer.json \
        --out tests/data/tokenizer/NAME.golden.json

NAME (the file name before .golden.json, or --name) tells the C++ test which tokenizer.json to
load: "qwen2" -> ../shared/data/tokenizers/qwen2, "flide-tiny" -> models/flide-tiny-random.
Needs Python 3.12 with `tokenizers`; nothing else outside the standard library.
"""

import argparse
import json
import random
import sys
import unicodedata
from pathlib import Path

from tokenizers import Tokenizer, __version__ as tokenizers_version

SEED = 20240601  # the case list must not change between runs: it is the test's input

FIXED = [
    # empty and whitespace-only
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r", "\r\n", "\r\n\r\n", "\n\r",
    " \n", "\t\n", "  \t  \n  ", " \r ", "\v\f", "\t\t\tx", "x\t\t\t",
    # trailing, leading and inner runs
    "hello   ", "   hello", "hello   world", "hello\tworld", "hello \n world", "a\r\nb", "a\rb",
    "line1\r\n\r\nline2\r\n", "end with newline\n", "  indented\n    more\n", "a \n\n b",
    "x  ", "x \n", "word.  \n  next",
    # Latin
    "Hello world", " Hello world", "Hello World!", "Hello, world!", "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café résumé façade coöperate", "Straße und Fußgänger", "ÆØÅ æøå Œuvre",
    "İstanbul ıi Iİ", "ǅungla ǈ ǋ", "Ça va? Très bien. À bientôt!", "Dvořák Łódź Ærøskøbing",
    "ﬁnance ﬂow ﬀ", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３",
    # Cyrillic, Greek
    "Привет, мир!", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "ПРИВЕТ мир 2024", "Ёлка ёж й", "Γειά σου Κόσμε", "ὅτι ἐν ἀρχῇ ἦν ὁ λόγος",
    "ΑΒΓ αβγ ς σ Σ",
    # CJK
    "你好，世界！", "日本語のテキスト、カタカナとひらがな。", "漢字かな交じり文です",
    "中文English混合text", "　全角スペース　", "ｶﾀｶﾅ半角", "我喜欢吃苹果。你呢？",
    # right-to-left scripts
    "مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "العربية 123 ٣٤٥", "שָׁלוֹם עוֹלָם", "עברית",
    # Indic with combining marks
    "नमस्ते दुनिया", "हिन्दी", "क्षत्रिय", "कि की कु", "संस्कृतम्", "வணக்கம் உலகம்", "বাংলা ভাষা",
    "ગુજરાતી", "ಕನ್ನಡ", "മലയാളം", "తెలుగు",
    # Korean, Thai and others
    "안녕하세요 세계", "한국어 텍스트입니다.", "\u1100\u1161\u11a8\u1102\u1165",
    "สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่าง", "ជំរាបសួរ", "ສະບາຍດີ", "မင်္ဂလာပါ",
    "გამარჯობა", "Բարեւ", "ሰላም ዓለም",
    # NFC: decomposed vs precomposed, singletons, reordering, exclusions
    "e\u0301", "\u00e9", "cafe\u0301", "caf\u00e9", "A\u030a", "\u212b", "\u2126", "\u212a",
    "o\u0308\u0304", "\u1e9b\u0323", "q\u0307\u0323", "q\u0323\u0307", "A\u0301\u0302",
    "n\u0303 \u00f1", "\u0958", "\ufb2a", "\u0344", "x\u0301", "x\u0301y", "\u0301",
    "\u0301\u0301abc", " \u0301", "a\u0300\u0316", "Z\u0351\u0352\u0357\u0358",
    "\u1100\u1161", "\uac00\u11a8", "e\u0301\u0301\u0301",
    # emoji
    "😀", "😀😃😄", "👍🏽", "👍🏿 yes", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇫🇷🇯🇵", "❤️", "1️⃣",
    "🧑🏿‍🚀", "I ❤️ Unicode 🎉!", "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji)",
    "#️⃣ *️⃣", "🫠🫡", "☺︎ ☺️",
    # numbers
    "0", "12", "123", "1234", "1234567890", "3.14159", "1,000,000", "-42", "+7", "1e-10",
    "0x1F 0b1010", "2024-06-01T12:00:00Z", "v1.2.3", "$100.50", "50%", "½ ¾ ²³",
    "Ⅻ ⅻ ① ⑳", "٠١٢٣٤٥٦٧٨٩", "०१२३", "๑๒๓", "12三4", "9" * 64,
    "31415926535897932384626433832795028841971693993751058209749445923",
    # code
    "def f(x):\n    return x * 2\n", "\tdef f():\n\t\treturn 1\n",
    "int main() {\n  printf(\"hi\\n\");\n  return 0;\n}\n",
    "for (size_t i = 0; i < n; ++i) a[i] += b[i];",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "if [ -f ~/.bashrc ]; then source ~/.bashrc; fi",
    "SELECT * FROM users WHERE id = 42;", "x = lambda a, b: a if a > b else b",
    "std::vector<std::string> v{\"a\", \"b\"};", "// comment\n/* block */",
    "    ", "\t\t", "a==b!=c<=d>=e->f=>g", "../../path/to/file.txt", "https://example.com/a?b=c&d=e#f",
    "user@example.com", "#!/usr/bin/env python3\n", "```python\nprint('hi')\n```",
    "__init__ __name__ _private", "camelCaseIdentifier snake_case_identifier SCREAMING_CASE",
    # contractions in every case, and near-misses
    "don't", "DON'T", "Don'T", "I'm", "I'M", "we'll", "WE'LL", "We'Ll", "it's", "IT'S",
    "they're", "THEY'RE", "you've", "YOU'VE", "he'd", "HE'D", "'s", "'S", "'ll", "'LL", "'t",
    "O'Neil", "rock 'n' roll", "it\u2019s", "Ma'am", "'Tis", "'sup", "''", "'", "'\u017f",
    "'\u212a",
    "I'LLAMA", "let's go", "LET'S GO",
    # odd characters
    "\x00", "a\x00b", "\x7f", "\x1c\x1d\x1e\x1f", "\u00a0", "a\u00a0b", "\u180e", "a\u180eb",
    "a \u180e b", "  \u180ex", "a  \u180eb", "\u2028", "a\u2029b", "\u200b", "a\u200db",
    "\ufeffBOM", "\u3000", "a\u3000b",
    "\u0085", "a\u0085b", "\u2000\u2001\u200a", "a\u202fb\u205fc", "\ufffd", "\U0001d518\U0001d52b",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "ẞ ß", "\U00010348", "\U0002a6d6", "\ue000",
    # long runs
    "a" * 1000, " " * 100 + "x", "\n" * 50, "ab" * 300, "!" * 200, "😀" * 50, "\u0301" * 20,
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt "
    "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation.",
]

# Embedded in text for every tokenizer; the tokenizer's own added tokens are added below.
SPECIAL_TEXTS = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>"
    "\n<|im_start|>assistant\n",
    "<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is 42.<|im_end|>\n",
    "<|endoftext|>", "text<|endoftext|>text", " <|im_start|> ", "<|im_start|><|im_end|>",
    "<|im_end|>x<|im_end|>", "<|im_start|", "<|im_start", "<|im_", "<|", "|>", "<|im_end",
    "<<|im_start|>>", "<|IM_START|>", "<|im_start|>\u0301", "e<|im_end|>\u0301",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<tool_response>ok</tool_response>", "<|vision_start|><|image_pad|><|vision_end|>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|endoftext|><|endoftext|>",
    "<|im_start|>user\n你好<|im_end|>", "<|im_start|>  spaced  <|im_end|>  ",
]

FRAGMENTS = [
    "hello", "Hello", " world", "WORLD", "the", " quick", "fox", "don't", "I'LL", "'s", "'VE",
    "Привет", " мир", "Γειά", "你好", "世界", "日本語", "カタカナ", "مرحبا", "שלום", "नमस्ते",
    "कि", "안녕", "สวัสดี", "e\u0301", "\u00e9", "A\u030a", "o\u0308", "😀", "👍🏽", "👩‍💻",
    "🇺🇸", "❤️", "0", "7", "42", "2024", "3.14", "1,000", "½", "٣", " ", "  ", "   ", "\t",
    "\n", "\n\n", "\r\n", "\r", " \n", ".", ",", "!", "?", "...", "(", ")", "{", "}", "[", "]",
    "\"", "'", "`", "-", "_", "=", "==", "->", "::", "/", "\\", "#", "@", "$", "%", "^", "&",
    "*", "+", "<", ">", "|", "~", ";", ":", "\u00a0", "\u3000", "\u200b", "\u0301", "ſ", "ß",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "<think>", "</think>",
]

# Blocks for random code points (assigned characters only, see assigned_since_3_2).
BLOCKS = [
    (0x0020, 0x007E), (0x00A0, 0x024F), (0x0250, 0x036F), (0x0370, 0x03FF), (0x0400, 0x04FF),
    (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x1100, 0x11FF),
    (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x2070, 0x22FF), (0x3000, 0x30FF), (0x4E00, 0x9FA5),
    (0xAC00, 0xD7A3), (0xFB00, 0xFFFD), (0x1D400, 0x1D7FF), (0x20000, 0x2A6D6),
]


def assigned_since_3_2(c: str) -> bool:
    """Assigned already in Unicode 3.2, so every Unicode version in play (HF's Oniguruma and NFC
    tables, PCRE2's, utf8proc's) agrees on its category and normalization."""
    return unicodedata.ucd_3_2_0.category(c) not in ("Cn", "Cs", "Co")


def random_code_points(rng: random.Random, n: int) -> str:
    out = []
    while len(out) < n:
        lo, hi = rng.choice(BLOCKS)
        c = chr(rng.randint(lo, hi))
        if assigned_since_3_2(c):
            out.append(c)
    return "".join(out)


def random_any_plane(rng: random.Random, n: int) -> str:
    """Code points from the whole range (no surrogates), assigned since Unicode 3.2."""
    out = []
    while len(out) < n:
        c = chr(rng.randint(0x20, 0x2FFFF))
        if assigned_since_3_2(c):
            out.append(c)
    return "".join(out)


def build_cases(added_tokens: list[str]) -> list[str]:
    rng = random.Random(SEED)
    cases = list(FIXED) + list(SPECIAL_TEXTS)
    for token in sorted(added_tokens)[:40]:  # the tokenizer's own added tokens, in context
        cases += [token, f"a{token}b", f" {token} ", f"\n{token}\n", token[:-1]]
    fragments = FRAGMENTS + sorted(added_tokens)[:10]
    for _ in range(120):
        cases.append("".join(rng.choice(fragments) for _ in range(rng.randint(1, 25))))
    for _ in range(60):
        cases.append(random_code_points(rng, rng.randint(1, 40)))
    for _ in range(30):
        cases.append(random_any_plane(rng, rng.randint(1, 20)))
    for _ in range(20):  # random words separated by random white space
        words = [random_code_points(rng, rng.randint(1, 8)) for _ in range(rng.randint(2, 8))]
        cases.append("".join(w + rng.choice([" ", "  ", "\n", "\t", " \n", "\r\n", ""])
                             for w in words))
    seen = set()
    unique = []
    for c in cases:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, type=Path, help="path to tokenizer.json")
    parser.add_argument("--out", required=True, type=Path, help="NAME.golden.json to write")
    parser.add_argument("--name", help="tokenizer name (default: NAME from --out)")
    args = parser.parse_args()

    name = args.name or args.out.name.removesuffix(".golden.json")
    tok = Tokenizer.from_file(str(args.tokenizer))
    added = [t.content for t in tok.get_added_tokens_decoder().values()]
    texts = build_cases(added)
    if len(texts) < 250:
        sys.exit(f"only {len(texts)} cases; the C++ test expects at least 250")

    cases = []
    not_nfc = 0
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        not_nfc += decoded != unicodedata.normalize("NFC", text)
        cases.append({"text": text, "ids": ids, "decoded": decoded})

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        header = {"tokenizer": name, "tokenizers_version": tokenizers_version}
        f.write(json.dumps(header, ensure_ascii=False)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"{args.out}: {len(cases)} cases for {name} (tokenizers {tokenizers_version}); "
          f"{not_nfc} decode to something other than NFC(text)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
