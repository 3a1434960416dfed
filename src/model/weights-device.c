// weights-device.c — a Llama-shaped model's weights in a device backend's memory (CUDA).
//
// The loaders (model-load.c) read files into host memory as they do for the CPU; on a device
// backend li_llama_weights_to_device then copies every weight over in the dtype the device ops
// take — matrices bf16 (cuBLASLt), norm and bias vectors f32 (rmsnorm, add_bias) — and frees the
// host copies. Views stay views: wq/wk/wv point into the fused wqkv buffer, gate/up into
// w_gate_up and bq/bk/bv into bqkv on the device as on the host, and a tied head keeps sharing
// the embedding.
//
// li_llama_synth_on_device builds random weights in place (fill_random op) for models too big to
// generate on the host quickly (synth:llama-3.1-8b: 8.0 G parameters, 16 GB of bf16).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "weights-internal.h"

// Only F32 and BF16 weights reach the device.
static size_t esize(li_dtype t) { return t == LI_DTYPE_BF16 ? 2 : 4; }

static li_status dev_own(li_weight_store *st, void *p) {
    if (!li_grow((void **)&st->dev_owned, &st->cap_dev_owned, st->n_dev_owned + 1,
                 sizeof *st->dev_owned, 64)) {
        li_be_free(st->dev, p);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    st->dev_owned[st->n_dev_owned++] = p;
    return LI_OK;
}

static void *dev_alloc(li_weight_store *st, size_t n, const char *what) {
    void *p = li_be_alloc(st->dev, n, what);
    if (p && dev_own(st, p) != LI_OK) return NULL;
    return p;
}

void li_weight_store_free_device(li_weight_store *st) {
    for (int i = 0; i < st->n_dev_owned; i++) li_be_free(st->dev, st->dev_owned[i]);
    free(st->dev_owned);
    st->dev_owned = NULL;
    st->n_dev_owned = st->cap_dev_owned = 0;
}

// Host value i of W as f32.
static float host_at(const li_weight *W, int64_t i) {
    return W->dtype == LI_DTYPE_BF16 ? li_bf16_to_f32(((const uint16_t *)W->data)[i])
                                     : ((const float *)W->data)[i];
}

// Uploads W's host values to dst as `to` (BF16 or F32), converting in chunks.
static li_status upload_as(li_backend *be, void *dst, const li_weight *W, li_dtype to) {
    int64_t n = W->n_rows * W->n_cols;
    if (W->dtype == to) return li_be_upload(be, dst, W->data, (size_t)n * esize(to));
    enum { CHUNK = 1 << 20 };
    void *buf = malloc((size_t)CHUNK * 4);
    if (!buf) return li_error_set(LI_ERR_OOM, "out of memory (weight conversion)");
    li_status rc = LI_OK;
    size_t esz = esize(to);
    for (int64_t i0 = 0; i0 < n && rc == LI_OK; i0 += CHUNK) {
        int64_t k = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int64_t j = 0; j < k; j++) {
            float v = host_at(W, i0 + j);
            if (to == LI_DTYPE_BF16) ((uint16_t *)buf)[j] = li_f32_to_bf16(v);
            else ((float *)buf)[j] = v;
        }
        rc = li_be_upload(be, (char *)dst + (size_t)i0 * esz, buf, (size_t)k * esz);
    }
    free(buf);
    return rc;
}

// One weight (not a view): a new device buffer in the ops' dtype.
static li_status move_one(li_weight_store *st, li_weight *W, const char *what) {
    if (!W->data) return LI_OK;
    li_dtype to = W->n_rows == 1                     ? LI_DTYPE_F32
                  : st->dev->ops->matrices_bf16 ? LI_DTYPE_BF16
                                                : W->dtype;
    void *d = dev_alloc(st, (size_t)(W->n_rows * W->n_cols) * esize(to), what);
    if (!d) return LI_ERR_OOM;
    LI_TRY(upload_as(st->dev, d, W, to));
    W->data = d;
    W->dtype = to;
    return LI_OK;
}

// A fused group: the fused weight moves, its parts become views at the same row offsets.
static li_status move_group(li_weight_store *st, li_weight *fused, li_weight *const *parts, int n) {
    if (!fused->data) {  // not fused on the host: each part on its own
        for (int i = 0; i < n; i++) LI_TRY(move_one(st, parts[i], "weights"));
        return LI_OK;
    }
    LI_TRY(move_one(st, fused, "fused weights"));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        parts[i]->data = (char *)fused->data + off;
        parts[i]->dtype = fused->dtype;
        off += (size_t)(parts[i]->n_rows * parts[i]->n_cols) * esize(fused->dtype);
    }
    return LI_OK;
}

