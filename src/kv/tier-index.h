// tier-index.h — the index of one storage tier (host RAM, disk, Redis): which documents it holds,
// their bytes against the tier's byte budget, and which one to evict next. It stores no data and
// moves nothing; the tier manager keeps one per tier next to the store (blob-store.h).
//
// Policies:
//   LRU   the least recently put or touched entry first.
//   GDSF  GreedyDual-Size-Frequency (Cherkasova 1998): each entry has a priority
//           H = L + freq × cost / bytes
//         recomputed on put (freq 1) and on every touch (freq++); the victim is the lowest H
//         (ties: least recent). L, the aging clock, starts at 0 and becomes the H of each victim
//         evicted, so entries not touched for long fall behind newly inserted ones. cost is the
//         caller's recompute cost (e.g. prefill FLOPs); only its ratio to bytes matters.
// Both keep a binary heap, so put/touch/remove/evict are O(log n) and pick_victim O(1) (plus
// the pinned entries it must step over).
//
// Not thread-safe: one thread at a time (the tier manager's lock).
// Tested by tests/test-tier-index.c.
#ifndef LI_TIER_INDEX_H
#define LI_TIER_INDEX_H

#include "doc-cache.h"

typedef enum { LI_TIER_LRU, LI_TIER_GDSF } li_tier_policy;

// Parses "lru" / "gdsf" (errors name the value); li_tier_policy_name gives the inverse.
li_status li_tier_policy_parse(const char *s, li_tier_policy *out);
const char *li_tier_policy_name(li_tier_policy p);

typedef struct {
    li_doc_key key;
    int64_t bytes;
    double cost;        // recompute cost given at put
    int64_t freq;       // 1 at put, +1 per touch
    double priority;    // GDSF: H; LRU: the use clock
    uint64_t last_use;  // index clock at the last put/touch
    int pins;           // pinned entries are never victims (being read or written)
} li_tier_entry;

typedef struct li_tier_index li_tier_index;

// budget_bytes: the tier's capacity (> 0).
li_status li_tier_index_init(li_tier_index **out, li_tier_policy policy, int64_t budget_bytes);
void li_tier_index_free(li_tier_index *t);  // NULL ok

// Adds a new entry (freq 1). A key already present is replaced (bytes and cost updated, freq
// kept and incremented as a touch). The budget is not enforced here: the caller evicts first
// (li_tier_index_need_room) so it can move the victims down a tier.
li_status li_tier_index_put(li_tier_index *t, const li_doc_key *key, int64_t bytes, double cost);
bool li_tier_index_touch(li_tier_index *t, const li_doc_key *key);  // a hit; false if absent
bool li_tier_index_contains(const li_tier_index *t, const li_doc_key *key);
const li_tier_entry *li_tier_index_get(const li_tier_index *t, const li_doc_key *key);  // or NULL
bool li_tier_index_remove(li_tier_index *t, const li_doc_key *key);  // not an eviction: L stays
void li_tier_index_pin(li_tier_index *t, const li_doc_key *key);     // key must be present
void li_tier_index_unpin(li_tier_index *t, const li_doc_key *key);

// The next victim (lowest H / least recent, unpinned) without removing it; NULL if none.
// Valid until the next call that changes the index.
const li_tier_entry *li_tier_index_pick_victim(li_tier_index *t);
// Removes the next victim, copying it to *out; GDSF sets L to its H. false if none.
bool li_tier_index_evict(li_tier_index *t, li_tier_entry *out);
// True when `bytes` more would not fit the budget now (the caller then evicts).
bool li_tier_index_need_room(const li_tier_index *t, int64_t bytes);

int64_t li_tier_index_bytes(const li_tier_index *t);   // sum of entries' bytes
int64_t li_tier_index_budget(const li_tier_index *t);
int64_t li_tier_index_count(const li_tier_index *t);
double li_tier_index_clock(const li_tier_index *t);    // GDSF's L (LRU: 0)
// Every entry, in no particular order; fn must not change the index.
void li_tier_index_foreach(const li_tier_index *t, void (*fn)(void *ctx, const li_tier_entry *e),
                           void *ctx);

#endif
