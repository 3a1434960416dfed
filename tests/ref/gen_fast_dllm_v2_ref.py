#!/usr/bin/env python3
"""gen_fast_dllm_v2_ref.py — reference files for lazyinfer's Fast-dLLM v2 (block diffusion)
decoder: small random Fast-dLLM-v2-shaped checkpoints and the tokens the public reference's
`generate` decodes from them at temperature 0, which tests/test-bd-generate-ref.c compares token
for token (and NFE for NFE).

The reference is `Fast_dLLM_QwenForCausalLM.generate` of the HF model repo
Efficient-Large-Model/Fast_dLLM_v2_7B, modeling.py (read from a copy on GitHub,
Satgoy152/DualDiffusion FastDLLM_inferencing/Fast_dLLM_v2_7B/modeling.py, commit 1aeb3d44). It
cannot be imported here (it imports flex_attention, einops and its own configuration module
and compiles a kernel at import), so `generate` below re-expresses it line for line with the
default use_block_cache=False, temperature 0, steps None; each step cites the reference lines.
The model is HF transformers' Qwen2ForCausalLM (the reference's Fast_dLLM_QwenModel in eval mode
is Qwen2's layers, RoPE and norms; its q/k/v have biases, o_proj none) run over the whole
sequence with the reference's eval mask, `eval_block_diff_mask`: query block >= key block. The
reference's KV cache holds exactly those keys and values (its prefill and its
update_past_key_values forward use the same mask), so recomputing them gives the same numbers up
to fp32 summation order.

Run once, by hand, from the repository root, in the git-ignored reference venv:

    .venv-ref/bin/python tests/ref/gen_fast_dllm_v2_ref.py      # ~10 s

Writes tests/data/ref/tiny-fdllm-*/ (HF directories: config.json with model_type
"Fast_dLLM_Qwen", bd_size, mask_token_id; fp32 safetensors; the tiny tokenizer of
gen_llama_ref.py) and tests/data/fast-dllm-v2-ref/cases.json (per case: model, prompt ids, block,
sub-block, threshold, gen_length, the reference's generated ids after the prompt, its NFE and
step count, and how many steps committed one token and how many several).
Everything is float32 on the CPU with fixed seeds.
"""

import json
import os
import sys

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama_ref as ref  # noqa: E402  (tiny tokenizer, save_tiny)

OUT = os.path.join(ref.REPO, "tests", "data", "fast-dllm-v2-ref")
BIAS_STD = 0.5  # as gen_qwen2_ref.py
# name, hidden, heads, kv heads, layers, ffn, vocab, head scale, bd_size, eos boost
# The untied LM head is multiplied by `head scale` so that the softmax is sharp on some rows and
# flat on others: the threshold then commits several tokens in some steps and one in others.
# `eos boost`: the EOS row of the head is moved towards the mean row so that EOS gets predicted
# (the stop rule runs).
MODELS = [
    ("tiny-fdllm-a", 64, 4, 2, 2, 128, 320, 6.0, 8, 0.0),
    ("tiny-fdllm-b", 96, 6, 2, 3, 160, 384, 9.0, 8, 0.8),
]
EOS = 2


def eval_mask(n, B):
    """The reference's eval_mask over the whole sequence (cache_seq_len 0): eval_block_diff_mask
    (q // B >= kv // B), as an additive float mask for eager attention."""
    q = torch.arange(n)[:, None] // B
    k = torch.arange(n)[None, :] // B
    allowed = q >= k
    m = torch.zeros(n, n)
    m[~allowed] = torch.finfo(torch.float32).min
    return m[None, None]


def forward(model, ids, B):
    """Logits (T, V) of the sequence ids under the block-causal mask."""
    x = torch.tensor([ids])
    with torch.no_grad():
        return model(input_ids=x, attention_mask=eval_mask(len(ids), B)).logits[0]


