// kv-tiers.c — the tier manager (kv-tiers.h): L1 host blobs in a key table with a tier-index,
// L2 / L3 through blob stores driven by two worker threads (a writer and a loader, each with its
// own store handles, so that a promotion never waits behind a write of another document),
// write-through demotion, promotions.
//
// Ownership: a blob (header + pages) is reference-counted under t->mu, since the engine (L1,
// uploads in flight) and the worker (writes) both hold it. L1's blobs live in one host arena
// (host-arena.h: the whole --host-cache budget, pinned on CUDA, taken once at start), which only
// the engine thread touches: the writer queues the arena blobs whose last reference it dropped.
// Only the workers touch the blob stores, each its own handles; the L2 index is shared under
// t->mu.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include "blob-store.h"
#include "host-arena.h"
#include "kv-tiers.h"

// ---- the entry format ---------------------------------------------------------------------------

#define MAGIC "LIKVTIER"
// The header is padded to 128 bytes so that the pages that follow stay 64-byte aligned.
#define HEADER_BYTES 128
typedef struct {
    char magic[8];
    uint32_t format;   // LI_KV_TIERS_FORMAT
    uint32_t dtype;    // li_dtype of the pool
    uint8_t key[32];   // the entry's tier key
    int32_t n_tokens, n_pages;
    int64_t delta;
    int32_t page_size, n_layer, n_head_kv, head_dim;
    uint64_t page_bytes;
} entry_header;
_Static_assert(sizeof(entry_header) <= HEADER_BYTES, "entry header outgrew its padding");

typedef struct blob blob;
struct blob {
    int refs;        // under t->mu
    bool in_arena;   // data is an extent of t->arena: released on the engine thread
    li_doc_key key;  // tier key
    double cost;     // recompute cost for GDSF (cost_of its tokens)
    size_t n;        // HEADER_BYTES + n_pages × page_bytes
    uint8_t *data;
    blob *next;      // in whichever engine-side list holds it
};

typedef struct {
    blob *b;           // one reference
    li_key_link link;  // by b->key (eviction order is l1_index's)
} l1_entry;

typedef struct job job;
struct job {
    blob *b;          // one reference
    unsigned tiers;   // bit (1 << li_tier) per lower tier to write
    job *next;
};

struct li_kv_promotion {
    li_doc_key key;
    const li_doc_copy *copy;  // borrowed: pinned by the work item until poll or cancel; the
                              // engine's only (a cancelled copy may be gone while the worker
    int n_tokens, n_pages;    // loads): the worker reads these copies of its fields
    int64_t delta;
    double t0;
    // under t->mu
    bool done, cancelled;
    li_tier from;
    uint8_t *data;  // malloc'd value found (NULL: absent)
    size_t n;
    li_kv_promotion *next;  // load queue
};

struct li_kv_tiers {
    li_kv_pool *pool;  // borrowed
    li_backend *be;    // borrowed
    li_tier_policy policy;
    double cost_per_token, cost_per_pair;  // li_kv_tiers_config's
    size_t page_bytes;
    li_blob_store *disk, *remote;      // the writer's handles (NULL: tier off)
    li_blob_store *disk_r, *remote_r;  // the loader's
    pthread_t writer, loader;
    bool worker_started;
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    // under mu
    bool stop, disk_writable;
    int busy;                        // write jobs taken by the writer, not finished
    job *writes, *writes_tail;
    li_kv_promotion *loads, *loads_tail;
    li_tier_index *l1_index, *l2_index;
    li_key_table l1;                 // L1's entries, by tier key
    blob *free_arena;                // arena blobs whose last reference the worker dropped
    li_cache_tier_stats stats[LI_N_TIERS];
    // engine thread only
    blob *gathered;  // demoted blobs whose D2H is queued
    blob *uploads;   // blobs whose H2D is queued
    li_host_arena *arena;  // L1's memory: every L1 blob is an extent of it
    void *arena_mem;       // host_bytes, from li_be_host_alloc (pinned) or mmap (arena_mapped)
    size_t arena_bytes;
    bool arena_mapped;
};

// GDSF's recompute cost of n tokens (li_doc_cache_cost's formula).
static double cost_of(const li_kv_tiers *t, double n) {
    return t->cost_per_token * n + t->cost_per_pair * n * (n + 1) / 2;
}

