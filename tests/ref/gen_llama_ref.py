#!/usr/bin/env python3
"""gen_llama_ref.py — writes the HF-transformers reference files that tests/test-model-ref.c checks
lazyinfer's Llama-family forward pass against.

Run once, by hand, from the repository root, in the git-ignored reference venv (torch is never
needed by the tests themselves):

    python3 -m venv .venv-ref
    .venv-ref/bin/pip install torch transformers safetensors gguf numpy accelerate
    .venv-ref/bin/python tests/ref/gen_llama_ref.py            # all cases
    .venv-ref/bin/python tests/ref/gen_llama_ref.py --tiny-only  # without SmolLM2

Last run with: Python 3.11, torch 2.15.0 (CPU), transformers 5.24.0, tokenizers 0.23.3,
safetensors 0.8.0, gguf 0.19.0, numpy 2.4.6, accelerate 1.15.0 (needed by transformers' GGUF
loader: also `pip install accelerate`) (the versions are also written into every case file).

What it writes (tests/ref/README.md has the details):
  tests/data/ref/tiny-*/            four tiny random Llama checkpoints (HF directories, fp32
                                    safetensors, one of them sharded, each with a small byte-level
                                    BPE tokenizer.json), one RoPE scaling type each
  tests/data/ref/<case>.json        prompt, prompt ids, top-20 (id, logit) per position, 64 greedy
                                    tokens and their top-2 margins, fp32-vs-fp64 error figures
  tests/data/ref/<case>.last.f32    the full last-position logits, float32 little-endian

Everything is computed in float32 with eager attention on the CPU and is deterministic (fixed
seeds, fixed prompts). What this is not: a benchmark, or a source of truth for tokenizers other
than SmolLM2's (tests/test_tokenizer_parity.py covers those).
"""

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shutil
import sys

import numpy as np
import torch

import gguf
import safetensors
import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig,
                          LlamaForCausalLM, PreTrainedTokenizerFast)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "data", "ref")
SMOL_REL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
N_GREEDY = 64
TOPK = 20

VERSIONS = {
    "python": platform.python_version(),
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "tokenizers": tokenizers.__version__,
    "safetensors": safetensors.__version__,
    "gguf": importlib.metadata.version("gguf"),
    "numpy": np.__version__,
    "accelerate": importlib.metadata.version("accelerate"),
}


# ---- running a model ---------------------------------------------------------------------------

def greedy_generate(model, x, **kw):
    """model.generate(do_sample=False, max_new_tokens=N_GREEDY) with EOS switched off.
    transformers 5 fills generation arguments left at None from model.generation_config, so
    eos_token_id=None as an argument does not disable the stop; clearing it on the model does."""
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None
    try:
        return model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                              num_beams=1, max_new_tokens=N_GREEDY, pad_token_id=0, **kw)
    finally:
        model.generation_config.eos_token_id = saved


@torch.no_grad()
def reference(model, ids):
    """(top20 per position, last-position logits (V,) f32, greedy ids, greedy margins) in fp32."""
    x = torch.tensor([ids], dtype=torch.long)
    logits = model(input_ids=x).logits[0].float()  # (T, V)
    vals, idx = torch.topk(logits, TOPK, dim=-1)     # sorted descending
    top = [[[int(i), float(v)] for i, v in zip(ri, rv)] for ri, rv in zip(idx.tolist(), vals.tolist())]
    last = logits[-1].contiguous().numpy().astype("<f4")

    # Greedy with model.generate: no EOS so exactly N_GREEDY tokens come out and no logits
    # processor touches the scores; output_logits gives the raw logits of every step.
    out = greedy_generate(model, x, output_logits=True, return_dict_in_generate=True)
    greedy = out.sequences[0, len(ids):].tolist()
    assert len(greedy) == N_GREEDY, len(greedy)
    margins = []
    for step, lg in enumerate(out.logits):
        lg = lg[0].float()
        t2 = torch.topk(lg, 2)
        assert int(t2.indices[0]) == greedy[step] or float(t2.values[0] - t2.values[1]) == 0.0, \
            f"generate picked {greedy[step]} at step {step}, argmax is {int(t2.indices[0])}"
        margins.append(float(t2.values[0] - t2.values[1]))
    return top, last, greedy, margins


