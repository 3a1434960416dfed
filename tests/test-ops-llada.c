// test-ops-llada.c — the diffusion / FP8 ops of backend.h (flash_attn_tiles, flash_attn_finalize,
// fp8_quant_rows, matmul_fp8): the fast CPU table against the scalar oracle at odd sizes, and the
// oracle against independent references: full-softmax attention in fp64 (any tiling, any split of
// the key range at tile boundaries, any starting state), the FP8 GEMM against an fp64 product of
// the dequantised inputs, quantisation error bounds. FP8 ops must agree bit for bit.
// Seed: test_seed() (tests/test.h), fixed unless LI_TEST_SEED says otherwise; printed first.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test.h"

static unsigned long long g_seed;
static li_backend *be_ref, *be_fast;

static void fresh(float *o, float *m, float *l, int rows, int Dh) {
    for (int i = 0; i < rows; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(o, 0, (size_t)rows * Dh * sizeof(float));
}

static void test_flash(void) {
    static const struct {
        int nq, H, Hkv, Dh, nk, tile;
    } cs[] = {
        {13, 6, 2, 24, 37, 1},   {13, 6, 3, 17, 37, 5},  {7, 4, 4, 16, 64, 16},
        {5, 3, 1, 33, 50, 64},   {9, 8, 8, 128, 100, 7}, {1, 2, 2, 8, 1, 1},
        {20, 4, 2, 64, 129, 32},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int nq = cs[c].nq, H = cs[c].H, Hkv = cs[c].Hkv, Dh = cs[c].Dh, nk = cs[c].nk;
        int tile = cs[c].tile, rows = nq * H;
        float scale = 1.0f / sqrtf((float)Dh);
        float *q = xmalloc((size_t)rows * Dh * 4), *k = xmalloc((size_t)nk * Hkv * Dh * 4);
        float *v = xmalloc((size_t)nk * Hkv * Dh * 4), *ref = xmalloc((size_t)rows * Dh * 4);
        float *o[3], *m[3], *l[3], *out[3];
        for (int b = 0; b < 3; b++) {
            o[b] = xmalloc((size_t)rows * Dh * 4);
            out[b] = xmalloc((size_t)rows * Dh * 4);
            m[b] = xmalloc((size_t)rows * 4);
            l[b] = xmalloc((size_t)rows * 4);
            fresh(o[b], m[b], l[b], rows, Dh);
        }
        fill(q, (long)rows * Dh, 1.5f);
        fill(k, (long)nk * Hkv * Dh, 1.5f);
        fill(v, (long)nk * Hkv * Dh, 1.0f);
        test_attention_full(ref, q, k, v, nq, H, nk, Hkv, Dh, scale);
        // 0: oracle over all keys; 1: fast over all keys; 2: fast split at a tile boundary into
        // the later part first, then the earlier part (the FACache order)
        be_ref->ops->flash_attn_tiles(be_ref, o[0], m[0], l[0], q, nq, H, k, v, nk, Hkv, Dh, tile,
                                      scale);
        be_fast->ops->flash_attn_tiles(be_fast, o[1], m[1], l[1], q, nq, H, k, v, nk, Hkv, Dh, tile,
                                       scale);
        int split = (nk / 2) / tile * tile;
        size_t ks = (size_t)split * Hkv * Dh;
        be_fast->ops->flash_attn_tiles(be_fast, o[2], m[2], l[2], q, nq, H, k + ks, v + ks,
                                       nk - split, Hkv, Dh, tile, scale);
        be_fast->ops->flash_attn_tiles(be_fast, o[2], m[2], l[2], q, nq, H, k, v, split, Hkv, Dh,
                                       tile, scale);
        be_ref->ops->flash_attn_finalize(be_ref, out[0], o[0], l[0], rows, Dh);
        be_fast->ops->flash_attn_finalize(be_fast, out[1], o[1], l[1], rows, Dh);
        be_fast->ops->flash_attn_finalize(be_fast, o[2], o[2], l[2], rows, Dh); // in place
        char name[160];
        snprintf(name, sizeof name, "flash_attn_tiles nq=%d H=%d Hkv=%d Dh=%d nk=%d tile=%d", nq, H,
                 Hkv, Dh, nk, tile);
        TEST_BEGIN(name);
        long n = (long)rows * Dh;
        double e0 = test_nmse(out[0], ref, n), e1 = test_nmse(out[1], out[0], n);
        double e2 = test_nmse(o[2], ref, n);
        CHECK(e0 < 1e-12, "oracle vs full softmax: nmse %g; seed %llu", e0, g_seed);
        CHECK(e1 < 1e-10, "fast vs oracle: nmse %g; seed %llu", e1, g_seed);
        CHECK(e2 < 1e-10, "fast, split key range: nmse %g; seed %llu", e2, g_seed);
        CHECK(!test_has_nan(out[1], n) && !test_has_nan(o[2], n), "NaN; seed %llu", g_seed);
        TEST_END();
        free(q), free(k), free(v), free(ref);
        for (int b = 0; b < 3; b++)
            free(o[b]), free(m[b]), free(l[b]), free(out[b]);
    }
}

static uint8_t *quant(li_backend *be, float **scale, const float *x, int T, int K) {
    int G = (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    uint8_t *q = xmalloc((size_t)T * K);
    *scale = xmalloc((size_t)T * G * 4);
    be->ops->fp8_quant_rows(be, &(li_fp8_rows){q, *scale, NULL}, x, T, K);
    return q;
}

// The 128 x 128 block quantisation of a weight, written out here independently of the model's
// li_fp8_weight_quantize.
static li_fp8_weight quant_weight(const float *w, int N, int K) {
    int GN = (N + 127) / 128, GK = (K + 127) / 128;
    li_fp8_weight W = {N, K, xmalloc((size_t)N * K), xmalloc((size_t)GN * GK * 4)};
    for (int bn = 0; bn < GN; bn++)
        for (int bk = 0; bk < GK; bk++) {
            float amax = 0;
            for (int n = bn * 128; n < N && n < bn * 128 + 128; n++)
                for (int k = bk * 128; k < K && k < bk * 128 + 128; k++)
                    amax = fmaxf(amax, fabsf(w[(size_t)n * K + k]));
            float s = li_fp8_scale(amax);
            W.scale[bn * GK + bk] = s;
            for (int n = bn * 128; n < N && n < bn * 128 + 128; n++)
                for (int k = bk * 128; k < K && k < bk * 128 + 128; k++)
                    W.q[(size_t)n * K + k] = li_f32_to_e4m3(w[(size_t)n * K + k] / s);
        }
    return W;
}

static void test_fp8(void) {
    static const struct {
        int T, N, K;
    } cs[] = {
        {1, 1, 1}, {5, 130, 300}, {17, 64, 128}, {3, 257, 129}, {33, 176, 64}, {8, 200, 512},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int T = cs[c].T, N = cs[c].N, K = cs[c].K, G = (K + 127) / 128;
        float *x = xmalloc((size_t)T * K * 4), *w = xmalloc((size_t)N * K * 4);
        fill(x, (long)T * K, 2.0f);
        fill(w, (long)N * K, 0.05f);
        if (T > 2) { // an all-zero group, a huge value, a tiny group
            for (int k = 0; k < K && k < 128; k++)
                x[K + k] = 0;
            x[2 * K] = 3e4f;
        }
        float *sa_r, *sa_f;
        uint8_t *qa_r = quant(be_ref, &sa_r, x, T, K), *qa_f = quant(be_fast, &sa_f, x, T, K);
        char name[128];
        snprintf(name, sizeof name, "fp8_quant_rows T=%d K=%d: fast == oracle, bounds", T, K);
        TEST_BEGIN(name);
        CHECK(memcmp(qa_r, qa_f, (size_t)T * K) == 0, "codes differ; seed %llu", g_seed);
        CHECK(memcmp(sa_r, sa_f, (size_t)T * G * 4) == 0, "scales differ; seed %llu", g_seed);
        double worst = 0; // |x - deq| <= half an e4m3 step: 2^-4 relative (normal) or 2^-10 * s
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                float s = sa_r[t * G + k / 128], xv = x[(size_t)t * K + k];
                double d = fabs((double)li_e4m3_to_f32(qa_r[(size_t)t * K + k]) * s - xv);
                double bound = fmax(fabs(xv) / 16, ldexp(s, -10)) * 1.0001;
                if (d / bound > worst) worst = d / bound;
            }
        CHECK(worst <= 1.0, "quantisation error %g x the bound; seed %llu", worst, g_seed);
        TEST_END();

        li_fp8_weight W = quant_weight(w, N, K);
        float *y_r = xmalloc((size_t)T * N * 4), *y_f = xmalloc((size_t)T * N * 4);
        float *y_d = xmalloc((size_t)T * N * 4), *y_32 = xmalloc((size_t)T * N * 4);
        const li_fp8_rows xa = {qa_r, sa_r, NULL};
        be_ref->ops->matmul_fp8(be_ref, y_r, &xa, T, &W, true, false);
        float *y_fe = xmalloc((size_t)T * N * 4);
        be_fast->ops->matmul_fp8(be_fast, y_fe, &xa, T, &W, true, false);  // the exact order
        be_fast->ops->matmul_fp8(be_fast, y_f, &xa, T, &W, false, false);  // its fastest
        for (int t = 0; t < T; t++) // fp64 product of the dequantised inputs; fp32 product
            for (int n = 0; n < N; n++) {
                double a = 0, b = 0;
                for (int k = 0; k < K; k++) {
                    double da =
                        (double)li_e4m3_to_f32(qa_r[(size_t)t * K + k]) * sa_r[t * G + k / 128];
                    double dw = (double)li_e4m3_to_f32(W.q[(size_t)n * K + k]) *
                                W.scale[(n / 128) * G + k / 128];
                    a += da * dw;
                    b += (double)x[(size_t)t * K + k] * w[(size_t)n * K + k];
                }
                y_d[(size_t)t * N + n] = (float)a;
                y_32[(size_t)t * N + n] = (float)b;
            }
        snprintf(name, sizeof name, "matmul_fp8 T=%d N=%d K=%d: fast == oracle, vs dequantised", T,
                 N, K);
        TEST_BEGIN(name);
        CHECK(memcmp(y_r, y_fe, (size_t)T * N * 4) == 0, "fast (exact) differs from the oracle; "
              "seed %llu", g_seed);
        // not exact: the decoded f32 GEMM for T >= 16 (fp32 rounding of the exact order), the
        // exact kernel below
        double ef = test_nmse(y_f, y_r, (long)T * N);
        CHECK(T >= 16 ? ef < 1e-10 : ef == 0, "fast (not exact) vs the oracle: nmse %g; seed %llu",
              ef, g_seed);
        double ed = test_nmse(y_r, y_d, (long)T * N), eq = test_nmse(y_r, y_32, (long)T * N);
        CHECK(ed < 1e-12, "vs fp64 dequantised product: nmse %g; seed %llu", ed, g_seed);
        CHECK(eq < 5e-3, "vs unquantised product: nmse %g; seed %llu", eq, g_seed);
        TEST_END();

        // accumulate: y + the product's bits, as add after the product gives them
        snprintf(name, sizeof name, "matmul_fp8 T=%d N=%d K=%d accumulate == product + add", T,
                 N, K);
        TEST_BEGIN(name);
        for (int pass = 0; pass < 2; pass++) {
            li_backend *be = pass ? be_fast : be_ref;
            float *y0 = xmalloc((size_t)T * N * 4), *y1 = xmalloc((size_t)T * N * 4);
            fill(y0, (long)T * N, 3.0f);
            memcpy(y1, y0, (size_t)T * N * 4);
            be->ops->matmul_fp8(be, y1, &xa, T, &W, pass == 0, true);
            be->ops->add(be, y0, pass ? y_f : y_r, (long)T * N);  // the same call's product
            CHECK(memcmp(y0, y1, (size_t)T * N * 4) == 0, "%s: accumulate differs; seed %llu",
                  be->ops->name, g_seed);
            free(y0), free(y1);
        }
        TEST_END();
        free(x), free(w), free(qa_r), free(qa_f), free(sa_r), free(sa_f), free(W.q), free(W.scale);
        free(y_r), free(y_f), free(y_fe), free(y_d), free(y_32);
    }
}

int main(void) {
    g_seed = test_rng_init(&rng, "test-ops-llada");
    if (!test_cpu_backends(&be_ref, &be_fast, 0)) return 1;
    test_flash();
    test_fp8();
    li_backend_free(be_fast);
    li_backend_free(be_ref);
    return test_summary();
}
