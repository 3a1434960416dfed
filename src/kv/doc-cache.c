// doc-cache.c — document KV cache (see doc-cache.h): copies in a key table (key-table.h) by
// content key and in recency order for eviction, page accounting against the pool and the
// document budget.
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "doc-cache.h"

struct li_doc_cache {
    li_kv_pool *pool;         // borrowed
    const li_evict_policy *policy;
    int64_t max_pages;        // pages documents may hold
    int64_t pages_held;
    li_key_table copies;      // every copy, by key (several per key in copy mode) and recency
    uint64_t clock;
    li_doc_cache_stats stats; // counters; resident_* filled in get_stats
    double cost_per_token, cost_per_pair;  // li_doc_cache_set_cost
    double aging;             // GDSF's L: the H of the last victim
};

// ---- keys -------------------------------------------------------------------------------------

static void sha256_parts(li_doc_key *key, const void *const *parts, const size_t *sizes, int n) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int len = 0;
    // SHA-256 through OpenSSL cannot fail on valid input; a NULL context means out of memory,
    // which we treat like any other allocation failure of a programmer-visible invariant.
    LI_ASSERT(ctx);
    LI_ASSERT(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1);
    for (int i = 0; i < n; i++) LI_ASSERT(EVP_DigestUpdate(ctx, parts[i], sizes[i]) == 1);
    LI_ASSERT(EVP_DigestFinal_ex(ctx, key->b, &len) == 1 && len == 32);
    EVP_MD_CTX_free(ctx);
}

void li_doc_key_compute(li_doc_key *key, const char *model_id, const char *tokenizer_id,
                        const int32_t *tokens, int n_tokens) {
    // Lengths are hashed too, so ("ab", "c") and ("a", "bc") differ. Token ids little-endian.
    uint64_t lens[3] = {strlen(model_id), strlen(tokenizer_id), (uint64_t)n_tokens};
    const void *parts[] = {lens, model_id, tokenizer_id, tokens};
    size_t sizes[] = {sizeof lens, lens[0], lens[1], (size_t)n_tokens * sizeof(int32_t)};
    sha256_parts(key, parts, sizes, 4);
}

void li_doc_key_chain(li_doc_key *key, const li_doc_key *parent, const int32_t *tokens, int n) {
    const void *parts[] = {parent->b, tokens};
    size_t sizes[] = {32, (size_t)n * sizeof(int32_t)};
    sha256_parts(key, parts, sizes, 2);
}

void li_doc_key_hex(const li_doc_key *key, char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[key->b[i] >> 4];
        out[2 * i + 1] = hex[key->b[i] & 15];
    }
    out[64] = 0;
}

// ---- the table ---------------------------------------------------------------------------------

static li_doc_copy *copy_of(li_key_link *e) { return LI_KEY_ENTRY(e, li_doc_copy, link); }

static void remove_copy(li_doc_cache *c, li_doc_copy *d) {
    LI_ASSERT(d->pins == 0);
    li_key_table_remove(&c->copies, &d->link);
    for (int i = 0; i < d->n_pages; i++) li_kv_page_unref(c->pool, d->pages[i]);
    c->pages_held -= d->n_pages;
    free(d->pages);
    free(d->deltas_seen);
    free(d);
}

// ---- policies --------------------------------------------------------------------------------

static li_doc_copy *pick_lru(li_doc_cache *c) {
    for (li_doc_copy *d = li_doc_cache_first(c); d; d = li_doc_cache_next(c, d))
        if (d->pins == 0 && d->ready) return d;
    return NULL;
}

static li_doc_copy *pick_largest(li_doc_cache *c) {
    li_doc_copy *best = NULL;
    for (li_doc_copy *d = li_doc_cache_first(c); d; d = li_doc_cache_next(c, d))
        if (d->pins == 0 && d->ready && (!best || d->n_pages > best->n_pages)) best = d;
    return best;
}

// GDSF: H fixed at the last pin (with L as it was then), so copies untouched since fall behind
// as L rises with each victim. A linear scan in recency order: the first lowest H is the least
// recent among equals.
// A virtual pool (sim) has no page bytes: sizes are then counted in pages.
static void gdsf_pin(li_doc_cache *c, li_doc_copy *d) {
    double page = c->pool->page_bytes ? (double)c->pool->page_bytes : 1.0;
    double bytes = (double)d->n_pages * page;
    d->priority = c->aging + (double)d->uses * li_doc_cache_cost(c, d->n_tokens) / bytes;
}

static void gdsf_evict(li_doc_cache *c, li_doc_copy *d) { c->aging = d->priority; }

static li_doc_copy *pick_gdsf(li_doc_cache *c) {
    li_doc_copy *best = NULL;
    for (li_doc_copy *d = li_doc_cache_first(c); d; d = li_doc_cache_next(c, d))
        if (d->pins == 0 && d->ready && (!best || d->priority < best->priority)) best = d;
    return best;
}

