// test-rng-jump.c — jumping the PRNG ahead (src/core/rng-jump.c) against stepping it, and the
// arithmetic of the GPU's Gumbel-max x0 (src/backend/cuda/dllm-sample.cu) emulated on the CPU:
// every thread of that kernel starts at its own draw offset through the jump table, and the
// chosen token must be the one the engine's sequential loop (engine-dllm.c step_commit) picks.
//
// Run: make test, or alone (one command line, then /tmp/test-rng-jump):
//   cc -std=c11 -O2 -pthread -D_DEFAULT_SOURCE -Isrc -Iinclude -o /tmp/test-rng-jump
//      tests/test-rng-jump.c src/core/*.c -lm
// Seed: test_seed() (tests/test.h), fixed unless LI_TEST_SEED=N or random.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/rng-jump.h"
#include "test.h"

static unsigned long long g_seed;  // printed with every failure

static int same_state(const li_rng *a, const li_rng *b) {
    return !memcmp(a->s, b->s, sizeof a->s);
}

static void step(li_rng *r, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) li_rng_u64(r);
}

static void test_jump_vs_steps(li_rng *rng) {
    TEST_BEGIN("li_rng_jump(n) = n li_rng_u64 steps (fixed and random n, random seeds)");
    uint64_t ns[20] = {0, 1, 2, 3, 63, 64, 65, 1000, 4096 * 31 + 7};
    int n_ns = 9;
    while (n_ns < 20) ns[n_ns++] = li_rng_u64(rng) % 1000000;
    for (int i = 0; i < n_ns; i++) {
        li_rng a, b;
        li_rng_seed(&a, li_rng_u64(rng));
        b = a;
        step(&a, ns[i]);
        li_rng_jump(&b, ns[i]);
        CHECK(same_state(&a, &b), "n = %llu; seed %llu", (unsigned long long)ns[i], g_seed);
        CHECK(li_rng_u64(&a) == li_rng_u64(&b), "next draw differs after n = %llu; seed %llu",
              (unsigned long long)ns[i], g_seed);
    }
    TEST_END();
}

static void test_table_powers(li_rng *rng) {
    TEST_BEGIN("jump table matrix k = 2^k steps, k = 0..20");
    const uint64_t *table = li_rng_jump_table();
    CHECK(table == li_rng_jump_table(), "the table moved between calls");
    for (int k = 0; k <= 20; k++) {
        li_rng a, b;
        li_rng_seed(&a, li_rng_u64(rng));
        b = a;
        step(&a, 1ull << k);
        li_rng_apply_jump(b.s, table + (size_t)k * LI_RNG_JUMP_WORDS);
        CHECK(same_state(&a, &b), "k = %d; seed %llu", k, g_seed);
    }
    TEST_END();
}

static void test_jump_additive(li_rng *rng) {
    // a, b < 2^62: every matrix up to k = 62 takes part, and a + b does not wrap (the period is
    // 2^256 - 1, not 2^64)
    TEST_BEGIN("li_rng_jump(a) then li_rng_jump(b) = li_rng_jump(a + b) for a, b < 2^62");
    for (int i = 0; i < 50; i++) {
        uint64_t a = li_rng_u64(rng) >> 2, b = li_rng_u64(rng) >> 2;
        if (i < 10) a >>= 40;  // small ones too
        li_rng x, y;
        li_rng_seed(&x, li_rng_u64(rng));
        y = x;
        li_rng_jump(&x, a);
        li_rng_jump(&x, b);
        li_rng_jump(&y, a + b);
        CHECK(same_state(&x, &y), "a = %llu b = %llu; seed %llu", (unsigned long long)a,
              (unsigned long long)b, g_seed);
    }
    TEST_END();
}

// ---- the GPU's Gumbel-max, emulated ------------------------------------------------------------

// LLaDA add_gumbel_noise: exp(l) / (-log u)^T in float64 (engine-dllm.c step_commit step 3).
static double gumbel(float l, double u, double temperature) {
    return exp((double)l) / pow(-log(u), temperature);
}

// The engine's loop: draws i = b V + v in order, for every row; only masked rows pick.
static void x0_sequential(int32_t *x0, const float *logits, const uint8_t *masked, int B, int V,
                          double temperature, li_rng *r) {
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * V;
        double best = -INFINITY;
        int32_t arg = 0;
        for (int v = 0; v < V; v++) {
            double u = li_rng_uniform(r);
            if (!masked[b]) continue;
            double g = gumbel(l[v], u, temperature);
            if (g > best) {
                best = g;
                arg = v;
            }
        }
        x0[b] = arg;
    }
}

// s = M^n s through the table, one product per set bit of n (the kernel's warp_jump).
static void jump_state(uint64_t s[4], uint64_t n) {
    const uint64_t *table = li_rng_jump_table();
    for (int k = 0; n; k++, n >>= 1)
        if (n & 1) li_rng_apply_jump(s, table + (size_t)k * LI_RNG_JUMP_WORDS);
}