const char *li_tier_name(li_tier t) {
    static const char *names[] = {"host", "disk", "remote"};
    return (unsigned)t < LI_N_TIERS ? names[t] : "?";
}

// key = SHA-256(document key ‖ format, dtype, P, L, Hkv, Dh, Δ), as one more link of the
// document cache's hash chain (li_doc_key_chain hashes the parent and 32-bit words).
static void tier_key(const li_kv_tiers *t, const li_doc_key *doc, int64_t delta, li_doc_key *out) {
    const li_kv_storage *s = &t->pool->storage;
    int32_t w[8] = {LI_KV_TIERS_FORMAT, (int32_t)s->dtype, s->page_size, s->n_layer, s->n_head_kv,
                    s->head_dim, (int32_t)(delta & 0xffffffff), (int32_t)(delta >> 32)};
    li_doc_key_chain(out, doc, w, 8);
}

static void header_fill(const li_kv_tiers *t, entry_header *h, const li_doc_key *key,
                        int n_tokens, int n_pages, int64_t delta) {
    const li_kv_storage *s = &t->pool->storage;
    // (the header has no padding: every byte written and compared is a field)
    *h = (entry_header){.format = LI_KV_TIERS_FORMAT, .dtype = (uint32_t)s->dtype,
                        .n_tokens = n_tokens, .n_pages = n_pages, .delta = delta,
                        .page_size = s->page_size, .n_layer = s->n_layer,
                        .n_head_kv = s->n_head_kv, .head_dim = s->head_dim,
                        .page_bytes = t->page_bytes};
    memcpy(h->magic, MAGIC, 8);
    memcpy(h->key, key->b, 32);
}

// True when data (n) is the entry p needs: every header field as this pool and p's copy would
// write it, and the size that follows from them.
static bool header_valid(const li_kv_tiers *t, const li_kv_promotion *p, const uint8_t *data,
                         size_t n) {
    entry_header want, got;
    if (n < HEADER_BYTES) return false;
    header_fill(t, &want, &p->key, p->n_tokens, p->n_pages, p->delta);
    memcpy(&got, data, sizeof got);
    return !memcmp(&want, &got, sizeof want) &&
           n == HEADER_BYTES + (size_t)p->n_pages * t->page_bytes;
}

// ---- blobs and L1 (callers hold mu unless noted) --------------------------------------------------

static void l1_drop(li_kv_tiers *t, const li_doc_key *k);

// n bytes of the arena, evicting L1's entries by the policy until an extent fits; NULL when
// none does (what is left is held by uploads or writes in flight, or fragmented). Engine thread.
static void *arena_take(li_kv_tiers *t, size_t n) {
    void *p = li_host_arena_alloc(t->arena, n);
    li_tier_entry v;
    pthread_mutex_lock(&t->mu);
    while (!p && li_tier_index_evict(t->l1_index, &v)) {
        l1_drop(t, &v.key);
        t->stats[LI_TIER_HOST].evictions++;
        p = li_host_arena_alloc(t->arena, n);
    }
    pthread_mutex_unlock(&t->mu);
    return p;
}

// A blob of n bytes: an arena extent when want_arena and one is free (engine thread), plain
// host memory otherwise (then it never enters L1: it only travels to the tiers below).
static blob *blob_new(li_kv_tiers *t, const li_doc_key *key, size_t n, bool want_arena,
                      double cost) {
    blob *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->data = want_arena && t->arena ? arena_take(t, n) : NULL;
    b->in_arena = b->data != NULL;
    if (!b->data) b->data = malloc(n);
    if (!b->data) {
        free(b);
        return NULL;
    }
    b->refs = 1;
    b->key = *key;
    b->n = n;
    b->cost = cost;
    return b;
}

static void blob_destroy(li_kv_tiers *t, blob *b) {
    if (b->in_arena) li_host_arena_release(t->arena, b->data, b->n);
    else free(b->data);
    free(b);
}

// Drops one reference. on_engine: the caller is the engine thread (may free pinned memory).
static void blob_unref(li_kv_tiers *t, blob *b, bool on_engine) {
    if (--b->refs > 0) return;
    if (b->in_arena && !on_engine) {
        b->next = t->free_arena;
        t->free_arena = b;
        return;
    }
    blob_destroy(t, b);
}

static l1_entry *l1_find(li_kv_tiers *t, const li_doc_key *k) {
    return LI_KEY_ENTRY(li_key_table_find(&t->l1, k), l1_entry, link);
}

