// test-ops.c — every op of the fast CPU table (ops-cpu.c) against the scalar oracle (ops-ref.c) on
// fresh random inputs at odd sizes, plus the properties the oracle itself must have: the RoPE table
// against numbers printed by HF transformers (tests/data/rope/), NEOX/GPTJ consistency, the RoPE group law, the
// deferred-RoPE identity of paged attention, and the sampling contract (same u -> same token,
// top_k = 1 is greedy, the temperature -> 0 limit, the empirical distribution).
//
// The ops every backend shares (embed, rmsnorm, add_rmsnorm, add, swiglu, softmax) come from the
// one table in backend-ops.h, run here on cpu and cpu-devsim (gpu-check runs it on cuda).
// Every output buffer sits between guard floats that no op may touch. Inputs come from
// test_seed() (tests/test.h): fixed unless LI_TEST_SEED=N or random; every failure message
// carries the seed.
// At the end it prints timings of the fast ops against the oracle (not checked).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backend/backend.h"
#include "paged-seq.h"
#include "test.h"
#include "backend-ops.h"

static unsigned long long g_seed;  // printed with every failure
static li_backend *be_ref, *be_fast;

// ---- guarded buffers ----------------------------------------------------------------------

#define GUARD 16
#define SENTINEL 0x7fa5a5a5u  // a NaN bit pattern that no op produces

typedef struct {
    float *base, *p;
    long n;
} gbuf;

static float *gnew(gbuf *g, long n) {
    g->n = n;
    g->base = malloc((size_t)(n + 2 * GUARD) * sizeof(float));
    if (!g->base) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    uint32_t s = SENTINEL;
    for (long i = 0; i < GUARD; i++) {
        memcpy(&g->base[i], &s, 4);
        memcpy(&g->base[GUARD + n + i], &s, 4);
    }
    g->p = g->base + GUARD;
    return g->p;
}

static int gok(const gbuf *g) {
    for (long i = 0; i < GUARD; i++) {
        uint32_t a, b;
        memcpy(&a, &g->base[i], 4);
        memcpy(&b, &g->base[GUARD + g->n + i], 4);
        if (a != SENTINEL || b != SENTINEL) return 0;
    }
    return 1;
}

static void gfree(gbuf *g) { free(g->base); }

static char name_buf[256];
#define NAME(...) (snprintf(name_buf, sizeof name_buf, __VA_ARGS__), name_buf)

// Tolerances (NMSE = Σ(fast - ref)² / Σ ref², the oracle accumulating in fp64):
// - point-wise ops (rmsnorm, rope, swiglu, softmax, add): each fp32 result carries a few ulp of
//   relative error (u = 6e-8), i.e. NMSE ~ u² ≈ 4e-15; rmsnorm's fp32 sum of squares adds
//   ~sqrt(D)·u to the scale. Largest seen over 40 seeds: 1e-14. 1e-12 leaves 100x headroom and is
//   far below what a wrong index or a missing term produces (NMSE 1e-6 to 1).
#define TOL_POINTWISE 1e-12
// - reductions of length K in fp32 (matmul, attention's dot products and weighted sums): a K-term
//   fp32 dot product has an error ~ sqrt(K)·u times the size of its terms, so the squared error
//   over Σ term² is ~ K·u² ≈ 5e-12 at K = 1536 in the worst case (matmul measures exactly that,
//   see matmul_err; attention outputs are convex combinations of V rows, plain NMSE); seen: up
//   to 2e-13. 1e-10.
#define TOL_REDUCE 1e-10
// - identities checked with the fp64 oracle where the only difference is the fp32 rounding of
//   stored K (deferred RoPE) or of an intermediate (the RoPE group law): NMSE ~ u² amplified by
//   the softmax; seen up to 1.7e-13. 1e-10 as the design asks.
#define TOL_IDENTITY 1e-10

// ---- RoPE table vs HF transformers ----------------------------------------------------------

typedef struct {
    li_rope_config cfg;
    float mscale;
    float inv_freq[64];
} hf_rope_case;

// tests/data/rope/hf-inv-freq.json: per case the rope_parameters, max_position_embeddings and
// head_dim given to transformers, and the inv_freq and attention factor it computed (how:
// tests/data/rope/README.md). Other tests below take their configs by index in that file:
// 0 plain, 2 linear, 3 llama3, 6 yarn (mscale != 1), 7 yarn + attention_factor.
#define HF_ROPE_FILE "tests/data/rope/hf-inv-freq.json"
static hf_rope_case hf_rope_cases[16];
static int n_hf_rope_cases;

static double rp_number(json_t *rp, const char *key) {
    json_t *v = json_object_get(rp, key);
    return v ? json_number_value(v) : 0;
}

static int index_of(const char *s, const char *const *list, int n) {
    int i = 0;
    while (s && i < n && strcmp(s, list[i]) != 0) i++;
    return s && i < n ? i : -1;
}