static double uniform_from(uint64_t s[4]) {
    li_rng r;
    memcpy(r.s, s, sizeof r.s);
    double u = li_rng_uniform(&r);
    memcpy(s, r.s, sizeof r.s);
    return u;
}

// The kernel's decomposition: a row is cut into regions of 32 chunks of C = 2^log2c consecutive
// ids (one warp, one chunk per lane). The warp jumps to its region's first draw b V + r0, the
// lanes' starts follow by doubling (lanes h..2h-1 = M^(C h) applied to lanes 0..h-1), then each
// lane scans its chunk keeping (largest g, lowest id); the partials are combined as kernel 2
// does (largest g, lowest id on equal g, no candidate: 0).
static void x0_chunked(int32_t *x0, const float *logits, const uint8_t *masked, int B, int V,
                       double temperature, const li_rng *r, int log2c) {
    const int C = 1 << log2c, region = 32 * C;
    const uint64_t *table = li_rng_jump_table();
    for (int b = 0; b < B; b++) {
        x0[b] = 0;
        if (!masked[b]) continue;
        const float *l = logits + (size_t)b * V;
        double best = -INFINITY;
        int32_t arg = 0x7fffffff;
        for (int r0 = 0; r0 < V; r0 += region) {
            uint64_t lane[32][4];
            memcpy(lane[0], r->s, sizeof lane[0]);
            jump_state(lane[0], (uint64_t)b * V + r0);
            for (int t = 0; t < 5; t++)
                for (int i = 0; i < (1 << t); i++) {
                    memcpy(lane[i + (1 << t)], lane[i], sizeof lane[i]);
                    li_rng_apply_jump(lane[i + (1 << t)],
                                      table + (size_t)(log2c + t) * LI_RNG_JUMP_WORDS);
                }
            for (int ln = 0; ln < 32; ln++) {
                double pbest = -INFINITY;
                int32_t parg = 0x7fffffff;
                for (int v = r0 + ln * C; v < r0 + (ln + 1) * C && v < V; v++) {
                    double u = uniform_from(lane[ln]);
                    double y = -log(u);
                    // the kernel's T = 1 shortcut: pow(y, 1) is y exactly (checked below)
                    double g = exp((double)l[v]) / (temperature == 1.0 ? y : pow(y, temperature));
                    if (g > pbest) {
                        pbest = g;
                        parg = v;
                    }
                }
                if (pbest > best || (pbest == best && parg < arg)) {
                    best = pbest;
                    arg = parg;
                }
            }
        }
        x0[b] = arg == 0x7fffffff ? 0 : arg;
    }
}

static void test_gumbel_chunked(li_rng *rng) {
    enum { B = 3, V = 1000 };
    const double temps[] = {0.7, 1.0, 2.5};
    const int log2cs[] = {0, 3, 5, 7};  // regions of 32, 256, 1024, 4096 ids: 32..1 per row
    float *logits = malloc(sizeof(float) * B * V);
    for (int it = 0; it < 3; it++)
        for (int ic = 0; ic < 4; ic++) {
            char name[128];
            snprintf(name, sizeof name, "Gumbel x0 by chunk-start jumps = sequential (B=%d V=%d "
                     "T=%g chunk %d)", B, V, temps[it], 1 << log2cs[ic]);
            TEST_BEGIN(name);
            // scale 3: several ids compete in every row, so a draw at a wrong offset changes x0
            for (int i = 0; i < B * V; i++) logits[i] = li_rng_normal(rng) * 3.0f;
            logits[7] = -INFINITY;  // a banned id: g = 0
            uint8_t masked[B] = {1, (uint8_t)(li_rng_u64(rng) & 1), 1};
            li_rng r0;
            li_rng_seed(&r0, li_rng_u64(rng));
            li_rng seq = r0, jumped = r0;
            int32_t want[B], got[B];
            x0_sequential(want, logits, masked, B, V, temps[it], &seq);
            x0_chunked(got, logits, masked, B, V, temps[it], &r0, log2cs[ic]);
            for (int b = 0; b < B; b++)
                if (masked[b])
                    CHECK(got[b] == want[b], "row %d: x0 %d, sequential %d; seed %llu", b, got[b],
                          want[b], g_seed);
            // the op's contract: the caller advances its stream by B V draws
            li_rng_jump(&jumped, (uint64_t)B * V);
            CHECK(same_state(&seq, &jumped), "stream after B V draws differs; seed %llu", g_seed);
            TEST_END();
        }
    free(logits);

    TEST_BEGIN("pow(-log u, 1.0) == -log u (the kernel's T = 1 shortcut), 1M draws");
    long bad = 0;
    for (int i = 0; i < 1000000; i++) {
        double y = -log(li_rng_uniform(rng));
        bad += pow(y, 1.0) != y;
    }
    CHECK(bad == 0, "%ld differ; seed %llu", bad, g_seed);
    TEST_END();
}

int main(void) {
    g_seed = test_seed("test-rng-jump");
    li_rng rng;
    li_rng_seed(&rng, g_seed);
    test_jump_vs_steps(&rng);
    test_table_powers(&rng);
    test_jump_additive(&rng);
    test_gumbel_chunked(&rng);
    return test_summary();
}
