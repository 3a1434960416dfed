// hparams.h — model hyper-parameters as the file formats describe them (HF config.json or GGUF
// metadata), independent of any backend. Parsing only: the model layer decides what to do.
#ifndef LI_HPARAMS_H
#define LI_HPARAMS_H

#include "../core/core.h"

#define LI_ROPE_MAX_PAIRS 256

typedef enum {
    LI_ROPE_NEOX,  // HF layout: pair (i, i + n_dims/2)        (rotate_half)
    LI_ROPE_GPTJ,  // interleaved: pair (2i, 2i + 1)           (GGUF llama, ggml "normal" mode)
} li_rope_layout;

typedef enum {
    LI_ROPE_SCALING_NONE,
    LI_ROPE_SCALING_LINEAR,
    LI_ROPE_SCALING_LLAMA3,
    LI_ROPE_SCALING_YARN,
} li_rope_scaling;

// What config.json / GGUF metadata say. Fields a scaling type does not use are ignored.
typedef struct {
    li_rope_layout layout;
    li_rope_scaling scaling;
    float theta;                 // rope_theta (base)
    int n_dims;                  // rotated dims per head (= Dh for all models we support)
    float factor;                // linear / llama3 / yarn
    float low_freq_factor;       // llama3
    float high_freq_factor;      // llama3
    int original_max_pos;        // llama3, yarn (original_max_position_embeddings)
    int max_pos;                 // max_position_embeddings (yarn needs it in some versions)
    float beta_fast, beta_slow;  // yarn (defaults 32, 1)
    float attention_factor;      // yarn mscale; 0 = derived from factor as HF does
    float mscale, mscale_all_dim;  // yarn (DeepSeek-style), 0 = unset
    bool yarn_no_truncate;       // yarn "truncate": false (HF default true: floor/ceil the range)
    // Per-pair divisors of the inverse frequencies (GGUF `rope_freqs.weight`, how llama.cpp's
    // converter stores Llama-3.1 scaling): w_i = w_i / freq_factors[i], applied after scaling.
    bool has_freq_factors;
    float freq_factors[LI_ROPE_MAX_PAIRS];
} li_rope_config;

// What every loader starts from before reading the file's RoPE fields: no scaling, theta 1e4,
// yarn's beta_fast 32 / beta_slow 1 (the HF defaults), n_dims rotated dims per head.
static inline void li_rope_config_default(li_rope_config *r, li_rope_layout layout, int n_dims,
                                          int max_pos) {
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->scaling = LI_ROPE_SCALING_NONE;
    r->theta = 10000.0f;
    r->n_dims = n_dims;
    r->max_pos = max_pos;
    r->beta_fast = 32.0f;
    r->beta_slow = 1.0f;
}

#define LI_MAX_EOS 8

typedef struct {
    char arch[32];         // "llama", "qwen2" or "llada" (config.json model_type /
                           // general.architecture); qwen2 runs the llama forward with qkv_bias
    char name[128];        // human-readable model name when the file has one
    int n_layer;           // L
    int n_embd;            // D
    int n_ff;              // F
    int n_head;            // H
    int n_head_kv;         // Hkv (= H when absent)
    int head_dim;          // Dh (= D / H when absent)
    int n_vocab;           // V
    int n_ctx_train;       // max_position_embeddings
    float rms_eps;
    li_rope_config rope;
    bool tied_embeddings;  // tie_word_embeddings (llama default: false; GGUF: no output.weight)
    bool attention_bias, mlp_bias;  // Llama's q/k/v/o and MLP biases: loaders reject true
    bool qkv_bias;         // a bias on q_proj, k_proj, v_proj only (Qwen2; not on o_proj, MLP)
    // LLaDA (OLMo-style config): logits *= 1/sqrt(D) (scale_logits); embeddings *= sqrt(D)
    // (input_emb_norm). Both false for Llama.
    bool scale_logits, input_emb_norm;
    // Fast-dLLM v2 block diffusion (model_type "Fast_dLLM_Qwen", a Qwen2 fine-tune decoded in
    // blocks by engine-bd.c): bd_size (config "bd_size") > 0 and the mask token's id (config
    // "mask_token_id", else the reference generate's default 151665); bd_size 0: autoregressive.
    int bd_size;
    int32_t bd_mask_id;
    int32_t bos_id;        // -1 if unknown
    int32_t eos_ids[LI_MAX_EOS];
    int n_eos;
    char torch_dtype[16];  // "bfloat16", "float32", … ("" if absent)
} li_hparams;

// Parses an HF config.json (llama family). Missing optional fields get HF's defaults; a missing
// required field, a wrong JSON type or an impossible value (negative sizes, H % Hkv != 0, …) is
// LI_ERR_FORMAT naming the file and the field.
li_status li_hf_config_load(li_hparams *hp, const char *path);

// Defaults for sampling from generation_config.json (all optional).
typedef struct {
    bool has_temperature, has_top_p, has_top_k;
    float temperature, top_p;
    int top_k;
    int32_t bos_id;  // -1 if absent
    int32_t eos_ids[LI_MAX_EOS];
    int n_eos;
} li_generation_config;
li_status li_hf_generation_config_load(li_generation_config *gc, const char *path);

#endif
