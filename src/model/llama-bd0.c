// llama-bd0.c — layer 0 of a Fast-dLLM v2 request with LaCache's layer-0 caches (EmbedCache,
// RoPECache, FACache), for the Qwen2 forward of arch-llama.c. What is cached and why it is exact:
// li_llama_bd0 in llama.h and docs/DLLM.md "LaCache on it".
//
// A block forward's layer 0 (li_batch.bd_block), rows t = 0 .. B-1 at positions c + t:
//   x = embed(tokens)                           EmbedCache: rows [lo, hi) only, the rest kept
//   q, k, v = rope(proj(norm(x)) + bias)        RoPECache: rows [lo, hi) only (q here, k / v in
//                                               the dense rows k0, v0 [c, c + B))
//   per group of S query rows: state over the prefix keys k0 [0, c)    FACache: the groups in
//                                               `redo` only, the others' state reloaded
//   every row: state over the block keys k0 [c, c + B), then o / l
// The caller (arch-llama.c) runs the rest of the layer (o_proj, FFN) on every row. A prefill
// forward (bd_block false) only adds its rows' layer-0 K/V to k0, v0; its attention is the
// paged one. Not here: the decoding loop (src/engine/engine-bd.c), the other layers.
// Tested by tests/test-bd-generate-ref.c: every cache combination gives the all-off logits bit
// for bit, on the reference cases, on cpu and cpu-devsim.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llama-bd0.h"

#define DEFAULT_TILE 64

li_status li_llama_bd0_init(li_llama_bd0 *z, const li_llama *m, int max_rows, int B, int group,
                            int tile, bool embed, bool rope, bool fa) {
    memset(z, 0, sizeof *z);
    const li_hparams *hp = &m->hp;
    if (B < 1 || group < 1 || B % group || B / group > 64 || max_rows < B)
        return li_error_set(LI_ERR_INVALID_ARG, "layer-0 state: block %d, group %d, %d rows", B,
                            group, max_rows);
    if (tile < 0 || tile > LI_FA_MAX_TILE)
        return li_error_set(LI_ERR_INVALID_ARG, "fa_tile %d outside [1, %d]", tile,
                            LI_FA_MAX_TILE);
    if (!m->be->ops->flash_attn_tiles || !m->be->ops->flash_attn_finalize)
        return li_error_set(LI_ERR_UNSUPPORTED, "backend '%s' has no flash_attn_tiles",
                            m->be->ops->name);
    *z = (li_llama_bd0){.be = m->be, .max_rows = max_rows, .B = B, .embed = embed, .rope = rope,
                        .fa = fa, .group = group, .tile = tile ? tile : DEFAULT_TILE, .c = -1};
    size_t R = (size_t)max_rows, Bz = (size_t)B, D = (size_t)hp->n_embd, H = (size_t)hp->n_head;
    size_t HDh = H * hp->head_dim, KDh = (size_t)hp->n_head_kv * hp->head_dim;
    struct {
        float **p;
        size_t n;
        const char *what;
    } bufs[] = {
        {&z->k0, R * KDh, "layer-0 keys"},       {&z->v0, R * KDh, "layer-0 values"},
        {&z->emb, embed ? Bz * D : 0, "EmbedCache"}, {&z->q, Bz * HDh, "layer-0 queries"},
        {&z->m, Bz * H, "layer-0 row max"},       {&z->l, Bz * H, "layer-0 row sum"},
        {&z->o, Bz * HDh, "layer-0 accumulator"}, {&z->cm, fa ? Bz * H : 0, "FACache row max"},
        {&z->cl, fa ? Bz * H : 0, "FACache row sum"},
        {&z->co, fa ? Bz * HDh : 0, "FACache accumulator"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].n) continue;
        if (!(*bufs[i].p = li_be_alloc(z->be, bufs[i].n * sizeof(float), bufs[i].what))) {
            li_llama_bd0_free(z);
            return LI_ERR_OOM;
        }
    }
    if (!(z->tokens = li_alloc(Bz * sizeof(int32_t), "layer-0 block tokens"))) {
        li_llama_bd0_free(z);
        return LI_ERR_OOM;
    }
    return LI_OK;
}

void li_llama_bd0_free(li_llama_bd0 *z) {
    if (!z || !z->be) return;
    float *bufs[] = {z->k0, z->v0, z->emb, z->q, z->m, z->l, z->o, z->cm, z->cl, z->co};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) li_be_free(z->be, bufs[i]);
    li_free(z->tokens);
    memset(z, 0, sizeof *z);
}

static int64_t n_tiles(int64_t rows, int ft) {
    return (rows + ft - 1) / ft;
}

