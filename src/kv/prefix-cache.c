// prefix-cache.c — hash-chained page cache (see prefix-cache.h). A hash table from chain key to
// page, and a recency list; a page is evictable when the cache's reference is the only one.
#include <stdlib.h>
#include <string.h>

#include "prefix-cache.h"

typedef struct entry entry;
struct entry {
    li_doc_key key;
    int64_t page;
    entry *bucket_next;
    entry *prev, *next;  // recency list, least recently used first
};

struct li_prefix_cache {
    li_kv_pool *pool;  // borrowed
    int64_t max_pages;
    entry **buckets;
    size_t n_buckets;  // power of two
    int64_t n_entries;
    entry *head, *tail;
    li_prefix_cache_stats stats;
};

static size_t hash_of(const li_doc_key *k) {
    uint64_t h;
    memcpy(&h, k->b, sizeof h);
    return (size_t)h;
}

static void unlink_use(li_prefix_cache *pc, entry *e) {
    if (e->prev) e->prev->next = e->next; else pc->head = e->next;
    if (e->next) e->next->prev = e->prev; else pc->tail = e->prev;
    e->prev = e->next = NULL;
}

static void append_use(li_prefix_cache *pc, entry *e) {
    e->prev = pc->tail;
    e->next = NULL;
    if (pc->tail) pc->tail->next = e; else pc->head = e;
    pc->tail = e;
}

static li_status grow(li_prefix_cache *pc) {
    size_t n = pc->n_buckets ? 2 * pc->n_buckets : 256;
    entry **b = calloc(n, sizeof *b);
    if (!b) return li_error_set(LI_ERR_OOM, "out of memory growing the prefix cache");
    for (size_t i = 0; i < pc->n_buckets; i++)
        for (entry *e = pc->buckets[i], *next; e; e = next) {
            next = e->bucket_next;
            size_t j = hash_of(&e->key) & (n - 1);
            e->bucket_next = b[j];
            b[j] = e;
        }
    free(pc->buckets);
    pc->buckets = b;
    pc->n_buckets = n;
    return LI_OK;
}

static entry *find(li_prefix_cache *pc, const li_doc_key *k) {
    for (entry *e = pc->buckets[hash_of(k) & (pc->n_buckets - 1)]; e; e = e->bucket_next)
        if (!memcmp(e->key.b, k->b, 32)) return e;
    return NULL;
}

static void remove_entry(li_prefix_cache *pc, entry *e) {
    entry **pp = &pc->buckets[hash_of(&e->key) & (pc->n_buckets - 1)];
    while (*pp != e) pp = &(*pp)->bucket_next;
    *pp = e->bucket_next;
    unlink_use(pc, e);
    li_kv_page_unref(pc->pool, e->page);
    pc->n_entries--;
    free(e);
}

// Evicts the least recently used page no request references; false if there is none.
static bool evict_one(li_prefix_cache *pc) {
    for (entry *e = pc->head; e; e = e->next)
        if (pc->pool->refcount[e->page] == 1) {
            remove_entry(pc, e);
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
    if (grow(pc) != LI_OK) {
        free(pc);
        return LI_ERR_OOM;
    }
    *out = pc;
    return LI_OK;
}

void li_prefix_cache_free(li_prefix_cache *pc) {
    if (!pc) return;
    while (pc->head) remove_entry(pc, pc->head);
    free(pc->buckets);
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
    for (int i = k - 1; i >= 0; i--) {
        unlink_use(pc, hit[i]);
        append_use(pc, hit[i]);
    }
    pc->stats.hit_tokens += (int64_t)k * P;
    return k;
}

li_status li_prefix_cache_insert(li_prefix_cache *pc, const li_doc_key *key, int64_t page) {
    if (find(pc, key)) return LI_OK;
    // Over the cap: make room among unreferenced pages, or do not cache this one.
    while (pc->n_entries >= pc->max_pages)
        if (!evict_one(pc)) return LI_OK;
    if ((size_t)(pc->n_entries + 1) > pc->n_buckets * 3 / 4) LI_TRY(grow(pc));
    entry *e = calloc(1, sizeof *e);
    if (!e) return li_error_set(LI_ERR_OOM, "out of memory for a prefix cache entry");
    e->key = *key;
    e->page = page;
    li_kv_page_ref(pc->pool, page);
    size_t j = hash_of(key) & (pc->n_buckets - 1);
    e->bucket_next = pc->buckets[j];
    pc->buckets[j] = e;
    append_use(pc, e);
    pc->n_entries++;
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
    out->resident_pages = pc->n_entries;
}