def generate(model, prompt, gen_length, B, S, threshold, mask_id, stop):
    """modeling.py generate(input_ids, max_new_tokens=gen_length, mask_id, threshold,
    small_block_size=S, block_size=B, stop_token=stop, temperature=0, use_block_cache=False).
    Returns (generated ids after the prompt, NFE, step_count, commits per denoising step, the
    smallest decision margin: margin())."""
    x = list(prompt)
    min_margin = float("inf")
    nfe = 0
    commits = []
    num_blocks = gen_length // B  # num_blocks = max_new_tokens // block_size
    original_input_length = len(x)
    step_count = 0
    # if past_key_values is None and input_ids.shape[1] > block_size: prefill the whole blocks;
    # if input_ids.shape[1] % block_size == 0: next_token = logits[:, -1:].argmax(-1), appended
    if len(x) > B:
        n = len(x) // B * B
        logits = forward(model, x[:n], B)
        nfe += 1
        if len(x) % B == 0:
            x.append(int(logits[-1].argmax()))
    num_small_blocks = B // S
    for block_idx in range(num_blocks):
        if stop in x[original_input_length:]:  # if stop_token in input_ids[:, original...:]: break
            break
        prompt_length = len(x)
        # x_init = mask_id * ones(block_size - prompt_length % block_size); cat to input_ids
        x_t = x + [mask_id] * (B - prompt_length % B)

        def stop_reached():
            # if stop_token in x_t[:, prompt_length:]: first index; no mask before it -> break
            tail = x_t[prompt_length:]
            if stop not in tail:
                return False
            i = tail.index(stop)
            return mask_id not in tail[:i]

        finished = False
        while True:
            if stop_reached():
                break
            block = x_t[-B:]
            if mask_id not in block:
                # update_past_key_values forward of the block, next_token = logits[:, -1:].argmax
                logits = forward(model, x_t, B)[-B:]
                nfe += 1
                step_count += 1
                x_t.append(int(logits[-1].argmax()))
                break
            for sb in range(num_small_blocks):
                start = len(x_t) - B + sb * S  # start = -block_size + small_block_start_idx
                end = start + S
                while True:
                    if mask_id not in x_t[start:end]:  # mask_idx[:, start:end].sum() == 0
                        break
                    if stop_reached():
                        finished = True
                        break
                    # logits of the block given the cache, not stored (use_block_cache False)
                    logits = forward(model, x_t, B)[-B:]
                    nfe += 1
                    step_count += 1
                    # logits = cat([logits[:, :1], logits[:, :-1]]): row j from row j - 1
                    logits = torch.cat([logits[:1], logits[:-1]], dim=0)
                    lo = start - (len(x_t) - B)
                    logits = logits[lo:lo + S]
                    # sample_with_top_p at temperature 0: p = softmax(logits), x = p.argmax(-1)
                    p = torch.softmax(logits, dim=-1)
                    x1 = p.argmax(dim=-1)
                    x1_p = torch.gather(p, -1, x1[:, None])[:, 0]
                    masked = torch.tensor([t == mask_id for t in x_t[start:end]])
                    x1_p = torch.where(masked, x1_p, torch.tensor(-torch.inf))
                    min_margin = min(min_margin, margin(x1_p[masked], threshold))
                    unmask = x1_p > threshold
                    unmask[int(x1_p.argmax())] = True
                    unmask = unmask & masked
                    commits.append(int(unmask.sum()))
                    for k in range(S):
                        if unmask[k]:
                            x_t[start + k] = int(x1[k])
                if finished:
                    break
            if finished:
                break
        x = x_t  # input_ids = x_t
    gen = x[original_input_length:]
    if stop in gen:  # truncate after the first stop token
        gen = gen[:gen.index(stop) + 1]
    return gen, nfe, step_count, commits, min_margin


def margin(conf, tau):
    """How far one step's decisions are from flipping, relative: each confidence from tau (p > tau
    cannot hold at tau >= 1), and, where the best is committed only because it is the best (at or
    below tau), the best from the second. lazyinfer's logits differ from these by ~2e-6
    relative, so cases keep every margin above MIN_MARGIN."""
    c = sorted(conf.tolist(), reverse=True)
    m = float("inf")
    if tau < 1:
        m = min(abs(v - tau) / tau for v in c)
    if len(c) > 1 and c[0] <= tau:
        m = min(m, (c[0] - c[1]) / c[0])
    return m


MIN_MARGIN = 1e-4


