// doc-cache.h — the document KV cache of LazyAttention (ARCHITECTURE.md §3.2) and of its
// position-aware baseline (`copy`): documents keyed by a cryptographic content key, a copy owning
// whole pages of the KV pool, pinned while requests use it, evicted as a whole under the pool's
// budget by a pluggable policy (LRU first).
//
// A copy is one physical set of pages holding a document's K/V:
//   lazy: one copy per document, K rotated at local positions 0..n-1 (delta = 0); every request
//         applies its own Δ at attention time.
//   copy: one copy per (document, Δ) — K rotated at global positions Δ..Δ+n-1; a hit at another
//         Δ makes a new copy (page copy + re-rotation) that also occupies the budget.
// The cache never touches K/V contents itself: the engine fills the pages of a new copy (prefill
// or copy + re-rotate) and then marks it ready. It works on a "virtual" pool (no KV memory) the
// same way, which is how `lazyinfer sim` replays traces through this exact code.
// Tested by tests/test-doc-cache.c; used by src/engine/engine-ar.c and tools/cmd-sim.c.
#ifndef LI_DOC_CACHE_H
#define LI_DOC_CACHE_H

#include "key-table.h"
#include "kv-pool.h"

// key = SHA-256(model id ‖ tokenizer id ‖ token ids as little-endian int32). The ids are free
// strings naming the model and tokenizer (e.g. a file path + size, or the synth spec).
void li_doc_key_compute(li_doc_key *key, const char *model_id, const char *tokenizer_id,
                        const int32_t *tokens, int n_tokens);
// key = SHA-256(parent ‖ token ids): one link of a hash chain (prefix caching).
void li_doc_key_chain(li_doc_key *key, const li_doc_key *parent, const int32_t *tokens, int n);
void li_doc_key_hex(const li_doc_key *key, char out[65]);

typedef struct li_doc_copy li_doc_copy;
struct li_doc_copy {
    li_doc_key key;        // content key
    int32_t n_tokens;
    int64_t delta;         // positions its K is rotated for start at delta (lazy: 0)
    int n_pages;
    int64_t *pages;        // (n_pages) physical pages, in order; the cache holds one ref each
    int pins;              // requests currently using this copy
    bool ready;            // K/V written (a pinned, not-ready copy is being prefilled)
    uint64_t last_use;     // cache clock at the last pin
    int n_deltas_seen;     // distinct Δs requests used this copy at (lazy: for the copy
    int64_t *deltas_seen;  // baseline's bytes; capped at LI_DOC_MAX_DELTAS_TRACKED)
    int64_t uses;          // pins over its life (GDSF's frequency)
    double priority;       // GDSF's H, set at each pin (other policies: 0)
    li_key_link link;      // private to doc-cache.c: by key and by recency (key-table.h)
};
#define LI_DOC_MAX_DELTAS_TRACKED 64

typedef struct li_doc_cache li_doc_cache;

// An eviction policy: picks one victim among the unpinned ready copies, walking the cache with
// li_doc_cache_first/next (least recently used first) and reading each copy's fields.
typedef struct {
    const char *name;
    // Returns the copy to evict, or NULL if none may be evicted.
    li_doc_copy *(*pick_victim)(li_doc_cache *c);
    void (*on_pin)(li_doc_cache *c, li_doc_copy *d);    // after every pin (NULL: nothing)
    void (*on_evict)(li_doc_cache *c, li_doc_copy *d);  // before the victim goes (NULL: nothing)
} li_evict_policy;
extern const li_evict_policy li_evict_lru;  // least recently pinned first
extern const li_evict_policy li_evict_largest;  // most pages first (ties: least recent)
// GreedyDual-Size-Frequency: H = L + uses × cost / bytes, set at each pin; the victim is the
// lowest H (ties: least recent), and L (the aging clock) becomes the victim's H. cost is the
// copy's recompute cost (li_doc_cache_set_cost: prefill FLOPs), bytes its pages' bytes, so a
// document that is often used, dear to recompute or small stays. O(copies) per eviction.
extern const li_evict_policy li_evict_gdsf;
// "lru", "largest", "gdsf" → the policy; anything else LI_ERR_INVALID_ARG naming it.
li_status li_evict_policy_parse(const char *name, const li_evict_policy **out);

