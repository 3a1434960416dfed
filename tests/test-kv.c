// test-kv.c — the KV page pool and sequence page tables: slots, page words, refcounts, the
// KV-full error that leaves a sequence untouched, and the pool returning to full.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kv/kv-pool.h"
#include "test.h"

int main(void) {
    li_hparams hp = {.n_layer = 3, .n_head_kv = 2, .head_dim = 8};
    li_rng rng;
    uint64_t seed = (uint64_t)time(NULL);
    li_rng_seed(&rng, seed);
    printf("# seed %llu\n", (unsigned long long)seed);

    TEST_BEGIN("page word packs and unpacks every field at its limits");
    int64_t ids[] = {0, 1, 12345, LI_PAGE_MAX_ID};
    int counts[] = {0, 1, 16, LI_PAGE_MAX_SIZE};
    int64_t deltas[] = {0, 7, 131072, LI_PAGE_MAX_DELTA};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++) {
                uint64_t w = li_page_word(ids[a], counts[b], deltas[c]);
                CHECK(li_page_id(w) == ids[a] && li_page_count(w) == counts[b] &&
                          li_page_delta(w) == deltas[c],
                      "%lld %d %lld", (long long)ids[a], counts[b], (long long)deltas[c]);
            }
    TEST_END();

    TEST_BEGIN("pool limits are checked");
    li_kv_pool pool;
    CHECK(li_kv_pool_init(&pool, &hp, 0, 4) == LI_ERR_LIMIT, "page size 0");
    CHECK(li_kv_pool_init(&pool, &hp, LI_PAGE_MAX_SIZE + 1, 4) == LI_ERR_LIMIT, "page too big");
    CHECK(li_kv_pool_init(&pool, &hp, 16, LI_PAGE_MAX_ID + 2) == LI_ERR_LIMIT, "too many pages");
    TEST_END();

    int sizes[] = {1, 16, 64};
    for (int si = 0; si < 3; si++) {
        int P = sizes[si];
        char name[96];
        snprintf(name, sizeof name, "sequences append, share and release pages (P=%d)", P);
        TEST_BEGIN(name);
        int64_t n_pages = 40;
        CHECK(li_kv_pool_init(&pool, &hp, P, n_pages) == LI_OK, "init");
        CHECK(pool.page_bytes == (size_t)3 * 2 * 2 * P * 8 * 4, "page bytes");
        li_kv_seq_pages a = {0}, b = {0};
        int64_t slots[4096];
        int total_a = 0;
        // random appends until near full, checking slot continuity within pages
        for (int step = 0; step < 30; step++) {
            int n = 1 + (int)(li_rng_u64(&rng) % (uint64_t)(2 * P + 3));
            li_kv_seq_pages *s = step % 3 ? &a : &b;
            int before_pages = s->n_pages, before_tokens = s->n_tokens;
            li_status rc = li_kv_seq_append(&pool, s, n, slots);
            if (rc == LI_ERR_KV_FULL) {
                CHECK(s->n_pages == before_pages && s->n_tokens == before_tokens,
                      "KV_FULL must leave the sequence as it was");
                break;
            }
            CHECK(rc == LI_OK, "append: %s", li_last_error());
            if (s == &a) total_a += n;
            // slots of the appended tokens: logical index k lives in page k / P at offset k % P
            for (int i = 0; i < n; i++) {
                int k = before_tokens + i;
                uint64_t w = s->pages[k / P];
                CHECK(slots[i] == li_page_id(w) * P + k % P, "slot of token %d", k);
            }
            int sum = 0;
            for (int p = 0; p < s->n_pages; p++) sum += li_page_count(s->pages[p]);
            CHECK(sum == s->n_tokens, "page counts add up to the token count");
        }
        CHECK(a.n_tokens == total_a, "token count");
        // a page shared by reference survives the first owner
        int64_t shared = li_page_id(a.pages[0]);
        li_kv_page_ref(&pool, shared);
        li_kv_seq_free(&pool, &a);
        CHECK(pool.refcount[shared] == 1, "shared page still referenced");
        li_kv_page_unref(&pool, shared);
        li_kv_seq_free(&pool, &b);
        CHECK(li_kv_pool_n_free(&pool) == n_pages, "pool back to full: %lld of %lld",
              (long long)li_kv_pool_n_free(&pool), (long long)n_pages);
        // exhaust it: the error says what happened
        li_kv_seq_pages c = {0};
        li_status rc = li_kv_seq_append(&pool, &c, (int)(n_pages * P + 1), slots);
        CHECK(rc == LI_ERR_KV_FULL && strstr(li_last_error(), "KV cache full"), "full: %s",
              li_last_error());
        li_kv_seq_free(&pool, &c);
        li_kv_pool_free(&pool);
        TEST_END();
    }
    return test_summary();
}
