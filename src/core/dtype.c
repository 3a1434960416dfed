// dtype.c — element types: names, sizes, bf16/f16 conversion and GGUF block dequantisation.
// The block layouts follow ggml (little-endian): Q8_0 = {f16 d; int8 q[32]}, Q4_0 = {f16 d;
// u8 qs[16]} with x = d * (q - 8), Q4_1 = {f16 d; f16 m; u8 qs[16]} with x = d * q + m; in the
// 4-bit types the low nibble of qs[j] is element j and the high nibble element j + 16.
// Tested by tests/test-core.c (round trips, rounding, every special value).
#include <math.h>
#include <string.h>

#include "core.h"

static const struct {
    const char *name;
    int block;       // elements per block
    int block_bytes; // bytes per block
} dtype_info[LI_DTYPE_COUNT] = {
    [LI_DTYPE_F32] = {"f32", 1, 4},   [LI_DTYPE_F16] = {"f16", 1, 2},
    [LI_DTYPE_BF16] = {"bf16", 1, 2}, [LI_DTYPE_Q8_0] = {"q8_0", 32, 34},
    [LI_DTYPE_Q4_0] = {"q4_0", 32, 18}, [LI_DTYPE_Q4_1] = {"q4_1", 32, 20},
    [LI_DTYPE_I32] = {"i32", 1, 4},
};

const char *li_dtype_name(li_dtype t) {
    return (unsigned)t < LI_DTYPE_COUNT ? dtype_info[t].name : "unknown";
}

int li_dtype_block_size(li_dtype t) {
    return (unsigned)t < LI_DTYPE_COUNT ? dtype_info[t].block : 0;
}

bool li_dtype_nbytes(li_dtype t, uint64_t n, uint64_t *out_bytes) {
    if ((unsigned)t >= LI_DTYPE_COUNT) return false;
    uint64_t blk = (uint64_t)dtype_info[t].block;
    if (n % blk) return false;
    return !li_mul_overflows(n / blk, (uint64_t)dtype_info[t].block_bytes, out_bytes);
}

float li_bf16_to_f32(uint16_t h) { return li_bits_f32((uint32_t)h << 16); }

uint16_t li_f32_to_bf16(float f) {
    uint32_t u = li_f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fff + ((u >> 16) & 1);  // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}

float li_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        // zero or subnormal: mant * 2^-24, exact in f32
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return li_bits_f32(sign | 0x7f800000 | (mant << 13));  // inf / NaN
    return li_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t li_f32_to_f16(float f) {
    uint32_t u = li_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return sign | 0x7e00;       // NaN
    if (a >= 0x477ff000) return sign | 0x7c00;      // rounds to >= 65520: inf
    if (a < 0x38800000) {                           // below the smallest normal 2^-14
        // subnormal: value / 2^-24 rounded to nearest even integer
        float v = li_bits_f32(a) * 0x1p24f;
        float r = rintf(v);  // default rounding mode: nearest, ties to even
        return sign | (uint16_t)r;
    }
    uint32_t rounded = a + 0xfff + ((a >> 13) & 1);
    return sign | (uint16_t)((rounded - 0x38000000) >> 13);
}

static inline float load_f16(const uint8_t *p) {
    return li_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

void li_dequantize_row(li_dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (t) {
    case LI_DTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case LI_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = load_f16(s + 2 * i);
        return;
    case LI_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = li_bf16_to_f32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
        return;
    case LI_DTYPE_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, s += 34) {
            float d = load_f16(s);
            for (int j = 0; j < 32; j++) dst[32 * b + j] = d * (float)(int8_t)s[2 + j];
        }
        return;
    case LI_DTYPE_Q4_0:
        for (int64_t b = 0; b < n / 32; b++, s += 18) {
            float d = load_f16(s);
            for (int j = 0; j < 16; j++) {
                dst[32 * b + j] = d * (float)((s[2 + j] & 0x0f) - 8);
                dst[32 * b + j + 16] = d * (float)((s[2 + j] >> 4) - 8);
            }
        }
        return;
    case LI_DTYPE_Q4_1:
        for (int64_t b = 0; b < n / 32; b++, s += 20) {
            float d = load_f16(s), m = load_f16(s + 2);
            for (int j = 0; j < 16; j++) {
                dst[32 * b + j] = d * (float)(s[4 + j] & 0x0f) + m;
                dst[32 * b + j + 16] = d * (float)(s[4 + j] >> 4) + m;
            }
        }
        return;
    case LI_DTYPE_I32:
    case LI_DTYPE_COUNT:
        break;
    }
    LI_ASSERT(!"li_dequantize_row: not a float type");
}
