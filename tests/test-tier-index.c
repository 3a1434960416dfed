// test-tier-index.c — a tier's index (src/kv/tier-index.c): LRU and GDSF victim orders computed by
// hand, the GDSF aging clock, byte accounting against the budget, pins, and a random sequence of
// operations checked against a brute-force model of both policies.
#include <stdio.h>
#include <string.h>

#include "kv/tier-index.h"
#include "test.h"

static li_doc_key key_of(int i) {
    li_doc_key k;
    memset(&k, 0, sizeof k);
    memcpy(k.b, &i, sizeof i);
    k.b[31] = (uint8_t)(0x5a ^ i);
    return k;
}

static int id_of(const li_doc_key *k) {
    int i;
    memcpy(&i, k->b, sizeof i);
    return i;
}

static int evict_id(li_tier_index *t) {
    li_tier_entry e;
    return li_tier_index_evict(t, &e) ? id_of(&e.key) : -1;
}

static void test_lru(void) {
    TEST_BEGIN("tier-index lru: least recently put or touched first");
    li_tier_index *t;
    CHECK(li_tier_index_init(&t, LI_TIER_LRU, 1000) == LI_OK, "%s", li_last_error());
    for (int i = 1; i <= 4; i++) {
        li_doc_key k = key_of(i);
        CHECK(li_tier_index_put(t, &k, 100 * i, 1.0) == LI_OK, "put");
    }
    li_doc_key k1 = key_of(1), k3 = key_of(3);
    CHECK(li_tier_index_touch(t, &k1), "touch 1");
    CHECK(li_tier_index_touch(t, &k3), "touch 3");
    CHECK(li_tier_index_bytes(t) == 1000, "bytes %lld", (long long)li_tier_index_bytes(t));
    CHECK(li_tier_index_need_room(t, 1), "full budget wants room");
    int want[] = {2, 4, 1, 3, -1};
    for (int i = 0; i < 5; i++) {
        int got = evict_id(t);
        CHECK(got == want[i], "victim %d: got %d want %d", i, got, want[i]);
    }
    CHECK(li_tier_index_bytes(t) == 0 && li_tier_index_count(t) == 0, "empty at the end");
    CHECK(li_tier_index_clock(t) == 0, "lru keeps no aging clock");
    li_tier_index_free(t);
    TEST_END();
}

// H = L + freq × cost / bytes, by hand:
//   A 100 B cost 100 → 1;  B 100 B cost 300 → 3;  C 200 B cost 200 → 1;  touch C → 2.
//   victim A (1; ties with nothing now) → L = 1.
//   D 100 B cost 50 → 1 + 0.5 = 1.5.  order D 1.5, C 2, B 3.  touch D → 1 + 2 × 0.5 = 2 ties C
//   at 2: C is less recent → victim C, L = 2.  E 100 B cost 10 → 2.1.  order D 2, E 2.1, B 3.
static void test_gdsf(void) {
    TEST_BEGIN("tier-index gdsf: hand-computed priorities, ties, aging clock");
    li_tier_index *t;
    CHECK(li_tier_index_init(&t, LI_TIER_GDSF, 1000) == LI_OK, "%s", li_last_error());
    li_doc_key A = key_of(1), B = key_of(2), C = key_of(3), D = key_of(4), E = key_of(5);
    li_tier_index_put(t, &A, 100, 100);
    li_tier_index_put(t, &B, 100, 300);
    li_tier_index_put(t, &C, 200, 200);
    CHECK(li_tier_index_get(t, &C)->priority == 1.0, "C H %g", li_tier_index_get(t, &C)->priority);
    li_tier_index_touch(t, &C);
    CHECK(li_tier_index_get(t, &C)->priority == 2.0 && li_tier_index_get(t, &C)->freq == 2,
          "C after touch H %g", li_tier_index_get(t, &C)->priority);
    CHECK(id_of(&li_tier_index_pick_victim(t)->key) == 1, "peek A");
    CHECK(evict_id(t) == 1, "victim A");
    CHECK(li_tier_index_clock(t) == 1.0, "L = %g after A", li_tier_index_clock(t));
    li_tier_index_put(t, &D, 100, 50);
    CHECK(li_tier_index_get(t, &D)->priority == 1.5, "D H %g", li_tier_index_get(t, &D)->priority);
    li_tier_index_touch(t, &D);
    CHECK(li_tier_index_get(t, &D)->priority == 2.0, "D touched H %g",
          li_tier_index_get(t, &D)->priority);
    CHECK(evict_id(t) == 3, "victim C (tie with D at 2, less recent)");
    CHECK(li_tier_index_clock(t) == 2.0, "L = %g after C", li_tier_index_clock(t));
    li_tier_index_put(t, &E, 100, 10);
    CHECK(li_tier_index_get(t, &E)->priority == 2.1, "E H %g", li_tier_index_get(t, &E)->priority);
    int want[] = {4, 5, 2, -1};
    for (int i = 0; i < 4; i++) {
        int got = evict_id(t);
        CHECK(got == want[i], "victim %d: got %d want %d", i, got, want[i]);
    }
    CHECK(li_tier_index_clock(t) == 3.0, "L = %g at the end (B's H)", li_tier_index_clock(t));
    li_tier_index_free(t);
    TEST_END();
}

