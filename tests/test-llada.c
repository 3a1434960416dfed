// test-llada.c — the LLaDA forward (src/model/arch-llada.c) on synth:tiny-llada, several seeds:
//  - every LaCache flag combination (embed, rope, fa, trunc) gives the all-off block logits within
//    fp32 rounding, over a sequence of denoising steps in which block rows are committed to random
//    tokens, across blocks (block_start), for FACache tiles 1, 7, 16, 32, 64 (dividing and not
//    dividing the block boundaries), on contiguous canvases and DPad-like ones (suffix rows
//    dropped, positions kept);
//  - FACache on/off changes no bit (same Q/K/V: the tile order is the same by construction);
//  - the fast forward with all caches matches an independent oracle forward written here (scalar
//    ops, full-softmax bidirectional attention in fp64);
//  - two canvases batched equal each run alone; step_info counts the work saved;
//  - a step that changes a row outside the block without block_start is an error;
//  - FP8 FFN (layers >= 1) vs fp32: logit NMSE and top-1 agreement, printed and loosely bounded,
//    on tiny-llada and on SmolLM2-135M's FFNs through the Llama path (skipped if the model file is
//    absent).
// Bound for "within fp32 rounding": NMSE <= 1e-10 and max |diff| <= 1e-5 * max |ref|. The only
// differences between flag settings are the rows a GEMM runs over (OpenBLAS vs the row kernel,
// different blockings) and the order of the attention key tiles: each is a few fp32 ulps
// (~6e-8 relative) per value, amplified by 3 layers: observed NMSE ~1e-14, so 1e-10 leaves four
// orders of magnitude and still fails on any real error (a wrong row is NMSE ~1).
// Seed: test_seed() (tests/test.h), fixed unless LI_TEST_SEED says otherwise; printed first.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llada-internal.h"
#include "model/llada.h"
#include "model/llama.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

#define MAXT 96
#define MASK 261 // <|mdm_mask|> of the byte tokenizer with a 512-token vocabulary
#define MAX_STEPS 16

static unsigned long long g_seed;
static li_backend *be_fast, *be_ref;

// ---- scripts: a canvas's sequence of denoising steps ------------------------------------------

typedef struct {
    int T, lo, hi;
    bool block_start;
    int32_t tok[MAXT], pos[MAXT];
} step_t;

typedef struct {
    int n;
    step_t s[MAX_STEPS];
} script_t;

// Prompt of P random bytes, 3 blocks of B masks, 3 steps per block; after each step a few masked
// block rows are committed to random bytes. dpad: each block's canvas keeps the rows up to the
// block end plus a random subset of the later masks (original positions kept).
static void make_script(script_t *sc, int P, int B, bool dpad) {
    int N = P + 3 * B;
    LI_ASSERT(N <= MAXT);
    int32_t full[MAXT];
    for (int t = 0; t < N; t++)
        full[t] = t < P ? randint(0, 255) : MASK;
    sc->n = 0;
    for (int b = 0; b < 3; b++) {
        int blo = P + b * B, bhi = blo + B;
        int rows[MAXT], T = 0;
        for (int t = 0; t < N; t++)
            if (t < bhi || !dpad || li_rng_uniform(&rng) < 0.4) rows[T++] = t;
        for (int st = 0; st < 3; st++) {
            step_t *s = &sc->s[sc->n++];
            s->T = T;
            s->lo = blo; // rows before the block are all kept, so row index = position there
            s->hi = bhi;
            s->block_start = st == 0;
            for (int i = 0; i < T; i++) {
                s->tok[i] = full[rows[i]];
                s->pos[i] = rows[i];
            }
            for (int t = blo; t < bhi; t++) // commit some masked rows for the next step
                if (full[t] == MASK && li_rng_uniform(&rng) < 0.4) full[t] = randint(0, 255);
        }
    }
}

// Runs a script on one canvas; out receives n * B * V logits (block rows of every step).
static li_status run_script(li_llada *m, const li_lacache *lc, const script_t *sc, float *out,
                            li_llada_step_info *info) {
    const int V = li_llada_hparams(m)->n_vocab;
    li_llada_cache *c = NULL;
    li_llada_scratch *s = NULL;
    li_status rc = li_llada_cache_init(&c, m, MAXT);
    if (rc == LI_OK) rc = li_llada_scratch_init(&s, m, MAXT);
    // a device backend's logits live in its memory: one block's worth, downloaded per step
    li_backend *be = m->be;
    float *dev = li_be_is_device(be) ? li_be_alloc(be, (size_t)MAXT * V * 4, "test logits") : NULL;
    if (li_be_is_device(be) && !dev) rc = LI_ERR_OOM;
    size_t off = 0;
    for (int i = 0; i < sc->n && rc == LI_OK; i++) {
        const step_t *st = &sc->s[i];
        li_llada_canvas cv = {st->T, st->tok, st->pos, st->lo, st->hi, st->block_start, NULL, 0};
        float *lg = dev ? dev : out + off;
        size_t nb = (size_t)(st->hi - st->lo) * V;
        rc = li_llada_forward(m, lc, s, &c, &cv, 1, &lg, info);
        if (rc == LI_OK && dev) rc = li_be_download(be, out + off, dev, nb * 4);
        off += nb;
    }
    li_be_free(be, dev);
    li_llada_cache_free(c);
    li_llada_scratch_free(s);
    return rc;
}

