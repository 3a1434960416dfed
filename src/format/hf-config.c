// hf-config.c — HF config.json (llama, qwen2, llada) and generation_config.json into li_hparams /
// li_generation_config, with jansson; plus li_hparams_validate, the sanity check shared with the
// GGUF reader.
//
// Field names, defaults and checks:
//   llama: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size
//          (required); num_key_value_heads (= heads), head_dim (= hidden / heads),
//          max_position_embeddings (2048), rms_norm_eps (1e-6), rope_theta (10000),
//          tie_word_embeddings (false), attention_bias, mlp_bias (false): LlamaConfig's defaults.
//   qwen2: the same fields (Qwen2Config's defaults differ in max_position_embeddings: 32768);
//          qkv_bias always (Qwen2Attention's q/k/v projections have one; attention_bias and
//          mlp_bias are not read, as there). Sliding-window attention (use_sliding_window true,
//          or a layer_types entry "sliding_attention") is refused with the key named.
//   Fast_dLLM_Qwen (Fast-dLLM v2; architectures Fast_dLLM_QwenForCausalLM): qwen2's fields, plus
//          bd_size (32, as sglang's getattr(config, "bd_size", 32)) and mask_token_id (absent:
//          151665, the default of the reference generate's mask_id; must be < vocab_size).
//   llada: the defaults of the reference's config class (configuration_llada.py ModelConfig, which
//          LLaDAConfig starts from): d_model 768, n_heads 12, n_layers 12, mlp_hidden_size or
//          mlp_ratio (4) x d_model, n_kv_heads or multi_query_attention (1 kv head) or n_heads,
//          embedding_size (absent: 50304; null: vocab_size, 50257) >= vocab_size, the logits'
//          width; max_sequence_length 1024, rms_norm_eps 1e-5 (layer_norm_eps is not read, as
//          there), rope_theta 10000 (rope_scaling is not read, as there), weight_tying true,
//          scale_logits and input_emb_norm false, include_bias / include_qkv_bias false.
//          Refused with the key named (LI_ERR_UNSUPPORTED) unless as LLaDA-8B has them:
//          block_type llama (default sequential), rope true (default false), alibi false,
//          layer_norm_type rms (default "default"), layer_norm_with_affine true,
//          bias_for_layer_norm false / null, activation_type silu (default swiglu),
//          attention_layer_norm false; input_emb_norm with weight_tying (the embedding would need
//          a second, scaled copy).
//   rope_scaling: null or {"rope_type" | "type": default | linear | llama3 | yarn, ...}; newer
//          transformers' "rope_parameters" (same keys plus rope_theta) is read when present.
// A JSON null counts as absent. A wrong JSON type or an impossible value is LI_ERR_FORMAT naming
// the file and the field; an unknown model_type or rope type is LI_ERR_UNSUPPORTED naming it.
// Not here: deciding whether the model layer can run what the config describes (biases, …).
// Tested by tests/test-formats.c, fuzzed by tests/fuzz/fuzz-hf-config.c.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hf-config.h"
#include "json-type.h"

#define MAX_CONFIG_BYTES (16u << 20)

// Limits far above any real model and low enough that products of them cannot overflow the
// int64 arithmetic the model layer does with them.
#define LIM_SIZE (1 << 20)     // D, F, V, Dh
#define LIM_LAYERS 4096
#define LIM_HEADS 4096
#define LIM_CTX (1 << 24)

// The value of `key` in `obj`, NULL when absent or null. `key` may carry the path of `obj` for
// messages ("rope_scaling.factor"): only the part after the last '.' is looked up.
static json_t *field(json_t *obj, const char *key) {
    const char *dot = strrchr(key, '.');
    json_t *v = json_object_get(obj, dot ? dot + 1 : key);
    return v && !json_is_null(v) ? v : NULL;
}

static li_status missing(const char *file, const char *key) {
    return li_error_set(LI_ERR_FORMAT, "%s: missing required field '%s'", file, key);
}

static li_status wrong(const char *file, const char *key, const char *want, const json_t *v) {
    return li_error_set(LI_ERR_FORMAT, "%s: field '%s' must be %s, not %s", file, key, want,
                        li_json_type_name(v));
}

