#!/usr/bin/env python3
"""gen_llada_ref.py — an independent reference of the LLaDA forward pass and of the SAR (semi-
autoregressive) diffusion decoding loop, and the reference files that tests/test-llada-ref.c checks
lazyinfer's C engine (src/model/arch-llada.c, src/engine/engine-dllm.c) against.

Written from the specification only (docs/ARCHITECTURE.md §2.3 and §5, and the decoding contract
that tests/ref/README-llada.md restates), never from the C code: numpy, float64 throughout, one
function per concept. The one thing copied rather than re-derived is the PRNG, which has to be bit
for bit lazyinfer's li_rng (xoshiro256** seeded by splitmix64, uniform = (u64 >> 11) * 2^-53); the
self-check compiles a tiny C program against src/core/rng.c and compares the two streams.

Run once, by hand, from the repository root (the tests themselves never need Python):

    .venv/bin/python tests/ref/gen_llada_ref.py            # model, cases, RNG self-check
    .venv/bin/python tests/ref/gen_llada_ref.py --check-rng  # only the RNG self-check

What it writes (tests/ref/README-llada.md has the details):
  tests/data/llada-ref/model/          tiny random LLaDA as an HF directory (config.json in the
                                       real LLaDA-8B format, fp32 model.safetensors with the real
                                       names, a byte-level BPE tokenizer.json with LLaDA's special
                                       tokens, tokenizer_config.json, generation_config.json)
  tests/data/llada-ref/cases/*.json    SAR cases: parameters, prompt ids, expected generated ids,
                                       NFE, per-step commits and decision margins
  tests/data/llada-ref/cases/*.f32     block-row logits of step 1 of block 1 (float32 LE, B × V),
                                       and the full-canvas logits of the single-forward cases
Deterministic: fixed seeds everywhere; rerunning rewrites identical files.
What this is not: fast, or a model of anything but the tiny checkpoint it writes.
"""

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
from safetensors.numpy import load_file, save_file

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "data", "llada-ref")
MODEL_REL = "tests/data/llada-ref/model"
MODEL_DIR = os.path.join(REPO, MODEL_REL)
CASE_DIR = os.path.join(OUT, "cases")

# ---- the tiny checkpoint ---------------------------------------------------------------------

D, L, H, HKV, DH, F = 64, 3, 4, 4, 16, 150
V = 320               # embedding_size = vocab_size: rows 306..319 have no tokenizer entry, like
                      # LLaDA-8B's padded 126464-row embedding
N_BPE = 300           # tokenizer ids 0..299: 256 bytes + 44 merges
SPECIALS = [          # (id, text) in LLaDA-8B's order: BOS < EOS < mask < headers < EOT
    (300, "<|startoftext|>"),
    (301, "<|endoftext|>"),
    (302, "<|mdm_mask|>"),
    (303, "<|start_header_id|>"),
    (304, "<|end_header_id|>"),
    (305, "<|eot_id|>"),
]
BOS, EOS, MASK, EOT = 300, 301, 302, 305
RMS_EPS = 1e-5
ROPE_THETA = 50000.0  # not the parser's default 10000, so a C side that ignored it would fail
MAX_SEQ = 128
WEIGHT_SEED = 20260311
HEAD_STD = 0.45       # LM-head init std: confidences between ~0.02 and ~0.9 (see README)
SPECIAL_HEAD_GAIN = 2.0  # EOS / EOT head rows scaled up so that they win some rows and the
                         # logits_eos_inf / confidence_eos_eot_inf / early_stop cases matter

TINY_CORPUS = (
    "Diffusion language models start from a canvas of masks and unmask it step by step. "
    "Each step predicts every masked token at once and keeps the most confident ones. "
    "Semi-autoregressive decoding splits the answer into blocks decoded left to right. "
) * 4


def llada_config():
    """config.json in the form of GSAI-ML/LLaDA-8B-Instruct's (same keys), tiny sizes. mlp_ratio 4
    would give 256: mlp_hidden_size (150) must win, as it does in LLaDA's modelling code."""
    return {
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModel": "modeling_llada.LLaDAModelLM",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        },
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": D,
        "embedding_dropout": 0.0,
        "embedding_size": V,
        "eos_token_id": EOS,
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_cutoff_factor": None,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": MASK,
        "max_sequence_length": MAX_SEQ,
        "mlp_hidden_size": F,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": H,
        "n_kv_heads": HKV,
        "n_layers": L,
        "pad_token_id": EOS,
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": RMS_EPS,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": ROPE_THETA,
        "scale_logits": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": V,
        "weight_tying": False,
    }


