// model-load.c — fills li_llama from a GGUF file, an HF safetensors directory, or a synthetic
// configuration with random weights.
//
// Weight handling (ARCHITECTURE.md §2.2): f32 tensors are used in place in the mapping; quantised
// GGUF tensors (Q8_0/Q4_0/Q4_1) and f16 are dequantised to f32 at load; bf16 matrices stay bf16
// (mapped) for models too big to hold in f32 and are widened to f32 otherwise. Every tensor's
// shape is checked against the hyper-parameters before use.
// Not here: the forward (arch-llama.c), the tokenizer (src/tokenizer/).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/gguf-hparams.h"
#include "llama.h"
#include "weights-internal.h"

// Models whose f32 weights would exceed this keep bf16 matrices as bf16.
#define F32_WEIGHT_LIMIT_BYTES (6ull << 30)

li_status li_store_own(li_weight_store *st, void *p) {
    if (!li_grow((void **)&st->owned, &st->cap_owned, st->n_owned + 1, sizeof *st->owned, 64)) {
        li_free(p);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    st->owned[st->n_owned++] = p;
    return LI_OK;
}

int64_t li_llama_n_params(const li_hparams *hp) {
    int64_t D = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    int64_t qo = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t per_layer = 2 * D + D * qo * 2 + D * kv * 2 + 3 * D * F +
                        (hp->qkv_bias ? qo + 2 * kv : 0);
    return V * D + D + (int64_t)hp->n_layer * per_layer + (hp->tied_embeddings ? 0 : V * D);
}

bool li_llama_keeps_bf16(const li_hparams *hp) {
    return (uint64_t)li_llama_n_params(hp) * 4 > F32_WEIGHT_LIMIT_BYTES;
}

li_status li_check_hparams(const li_hparams *hp, const char *src, const char *arch) {
    if (strcmp(hp->arch, arch) != 0)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: architecture '%s' where '%s' was expected", src,
                            hp->arch, arch);
    if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
        hp->n_head_kv <= 0 || hp->head_dim <= 0 || hp->n_vocab <= 0)
        return li_error_set(LI_ERR_FORMAT, "%s: model sizes must be positive", src);
    if (hp->n_head % hp->n_head_kv != 0)
        return li_error_set(LI_ERR_FORMAT, "%s: %d query heads not a multiple of %d kv heads", src,
                            hp->n_head, hp->n_head_kv);
    if (hp->rope.n_dims <= 0 || hp->rope.n_dims > hp->head_dim)
        return li_error_set(LI_ERR_FORMAT, "%s: rotary dims %d outside (0, head_dim %d]", src,
                            hp->rope.n_dims, hp->head_dim);
    if (hp->attention_bias || hp->mlp_bias)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: attention/mlp biases are not supported", src);
    return LI_OK;
}

static li_status init_common(li_llama *m, li_backend *be) {
    m->be = be;
    m->w.layers = calloc((size_t)m->hp.n_layer, sizeof *m->w.layers);
    if (!m->w.layers) return li_error_set(LI_ERR_OOM, "out of memory");
    return LI_OK;
}

// Checks the hyper-parameters, allocates the layer table and builds the RoPE table. Qwen2 is a
// Llama with q/k/v biases (hp.qkv_bias): the same loader and forward.
static li_status prepare(li_llama *m, li_backend *be, const char *src) {
    LI_TRY(li_check_hparams(&m->hp, src, strcmp(m->hp.arch, "qwen2") == 0 ? "qwen2" : "llama"));
    LI_TRY(init_common(m, be));
    li_status rc = li_rope_table_init(&m->rope, &m->hp.rope);
    if (rc != LI_OK) return li_error_wrap(rc, "%s: ", src);
    return LI_OK;
}

// ---- tensor names ------------------------------------------------------------------------------

const li_tensor_names li_names_gguf = {
    "token_embd.weight", "output_norm.weight", "output.weight", "blk.%d.%s.weight",
    "blk.%d.%s.bias",
    {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
     "ffn_down"}};
const li_tensor_names li_names_hf_llama = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.%d.%s.weight",
    "model.layers.%d.%s.bias",
    {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
     "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
     "mlp.down_proj"}};
