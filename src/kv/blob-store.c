// blob-store.c — the dispatch and counters of li_blob_store (blob-store.h) and the entry manifest
// both stores write (blob-internal.h).
//
// Checksums are XXH3-64 (libxxhash), not SHA-256 and not CRC32C. They guard against damage
// (a flipped byte, a torn or truncated file, a chunk Redis evicted or another writer replaced),
// not against a forger: whoever can write the store can write a matching sum with any function.
// Speed decides: OpenSSL SHA-256 measures 1.8 GB/s on this machine's SHA-NI core, 140 ms for a
// 256 MiB Llama-3.1-8B document — more than its 80–100 ms prefill on the H200, so a verified hit
// would cost more than a miss. XXH3 runs at memory speed (tens of GB/s), CRC32C has no
// Debian library and would be ours to keep; a 64-bit sum also misses a random damage with
// probability 2^-64 where CRC32C's is 2^-32.
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "blob-internal.h"

// ---- dispatch -----------------------------------------------------------------------------------

// A write to a Redis connection the server closed raises SIGPIPE, whose default kills the whole
// process; library code must not depend on its caller ignoring it (serve does, bench need not).
// Each operation blocks SIGPIPE in its thread and consumes one it raised (the write itself then
// fails with EPIPE and the store handles the loss).
typedef struct {
    sigset_t old;
    bool was_pending;
} pipe_guard;

static bool sigpipe_pending(void) {
    sigset_t pend;
    sigpending(&pend);
    return sigismember(&pend, SIGPIPE) == 1;
}

