// repair.c — cross-document repair (repair.h): the option's parsing, the overlay pages' fill, and
// blend's selection. head:K recomputes each repaired document's first K tokens (EPIC); blend:R
// runs every repaired token in context through layers 0-1 and layer 2's K/V (the selection pass,
// which the scheduler batches with its other rows), compares the layer-2 K it gets with the
// cached one (rotated to the true position) and recomputes the R fraction of tokens that deviate
// most (CacheBlend, whose check layer is 1). The recomputation itself is the scheduler's: the rows this file returns go
// ahead of the query rows, through every layer, into the overlay slots. Not here: the forward
// (the pass's rows are li_batch's tail, src/model/arch-llama.c). Tested by tests/test-repair.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repair.h"

#define REPAIR_HEAD_K 16        // one page at the default page size
#define REPAIR_BLEND_R 0.15f    // CacheBlend's default recompute ratio
#define REPAIR_SELECT_LAYER 2   // the check layer (CacheBlend: 1; 2 measured better, docs/RAG.md)

li_status li_repair_parse(const char *s, li_repair *out) {
    li_repair r = {0};
    const char *arg = s ? strchr(s, ':') : NULL;
    size_t len = s ? (arg ? (size_t)(arg - s) : strlen(s)) : 0;
    char *end = NULL;
    if (!s) return li_error_set(LI_ERR_INVALID_ARG, "repair: no value (none, head[:K], blend[:R])");
    if (len == 4 && !strncmp(s, "none", 4) && !arg) {
        r.mode = LI_REPAIR_NONE;
    } else if (len == 4 && !strncmp(s, "head", 4)) {
        r.mode = LI_REPAIR_HEAD;
        r.head_k = REPAIR_HEAD_K;
        if (arg) {
            long k = strtol(arg + 1, &end, 10);
            if (end == arg + 1 || *end || k < 1 || k > (1 << 24))
                return li_error_set(LI_ERR_INVALID_ARG, "repair '%s': K must be a whole number "
                                    "of tokens >= 1 (head:16)", s);
            r.head_k = (int)k;
        }
    } else if (len == 5 && !strncmp(s, "blend", 5)) {
        r.mode = LI_REPAIR_BLEND;
        r.blend_r = REPAIR_BLEND_R;
        if (arg) {
            double x = strtod(arg + 1, &end);
            if (end == arg + 1 || *end || !(x > 0 && x <= 1))
                return li_error_set(LI_ERR_INVALID_ARG, "repair '%s': R must be a fraction of "
                                    "the document tokens in (0, 1] (blend:0.15)", s);
            r.blend_r = (float)x;
        }
    } else {
        return li_error_set(LI_ERR_INVALID_ARG, "unknown repair '%s' (none, head[:K], blend[:R])",
                            s);
    }
    *out = r;
    return LI_OK;
}

void li_repair_format(const li_repair *r, char *buf, size_t n) {
    if (r->mode == LI_REPAIR_HEAD) snprintf(buf, n, "head:%d", r->head_k);
    else if (r->mode == LI_REPAIR_BLEND) snprintf(buf, n, "blend:%g", (double)r->blend_r);
    else snprintf(buf, n, "none");
}

// Tokens [0, head) of a block that head:K recomputes.
static int head_of(const li_repair *rp, int n) { return rp->head_k < n ? rp->head_k : n; }

int li_repair_pages(const li_repair *rp, int n, int64_t delta, int page_size) {
    if (rp->mode == LI_REPAIR_NONE || delta == 0) return 0;
    int k = rp->mode == LI_REPAIR_HEAD ? head_of(rp, n) : n;
    return (k + page_size - 1) / page_size;
}

static li_status rows_push(li_repair_rows *r, int32_t tok, int32_t pos, int64_t slot) {
    if (r->n == r->cap) {
        int c = r->cap ? 2 * r->cap : 256;
        int32_t *t = realloc(r->tok, (size_t)c * sizeof *t);
        if (t) r->tok = t;
        int32_t *p = realloc(r->pos, (size_t)c * sizeof *p);
        if (p) r->pos = p;
        int64_t *s = realloc(r->slot, (size_t)c * sizeof *s);
        if (s) r->slot = s;
        if (!t || !p || !s) return li_error_set(LI_ERR_OOM, "out of memory for the repair's rows");
        r->cap = c;
    }
    r->tok[r->n] = tok;
    r->pos[r->n] = pos;
    r->slot[r->n++] = slot;
    return LI_OK;
}

