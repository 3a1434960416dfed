// weights-internal.h — weight-store helpers shared by the model loaders (model-load.c for Llama,
// llada-load.c for LLaDA): owned buffers, safetensors tensors bound to li_weight with shape and
// dtype checks, synthetic random matrices. Internal to src/model/.
#ifndef LI_WEIGHTS_INTERNAL_H
#define LI_WEIGHTS_INTERNAL_H

#include "llama.h"

// Hyper-parameters a Llama-shaped forward can run: the expected architecture, positive sizes,
// whole GQA groups, rotary dims within the head, no biases. LI_ERR_FORMAT / UNSUPPORTED naming src.
li_status li_check_hparams(const li_hparams *hp, const char *src, const char *arch);
// Records a buffer the store owns (freed by li_weight_store_free); frees p on failure.
li_status li_store_own(li_weight_store *st, void *p);
// Binds W to safetensors tensor `name` of shape (rows, cols) (rows = 1: a vector of cols).
// f32 is used in place, bf16 matrices stay bf16 when keep_bf16, anything else becomes f32.
li_status li_st_weight(li_weight_store *store, li_weight *W, const char *name, int64_t rows,
                       int64_t cols, bool keep_bf16, bool metadata_only);
// Uniform in [-a, a) with a = std * sqrt(3) (the variance of N(0, std^2)), plus mean.
void li_fill_random(float *p, int64_t n, float std, float mean, li_rng *rng);
// A random (rows, cols) weight; matrices are bf16 (rounded from the same values) when keep_bf16.
li_status li_synth_weight(li_weight_store *store, li_weight *W, int64_t rows, int64_t cols,
                          float std, float mean, li_rng *rng, bool keep_bf16, bool metadata_only);
// How a file names a Llama-shaped model's tensors. layer_fmt has one %d (the layer) and one %s
// (the per-layer name, in the order attn_norm, q, k, v, o, ffn_norm, gate, up, down); bias_fmt
// the same for the q, k, v biases (hp.qkv_bias), NULL where the format has none.
typedef struct {
    const char *tok_embd, *out_norm, *output;
    const char *layer_fmt, *bias_fmt;
    const char *layer[9];
} li_tensor_names;
extern const li_tensor_names li_names_gguf, li_names_hf_llama, li_names_hf_llada;

// Binds one weight: W gets tensor `name` of shape (rows, cols) from whatever the caller reads.
typedef li_status (*li_bind_fn)(void *ctx, li_weight *W, const char *name, int64_t rows,
                                int64_t cols);
// Binds every weight of w (tied output aliased to the embedding) through `bind`.
li_status li_bind_llama_weights(li_llama_weights *w, const li_hparams *hp,
                                const li_tensor_names *names, li_bind_fn bind, void *ctx);

// li_bind_llama_weights reading from the store's safetensors (li_st_weight per tensor).
li_status li_bind_safetensors(li_weight_store *store, li_llama_weights *w, const li_hparams *hp,
                              const li_tensor_names *names, bool keep_bf16, bool metadata_only);

// Random weights for every tensor of a Llama-shaped model (LLaDA has the same tensors): projections
// with std 1/sqrt(in) so activations stay O(1) through the layers; norms near 1 but not exactly,
// so a test notices a missing norm weight; q/k/v biases (hp.qkv_bias) of std LI_SYNTH_BIAS_STD.
// w->layers must hold hp->n_layer entries.
// Half the spread of a projection's output (std ~1): a dropped bias moves every logit visibly.
#define LI_SYNTH_BIAS_STD 0.5f
li_status li_synth_llama_weights(li_weight_store *store, li_llama_weights *w, const li_hparams *hp,
                                 li_rng *rng, bool keep_bf16, bool metadata_only);
// wq/wk/wv, w_gate/w_up and bq/bk/bv of every layer copied into one buffer each (wqkv, w_gate_up,
// bqkv), the parts becoming views into it (model-load.c); a group of mixed dtypes is left unfused.
li_status li_fuse_layer_weights(li_weight_store *st, li_llama_weights *w, int n_layer);
// Frees owned buffers and closes the files; leaves the store zeroed (device buffers excepted).
void li_weight_store_free(li_weight_store *st);
// Frees the store's device buffers (weights-device.c).
void li_weight_store_free_device(li_weight_store *st);
// Device backends: every weight of w into be's memory (matrices bf16 where the backend asks,
// norms f32; fused views and a tied head kept), host copies freed. No-op on host backends.
li_status li_weights_to_device(li_weight_store *st, li_llama_weights *w, int n_layer,
                               li_backend *be);
// Random weights of hp's shapes built in be's memory (fill_random), wqkv / w_gate_up fused.
li_status li_weights_synth_on_device(li_weight_store *st, li_llama_weights *w,
                                     const li_hparams *hp, li_backend *be, uint64_t seed);

#endif
