// prefix-cache.h — vLLM-style automatic prefix caching, the `prefix` mode (ARCHITECTURE.md §3.2):
// full pages of a prompt identified by a hash chain (page k's key = SHA-256(key of page k-1 ‖
// its P token ids)), reusable only for an identical prefix from position 0, with no notion of
// documents. The cache holds one reference on each cached page; pages no running request
// references are evicted least-recently-used first when room is needed.
// Tested by tests/test-doc-cache.c; used by src/engine/engine-ar.c and tools/cmd-sim.c.
#ifndef LI_PREFIX_CACHE_H
#define LI_PREFIX_CACHE_H

#include "doc-cache.h"

typedef struct li_prefix_cache li_prefix_cache;

typedef struct {
    int64_t lookup_tokens;  // prompt tokens looked up (full pages only)
    int64_t hit_tokens;     // served from cached pages
    int64_t evictions;      // pages evicted
    int64_t resident_pages;
} li_prefix_cache_stats;

li_status li_prefix_cache_init(li_prefix_cache **out, li_kv_pool *pool, int64_t max_pages);
void li_prefix_cache_free(li_prefix_cache *pc);

// Chain keys of the n_tokens / P full pages of `tokens` (seeded with model_id).
void li_prefix_chain(const char *model_id, const int32_t *tokens, int n_tokens, int page_size,
                     li_doc_key *keys);
// Longest run of cached pages matching keys[0..n): their ids go to pages[], each gains a
// reference owned by the caller (release with li_kv_page_unref). Returns the run length.
int li_prefix_cache_match(li_prefix_cache *pc, const li_doc_key *keys, int n, int64_t *pages);
// Offers a full, written page under `key`; the cache takes its own reference (no-op if the key is
// already cached).
li_status li_prefix_cache_insert(li_prefix_cache *pc, const li_doc_key *key, int64_t page);
// Evicts unreferenced cached pages (LRU) until the pool has n_pages free.
li_status li_prefix_cache_make_room(li_prefix_cache *pc, int64_t n_pages);
void li_prefix_cache_get_stats(const li_prefix_cache *pc, li_prefix_cache_stats *out);

#endif
