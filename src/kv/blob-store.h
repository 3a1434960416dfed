// blob-store.h — a byte store keyed by a 32-byte content key (li_doc_key, SHA-256), the storage
// below the document cache's lower tiers (issue 21): L2 a local directory
// (blob-disk.c), L3 a shared Redis/Valkey (blob-redis.c). A value is an opaque byte string (a
// document's serialised K/V pages); the store checks its integrity (a checksum per chunk) and
// never returns a corrupt, partial or stale value: such an entry is deleted and reported as a
// miss (stats.corrupt++).
//
// It is deliberately not a cache: it has no budget and no eviction policy (the tier manager keeps
// one with tier-index.h and calls li_blob_del), no TTL, no background thread.
//
// Threads: a store handle is used by one thread at a time (the tier manager serialises its calls);
// two handles, in one process or two, may share a directory or a Redis database.
//
// Tested by tests/test-blob-store.c.
#ifndef LI_BLOB_STORE_H
#define LI_BLOB_STORE_H

#include "doc-cache.h"

typedef struct li_blob_store li_blob_store;

typedef struct {
    int64_t puts, put_bytes;  // successful puts and their payload bytes
    int64_t gets, hits, misses, get_bytes;  // gets; hits (payload returned), misses (incl. corrupt)
    int64_t corrupt;          // entries found corrupt, partial or stale (dropped, counted as misses)
    int64_t errors;           // operations that failed for the environment (I/O, Redis down, full)
    int64_t deletes;          // entries deleted by li_blob_del
    int64_t resident_bytes;   // payload bytes of the entries this handle knows (disk: listed at
    int64_t resident_entries; // open + put - del; Redis: 0, the shared tier is bounded by Redis)
    bool writable;            // false once the disk filled (puts fail, gets go on) or Redis is down
} li_blob_stats;

// A directory of entries (created if missing), one file per key named by its hex. Leftover
// temporary files of an interrupted put are removed here.
li_status li_blob_disk_open(li_blob_store **out, const char *dir);
// A Redis/Valkey database. url: redis://HOST:PORT[/DB] (PORT default 6379, DB default 0).
// password_file: a file whose first line is the password (NULL: no AUTH). Unreachable server,
// wrong password or bad URL: an error status with a message naming it (the caller runs without
// L3). Connect and command timeouts apply; after a connection loss operations fail fast as misses
// and the store reconnects with exponential backoff (100 ms doubling to 5 s).
li_status li_blob_redis_open(li_blob_store **out, const char *url, const char *password_file);

// Stores `n` bytes under `key`, replacing any previous value atomically (a reader sees the old or
// the new value, never a mix). Fails (LI_ERR_IO, message set) when the disk is full or Redis down.
li_status li_blob_put(li_blob_store *s, const li_doc_key *key, const void *data, size_t n);
// On a hit: LI_OK, *data malloc'd (caller free()s; non-NULL even for n == 0), *n its size.
// On a miss (absent, corrupt, partial, stale, or the store unreachable): LI_ERR_NOT_FOUND,
// *data NULL, *n 0. Other statuses: a real failure (out of memory).
li_status li_blob_get(li_blob_store *s, const li_doc_key *key, void **data, size_t *n);
bool li_blob_exists(li_blob_store *s, const li_doc_key *key);  // cheap: no checksum read
// Deletes the entry; an absent key is not an error.
li_status li_blob_del(li_blob_store *s, const li_doc_key *key);
// Calls fn for every entry present now (disk: the directory's complete entries; Redis: a SCAN of
// this namespace's manifests), with its payload bytes, so the manager can index what survived a
// restart or what another replica wrote.
li_status li_blob_list(li_blob_store *s, void (*fn)(void *ctx, const li_doc_key *key, int64_t bytes),
                       void *ctx);
void li_blob_get_stats(const li_blob_store *s, li_blob_stats *out);
const char *li_blob_name(const li_blob_store *s);  // "disk:/path" or "redis://host:port/db"
void li_blob_close(li_blob_store *s);              // NULL ok

// Chunking of a value (both stores): payloads are cut into chunks of this many bytes, each with
// its own checksum, so a reader verifies as it goes and a damaged chunk names itself.
#define LI_BLOB_CHUNK_BYTES (4 << 20)

#endif
