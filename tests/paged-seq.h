// paged-seq.h — the paged-sequence fixture of the attention tests (tests/test-ops.c on the CPU,
// tests/gpu/gpu-check.c on CUDA): a random page table of documents, each owning whole pages
// (its last page partly filled) with its own Δ, over shuffled physical pages. The pool's memory
// is the caller's (test-ops guards it, gpu-check allocates it plainly).
#ifndef LI_TESTS_PAGED_SEQ_H
#define LI_TESTS_PAGED_SEQ_H

#include <stdlib.h>

#include "backend/backend.h"
#include "test.h"

typedef struct {
    uint64_t *pages;  // (n_pages) page words (malloc'ed; free())
    int n_pages, n_keys;
    int64_t n_pool;   // physical pages the words point into: n_pages + 3
} paged_table;

// Documents of 1..doc_max tokens until at least min_keys keys and 2 pages; each document's Δ is
// its position plus up to 1000 (0 for about one in four, or for all when !with_delta); the pages
// are then given random distinct ids in [0, n_pool). Draws from *rng; exits 2 when out of memory
// (xmalloc).
static inline void paged_table_make(paged_table *t, li_rng *rng, int P, int min_keys,
                                    bool with_delta, int doc_max) {
    // [lo, hi] as the tests' randint draws it
#define PT_RANDINT(lo, hi) ((lo) + (int)(li_rng_u64(rng) % (uint64_t)((hi) - (lo) + 1)))
    int cap_pages = min_keys / P + min_keys + 24;  // every page may hold one key
    t->pages = xmalloc(sizeof(uint64_t) * cap_pages);
    t->n_pages = t->n_keys = 0;
    int64_t pos = 0;
    while ((t->n_keys < min_keys || t->n_pages < 2) && t->n_pages < cap_pages) {
        int len = PT_RANDINT(1, doc_max);
        int64_t delta = with_delta ? pos + PT_RANDINT(0, 1000) : 0;
        if (with_delta && PT_RANDINT(0, 3) == 0) delta = 0;
        for (int done = 0; done < len && t->n_pages < cap_pages; done += P) {
            int cnt = len - done < P ? len - done : P;
            t->pages[t->n_pages++] = li_page_word(0, cnt, delta);
            t->n_keys += cnt;
        }
        pos += len;
    }
#undef PT_RANDINT
    t->n_pool = t->n_pages + 3;
    int64_t *perm = xmalloc(sizeof(int64_t) * t->n_pool);
    for (int64_t i = 0; i < t->n_pool; i++) perm[i] = i;
    for (int64_t i = t->n_pool - 1; i > 0; i--) {
        int64_t j = (int64_t)(li_rng_u64(rng) % (uint64_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (int p = 0; p < t->n_pages; p++)
        t->pages[p] = li_page_word(perm[p], li_page_count(t->pages[p]), li_page_delta(t->pages[p]));
    free(perm);
}

// The pool shape (data NULL: the caller's) of L layers of Hkv heads of Dh behind table t.
static inline li_kv_storage paged_table_kv(const paged_table *t, int L, int Hkv, int Dh, int P,
                                           li_dtype dt) {
    return (li_kv_storage){L, Hkv, Dh, P, t->n_pool, NULL, dt};
}

#endif