// One case of the file; false (and a message) on anything the mapping below does not know, so
// that a parameter added to the file is never silently dropped.
static bool hf_rope_case_read(hf_rope_case *hc, json_t *c, int idx) {
    static const char *const types[] = {"default", "linear", "llama3", "yarn"};
    static const char *const keys[] = {
        "rope_type",       "rope_theta",       "factor",
        "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
        "beta_fast",       "beta_slow",        "attention_factor",
        "mscale",          "mscale_all_dim"};
    json_t *rp = json_object_get(c, "rope_parameters"), *inv = json_object_get(c, "inv_freq"), *v;
    const char *key;
    json_object_foreach(rp, key, v) {
        if (index_of(key, keys, sizeof keys / sizeof keys[0]) < 0) {
            fprintf(stderr, "%s: case %d: rope_parameters.%s not mapped\n", HF_ROPE_FILE, idx, key);
            return false;
        }
    }
    int scaling = index_of(json_string_value(json_object_get(rp, "rope_type")), types, 4);
    int hd = (int)json_integer_value(json_object_get(c, "head_dim"));
    if (scaling < 0 || hd < 2 || hd > 128 || json_array_size(inv) != (size_t)hd / 2) {
        fprintf(stderr, "%s: case %d: bad rope_type, head_dim or inv_freq\n", HF_ROPE_FILE, idx);
        return false;
    }
    // Unset fields stay 0, which rope.c reads as HF's defaults (beta_fast 32, beta_slow 1, ...).
    li_rope_config *r = &hc->cfg;
    memset(hc, 0, sizeof *hc);
    r->layout = LI_ROPE_NEOX;
    r->scaling = (li_rope_scaling)(LI_ROPE_SCALING_NONE + scaling);
    r->theta = (float)rp_number(rp, "rope_theta");
    r->n_dims = hd;
    r->factor = (float)rp_number(rp, "factor");
    r->low_freq_factor = (float)rp_number(rp, "low_freq_factor");
    r->high_freq_factor = (float)rp_number(rp, "high_freq_factor");
    r->original_max_pos = (int)rp_number(rp, "original_max_position_embeddings");
    r->max_pos = (int)json_integer_value(json_object_get(c, "max_position_embeddings"));
    r->beta_fast = (float)rp_number(rp, "beta_fast");
    r->beta_slow = (float)rp_number(rp, "beta_slow");
    r->attention_factor = (float)rp_number(rp, "attention_factor");
    r->mscale = (float)rp_number(rp, "mscale");
    r->mscale_all_dim = (float)rp_number(rp, "mscale_all_dim");
    hc->mscale = (float)json_number_value(json_object_get(c, "attention_factor"));
    for (int i = 0; i < hd / 2; i++)
        hc->inv_freq[i] = (float)json_number_value(json_array_get(inv, i));
    return true;
}

// Exits: without the reference there is nothing the RoPE tests below can check.
static void hf_rope_cases_load(void) {
    json_error_t err;
    json_t *root = json_load_file(HF_ROPE_FILE, 0, &err);
    json_t *cases = json_object_get(root, "cases");
    size_t n = json_array_size(cases);
    bool ok = root && n >= 8 && n <= sizeof hf_rope_cases / sizeof hf_rope_cases[0];
    for (size_t i = 0; ok && i < n; i++)
        ok = hf_rope_case_read(&hf_rope_cases[i], json_array_get(cases, i), (int)i);
    if (!ok) {
        fprintf(stderr, "cannot read %s (%s; run from the repository root)\n", HF_ROPE_FILE,
                root ? "8-16 valid cases expected" : err.text);
        exit(1);
    }
    n_hf_rope_cases = (int)n;
    json_decref(root);
}

static void test_rope_table(void) {
    for (int c = 0; c < n_hf_rope_cases; c++) {
        const hf_rope_case *hc = &hf_rope_cases[c];
        TEST_BEGIN(NAME("rope table vs transformers: case %d (scaling %d, dims %d)", c,
                        (int)hc->cfg.scaling, hc->cfg.n_dims));
        li_rope_table t;
        li_status st = li_rope_table_init(&t, &hc->cfg);
        CHECK(st == LI_OK, "init failed: %s", li_error_msg());
        // Bit-exact on every case below when written; 1 ulp (2^-23 relative) is allowed because
        // torch's fp32 pow differs from the correctly rounded pow rope.c uses by 1 ulp for a
        // few (base, exponent) pairs (seen for base 1e6, dim 128).
        double worst = 0;
        for (int i = 0; i < hc->cfg.n_dims / 2; i++) {
            double rel = fabs((double)t.inv_freq[i] - hc->inv_freq[i]) / hc->inv_freq[i];
            if (rel > worst) worst = rel;
        }
        CHECK(worst <= 0x1p-23, "worst relative error of inv_freq %g", worst);
        CHECK(fabsf(t.mscale - hc->mscale) <= 1e-7f * hc->mscale, "mscale %.9g vs HF %.9g",
              (double)t.mscale, (double)hc->mscale);
        CHECK(t.n_dims == hc->cfg.n_dims && t.layout == hc->cfg.layout, "n_dims/layout not kept");
        TEST_END();
    }
    TEST_BEGIN("rope table rejects impossible configs");
    li_rope_config bad = hf_rope_cases[0].cfg;
    li_rope_table t;
    bad.n_dims = 63;
    CHECK(li_rope_table_init(&t, &bad) == LI_ERR_INVALID_ARG, "odd n_dims accepted");
    bad.n_dims = 2 * LI_ROPE_MAX_PAIRS + 2;
    CHECK(li_rope_table_init(&t, &bad) == LI_ERR_INVALID_ARG, "too many dims accepted");
    bad = hf_rope_cases[0].cfg;
    bad.theta = 0;
    CHECK(li_rope_table_init(&t, &bad) == LI_ERR_INVALID_ARG, "theta 0 accepted");
    bad = hf_rope_cases[2].cfg;  // linear
    bad.factor = -1;
    CHECK(li_rope_table_init(&t, &bad) == LI_ERR_INVALID_ARG, "negative factor accepted");
    bad = hf_rope_cases[3].cfg;  // llama3
    bad.high_freq_factor = bad.low_freq_factor;
    CHECK(li_rope_table_init(&t, &bad) == LI_ERR_INVALID_ARG, "llama3 high == low accepted");
    TEST_END();
}

