// test-core.c — the core layer: dtype conversions (against exact arithmetic), block
// dequantisation (against formulas applied to random blocks), overflow checks, buffers, errors,
// the thread pool and the PRNG.
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "test.h"

// Exact nearest-even rounding of f to bf16, by comparing with both neighbours in double.
static uint16_t bf16_reference(float f) {
    uint32_t u = li_f32_bits(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dlo = li_bf16_to_f32(lo), dhi = li_bf16_to_f32(hi), x = f;
    if ((u & 0xffff) == 0) return lo;
    double elo = fabs(x - dlo), ehi = fabs(x - dhi);
    if (elo < ehi) return lo;
    if (ehi < elo) return hi;
    return (lo & 1) ? hi : lo;
}

static void test_bf16(li_rng *rng) {
    TEST_BEGIN("bf16 round trip and nearest-even rounding on 1M random bit patterns");
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)li_rng_u64(rng);
        float f = li_bits_f32(u);
        if (isnan(f) || isinf(f) || fabsf(f) > 3.0e38f) continue;
        uint16_t got = li_f32_to_bf16(f), want = bf16_reference(f);
        if (got != want) {
            CHECK(got == want, "f=%a bits=%08x got %04x want %04x", f, u, got, want);
            break;
        }
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float f = li_bf16_to_f32((uint16_t)h);
        if (isnan(f)) {
            CHECK(isnan(li_bf16_to_f32(li_f32_to_bf16(f))), "NaN %04x lost", h);
            continue;
        }
        if (li_f32_to_bf16(f) != h) {
            CHECK(li_f32_to_bf16(f) == h, "bf16 %04x does not round-trip", h);
            break;
        }
    }
    TEST_END();
}

static void test_f16(li_rng *rng) {
    TEST_BEGIN("f16: every value round-trips; f32 → f16 is nearest-even (checked by bracketing)");
    for (uint32_t h = 0; h < 65536; h++) {
        float f = li_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            CHECK(isnan(li_f16_to_f32(li_f32_to_f16(f))), "NaN %04x lost", h);
            continue;
        }
        uint16_t back = li_f32_to_f16(f);
        if (back != h) {
            CHECK(back == h, "f16 %04x → %a → %04x", h, f, back);
            break;
        }
    }
    // exact values of a few well-known halves
    CHECK(li_f16_to_f32(0x3c00) == 1.0f, "1.0");
    CHECK(li_f16_to_f32(0xc000) == -2.0f, "-2.0");
    CHECK(li_f16_to_f32(0x7bff) == 65504.0f, "max half");
    CHECK(li_f16_to_f32(0x0001) == 0x1p-24f, "smallest subnormal");
    CHECK(li_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(li_f32_to_f16(65519.0f) == 0x7bff, "65519 rounds to max");
    for (int i = 0; i < 200000; i++) {
        float f = (float)((li_rng_uniform(rng) * 2 - 1) * pow(2.0, (int)(li_rng_u64(rng) % 40) - 26));
        uint16_t h = li_f32_to_f16(f);
        double got = li_f16_to_f32(h);
        // the neighbours of h must not be closer to f
        double up = li_f16_to_f32((uint16_t)(h + 1)), down = h & 0x7fff ? li_f16_to_f32((uint16_t)(h - 1)) : got;
        if (fabs(up - f) < fabs(got - f) || fabs(down - f) < fabs(got - f)) {
            CHECK(0, "f=%a → %04x (%a) is not the nearest half", f, h, got);
            break;
        }
    }
    TEST_END();
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = li_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void test_dequant(li_rng *rng) {
    TEST_BEGIN("Q8_0 / Q4_0 / Q4_1 dequantisation of random blocks matches the ggml formulas");
    enum { NB = 37 };
    uint8_t q8[NB * 34], q40[NB * 18], q41[NB * 20];
    float d[NB], mn[NB], out[NB * 32];
    for (int b = 0; b < NB; b++) {
        d[b] = li_f16_to_f32(li_f32_to_f16((float)(li_rng_uniform(rng) * 0.1)));
        mn[b] = li_f16_to_f32(li_f32_to_f16((float)(li_rng_uniform(rng) - 0.5)));
        put_f16(q8 + 34 * b, d[b]);
        put_f16(q40 + 18 * b, d[b]);
        put_f16(q41 + 20 * b, d[b]);
        put_f16(q41 + 20 * b + 2, mn[b]);
        for (int j = 0; j < 32; j++) q8[34 * b + 2 + j] = (uint8_t)li_rng_u64(rng);
        for (int j = 0; j < 16; j++) {
            q40[18 * b + 2 + j] = (uint8_t)li_rng_u64(rng);
            q41[20 * b + 4 + j] = (uint8_t)li_rng_u64(rng);
        }
    }
    li_dequantize_row(LI_DTYPE_Q8_0, q8, out, NB * 32);
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++)
            CHECK(out[32 * b + j] == d[b] * (float)(int8_t)q8[34 * b + 2 + j], "q8_0 b=%d j=%d", b, j);
    li_dequantize_row(LI_DTYPE_Q4_0, q40, out, NB * 32);
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) {
            int nib = j < 16 ? (q40[18 * b + 2 + j] & 15) : (q40[18 * b + 2 + j - 16] >> 4);
            CHECK(out[32 * b + j] == d[b] * (float)(nib - 8), "q4_0 b=%d j=%d", b, j);
        }
    li_dequantize_row(LI_DTYPE_Q4_1, q41, out, NB * 32);
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < 32; j++) {
            int nib = j < 16 ? (q41[20 * b + 4 + j] & 15) : (q41[20 * b + 4 + j - 16] >> 4);
            CHECK(out[32 * b + j] == d[b] * (float)nib + mn[b], "q4_1 b=%d j=%d", b, j);
        }
    uint64_t nb;
    CHECK(li_dtype_nbytes(LI_DTYPE_Q4_1, 64, &nb) && nb == 40, "q4_1 size");
    CHECK(!li_dtype_nbytes(LI_DTYPE_Q4_1, 33, &nb), "partial block must be rejected");
    CHECK(!li_dtype_nbytes(LI_DTYPE_F32, UINT64_MAX / 2, &nb), "overflow must be rejected");
    TEST_END();
}

