// arch-llama.c — the Llama-family forward pass (Llama 2/3/3.1/3.2, SmolLM2, Qwen2/2.5), read top
// to bottom.
//
// Mirrors HF transformers' LlamaForCausalLM (and Qwen2ForCausalLM, the same with biases on q_proj,
// k_proj and v_proj: hp.qkv_bias):
//   x = embed(tokens)
//   per layer: x += o_proj(attn(rope(q_proj(n(x))), rope(k_proj(n(x))), v_proj(n(x))))
//              x += down(silu(gate(n(x))) * up(n(x)))
//   logits = lm_head(norm(x))
// Tokens of several sequences share one batch: the matmuls run over all T rows at once, the
// attention per sequence over its own pages. Not here: loading (model-load.c), page allocation
// (src/kv/), sampling (src/engine/). Tested against HF reference files by tests/test-model-ref.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/step.h"
#include "llama-bd0.h"
#include "llama.h"
#include "weights-fp8.h"
#include "weights-internal.h"

li_status li_fp8_scope_parse(const char *s, li_fp8_scope *out) {
    if (!s || !strcmp(s, "off")) *out = LI_FP8_OFF;
    else if (!strcmp(s, "ffn")) *out = LI_FP8_FFN;
    else if (!strcmp(s, "all")) *out = LI_FP8_ALL;
    else return li_error_set(LI_ERR_INVALID_ARG, "FP8 scope '%s': expected off, ffn or all", s);
    return LI_OK;
}

const char *li_fp8_scope_name(li_fp8_scope s) {
    return s == LI_FP8_ALL ? "all" : s == LI_FP8_FFN ? "ffn" : "off";
}

// The FP8 copies of layer l and the bf16 / f32 weights they are made from, in the order of
// li_llama_fp8_layer's fields; the attention's four are absent (NULL source) in scope FFN.
static void fp8_pairs(li_llama_fp8_layer *w8, const li_llama_layer *l, li_fp8_scope scope,
                      li_fp8_weight *dst[7], const li_weight *src[7]) {
    li_fp8_weight *d[7] = {&w8->q, &w8->k, &w8->v, &w8->o, &w8->gate, &w8->up, &w8->down};
    const li_weight *w[7] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
    for (int j = 0; j < 7; j++) {
        dst[j] = d[j];
        src[j] = j < 4 && scope != LI_FP8_ALL ? NULL : w[j];
    }
}

li_status li_llama_set_fp8(li_llama *m, li_fp8_scope scope, int first_layer) {
    if (m->fp8) {
        for (int il = 0; il < m->hp.n_layer; il++) {
            li_fp8_weight *dst[7];
            const li_weight *src[7];
            fp8_pairs(&m->fp8[il], &m->w.layers[il], LI_FP8_ALL, dst, src);
            for (int j = 0; j < 7; j++) li_fp8_weight_free_be(m->be, dst[j]);
        }
        free(m->fp8);
        m->fp8 = NULL;
    }
    m->fp8_scope = LI_FP8_OFF;
    if (scope == LI_FP8_OFF) return LI_OK;
    if (!m->has_weights)
        return li_error_set(LI_ERR_INVALID_ARG, "FP8: model loaded for metadata only");
    if (!m->be->ops->matmul_fp8 || !m->be->ops->fp8_quant_rows)
        return li_error_set(LI_ERR_UNSUPPORTED, "backend '%s' has no FP8 GEMM", m->be->ops->name);
    li_llama_fp8_layer *w8 = calloc((size_t)m->hp.n_layer, sizeof *w8);
    if (!w8) return li_error_set(LI_ERR_OOM, "out of memory");
    m->fp8 = w8;
    m->fp8_scope = scope;
    li_status rc = LI_OK;
    for (int il = first_layer < 0 ? 0 : first_layer; il < m->hp.n_layer && rc == LI_OK; il++) {
        li_fp8_weight *dst[7];
        const li_weight *src[7];
        fp8_pairs(&w8[il], &m->w.layers[il], scope, dst, src);
        for (int j = 0; j < 7 && rc == LI_OK; j++)
            if (src[j]) rc = li_fp8_weight_quantize_be(m->be, dst[j], src[j]);
    }
    if (rc != LI_OK) li_llama_set_fp8(m, LI_FP8_OFF, 0);
    return rc;
}

