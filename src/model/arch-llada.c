// arch-llada.c — the LLaDA denoising step (ARCHITECTURE.md §5): a bidirectional Llama-style forward
// over whole canvases, with the exact LaCache caches of layer 0 and the FP8 FFN of layers >= 1.
//
//   x = embed(canvas)                                   EmbedCache: block rows only per step
//   layer 0: q,k,v = rope(proj(norm(x)))                RoPECache: block rows only per step
//            att = flash(q, k, v) in tiles              FACache: see below
//            x += attn_out(att); x += ffn(x)            (fp32/bf16, never FP8)
//   layers >= 1: the same over all rows, plain tiled flash (no cache), FFN in FP8 when asked
//   logits = head(norm(x)) for the output rows          truncation: only those rows computed
//                                                       (the block's, or the canvas's out_rows)
//
// Activations: f32 throughout, or (a device backend with backend.h's bf16 ops; LI_LLADA_ACT picks)
// GEMM inputs and attention K / V / output made in bf16 by the op before, the residual adds in
// the GEMMs' epilogues, the residual stream f32: the f32 path's bits on that backend (with Q/K/V
// unfused), half the bytes per pass. qkv_project, attention_canvas, attn_out and ffn each hold
// both forms.
//
// Layer-0 tiled FlashAttention (the order the GPU kernel mirrors). Rows of a canvas are cut into
// tiles of ft = fa_tile rows starting at row 0, the same tiles for queries and keys. With the block
// [lo, hi), "block tiles" are those overlapping it: rows [Klo, Khi), Klo = ft*floor(lo/ft),
// Khi = min(ft*ceil(hi/ft), T); the other tiles are "outside". Every query row streams the key
// tiles in one fixed order, whatever the flags:
//     outside key tiles in ascending order ([0, Klo) then [Khi, T)), then block key tiles ([Klo,
//     Khi))
// with the online-softmax update of backend.h flash_attn_tiles, then o / l. FACache: for query rows
// in outside tiles, the state (m, l, o) after the outside key tiles depends only on tokens that do
// not change within the block, so it is computed when the block starts, saved in the canvas cache,
// and every later step of the block reloads it and streams only the block key tiles. Because the
// order is the same with and without the cache, FACache changes no bit of the result (given the
// same Q/K/V); query rows in block tiles always stream everything. Tile sizes need not divide the
// block boundaries: a block tile is then partly outside the block and is simply recomputed.
//
// Canvases are batched: embeddings, norms, every projection and the FFN run over all rows of all
// canvases at once; attention and the head run per canvas. Each canvas has an li_llada_cache that
// remembers the layout its caches were filled for (tokens outside the block, positions, block);
// a step without block_start whose layout differs is an error, not a silent wrong answer.
// Not here: loading (llada-load.c), the decoding loop (src/engine/engine-dllm.c).
// Tested by tests/test-llada.c (every flag combination vs all-off, batching, DPad layouts, FP8).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/step.h"
#include "llada-internal.h"

#define DEFAULT_FA_TILE 64
// Rows per LM-head GEMM when truncation is off: (512, V) f32 of scratch (259 MB for LLaDA's
// 126,464 tokens). The head's weight is 1 GB of bf16, so a GEMM of 32 rows (the old chunk)
// streams it at ~0.25 ms for 0.03 TFLOP — 8 ms of a vanilla step at canvas 1024 — where 512
// rows make it compute-bound (~0.7 ms each).
#define HEAD_CHUNK 512

struct li_llada_cache {
    li_backend *be;  // the buffers below (not tokens/pos, host bookkeeping) are in its memory
    int max_tokens;
    // Layout the caches were filled for (valid when has_layout).
    bool has_layout;
    int T, lo, hi;
    int32_t *tokens, *pos; // (max_tokens)
    // EmbedCache: (max_tokens, D)
    float *emb;
    bool emb_ok;
    // RoPECache: layer-0 q (max_tokens, H*Dh), k, v (max_tokens, Hkv*Dh) after RoPE
    float *q, *k, *v;
    bool rope_ok;
    // FACache: state of the outside query rows after the outside key tiles
    float *fm, *fl; // (max_tokens, H)
    float *fo;      // (max_tokens, H*Dh)
    bool fa_ok;
    int fa_tile;
};

// Every buffer is in the backend's memory except idx_host. Per forward, the canvases' tokens and
// positions and the gathered rows' positions are packed into idx_host and uploaded to idx in one
// copy: idx = [tokens (R) | positions (R) | gathered positions (R)].
struct li_llada_scratch {
    li_backend *be;
    int max_rows;
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp; // (R, ·) as in li_llama_scratch
    float *fm, *fl, *fo;                               // flash state (R, H), (R, H*Dh)
    int32_t *idx, *idx_host;                           // (3 R) index arrays, see above
    uint8_t *qa;                                       // FP8 activations (R, max(D, F))
    float *sa;                                         // their scales (R, ceil(max(D, F)/128))
    float *head;                                       // (head_rows, V)
    int head_rows;                                     // min(max_rows, HEAD_CHUNK)
    // bf16 activations (act_bf16, the BF16 forms of backend.h's [dt] entries): GEMM inputs and
    // attention K, V, output made in bf16 by the op before (layers >= 1, every FFN, the head).
    // LI_LLADA_ACT = f32 | bf16 overrides the default (bf16 on a device backend that has them).
    bool act_bf16;
    // With bf16 activations, Q/K/V of layers >= 1 as one GEMM over the fused weights (wqkv:
    // N = 12288 ran at 0.157 ms against 3 x 0.055 for N = 4096 on the H200) split by qkv_rope
    // in one pass; LI_LLADA_FUSED=0 turns it off (A/B, and the bit-for-bit comparison with the
    // f32 path, which multiplies them separately).
    bool fused;
    float *qkv;            // (R, (H + 2 Hkv) Dh) the fused projection's rows [q | k | v]
    uint16_t *xb;          // (R, max(D, F)) normalised rows, or the FFN's silu(gate) * up
    uint16_t *kb, *vb;     // (R, Hkv*Dh) keys after RoPE, values
    uint16_t *attb;        // (R, H*Dh) attention output
};

// ---- cache and scratch ------------------------------------------------------------------------