static size_t script_logits(const script_t *sc, int V) {
    size_t n = 0;
    for (int i = 0; i < sc->n; i++)
        n += (size_t)(sc->s[i].hi - sc->s[i].lo) * V;
    return n;
}

static double max_rel(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - ref[i]));
        mr = fmax(mr, fabs((double)ref[i]));
    }
    return mr > 0 ? md / mr : md;
}

static const char *combo_name(int cb, char *buf) {
    snprintf(buf, 64, "%s%s%s%s", cb & 1 ? "embed," : "", cb & 2 ? "rope," : "",
             cb & 4 ? "fa," : "", cb & 8 ? "trunc," : "");
    if (!buf[0]) snprintf(buf, 64, "off");
    return buf;
}

static double worst_nmse, worst_rel;

static void test_combinations(uint64_t mseed) {
    li_llada *m;
    if (li_llada_synth(&m, "tiny-llada", mseed, be_fast, false) != LI_OK) {
        TEST_BEGIN("tiny-llada synth");
        CHECK(0, "%s", li_error_msg());
        TEST_END();
        return;
    }
    const int V = li_llada_hparams(m)->n_vocab;
    static const int tiles[] = {1, 7, 16, 32, 64};
    for (int dp = 0; dp < 2; dp++) {
        script_t sc;
        make_script(&sc, randint(5, 20), randint(6, 12), dp == 1);
        size_t n = script_logits(&sc, V);
        float *ref = xmalloc(n * 4), *got[16];
        li_lacache off = {0};
        li_status rc = run_script(m, &off, &sc, ref, NULL);
        for (int cb = 0; cb < 16; cb++)
            got[cb] = xmalloc(n * 4);
        char name[200], cn[64];
        for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++) {
            snprintf(name, sizeof name,
                     "model seed %llu, %s canvas (P %d, block %d), fa_tile %d: "
                     "16 flag combinations = all-off; fa on/off bit-identical",
                     (unsigned long long)mseed, dp ? "DPad" : "full", sc.s[0].lo,
                     sc.s[0].hi - sc.s[0].lo, tiles[ti]);
            TEST_BEGIN(name);
            CHECK(rc == LI_OK, "all-off run: %s", li_error_msg());
            for (int cb = 0; cb < 16 && rc == LI_OK; cb++) {
                li_lacache lc = {cb & 1, cb & 2, cb & 4, cb & 8, false, tiles[ti]};
                li_status r2 = run_script(m, &lc, &sc, got[cb], NULL);
                CHECK(r2 == LI_OK, "%s: %s", combo_name(cb, cn), li_error_msg());
                if (r2 != LI_OK) continue;
                double e = test_nmse(got[cb], ref, (long)n), mr = max_rel(got[cb], ref, n);
                worst_nmse = fmax(worst_nmse, e);
                worst_rel = fmax(worst_rel, mr);
                CHECK(e <= 1e-10 && mr <= 1e-5 && !test_has_nan(got[cb], (long)n),
                      "%s: nmse %g, max rel %g; seed %llu", combo_name(cb, cn), e, mr, g_seed);
                if (cb & 4)
                    CHECK(memcmp(got[cb], got[cb & ~4], n * 4) == 0,
                          "%s differs from the same without fa; seed %llu", combo_name(cb, cn),
                          g_seed);
            }
            TEST_END();
        }
        for (int cb = 0; cb < 16; cb++)
            free(got[cb]);
        free(ref);
    }
    li_llada_free(m);
}

// ---- an independent oracle forward ----------------------------------------------------------

// Bidirectional LLaDA forward of one canvas with the scalar ops and a full softmax in fp64, read
// from the weights directly (llada-internal.h); logits of rows [lo, hi) into out.
static void oracle_forward(const li_llada *m, const step_t *st, float *out) {
    const li_hparams *hp = &m->hp;
    const li_backend_ops *op = be_ref->ops;
    int T = st->T, D = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, Dh = hp->head_dim;
    int F = hp->n_ff, HD = H * Dh, KD = Hkv * Dh;
    float *x = xmalloc((size_t)T * D * 4), *xn = xmalloc((size_t)T * D * 4);
    float *q = xmalloc((size_t)T * HD * 4), *k = xmalloc((size_t)T * KD * 4);
    float *v = xmalloc((size_t)T * KD * 4), *att = xmalloc((size_t)T * HD * 4);
    float *g = xmalloc((size_t)T * F * 4), *u = xmalloc((size_t)T * F * 4);
    float *tmp = xmalloc((size_t)T * D * 4);
    op->embed(be_ref, x, &m->w.tok_embd, st->tok, T);
    for (int il = 0; il < hp->n_layer; il++) {
        const li_llama_layer *l = &m->w.layers[il];
        op->rmsnorm(be_ref, xn, LI_DTYPE_F32, x, l->attn_norm.data, T, D, hp->rms_eps);
        op->matmul(be_ref, q, xn, LI_DTYPE_F32, &l->wq, T, false);
        op->matmul(be_ref, k, xn, LI_DTYPE_F32, &l->wk, T, false);
        op->matmul(be_ref, v, xn, LI_DTYPE_F32, &l->wv, T, false);
        op->rope(be_ref, q, LI_DTYPE_F32, q, st->pos, T, H, Dh, &m->rope);
        op->rope(be_ref, k, LI_DTYPE_F32, k, st->pos, T, Hkv, Dh, &m->rope);
        // softmax(q k^T / sqrt(Dh)) v over all rows: no mask
        test_attention_full(att, q, k, v, T, H, T, Hkv, Dh, 1.0 / sqrt((double)Dh));
        op->matmul(be_ref, tmp, att, LI_DTYPE_F32, &l->wo, T, false);
        op->add(be_ref, x, tmp, (int64_t)T * D);
        op->rmsnorm(be_ref, xn, LI_DTYPE_F32, x, l->ffn_norm.data, T, D, hp->rms_eps);
        op->matmul(be_ref, g, xn, LI_DTYPE_F32, &l->w_gate, T, false);
        op->matmul(be_ref, u, xn, LI_DTYPE_F32, &l->w_up, T, false);
        op->swiglu(be_ref, g, LI_DTYPE_F32, g, u, T, F, F);
        op->matmul(be_ref, tmp, g, LI_DTYPE_F32, &l->w_down, T, false);
        op->add(be_ref, x, tmp, (int64_t)T * D);
    }
    int nb = st->hi - st->lo;
    op->rmsnorm(be_ref, xn, LI_DTYPE_F32, x + (size_t)st->lo * D, m->w.out_norm.data, nb, D,
                hp->rms_eps);
    op->matmul(be_ref, out, xn, LI_DTYPE_F32, &m->w.output, nb, false);
    free(x), free(xn), free(q), free(k), free(v), free(att), free(g), free(u), free(tmp);
}

