// tier-index.c — one tier's index (see tier-index.h): a key table (key-table.h) of entries and
// a binary min-heap by (priority, last_use) for the victim. LRU's priority is the use clock
// itself, so both policies share the heap; GDSF's is H = L + freq × cost / bytes.
#include <stdlib.h>
#include <string.h>

#include "tier-index.h"

typedef struct node {
    li_tier_entry e;
    li_key_link link;  // by key (the table's use order is unused: the heap orders victims)
    size_t heap_pos;   // index in t->heap
} node;

struct li_tier_index {
    li_tier_policy policy;
    int64_t budget, used, n;
    double aging;         // GDSF's L
    uint64_t clock;       // bumped on every put and touch
    li_key_table table;   // every entry, by key
    node **heap;          // (cap) min-heap of entries
    size_t cap;
};

li_status li_tier_policy_parse(const char *s, li_tier_policy *out) {
    if (!strcmp(s, "lru")) *out = LI_TIER_LRU;
    else if (!strcmp(s, "gdsf")) *out = LI_TIER_GDSF;
    else return li_error_set(LI_ERR_INVALID_ARG, "eviction policy '%s': want lru or gdsf", s);
    return LI_OK;
}

const char *li_tier_policy_name(li_tier_policy p) { return p == LI_TIER_GDSF ? "gdsf" : "lru"; }

// ---- heap ---------------------------------------------------------------------------------------

static bool before(const node *a, const node *b) {
    if (a->e.priority != b->e.priority) return a->e.priority < b->e.priority;
    return a->e.last_use < b->e.last_use;
}

static void heap_set(li_tier_index *t, size_t i, node *x) {
    t->heap[i] = x;
    x->heap_pos = i;
}

