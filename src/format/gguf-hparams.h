// gguf-hparams.h — model hyper-parameters from GGUF metadata (llama and qwen2 architectures).
//
// Reads general.architecture ("llama" or "qwen2", the prefix <arch> of the keys below),
// <arch>.{block_count, embedding_length, feed_forward_length, attention.head_count,
// attention.head_count_kv, attention.key_length, context_length, vocab_size (or the length of
// tokenizer.ggml.tokens), attention.layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base,
// rope.scaling.{type,factor,original_context_length}}, general.name and
// tokenizer.ggml.{bos,eos,eot,eom}_token_id. rope.layout is LI_ROPE_GPTJ for llama (llama.cpp's
// converter permutes the Q/K rows of llama models for interleaved pairs) and LI_ROPE_NEOX for
// qwen2 (not permuted; llama.cpp's rope type NEOX); qwen2 sets qkv_bias (tensors
// blk.N.attn_{q,k,v}.bias). tied_embeddings is true when there is no output.weight tensor.
// Implemented in gguf.c; tested by tests/test-formats.c and, for qwen2, tests/test-model-ref.c
// (a GGUF written from the tiny Qwen2 checkpoints against HF's logits).
#ifndef LI_GGUF_HPARAMS_H
#define LI_GGUF_HPARAMS_H

#include "gguf.h"
#include "hparams.h"

// LI_ERR_FORMAT for a missing required key, a wrong type or an impossible value (naming the
// file and the key); LI_ERR_UNSUPPORTED for another architecture or rope scaling type.
li_status li_gguf_hparams(const li_gguf *g, li_hparams *hp);

#endif