void li_repair_rows_free(li_repair_rows *r) {
    free(r->tok);
    free(r->pos);
    free(r->slot);
    memset(r, 0, sizeof *r);
}

static int page_count(const li_repair_block *b, int k, int P) {
    return b->n - k * P < P ? b->n - k * P : P;
}

// Copies page k of block b into its overlay page: every layer's V, and K rotated from the
// copy's stored positions to the true ones.
static void copy_page(li_model *m, const li_repair_block *b, int k) {
    const int P = m->kv.storage.page_size;
    m->be->ops->kv_copy_rotate(m->be, &m->kv.storage, b->shared[k], b->ovl[k],
                               page_count(b, k, P), b->rotate, &m->llama.rope);
}

int li_repair_table(const li_repair_block *b, int P, uint64_t *out) {
    int np = (b->n + P - 1) / P;
    for (int k = 0; k < np; k++)
        out[k] = k < b->n_ovl && b->ovl[k] >= 0 ? li_page_word(b->ovl[k], page_count(b, k, P), 0)
                                          : li_page_word(b->shared[k], page_count(b, k, P),
                                                         b->rotate);
    return np;
}

// K of layer il for every token of the repaired blocks' overlay pages, in position order:
// out (N, Hkv*Dh) f32. page (Hkv, P, Dh) host scratch of the stored dtype. Per token Hkv Dh
// elements (SmolLM2: 768 bytes in f32) of one layer of the 30.
static li_status read_k(li_model *m, const li_repair_block *blocks, int n_blocks, int il,
                        float *out, void *page) {
    const li_kv_storage *kv = &m->kv.storage;
    const int P = kv->page_size, Hkv = kv->n_head_kv, Dh = kv->head_dim;
    const size_t eb = li_kv_elem_bytes(kv->dtype);
    size_t t = 0;
    for (int bi = 0; bi < n_blocks; bi++) {
        const li_repair_block *b = &blocks[bi];
        if (!b->ovl) continue;
        for (int k = 0; k * P < b->n; k++) {
            size_t off = li_kv_offset(kv, b->ovl[k], il, 0, 0, 0) * eb;
            LI_TRY(li_be_download(m->be, page, (const char *)kv->data + off,
                                  (size_t)Hkv * P * Dh * eb));
            for (int s = 0; s < page_count(b, k, P); s++, t++)
                for (int h = 0; h < Hkv; h++)
                    for (int d = 0; d < Dh; d++) {
                        size_t i = ((size_t)h * P + s) * Dh + d;
                        out[(t * Hkv + h) * Dh + d] =
                            kv->dtype == LI_DTYPE_BF16 ? li_bf16_to_f32(((const uint16_t *)page)[i])
                                                       : ((const float *)page)[i];
                    }
        }
    }
    return LI_OK;
}

void li_repair_pass_free(li_repair_pass *pass) {
    li_repair_rows_free(&pass->rows);
    free(pass->ref);
    memset(pass, 0, sizeof *pass);
}

li_status li_repair_begin(li_model *m, const li_repair *rp, li_repair_block *blocks, int n_blocks,
                          li_repair_pass *pass, li_repair_rows *rows) {
    const li_kv_storage *kv = &m->kv.storage;
    const int P = kv->page_size, L = m->llama.hp.n_layer;
    li_repair_rows *out = rp->mode == LI_REPAIR_HEAD ? rows : &pass->rows;
    void *page = NULL;
    li_status rc = LI_OK;
    memset(pass, 0, sizeof *pass);
    for (int bi = 0; bi < n_blocks && rc == LI_OK; bi++) {
        li_repair_block *b = &blocks[bi];
        if (!b->ovl) continue;
        int n = rp->mode == LI_REPAIR_HEAD ? head_of(rp, b->n) : b->n;
        for (int j = 0; j < n && rc == LI_OK; j++)
            rc = rows_push(out, b->tokens[j], (int32_t)(b->delta + j), b->ovl[j / P] * P + j % P);
        // the cached K/V of every overlay page's tokens (head: only pages it does not fill whole)
        for (int k = 0; k < b->n_ovl; k++)
            if (rp->mode == LI_REPAIR_BLEND || n < k * P + page_count(b, k, P)) copy_page(m, b, k);
    }
    if (rc != LI_OK || rp->mode == LI_REPAIR_HEAD || pass->rows.n == 0) goto out;
    // blend: the check layer's cached K, before the pass overwrites it in the overlay
    pass->layer = L > REPAIR_SELECT_LAYER ? REPAIR_SELECT_LAYER : L - 1;
    if (pass->layer < 1) {  // one layer: its K/V do not depend on the context, nothing to run
        pass->n_done = pass->rows.n;
        goto out;
    }
    const size_t row = (size_t)kv->n_head_kv * kv->head_dim;
    pass->ref = malloc((size_t)pass->rows.n * row * sizeof *pass->ref);
    page = malloc(row * (size_t)P * li_kv_elem_bytes(kv->dtype));
    if (!pass->ref || !page) {
        rc = li_error_set(LI_ERR_OOM, "out of memory for the repair's selection");
        goto out;
    }
    if ((rc = li_be_sync(m->be)) == LI_OK)
        rc = read_k(m, blocks, n_blocks, pass->layer, pass->ref, page);
out:
    free(page);
    if (rc != LI_OK) li_repair_pass_free(pass);
    return rc;
}