static void sift_up(li_tier_index *t, size_t i) {
    node *x = t->heap[i];
    while (i > 0 && before(x, t->heap[(i - 1) / 2])) {
        heap_set(t, i, t->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(t, i, x);
}

static void sift_down(li_tier_index *t, size_t i) {
    size_t n = (size_t)t->n;
    node *x = t->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const node *best = x;
        if (l < n && before(t->heap[l], best)) m = l, best = t->heap[l];
        if (l + 1 < n && before(t->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        heap_set(t, i, t->heap[m]);
        i = m;
    }
    heap_set(t, i, x);
}

// Restores the heap after the entry at i changed priority (either way).
static void heap_fix(li_tier_index *t, size_t i) {
    node *x = t->heap[i];
    sift_up(t, i);
    sift_down(t, x->heap_pos);
}

static li_status heap_grow(li_tier_index *t) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    node **h = realloc(t->heap, cap * sizeof *h);
    if (!h)
        return li_error_set(LI_ERR_OOM, "out of memory growing a tier index to %zu entries", cap);
    t->heap = h;
    t->cap = cap;
    return LI_OK;
}

// ---- table --------------------------------------------------------------------------------------

static node *find(const li_tier_index *t, const li_doc_key *k) {
    return LI_KEY_ENTRY(li_key_table_find(&t->table, k), node, link);
}

static void set_priority(li_tier_index *t, node *x) {
    x->e.last_use = ++t->clock;
    if (t->policy == LI_TIER_LRU) {
        x->e.priority = (double)x->e.last_use;
    } else {
        double bytes = x->e.bytes > 0 ? (double)x->e.bytes : 1.0;
        x->e.priority = t->aging + (double)x->e.freq * x->e.cost / bytes;
    }
}

static void unlink_node(li_tier_index *t, node *x) {
    li_key_table_remove(&t->table, &x->link);
    size_t i = x->heap_pos, last = (size_t)--t->n;
    if (i != last) {
        heap_set(t, i, t->heap[last]);
        heap_fix(t, i);
    }
    t->used -= x->e.bytes;
    free(x);
}

// ---- public -------------------------------------------------------------------------------------

li_status li_tier_index_init(li_tier_index **out, li_tier_policy policy, int64_t budget_bytes) {
    *out = NULL;
    if (budget_bytes <= 0)
        return li_error_set(LI_ERR_INVALID_ARG, "tier budget of %lld bytes: want > 0",
                            (long long)budget_bytes);
    li_tier_index *t = calloc(1, sizeof *t);
    if (!t) return li_error_set(LI_ERR_OOM, "out of memory for a tier index");
    t->policy = policy;
    t->budget = budget_bytes;
    li_key_table_init(&t->table, 64, "a tier index");
    *out = t;
    return LI_OK;
}

void li_tier_index_free(li_tier_index *t) {
    if (!t) return;
    for (int64_t i = 0; i < t->n; i++) free(t->heap[i]);
    free(t->heap);
    li_key_table_free(&t->table);
    free(t);
}

li_status li_tier_index_put(li_tier_index *t, const li_doc_key *key, int64_t bytes, double cost) {
    if (bytes < 0 || !(cost >= 0))
        return li_error_set(LI_ERR_INVALID_ARG, "tier entry of %lld bytes, cost %g: want >= 0",
                            (long long)bytes, cost);
    node *x = find(t, key);
    if (x) {
        t->used += bytes - x->e.bytes;
        x->e.bytes = bytes;
        x->e.cost = cost;
        x->e.freq++;
        set_priority(t, x);
        heap_fix(t, x->heap_pos);
        return LI_OK;
    }
    if ((size_t)t->n == t->cap) LI_TRY(heap_grow(t));
    x = calloc(1, sizeof *x);
    if (!x) return li_error_set(LI_ERR_OOM, "out of memory for a tier entry");
    x->e.key = *key;
    li_status rc = li_key_table_insert(&t->table, &x->link, &x->e.key);
    if (rc != LI_OK) {
        free(x);
        return rc;
    }
    x->e.bytes = bytes;
    x->e.cost = cost;
    x->e.freq = 1;
    set_priority(t, x);
    heap_set(t, (size_t)t->n++, x);
    sift_up(t, x->heap_pos);
    t->used += bytes;
    return LI_OK;
}

bool li_tier_index_touch(li_tier_index *t, const li_doc_key *key) {
    node *x = find(t, key);
    if (!x) return false;
    x->e.freq++;
    set_priority(t, x);
    heap_fix(t, x->heap_pos);
    return true;
}

bool li_tier_index_contains(const li_tier_index *t, const li_doc_key *key) {
    return find(t, key) != NULL;
}

const li_tier_entry *li_tier_index_get(const li_tier_index *t, const li_doc_key *key) {
    node *x = find(t, key);
    return x ? &x->e : NULL;
}

bool li_tier_index_remove(li_tier_index *t, const li_doc_key *key) {
    node *x = find(t, key);
    if (!x) return false;
    unlink_node(t, x);
    return true;
}

void li_tier_index_pin(li_tier_index *t, const li_doc_key *key) {
    node *x = find(t, key);
    LI_ASSERT(x);
    x->e.pins++;
}

void li_tier_index_unpin(li_tier_index *t, const li_doc_key *key) {
    node *x = find(t, key);
    LI_ASSERT(x && x->e.pins > 0);
    x->e.pins--;
}

// The lowest unpinned entry: a walk of the heap in priority order that prunes subtrees below a
// candidate; with no pins it stops at the root. Pinned entries are few (those in flight).
static node *victim(li_tier_index *t) {
    if (t->n == 0) return NULL;
    if (t->heap[0]->e.pins == 0) return t->heap[0];
    node *best = NULL;
    size_t stack_cap = 64, sp = 0;
    size_t *stack = malloc(stack_cap * sizeof *stack);
    if (!stack) return NULL;  // out of memory: nothing evicted this time
    stack[sp++] = 0;
    while (sp) {
        size_t i = stack[--sp];
        node *x = t->heap[i];
        if (best && !before(x, best)) continue;  // its whole subtree comes after best
        if (x->e.pins == 0) {
            best = x;
            continue;
        }
        for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < (size_t)t->n; c++) {
            if (sp == stack_cap) {
                size_t *s2 = realloc(stack, 2 * stack_cap * sizeof *s2);
                if (!s2) break;
                stack = s2;
                stack_cap *= 2;
            }
            stack[sp++] = c;
        }
    }
    free(stack);
    return best;
}

const li_tier_entry *li_tier_index_pick_victim(li_tier_index *t) {
    node *x = victim(t);
    return x ? &x->e : NULL;
}

bool li_tier_index_evict(li_tier_index *t, li_tier_entry *out) {
    node *x = victim(t);
    if (!x) return false;
    if (t->policy == LI_TIER_GDSF) t->aging = x->e.priority;
    if (out) *out = x->e;
    unlink_node(t, x);
    return true;
}

bool li_tier_index_need_room(const li_tier_index *t, int64_t bytes) {
    return t->used + bytes > t->budget;
}

int64_t li_tier_index_bytes(const li_tier_index *t) { return t->used; }
int64_t li_tier_index_budget(const li_tier_index *t) { return t->budget; }
int64_t li_tier_index_count(const li_tier_index *t) { return t->n; }
double li_tier_index_clock(const li_tier_index *t) { return t->aging; }

void li_tier_index_foreach(const li_tier_index *t, void (*fn)(void *ctx, const li_tier_entry *e),
                           void *ctx) {
    for (int64_t i = 0; i < t->n; i++) fn(ctx, &t->heap[i]->e);
}