// Aging: a document hit often long ago loses, once the clock has passed it, to a newer one hit
// once — without the clock (L stuck at 0) it would stay forever.
static void test_gdsf_aging(void) {
    TEST_BEGIN("tier-index gdsf: the aging clock lets a stale frequent entry go");
    li_tier_index *t;
    li_tier_index_init(&t, LI_TIER_GDSF, 1 << 20);
    li_doc_key old = key_of(100);
    li_tier_index_put(t, &old, 100, 100);  // H 1
    for (int i = 0; i < 9; i++) li_tier_index_touch(t, &old);  // freq 10 → H 10
    // a stream of one-hit documents of value 4 each: every eviction raises L toward them
    int n_evicted_before_old = 0;
    for (int i = 0; i < 100; i++) {
        li_doc_key k = key_of(i);
        li_tier_index_put(t, &k, 100, 400);  // H = L + 4
        if (li_tier_index_count(t) > 2) {
            int v = evict_id(t);
            if (v == 100) break;
            n_evicted_before_old++;
        }
    }
    CHECK(!li_tier_index_contains(t, &old), "the stale entry was never evicted");
    // By hand (two entries kept): k0 4 and k1 4 go at L 0 → L 4; k2 8, k3 8 go → L 8; then k4
    // and k5 arrive at 12 and the old entry's 10 is the lowest: 4 one-hit entries went first.
    CHECK(n_evicted_before_old == 4, "evicted %d one-hit entries first, want 4",
          n_evicted_before_old);
    li_tier_index_free(t);
    TEST_END();
}

static void test_budget_pins(void) {
    TEST_BEGIN("tier-index: bytes, replace, remove, pins skip victims");
    li_tier_index *t;
    CHECK(li_tier_index_init(&t, LI_TIER_LRU, 0) == LI_ERR_INVALID_ARG, "budget 0 refused");
    li_tier_policy p;
    CHECK(li_tier_policy_parse("gdsf", &p) == LI_OK && p == LI_TIER_GDSF, "parse gdsf");
    CHECK(li_tier_policy_parse("lfu", &p) == LI_ERR_INVALID_ARG && strstr(li_last_error(), "lfu"),
          "bad policy named: %s", li_last_error());
    li_tier_index_init(&t, LI_TIER_LRU, 300);
    li_doc_key a = key_of(1), b = key_of(2), c = key_of(3);
    li_tier_index_put(t, &a, 100, 1);
    li_tier_index_put(t, &b, 100, 1);
    CHECK(!li_tier_index_need_room(t, 100) && li_tier_index_need_room(t, 101), "room for 100");
    li_tier_index_put(t, &a, 150, 1);  // replace: bytes updated, a now most recent
    CHECK(li_tier_index_bytes(t) == 250 && li_tier_index_count(t) == 2, "bytes %lld",
          (long long)li_tier_index_bytes(t));
    CHECK(li_tier_index_get(t, &a)->freq == 2, "replace counts as a use");
    li_tier_index_pin(t, &b);
    CHECK(id_of(&li_tier_index_pick_victim(t)->key) == 1, "pinned b skipped");
    li_tier_index_pin(t, &a);
    CHECK(li_tier_index_pick_victim(t) == NULL, "everything pinned: no victim");
    li_tier_index_unpin(t, &b);
    CHECK(id_of(&li_tier_index_pick_victim(t)->key) == 2, "b again after unpin");
    CHECK(li_tier_index_remove(t, &b) && !li_tier_index_remove(t, &c), "remove");
    CHECK(li_tier_index_bytes(t) == 150 && !li_tier_index_contains(t, &b), "after remove");
    CHECK(li_tier_index_put(t, &c, -1, 1) == LI_ERR_INVALID_ARG, "negative bytes refused");
    li_tier_index_free(t);
    TEST_END();
}

