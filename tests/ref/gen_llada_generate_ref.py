#!/usr/bin/env python3
"""gen_llada_generate_ref.py — LLaDA decoding by the public reference code itself: LLaDA's
generate.py (ML-GSAI/LLaDA) and Fast-dLLM's threshold / factor sampler (NVlabs/Fast-dLLM,
v1/llada/generate.py) running the public modelling code (Fast-dLLM's v1/llada/model/
modeling_llada.py and configuration_llada.py, "modified from LLaDA", Apache-2.0) with torch on
the CPU, on small random checkpoints. It writes the fixtures tests/test-llada-generate-ref.c
checks lazyinfer's decoder against, token for token, at temperature 0 (the references draw their
noise from torch's generator, which lazyinfer does not reproduce).

The public code is not copied into this repository: the script reads it from checkouts given on
the command line (a work tree or a bare git directory, at a revision), at run time. Only
generate.py's two hard-coded special ids (EOS 126081, EOT 126348: LLaDA-8B's) are replaced by the
tiny checkpoints' ids before it runs.

    python3 -m venv .venv-ref && .venv-ref/bin/pip install torch transformers==4.49.0 \\
        safetensors numpy tokenizers
    .venv-ref/bin/python tests/ref/gen_llada_generate_ref.py \\
        --llada PATH/TO/LLaDA [--llada-rev REV] --fastdllm PATH/TO/Fast-dLLM [--fastdllm-rev REV]

What it writes, under tests/data/llada-generate-ref/ (tests/ref/README-llada.md has the details):
  maskpred/, switches/    two tiny HF LLaDA directories (bf16 weights): one whose head makes the
                          mask token win some rows; one with the config switches lazyinfer
                          implements (weight_tying absent = tied, scale_logits, mlp_ratio, MQA,
                          keys the reference ignores)
  sharp/                  a head 40x larger: float32 confidences of exactly 1.0 (the llada-f32-tie
                          cases, which also record generate.py's tokens with a float64 softmax)
  tiedhead-*/             tied configs that ship their own ff_out.weight (differs: weight_tying
                          true; absent: no key; equal: the embedding's bytes), and tiedhead.json:
                          what the reference's from_pretrained makes of them
  cases/*.json            decoding cases: options, prompt, the reference's canvas after every
                          step and at the end, NFE, the smallest decision margins
  forward-*.json / .f32   one forward of maskpred, switches, tiedhead-equal: logits (T x V, f32 LE)
  topk.json               torch.topk on tie-laden vectors made by a generator both sides run
The first checkpoint is tests/data/llada-ref/model (gen_llada_ref.py's).
Deterministic: fixed seeds; rerunning with the same torch rewrites identical files.
"""

import argparse
import hashlib
import importlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llada_ref as base  # noqa: E402  (the tiny checkpoint's ids, tokenizer, JSON writer)

REPO = base.REPO
DATA = os.path.join(REPO, "tests", "data")
OUT = os.path.join(DATA, "llada-generate-ref")
BASE_MODEL = "llada-ref/model"                  # relative to tests/data
BOS, EOS, MASK, EOT, V = base.BOS, base.EOS, base.MASK, base.EOT, base.V
MARGIN_MIN = 1e-4   # relative; the engine's logits differ from torch's by ~2e-6 (README-llada.md)
MAX_TRIALS = 300
MAX_FORWARDS = 400  # a Fast-dLLM block that keeps predicting the mask token never ends
SHARP_GAIN = 40.0   # the sharp checkpoint's head scale: logits over ±~200


# ---- the public code, at run time -------------------------------------------------------------

def read_source(repo, rev, path):
    """path at rev in repo: a work tree (read as it is) or a bare git directory."""
    if os.path.isfile(os.path.join(repo, path)):
        with open(os.path.join(repo, path)) as f:
            return f.read(), "work tree"
    git_dir = repo if os.path.isdir(os.path.join(repo, "objects")) else os.path.join(repo, ".git")
    commit = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", rev], check=True,
                            capture_output=True, text=True).stdout.strip()
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    return text, commit