const li_evict_policy li_evict_lru = {"lru", pick_lru, NULL, NULL};
const li_evict_policy li_evict_largest = {"largest", pick_largest, NULL, NULL};
const li_evict_policy li_evict_gdsf = {"gdsf", pick_gdsf, gdsf_pin, gdsf_evict};

li_status li_evict_policy_parse(const char *name, const li_evict_policy **out) {
    const li_evict_policy *all[] = {&li_evict_lru, &li_evict_largest, &li_evict_gdsf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, all[i]->name)) {
            *out = all[i];
            return LI_OK;
        }
    return li_error_set(LI_ERR_INVALID_ARG, "eviction policy '%s': want lru, largest or gdsf",
                        name);
}

void li_doc_cache_set_cost(li_doc_cache *c, double flops_per_token, double flops_per_pair) {
    c->cost_per_token = flops_per_token;
    c->cost_per_pair = flops_per_pair;
}

void li_doc_cache_set_policy(li_doc_cache *c, const li_evict_policy *policy) {
    c->policy = policy ? policy : &li_evict_lru;
}

double li_doc_cache_cost(const li_doc_cache *c, int n_tokens) {
    double n = n_tokens;
    return c->cost_per_token * n + c->cost_per_pair * n * (n + 1) / 2;
}

li_doc_copy *li_doc_cache_first(li_doc_cache *c) {
    return copy_of(li_key_table_oldest(&c->copies));
}
li_doc_copy *li_doc_cache_next(li_doc_cache *c, li_doc_copy *d) {
    (void)c;
    return copy_of(d->link.newer);
}

// ---- public ------------------------------------------------------------------------------------

li_status li_doc_cache_init(li_doc_cache **out, li_kv_pool *pool, const li_evict_policy *policy,
                            int64_t max_pages) {
    *out = NULL;
    li_doc_cache *c = calloc(1, sizeof *c);
    if (!c) return li_error_set(LI_ERR_OOM, "out of memory");
    c->pool = pool;
    c->policy = policy ? policy : &li_evict_lru;
    c->max_pages = max_pages > 0 ? max_pages : li_kv_pool_n_pages(pool);
    c->cost_per_token = 1.0;
    li_key_table_init(&c->copies, 64, "the document cache");
    *out = c;
    return LI_OK;
}

void li_doc_cache_free(li_doc_cache *c) {
    if (!c) return;
    for (li_doc_copy *d; (d = li_doc_cache_first(c));) {
        LI_ASSERT(d->pins == 0);
        remove_copy(c, d);
    }
    li_key_table_free(&c->copies);
    free(c);
}

// Evicts until `pages` more pages fit both the pool and the document budget (`for_docs`).
static li_status evict_for(li_doc_cache *c, int64_t pages, bool for_docs) {
    while (li_kv_pool_n_free(c->pool) < pages || (for_docs && c->pages_held + pages > c->max_pages)) {
        li_doc_copy *v = c->policy->pick_victim(c);
        if (!v) {
            if (for_docs && pages > c->max_pages)
                return li_error_set(LI_ERR_KV_FULL, "a document of %lld pages exceeds the "
                                    "document cache budget of %lld pages", (long long)pages,
                                    (long long)c->max_pages);
            return li_error_set(LI_ERR_KV_FULL,
                                "KV cache full: %lld pages needed, %lld free, and every cached "
                                "document is in use",
                                (long long)pages, (long long)li_kv_pool_n_free(c->pool));
        }
        LI_ASSERT(v->pins == 0 && v->ready);
        if (c->policy->on_evict) c->policy->on_evict(c, v);
        c->stats.evictions++;
        remove_copy(c, v);
    }
    return LI_OK;
}

static void note_delta(li_doc_copy *d, int64_t delta) {
    for (int i = 0; i < d->n_deltas_seen; i++)
        if (d->deltas_seen[i] == delta) return;
    if (d->n_deltas_seen >= LI_DOC_MAX_DELTAS_TRACKED) return;
    int64_t *p = realloc(d->deltas_seen, (size_t)(d->n_deltas_seen + 1) * sizeof *p);
    if (!p) return;  // statistics only: losing one Δ is harmless
    d->deltas_seen = p;
    d->deltas_seen[d->n_deltas_seen++] = delta;
}

static void pin(li_doc_cache *c, li_doc_copy *d, int64_t delta) {
    d->pins++;
    d->last_use = ++c->clock;
    li_key_table_touch(&c->copies, &d->link);
    note_delta(d, delta);
    d->uses++;
    if (c->policy->on_pin) c->policy->on_pin(c, d);
}

