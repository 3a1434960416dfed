"""test_qwen2.py — Qwen2 through the command line and the server (README "What works"): the tiny
random Qwen2ForCausalLM checkpoints of tests/data/ref (HF directories written by
tests/ref/gen_qwen2_ref.py) and synth:tiny-qwen2.

- `serve`: a completion of the reference's token-id prompt at temperature 0 is the text of HF
  transformers' 64 greedy tokens (detokenised by the server), for both checkpoints. A forward
  that dropped the q/k/v biases, on the prefill or the decode path, writes other tokens.
- `generate`: the HF directory and synth:tiny-qwen2 run a ChatML chat prompt to its end.
- `rag`: every cache mode answers the same greedy tokens on synth:tiny-qwen2 (test-rag.c checks
  the logits; this checks the command).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
from harness import ROOT, Server, curl  # noqa: E402

BIN = os.path.abspath(os.environ.get("BIN", os.path.join(ROOT, "lazyinfer")))
TIMEOUT = 600 if "debug" in os.path.basename(BIN) else 120
REF = ROOT / "tests" / "data" / "ref"
N = 24  # greedy tokens compared: the reference's smallest top-2 margin in them is > 1e-3


def case(name):
    return json.loads((REF / f"{name}.json").read_text())


@pytest.mark.parametrize("ckpt", ["tiny-qwen2-tied", "tiny-qwen2-untied"])
def test_serve_greedy_equals_hf(ckpt):
    s = Server(str(REF / ckpt), "--ctx-size", "128")
    try:
        for T in (7, 45):
            c = case(f"{ckpt}-t{T}")
            st, b, _ = curl(s, "/v1/completions", {"prompt": c["prompt_ids"], "max_tokens": N,
                                                   "temperature": 0, "ignore_eos": True})
            assert st == 200, b
            # the completion's text leaves special tokens (ids 0, 1, 2 here) out
            st, want, _ = curl(s, "/detokenize", {"tokens": [t for t in c["greedy"][:N] if t > 2]})
            assert st == 200, want
            assert b["choices"][0]["text"] == want["content"], (T, b, want)
            assert b["usage"]["prompt_tokens"] == T and b["usage"]["completion_tokens"] == N, b
    finally:
        assert s.alive(), s.log_tail()
        assert s.stop() == 0


@pytest.mark.parametrize("model", [str(REF / "tiny-qwen2-untied"), "synth:tiny-qwen2"])
def test_generate_chat(model):
    p = subprocess.run([BIN, "generate", "-m", model, "-t", "2", "-p", "Hello there", "--chat",
                        "--temp", "0", "-n", "12", "--ignore-eos"],
                       capture_output=True, timeout=TIMEOUT)  # (random models: any bytes)
    assert p.returncode == 0, p.stderr
    assert b"generation: 12 tokens" in p.stdout + p.stderr, p.stdout + p.stderr


def test_rag_modes_agree(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({
        "documents": ["Qwen2 adds a bias to its query, key and value projections. ",
                      "The document cache keeps one copy of each document. "][::d],
        "query": "What does Qwen2 add?", "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        + "\n" for d in (1, -1)))
    out = {}
    for mode in ("lazy", "copy", "prefix", "none"):
        p = subprocess.run([BIN, "rag", "-m", "synth:tiny-qwen2", "-t", "2", "--cache", mode,
                            "--workload", str(wl)], capture_output=True, text=True,
                           timeout=TIMEOUT)
        assert p.returncode == 0, (mode, p.stderr)
        out[mode] = p.stdout
    assert len(set(out.values())) == 1 and out["none"].count("\n") == 2, out