// Unlinks e and drops its reference.
static void l1_unlink(li_kv_tiers *t, l1_entry *e) {
    li_key_table_remove(&t->l1, &e->link);
    blob_unref(t, e->b, true);
    free(e);
}

static void l1_drop(li_kv_tiers *t, const li_doc_key *k) {
    l1_entry *e = l1_find(t, k);
    if (!e) return;
    t->stats[LI_TIER_HOST].resident_bytes -= (int64_t)e->b->n;
    t->stats[LI_TIER_HOST].resident_entries--;
    l1_unlink(t, e);
}

// Puts b into L1 (one more reference), evicting by the policy. Engine thread.
static void l1_insert(li_kv_tiers *t, blob *b) {
    li_cache_tier_stats *st = &t->stats[LI_TIER_HOST];
    if (!t->l1_index || !b->in_arena || (int64_t)b->n > li_tier_index_budget(t->l1_index)) return;
    if (li_tier_index_touch(t->l1_index, &b->key)) return;  // already there
    li_tier_entry v;
    while (li_tier_index_need_room(t->l1_index, (int64_t)b->n) && li_tier_index_evict(t->l1_index, &v)) {
        l1_drop(t, &v.key);
        st->evictions++;
    }
    if (li_tier_index_need_room(t->l1_index, (int64_t)b->n)) return;  // every entry is pinned
    l1_entry *e = calloc(1, sizeof *e);
    li_status rc = e ? li_key_table_insert(&t->l1, &e->link, &b->key) : LI_ERR_OOM;
    if (rc == LI_OK && li_tier_index_put(t->l1_index, &b->key, (int64_t)b->n, b->cost) != LI_OK) {
        li_key_table_remove(&t->l1, &e->link);
        rc = LI_ERR_OOM;
    }
    if (rc != LI_OK) {
        free(e);  // out of memory: the host tier just does not keep this one
        li_error_clear();
        return;
    }
    e->b = b;
    b->refs++;
    st->resident_bytes += (int64_t)b->n;
    st->resident_entries++;
    st->bytes_out += (int64_t)b->n;
}

// ---- the worker -------------------------------------------------------------------------------

// Writes b to L2 within its budget. Called without mu.
static void write_disk(li_kv_tiers *t, blob *b) {
    li_cache_tier_stats *st = &t->stats[LI_TIER_DISK];
    li_tier_entry victims[64];
    int n_victims = 0;
    pthread_mutex_lock(&t->mu);
    bool go = t->disk_writable && (int64_t)b->n <= li_tier_index_budget(t->l2_index) &&
              !li_tier_index_touch(t->l2_index, &b->key);
    while (go && li_tier_index_need_room(t->l2_index, (int64_t)b->n)) {
        if (n_victims == 64 || !li_tier_index_evict(t->l2_index, &victims[n_victims])) {
            go = false;  // cannot make room now (pinned entries): skip this one
            break;
        }
        st->evictions++;
        st->resident_entries--;
        st->resident_bytes -= victims[n_victims++].bytes;
    }
    if (go && li_tier_index_put(t->l2_index, &b->key, (int64_t)b->n, b->cost) != LI_OK) go = false;
    if (go) li_tier_index_pin(t->l2_index, &b->key);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < n_victims; i++) li_blob_del(t->disk, &victims[i].key);
    if (!go) return;
    li_status rc = li_blob_put(t->disk, &b->key, b->data, b->n);
    li_blob_stats bs;
    li_blob_get_stats(t->disk, &bs);
    pthread_mutex_lock(&t->mu);
    li_tier_index_unpin(t->l2_index, &b->key);
    if (rc == LI_OK) {
        st->bytes_out += (int64_t)b->n;
        st->resident_bytes += (int64_t)b->n;
        st->resident_entries++;
    } else {
        li_tier_index_remove(t->l2_index, &b->key);
        st->errors++;
        if (!bs.writable && t->disk_writable) {
            t->disk_writable = false;
            LI_WARN("disk cache %s: %s; the disk tier stops writing (it still serves what it "
                    "holds)", li_blob_name(t->disk), li_error_msg());
        }
    }
    pthread_mutex_unlock(&t->mu);
}