// Integer field in [lo, hi]. Absent: an error when `req`, else *out is left as it is.
static li_status get_int(const char *file, json_t *obj, const char *key, bool req, int64_t lo,
                         int64_t hi, int *out) {
    json_t *v = field(obj, key);
    if (!v) return req ? missing(file, key) : LI_OK;
    if (!json_is_integer(v)) return wrong(file, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return li_error_set(LI_ERR_FORMAT, "%s: field '%s' = %lld is out of range [%lld, %lld]",
                            file, key, (long long)x, (long long)lo, (long long)hi);
    *out = (int)x;
    return LI_OK;
}

// Number field (integer or real) that fits a finite float. Sets *present when given.
static li_status get_float(const char *file, json_t *obj, const char *key, bool req, float *out,
                           bool *present) {
    json_t *v = field(obj, key);
    if (present) *present = v != NULL;
    if (!v) return req ? missing(file, key) : LI_OK;
    if (!json_is_number(v)) return wrong(file, key, "a number", v);
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) > 3.0e38)
        return li_error_set(LI_ERR_FORMAT, "%s: field '%s' = %g does not fit a float", file, key,
                            d);
    *out = (float)d;
    return LI_OK;
}

static li_status get_bool(const char *file, json_t *obj, const char *key, bool *out) {
    json_t *v = field(obj, key);
    if (!v) return LI_OK;
    if (!json_is_boolean(v)) return wrong(file, key, "true or false", v);
    *out = json_is_true(v);
    return LI_OK;
}

// String field copied into dst[cap]; too long is an error when `strict`, else truncated.
static li_status get_str(const char *file, json_t *obj, const char *key, char *dst, size_t cap,
                         bool strict) {
    json_t *v = field(obj, key);
    if (!v) return LI_OK;
    if (!json_is_string(v)) return wrong(file, key, "a string", v);
    size_t n = json_string_length(v);
    if (n >= cap) {
        if (strict)
            return li_error_set(LI_ERR_FORMAT, "%s: field '%s' is too long (%zu bytes, at most "
                                "%zu)", file, key, n, cap - 1);
        n = cap - 1;
    }
    memcpy(dst, json_string_value(v), n);
    dst[n] = 0;
    return LI_OK;
}

static li_status token_id(const char *file, const char *key, json_t *v, int32_t *out) {
    if (!json_is_integer(v)) return wrong(file, key, "an integer or a list of integers", v);
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX)
        return li_error_set(LI_ERR_FORMAT, "%s: field '%s' holds token id %lld (out of range)",
                            file, key, (long long)x);
    *out = (int32_t)x;
    return LI_OK;
}

// eos_token_id: one id or a list of up to LI_MAX_EOS ids. Absent: *n = 0.
static li_status get_ids(const char *file, json_t *obj, const char *key, int32_t *ids, int *n) {
    json_t *v = field(obj, key);
    *n = 0;
    if (!v) return LI_OK;
    if (!json_is_array(v)) {
        LI_TRY(token_id(file, key, v, &ids[0]));
        *n = 1;
        return LI_OK;
    }
    if (json_array_size(v) > LI_MAX_EOS)
        return li_error_set(LI_ERR_FORMAT, "%s: field '%s' lists %zu token ids (at most %d)", file,
                            key, json_array_size(v), LI_MAX_EOS);
    for (size_t i = 0; i < json_array_size(v); i++)
        LI_TRY(token_id(file, key, json_array_get(v, i), &ids[(*n)++]));
    return LI_OK;
}

static li_status get_bos(const char *file, json_t *obj, int32_t *bos) {
    json_t *v = field(obj, "bos_token_id");
    *bos = -1;
    return v ? token_id(file, "bos_token_id", v, bos) : LI_OK;
}

static li_status load_json(const char *json, size_t len, const char *file, json_t **root) {
    json_error_t err;
    *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!*root)
        return li_error_set(LI_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", file,
                            err.line, err.column, err.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return li_error_set(LI_ERR_FORMAT, "%s: the top level must be a JSON object", file);
    }
    return LI_OK;
}