li_status li_llada_cache_init(li_llada_cache **out, const li_llada *m, int max_tokens) {
    *out = NULL;
    if (max_tokens <= 0)
        return li_error_set(LI_ERR_INVALID_ARG, "LLaDA cache for %d tokens", max_tokens);
    li_llada_cache *c = calloc(1, sizeof *c);
    if (!c) return li_error_set(LI_ERR_OOM, "out of memory");
    c->be = m->be;
    c->max_tokens = max_tokens;
    c->tokens = li_alloc((size_t)max_tokens * sizeof(int32_t), "llada cache tokens");
    c->pos = li_alloc((size_t)max_tokens * sizeof(int32_t), "llada cache positions");
    if (!c->tokens || !c->pos) {
        li_llada_cache_free(c);
        return LI_ERR_OOM;
    }
    *out = c;
    return LI_OK;
}

void li_llada_cache_free(li_llada_cache *c) {
    if (!c) return;
    li_free(c->tokens);
    li_free(c->pos);
    float *dev[] = {c->emb, c->q, c->k, c->v, c->fm, c->fl, c->fo};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) li_be_free(c->be, dev[i]);
    free(c);
}

// Allocates a cache component on first use (in the backend's memory).
static li_status cache_buf(li_llada_cache *c, float **p, size_t n, const char *what) {
    if (*p) return LI_OK;
    *p = li_be_alloc(c->be, n * sizeof(float), what);
    return *p ? LI_OK : LI_ERR_OOM;
}

// Every component lc turns on, allocated before a step is queued (a step graph records the ops,
// and memory cannot be allocated while it does); the ops' own cache_buf calls then find them.
static li_status cache_prepare(const li_llada *m, const li_lacache *lc, li_llada_cache *c) {
    const li_hparams *hp = &m->hp;
    size_t T = (size_t)c->max_tokens, H = (size_t)hp->n_head;
    size_t HDh = H * hp->head_dim, KDh = (size_t)hp->n_head_kv * hp->head_dim;
    if (lc->embed) LI_TRY(cache_buf(c, &c->emb, T * hp->n_embd, "EmbedCache"));
    if (lc->rope) {
        LI_TRY(cache_buf(c, &c->q, T * HDh, "RoPECache queries"));
        LI_TRY(cache_buf(c, &c->k, T * KDh, "RoPECache keys"));
        LI_TRY(cache_buf(c, &c->v, T * KDh, "RoPECache values"));
    }
    if (lc->fa) {
        LI_TRY(cache_buf(c, &c->fm, T * H, "FACache row max"));
        LI_TRY(cache_buf(c, &c->fl, T * H, "FACache row sum"));
        LI_TRY(cache_buf(c, &c->fo, T * HDh, "FACache accumulator"));
    }
    return LI_OK;
}

li_status li_llada_scratch_init(li_llada_scratch **out, const li_llada *m, int max_rows) {
    *out = NULL;
    if (max_rows <= 0)
        return li_error_set(LI_ERR_INVALID_ARG, "LLaDA scratch for %d rows", max_rows);
    const li_hparams *hp = &m->hp;
    li_llada_scratch *s = calloc(1, sizeof *s);
    if (!s) return li_error_set(LI_ERR_OOM, "out of memory");
    s->be = m->be;
    s->max_rows = max_rows;
    size_t R = (size_t)max_rows, D = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    size_t HDh = (size_t)hp->n_head * hp->head_dim, KDh = (size_t)hp->n_head_kv * hp->head_dim;
    size_t KM = D > F ? D : F, GM = (KM + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    const char *act = getenv("LI_LLADA_ACT");
    bool has_bf16 = li_be_takes(m->be, LI_ACT_RMSNORM, LI_DTYPE_BF16) &&
                    li_be_takes(m->be, LI_ACT_MATMUL, LI_DTYPE_BF16) &&
                    li_be_takes(m->be, LI_ACT_ROPE, LI_DTYPE_BF16) &&
                    li_be_takes(m->be, LI_ACT_SWIGLU, LI_DTYPE_BF16) &&
                    li_be_takes(m->be, LI_ACT_ATTENTION_DENSE, LI_DTYPE_BF16);
    // (a device's dense attention kernel takes head dims 64 and 128; the CPU oracle any)
    has_bf16 = has_bf16 && (hp->head_dim == 64 || hp->head_dim == 128 || !li_be_is_device(m->be));
    s->act_bf16 = has_bf16 && (act ? !strcmp(act, "bf16") : li_be_is_device(m->be));
    size_t B16 = s->act_bf16 ? 2 : 0;  // bytes per element of the bf16 buffers (none when off)
    const char *fz = getenv("LI_LLADA_FUSED");
    s->fused = s->act_bf16 && li_be_takes(m->be, LI_ACT_QKV_ROPE, LI_DTYPE_BF16) &&
               !(fz && fz[0] == '0');
    size_t QKV = s->fused ? HDh + 2 * KDh : 0;
    s->head_rows = max_rows < HEAD_CHUNK ? max_rows : HEAD_CHUNK;
    struct {
        void **p;
        size_t bytes;
        const char *what;
    } bufs[] = {
        {(void **)&s->x, R * D * 4, "residual stream"},
        {(void **)&s->xn, R * D * 4, "normalised activations"},
        {(void **)&s->q, R * HDh * 4, "queries"},
        {(void **)&s->k, R * KDh * 4, "keys"},
        {(void **)&s->v, R * KDh * 4, "values"},
        {(void **)&s->att, R * HDh * 4, "attention output"},
        {(void **)&s->gate, R * F * 4, "ffn gate"},
        {(void **)&s->up, R * F * 4, "ffn up"},
        {(void **)&s->tmp, R * D * 4, "projection output"},
        {(void **)&s->fm, R * hp->n_head * 4, "flash row max"},
        {(void **)&s->fl, R * hp->n_head * 4, "flash row sum"},
        {(void **)&s->fo, R * HDh * 4, "flash accumulator"},
        {(void **)&s->idx, 3 * R * 4, "index arrays"},
        {(void **)&s->qa, R * KM, "fp8 activations"},
        {(void **)&s->sa, R * GM * 4, "fp8 activation scales"},
        {(void **)&s->head, (size_t)s->head_rows * hp->n_vocab * 4, "head logits"},
        {(void **)&s->xb, R * KM * B16, "bf16 GEMM inputs"},
        {(void **)&s->qkv, R * QKV * 4, "fused q | k | v"},
        // attention_dense's slack after a canvas's keys, values and output (backend.h): the next
        // canvas's rows, or after the last these, zeroed by li_be_alloc
        {(void **)&s->kb, (R + LI_ATTN_DENSE_SLACK) * KDh * B16, "bf16 keys"},
        {(void **)&s->vb, (R + LI_ATTN_DENSE_SLACK) * KDh * B16, "bf16 values"},
        {(void **)&s->attb, (R + LI_ATTN_DENSE_SLACK) * HDh * B16, "bf16 attention output"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].bytes) continue;  // (the bf16 buffers on the f32 path)
        *bufs[i].p = li_be_alloc(s->be, bufs[i].bytes, bufs[i].what);
        if (!*bufs[i].p) {
            li_llada_scratch_free(s);
            return LI_ERR_OOM;
        }
    }
    s->idx_host = li_alloc(3 * R * 4, "index staging");
    if (!s->idx_host) {
        li_llada_scratch_free(s);
        return LI_ERR_OOM;
    }
    *out = s;
    return LI_OK;
}

