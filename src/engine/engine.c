// engine.c — the public model handle: loading (HF dir, GGUF, synth:NAME[:SEED]), info,
// tokenizer access and chat rendering. Generation is in engine-ar.c.
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/hparams.h"
#include "engine.h"

#define DEFAULT_N_BATCH 256
#define DEFAULT_N_BATCH_DEVICE 2048
#define DEFAULT_N_CTX_CAP 4096  // default context when the model's trained one is larger

li_model_params li_model_default_params(void) {
    li_model_params p = {0};
    p.page_size = 16;
    p.max_seqs = 1;
    return p;
}

// "synth:NAME[:SEED]" → name, seed. Returns false when `path` is not a synth spec.
static bool parse_synth(const char *path, char *name, size_t name_size, uint64_t *seed,
                        li_status *rc) {
    *rc = LI_OK;
    if (strncmp(path, "synth:", 6) != 0) return false;
    const char *spec = path + 6, *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    *seed = 0;
    if (n == 0 || n >= name_size) {
        *rc = li_error_set(LI_ERR_INVALID_ARG, "'%s': expected synth:NAME[:SEED]", path);
        return true;
    }
    memcpy(name, spec, n);
    name[n] = 0;
    if (colon) {
        char *end;
        unsigned long long v = strtoull(colon + 1, &end, 10);
        if (!colon[1] || *end) {
            *rc = li_error_set(LI_ERR_INVALID_ARG, "%s: seed '%s' is not a number", path, colon + 1);
            return true;
        }
        *seed = v;
    }
    return true;
}

const li_hparams *li_model_hparams(const li_model *m) {
    return m->llada ? li_llada_hparams(m->llada) : &m->llama.hp;
}

// An HF directory whose config.json says model_type "llada".
static bool is_llada_dir(const char *path) {
    char cfg[4096];
    li_hparams hp;
    if (!li_path_is_dir(path) || li_path_join(cfg, sizeof cfg, path, "config.json") != LI_OK)
        return false;
    if (li_hf_config_load(&hp, cfg) != LI_OK) {
        li_error_clear();  // li_llama_load reports the problem with the right context
        return false;
    }
    return strcmp(hp.arch, "llada") == 0;
}

static li_status load_tokenizer(li_model *m, const char *path, bool is_synth,
                                const li_model_params *p) {
    const li_hparams *hp = li_model_hparams(m);
    li_chat_format family = m->llada                        ? LI_CHAT_LLADA
                            : strcmp(hp->arch, "qwen2") == 0 ? LI_CHAT_CHATML
                                                             : LI_CHAT_LLAMA3;
    if (p->tokenizer_path) {
        char cfg[4096];
        const char *slash = strrchr(p->tokenizer_path, '/');
        int dir_len = slash ? (int)(slash - p->tokenizer_path) : 1;
        snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", dir_len,
                 slash ? p->tokenizer_path : ".");
        return li_tokenizer_load_json(&m->tok, p->tokenizer_path,
                                      li_path_exists(cfg) ? cfg : NULL);
    }
    if (is_synth) return li_tokenizer_init_bytes(&m->tok, hp->n_vocab, family);
    if (m->llama.store.gguf) return li_tokenizer_load_gguf(&m->tok, m->llama.store.gguf);
    char tj[4096], tc[4096];
    LI_TRY(li_path_join(tj, sizeof tj, path, "tokenizer.json"));
    LI_TRY(li_path_join(tc, sizeof tc, path, "tokenizer_config.json"));
    if (li_path_exists(tj))
        return li_tokenizer_load_json(&m->tok, tj, li_path_exists(tc) ? tc : NULL);
    LI_WARN("%s has no tokenizer.json: using the built-in byte-level tokenizer", path);
    return li_tokenizer_init_bytes(&m->tok, hp->n_vocab, family);
}

// li_model_params.kv_dtype: "f32", "bf16", or NULL / "auto" (the model's compute dtype: bf16 on
// a GPU, f32 on the CPU, whose attention and reference files are f32).
static li_status kv_dtype_parse(const char *s, bool device, li_dtype *out) {
    if (!s || !strcmp(s, "auto")) *out = device ? LI_DTYPE_BF16 : LI_DTYPE_F32;
    else if (!strcmp(s, "f32")) *out = LI_DTYPE_F32;
    else if (!strcmp(s, "bf16")) *out = LI_DTYPE_BF16;
    else return li_error_set(LI_ERR_INVALID_ARG, "KV cache dtype '%s': expected f32, bf16 or auto", s);
    return LI_OK;
}