// ---- embed, rmsnorm, add, swiglu, softmax ----------------------------------------------------


// ---- matmul ----------------------------------------------------------------------------------

// ---- rope ------------------------------------------------------------------------------------

static li_rope_table table_for(int case_idx, li_rope_layout layout, int n_dims) {
    li_rope_config cfg = hf_rope_cases[case_idx].cfg;
    cfg.layout = layout;
    cfg.n_dims = n_dims;
    li_rope_table t;
    li_status st = li_rope_table_init(&t, &cfg);
    LI_ASSERT(st == LI_OK);
    return t;
}

// NEOX pair (i, i + half) <-> GPTJ pair (2i, 2i + 1) within the first n_dims of each head.
static void neox_to_gptj(float *dst, const float *src, int rows, int Dh, int n_dims) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * Dh;
        float *d = dst + (size_t)r * Dh;
        memcpy(d, s, sizeof(float) * Dh);
        for (int i = 0; i < n_dims / 2; i++) {
            d[2 * i] = s[i];
            d[2 * i + 1] = s[i + n_dims / 2];
        }
    }
}

// The op against the oracle is in backend-ops.h; here the oracle's own properties.
static void test_rope(void) {
    const int cases[] = {0, 3, 6, 7};  // plain, llama3, yarn (mscale != 1), yarn + attention_factor
    // NEOX and GPTJ are the same rotation up to a permutation of the dims; untouched dims stay.
    for (int which = 0; which < 2; which++) {
        li_backend *be = which ? be_fast : be_ref;
        int T = 17, nh = 3, Dh = 66, nd = 50;
        TEST_BEGIN(NAME("rope neox == gptj under the pair permutation (%s)", be->ops->name));
        li_rope_table tn = table_for(6, LI_ROPE_NEOX, nd), tg = table_for(6, LI_ROPE_GPTJ, nd);
        long n = (long)T * nh * Dh;
        float *x = malloc(sizeof(float) * n), *xn = malloc(sizeof(float) * n);
        float *xg = malloc(sizeof(float) * n), *xng = malloc(sizeof(float) * n);
        int32_t pos[17];
        for (int t = 0; t < T; t++) pos[t] = randint(0, 100000);
        fill(x, n, 1.0f);
        memcpy(xn, x, sizeof(float) * n);
        be->ops->rope(be, xn, LI_DTYPE_F32, xn, pos, T, nh, Dh, &tn);
        neox_to_gptj(xg, x, T * nh, Dh, nd);
        be->ops->rope(be, xg, LI_DTYPE_F32, xg, pos, T, nh, Dh, &tg);
        neox_to_gptj(xng, xn, T * nh, Dh, nd);
        CHECK(memcmp(xng, xg, sizeof(float) * n) == 0, "not bit-identical; seed %llu", g_seed);
        double moved = test_nmse(xn, x, n);
        CHECK(moved > 1e-3, "rope did not rotate (nmse vs input %g); seed %llu", moved, g_seed);
        free(x);
        free(xn);
        free(xg);
        free(xng);
        TEST_END();
    }

    // Group law: rope at a (with the magnitude m) then a pure rotation by b == rope at a + b.
    for (int ci = 0; ci < 4; ci++) {
        int T = 17, nh = 2, Dh = 64;
        li_rope_layout lay = ci % 2 ? LI_ROPE_GPTJ : LI_ROPE_NEOX;
        li_rope_table t = table_for(cases[ci], lay, Dh), pure = t;
        pure.mscale = 1.0f;
        TEST_BEGIN(NAME("rope R_b R_a == R_(a+b), case %d %s", cases[ci], lay ? "gptj" : "neox"));
        long n = (long)T * nh * Dh;
        float *x1 = malloc(sizeof(float) * n), *x2 = malloc(sizeof(float) * n);
        int32_t pa[17], pb[17], pab[17];
        for (int k = 0; k < T; k++) {
            pa[k] = randint(0, 50000);
            pb[k] = randint(1, 50000);
            pab[k] = pa[k] + pb[k];
        }
        fill(x1, n, 1.0f);
        memcpy(x2, x1, sizeof(float) * n);
        be_ref->ops->rope(be_ref, x1, LI_DTYPE_F32, x1, pa, T, nh, Dh, &t);
        be_ref->ops->rope(be_ref, x1, LI_DTYPE_F32, x1, pb, T, nh, Dh, &pure);
        be_ref->ops->rope(be_ref, x2, LI_DTYPE_F32, x2, pab, T, nh, Dh, &t);
        double e = test_nmse(x1, x2, n);
        CHECK(e <= TOL_IDENTITY, "nmse %g; seed %llu", e, g_seed);
        free(x1);
        free(x2);
        TEST_END();
    }
}

// ---- attention -------------------------------------------------------------------------------

// ---- attention -------------------------------------------------------------------------------
// (the op against the oracle: backend-ops.h; here the deferred-RoPE identity, the fallbacks and
// the timings)

typedef bo_paged paged_seq;

// A random pool and page table (backend-ops.h): documents of up to 3 P + 5 tokens.
static void make_paged(paged_seq *s, int L, int Hkv, int Dh, int P, int min_keys, int with_delta,
                       li_dtype dtype) {
    bo_make_paged(s, L, Hkv, Dh, P, min_keys, with_delta, 3 * P + 5, dtype);
}

static void free_paged(paged_seq *s) {
    free(s->kv.data);
    free(s->pages);
}

