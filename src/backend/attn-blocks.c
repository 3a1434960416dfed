// attn-blocks.c — the plan of attn-blocks.h: row groups, key segments, and the blocks between
// them. Host work only, O(T + n_pages + groups x segments).
#include <stdlib.h>
#include <string.h>

#include "attn-blocks.h"
#include "page-word.h"

// Grows *p to hold n elements of `size` bytes; false on allocation failure.
static bool grow(void **p, int *cap, int n, size_t size) {
    if (n <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

void li_attn_blocks_free(li_attn_blocks *b) {
    free(b->groups);
    free(b->segs);
    free(b->entries);
    free(b->group_first);
    free(b->group_entries);
    memset(b, 0, sizeof *b);
}

// Segments: a new one starts where Δ changes or after a page that is not full.
static bool plan_segments(li_attn_blocks *b, const uint64_t *pages, int n_pages, int P) {
    b->n_segs = 0;
    int64_t k = 0;
    for (int p = 0; p < n_pages; p++) {
        int cnt = li_page_count(pages[p]);
        int64_t delta = li_page_delta(pages[p]);
        li_attn_segment *last = b->n_segs ? &b->segs[b->n_segs - 1] : NULL;
        bool joins = last && last->delta == delta && last->n_keys == last->n_pages * P;
        if (!joins) {
            if (!grow((void **)&b->segs, &b->cap_segs, b->n_segs + 1, sizeof *b->segs))
                return false;
            last = &b->segs[b->n_segs++];
            *last = (li_attn_segment){.k0 = k, .delta = delta, .page0 = p};
        }
        last->n_keys += cnt;
        last->n_pages++;
        k += cnt;
    }
    return true;
}

// Groups: maximal runs of rows with the same first key and n_visible rising by one per row.
static bool plan_groups(li_attn_blocks *b, const int32_t *kv_first, const int32_t *n_visible,
                        int T) {
    b->n_groups = 0;
    b->max_rows = 0;
    for (int t = 0; t < T; t++) {
        int f = kv_first ? kv_first[t] : 0;
        li_attn_group *g = b->n_groups ? &b->groups[b->n_groups - 1] : NULL;
        bool joins = g && (kv_first ? kv_first[g->t0] : 0) == f &&
                     n_visible[t] == n_visible[t - 1] + 1;
        if (!joins) {
            if (!grow((void **)&b->groups, &b->cap_groups, b->n_groups + 1, sizeof *b->groups))
                return false;
            g = &b->groups[b->n_groups++];
            *g = (li_attn_group){.t0 = t};
        }
        g->n++;
        if (g->n > b->max_rows) b->max_rows = g->n;
    }
    return true;
}

static bool add_entry(li_attn_blocks *b, li_attn_entry e) {
    if (!grow((void **)&b->entries, &b->cap_entries, b->n_entries + 1, sizeof *b->entries))
        return false;
    b->entries[b->n_entries++] = e;
    return true;
}

bool li_attn_blocks_plan(li_attn_blocks *b, const uint64_t *pages, int n_pages, int P,
                         const int32_t *kv_first, const int32_t *n_visible, int T) {
    b->n_entries = b->n_noncausal = 0;
    b->max_keys = 0;
    if (T <= 0 || n_pages <= 0 || !plan_segments(b, pages, n_pages, P) ||
        !plan_groups(b, kv_first, n_visible, T))
        return false;
    // two passes over (group, segment): the non-causal blocks, then the causal ones
    for (int pass = 0; pass < 2; pass++) {
        for (int g = 0; g < b->n_groups; g++) {
            const li_attn_group *gr = &b->groups[g];
            int64_t f = kv_first ? kv_first[gr->t0] : 0;
            int64_t v0 = n_visible[gr->t0], v1 = n_visible[gr->t0 + gr->n - 1];
            if (f < 0 || f >= v0) return false;  // a row that sees no key
            bool covered = false;  // has the diagonal [v0, v1) found its segment?
            for (int s = 0; s < b->n_segs; s++) {
                const li_attn_segment *sg = &b->segs[s];
                int64_t a = sg->k0 > f ? sg->k0 : f;
                int64_t e = sg->k0 + sg->n_keys < v1 ? sg->k0 + sg->n_keys : v1;
                if (a >= e) continue;
                bool causal = e > v0;
                // the diagonal must end in this segment and start after its first key
                if (causal && (e != v1 || a >= v0)) return false;
                covered |= causal;
                if (causal != (pass == 1)) continue;
                if (!add_entry(b, (li_attn_entry){.group = g, .seg = s, .key0 = a,
                                                  .n_keys = (int)(e - a), .causal = causal}))
                    return false;
                if (e - a > b->max_keys) b->max_keys = (int)(e - a);
            }
            // rows past the first see keys beyond v0: they must lie in some segment
            if (v1 > v0 && !covered) return false;
        }
        if (pass == 0) b->n_noncausal = b->n_entries;
    }
    // each group's entries, for the merge
    void *gf = realloc(b->group_first, (size_t)(b->n_groups + 1) * sizeof(int));
    if (!gf) return false;
    b->group_first = gf;
    void *ge = realloc(b->group_entries, (size_t)(b->n_entries > 0 ? b->n_entries : 1) * sizeof(int));
    if (!ge) return false;
    b->group_entries = ge;
    int k = 0;
    for (int g = 0; g < b->n_groups; g++) {
        b->group_first[g] = k;
        for (int e = 0; e < b->n_entries; e++)
            if (b->entries[e].group == g) b->group_entries[k++] = e;
    }
    b->group_first[b->n_groups] = k;
    return b->n_entries > 0;
}