@torch.no_grad()
def fp64_check(model, ids, last32, greedy32):
    """Runs the same model in float64: how far fp32 rounding moves the logits, and whether the
    greedy tokens survive it (they should: the C test demands identical greedy tokens)."""
    model64 = model.to(torch.float64)
    x = torch.tensor([ids], dtype=torch.long)
    last64 = model64(input_ids=x).logits[0, -1].numpy()
    g64 = greedy_generate(model64, x)[0, len(ids):].tolist()
    model.to(torch.float32)
    d = last32.astype(np.float64) - last64
    rel = float(np.max(np.abs(d)) / np.max(np.abs(last64)))
    nmse = float(np.sum(d * d) / np.sum(last64 * last64))
    return rel, nmse, g64 == greedy32


def write_case(name, model_rel, prompt, ids, model, extra=None):
    top, last, greedy, margins = reference(model, ids)
    rel, nmse, g_ok = fp64_check(model, ids, last, greedy)
    logits_file = f"{name}.last.f32"
    with open(os.path.join(OUT, logits_file), "wb") as f:
        f.write(last.tobytes())
    case = {
        "model": model_rel,
        "prompt": prompt,
        "prompt_ids": [int(i) for i in ids],
        "n_vocab": int(last.shape[0]),
        "logits_file": logits_file,
        "greedy": greedy,
        "greedy_margins": [round(m, 6) for m in margins],
        "fp32_vs_fp64_max_rel": rel,
        "fp32_vs_fp64_nmse": nmse,
        "fp64_greedy_agrees": g_ok,
        "generated_by": "tests/ref/gen_llama_ref.py",
        "versions": VERSIONS,
    }
    if extra:
        case.update(extra)
    case["top20"] = top  # last: the bulky part
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        # One position per line keeps diffs readable.
        head = json.dumps({k: v for k, v in case.items() if k != "top20"}, ensure_ascii=False)
        rows = ",\n  ".join(json.dumps(r) for r in top)
        f.write(head[:-1] + ',\n "top20": [\n  ' + rows + "\n ]\n}\n")
    json.load(open(os.path.join(OUT, f"{name}.json")))  # round-trip sanity
    print(f"  {name}: T={len(ids)} V={last.shape[0]} greedy[:12]={greedy[:12]} "
          f"min margin {min(margins):.4g}  fp32-vs-fp64 rel {rel:.3g} nmse {nmse:.3g} "
          f"fp64 greedy agrees {g_ok}", flush=True)
    return case


# ---- SmolLM2 from the GGUF ---------------------------------------------------------------------

def smollm_tokenizer(gguf_dir, gguf_name):
    """transformers' GGUF tokenizer, with SmolLM2's real pre-tokenizer put back.

    transformers 5.24 maps tokenizer.ggml.pre = "smollm" to nothing (it is not in
    GGUF_PRE_TOKENIZER_SPLITS) and keeps GPT2Tokenizer's plain GPT-2 ByteLevel split, which keeps
    runs of digits together. SmolLM2's own tokenizer.json (and llama.cpp's "smollm" pre type) split
    every digit first: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
    use_regex=True)]. That is what lazyinfer implements, so the reference uses it too.
    """
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return tok