// What a forward asks of the backend's own scratch (CUDA: backend-cuda-memory.c): the f32
// path's matmuls convert x to bf16 (the bf16 path's inputs are bf16 already, 256-byte aligned at
// row 0); layer 0's tensor-core attention and the f32 path's dense attention round a canvas's
// K and V to bf16; the FP8 FFN's scale tables (gate/up N = F, K = D; down N = D, K = F); and
// dllm->x0 over a block. No paged attention, no autoregressive sampler.
li_status li_llada_reserve(const li_llada *m, const li_llada_scratch *s, int max_canvas_rows,
                           int block_rows, bool fp8) {
    li_backend *be = m->be;
    if (!be->ops->reserve) return LI_OK;
    const li_hparams *hp = &m->hp;
    int64_t D = hp->n_embd, F = hp->n_ff, HDh = (int64_t)hp->n_head * hp->head_dim;
    int64_t in = D > F ? D : F, ffn = in;
    if (HDh > in) in = HDh;
    li_backend_reserve r = {
        .max_rows = s->max_rows,
        .max_in = s->act_bf16 ? 0 : in,
        .max_heads = hp->n_head,
        .head_dim = hp->head_dim,
        .n_vocab = hp->n_vocab,
        .dense_kv = ((int64_t)max_canvas_rows + LI_ATTN_DENSE_SLACK) * hp->n_head_kv * hp->head_dim,
        .fp8_n = fp8 ? ffn : 0,
        .fp8_k = fp8 ? ffn : 0,
        .dllm_rows = block_rows,
    };
    li_status rc = be->ops->reserve(be, &r);
    return rc == LI_OK ? LI_OK : li_error_wrap(rc, "LLaDA backend scratch: ");
}

void li_llada_scratch_free(li_llada_scratch *s) {
    if (!s) return;
    void *ps[] = {s->x,   s->xn, s->q,  s->k,   s->v,  s->att, s->gate, s->up, s->tmp, s->fm,
                  s->fl,  s->fo, s->idx, s->qa, s->sa, s->head, s->xb,  s->kb, s->vb,  s->attb,
                  s->qkv};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        li_be_free(s->be, ps[i]);
    li_free(s->idx_host);
    free(s);
}

// ---- forward --------------------------------------------------------------------------------

typedef struct {
    const li_llada *m;
    li_backend *be;
    const li_backend_ops *op;
    li_llada_step_info *info;
    int H, Hkv, Dh, ft;
    float scale;
} fwd;

static int64_t n_tiles(int rows, int ft) {
    return (rows + ft - 1) / ft;
}

// Streams query rows [q0, q1) (state at fm/fl/fo rows q0..) over key rows [k0, k1).
static void stream(const fwd *f, float *fo, float *fm, float *fl, const float *q, const float *k,
                   const float *v, int q0, int q1, int k0, int k1, bool count) {
    if (q1 <= q0 || k1 <= k0) return;
    int HDh = f->H * f->Dh, KDh = f->Hkv * f->Dh;
    f->op->flash_attn_tiles(f->be, fo + (size_t)q0 * HDh, fm + (size_t)q0 * f->H,
                            fl + (size_t)q0 * f->H, q + (size_t)q0 * HDh, q1 - q0, f->H,
                            k + (size_t)k0 * KDh, v + (size_t)k0 * KDh, k1 - k0, f->Hkv, f->Dh,
                            f->ft, f->scale);
    if (f->info) {
        f->info->flops += 4.0 * f->Dh * f->H * (double)(q1 - q0) * (k1 - k0);
        if (count) f->info->fa_tiles += n_tiles(q1 - q0, f->ft) * n_tiles(k1 - k0, f->ft);
    }
}

static void state_reset(const fwd *f, float *fo, float *fm, float *fl, int r0, int r1) {
    int64_t H = f->H, n = (int64_t)(r1 - r0);
    li_be_fill(f->be, fm + r0 * H, -INFINITY, n * H);
    li_be_fill(f->be, fl + r0 * H, 0.0f, n * H);
    li_be_fill(f->be, fo + r0 * H * f->Dh, 0.0f, n * H * f->Dh);
}

static void state_copy(const fwd *f, float *dfo, float *dfm, float *dfl, const float *sfo,
                       const float *sfm, const float *sfl, int r0, int r1) {
    if (r1 <= r0) return;
    size_t H = (size_t)f->H, HDh = H * f->Dh, n = (size_t)(r1 - r0);
    li_be_copy(f->be, dfm + r0 * H, sfm + r0 * H, n * H * sizeof(float));
    li_be_copy(f->be, dfl + r0 * H, sfl + r0 * H, n * H * sizeof(float));
    li_be_copy(f->be, dfo + r0 * HDh, sfo + r0 * HDh, n * HDh * sizeof(float));
}