def load_reference(args, tmp):
    """The modelling package `model` (Fast-dLLM's), Fast-dLLM's generate and LLaDA's generate as
    modules; returns them and where they came from."""
    pkg = os.path.join(tmp, "model")
    os.makedirs(pkg)
    src = {}
    for f in ("configuration_llada.py", "modeling_llada.py"):
        text, rev = read_source(args.fastdllm, args.fastdllm_rev, "v1/llada/model/" + f)
        with open(os.path.join(pkg, f), "w") as out:
            out.write(text)
        src["Fast-dLLM v1/llada/model/" + f] = rev
    with open(os.path.join(pkg, "__init__.py"), "w") as out:
        out.write("")
    sys.path.insert(0, tmp)
    modeling = importlib.import_module("model.modeling_llada")
    configuration = importlib.import_module("model.configuration_llada")

    text, rev = read_source(args.fastdllm, args.fastdllm_rev, "v1/llada/generate.py")
    src["Fast-dLLM v1/llada/generate.py"] = rev
    fast = types.ModuleType("fastdllm_generate")
    exec(compile(text, "Fast-dLLM/v1/llada/generate.py", "exec"), fast.__dict__)

    text, rev = read_source(args.llada, args.llada_rev, "generate.py")
    src["LLaDA generate.py"] = rev
    # LLaDA-8B's EOS and EOT ids are literals there; the tiny checkpoints have their own.
    assert text.count("126081") == 2 and text.count("126348") == 1, "generate.py changed"
    text = text.replace("126081", str(EOS)).replace("126348", str(EOT))
    llada = types.ModuleType("llada_generate")
    exec(compile(text, "LLaDA/generate.py", "exec"), llada.__dict__)
    return modeling, configuration, fast, llada, src


class Recorder:
    """The model as generate.py calls it (model(x, attention_mask=...).logits, model.device),
    recording each forward's input canvas and logits."""

    def __init__(self, m):
        self.m = m
        self.calls = []
        self.device = torch.device("cpu")

    def __call__(self, x, attention_mask=None, **kw):
        if len(self.calls) >= MAX_FORWARDS:
            raise RuntimeError("too many forwards")
        with torch.no_grad():
            out = self.m(x, attention_mask=attention_mask) if attention_mask is not None \
                else self.m(x)
        self.calls.append((x.clone(), out.logits.detach().clone()))
        return out


class Recorder64(Recorder):
    """The same model with its logits widened to float64: generate.py then takes its confidence
    softmax in float64 (as Fast-dLLM does), everything else unchanged."""

    def __call__(self, x, attention_mask=None, **kw):
        return types.SimpleNamespace(logits=super().__call__(x, attention_mask).logits.double())


def build_model(modeling, configuration, model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    config = configuration.LLaDAConfig(**cfg)
    m = modeling.LLaDAModelLM(config, init_params=False).float().eval()
    from safetensors.torch import load_file
    sd = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # a tied head has no ff_out of its own: the modelling code reads wte
    assert not unexpected and all("ff_out.weight" == k.split("transformer.")[-1]
                                  for k in missing), (missing, unexpected)
    if missing:
        assert cfg.get("weight_tying", True), missing
    return m


# ---- the new checkpoints -----------------------------------------------------------------------

def tiny_weights(seed, D, H, HKV, F, L, tied, mask_gain=0.0, head_gain=1.0):
    rng = np.random.default_rng(seed)
    DH = D // H

    def lin(out, inp, std):
        return (rng.standard_normal((out, inp)) * std).astype(np.float32)

    p = "model.transformer."
    w = {p + "wte.weight": (rng.standard_normal((V, D)) * 0.5).astype(np.float32)}
    for i in range(L):
        b = f"{p}blocks.{i}."
        w[b + "attn_norm.weight"] = rng.uniform(0.5, 1.5, D).astype(np.float32)
        w[b + "ff_norm.weight"] = rng.uniform(0.5, 1.5, D).astype(np.float32)
        w[b + "q_proj.weight"] = lin(H * DH, D, 0.4)
        w[b + "k_proj.weight"] = lin(HKV * DH, D, 0.4)
        w[b + "v_proj.weight"] = lin(HKV * DH, D, 0.3)
        w[b + "attn_out.weight"] = lin(D, H * DH, 0.2)
        w[b + "ff_proj.weight"] = lin(F, D, 0.3)
        w[b + "up_proj.weight"] = lin(F, D, 0.3)
        w[b + "ff_out.weight"] = lin(D, F, 0.2)
    w[p + "ln_f.weight"] = rng.uniform(0.5, 1.5, D).astype(np.float32)
    if not tied:
        head = lin(V, D, 0.6)
        if mask_gain:  # the mask token's head row along its own embedding (the residual
            # stream of a mask row carries it): the model predicts the mask id on some rows
            head[MASK] = w[p + "wte.weight"][MASK] * mask_gain
        head[EOS] *= 1.5
        head[EOT] *= 1.5
        w[p + "ff_out.weight"] = head * np.float32(head_gain)
    # stored bf16 (half the bytes); both sides widen them to the same f32 values
    import torch as _t
    return {k: _t.from_numpy(v).to(_t.bfloat16) for k, v in w.items()}


def write_checkpoint(name, config, weights):
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    base.write_json(os.path.join(d, "config.json"), config)
    from safetensors.torch import save_file as save_t
    save_t(weights, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(d, "model.safetensors"), 0o644)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(DATA, BASE_MODEL, f), os.path.join(d, f))
    return d


