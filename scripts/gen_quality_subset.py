#!/usr/bin/env python3
"""Makes data/musique/musique_s-30.json, the question set of `lazyinfer bench quality`.

Source: CacheBlend's inputs/musique_s.json (GitHub YaoJiayi/CacheBlend, commit 55ad026, sha256
d679da1dad32b7f3645de9db0d7a1aaa7e679eb76ed48c02c4688137e5ce6674): 150 MuSiQue questions in
CacheBlend's format, {"question", "answers": [str], "ctxs": [{"title", "text"}] x 10}.
Kept, unchanged but cut: each question's first N_CTX passages (10 passages of ~520 SmolLM2 tokens
each exceed the default 4096-token context, and 3 keep a full-attention prefill of the prompt
near 15 s on a 2-core CPU), and of those the first N_QUESTIONS questions
whose gold answer (any alias, case-insensitive) occurs in those passages, so every kept question
is answerable from its prompt. Deterministic: no randomness, file order.

    python3 scripts/gen_quality_subset.py PATH/TO/musique_s.json > data/musique/musique_s-30.json
"""
import json
import sys

N_CTX = 3
N_QUESTIONS = 30


def main():
    src = json.load(open(sys.argv[1], encoding="utf-8"))
    out = []
    for ex in src:
        ctxs = ex["ctxs"][:N_CTX]
        text = " ".join(c["text"] for c in ctxs).lower()
        if any(a.lower() in text for a in ex["answers"]):
            out.append({"question": ex["question"], "answers": ex["answers"], "ctxs": ctxs})
        if len(out) == N_QUESTIONS:
            break
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