def check_qk_permutation(model, gguf_path):
    """Reports whether transformers un-permuted attn_q/attn_k, and checks numerically that
    interleaved (GPT-J) RoPE on the GGUF's permuted weights equals HF's half-split RoPE on the
    un-permuted ones, for layer 0 at a few positions."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    r = GGUFReader(gguf_path)
    t = {x.name: x for x in r.tensors}
    cfg = model.config
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    Dh = cfg.hidden_size // H
    theta = cfg.rope_parameters["rope_theta"]
    findings = {}
    for gname, hf, nh in (("blk.0.attn_q.weight", model.model.layers[0].self_attn.q_proj, H),
                          ("blk.0.attn_k.weight", model.model.layers[0].self_attn.k_proj, Hkv)):
        g = dequantize(t[gname].data, t[gname].tensor_type).reshape(-1, cfg.hidden_size)  # (out, in)
        w = hf.weight.detach().numpy()
        # llama.cpp's convert permute: (n_head, 2, Dh/2, in) -> (n_head, Dh/2, 2, in)
        unperm = g.reshape(nh, Dh // 2, 2, -1).swapaxes(1, 2).reshape(g.shape)
        findings[gname] = {
            "hf_equals_gguf_as_stored": bool(np.array_equal(w, g)),
            "hf_equals_gguf_unpermuted": bool(np.array_equal(w, unperm)),
            "max_abs_diff_unpermuted": float(np.max(np.abs(w - unperm))),
        }
        # RoPE equivalence on a random input at positions 0, 5, 37.
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, cfg.hidden_size)).astype(np.float64)
        pos = np.array([0.0, 5.0, 37.0])
        inv = theta ** (-np.arange(0, Dh, 2) / Dh)        # (Dh/2,)
        ang = pos[:, None] * inv[None, :]                  # (3, Dh/2)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        qh = (x @ w.T.astype(np.float64)).reshape(3, nh, Dh)      # HF: half-split pairs (i, i+Dh/2)
        a, b = qh[..., :Dh // 2], qh[..., Dh // 2:]
        rh = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        qg = (x @ g.T.astype(np.float64)).reshape(3, nh, Dh)      # GGUF: interleaved pairs (2i, 2i+1)
        e, o = qg[..., 0::2], qg[..., 1::2]
        rg = np.empty_like(qg)
        rg[..., 0::2], rg[..., 1::2] = e * c - o * s, o * c + e * s
        # Same vectors up to the fixed per-head permutation (2i -> i, 2i+1 -> i + Dh/2).
        rg_as_hf = np.concatenate([rg[..., 0::2], rg[..., 1::2]], axis=-1)
        findings[gname]["rope_equivalence_max_abs"] = float(np.max(np.abs(rg_as_hf - rh)))
        # Negative control: half-split RoPE applied to the GGUF rows as stored (the bug to avoid).
        a2, b2 = qg[..., :Dh // 2], qg[..., Dh // 2:]
        wrong = np.concatenate([a2 * c - b2 * s, b2 * c + a2 * s], axis=-1)
        wrong_as_hf = np.concatenate([wrong[..., 0::2], wrong[..., 1::2]], axis=-1)
        findings[gname]["wrong_layout_max_abs"] = float(np.max(np.abs(wrong_as_hf - rh)))
        findings[gname]["max_abs_value"] = float(np.max(np.abs(rh)))
    print("  Q/K permutation:", json.dumps(findings, indent=1), flush=True)
    return findings


SMOL_PROMPTS = [
    ("smollm2-capital", "text", "The capital of France is"),
    ("smollm2-chat", "chat", "What is the boiling point of water at sea level, in Celsius?"),
    ("smollm2-code", "text",
     "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"),
    ("smollm2-paragraph", "text",
     "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
     "combined movable metal type, oil-based inks and a wooden press adapted from those used to "
     "make wine. Within fifty years, printing shops had opened in more than two hundred European "
     "cities, and the price of books fell so sharply that ordinary merchants could afford them. "
     "Historians still argue about how much this changed the way people thought, but few doubt "
     "that it made the spread of new ideas faster and harder to control. Pamphlets, maps and "
     "scientific tables could now be copied exactly, thousands of times, and"),
    ("smollm2-digits-unicode", "text",
     "In 2024 the café sold 1,234 crêpes (56.7% more than in 1999). Prices: 3€ / £2.50 / ¥480. "
     "東京 → Zürich ✓ naïve São Paulo 😀 — next:"),
]


def gen_smollm2():
    path = os.path.join(REPO, SMOL_REL)
    if not os.path.exists(path):
        sys.exit(f"{path} absent: run scripts/setup.sh (or make setup) first, or pass --tiny-only")
    d, n = os.path.split(path)
    print(f"SmolLM2: loading {path} (dequantised to fp32 by transformers)", flush=True)
    tok = smollm_tokenizer(d, n)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=n, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    findings = check_qk_permutation(model, path)
    for name, kind, text in SMOL_PROMPTS:
        extra = {}
        if kind == "chat":
            prompt = tok.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
            extra["chat"] = {"system": None, "user": text}
        else:
            prompt = text
        ids = tok(prompt, add_special_tokens=True)["input_ids"]
        # The HF conversion must reproduce the text (byte-level BPE is lossless).
        assert tok.decode(ids) == prompt, (tok.decode(ids), prompt)
        case = write_case(name, SMOL_REL, prompt, ids, model, extra)
        if name == "smollm2-capital":
            g = case["greedy"]
            print(f"  first 20 greedy ids: {g[:20]}")
            print(f"  decoded: {tok.decode(g[:20])!r}")
            print(f"  all 64 decoded: {tok.decode(g)!r}", flush=True)
    return findings


# ---- tiny random checkpoints -------------------------------------------------------------------

TINY_CORPUS = (
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
    "Sphinx of black quartz, judge my vow! How vexingly quick daft zebras jump. "
    "A paged key-value cache stores the keys and values of every token in fixed-size pages, "
    "so that sequences of different lengths can share one pool of memory without fragmentation. "
    "Rotary position embeddings rotate each pair of query and key dimensions by an angle that "
    "grows linearly with the position; the dot product of a rotated query and key then depends "
    "only on the distance between them. In 1999 there were 365 days; in 2024 there were 366. "
    "def main():\n    return 0\n\nint main(void) { return 0; }\n"
)


def tiny_tokenizer(vocab_size):
    """A byte-level BPE of exactly vocab_size entries: 3 specials, 256 bytes, the rest merges
    learned from a fixed corpus (deterministic). Only there so the checkpoint is a complete HF
    directory; the tiny cases are given as token ids."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tr = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tk.train_from_iterator([TINY_CORPUS] * 4, trainer=tr)
    assert tk.get_vocab_size() == vocab_size, (tk.get_vocab_size(), vocab_size)
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", unk_token=None, pad_token="<|endoftext|>")
    fast.chat_template = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
        " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}")
    return fast


