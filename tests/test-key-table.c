// test-key-table.c — the keyed container of src/kv (src/kv/key-table.c): find, duplicate keys,
// the use order under touch and remove, growth past 3/4 load with colliding hashes, and a random
// sequence of operations checked against a brute-force model (a list of linked entries in use
// order, searched linearly).
#include <stdio.h>
#include <string.h>

#include "kv/key-table.h"
#include "test.h"

// Keys whose hash (the first 8 bytes) is shared by `share` consecutive ids, so that chains of
// different keys in one bucket are common; bytes 8..11 tell the ids apart.
static li_doc_key key_of(int id, int share) {
    li_doc_key k;
    memset(&k, 0xa5, sizeof k);
    uint64_t h = (uint64_t)(id / share) * 0x9e3779b97f4a7c15ull;
    memcpy(k.b, &h, sizeof h);
    memcpy(k.b + 8, &id, sizeof id);
    return k;
}

typedef struct {
    li_doc_key key;
    int id;            // the key's id (several entries may share it)
    bool linked;
    li_key_link link;
} item;

static item *item_of(li_key_link *e) { return LI_KEY_ENTRY(e, item, link); }

// The use order as slot indices (oldest first) into out; returns its length.
static int walk(const li_key_table *kt, const item *base, int *out, int cap) {
    int n = 0;
    for (li_key_link *e = li_key_table_oldest(kt); e && n < cap; e = e->newer)
        out[n++] = (int)(item_of(e) - base);
    return n;
}

static void test_basic(void) {
    TEST_BEGIN("key-table: find, touch, remove, use order");
    li_key_table kt;
    li_key_table_init(&kt, 4, "a test table");
    li_doc_key absent = key_of(99, 1);
    CHECK(li_key_table_find(&kt, &absent) == NULL && kt.n_buckets == 0, "empty table allocates");
    item it[3];
    for (int i = 0; i < 3; i++) {
        it[i] = (item){.key = key_of(10 + i, 1), .id = 10 + i};
        CHECK(li_key_table_insert(&kt, &it[i].link, &it[i].key) == LI_OK, "insert %d", i);
    }
    CHECK(li_key_table_find(&kt, &absent) == NULL && kt.n_buckets == 4, "absent key found");
    for (int i = 0; i < 3; i++) {
        li_doc_key k = key_of(10 + i, 1);  // an equal key at another address
        li_key_link *e = li_key_table_find(&kt, &k);
        CHECK(e == &it[i].link && li_key_table_find_next(e) == NULL, "find %d", i);
    }
    int order[4], n;
    n = walk(&kt, it, order, 4);
    CHECK(n == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2, "insert order");
    li_key_table_touch(&kt, &it[0].link);  // 1 2 0
    li_key_table_touch(&kt, &it[2].link);  // 1 0 2
    n = walk(&kt, it, order, 4);
    CHECK(n == 3 && order[0] == 1 && order[1] == 0 && order[2] == 2, "touch order %d %d %d",
          order[0], order[1], order[2]);
    li_key_table_remove(&kt, &it[0].link);  // 1 2
    n = walk(&kt, it, order, 4);
    CHECK(n == 2 && order[0] == 1 && order[1] == 2 && kt.count == 2, "after remove");
    CHECK(li_key_table_find(&kt, &it[0].key) == NULL, "removed key still found");
    CHECK(kt.newest == &it[2].link && kt.oldest == &it[1].link, "ends");
    li_key_table_remove(&kt, &it[1].link);
    li_key_table_remove(&kt, &it[2].link);
    CHECK(kt.count == 0 && !kt.oldest && !kt.newest, "empty");
    li_key_table_free(&kt);
    li_key_table zero = {0};
    li_key_table_free(&zero);  // a zeroed table frees
    TEST_END();
}