// li_model_params.attn_impl: "auto" (NULL), "cudnn" or "native" (backend.h li_attn_impl).
static li_status attn_impl_parse(const char *s, bool device, li_attn_impl *out) {
    if (!s || !strcmp(s, "auto")) *out = LI_ATTN_AUTO;
    else if (!strcmp(s, "native")) *out = LI_ATTN_NATIVE;
    else if (!strcmp(s, "cudnn")) *out = LI_ATTN_LIBRARY;
    else return li_error_set(LI_ERR_INVALID_ARG, "attention implementation '%s': expected auto, "
                             "cudnn or native", s);
    if (*out == LI_ATTN_LIBRARY && !device)
        return li_error_set(LI_ERR_INVALID_ARG, "--attn-impl cudnn needs --backend cuda");
    return LI_OK;
}

void li_model_free(li_model *m) {
    if (!m) return;
    li_sched_free(m);
    li_be_free(m->be, m->logits);
    li_llama_scratch_free(&m->scratch);
    li_kv_pool_free(&m->kv);
    li_tokenizer_free(m->tok);
    if (m->bd_fp8) {  // (engine-bd.c's FP8 copies go back to the model, which frees them)
        m->llama.fp8 = m->bd_fp8;
        m->llama.fp8_scope = LI_FP8_FFN;
    }
    li_llama_free(&m->llama);
    li_llada_free(m->llada);
    li_backend_free(m->be);
    free(m);
}

// Positions the model was trained on: max_position_embeddings (GGUF context_length), which for
// llama3 scaling is the extended length already; linear and YaRN scaling stretch the original
// length by their factor, and some configs give that original as max_position_embeddings.
static int64_t trained_positions(const li_hparams *hp) {
    const li_rope_config *r = &hp->rope;
    int64_t n = hp->n_ctx_train;
    if (r->scaling == LI_ROPE_SCALING_NONE || !(r->factor > 1)) return n;
    int64_t stretched = (int64_t)((r->original_max_pos > 0 ? r->original_max_pos : n) * r->factor);
    return stretched > n ? stretched : n;
}

// A context beyond the trained positions runs (RoPE takes any position), but the model never
// attended that far and its output there may degrade without a sign: said once per process, as a
// command may load the model more than once (rag's metadata-only load first).
static void warn_untrained_context(const li_hparams *hp, int n_ctx, const char *path) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    const int64_t trained = trained_positions(hp);
    if (trained <= 0 || n_ctx <= trained || atomic_flag_test_and_set(&warned)) return;
    LI_WARN("a context of %d tokens is beyond the %lld positions %s was trained on: what it "
            "writes past them may degrade", n_ctx, (long long)trained, path);
}