// Deferred RoPE: K stored rotated at its local position i on a page with Δ gives the same
// attention as K stored rotated at Δ + i on a page with Δ = 0 (fp64 oracle; also the fast path).
static void test_attention_deferred_rope(void) {
    const int cases[] = {0, 3, 6, 7};
    for (int ci = 0; ci < 4; ci++) {
        int P = (int[]){16, 1, 64, 7}[ci], Hkv = 2, G = (int[]){1, 3, 4, 8}[ci], H = G * Hkv;
        int Dh = ci == 2 ? 18 : 64, T = ci % 2 ? 1 : 5;
        li_rope_layout lay = ci % 2 ? LI_ROPE_GPTJ : LI_ROPE_NEOX;
        li_rope_table tab = table_for(cases[ci], lay, Dh);
        TEST_BEGIN(NAME("attention deferred RoPE identity: case %d P=%d G=%d Dh=%d T=%d mscale=%g",
                        cases[ci], P, G, Dh, T, (double)tab.mscale));
        // documents: lengths, local positions, Δ = sum of lengths before (plus a gap)
        int n_doc = 4, len[4], n_keys = 0;
        for (int d = 0; d < n_doc; d++) n_keys += len[d] = randint(1, 2 * P + 3);
        int n_pages = 0;
        for (int d = 0; d < n_doc; d++) n_pages += (len[d] + P - 1) / P;
        int64_t pool = n_pages + 2;
        long n = pool * 2 * Hkv * P * Dh;
        li_kv_storage kva = {1, Hkv, Dh, P, pool, NULL, LI_DTYPE_F32}, kvb = kva;
        gbuf ga, gb;
        kva.data = gnew(&ga, n);
        kvb.data = gnew(&gb, n);
        fill(kva.data, n, 1.0f);
        memcpy(kvb.data, kva.data, sizeof(float) * n);
        uint64_t *pa = malloc(sizeof(uint64_t) * n_pages), *pb = malloc(sizeof(uint64_t) * n_pages);
        int64_t *perm = malloc(sizeof(int64_t) * pool);
        for (int64_t i = 0; i < pool; i++) perm[i] = pool - 1 - i;  // reversed physical order
        int pg = 0;
        int64_t gpos = randint(0, 3);
        float *kraw = malloc(sizeof(float) * Hkv * Dh), *vraw = malloc(sizeof(float) * Hkv * Dh);
        float *kl = malloc(sizeof(float) * Hkv * Dh), *kg = malloc(sizeof(float) * Hkv * Dh);
        for (int d = 0; d < n_doc; d++) {
            int64_t delta = gpos + (d ? randint(0, 100000) : 0);
            for (int i = 0; i < len[d]; i++) {
                int pi = pg + i / P, off = i % P;
                int64_t phys = perm[pi];
                fill(kraw, Hkv * Dh, 1.0f);
                fill(vraw, Hkv * Dh, 1.0f);
                memcpy(kl, kraw, sizeof(float) * Hkv * Dh);
                memcpy(kg, kraw, sizeof(float) * Hkv * Dh);
                int32_t lp = i, gp = (int32_t)(delta + i);
                // at local, then at global position
                be_ref->ops->rope(be_ref, kl, LI_DTYPE_F32, kl, &lp, 1, Hkv, Dh, &tab);
                be_ref->ops->rope(be_ref, kg, LI_DTYPE_F32, kg, &gp, 1, Hkv, Dh, &tab);
                int64_t slot = phys * P + off;
                be_ref->ops->kv_store(be_ref, &kva, 0, kl, vraw, &slot, 1);
                be_ref->ops->kv_store(be_ref, &kvb, 0, kg, vraw, &slot, 1);
            }
            for (int i = 0; i < len[d]; i += P, pg++) {
                int cnt = len[d] - i < P ? len[d] - i : P;
                pa[pg] = li_page_word(perm[pg], cnt, delta);
                pb[pg] = li_page_word(perm[pg], cnt, 0);
            }
            gpos = delta + len[d];
        }
        // queries at the end, rotated at their global positions; causal over the last T keys
        long qn = (long)T * H * Dh;
        gbuf gq, g1, g2, g3;
        float *q = gnew(&gq, qn), *o1 = gnew(&g1, qn), *o2 = gnew(&g2, qn), *o3 = gnew(&g3, qn);
        fill(q, qn, 1.0f);
        int32_t qpos[5], nv[5];
        for (int t = 0; t < T; t++) {
            qpos[t] = (int32_t)(gpos + t);
            nv[t] = n_keys - T + t + 1;
        }
        be_ref->ops->rope(be_ref, q, LI_DTYPE_F32, q, qpos, T, H, Dh, &tab);
        li_kv_seq sa = {.pages = pa, .n_pages = n_pages}, sb = {.pages = pb, .n_pages = n_pages};
        float scale = 1.0f / sqrtf((float)Dh);
        be_ref->ops->attention(be_ref, o1, q, T, H, &kva, 0, &sa, NULL, nv, scale, &tab);
        be_ref->ops->attention(be_ref, o2, q, T, H, &kvb, 0, &sb, NULL, nv, scale, NULL);
        be_fast->ops->attention(be_fast, o3, q, T, H, &kva, 0, &sa, NULL, nv, scale, &tab);
        double e = test_nmse(o1, o2, qn), e3 = test_nmse(o3, o2, qn);
        CHECK(e <= TOL_IDENTITY, "oracle: nmse %g; seed %llu", e, g_seed);
        CHECK(e3 <= TOL_REDUCE, "fast path: nmse %g; seed %llu", e3, g_seed);
        // the identity is not trivially true: without the Δ rotation the result differs
        be_ref->ops->attention(be_ref, o1, q, T, H, &kva, 0, &sb, NULL, nv, scale, NULL);
        double off = test_nmse(o1, o2, qn);
        CHECK(off > 1e-4, "attention insensitive to Δ (nmse %g); seed %llu", off, g_seed);
        CHECK(gok(&ga) && gok(&gb) && gok(&gq) && gok(&g1) && gok(&g2) && gok(&g3),
              "guard damaged; seed %llu", g_seed);
        free(kraw);
        free(vraw);
        free(kl);
        free(kg);
        free(perm);
        free(pa);
        free(pb);
        gfree(&ga);
        gfree(&gb);
        gfree(&gq);
        gfree(&g1);
        gfree(&g2);
        gfree(&g3);
        TEST_END();
    }
}