uint64_t li_bd0_plan(li_llama_bd0 *z, const li_batch *b) {
    const int T = b->n_tokens, c = b->pos[0], G = z->group;
    LI_ASSERT(c + T <= z->max_rows);
    z->p0 = c;
    if (!b->bd_block) return 0;
    LI_ASSERT(T == z->B);
    const bool same = z->c == c;  // the block the caches were filled for
    // the span of rows whose token changed since the block's last forward
    int lo = T, hi = 0;
    for (int t = 0; t < T; t++)
        if (!same || b->tokens[t] != z->tokens[t]) {
            if (t < lo) lo = t;
            hi = t + 1;
        }
    if (hi < lo) lo = hi = 0;  // nothing changed (a row committed with the mask id)
    z->use_emb = z->embed && same && z->emb_ok;
    z->use_rope = z->rope && same && z->rope_ok;
    z->use_fa = z->fa && same && z->fa_ok && c > 0;
    z->lo = lo;
    z->hi = hi;
    z->redo = 0;
    for (int g = 0; g < T / G; g++)
        if (!z->use_fa || (lo < (g + 1) * G && hi > g * G)) z->redo |= 1ull << g;
    // the step's ops depend on these (a step graph's key): which parts run, and whether empty
    uint64_t key = (uint64_t)z->use_emb | (uint64_t)z->use_rope << 1 | (uint64_t)z->use_fa << 2 |
                   (uint64_t)(hi > lo) << 3 | (uint64_t)(c > 0) << 4 |
                   (uint64_t)(z->fa && c > 0) << 5;
    return li_step_key(li_step_key(LI_STEP_KEY_INIT, key), z->redo);
}

void li_bd0_commit(li_llama_bd0 *z, const li_batch *b) {
    const int T = b->n_tokens, c = b->pos[0], G = z->group, ft = z->tile;
    if (!b->bd_block) return;
    int n = z->hi - z->lo;
    z->n_embed += z->use_emb ? n : T;
    z->n_qkv += z->use_rope ? n : T;
    if (c > 0) {
        int64_t per_group = n_tiles(G, ft) * n_tiles(c, ft);
        int done = __builtin_popcountll(z->redo);
        z->fa_tiles += done * per_group;
        z->fa_tiles_skipped += (T / G - done) * per_group;
    }
    z->fa_tiles += n_tiles(T, ft) * n_tiles(T, ft);
    memcpy(z->tokens, b->tokens, (size_t)T * sizeof(int32_t));
    z->c = c;
    z->emb_ok = z->embed;
    z->rope_ok = z->rope;
    z->fa_ok = z->fa;
}

// Rows [r0, r1) of the layer-0 projections: norm(x) -> q (into q, rows from 0 = r0), k and v
// (into the dense rows at position p0 + r0), each plus its bias, q and k rotated at pos + r0.
// `rows`: the GEMMs through li_matmul_rows (a block's rows: the bits of the whole block's).
static void project(const li_llama *m, li_llama_scratch *s, li_llama_bd0 *z, const li_batch *b,
                    float *q, int r0, int r1, int p0, bool bf16, bool rows) {
    const li_hparams *hp = &m->hp;
    const li_llama_layer *l = &m->w.layers[0];
    const li_backend_ops *op = m->be->ops;
    li_backend *be = m->be;
    const int D = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, Dh = hp->head_dim, n = r1 - r0;
    const size_t HDh = (size_t)H * Dh, KDh = (size_t)Hkv * Dh;
    if (n <= 0) return;
    const li_dtype dt = bf16 ? LI_DTYPE_BF16 : LI_DTYPE_F32;
    void *xn = bf16 ? (void *)(s->xb + (size_t)r0 * D) : (void *)(s->xn + (size_t)r0 * D);
    float *qr = q + (size_t)r0 * HDh, *kr = z->k0 + (size_t)(p0 + r0) * KDh;
    float *vr = z->v0 + (size_t)(p0 + r0) * KDh;
    op->rmsnorm(be, xn, dt, s->x + (size_t)r0 * D, l->attn_norm.data, n, D, hp->rms_eps);
    const li_weight *W[3] = {&l->wq, &l->wk, &l->wv};
    float *Y[3] = {qr, kr, vr};
    for (int j = 0; j < 3; j++) {
        if (rows) li_matmul_rows(be, Y[j], xn, dt, W[j], n);
        else op->matmul(be, Y[j], xn, dt, W[j], n, false);
    }
    if (hp->qkv_bias) {  // HF (Qwen2): q = q_proj(x) + b_q, and so for k and v
        op->add_bias(be, qr, l->bq.data, n, (int)HDh);
        op->add_bias(be, kr, l->bk.data, n, (int)KDh);
        op->add_bias(be, vr, l->bv.data, n, (int)KDh);
    }
    op->rope(be, qr, LI_DTYPE_F32, qr, b->pos + r0, n, H, Dh, &m->rope);
    op->rope(be, kr, LI_DTYPE_F32, kr, b->pos + r0, n, Hkv, Dh, &m->rope);
}

