// key-table.c — the keyed container (see key-table.h): a chained hash table over the first 8 bytes
// of the key, and a doubly linked use order.
#include <stdlib.h>
#include <string.h>

#include "key-table.h"

static size_t key_hash(const li_doc_key *k) {
    uint64_t h;
    memcpy(&h, k->b, sizeof h);  // a SHA-256 prefix is already uniform
    return (size_t)h;
}

static li_key_link **bucket_of(const li_key_table *kt, const li_doc_key *k) {
    return &kt->buckets[key_hash(k) & (kt->n_buckets - 1)];
}

// Rehashes every chain into n buckets; each chain is walked in order and its entries pushed on
// their new chains' heads.
static li_status rehash(li_key_table *kt, size_t n) {
    li_key_link **b = calloc(n, sizeof *b);
    if (!b) return li_error_set(LI_ERR_OOM, "out of memory growing %s to %zu buckets", kt->what, n);
    for (size_t i = 0; i < kt->n_buckets; i++)
        for (li_key_link *e = kt->buckets[i], *next; e; e = next) {
            next = e->chain;
            size_t j = key_hash(e->key) & (n - 1);
            e->chain = b[j];
            b[j] = e;
        }
    free(kt->buckets);
    kt->buckets = b;
    kt->n_buckets = n;
    return LI_OK;
}

void li_key_table_init(li_key_table *kt, size_t first_buckets, const char *what) {
    LI_ASSERT(first_buckets > 0 && (first_buckets & (first_buckets - 1)) == 0);
    memset(kt, 0, sizeof *kt);
    kt->first_buckets = first_buckets;
    kt->what = what;
}

void li_key_table_free(li_key_table *kt) {
    free(kt->buckets);
    kt->buckets = NULL;
    kt->n_buckets = 0;
}

static void use_unlink(li_key_table *kt, li_key_link *e) {
    if (e->older) e->older->newer = e->newer; else kt->oldest = e->newer;
    if (e->newer) e->newer->older = e->older; else kt->newest = e->older;
    e->older = e->newer = NULL;
}

static void use_append(li_key_table *kt, li_key_link *e) {
    e->older = kt->newest;
    e->newer = NULL;
    if (kt->newest) kt->newest->newer = e; else kt->oldest = e;
    kt->newest = e;
}

li_status li_key_table_insert(li_key_table *kt, li_key_link *e, const li_doc_key *key) {
    if (kt->count + 1 > kt->n_buckets * 3 / 4)
        LI_TRY(rehash(kt, kt->n_buckets ? 2 * kt->n_buckets : kt->first_buckets));
    e->key = key;
    li_key_link **b = bucket_of(kt, key);
    e->chain = *b;
    *b = e;
    use_append(kt, e);
    kt->count++;
    return LI_OK;
}

void li_key_table_remove(li_key_table *kt, li_key_link *e) {
    li_key_link **pp = bucket_of(kt, e->key);
    while (*pp != e) pp = &(*pp)->chain;
    *pp = e->chain;
    e->chain = NULL;
    use_unlink(kt, e);
    kt->count--;
}

void li_key_table_touch(li_key_table *kt, li_key_link *e) {
    use_unlink(kt, e);
    use_append(kt, e);
}

// The first entry from e on (e included) with `key`.
static li_key_link *match_from(li_key_link *e, const li_doc_key *key) {
    while (e && memcmp(e->key->b, key->b, sizeof key->b) != 0) e = e->chain;
    return e;
}

li_key_link *li_key_table_find(const li_key_table *kt, const li_doc_key *key) {
    return kt->n_buckets ? match_from(*bucket_of(kt, key), key) : NULL;
}

li_key_link *li_key_table_find_next(const li_key_link *e) { return match_from(e->chain, e->key); }