// ---- sample ----------------------------------------------------------------------------------

static int32_t argmax_lowest(const float *x, int V) {
    int32_t b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void test_sample(void) {
    const float temps[] = {0, 0.05f, 0.7f, 1, 1.5f};
    const int topks[] = {0, 1, 5, 40, 100, -1};  // -1: V + 7
    const float topps[] = {1, 0.95f, 0.5f, 0.05f};
    const float minps[] = {0, 0.02f, 0.3f};
    int n_trials = 300, mismatches = 0, n_diff_tokens = 0;
    int32_t first_tok = -1;
    TEST_BEGIN("sample: fast == oracle for the same u (300 random configs, V 1000..50000, ties)");
    float *lg = malloc(sizeof(float) * 50000);
    for (int tr = 0; tr < n_trials; tr++) {
        int V = tr % 10 == 0 ? randint(20000, 50000) : randint(1000, 6000);
        bo_random_logits(lg, V, tr % 3 == 0);
        li_sampler_config cfg = {temps[randint(0, 4)], topks[randint(0, 5)], topps[randint(0, 3)],
                                 minps[randint(0, 2)]};
        if (cfg.top_k < 0) cfg.top_k = V + 7;
        double u = tr % 50 == 1 ? 0.0 : tr % 50 == 2 ? 1.0 - 0x1p-53 : li_rng_uniform(&rng);
        int32_t a = be_ref->ops->sample(be_ref, lg, V, &cfg, u);
        int32_t b = be_fast->ops->sample(be_fast, lg, V, &cfg, u);
        if (a != b || a < 0 || a >= V) {
            if (mismatches++ < 5)
                fprintf(stderr, "  trial %d V=%d temp=%g top_k=%d top_p=%g min_p=%g u=%.17g: "
                        "oracle %d fast %d\n", tr, V, (double)cfg.temperature, cfg.top_k,
                        (double)cfg.top_p, (double)cfg.min_p, u, a, b);
        }
        if (first_tok < 0) first_tok = a;
        else if (a != first_tok) n_diff_tokens++;
    }
    CHECK(mismatches == 0, "%d of %d draws differ; seed %llu", mismatches, n_trials, g_seed);
    CHECK(n_diff_tokens > 0, "every trial gave the same token");
    TEST_END();

    TEST_BEGIN("sample: greedy and top_k = 1 give the argmax (lowest id on ties) for any u");
    int bad = 0;
    for (int tr = 0; tr < 100; tr++) {
        int V = randint(1000, 8000);
        bo_random_logits(lg, V, 1);
        int32_t want = argmax_lowest(lg, V);
        lg[V - 1] = lg[want];  // a tie with a higher id
        li_sampler_config g = {0, 0, 1, 0}, k1 = {(float)(0.1 + 2 * li_rng_uniform(&rng)), 1,
                                                   tr % 2 ? 0.9f : 1.0f, 0};
        double u = li_rng_uniform(&rng);
        li_backend *bs[2] = {be_ref, be_fast};
        for (int i = 0; i < 2; i++) {
            if (bs[i]->ops->sample(bs[i], lg, V, &g, u) != want) bad++;
            if (bs[i]->ops->sample(bs[i], lg, V, &k1, u) != want) bad++;
        }
    }
    CHECK(bad == 0, "%d draws were not the argmax; seed %llu", bad, g_seed);
    TEST_END();

    // Boundaries with exact arithmetic: 8 equal logits have p = 1 each (Z = 8).
    // top_p = 0.5: the running sum reaches 4 = top_p * Z exactly after 4 tokens, so the shortest
    // prefix (ids 0..3) survives and u = 0.99 picks id 3 (target 3.96); min_p = 1 keeps every
    // token with p >= 1 * p_max, so all 8 survive and u = 0.99 picks id 7 (target 7.92).
    TEST_BEGIN("sample: top_p and min_p boundaries on exact ties");
    {
        float eq[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
        li_sampler_config cp = {1, 0, 0.5f, 0}, cm = {1, 0, 1, 1.0f};
        li_backend *bs[2] = {be_ref, be_fast};
        for (int i = 0; i < 2; i++) {
            int32_t a = bs[i]->ops->sample(bs[i], eq, 8, &cp, 0.99);
            int32_t b = bs[i]->ops->sample(bs[i], eq, 8, &cm, 0.99);
            int32_t c = bs[i]->ops->sample(bs[i], eq, 8, &cp, 0.0);
            CHECK(a == 3, "%s: top_p boundary gave %d, want 3", bs[i]->ops->name, a);
            CHECK(b == 7, "%s: min_p boundary gave %d, want 7", bs[i]->ops->name, b);
            CHECK(c == 0, "%s: u = 0 gave %d, want 0", bs[i]->ops->name, c);
        }
    }
    TEST_END();

    TEST_BEGIN("sample: temperature -> 0 converges to greedy");
    bad = 0;
    for (int tr = 0; tr < 100; tr++) {
        int V = randint(1000, 8000);
        bo_random_logits(lg, V, 0);
        int32_t want = argmax_lowest(lg, V);
        lg[want] += 0.05f;  // margin 0.05 / temperature 1e-3: the runner-up has p < e^-50
        li_sampler_config c = {1e-3f, 0, 1, 0};
        double u = li_rng_uniform(&rng);
        if (be_ref->ops->sample(be_ref, lg, V, &c, u) != want) bad++;
        if (be_fast->ops->sample(be_fast, lg, V, &c, u) != want) bad++;
    }
    CHECK(bad == 0, "%d draws were not the argmax; seed %llu", bad, g_seed);
    TEST_END();
    free(lg);

    // Empirical distribution vs probabilities computed here independently (sort, cut, renorm),
    // with a fixed seed so it cannot flake: chi-square over the survivors with df = n - 1 must
    // stay below df + 10 sqrt(2 df) + 10 (a > 10 sigma excursion), filtered tokens never drawn.
    const li_sampler_config dcfg[] = {{0.8f, 0, 1, 0}, {1.3f, 8, 0.9f, 0.05f}, {1, 0, 0.7f, 0},
                                      {2, 0, 1, 0.2f}};
    for (int ci = 0; ci < 4; ci++) {
        TEST_BEGIN(NAME("sample: distribution, temp=%g top_k=%d top_p=%g min_p=%g",
                        (double)dcfg[ci].temperature, dcfg[ci].top_k, (double)dcfg[ci].top_p,
                        (double)dcfg[ci].min_p));
        li_rng r;
        li_rng_seed(&r, 1234 + ci);
        enum { V = 12 };
        float l[V];
        for (int i = 0; i < V; i++) l[i] = li_rng_normal(&r) * 1.5f;
        // expected: sort ids by logit (desc), probabilities at temperature, then the filters
        int ord[V];
        double pr[V], ex[V] = {0};
        for (int i = 0; i < V; i++) ord[i] = i;
        for (int i = 0; i < V; i++)
            for (int j = i + 1; j < V; j++)
                if (l[ord[j]] > l[ord[i]]) {
                    int tmp = ord[i];
                    ord[i] = ord[j];
                    ord[j] = tmp;
                }
        double z = 0;
        for (int i = 0; i < V; i++) z += pr[i] = exp(l[ord[i]] / dcfg[ci].temperature);
        for (int i = 0; i < V; i++) pr[i] /= z;
        int n = dcfg[ci].top_k > 0 ? dcfg[ci].top_k : V;
        z = 0;
        for (int i = 0; i < n; i++) z += pr[i];
        double cum = 0;
        int m = 0;
        while (m < n && cum < dcfg[ci].top_p * z) cum += pr[m++];
        n = m;
        if (dcfg[ci].min_p > 0) {
            m = 1;
            while (m < n && pr[m] >= dcfg[ci].min_p * pr[0]) m++;
            n = m;
        }
        z = 0;
        for (int i = 0; i < n; i++) z += pr[i];
        for (int i = 0; i < n; i++) ex[ord[i]] = pr[i] / z;
        long cnt[V] = {0}, N = 200000;
        int same = 1;
        for (long k = 0; k < N; k++) {
            double u = li_rng_uniform(&r);
            int32_t t = be_fast->ops->sample(be_fast, l, V, &dcfg[ci], u);
            if (k < 2000 && t != be_ref->ops->sample(be_ref, l, V, &dcfg[ci], u)) same = 0;
            cnt[t]++;
        }
        double chi = 0;
        int drawn_filtered = 0;
        for (int i = 0; i < V; i++) {
            if (ex[i] == 0) {
                drawn_filtered += cnt[i] != 0;
                continue;
            }
            double e = ex[i] * N;
            chi += (cnt[i] - e) * (cnt[i] - e) / e;
        }
        int df = n - 1;
        CHECK(n >= 2, "config leaves %d survivors: not a distribution test", n);
        CHECK(chi < df + 10 * sqrt(2.0 * df) + 10, "chi-square %g with df %d", chi, df);
        CHECK(drawn_filtered == 0, "%d filtered tokens were drawn", drawn_filtered);
        CHECK(same, "fast and oracle disagree on the first 2000 draws");
        TEST_END();
    }
}

// ---- the fast table without scratch or threads ----------------------------------------------
//
// A backend struct with no impl and no pool makes every fast op take its fallback path (what it
// does when a scratch allocation fails): Δ cos/sin computed per work item, bf16 matmul without
// the sgemm tiles, sampling through the oracle.
static void test_fallbacks(void) {
    li_backend bare = {.ops = &li_cpu_fast_ops, .tp = NULL, .n_threads = 1, .impl = NULL};
    TEST_BEGIN("fallback paths: attention with Δ, bf16 matmul T=64, sample");
    paged_seq s;
    make_paged(&s, 1, 2, 64, 16, 200, 1, LI_DTYPE_BF16);
    int T = 5, H = 6;
    li_rope_table tab = table_for(6, LI_ROPE_NEOX, 64);
    long qn = (long)T * H * 64;
    gbuf gq, g1, g2;
    float *q = gnew(&gq, qn), *o1 = gnew(&g1, qn), *o2 = gnew(&g2, qn);
    fill(q, qn, 1.0f);
    int32_t nv[5];
    for (int t = 0; t < T; t++) nv[t] = s.n_keys - T + t + 1;
    li_kv_seq seq = {.pages = s.pages, .n_pages = s.n_pages};
    be_ref->ops->attention(be_ref, o1, q, T, H, &s.kv, 0, &seq, NULL, nv, 0.125f, &tab);
    bare.ops->attention(&bare, o2, q, T, H, &s.kv, 0, &seq, NULL, nv, 0.125f, &tab);
    double e = test_nmse(o2, o1, qn);
    CHECK(e <= TOL_REDUCE, "attention nmse %g; seed %llu", e, g_seed);
    CHECK(gok(&g2), "guard damaged; seed %llu", g_seed);
    li_weight W = bo_make_weight(LI_DTYPE_BF16, 67, 131, 1.0f);
    gbuf gx, gy1, gy2;
    float *x = gnew(&gx, 64 * 131), *y1 = gnew(&gy1, 64 * 67), *y2 = gnew(&gy2, 64 * 67);
    fill(x, 64 * 131, 1.0f);
    be_ref->ops->matmul(be_ref, y1, x, LI_DTYPE_F32, &W, 64, false);
    bare.ops->matmul(&bare, y2, x, LI_DTYPE_F32, &W, 64, false);
    e = bo_matmul_err(y2, y1, x, &W, 64);
    CHECK(e <= TOL_REDUCE, "matmul error %g; seed %llu", e, g_seed);
    CHECK(gok(&gy2), "guard damaged; seed %llu", g_seed);
    li_sampler_config sc = {0.9f, 0, 0.9f, 0};
    double u = li_rng_uniform(&rng);
    CHECK(bare.ops->sample(&bare, x, 64 * 131, &sc, u) == be_ref->ops->sample(be_ref, x, 64 * 131, &sc, u),
          "sample differs; seed %llu", g_seed);
    free(W.data);
    gfree(&gx);
    gfree(&gy1);
    gfree(&gy2);
    gfree(&gq);
    gfree(&g1);
    gfree(&g2);
    free_paged(&s);
    TEST_END();
}

// li_qkv_rope_store on a table without the entry (the unfused ops on the parts copied out of the
// rows into the caller's scratch) gives the entry's bits, with and without bias.
static void test_qkv_rope_store_helper(void) {
    li_backend_ops no_entry = li_cpu_fast_ops;
    no_entry.qkv_rope_store = NULL;
    li_backend bare = {.ops = &no_entry, .tp = NULL, .n_threads = 1, .impl = NULL};
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        TEST_BEGIN(with_bias ? "li_qkv_rope_store without the entry = the entry (bias)"
                             : "li_qkv_rope_store without the entry = the entry");
        const int T = 7, H = 6, Hkv = 2, Dh = 64;
        const long HD = (long)H * Dh, KD = (long)Hkv * Dh, row = HD + 2 * KD;
        li_kv_storage kv = {2, Hkv, Dh, 16, 2, NULL, LI_DTYPE_BF16};
        const size_t pb = li_kv_storage_page_bytes(&kv) * kv.n_pages;
        li_rope_table tab = table_for(6, LI_ROPE_NEOX, 48);
        float *qkv = xmalloc(sizeof(float) * T * row), *bias = xmalloc(sizeof(float) * row);
        float *q1 = xmalloc(sizeof(float) * T * HD), *q2 = xmalloc(sizeof(float) * T * HD);
        float *k = xmalloc(sizeof(float) * T * KD), *v = xmalloc(sizeof(float) * T * KD);
        uint16_t *pool1 = xmalloc(pb), *pool2 = xmalloc(pb);
        int32_t pos[7];
        int64_t slot[7];
        fill(qkv, (long)T * row, 1.0f);
        fill(bias, row, 1.0f);
        for (size_t i = 0; i < pb / 2; i++)
            pool1[i] = li_f32_to_bf16(randn());
        memcpy(pool2, pool1, pb);
        for (int t = 0; t < T; t++) {
            pos[t] = randint(0, 100000);
            slot[t] = 3 * t + 1;  // distinct, over both pages
        }
        li_kv_storage kv1 = kv, kv2 = kv;
        kv1.data = pool1;
        kv2.data = pool2;
        const float *b = with_bias ? bias : NULL;
        li_qkv_rope_store(be_fast, q1, NULL, NULL, &kv1, 1, qkv, b, pos, slot, T, H, &tab);
        li_qkv_rope_store(&bare, q2, k, v, &kv2, 1, qkv, b, pos, slot, T, H, &tab);
        CHECK(memcmp(q1, q2, sizeof(float) * T * HD) == 0, "q differs; seed %llu", g_seed);
        CHECK(memcmp(pool1, pool2, pb) == 0, "pools differ; seed %llu", g_seed);
        free(qkv), free(bias), free(q1), free(q2), free(k), free(v), free(pool1), free(pool2);
        TEST_END();
    }
}

// ---- timings (printed, not checked) ----------------------------------------------------------

// Best of as many runs as fit in min_ms (at least 3): the machine is shared, the minimum is the
// stable figure.
static double time_op_ms(void (*fn)(void *), void *ctx, double min_ms) {
    fn(ctx);  // warm-up
    double best = 1e30, start = li_time_ms();
    for (int reps = 0; reps < 3 || li_time_ms() - start < min_ms; reps++) {
        double t0 = li_time_ms();
        fn(ctx);
        double dt = li_time_ms() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct {
    li_backend *be;
    float *y, *x;
    li_weight *W;
    int T;
} mm_bench;

static void mm_run(void *p) {
    mm_bench *b = p;
    b->be->ops->matmul(b->be, b->y, b->x, LI_DTYPE_F32, b->W, b->T, false);
}

typedef struct {
    li_backend *be;
    float *out, *q;
    int T, H;
    paged_seq *s;
    int32_t *nv;
    li_rope_table *tab;
} att_bench;

static void att_run(void *p) {
    att_bench *b = p;
    li_kv_seq seq = {.pages = b->s->pages, .n_pages = b->s->n_pages};
    b->be->ops->attention(b->be, b->out, b->q, b->T, b->H, &b->s->kv, 0, &seq, NULL, b->nv, 0.125f,
                          b->tab);
}

typedef struct {
    li_backend *be;
    const float *logits;
    int V;
    li_sampler_config cfg;
    double u;
} samp_bench;

static void samp_run(void *p) {
    samp_bench *b = p;
    b->u = b->u * 0.5 + 0.37;  // a different u each time, deterministic
    b->be->ops->sample(b->be, b->logits, b->V, &b->cfg, b->u - (int)b->u);
}

static void print_timings(void) {
    printf("timings (%d threads; fast vs oracle):\n", be_fast->n_threads);
    for (int dt = 0; dt < 2; dt++)
        for (int T = 1; T <= 64; T *= 64) {
            li_dtype dtype = dt ? LI_DTYPE_BF16 : LI_DTYPE_F32;
            li_weight W = bo_make_weight(dtype, 1536, 576, 1.0f);
            float *x = malloc(sizeof(float) * T * 576), *y = malloc(sizeof(float) * T * 1536);
            fill(x, (long)T * 576, 1.0f);
            mm_bench bf = {be_fast, y, x, &W, T}, br = {be_ref, y, x, &W, T};
            double tf = time_op_ms(mm_run, &bf, 200), tr = time_op_ms(mm_run, &br, 200);
            double bytes = 1536.0 * 576 * (dt ? 2 : 4), flops = 2.0 * 1536 * 576 * T;
            printf("  matmul %s W 1536x576 T=%-2d  fast %8.3f ms (%6.2f GB/s of weights, %6.2f "
                   "GFLOP/s)  oracle %8.2f ms  speed-up %6.1fx\n",
                   li_dtype_name(dtype), T, tf, bytes / tf / 1e6, flops / tf / 1e6, tr, tr / tf);
            free(x);
            free(y);
            free(W.data);
        }
    for (int T = 1; T <= 64; T *= 64) {
        paged_seq s;
        make_paged(&s, 1, 3, 64, 16, 512, 1, LI_DTYPE_F32);
        int H = 9;
        li_rope_table tab = table_for(0, LI_ROPE_NEOX, 64);
        float *q = malloc(sizeof(float) * T * H * 64), *o = malloc(sizeof(float) * T * H * 64);
        fill(q, (long)T * H * 64, 1.0f);
        int32_t nv[64];
        for (int t = 0; t < T; t++) nv[t] = s.n_keys - T + t + 1;
        att_bench bf = {be_fast, o, q, T, H, &s, nv, &tab}, br = bf;
        br.be = be_ref;
        double tf = time_op_ms(att_run, &bf, 200), tr = time_op_ms(att_run, &br, 200);
        printf("  attention H=9 Hkv=3 Dh=64 P=16 ctx=%d (Δ pages) T=%-2d  fast %8.3f ms  oracle "
               "%8.2f ms  speed-up %6.1fx\n", s.n_keys, T, tf, tr, tr / tf);
        free(q);
        free(o);
        free_paged(&s);
    }
    const li_sampler_config scfg[] = {{0.7f, 0, 0.9f, 0}, {0.7f, 40, 1, 0}, {1, 0, 1, 0.05f}};
    float *lg = malloc(sizeof(float) * 49152);
    for (int i = 0; i < 49152; i++) lg[i] = randn() * 3;
    for (int ci = 0; ci < 3; ci++) {
        samp_bench bf = {be_fast, lg, 49152, scfg[ci], 0.1}, br = bf;
        br.be = be_ref;
        double tf = time_op_ms(samp_run, &bf, 100), tr = time_op_ms(samp_run, &br, 100);
        printf("  sample V=49152 temp=%g top_k=%d top_p=%g min_p=%g  fast %8.3f ms  oracle %8.2f "
               "ms  speed-up %6.1fx\n", (double)scfg[ci].temperature, scfg[ci].top_k,
               (double)scfg[ci].top_p, (double)scfg[ci].min_p, tf, tr, tr / tf);
    }
    free(lg);
}

int main(void) {
    g_seed = test_rng_init(&rng, "test-ops");
    if (!test_cpu_backends(&be_ref, &be_fast, 0)) return 1;
    hf_rope_cases_load();
    test_rope_table();
    // the shared op table (backend-ops.h) on the fast CPU table and on the device data path
    // without a device (cpu-devsim: the CPU ops behind device-style alloc / upload / download)
    li_backend *devsim = NULL;
    if (li_backend_cpu_devsim_init(&devsim, 0, false) != LI_OK) {
        fprintf(stderr, "cannot create cpu-devsim: %s\n", li_error_msg());
        return 1;
    }
    const bo_ctx ctxs[] = {
        {be_ref, be_fast, "cpu", 0, true, g_seed, NULL, NULL, NULL},
        {be_ref, devsim, "cpu-devsim", 0, true, g_seed, NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) bo_run_all(&ctxs[i], NULL);
    li_backend_free(devsim);
    test_rope();
    test_attention_deferred_rope();
    test_sample();
    test_fallbacks();
    test_qkv_rope_store_helper();
    if (!getenv("LI_TEST_NO_TIMINGS")) print_timings();
    li_backend_free(be_fast);
    li_backend_free(be_ref);
    return test_summary();
}