// Layer-0 attention of one canvas: q, k, v (T, ·) → out (T, H*Dh), state in fo/fm/fl (T rows).
static li_status attention0(const fwd *f, const li_lacache *lc, li_llada_cache *c,
                            const li_llada_canvas *cv, const float *q, const float *k,
                            const float *v, float *out, float *fo, float *fm, float *fl) {
    int T = cv->n_tokens, ft = f->ft;
    int Klo = cv->block_lo / ft * ft;
    int Khi = (cv->block_hi + ft - 1) / ft * ft;
    if (Khi > T) Khi = T;
    state_reset(f, fo, fm, fl, 0, T);
    // outside query rows [0, Klo) and [Khi, T) over the outside key tiles
    bool use = lc->fa && !cv->block_start && c->fa_ok && c->fa_tile == ft;
    if (use) {
        state_copy(f, fo, fm, fl, c->fo, c->fm, c->fl, 0, Klo);
        state_copy(f, fo, fm, fl, c->fo, c->fm, c->fl, Khi, T);
        if (f->info) {
            int64_t qt = n_tiles(Klo, ft) + n_tiles(T - Khi, ft);
            f->info->fa_tiles_skipped += qt * (n_tiles(Klo, ft) + n_tiles(T - Khi, ft));
        }
    } else {
        stream(f, fo, fm, fl, q, k, v, 0, Klo, 0, Klo, true);
        stream(f, fo, fm, fl, q, k, v, 0, Klo, Khi, T, true);
        stream(f, fo, fm, fl, q, k, v, Khi, T, 0, Klo, true);
        stream(f, fo, fm, fl, q, k, v, Khi, T, Khi, T, true);
        if (lc->fa) {  // (buffers allocated by cache_prepare)
            state_copy(f, c->fo, c->fm, c->fl, fo, fm, fl, 0, Klo);
            state_copy(f, c->fo, c->fm, c->fl, fo, fm, fl, Khi, T);
            c->fa_ok = true;
            c->fa_tile = ft;
        }
    }
    // then the block key tiles for them
    stream(f, fo, fm, fl, q, k, v, 0, Klo, Klo, Khi, true);
    stream(f, fo, fm, fl, q, k, v, Khi, T, Klo, Khi, true);
    // block query rows: everything, same key order
    stream(f, fo, fm, fl, q, k, v, Klo, Khi, 0, Klo, true);
    stream(f, fo, fm, fl, q, k, v, Klo, Khi, Khi, T, true);
    stream(f, fo, fm, fl, q, k, v, Klo, Khi, Klo, Khi, true);
    f->op->flash_attn_finalize(f->be, out, fo, fl, (int64_t)T * f->H, f->Dh);
    return LI_OK;
}

// Plain bidirectional tiled attention (layers >= 1): all rows over all key tiles in order — or
// the backend's dense attention kernel when it has one (tensor cores; no cache depends on these
// layers' tile order, so every LaCache flag combination still sees the same values).
static void attention_plain(const fwd *f, int T, const float *q, const float *k, const float *v,
                            float *out, float *fo, float *fm, float *fl) {
    if (li_be_takes(f->be, LI_ACT_ATTENTION_DENSE, LI_DTYPE_F32) && (f->Dh == 64 || f->Dh == 128)) {
        f->op->attention_dense(f->be, out, LI_DTYPE_F32, q, T, f->H, k, v, T, f->Hkv, f->Dh,
                               f->scale);
        if (f->info) f->info->flops += 4.0 * f->Dh * f->H * (double)T * T;
        return;
    }
    state_reset(f, fo, fm, fl, 0, T);
    stream(f, fo, fm, fl, q, k, v, 0, T, 0, T, false);
    f->op->flash_attn_finalize(f->be, out, fo, fl, (int64_t)T * f->H, f->Dh);
}

static void count_mm(li_llada_step_info *info, int64_t rows, const li_weight *W) {
    if (info) info->flops += 2.0 * (double)rows * (double)W->n_rows * (double)W->n_cols;
}

// Checks one canvas and its cache; a step inside a block must keep the cached layout.
static li_status check_canvas(const li_llada *m, const li_lacache *lc, const li_llada_cache *c,
                              const li_llada_canvas *cv, int i) {
    int T = cv->n_tokens;
    if (!c) return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: no cache", i);
    if (T <= 0 || T > c->max_tokens)
        return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: %d tokens (its cache holds %d)", i, T,
                            c->max_tokens);
    if (cv->block_lo < 0 || cv->block_lo >= cv->block_hi || cv->block_hi > T)
        return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: block [%d, %d) outside [0, %d)", i,
                            cv->block_lo, cv->block_hi, T);
    if (cv->out_rows && cv->n_out < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: %d output rows", i, cv->n_out);
    for (int j = 0; cv->out_rows && j < cv->n_out; j++)
        if (cv->out_rows[j] < cv->block_lo || cv->out_rows[j] >= cv->block_hi ||
            (j > 0 && cv->out_rows[j] <= cv->out_rows[j - 1]))
            return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: output row %d (%d) is not "
                                "ascending within the block [%d, %d)", i, j, cv->out_rows[j],
                                cv->block_lo, cv->block_hi);
    for (int t = 0; t < T; t++) {
        if (cv->tokens[t] < 0 || cv->tokens[t] >= m->hp.n_vocab)
            return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: token id %d out of range [0, %d)",
                                i, cv->tokens[t], m->hp.n_vocab);
        if (cv->pos[t] < 0)
            return li_error_set(LI_ERR_INVALID_ARG, "canvas %d: negative position %d", i,
                                cv->pos[t]);
    }
    bool cached = lc->embed || lc->rope || lc->fa;
    if (!cached || cv->block_start) return LI_OK;
    if (!c->has_layout || c->T != T || c->lo != cv->block_lo || c->hi != cv->block_hi)
        return li_error_set(LI_ERR_INVALID_ARG,
                            "canvas %d: caches were filled for another "
                            "layout (a new block or layout needs block_start)",
                            i);
    for (int t = 0; t < T; t++) {
        bool in_block = t >= cv->block_lo && t < cv->block_hi;
        if (cv->pos[t] != c->pos[t] || (!in_block && cv->tokens[t] != c->tokens[t]))
            return li_error_set(LI_ERR_INVALID_ARG,
                                "canvas %d: row %d outside the block changed "
                                "since block_start (token %d -> %d, position %d -> %d)",
                                i, t, c->tokens[t], cv->tokens[t], c->pos[t], cv->pos[t]);
    }
    return LI_OK;
}