typedef struct {
    float dev;
    int i;
} scored;

// Largest deviation first; ties by position, so the selection is deterministic.
static int by_deviation(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->dev != y->dev) return x->dev > y->dev ? -1 : 1;
    return x->i - y->i;
}

li_status li_repair_select(li_model *m, const li_repair *rp, li_repair_block *blocks,
                           int n_blocks, li_repair_pass *pass, li_repair_rows *rows) {
    const li_kv_storage *kv = &m->kv.storage;
    const int P = kv->page_size, N = pass->rows.n;
    const size_t row = (size_t)kv->n_head_kv * kv->head_dim;
    float *fresh = NULL;
    void *page = NULL;
    scored *order = NULL;
    bool *sel = NULL;
    li_status rc = LI_OK;
    if (rp->mode != LI_REPAIR_BLEND || N == 0) goto out;
    LI_ASSERT(pass->n_done == N);
    order = malloc((size_t)N * sizeof *order);
    sel = calloc((size_t)N, sizeof *sel);
    if (pass->layer > 0) {
        fresh = malloc((size_t)N * row * sizeof *fresh);
        page = malloc(row * (size_t)P * li_kv_elem_bytes(kv->dtype));
    }
    if (!order || !sel || (pass->layer > 0 && (!fresh || !page))) {
        rc = li_error_set(LI_ERR_OOM, "out of memory for the repair's selection");
        goto out;
    }
    if (pass->layer > 0 && (rc = read_k(m, blocks, n_blocks, pass->layer, fresh, page)) != LI_OK)
        goto out;
    // the squared distance of the in-context K to the cached K (LMCache's blender; V, K and V,
    // and each document's first 16 tokens ranked first measured no better: docs/RAG.md)
    for (int t = 0; t < N; t++) {
        double s = 0;
        for (size_t j = 0; pass->layer > 0 && j < row; j++) {
            double d = (double)fresh[t * row + j] - pass->ref[t * row + j];
            s += d * d;
        }
        order[t] = (scored){(float)s, t};
    }
    qsort(order, (size_t)N, sizeof *order, by_deviation);
    int n_sel = (int)ceil((double)rp->blend_r * N - 1e-9);  // R × N, an exact product not rounded up
    if (n_sel < 1) n_sel = 1;
    if (n_sel > N) n_sel = N;
    for (int i = 0; i < n_sel; i++) sel[order[i].i] = true;
    // pages with no chosen token go back to the shared copy; the others take the cached K/V of
    // their unchosen tokens back (the pass wrote layers [0, layer] of every token): keeping the
    // pass's, full attention's own, measured worse (docs/RAG.md "Repair"). A page copy is
    // ~P * L * 2 Hkv Dh elements (SmolLM2, f32: 720 KiB), ~1 % of the pass's time per page.
    int t = 0;
    for (int bi = 0; bi < n_blocks; bi++) {
        li_repair_block *b = &blocks[bi];
        if (!b->ovl) continue;
        for (int k = 0; k * P < b->n; k++) {
            int cnt = page_count(b, k, P), n_chosen = 0;
            for (int s = 0; s < cnt; s++) n_chosen += sel[t + s];
            t += cnt;
            if (n_chosen == 0) {
                li_kv_page_unref(&m->kv, b->ovl[k]);
                b->ovl[k] = -1;
            } else if (n_chosen < cnt) {
                copy_page(m, b, k);
            }
        }
    }
    for (int i = 0; i < N && rc == LI_OK; i++)
        if (sel[i]) rc = rows_push(rows, pass->rows.tok[i], pass->rows.pos[i], pass->rows.slot[i]);
out:
    free(fresh);
    free(page);
    free(order);
    free(sel);
    li_repair_pass_free(pass);
    return rc;
}
