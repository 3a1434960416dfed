#!/usr/bin/env python3
"""rag_folder.py — answers questions over a folder of text files with lazyinfer's document cache.

Every *.txt / *.md file under FOLDER is a document. For each question the files are ranked by
the words they share with it (a stand-in for a real retriever), the best --top-k go into the
request, and the engine encodes each document once: a later question that retrieves the same
file is served from the cache (the "cached" figure). Questions come from the command line, or
one per line on stdin.

    python rag_folder.py FOLDER "What is the secret code?" "Who likes cheese?"
    python rag_folder.py FOLDER -m synth:tiny-llama < questions.txt

The default model is the one `make demo` fetched (models/SmolLM2-135M-Instruct.Q4_1.gguf).
"""
import argparse
import re
import sys
from pathlib import Path

from lazyinfer import Engine

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def words(text: str) -> set:
    return set(re.findall(r"\w{3,}", text.lower()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("questions", nargs="*", help="questions (default: one per line on stdin)")
    ap.add_argument("-m", "--model", default=str(DEFAULT_MODEL))
    ap.add_argument("-k", "--top-k", type=int, default=3, help="documents per question")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--budget", default="256M", help="KV pool: documents stay cached in it")
    args = ap.parse_intermixed_args()

    docs = {}
    for p in sorted(args.folder.rglob("*")):
        if p.suffix in (".txt", ".md") and p.is_file():
            text = p.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                docs[str(p.relative_to(args.folder))] = text
    if not docs:
        print(f"no .txt or .md files with text under {args.folder}", file=sys.stderr)
        return 2
    index = {name: words(text) for name, text in docs.items()}
    questions = args.questions or [q.strip() for q in sys.stdin if q.strip()]

    with Engine(args.model, budget=args.budget) as engine:
        for q in questions:
            qw = words(q)
            ranked = sorted(docs, key=lambda n: (-len(qw & index[n]), n))[:args.top_k]
            r = engine.rag(q, [(n, docs[n]) for n in ranked], max_tokens=args.max_tokens,
                           temperature=0)
            print(f"Q: {q}\nA: {r.answer.strip()}")
            print(f"   [{', '.join(ranked)}] prompt {r.prompt_tokens} tokens, {r.cached_tokens} "
                  f"cached, {r.computed_tokens} computed; docs {r.doc_hits} hit / "
                  f"{r.doc_misses} miss; TTFT {r.ttft_ms:.1f} ms", file=sys.stderr)
        s = engine.cache_stats()
        print(f"cache: {s['doc_hits']} hits, {s['doc_misses']} misses, {s['resident_docs']} "
              f"documents resident ({s['resident_bytes'] / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