static void test_oracle(uint64_t mseed) {
    li_llada *m;
    LI_ASSERT(li_llada_synth(&m, "tiny-llada", mseed, be_fast, false) == LI_OK);
    const int V = m->hp.n_vocab;
    for (int dp = 0; dp < 2; dp++) {
        script_t sc;
        make_script(&sc, randint(5, 20), randint(6, 12), dp == 1);
        size_t n = script_logits(&sc, V);
        float *got = xmalloc(n * 4), *want = xmalloc(n * 4);
        li_lacache all = {true, true, true, true, false, 7};
        li_status rc = run_script(m, &all, &sc, got, NULL);
        size_t off = 0;
        for (int i = 0; i < sc.n; i++) {
            oracle_forward(m, &sc.s[i], want + off);
            off += (size_t)(sc.s[i].hi - sc.s[i].lo) * V;
        }
        char name[160];
        snprintf(name, sizeof name,
                 "model seed %llu, %s canvas: all caches (tile 7) = oracle forward "
                 "(scalar ops, fp64 full softmax)",
                 (unsigned long long)mseed, dp ? "DPad" : "full");
        TEST_BEGIN(name);
        double e = test_nmse(got, want, (long)n);
        CHECK(rc == LI_OK, "%s", li_error_msg());
        CHECK(e <= 1e-10, "nmse %g; seed %llu", e, g_seed);
        double mean = 0, var = 0; // the logits are not degenerate
        for (int i = 0; i < V; i++)
            mean += got[i] / V;
        for (int i = 0; i < V; i++)
            var += (got[i] - mean) * (got[i] - mean) / V;
        CHECK(var > 1e-2, "logit variance %g; seed %llu", var, g_seed);
        TEST_END();
        free(got), free(want);
    }
    li_llada_free(m);
}

