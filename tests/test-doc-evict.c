// test-doc-evict.c — the document cache's eviction policies on a virtual pool (src/kv/doc-cache.c):
// GDSF's priorities computed by hand for documents of different lengths under a cost model with
// the quadratic attention term, its victims and aging clock; policy names parsed and refused.
// (Whole traces against an independent replay: tests/test_sim.py.)
#include <stdio.h>
#include <string.h>

#include "kv/doc-cache.h"
#include "test.h"

static li_doc_key key_of(int i) {
    li_doc_key k;
    memset(&k, 0, sizeof k);
    k.b[0] = (uint8_t)i;
    k.b[7] = 0xa5;
    return k;
}

// One request using one document: acquire (a miss makes it and marks it ready), release.
static li_doc_copy *use(li_doc_cache *c, int id, int n_tokens) {
    li_doc_key k = key_of(id);
    li_doc_copy *d = NULL;
    li_doc_lookup_result res;
    if (li_doc_cache_acquire(c, &k, n_tokens, true, 0, &d, NULL, &res) != LI_OK) return NULL;
    if (res == LI_DOC_MISS) li_doc_cache_mark_ready(c, d);
    li_doc_cache_release(c, d);
    return d;
}

static bool resident(li_doc_cache *c, int id) {
    li_doc_key k = key_of(id);
    return li_doc_cache_n_copies(c, &k) == 1;
}

// Pages of 16 tokens, 6 pages for documents; cost(n) = n + 0.5 × n(n+1)/2, sizes in pages:
//   A 32 tok, 2 pages: cost 296, 148 per page     B 16 tok, 1 page: cost 84, 84 per page
//   C 48 tok, 3 pages: cost 636, 212 per page
// A, B, C: H 148, 84, 212 (6 pages, full). B used twice more: H 3 × 84 = 252.
// D (16 tok) needs a page: lowest H is A (148) → L = 148; D = 148 + 84 = 232.
// E (32 tok) needs 2 pages, 1 free: lowest is C (212) → L = 212; E = 212 + 148 = 360.
// The second half shows a sequence where LRU and GDSF part ways.
static void test_gdsf_by_hand(void) {
    TEST_BEGIN("doc-cache gdsf: hand-computed H, victims and aging clock (lengths differ)");
    li_kv_pool pool;
    li_doc_cache *c = NULL;
    CHECK(li_kv_pool_init_virtual(&pool, 16, 100) == LI_OK, "pool");
    CHECK(li_doc_cache_init(&c, &pool, &li_evict_gdsf, 6) == LI_OK, "%s", li_last_error());
    li_doc_cache_set_cost(c, 1.0, 0.5);
    CHECK(li_doc_cache_cost(c, 48) == 636.0, "cost(48) = %g", li_doc_cache_cost(c, 48));
    li_doc_copy *a = use(c, 'A', 32), *b = use(c, 'B', 16), *cc = use(c, 'C', 48);
    CHECK(a && b && cc, "acquire: %s", li_last_error());
    CHECK(a->priority == 148 && b->priority == 84 && cc->priority == 212, "H %g %g %g",
          a->priority, b->priority, cc->priority);
    use(c, 'B', 16);
    use(c, 'B', 16);
    CHECK(b->priority == 252 && b->uses == 3, "B H %g uses %lld", b->priority, (long long)b->uses);
    li_doc_copy *d = use(c, 'D', 16);
    CHECK(!resident(c, 'A') && resident(c, 'B') && resident(c, 'C'), "A should go first");
    CHECK(d && d->priority == 232, "D H %g", d ? d->priority : -1);
    li_doc_copy *e = use(c, 'E', 32);
    CHECK(!resident(c, 'C') && resident(c, 'B') && resident(c, 'D'), "C should go second");
    CHECK(e && e->priority == 360, "E H %g", e ? e->priority : -1);
    li_doc_cache_stats st;
    li_doc_cache_get_stats(c, &st);
    CHECK(st.evictions == 2 && st.resident_pages == 4, "%lld evictions, %lld pages",
          (long long)st.evictions, (long long)st.resident_pages);
    li_doc_cache_free(c);
    // The same uses under LRU evict the least recently used: A, then C (B and D are newer) —
    // and once B is old, LRU drops it although it was used three times; GDSF keeps it.
    CHECK(li_doc_cache_init(&c, &pool, &li_evict_lru, 6) == LI_OK, "%s", li_last_error());
    use(c, 'B', 16);
    use(c, 'B', 16);
    use(c, 'B', 16);
    use(c, 'A', 32);
    use(c, 'C', 48);
    use(c, 'D', 16);  // LRU: B (least recent) goes
    CHECK(!resident(c, 'B'), "lru kept B");
    li_doc_cache_free(c);
    CHECK(li_doc_cache_init(&c, &pool, &li_evict_gdsf, 6) == LI_OK, "%s", li_last_error());
    li_doc_cache_set_cost(c, 1.0, 0.5);
    use(c, 'B', 16);
    use(c, 'B', 16);
    use(c, 'B', 16);
    use(c, 'A', 32);
    use(c, 'C', 48);
    use(c, 'D', 16);  // GDSF: A (148) goes, B (252) stays
    CHECK(resident(c, 'B') && !resident(c, 'A'), "gdsf dropped B or kept A");
    li_doc_cache_free(c);
    li_kv_pool_free(&pool);
    TEST_END();
}

static void test_parse(void) {
    TEST_BEGIN("doc-cache: eviction policy names");
    const li_evict_policy *p = NULL;
    CHECK(li_evict_policy_parse("gdsf", &p) == LI_OK && p == &li_evict_gdsf, "gdsf");
    CHECK(li_evict_policy_parse("lru", &p) == LI_OK && p == &li_evict_lru, "lru");
    CHECK(li_evict_policy_parse("largest", &p) == LI_OK && p == &li_evict_largest, "largest");
    CHECK(li_evict_policy_parse("mru", &p) == LI_ERR_INVALID_ARG && strstr(li_last_error(), "mru"),
          "%s", li_last_error());
    TEST_END();
}

int main(void) {
    test_seed("test-doc-evict");  // nothing random here; printed for the suite's uniformity
    test_gdsf_by_hand();
    test_parse();
    return test_summary();
}