static void test_duplicates_and_growth(void) {
    TEST_BEGIN("key-table: equal keys all reachable, growth keeps every entry");
    enum { N = 600, DUP = 3 };
    static item it[N];
    li_key_table kt;
    li_key_table_init(&kt, 8, "a test table");
    size_t n_buckets0 = 8;
    // ids i / DUP: each key DUP times; 4 ids per hash value: chains of mixed keys
    for (int i = 0; i < N; i++) {
        it[i] = (item){.key = key_of(i / DUP, 4), .id = i / DUP};
        CHECK(li_key_table_insert(&kt, &it[i].link, &it[i].key) == LI_OK, "insert %d", i);
        CHECK(kt.count * 4 <= kt.n_buckets * 3, "load %zu / %zu", kt.count, kt.n_buckets);
    }
    CHECK(kt.count == N && kt.n_buckets > n_buckets0, "grew to %zu buckets", kt.n_buckets);
    int bad = 0;
    for (int id = 0; id < N / DUP; id++) {
        li_doc_key k = key_of(id, 4);
        int seen = 0;
        for (li_key_link *e = li_key_table_find(&kt, &k); e; e = li_key_table_find_next(e)) {
            item *x = item_of(e);
            bad += x->id != id || x - it < DUP * id || x - it >= DUP * (id + 1);
            seen++;
        }
        bad += seen != DUP;
    }
    CHECK(bad == 0, "%d wrong or missing entries", bad);
    int order[N];
    int n = walk(&kt, it, order, N);
    bad = n != N;
    for (int i = 0; i < n; i++) bad += order[i] != i;  // growth leaves the use order alone
    CHECK(bad == 0, "use order changed by growth");
    li_key_table_free(&kt);
    TEST_END();
}

// Random insert / remove / touch / find on a few keys with shared hashes; after every step the
// table's answers for one key and, every 16 steps, its whole use order are compared with the
// model. The load factor stays at or below 3/4 throughout.
static void test_random(void) {
    TEST_BEGIN("key-table: 30000 random operations match a brute-force model");
    enum { SLOTS = 400, KEYS = 150, STEPS = 30000 };
    static item it[SLOTS];
    int model[SLOTS], n_model = 0;  // linked slots, oldest first
    int got[SLOTS];
    memset(it, 0, sizeof it);
    li_key_table kt;
    li_key_table_init(&kt, 2, "a test table");
    int mismatches = 0;
    for (int step = 0; step < STEPS && mismatches < 5; step++) {
        int s = (int)(li_rng_u64(&rng) % SLOTS), op = (int)(li_rng_u64(&rng) % 8);
        item *x = &it[s];
        if (op <= 2 && !x->linked) {  // insert under a random key
            x->id = (int)(li_rng_u64(&rng) % KEYS);
            x->key = key_of(x->id, 3);
            if (li_key_table_insert(&kt, &x->link, &x->key) != LI_OK) mismatches++;
            x->linked = true;
            model[n_model++] = s;
        } else if (op <= 4 && x->linked) {  // remove
            li_key_table_remove(&kt, &x->link);
            x->linked = false;
            int j = 0;
            while (model[j] != s) j++;
            memmove(model + j, model + j + 1, (size_t)(n_model - j - 1) * sizeof *model);
            n_model--;
        } else if (x->linked) {  // touch
            li_key_table_touch(&kt, &x->link);
            int j = 0;
            while (model[j] != s) j++;
            memmove(model + j, model + j + 1, (size_t)(n_model - j - 1) * sizeof *model);
            model[n_model - 1] = s;
        }
        // find: the set of slots linked under a random key, both ways
        int id = (int)(li_rng_u64(&rng) % KEYS), want = 0, have = 0;
        li_doc_key k = key_of(id, 3);
        for (int i = 0; i < n_model; i++) want += it[model[i]].id == id;
        for (li_key_link *e = li_key_table_find(&kt, &k); e; e = li_key_table_find_next(e)) {
            item *y = item_of(e);
            if (!y->linked || y->id != id) mismatches++;
            have++;
        }
        if (have != want || kt.count != (size_t)n_model || kt.count * 4 > kt.n_buckets * 3) {
            if (mismatches++ == 0)
                fprintf(stderr, "  step %d: key %d found %d times, model %d; count %zu / %d\n",
                        step, id, have, want, kt.count, n_model);
        }
        if (step % 16 == 0) {
            int n = walk(&kt, it, got, SLOTS);
            if (n != n_model || memcmp(got, model, (size_t)n * sizeof *got) != 0) {
                if (mismatches++ == 0) fprintf(stderr, "  step %d: use order differs\n", step);
            }
        }
    }
    CHECK(mismatches == 0, "%d mismatches", mismatches);
    CHECK(kt.n_buckets >= 256, "grew to %zu buckets", kt.n_buckets);
    li_key_table_free(&kt);
    TEST_END();
}

int main(void) {
    test_rng_init(&rng, "test-key-table");
    test_basic();
    test_duplicates_and_growth();
    test_random();
    return test_summary();
}