// Two canvases (different lengths, one DPad) batched in one call vs each alone, all caches on;
// and the work counters.
static void test_batch_and_info(uint64_t mseed) {
    li_llada *m;
    LI_ASSERT(li_llada_synth(&m, "tiny-llada", mseed, be_fast, false) == LI_OK);
    const int V = m->hp.n_vocab;
    script_t sc[2];
    make_script(&sc[0], randint(5, 20), randint(6, 12), false);
    make_script(&sc[1], randint(5, 20), randint(6, 12), true);
    size_t n0 = script_logits(&sc[0], V), n1 = script_logits(&sc[1], V);
    float *alone[2] = {xmalloc(n0 * 4), xmalloc(n1 * 4)},
          *bat[2] = {xmalloc(n0 * 4), xmalloc(n1 * 4)};
    // tile 4 < P: the key tiles before the block are always whole, so FACache always skips some
    // (with tile 16 and a short prompt every outside tile can straddle the block: nothing to skip)
    li_lacache all = {true, true, true, true, false, 4};
    li_status rc = run_script(m, &all, &sc[0], alone[0], NULL);
    if (rc == LI_OK) rc = run_script(m, &all, &sc[1], alone[1], NULL);
    li_llada_cache *c[2] = {NULL, NULL};
    li_llada_scratch *s = NULL;
    if (rc == LI_OK) rc = li_llada_cache_init(&c[0], m, MAXT);
    if (rc == LI_OK) rc = li_llada_cache_init(&c[1], m, MAXT);
    if (rc == LI_OK) rc = li_llada_scratch_init(&s, m, 2 * MAXT);
    size_t off[2] = {0, 0};
    li_llada_step_info inf_on[MAX_STEPS] = {0};
    for (int i = 0; i < sc[0].n && rc == LI_OK; i++) { // both scripts have 9 steps
        li_llada_canvas cv[2];
        float *lg[2];
        for (int j = 0; j < 2; j++) {
            const step_t *st = &sc[j].s[i];
            cv[j] = (li_llada_canvas){st->T, st->tok, st->pos, st->lo, st->hi, st->block_start, NULL, 0};
            lg[j] = bat[j] + off[j];
            off[j] += (size_t)(st->hi - st->lo) * V;
        }
        rc = li_llada_forward(m, &all, s, c, cv, 2, lg, &inf_on[i]);
    }
    TEST_BEGIN("two canvases batched = each alone (all caches, tile 4)");
    CHECK(rc == LI_OK, "%s", li_error_msg());
    double e0 = test_nmse(bat[0], alone[0], (long)n0), e1 = test_nmse(bat[1], alone[1], (long)n1);
    CHECK(e0 <= 1e-10 && e1 <= 1e-10, "nmse %g, %g; seed %llu", e0, e1, g_seed);
    TEST_END();

    TEST_BEGIN("step_info: block rows only within a block, FACache tiles skipped, fewer FLOPs");
    li_lacache off_ = {0};
    off_.fa_tile = 4;
    li_llada_step_info inf_off = {0};
    LI_ASSERT(sc[0].s[1].block_start == false);
    int T0 = sc[0].s[1].T, T1 = sc[1].s[1].T;
    int B0 = sc[0].s[1].hi - sc[0].s[1].lo, B1 = sc[1].s[1].hi - sc[1].s[1].lo;
    // one all-off step of the same two canvases
    li_llada_cache *c2[2] = {NULL, NULL};
    if (rc == LI_OK) rc = li_llada_cache_init(&c2[0], m, MAXT);
    if (rc == LI_OK) rc = li_llada_cache_init(&c2[1], m, MAXT);
    if (rc == LI_OK) {
        li_llada_canvas cv[2];
        for (int j = 0; j < 2; j++) {
            const step_t *st = &sc[j].s[1];
            cv[j] = (li_llada_canvas){st->T, st->tok, st->pos, st->lo, st->hi, false, NULL, 0};
        }
        rc = li_llada_forward(m, &off_, s, c2, cv, 2, (float *[]){bat[0], bat[1]}, &inf_off);
    }
    CHECK(rc == LI_OK, "%s", li_error_msg());
    const li_llada_step_info *a = &inf_on[1];
    CHECK(a->embed_rows == B0 + B1 && a->qkv_rows == B0 + B1 && a->head_rows == B0 + B1,
          "embed %lld qkv %lld head %lld, block rows %d", (long long)a->embed_rows,
          (long long)a->qkv_rows, (long long)a->head_rows, B0 + B1);
    CHECK(inf_off.embed_rows == T0 + T1 && inf_off.qkv_rows == T0 + T1 &&
              inf_off.head_rows == T0 + T1,
          "all-off rows");
    CHECK(a->fa_tiles_skipped > 0 && inf_off.fa_tiles_skipped == 0, "skipped %lld",
          (long long)a->fa_tiles_skipped);
    CHECK(a->fa_tiles + a->fa_tiles_skipped == inf_off.fa_tiles, "tiles %lld + %lld != %lld",
          (long long)a->fa_tiles, (long long)a->fa_tiles_skipped, (long long)inf_off.fa_tiles);
    CHECK(a->flops < inf_off.flops, "flops %g vs %g", a->flops, inf_off.flops);
    CHECK(inf_on[0].embed_rows == T0 + T1, "block start embeds everything");
    TEST_END();

    TEST_BEGIN("a row outside the block changed without block_start is an error");
    step_t bad = sc[0].s[1];
    bad.tok[0] = (bad.tok[0] + 1) % 256;
    li_llada_canvas cv = {bad.T, bad.tok, bad.pos, bad.lo, bad.hi, false, NULL, 0};
    li_status r3 = li_llada_forward(m, &all, s, c, &cv, 1, (float *[]){bat[0]}, NULL);
    CHECK(r3 == LI_ERR_INVALID_ARG, "status %d", r3);
    fprintf(stderr, "  (expected error: %s)\n", li_error_msg());
    cv.block_lo = 0, cv.block_hi = bad.T + 1;
    CHECK(li_llada_forward(m, &all, s, c, &cv, 1, (float *[]){bat[0]}, NULL) == LI_ERR_INVALID_ARG,
          "block past the end accepted");
    TEST_END();
    li_llada_cache_free(c[0]), li_llada_cache_free(c[1]);
    li_llada_cache_free(c2[0]), li_llada_cache_free(c2[1]);
    li_llada_scratch_free(s);
    for (int j = 0; j < 2; j++)
        free(alone[j]), free(bat[j]);
    li_llada_free(m);
}

// ---- FP8 ------------------------------------------------------------------------------------

static void compare_logits(const float *a, const float *ref, int rows, int V, double *nmse,
                           int *agree) {
    *nmse = test_nmse(a, ref, (long)rows * V);
    *agree = 0;
    for (int r = 0; r < rows; r++) {
        int ia = 0, ib = 0;
        for (int i = 1; i < V; i++) {
            if (a[(size_t)r * V + i] > a[(size_t)r * V + ia]) ia = i;
            if (ref[(size_t)r * V + i] > ref[(size_t)r * V + ib]) ib = i;
        }
        *agree += ia == ib;
    }
}

// Inside a test: every LaCache combination (flags 1..15, FACache tile `tile`) on script sc gives
// the all-off logits `off` (n floats) bit for bit; got is n floats of scratch.
static void check_combinations_exact(li_llada *m, const script_t *sc, const float *off, float *got,
                                     size_t n, int tile) {
    char cn[64];
    for (int cb = 1; cb < 16; cb++) {
        li_lacache lc = {cb & 1, cb & 2, cb & 4, cb & 8, false, tile};
        li_status r2 = run_script(m, &lc, sc, got, NULL);
        CHECK(r2 == LI_OK, "%s: %s", combo_name(cb, cn), li_error_msg());
        CHECK(r2 != LI_OK || memcmp(got, off, n * 4) == 0, "%s differs from all-off; seed %llu",
              combo_name(cb, cn), g_seed);
    }
}

