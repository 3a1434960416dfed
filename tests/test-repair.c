// test-repair.c — the exactness of cross-document repair (li_repair; src/engine/repair.c):
//   - a repair that recomputes every document token (blend:1.0, head:K with K over every
//     document) gives full attention's first-token logits (NMSE <= 1e-10, fp32) and greedy
//     tokens, in lazy and copy, for several RoPE variants, GQA ratios and page sizes 1/16/64;
//   - head:16 gives the same logits in lazy and copy (one semantics, two cache layouts), and
//     differs from no repair (it does something);
//   - two requests sharing a document at different offsets with different neighbours, repaired
//     together in one batch, each get what they get alone, and the cached copy's bytes are the
//     same before and after (the overlay never writes the shared pages); lazy still holds one copy;
//   - a batch's tail rows (blend's selection pass batched with other rows, li_batch.n_tail) store
//     the K/V a whole forward stores up to the check layer and none after it, and leave the
//     other rows' logits as they are alone;
//   - li_repair_parse's errors, and a repair in a mode without a document cache.
// `repair none` is the code path of before (no overlay, no repair rows): tests/test-rag.c checks it.
// LI_TEST_BACKEND=cuda runs it on the GPU (bf16 KV and activations): logits within test-rag.c's
// bf16 bound, greedy tokens not compared (they may part at a near tie, as test-rag.c counts).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "engine/engine.h"
#include "lazyinfer.h"
#include "test.h"

// as test-rag.c: fp32 with different summation orders through 2 layers (K rotated at the true
// position by the rope op in full attention, by kv_copy_rotate for the overlay's cached tokens)
#define NMSE_TOL 1e-10
// a bf16 KV pool and bf16 GEMM inputs (device backends): test-rag.c's NMSE_TOL_BF16, chosen there
#define NMSE_TOL_BF16 1e-4
static const char *g_backend = "cpu";
static double g_tol = NMSE_TOL;
enum { N_PREDICT = 8, MAX_REQ = 4, MAX_DOCS = 4, V = 384 };

typedef struct {
    int n_docs;
    int doc[MAX_DOCS];
    const char *query;
} req_spec;

typedef struct {
    int32_t toks[MAX_REQ][N_PREDICT];
    int n_toks[MAX_REQ];
    float *logits[MAX_REQ];
    int n_repair[MAX_REQ];
} run_out;

typedef struct {
    const char *model;
    int page_size;
    li_doc docs[8];
    int32_t *ids[8];
    int n_docs;
} fixture;

static const req_spec reqs[] = {
    {3, {0, 1, 2}, "Which one?"},
    {3, {2, 0, 1}, "Which one?"},
    {2, {3, 4}, "Tell"},
};
enum { N_REQ = sizeof reqs / sizeof reqs[0] };

static li_model *load(const fixture *f, const char *mode, int max_seqs) {
    li_model_params p = li_model_default_params();
    p.path = f->model;
    p.page_size = f->page_size;
    p.cache_mode = mode;
    p.n_ctx = 1024;
    p.max_seqs = max_seqs;
    p.backend = g_backend;
    li_model *m = NULL;
    if (li_model_load(&m, &p) != LI_OK) fprintf(stderr, "load %s: %s\n", f->model, li_last_error());
    return m;
}

// Runs rs (n) in `mode` with repair `rp`, all submitted together when batch.
static bool run(const fixture *f, const char *mode, const char *repair, const req_spec *rs, int n,
                bool batch, run_out *out) {
    li_repair rp;
    if (li_repair_parse(repair, &rp) != LI_OK) return false;
    li_model *m = load(f, mode, batch ? n : 1);
    if (!m) return false;
    bool ok = true;
    test_tokens col[MAX_REQ];
    int64_t ids[MAX_REQ];
    for (int i = 0; i < n && ok; i++) {
        li_doc d[MAX_DOCS];
        for (int k = 0; k < rs[i].n_docs; k++) d[k] = f->docs[rs[i].doc[k]];
        col[i] = (test_tokens){out->toks[i], N_PREDICT, 0};
        li_request q = {.docs = d, .n_docs = rs[i].n_docs, .query = rs[i].query,
                        .first_logits = out->logits[i], .repair = rp};
        q.gen = test_greedy_params(N_PREDICT, &col[i]);
        ok = li_submit(m, &q, &ids[i]) == LI_OK;
        if (ok && !batch) ok = li_run(m) == LI_OK;
    }
    if (ok && batch) ok = li_run(m) == LI_OK;
    for (int i = 0; i < n && ok; i++) {
        li_request_result res;
        ok = li_result(m, ids[i], &res) == LI_OK && res.status == LI_OK;
        out->n_repair[i] = res.n_repair_tokens;
        if (!ok) fprintf(stderr, "%s %s request %d: %s\n", mode, repair, i, res.error);
    }
    if (!ok) fprintf(stderr, "%s %s: %s\n", mode, repair, li_last_error());
    for (int i = 0; i < n; i++) out->n_toks[i] = col[i].n;
    li_model_free(m);
    return ok;
}

