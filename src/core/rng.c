// rng.c — monotonic time and the engine's one PRNG (xoshiro256**, seeded by splitmix64), so that
// the same seed gives the same tokens on every machine.
#include <math.h>
#include <time.h>

#include "core.h"
#include "rng.h"

double li_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void li_rng_seed(li_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t li_rng_u64(li_rng *r) { return li_xoshiro_next(r->s); }

double li_rng_uniform(li_rng *r) { return (double)(li_rng_u64(r) >> 11) * 0x1p-53; }

float li_rng_normal(li_rng *r) {
    double u1 = li_rng_uniform(r), u2 = li_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