li_status li_llama_scratch_init(li_llama_scratch *s, li_backend *be, const li_hparams *hp,
                                int max_tokens, int max_table_words) {
    memset(s, 0, sizeof *s);
    s->be = be;
    s->max_tokens = max_tokens;
    s->max_table_words = max_table_words;
    size_t T = (size_t)max_tokens, D = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    size_t HDh = (size_t)hp->n_head * hp->head_dim, KDh = (size_t)hp->n_head_kv * hp->head_dim;
    const char *act = getenv("LI_LLAMA_ACT");
    bool has_bf16 = li_be_takes(be, LI_ACT_RMSNORM, LI_DTYPE_BF16) &&
                    li_be_takes(be, LI_ACT_MATMUL, LI_DTYPE_BF16) &&
                    li_be_takes(be, LI_ACT_ROPE, LI_DTYPE_BF16) &&
                    li_be_takes(be, LI_ACT_SWIGLU, LI_DTYPE_BF16);
    s->act_bf16 = has_bf16 && (act ? !strcmp(act, "bf16") : li_be_is_device(be));
    const char *fz = getenv("LI_LLAMA_FUSED");
    s->fused_gemms = s->act_bf16 && !(fz && fz[0] == '0');
    // the gate buffer holds (T, F), or [gate | up] (T, 2F) from one GEMM, and a decode step's
    // fused outputs: [q | k | v] and [gate | up] of one row
    size_t gate_n = (s->fused_gemms ? 2 : 1) * T * F;
    if (gate_n < 2 * F) gate_n = 2 * F;
    if (gate_n < (s->fused_gemms ? T : 1) * (HDh + 2 * KDh))
        gate_n = (s->fused_gemms ? T : 1) * (HDh + 2 * KDh);
    size_t xb_n = D > F ? D : F;
    if (xb_n < HDh) xb_n = HDh;
    if (s->act_bf16) {
        s->xb = li_be_alloc(be, T * xb_n * 2, "bf16 activations");
        if (!s->xb) return LI_ERR_OOM;
    }
    struct {
        float **p;
        size_t n;
        const char *what;
    } bufs[] = {
        {&s->x, T * D, "residual stream"}, {&s->xn, T * D, "normalised activations"},
        {&s->q, T * HDh, "queries"},       {&s->k, T * KDh, "keys"},
        {&s->v, T * KDh, "values"},        {&s->att, T * HDh, "attention output"},
        {&s->gate, gate_n, "ffn gate"},     {&s->up, T * F, "ffn up"},
        {&s->tmp, T * D, "projection output"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i].p = li_be_alloc(be, bufs[i].n * sizeof(float), bufs[i].what);
        if (!*bufs[i].p) {
            li_llama_scratch_free(s);
            return LI_ERR_OOM;
        }
    }
    if (li_be_is_device(be)) {
        // slot (T) and the page tables as 64-bit words; tokens, pos, n_visible, kv_first and
        // logit_rows (T each) as 32-bit
        // and the decode rows' page_start (T + 1)
        s->idx_bytes = 8 * (T + (size_t)max_table_words) + 4 * 5 * T + 4 * (T + 1);
        s->idx_host = li_alloc(s->idx_bytes, "batch index staging");
        s->idx_dev = li_be_alloc(be, s->idx_bytes, "batch index arrays");
        s->seqs_dev = li_alloc(T * sizeof *s->seqs_dev, "batch sequences");
        if (!s->idx_host || !s->idx_dev || !s->seqs_dev) {
            li_llama_scratch_free(s);
            return LI_ERR_OOM;
        }
    }
    return LI_OK;
}

// The FP8 prefill's activation rows: codes (T, K) and scales (T, ceil(K/128)) for the widest
// GEMM input K = max(D, F, H*Dh), in the backend's memory.
static li_status scratch_fp8(li_llama_scratch *s, const li_hparams *hp) {
    size_t K = (size_t)(hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff);
    if (K < (size_t)hp->n_head * hp->head_dim) K = (size_t)hp->n_head * hp->head_dim;
    size_t T = (size_t)s->max_tokens, groups = (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    s->qa = li_be_alloc(s->be, T * K, "fp8 activations");
    s->sa = s->qa ? li_be_alloc(s->be, T * groups * sizeof(float), "fp8 activation scales") : NULL;
    if (s->sa) return LI_OK;
    li_be_free(s->be, s->qa);
    s->qa = NULL;
    return LI_ERR_OOM;
}

void li_llama_scratch_free(li_llama_scratch *s) {
    float *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->att, s->gate, s->up, s->tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) li_be_free(s->be, bufs[i]);
    li_be_free(s->be, s->xb);
    li_be_free(s->be, s->qa);
    li_be_free(s->be, s->sa);
    li_be_free(s->be, s->idx_dev);
    li_free(s->idx_host);
    li_free(s->seqs_dev);
    memset(s, 0, sizeof *s);
}