// ARCHITECTURE.md §2.3: ff_proj is the gate, up_proj the up, ff_out the down (ff_out.weight outside
// the blocks, the LM head).
const li_tensor_names li_names_hf_llada = {
    "model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight",
    "model.transformer.blocks.%d.%s.weight", NULL,
    {"attn_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_norm", "ff_proj", "up_proj",
     "ff_out"}};

li_status li_bind_llama_weights(li_llama_weights *w, const li_hparams *hp,
                                const li_tensor_names *nm, li_bind_fn bind, void *ctx) {
    int64_t D = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    int64_t qo = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    LI_TRY(bind(ctx, &w->tok_embd, nm->tok_embd, V, D));
    LI_TRY(bind(ctx, &w->out_norm, nm->out_norm, 1, D));
    if (hp->tied_embeddings)
        w->output = w->tok_embd;
    else
        LI_TRY(bind(ctx, &w->output, nm->output, V, D));
    char name[192];
    for (int il = 0; il < hp->n_layer; il++) {
        li_llama_layer *l = &w->layers[il];
        struct {
            li_weight *w;
            int64_t rows, cols;
        } ts[9] = {{&l->attn_norm, 1, D}, {&l->wq, qo, D},       {&l->wk, kv, D},
                   {&l->wv, kv, D},       {&l->wo, D, qo},       {&l->ffn_norm, 1, D},
                   {&l->w_gate, F, D},    {&l->w_up, F, D},      {&l->w_down, D, F}};
        for (int i = 0; i < 9; i++) {
            snprintf(name, sizeof name, nm->layer_fmt, il, nm->layer[i]);
            LI_TRY(bind(ctx, ts[i].w, name, ts[i].rows, ts[i].cols));
        }
        // Qwen2: q, k, v biases, vectors named as their projections
        li_weight *bias[3] = {&l->bq, &l->bk, &l->bv};
        for (int i = 0; i < 3 && hp->qkv_bias; i++) {
            LI_ASSERT(nm->bias_fmt);  // (the parsers set qkv_bias only for formats with biases)
            snprintf(name, sizeof name, nm->bias_fmt, il, nm->layer[1 + i]);
            LI_TRY(bind(ctx, bias[i], name, 1, ts[1 + i].rows));
        }
        li_progress("loading", il + 1, hp->n_layer);
    }
    return LI_OK;
}

typedef struct {
    li_weight_store *store;
    bool keep_bf16, metadata_only;
} st_bind_ctx;

static li_status bind_st(void *p, li_weight *W, const char *name, int64_t rows, int64_t cols) {
    st_bind_ctx *c = p;
    return li_st_weight(c->store, W, name, rows, cols, c->keep_bf16, c->metadata_only);
}

li_status li_bind_safetensors(li_weight_store *store, li_llama_weights *w, const li_hparams *hp,
                              const li_tensor_names *names, bool keep_bf16, bool metadata_only) {
    st_bind_ctx c = {store, keep_bf16, metadata_only};
    return li_bind_llama_weights(w, hp, names, bind_st, &c);
}

// ---- GGUF -------------------------------------------------------------------------------------

// Binds W to tensor `name` of shape (rows, cols) (rows = 1 for vectors). GGUF lists shapes
// innermost first: ne[0] = cols, ne[1] = rows.
static li_status gguf_weight(li_llama *m, li_weight *W, const char *name, int64_t rows,
                             int64_t cols, bool metadata_only) {
    li_gguf *g = m->store.gguf;
    const li_gguf_tensor *t = li_gguf_find_tensor(g, name);
    if (!t) return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' is missing", li_gguf_path(g), name);
    int64_t t_rows = t->n_dims >= 2 ? t->ne[1] : 1;
    bool shape_ok = t->ne[0] == cols && t_rows == rows;
    for (int i = 2; i < t->n_dims; i++) shape_ok = shape_ok && t->ne[i] == 1;
    if (!shape_ok)
        return li_error_set(LI_ERR_FORMAT,
                            "%s: tensor '%s' has shape [%lld, %lld] (GGUF order), expected "
                            "[%lld, %lld]",
                            li_gguf_path(g), name, (long long)t->ne[0], (long long)t_rows,
                            (long long)cols, (long long)rows);
    W->n_rows = rows;
    W->n_cols = cols;
    W->dtype = LI_DTYPE_F32;
    if (metadata_only) return LI_OK;
    if (t->dtype == LI_DTYPE_F32 && ((uintptr_t)t->data & 3) == 0) {
        W->data = (void *)t->data;
        return LI_OK;
    }
    float *buf = li_alloc((size_t)(rows * cols) * sizeof(float), name);
    if (!buf) return LI_ERR_OOM;
    li_status rc = li_gguf_tensor_to_f32(g, t, buf);
    if (rc != LI_OK) {
        li_free(buf);
        return rc;
    }
    W->data = buf;
    return li_store_own(&m->store, buf);
}

