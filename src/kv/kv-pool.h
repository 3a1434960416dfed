// kv-pool.h — the paged KV pool: fixed pages of P tokens (all layers, K and V), allocated once
// at start from a page count or byte budget, refcounted so that several sequences (and, later,
// the document cache) can share a page; and a sequence's private page table that grows as
// tokens are appended.
// Not here: what the pages mean to attention (backend.h) or document caching (later issue).
// Tested by tests/test-kv.c.
#ifndef LI_KV_POOL_H
#define LI_KV_POOL_H

#include "../backend/backend.h"
#include "../format/hparams.h"

typedef struct {
    li_kv_storage storage;  // data: (n_pages, L, 2, Hkv, P, Dh) f32 or bf16
    int32_t *refcount;      // (n_pages) 0 = free
    int64_t *free_pages;    // (n_pages) stack of free page ids
    int64_t n_free;
    size_t page_bytes;
    li_backend *be;         // whose memory storage.data is in (NULL: host)
} li_kv_pool;

// Bytes one page takes for this model, page size and stored dtype (f32 or bf16).
size_t li_kv_page_bytes(const li_hparams *hp, int page_size, li_dtype dtype);
// Allocates n_pages pages (page_size tokens each) of K/V stored as dtype (LI_DTYPE_F32 or
// LI_DTYPE_BF16, else LI_ERR_INVALID_ARG). LI_ERR_LIMIT if n_pages exceeds the page-id
// field of the page-table word or page_size exceeds LI_PAGE_MAX_SIZE. The pages live in `be`'s
// memory (device memory on CUDA; be NULL or a CPU backend: host).
li_status li_kv_pool_init(li_kv_pool *pool, li_backend *be, const li_hparams *hp, int page_size,
                          int64_t n_pages, li_dtype dtype);
// A pool that counts pages but holds no KV memory (storage.data == NULL): the trace simulator
// runs the real caches over it.
li_status li_kv_pool_init_virtual(li_kv_pool *pool, int page_size, int64_t n_pages);
void li_kv_pool_free(li_kv_pool *pool);
int64_t li_kv_pool_n_free(const li_kv_pool *pool);
int64_t li_kv_pool_n_pages(const li_kv_pool *pool);

// One free page with refcount 1, or LI_ERR_KV_FULL.
li_status li_kv_page_alloc(li_kv_pool *pool, int64_t *page);
void li_kv_page_ref(li_kv_pool *pool, int64_t page);
void li_kv_page_unref(li_kv_pool *pool, int64_t page);  // back to the free list at 0

// A sequence's pages in logical order (page-table words) and its token count.
typedef struct {
    uint64_t *pages;
    int n_pages, cap_pages;
    int n_tokens;
    int64_t *spare;  // pages reserved for later appends (li_kv_seq_reserve), used first
    int n_spare, cap_spare;
} li_kv_seq_pages;

// Appends n tokens at global positions pos0 + i with Δ = 0, allocating pages as needed, and
// writes each token's physical slot (page * P + offset) into slots (n). On LI_ERR_KV_FULL the
// sequence is left as it was.
li_status li_kv_seq_append(li_kv_pool *pool, li_kv_seq_pages *seq, int n, int64_t *slots);
// Reserves the pages that appending n more tokens will need, so that those appends cannot fail.
// LI_ERR_KV_FULL (nothing reserved) when the pool lacks them.
li_status li_kv_seq_reserve(li_kv_pool *pool, li_kv_seq_pages *seq, int n);
// Appends a page that already holds `count` valid tokens (a shared page: the caller gives the
// sequence one reference to it), with offset delta.
li_status li_kv_seq_push_page(li_kv_seq_pages *seq, int64_t page, int count, int64_t delta);
// Drops every page reference of the sequence and empties it (keeps its table's memory).
void li_kv_seq_clear(li_kv_pool *pool, li_kv_seq_pages *seq);
void li_kv_seq_free(li_kv_pool *pool, li_kv_seq_pages *seq);
static inline li_kv_seq li_kv_seq_view(const li_kv_seq_pages *s) {
    li_kv_seq v = {.pages = s->pages, .n_pages = s->n_pages};
    return v;
}

#endif