li_status li_weights_to_device(li_weight_store *st, li_llama_weights *w, int n_layer,
                               li_backend *be) {
    if (!li_be_is_device(be)) return LI_OK;
    st->dev = be;
    bool tied = w->output.data == w->tok_embd.data;
    // The embedding is read as rows (bf16 or f32 both fine); bf16 so a tied head can share it.
    LI_TRY(move_one(st, &w->tok_embd, "token embeddings"));
    if (tied) w->output = w->tok_embd;
    else LI_TRY(move_one(st, &w->output, "output head"));
    LI_TRY(move_one(st, &w->out_norm, "output norm"));
    for (int il = 0; il < n_layer; il++) {
        li_llama_layer *l = &w->layers[il];
        li_weight *qkv[] = {&l->wq, &l->wk, &l->wv}, *gu[] = {&l->w_gate, &l->w_up};
        li_weight *b[] = {&l->bq, &l->bk, &l->bv};
        LI_TRY(move_one(st, &l->attn_norm, "attention norm"));
        LI_TRY(move_group(st, &l->wqkv, qkv, 3));
        LI_TRY(move_group(st, &l->bqkv, b, 3));  // (no biases: nothing moves)
        LI_TRY(move_one(st, &l->wo, "attention output"));
        LI_TRY(move_one(st, &l->ffn_norm, "ffn norm"));
        LI_TRY(move_group(st, &l->w_gate_up, gu, 2));
        LI_TRY(move_one(st, &l->w_down, "ffn down"));
        li_progress("uploading weights", il + 1, n_layer);
    }
    LI_TRY(li_be_sync(be));
    // The host copies are no longer needed. The files stay open: the tokenizer (GGUF metadata)
    // and `info` read them after the weights are loaded; a mapping costs no memory of its own.
    for (int i = 0; i < st->n_owned; i++) li_free(st->owned[i]);
    st->n_owned = 0;
    return LI_OK;
}

li_status li_llama_weights_to_device(li_llama *m) {
    if (!m->has_weights) return LI_OK;
    return li_weights_to_device(&m->store, &m->w, m->hp.n_layer, m->be);
}

// ---- random weights in place -----------------------------------------------------------------

// A (rows, cols) weight of n_parts consecutive row groups filled with U(mean ± std·√3) — the
// distribution li_fill_random draws from — each from its own seed.
static li_status synth_dev(li_weight_store *st, li_weight *W, int64_t rows, int64_t cols,
                           float std, float mean, uint64_t seed) {
    li_dtype dt = rows == 1 ? LI_DTYPE_F32 : LI_DTYPE_BF16;
    *W = (li_weight){.dtype = dt, .n_rows = rows, .n_cols = cols};
    W->data = dev_alloc(st, (size_t)(rows * cols) * esize(dt), "synthetic weights");
    if (!W->data) return LI_ERR_OOM;
    return st->dev->ops->fill_random(st->dev, W->data, dt, rows * cols, seed, std * 1.7320508f,
                                     mean);
}

// part (rows, cols) = the elements of fused from element off on.
static void view(li_weight *part, const li_weight *fused, int64_t off, int64_t rows,
                 int64_t cols) {
    *part = (li_weight){.dtype = fused->dtype, .n_rows = rows, .n_cols = cols,
                        .data = (char *)fused->data + (size_t)off * esize(fused->dtype)};
}

li_status li_weights_synth_on_device(li_weight_store *st, li_llama_weights *w,
                                     const li_hparams *hp, li_backend *be, uint64_t seed) {
    if (!li_be_is_device(be) || !be->ops->fill_random)
        return li_error_set(LI_ERR_UNSUPPORTED, "backend '%s' cannot build weights in place",
                            be->ops->name);
    st->dev = be;
    int64_t D = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    int64_t qo = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    float sD = 1.0f / sqrtf((float)D), sF = 1.0f / sqrtf((float)F), sQ = 1.0f / sqrtf((float)qo);
    uint64_t k = seed * 1000003u;  // one seed per tensor: k++
    LI_TRY(synth_dev(st, &w->tok_embd, V, D, 1.0f, 0.0f, k++));
    LI_TRY(synth_dev(st, &w->out_norm, 1, D, 0.1f, 1.0f, k++));
    if (hp->tied_embeddings) w->output = w->tok_embd;
    else LI_TRY(synth_dev(st, &w->output, V, D, sD, 0.0f, k++));
    for (int il = 0; il < hp->n_layer; il++) {
        li_llama_layer *l = &w->layers[il];
        LI_TRY(synth_dev(st, &l->attn_norm, 1, D, 0.1f, 1.0f, k++));
        // q, k and v share a std (1/sqrt(D)), so the fused buffer is one fill; so are gate/up
        LI_TRY(synth_dev(st, &l->wqkv, qo + 2 * kv, D, sD, 0.0f, k++));
        view(&l->wq, &l->wqkv, 0, qo, D);
        view(&l->wk, &l->wqkv, qo * D, kv, D);
        view(&l->wv, &l->wqkv, (qo + kv) * D, kv, D);
        if (hp->qkv_bias) {
            LI_TRY(synth_dev(st, &l->bqkv, 1, qo + 2 * kv, LI_SYNTH_BIAS_STD, 0.0f, k++));
            view(&l->bq, &l->bqkv, 0, 1, qo);
            view(&l->bk, &l->bqkv, qo, 1, kv);
            view(&l->bv, &l->bqkv, qo + kv, 1, kv);
        }
        LI_TRY(synth_dev(st, &l->wo, D, qo, sQ, 0.0f, k++));
        LI_TRY(synth_dev(st, &l->ffn_norm, 1, D, 0.1f, 1.0f, k++));
        LI_TRY(synth_dev(st, &l->w_gate_up, 2 * F, D, sD, 0.0f, k++));
        view(&l->w_gate, &l->w_gate_up, 0, F, D);
        view(&l->w_up, &l->w_gate_up, F * D, F, D);
        LI_TRY(synth_dev(st, &l->w_down, D, F, sF, 0.0f, k++));
    }
    return li_be_sync(be);
}

li_status li_llama_synth_on_device(li_llama *m, uint64_t seed) {
    LI_TRY(li_weights_synth_on_device(&m->store, &m->w, &m->hp, m->be, seed));
    m->has_weights = true;
    return LI_OK;
}