typedef struct {
    li_llama *m;
    bool metadata_only;
} gguf_bind_ctx;

static li_status bind_gguf(void *p, li_weight *W, const char *name, int64_t rows, int64_t cols) {
    gguf_bind_ctx *c = p;
    return gguf_weight(c->m, W, name, rows, cols, c->metadata_only);
}

static li_status load_gguf(li_llama *m, const char *path, li_backend *be, bool metadata_only) {
    LI_TRY(li_gguf_open(&m->store.gguf, path));
    li_gguf *g = m->store.gguf;
    LI_TRY(li_gguf_hparams(g, &m->hp));
    LI_TRY(prepare(m, be, path));
    const li_gguf_tensor *probe = li_gguf_find_tensor(g, "blk.0.attn_q.weight");
    snprintf(m->store.source_dtype, sizeof m->store.source_dtype, "%s",
             probe ? li_dtype_name(probe->dtype) : "?");

    gguf_bind_ctx c = {m, metadata_only};
    LI_TRY(li_bind_llama_weights(&m->w, &m->hp, &li_names_gguf, bind_gguf, &c));
    return LI_OK;
}

// ---- HF safetensors directory ------------------------------------------------------------------

li_status li_st_weight(li_weight_store *store, li_weight *W, const char *name, int64_t rows,
                       int64_t cols, bool keep_bf16, bool metadata_only) {
    const li_st_tensor *t = li_safetensors_find(store->st, name);
    if (!t) return li_error_set(LI_ERR_FORMAT, "safetensors: tensor '%s' is missing", name);
    bool is_vec = rows == 1;
    bool shape_ok = is_vec ? (t->n_dims == 1 && t->shape[0] == cols)
                           : (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols);
    if (!shape_ok)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has %d dims [%lld, …], expected [%lld, %lld]",
                            t->file, name, t->n_dims, (long long)t->shape[0], (long long)rows,
                            (long long)cols);
    if (t->dtype == LI_DTYPE_COUNT)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (need F32/F16/BF16)",
                            t->file, name, t->dtype_str);
    bool as_bf16 = t->dtype == LI_DTYPE_BF16 && keep_bf16 && !is_vec && ((uintptr_t)t->data & 1) == 0;
    W->n_rows = rows;
    W->n_cols = cols;
    W->dtype = as_bf16 ? LI_DTYPE_BF16 : LI_DTYPE_F32;
    if (metadata_only) return LI_OK;
    if (as_bf16 || (t->dtype == LI_DTYPE_F32 && ((uintptr_t)t->data & 3) == 0)) {
        W->data = (void *)t->data;  // used in place in the mapping
        return LI_OK;
    }
    float *buf = li_alloc((size_t)(rows * cols) * sizeof(float), name);
    if (!buf) return LI_ERR_OOM;
    li_status rc = li_st_tensor_to_f32(t, buf);
    if (rc != LI_OK) {
        li_free(buf);
        return rc;
    }
    W->data = buf;
    return li_store_own(store, buf);
}