static void write_remote(li_kv_tiers *t, blob *b) {
    li_status rc = li_blob_put(t->remote, &b->key, b->data, b->n);
    pthread_mutex_lock(&t->mu);
    li_cache_tier_stats *st = &t->stats[LI_TIER_REMOTE];
    if (rc == LI_OK) {
        st->bytes_out += (int64_t)b->n;
        st->resident_bytes += (int64_t)b->n;
        st->resident_entries++;
    } else {
        st->errors++;
    }
    pthread_mutex_unlock(&t->mu);
}

// Looks p up in L2 then L3; the first valid entry wins. Damaged or stale ones are deleted.
// Called without mu.
static void load(li_kv_tiers *t, li_kv_promotion *p) {
    li_blob_store *stores[LI_N_TIERS] = {NULL, t->disk_r, t->remote_r};
    for (int tier = LI_TIER_DISK; tier < LI_N_TIERS; tier++) {
        li_blob_store *s = stores[tier];
        if (!s) continue;
        li_cache_tier_stats *st = &t->stats[tier];
        pthread_mutex_lock(&t->mu);
        bool indexed = tier != LI_TIER_DISK || li_tier_index_contains(t->l2_index, &p->key);
        if (tier == LI_TIER_DISK && indexed) li_tier_index_pin(t->l2_index, &p->key);
        if (!indexed) st->misses++;
        pthread_mutex_unlock(&t->mu);
        if (!indexed) continue;
        void *data = NULL;
        size_t n = 0;
        li_status rc = li_blob_get(s, &p->key, &data, &n);
        bool ok = rc == LI_OK && header_valid(t, p, data, n);
        if (rc == LI_OK && !ok) li_blob_del(s, &p->key);  // stale or mismatched: never served
        pthread_mutex_lock(&t->mu);
        bool damaged = !ok && rc == LI_OK;  // Redis returned it, or the disk: stale, mismatched
        if (tier == LI_TIER_DISK) {
            li_tier_index_unpin(t->l2_index, &p->key);
            const li_tier_entry *e = li_tier_index_get(t->l2_index, &p->key);
            if (ok) {
                li_tier_index_touch(t->l2_index, &p->key);
            } else if (e && e->pins == 0) {
                // indexed, not being written (the writer pins it until its put ends), and
                // absent or corrupt on disk (the store dropped it): out of the index
                damaged = true;
                st->resident_bytes -= e->bytes;
                st->resident_entries--;
                li_tier_index_remove(t->l2_index, &p->key);
            }
        }
        if (damaged) st->dropped++;
        if (ok) {
            st->hits++;
            p->from = (li_tier)tier;
            p->data = data;
            p->n = n;
        } else {
            st->misses++;
            free(data);
        }
        pthread_mutex_unlock(&t->mu);
        if (ok) return;
    }
}

// One worker's loop, under mu: `next` takes one item off the worker's queue and handles it
// (true) or finds the queue empty (false); with nothing left the worker exits when asked to stop
// and sleeps otherwise. signal_idle (the writer): wakes li_kv_tiers_wait before each sleep and
// at exit.
static void worker_loop(li_kv_tiers *t, bool (*next)(li_kv_tiers *t), bool signal_idle) {
    pthread_mutex_lock(&t->mu);
    for (;;) {
        if (next(t)) continue;
        if (t->stop) break;
        if (signal_idle) pthread_cond_broadcast(&t->idle);
        pthread_cond_wait(&t->wake, &t->mu);
    }
    if (signal_idle) pthread_cond_broadcast(&t->idle);
    pthread_mutex_unlock(&t->mu);
}

// The loader's item: the next promotion, in the order asked; a cancelled one is dropped unread.
static bool load_next(li_kv_tiers *t) {
    li_kv_promotion *p = t->loads;
    if (!p) return false;
    t->loads = p->next;
    if (!t->loads) t->loads_tail = NULL;
    if (p->cancelled) {
        free(p);
        return true;
    }
    pthread_mutex_unlock(&t->mu);
    load(t, p);
    pthread_mutex_lock(&t->mu);
    if (p->cancelled) {
        free(p->data);
        free(p);
    } else {
        p->done = true;
    }
    return true;
}