def make_weights():
    """Random fp32 weights with the safetensors names of ARCHITECTURE.md §2.3. Linear weights are
    W (out, in) as in HF (y = x @ W^T)."""
    rng = np.random.default_rng(WEIGHT_SEED)

    def lin(out, inp, std):
        return (rng.standard_normal((out, inp)) * std).astype(np.float32)

    def norm_w(n):
        return rng.uniform(0.5, 1.5, n).astype(np.float32)

    p = "model.transformer."
    # std 0.02 as LLaDA's init_std: mean(x^2) ~ 4e-4, so rms_norm_eps (1e-5) visibly matters
    w = {p + "wte.weight": (rng.standard_normal((V, D)) * 0.02).astype(np.float32)}
    for i in range(L):
        b = f"{p}blocks.{i}."
        w[b + "attn_norm.weight"] = norm_w(D)
        w[b + "ff_norm.weight"] = norm_w(D)
        w[b + "q_proj.weight"] = lin(H * DH, D, 0.2)
        w[b + "k_proj.weight"] = lin(HKV * DH, D, 0.2)
        w[b + "v_proj.weight"] = lin(HKV * DH, D, 0.2)
        w[b + "attn_out.weight"] = lin(D, H * DH, 0.1)
        w[b + "ff_proj.weight"] = lin(F, D, 0.15)   # gate
        w[b + "up_proj.weight"] = lin(F, D, 0.15)   # up
        w[b + "ff_out.weight"] = lin(D, F, 0.1)     # down
    w[p + "ln_f.weight"] = norm_w(D)
    head = lin(V, D, HEAD_STD)
    head[EOS] *= SPECIAL_HEAD_GAIN
    head[EOT] *= SPECIAL_HEAD_GAIN
    w[p + "ff_out.weight"] = head
    return w


def make_tokenizer(path):
    """tokenizer.json: byte-level BPE, ids 0..299 (256 bytes + merges of a fixed corpus), then
    LLaDA's six special tokens at 300..305. Only there so the directory is a complete model whose
    special ids the engine can look up by name; the cases are given as token ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=N_BPE, min_frequency=1, special_tokens=[],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tk.train_from_iterator([TINY_CORPUS], trainer=tr)
    assert tk.get_vocab_size() == N_BPE, tk.get_vocab_size()
    tk.add_special_tokens([t for _, t in SPECIALS])
    for i, t in SPECIALS:
        assert tk.token_to_id(t) == i, (t, tk.token_to_id(t), i)
    tk.save(os.path.join(path, "tokenizer.json"))
    chat = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
            "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
            " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
            "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
            "{% endif %}")
    cfg = {
        "add_bos_token": False,
        "bos_token": "<|startoftext|>",
        "chat_template": chat,
        "eos_token": "<|endoftext|>",
        "model_max_length": MAX_SEQ,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    write_json(os.path.join(path, "tokenizer_config.json"), cfg)


def write_model():
    if os.path.isdir(MODEL_DIR):
        shutil.rmtree(MODEL_DIR)
    os.makedirs(MODEL_DIR)
    write_json(os.path.join(MODEL_DIR, "config.json"), llada_config())
    write_json(os.path.join(MODEL_DIR, "generation_config.json"),
               {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": EOS})
    save_file(make_weights(), os.path.join(MODEL_DIR, "model.safetensors"),
              metadata={"format": "pt"})
    make_tokenizer(MODEL_DIR)


def finite_or_null(o):
    """JSON has no infinities: a margin of +inf (no decision taken) is written as null."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: finite_or_null(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite_or_null(v) for v in o]
    return o


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(finite_or_null(obj), f, indent=1, sort_keys=False, allow_nan=False)
        f.write("\n")


# ---- the RNG: lazyinfer's li_rng, bit for bit -------------------------------------------------

M64 = (1 << 64) - 1


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng:
    """xoshiro256** (Blackman & Vigna) whose 4-word state is filled by splitmix64 from the seed;
    uniform() = (u64 >> 11) * 2^-53, exact in float64. Python ints masked to 64 bits."""

    def __init__(self, seed):
        x = seed & M64
        s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            s.append(z ^ (z >> 31))
        self.s = s

    def u64(self):
        s0, s1, s2, s3 = self.s
        result = (_rotl((s1 * 5) & M64, 7) * 9) & M64
        t = (s1 << 17) & M64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = _rotl(s3, 45)
        self.s = [s0, s1, s2, s3]
        return result

    def uniform(self):
        return (self.u64() >> 11) * (2.0 ** -53)

    def uniforms(self, n):
        return np.array([self.uniform() for _ in range(n)], dtype=np.float64)