// rope_scaling / rope_parameters object (`key` names it in messages).
static li_status parse_rope_scaling(const char *file, const char *key, json_t *rs,
                                    li_hparams *hp) {
    li_rope_config *r = &hp->rope;
    char f[96];
    if (!json_is_object(rs)) return wrong(file, key, "an object or null", rs);
#define F(name) (snprintf(f, sizeof f, "%s.%s", key, name), f)
    json_t *t = field(rs, F("rope_type"));
    if (!t) t = field(rs, F("type"));
    if (!t) return missing(file, F("rope_type"));
    if (!json_is_string(t)) return wrong(file, f, "a string", t);
    const char *type = json_string_value(t);
    if (strcmp(type, "default") == 0) {
        r->scaling = LI_ROPE_SCALING_NONE;
    } else if (strcmp(type, "linear") == 0) {
        r->scaling = LI_ROPE_SCALING_LINEAR;
        LI_TRY(get_float(file, rs, F("factor"), true, &r->factor, NULL));
    } else if (strcmp(type, "llama3") == 0) {
        r->scaling = LI_ROPE_SCALING_LLAMA3;
        LI_TRY(get_float(file, rs, F("factor"), true, &r->factor, NULL));
        LI_TRY(get_float(file, rs, F("low_freq_factor"), true, &r->low_freq_factor, NULL));
        LI_TRY(get_float(file, rs, F("high_freq_factor"), true, &r->high_freq_factor, NULL));
        LI_TRY(get_int(file, rs, F("original_max_position_embeddings"), true, 1, LIM_CTX,
                       &r->original_max_pos));
    } else if (strcmp(type, "yarn") == 0) {
        r->scaling = LI_ROPE_SCALING_YARN;
        LI_TRY(get_float(file, rs, F("factor"), true, &r->factor, NULL));
        LI_TRY(get_float(file, rs, F("beta_fast"), false, &r->beta_fast, NULL));
        LI_TRY(get_float(file, rs, F("beta_slow"), false, &r->beta_slow, NULL));
        LI_TRY(get_float(file, rs, F("attention_factor"), false, &r->attention_factor, NULL));
        LI_TRY(get_float(file, rs, F("mscale"), false, &r->mscale, NULL));
        LI_TRY(get_float(file, rs, F("mscale_all_dim"), false, &r->mscale_all_dim, NULL));
        bool truncate = true;
        LI_TRY(get_bool(file, rs, F("truncate"), &truncate));
        r->yarn_no_truncate = !truncate;
        r->original_max_pos = r->max_pos;
        LI_TRY(get_int(file, rs, F("original_max_position_embeddings"), false, 1, LIM_CTX,
                       &r->original_max_pos));
    } else {
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: %s type '%.64s' is not supported (default, "
                            "linear, llama3, yarn)", file, key, type);
    }
#undef F
    return LI_OK;
}

// model_type, or the architecture named by architectures[0] when model_type is absent.
static li_status model_type(const char *file, json_t *root, char *arch, size_t cap) {
    json_t *mt = field(root, "model_type");
    if (mt) {
        if (!json_is_string(mt)) return wrong(file, "model_type", "a string", mt);
        const char *s = json_string_value(mt);
        if (strcmp(s, "Fast_dLLM_Qwen") == 0) {
            snprintf(arch, cap, "fast_dllm_v2");
            return LI_OK;
        }
        if (strcmp(s, "llama") != 0 && strcmp(s, "qwen2") != 0 && strcmp(s, "llada") != 0)
            return li_error_set(LI_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported "
                                "(llama, qwen2, llada, Fast_dLLM_Qwen)", file, s);
        snprintf(arch, cap, "%s", s);
        return LI_OK;
    }
    json_t *a = field(root, "architectures");
    json_t *a0 = json_is_array(a) ? json_array_get(a, 0) : NULL;
    if (a0 && json_is_string(a0)) {
        const char *s = json_string_value(a0);
        if (strcmp(s, "LlamaForCausalLM") == 0) {
            snprintf(arch, cap, "llama");
            return LI_OK;
        }
        if (strcmp(s, "Qwen2ForCausalLM") == 0) {
            snprintf(arch, cap, "qwen2");
            return LI_OK;
        }
        if (strcmp(s, "LLaDAModelLM") == 0) {
            snprintf(arch, cap, "llada");
            return LI_OK;
        }
        if (strcmp(s, "Fast_dLLM_QwenForCausalLM") == 0) {
            snprintf(arch, cap, "fast_dllm_v2");
            return LI_OK;
        }
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: architecture '%.64s' is not supported "
                            "(LlamaForCausalLM, Qwen2ForCausalLM, LLaDAModelLM, "
                            "Fast_dLLM_QwenForCausalLM)", file, s);
    }
    return missing(file, "model_type");
}

