// prefix-cache.c — hash-chained page cache (see prefix-cache.h): a key table (key-table.h) from
// chain key to page, in recency order; a page is evictable when the cache's reference is the only
// one.
#include <stdlib.h>

#include "prefix-cache.h"

typedef struct {
    li_doc_key key;
    int64_t page;
    li_key_link link;  // by key and by recency
} entry;

struct li_prefix_cache {
    li_kv_pool *pool;  // borrowed
    int64_t max_pages;
    li_key_table entries;
    li_prefix_cache_stats stats;
};

static entry *entry_of(li_key_link *e) { return LI_KEY_ENTRY(e, entry, link); }

static entry *find(li_prefix_cache *pc, const li_doc_key *k) {
    return entry_of(li_key_table_find(&pc->entries, k));
}

static void remove_entry(li_prefix_cache *pc, entry *e) {
    li_key_table_remove(&pc->entries, &e->link);
    li_kv_page_unref(pc->pool, e->page);
    free(e);
}

// Evicts the least recently used page no request references; false if there is none.
static bool evict_one(li_prefix_cache *pc) {
    for (li_key_link *l = li_key_table_oldest(&pc->entries); l; l = l->newer)
        if (pc->pool->refcount[entry_of(l)->page] == 1) {
            remove_entry(pc, entry_of(l));
            pc->stats.evictions++;
            return true;
        }
    return false;
}

li_status li_prefix_cache_init(li_prefix_cache **out, li_kv_pool *pool, int64_t max_pages) {
    *out = NULL;
    li_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return li_error_set(LI_ERR_OOM, "out of memory");
    pc->pool = pool;
    pc->max_pages = max_pages > 0 ? max_pages : li_kv_pool_n_pages(pool);
    li_key_table_init(&pc->entries, 256, "the prefix cache");
    *out = pc;
    return LI_OK;
}

void li_prefix_cache_free(li_prefix_cache *pc) {
    if (!pc) return;
    while (li_key_table_oldest(&pc->entries))
        remove_entry(pc, entry_of(li_key_table_oldest(&pc->entries)));
    li_key_table_free(&pc->entries);
    free(pc);
}

void li_prefix_chain(const char *model_id, const int32_t *tokens, int n_tokens, int page_size,
                     li_doc_key *keys) {
    li_doc_key root;
    li_doc_key_compute(&root, model_id, "prefix-chain", NULL, 0);
    const li_doc_key *parent = &root;
    for (int k = 0; k < n_tokens / page_size; k++) {
        li_doc_key_chain(&keys[k], parent, tokens + (size_t)k * page_size, page_size);
        parent = &keys[k];
    }
}

int li_prefix_cache_match(li_prefix_cache *pc, const li_doc_key *keys, int n, int64_t *pages) {
    int P = pc->pool->storage.page_size;
    pc->stats.lookup_tokens += (int64_t)n * P;
    int k = 0;
    entry *hit[n > 0 ? n : 1];
    for (; k < n; k++) {
        entry *e = find(pc, &keys[k]);
        if (!e) break;
        li_kv_page_ref(pc->pool, e->page);
        pages[k] = e->page;
        hit[k] = e;
    }
    // Touch tail-first, like vLLM frees a request's blocks: the chain's head ends up the most
    // recently used, so eviction takes chain tails before the prefixes they hang from.
    for (int i = k - 1; i >= 0; i--) li_key_table_touch(&pc->entries, &hit[i]->link);
    pc->stats.hit_tokens += (int64_t)k * P;
    return k;
}

li_status li_prefix_cache_insert(li_prefix_cache *pc, const li_doc_key *key, int64_t page) {
    if (find(pc, key)) return LI_OK;
    // Over the cap: make room among unreferenced pages, or do not cache this one.
    while ((int64_t)pc->entries.count >= pc->max_pages)
        if (!evict_one(pc)) return LI_OK;
    entry *e = calloc(1, sizeof *e);
    if (!e) return li_error_set(LI_ERR_OOM, "out of memory for a prefix cache entry");
    e->key = *key;
    e->page = page;
    li_status rc = li_key_table_insert(&pc->entries, &e->link, &e->key);
    if (rc != LI_OK) {
        free(e);
        return rc;
    }
    li_kv_page_ref(pc->pool, page);
    return LI_OK;
}

li_status li_prefix_cache_make_room(li_prefix_cache *pc, int64_t n_pages) {
    while (li_kv_pool_n_free(pc->pool) < n_pages)
        if (!evict_one(pc))
            return li_error_set(LI_ERR_KV_FULL,
                                "KV cache full: %lld pages needed, %lld free, and every cached "
                                "prefix page is in use",
                                (long long)n_pages, (long long)li_kv_pool_n_free(pc->pool));
    return LI_OK;
}

void li_prefix_cache_get_stats(const li_prefix_cache *pc, li_prefix_cache_stats *out) {
    *out = pc->stats;
    out->resident_pages = (int64_t)pc->entries.count;
}