// Device backends: packs the batch's index arrays into one upload and returns in *db the same
// batch with device pointers (db->seqs: host structs whose page tables are device pointers).
static li_status stage_batch(li_llama_scratch *s, const li_batch *b, li_batch *db) {
    int T = b->n_tokens;
    size_t words = 0;
    for (int i = 0; i < b->n_seqs; i++) words += (size_t)b->seqs[i].kv.n_pages;
    if (words > (size_t)s->max_table_words) {
        // rare (many short documents in one batch): grow, between forwards
        size_t bytes = s->idx_bytes + 8 * (words - (size_t)s->max_table_words);
        void *h = li_alloc(bytes, "batch index staging");
        void *d = h ? li_be_alloc(s->be, bytes, "batch index arrays") : NULL;
        if (!d) {
            li_free(h);
            return LI_ERR_OOM;
        }
        li_free(s->idx_host);
        li_be_free(s->be, s->idx_dev);
        s->idx_host = h;
        s->idx_dev = d;
        s->idx_bytes = bytes;
        s->max_table_words = (int)words;
    }
    char *h = s->idx_host, *d = s->idx_dev;
    size_t off = 0;
    *db = *b;
    // copies n elements of `size` bytes to the staging buffer; *dst = their device address
#define STAGE(dst, src, n, size)                                   \
    do {                                                           \
        memcpy(h + off, (src), (size_t)(n) * (size));              \
        (dst) = (void *)(d + off);                                 \
        off += (size_t)(n) * (size);                               \
    } while (0)
    STAGE(db->slot, b->slot, T, 8);
    for (int i = 0; i < b->n_seqs; i++) {
        const li_batch_seq *sq = &b->seqs[i];
        s->seqs_dev[i] = *sq;
        STAGE(s->seqs_dev[i].kv.pages, sq->kv.pages, sq->kv.n_pages, 8);
        // host copies for a backend that plans the attention call on the host (backend.h)
        s->seqs_dev[i].kv.pages_host = sq->kv.pages;
        s->seqs_dev[i].kv.kv_first_host = b->kv_first ? b->kv_first + sq->t0 : NULL;
        s->seqs_dev[i].kv.n_visible_host = b->n_visible + sq->t0;
    }
    db->seqs = s->seqs_dev;
    STAGE(db->tokens, b->tokens, T, 4);
    STAGE(db->pos, b->pos, T, 4);
    STAGE(db->n_visible, b->n_visible, T, 4);
    if (b->kv_first) STAGE(db->kv_first, b->kv_first, T, 4);
    if (b->n_logits > 0) STAGE(db->logit_rows, b->logit_rows, b->n_logits, 4);
    // decode rows of several sequences: one attention launch per layer reads every table
    bool rows = b->n_seqs > 1 && s->be->ops->attention_decode;
    for (int i = 0; rows && i < b->n_seqs; i++)
        rows = b->seqs[i].t0 == i && b->seqs[i].n == 1 && (!b->kv_first || b->kv_first[i] == 0);
    s->page_start = s->page_start_host = NULL;
    if (rows) {
        int32_t *ps = (int32_t *)(h + off);
        for (int i = 0; i < b->n_seqs; i++)
            ps[i] = (int32_t)(s->seqs_dev[i].kv.pages - s->seqs_dev[0].kv.pages);
        ps[b->n_seqs] = ps[b->n_seqs - 1] + b->seqs[b->n_seqs - 1].kv.n_pages;
        s->page_start = (int32_t *)(d + off);
        s->page_start_host = ps;
        off += 4 * ((size_t)b->n_seqs + 1);
    }
#undef STAGE
    return li_be_upload(s->be, s->idx_dev, s->idx_host, off);
}

// The ops of one forward over a (staged) batch: embedding, the layers, the head rows.
typedef struct {
    const li_llama *m;
    li_llama_scratch *s;
    const li_kv_storage *kv;
    const li_batch *b;
    float *logits;
} forward_args;

// HF (Qwen2): q = q_proj(x) + b_q, and so for k and v; q (T, H*Dh), k and v (T, Hkv*Dh).
// Llama has no such biases (hp.qkv_bias false): nothing to do.
static void add_qkv_bias(const li_llama *m, const li_llama_layer *l, float *q, float *k, float *v,
                         int T) {
    const li_hparams *hp = &m->hp;
    if (!hp->qkv_bias) return;
    const li_backend_ops *op = m->be->ops;
    op->add_bias(m->be, q, l->bq.data, T, hp->n_head * hp->head_dim);
    op->add_bias(m->be, k, l->bk.data, T, hp->n_head_kv * hp->head_dim);
    op->add_bias(m->be, v, l->bv.data, T, hp->n_head_kv * hp->head_dim);
}

