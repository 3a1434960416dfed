#!/usr/bin/env python3
"""gen_qwen2_tokenizer.py — writes the Qwen2-style tokenizer fixture of tests/test-tokenizer.c and
HF tokenizers' ids for it (the test's golden file), so that `make test` needs no Python.

The fixture is a small byte-level BPE trained here with HF tokenizers on a fixed corpus (digit
runs, accented Latin, Hangul, Arabic-Indic digits, so that merges exist which the pre-tokenizer
must keep from applying), then given Qwen2's pipeline exactly as Qwen2.5's tokenizer.json has it:
normalizer NFC; pre_tokenizer Sequence[Split(Qwen2 regex, Isolated), ByteLevel(add_prefix_space
false, use_regex false)]; ByteLevel decoder; special <|endoftext|>, <|im_start|>, <|im_end|>.

Strings: ones that change under NFC (e + U+0301, A + U+030A, U+212B, Hangul jamo, CJK
compatibility ideographs, reordered marks, a mark right after a special token), ones it leaves
alone (ligatures, fullwidth and superscript digits: NFKC's business), numbers ("12345", "3.14",
Arabic-Indic and Devanagari digits) and random sequences of bases and combining marks. Combining
marks assigned after Unicode 9 are left out: HF's NFC tables predate them (src/tokenizer/nfc.h).

Run once, by hand, from the repository root, with HF tokenizers installed (~1 s):
    .venv-ref/bin/python tests/ref/gen_qwen2_tokenizer.py
Writes tests/data/tokenizer/tiny-qwen2-nfc/{tokenizer.json, tokenizer_config.json, cases.json}.
"""
import json
import os
import random
import unicodedata

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

OUT = "tests/data/tokenizer/tiny-qwen2-nfc"
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus():
    rng = random.Random(7)
    words = ["café", "résumé", "naïve", "Ångström", "über", "the", "number", "is", "pi",
             "한국어", "문장", "입니다", "日本", "١٢٣", "٤٥٦", "१२३", "2024", "12345", "3.14",
             "100", "42", "0.5", "99", "deja", "vu", "déjà", "Ȧ", "ǖ", "ṩ"]
    lines = []
    for _ in range(3000):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
    return lines


def build():
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(corpus(), trainer)
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def hf_old_marks():
    """Combining marks whose NFC differs between HF tokenizers and unicodedata (see nfc.h)."""
    n = normalizers.NFC()
    out = set()
    for c in range(0x300, 0x110000):
        if 0xD800 <= c <= 0xDFFF or not unicodedata.combining(chr(c)):
            continue
        for s in ("a\u0301" + chr(c), "a" + chr(c) + "\u0316", "a" + chr(c) + "\u0327\u0301"):
            if n.normalize_str(s) != unicodedata.normalize("NFC", s):
                out.add(c)
    return out


def strings():
    fixed = [
        "e\u0301", "cafe\u0301 re\u0301sume\u0301", "A\u030Angstro\u0308m", "\u212B \u00C5",
        "\u1100\u1161\u11A8", "\u1112\u1161\u11AB\u1100\u1173\u11AF \uD55C\uAE00",
        "\u1100\u1161 \u1100 \u1161 \u11A8", "\uAC00\u11A8", "\uF900\uF901 \uFA10 \u2F800",
        "\uFB01 \uFB00 \u2460 \u00B2 \u00BD \u216B \uFF11\uFF12\uFF13", "a\u0316\u0301 a\u0301\u0316",
        "q\u0307\u0323 \u1E0B\u0323", "\u0344 \u0958 \u2126 \u0340\u0341",
        "\u00C7\u0301 C\u0327\u0301 C\u0301\u0327", "<|im_start|>\u0301x<|im_end|>",
        "e<|endoftext|>\u0301", "\u0301\u0301leading marks", "\U0001D15E \U0001D160",
        "\u0B47\u0B3E \u0CC6\u0CC2 \u0DD9\u0DCF\u0DCA",
        "12345", "3.14", "\u0661\u0662\u0663", "x12y 2024-01-02", "\u0967\u0968\u0969 \u06F1\u06F2",
        "1,000,000.50 and 0x1F", "\u0661\u0662\u0663.\u0664\u0665", "pi is 3.14159 not 22/7",
        "déjà vu 42 times", "Ångström ١٢٣ 한국어 12345",
    ]
    old = hf_old_marks()
    marks = [c for c in range(0x300, 0x1E000) if unicodedata.combining(chr(c)) and c not in old
             and unicodedata.category(chr(c)) != "Cn"]
    marks += list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3))
    bases = list("aeiouAEOUcnsyzCNSYZ") + [chr(c) for c in range(0x1100, 0x1113)] + \
        ["\u00C5", "\u212B", "\uAC00", "\uAC01", "\u0915", "\u0B47", "1", "\u0663", " ", "<|im_end|>"]
    rng = random.Random(11)
    rand = []
    for _ in range(300):
        s = "".join(rng.choice(bases) if rng.random() < 0.45 else chr(rng.choice(marks))
                    for _ in range(rng.randint(1, 10)))
        rand.append(s)
    return fixed, rand


def main():
    os.makedirs(OUT, exist_ok=True)
    tk = build()
    tk.save(os.path.join(OUT, "tokenizer.json"))
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "bos_token": None, "add_bos_token": False}, f,
                  indent=1)
    tk = Tokenizer.from_file(os.path.join(OUT, "tokenizer.json"))  # as a reader loads it
    fixed, rand = strings()
    cases = []
    for s in fixed + rand:
        ids = tk.encode(s, add_special_tokens=False).ids
        cases.append({"text": s, "ids": ids, "nfc_changes": unicodedata.normalize("NFC", s) != s})
    n_change = sum(c["nfc_changes"] for c in cases)
    doc = {"generated_by": "tests/ref/gen_qwen2_tokenizer.py",
           "tokenizers_version": tokenizers.__version__,
           "unicode_python": unicodedata.unidata_version, "cases": cases}
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(doc, f, ensure_ascii=True, indent=0)
    print("%s: %d tokens, %d cases (%d change under NFC)" % (OUT, tk.get_vocab_size(),
                                                              len(cases), n_change))


if __name__ == "__main__":
    main()
