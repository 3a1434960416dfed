// fp8.h — FP8 E4M3 ("fn") encode and decode, written once for the CPU ops and the weight cache
// (through core.h) and for the CUDA kernels (src/backend/cuda/dllm.cu), so that both give the
// same codes bit for bit. Bit-exact: li_f32_to_e4m3 rounds to nearest even from f32 bits,
// saturates at ±448 (where torch.float8_e4m3fn gives NaN above 464); decoding is exact. The
// format, the group size and the scale are in core.h. Tested by tests/test-fp8.c (all 256 codes
// and random floats against PyTorch golden values) and, on the GPU, tests/gpu/gpu-check.c.
#ifndef LI_FP8_H
#define LI_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "host-device.h"

// Round-to-nearest-even to e4m3; |f| > 448 and ±inf saturate to ±448; NaN -> 0x7F | sign.
// Matches torch's .to(torch.float8_e4m3fn) for every |f| <= 464 (beyond that torch gives NaN).
static inline LI_HOST_DEVICE uint8_t li_f32_to_e4m3(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
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

// Exact.
static inline LI_HOST_DEVICE float li_e4m3_to_f32(uint8_t b) {
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

#endif
