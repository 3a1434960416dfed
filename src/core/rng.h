// rng.h — one step of the engine's PRNG (xoshiro256**, rng.c), written once for li_rng_u64 and for
// the CUDA kernels that must draw the CPU's stream (src/backend/cuda/dllm-sample.cu), so that the
// two streams are equal draw for draw. Tested by tests/test-rng-jump.c and, on the GPU,
// tests/gpu/gpu-check.c.
#ifndef LI_RNG_H
#define LI_RNG_H

#include <stdint.h>

#include "host-device.h"

static inline LI_HOST_DEVICE uint64_t li_rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

// The next draw of state s (4 words), which moves one step on (Blackman and Vigna's xoshiro256**).
static inline LI_HOST_DEVICE uint64_t li_xoshiro_next(uint64_t s[4]) {
    uint64_t result = li_rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = li_rotl64(s[3], 45);
    return result;
}

#endif