RNG_CHECK_C = r"""
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/core.h"
/* argv: seed n. Prints n lines "u64 uniform(%a)" alternating draws: even lines u64, odd uniform. */
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    li_rng r;
    li_rng_seed(&r, strtoull(argv[1], NULL, 0));
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) printf("%" PRIu64 "\n", li_rng_u64(&r));
        else printf("%a\n", li_rng_uniform(&r));
    }
    return 0;
}
"""

RNG_CHECK_SEEDS = [0, 1, 42, 7919, 0xFFFFFFFFFFFFFFFF, 0x123456789ABCDEF0, 20260311]


def check_rng(n=20000):
    """Compiles RNG_CHECK_C against src/core/rng.c and compares n draws for several seeds with
    Rng. Returns a summary dict; raises on the first difference."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "rngcheck.c")
        exe = os.path.join(tmp, "rngcheck")
        with open(src, "w") as f:
            f.write(RNG_CHECK_C)
        subprocess.run(["gcc", "-std=c11", "-O2", "-D_DEFAULT_SOURCE",
                        "-D_POSIX_C_SOURCE=200809L", "-I" + os.path.join(REPO, "include"),
                        "-I" + os.path.join(REPO, "src"), src,
                        os.path.join(REPO, "src", "core", "rng.c"), "-o", exe, "-lm"],
                       check=True)
        for seed in RNG_CHECK_SEEDS:
            out = subprocess.run([exe, str(seed), str(n)], check=True, capture_output=True,
                                 text=True).stdout.split()
            r = Rng(seed)
            for i, line in enumerate(out):
                if i % 2 == 0:
                    mine, theirs = r.u64(), int(line)
                else:
                    mine, theirs = r.uniform(), float.fromhex(line)
                if mine != theirs:
                    raise SystemExit(f"RNG mismatch: seed {seed} draw {i}: python {mine!r} "
                                     f"C {theirs!r}")
    summary = {"seeds": RNG_CHECK_SEEDS, "draws_per_seed": n, "equal": True}
    print(f"rng self-check: {len(RNG_CHECK_SEEDS)} seeds x {n} draws (u64 and uniform "
          f"alternating): identical to src/core/rng.c")
    return summary


# ---- the forward: LLaDA, float64 ---------------------------------------------------------------

class Model:
    """The weights of the HF directory, read back from model.safetensors and widened to float64."""

    def __init__(self, path):
        cfg = json.load(open(os.path.join(path, "config.json")))
        self.D, self.L = cfg["d_model"], cfg["n_layers"]
        self.H, self.Hkv = cfg["n_heads"], cfg["n_kv_heads"]
        self.Dh = self.D // self.H
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg["rope_theta"]
        t = load_file(os.path.join(path, "model.safetensors"))
        g = lambda n: t["model.transformer." + n].astype(np.float64)
        self.wte = g("wte.weight")              # (V, D)
        self.ln_f = g("ln_f.weight")            # (D,)
        self.head = g("ff_out.weight")          # (V, D)
        self.V = self.wte.shape[0]
        self.blocks = []
        for i in range(self.L):
            b = lambda n: g(f"blocks.{i}.{n}.weight")
            self.blocks.append({k: b(k) for k in ("attn_norm", "ff_norm", "q_proj", "k_proj",
                                                  "v_proj", "attn_out", "ff_proj", "up_proj",
                                                  "ff_out")})

    def cast(self, dtype):
        """A copy in another dtype (float32 to estimate the fp32 rounding the C side has)."""
        m = object.__new__(Model)
        m.__dict__.update(self.__dict__)
        m.wte, m.ln_f, m.head = (a.astype(dtype) for a in (self.wte, self.ln_f, self.head))
        m.blocks = [{k: v.astype(dtype) for k, v in b.items()} for b in self.blocks]
        return m


def rmsnorm(x, w, eps):
    # x (T, D): x / sqrt(mean(x^2) + eps) * w
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta, interleaved=False):
    """x (T, heads, Dh) rotated NeoX style: pairs (i, i + Dh/2), angle pos * theta^(-2i/Dh).
    interleaved: GPT-J pairs (2i, 2i+1) instead, only for the sensitivity figures (a wrong
    layout must be caught by the C test)."""
    dh = x.shape[-1]
    if interleaved:
        perm = np.concatenate([np.arange(0, dh, 2), np.arange(1, dh, 2)])
        inv = np.argsort(perm)
        return rope(x[..., perm], pos, theta)[..., inv]
    half = dh // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / dh)        # (Dh/2,)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]       # (T, Dh/2)
    c = np.cos(ang)[:, None, :].astype(x.dtype)
    s = np.sin(ang)[:, None, :].astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)   # HF: x*cos + rot(x)*sin


def forward(m, tokens, pos, causal=False, interleaved=False):
    """Logits (T, V) of one bidirectional pass over a canvas: tokens (T,) ids, pos (T,) RoPE
    positions (not necessarily contiguous: DPad keeps original positions). No mask at all.
    causal / interleaved: deliberate mistakes, only for the sensitivity figures."""
    T = len(tokens)
    x = m.wte[np.asarray(tokens)]                                         # (T, D), no scaling
    for b in m.blocks:
        h = rmsnorm(x, b["attn_norm"], m.eps)
        q = (h @ b["q_proj"].T).reshape(T, m.H, m.Dh)
        k = (h @ b["k_proj"].T).reshape(T, m.Hkv, m.Dh)
        v = (h @ b["v_proj"].T).reshape(T, m.Hkv, m.Dh)
        q, k = rope(q, pos, m.theta, interleaved), rope(k, pos, m.theta, interleaved)
        rep = m.H // m.Hkv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(m.Dh)             # (H, T, T)
        if causal:
            s = s + np.triu(np.full((T, T), -np.inf), 1)
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, v).reshape(T, m.H * m.Dh)
        x = x + o @ b["attn_out"].T
        h = rmsnorm(x, b["ff_norm"], m.eps)
        g = h @ b["ff_proj"].T
        u = h @ b["up_proj"].T
        x = x + ((g / (1.0 + np.exp(-g))) * u) @ b["ff_out"].T            # down(silu(gate) * up)
    return rmsnorm(x, m.ln_f, m.eps) @ m.head.T


# ---- the SAR loop ------------------------------------------------------------------------------

def dpad_probs(window, k_sigma, scale):
    x = np.linspace(0.0, k_sigma, window)
    return scale * np.exp(-x * x / 2.0) / math.sqrt(2.0 * math.pi)


def argmax_first(a):
    """Index of the largest entry, lowest index on ties (np.argmax does exactly that)."""
    return int(np.argmax(a))


def top2_margin(a):
    """(best - second best) over finite entries, inf when fewer than two."""
    f = a[np.isfinite(a)]
    if f.size < 2:
        return math.inf
    t = np.partition(f, -2)[-2:]
    return float(t[1] - t[0])


def sar_generate(m, prompt, p):
    """The SAR decoding contract (README-llada.md). p: the case parameters. Returns the final
    canvas, NFE, steps, the per-step trace (commits and decision margins) and the step-1 logits."""
    gen, B, steps = p["gen_length"], p["block_length"], p["steps"]
    T = p["temperature"]
    cfg = p["cfg_scale"]
    thr, fac = p["threshold"], p["factor"]
    dp = p["dpad"]
    assert gen % B == 0
    nb = gen // B
    assert steps % nb == 0
    S = steps // nb
    rng = Rng(p["seed"])
    P = len(prompt)
    N = P + gen
    x = np.array(list(prompt) + [MASK] * gen, dtype=np.int64)
    nfe = 0
    n_steps = 0
    trace = []
    first = None
    dprob = dpad_probs(dp["window"], dp["k_sigma"], dp["scale"]) if dp else None
    stopped_early = False
    for b in range(nb):
        lo, hi = P + b * B, P + (b + 1) * B
        dpad_info = None
        if dp:
            u = rng.uniforms(dp["window"])                 # d = 0..window-1, always all drawn
            kept = [r for r in range(hi, N) if r - hi < dp["window"] and u[r - hi] < dprob[r - hi]]
            rows = np.array(list(range(hi)) + kept, dtype=np.int64)
            ds = range(min(dp["window"], N - hi))  # the draws that decided a row
            dpad_info = {"block_end": hi, "kept": [int(r) for r in kept],
                         "dropped": [r for r in range(hi, N) if r not in kept],
                         "margin": min([abs(u[d] - dprob[d]) for d in ds], default=math.inf)}
        else:
            rows = np.arange(N)
        n = int(np.sum(x[lo:hi] == MASK))
        i = 0
        while True:
            if thr is None and fac is None:
                if i >= S:
                    break
                k = n // S + (1 if i < n % S else 0)
            else:
                if not np.any(x[lo:hi] == MASK):
                    break
                k = None
            toks = x[rows]
            logits = forward(m, toks, rows)[lo:hi]          # block rows: canvas rows lo..hi-1
            nfe += 1
            cond = logits.copy()
            un = None
            if cfg > 0:
                ut = toks.copy()
                ut[:P] = MASK                                # every prompt row (all kept)
                un = forward(m, ut, rows)[lo:hi]
                nfe += 1
                logits = un + (cfg + 1.0) * (logits - un)
            if first is None:
                first = (cond, un)
            if p["logits_eos_inf"]:
                logits[:, EOS] = -np.inf
            if T == 0:
                score = logits
            else:
                u = rng.uniforms(B * m.V).reshape(B, m.V)    # row-major: row, then vocab id
                with np.errstate(divide="ignore", over="ignore"):
                    score = np.exp(logits) / (-np.log(u)) ** T
            x0 = np.array([argmax_first(score[r]) for r in range(B)], dtype=np.int64)
            # x0 decision margins in a scale where fp32 logit error is additive: the logits, or
            # for T > 0 the log of the Gumbel score, l - T log(-log u).
            with np.errstate(divide="ignore"):
                lscore = logits if T == 0 else logits - T * np.log(-np.log(u))
            x0_margin = np.array([top2_margin(lscore[r]) /
                                  max(1.0, float(np.max(np.abs(lscore[r][np.isfinite(lscore[r])]))))
                                  for r in range(B)])
            if p["confidence_eos_eot_inf"]:
                # generate.py: logits_with_noise[:, :, EOS] = logits[:, :, EOT] = -inf; at T = 0
                # logits_with_noise is the logits array itself, so EOS leaves the softmax too
                logits[:, EOT] = -np.inf
                if T == 0:
                    logits[:, EOS] = -np.inf
            masked = x[lo:hi] == MASK
            if p["remasking"] == "low_confidence":
                z = logits - np.max(logits, axis=1, keepdims=True)
                e = np.exp(z)
                prob = e / e.sum(axis=1, keepdims=True)
                conf = prob[np.arange(B), x0]
            else:
                conf = rng.uniforms(B)
            conf = np.where(masked, conf, -np.inf)
            cand = [r for r in range(B) if masked[r]]
            order = sorted(cand, key=lambda r: (-conf[r], r))   # ties: lowest row first
            cs = [float(conf[r]) for r in order]
            gaps = []  # relative gaps of the comparisons that decided this step's commit set
            if k is not None:
                sel = order[:k]
                if 0 < k < len(order):
                    # A cut between two exact zeros (EOS / EOT rows under
                    # confidence_eos_eot_inf) gives gap 0: torch.topk's choice among equal
                    # values is not modelled here, so such a trial is rejected (the engine's rule
                    # is checked against torch by tests/ref/gen_llada_generate_ref.py).
                    gaps.append((cs[k - 1] - cs[k]) / max(cs[k - 1], 1e-300))
            elif thr is not None:
                sel = order[:1] + [r for r in order[1:] if conf[r] >= thr]
                for c in cs[1:]:
                    gaps.append(abs(c - thr) / thr)
                if len(cs) > 1 and cs[1] < thr:
                    gaps.append((cs[0] - cs[1]) / max(cs[0], 1e-300))
            else:
                # Fast-dLLM get_transfer_index_dynamic: the first rank j >= 1 with
                # c_j < 1 - f / (j + 2) ends the prefix, except that a failure at the last rank
                # alone takes every candidate (its `top_i == len(threshs) - 1` bump)
                nn = 1
                while nn < len(cs) and cs[nn] >= 1.0 - fac / (nn + 2):
                    nn += 1
                if nn == len(cs) - 1:
                    nn = len(cs)
                sel = order[:nn]
                for j in range(min(nn + 1, len(cs))):
                    bound = 1.0 - fac / (j + 2)
                    if bound > 0:
                        gaps.append(abs(cs[j] - bound) / max(cs[j], bound))
                if nn < len(cs):
                    gaps.append((cs[nn - 1] - cs[nn]) / max(cs[nn - 1], 1e-300))
            conf_exact = p["remasking"] == "random"
            if conf_exact:
                gaps = []  # the confidences are the RNG's uniforms: exact on both sides
            # x0 matters for the rows committed; with T > 0 also for every candidate, whose
            # confidence p(x0) would jump if a near-tied Gumbel winner flipped.
            x0_rows = sel if T == 0 else cand
            trace.append({
                "block": b, "step": i, "nfe": nfe, "canvas_rows": int(len(rows)), "k": k,
                "committed": [[int(lo + r), int(x0[r]), float(conf[r])] for r in sorted(sel)],
                "x0_margin": float(min([x0_margin[r] for r in x0_rows], default=math.inf)),
                "conf_margin": float(min(gaps, default=math.inf)),
                "conf_exact": conf_exact,
                "top_conf": cs[:4],
            })
            if dpad_info is not None and i == 0:
                trace[-1]["dpad"] = dpad_info
            for r in sel:
                x[lo + r] = x0[r]
            i += 1
            n_steps += 1
        if p["early_stop"] and np.any(x[lo:hi] == EOS):
            x[hi:] = EOS
            stopped_early = b < nb - 1
            break
    return {"canvas": x, "nfe": nfe, "steps": n_steps, "trace": trace, "first": first,
            "stopped_early": stopped_early}


# ---- cases -------------------------------------------------------------------------------------

BASE = {"remasking": "low_confidence", "temperature": 0.0, "cfg_scale": 0.0,
        "logits_eos_inf": False, "confidence_eos_eot_inf": False, "threshold": None,
        "factor": None, "dpad": None, "early_stop": False, "seed": 0}
DPAD = {"window": 8, "k_sigma": 4.0, "scale": 2.0}

# name, prompt length, overrides, what must hold for the case to be worth keeping
CASES = [
    ("vanilla-s1", 8, dict(gen_length=16, block_length=8, steps=2), "plain"),
    ("vanilla-s2", 12, dict(gen_length=16, block_length=8, steps=4), "plain"),
    ("vanilla-s4", 5, dict(gen_length=32, block_length=16, steps=8), "plain"),
    ("vanilla-b4-s4", 20, dict(gen_length=16, block_length=4, steps=16), "plain"),
    ("vanilla-s3-uneven", 9, dict(gen_length=24, block_length=8, steps=9), "plain"),
    ("vanilla-b4-s8-idle", 11, dict(gen_length=16, block_length=4, steps=32), "plain"),
    ("earlystop-s2", 12, dict(gen_length=32, block_length=8, steps=8, early_stop=True),
     "early_stop"),
    ("random-s2", 10, dict(gen_length=16, block_length=8, steps=4, remasking="random",
                           seed=11), "plain"),
    ("temp07-s4", 7, dict(gen_length=16, block_length=8, steps=8, temperature=0.7, seed=5),
     "plain"),
    ("temp07-random-s2", 14, dict(gen_length=24, block_length=12, steps=4, temperature=0.7,
                                  remasking="random", seed=77), "plain"),
    ("cfg15-s2", 11, dict(gen_length=16, block_length=8, steps=4, cfg_scale=1.5), "plain"),
    ("cfg15-temp07-s4", 6, dict(gen_length=16, block_length=4, steps=16, cfg_scale=1.5,
                                temperature=0.7, seed=3), "plain"),
    ("eosinf-s2", 9, dict(gen_length=16, block_length=8, steps=4, logits_eos_inf=True),
     "eos_matters"),
    ("eoteos-conf-s4", 8, dict(gen_length=16, block_length=8, steps=8,
                               confidence_eos_eot_inf=True), "eot_matters"),
    ("eos-both-temp07-s2", 13, dict(gen_length=16, block_length=8, steps=4,
                                    logits_eos_inf=True, confidence_eos_eot_inf=True,
                                    temperature=0.7, seed=21), "eos_matters"),
    ("threshold-0.2", 10, dict(gen_length=32, block_length=8, steps=32, threshold=0.2),
     "parallel"),
    ("threshold-0.5-random", 7, dict(gen_length=16, block_length=16, steps=16, threshold=0.5,
                                     remasking="random", seed=8), "parallel"),
    ("threshold-0.9-cfg", 12, dict(gen_length=16, block_length=8, steps=16, threshold=0.9,
                                   cfg_scale=1.5), "parallel"),
    ("threshold-0.9", 18, dict(gen_length=24, block_length=12, steps=24, threshold=0.9),
     "parallel"),
    ("factor-1.0", 9, dict(gen_length=32, block_length=16, steps=32, factor=1.0), "parallel"),
    ("factor-1.5-random", 13, dict(gen_length=16, block_length=8, steps=16, factor=1.5,
                                   remasking="random", seed=17), "parallel"),
    ("factor-2.5-temp07", 15, dict(gen_length=16, block_length=8, steps=16, factor=2.5,
                                   temperature=0.7, seed=99), "parallel"),
    ("dpad-s2", 6, dict(gen_length=32, block_length=8, steps=8, dpad=DPAD, seed=4), "dpad"),
    ("dpad-default-s2", 9, dict(gen_length=32, block_length=16, steps=4, seed=6,
                                dpad={"window": 256, "k_sigma": 4.0, "scale": 2.0}), "dpad"),
    ("dpad-threshold-0.2", 10, dict(gen_length=32, block_length=8, steps=32, threshold=0.2,
                                    dpad=DPAD, seed=12), "dpad"),
    ("dpad-cfg-temp07-s2", 8, dict(gen_length=24, block_length=8, steps=6, dpad=DPAD,
                                   cfg_scale=1.5, temperature=0.7, seed=31), "dpad"),
    ("dpad-earlystop-s2", 7, dict(gen_length=32, block_length=8, steps=8, dpad=DPAD,
                                  early_stop=True, seed=2), "early_stop"),
    ("earlystop-factor", 16, dict(gen_length=32, block_length=8, steps=32, factor=1.0,
                                  early_stop=True, temperature=0.7, seed=40), "early_stop"),
]

MARGIN_MIN = 1e-4  # relative; fp32 vs fp64 differences here are ~1e-6 (see README-llada.md)
MAX_TRIALS = 400


def make_prompt(length, trial, name):
    r = np.random.default_rng([sum(name.encode()), length, trial])
    return [BOS] + [int(t) for t in r.integers(0, N_BPE, length - 1)]


def min_margins(res):
    x0 = min([t["x0_margin"] for t in res["trace"]], default=math.inf)
    cm = min([t["conf_margin"] for t in res["trace"]], default=math.inf)
    dpm = min([t["dpad"]["margin"] for t in res["trace"] if "dpad" in t], default=math.inf)
    return x0, cm, dpm


def interesting(kind, m, prompt, p, res):
    """The property that makes a case test what its name says (else another trial is taken)."""
    gen = res["canvas"][len(prompt):]
    if np.any(gen == MASK) or any(c[1] == MASK for t in res["trace"] for c in t["committed"]):
        return False  # committing <|mdm_mask|> itself: the contract is silent, keep clear of it
    if kind == "plain":
        return True
    if kind in ("eos_matters", "eot_matters"):
        q = dict(p)
        if kind == "eos_matters":
            q["logits_eos_inf"] = False
        else:
            q["confidence_eos_eot_inf"] = False
        other = sar_generate(m, prompt, q)["canvas"][len(prompt):]
        return not np.array_equal(other, gen)
    if kind == "parallel":
        return any(len(t["committed"]) > 1 for t in res["trace"]) and \
            any(len(t["committed"]) == 1 for t in res["trace"])
    if kind == "dpad":
        d = [t["dpad"] for t in res["trace"] if "dpad" in t]
        w = p["dpad"]["window"]
        return any(x["kept"] for x in d) and \
            any(r - x["block_end"] < w for x in d for r in x["dropped"])
    if kind == "early_stop":
        return res["stopped_early"]
    raise ValueError(kind)


def to_f32_file(path, a):
    np.ascontiguousarray(a, dtype="<f4").tofile(path)


def case_record(name, prompt, p, res, trials):
    P = len(prompt)
    B = p["block_length"]
    cond, un = res["first"]
    logit_file = f"{name}.step1.f32"
    to_f32_file(os.path.join(CASE_DIR, logit_file), cond)
    rec = {
        "name": name,
        "model": MODEL_REL,
        "ids": {"mask": MASK, "eos": EOS, "eot": EOT, "bos": BOS},
        "params": p,
        "prompt_ids": [int(t) for t in prompt],
        "expected": {
            "generated": [int(t) for t in res["canvas"][P:]],
            "nfe": res["nfe"],
            "steps": res["steps"],
            "stopped_early": res["stopped_early"],
        },
        "step1": {
            "rows": [P, P + B],
            "n_vocab": V,
            "logits_file": logit_file,
            "what": "model logits (float32 LE, B x V) of block 1's rows at step 1 (conditional "
                    "pass, before CFG / EOS / EOT handling)",
        },
        "min_margins": dict(zip(("x0", "confidence", "dpad"), min_margins(res))),
        "trials": trials,
        "trace": res["trace"],
    }
    if un is not None:
        f = f"{name}.step1-uncond.f32"
        to_f32_file(os.path.join(CASE_DIR, f), un)
        rec["step1"]["uncond_logits_file"] = f
    return rec


def sensitivity(m, tokens, pos, ref):
    """How far plausible implementation mistakes move these logits (max|a-b| / max|b|): what the
    C test's tolerance must stay far below."""
    def rel(lg):
        return float(np.max(np.abs(lg - ref)) / np.max(np.abs(ref)))

    def variant(**kw):
        v = object.__new__(Model)
        v.__dict__.update(m.__dict__)
        v.__dict__.update(kw)
        return v

    swapped = [dict(b, ff_proj=b["up_proj"], up_proj=b["ff_proj"]) for b in m.blocks]
    return {
        "rope_theta_10000": rel(forward(variant(theta=10000.0), tokens, pos)),
        "rms_eps_1e-6": rel(forward(variant(eps=1e-6), tokens, pos)),
        "causal_mask": rel(forward(m, tokens, pos, causal=True)),
        "rope_interleaved": rel(forward(m, tokens, pos, interleaved=True)),
        "gate_up_swapped": rel(forward(variant(blocks=swapped), tokens, pos)),
        "positions_contiguous": rel(forward(m, tokens, np.arange(len(tokens)))),
    }