li_status li_model_load(li_model **out, const li_model_params *p) {
    *out = NULL;
    if (!p || !p->path) return li_error_set(LI_ERR_INVALID_ARG, "no model path given");
    li_model *m = calloc(1, sizeof *m);
    if (!m) return li_error_set(LI_ERR_OOM, "out of memory");
    li_status rc;
    char synth_name[64];
    uint64_t seed;
    bool is_synth = parse_synth(p->path, synth_name, sizeof synth_name, &seed, &rc);
    if (rc != LI_OK) goto fail;
    m->metadata_only = p->metadata_only;

    rc = li_backend_open(&m->be, p->backend, p->n_threads, p->device);
    if (rc == LI_OK) rc = attn_impl_parse(p->attn_impl, li_be_is_device(m->be), &m->be->attn_impl);
    if (rc != LI_OK) goto fail;
    if (is_synth) {
        if (li_llama_synth_known(synth_name)) {
            rc = li_llama_synth(&m->llama, synth_name, seed, m->be, p->metadata_only);
        } else if (li_llada_synth_known(synth_name)) {
            rc = li_llada_synth(&m->llada, synth_name, seed, m->be, p->metadata_only);
        } else {
            rc = li_error_set(LI_ERR_INVALID_ARG,
                              "unknown synthetic model '%s' (known: tiny-llama, smollm2-135m, "
                              "llama-3.1-8b, tiny-qwen2, qwen2.5-7b, tiny-fast-dllm-v2, "
                              "fast-dllm-v2-7b, tiny-llada, llada-mid, llada-8b; test variants tiny-llama-mha-gptj, -gqa4-linear, "
                              "-gqa8-llama3, -gqa2-yarn)",
                              synth_name);
        }
    } else if (is_llada_dir(p->path)) {
        rc = li_llada_load(&m->llada, p->path, m->be, p->metadata_only);
    } else {
        rc = li_llama_load(&m->llama, p->path, m->be, p->metadata_only);
    }
    if (rc != LI_OK) goto fail;
    // cached = uncached (backend.h); Fast-dLLM v2 runs the LM head on a sub-block's rows
    if (m->llada || m->llama.hp.bd_size > 0) m->be->batch_invariant = true;
    const li_hparams *hp = li_model_hparams(m);

    if ((rc = load_tokenizer(m, p->path, is_synth, p)) != LI_OK) goto fail;
    if (li_tokenizer_n_vocab(m->tok) > hp->n_vocab) {
        rc = li_error_set(LI_ERR_FORMAT, "%s: tokenizer has %d tokens but the model only %d",
                          p->path, li_tokenizer_n_vocab(m->tok), hp->n_vocab);
        goto fail;
    }
    if (p->chat_template) {
        li_chat_format f;
        if ((rc = li_chat_format_parse(p->chat_template, &f)) != LI_OK) goto fail;
        if ((rc = li_tokenizer_set_chat_format(m->tok, f)) != LI_OK) goto fail;
    }
    if (!is_synth && li_path_is_dir(p->path)) {
        char gc[4096];
        if ((rc = li_path_join(gc, sizeof gc, p->path, "generation_config.json")) != LI_OK) goto fail;
        if (li_path_exists(gc) && (rc = li_hf_generation_config_load(&m->gen_cfg, gc)) != LI_OK)
            goto fail;
    }
    // Context and K/V dtype, also for metadata-only loads (li_model_info reports them) and for
    // diffusion models (the canvas, prompt + gen_length, that the server holds requests to; the
    // decoder itself sizes each request's buffers)
    m->n_ctx = p->n_ctx > 0 ? p->n_ctx
                            : (hp->n_ctx_train > DEFAULT_N_CTX_CAP || hp->n_ctx_train <= 0
                                   ? DEFAULT_N_CTX_CAP
                                   : hp->n_ctx_train);
    warn_untrained_context(hp, m->n_ctx, p->path);
    li_fp8_scope fp8;
    if ((rc = li_fp8_scope_parse(p->fp8, &fp8)) != LI_OK) goto fail;
    if (m->llada && fp8 != LI_FP8_OFF) {
        rc = li_error_set(LI_ERR_INVALID_ARG, "--fp8 %s is for autoregressive models: a diffusion "
                          "model takes its FP8 FFN per request (dllm --fp8 on, the request's "
                          "\"fp8\" field)", p->fp8);
        goto fail;
    }
    if (m->llada) {  // diffusion models allocate per request (engine-dllm.c)
        *out = m;
        return LI_OK;
    }
    if ((rc = kv_dtype_parse(p->kv_dtype, li_be_is_device(m->be), &m->kv_dtype)) != LI_OK)
        goto fail;
    if (p->metadata_only) {
        *out = m;
        return LI_OK;
    }
    // FP8 prefill: every layer's copies quantised now, on the backend
    if ((rc = li_llama_set_fp8(&m->llama, fp8, 0)) != LI_OK) goto fail;

    // Pool and scratch: everything allocated here, nothing while generating.
    if (m->n_ctx > LI_PAGE_MAX_DELTA) {
        rc = li_error_set(LI_ERR_LIMIT, "context of %d tokens exceeds the page table's offset "
                          "field (%lld positions)", m->n_ctx, (long long)LI_PAGE_MAX_DELTA);
        goto fail;
    }
    int page_size = p->page_size > 0 ? p->page_size : 16;
    m->max_running = p->max_seqs > 0 ? p->max_seqs : 1;
    if ((rc = li_cache_mode_parse(p->cache_mode ? p->cache_mode : "lazy", &m->cache_mode)) != LI_OK)
        goto fail;
    const li_evict_policy *evict = &li_evict_lru;
    if (p->doc_evict && (rc = li_evict_policy_parse(p->doc_evict, &evict)) != LI_OK) goto fail;
    const li_dtype kv_dtype = m->kv_dtype;
    int64_t pages = (int64_t)m->max_running * ((m->n_ctx + page_size - 1) / page_size);
    if (p->kv_budget_bytes > 0) {
        pages = p->kv_budget_bytes / (int64_t)li_kv_page_bytes(hp, page_size, kv_dtype);
        if (pages < 1) {
            rc = li_error_set(LI_ERR_INVALID_ARG, "KV budget of %lld bytes is smaller than one page "
                              "(%zu bytes)", (long long)p->kv_budget_bytes,
                              li_kv_page_bytes(hp, page_size, kv_dtype));
            goto fail;
        }
    }
    if ((rc = li_kv_pool_init(&m->kv, m->be, hp, page_size, pages, kv_dtype)) != LI_OK) goto fail;
    // tokens per forward: a GPU needs thousands of rows to fill its tensor cores
    m->n_batch = li_be_is_device(m->be) ? DEFAULT_N_BATCH_DEVICE : DEFAULT_N_BATCH;
    if (m->n_batch > m->n_ctx) m->n_batch = m->n_ctx;
    // page-table words of one batch (device staging): every running sequence's table, with a
    // partial page per document; the scratch grows if a batch ever needs more
    int table_words = m->max_running * ((m->n_ctx + page_size - 1) / page_size + 64);
    if ((rc = li_llama_scratch_init(&m->scratch, m->be, hp, m->n_batch, table_words)) != LI_OK)
        goto fail;
    m->logits = li_be_alloc(m->be, (size_t)m->n_batch * hp->n_vocab * sizeof(float), "logits");
    if (!m->logits) {
        rc = LI_ERR_OOM;
        goto fail;
    }
    if (m->be->ops->reserve) {  // the backend's own scratch, also allocated now
        int64_t qo = (int64_t)hp->n_head * hp->head_dim, in = hp->n_embd;
        if (hp->n_ff > in) in = hp->n_ff;
        if (qo > in) in = qo;
        int64_t seq_keys = ((int64_t)(m->n_ctx + page_size - 1) / page_size + 64) * page_size;
        li_backend_reserve r = {.max_rows = m->n_batch, .max_in = in, .max_heads = hp->n_head,
                                .head_dim = hp->head_dim, .max_keys = seq_keys,
                                .n_head_kv = hp->n_head_kv, .kv_dtype = m->kv.storage.dtype,
                                .n_vocab = hp->n_vocab, .sampler = true};
        if (fp8 != LI_FP8_OFF) r.fp8_n = r.fp8_k = in;  // matmul_fp8's N and K: D, F or H*Dh
        if ((rc = m->be->ops->reserve(m->be, &r)) != LI_OK) goto fail;
    }
    // Cache keys name the weights and the tokenizer: the path (or synth spec) given, and FP8
    // prefill's scope (its K/V differ from the bf16 prefill's)
    snprintf(m->model_id, sizeof m->model_id, "%s%s%s", p->path, fp8 ? "#fp8=" : "",
             fp8 ? li_fp8_scope_name(fp8) : "");
    snprintf(m->tokenizer_id, sizeof m->tokenizer_id, "%s",
             p->tokenizer_path ? p->tokenizer_path : p->path);
    if ((rc = li_sched_init(m)) != LI_OK) goto fail;
    // GDSF's recompute cost of a document: 2 FLOPs per weight of the layers per token (no
    // logits are computed for document tokens), plus QKᵀ and AV, 4 × L × H × Dh FLOPs per
    // causal (query, key) pair; the same for the pool and the tiers below it
    double D = hp->n_embd, qd = (double)hp->n_head * hp->head_dim,
           kvd = (double)hp->n_head_kv * hp->head_dim;
    double layer_weights = 2 * D * qd + 2 * D * kvd + 3 * D * hp->n_ff;
    double cost_token = 2 * hp->n_layer * layer_weights, cost_pair = 4.0 * hp->n_layer * qd;
    if (m->docs) {
        li_doc_cache_set_policy(m->docs, evict);
        li_doc_cache_set_cost(m->docs, cost_token, cost_pair);
    }
    if ((rc = li_sched_init_tiers(m, p, cost_token, cost_pair)) != LI_OK) goto fail;
    *out = m;
    return LI_OK;
fail:
    li_model_free(m);
    return rc;
}

