// test-host-arena.c — the host tier's arena (src/kv/host-arena.c): first fit, merging on release,
// rounding to units, an arena too small to hold a unit, and a random sequence of allocations and
// releases checked against a bitmap of units (the first free run that fits must be the one
// returned; free bytes and the largest free run must match the bitmap after every operation).
#include <stdio.h>
#include <string.h>

#include "kv/host-arena.h"
#include "test.h"

#define U LI_HOST_ARENA_UNIT

static void test_basics(void) {
    TEST_BEGIN("host-arena: first fit, rounding to units, merging neighbours on release");
    static char mem[10 * U + 123];  // the tail that is no whole unit is never handed out
    li_host_arena *a;
    CHECK(li_host_arena_init(&a, mem, sizeof mem) == LI_OK, "%s", li_last_error());
    CHECK(li_host_arena_capacity(a) == 10 * U, "capacity %zu", li_host_arena_capacity(a));
    char *p0 = li_host_arena_alloc(a, 1), *p1 = li_host_arena_alloc(a, 2 * U),
         *p2 = li_host_arena_alloc(a, 3 * U - 5);
    CHECK(p0 == mem && p1 == mem + U && p2 == mem + 3 * U, "first fit in order: %td %td %td",
          p0 - mem, p1 - mem, p2 - mem);
    CHECK(li_host_arena_free_bytes(a) == 4 * U, "free %zu", li_host_arena_free_bytes(a));
    CHECK(!li_host_arena_alloc(a, 4 * U + 1), "5 units do not fit in 4");
    li_host_arena_release(a, p1, 2 * U);  // a hole of 2 before p2
    char *p3 = li_host_arena_alloc(a, U);
    CHECK(p3 == mem + U, "the hole comes first (first fit): %td", p3 - mem);
    CHECK(li_host_arena_largest_free(a) == 4 * U, "largest %zu", li_host_arena_largest_free(a));
    li_host_arena_release(a, p0, 1);
    li_host_arena_release(a, p2, 3 * U - 5);
    li_host_arena_release(a, p3, U);  // joins the runs before and after it: one extent again
    CHECK(li_host_arena_largest_free(a) == 10 * U && li_host_arena_free_bytes(a) == 10 * U,
          "all merged: largest %zu", li_host_arena_largest_free(a));
    CHECK(li_host_arena_alloc(a, 10 * U) == mem, "the whole arena in one piece");
    CHECK(!li_host_arena_alloc(a, 1), "full");
    li_host_arena_free(a);
    li_host_arena *b = NULL;
    CHECK(li_host_arena_init(&b, mem, U - 1) == LI_ERR_INVALID_ARG && !b,
          "less than a unit: an error");
    CHECK(strstr(li_last_error(), "unit") != NULL, "the message says why: %s", li_last_error());
    TEST_END();
}

enum { N_UNITS = 300, N_LIVE = 64 };

static void test_random(li_rng *r) {
    TEST_BEGIN("host-arena: 20000 random allocations and releases against a bitmap of units");
    static char mem[N_UNITS * U];
    bool used[N_UNITS] = {false};
    struct {
        char *p;
        size_t n;
    } live[N_LIVE];
    int n_live = 0, mismatches = 0, allocs = 0, refusals = 0;
    li_host_arena *a;
    CHECK(li_host_arena_init(&a, mem, sizeof mem) == LI_OK, "%s", li_last_error());
    for (int step = 0; step < 20000 && mismatches < 5; step++) {
        bool do_alloc = n_live == 0 || (n_live < N_LIVE && li_rng_u64(r) % 2);
        if (do_alloc) {
            size_t n = 1 + li_rng_u64(r) % (12 * U), u = (n + U - 1) / U;
            // the model: the first run of >= u free units
            int want = -1;
            for (int i = 0, run = 0; i < N_UNITS; i++) {
                run = used[i] ? 0 : run + 1;
                if (run == (int)u) {
                    want = i - (int)u + 1;
                    break;
                }
            }
            char *p = li_host_arena_alloc(a, n);
            int got = p ? (int)((p - mem) / (ptrdiff_t)U) : -1;
            if (got != want) mismatches++;
            if (p && got == want) {
                for (size_t k = 0; k < u; k++) used[got + k] = true;
                live[n_live].p = p, live[n_live].n = n, n_live++;
                allocs++;
            }
            refusals += !p;
        } else {
            int i = (int)(li_rng_u64(r) % (uint64_t)n_live);
            size_t off = (size_t)(live[i].p - mem) / U, u = (live[i].n + U - 1) / U;
            li_host_arena_release(a, live[i].p, live[i].n);
            for (size_t k = 0; k < u; k++) used[off + k] = false;
            live[i] = live[--n_live];
        }
        size_t free_u = 0, largest = 0;
        for (int i = 0, run = 0; i < N_UNITS; i++) {
            free_u += !used[i];
            run = used[i] ? 0 : run + 1;
            largest = (size_t)run > largest ? (size_t)run : largest;
        }
        mismatches += li_host_arena_free_bytes(a) != free_u * U;
        mismatches += li_host_arena_largest_free(a) != largest * U;
    }
    CHECK(mismatches == 0, "%d mismatches with the bitmap", mismatches);
    CHECK(allocs > 1000 && refusals > 50, "the sequence both fills and refuses: %d allocations, "
          "%d refusals", allocs, refusals);
    for (int i = 0; i < n_live; i++) li_host_arena_release(a, live[i].p, live[i].n);
    CHECK(li_host_arena_largest_free(a) == sizeof mem, "empty again: one extent");
    li_host_arena_free(a);
    TEST_END();
}

int main(void) {
    li_rng r;
    test_rng_init(&r, "test-host-arena");
    test_basics();
    test_random(&r);
    return test_summary();
}