static li_status load_hf(li_llama *m, const char *dir, li_backend *be, bool metadata_only) {
    char path[4096];
    LI_TRY(li_path_join(path, sizeof path, dir, "config.json"));
    LI_TRY(li_hf_config_load(&m->hp, path));
    LI_TRY(prepare(m, be, path));
    LI_TRY(li_safetensors_open(&m->store.st, dir));
    const li_hparams *hp = &m->hp;
    const li_st_tensor *probe = li_safetensors_find(m->store.st, "model.layers.0.self_attn.q_proj.weight");
    snprintf(m->store.source_dtype, sizeof m->store.source_dtype, "%s",
             probe ? probe->dtype_str : "?");
    return li_bind_safetensors(&m->store, &m->w, hp, &li_names_hf_llama, li_llama_keeps_bf16(hp),
                               metadata_only);
}

// Frees a buffer the store owns (no-op for pointers into a mapping).
static void store_drop(li_weight_store *st, void *p) {
    for (int i = 0; i < st->n_owned; i++)
        if (st->owned[i] == p) {
            li_free(p);
            st->owned[i] = st->owned[--st->n_owned];
            return;
        }
}

// Copies the rows of `parts` (same dtype and width) into one buffer and repoints each part at
// its slice, so the group can run as one matmul; vectors (biases, (1, n_i)) become one vector
// (1, sum n_i).
static li_status fuse(li_weight_store *st, li_weight *fused, li_weight *const *parts, int n) {
    int64_t rows = 0, cols = parts[0]->n_cols, elems = 0;
    li_dtype dt = parts[0]->dtype;
    bool vec = parts[0]->n_rows == 1;
    for (int i = 0; i < n; i++) {
        if (parts[i]->dtype != dt || !parts[i]->data || (parts[i]->n_rows == 1) != vec ||
            (!vec && parts[i]->n_cols != cols))
            return LI_OK;
        rows += parts[i]->n_rows;
        elems += parts[i]->n_rows * parts[i]->n_cols;
    }
    if (vec) rows = 1, cols = elems;
    size_t esz = dt == LI_DTYPE_F32 ? 4 : 2;
    char *buf = li_alloc((size_t)(rows * cols) * esz, "fused weights");
    if (!buf) return LI_ERR_OOM;
    LI_TRY(li_store_own(st, buf));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)(parts[i]->n_rows * parts[i]->n_cols) * esz;
        memcpy(buf + off, parts[i]->data, bytes);
        store_drop(st, parts[i]->data);
        parts[i]->data = buf + off;
        off += bytes;
    }
    *fused = (li_weight){.dtype = dt, .n_rows = rows, .n_cols = cols, .data = buf};
    return LI_OK;
}

li_status li_fuse_layer_weights(li_weight_store *st, li_llama_weights *w, int n_layer) {
    for (int il = 0; il < n_layer; il++) {
        li_llama_layer *l = &w->layers[il];
        li_weight *qkv[] = {&l->wq, &l->wk, &l->wv}, *gu[] = {&l->w_gate, &l->w_up};
        li_weight *b[] = {&l->bq, &l->bk, &l->bv};
        LI_TRY(fuse(st, &l->wqkv, qkv, 3));
        LI_TRY(fuse(st, &l->w_gate_up, gu, 2));
        LI_TRY(fuse(st, &l->bqkv, b, 3));  // (no biases: no data, nothing fused)
    }
    return LI_OK;
}

static li_status fuse_layers(li_llama *m) {
    return li_fuse_layer_weights(&m->store, &m->w, m->hp.n_layer);
}

// ---- synthetic configurations --------------------------------------------------------------

typedef struct {
    const char *name;
    li_hparams hp;
} synth_config;

// What a llama preset sets: ε = 1e-5, no BOS token, RoPE over all of Dh; the entry's last
// arguments are the rest of its RoPE.
#define LLAMA(nm, L, D, F, H, Hkv, Dh, V, ctx, tied, ...)                                          \
    {nm,                                                                                           \
     {.arch = "llama", .name = nm, .n_layer = L, .n_embd = D, .n_ff = F, .n_head = H,              \
      .n_head_kv = Hkv, .head_dim = Dh, .n_vocab = V, .n_ctx_train = ctx, .rms_eps = 1e-5f,        \
      .rope = {.n_dims = Dh, __VA_ARGS__}, .tied_embeddings = tied, .bos_id = -1}}