// A boolean LLaDA switch that must have one value: LI_ERR_UNSUPPORTED naming it otherwise.
static li_status want_bool(const char *file, json_t *root, const char *key, bool dflt, bool want) {
    bool v = dflt;
    LI_TRY(get_bool(file, root, key, &v));
    if (v != want)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: LLaDA with %s = %s%s is not supported (only "
                            "%s)", file, key, v ? "true" : "false",
                            field(root, key) ? "" : " (the reference's default when absent)",
                            want ? "true" : "false");
    return LI_OK;
}

// A string LLaDA switch that must be `want`.
static li_status want_str(const char *file, json_t *root, const char *key, const char *dflt,
                          const char *want) {
    char v[32];
    snprintf(v, sizeof v, "%s", dflt);
    LI_TRY(get_str(file, root, key, v, sizeof v, false));
    if (strcmp(v, want) != 0)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: LLaDA with %s '%s'%s is not supported (only "
                            "'%s')", file, key, v,
                            field(root, key) ? "" : " (the reference's default when absent)",
                            want);
    return LI_OK;
}

// The LLaDA (OLMo-style) config.json: every key the reference's modelling code reads, with the
// reference's defaults; what the model layer cannot run is refused by name (see the file top).
static li_status parse_llada(const char *file, json_t *root, li_hparams *hp) {
    hp->n_embd = 768, hp->n_head = 12, hp->n_layer = 12;
    LI_TRY(get_int(file, root, "d_model", false, 1, LIM_SIZE, &hp->n_embd));
    LI_TRY(get_int(file, root, "n_heads", false, 1, LIM_HEADS, &hp->n_head));
    LI_TRY(get_int(file, root, "n_layers", false, 1, LIM_LAYERS, &hp->n_layer));
    if (hp->n_embd % hp->n_head != 0)
        return li_error_set(LI_ERR_FORMAT, "%s: d_model = %d is not a multiple of n_heads = %d",
                            file, hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    // effective_n_kv_heads
    json_t *mq = field(root, "multi_query_attention");
    if (mq && !json_is_boolean(mq)) return wrong(file, "multi_query_attention", "true or false", mq);
    hp->n_head_kv = mq && json_is_true(mq) ? 1 : hp->n_head;
    if (field(root, "n_kv_heads")) {
        LI_TRY(get_int(file, root, "n_kv_heads", false, 1, LIM_HEADS, &hp->n_head_kv));
        if (mq && hp->n_head_kv != (json_is_true(mq) ? 1 : hp->n_head))
            return li_error_set(LI_ERR_FORMAT, "%s: n_kv_heads = %d contradicts "
                                "multi_query_attention = %s", file, hp->n_head_kv,
                                json_is_true(mq) ? "true" : "false");
    }
    if (field(root, "mlp_hidden_size")) {
        LI_TRY(get_int(file, root, "mlp_hidden_size", false, 1, LIM_SIZE, &hp->n_ff));
    } else {
        int ratio = 4;
        LI_TRY(get_int(file, root, "mlp_ratio", false, 1, LIM_SIZE, &ratio));
        if ((int64_t)ratio * hp->n_embd > LIM_SIZE)
            return li_error_set(LI_ERR_FORMAT, "%s: mlp_ratio %d x d_model %d is too large", file,
                                ratio, hp->n_embd);
        hp->n_ff = ratio * hp->n_embd;
    }
    int vocab = 50257;
    LI_TRY(get_int(file, root, "vocab_size", false, 1, LIM_SIZE, &vocab));
    hp->n_vocab = json_object_get(root, "embedding_size") ? vocab : 50304;  // (null: vocab_size)
    LI_TRY(get_int(file, root, "embedding_size", false, 1, LIM_SIZE, &hp->n_vocab));
    if (hp->n_vocab < vocab)
        return li_error_set(LI_ERR_FORMAT, "%s: embedding_size %d is smaller than vocab_size %d",
                            file, hp->n_vocab, vocab);
    hp->n_ctx_train = 1024;
    LI_TRY(get_int(file, root, "max_sequence_length", false, 1, LIM_CTX, &hp->n_ctx_train));
    hp->rms_eps = 1e-5f;
    LI_TRY(get_float(file, root, "rms_norm_eps", false, &hp->rms_eps, NULL));
    hp->tied_embeddings = true;
    LI_TRY(get_bool(file, root, "weight_tying", &hp->tied_embeddings));
    bool b = false, qkv = false;
    LI_TRY(get_bool(file, root, "include_bias", &b));
    LI_TRY(get_bool(file, root, "include_qkv_bias", &qkv));
    hp->attention_bias = b || qkv;  // (refused by the model layer, naming biases)
    hp->mlp_bias = b;
    LI_TRY(want_str(file, root, "block_type", "sequential", "llama"));
    LI_TRY(want_bool(file, root, "rope", false, true));
    LI_TRY(want_bool(file, root, "alibi", false, false));
    LI_TRY(want_str(file, root, "layer_norm_type", "default", "rms"));
    LI_TRY(want_bool(file, root, "layer_norm_with_affine", true, true));
    LI_TRY(want_bool(file, root, "bias_for_layer_norm", b, false));  // (null: include_bias)
    LI_TRY(want_str(file, root, "activation_type", "swiglu", "silu"));
    LI_TRY(want_bool(file, root, "attention_layer_norm", false, false));
    LI_TRY(get_bool(file, root, "scale_logits", &hp->scale_logits));
    LI_TRY(get_bool(file, root, "input_emb_norm", &hp->input_emb_norm));
    if (hp->input_emb_norm && hp->tied_embeddings)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: LLaDA with input_emb_norm = true and "
                            "weight_tying = true%s is not supported", file,
                            field(root, "weight_tying") ? "" : " (the default when absent)");
    return LI_OK;
}

