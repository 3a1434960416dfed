// repair.h — cross-document repair of block attention (li_repair in lazyinfer.h; docs/RAG.md
// "Repair"): which document tokens a request recomputes in its own context, and the overlay pages
// their K/V go to. The scheduler owns the requests; this file sees a request's blocks only
// through li_repair_block, and gives back the rows to run (at their true positions, writing into
// the overlay) ahead of the request's query rows.
//
// The overlay is page-granular, so that attention needs no mask: a document page holding a
// recomputed token is replaced, in this request's page table only, by an overlay page that holds
// the cached K/V of the page's other tokens (copied with K rotated to its true position,
// kv_copy_rotate) and the recomputed K/V of its repaired ones (written by the forward). The
// shared copy is read, never written: one physical copy still serves every request.
// Tested by tests/test-rag.c ("repair").
#ifndef LI_REPAIR_H
#define LI_REPAIR_H

#include "engine.h"

// One block of a request as the repair sees it.
typedef struct {
    const int32_t *tokens;  // (n)
    int n;
    int64_t delta;          // global position of token 0
    const int64_t *shared;  // (pages of n) the cached copy's physical pages
    int64_t rotate;         // rotation from the copy's stored K to the true positions: lazy Δ,
                            // copy 0
    int64_t *ovl;           // (n_ovl) overlay page of each of the block's first n_ovl pages, -1
    int n_ovl;              // for none; NULL, 0: the block is not repaired (Δ = 0)
} li_repair_block;

// The rows a repair runs, in position order: token, true position, overlay slot.
typedef struct {
    int32_t *tok, *pos;
    int64_t *slot;
    int n, cap;
} li_repair_rows;

// Overlay pages a block of n tokens at offset delta needs reserved (0: not repaired).
int li_repair_pages(const li_repair *rp, int n, int64_t delta, int page_size);
// Fills the overlay pages of blocks whose ovl is set (each page given by li_repair_pages,
// allocated by the caller) and appends the rows to recompute to *rows. Pages the repair turns
// out not to need are unreferenced and set to -1. Runs forwards of its own for blend's
// selection (layers 0 and 1 of every repaired token), so it must run between steps' forwards.
li_status li_repair_plan(li_model *m, const li_repair *rp, li_repair_block *blocks, int n_blocks,
                         li_repair_rows *rows);
void li_repair_rows_free(li_repair_rows *rows);
// The block's page-table words (attention's view) into out (its pages; returns how many): the
// overlay pages (K at true positions, Δ 0) where it has them, the shared copy's (Δ = rotate)
// elsewhere.
int li_repair_table(const li_repair_block *b, int page_size, uint64_t *out);

#endif