// Attention of the batch's query rows q (T, H, Dh) over the pool, layer il: f32 rows into
// s->att, or (out_bf16) the O projection's bf16 input into s->xb — written by the backend's
// attention_seqs where it has one (CUDA: cuDNN's LSE merge rounds as it writes), else rounded
// from s->att; the same bits either way.
static void attend(const forward_args *a, int il, const float *q, bool out_bf16) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_batch *b = a->b;
    const li_backend_ops *op = m->be->ops;
    const int H = m->hp.n_head, Dh = m->hp.head_dim;
    const float scale = 1.0f / sqrtf((float)Dh);
    if (s->page_start) {  // decode rows of several sequences (stage_batch): one call
        op->attention_decode(m->be, s->att, q, b->n_seqs, H, a->kv, il, b->seqs[0].kv.pages,
                             s->page_start, s->page_start_host, b->n_visible, scale, &m->rope);
    } else if (op->attention_seqs) {  // every sequence's chunk in one call
        op->attention_seqs(m->be, out_bf16 ? (void *)s->xb : (void *)s->att,
                           out_bf16 ? LI_DTYPE_BF16 : LI_DTYPE_F32, q, b->n_seqs, b->seqs, H,
                           a->kv, il, b->kv_first, b->n_visible, scale, &m->rope);
        return;
    } else for (int si = 0; si < b->n_seqs; si++) {
        const li_batch_seq *sq = &b->seqs[si];
        op->attention(m->be, s->att + (size_t)sq->t0 * H * Dh, q + (size_t)sq->t0 * H * Dh, sq->n,
                      H, a->kv, il, &sq->kv, b->kv_first ? b->kv_first + sq->t0 : NULL,
                      b->n_visible + sq->t0, scale, &m->rope);
    }
    if (out_bf16)  // rounded once (rope's BF16 form without positions)
        op->rope(m->be, s->xb, LI_DTYPE_BF16, s->att, NULL, b->n_tokens, H, Dh, NULL);
}

// The unfused projections' s->q, s->k, s->v (T rows): their biases, RoPE on q and k, k and v
// into the pool.
static void bias_rope_store(const forward_args *a, int il) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_batch *b = a->b;
    const li_backend_ops *op = m->be->ops;
    const int T = b->n_tokens, H = m->hp.n_head, Hkv = m->hp.n_head_kv, Dh = m->hp.head_dim;
    add_qkv_bias(m, &m->w.layers[il], s->q, s->k, s->v, T);
    op->rope(m->be, s->q, LI_DTYPE_F32, s->q, b->pos, T, H, Dh, &m->rope);
    op->rope(m->be, s->k, LI_DTYPE_F32, s->k, b->pos, T, Hkv, Dh, &m->rope);
    op->kv_store(m->be, a->kv, il, s->k, s->v, b->slot, T);
}

static void tail_bf16(const forward_args *a, int il, bool att_bf16);
static void tail_fp8(const forward_args *a, int il);
static void tail_f32(const forward_args *a, int il, bool norm_next);

// One layer with bf16 activations (s->act_bf16): each GEMM input is made in bf16 by the op
// before it, the O and down projections add to x in the GEMM's epilogue, x stays f32.
// Per element of T x D this saves the f32 -> bf16 pass before every GEMM (6 bytes per input
// element), the residual adds (12 bytes) and half of swiglu's output (2 of 4 bytes).
static void layer_bf16(const forward_args *a, int il) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_batch *b = a->b;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = b->n_tokens, D = hp->n_embd, H = hp->n_head;

    // ---- attention block: x += o_proj(attn(rope(q_proj(n(x))), rope(k_proj(n(x))), ...)) ----
    op->rmsnorm(be, s->xb, LI_DTYPE_BF16, s->x, l->attn_norm.data, T, D, hp->rms_eps);
    if (s->fused_gemms && l->wqkv.data && (!hp->qkv_bias || l->bqkv.data)) {
        // one GEMM over the fused rows, (T, (H + 2 Hkv) Dh) = [q | k | v] in s->gate; then the
        // bias, RoPE and the KV store in one pass (s->k, s->v: scratch where the op is missing)
        op->matmul(be, s->gate, s->xb, LI_DTYPE_BF16, &l->wqkv, T, false);
        li_qkv_rope_store(be, s->q, s->k, s->v, a->kv, il, s->gate,
                          hp->qkv_bias ? l->bqkv.data : NULL, b->pos, b->slot, T, H, &m->rope);
    } else {
        op->matmul(be, s->q, s->xb, LI_DTYPE_BF16, &l->wq, T, false);  // (T, H*Dh)
        op->matmul(be, s->k, s->xb, LI_DTYPE_BF16, &l->wk, T, false);  // (T, Hkv*Dh)
        op->matmul(be, s->v, s->xb, LI_DTYPE_BF16, &l->wv, T, false);  // (T, Hkv*Dh)
        bias_rope_store(a, il);
    }
    attend(a, il, s->q, true);  // bf16 into s->xb
    tail_bf16(a, il, true);
}

