#!/usr/bin/env python3
"""gen_fuzz_seeds.py — writes the seed inputs of two fuzz targets with reference writers, so the
fuzzers start from files the C code did not produce:

  tests/fuzz/corpus/fuzz-gguf-tokenizer/     gguf.GGUFWriter: small GGUF files carrying
      tokenizer.ggml.* metadata (byte-level BPE "gpt2" vocabularies with pre = llama-bpe, smollm,
      gpt2 or none, merges, token types with control and user-defined tokens, bos/eos ids,
      add_bos_token, Llama-3 / ChatML / LLaDA chat templates; one with a tiny tensor) and one
      sentencepiece "llama" vocabulary (which the loader refuses: the refusal path is fuzzed too)
  tests/fuzz/corpus/fuzz-tokenizer-config/   tokenizer_config.json texts: chat_template as a
      string, a list of {name, template} or null, bos/eos as strings or AddedToken objects,
      add_bos_token, model_max_length 1e30 (what real configs hold)

Run from the repository root:  .venv/bin/python tests/ref/gen_fuzz_seeds.py
Deterministic (no randomness, fixed key order), so re-running gives byte-identical files.
"""
import json
import os

import gguf
import numpy as np

C = "tests/fuzz/corpus"
GT = os.path.join(C, "fuzz-gguf-tokenizer")
TC = os.path.join(C, "fuzz-tokenizer-config")

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

LLAMA3_TMPL = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
LLAMA31_TMPL = (
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}"
    "{%- endif %}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string }}"
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}")
CHATML_TMPL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLADA_TMPL = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = '<|startoftext|>' + content %}{% endif %}{{ content }}{% endfor %}")


def bytes_to_unicode():
    """GPT-2's byte → printable character map (as in HF tokenizers' ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def bl(s):
    return "".join(B2U[b] for b in s.encode("utf-8"))


def fresh_dir(d):
    """d emptied of the seeds written before, keeping regress-* (inputs that crashed a fuzzer,
    committed with their fix)."""
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(d):
        if not name.startswith("regress-"):
            os.remove(os.path.join(d, name))


def write_gguf(name, model, tokens, pre=None, types=None, scores=None, merges=None, bos=None,
               eos=None, add_bos=None, template=None, tensor=False):
    """A GGUF file carrying tokenizer.ggml.* metadata: the keys given (None: left out), always
    in this order; with tensor, one tiny tensor too."""
    w = gguf.GGUFWriter(os.path.join(GT, name), "llama")
    w.add_tokenizer_model(model)
    for add, value in ((w.add_tokenizer_pre, pre), (w.add_token_list, tokens),
                       (w.add_token_types, types), (w.add_token_scores, scores),
                       (w.add_token_merges, merges), (w.add_bos_token_id, bos),
                       (w.add_eos_token_id, eos), (w.add_add_bos_token, add_bos),
                       (w.add_chat_template, template)):
        if value is not None:
            add(value)
    if tensor:
        w.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gpt2_vocab(all_bytes, words, specials):
    """Tokens: byte characters (all 256, or those of `words`), merged words, then specials.
    Merges are built left to right for each word, so every merge's result is in the vocabulary."""
    toks, types, merges = [], [], []
    if all_bytes:
        toks = [B2U[b] for b in range(256)]
    else:
        for w in words:
            for ch in bl(w):
                if ch not in toks:
                    toks.append(ch)
    types = [NORMAL] * len(toks)
    for w in words:
        s = bl(w)
        cur = s[0]
        for ch in s[1:]:
            if cur + ch not in toks:
                merges.append(cur + " " + ch)
                toks.append(cur + ch)
                types.append(NORMAL)
            cur += ch
    for sp, ty in specials:
        toks.append(sp)
        types.append(ty)
    return toks, types, merges


