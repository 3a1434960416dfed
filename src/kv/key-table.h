// key-table.h — the one keyed container of src/kv: entries found by a 32-byte content key
// (li_doc_key, SHA-256) in a chained hash table, and kept in a use order, oldest first, that the
// caller moves an entry to the newest end of (touch). The document cache (several copies of one
// document may share a key), the prefix cache, each tier's index and the host tier's blobs all
// sit on it.
//
// Intrusive: an entry is a li_key_link inside the caller's struct, next to the key it points at;
// the table allocates only its bucket array (at the first insert, then doubling whenever the
// load would pass 3/4) and owns no entry. The use order is the caller's LRU (the caches walk it
// oldest first for a victim); a container that orders its victims otherwise (tier-index.h's
// heap) just never touches.
// Not here: what an entry holds, eviction rules, locking (one thread at a time).
// Tested by tests/test-key-table.c.
#ifndef LI_KEY_TABLE_H
#define LI_KEY_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/core.h"

typedef struct {
    uint8_t b[32];
} li_doc_key;  // SHA-256

typedef struct li_key_link li_key_link;
struct li_key_link {
    const li_doc_key *key;       // the entry's key, in the caller's struct; fixed while linked
    li_key_link *chain;          // next in its bucket
    li_key_link *older, *newer;  // use order
};

typedef struct {
    li_key_link **buckets;        // (n_buckets) chains, the latest inserted first
    size_t n_buckets;             // power of two; 0 until the first insert
    size_t first_buckets;         // n_buckets at the first insert
    size_t count;                 // entries linked
    li_key_link *oldest, *newest; // use order
    const char *what;             // names the container in an out-of-memory message
} li_key_table;

// The struct of type `type` whose member `member` is the link `link` (NULL for NULL; `link` is
// evaluated twice).
#define LI_KEY_ENTRY(link, type, member) \
    ((link) ? (type *)(void *)((char *)(link) - offsetof(type, member)) : (type *)NULL)

// An empty table that takes first_buckets (a power of two) at its first insert; allocates
// nothing. A zeroed table is a valid argument to li_key_table_free.
void li_key_table_init(li_key_table *kt, size_t first_buckets, const char *what);
void li_key_table_free(li_key_table *kt);  // the bucket array only: the entries are the caller's

// Links e under *key (which must stay put and unchanged while e is linked) as the newest entry;
// a key already present is kept too (li_key_table_find_next reaches both). Grows the table
// first when one more entry would pass 3/4 load (or allocates the buckets at the first insert);
// LI_ERR_OOM then leaves e unlinked.
li_status li_key_table_insert(li_key_table *kt, li_key_link *e, const li_doc_key *key);
void li_key_table_remove(li_key_table *kt, li_key_link *e);  // e must be linked
void li_key_table_touch(li_key_table *kt, li_key_link *e);   // e becomes the newest

// An entry with `key`, or NULL; li_key_table_find_next gives the next one with e's key. The order
// among equal keys is their bucket chain's: fixed between inserts, removals and growth.
li_key_link *li_key_table_find(const li_key_table *kt, const li_doc_key *key);
li_key_link *li_key_table_find_next(const li_key_link *e);

// Use order: walk from li_key_table_oldest(kt) through e->newer.
static inline li_key_link *li_key_table_oldest(const li_key_table *kt) { return kt->oldest; }

#endif
