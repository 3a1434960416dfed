#!/usr/bin/env python3
"""gen_format_fixtures.py — writes the small interop fixtures of tests/test-formats.c with the
reference Python writers, so the C readers are checked against files they did not write:

  tests/data/formats/tiny.gguf                 gguf.GGUFWriter: llama metadata, F32, F16, BF16,
                                               Q8_0, Q4_0, Q4_1 tensors (gguf.quants.quantize)
  tests/data/formats/tiny-gguf-expected.safetensors
                                               gguf.quants.dequantize of each tiny.gguf tensor (F32)
  tests/data/formats/st-sharded/               safetensors.numpy.save_file: two shards + an
                                               index, tensors whose values the C test recomputes
  tests/fuzz/corpus/fuzz-{gguf,safetensors,hf-config}/
                                               small valid seed inputs for the fuzz targets

Run from the repository root:  .venv/bin/python tests/ref/gen_format_fixtures.py
Deterministic (fixed seed), so re-running gives byte-identical files.
"""
import json
import os
import shutil
import struct

import gguf
import numpy as np
from gguf.constants import GGMLQuantizationType as Q
from safetensors.numpy import save_file

OUT = "tests/data/formats"


def gen_gguf():
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(os.path.join(OUT, "tiny.gguf"), "llama")
    w.add_name("tiny test model")
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(32)
    w.add_rope_dimension_count(16)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(32)])
    expected = {}
    # (name, type, shape outermost first); element counts are whole blocks of 32.
    specs = [("f32.weight", Q.F32, (3, 32)), ("f16.weight", Q.F16, (2, 32)),
             ("bf16.weight", Q.BF16, (2, 32)), ("q8_0.weight", Q.Q8_0, (4, 64)),
             ("q4_0.weight", Q.Q4_0, (3, 64)), ("q4_1.weight", Q.Q4_1, (5, 32))]
    for name, qt, shape in specs:
        x = rng.standard_normal(shape).astype(np.float32)
        if qt == Q.F32:
            w.add_tensor(name, x)
            expected[name] = x
        elif qt == Q.F16:
            w.add_tensor(name, x.astype(np.float16))
            expected[name] = x.astype(np.float16).astype(np.float32)
        else:
            qd = gguf.quants.quantize(x, qt)
            w.add_tensor(name, qd, raw_dtype=qt)
            expected[name] = gguf.quants.dequantize(qd, qt).reshape(shape).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(expected, os.path.join(OUT, "tiny-gguf-expected.safetensors"))
    os.chmod(os.path.join(OUT, "tiny-gguf-expected.safetensors"), 0o644)


def st_values(n, scale, offset):
    # Values the C test recomputes: ((i * 7) % 13 - offset) * scale, exact in f16 and f32.
    return ((np.arange(n) * 7) % 13 - offset).astype(np.float32) * scale


