// test-fp8.c — FP8 E4M3 conversions of src/core/fp8.c against PyTorch golden values
// (tests/data/fp8/e4m3_golden.txt, made by tests/data/fp8/make_golden.py): all 256 codes decoded,
// ~2100 floats encoded (random over 2^-16..2^10, every tie between neighbouring codes and its two
// neighbours, zeros, subnormals, saturation, infinities); plus properties checked on fresh random
// floats: round trip of every code, nearest-code rounding against an exhaustive search.
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "test.h"

static void test_golden(void) {
    FILE *fp = fopen("tests/data/fp8/e4m3_golden.txt", "r");
    if (!fp) {
        TEST_BEGIN("fp8 golden file");
        CHECK(0, "tests/data/fp8/e4m3_golden.txt missing (run from the repository root)");
        TEST_END();
        return;
    }
    char line[128];
    int n_dec = 0, n_enc = 0, bad_dec = 0, bad_enc = 0;
    TEST_BEGIN("fp8 e4m3 decode: all 256 codes vs torch");
    while (fgets(line, sizeof line, fp)) {
        unsigned a, b;
        if (line[0] == 'D' && sscanf(line + 2, "%x %x", &a, &b) == 2) {
            float v = li_e4m3_to_f32((uint8_t)a);
            bool ok = b == 0x7fc00000u ? isnan(v) : li_f32_bits(v) == b;
            if (!ok && bad_dec++ < 5)
                CHECK(ok, "code %02x: got %08x want %08x", a, li_f32_bits(v), b);
            n_dec++;
        } else if (line[0] == 'E' && sscanf(line + 2, "%x %x", &a, &b) == 2) {
            uint8_t c = li_f32_to_e4m3(li_bits_f32(a));
            if (c != b && bad_enc++ < 5)
                fprintf(stderr, "  encode %08x (%g): got %02x want %02x\n", a,
                        li_bits_f32(a), c, b);
            n_enc++;
        }
    }
    fclose(fp);
    CHECK(n_dec == 256 && bad_dec == 0, "%d decode lines, %d wrong", n_dec, bad_dec);
    TEST_END();
    TEST_BEGIN("fp8 e4m3 encode: golden floats vs torch (RNE, ties, subnormals, saturation)");
    CHECK(n_enc > 2000 && bad_enc == 0, "%d encode lines, %d wrong", n_enc, bad_enc);
    TEST_END();
}

// The code nearest to x by exhaustive search (ties: even code), saturating; x finite.
static uint8_t nearest_code(float x) {
    double ax = fabs((double)x);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 127; c++) { // positive finite codes 0x00..0x7e
        double d = fabs(ax - li_e4m3_to_f32((uint8_t)c));
        if (d < bd || (d == bd && (c & 1) == 0)) {
            bd = d;
            best = c;
        }
    }
    if (ax > 448) best = 0x7e;
    return (uint8_t)(best | (signbit(x) ? 0x80 : 0));
}

static void test_properties(uint64_t seed) {
    li_rng rng;
    li_rng_seed(&rng, seed);
    TEST_BEGIN("fp8 e4m3 round trip of every finite code, NaN codes");
    for (int c = 0; c < 256; c++) {
        float v = li_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            CHECK(isnan(v), "code %02x should be NaN", c);
            continue;
        }
        CHECK(li_f32_to_e4m3(v) == c, "code %02x -> %g -> %02x", c, v, li_f32_to_e4m3(v));
    }
    CHECK(li_f32_to_e4m3(NAN) == 0x7f, "NaN -> %02x", li_f32_to_e4m3(NAN));
    CHECK(li_f32_to_e4m3(-NAN) == 0xff, "-NaN -> %02x", li_f32_to_e4m3(-NAN));
    CHECK(li_f32_to_e4m3(INFINITY) == 0x7e && li_f32_to_e4m3(-1e30f) == 0xfe, "saturation");
    TEST_END();
    TEST_BEGIN("fp8 e4m3 encode = exhaustive nearest code on fresh random floats");
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        float x = ldexpf((float)(2 * li_rng_uniform(&rng) - 1), (int)(li_rng_u64(&rng) % 30) - 18);
        uint8_t got = li_f32_to_e4m3(x), want = nearest_code(x);
        if (got != want && bad++ < 5) CHECK(got == want, "x %a: got %02x want %02x", x, got, want);
    }
    CHECK(bad == 0, "%d mismatches; seed %llu", bad, (unsigned long long)seed);
    TEST_END();
    TEST_BEGIN("fp8 scale: amax / 448 with the 1e-4 floor");
    CHECK(li_fp8_scale(448.0f) == 1.0f, "scale(448) = %g", li_fp8_scale(448.0f));
    CHECK(li_fp8_scale(0.0f) == 1e-4f / 448.0f, "scale(0) = %g", li_fp8_scale(0.0f));
    float a = (float)li_rng_uniform(&rng) * 10 + 0.5f;
    CHECK(li_fp8_scale(a) == a / 448.0f, "scale(%g)", a);
    CHECK(li_f32_to_e4m3(a / li_fp8_scale(a)) == 0x7e, "the group maximum maps to 448");
    TEST_END();
}

int main(void) {
    uint64_t seed = test_seed("test-fp8");
    test_golden();
    test_properties(seed);
    return test_summary();
}