// bf16 activations (backend.h's rmsnorm_bf16 & co.; the GPU's default) through the oracle's ops,
// which define them as the f32 op then the rounding: the model's bf16 path, which CI cannot run on
// a GPU, runs here. Every LaCache combination equals all-off bit for bit on it too, and it stays
// within bf16 rounding of the f32 path (and differs from it: the path was taken).
static void test_bf16_activations(uint64_t mseed) {
    li_llada *m;
    LI_ASSERT(li_llada_synth(&m, "tiny-llada", mseed, be_ref, false) == LI_OK);
    const int V = m->hp.n_vocab;
    script_t sc;
    make_script(&sc, randint(5, 12), randint(6, 10), randint(0, 1) == 1);
    size_t n = script_logits(&sc, V);
    float *f32 = xmalloc(n * 4), *off16 = xmalloc(n * 4), *got = xmalloc(n * 4);
    li_lacache off = {.fa_tile = 7};  // the combinations' layer-0 tiles
    setenv("LI_LLADA_ACT", "f32", 1);
    li_status rc = run_script(m, &off, &sc, f32, NULL);
    setenv("LI_LLADA_ACT", "bf16", 1);
    if (rc == LI_OK) rc = run_script(m, &off, &sc, off16, NULL);
    char name[160];
    snprintf(name, sizeof name, "model seed %llu: bf16 activations (oracle ops) within bf16 "
             "rounding of f32; 16 LaCache combinations = all-off bit for bit",
             (unsigned long long)mseed);
    TEST_BEGIN(name);
    CHECK(rc == LI_OK, "%s", li_error_msg());
    if (rc == LI_OK) {
        double e;
        int agree, rows = (int)(n / V);
        compare_logits(off16, f32, rows, V, &e, &agree);
        printf("# bf16 activations vs f32 on tiny-llada (oracle ops): nmse %.3g, top-1 %d/%d\n",
               e, agree, rows);
        CHECK(e > 0 && e < 1e-3, "nmse %g; seed %llu", e, g_seed);
        CHECK(agree >= rows * 9 / 10, "top-1 agreement %d/%d; seed %llu", agree, rows, g_seed);
    }
    if (rc == LI_OK) check_combinations_exact(m, &sc, off16, got, n, 7);
    TEST_END();
    unsetenv("LI_LLADA_ACT");
    free(f32), free(off16), free(got);
    li_llada_free(m);
}

// Step graphs (LI_CUDA_GRAPHS=1: a key's first step eager, later ones recorded and replayed, with
// each new block's bounds updated into the kept graph) against the same steps queued op by op, on
// the same weights: logits bit for bit, all off and every cache on. (test-dllm's graph run parts
// 4 of 225 decodings for some seeds — factor 2.5, all four caches — on this code and the code
// before it; this compares the forward itself, step by step.)
static void test_device_graphs(const char *backend, const li_llada *m, const script_t *sc,
                               size_t n) {
    setenv("LI_CUDA_GRAPHS", "1", 1);
    li_backend *bg = NULL;
    li_status rc = li_backend_open(&bg, backend, 1, 0);
    unsetenv("LI_CUDA_GRAPHS");
    if (rc != LI_OK || !bg->ops->graph_begin) {
        printf("SKIP: test-llada graph cases: no step graphs on '%s'\n", backend);
        li_backend_free(bg);
        return;
    }
    bg->batch_invariant = true;
    li_llada *mg = NULL;
    rc = li_llada_synth(&mg, "llada-mid", 7, bg, false);  // the weights m was made with
    float *eager = xmalloc(n * 4), *graph = xmalloc(n * 4);
    static const li_lacache cfgs[] = {{.fa_tile = 16}, {true, true, true, true, false, 16}};
    for (int ci = 0; ci < 2; ci++) {
        char name[160];
        snprintf(name, sizeof name, "%s llada-mid, %s: step graphs = op by op, bit for bit",
                 backend, ci ? "every cache on" : "caches off");
        TEST_BEGIN(name);
        CHECK(rc == LI_OK, "%s", li_error_msg());
        li_status r1 = rc == LI_OK ? run_script((li_llada *)m, &cfgs[ci], sc, eager, NULL) : rc;
        li_status r2 = rc == LI_OK ? run_script(mg, &cfgs[ci], sc, graph, NULL) : rc;
        CHECK(r1 == LI_OK && r2 == LI_OK, "%s", li_error_msg());
        if (r1 == LI_OK && r2 == LI_OK) {
            size_t first = 0;
            while (first < n && eager[first] == graph[first]) first++;
            CHECK(first == n, "first different logit at %zu of %zu (nmse %g); seed %llu", first,
                  n, test_nmse(graph, eager, (long)n), g_seed);
        }
        TEST_END();
    }
    free(eager), free(graph);
    li_llada_free(mg);
    li_backend_free(bg);
}

