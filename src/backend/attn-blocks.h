// attn-blocks.h — one paged attention call (backend.h `attention`) cut into blocks that a library
// attention (cuDNN SDPA) can run: plain softmax attention of a group of query rows over a run of
// keys that all carry the same RoPE offset Δ, either every row seeing every key of the run
// (non-causal) or the run ending on the rows' causal diagonal (bottom-right causal).
//
// Why this is exact (docs/ARCHITECTURE.md §3.3): a page's K is stored rotated at its
// local position j and is used at position Δ + j. For query row i, rotated at i,
//     ⟨R(i) q, R(Δ + j) k⟩ = ⟨R(i − Δ) q, R(j) k⟩ = ⟨R(−Δ) (R(i) q), stored k⟩,
// so a block runs over the stored keys with the query rotated back by Δ. The blocks of a row are
// merged by their log-sum-exp: with m_e = the block's softmax log-normaliser (LSE) and O_e its
// normalised output, out = Σ_e exp(m_e − M) O_e / Σ_e exp(m_e − M), M = max_e m_e — what one
// softmax over the union of the keys gives.
//
// The plan is host work over host copies of the page table and the rows' visibility; it decides
// nothing about memory or kernels. Tested on the CPU by tests/test-attn-blocks.c (plans executed
// with fp64 arithmetic against ops-ref.c's attention).
#ifndef LI_ATTN_BLOCKS_H
#define LI_ATTN_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

// Rows [t0, t0 + n) of the call that see the same first key and one more key per row.
typedef struct {
    int t0, n;
} li_attn_group;

// A run of logical keys [k0, k0 + n_keys) whose pages are consecutive in the page table
// (page0 .. page0 + n_pages - 1), share Δ, and are full except the last one.
typedef struct {
    int64_t k0, delta;
    int n_keys, page0, n_pages;
} li_attn_segment;

// One block: group `group`'s rows over keys [key0, key0 + n_keys) of segment `seg`.
typedef struct {
    int group, seg;
    int64_t key0;
    int n_keys;
    bool causal;  // bottom-right causal: row r of the group sees the first n_keys - (n - 1 - r)
} li_attn_entry;

typedef struct {
    li_attn_group *groups;
    li_attn_segment *segs;
    li_attn_entry *entries;  // the non-causal ones first, then the causal ones
    int n_groups, n_segs, n_entries, n_noncausal;
    // per group, its entries: entry ids group_entries[group_first[g] .. group_first[g + 1])
    int *group_first, *group_entries;
    int max_rows;         // rows of the largest group
    int max_keys;         // keys of the largest entry
    int cap_groups, cap_segs, cap_entries;  // allocated sizes (li_attn_blocks_free)
} li_attn_blocks;

// Plans the call of T rows over the page table `pages` (n_pages words, page size P): row t sees
// logical keys [kv_first[t] (0 when kv_first is NULL), n_visible[t]). Returns false (nothing to
// use; not an error) when the pattern has no such split — a causal diagonal that crosses a
// change of Δ or a partly filled page, rows that see no key — or on allocation failure; the
// caller then runs its own kernel. b's arrays are grown as needed and reused between calls.
bool li_attn_blocks_plan(li_attn_blocks *b, const uint64_t *pages, int n_pages, int P,
                         const int32_t *kv_first, const int32_t *n_visible, int T);
void li_attn_blocks_free(li_attn_blocks *b);

#endif