# name, hidden, heads, kv heads, head_dim, layers, ffn, vocab, tied, rope_theta, rope_scaling, shard
TINY = [
    ("tiny-mha-none", 64, 4, 4, 16, 2, 100, 320, True, 10000.0, None, None),
    ("tiny-gqa2-linear", 96, 4, 2, 24, 2, 170, 384, False, 10000.0,
     {"rope_type": "linear", "factor": 2.0}, "600KB"),
    ("tiny-gqa3-llama3", 96, 6, 2, 16, 3, 150, 448, True, 10000.0,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}, None),
    # H·Dh = 128 != hidden 96: head_dim must come from config.json, not hidden/heads.
    ("tiny-gqa4-yarn", 96, 8, 2, 16, 2, 130, 500, False, 10000.0,
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, None),
]
TINY_PROMPT_LENS = (1, 7, 45)


def classic_config(path, theta, scaling):
    """Rewrites config.json the way real Llama checkpoints spell it (top-level rope_theta,
    "rope_scaling" dict or null, "torch_dtype"), not transformers 5's "rope_parameters", since
    that is the form found on the Hub and the one lazyinfer's config parser must read."""
    p = os.path.join(path, "config.json")
    c = json.load(open(p))
    c.pop("rope_parameters", None)
    c["rope_theta"] = theta
    c["rope_scaling"] = dict(scaling) if scaling else None
    c["torch_dtype"] = "float32"
    c.pop("dtype", None)
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def classic_tokenizer_config(path):
    """tokenizer_config.json as Hub checkpoints have it (chat_template inside, a tokenizer class
    every transformers version knows) instead of transformers 5's chat_template.jinja."""
    jinja = os.path.join(path, "chat_template.jinja")
    p = os.path.join(path, "tokenizer_config.json")
    c = json.load(open(p))
    c["chat_template"] = open(jinja).read()
    os.remove(jinja)
    c["tokenizer_class"] = "PreTrainedTokenizerFast"
    c.pop("backend", None)
    c["model_max_length"] = 128
    c["add_bos_token"] = False
    with open(p, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def save_tiny(model, name, V, theta, scaling, shard=None):
    """Writes a tiny checkpoint as Hub checkpoints are laid out (OUT/name: weights, generation
    config, tokenizer, classic config files) and returns (path, the model re-read from those
    files): references come from the files as written."""
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(path, safe_serialization=True, **kw)
    model.generation_config.save_pretrained(path)
    tiny_tokenizer(V).save_pretrained(path)
    classic_config(path, theta, scaling)
    classic_tokenizer_config(path)
    tk2 = AutoTokenizer.from_pretrained(path)
    assert tk2.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    m2 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                              attn_implementation="eager").eval()
    return path, m2


