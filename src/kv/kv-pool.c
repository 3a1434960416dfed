// kv-pool.c — page pool and sequence page tables (see kv-pool.h).
#include <stdlib.h>
#include <string.h>

#include "kv-pool.h"

size_t li_kv_page_bytes(const li_hparams *hp, int page_size, li_dtype dtype) {
    return (size_t)hp->n_layer * 2 * hp->n_head_kv * (size_t)page_size * hp->head_dim *
           li_kv_elem_bytes(dtype);
}

li_status li_kv_pool_init(li_kv_pool *pool, li_backend *be, const li_hparams *hp, int page_size,
                          int64_t n_pages, li_dtype dtype) {
    memset(pool, 0, sizeof *pool);
    if (dtype != LI_DTYPE_F32 && dtype != LI_DTYPE_BF16)
        return li_error_set(LI_ERR_INVALID_ARG, "KV cache dtype %s: only f32 and bf16 are stored",
                            li_dtype_name(dtype));
    if (page_size < 1 || page_size > LI_PAGE_MAX_SIZE)
        return li_error_set(LI_ERR_LIMIT, "KV page size %d outside [1, %d]", page_size,
                            LI_PAGE_MAX_SIZE);
    if (n_pages < 1 || n_pages > LI_PAGE_MAX_ID + 1)
        return li_error_set(LI_ERR_LIMIT, "KV pool of %lld pages outside [1, %lld]",
                            (long long)n_pages, (long long)LI_PAGE_MAX_ID + 1);
    pool->page_bytes = li_kv_page_bytes(hp, page_size, dtype);
    uint64_t total;
    if (li_mul_overflows((uint64_t)n_pages, pool->page_bytes, &total) || total > SIZE_MAX / 2)
        return li_error_set(LI_ERR_LIMIT, "KV pool of %lld pages is too large", (long long)n_pages);
    li_kv_storage *s = &pool->storage;
    s->n_layer = hp->n_layer;
    s->n_head_kv = hp->n_head_kv;
    s->head_dim = hp->head_dim;
    s->page_size = page_size;
    s->n_pages = n_pages;
    s->dtype = dtype;
    pool->be = be;
    s->data = li_be_alloc(be, (size_t)total, "the KV page pool");
    pool->refcount = calloc((size_t)n_pages, sizeof *pool->refcount);
    pool->free_pages = malloc((size_t)n_pages * sizeof *pool->free_pages);
    if (!s->data || !pool->refcount || !pool->free_pages) {
        li_kv_pool_free(pool);
        return li_error_set(LI_ERR_OOM, "out of memory allocating a KV pool of %lld pages (%zu bytes)",
                            (long long)n_pages, (size_t)total);
    }
    // Lowest ids on top of the stack: allocation order is deterministic.
    for (int64_t i = 0; i < n_pages; i++) pool->free_pages[i] = n_pages - 1 - i;
    pool->n_free = n_pages;
    return LI_OK;
}

li_status li_kv_pool_init_virtual(li_kv_pool *pool, int page_size, int64_t n_pages) {
    memset(pool, 0, sizeof *pool);
    if (page_size < 1 || page_size > LI_PAGE_MAX_SIZE)
        return li_error_set(LI_ERR_LIMIT, "page size %d outside [1, %d]", page_size, LI_PAGE_MAX_SIZE);
    if (n_pages < 1 || n_pages > LI_PAGE_MAX_ID + 1)
        return li_error_set(LI_ERR_LIMIT, "pool of %lld pages outside [1, %lld]",
                            (long long)n_pages, (long long)LI_PAGE_MAX_ID + 1);
    pool->storage.page_size = page_size;
    pool->storage.n_pages = n_pages;
    pool->refcount = calloc((size_t)n_pages, sizeof *pool->refcount);
    pool->free_pages = malloc((size_t)n_pages * sizeof *pool->free_pages);
    if (!pool->refcount || !pool->free_pages) {
        li_kv_pool_free(pool);
        return li_error_set(LI_ERR_OOM, "out of memory for a pool of %lld pages", (long long)n_pages);
    }
    for (int64_t i = 0; i < n_pages; i++) pool->free_pages[i] = n_pages - 1 - i;
    pool->n_free = n_pages;
    return LI_OK;
}

void li_kv_pool_free(li_kv_pool *pool) {
    li_be_free(pool->be, pool->storage.data);
    free(pool->refcount);
    free(pool->free_pages);
    memset(pool, 0, sizeof *pool);
}

int64_t li_kv_pool_n_free(const li_kv_pool *pool) { return pool->n_free; }
int64_t li_kv_pool_n_pages(const li_kv_pool *pool) { return pool->storage.n_pages; }

li_status li_kv_page_alloc(li_kv_pool *pool, int64_t *page) {
    if (pool->n_free == 0)
        return li_error_set(LI_ERR_KV_FULL, "KV cache full: all %lld pages of %d tokens are in use",
                            (long long)pool->storage.n_pages, pool->storage.page_size);
    int64_t p = pool->free_pages[--pool->n_free];
    LI_ASSERT(pool->refcount[p] == 0);
    pool->refcount[p] = 1;
    *page = p;
    return LI_OK;
}