// The attention's residual add and the FFN of one layer over R rows: x += tmp (the attention
// output; with bf16 activations wo's GEMM has already added it to x), then
// x += down(silu(gate(n(x))) * up(n(x))), FP8 when fp8 != NULL.
static void ffn(const fwd *f, li_llada_scratch *s, const li_llama_layer *l,
                const li_fp8_weight *fp8, int R) {
    const li_hparams *hp = &f->m->hp;
    const li_backend_ops *op = f->op;
    li_backend *be = f->be;
    int D = hp->n_embd, F = hp->n_ff;
    const float *attn = s->act_bf16 ? NULL : s->tmp;
    if (fp8) {
        // x += attention, norm, quantise: one pass where the backend fuses them (CUDA); the
        // GEMMs the backend's fastest (CUDA: cuBLASLt's block-scaled one; CPU: the exact order)
        li_fp8_rows xq = {s->qa, s->sa, s->xn}, hq = {s->qa, s->sa, s->gate};
        li_add_rmsnorm(be, &xq, LI_DTYPE_FP8, s->x, attn, l->ffn_norm.data, R, D,
                       hp->rms_eps);
        op->matmul_fp8(be, s->gate, &xq, R, &fp8[0], false, false);
        op->matmul_fp8(be, s->up, &xq, R, &fp8[1], false, false);
        li_swiglu(be, &hq, LI_DTYPE_FP8, s->gate, s->up, R, F, F);
        op->matmul_fp8(be, s->x, &hq, R, &fp8[2], false, true);  // x += down
        if (f->info) f->info->fp8_gemm_rows += 3 * (int64_t)R;
    } else if (s->act_bf16) {  // n(x) and silu(gate) * up made in bf16, down added to x
        op->rmsnorm(be, s->xb, LI_DTYPE_BF16, s->x, l->ffn_norm.data, R, D, hp->rms_eps);
        // (gate and up as two GEMMs: one over w_gate_up measured slower on the H200, 0.304 ms
        // against 2 x 0.149 at LLaDA-8B's R = 1024)
        op->matmul(be, s->gate, s->xb, LI_DTYPE_BF16, &l->w_gate, R, false);
        op->matmul(be, s->up, s->xb, LI_DTYPE_BF16, &l->w_up, R, false);
        op->swiglu(be, s->xb, LI_DTYPE_BF16, s->gate, s->up, R, F, F);
        op->matmul(be, s->x, s->xb, LI_DTYPE_BF16, &l->w_down, R, true);
    } else {
        op->add(be, s->x, attn, (int64_t)R * D);
        op->rmsnorm(be, s->xn, LI_DTYPE_F32, s->x, l->ffn_norm.data, R, D, hp->rms_eps);
        op->matmul(be, s->gate, s->xn, LI_DTYPE_F32, &l->w_gate, R, false);
        op->matmul(be, s->up, s->xn, LI_DTYPE_F32, &l->w_up, R, false);
        op->swiglu(be, s->gate, LI_DTYPE_F32, s->gate, s->up, R, F, F);
        op->matmul(be, s->tmp, s->gate, LI_DTYPE_F32, &l->w_down, R, false);
        op->add(be, s->x, s->tmp, (int64_t)R * D);
    }
    count_mm(f->info, R, &l->w_gate);
    count_mm(f->info, R, &l->w_up);
    count_mm(f->info, R, &l->w_down);
}

// y (n, N) = norm(x) (n, D) @ W^T: the norm's rows stored in f32 (xn) or bf16 (xb).
static void norm_matmul(const fwd *f, li_llada_scratch *s, float *y, const float *x,
                        const float *norm_w, const li_weight *W, int n) {
    const li_hparams *hp = &f->m->hp;
    if (s->act_bf16) {
        f->op->rmsnorm(f->be, s->xb, LI_DTYPE_BF16, x, norm_w, n, hp->n_embd, hp->rms_eps);
        f->op->matmul(f->be, y, s->xb, LI_DTYPE_BF16, W, n, false);
    } else {
        f->op->rmsnorm(f->be, s->xn, LI_DTYPE_F32, x, norm_w, n, hp->n_embd, hp->rms_eps);
        f->op->matmul(f->be, y, s->xn, LI_DTYPE_F32, W, n, false);
    }
    count_mm(f->info, n, W);
}

// The attention output's projection added to the residual stream: x += att @ wo^T. bf16: the
// output rounded once (already, in attb, when have_attb: layers >= 1), the sum made in the GEMM's
// epilogue, and ffn adds nothing; f32: into tmp, which ffn adds.
static void attn_out(const fwd *f, li_llada_scratch *s, const li_weight *wo, int R,
                     bool have_attb) {
    if (s->act_bf16) {
        if (!have_attb)
            f->op->rope(f->be, s->attb, LI_DTYPE_BF16, s->att, NULL, R, f->H, f->Dh, NULL);
        f->op->matmul(f->be, s->x, s->attb, LI_DTYPE_BF16, wo, R, true);
    } else {
        f->op->matmul(f->be, s->tmp, s->att, LI_DTYPE_F32, wo, R, false);
    }
    count_mm(f->info, R, wo);
}

// A layer's norm and Q/K/V projections over R rows of x (s->x; layer 0: its gathered rows in
// s->xn, normalised in place on the f32 path): into s->qkv (the fused GEMM's [q | k | v] rows) or
// s->q, s->k, s->v.
static void qkv_project(const fwd *f, li_llada_scratch *s, const li_llama_layer *l,
                        const float *x, int R, bool fused) {
    const li_hparams *hp = &f->m->hp;
    const li_backend_ops *op = f->op;
    li_backend *be = f->be;
    if (s->act_bf16) {
        op->rmsnorm(be, s->xb, LI_DTYPE_BF16, x, l->attn_norm.data, R, hp->n_embd, hp->rms_eps);
        if (fused) {
            op->matmul(be, s->qkv, s->xb, LI_DTYPE_BF16, &l->wqkv, R, false);
        } else {
            op->matmul(be, s->q, s->xb, LI_DTYPE_BF16, &l->wq, R, false);
            op->matmul(be, s->k, s->xb, LI_DTYPE_BF16, &l->wk, R, false);
            op->matmul(be, s->v, s->xb, LI_DTYPE_BF16, &l->wv, R, false);
        }
    } else {
        op->rmsnorm(be, s->xn, LI_DTYPE_F32, x, l->attn_norm.data, R, hp->n_embd, hp->rms_eps);
        op->matmul(be, s->q, s->xn, LI_DTYPE_F32, &l->wq, R, false);
        op->matmul(be, s->k, s->xn, LI_DTYPE_F32, &l->wk, R, false);
        op->matmul(be, s->v, s->xn, LI_DTYPE_F32, &l->wv, R, false);
    }
    count_mm(f->info, R, &l->wq);
    count_mm(f->info, R, &l->wk);
    count_mm(f->info, R, &l->wv);
}