li_status li_doc_cache_acquire(li_doc_cache *c, const li_doc_key *key, int n_tokens,
                               bool position_agnostic, int64_t delta, li_doc_copy **out,
                               li_doc_copy **source, li_doc_lookup_result *result) {
    *out = NULL;
    if (source) *source = NULL;
    if (n_tokens <= 0)
        return li_error_set(LI_ERR_INVALID_ARG, "empty document (%d tokens)", n_tokens);
    if (delta < 0 || delta > LI_PAGE_MAX_DELTA)
        return li_error_set(LI_ERR_LIMIT, "document offset %lld outside [0, %lld]",
                            (long long)delta, (long long)LI_PAGE_MAX_DELTA);
    c->stats.lookups++;
    li_doc_copy *usable = NULL, *other = NULL;
    for (li_key_link *e = li_key_table_find(&c->copies, key); e; e = li_key_table_find_next(e)) {
        li_doc_copy *d = copy_of(e);
        if (position_agnostic || d->delta == delta) {
            if (!usable || (d->ready && !usable->ready)) usable = d;
        } else if (d->ready && (!other || d->last_use > other->last_use)) {
            other = d;  // the most recently used copy at another Δ is the source
        }
    }
    if (usable) {
        pin(c, usable, delta);
        c->stats.hits++;
        c->stats.hit_tokens += n_tokens;
        *out = usable;
        *result = LI_DOC_HIT;
        return LI_OK;
    }
    // A new copy. Pin the source first so eviction cannot take it.
    if (other && source) pin(c, other, delta);
    int P = c->pool->storage.page_size;
    int n_pages = (n_tokens + P - 1) / P;
    li_status rc = evict_for(c, n_pages, true);
    if (rc == LI_ERR_KV_FULL && other && source) {
        // No room for a new copy while the source is held: give the source up (it may now be
        // evicted like any unpinned copy) and recompute instead — a miss.
        other->pins--;
        other = NULL;
        li_error_clear();
        rc = evict_for(c, n_pages, true);
    }
    li_doc_copy *d = NULL;
    if (rc == LI_OK) {
        d = calloc(1, sizeof *d);
        if (d) d->pages = malloc((size_t)n_pages * sizeof *d->pages);
        if (!d || !d->pages) rc = li_error_set(LI_ERR_OOM, "out of memory for a document entry");
    }
    if (rc == LI_OK) {
        d->key = *key;
        rc = li_key_table_insert(&c->copies, &d->link, &d->key);  // the newest: pinned below
    }
    if (rc != LI_OK) {
        if (d) free(d->pages);
        free(d);
        if (other && source) other->pins--;
        return rc;
    }
    for (int i = 0; i < n_pages; i++) {
        li_status arc = li_kv_page_alloc(c->pool, &d->pages[i]);
        LI_ASSERT(arc == LI_OK);  // evict_for made room
    }
    d->n_tokens = n_tokens;
    d->delta = position_agnostic ? 0 : delta;
    d->n_pages = n_pages;
    c->pages_held += n_pages;
    pin(c, d, delta);
    if (other && source) {
        *source = other;
        c->stats.hits++;
        c->stats.hit_tokens += n_tokens;
        c->stats.copies_made++;
        *result = LI_DOC_HIT_OTHER_DELTA;
    } else {
        c->stats.misses++;
        c->stats.miss_tokens += n_tokens;
        *result = LI_DOC_MISS;
    }
    *out = d;
    return LI_OK;
}

void li_doc_cache_mark_ready(li_doc_cache *c, li_doc_copy *d) {
    (void)c;
    d->ready = true;
}

void li_doc_cache_release(li_doc_cache *c, li_doc_copy *d) {
    LI_ASSERT(d->pins > 0);
    d->pins--;
    if (d->pins == 0 && !d->ready) remove_copy(c, d);
}

li_status li_doc_cache_make_room(li_doc_cache *c, int64_t n_pages) {
    return evict_for(c, n_pages, false);
}

void li_doc_cache_get_stats(const li_doc_cache *c, li_doc_cache_stats *out) {
    *out = c->stats;
    out->resident_copies = (int64_t)c->copies.count;
    out->resident_pages = c->pages_held;
    size_t page_bytes = c->pool->page_bytes;
    out->resident_bytes = (int64_t)(c->pages_held * (int64_t)page_bytes);
    // distinct documents: the copies the table finds first for their key
    int64_t docs = 0, baseline_pages = 0;
    for (li_key_link *e = li_key_table_oldest(&c->copies); e; e = e->newer) {
        const li_doc_copy *d = copy_of(e);
        docs += li_key_table_find(&c->copies, &d->key) == e;
        baseline_pages += (int64_t)d->n_pages * (d->n_deltas_seen ? d->n_deltas_seen : 1);
    }
    out->resident_docs = docs;
    out->copy_baseline_bytes = baseline_pages * (int64_t)page_bytes;
}

int li_doc_cache_n_copies(const li_doc_cache *c, const li_doc_key *key) {
    int n = 0;
    for (li_key_link *e = li_key_table_find(&c->copies, key); e; e = li_key_table_find_next(e))
        n++;
    return n;
}