// A Qwen2 preset (Qwen2Config): q/k/v biases, ε = 1e-6, half-split RoPE of base θ, no scaling.
#define QWEN2(nm, L, D, F, H, Hkv, Dh, V, ctx, tied, th)                                           \
    {nm,                                                                                           \
     {.arch = "qwen2", .name = nm, .n_layer = L, .n_embd = D, .n_ff = F, .n_head = H,              \
      .n_head_kv = Hkv, .head_dim = Dh, .n_vocab = V, .n_ctx_train = ctx, .rms_eps = 1e-6f,        \
      .rope = {.n_dims = Dh, .layout = LI_ROPE_NEOX, .theta = th}, .tied_embeddings = tied,        \
      .qkv_bias = true, .bos_id = -1}}
// A Fast-dLLM v2 preset: a Qwen2 decoded by blocks of bd (engine-bd.c) with mask id `mask`.
#define FAST_DLLM(nm, L, D, F, H, Hkv, Dh, V, ctx, tied, th, bd, mask)                             \
    {nm,                                                                                           \
     {.arch = "qwen2", .name = nm, .n_layer = L, .n_embd = D, .n_ff = F, .n_head = H,              \
      .n_head_kv = Hkv, .head_dim = Dh, .n_vocab = V, .n_ctx_train = ctx, .rms_eps = 1e-6f,        \
      .rope = {.n_dims = Dh, .layout = LI_ROPE_NEOX, .theta = th}, .tied_embeddings = tied,        \
      .qkv_bias = true, .bos_id = -1, .bd_size = bd, .bd_mask_id = mask}}
static const synth_config synth_configs[] = {
    // A few layers, byte-level vocabulary: fast enough for every CPU test.
    //    name                      L   D     F      H   Hkv Dh   V       ctx     tied
    LLAMA("tiny-llama",             2,  64,   176,   4,  2,  16,  384,    4096,   false,
          .layout = LI_ROPE_NEOX, .theta = 10000.0f),
    // Test variants of tiny-llama: every GQA ratio of the exactness suites, every RoPE scaling
    // type and both rotation layouts.
    LLAMA("tiny-llama-mha-gptj",    2,  64,   176,   4,  4,  16,  384,    4096,   true,
          .layout = LI_ROPE_GPTJ, .theta = 10000.0f),
    LLAMA("tiny-llama-gqa4-linear", 2,  64,   176,   8,  2,  16,  384,    4096,   false,
          .layout = LI_ROPE_NEOX, .scaling = LI_ROPE_SCALING_LINEAR, .theta = 10000.0f,
          .factor = 4.0f),
    LLAMA("tiny-llama-gqa8-llama3", 2,  64,   176,   8,  1,  16,  384,    4096,   false,
          .layout = LI_ROPE_NEOX, .scaling = LI_ROPE_SCALING_LLAMA3, .theta = 500000.0f,
          .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
          .original_max_pos = 64, .max_pos = 4096),
    LLAMA("tiny-llama-gqa2-yarn",   2,  96,   160,   6,  3,  16,  384,    4096,   false,
          .layout = LI_ROPE_GPTJ, .scaling = LI_ROPE_SCALING_YARN, .theta = 10000.0f,
          .factor = 4.0f, .original_max_pos = 64, .max_pos = 4096, .beta_fast = 32.0f,
          .beta_slow = 1.0f),
    // SmolLM2-135M shapes (GQA 9/3, tied).
    LLAMA("smollm2-135m",           30, 576,  1536,  9,  3,  64,  49152,  8192,   true,
          .layout = LI_ROPE_NEOX, .theta = 100000.0f),
    // Meta-Llama-3.1-8B(-Instruct) config.json.
    LLAMA("llama-3.1-8b",           32, 4096, 14336, 32, 8,  128, 128256, 131072, false,
          .layout = LI_ROPE_NEOX, .scaling = LI_ROPE_SCALING_LLAMA3, .theta = 500000.0f,
          .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
          .original_max_pos = 8192, .max_pos = 131072),
    // Qwen2 shapes: a tiny one (tied, GQA 2) for every CPU test, Qwen2.5-7B(-Instruct)'s config.
    QWEN2("tiny-qwen2",             2,  64,   176,   4,  2,  16,  384,    4096,   true,   1e6f),
    QWEN2("qwen2.5-7b",             28, 3584, 18944, 28, 4,  128, 152064, 32768,  false,  1e6f),
    // Fast-dLLM v2: tiny-qwen2's shapes untied (a tied random head predicts each row's own token,
    // so masks would predict the mask) with blocks of 8 and mask id 259 (the first id after the
    // byte tokenizer's ChatML specials); Fast_dLLM_v2_7B's (Qwen2.5-7B-Instruct's) with its
    // bd_size 32 and mask |<MASK>| 151665.
    //    name                      L   D     F      H   Hkv Dh   V       ctx     tied    θ     bd mask
    FAST_DLLM("tiny-fast-dllm-v2",  2,  64,   176,   4,  2,  16,  384,    4096,   false,  1e6f, 8, 259),
    FAST_DLLM("fast-dllm-v2-7b",    28, 3584, 18944, 28, 4,  128, 152064, 32768,  false,  1e6f, 32,
              151665),
};
#undef LLAMA
#undef QWEN2
#undef FAST_DLLM