static void out_alloc(run_out *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < MAX_REQ; i++) o->logits[i] = calloc(V, sizeof(float));
}
static void out_free(run_out *o) {
    for (int i = 0; i < MAX_REQ; i++) free(o->logits[i]);
}

// a's requests against ref's: logits within tol and the same greedy tokens.
static void check_same(const char *what, const run_out *a, const run_out *ref, int n, double tol) {
    for (int i = 0; i < n; i++) {
        double e = test_nmse(a->logits[i], ref->logits[i], V);
        CHECK(e <= (tol > g_tol ? tol : g_tol), "%s, request %d: nmse %g", what, i, e);
        CHECK(a->n_toks[i] == N_PREDICT, "%s, request %d: %d tokens", what, i, a->n_toks[i]);
        if (g_tol == NMSE_TOL)
            CHECK(!memcmp(a->toks[i], ref->toks[i], sizeof a->toks[i]),
                  "%s, request %d: greedy tokens differ", what, i);
    }
}

static void make_docs(fixture *f, li_rng *rng, const int *lens, int n) {
    f->n_docs = n;
    for (int d = 0; d < n; d++) {
        f->ids[d] = malloc((size_t)lens[d] * sizeof(int32_t));
        for (int i = 0; i < lens[d]; i++) f->ids[d][i] = (int32_t)(32 + li_rng_u64(rng) % 224);
        f->docs[d] = (li_doc){.ids = f->ids[d], .n_ids = lens[d]};
    }
}

static void full_equivalence(const fixture *f, const char *label) {
    char name[160];
    snprintf(name, sizeof name, "%s P=%d: blend:1.0 and head:K over whole documents = full",
             label, f->page_size);
    TEST_BEGIN(name);
    run_out full, o;
    out_alloc(&full);
    out_alloc(&o);
    CHECK(run(f, "full", "none", reqs, N_REQ, false, &full), "full run");
    static const char *cases[][2] = {{"lazy", "blend:1.0"}, {"copy", "blend:1"},
                                     {"lazy", "head:64"}, {"copy", "head:100"}};
    for (int c = 0; c < 4; c++)
        for (int batch = 0; batch < 2; batch++) {
            char what[96];
            snprintf(what, sizeof what, "%s %s%s vs full", cases[c][0], cases[c][1],
                     batch ? " (one batch)" : "");
            bool ok = run(f, cases[c][0], cases[c][1], reqs, N_REQ, batch, &o);
            CHECK(ok, "%s: run failed", what);
            if (ok) check_same(what, &o, &full, N_REQ, NMSE_TOL);
        }
    out_free(&full);
    out_free(&o);
    TEST_END();
}