// A random mix of put/touch/remove/evict/pin on up to 64 keys, each victim checked against a
// linear scan with the same rule; covers the heap's sift paths and table growth.
typedef struct {
    bool present;
    int64_t bytes, freq;
    double cost, h;
    uint64_t last;
    int pins;
} model_entry;

static void test_random(li_rng *rng, li_tier_policy pol) {
    char name[96];
    snprintf(name, sizeof name, "tier-index %s: 20000 random operations match a linear model",
             li_tier_policy_name(pol));
    TEST_BEGIN(name);
    enum { K = 200 };
    model_entry m[K];
    memset(m, 0, sizeof m);
    double L = 0;
    uint64_t clock = 0;
    int64_t used = 0;
    li_tier_index *t;
    li_tier_index_init(&t, pol, 1 << 30);
    int mismatches = 0;
    for (int step = 0; step < 20000 && mismatches < 5; step++) {
        int k = (int)(li_rng_u64(rng) % K), op = (int)(li_rng_u64(rng) % 10);
        li_doc_key key = key_of(k);
        model_entry *e = &m[k];
        if (op <= 3) {  // put
            int64_t bytes = 1 + (int64_t)(li_rng_u64(rng) % 1000);
            double cost = (double)(li_rng_u64(rng) % 5000);
            li_tier_index_put(t, &key, bytes, cost);
            used += bytes - (e->present ? e->bytes : 0);
            e->freq = e->present ? e->freq + 1 : 1;
            e->present = true;
            e->bytes = bytes;
            e->cost = cost;
        } else if (op <= 5) {  // touch
            bool got = li_tier_index_touch(t, &key);
            if (got != e->present) mismatches++;
            if (!e->present) continue;
            e->freq++;
        } else if (op == 6) {  // remove
            if (li_tier_index_remove(t, &key) != e->present) mismatches++;
            if (e->present) used -= e->bytes;  // removal ignores pins (the owner's call)
            e->present = false;
            e->pins = 0;
            continue;
        } else if (op == 7 && e->present) {  // pin / unpin
            if (e->pins < 2 && li_rng_u64(rng) % 2) li_tier_index_pin(t, &key), e->pins++;
            else if (e->pins > 0) li_tier_index_unpin(t, &key), e->pins--;
            continue;
        } else {  // evict
            int best = -1;
            for (int i = 0; i < K; i++) {
                if (!m[i].present || m[i].pins) continue;
                if (best < 0 || m[i].h < m[best].h ||
                    (m[i].h == m[best].h && m[i].last < m[best].last))
                    best = i;
            }
            int got = evict_id(t);
            if (got != best) {
                if (mismatches++ == 0) fprintf(stderr, "  step %d: victim %d, model %d\n", step, got, best);
                continue;
            }
            if (best >= 0) {
                if (pol == LI_TIER_GDSF) L = m[best].h;
                used -= m[best].bytes;
                m[best].present = false;
            }
            continue;
        }
        e->last = ++clock;
        e->h = pol == LI_TIER_LRU ? (double)e->last : L + (double)e->freq * e->cost / (double)e->bytes;
    }
    CHECK(mismatches == 0, "%d mismatches", mismatches);
    CHECK(li_tier_index_bytes(t) == used, "bytes %lld, model %lld",
          (long long)li_tier_index_bytes(t), (long long)used);
    li_tier_index_free(t);
    TEST_END();
}

int main(void) {
    li_rng rng;
    li_rng_seed(&rng, test_seed("test-tier-index"));
    test_lru();
    test_gdsf();
    test_gdsf_aging();
    test_budget_pins();
    test_random(&rng, LI_TIER_LRU);
    test_random(&rng, LI_TIER_GDSF);
    return test_summary();
}