// The rest of a bf16 layer from its attention output — bf16 in s->xb (att_bf16: attend wrote it)
// or f32 in s->att — x += o_proj(att), then the FFN.
static void tail_bf16(const forward_args *a, int il, bool att_bf16) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = a->b->n_tokens, D = hp->n_embd, F = hp->n_ff, H = hp->n_head;
    const int Dh = hp->head_dim;
    // the attention output rounded once (rope's BF16 form without positions), then x += it @ wo^T
    if (!att_bf16) op->rope(be, s->xb, LI_DTYPE_BF16, s->att, NULL, T, H, Dh, NULL);
    op->matmul(be, s->x, s->xb, LI_DTYPE_BF16, &l->wo, T, true);

    // ---- feed-forward block: x += down(silu(gate(n(x))) * up(n(x))) ----
    op->rmsnorm(be, s->xb, LI_DTYPE_BF16, s->x, l->ffn_norm.data, T, D, hp->rms_eps);
    if (l->w_gate_up.data && s->fused_gemms) {
        // one GEMM over the fused rows, (T, 2F) = [gate | up] per row, read by swiglu at ld 2F
        op->matmul(be, s->gate, s->xb, LI_DTYPE_BF16, &l->w_gate_up, T, false);
        op->swiglu(be, s->xb, LI_DTYPE_BF16, s->gate, s->gate + F, T, F, 2 * (int64_t)F);
    } else {
        op->matmul(be, s->gate, s->xb, LI_DTYPE_BF16, &l->w_gate, T, false);  // (T, F)
        op->matmul(be, s->up, s->xb, LI_DTYPE_BF16, &l->w_up, T, false);      // (T, F)
        op->swiglu(be, s->xb, LI_DTYPE_BF16, s->gate, s->up, T, F, F);
    }
    op->matmul(be, s->x, s->xb, LI_DTYPE_BF16, &l->w_down, T, true);  // x += (T, D)
}

// One layer of an FP8 prefill batch (li_llama_set_fp8; more than one row): the linear layers of
// the scope read block-scaled FP8 rows (1 x 128 groups) made by the op before them — the norm and
// SwiGLU quantise in the same pass where the backend fuses them (CUDA), the attention output in
// its own pass — and add to x in the GEMM's epilogue (matmul_fp8 accumulate). The GEMMs are the
// backend's fastest (CUDA: cuBLASLt's block-scaled FP8, 1.4-1.6x bf16 at M >= 1024). Linear
// layers outside the scope run as layer_bf16's (device) or in f32 (CPU). x stays f32.
static void layer_fp8(const forward_args *a, int il) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_batch *b = a->b;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_llama_fp8_layer *w8 = &m->fp8[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = b->n_tokens, D = hp->n_embd;
    const bool attn8 = w8->q.q != NULL, bf16 = s->act_bf16;
    // FP8 rows of the normalised x (f32 staging in xn where the norm cannot fuse the
    // quantisation) and of the attention output
    const li_fp8_rows xq = {s->qa, s->sa, s->xn};

    // ---- attention block: x += o_proj(attn(rope(q_proj(n(x))), rope(k_proj(n(x))), ...)) ----
    if (attn8) {
        li_add_rmsnorm(be, (void *)&xq, LI_DTYPE_FP8, s->x, NULL, l->attn_norm.data, T, D,
                       hp->rms_eps);
        op->matmul_fp8(be, s->q, &xq, T, &w8->q, false, false);  // (T, H*Dh)
        op->matmul_fp8(be, s->k, &xq, T, &w8->k, false, false);  // (T, Hkv*Dh)
        op->matmul_fp8(be, s->v, &xq, T, &w8->v, false, false);  // (T, Hkv*Dh)
    } else {
        const li_dtype dt = bf16 ? LI_DTYPE_BF16 : LI_DTYPE_F32;
        void *xn = bf16 ? (void *)s->xb : (void *)s->xn;
        op->rmsnorm(be, xn, dt, s->x, l->attn_norm.data, T, D, hp->rms_eps);
        op->matmul(be, s->q, xn, dt, &l->wq, T, false);
        op->matmul(be, s->k, xn, dt, &l->wk, T, false);
        op->matmul(be, s->v, xn, dt, &l->wv, T, false);
    }
    bias_rope_store(a, il);
    attend(a, il, s->q, false);
    tail_fp8(a, il);
}

// The rest of an FP8 layer from its attention output s->att: x += o_proj(att) (FP8 in scope
// ALL), then the FFN in FP8.
static void tail_fp8(const forward_args *a, int il) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_llama_fp8_layer *w8 = &m->fp8[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = a->b->n_tokens, D = hp->n_embd, F = hp->n_ff, H = hp->n_head;
    const int Dh = hp->head_dim;
    const bool attn8 = w8->q.q != NULL, bf16 = s->act_bf16;
    const li_fp8_rows xq = {s->qa, s->sa, s->xn}, hq = {s->qa, s->sa, s->gate};
    if (attn8) {
        op->fp8_quant_rows(be, &xq, s->att, T, H * Dh);
        op->matmul_fp8(be, s->x, &xq, T, &w8->o, false, true);  // x += (T, D)
    } else if (bf16) {
        op->rope(be, s->xb, LI_DTYPE_BF16, s->att, NULL, T, H, Dh, NULL);
        op->matmul(be, s->x, s->xb, LI_DTYPE_BF16, &l->wo, T, true);
    } else {
        op->matmul(be, s->tmp, s->att, LI_DTYPE_F32, &l->wo, T, false);
        op->add(be, s->x, s->tmp, (int64_t)T * D);
    }

    // ---- feed-forward block: x += down(silu(gate(n(x))) * up(n(x))), all FP8 ----
    li_add_rmsnorm(be, (void *)&xq, LI_DTYPE_FP8, s->x, NULL, l->ffn_norm.data, T, D, hp->rms_eps);
    op->matmul_fp8(be, s->gate, &xq, T, &w8->gate, false, false);  // (T, F)
    op->matmul_fp8(be, s->up, &xq, T, &w8->up, false, false);      // (T, F)
    li_swiglu(be, (void *)&hq, LI_DTYPE_FP8, s->gate, s->up, T, F, F);
    op->matmul_fp8(be, s->x, &hq, T, &w8->down, false, true);  // x += (T, D)
}