def forward_case(m, m32, name, tokens, pos, block):
    """A single forward over a given canvas: full logits (T x V) as the reference, and the same
    pass in float32 numpy for the size of the fp32 rounding a C implementation has."""
    lg = forward(m, tokens, pos)
    lg32 = forward(m32, np.asarray(tokens), np.asarray(pos)).astype(np.float64)
    f = f"{name}.logits.f32"
    to_f32_file(os.path.join(CASE_DIR, f), lg)
    rel = float(np.max(np.abs(lg32 - lg)) / np.max(np.abs(lg)))
    rec = {
        "name": name,
        "kind": "forward",
        "model": MODEL_REL,
        "ids": {"mask": MASK, "eos": EOS, "eot": EOT, "bos": BOS},
        "tokens": [int(t) for t in tokens],
        "pos": [int(t) for t in pos],
        "block": block,
        "n_vocab": V,
        "logits_file": f,
        "what": "model logits (float32 LE, T x V) of every canvas row",
        "argmax": [int(np.argmax(r)) for r in lg],
        "fp32_numpy_vs_fp64_max_rel": rel,
        "sensitivity_max_rel": sensitivity(m, tokens, pos, lg),
    }
    write_json(os.path.join(CASE_DIR, name + ".json"), rec)
    sens = ", ".join(f"{k} {v:.2g}" for k, v in rec["sensitivity_max_rel"].items())
    print(f"  {name}: T {len(tokens)}, fp32-numpy vs fp64 max rel {rel:.2e}; mistakes: {sens}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-rng", action="store_true", help="only the RNG self-check")
    ap.add_argument("--only", default=None, help="only cases whose name contains this")
    args = ap.parse_args()
    rng_summary = check_rng()
    if args.check_rng:
        return
    write_model()
    m = Model(MODEL_DIR)
    m32 = m.cast(np.float32)
    if not args.only and os.path.isdir(CASE_DIR):
        shutil.rmtree(CASE_DIR)
    os.makedirs(CASE_DIR, exist_ok=True)

    # Single-forward cases: a prompt + a half-committed block + masks; and a DPad-style layout
    # whose kept suffix rows keep their original (non-contiguous) positions.
    r = np.random.default_rng(5)
    toks = [BOS] + list(r.integers(0, N_BPE, 11)) + list(r.integers(0, V, 5)) + [MASK] * 19
    forward_case(m, m32, "forward-contiguous", toks, list(range(len(toks))), [12, 28])
    toks = [BOS] + list(r.integers(0, N_BPE, 9)) + list(r.integers(0, V, 8)) + [MASK] * 8 + \
        [MASK] * 4
    pos = list(range(26)) + [26, 27, 29, 33]
    forward_case(m, m32, "forward-dpad-gaps", toks, pos, [18, 26])

    for name, plen, over, kind in CASES:
        if args.only and args.only not in name:
            continue
        p = dict(BASE)
        p.update(over)
        base_seed = p["seed"]
        for trial in range(MAX_TRIALS):
            prompt = make_prompt(plen, trial, name)
            p["seed"] = base_seed + trial
            res = sar_generate(m, prompt, p)
            x0m, cm, dpm = min_margins(res)
            if min(x0m, cm, dpm) > MARGIN_MIN and interesting(kind, m, prompt, p, res):
                break
        else:
            raise SystemExit(f"{name}: no trial in {MAX_TRIALS} has margins > {MARGIN_MIN} and "
                             f"is '{kind}'")
        rec = case_record(name, prompt, p, res, trial + 1)
        write_json(os.path.join(CASE_DIR, name + ".json"), rec)
        ncommit = [len(t["committed"]) for t in res["trace"]]
        print(f"  {name}: P {plen} trial {trial} seed {p['seed']} nfe {res['nfe']} steps "
              f"{res['steps']} commits/step {min(ncommit)}..{max(ncommit)} margins x0 {x0m:.1e} "
              f"conf {cm:.1e} dpad {dpm:.1e}{' early-stop' if res['stopped_early'] else ''}")
    meta = {
        "rng_self_check": rng_summary,
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "safetensors": safetensors.__version__},
        "margin_min": MARGIN_MIN,
    }
    write_json(os.path.join(OUT, "meta.json"), meta)


if __name__ == "__main__":
    main()