// A layer >= 1's attention over one canvas, rows [r0, r0 + T) at positions pos: RoPE, then every
// row over every key. bf16: K rotated and V rounded once (what attention_dense would do inside),
// the output into attb; f32: into att.
static void attention_canvas(const fwd *f, li_llada_scratch *s, bool fused, const int32_t *pos,
                             int r0, int T) {
    const li_backend_ops *op = f->op;
    li_backend *be = f->be;
    const li_rope_table *rope = &f->m->rope;
    const int H = f->H, Hkv = f->Hkv, Dh = f->Dh;
    const size_t HDh = (size_t)H * Dh, KDh = (size_t)Hkv * Dh;
    float *q = s->q + r0 * HDh, *k = s->k + r0 * KDh, *v = s->v + r0 * KDh;
    if (!s->act_bf16) {
        op->rope(be, q, LI_DTYPE_F32, q, pos, T, H, Dh, rope);
        op->rope(be, k, LI_DTYPE_F32, k, pos, T, Hkv, Dh, rope);
        attention_plain(f, T, q, k, v, s->att + r0 * HDh, s->fo + r0 * HDh, s->fm + (size_t)r0 * H,
                        s->fl + (size_t)r0 * H);
        return;
    }
    uint16_t *kb = s->kb + r0 * KDh, *vb = s->vb + r0 * KDh;
    if (fused) {
        op->qkv_rope(be, q, kb, vb, LI_DTYPE_BF16, s->qkv + r0 * (HDh + 2 * KDh), pos, T, H, Hkv,
                     Dh, rope);
    } else {
        op->rope(be, q, LI_DTYPE_F32, q, pos, T, H, Dh, rope);
        op->rope(be, kb, LI_DTYPE_BF16, k, pos, T, Hkv, Dh, rope);
        op->rope(be, vb, LI_DTYPE_BF16, v, NULL, T, Hkv, Dh, NULL);
    }
    // (may overwrite the slack rows after this canvas's output: the next canvas's, which its own
    // call, queued after this one, writes)
    op->attention_dense(be, s->attb + r0 * HDh, LI_DTYPE_BF16, q, T, H, kb, vb, T, Hkv, Dh,
                        f->scale);
    if (f->info) f->info->flops += 4.0 * Dh * H * (double)T * T;
}

// A canvas's output rows (li_llada_canvas.out_rows, or the block rows).
static int out_count(const li_llada_canvas *cv) {
    return cv->out_rows ? cv->n_out : cv->block_hi - cv->block_lo;
}
static int out_row(const li_llada_canvas *cv, int j) {
    return cv->out_rows ? cv->out_rows[j] : cv->block_lo + j;
}
// Consecutive canvas rows from output row j on.
static int run_length(const li_llada_canvas *cv, int j) {
    const int n = out_count(cv);
    int len = 1;
    while (j + len < n && out_row(cv, j + len) == out_row(cv, j) + len)
        len++;
    return len;
}