// One layer with f32 activations (the CPU; decode rows on a device). xn_ready: s->xn holds
// norm(x) for this layer already (the layer before made it); norm_next: leave the next layer's
// norm(x) in s->xn, made in the same pass as the last residual add.
static void layer_f32(const forward_args *a, int il, bool xn_ready, bool norm_next) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_kv_storage *kv = a->kv;
    const li_batch *b = a->b;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = b->n_tokens, D = hp->n_embd, Dh = hp->head_dim;
    const int H = hp->n_head, Hkv = hp->n_head_kv;

    // ---- attention block (xn = norm(x): here, or left by the layer before) ----
    if (!xn_ready)
        op->rmsnorm(be, s->xn, LI_DTYPE_F32, s->x, l->attn_norm.data, T, D, hp->rms_eps);
    float *q = s->q, *k = s->k, *v = s->v;
    if (T == 1 && l->wqkv.data && (!hp->qkv_bias || l->bqkv.data)) {
        // decode: one matmul over the fused rows; q, k, v are consecutive slices of a row
        // (1, H*Dh + 2*Hkv*Dh)
        op->matmul(be, s->gate, s->xn, LI_DTYPE_F32, &l->wqkv, 1, false);
        // HF (Qwen2): q = q_proj(x) + b_q, k = k_proj(x) + b_k, v = v_proj(x) + b_v: one row
        if (hp->qkv_bias) op->add_bias(be, s->gate, l->bqkv.data, 1, (H + 2 * Hkv) * Dh);
        q = s->gate;
        k = q + (size_t)H * Dh;
        v = k + (size_t)Hkv * Dh;
        // HF: q, k = apply_rotary_pos_emb(q, k, cos, sin); k follows q: one call, H + Hkv heads
        op->rope(be, q, LI_DTYPE_F32, q, b->pos, 1, H + Hkv, Dh, &m->rope);
    } else {
        op->matmul(be, q, s->xn, LI_DTYPE_F32, &l->wq, T, false);  // (T, H*Dh)
        op->matmul(be, k, s->xn, LI_DTYPE_F32, &l->wk, T, false);  // (T, Hkv*Dh)
        op->matmul(be, v, s->xn, LI_DTYPE_F32, &l->wv, T, false);  // (T, Hkv*Dh)
        add_qkv_bias(m, l, q, k, v, T);
        // HF: q, k = apply_rotary_pos_emb(q, k, cos, sin)
        op->rope(be, q, LI_DTYPE_F32, q, b->pos, T, H, Dh, &m->rope);
        op->rope(be, k, LI_DTYPE_F32, k, b->pos, T, Hkv, Dh, &m->rope);
    }
    op->kv_store(be, kv, il, k, v, b->slot, T);
    attend(a, il, q, false);
    tail_f32(a, il, norm_next);
}

// The rest of an f32 layer from its attention output s->att: x += o_proj(att), then the FFN
// (norm_next: as layer_f32's).
static void tail_f32(const forward_args *a, int il, bool norm_next) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = a->b->n_tokens, D = hp->n_embd, F = hp->n_ff;
    op->matmul(be, s->tmp, s->att, LI_DTYPE_F32, &l->wo, T, false);  // (T, D)

    // ---- feed-forward block: x += attention; down(silu(gate(n(x))) * up(n(x))) ----
    li_add_rmsnorm(be, s->xn, LI_DTYPE_F32, s->x, s->tmp, l->ffn_norm.data, T, D,
                   hp->rms_eps);
    if (T == 1 && l->w_gate_up.data) {
        // decode: gate and up from one matmul over the fused rows, (1, 2F) = [gate | up]
        op->matmul(be, s->gate, s->xn, LI_DTYPE_F32, &l->w_gate_up, 1, false);
        op->swiglu(be, s->gate, LI_DTYPE_F32, s->gate, s->gate + F, 1, F, F);
        op->matmul(be, s->tmp, s->gate, LI_DTYPE_F32, &l->w_down, 1, false);  // (1, D)
    } else {
        op->matmul(be, s->gate, s->xn, LI_DTYPE_F32, &l->w_gate, T, false);  // (T, F)
        op->matmul(be, s->up, s->xn, LI_DTYPE_F32, &l->w_up, T, false);      // (T, F)
        op->swiglu(be, s->gate, LI_DTYPE_F32, s->gate, s->up, T, F, F);
        op->matmul(be, s->tmp, s->gate, LI_DTYPE_F32, &l->w_down, T, false);  // (T, D)
    }
    // x += ffn, and the next layer's attention norm in the same pass
    if (norm_next)
        li_add_rmsnorm(be, s->xn, LI_DTYPE_F32, s->x, s->tmp,
                       m->w.layers[il + 1].attn_norm.data, T, D, hp->rms_eps);
    else
        op->add(be, s->x, s->tmp, (int64_t)T * D);
}