// The writer's item: the next demoted blob, to L2 and L3, in the order demoted.
static bool write_next(li_kv_tiers *t) {
    job *j = t->writes;
    if (!j) return false;
    t->writes = j->next;
    if (!t->writes) t->writes_tail = NULL;
    t->busy++;
    pthread_mutex_unlock(&t->mu);
    if (j->tiers & (1u << LI_TIER_DISK)) write_disk(t, j->b);
    if (j->tiers & (1u << LI_TIER_REMOTE)) write_remote(t, j->b);
    pthread_mutex_lock(&t->mu);
    t->busy--;
    blob_unref(t, j->b, false);
    free(j);
    if (!t->writes && !t->busy) pthread_cond_broadcast(&t->idle);
    return true;
}

static void *loader_main(void *arg) {
    worker_loop(arg, load_next, false);
    return NULL;
}

static void *writer_main(void *arg) {
    worker_loop(arg, write_next, true);
    return NULL;
}

// Stops the writer and, when it was started, the loader: each handles what is queued, then exits.
static void stop_workers(li_kv_tiers *t, bool loader_started) {
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->writer, NULL);
    if (loader_started) pthread_join(t->loader, NULL);
    t->stop = false;
}

// Queues b (one more reference) for the lower tiers in `tiers`. Caller holds mu.
static void queue_write(li_kv_tiers *t, blob *b, unsigned tiers) {
    if (!t->disk) tiers &= ~(1u << LI_TIER_DISK);
    if (!t->remote) tiers &= ~(1u << LI_TIER_REMOTE);
    if (!tiers) return;
    job *j = calloc(1, sizeof *j);
    if (!j) return;  // out of memory: this copy is not written below; serving goes on
    j->b = b;
    j->tiers = tiers;
    b->refs++;
    if (t->writes_tail) t->writes_tail->next = j;
    else t->writes = j;
    t->writes_tail = j;
    pthread_cond_broadcast(&t->wake);
}

// ---- index of a store at open ---------------------------------------------------------------

static void index_listed(void *ctx, const li_doc_key *key, int64_t bytes) {
    li_kv_tiers *t = ctx;
    // tokens from the size: pages × P (the last page may be partial; close enough)
    double cost = cost_of(t, (double)(bytes / (int64_t)t->page_bytes) * t->pool->storage.page_size);
    if (li_tier_index_put(t->l2_index, key, bytes, cost) == LI_OK) {
        t->stats[LI_TIER_DISK].resident_bytes += bytes;
        t->stats[LI_TIER_DISK].resident_entries++;
    }
}

// ---- public -------------------------------------------------------------------------------------

void li_kv_tiers_free(li_kv_tiers *t) {
    if (!t) return;
    if (t->worker_started) {
        li_kv_tiers_wait(t);
        stop_workers(t, true);
    }
    // loads the engine still owned were cancelled by their work items; the worker freed them
    for (li_kv_promotion *p = t->loads, *next; p; p = next) {
        next = p->next;
        free(p);
    }
    li_kv_tiers_step_done(t);  // gathered blobs into L1 (then dropped below), uploads released
    while (li_key_table_oldest(&t->l1))
        l1_unlink(t, LI_KEY_ENTRY(li_key_table_oldest(&t->l1), l1_entry, link));
    for (blob *b = t->free_arena, *next; b; b = next) {
        next = b->next;
        blob_destroy(t, b);
    }
    li_key_table_free(&t->l1);
    li_tier_index_free(t->l1_index);
    li_host_arena_free(t->arena);
    if (t->arena_mapped) munmap(t->arena_mem, t->arena_bytes);
    else li_be_host_free(t->be, t->arena_mem);
    li_tier_index_free(t->l2_index);
    li_blob_close(t->disk);
    li_blob_close(t->remote);
    li_blob_close(t->disk_r);
    li_blob_close(t->remote_r);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->wake);
    pthread_cond_destroy(&t->idle);
    free(t);
}