// On a device backend (LI_TEST_BACKEND=cuda, make CUDA=1 gpu-check), llada-mid (head dim 64,
// which the GPU's dense attention takes): the bf16-activation path must give the f32 path's
// logits bit for bit (each bf16 op stores the rounding the next op would have applied, and the
// fused residual add is the same fp32 sum), with FP8 too; and every LaCache combination equals
// all-off bit for bit on it (batch-invariant GEMMs, as the engine sets for diffusion models).
static void test_device_bf16(const char *backend) {
    li_backend *be = NULL;
    if (li_backend_open(&be, backend, 1, 0) != LI_OK) {
        printf("SKIP: test-llada device cases: no usable '%s' backend here: %s\n", backend,
               li_error_msg());
        return;
    }
    // (e.g. cpu-devsim: the f32 path only, nothing to compare)
    if (!li_be_takes(be, LI_ACT_MATMUL, LI_DTYPE_BF16)) {
        printf("SKIP: test-llada device cases: backend '%s' has no bf16 activation ops\n",
               backend);
        li_backend_free(be);
        return;
    }
    be->batch_invariant = true;
    li_llada *m = NULL;
    li_status rc = li_llada_synth(&m, "llada-mid", 7, be, false);
    if (rc != LI_OK) {
        TEST_BEGIN("llada-mid on the device");
        CHECK(0, "%s", li_error_msg());
        TEST_END();
        li_backend_free(be);
        return;
    }
    const int V = m->hp.n_vocab;
    script_t sc;
    make_script(&sc, randint(20, 40), randint(8, 16), randint(0, 1) == 1);
    size_t n = script_logits(&sc, V);
    float *f32 = xmalloc(n * 4), *b16 = xmalloc(n * 4), *got = xmalloc(n * 4);
    char name[200];
    // the f32 path multiplies Q, K and V separately: so does the bf16 one here
    setenv("LI_LLADA_FUSED", "0", 1);
    for (int fp8 = 1; fp8 >= 0; fp8--) {  // (b16 ends with the plain run's logits)
        li_lacache off = {.fp8 = fp8, .fa_tile = 16};  // the combinations' layer-0 tiles
        setenv("LI_LLADA_ACT", "f32", 1);
        rc = run_script(m, &off, &sc, f32, NULL);
        setenv("LI_LLADA_ACT", "bf16", 1);
        if (rc == LI_OK) rc = run_script(m, &off, &sc, b16, NULL);
        snprintf(name, sizeof name,
                 "%s llada-mid%s: bf16 activations = f32 activations bit for bit", backend,
                 fp8 ? " FP8" : "");
        TEST_BEGIN(name);
        CHECK(rc == LI_OK, "%s", li_error_msg());
        if (rc == LI_OK) {
            double e = test_nmse(b16, f32, (long)n);
            CHECK(memcmp(b16, f32, n * 4) == 0, "logits differ: nmse %g; seed %llu", e, g_seed);
            CHECK(!test_has_nan(b16, (long)n), "NaN; seed %llu", g_seed);
        }
        TEST_END();
    }
    // the fused Q/K/V GEMM (the default): another GEMM shape, so possibly another fp32 summation
    // orders — within rounding of the unfused run, and the reference for the combinations below
    unsetenv("LI_LLADA_FUSED");
    li_lacache off = {.fa_tile = 16};
    float *fz = xmalloc(n * 4);
    if (rc == LI_OK) rc = run_script(m, &off, &sc, fz, NULL);
    snprintf(name, sizeof name, "%s llada-mid, bf16 activations: the fused Q/K/V GEMM "
             "within rounding of three", backend);
    TEST_BEGIN(name);
    CHECK(rc == LI_OK, "%s", li_error_msg());
    if (rc == LI_OK) {
        double e = test_nmse(fz, b16, (long)n);
        printf("# fused vs separate projections: logit nmse %.3g\n", e);
        CHECK(e <= 1e-4 && !test_has_nan(fz, (long)n), "nmse %g; seed %llu", e, g_seed);
    }
    TEST_END();
    memcpy(b16, fz, n * 4);
    free(fz);
    snprintf(name, sizeof name, "%s llada-mid, bf16 activations, fused Q/K/V: 16 LaCache "
             "combinations = all-off bit for bit", backend);
    TEST_BEGIN(name);
    if (rc == LI_OK) check_combinations_exact(m, &sc, b16, got, n, 16);
    TEST_END();
    unsetenv("LI_LLADA_ACT");
    test_device_graphs(backend, m, &sc, n);
    free(f32), free(b16), free(got);
    li_llada_free(m);
    li_backend_free(be);
}