// How layer il of the batch runs: FP8 prefill rows where it is on for the layer, bf16 activations
// for batches on a device, f32 otherwise (and for decode's one row, which keeps the f32 GEMV).
typedef enum { LAYER_F32, LAYER_BF16, LAYER_FP8 } layer_kind;
static layer_kind kind_of(const forward_args *a, int il) {
    const int T = a->b->n_tokens;
    if (T > 1 && a->m->fp8 && a->m->fp8[il].down.q) return LAYER_FP8;
    return T > 1 && a->s->act_bf16 ? LAYER_BF16 : LAYER_F32;
}

// Layer 0 of a Fast-dLLM v2 batch (li_batch.bd0): q, k, v and a block's attention by
// llama-bd0.c (its caches), the paged attention for a prompt chunk, then the layer's tail.
static void layer0_bd(const forward_args *a, layer_kind k, bool norm_next) {
    const float *q = li_bd0_qkv(a->m, a->s, a->kv, a->b, k != LAYER_F32 && a->s->act_bf16);
    if (a->b->bd_block) li_bd0_attend(a->m, a->s, a->b, q);
    else attend(a, 0, q, false);
    if (k == LAYER_FP8) tail_fp8(a, 0);
    else if (k == LAYER_BF16) tail_bf16(a, 0, false);
    else tail_f32(a, 0, norm_next);
}

// The K/V of layer il for rows [t0, t0 + n) only (a batch's tail, li_batch.n_tail): norm, the
// K and V projections, bias, RoPE, the store; in f32 on every backend, as a decode row runs.
// Per row 2 * D * 2 Hkv Dh FLOPs (SmolLM2: 0.44 M), against ~7 M for a whole layer.
static void store_kv_rows(const forward_args *a, int il, int t0, int n) {
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[il];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int D = hp->n_embd, Hkv = hp->n_head_kv, Dh = hp->head_dim;
    float *xn = s->xn + (size_t)t0 * D;                  // (n, D)
    float *k = s->k + (size_t)t0 * Hkv * Dh, *v = s->v + (size_t)t0 * Hkv * Dh;  // (n, Hkv*Dh)
    op->rmsnorm(be, xn, LI_DTYPE_F32, s->x + (size_t)t0 * D, l->attn_norm.data, n, D,
                hp->rms_eps);
    op->matmul(be, k, xn, LI_DTYPE_F32, &l->wk, n, false);
    op->matmul(be, v, xn, LI_DTYPE_F32, &l->wv, n, false);
    if (hp->qkv_bias) {
        op->add_bias(be, k, l->bk.data, n, Hkv * Dh);
        op->add_bias(be, v, l->bv.data, n, Hkv * Dh);
    }
    op->rope(be, k, LI_DTYPE_F32, k, a->b->pos + t0, n, Hkv, Dh, &m->rope);
    op->kv_store(be, a->kv, il, k, v, a->b->slot + t0, n);
}

static li_status forward_ops(void *args) {
    const forward_args *a = args;
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_batch *b = a->b;
    float *logits = a->logits;
    const li_hparams *hp = &m->hp;
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = b->n_tokens, D = hp->n_embd;

    // x (T, D) = embedding rows (a Fast-dLLM v2 block: EmbedCache's, llama-bd0.c)
    if (b->bd0) li_bd0_embed(m, s, b);
    else op->embed(be, s->x, &m->w.tok_embd, b->tokens, T);

    // the tail rows (a repair's selection pass, li_batch.n_tail) stop at layer tail_layer's K/V:
    // from there on the layers run on the rows before them, as a batch of their own
    li_batch head = *b;
    forward_args ah = *a;
    const int tail = b->n_tail > 0 ? b->tail_layer : hp->n_layer;
    head.n_tokens = T - b->n_tail;
    while (head.n_seqs > 0 && head.seqs[head.n_seqs - 1].t0 >= head.n_tokens) head.n_seqs--;
    ah.b = &head;
    bool xn_ready = false;  // s->xn = norm(x) for layer il, left by an f32 layer il - 1
    for (int il = 0; il < hp->n_layer; il++) {
        const forward_args *ai = il < tail ? a : &ah, *an = il + 1 < tail ? a : &ah;
        if (il == tail) store_kv_rows(a, il, head.n_tokens, b->n_tail);
        if (ai->b->n_tokens == 0) break;
        const layer_kind k = kind_of(ai, il);
        const bool norm_next = il + 1 < hp->n_layer && kind_of(an, il + 1) == LAYER_F32 &&
                               an->b->n_tokens == ai->b->n_tokens;
        if (il == 0 && b->bd0) layer0_bd(a, k, norm_next);  // (no tail: one sequence)
        else if (k == LAYER_FP8) layer_fp8(ai, il);
        else if (k == LAYER_BF16) layer_bf16(ai, il);
        else layer_f32(ai, il, xn_ready, norm_next);
        xn_ready = k == LAYER_F32 && norm_next;
    }

    // ---- head: only the rows that need logits ----
    if (b->n_logits > 0) {
        // gather the rows (embed is a row gather: the residual stream as a (T, D) table)
        li_weight rows = {.dtype = LI_DTYPE_F32, .n_rows = T, .n_cols = D, .data = s->x};
        op->embed(be, s->xn, &rows, b->logit_rows, b->n_logits);
        op->rmsnorm(be, s->xn, LI_DTYPE_F32, s->xn, m->w.out_norm.data, b->n_logits, D,
                    hp->rms_eps);
        // (n_logits, V); a Fast-dLLM v2 batch's rows with the bits of the whole block's
        if (b->bd0) li_matmul_rows(be, logits, s->xn, LI_DTYPE_F32, &m->w.output, b->n_logits);
        else op->matmul(be, logits, s->xn, LI_DTYPE_F32, &m->w.output, b->n_logits, false);
    }
    return LI_OK;
}