// The ops of one step over the canvases (index arrays uploaded, layouts recorded): embeddings,
// layer 0 with the caches, layers >= 1, the head. g_lo/g_hi (n): each canvas's layer-0 rows, G
// of them in all; R canvas rows in all.
static li_status forward_ops(const li_llada *m, const li_lacache *lc, li_llada_scratch *s,
                             li_llada_cache *const *caches, const li_llada_canvas *canvases,
                             int n, float *const *logits, li_llada_step_info *info,
                             const int *g_lo, const int *g_hi, int G, int R) {
    const li_hparams *hp = &m->hp;
    li_backend *be = m->be;
    const li_backend_ops *op = be->ops;
    const int D = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, Dh = hp->head_dim;
    const int V = hp->n_vocab;
    const size_t HDh = (size_t)H * Dh, KDh = (size_t)Hkv * Dh;
    fwd f = {m, be, op, info, H, Hkv, Dh, lc->fa_tile ? lc->fa_tile : DEFAULT_FA_TILE,
             1.0f / sqrtf((float)Dh)};
    const int MR = s->max_rows;
    const int32_t *tok_d = s->idx, *pos_d = s->idx + MR, *gpos_d = s->idx + 2 * MR;
    li_status rc = LI_OK;

    // ---- embeddings: x (R, D) ----
    for (int i = 0, r0 = 0; i < n; r0 += canvases[i].n_tokens, i++) {
        li_llada_cache *c = caches[i];
        const li_llada_canvas *cv = &canvases[i];
        int T = cv->n_tokens;
        if (!lc->embed) {
            op->embed(be, s->x + (size_t)r0 * D, &m->w.tok_embd, tok_d + r0, T);
            if (info) info->embed_rows += T;
            continue;
        }
        int a = c->emb_ok ? cv->block_lo : 0, b = c->emb_ok ? cv->block_hi : T;
        op->embed(be, c->emb + (size_t)a * D, &m->w.tok_embd, tok_d + r0 + a, b - a);
        if (info) info->embed_rows += b - a;
        c->emb_ok = true;
        li_be_copy(be, s->x + (size_t)r0 * D, c->emb, (size_t)T * D * sizeof(float));
    }

    // ---- layer 0: norm -> q, k, v -> RoPE on the gathered rows ----
    const li_llama_layer *l0 = &m->w.layers[0];
    for (int i = 0, r0 = 0, g = 0; i < n && rc == LI_OK; r0 += canvases[i].n_tokens, i++) {
        int k = g_hi[i] - g_lo[i];
        li_be_copy(be, s->xn + (size_t)g * D, s->x + (size_t)(r0 + g_lo[i]) * D,
                   (size_t)k * D * sizeof(float));
        g += k;
    }
    if (rc == LI_OK) {
        qkv_project(&f, s, l0, s->xn, G, false);  // (layer 0's weights are not fused)
        op->rope(be, s->q, LI_DTYPE_F32, s->q, gpos_d, G, H, Dh, &m->rope);
        op->rope(be, s->k, LI_DTYPE_F32, s->k, gpos_d, G, Hkv, Dh, &m->rope);
        if (info) info->qkv_rows += G;
    }
    if (rc == LI_OK && lc->rope) { // scatter into the canvases' RoPECache
        for (int i = 0, g = 0; i < n && rc == LI_OK; i++) {
            li_llada_cache *c = caches[i];
            size_t a = (size_t)g_lo[i], k = (size_t)(g_hi[i] - g_lo[i]);  // (cache_prepare)
            li_be_copy(be, c->q + a * HDh, s->q + (size_t)g * HDh, k * HDh * sizeof(float));
            li_be_copy(be, c->k + a * KDh, s->k + (size_t)g * KDh, k * KDh * sizeof(float));
            li_be_copy(be, c->v + a * KDh, s->v + (size_t)g * KDh, k * KDh * sizeof(float));
            c->rope_ok = true;
            g += (int)k;
        }
    }
    if (rc != LI_OK) return rc;
    // (without RoPECache every row was computed, in canvas order: s->q/k/v rows are batch rows)

    // ---- layer-0 attention per canvas, with FACache ----
    for (int i = 0, r0 = 0; i < n; r0 += canvases[i].n_tokens, i++) {
        li_llada_cache *c = caches[i];
        const float *q = lc->rope ? c->q : s->q + (size_t)r0 * HDh;
        const float *k = lc->rope ? c->k : s->k + (size_t)r0 * KDh;
        const float *v = lc->rope ? c->v : s->v + (size_t)r0 * KDh;
        LI_TRY(attention0(&f, lc, c, &canvases[i], q, k, v, s->att + (size_t)r0 * HDh,
                          s->fo + (size_t)r0 * HDh, s->fm + (size_t)r0 * H,
                          s->fl + (size_t)r0 * H));
    }
    attn_out(&f, s, &l0->wo, R, false);
    ffn(&f, s, l0, NULL, R);  // x += attention (unless attn_out added it), then the FFN

    // ---- layers >= 1: everything over all rows ----
    for (int il = 1; il < hp->n_layer; il++) {
        const li_llama_layer *l = &m->w.layers[il];
        const bool fused = s->fused && l->wqkv.data;  // q | k | v rows from one GEMM
        qkv_project(&f, s, l, s->x, R, fused);
        for (int i = 0, r0 = 0; i < n; r0 += canvases[i].n_tokens, i++)
            attention_canvas(&f, s, fused, pos_d + r0, r0, canvases[i].n_tokens);
        attn_out(&f, s, &l->wo, R, true);
        ffn(&f, s, l, lc->fp8 ? &m->fp8[3 * il] : NULL, R);  // (x += attention,) the FFN
    }

    // ---- head: the output rows (truncation) or all rows, returning the output rows ----
    // Output rows are runs of consecutive canvas rows (the block: one run); each run is one GEMM
    // under truncation (the backends' GEMMs are batch-invariant: a row's bits do not depend on
    // the rows beside it), a copy out of each head chunk otherwise.
    for (int i = 0, r0 = 0; i < n; r0 += canvases[i].n_tokens, i++) {
        const li_llada_canvas *cv = &canvases[i];
        const int T = cv->n_tokens, n_out = out_count(cv);
        if (lc->trunc) {
            for (int j = 0, len; j < n_out; j += len) {
                const int a = out_row(cv, j);
                len = run_length(cv, j);
                norm_matmul(&f, s, logits[i] + (size_t)j * V, s->x + (size_t)(r0 + a) * D,
                            m->w.out_norm.data, &m->w.output, len);
            }
            if (info) info->head_rows += n_out;
            continue;
        }
        for (int t0 = 0, j = 0; t0 < T; t0 += s->head_rows) {
            int nr = T - t0 < s->head_rows ? T - t0 : s->head_rows;
            norm_matmul(&f, s, s->head, s->x + (size_t)(r0 + t0) * D, m->w.out_norm.data,
                        &m->w.output, nr);
            while (j < n_out && out_row(cv, j) < t0 + nr) {  // the output rows in this chunk
                const int a = out_row(cv, j);
                int len = run_length(cv, j);
                if (a + len > t0 + nr) len = t0 + nr - a;
                li_be_copy(be, logits[i] + (size_t)j * V, s->head + (size_t)(a - t0) * V,
                           (size_t)len * V * sizeof(float));
                j += len;
            }
        }
        if (info) info->head_rows += T;
    }
    return LI_OK;
}

// One step for the step runner (step.h): forward_ops' arguments, and the host state its ops
// change (the caches' flags and tile, the step info) as it was before, to go back to when a
// recorded step could not run.
typedef struct {
    const li_llada *m;
    const li_lacache *lc;
    li_llada_scratch *s;
    li_llada_cache *const *caches;
    const li_llada_canvas *canvases;
    int n;
    float *const *logits;
    li_llada_step_info *info;
    const int *g_lo, *g_hi;
    int G, R;
    bool *flags0;  // (n, 3) emb_ok, rope_ok, fa_ok before the step
    int *tile0;    // (n) fa_tile before the step
    li_llada_step_info info0;
} step_args;

// The step's graph key: its shape. Canvas sizes, which caches are filled (block start or not),
// the LaCache flags; the block bounds are arguments that each recording updates.
static uint64_t step_key(const li_lacache *lc, li_llada_cache *const *caches,
                         const li_llada_canvas *canvases, int n, int ft) {
    uint64_t key = LI_STEP_KEY_INIT;
    for (int i = 0; i < n; i++) {
        const li_llada_cache *c = caches[i];
        const li_llada_canvas *cv = &canvases[i];
        // attention0 skips empty tile ranges: a block at either end of the canvas has fewer ops
        bool at_start = cv->block_lo < ft;
        bool at_end = (cv->block_hi + ft - 1) / ft * ft >= cv->n_tokens;
        uint64_t v = (uint64_t)cv->n_tokens << 8 | (uint64_t)c->emb_ok << 1 |
                     (uint64_t)c->rope_ok << 2 | (uint64_t)c->fa_ok << 3 |
                     (uint64_t)(c->fa_tile == ft) << 4 | (uint64_t)at_start << 5 |
                     (uint64_t)at_end << 6;
        key = li_step_key(key, v);
        // the head's GEMMs or copies: one per run of output rows
        int runs = 0;
        for (int j = 0, n_out = out_count(cv); j < n_out; j += run_length(cv, j))
            runs++;
        key = li_step_key(key, (uint64_t)out_count(cv) << 20 | (uint64_t)runs);
    }
    return li_step_key(key, (uint64_t)lc->embed | (uint64_t)lc->rope << 1 |
                                (uint64_t)lc->fa << 2 | (uint64_t)lc->trunc << 3 |
                                (uint64_t)lc->fp8 << 4 | (uint64_t)ft << 8);
}