bool li_llama_synth_known(const char *name) {
    for (size_t i = 0; i < sizeof synth_configs / sizeof synth_configs[0]; i++)
        if (strcmp(synth_configs[i].name, name) == 0) return true;
    return false;
}

// Uniform in [-a, a) with a = std * sqrt(3): the variance of N(0, std^2), generated fast.
void li_fill_random(float *p, int64_t n, float std, float mean, li_rng *rng) {
    float a = std * 1.7320508f;
    for (int64_t i = 0; i < n; i++)
        p[i] = mean + a * (float)(2.0 * li_rng_uniform(rng) - 1.0);
}

// Matrices of models too big for f32 are held in bf16 (rounded from the same random values);
// vectors (norms) stay f32.
li_status li_synth_weight(li_weight_store *store, li_weight *W, int64_t rows, int64_t cols,
                          float std, float mean, li_rng *rng, bool keep_bf16, bool metadata_only) {
    W->n_rows = rows;
    W->n_cols = cols;
    W->dtype = rows > 1 && keep_bf16 ? LI_DTYPE_BF16 : LI_DTYPE_F32;
    if (metadata_only) return LI_OK;
    int64_t n = rows * cols;
    void *buf = li_alloc((size_t)n * (W->dtype == LI_DTYPE_BF16 ? 2 : 4), "synthetic weights");
    if (!buf) return LI_ERR_OOM;
    if (W->dtype == LI_DTYPE_F32) {
        li_fill_random(buf, n, std, mean, rng);
    } else {
        uint16_t *h = buf;
        float tmp[1024];
        for (int64_t i = 0; i < n; i += 1024) {
            int k = n - i < 1024 ? (int)(n - i) : 1024;
            li_fill_random(tmp, k, std, mean, rng);
            for (int j = 0; j < k; j++) h[i + j] = li_f32_to_bf16(tmp[j]);
        }
    }
    W->data = buf;
    return li_store_own(store, buf);
}

li_status li_synth_llama_weights(li_weight_store *st, li_llama_weights *w, const li_hparams *hp,
                                 li_rng *rng, bool bf16, bool metadata_only) {
    int64_t D = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    int64_t qo = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    float sD = 1.0f / sqrtf((float)D), sF = 1.0f / sqrtf((float)F), sQ = 1.0f / sqrtf((float)qo);
#define SYNTH(W, r, c_, std, mean) LI_TRY(li_synth_weight(st, W, r, c_, std, mean, rng, bf16, metadata_only))
    SYNTH(&w->tok_embd, V, D, 1.0f, 0.0f);
    SYNTH(&w->out_norm, 1, D, 0.1f, 1.0f);
    if (hp->tied_embeddings) {
        w->output = w->tok_embd;
    } else {
        SYNTH(&w->output, V, D, sD, 0.0f);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        li_llama_layer *l = &w->layers[il];
        SYNTH(&l->attn_norm, 1, D, 0.1f, 1.0f);
        SYNTH(&l->wq, qo, D, sD, 0.0f);
        SYNTH(&l->wk, kv, D, sD, 0.0f);
        SYNTH(&l->wv, kv, D, sD, 0.0f);
        if (hp->qkv_bias) {
            SYNTH(&l->bq, 1, qo, LI_SYNTH_BIAS_STD, 0.0f);
            SYNTH(&l->bk, 1, kv, LI_SYNTH_BIAS_STD, 0.0f);
            SYNTH(&l->bv, 1, kv, LI_SYNTH_BIAS_STD, 0.0f);
        }
        SYNTH(&l->wo, D, qo, sQ, 0.0f);
        SYNTH(&l->ffn_norm, 1, D, 0.1f, 1.0f);
        SYNTH(&l->w_gate, F, D, sD, 0.0f);
        SYNTH(&l->w_up, F, D, sD, 0.0f);
        SYNTH(&l->w_down, D, F, sF, 0.0f);
        li_progress("generating weights", il + 1, hp->n_layer);
    }
#undef SYNTH
    return LI_OK;
}