li_status li_llama_forward(const li_llama *m, li_llama_scratch *s, const li_kv_storage *kv,
                           const li_batch *b, float *logits) {
    const li_hparams *hp = &m->hp;
    li_backend *be = m->be;
    const int T = b->n_tokens;
    if (T <= 0 || T > s->max_tokens)
        return li_error_set(LI_ERR_INVALID_ARG, "batch of %d tokens (the scratch holds %d)", T,
                            s->max_tokens);
    for (int t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab)
            return li_error_set(LI_ERR_INVALID_ARG, "token id %d out of range [0, %d)",
                                b->tokens[t], hp->n_vocab);
    if (b->n_tail < 0 || b->n_tail > T ||
        (b->n_tail > 0 && (b->tail_layer < 1 || b->tail_layer >= hp->n_layer)))
        return li_error_set(LI_ERR_INVALID_ARG, "a tail of %d rows to layer %d in a batch of %d "
                            "tokens, %d layers", b->n_tail, b->tail_layer, T, hp->n_layer);
    for (int i = 0; i < b->n_seqs; i++)
        if (b->seqs[i].t0 < T - b->n_tail && b->seqs[i].t0 + b->seqs[i].n > T - b->n_tail)
            return li_error_set(LI_ERR_INVALID_ARG, "sequence %d straddles the batch's tail", i);
    if (b->n_logits < 0 || b->n_logits > T - b->n_tail)
        return li_error_set(LI_ERR_INVALID_ARG, "%d logit rows for a batch of %d tokens",
                            b->n_logits, T - b->n_tail);
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= T - b->n_tail)
            return li_error_set(LI_ERR_INVALID_ARG, "logit row %d out of range [0, %d)",
                                b->logit_rows[i], T - b->n_tail);
    uint64_t bd_key = 0;  // a Fast-dLLM v2 batch: what its layer-0 caches serve
    if (b->bd0) {
        if (b->n_seqs != 1 || b->n_tail || (b->bd_block && T != b->bd0->B))
            return li_error_set(LI_ERR_INVALID_ARG, "a layer-0 state batch of %d rows, %d "
                                "sequences", T, b->n_seqs);
        bd_key = li_bd0_plan(b->bd0, b);
    }
    const li_batch *host_b = b;
    li_batch staged;
    if (li_be_is_device(be)) {  // the ops read index arrays from device memory
        LI_TRY(stage_batch(s, b, &staged));
        b = &staged;
    }
    // FP8 rows (T, max(D, F, H*Dh)) and their scales, made once (the first FP8 batch)
    if (m->fp8 && T > 1 && !s->qa) LI_TRY(scratch_fp8(s, hp));
    // One step (step.h): a graph on a device backend, keyed by the step's shape so that decode
    // steps of one batch size share an executable graph (FP8 steps and partial forwards run
    // eagerly).
    uint64_t key = (uint64_t)T | (uint64_t)b->n_seqs << 20 | (uint64_t)b->n_logits << 40 |
                   (uint64_t)(b->kv_first != NULL) << 62;
    if (b->bd0) key = li_step_key(li_step_key(key, 1u + b->bd_block), bd_key);
    forward_args args = {m, s, kv, b, logits};
    bool partial = b->n_tail > 0;
    li_status rc = li_step_run(be, key, !(m->fp8 && T > 1) && !partial, forward_ops, NULL, &args);
    if (rc == LI_OK && b->bd0) li_bd0_commit(b->bd0, host_b);
    return rc;
}