// The caches' flags before the step, for step_restore; false when out of memory (the step then
// runs without recording, which needs no snapshot).
static bool step_snapshot(step_args *a) {
    a->flags0 = malloc((size_t)a->n * 3 * sizeof(bool));
    a->tile0 = malloc((size_t)a->n * sizeof(int));
    if (!a->flags0 || !a->tile0) return false;
    for (int i = 0; i < a->n; i++) {
        a->flags0[3 * i] = a->caches[i]->emb_ok;
        a->flags0[3 * i + 1] = a->caches[i]->rope_ok;
        a->flags0[3 * i + 2] = a->caches[i]->fa_ok;
        a->tile0[i] = a->caches[i]->fa_tile;
    }
    return true;
}

static li_status step_ops(void *args) {
    const step_args *a = args;
    return forward_ops(a->m, a->lc, a->s, a->caches, a->canvases, a->n, a->logits, a->info,
                       a->g_lo, a->g_hi, a->G, a->R);
}

static void step_restore(void *args) {
    const step_args *a = args;
    for (int i = 0; i < a->n; i++) {
        a->caches[i]->emb_ok = a->flags0[3 * i];
        a->caches[i]->rope_ok = a->flags0[3 * i + 1];
        a->caches[i]->fa_ok = a->flags0[3 * i + 2];
        a->caches[i]->fa_tile = a->tile0[i];
    }
    if (a->info) *a->info = a->info0;
}

li_status li_llada_forward(const li_llada *m, const li_lacache *lc, li_llada_scratch *s,
                           li_llada_cache *const *caches, const li_llada_canvas *canvases, int n,
                           float *const *logits, li_llada_step_info *info) {
    const li_hparams *hp = &m->hp;
    li_backend *be = m->be;
    const li_backend_ops *op = be->ops;
    if (!m->has_weights)
        return li_error_set(LI_ERR_INVALID_ARG, "%s: loaded for metadata only", hp->name);
    if (!op->flash_attn_tiles || !op->flash_attn_finalize ||
        (lc->fp8 && (!op->fp8_quant_rows || !op->matmul_fp8)))
        return li_error_set(LI_ERR_UNSUPPORTED, "backend '%s' lacks the LLaDA ops", op->name);
    if (n <= 0) return li_error_set(LI_ERR_INVALID_ARG, "LLaDA forward over %d canvases", n);
    int ft = lc->fa_tile ? lc->fa_tile : DEFAULT_FA_TILE;
    if (ft < 1 || ft > LI_FA_MAX_TILE)
        return li_error_set(LI_ERR_INVALID_ARG, "fa_tile %d outside [1, %d]", lc->fa_tile,
                            LI_FA_MAX_TILE);
    int R = 0;
    for (int i = 0; i < n; i++) {
        LI_TRY(check_canvas(m, lc, caches[i], &canvases[i], i));
        R += canvases[i].n_tokens;
        if (R > s->max_rows)
            return li_error_set(LI_ERR_INVALID_ARG, "%d canvas rows (the scratch holds %d)", R,
                                s->max_rows);
    }
    if (lc->fp8) LI_TRY(li_llada_fp8_prepare(m));
    for (int i = 0; i < n; i++) LI_TRY(cache_prepare(m, lc, caches[i]));

    // ---- layouts: a block start (or first use) records the canvas the caches are filled for ----
    for (int i = 0; i < n; i++) {
        li_llada_cache *c = caches[i];
        const li_llada_canvas *cv = &canvases[i];
        if (cv->block_start || !c->has_layout) {
            c->has_layout = true;
            c->T = cv->n_tokens;
            c->lo = cv->block_lo;
            c->hi = cv->block_hi;
            memcpy(c->tokens, cv->tokens, (size_t)cv->n_tokens * sizeof(int32_t));
            memcpy(c->pos, cv->pos, (size_t)cv->n_tokens * sizeof(int32_t));
            c->emb_ok = c->rope_ok = c->fa_ok = false;
        }
    }

    // ---- index arrays: tokens and positions of every canvas, positions of the layer-0 rows ----
    // Layer 0 computes q/k/v for the rows that need them ("gathered"): with RoPECache after the
    // block start only the block rows [lo, hi), else all rows; per canvas a contiguous range.
    const int MR = s->max_rows;
    int *g_lo = malloc(2 * (size_t)n * sizeof(int)), *g_hi = g_lo ? g_lo + n : NULL;
    if (!g_lo) return li_error_set(LI_ERR_OOM, "out of memory");
    int G = 0;
    for (int i = 0, r0 = 0; i < n; r0 += canvases[i].n_tokens, i++) {
        const li_llada_canvas *cv = &canvases[i];
        memcpy(s->idx_host + r0, cv->tokens, (size_t)cv->n_tokens * sizeof(int32_t));
        memcpy(s->idx_host + MR + r0, cv->pos, (size_t)cv->n_tokens * sizeof(int32_t));
        bool part = lc->rope && caches[i]->rope_ok;
        g_lo[i] = part ? cv->block_lo : 0;
        g_hi[i] = part ? cv->block_hi : cv->n_tokens;
        memcpy(s->idx_host + 2 * MR + G, cv->pos + g_lo[i],
               (size_t)(g_hi[i] - g_lo[i]) * sizeof(int32_t));
        G += g_hi[i] - g_lo[i];
    }
    li_status rc = li_be_upload(be, s->idx, s->idx_host, 3 * (size_t)MR * sizeof(int32_t));
    if (rc != LI_OK) {
        free(g_lo);
        return rc;
    }
    // One step (step.h): a graph on a device backend, queued again from the same cache flags
    // when its recording cannot run.
    step_args a = {m, lc, s, caches, canvases, n, logits, info, g_lo, g_hi, G, R,
                   .info0 = info ? *info : (li_llada_step_info){0}};
    bool can_record = be->ops->graph_begin && step_snapshot(&a);
    rc = li_step_run(be, step_key(lc, caches, canvases, n, ft), can_record, step_ops, step_restore,
                     &a);
    free(a.flags0);
    free(a.tile0);
    free(g_lo);
    if (rc != LI_OK) {
        li_be_sync(be);  // the error is rc's; drop what the backend recorded meanwhile
        return rc;
    }
    return li_be_sync(be);  // a device backend reports the ops' first error here
}