typedef struct {
    int64_t lookups;          // documents looked up (one per document per request)
    int64_t hits, misses;     // document hits (any usable copy) / misses
    int64_t hit_tokens, miss_tokens;
    int64_t copies_made;      // copy mode: hits at another Δ served by copy + re-rotation
    int64_t evictions;        // copies evicted
    int64_t resident_docs;    // distinct documents with at least one copy
    int64_t resident_copies;  // physical copies
    int64_t resident_pages;
    int64_t resident_bytes;
    int64_t copy_baseline_bytes;  // bytes a position-aware cache would hold for the same
                                  // (document, Δ) pairs seen while resident (lazy mode)
} li_doc_cache_stats;

// `pool` is borrowed for the cache's lifetime; max_pages caps the pages documents may hold
// (0: the whole pool). `policy` NULL = LRU.
li_status li_doc_cache_init(li_doc_cache **out, li_kv_pool *pool, const li_evict_policy *policy,
                            int64_t max_pages);
void li_doc_cache_free(li_doc_cache *c);  // drops every copy's pages; no copy may be pinned
// The recompute cost of a document of n tokens, for cost-aware policies (GDSF):
//   cost(n) = flops_per_token × n + flops_per_pair × n (n + 1) / 2
// — the linear layers' FLOPs per token (≈ 2 × parameters) plus causal attention's per (query,
// key) pair (4 × layers × heads × head dim: QKᵀ and AV). Default 1 and 0: cost ∝ tokens.
void li_doc_cache_set_cost(li_doc_cache *c, double flops_per_token, double flops_per_pair);
// Changes the policy (NULL: LRU); copies already resident start with priority 0 under GDSF.
void li_doc_cache_set_policy(li_doc_cache *c, const li_evict_policy *policy);
double li_doc_cache_cost(const li_doc_cache *c, int n_tokens);

typedef enum {
    LI_DOC_MISS,         // no copy: a new one was made (pinned, not ready): prefill it
    LI_DOC_HIT,          // a ready or in-flight copy at a usable Δ: pinned; wait for ready
    LI_DOC_HIT_OTHER_DELTA,  // copy mode: a copy exists only at other Δs; a new copy was made
                             // (pinned, not ready) and *source is set (pinned): copy + re-rotate
} li_doc_lookup_result;

// Looks up a document for one request and pins the copy returned in *out.
//   position_agnostic (lazy): any copy serves; a new copy gets delta 0.
//   otherwise (copy): only a copy with delta == `delta` serves; a new one gets `delta`.
// A new copy's pages are allocated here, evicting unpinned copies as the policy chooses;
// LI_ERR_KV_FULL (nothing left to evict) leaves nothing pinned.
li_status li_doc_cache_acquire(li_doc_cache *c, const li_doc_key *key, int n_tokens,
                               bool position_agnostic, int64_t delta, li_doc_copy **out,
                               li_doc_copy **source, li_doc_lookup_result *result);
void li_doc_cache_mark_ready(li_doc_cache *c, li_doc_copy *copy);
// Drops one pin. A copy that never became ready (its prefill failed) is removed.
void li_doc_cache_release(li_doc_cache *c, li_doc_copy *copy);
// Evicts unpinned copies until the pool has n_pages free pages (for a request's private pages).
li_status li_doc_cache_make_room(li_doc_cache *c, int64_t n_pages);

void li_doc_cache_get_stats(const li_doc_cache *c, li_doc_cache_stats *out);
// Copies resident for one document (lazy mode keeps exactly one; tests check it).
int li_doc_cache_n_copies(const li_doc_cache *c, const li_doc_key *key);
// Iteration for policies: every resident copy (pinned or not), least recently used first.
li_doc_copy *li_doc_cache_first(li_doc_cache *c);
li_doc_copy *li_doc_cache_next(li_doc_cache *c, li_doc_copy *copy);

#endif
