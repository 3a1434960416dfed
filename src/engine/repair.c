// repair.c — cross-document repair (repair.h): the option's parsing, the overlay pages' fill, and
// blend's selection. head:K recomputes each repaired document's first K tokens (EPIC); blend:R
// runs layers 0 and 1 of every repaired token in context, compares the layer-1 K it gets with
// the cached one (rotated to the true position) and recomputes the R fraction of tokens that
// deviate most (CacheBlend). The recomputation itself is the scheduler's: the rows this file
// returns go ahead of the query rows, through every layer, into the overlay slots.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repair.h"

#define REPAIR_HEAD_K 16        // one page at the default page size
#define REPAIR_BLEND_R 0.15f    // CacheBlend's default recompute ratio
#define REPAIR_SELECT_LAYER 1   // CacheBlend measures the deviation of layer 1's K

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
// out (N, Hkv, Dh) f32. page (Hkv, P, Dh) host scratch of the stored dtype.
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

// Layers 0 .. n_layers - 1 of every repaired token in context: rows at their true positions,
// writing into the overlay pages, each seeing every key before it (the unrepaired blocks as
// cached, the repaired ones as this pass rewrites them).
static li_status run_in_context(li_model *m, li_repair_block *blocks, int n_blocks,
                                const li_repair_rows *all, int n_layers) {
    const int P = m->kv.storage.page_size;
    int n_words = 0;
    for (int bi = 0; bi < n_blocks; bi++) n_words += (blocks[bi].n + P - 1) / P;
    uint64_t *table = malloc((size_t)n_words * sizeof *table);
    int32_t *nvis = malloc((size_t)m->n_batch * sizeof *nvis);
    li_status rc = LI_OK;
    if (!table || !nvis) {
        rc = li_error_set(LI_ERR_OOM, "out of memory for the repair's selection pass");
        goto out;
    }
    int w = 0;
    for (int bi = 0; bi < n_blocks; bi++) w += li_repair_table(&blocks[bi], P, table + w);
    for (int t0 = 0; t0 < all->n && rc == LI_OK; t0 += m->n_batch) {
        int T = all->n - t0 < m->n_batch ? all->n - t0 : m->n_batch;
        for (int i = 0; i < T; i++) nvis[i] = all->pos[t0 + i] + 1;
        li_batch_seq seq = {.t0 = 0, .n = T, .kv = {.pages = table, .n_pages = n_words}};
        li_batch b = {.n_tokens = T, .tokens = all->tok + t0, .pos = all->pos + t0,
                      .slot = all->slot + t0, .n_visible = nvis, .n_seqs = 1, .seqs = &seq,
                      .n_layers = n_layers};
        rc = li_llama_forward(&m->llama, &m->scratch, &m->kv.storage, &b, m->logits);
    }
    if (rc == LI_OK) rc = li_be_sync(m->be);
out:
    free(table);
    free(nvis);
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

// blend: which of the repaired tokens (position order, all->n of them) to recompute: sel (N).
static li_status select_blend(li_model *m, const li_repair *rp, li_repair_block *blocks,
                              int n_blocks, const li_repair_rows *all, bool *sel) {
    const li_kv_storage *kv = &m->kv.storage;
    const int N = all->n, L = m->llama.hp.n_layer;
    const int il = L > REPAIR_SELECT_LAYER ? REPAIR_SELECT_LAYER : L - 1;
    const size_t row = (size_t)kv->n_head_kv * kv->head_dim;
    float *cached = malloc((size_t)N * row * sizeof *cached);
    float *fresh = malloc((size_t)N * row * sizeof *fresh);
    void *page = malloc(row * (size_t)kv->page_size * li_kv_elem_bytes(kv->dtype));
    scored *order = malloc((size_t)N * sizeof *order);
    li_status rc = LI_OK;
    if (!cached || !fresh || !page || !order) {
        rc = li_error_set(LI_ERR_OOM, "out of memory for the repair's selection");
        goto out;
    }
    // the cached K at true positions (the overlay holds its copy), then the K in context
    if ((rc = li_be_sync(m->be)) != LI_OK ||
        (rc = read_k(m, blocks, n_blocks, il, cached, page)) != LI_OK ||
        (rc = run_in_context(m, blocks, n_blocks, all, il + 1)) != LI_OK ||
        (rc = read_k(m, blocks, n_blocks, il, fresh, page)) != LI_OK)
        goto out;
    for (int t = 0; t < N; t++) {
        double s = 0;
        for (size_t j = 0; j < row; j++) {
            double d = (double)fresh[t * row + j] - cached[t * row + j];
            s += d * d;
        }
        order[t] = (scored){(float)s, t};
    }
    qsort(order, (size_t)N, sizeof *order, by_deviation);
    int n_sel = (int)ceil((double)rp->blend_r * N - 1e-9);  // R × N, an exact product not rounded up
    if (n_sel < 1) n_sel = 1;
    if (n_sel > N) n_sel = N;
    memset(sel, 0, (size_t)N * sizeof *sel);
    for (int i = 0; i < n_sel; i++) sel[order[i].i] = true;
out:
    free(cached);
    free(fresh);
    free(page);
    free(order);
    return rc;
}

li_status li_repair_plan(li_model *m, const li_repair *rp, li_repair_block *blocks, int n_blocks,
                         li_repair_rows *rows) {
    const int P = m->kv.storage.page_size;
    li_repair_rows all = {0};  // every token the repair may recompute, position order
    bool *sel = NULL;
    li_status rc = LI_OK;
    for (int bi = 0; bi < n_blocks && rc == LI_OK; bi++) {
        const li_repair_block *b = &blocks[bi];
        if (!b->ovl) continue;
        int n = rp->mode == LI_REPAIR_HEAD ? head_of(rp, b->n) : b->n;
        for (int j = 0; j < n && rc == LI_OK; j++)
            rc = rows_push(&all, b->tokens[j], (int32_t)(b->delta + j), b->ovl[j / P] * P + j % P);
    }
    if (rc != LI_OK || all.n == 0) goto out;
    if (!(sel = malloc((size_t)all.n * sizeof *sel))) {
        rc = li_error_set(LI_ERR_OOM, "out of memory for the repair");
        goto out;
    }
    // the cached K/V of every overlay page's tokens (head: only pages it does not fill whole)
    for (int bi = 0; bi < n_blocks; bi++) {
        li_repair_block *b = &blocks[bi];
        if (!b->ovl) continue;
        for (int k = 0; k < b->n_ovl; k++)
            if (rp->mode == LI_REPAIR_BLEND || head_of(rp, b->n) < k * P + page_count(b, k, P))
                copy_page(m, b, k);
    }
    if (rp->mode == LI_REPAIR_HEAD) {
        for (int i = 0; i < all.n; i++) sel[i] = true;
    } else {
        if ((rc = select_blend(m, rp, blocks, n_blocks, &all, sel)) != LI_OK) goto out;
        // the selection pass wrote layers 0 .. 1 of every token: the unselected ones take their
        // cached K/V back; pages with no selected token go back to the shared copy
        int t = 0;
        for (int bi = 0; bi < n_blocks; bi++) {
            li_repair_block *b = &blocks[bi];
            if (!b->ovl) continue;
            for (int k = 0; k * P < b->n; k++) {
                int cnt = page_count(b, k, P), n_sel = 0;
                for (int s = 0; s < cnt; s++) n_sel += sel[t + s];
                t += cnt;
                if (n_sel == 0) {
                    li_kv_page_unref(&m->kv, b->ovl[k]);
                    b->ovl[k] = -1;
                } else if (n_sel < cnt) {
                    copy_page(m, b, k);
                }
            }
        }
    }
    for (int i = 0; i < all.n && rc == LI_OK; i++)
        if (sel[i]) rc = rows_push(rows, all.tok[i], all.pos[i], all.slot[i]);
out:
    free(sel);
    li_repair_rows_free(&all);
    return rc;
}