li_status li_kv_tiers_init(li_kv_tiers **out, const li_kv_tiers_config *cfg, li_kv_pool *pool,
                           li_backend *be) {
    *out = NULL;
    if (cfg->host_bytes <= 0 && !cfg->disk_dir && !cfg->remote_url) return LI_OK;
    if (cfg->host_bytes < 0)
        return li_error_set(LI_ERR_INVALID_ARG, "--host-cache: %lld bytes is negative",
                            (long long)cfg->host_bytes);
    if (cfg->disk_dir && cfg->disk_bytes <= 0)
        return li_error_set(LI_ERR_INVALID_ARG, "--disk-cache %s needs a budget: add "
                            "--disk-budget SIZE (e.g. 10G)", cfg->disk_dir);
    if (!pool->storage.data)
        return li_error_set(LI_ERR_INVALID_ARG, "KV tiers need a pool with KV memory");
    li_status rc = LI_OK;
    li_kv_tiers *t = calloc(1, sizeof *t);
    if (!t) return li_error_set(LI_ERR_OOM, "out of memory for the KV tiers");
    t->pool = pool;
    t->be = be;
    t->policy = cfg->policy;
    t->cost_per_token = cfg->cost_per_token;
    t->cost_per_pair = cfg->cost_per_pair;
    if (t->cost_per_token <= 0 && t->cost_per_pair <= 0) t->cost_per_token = 1.0;
    t->page_bytes = li_kv_storage_page_bytes(&pool->storage);
    LI_ASSERT(t->page_bytes == pool->page_bytes);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->wake, NULL);
    pthread_cond_init(&t->idle, NULL);
    if (cfg->host_bytes > 0) {
        if ((rc = li_tier_index_init(&t->l1_index, cfg->policy, cfg->host_bytes)) != LI_OK) goto fail;
        li_key_table_init(&t->l1, 256, "the host tier");
        // the whole budget at once: pinned where the backend pins (one cudaMallocHost at start,
        // ~0.1-0.2 s per GiB there), else reserved address space the kernel fills on first touch
        // (a budget below one arena unit holds no entry: no arena, L1 keeps nothing)
        t->arena_bytes = (size_t)cfg->host_bytes;
        if (t->arena_bytes < LI_HOST_ARENA_UNIT) {
            t->arena_bytes = 0;
        } else if (be->ops->host_alloc) {
            t->arena_mem = li_be_host_alloc(be, t->arena_bytes, "the host tier (--host-cache)");
        } else {
            void *m = mmap(NULL, t->arena_bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            t->arena_mem = m == MAP_FAILED ? NULL : m;
            t->arena_mapped = t->arena_mem != NULL;
            if (!t->arena_mem)
                li_error_set(LI_ERR_OOM, "mapping %zu bytes for the host tier", t->arena_bytes);
        }
        if (t->arena_bytes) {
            rc = t->arena_mem ? li_host_arena_init(&t->arena, t->arena_mem, t->arena_bytes)
                              : LI_ERR_OOM;
            if (rc != LI_OK) {
                li_error_wrap(rc, "--host-cache %lld: ", (long long)cfg->host_bytes);
                goto fail;
            }
        }
        t->stats[LI_TIER_HOST].enabled = true;
    }
    if (cfg->disk_dir) {
        if ((rc = li_blob_disk_open(&t->disk, cfg->disk_dir)) != LI_OK ||
            (rc = li_blob_disk_open(&t->disk_r, cfg->disk_dir)) != LI_OK) {
            li_error_wrap(rc, "--disk-cache: ");
            goto fail;
        }
        if ((rc = li_tier_index_init(&t->l2_index, cfg->policy, cfg->disk_bytes)) != LI_OK) goto fail;
        // what survived a restart counts against the budget; over it, the policy trims it
        if ((rc = li_blob_list(t->disk, index_listed, t)) != LI_OK) goto fail;
        li_tier_entry v;
        while (li_tier_index_bytes(t->l2_index) > cfg->disk_bytes && li_tier_index_evict(t->l2_index, &v)) {
            li_blob_del(t->disk, &v.key);
            t->stats[LI_TIER_DISK].resident_bytes -= v.bytes;
            t->stats[LI_TIER_DISK].resident_entries--;
        }
        t->disk_writable = true;
        t->stats[LI_TIER_DISK].enabled = true;
    }
    if (cfg->remote_url) {
        if (li_blob_redis_open(&t->remote, cfg->remote_url, cfg->remote_password_file) != LI_OK ||
            li_blob_redis_open(&t->remote_r, cfg->remote_url, cfg->remote_password_file) != LI_OK) {
            LI_WARN("--kv-remote %s: %s; running without the shared tier (L3)", cfg->remote_url,
                    li_error_msg());
            li_error_clear();
            li_blob_close(t->remote);
            t->remote = NULL;
        } else {
            t->stats[LI_TIER_REMOTE].enabled = true;
        }
    }
    if (!t->l1_index && !t->disk && !t->remote) {  // only a remote, and it is unreachable
        li_kv_tiers_free(t);
        return LI_OK;
    }
    if (t->disk || t->remote) {
        if (pthread_create(&t->writer, NULL, writer_main, t) != 0) {
            rc = li_error_set(LI_ERR_OOM, "cannot start the KV tiers' writer thread");
            goto fail;
        }
        if (pthread_create(&t->loader, NULL, loader_main, t) != 0) {
            stop_workers(t, false);
            rc = li_error_set(LI_ERR_OOM, "cannot start the KV tiers' loader thread");
            goto fail;
        }
        t->worker_started = true;
    }
    *out = t;
    return LI_OK;
fail:
    li_kv_tiers_free(t);
    return rc;
}