static void test_fp8_tiny(uint64_t mseed) {
    li_llada *m;
    LI_ASSERT(li_llada_synth(&m, "tiny-llada", mseed, be_fast, false) == LI_OK);
    const int V = m->hp.n_vocab;
    script_t sc;
    make_script(&sc, randint(10, 20), 12, false);
    size_t n = script_logits(&sc, V);
    float *f32 = xmalloc(n * 4), *f8 = xmalloc(n * 4), *f8c = xmalloc(n * 4);
    li_lacache off = {0}, fp8 = {.fp8 = true}, fp8all = {true, true, true, true, true, 7};
    li_llada_step_info info = {0};
    li_status rc = run_script(m, &off, &sc, f32, NULL);
    if (rc == LI_OK) rc = run_script(m, &fp8, &sc, f8, &info);
    if (rc == LI_OK) rc = run_script(m, &fp8all, &sc, f8c, NULL);
    double e;
    int agree, rows = (int)(n / V);
    compare_logits(f8, f32, rows, V, &e, &agree);
    printf("# FP8 FFN on tiny-llada (model seed %llu, layers 1-2): logit nmse %.3g, top-1 "
           "agreement %d/%d\n",
           (unsigned long long)mseed, e, agree, rows);
    TEST_BEGIN("FP8 FFN on tiny-llada: small error vs fp32; caches exact with FP8 too");
    CHECK(rc == LI_OK, "%s", li_error_msg());
    CHECK(e > 0 && e < 1e-2, "nmse %g; seed %llu", e, g_seed);
    CHECK(agree >= rows * 8 / 10, "top-1 agreement %d/%d; seed %llu", agree, rows, g_seed);
    CHECK(info.fp8_gemm_rows > 0, "no FP8 GEMM rows counted");
    // With FP8 the caches stay exact up to layer 1's input, but an fp32-rounding difference there
    // can move a value across an e4m3 rounding boundary (one code step: 2^-4 relative), so the
    // bound is that of a few code flips, not of fp32 rounding.
    double ec = test_nmse(f8c, f8, (long)n);
    printf("# FP8 with all caches vs FP8 all-off: nmse %.3g\n", ec);
    CHECK(ec <= 1e-4, "all caches + fp8 vs fp8 alone: nmse %g; seed %llu", ec, g_seed);
    TEST_END();

    TEST_BEGIN("FP8 weight cache: 128x128 block scales and codes, computed independently");
    int bad = 0;
    for (int il = 1; il < m->hp.n_layer; il++)
        for (int j = 0; j < 3; j++) {
            const li_llama_layer *l = &m->w.layers[il];
            const li_weight *W = j == 0 ? &l->w_gate : j == 1 ? &l->w_up : &l->w_down;
            const li_fp8_weight *q = &m->fp8[3 * il + j];
            int N = (int)W->n_rows, K = (int)W->n_cols, GK = (K + 127) / 128;
            const float *w = W->data; // tiny-llada is f32
            CHECK(q->n_rows == N && q->n_cols == K, "shape");
            for (int bn = 0; bn * 128 < N; bn++)
                for (int bk = 0; bk * 128 < K; bk++) {
                    float amax = 0;
                    for (int r = bn * 128; r < N && r < bn * 128 + 128; r++)
                        for (int c = bk * 128; c < K && c < bk * 128 + 128; c++)
                            amax = fmaxf(amax, fabsf(w[(size_t)r * K + c]));
                    float sc = amax / 448.0f;
                    bad += q->scale[bn * GK + bk] != sc;
                    for (int r = bn * 128; r < N && r < bn * 128 + 128; r++)
                        for (int c = bk * 128; c < K && c < bk * 128 + 128; c++)
                            bad += q->q[(size_t)r * K + c] !=
                                   li_f32_to_e4m3(w[(size_t)r * K + c] / sc);
                }
        }
    CHECK(bad == 0, "%d mismatches", bad);
    TEST_END();
    free(f32), free(f8), free(f8c);
    li_llada_free(m);
}

// SmolLM2-135M through the Llama path, FFNs of layers >= 1 in FP8 vs as loaded (Q4_1/Q8_0
// dequantised to f32): the FP8 error proxy on real weights.
static void test_fp8_smollm2(void) {
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!li_path_exists(path)) {
        TEST_SKIP("FP8 FFN on SmolLM2-135M", "%s not present", path);
        return;
    }
    li_llama m;
    li_tokenizer *tok = NULL;
    if (li_llama_load(&m, path, be_fast, false) != LI_OK ||
        li_tokenizer_load_gguf(&tok, m.store.gguf) != LI_OK) {
        TEST_BEGIN("FP8 FFN on SmolLM2-135M");
        CHECK(0, "%s", li_error_msg());
        TEST_END();
        return;
    }
    static const char *prompts[] = {
        "The capital of France is Paris. The capital of Germany is",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who",
        "Photosynthesis is the process by which green plants use sunlight to",
    };
    const int V = m.hp.n_vocab, L = m.hp.n_layer, Hkv = m.hp.n_head_kv, Dh = m.hp.head_dim;
    double sum_e = 0;
    int agree_all = 0, rows_all = 0;
    li_status rc = LI_OK;
    li_llama_scratch s;
    bool have_s = false;
    for (size_t p = 0; p < sizeof prompts / sizeof prompts[0] && rc == LI_OK; p++) {
        int32_t *ids = NULL;
        int T = 0;
        rc = li_tokenizer_encode(tok, prompts[p], strlen(prompts[p]), false, true, &ids, &T);
        if (rc != LI_OK) break;
        if (!have_s) {
            rc = li_llama_scratch_init(&s, m.be, &m.hp, 256, 0);
            have_s = rc == LI_OK;
        }
        LI_ASSERT(T <= 256);
        li_kv_storage kv = {.n_layer = L,
                            .n_head_kv = Hkv,
                            .head_dim = Dh,
                            .page_size = 256,
                            .n_pages = 1,
                            .data = xmalloc((size_t)L * 2 * Hkv * 256 * Dh * 4)};
        uint64_t page = li_page_word(0, T, 0);
        int32_t pos[256], vis[256], rows[256];
        int64_t slot[256];
        for (int t = 0; t < T; t++)
            pos[t] = t, vis[t] = t + 1, rows[t] = t, slot[t] = t;
        li_batch_seq bs = {.t0 = 0, .n = T, .kv = {.pages = &page, .n_pages = 1}};
        li_batch b = {.n_tokens = T,
                      .tokens = ids,
                      .pos = pos,
                      .slot = slot,
                      .n_visible = vis,
                      .n_seqs = 1,
                      .seqs = &bs,
                      .n_logits = T,
                      .logit_rows = rows};
        float *ref = xmalloc((size_t)T * V * 4), *q8 = xmalloc((size_t)T * V * 4);
        if (rc == LI_OK) rc = li_llama_forward(&m, &s, &kv, &b, ref);
        if (rc == LI_OK) rc = li_llama_set_fp8(&m, LI_FP8_FFN, 1);
        if (rc == LI_OK) rc = li_llama_forward(&m, &s, &kv, &b, q8);
        if (rc == LI_OK) rc = li_llama_set_fp8(&m, LI_FP8_OFF, 0);
        if (rc == LI_OK) {
            double e;
            int agree;
            compare_logits(q8, ref, T, V, &e, &agree);
            printf("# FP8 FFN on SmolLM2-135M (layers 1-%d), prompt %zu (%d tokens): logit nmse "
                   "%.3g, top-1 agreement %d/%d\n",
                   L - 1, p, T, e, agree, T);
            sum_e += e;
            agree_all += agree;
            rows_all += T;
        }
        free(ref), free(q8), free(kv.data), free(ids);
    }
    TEST_BEGIN("FP8 FFN on SmolLM2-135M: logit NMSE < 1e-2, top-1 agreement >= 80%");
    CHECK(rc == LI_OK, "%s", li_error_msg());
    double mean_e = sum_e / 4;
    printf("# FP8 FFN on SmolLM2-135M: mean logit nmse %.3g, top-1 agreement %d/%d (%.1f%%)\n",
           mean_e, agree_all, rows_all, 100.0 * agree_all / (rows_all ? rows_all : 1));
    CHECK(mean_e > 0 && mean_e < 1e-2, "mean nmse %g", mean_e);
    CHECK(agree_all >= rows_all * 8 / 10, "top-1 agreement %d/%d", agree_all, rows_all);
    TEST_END();
    if (have_s) li_llama_scratch_free(&s);
    li_tokenizer_free(tok);
    li_llama_free(&m);
}