def maskpred_config():
    """LLaDA-8B's keys; input_emb_norm on (untied: lazyinfer scales the embedding)."""
    c = base.llada_config()
    c.update({"d_model": 16, "n_heads": 2, "n_kv_heads": 2, "n_layers": 2, "mlp_hidden_size": 32,
              "rope_theta": 30000.0, "input_emb_norm": True, "max_sequence_length": 64})
    return c


def sharp_config():
    """maskpred's shape without input_emb_norm, for a head 40x larger: many rows' confidence
    rounds to exactly 1.0 in float32 (generate.py's softmax) and not in float64."""
    c = maskpred_config()
    c.update({"input_emb_norm": False, "rope_theta": 10000.0})
    return c


def tiedhead_config(tying):
    """Residual 3: weight_tying true, or absent (the default: true), with its own ff_out."""
    c = maskpred_config()
    c.update({"n_layers": 1, "input_emb_norm": False, "weight_tying": tying})
    if tying is None:
        del c["weight_tying"]
    return c


def write_tiedhead(modeling):
    """Three tied checkpoints that ship model.transformer.ff_out.weight: -differs (weight_tying
    true) and -absent (no key) with a head unlike the embedding, which lazyinfer refuses naming
    the key; -equal with the embedding's bytes, which loads. The reference's own loader
    (from_pretrained: tie_weights makes ff_out the wte module) is asked what it does with each."""
    w = tiny_weights(9, 16, 2, 2, 32, 1, tied=False)
    eq = dict(w, **{"model.transformer.ff_out.weight": w["model.transformer.wte.weight"].clone()})
    wte = w["model.transformer.wte.weight"]
    out = {}
    for name, tying, weights in (("tiedhead-differs", True, w), ("tiedhead-absent", None, w),
                                 ("tiedhead-equal", True, eq)):
        d = write_checkpoint(name, tiedhead_config(tying), weights)
        m = modeling.LLaDAModelLM.from_pretrained(d, torch_dtype=torch.float32).eval()
        emb = m.model.transformer.wte.weight.detach()
        h = m.get_output_embeddings().weight.detach()
        out[name] = {"embedding_is_file_wte": torch.equal(emb, wte.float()),
                     "embedding_is_file_ff_out": torch.equal(emb, weights[
                         "model.transformer.ff_out.weight"].float()),
                     "head_is_embedding": bool(h.data_ptr() == emb.data_ptr())}
        print(f"  {name}: the reference's from_pretrained: {out[name]}")
        if name == "tiedhead-equal":
            forward_case(m, "llada-generate-ref/" + name, "forward-" + name)
    base.write_json(os.path.join(OUT, "tiedhead.json"), {
        "what": "what the reference's LLaDAModelLM.from_pretrained (transformers " +
                importlib.import_module("transformers").__version__ + ") makes of each tied "
                "checkpoint that ships model.transformer.ff_out.weight",
        "checkpoints": out})


def switches_config():
    """The switches lazyinfer implements, and keys the reference ignores: weight_tying absent
    (tied), scale_logits, mlp_hidden_size absent (mlp_ratio 3), n_kv_heads absent with
    multi_query_attention (one kv head), embedding_size null (= vocab_size), layer_norm_eps and
    rope_scaling (not read), max_sequence_length below the canvases."""
    c = base.llada_config()
    for k in ("weight_tying", "mlp_hidden_size", "n_kv_heads"):
        del c[k]
    c.update({"d_model": 16, "n_heads": 2, "n_layers": 2, "mlp_ratio": 3,
              "multi_query_attention": True, "embedding_size": None, "scale_logits": True,
              "layer_norm_eps": 0.25, "rope_scaling": {"type": "linear", "factor": 4.0},
              "rms_norm_eps": 1e-6, "rope_theta": 20000.0, "max_sequence_length": 16})
    return c