li_status li_kv_tiers_demote(li_kv_tiers *t, const li_doc_copy *copy) {
    li_doc_key key;
    tier_key(t, &copy->key, copy->delta, &key);
    size_t n = HEADER_BYTES + (size_t)copy->n_pages * t->page_bytes;
    pthread_mutex_lock(&t->mu);
    bool in_l1 = t->l1_index && li_tier_index_contains(t->l1_index, &key);
    pthread_mutex_unlock(&t->mu);
    if (in_l1 && !t->disk && !t->remote) return LI_OK;
    // in the arena when the host tier keeps it (async D2H now, fast H2D later); plain otherwise
    blob *b = blob_new(t, &key, n, true, cost_of(t, copy->n_tokens));
    if (!b) {
        LI_WARN("KV tiers: no host memory for a %zu-byte copy; it stays in the pool only", n);
        li_error_clear();
        return LI_OK;
    }
    entry_header h;
    header_fill(t, &h, &key, copy->n_tokens, copy->n_pages, copy->delta);
    memset(b->data, 0, HEADER_BYTES);
    memcpy(b->data, &h, sizeof h);
    li_status rc = li_be_kv_gather(t->be, b->data + HEADER_BYTES, &t->pool->storage, copy->pages,
                                   copy->n_pages);
    if (rc != LI_OK) {
        blob_destroy(t, b);
        return rc;
    }
    b->next = t->gathered;
    t->gathered = b;
    return LI_OK;
}

// Queues the H2D of a valid entry into the copy's pages; b is kept until the next step_done.
static li_status upload(li_kv_tiers *t, const li_doc_copy *copy, blob *b) {
    LI_TRY(li_be_kv_scatter(t->be, &t->pool->storage, copy->pages, copy->n_pages,
                            b->data + HEADER_BYTES));
    b->refs++;  // engine-only list; mu not needed for a blob the engine holds a reference to
    b->next = t->uploads;
    t->uploads = b;
    return LI_OK;
}

li_status li_kv_tiers_promote(li_kv_tiers *t, const li_doc_copy *copy, li_kv_promotion **promo,
                              li_kv_tiers_result *result) {
    *promo = NULL;
    *result = LI_TIERS_ABSENT;
    double t0 = li_time_ms();
    li_doc_key key;
    tier_key(t, &copy->key, copy->delta, &key);
    li_status rc = LI_OK;
    if (t->l1_index) {
        pthread_mutex_lock(&t->mu);
        l1_entry *e = l1_find(t, &key);
        li_cache_tier_stats *st = &t->stats[LI_TIER_HOST];
        if (e) {
            li_tier_index_touch(t->l1_index, &key);
            e->b->refs++;  // held across the upload below
        }
        if (e) st->hits++;
        else st->misses++;
        blob *b = e ? e->b : NULL;
        pthread_mutex_unlock(&t->mu);
        if (b) {
            li_kv_promotion check = {.key = key, .n_tokens = copy->n_tokens,
                                     .n_pages = copy->n_pages, .delta = copy->delta};
            if (header_valid(t, &check, b->data, b->n)) rc = upload(t, copy, b);
            else rc = LI_ERR_FORMAT;  // cannot happen short of a bug: drop it, prefill
            pthread_mutex_lock(&t->mu);
            if (rc == LI_OK) {
                st->promotions++;
                st->bytes_in += (int64_t)b->n;
                st->promote_ms += li_time_ms() - t0;
            } else {
                st->dropped++;
                li_tier_index_remove(t->l1_index, &key);
                l1_drop(t, &key);
            }
            blob_unref(t, b, true);
            pthread_mutex_unlock(&t->mu);
            if (rc == LI_OK) *result = LI_TIERS_LOADED;
            else li_error_clear();
            return LI_OK;
        }
    }
    if (!t->disk && !t->remote) return LI_OK;
    if (!t->remote) {
        // only the disk below: its index says at once whether to ask the loader
        pthread_mutex_lock(&t->mu);
        bool indexed = li_tier_index_contains(t->l2_index, &key);
        if (!indexed) t->stats[LI_TIER_DISK].misses++;
        pthread_mutex_unlock(&t->mu);
        if (!indexed) return LI_OK;
    }
    li_kv_promotion *p = calloc(1, sizeof *p);
    if (!p) return LI_OK;  // out of memory: prefill instead
    p->key = key;
    p->copy = copy;
    p->n_tokens = copy->n_tokens;
    p->n_pages = copy->n_pages;
    p->delta = copy->delta;
    p->t0 = t0;
    pthread_mutex_lock(&t->mu);
    if (t->loads_tail) t->loads_tail->next = p;
    else t->loads = p;
    t->loads_tail = p;
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->mu);
    *promo = p;
    *result = LI_TIERS_PENDING;
    return LI_OK;
}