static void head_lazy_copy(const fixture *f, const char *label) {
    char name[160];
    snprintf(name, sizeof name, "%s P=%d: head:16 and blend:0.3 agree in lazy and copy, and "
             "change the answer", label, f->page_size);
    TEST_BEGIN(name);
    run_out lazy, copy, none;
    out_alloc(&lazy);
    out_alloc(&copy);
    out_alloc(&none);
    bool ok = run(f, "lazy", "head:16", reqs, N_REQ, false, &lazy) &&
              run(f, "copy", "head:16", reqs, N_REQ, false, &copy) &&
              run(f, "lazy", "none", reqs, N_REQ, false, &none);
    CHECK(ok, "a run failed");
    if (ok) {
        check_same("head:16 copy vs lazy", &copy, &lazy, N_REQ, NMSE_TOL);
        for (int i = 0; i < N_REQ; i++) {
            // request 2's first document sits at the system block's offset: one repaired doc
            double e = test_nmse(lazy.logits[i], none.logits[i], V);
            CHECK(e > 1e-8, "request %d: head:16 left the logits as block attention's (nmse %g)",
                  i, e);
            CHECK(lazy.n_repair[i] > 0 && none.n_repair[i] == 0, "request %d: %d repair tokens",
                  i, lazy.n_repair[i]);
        }
    }
    // blend selects by deviation: lazy and copy compute the same deviations to a few ulps, so
    // the same tokens unless two deviations tie that closely (random models: they do not)
    ok = run(f, "lazy", "blend:0.3", reqs, N_REQ, false, &lazy) &&
         run(f, "copy", "blend:0.3", reqs, N_REQ, false, &copy);
    CHECK(ok, "a blend run failed");
    if (ok) check_same("blend:0.3 copy vs lazy", &copy, &lazy, N_REQ, NMSE_TOL);
    out_free(&lazy);
    out_free(&copy);
    out_free(&none);
    TEST_END();
}