def gen_tiny():
    for (name, D, H, Hkv, Dh, L, F, V, tied, theta, scaling, shard) in TINY:
        seed = sum(map(ord, name))  # fixed per checkpoint
        torch.manual_seed(seed)
        cfg = LlamaConfig(
            hidden_size=D, num_attention_heads=H, num_key_value_heads=Hkv, head_dim=Dh,
            num_hidden_layers=L, intermediate_size=F, vocab_size=V, tie_word_embeddings=tied,
            max_position_embeddings=128, rms_norm_eps=1e-5, initializer_range=0.2,
            rope_parameters=dict(scaling, rope_theta=theta) if scaling else
            {"rope_type": "default", "rope_theta": theta},
            bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="eager")
        model = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            # Random norm weights in [0.5, 1.5): a loader that skips a norm fails visibly.
            for nm, p in model.named_parameters():
                if nm.endswith("norm.weight"):
                    p.copy_(0.5 + torch.rand_like(p))
        path, m2 = save_tiny(model, name, V, theta, scaling, shard)
        assert torch.equal(m2.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)
        assert m2.model.rotary_emb.attention_scaling == model.model.rotary_emb.attention_scaling
        sd1, sd2 = model.state_dict(), m2.state_dict()
        assert all(torch.equal(sd1[k], sd2[k]) for k in sd1), "weights changed on reload"
        if shard:
            assert os.path.exists(os.path.join(path, "model.safetensors.index.json"))
            assert len([f for f in os.listdir(path) if f.startswith("model-0")]) == 2
        files = sorted(os.listdir(path))
        size = sum(os.path.getsize(os.path.join(path, f)) for f in files)
        print(f"{name}: {files} {size / 1024:.0f} KB, inv_freq {m2.model.rotary_emb.inv_freq.tolist()} "
              f"attention_scaling {m2.model.rotary_emb.attention_scaling}", flush=True)
        rng = np.random.default_rng(seed)
        for T in TINY_PROMPT_LENS:
            ids = rng.integers(3, V, size=T).tolist()  # no special ids
            write_case(f"{name}-t{T}", f"tests/data/ref/{name}", None, ids, m2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny-only", action="store_true", help="skip the SmolLM2 cases")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    print("versions:", VERSIONS, flush=True)
    gen_tiny()
    if not args.tiny_only:
        gen_smollm2()


if __name__ == "__main__":
    main()