static void test_buf_and_errors(void) {
    TEST_BEGIN("li_buf grows, error messages wrap");
    li_buf b = {0};
    for (int i = 0; i < 1000; i++) li_buf_printf(&b, "%d,", i);
    CHECK(b.len > 3000 && !strncmp(b.data, "0,1,2,", 6), "buffer content");
    CHECK(b.data[b.len] == 0, "NUL-terminated");
    li_buf_free(&b);
    li_buf_free(&b);  // safe twice
    li_status st = li_error_set(LI_ERR_FORMAT, "x.gguf: bad %s", "thing");
    li_error_wrap(st, "loading: ");
    CHECK(!strcmp(li_last_error(), "loading: x.gguf: bad thing"), "got '%s'", li_last_error());
    uint64_t o;
    CHECK(li_mul_overflows(1ull << 40, 1ull << 30, &o), "mul overflow");
    CHECK(!li_add_overflows(1, 2, &o) && o == 3, "add");
    li_mapped_file f;
    CHECK(li_mapped_file_open(&f, "/nonexistent/file") == LI_ERR_IO, "missing file");
    CHECK(strstr(li_last_error(), "/nonexistent/file") != NULL, "message names the file");
    TEST_END();
}

typedef struct {
    int64_t *hits;
} pf_ctx;

static void mark(void *p, int64_t b, int64_t e, int tid) {
    pf_ctx *c = p;
    for (int64_t i = b; i < e; i++) c->hits[i] += 1 + tid * 0;
}

static void test_threadpool(void) {
    TEST_BEGIN("parallel_for covers every index exactly once, many times over");
    li_threadpool *tp;
    CHECK(li_threadpool_init(&tp, 3) == LI_OK, "init");
    static int64_t hits[10007];
    memset(hits, 0, sizeof hits);
    pf_ctx c = {hits};
    for (int rep = 0; rep < 500; rep++) li_parallel_for(tp, 1 + rep * 20 % 10007, mark, &c);
    int64_t expect[10007] = {0};
    for (int rep = 0; rep < 500; rep++)
        for (int64_t i = 0; i < 1 + rep * 20 % 10007; i++) expect[i]++;
    CHECK(!memcmp(hits, expect, sizeof hits), "coverage");
    li_threadpool_free(tp);
    li_threadpool_free(NULL);
    TEST_END();
}

static void test_rng(void) {
    TEST_BEGIN("PRNG: same seed same stream, uniform mean and normal variance sane");
    li_rng a, b;
    li_rng_seed(&a, 42);
    li_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= li_rng_u64(&a) == li_rng_u64(&b);
    CHECK(same, "streams differ");
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = li_rng_uniform(&a);
        CHECK(u >= 0 && u < 1, "u out of range");
        s += u;
        double z = li_rng_normal(&a);
        s2 += z * z;
    }
    // mean of n uniforms: std 0.289/sqrt(n) = 6.5e-4; 0.01 is > 15 sigma. Same for variance.
    CHECK(fabs(s / n - 0.5) < 0.01, "uniform mean %g", s / n);
    CHECK(fabs(s2 / n - 1.0) < 0.03, "normal variance %g", s2 / n);
    TEST_END();
}

int main(void) {
    li_rng rng;
    test_rng_init(&rng, "test-core");
    test_bf16(&rng);
    test_f16(&rng);
    test_dequant(&rng);
    test_buf_and_errors();
    test_threadpool();
    test_rng();
    return test_summary();
}
