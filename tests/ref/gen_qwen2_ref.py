#!/usr/bin/env python3
"""gen_qwen2_ref.py — writes the HF-transformers reference files of tiny random Qwen2ForCausalLM
checkpoints, which tests/test-model-ref.c checks lazyinfer's Qwen2 forward pass against (Llama's
forward with biases on q_proj, k_proj and v_proj).

Run once, by hand, from the repository root, in the git-ignored reference venv of
gen_llama_ref.py (whose case writer, tokenizer and config rewriting this reuses):

    .venv-ref/bin/python tests/ref/gen_qwen2_ref.py      # ~10 s

What it writes (tests/ref/README.md has the details):
  tests/data/ref/tiny-qwen2-*/       two tiny random Qwen2 checkpoints (HF directories, fp32
                                     safetensors, a small byte-level BPE tokenizer.json): tied
                                     head with GQA 2, untied head with GQA 3
  tests/data/ref/<case>.json         as gen_llama_ref.py: prompt ids, top-20, 64 greedy tokens
  tests/data/ref/<case>.last.f32     the full last-position logits, float32 little-endian

Everything is float32 with eager attention on the CPU and deterministic (fixed seeds).
"""

import os
import sys

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama_ref as ref  # noqa: E402  (the shared case writer and checkpoint helpers)

# name, hidden, heads, kv heads, layers, ffn, vocab, tied, rope_theta
TINY = [
    ("tiny-qwen2-tied", 64, 4, 2, 2, 100, 320, True, 1000000.0),
    ("tiny-qwen2-untied", 96, 6, 2, 3, 150, 384, False, 10000.0),
]
BIAS_STD = 0.5  # the size of lazyinfer's synthetic biases: half a projection output's spread


def gen():
    for (name, D, H, Hkv, L, F, V, tied, theta) in TINY:
        seed = sum(map(ord, name))  # fixed per checkpoint
        torch.manual_seed(seed)
        cfg = Qwen2Config(
            hidden_size=D, num_attention_heads=H, num_key_value_heads=Hkv, num_hidden_layers=L,
            intermediate_size=F, vocab_size=V, tie_word_embeddings=tied,
            max_position_embeddings=128, rms_norm_eps=1e-6, initializer_range=0.2,
            rope_parameters={"rope_type": "default", "rope_theta": theta},
            use_sliding_window=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            attn_implementation="eager")
        model = Qwen2ForCausalLM(cfg).eval()
        n_bias = 0
        with torch.no_grad():
            for nm, p in model.named_parameters():
                # Random norm weights in [0.5, 1.5): a loader that skips a norm fails visibly.
                if nm.endswith("norm.weight"):
                    p.copy_(0.5 + torch.rand_like(p))
                # HF initialises biases to 0: random ones, or a dropped bias would go unseen.
                if nm.endswith(".bias"):
                    assert any(nm.endswith(f"{x}_proj.bias") for x in "qkv"), nm
                    p.copy_(BIAS_STD * torch.randn_like(p))
                    n_bias += 1
        assert n_bias == 3 * L, n_bias
        path, m2 = ref.save_tiny(model, name, V, theta, None)
        assert type(m2).__name__ == "Qwen2ForCausalLM", type(m2)
        sd1, sd2 = model.state_dict(), m2.state_dict()
        assert all(torch.equal(sd1[k], sd2[k]) for k in sd1), "weights changed on reload"
        files = sorted(os.listdir(path))
        size = sum(os.path.getsize(os.path.join(path, f)) for f in files)
        print(f"{name}: {files} {size / 1024:.0f} KB", flush=True)
        rng = np.random.default_rng(seed)
        for T in ref.TINY_PROMPT_LENS:
            ids = rng.integers(3, V, size=T).tolist()  # no special ids
            ref.write_case(f"{name}-t{T}", f"tests/data/ref/{name}", None, ids, m2,
                           {"generated_by": "tests/ref/gen_qwen2_ref.py"})


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    os.makedirs(ref.OUT, exist_ok=True)
    print("versions:", ref.VERSIONS, flush=True)
    gen()


if __name__ == "__main__":
    main()
