// blob-internal.h — what the two blob stores share, private to src/kv/blob-*.c: the table each
// store fills, the common handle header, and the entry header ("manifest") both write.
//
// Manifest, little-endian, 80 + 8 × n_chunks bytes:
//   0  "LIKVBLOB"   8  version u32 (1)   12 chunk_bytes u32   16 payload bytes u64
//   24 nonce u64    32 n_chunks u32      36 reserved u32 (0)  40 key (32 bytes)
//   72 chunk sums u64 × n_chunks         then the sum of every byte before it, u64
// Chunk i holds payload bytes [i × chunk_bytes, min(payload, (i+1) × chunk_bytes)); its sum is
// XXH3-64 seeded with nonce ^ i, so a chunk from another write (another nonce) or another slot
// fails. The disk file is the manifest followed by the payload; Redis keeps the manifest under the
// entry's key and each chunk under a key that carries the nonce.
#ifndef LI_BLOB_INTERNAL_H
#define LI_BLOB_INTERNAL_H

#include "blob-store.h"

typedef struct {
    li_status (*put)(li_blob_store *s, const li_doc_key *key, const void *data, size_t n);
    li_status (*get)(li_blob_store *s, const li_doc_key *key, void **data, size_t *n);
    bool (*exists)(li_blob_store *s, const li_doc_key *key);
    li_status (*del)(li_blob_store *s, const li_doc_key *key);
    li_status (*list)(li_blob_store *s, void (*fn)(void *, const li_doc_key *, int64_t), void *ctx);
    void (*close)(li_blob_store *s);
} li_blob_ops;

// The first member of each store's own struct.
struct li_blob_store {
    const li_blob_ops *ops;
    li_blob_stats stats;  // puts/gets/hits/misses/bytes/deletes counted by blob-store.c; the
                          // store counts corrupt, errors, resident_* and sets writable
    char name[320];       // "disk:/path", "redis://host:port/db"
};

#define LI_BLOB_MAGIC "LIKVBLOB"
#define LI_BLOB_VERSION 1u
#define LI_BLOB_FIXED_BYTES 72

typedef struct {
    uint32_t chunk_bytes, n_chunks;
    uint64_t payload, nonce;
    li_doc_key key;
    const uint8_t *sums;  // (n_chunks × 8) into the decoded bytes (borrowed)
} li_blob_manifest;

static inline size_t li_blob_manifest_bytes(uint32_t n_chunks) {
    return LI_BLOB_FIXED_BYTES + 8 * (size_t)n_chunks + 8;
}
static inline uint32_t li_blob_n_chunks(uint64_t payload, uint32_t chunk_bytes) {
    return (uint32_t)((payload + chunk_bytes - 1) / chunk_bytes);
}
// A fresh nonce: never the same twice in a process, and unlikely across processes and hosts.
uint64_t li_blob_nonce(void);
uint64_t li_blob_chunk_sum(const void *p, size_t n, uint64_t nonce, uint32_t i);
// The manifest of `data` (n bytes) as a malloc'd buffer of li_blob_manifest_bytes(n_chunks).
li_status li_blob_manifest_encode(const li_doc_key *key, const void *data, size_t n,
                                  uint32_t chunk_bytes, uint64_t nonce, uint8_t **out,
                                  size_t *out_bytes);
// Parses and checks a manifest: magic, version, sizes, its own sum and (when `key` is not NULL)
// that it belongs to `key`. `p` must outlive m->sums. Only reads the first `n` bytes; false when
// anything is off (the entry is stale or corrupt).
bool li_blob_manifest_decode(const void *p, size_t n, const li_doc_key *key, li_blob_manifest *m);
// Checks chunk i of the payload against the manifest.
bool li_blob_chunk_ok(const li_blob_manifest *m, uint32_t i, const void *chunk, size_t n);
size_t li_blob_chunk_len(const li_blob_manifest *m, uint32_t i);

// Parses 64 hex digits into a key; false if `s` is not exactly that.
bool li_blob_key_from_hex(const char *s, size_t n, li_doc_key *key);

#endif