void li_kv_page_ref(li_kv_pool *pool, int64_t page) {
    LI_ASSERT(page >= 0 && page < pool->storage.n_pages && pool->refcount[page] > 0);
    pool->refcount[page]++;
}

void li_kv_page_unref(li_kv_pool *pool, int64_t page) {
    LI_ASSERT(page >= 0 && page < pool->storage.n_pages && pool->refcount[page] > 0);
    if (--pool->refcount[page] == 0) pool->free_pages[pool->n_free++] = page;
}

static li_status grow_table(li_kv_seq_pages *seq, int extra) {
    if (seq->n_pages + extra <= seq->cap_pages) return LI_OK;
    int cap = seq->cap_pages ? seq->cap_pages : 16;
    while (cap < seq->n_pages + extra) cap *= 2;
    uint64_t *p = realloc(seq->pages, (size_t)cap * sizeof *p);
    if (!p) return li_error_set(LI_ERR_OOM, "out of memory growing a page table");
    seq->pages = p;
    seq->cap_pages = cap;
    return LI_OK;
}

// Pages appending n tokens would take (beyond the room in the last page).
static int pages_needed(const li_kv_pool *pool, const li_kv_seq_pages *seq, int n) {
    const int P = pool->storage.page_size;
    // valid tokens in the last page (a full "virtual" page when there is none yet)
    int used_in_last = seq->n_pages ? li_page_count(seq->pages[seq->n_pages - 1]) : P;
    int room = P - used_in_last;
    return n > room ? (n - room + P - 1) / P : 0;
}

li_status li_kv_seq_reserve(li_kv_pool *pool, li_kv_seq_pages *seq, int n) {
    int want = pages_needed(pool, seq, n) - seq->n_spare;
    if (want <= 0) return LI_OK;
    if (want > pool->n_free)
        return li_error_set(LI_ERR_KV_FULL, "KV cache full: %d more pages needed, %lld of %lld free",
                            want, (long long)pool->n_free, (long long)pool->storage.n_pages);
    if (seq->n_spare + want > seq->cap_spare) {
        int cap = seq->n_spare + want;
        int64_t *p = realloc(seq->spare, (size_t)cap * sizeof *p);
        if (!p) return li_error_set(LI_ERR_OOM, "out of memory reserving pages");
        seq->spare = p;
        seq->cap_spare = cap;
    }
    // Popped from the end of `spare`: keep the lowest ids last so they are used first.
    int64_t got[want];
    for (int i = 0; i < want; i++) LI_TRY(li_kv_page_alloc(pool, &got[i]));
    for (int i = want - 1; i >= 0; i--) seq->spare[seq->n_spare++] = got[i];
    return LI_OK;
}

li_status li_kv_seq_push_page(li_kv_seq_pages *seq, int64_t page, int count, int64_t delta) {
    LI_TRY(grow_table(seq, 1));
    seq->pages[seq->n_pages++] = li_page_word(page, count, delta);
    seq->n_tokens += count;
    return LI_OK;
}

li_status li_kv_seq_append(li_kv_pool *pool, li_kv_seq_pages *seq, int n, int64_t *slots) {
    const int P = pool->storage.page_size;
    int new_pages = pages_needed(pool, seq, n);
    int from_pool = new_pages > seq->n_spare ? new_pages - seq->n_spare : 0;
    if (from_pool > pool->n_free)
        return li_error_set(LI_ERR_KV_FULL,
                            "KV cache full: %d more pages needed, %lld of %lld free (raise the "
                            "context/pool size)",
                            from_pool, (long long)pool->n_free, (long long)pool->storage.n_pages);
    LI_TRY(grow_table(seq, new_pages));
    int used_in_last = seq->n_pages ? li_page_count(seq->pages[seq->n_pages - 1]) : P;
    for (int i = 0; i < n; i++) {
        if (used_in_last == P) {
            int64_t page;
            if (seq->n_spare > 0) {
                page = seq->spare[--seq->n_spare];
            } else {
                li_status rc = li_kv_page_alloc(pool, &page);
                LI_ASSERT(rc == LI_OK);  // counted above
            }
            seq->pages[seq->n_pages++] = li_page_word(page, 0, 0);
            used_in_last = 0;
        }
        uint64_t w = seq->pages[seq->n_pages - 1];
        slots[i] = li_page_id(w) * P + used_in_last;
        used_in_last++;
        seq->pages[seq->n_pages - 1] = li_page_word(li_page_id(w), used_in_last, li_page_delta(w));
    }
    seq->n_tokens += n;
    return LI_OK;
}

void li_kv_seq_clear(li_kv_pool *pool, li_kv_seq_pages *seq) {
    for (int i = 0; i < seq->n_pages; i++) li_kv_page_unref(pool, li_page_id(seq->pages[i]));
    for (int i = 0; i < seq->n_spare; i++) li_kv_page_unref(pool, seq->spare[i]);
    seq->n_pages = 0;
    seq->n_tokens = 0;
    seq->n_spare = 0;
}

void li_kv_seq_free(li_kv_pool *pool, li_kv_seq_pages *seq) {
    li_kv_seq_clear(pool, seq);
    free(seq->pages);
    free(seq->spare);
    memset(seq, 0, sizeof *seq);
}