li_status li_llama_synth(li_llama *m, const char *name, uint64_t seed, li_backend *be,
                         bool metadata_only) {
    memset(m, 0, sizeof *m);
    const synth_config *c = NULL;
    for (size_t i = 0; i < sizeof synth_configs / sizeof synth_configs[0]; i++)
        if (strcmp(synth_configs[i].name, name) == 0) c = &synth_configs[i];
    if (!c) return li_error_set(LI_ERR_INVALID_ARG, "unknown synthetic llama model '%s'", name);
    m->hp = c->hp;
    snprintf(m->store.source_dtype, sizeof m->store.source_dtype, "random");
    li_status rc = prepare(m, be, name);
    if (rc != LI_OK) goto fail;

    const li_hparams *hp = &m->hp;
    // A device backend builds big models in place (no 16 GB host copy); small ones are made on
    // the host as for the CPU and uploaded, so that CPU and GPU runs of one seed compare.
    if (!metadata_only && li_be_is_device(be) && be->ops->fill_random && li_llama_keeps_bf16(hp)) {
        if ((rc = li_llama_synth_on_device(m, seed)) != LI_OK) goto fail;
        return LI_OK;
    }
    li_rng rng;
    li_rng_seed(&rng, seed);
    if ((rc = li_synth_llama_weights(&m->store, &m->w, hp, &rng, li_llama_keeps_bf16(hp),
                                     metadata_only)) != LI_OK)
        goto fail;
    if (!metadata_only && (rc = fuse_layers(m)) != LI_OK) goto fail;
    m->has_weights = !metadata_only;
    if ((rc = li_llama_weights_to_device(m)) != LI_OK) goto fail;
    return LI_OK;
fail:
    li_llama_free(m);
    return rc;
}

li_status li_llama_load(li_llama *m, const char *path, li_backend *be, bool metadata_only) {
    memset(m, 0, sizeof *m);
    li_status rc;
    if (li_path_is_dir(path))
        rc = load_hf(m, path, be, metadata_only);
    else if (li_path_exists(path))
        rc = load_gguf(m, path, be, metadata_only);
    else
        return li_error_set(LI_ERR_IO, "%s: no such file or directory", path);
    if (rc == LI_OK && !metadata_only) rc = fuse_layers(m);
    m->has_weights = rc == LI_OK && !metadata_only;
    if (rc == LI_OK) rc = li_llama_weights_to_device(m);
    if (rc != LI_OK) {
        li_llama_free(m);
        return rc;
    }
    return LI_OK;
}

void li_weight_store_free(li_weight_store *st) {
    for (int i = 0; i < st->n_owned; i++) li_free(st->owned[i]);
    free(st->owned);
    li_gguf_close(st->gguf);
    li_safetensors_close(st->st);
    memset(st, 0, sizeof *st);
}

void li_llama_free(li_llama *m) {
    if (!m) return;
    li_llama_set_fp8(m, LI_FP8_OFF, 0);
    li_weight_store_free_device(&m->store);
    li_weight_store_free(&m->store);
    free(m->w.layers);
    memset(m, 0, sizeof *m);
}
