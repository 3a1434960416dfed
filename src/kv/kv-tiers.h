// kv-tiers.h — the tiers below the document cache (issue 21; ARCHITECTURE.md §3.7): a document's
// pages leave the backend's pool (L0) for host RAM (L1), a local directory (L2) and a shared
// Redis (L3), and come back instead of being prefilled again.
//
//   L1 host RAM    --host-cache SIZE: serialised copies in (pinned, on CUDA) host memory, filled
//                  by an async D2H gather when a copy's prefill completes (write-through), and
//                  copied back by an async H2D scatter into fresh pool pages on a hit.
//   L2 disk        --disk-cache DIR --disk-budget SIZE: blob-store.h's directory store.
//   L3 Redis       --kv-remote redis://HOST:PORT[/DB] (--kv-remote-password-file F): shared by
//                  every replica; bounded by Redis itself.
// Every tier is written through: a completed copy goes to L1 at once and to L2 / L3 through a
// worker thread, so an L0 eviction costs nothing and another replica finds the copy in L3 as soon
// as it is written. A miss in L0 looks L1 up at once; on an L1 miss the worker looks in L2 then L3
// (a promotion), while other requests run; the scheduler treats it like a pending prefill and a
// promotion that finds nothing (or a damaged entry) falls back to prefilling. L1 and L2 evict
// through tier-index.h (LRU or GDSF with the pool's recompute cost).
//
// An entry's key is SHA-256 of (the document cache's key — model, tokenizer, token ids —, the
// format version, the KV dtype, the page layout P, L, Hkv, Dh, and the copy's Δ): models and
// layouts never mix, and copy mode keeps one entry per (document, Δ) like its L0 copies. Value:
// a header (below) then the copy's pages as the pool stores them, (n_pages, L, 2, Hkv, P, Dh).
// Every header field is checked on load; a mismatch drops the entry (a miss), never serves it.
//
// Not here: chunking, checksums and Redis connections (blob-store.h), eviction order
// (tier-index.h), the scheduling of promotions (src/engine/scheduler.c).
// Threads: every li_kv_tiers_* call below comes from the engine thread; the two workers (a
// writer and a loader, kv-tiers.c) are private.
// Tested by tests/test-kv-tiers.c (round trips per tier with exact logits, faults) and
// tests/test_kv_tiers.py (two replicas on one Redis).
#ifndef LI_KV_TIERS_H
#define LI_KV_TIERS_H

#include "doc-cache.h"
#include "tier-index.h"

#define LI_KV_TIERS_FORMAT 1  // bump when the header or the page layout changes

typedef enum { LI_TIER_HOST, LI_TIER_DISK, LI_TIER_REMOTE, LI_N_TIERS } li_tier;
const char *li_tier_name(li_tier t);  // "host", "disk", "remote"

typedef struct {
    int64_t host_bytes;                // L1 budget; 0: no L1
    const char *disk_dir;              // L2 directory; NULL: no L2
    int64_t disk_bytes;                // L2 budget (> 0 with disk_dir)
    const char *remote_url;            // L3 redis://HOST:PORT[/DB]; NULL: no L3
    const char *remote_password_file;  // L3 AUTH password (first line); NULL: none
    li_tier_policy policy;             // L1 and L2 eviction
    // GDSF's recompute cost of a document of n tokens, as the pool's (li_doc_cache_set_cost):
    // per_token × n + per_pair × n (n + 1) / 2; both 0: cost ∝ tokens
    double cost_per_token, cost_per_pair;
} li_kv_tiers_config;

typedef struct li_kv_tiers li_kv_tiers;
typedef struct li_kv_promotion li_kv_promotion;  // one pending load from L2 / L3

// Opens the configured tiers over `pool` (borrowed; its pages are what moves) and starts the
// worker. An unreachable or refusing Redis is a warning and no L3, not an error; a disk
// directory that cannot be created is an error naming it. *out NULL when no tier is configured.
li_status li_kv_tiers_init(li_kv_tiers **out, const li_kv_tiers_config *cfg, li_kv_pool *pool,
                           li_backend *be);
// Writes what is queued (li_kv_tiers_wait), stops the worker, frees everything. NULL ok.
void li_kv_tiers_free(li_kv_tiers *t);

// The copy's K/V were just written (prefill or copy + re-rotation queued on the backend): gather
// its pages into a host blob (async D2H); li_kv_tiers_step_done takes it on to L1, L2 and L3.
li_status li_kv_tiers_demote(li_kv_tiers *t, const li_doc_copy *copy);

typedef enum {
    LI_TIERS_ABSENT,   // no tier holds it (or L1 is the only tier and misses): prefill
    LI_TIERS_LOADED,   // L1 hit: the copy's pages are being written (async H2D): mark it ready
    LI_TIERS_PENDING,  // the worker looks in L2 / L3: poll *promo each step
} li_kv_tiers_result;

// A new copy (pinned, not ready, pages allocated) missed in L0: look for it below.
li_status li_kv_tiers_promote(li_kv_tiers *t, const li_doc_copy *copy, li_kv_promotion **promo,
                              li_kv_tiers_result *result);
// A pending promotion: LI_TIERS_PENDING (not yet), LI_TIERS_LOADED (found, header valid, pages
// being written: mark the copy ready; *promo is freed), LI_TIERS_ABSENT (not found, damaged or
// stale: prefill; *promo is freed).
li_status li_kv_tiers_poll(li_kv_tiers *t, li_kv_promotion **promo, li_kv_tiers_result *result);
// The copy waiting for *promo is gone (its requests failed or were cancelled). NULL ok.
void li_kv_tiers_cancel(li_kv_tiers *t, li_kv_promotion *promo);

// Call after a backend sync that follows every transfer queued since the last call: gathered
// blobs go into L1 and to the worker for L2 / L3; host buffers of finished uploads are released.
void li_kv_tiers_step_done(li_kv_tiers *t);
// Waits until the worker has written every blob handed to it (tests, benchmarks, shutdown).
void li_kv_tiers_wait(li_kv_tiers *t);

// Per-tier statistics (the public li_cache_tier_stats; lazyinfer.h).
void li_kv_tiers_get_stats(li_kv_tiers *t, li_cache_tier_stats out[LI_N_TIERS]);

#endif
