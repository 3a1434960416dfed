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
// Tested by tests/test-repair.c.
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

// blend's selection pass over one request: every token of its repaired blocks runs in context,
// in the scheduler's steps and batched with their other rows (li_batch.n_tail), through layers
// [0, layer) and the K/V store of the check layer `layer`, into the overlay; li_repair_select
// then ranks the tokens by how far that K moved from the cached one.
typedef struct {
    li_repair_rows rows;  // the pass's rows: every repaired token, position order, overlay slots
    int n_done;           // rows run so far
    int layer;            // the check layer, in [1, L); 0: no pass (a model of one layer)
    float *ref;           // (rows.n, Hkv*Dh) the check layer's cached K of each row, at the true
                          // position, read before the pass overwrote it
} li_repair_pass;

// Overlay pages a block of n tokens at offset delta needs reserved (0: not repaired).
int li_repair_pages(const li_repair *rp, int n, int64_t delta, int page_size);
// Fills the overlay pages of blocks whose ovl is set (each page given by li_repair_pages,
// allocated by the caller) with the cached K/V. head: appends the rows to recompute to *rows;
// the pass stays empty. blend: gives the selection pass to run in *pass (done at once when it
// has nothing to run); li_repair_select finishes once it has run.
li_status li_repair_begin(li_model *m, const li_repair *rp, li_repair_block *blocks, int n_blocks,
                          li_repair_pass *pass, li_repair_rows *rows);
// After the pass ran (its forwards synced): chooses the tokens, appends their rows to *rows,
// unreferences the overlay pages left with no chosen token (set to -1: the shared copy serves
// them), gives the unchosen tokens of the others their cached K/V back and frees the pass.
// head: nothing to do.
li_status li_repair_select(li_model *m, const li_repair *rp, li_repair_block *blocks,
                           int n_blocks, li_repair_pass *pass, li_repair_rows *rows);
void li_repair_pass_free(li_repair_pass *pass);
void li_repair_rows_free(li_repair_rows *rows);
// The block's page-table words (attention's view) into out (its pages; returns how many): the
// overlay pages (K at true positions, Δ 0) where it has them, the shared copy's (Δ = rotate)
// elsewhere.
int li_repair_table(const li_repair_block *b, int page_size, uint64_t *out);

#endif