static const char *scaling_name(li_rope_scaling s) {
    switch (s) {
    case LI_ROPE_SCALING_NONE: return "none";
    case LI_ROPE_SCALING_LINEAR: return "linear";
    case LI_ROPE_SCALING_LLAMA3: return "llama3";
    case LI_ROPE_SCALING_YARN: return "yarn";
    }
    return "?";
}

void li_model_get_info(const li_model *m, li_model_info *o) {
    const li_hparams *hp = li_model_hparams(m);
    memset(o, 0, sizeof *o);
    snprintf(o->arch, sizeof o->arch, "%s", hp->arch);
    snprintf(o->name, sizeof o->name, "%s", hp->name);
    snprintf(o->weight_dtype, sizeof o->weight_dtype, "%s",
             m->llada ? li_llada_source_dtype(m->llada) : m->llama.store.source_dtype);
    // activations are f32; matrices are f32 or, for models too big for that, bf16
    snprintf(o->compute_dtype, sizeof o->compute_dtype, "%s",
             li_llama_keeps_bf16(hp) ? "bf16" : "f32");
    if (m->kv.storage.data)
        snprintf(o->kv_dtype, sizeof o->kv_dtype, "%s", li_dtype_name(m->kv.storage.dtype));
    if (!m->llada) o->kv_token_bytes = (int64_t)li_kv_page_bytes(hp, 1, m->kv_dtype);
    o->n_ctx = m->n_ctx;
    o->n_layer = hp->n_layer;
    o->n_embd = hp->n_embd;
    o->n_ff = hp->n_ff;
    o->n_head = hp->n_head;
    o->n_head_kv = hp->n_head_kv;
    o->head_dim = hp->head_dim;
    o->n_vocab = hp->n_vocab;
    o->n_ctx_train = hp->n_ctx_train;
    o->rope_theta = hp->rope.theta;
    o->rms_eps = hp->rms_eps;
    snprintf(o->rope_scaling, sizeof o->rope_scaling, "%s", scaling_name(hp->rope.scaling));
    o->tied_embeddings = hp->tied_embeddings;
    o->n_params = m->llada ? li_llada_n_params(m->llada) : li_llama_n_params(hp);
    o->n_vocab_text = li_tokenizer_n_vocab(m->tok);
    snprintf(o->cache_mode, sizeof o->cache_mode, "%s", li_cache_mode_name(m->cache_mode));
    o->n_threads = m->be->n_threads;
    o->diffusion = m->llada != NULL || m->llama.hp.bd_size > 0;
    o->bd_size = m->llada ? 0 : m->llama.hp.bd_size;
    o->metadata_only = m->metadata_only;
}