def gen_gguf_tokenizer():
    fresh_dir(GT)

    # Llama-3 style: all 256 bytes, llama-bpe regex, Llama-3.1 template, add_bos.
    toks, types, merges = gpt2_vocab(
        True, [" the", " hello", "Hello", " world", "12", "'s", "\n\n"],
        [("<|begin_of_text|>", CONTROL), ("<|end_of_text|>", CONTROL),
         ("<|start_header_id|>", CONTROL), ("<|end_header_id|>", CONTROL),
         ("<|eot_id|>", CONTROL), ("<|eom_id|>", CONTROL)])
    write_gguf("llama-bpe-llama31.gguf", "gpt2", toks, pre="llama-bpe", types=types, merges=merges,
               bos=toks.index("<|begin_of_text|>"), eos=toks.index("<|eot_id|>"), add_bos=True,
               template=LLAMA31_TMPL)

    # SmolLM2 style: small vocabulary, smollm pre (individual digits), ChatML with default system.
    toks2, types2, merges2 = gpt2_vocab(
        False, ["hi", " hi", "Hello", " world", "user", "assistant", "system", "\n"],
        [("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
         ("<tool>", USER_DEFINED)])
    for d in "0123456789":
        toks2.append(d)
        types2.append(NORMAL)
    write_gguf("smollm-chatml.gguf", "gpt2", toks2, pre="smollm", types=types2, merges=merges2,
               bos=toks2.index("<|im_start|>"), eos=toks2.index("<|im_end|>"), add_bos=False,
               template=CHATML_TMPL, tensor=True)

    # GPT-2 pre, plain Llama-3 template, no token types, no bos.
    toks3, _, merges3 = gpt2_vocab(
        False, ["ab", " ab", "abc", "<|start_header_id|>"],
        [("<|start_header_id|>x", NORMAL), ("<|end_header_id|>", NORMAL), ("<|eot_id|>", NORMAL)])
    write_gguf("gpt2-llama3.gguf", "gpt2", toks3, pre="gpt2", merges=merges3, eos=len(toks3) - 1,
               template=LLAMA3_TMPL)

    # No pre key (GPT-2 default), LLaDA template with <|startoftext|> as BOS.
    toks4, types4, merges4 = gpt2_vocab(
        False, [" a", "aa", "\n\n"],
        [("<|startoftext|>", CONTROL), ("<|endoftext|>", CONTROL), ("<|start_header_id|>", CONTROL),
         ("<|end_header_id|>", CONTROL), ("<|eot_id|>", CONTROL), ("<|mdm_mask|>", CONTROL)])
    write_gguf("default-llada.gguf", "gpt2", toks4, types=types4, merges=merges4,
               bos=toks4.index("<|startoftext|>"), eos=toks4.index("<|endoftext|>"), add_bos=True,
               template=LLADA_TMPL)

    # Sentencepiece ("llama") vocabulary: scores, byte tokens. The loader refuses it
    # (LI_ERR_UNSUPPORTED); mutations of it reach the gpt2 path by changing the model name.
    sp = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in (0x0A, 0x20, 0xC3, 0xA9)] + \
        ["\u2581", "h", "i", "hi", "\u2581hi", "\u2581the"]
    spty = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 4 + [NORMAL] * 6
    write_gguf("llama-sentencepiece.gguf", "llama", sp, types=spty,
               scores=[-float(i) for i in range(len(sp))], bos=1, eos=2, add_bos=True)


def gen_tokenizer_config():
    fresh_dir(TC)
    added = lambda s: {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": False,
                       "rstrip": False, "single_word": False}
    seeds = {
        "smollm2.json": {"add_prefix_space": False, "bos_token": "<|im_start|>",
                         "chat_template": CHATML_TMPL, "clean_up_tokenization_spaces": False,
                         "eos_token": "<|im_end|>", "model_max_length": 8192,
                         "pad_token": "<|im_end|>", "tokenizer_class": "GPT2Tokenizer",
                         "unk_token": "<|endoftext|>"},
        "llama31.json": {"add_bos_token": True, "bos_token": added("<|begin_of_text|>"),
                         "chat_template": LLAMA31_TMPL, "eos_token": added("<|eot_id|>"),
                         "model_max_length": 1e30, "tokenizer_class": "PreTrainedTokenizerFast"},
        "llama3-list.json": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                             "chat_template": [{"name": "tool_use", "template": CHATML_TMPL},
                                               {"name": "default", "template": LLAMA3_TMPL}]},
        "llada.json": {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
                       "add_bos_token": True, "chat_template": LLADA_TMPL},
        "sentencepiece.json": {"add_bos_token": True, "add_eos_token": False,
                               "bos_token": added("<s>"), "eos_token": added("</s>"),
                               "unk_token": added("<unk>"), "chat_template": None,
                               "legacy": False, "model_max_length": 1e30},
        "minimal.json": {},
    }
    for name, cfg in seeds.items():
        with open(os.path.join(TC, name), "w") as f:
            json.dump(cfg, f, indent=2, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    gen_gguf_tokenizer()
    gen_tokenizer_config()
