// rng-jump.c — powers of xoshiro256**'s transition matrix, to jump the PRNG ahead (rng-jump.h).
// M's columns come from one li_rng_u64 step of each basis state; M^(2^(k+1)) = M^(2^k) M^(2^k),
// column by column. Tested by tests/test-rng-jump.c.
#include <pthread.h>
#include <string.h>

#include "rng-jump.h"

static uint64_t jump_table[LI_RNG_JUMP_MATRICES * LI_RNG_JUMP_WORDS];  // (64, 256, 4)
static pthread_once_t jump_once = PTHREAD_ONCE_INIT;

// 64 x 256 columns of ~128 set bits each: ~8M word XORs, ~10 ms once.
static void jump_table_build(void) {
    uint64_t *m1 = jump_table;
    for (int j = 0; j < 256; j++) {
        li_rng e = {{0, 0, 0, 0}};  // a local basis state: rng.c's own update, one step
        e.s[j / 64] = 1ull << (j % 64);
        li_rng_u64(&e);
        memcpy(m1 + 4 * j, e.s, sizeof e.s);
    }
    for (int k = 0; k + 1 < LI_RNG_JUMP_MATRICES; k++) {
        const uint64_t *mk = jump_table + (size_t)k * LI_RNG_JUMP_WORDS;
        uint64_t *next = jump_table + (size_t)(k + 1) * LI_RNG_JUMP_WORDS;
        for (int j = 0; j < 256; j++) {
            memcpy(next + 4 * j, mk + 4 * j, 4 * sizeof(uint64_t));
            li_rng_apply_jump(next + 4 * j, mk);
        }
    }
}

const uint64_t *li_rng_jump_table(void) {
    pthread_once(&jump_once, jump_table_build);
    return jump_table;
}

void li_rng_apply_jump(uint64_t s[4], const uint64_t *matrix) {
    uint64_t y[4] = {0, 0, 0, 0};
    for (int w = 0; w < 4; w++)
        for (uint64_t bits = s[w]; bits; bits &= bits - 1) {
            const uint64_t *col = matrix + 4 * (64 * w + __builtin_ctzll(bits));
            y[0] ^= col[0];
            y[1] ^= col[1];
            y[2] ^= col[2];
            y[3] ^= col[3];
        }
    memcpy(s, y, sizeof y);
}

void li_rng_jump(li_rng *r, uint64_t n) {
    const uint64_t *table = li_rng_jump_table();
    for (int k = 0; n; k++, n >>= 1)
        if (n & 1) li_rng_apply_jump(r->s, table + (size_t)k * LI_RNG_JUMP_WORDS);
}