# ---- the decision margins of one step, recomputed from the recorded logits ----------------------

def rel_gap(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def step_analysis(p, x, logits, un, lo, hi, k, eos_id, eot_id, conf_dtype=torch.float64):
    """The contract's step on the reference's logits (torch, T = 0): the rows it commits (via
    torch.topk, as generate.py) and the smallest relative margin of every comparison that decided
    them. conf_dtype: the confidence softmax's precision (generate.py: the logits' float32;
    Fast-dLLM: float64). Returns (x_next, margins dict, tie_info)."""
    L = logits.clone()
    if un is not None:
        L = un + (p["cfg_scale"] + 1) * (L - un)
    if p["logits_eos_inf"]:
        L[:, eos_id] = -torch.inf
    x0 = torch.argmax(L, dim=-1)
    L2 = L.clone()
    if p["confidence_eos_eot_inf"]:
        L2[:, EOT] = -torch.inf
        L2[:, EOS] = -torch.inf  # (temperature 0: the noisy logits are these)
    conf = torch.softmax(L2.to(conf_dtype), dim=-1).gather(-1, x0[:, None])[:, 0]
    n = x.shape[0]
    cand = [i for i in range(hi) if x[i] == MASK]
    vec = torch.full((n,), -torch.inf, dtype=conf_dtype)
    for i in cand:
        vec[i] = conf[i]
    cs = sorted((float(vec[i]) for i in cand), reverse=True)
    margins = {"x0": math.inf, "conf": math.inf, "order": math.inf}
    for i in cand:
        top = torch.topk(L[i], 2).values
        margins["x0"] = min(margins["x0"], float(top[0] - top[1]) / max(1.0, abs(float(top[0]))))
        if float(vec[i]) == 1.0 and conf_dtype == torch.float32:
            # a float32 confidence of exactly 1.0 (the others' mass below half an ulp) ties with
            # every other such row; it must stay 1.0 when x0's logit moves by the margin
            row = L2[i].clone()
            row[x0[i]] -= MARGIN_MIN * max(1.0, abs(float(row[x0[i]])))
            if float(torch.softmax(row, dim=-1)[x0[i]]) != 1.0:
                margins["conf"] = 0.0
    distinct = sorted(set(c for c in cs if c > 0), reverse=True)
    for a, b in zip(distinct, distinct[1:]):
        margins["order"] = min(margins["order"], rel_gap(a, b))
    nc = len(cs)
    tie = None
    if p["threshold"] is not None:
        tau = p["threshold"]
        take = 1 + sum(1 for c in cs[1:] if c >= tau)
        for c in cs:
            margins["conf"] = min(margins["conf"], abs(c - tau) / tau)
        if nc > 1 and cs[1] < tau:
            margins["conf"] = min(margins["conf"], rel_gap(cs[0], cs[1]))
        sel = set(i for i in cand if float(vec[i]) >= tau)
        sel.add(int(torch.argmax(vec)))
    else:
        if p["factor"] is not None:
            f = p["factor"]
            take = 1
            while take < nc and not (cs[take] < 1 - f / (take + 2)):
                take += 1
            for j in range(1, min(take + 1, nc)):
                margins["conf"] = min(margins["conf"], rel_gap(cs[j], 1 - f / (j + 2)))
            if take == nc - 1:
                take = nc
        else:
            take = min(k, nc)
        if 0 < take < nc:
            if cs[take - 1] == cs[take]:
                # a cut among equal values (zeros): torch.topk's permutation depends on every
                # comparison, so every order between distinct values must be clear
                tie = {"k": take, "value": cs[take]}
                margins["conf"] = min(margins["conf"], margins["order"])
            else:
                margins["conf"] = min(margins["conf"], rel_gap(cs[take - 1], cs[take]))
        sel = set(torch.topk(vec, take).indices.tolist()) if take > 0 else set()
        if tie is not None:
            low = [i for i in sorted(cand, key=lambda i: (-float(vec[i]), i))][:take]
            tie["lowest_rows_differ"] = set(low) != sel
    xn = x.clone()
    for i in sel:
        xn[i] = x0[i]
    info = {"mask_commit": any(int(x0[i]) == MASK for i in sel), "sel": sorted(sel),
            "bump": p["factor"] is not None and nc >= 2 and take == nc and
            cs[-1] < 1 - p["factor"] / (nc + 1)}
    return xn, margins, tie, info


def analyse(p, P, rec, final, llada):
    """Walks the recorded forwards: per step the contract's commits (checked equal to the
    reference's next canvas: this script's reading of the reference is itself checked) and the
    margins. Returns the per-step canvases, margins, tie steps and flags."""
    G, B = p["gen_length"], p["block_length"]
    nb = G // B
    S = p["steps"] // nb
    per = 2 if (llada and p["cfg_scale"] > 0) else 1
    calls = rec.calls
    canvases, mins, ties = [], {"x0": math.inf, "conf": math.inf}, []
    mask_commits, commits_before_block, bumps, inconsistent, per_step = 0, 0, 0, [], []
    block, step_in_block = 0, 0
    n_block = None
    for ci, (xin, logits) in enumerate(calls):
        x = xin[0]
        un = logits[1] if per == 2 else None
        lo, hi = P + block * B, P + (block + 1) * B
        if step_in_block == 0:
            n_block = int((x[lo:hi] == MASK).sum())
        k = n_block // S + (1 if step_in_block < n_block % S else 0) if llada else None
        xn, m, tie, info = step_analysis(p, x, logits[0], un, lo, hi, k, EOS, EOT,
                                         torch.float32 if llada else torch.float64)
        nxt = calls[ci + 1][0][0] if ci + 1 < len(calls) else final
        if not torch.equal(xn, nxt):
            diff = [(i, int(xn[i]), int(nxt[i])) for i in range(len(xn)) if xn[i] != nxt[i]]
            inconsistent.append(f"step {ci}: {diff}")
        canvases.append([int(t) for t in nxt])
        mins["x0"] = min(mins["x0"], m["x0"])
        mins["conf"] = min(mins["conf"], m["conf"])
        if tie is not None:
            ties.append(dict(tie, step=ci))
        mask_commits += info["mask_commit"]
        commits_before_block += sum(1 for i in info["sel"] if i < lo)
        bumps += info["bump"]
        per_step.append(len(info["sel"]))
        step_in_block += 1
        done = step_in_block == S if llada else not bool((xn[lo:hi] == MASK).any())
        if done:
            block, step_in_block = block + 1, 0
    return {"canvases": canvases, "min_margins": mins, "ties": ties,
            "mask_commits": mask_commits, "commits_before_block": commits_before_block,
            "bumps": bumps, "inconsistent": inconsistent, "steps": len(calls),
            "commits_per_step": per_step}


# ---- the cases ---------------------------------------------------------------------------------

def make_prompt(length, trial, name, holes=0):
    r = np.random.default_rng([sum(name.encode()), length, trial])
    p = [BOS] + [int(t) for t in r.integers(0, base.N_BPE, length - 1)]
    if holes:
        for i in sorted(r.choice(np.arange(1, length), holes, replace=False)):
            p[int(i)] = MASK
    return p


CASES = [
    # name, reference, model, prompt length, prompt masks, options, what it must show
    ("llada-vanilla-s2", "llada", BASE_MODEL, 10, 0,
     dict(gen_length=16, block_length=8, steps=4), "plain"),
    ("llada-vanilla-uneven", "llada", BASE_MODEL, 9, 0,
     dict(gen_length=24, block_length=8, steps=9), "plain"),
    ("llada-cfg", "llada", BASE_MODEL, 11, 0,
     dict(gen_length=16, block_length=8, steps=4, cfg_scale=1.5), "plain"),
    ("llada-eosinf", "llada", BASE_MODEL, 9, 0,
     dict(gen_length=16, block_length=8, steps=4, logits_eos_inf=True), "eos_matters"),
    ("llada-eoseot-conf-tie", "llada", BASE_MODEL, 8, 0,
     dict(gen_length=16, block_length=16, steps=2, confidence_eos_eot_inf=True), "tie"),
    ("llada-eoseot-conf-tie-cfg", "llada", BASE_MODEL, 12, 0,
     dict(gen_length=16, block_length=16, steps=2, confidence_eos_eot_inf=True, cfg_scale=0.5),
     "tie"),
    ("llada-infill", "llada", BASE_MODEL, 14, 4,
     dict(gen_length=16, block_length=8, steps=8), "infill"),
    ("llada-infill-cfg", "llada", BASE_MODEL, 12, 3,
     dict(gen_length=16, block_length=8, steps=8, cfg_scale=1.0), "infill"),
    ("llada-maskpred", "llada", "llada-generate-ref/maskpred", 8, 0,
     dict(gen_length=24, block_length=8, steps=12), "mask_left"),
    ("llada-switches", "llada", "llada-generate-ref/switches", 10, 0,
     dict(gen_length=16, block_length=8, steps=8), "plain"),
    ("llada-f32-tie", "llada", "llada-generate-ref/sharp", 8, 0,
     dict(gen_length=16, block_length=8, steps=4), "f32_tie"),
    ("llada-f32-tie-cfg", "llada", "llada-generate-ref/sharp", 9, 0,
     dict(gen_length=16, block_length=8, steps=4, cfg_scale=1.0), "f32_tie"),
    ("fast-threshold-0.5", "fast", BASE_MODEL, 12, 0,
     dict(gen_length=24, block_length=8, steps=24, threshold=0.5), "parallel"),
    ("fast-threshold-near", "fast", BASE_MODEL, 10, 0,
     dict(gen_length=16, block_length=8, steps=16, threshold="near"), "near"),
    ("fast-threshold-infill", "fast", BASE_MODEL, 12, 3,
     dict(gen_length=16, block_length=8, steps=16, threshold=0.3), "infill"),
    ("fast-factor-1.0", "fast", BASE_MODEL, 9, 0,
     dict(gen_length=32, block_length=16, steps=32, factor=1.0), "factor_bump"),
    ("fast-factor-maskpred", "fast", "llada-generate-ref/maskpred", 8, 0,
     dict(gen_length=16, block_length=8, steps=16, factor=2.0), "mask_commit"),
]

BASE_P = {"gen_length": 16, "block_length": 8, "steps": 4, "cfg_scale": 0.0,
          "logits_eos_inf": False, "confidence_eos_eot_inf": False, "threshold": None,
          "factor": None}


def run_reference(ref, which, model, prompt, p, f64=False):
    rec = Recorder64(model) if f64 else Recorder(model)
    x = torch.tensor([prompt], dtype=torch.long)
    if which == "llada":
        # (an all-ones attention mask: generate.py's CFG branch needs one; the model drops it)
        out = ref["llada"].generate(rec, x, torch.ones_like(x), steps=p["steps"],
                                    gen_length=p["gen_length"],
                                    block_length=p["block_length"], temperature=0.0,
                                    cfg_scale=p["cfg_scale"], remasking="low_confidence",
                                    mask_id=MASK, logits_eos_inf=p["logits_eos_inf"],
                                    confidence_eos_eot_inf=p["confidence_eos_eot_inf"])
        nfe = len(rec.calls) * (2 if p["cfg_scale"] > 0 else 1)
    else:
        out, nfe = ref["fast"].generate(rec, x, steps=p["steps"], gen_length=p["gen_length"],
                                        block_length=p["block_length"], temperature=0.0,
                                        remasking="low_confidence", mask_id=MASK,
                                        threshold=p["threshold"], factor=p["factor"])
        assert nfe == len(rec.calls)
    return out[0], nfe, rec


def near_threshold(model, prompt, p):
    """A threshold a hair below the second-best candidate's confidence at the first step (which
    does not depend on the threshold): 3e-5 relative, ~10x the engine's logit error, far below
    what an fp32 softmax sum over LLaDA-8B's vocabulary misses by (up to 2.3e-4)."""
    P, B = len(prompt), p["block_length"]
    x = torch.tensor([prompt + [MASK] * p["gen_length"]])
    with torch.no_grad():
        logits = model(x).logits[0]
    conf = torch.softmax(logits.double(), dim=-1).max(dim=-1).values[P:P + B]
    return sorted((float(c) for c in conf), reverse=True)[1] * (1 - 3e-5)


def interesting(kind, res, p, P, final, ref, which, model, prompt):
    a = res
    if kind in ("plain", "near"):
        return a["mask_commits"] == 0
    if kind == "parallel":  # a step commits one row, another several
        return a["mask_commits"] == 0 and min(a["commits_per_step"]) == 1 and \
            max(a["commits_per_step"]) > 1
    if kind == "eos_matters":
        q = dict(p, logits_eos_inf=False)
        other, _, _ = run_reference(ref, which, model, prompt, q)
        return a["mask_commits"] == 0 and not torch.equal(other, final)
    if kind == "tie":
        return a["mask_commits"] == 0 and any(t["lowest_rows_differ"] for t in a["ties"])
    if kind == "infill":
        return any(int(final[i]) != MASK for i in range(P) if prompt[i] == MASK) and \
            a["commits_before_block"] > 0
    if kind == "mask_left":
        return a["mask_commits"] > 0 and a["commits_before_block"] > 0
    if kind == "mask_commit":
        return a["mask_commits"] > 0
    if kind == "factor_bump":
        return a["mask_commits"] == 0 and a["bumps"] > 0
    if kind == "f32_tie":  # a cut among float32 confidences of exactly 1.0, which a float64
        # softmax would order: generate.py's tokens differ from its own run in float64
        other, _, _ = run_reference(ref, which, model, prompt, p, f64=True)
        return a["mask_commits"] == 0 and any(t["value"] == 1.0 for t in a["ties"]) and \
            not torch.equal(other, final)
    raise ValueError(kind)


def run_case(ref, models, name, which, model_rel, plen, holes, over, kind):
    p = dict(BASE_P)
    p.update(over)
    model = models[model_rel]
    for trial in range(MAX_TRIALS):
        prompt = make_prompt(plen, trial, name, holes)
        if kind == "near":
            p["threshold"] = near_threshold(model, prompt, p)
        try:
            final, nfe, rec = run_reference(ref, which, model, prompt, p)
        except RuntimeError:
            continue  # (a block stuck on the mask token)
        res = analyse(p, plen, rec, final, which == "llada")
        # the near case holds one comparison at 3e-5 on purpose
        if min(res["min_margins"].values()) <= (MARGIN_MIN if kind != "near" else 1e-5):
            continue
        if res["inconsistent"]:
            raise SystemExit(f"{name} trial {trial}: the reference committed other rows than "
                             f"the contract says, with clear margins: {res['inconsistent']}")
        if interesting(kind, res, p, plen, final, ref, which, model, prompt):
            break
    else:
        raise SystemExit(f"{name}: no trial in {MAX_TRIALS} is '{kind}' with margins")
    rec_json = {
        "name": name,
        "reference": "LLaDA generate.py" if which == "llada" else
                     "Fast-dLLM v1/llada/generate.py generate()",
        "model": model_rel,
        "params": p,
        "ids": {"mask": MASK, "eos": EOS, "eot": EOT, "bos": BOS},
        "prompt": prompt,
        "expected": {"canvas": [int(t) for t in final], "nfe": nfe, "steps": res["steps"]},
        "steps_canvas": res["canvases"],
        "min_margins": res["min_margins"],
        "tie_steps": res["ties"],
        "mask_commits": res["mask_commits"],
        "commits_before_block": res["commits_before_block"],
        "commits_per_step": res["commits_per_step"],
        "trials": trial + 1,
    }
    if kind == "f32_tie":
        f64, _, _ = run_reference(ref, which, model, prompt, p, f64=True)
        rec_json["float64_canvas"] = [int(t) for t in f64]
        differ = int((f64 != final).sum())
        rec_json["float64_rows_differ"] = differ
        print(f"  {name}: generate.py with a float64 confidence softmax: {differ} of "
              f"{p['gen_length']} generated tokens differ; ties at 1.0 at steps "
              f"{[t['step'] for t in res['ties'] if t['value'] == 1.0]}")
    base.write_json(os.path.join(OUT, "cases", name + ".json"), rec_json)
    print(f"  {name}: P {plen} trial {trial} nfe {nfe} steps {res['steps']} margins "
          f"x0 {res['min_margins']['x0']:.1e} conf {res['min_margins']['conf']:.1e} "
          f"ties {len(res['ties'])} mask commits {res['mask_commits']} "
          f"before-block commits {res['commits_before_block']}")


def forward_case(model, model_rel, name):
    r = np.random.default_rng(11)
    toks = [BOS] + [int(t) for t in r.integers(0, base.N_BPE, 7)] + [MASK] * 10  # T 18 > 16
    with torch.no_grad():
        logits = model(torch.tensor([toks])).logits[0].float().numpy()
    base.to_f32_file(os.path.join(OUT, name + ".logits.f32"), logits)
    base.write_json(os.path.join(OUT, name + ".json"),
                    {"model": model_rel, "tokens": toks, "n_vocab": int(logits.shape[1]),
                     "logits_file": name + ".logits.f32"})


# ---- torch.topk on ties --------------------------------------------------------------------------

M64 = (1 << 64) - 1


class SplitMix:
    """splitmix64, the generator tests/test-llada-generate-ref.c runs too."""

    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def topk_vector(c):
    """Case c: n values (-inf, 0 or (j + 0.5) / 8, exact in float32) and k."""
    g = SplitMix(1000003 * c + 17)
    n = 1 + g.next() % (300 if c % 3 else 3000)
    vals = []
    for _ in range(n):
        r = g.next() % 10
        vals.append(-math.inf if r < 4 else 0.0 if r < 7 else ((g.next() % 8) + 0.5) / 8)
    k = 1 + g.next() % (n if c % 2 == 0 else max(1, n // 64))
    return vals, k


def fnv1a(idx):
    h = 0xcbf29ce484222325
    for b in ",".join(str(i) for i in idx).encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    return f"{h:016x}"


def write_topk(n_cases=600):
    rows, differ = [], 0
    for c in range(n_cases):
        vals, k = topk_vector(c)
        t = torch.tensor(vals, dtype=torch.float32 if c % 2 == 0 else torch.float64)
        idx = sorted(torch.topk(t, k).indices.tolist())
        low = sorted(sorted(range(len(vals)), key=lambda i: (-vals[i], i))[:k])
        differ += idx != low
        rows.append([len(vals), k, fnv1a(idx)])
    base.write_json(os.path.join(OUT, "topk.json"), {
        "generator": "splitmix64 seeded 1000003 c + 17 (c = case); n = 1 + next % (c % 3 ? 300 "
                     ": 3000); per value r = next % 10: r < 4 -inf, r < 7 0, else "
                     "(next % 8 + 0.5) / 8; k = 1 + next % (c even ? n : max(1, n / 64)); "
                     "float32 for even c, float64 for odd",
        "hash": "FNV-1a 64 of the ascending indices torch.topk returns, decimal, comma-joined",
        "lowest_rows_differ": differ,
        "cases": rows})
    print(f"  topk: {n_cases} vectors, torch's choice differs from the lowest rows in {differ}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llada", required=True, help="ML-GSAI/LLaDA checkout or git directory")
    ap.add_argument("--llada-rev", default="HEAD")
    ap.add_argument("--fastdllm", required=True, help="NVlabs/Fast-dLLM checkout or git directory")
    ap.add_argument("--fastdllm-rev", default="HEAD")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="llada-ref-")
    try:
        modeling, configuration, fast, llada, src = load_reference(args, tmp)
        ref = {"fast": fast, "llada": llada}
        os.makedirs(os.path.join(OUT, "cases"), exist_ok=True)
        write_checkpoint("maskpred", maskpred_config(),
                         tiny_weights(7, 16, 2, 2, 32, 2, tied=False, mask_gain=1.35))
        write_checkpoint("switches", switches_config(), tiny_weights(8, 16, 2, 1, 48, 2, tied=True))
        write_checkpoint("sharp", sharp_config(),
                         tiny_weights(10, 16, 2, 2, 32, 2, tied=False, head_gain=SHARP_GAIN))
        models = {m: build_model(modeling, configuration, os.path.join(DATA, m))
                  for m in (BASE_MODEL, "llada-generate-ref/maskpred",
                            "llada-generate-ref/switches", "llada-generate-ref/sharp")}
        write_tiedhead(modeling)
        forward_case(models["llada-generate-ref/maskpred"], "llada-generate-ref/maskpred",
                     "forward-maskpred")
        forward_case(models["llada-generate-ref/switches"], "llada-generate-ref/switches",
                     "forward-switches")
        write_topk()
        for case in CASES:
            if args.only and args.only not in case[0]:
                continue
            run_case(ref, models, *case)
        base.write_json(os.path.join(OUT, "meta.json"), {
            "sources": src,
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "numpy": np.__version__,
                         "transformers": importlib.import_module("transformers").__version__},
            "margin_min": MARGIN_MIN,
        })
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