li_status li_tokenize(const li_model *m, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t **out_ids, int *out_n) {
    return li_tokenizer_encode(m->tok, text, len, add_bos, parse_special, out_ids, out_n);
}

void li_free_tokens(int32_t *ids) { free(ids); }

li_status li_token_to_piece(const li_model *m, int32_t id, char *buf, size_t buf_size,
                            size_t *out_len) {
    li_buf b = {0};
    li_status rc = li_tokenizer_decode_token(m->tok, id, &b);
    if (rc == LI_OK) {
        *out_len = b.len;
        size_t n = b.len < buf_size ? b.len : buf_size;
        if (n) memcpy(buf, b.data, n);  // b.data is NULL for a token without text
    }
    li_buf_free(&b);
    return rc;
}

int32_t li_token_eos(const li_model *m) { return li_tokenizer_eos(m->tok); }

bool li_token_is_special(const li_model *m, int32_t id) {
    return li_tokenizer_is_special(m->tok, id);
}

li_status li_tokenize_file(const char *tokenizer_json, const char *text, size_t len, bool add_bos,
                           bool parse_special, int32_t **out_ids, int *out_n) {
    char cfg[PATH_MAX];
    const char *slash = strrchr(tokenizer_json, '/');
    snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json",
             slash ? (int)(slash - tokenizer_json) : 1, slash ? tokenizer_json : ".");
    li_tokenizer *tok;
    LI_TRY(li_tokenizer_load_json(&tok, tokenizer_json, li_path_exists(cfg) ? cfg : NULL));
    li_status rc = li_tokenizer_encode(tok, text, len, add_bos, parse_special, out_ids, out_n);
    li_tokenizer_free(tok);
    return rc;
}

li_status li_chat_tokenize_messages(const li_model *m, const li_chat_message *msgs, int n,
                                    bool add_generation_prompt, int32_t **ids, int *n_ids) {
    return li_chat_tokenize(m->tok, msgs, n, add_generation_prompt, ids, n_ids);
}

li_status li_chat_render(const li_model *m, const char *system, const char *user, char **out) {
    li_chat_message msgs[2];
    int n = 0;
    if (system) msgs[n++] = (li_chat_message){"system", system};
    msgs[n++] = (li_chat_message){"user", user};
    li_buf b = {0};
    li_status rc = li_chat_render_messages(m->tok, msgs, n, true, &b);
    if (rc != LI_OK) {
        li_buf_free(&b);
        return rc;
    }
    *out = b.data;
    return LI_OK;
}