// Qwen2's sliding-window attention: refused (every layer here attends to the whole context).
static li_status refuse_sliding_window(const char *file, json_t *root) {
    bool on = false;
    LI_TRY(get_bool(file, root, "use_sliding_window", &on));
    if (on)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: use_sliding_window = true is not supported "
                            "(sliding-window attention; Qwen2 checkpoints ship it false)", file);
    json_t *lt = field(root, "layer_types");
    if (lt && !json_is_array(lt)) return wrong(file, "layer_types", "a list", lt);
    for (size_t i = 0; lt && i < json_array_size(lt); i++) {
        json_t *e = json_array_get(lt, i);
        if (!json_is_string(e)) return wrong(file, "layer_types", "a list of strings", e);
        if (strcmp(json_string_value(e), "full_attention") != 0)
            return li_error_set(LI_ERR_UNSUPPORTED, "%s: layer_types[%zu] = '%.64s' is not "
                                "supported (only full_attention)", file, i, json_string_value(e));
    }
    return LI_OK;
}

// config.json's root object into hp; file names it in messages.
static li_status parse_config(li_hparams *hp, const char *file, json_t *root) {
    LI_TRY(model_type(file, root, hp->arch, sizeof hp->arch));
    bool llada = strcmp(hp->arch, "llada") == 0;
    bool fast_dllm = strcmp(hp->arch, "fast_dllm_v2") == 0;
    hp->bd_mask_id = -1;
    if (fast_dllm) {  // a Qwen2 (the same weights and forward) decoded by blocks: engine-bd.c
        snprintf(hp->arch, sizeof hp->arch, "qwen2");
        hp->bd_size = 32;
        LI_TRY(get_int(file, root, "bd_size", false, 1, 4096, &hp->bd_size));
        hp->bd_mask_id = 151665;  // the reference generate's mask_id default
        LI_TRY(get_int(file, root, "mask_token_id", false, 0, INT32_MAX, &hp->bd_mask_id));
    }

    LI_TRY(get_str(file, root, "_name_or_path", hp->name, sizeof hp->name, false));
    if (llada) {
        LI_TRY(parse_llada(file, root, hp));
        goto ids;
    }
    LI_TRY(get_int(file, root, "hidden_size", true, 1, LIM_SIZE, &hp->n_embd));
    LI_TRY(get_int(file, root, "intermediate_size", true, 1, LIM_SIZE, &hp->n_ff));
    LI_TRY(get_int(file, root, "num_hidden_layers", true, 1, LIM_LAYERS, &hp->n_layer));
    LI_TRY(get_int(file, root, "num_attention_heads", true, 1, LIM_HEADS, &hp->n_head));
    hp->n_head_kv = hp->n_head;
    LI_TRY(get_int(file, root, "num_key_value_heads", false, 1, LIM_HEADS, &hp->n_head_kv));
    if (hp->n_embd % hp->n_head != 0 && !field(root, "head_dim"))
        return li_error_set(LI_ERR_FORMAT, "%s: hidden_size = %d is not a multiple of "
                            "num_attention_heads = %d (and there is no head_dim)", file,
                            hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    LI_TRY(get_int(file, root, "head_dim", false, 1, LIM_SIZE, &hp->head_dim));
    LI_TRY(get_int(file, root, "vocab_size", true, 1, LIM_SIZE, &hp->n_vocab));
    bool qwen2 = strcmp(hp->arch, "qwen2") == 0;
    hp->n_ctx_train = qwen2 ? 32768 : 2048;
    LI_TRY(get_int(file, root, "max_position_embeddings", false, 1, LIM_CTX, &hp->n_ctx_train));
    hp->rms_eps = 1e-6f;
    LI_TRY(get_float(file, root, "rms_norm_eps", false, &hp->rms_eps, NULL));
    LI_TRY(get_bool(file, root, "tie_word_embeddings", &hp->tied_embeddings));
    if (qwen2) {
        hp->qkv_bias = true;  // HF: nn.Linear(..., bias=True) for q_proj, k_proj, v_proj
        LI_TRY(refuse_sliding_window(file, root));
    } else {
        LI_TRY(get_bool(file, root, "attention_bias", &hp->attention_bias));
        LI_TRY(get_bool(file, root, "mlp_bias", &hp->mlp_bias));
    }
ids:
    LI_TRY(get_bos(file, root, &hp->bos_id));
    LI_TRY(get_ids(file, root, "eos_token_id", hp->eos_ids, &hp->n_eos));
    LI_TRY(get_str(file, root, "torch_dtype", hp->torch_dtype, sizeof hp->torch_dtype, true));
    if (!hp->torch_dtype[0])  // transformers >= 4.56 writes "dtype"
        LI_TRY(get_str(file, root, "dtype", hp->torch_dtype, sizeof hp->torch_dtype, true));
    if (fast_dllm && hp->bd_mask_id >= hp->n_vocab)
        return li_error_set(LI_ERR_FORMAT, "%s: mask_token_id = %d (absent: 151665) is not "
                            "below vocab_size = %d", file, hp->bd_mask_id, hp->n_vocab);

    li_rope_config *r = &hp->rope;
    // HF checkpoints rotate halves (rotate_half)
    li_rope_config_default(r, LI_ROPE_NEOX, hp->head_dim, hp->n_ctx_train);
    LI_TRY(get_float(file, root, "rope_theta", false, &r->theta, NULL));
    // (LLaDA's RotaryEmbedding reads rope_theta only: rope_scaling / rope_parameters unused)
    json_t *rp = llada ? NULL : field(root, "rope_parameters");
    if (rp && json_is_object(rp))
        LI_TRY(get_float(file, rp, "rope_theta", false, &r->theta, NULL));
    json_t *rs = llada ? NULL : field(root, "rope_scaling");
    if (rs) {
        LI_TRY(parse_rope_scaling(file, "rope_scaling", rs, hp));
    } else if (rp) {
        LI_TRY(parse_rope_scaling(file, "rope_parameters", rp, hp));
    }
    return li_hparams_validate(hp, file, false);
}

// generation_config.json's root object into gc; file names it in messages.
static li_status parse_generation_config(li_generation_config *gc, const char *file,
                                         json_t *root) {
    LI_TRY(get_float(file, root, "temperature", false, &gc->temperature, &gc->has_temperature));
    LI_TRY(get_float(file, root, "top_p", false, &gc->top_p, &gc->has_top_p));
    gc->has_top_k = field(root, "top_k") != NULL;
    LI_TRY(get_int(file, root, "top_k", false, 0, INT32_MAX, &gc->top_k));
    LI_TRY(get_bos(file, root, &gc->bos_id));
    LI_TRY(get_ids(file, root, "eos_token_id", gc->eos_ids, &gc->n_eos));
    if (gc->has_temperature && gc->temperature < 0)
        return li_error_set(LI_ERR_FORMAT, "%s: field 'temperature' = %g is negative", file,
                            gc->temperature);
    if (gc->has_top_p && !(gc->top_p >= 0 && gc->top_p <= 1))
        return li_error_set(LI_ERR_FORMAT, "%s: field 'top_p' = %g is outside [0, 1]", file,
                            gc->top_p);
    return LI_OK;
}

// Parses json (len bytes) into hp (config.json) or else gc (generation_config.json); file names
// it in messages.
static li_status parse_json(const char *json, size_t len, const char *file, li_hparams *hp,
                            li_generation_config *gc) {
    json_t *root = NULL;
    LI_TRY(load_json(json, len, file, &root));
    li_status st = hp ? parse_config(hp, file, root) : parse_generation_config(gc, file, root);
    json_decref(root);
    return st;
}

li_status li_hf_config_parse(li_hparams *hp, const char *json, size_t len, const char *name) {
    LI_ASSERT(hp && (json || len == 0));
    memset(hp, 0, sizeof *hp);
    hp->bos_id = -1;
    return parse_json(json, len, name ? name : "config.json", hp, NULL);
}

li_status li_hf_generation_config_parse(li_generation_config *gc, const char *json, size_t len,
                                        const char *name) {
    LI_ASSERT(gc && (json || len == 0));
    memset(gc, 0, sizeof *gc);
    gc->bos_id = -1;
    return parse_json(json, len, name ? name : "generation_config.json", NULL, gc);
}

// Reads path (at most MAX_CONFIG_BYTES) and parses it into hp (config.json) or else gc
// (generation_config.json).
static li_status load_file(const char *path, li_hparams *hp, li_generation_config *gc) {
    char *text = NULL;
    size_t len = 0;
    LI_TRY(li_file_read_all(path, &text, &len, MAX_CONFIG_BYTES));
    li_status st = hp ? li_hf_config_parse(hp, text, len, path)
                      : li_hf_generation_config_parse(gc, text, len, path);
    li_free(text);
    return st;
}

li_status li_hf_config_load(li_hparams *hp, const char *path) {
    LI_ASSERT(hp);
    return load_file(path, hp, NULL);
}

li_status li_hf_generation_config_load(li_generation_config *gc, const char *path) {
    LI_ASSERT(gc);
    return load_file(path, NULL, gc);
}

// ---- validation -----------------------------------------------------------------------------

// What each li_hparams field is called in the file it came from, for messages.
typedef struct {
    const char *layers, *embd, *ff, *vocab, *heads, *heads_kv, *head_dim, *ctx, *eps, *theta,
        *rope_dims, *scaling, *orig_ctx;
} hp_names;

static const hp_names names_llama = {
    "num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size",
    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "head_dim", "rope_scaling",
    "rope_scaling.original_max_position_embeddings"};
static const hp_names names_llada = {
    "n_layers", "d_model", "mlp_hidden_size", "vocab_size", "n_heads", "n_kv_heads",
    "d_model / n_heads", "max_sequence_length", "rms_norm_eps", "rope_theta", "d_model / n_heads",
    "rope_scaling", "rope_scaling.original_max_position_embeddings"};
static const hp_names names_gguf = {
    "llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
    "llama.vocab_size", "llama.attention.head_count", "llama.attention.head_count_kv",
    "llama.attention.key_length", "llama.context_length",
    "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base",
    "llama.rope.dimension_count", "llama.rope.scaling",
    "llama.rope.scaling.original_context_length"};

static li_status bad_int(const char *name, const char *field, int v, const char *why) {
    return li_error_set(LI_ERR_FORMAT, "%s: %s = %d %s", name, field, v, why);
}

li_status li_hparams_validate(const li_hparams *hp, const char *name, bool from_gguf) {
    const li_rope_config *r = &hp->rope;
    const hp_names *f = from_gguf ? &names_gguf
                        : strcmp(hp->arch, "llada") == 0 ? &names_llada : &names_llama;
    if (hp->n_layer < 1 || hp->n_layer > LIM_LAYERS)
        return bad_int(name, f->layers, hp->n_layer, "is out of range [1, 4096]");
    if (hp->n_embd < 1 || hp->n_embd > LIM_SIZE)
        return bad_int(name, f->embd, hp->n_embd, "is out of range [1, 2^20]");
    if (hp->n_ff < 1 || hp->n_ff > LIM_SIZE)
        return bad_int(name, f->ff, hp->n_ff, "is out of range [1, 2^20]");
    if (hp->n_vocab < 1 || hp->n_vocab > LIM_SIZE)
        return bad_int(name, f->vocab, hp->n_vocab, "is out of range [1, 2^20]");
    if (hp->n_head < 1 || hp->n_head > LIM_HEADS)
        return bad_int(name, f->heads, hp->n_head, "is out of range [1, 4096]");
    if (hp->n_head_kv < 1 || hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return li_error_set(LI_ERR_FORMAT, "%s: %s = %d does not divide %s = %d", name,
                            f->heads_kv, hp->n_head_kv, f->heads, hp->n_head);
    if (hp->head_dim < 2 || hp->head_dim > 1024 || hp->head_dim % 2 != 0)
        return bad_int(name, f->head_dim, hp->head_dim, "must be even and in [2, 1024]");
    if (hp->n_ctx_train < 1 || hp->n_ctx_train > LIM_CTX)
        return bad_int(name, f->ctx, hp->n_ctx_train, "is out of range [1, 2^24]");
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return li_error_set(LI_ERR_FORMAT, "%s: %s = %g is not in (0, 1)", name, f->eps,
                            hp->rms_eps);
    if (!(r->theta > 0 && isfinite(r->theta)))
        return li_error_set(LI_ERR_FORMAT, "%s: %s = %g is not positive", name, f->theta,
                            r->theta);
    if (r->n_dims < 2 || r->n_dims > hp->head_dim || r->n_dims % 2 != 0)
        return bad_int(name, f->rope_dims, r->n_dims, "must be even and at most the head dim");
    if (r->scaling != LI_ROPE_SCALING_NONE && !(r->factor > 0))
        return li_error_set(LI_ERR_FORMAT, "%s: %s factor %g is not positive", name, f->scaling,
                            r->factor);
    if (r->scaling == LI_ROPE_SCALING_LLAMA3 &&
        !(r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor))
        return li_error_set(LI_ERR_FORMAT, "%s: %s (llama3) needs 0 < low_freq_factor (%g) < "
                            "high_freq_factor (%g)", name, f->scaling, r->low_freq_factor,
                            r->high_freq_factor);
    if ((r->scaling == LI_ROPE_SCALING_LLAMA3 || r->scaling == LI_ROPE_SCALING_YARN) &&
        (r->original_max_pos < 1 || r->original_max_pos > LIM_CTX))
        return bad_int(name, f->orig_ctx, r->original_max_pos, "is out of range [1, 2^24]");
    if (r->scaling == LI_ROPE_SCALING_YARN &&
        !(r->beta_fast > 0 && r->beta_slow > 0 && r->attention_factor >= 0))
        return li_error_set(LI_ERR_FORMAT, "%s: %s (yarn) needs positive beta_fast (%g) and "
                            "beta_slow (%g) and attention_factor >= 0 (%g)", name, f->scaling,
                            r->beta_fast, r->beta_slow, r->attention_factor);
    const char *bos = from_gguf ? "tokenizer.ggml.bos_token_id" : "bos_token_id";
    const char *eos = from_gguf ? "tokenizer.ggml.eos_token_id" : "eos_token_id";
    if (hp->bos_id >= hp->n_vocab)
        return bad_int(name, bos, hp->bos_id, "is not below the vocabulary size");
    for (int i = 0; i < hp->n_eos; i++)
        if (hp->eos_ids[i] < 0 || hp->eos_ids[i] >= hp->n_vocab)
            return bad_int(name, eos, hp->eos_ids[i], "is not below the vocabulary size");
    return LI_OK;
}