li_status li_kv_tiers_poll(li_kv_tiers *t, li_kv_promotion **promo, li_kv_tiers_result *result) {
    li_kv_promotion *p = *promo;
    pthread_mutex_lock(&t->mu);
    bool done = p->done;
    pthread_mutex_unlock(&t->mu);
    *result = LI_TIERS_PENDING;
    if (!done) return LI_OK;
    *promo = NULL;
    *result = LI_TIERS_ABSENT;
    if (!p->data) {
        free(p);
        return LI_OK;
    }
    // the value becomes a blob: uploaded now, kept in L1 (copied into the arena: L1 holds
    // arena blobs only), written to the tiers above its own
    blob *b = blob_new(t, &p->key, p->n, true, cost_of(t, p->copy->n_tokens));
    if (!b) {
        free(p->data);
        free(p);
        return LI_OK;
    }
    memcpy(b->data, p->data, p->n);
    free(p->data);
    li_status rc = upload(t, p->copy, b);
    pthread_mutex_lock(&t->mu);
    if (rc == LI_OK) {
        li_cache_tier_stats *st = &t->stats[p->from];
        st->promotions++;
        st->bytes_in += (int64_t)b->n;
        st->promote_ms += li_time_ms() - p->t0;
        l1_insert(t, b);
        if (p->from == LI_TIER_REMOTE) queue_write(t, b, 1u << LI_TIER_DISK);
        *result = LI_TIERS_LOADED;
    }
    blob_unref(t, b, true);
    pthread_mutex_unlock(&t->mu);
    free(p);
    return rc;
}

void li_kv_tiers_cancel(li_kv_tiers *t, li_kv_promotion *p) {
    if (!p) return;
    pthread_mutex_lock(&t->mu);
    if (p->done) {
        free(p->data);
        free(p);
    } else {
        p->cancelled = true;  // the worker frees it
    }
    pthread_mutex_unlock(&t->mu);
}

void li_kv_tiers_step_done(li_kv_tiers *t) {
    pthread_mutex_lock(&t->mu);
    for (blob *b = t->gathered, *next; b; b = next) {
        next = b->next;
        l1_insert(t, b);
        queue_write(t, b, (1u << LI_TIER_DISK) | (1u << LI_TIER_REMOTE));
        blob_unref(t, b, true);
    }
    t->gathered = NULL;
    for (blob *b = t->uploads, *next; b; b = next) {
        next = b->next;
        blob_unref(t, b, true);
    }
    t->uploads = NULL;
    blob *fp = t->free_arena;
    t->free_arena = NULL;
    pthread_mutex_unlock(&t->mu);
    for (blob *next; fp; fp = next) {
        next = fp->next;
        blob_destroy(t, fp);
    }
}

void li_kv_tiers_wait(li_kv_tiers *t) {
    if (!t || !t->worker_started) return;
    pthread_mutex_lock(&t->mu);
    while (t->writes || t->busy) pthread_cond_wait(&t->idle, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void li_kv_tiers_get_stats(li_kv_tiers *t, li_cache_tier_stats out[LI_N_TIERS]) {
    pthread_mutex_lock(&t->mu);
    memcpy(out, t->stats, sizeof t->stats);
    pthread_mutex_unlock(&t->mu);
}
