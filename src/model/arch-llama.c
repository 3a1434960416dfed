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
#include "llama.h"
#include "weights-fp8.h"
#include "weights-internal.h"

li_status li_llama_set_fp8(li_llama *m, bool on) {
    if (m->fp8_ffn) {
        for (int i = 0; i < 3 * m->hp.n_layer; i++) li_fp8_weight_free(&m->fp8_ffn[i]);
        free(m->fp8_ffn);
        m->fp8_ffn = NULL;
    }
    if (!on) return LI_OK;
    if (!m->has_weights)
        return li_error_set(LI_ERR_INVALID_ARG, "FP8 FFN: model loaded for metadata only");
    if (li_be_is_device(m->be))  // the weights would be quantised from host copies that are gone
        return li_error_set(LI_ERR_UNSUPPORTED, "FP8 FFN for Llama models on backend '%s' is not "
                            "implemented (it is a CPU error proxy)", m->be->ops->name);
    if (!m->be->ops->fp8_quant_rows || !m->be->ops->matmul_fp8)
        return li_error_set(LI_ERR_UNSUPPORTED, "backend '%s' has no FP8 ops", m->be->ops->name);
    li_fp8_weight *w = calloc((size_t)3 * m->hp.n_layer, sizeof *w);
    if (!w) return li_error_set(LI_ERR_OOM, "out of memory");
    li_status rc = LI_OK;
    for (int il = 1; il < m->hp.n_layer && rc == LI_OK; il++) {
        const li_llama_layer *l = &m->w.layers[il];
        const li_weight *src[3] = {&l->w_gate, &l->w_up, &l->w_down};
        for (int j = 0; j < 3 && rc == LI_OK; j++)
            rc = li_fp8_weight_quantize(&w[3 * il + j], src[j], m->be->tp);
    }
    m->fp8_ffn = w;
    if (rc != LI_OK) li_llama_set_fp8(m, false);
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
    s->gate_up_fused = s->act_bf16 && !(fz && fz[0] == '0');
    // the gate buffer holds (T, F), or [gate | up] (T, 2F) from one GEMM, and a decode step's
    // fused outputs: [q | k | v] and [gate | up] of one row
    size_t gate_n = (s->gate_up_fused ? 2 : 1) * T * F;
    if (gate_n < 2 * F) gate_n = 2 * F;
    if (gate_n < HDh + 2 * KDh) gate_n = HDh + 2 * KDh;
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

void li_llama_scratch_free(li_llama_scratch *s) {
    float *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->att, s->gate, s->up, s->tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) li_be_free(s->be, bufs[i]);
    li_be_free(s->be, s->xb);
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
    uint8_t *qa;  // FP8 activation codes (T, max(D, F)), NULL without FP8
    float *sa;    // and their scales (T, groups)
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

// Attention of the batch's query rows q (T, H, Dh) over the pool, layer il, into s->att.
static void attend(const forward_args *a, int il, const float *q) {
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
        op->attention_seqs(m->be, s->att, q, b->n_seqs, b->seqs, H, a->kv, il, b->kv_first,
                           b->n_visible, scale, &m->rope);
    } else for (int si = 0; si < b->n_seqs; si++) {
        const li_batch_seq *sq = &b->seqs[si];
        op->attention(m->be, s->att + (size_t)sq->t0 * H * Dh, q + (size_t)sq->t0 * H * Dh, sq->n,
                      H, a->kv, il, &sq->kv, b->kv_first ? b->kv_first + sq->t0 : NULL,
                      b->n_visible + sq->t0, scale, &m->rope);
    }
}

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
    const int T = b->n_tokens, D = hp->n_embd, F = hp->n_ff, H = hp->n_head, Hkv = hp->n_head_kv;
    const int Dh = hp->head_dim;

    // ---- attention block: x += o_proj(attn(rope(q_proj(n(x))), rope(k_proj(n(x))), ...)) ----
    op->rmsnorm(be, s->xb, LI_DTYPE_BF16, s->x, l->attn_norm.data, T, D, hp->rms_eps);
    op->matmul(be, s->q, s->xb, LI_DTYPE_BF16, &l->wq, T, false);  // (T, H*Dh)
    op->matmul(be, s->k, s->xb, LI_DTYPE_BF16, &l->wk, T, false);  // (T, Hkv*Dh)
    op->matmul(be, s->v, s->xb, LI_DTYPE_BF16, &l->wv, T, false);  // (T, Hkv*Dh)
    add_qkv_bias(m, l, s->q, s->k, s->v, T);
    op->rope(be, s->q, LI_DTYPE_F32, s->q, b->pos, T, H, Dh, &m->rope);
    op->rope(be, s->k, LI_DTYPE_F32, s->k, b->pos, T, Hkv, Dh, &m->rope);
    op->kv_store(be, a->kv, il, s->k, s->v, b->slot, T);
    attend(a, il, s->q);
    // the attention output rounded once (rope's BF16 form without positions), then x += it @ wo^T
    op->rope(be, s->xb, LI_DTYPE_BF16, s->att, NULL, T, H, Dh, NULL);
    op->matmul(be, s->x, s->xb, LI_DTYPE_BF16, &l->wo, T, true);

    // ---- feed-forward block: x += down(silu(gate(n(x))) * up(n(x))) ----
    op->rmsnorm(be, s->xb, LI_DTYPE_BF16, s->x, l->ffn_norm.data, T, D, hp->rms_eps);
    if (l->w_gate_up.data && s->gate_up_fused) {
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

static li_status forward_ops(void *args) {
    const forward_args *a = args;
    const li_llama *m = a->m;
    li_llama_scratch *s = a->s;
    const li_kv_storage *kv = a->kv;
    const li_batch *b = a->b;
    float *logits = a->logits;
    uint8_t *qa = a->qa;
    float *sa = a->sa;
    const li_hparams *hp = &m->hp;
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int T = b->n_tokens, D = hp->n_embd, F = hp->n_ff, Dh = hp->head_dim;
    const int H = hp->n_head, Hkv = hp->n_head_kv;

    // x (T, D) = embedding rows
    op->embed(be, s->x, &m->w.tok_embd, b->tokens, T);

    // bf16 activations for batches (decode's one row keeps the f32 GEMV, which reads x in f32)
    for (int il = 0; s->act_bf16 && T > 1 && il < hp->n_layer; il++) layer_bf16(a, il);
    for (int il = 0; !(s->act_bf16 && T > 1) && il < hp->n_layer; il++) {
        const li_llama_layer *l = &m->w.layers[il];

        // ---- attention block (xn = norm(x): layer 0 here, later layers fused with the add) ----
        if (il == 0)
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
        attend(a, il, q);
        op->matmul(be, s->tmp, s->att, LI_DTYPE_F32, &l->wo, T, false);  // (T, D)

        // ---- feed-forward block: x += attention; down(silu(gate(n(x))) * up(n(x))) ----
        li_add_rmsnorm(be, s->xn, LI_DTYPE_F32, s->x, s->tmp, l->ffn_norm.data, T, D,
                       hp->rms_eps);
        if (m->fp8_ffn && il >= 1) {  // same GEMMs in block-scaled FP8 (the exact order)
            const li_fp8_weight *w8 = &m->fp8_ffn[3 * il];
            const li_fp8_rows a = {qa, sa, NULL};
            op->fp8_quant_rows(be, &a, s->xn, T, D);
            op->matmul_fp8(be, s->gate, &a, T, &w8[0], true, false);
            op->matmul_fp8(be, s->up, &a, T, &w8[1], true, false);
            op->swiglu(be, s->gate, LI_DTYPE_F32, s->gate, s->up, T, F, F);
            op->fp8_quant_rows(be, &a, s->gate, T, F);
            op->matmul_fp8(be, s->tmp, &a, T, &w8[2], true, false);
        } else if (T == 1 && l->w_gate_up.data) {
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
        if (il + 1 < hp->n_layer)
            li_add_rmsnorm(be, s->xn, LI_DTYPE_F32, s->x, s->tmp,
                           m->w.layers[il + 1].attn_norm.data, T, D, hp->rms_eps);
        else
            op->add(be, s->x, s->tmp, (int64_t)T * D);
    }

    // ---- head: only the rows that need logits ----
    if (b->n_logits > 0) {
        // gather the rows (embed is a row gather: the residual stream as a (T, D) table)
        li_weight rows = {.dtype = LI_DTYPE_F32, .n_rows = T, .n_cols = D, .data = s->x};
        op->embed(be, s->xn, &rows, b->logit_rows, b->n_logits);
        op->rmsnorm(be, s->xn, LI_DTYPE_F32, s->xn, m->w.out_norm.data, b->n_logits, D,
                    hp->rms_eps);
        // (n_logits, V)
        op->matmul(be, logits, s->xn, LI_DTYPE_F32, &m->w.output, b->n_logits, false);
    }
    return LI_OK;
}

li_status li_llama_forward(const li_llama *m, li_llama_scratch *s, const li_kv_storage *kv,
                           const li_batch *b, float *logits) {
    const li_hparams *hp = &m->hp;
    li_backend *be = m->be;
    const int T = b->n_tokens, D = hp->n_embd, F = hp->n_ff;
    if (T <= 0 || T > s->max_tokens)
        return li_error_set(LI_ERR_INVALID_ARG, "batch of %d tokens (the scratch holds %d)", T,
                            s->max_tokens);
    for (int t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab)
            return li_error_set(LI_ERR_INVALID_ARG, "token id %d out of range [0, %d)",
                                b->tokens[t], hp->n_vocab);
    if (b->n_logits < 0 || b->n_logits > T)
        return li_error_set(LI_ERR_INVALID_ARG, "%d logit rows for a batch of %d tokens",
                            b->n_logits, T);
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= T)
            return li_error_set(LI_ERR_INVALID_ARG, "logit row %d out of range [0, %d)",
                                b->logit_rows[i], T);
    li_batch staged;
    if (li_be_is_device(be)) {  // the ops read index arrays from device memory
        LI_TRY(stage_batch(s, b, &staged));
        b = &staged;
    }
    // FP8 FFN (layers >= 1): activation codes (T, max(D, F)) and scales (T, groups)
    uint8_t *qa = NULL;
    float *sa = NULL;
    if (m->fp8_ffn) {
        int KM = D > F ? D : F;
        qa = malloc((size_t)T * KM);
        sa = malloc((size_t)T * ((KM + LI_FP8_GROUP - 1) / LI_FP8_GROUP) * sizeof(float));
        if (!qa || !sa) {
            free(qa);
            free(sa);
            return li_error_set(LI_ERR_OOM, "out of memory (FP8 activations)");
        }
    }

    // One step (step.h): a graph on a device backend, keyed by the step's shape so that decode
    // steps of one batch size share an executable graph (FP8 steps run eagerly).
    uint64_t key = (uint64_t)T | (uint64_t)b->n_seqs << 20 | (uint64_t)b->n_logits << 40 |
                   (uint64_t)(b->kv_first != NULL) << 62;
    forward_args args = {m, s, kv, b, logits, qa, sa};
    li_status rc = li_step_run(be, key, !m->fp8_ffn, forward_ops, NULL, &args);
    free(qa);
    free(sa);
    return rc;
}