def gen_sharded():
    d = os.path.join(OUT, "st-sharded")
    os.makedirs(d, exist_ok=True)
    shard1 = {
        "model.embed_tokens.weight": st_values(24, 0.125, 6).reshape(6, 4),
        "model.layers.0.mlp.up_proj.weight":
            st_values(15, 0.25, 3).astype(np.float16).reshape(3, 5),
        "model.layers.0.position_ids": np.arange(3, dtype=np.int64),
    }
    shard2 = {
        "model.norm.weight": st_values(4, 0.5, 2),
        "lm_head.weight": st_values(8, 1.0, 5).reshape(2, 4),
        "model.scalar": np.array(2.5, dtype=np.float32),
    }
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file(shard1, os.path.join(d, names[0]), metadata={"format": "pt"})
    save_file(shard2, os.path.join(d, names[1]), metadata={"format": "pt"})
    for n in names:
        os.chmod(os.path.join(d, n), 0o644)
    wm = {k: names[0] for k in shard1}
    wm.update({k: names[1] for k in shard2})
    total = sum(v.nbytes for v in list(shard1.values()) + list(shard2.values()))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}, f,
                  indent=2)
        f.write("\n")


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gen_corpus():
    c = "tests/fuzz/corpus"
    for d in ("fuzz-gguf", "fuzz-safetensors", "fuzz-hf-config"):
        os.makedirs(os.path.join(c, d), exist_ok=True)
    # GGUF: the gguf-py file, one with a custom alignment, one hand-built with every value type.
    shutil.copyfile(os.path.join(OUT, "tiny.gguf"), os.path.join(c, "fuzz-gguf", "tiny.gguf"))
    w = gguf.GGUFWriter(os.path.join(c, "fuzz-gguf", "align8.gguf"), "llama")
    w.add_custom_alignment(8)
    w.add_uint32("llama.block_count", 1)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    w.add_tensor("a", gguf.quants.quantize(x, Q.Q4_1), raw_dtype=Q.Q4_1)
    w.add_tensor("b", x[:3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    kv = [
        (gguf_str("u8") + struct.pack("<IB", 0, 7)), (gguf_str("i8") + struct.pack("<Ib", 1, -7)),
        (gguf_str("u16") + struct.pack("<IH", 2, 700)),
        (gguf_str("i16") + struct.pack("<Ih", 3, -700)),
        (gguf_str("u32") + struct.pack("<II", 4, 70000)),
        (gguf_str("i32") + struct.pack("<Ii", 5, -70000)),
        (gguf_str("f32") + struct.pack("<If", 6, 0.5)),
        (gguf_str("bool") + struct.pack("<IB", 7, 1)),
        (gguf_str("str") + struct.pack("<I", 8) + gguf_str("hello")),
        (gguf_str("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + gguf_str("x") +
         gguf_str("yz")),
        (gguf_str("nested") + struct.pack("<IIQ", 9, 9, 2) + struct.pack("<IQ", 4, 2) +
         struct.pack("<II", 1, 2) + struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 8, 1) +
         gguf_str("deep")),
        (gguf_str("u64") + struct.pack("<IQ", 10, 1 << 40)),
        (gguf_str("i64") + struct.pack("<Iq", 11, -(1 << 40))),
        (gguf_str("f64") + struct.pack("<Id", 12, 0.25)),
    ]
    hdr = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kv)) + b"".join(kv)
    hdr += gguf_str("t") + struct.pack("<IQQIQ", 2, 32, 2, 8, 0)  # Q8_0, ne = [32, 2]
    hdr += b"\0" * (-len(hdr) % 32)
    blk = struct.pack("<e", 0.125) + bytes(range(32))
    with open(os.path.join(c, "fuzz-gguf", "all-types.gguf"), "wb") as f:
        f.write(hdr + blk + blk)
    # safetensors: the interop files and one with many dtypes.
    for n in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        shutil.copyfile(os.path.join(OUT, "st-sharded", n), os.path.join(c, "fuzz-safetensors", n))
    save_file({"f64": np.arange(3, dtype=np.float64), "i8": np.arange(5, dtype=np.int8),
               "u8": np.arange(4, dtype=np.uint8), "b": np.array([True, False]),
               "f16": np.ones((2, 3), dtype=np.float16), "i32": np.zeros((0, 4), dtype=np.int32),
               "u16": np.arange(2, dtype=np.uint16)},
              os.path.join(c, "fuzz-safetensors", "dtypes.safetensors"),
              metadata={"format": "np"})
    # config.json / generation_config.json.
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
            "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-05, "rope_theta": 100000.0, "tie_word_embeddings": True,
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
            "rope_scaling": None, "attention_bias": False, "mlp_bias": False, "head_dim": 64}
    cfgs = {
        "smollm2.json": base,
        "llama3.json": dict(base, eos_token_id=[1, 2, 3], rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        "yarn.json": dict(base, rope_scaling={
            "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
            "beta_fast": 32, "beta_slow": 1, "attention_factor": 1.1, "mscale": 1,
            "mscale_all_dim": 0}),
        "linear.json": dict(base, rope_scaling={"rope_type": "linear", "factor": 2}),
        "rope-parameters.json": dict({k: v for k, v in base.items() if k != "rope_scaling"},
                                     rope_parameters={"rope_type": "default",
                                                      "rope_theta": 500000.0}),
        "llada.json": {"architectures": ["LLaDAModelLM"], "model_type": "llada",
                       "d_model": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 32,
                       "mlp_hidden_size": 12288, "vocab_size": 126464,
                       "embedding_size": 126464, "max_sequence_length": 4096,
                       "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "weight_tying": False,
                       "include_bias": False, "alibi": False, "rope": True,
                       "layer_norm_type": "rms", "eos_token_id": 126081},
        "generation.json": {"bos_token_id": 1, "eos_token_id": [2, 3], "temperature": 0.6,
                            "top_p": 0.9, "top_k": 50, "do_sample": True},
    }
    for n, v in cfgs.items():
        with open(os.path.join(c, "fuzz-hf-config", n), "w") as f:
            json.dump(v, f, indent=1)
    for root, _, files in os.walk(c):
        for n in files:
            os.chmod(os.path.join(root, n), 0o644)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    gen_gguf()
    gen_sharded()
    gen_corpus()