static void test_configs(void) {
    TEST_BEGIN("synthetic configurations: llada-8b shapes (metadata only), errors");
    li_llada *m = NULL;
    li_status rc = li_llada_synth(&m, "llada-8b", 1, be_fast, true);
    CHECK(rc == LI_OK, "%s", li_error_msg());
    if (rc == LI_OK) {
        const li_hparams *hp = li_llada_hparams(m);
        CHECK(hp->n_layer == 32 && hp->n_embd == 4096 && hp->n_head == 32 && hp->n_head_kv == 32 &&
                  hp->head_dim == 128 && hp->n_ff == 12288 && hp->n_vocab == 126464 &&
                  hp->rope.theta == 500000.0f && !hp->tied_embeddings,
              "llada-8b shapes");
        int64_t np = li_llada_n_params(m);
        CHECK(np > 8000000000ll && np < 8100000000ll, "llada-8b has %lld parameters",
              (long long)np);
        CHECK(m->w.layers[3].w_gate.dtype == LI_DTYPE_BF16, "llada-8b matrices should be bf16");
        li_llada_canvas cv = {1, (int32_t[]){0}, (int32_t[]){0}, 0, 1, true, NULL, 0};
        li_lacache lc = {0};
        CHECK(li_llada_forward(m, &lc, NULL, NULL, &cv, 1, NULL, NULL) == LI_ERR_INVALID_ARG,
              "forward on a metadata-only model");
        li_llada_free(m);
    }
    CHECK(li_llada_synth_known("tiny-llada") && li_llada_synth_known("llada-mid") &&
              !li_llada_synth_known("tiny-llama"),
          "synth_known");
    CHECK(li_llada_synth(&m, "nope", 1, be_fast, false) == LI_ERR_INVALID_ARG && !m,
          "unknown name");
    CHECK(li_llada_load(&m, "/nonexistent-llada", be_fast, false) != LI_OK && !m, "missing dir");
    CHECK(li_llada_load(&m, "tests/data/formats/st-sharded", be_fast, false) != LI_OK && !m,
          "a directory without an LLaDA config.json");
    fprintf(stderr, "  (expected error: %s)\n", li_error_msg());
    TEST_END();
}

int main(void) {
    g_seed = test_rng_init(&rng, "test-llada");
    // One thread: the tiny model's ops are far too small for the pool (the ops' threading is
    // covered by test-ops-llada), and the test stays fast on a loaded machine.
    if (!test_cpu_backends(&be_ref, &be_fast, 1)) return 1;
    for (int i = 0; i < 3; i++)
        test_combinations(li_rng_u64(&rng) % 1000000);
    printf("# flag combinations vs all-off: worst nmse %.3g, worst max rel %.3g\n", worst_nmse,
           worst_rel);
    for (int i = 0; i < 2; i++)
        test_oracle(li_rng_u64(&rng) % 1000000);
    test_batch_and_info(li_rng_u64(&rng) % 1000000);
    test_bf16_activations(li_rng_u64(&rng) % 1000000);
    for (int i = 0; i < 2; i++)
        test_fp8_tiny(li_rng_u64(&rng) % 1000000);
    test_fp8_smollm2();
    test_configs();
    if (test_backend(NULL)) test_device_bf16(test_backend(NULL));
    li_backend_free(be_fast);
    li_backend_free(be_ref);
    return test_summary();
}