static int by_page(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

// Bytes of every resident copy's pages, in page order (from the backend's memory).
static size_t snapshot(li_model *m, uint8_t *buf) {
    int64_t pages[256];
    int n = 0;
    for (li_doc_copy *c = li_doc_cache_first(m->docs); c; c = li_doc_cache_next(m->docs, c))
        for (int k = 0; k < c->n_pages && n < 256; k++) pages[n++] = c->pages[k];
    qsort(pages, (size_t)n, sizeof *pages, by_page);
    for (int i = 0; buf && i < n; i++)
        if (li_be_download(m->be, buf + (size_t)i * m->kv.page_bytes,
                           (uint8_t *)m->kv.storage.data + (size_t)pages[i] * m->kv.page_bytes,
                           m->kv.page_bytes) != LI_OK)
            return 0;
    return (size_t)n * m->kv.page_bytes;
}

static void no_leak(const fixture *f, const char *repair) {
    char name[160];
    snprintf(name, sizeof name, "%s: two requests share a document at two offsets in one batch; "
             "the shared pages stay as they were", repair);
    TEST_BEGIN(name);
    // document 2 after 0 in one request, after 3 and 1 in the other
    static const req_spec two[] = {{2, {0, 2}, "First?"}, {3, {3, 1, 2}, "Second?"}};
    run_out alone[2], together;
    out_alloc(&together);
    bool ok = true;
    for (int i = 0; i < 2; i++) {
        out_alloc(&alone[i]);
        ok = ok && run(f, "lazy", repair, &two[i], 1, false, &alone[i]);
    }
    li_repair rp;
    li_repair_parse(repair, &rp);
    li_model *m = load(f, "lazy", 2);
    ok = ok && m;
    uint8_t *before = NULL, *after = NULL;
    size_t n_before = 0;
    if (ok) {
        // the documents cached first (no repair), then both repaired requests in one batch
        li_request warm = {.docs = (li_doc[]){f->docs[3], f->docs[1], f->docs[2], f->docs[0]},
                           .n_docs = 4, .query = "warm"};
        warm.gen = li_generate_default_params();
        warm.gen.n_predict = 1;
        int64_t id;
        li_request_result res;
        ok = li_submit(m, &warm, &id) == LI_OK && li_run(m) == LI_OK &&
             li_result(m, id, &res) == LI_OK && res.status == LI_OK;
        n_before = snapshot(m, NULL);
        before = malloc(n_before);
        after = malloc(n_before);
        snapshot(m, before);
        test_tokens col[2];
        int64_t ids[2];
        for (int i = 0; i < 2 && ok; i++) {
            li_doc d[MAX_DOCS];
            for (int k = 0; k < two[i].n_docs; k++) d[k] = f->docs[two[i].doc[k]];
            col[i] = (test_tokens){together.toks[i], N_PREDICT, 0};
            li_request q = {.docs = d, .n_docs = two[i].n_docs, .query = two[i].query,
                            .first_logits = together.logits[i], .repair = rp};
            q.gen = test_greedy_params(N_PREDICT, &col[i]);
            ok = li_submit(m, &q, &ids[i]) == LI_OK;
        }
        ok = ok && li_run(m) == LI_OK;
        for (int i = 0; i < 2 && ok; i++) {
            ok = li_result(m, ids[i], &res) == LI_OK && res.status == LI_OK && res.doc_hits > 0;
            together.n_toks[i] = col[i].n;
        }
        CHECK(ok, "batch run: %s", li_last_error());
        CHECK(snapshot(m, NULL) == n_before, "the cache's pages changed in number");
        if (ok && snapshot(m, NULL) == n_before) {
            snapshot(m, after);
            CHECK(!memcmp(before, after, n_before), "a shared page was written");
        }
        li_cache_stats cs;
        li_get_cache_stats(m, &cs);
        CHECK(cs.resident_docs == cs.resident_copies, "lazy holds %lld copies of %lld documents",
              (long long)cs.resident_copies, (long long)cs.resident_docs);
        CHECK(cs.kv_pages_free + cs.resident_bytes / cs.kv_page_bytes == cs.kv_pages_total,
              "overlay pages not given back");
    }
    CHECK(ok, "a run failed");
    if (ok)
        for (int i = 0; i < 2; i++) {
            char what[64];
            snprintf(what, sizeof what, "request %d in the batch vs alone", i);
            run_out one = together;  // request i's slot moved to index 0
            one.logits[0] = together.logits[i];
            memcpy(one.toks[0], together.toks[i], sizeof one.toks[0]);
            one.n_toks[0] = together.n_toks[i];
            check_same(what, &one, &alone[i], 1, NMSE_TOL);
        }
    free(before);
    free(after);
    li_model_free(m);
    for (int i = 0; i < 2; i++) out_free(&alone[i]);
    out_free(&together);
    TEST_END();
}

// One sequence of a forward: rows [t0, t0 + n) at positions 0.., into `pages` (P tokens each).
static void seq_rows(li_model *m, const int64_t *pages, int t0, int n, int32_t *tok, int32_t *pos,
                     int64_t *slot, int32_t *nvis, uint64_t *table, li_batch_seq *sq,
                     li_rng *rng) {
    const int P = m->kv.storage.page_size;
    for (int i = 0; i < n; i++) {
        tok[t0 + i] = (int32_t)(32 + li_rng_u64(rng) % 224);
        pos[t0 + i] = i;
        slot[t0 + i] = pages[i / P] * P + i % P;
        nvis[t0 + i] = i + 1;
    }
    for (int k = 0; k * P < n; k++)
        table[k] = li_page_word(pages[k], n - k * P < P ? n - k * P : P, 0);
    *sq = (li_batch_seq){.t0 = t0, .n = n, .kv = {.pages = table, .n_pages = (n + P - 1) / P}};
}

// Layer il's K and V bytes of the first n tokens' pages (whole pages).
static void layer_bytes(li_model *m, const int64_t *pages, int n, int il, uint8_t *out) {
    const li_kv_storage *kv = &m->kv.storage;
    const size_t eb = li_kv_elem_bytes(kv->dtype);
    const size_t bytes = 2 * (size_t)kv->n_head_kv * kv->page_size * kv->head_dim * eb;
    for (int k = 0; k * kv->page_size < n; k++)
        li_be_download(m->be, out + k * bytes,
                       (const uint8_t *)kv->data + li_kv_offset(kv, pages[k], il, 0, 0, 0) * eb,
                       bytes);
}

// blend's selection pass rides at the end of a batch (li_batch.n_tail): the rows before it get
// the logits they get alone, and the tail rows store the K/V of layers [0, tail_layer] that a
// whole forward stores, and nothing of the layers after.
static void tail_rows(li_rng *rng) {
    TEST_BEGIN("a batch's tail rows stop at the check layer's K/V; the other rows are as alone");
    // SmolLM2-135M's shapes (random weights): 30 layers, so that layers after the check one exist
    fixture f = {.model = "synth:smollm2-135m", .page_size = 16};
    li_model *m = load(&f, "none", 1);
    CHECK(m != NULL, "load");
    if (!m) goto done;
    enum { TA = 21, TB = 37, NP = 3 };  // rows of the sequence with logits, of the tail
    const int L = m->llama.hp.n_layer, Vv = m->llama.hp.n_vocab, TAIL = 1;
    const li_kv_storage *kv = &m->kv.storage;
    const size_t lb = 2 * (size_t)kv->n_head_kv * kv->page_size * kv->head_dim *
                      li_kv_elem_bytes(kv->dtype) * NP;
    int64_t pa[NP], pb[NP], pc[NP];
    for (int k = 0; k < NP; k++)
        CHECK(li_kv_page_alloc(&m->kv, &pa[k]) == LI_OK &&
                  li_kv_page_alloc(&m->kv, &pb[k]) == LI_OK &&
                  li_kv_page_alloc(&m->kv, &pc[k]) == LI_OK, "page alloc");
    int32_t tok[TA + TB], pos[TA + TB], nvis[TA + TB], row = TA - 1;
    int64_t slot[TA + TB];
    uint64_t ta[NP], tb[NP];
    li_batch_seq sq[2];
    seq_rows(m, pa, 0, TA, tok, pos, slot, nvis, ta, &sq[0], rng);
    seq_rows(m, pb, TA, TB, tok, pos, slot, nvis, tb, &sq[1], rng);
    float *alone = malloc((size_t)Vv * sizeof *alone), *with = malloc((size_t)Vv * sizeof *with);
    uint8_t *before = malloc(lb), *after = malloc(lb), *whole = malloc(lb);
    // the tail's pages hold random bytes first: the layers after the check layer must keep them
    for (size_t i = 0; i < lb; i++) before[i] = (uint8_t)li_rng_u64(rng);
    for (int il = 0; il < L; il++)
        for (int k = 0; k < NP; k++)
            li_be_upload(m->be, (uint8_t *)kv->data + li_kv_offset(kv, pb[k], il, 0, 0, 0) *
                                    li_kv_elem_bytes(kv->dtype),
                         before + (size_t)k * (lb / NP), lb / NP);
    li_batch a = {.n_tokens = TA, .tokens = tok, .pos = pos, .slot = slot, .n_visible = nvis,
                  .n_seqs = 1, .seqs = sq, .n_logits = 1, .logit_rows = &row};
    li_batch ab = a;
    ab.n_tokens = TA + TB;
    ab.n_seqs = 2;
    ab.n_tail = TB;
    ab.tail_layer = TAIL;
    CHECK(li_llama_forward(&m->llama, &m->scratch, kv, &a, m->logits) == LI_OK, "alone");
    li_be_download(m->be, alone, m->logits, (size_t)Vv * sizeof *alone);
    CHECK(li_llama_forward(&m->llama, &m->scratch, kv, &ab, m->logits) == LI_OK, "with a tail");
    li_be_download(m->be, with, m->logits, (size_t)Vv * sizeof *with);
    double e = test_nmse(with, alone, Vv);
    CHECK(e <= g_tol, "the rows before the tail: nmse %g", e);
    // the tail's sequence as a whole forward of its own, into other pages
    li_batch_seq sc = sq[1];
    sc.t0 = 0;
    uint64_t tc[NP];
    int64_t slot_c[TB];
    for (int i = 0; i < TB; i++)
        slot_c[i] = pc[i / kv->page_size] * kv->page_size + i % kv->page_size;
    for (int k = 0; k < NP; k++) tc[k] = li_page_word(pc[k], li_page_count(tb[k]), 0);
    sc.kv.pages = tc;
    li_batch c = {.n_tokens = TB, .tokens = tok + TA, .pos = pos + TA, .slot = slot_c,
                  .n_visible = nvis + TA, .n_seqs = 1, .seqs = &sc};
    CHECK(li_llama_forward(&m->llama, &m->scratch, kv, &c, m->logits) == LI_OK, "whole");
    for (int il = 0; il < L; il++) {
        layer_bytes(m, pb, TB, il, after);
        if (il > TAIL) {
            CHECK(!memcmp(after, before, lb), "layer %d of the tail's pages written", il);
            continue;
        }
        layer_bytes(m, pc, TB, il, whole);
        const size_t half = lb / NP / 2;  // K then V of a page
        for (int k = 0; k < NP; k++)
            for (int h = 0; h < 2; h++) {
                size_t o = (size_t)k * (lb / NP) + h * half;
                int n = TB - k * kv->page_size < kv->page_size ? TB - k * kv->page_size
                                                               : kv->page_size;
                for (int hk = 0; hk < kv->n_head_kv && kv->dtype == LI_DTYPE_F32; hk++) {
                    size_t oo = o + (size_t)hk * kv->page_size * kv->head_dim * 4;
                    double ee = test_nmse((const float *)(after + oo),
                                          (const float *)(whole + oo), (long)n * kv->head_dim);
                    CHECK(ee <= g_tol, "layer %d page %d %s head %d: nmse %g", il, k,
                          h ? "V" : "K", hk, ee);
                }
            }
    }
    free(alone);
    free(with);
    free(before);
    free(after);
    free(whole);
    li_model_free(m);
done:
    TEST_END();
}

static void parse_errors(void) {
    TEST_BEGIN("li_repair_parse: values and errors; a repair needs lazy or copy");
    li_repair r;
    char buf[32];
    CHECK(li_repair_parse("none", &r) == LI_OK && r.mode == LI_REPAIR_NONE, "none");
    CHECK(li_repair_parse("head", &r) == LI_OK && r.mode == LI_REPAIR_HEAD && r.head_k == 16,
          "head");
    CHECK(li_repair_parse("head:32", &r) == LI_OK && r.head_k == 32, "head:32");
    li_repair_format(&r, buf, sizeof buf);
    CHECK(!strcmp(buf, "head:32"), "format %s", buf);
    CHECK(li_repair_parse("blend", &r) == LI_OK && r.mode == LI_REPAIR_BLEND &&
              fabsf(r.blend_r - 0.15f) < 1e-7f, "blend");
    li_repair_format(&r, buf, sizeof buf);
    CHECK(!strcmp(buf, "blend:0.15"), "format %s", buf);
    static const char *bad[][2] = {{"blend:2", "(0, 1]"}, {"blend:0", "(0, 1]"},
                                   {"blend:x", "fraction"}, {"head:0", ">= 1"},
                                   {"head:1.5", "whole number"}, {"head:", "whole number"},
                                   {"cacheblend", "unknown repair"}, {"none:1", "unknown"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(li_repair_parse(bad[i][0], &r) == LI_ERR_INVALID_ARG &&
                  strstr(li_last_error(), bad[i][1]) && strstr(li_last_error(), bad[i][0]),
              "%s: %s", bad[i][0], li_last_error());
    fixture f = {.model = "synth:tiny-llama", .page_size = 16};
    li_model *m = load(&f, "none", 1);
    CHECK(m != NULL, "load");
    if (m) {
        int32_t ids[20];
        for (int i = 0; i < 20; i++) ids[i] = 50 + i;
        li_doc d = {.ids = ids, .n_ids = 20};
        li_request q = {.docs = &d, .n_docs = 1, .query = "q"};
        q.gen = li_generate_default_params();
        li_repair_parse("head", &q.repair);
        int64_t id;
        CHECK(li_submit(m, &q, &id) == LI_ERR_INVALID_ARG &&
                  strstr(li_last_error(), "lazy or copy"), "none mode: %s", li_last_error());
        li_model_free(m);
    }
    TEST_END();
}

int main(void) {
    uint64_t seed = test_seed("test-repair");
    g_backend = test_backend(g_backend);
    if (strcmp(g_backend, "cpu") && strcmp(g_backend, "cpu-ref")) g_tol = NMSE_TOL_BF16;
    printf("# backend %s, nmse bound %g\n", g_backend, g_tol);
    if (!test_backend_usable("test-repair", g_backend, "synth:tiny-llama")) return test_summary();
    li_rng rng;
    li_rng_seed(&rng, seed);
    parse_errors();
    tail_rows(&rng);
    static const char *models[] = {"tiny-llama", "tiny-llama-gqa4-linear", "tiny-llama-gqa2-yarn",
                                   "tiny-qwen2"};
    const int page_sizes[] = {16, 1, 64, 16};
    int lens[] = {7, 23, 40, 16, 60};  // not multiples of P (but one equal to 16)
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char path[96];
        snprintf(path, sizeof path, "synth:%s:%llu", models[mi], (unsigned long long)(seed % 1000));
        fixture f = {.model = path, .page_size = page_sizes[mi]};
        make_docs(&f, &rng, lens, 5);
        full_equivalence(&f, models[mi]);
        if (mi == 0 || mi == 3) head_lazy_copy(&f, models[mi]);
        if (mi == 0) {
            no_leak(&f, "head:16");
            no_leak(&f, "blend:0.3");
        }
        for (int d = 0; d < f.n_docs; d++) free(f.ids[d]);
    }
    return test_summary();
}