void li_bd0_embed(const li_llama *m, li_llama_scratch *s, const li_batch *b) {
    li_llama_bd0 *z = b->bd0;
    const li_backend_ops *op = m->be->ops;
    const int T = b->n_tokens;
    const size_t D = (size_t)m->hp.n_embd;
    if (!b->bd_block || !z->embed) {
        op->embed(m->be, s->x, &m->w.tok_embd, b->tokens, T);
        return;
    }
    if (!z->use_emb) {
        op->embed(m->be, z->emb, &m->w.tok_embd, b->tokens, T);
    } else if (z->hi > z->lo) {
        op->embed(m->be, z->emb + z->lo * D, &m->w.tok_embd, b->tokens + z->lo, z->hi - z->lo);
    }
    li_be_copy(m->be, s->x, z->emb, (size_t)T * D * sizeof(float));
}

const float *li_bd0_qkv(const li_llama *m, li_llama_scratch *s, const li_kv_storage *kv,
                        const li_batch *b, bool bf16) {
    li_llama_bd0 *z = b->bd0;
    const int T = b->n_tokens, p0 = z->p0;
    const size_t KDh = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    float *q = b->bd_block ? z->q : s->q;
    if (!b->bd_block) project(m, s, z, b, q, 0, T, p0, bf16, false);
    else if (z->use_rope) project(m, s, z, b, q, z->lo, z->hi, p0, bf16, true);
    else project(m, s, z, b, q, 0, T, p0, bf16, true);
    // the pool keeps every layer's K/V, layer 0's included (the cache stays whole)
    m->be->ops->kv_store(m->be, kv, 0, z->k0 + (size_t)p0 * KDh, z->v0 + (size_t)p0 * KDh,
                         b->slot, T);
    return q;
}

// Streams query rows [r0, r1) of the state over keys [k0, k1) of the dense rows.
static void stream(const li_llama *m, li_llama_bd0 *z, const float *q, int r0, int r1, int k0,
                   int k1) {
    const li_hparams *hp = &m->hp;
    const int H = hp->n_head, Hkv = hp->n_head_kv, Dh = hp->head_dim;
    const size_t HDh = (size_t)H * Dh, KDh = (size_t)Hkv * Dh;
    m->be->ops->flash_attn_tiles(m->be, z->o + r0 * HDh, z->m + (size_t)r0 * H,
                                 z->l + (size_t)r0 * H, q + r0 * HDh, r1 - r0, H,
                                 z->k0 + k0 * KDh, z->v0 + k0 * KDh, k1 - k0, Hkv, Dh, z->tile,
                                 1.0f / sqrtf((float)Dh));
}

// Rows [r0, r1) of the state: fresh (from NULL) or copied from the FACache (to_cache false) or
// into it (to_cache true).
static void state_rows(const li_llama *m, li_llama_bd0 *z, int r0, int r1, bool fresh,
                       bool to_cache) {
    li_backend *be = m->be;
    const size_t H = (size_t)m->hp.n_head, HDh = H * m->hp.head_dim, n = (size_t)(r1 - r0);
    if (fresh) {
        li_be_fill(be, z->m + r0 * H, -INFINITY, (int64_t)(n * H));
        li_be_fill(be, z->l + r0 * H, 0.0f, (int64_t)(n * H));
        li_be_fill(be, z->o + r0 * HDh, 0.0f, (int64_t)(n * HDh));
        return;
    }
    float *d[3] = {z->m, z->l, z->o}, *c[3] = {z->cm, z->cl, z->co};
    size_t w[3] = {H, H, HDh};
    for (int j = 0; j < 3; j++) {
        float *dst = to_cache ? c[j] : d[j];
        const float *src = to_cache ? d[j] : c[j];
        li_be_copy(be, dst + r0 * w[j], src + r0 * w[j], n * w[j] * sizeof(float));
    }
}

void li_bd0_attend(const li_llama *m, li_llama_scratch *s, const li_batch *b, const float *q) {
    li_llama_bd0 *z = b->bd0;
    const int T = b->n_tokens, c = z->p0, G = z->group;
    // the prefix [0, c): per group of G query rows, recomputed or (FACache) reloaded
    if (z->use_fa) state_rows(m, z, 0, T, false, false);
    else state_rows(m, z, 0, T, true, false);
    for (int g = 0; g < T / G; g++) {
        if (!(z->redo >> g & 1)) continue;
        if (z->use_fa) state_rows(m, z, g * G, (g + 1) * G, true, false);
        if (c > 0) stream(m, z, q, g * G, (g + 1) * G, 0, c);
        if (z->fa && c > 0 && z->use_fa) state_rows(m, z, g * G, (g + 1) * G, false, true);
    }
    if (z->fa && c > 0 && !z->use_fa) state_rows(m, z, 0, T, false, true);
    // then the block's own keys [c, c + T), every row
    stream(m, z, q, 0, T, c, c + T);
    m->be->ops->flash_attn_finalize(m->be, s->att, z->o, z->l, (int64_t)T * m->hp.n_head,
                                    m->hp.head_dim);
}
