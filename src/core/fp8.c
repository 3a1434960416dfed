// fp8.c — FP8 E4M3 ("fn": no inf, one NaN code per sign) conversions and the group scale of the
// block-scaled FP8 FFN (ARCHITECTURE.md §5.3). Bit-exact: li_f32_to_e4m3 rounds to nearest even
// from f32 bits, saturates at ±448 (where torch.float8_e4m3fn gives NaN above 464); decoding is
// exact. Not here: the quantise and GEMM ops (src/backend/cpu/ops-*.c), the weight cache
// (arch-llada.c). Tested by tests/test-fp8.c: all 256 codes and random floats against PyTorch
// golden values.
#include <math.h>
#include <string.h>

#include "core.h"

uint8_t li_f32_to_e4m3(float f) {
    uint32_t u = li_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;  // NaN stays NaN
    if (a >= 0x43e00000u) return sign | 0x7e; // >= 448 (and inf): saturate to 448
    if (a < 0x3c800000u) {                    // below 2^-6: subnormal codes m * 2^-9
        float x = fabsf(f) * 512.0f;          // exact: a power-of-two scaling upwards
        int m = (int)nearbyintf(x);           // RNE (default rounding mode); 8 = 2^-6
        return sign | (uint8_t)m;
    }
    // normal: exponent field e + 7 in [1, 15], mantissa 23 -> 3 bits, round to nearest even; a
    // carry into the exponent is the correct result, and a < 448 never reaches the NaN code.
    uint32_t code = ((((a >> 23) - 127u + 7u) << 3) | ((a >> 20) & 7u));
    uint32_t rem = a & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (code & 1u))) code++;
    return sign | (uint8_t)code;
}

float li_e4m3_to_f32(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return (b & 0x80) ? -v : v;
}

float li_fp8_scale(float amax) {
    float a = amax > LI_FP8_AMAX_MIN ? amax : LI_FP8_AMAX_MIN;
    return a / LI_E4M3_MAX;
}