static void guard_on(pipe_guard *g) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    g->was_pending = sigpipe_pending();
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void guard_off(pipe_guard *g) {
    if (!g->was_pending && sigpipe_pending()) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        struct timespec zero = {0, 0};
        sigtimedwait(&set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

// result = call, with SIGPIPE guarded as above: every store operation goes through it.
#define GUARDED(result, call)                                                                      \
    do {                                                                                           \
        pipe_guard g_;                                                                             \
        guard_on(&g_);                                                                             \
        (result) = (call);                                                                         \
        guard_off(&g_);                                                                            \
    } while (0)

li_status li_blob_put(li_blob_store *s, const li_doc_key *key, const void *data, size_t n) {
    li_status rc;
    GUARDED(rc, s->ops->put(s, key, data, n));
    if (rc == LI_OK) {
        s->stats.puts++;
        s->stats.put_bytes += (int64_t)n;
    }
    return rc;
}

li_status li_blob_get(li_blob_store *s, const li_doc_key *key, void **data, size_t *n) {
    *data = NULL;
    *n = 0;
    s->stats.gets++;
    li_status rc;
    GUARDED(rc, s->ops->get(s, key, data, n));
    if (rc == LI_OK) {
        s->stats.hits++;
        s->stats.get_bytes += (int64_t)*n;
    } else {
        LI_ASSERT(*data == NULL);
        *n = 0;
        if (rc == LI_ERR_NOT_FOUND) s->stats.misses++;
    }
    return rc;
}

bool li_blob_exists(li_blob_store *s, const li_doc_key *key) {
    bool yes;
    GUARDED(yes, s->ops->exists(s, key));
    return yes;
}

li_status li_blob_del(li_blob_store *s, const li_doc_key *key) {
    li_status rc;
    GUARDED(rc, s->ops->del(s, key));
    if (rc == LI_OK) s->stats.deletes++;
    return rc;
}

li_status li_blob_list(li_blob_store *s, void (*fn)(void *, const li_doc_key *, int64_t),
                       void *ctx) {
    li_status rc;
    GUARDED(rc, s->ops->list(s, fn, ctx));
    return rc;
}

void li_blob_get_stats(const li_blob_store *s, li_blob_stats *out) { *out = s->stats; }
const char *li_blob_name(const li_blob_store *s) { return s->name; }

void li_blob_close(li_blob_store *s) {
    if (s) s->ops->close(s);
}

// ---- manifest -----------------------------------------------------------------------------------

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint64_t li_blob_nonce(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, counter++};
    return XXH3_64bits(seed, sizeof seed);
}

uint64_t li_blob_chunk_sum(const void *p, size_t n, uint64_t nonce, uint32_t i) {
    return XXH3_64bits_withSeed(p, n, nonce ^ i);
}

size_t li_blob_chunk_len(const li_blob_manifest *m, uint32_t i) {
    uint64_t start = (uint64_t)i * m->chunk_bytes;
    uint64_t left = m->payload - start;
    return (size_t)(left < m->chunk_bytes ? left : m->chunk_bytes);
}

bool li_blob_chunk_ok(const li_blob_manifest *m, uint32_t i, const void *chunk, size_t n) {
    return i < m->n_chunks && n == li_blob_chunk_len(m, i) &&
           li_blob_chunk_sum(chunk, n, m->nonce, i) == get_u64(m->sums + 8 * (size_t)i);
}

li_status li_blob_manifest_encode(const li_doc_key *key, const void *data, size_t n,
                                  uint32_t chunk_bytes, uint64_t nonce, uint8_t **out,
                                  size_t *out_bytes) {
    uint32_t n_chunks = li_blob_n_chunks(n, chunk_bytes);
    size_t bytes = li_blob_manifest_bytes(n_chunks);
    uint8_t *p = calloc(1, bytes);
    if (!p) return li_error_set(LI_ERR_OOM, "out of memory for a blob manifest");
    memcpy(p, LI_BLOB_MAGIC, 8);
    put_u32(p + 8, LI_BLOB_VERSION);
    put_u32(p + 12, chunk_bytes);
    put_u64(p + 16, n);
    put_u64(p + 24, nonce);
    put_u32(p + 32, n_chunks);
    memcpy(p + 40, key->b, 32);
    for (uint32_t i = 0; i < n_chunks; i++) {
        size_t off = (size_t)i * chunk_bytes, len = n - off < chunk_bytes ? n - off : chunk_bytes;
        put_u64(p + LI_BLOB_FIXED_BYTES + 8 * (size_t)i,
                li_blob_chunk_sum((const uint8_t *)data + off, len, nonce, i));
    }
    put_u64(p + bytes - 8, XXH3_64bits(p, bytes - 8));
    *out = p;
    *out_bytes = bytes;
    return LI_OK;
}

bool li_blob_manifest_decode(const void *p_, size_t n, const li_doc_key *key, li_blob_manifest *m) {
    const uint8_t *p = p_;
    if (n < li_blob_manifest_bytes(0) || memcmp(p, LI_BLOB_MAGIC, 8) != 0) return false;
    if (get_u32(p + 8) != LI_BLOB_VERSION) return false;  // another format: stale
    m->chunk_bytes = get_u32(p + 12);
    m->payload = get_u64(p + 16);
    m->nonce = get_u64(p + 24);
    m->n_chunks = get_u32(p + 32);
    memcpy(m->key.b, p + 40, 32);
    m->sums = p + LI_BLOB_FIXED_BYTES;
    if (m->chunk_bytes < 4096 || m->chunk_bytes > (1u << 30)) return false;
    if (m->payload > ((uint64_t)1 << 48)) return false;  // 256 TiB: no document is this large
    if (m->n_chunks != li_blob_n_chunks(m->payload, m->chunk_bytes)) return false;
    size_t bytes = li_blob_manifest_bytes(m->n_chunks);
    if (n < bytes || get_u64(p + bytes - 8) != XXH3_64bits(p, bytes - 8)) return false;
    return !key || memcmp(key->b, m->key.b, 32) == 0;
}

bool li_blob_key_from_hex(const char *s, size_t n, li_doc_key *key) {
    if (n != 64) return false;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        if (i % 2 == 0) key->b[i / 2] = (uint8_t)(v << 4);
        else key->b[i / 2] |= (uint8_t)v;
    }
    return true;
}