def make_model(name, D, H, Hkv, L, F, V, head_scale, bd, eos_boost):
    seed = sum(map(ord, name))
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=Hkv, num_hidden_layers=L,
        intermediate_size=F, vocab_size=V, tie_word_embeddings=False,
        max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False, bos_token_id=1, eos_token_id=EOS, pad_token_id=0,
        attn_implementation="eager")
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for nm, p in model.named_parameters():
            if nm.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand_like(p))
            if nm.endswith(".bias"):
                p.copy_(BIAS_STD * torch.randn_like(p))
        W = model.lm_head.weight
        W.mul_(head_scale)
        if eos_boost:
            W[EOS] = (1 - eos_boost) * W[EOS] + eos_boost * W.mean(dim=0) * 40
    path, m2 = ref.save_tiny(model, name, V, 1000000.0, None)
    # Fast-dLLM v2's config.json (Fast_dLLM_v2_7B: model_type Fast_dLLM_Qwen, bd_size; the mask
    # id as mask_token_id, the key sglang reads)
    cpath = os.path.join(path, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    c["model_type"] = "Fast_dLLM_Qwen"
    c["architectures"] = ["Fast_dLLM_QwenForCausalLM"]
    c["auto_map"] = {"AutoConfig": "configuration.Fast_dLLM_QwenConfig",
                     "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"}
    c["bd_size"] = bd
    c["mask_token_id"] = V - 1
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    sd1, sd2 = model.state_dict(), m2.state_dict()
    assert all(torch.equal(sd1[k], sd2[k]) for k in sd1), "weights changed on reload"
    return m2, V - 1, seed


# model, prompt length, gen_length, block, sub-block, threshold
CASES = [
    ("tiny-fdllm-a", 5, 32, 8, 4, 0.5),    # prompt inside the first block: no prefill
    ("tiny-fdllm-a", 16, 32, 8, 4, 0.5),   # prompt of whole blocks: prefill + AR token
    ("tiny-fdllm-a", 13, 24, 8, 2, 0.3),   # prefill of one block, the tail in the first block
    ("tiny-fdllm-a", 20, 32, 8, 8, 0.9),   # one sub-block per block
    ("tiny-fdllm-b", 11, 48, 8, 4, 0.5),
    ("tiny-fdllm-b", 30, 48, 16, 4, 0.7),
    ("tiny-fdllm-a", 3, 32, 8, 4, 1.0),    # the reference's default 1: the best alone
    # (b's sharper head puts its best rows within 1e-5 of each other near 1.0: not at tau = 1)
]


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(ref.OUT, exist_ok=True)
    models = {}
    for spec in MODELS:
        models[spec[0]] = make_model(*spec)
    # B = 1 mask = the causal mask: the additive 4D mask is taken as given
    m, _, _ = models["tiny-fdllm-a"]
    ids = list(range(3, 20))
    with torch.no_grad():
        causal = m(input_ids=torch.tensor([ids])).logits[0]
    assert torch.allclose(forward(m, ids, 1), causal, atol=1e-5), "4D mask not applied"
    assert not torch.allclose(forward(m, ids, 8), causal, atol=1e-3), "4D mask ignored"
    out = []
    cases_margin = []
    for (name, P, N, B, S, tau) in CASES:
        model, mask_id, seed = models[name]
        rng = np.random.default_rng(seed + P)
        prompt = rng.integers(3, mask_id, size=P).tolist()
        gen, nfe, steps, commits, marg = generate(model, prompt, N, B, S, tau, mask_id, EOS)
        multi = sum(1 for c in commits if c > 1)
        single = sum(1 for c in commits if c == 1)
        print(f"{name} P={P} N={N} B={B} S={S} tau={tau}: {len(gen)} tokens, nfe {nfe}, "
              f"steps {steps}, commits one/several {single}/{multi}, stop {EOS in gen}, "
              f"min margin {marg:.2e}", flush=True)
        assert marg > MIN_MARGIN, f"a decision {marg:.2e} from flipping: pick another case"
        cases_margin.append(marg)
        out.append({"model": f"tests/data/ref/{name}", "prompt": prompt, "gen_length": N,
                    "block_length": B, "sub_block_length": S, "threshold": tau,
                    "mask_id": mask_id, "stop": EOS, "gen": gen, "nfe": nfe, "steps": steps,
                    "steps_one": single, "steps_several": multi})
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"generated_by": "tests/ref/gen_fast_dllm_v2_ref.py",
                   "versions": ref.VERSIONS, "cases": out}, f, indent=1)


if __name__ == "__main__":
    main()
