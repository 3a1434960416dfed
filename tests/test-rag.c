// test-rag.c — the exactness suite of LazyAttention (ARCHITECTURE.md §3.5 invariants):
//   lazy, copy, prefix and none give the same first-token logits (NMSE <= 1e-10, fp32) and the
//   same greedy continuations, for every RoPE variant and layout, GQA ratios 1/2/4/8, Qwen2's
//   q/k/v biases and page sizes 1/16/64, over document permutations, a document repeated in one
//   prompt, lengths that are not multiples of the page, an empty chat query, eviction and
//   re-prefill between requests (a budget too small to keep everything) and many requests
//   interleaved in one batch.
//   lazy holds exactly one physical copy per resident document; the pool returns to full (minus
//   what the caches keep) when idle. With SmolLM2 (when the model file is present) on real text.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lazyinfer.h"
#include "test.h"

// fp32 with different summation orders: deferred rotation (lazy), rotation at global positions
// (copy/none/prefix) and re-rotation of copied pages (copy) differ by a few ulps per element;
// through 2-30 layers that is NMSE ~1e-14..1e-12. 1e-10 is the bound ARCHITECTURE.md §3.5 sets.
#define NMSE_TOL 1e-10
// LI_TEST_BACKEND=cuda runs the suite on the GPU (make CUDA=1 gpu-check does): the matmuls and the
// prefill attention round their inputs to bf16, so a few-ulp fp32 difference between modes (K
// rotated on the fly vs stored rotated) can flip a bf16 rounding and the modes then agree to bf16
// level: NMSE_TOL_BF16 there. Measured on the H200: first-token logits 0..1.2e-5 apart; greedy
// continuations of these random tiny models sometimes part at a near tie (one request of
// tiny-llama-gqa4-linear in one run): allowed after the first token, counted and bounded.
// A bf16 KV pool (the default on device backends; LI_TEST_KV_DTYPE=bf16 elsewhere) rounds K and V
// to 8 significant bits, and the modes round different K: lazy the K at its local position, copy
// that K again after re-rotating it, prefix/none the K at its global position. The same bound.
#define NMSE_TOL_BF16 1e-4
static const char *g_backend = "cpu";
static const char *g_kv_dtype;  // li_model_params.kv_dtype: LI_TEST_KV_DTYPE (NULL: auto)
static bool g_kv_bf16;          // the pool the engine picks for it
static double g_tol = NMSE_TOL;
static int g_bf16_flips;  // requests whose greedy tokens differ at a near tie (bf16 backends)

enum { N_MODES = 4, N_PREDICT = 8, MAX_REQ = 8, MAX_DOCS = 4 };
static const char *modes[N_MODES] = {"lazy", "copy", "prefix", "none"};

typedef struct {
    int n_docs;
    int doc[MAX_DOCS];  // indices into the document pool
    const char *query;
    bool chat;
} req_spec;

typedef struct {
    int32_t toks[MAX_REQ][N_PREDICT];
    int n_toks[MAX_REQ];
    float *logits[MAX_REQ];  // (V) first-token logits
} run_out;


typedef struct {
    const char *model;
    int page_size;
    int64_t budget;  // 0: default
    int n_docs;
    li_doc docs[8];
    int32_t *doc_ids[8];
} fixture;

// Runs the requests in one mode, sequentially (batch = false) or all submitted together.
static bool run_mode(const fixture *f, const char *mode, const req_spec *reqs, int n_req,
                     bool batch, int V, run_out *out, li_cache_stats *stats_out, int *one_copy) {
    li_model_params p = li_model_default_params();
    p.path = f->model;
    p.backend = g_backend;
    p.page_size = f->page_size;
    p.cache_mode = mode;
    p.n_ctx = 1024;
    p.max_seqs = batch ? n_req : 1;
    p.kv_budget_bytes = f->budget;
    p.kv_dtype = g_kv_dtype;
    li_model *m;
    if (li_model_load(&m, &p) != LI_OK) {
        fprintf(stderr, "load %s (%s): %s\n", f->model, mode, li_last_error());
        return false;
    }
    bool ok = true;
    test_tokens col[MAX_REQ];
    int64_t ids[MAX_REQ];
    for (int i = 0; i < n_req && ok; i++) {
        li_doc d[MAX_DOCS];
        for (int k = 0; k < reqs[i].n_docs; k++) d[k] = f->docs[reqs[i].doc[k]];
        col[i] = (test_tokens){out->toks[i], N_PREDICT, 0};
        li_request q = {.docs = d, .n_docs = reqs[i].n_docs, .query = reqs[i].query,
                        .chat = reqs[i].chat, .first_logits = out->logits[i]};
        q.gen = test_greedy_params(N_PREDICT, &col[i]);
        if (li_submit(m, &q, &ids[i]) != LI_OK) {
            fprintf(stderr, "submit: %s\n", li_last_error());
            ok = false;
            break;
        }
        if (!batch) {
            li_request_result res;
            ok = li_run(m) == LI_OK && li_result(m, ids[i], &res) == LI_OK && res.status == LI_OK;
            if (!ok) fprintf(stderr, "%s request %d: %s / %s\n", mode, i, li_last_error(), res.error);
            li_cache_stats cs;
            li_get_cache_stats(m, &cs);
            if (one_copy && cs.resident_docs != cs.resident_copies) *one_copy = 0;
        }
    }
    if (ok && batch) {
        ok = li_run(m) == LI_OK;
        for (int i = 0; i < n_req && ok; i++) {
            li_request_result res;
            ok = li_result(m, ids[i], &res) == LI_OK && res.status == LI_OK;
        }
    }
    for (int i = 0; i < n_req; i++) out->n_toks[i] = col[i].n;
    li_get_cache_stats(m, stats_out);
    (void)V;
    li_model_free(m);
    return ok;
}

static void alloc_out(run_out *o, int V) {
    for (int i = 0; i < MAX_REQ; i++) o->logits[i] = calloc((size_t)V, sizeof(float));
}
static void free_out(run_out *o) {
    for (int i = 0; i < MAX_REQ; i++) free(o->logits[i]);
}

// Every mode against lazy: logits and tokens. Returns the worst NMSE seen.
static double compare(const char *what, run_out *outs, int n_req, int V) {
    double worst = 0;
    for (int mi = 1; mi < N_MODES; mi++)
        for (int i = 0; i < n_req; i++) {
            double e = test_nmse(outs[mi].logits[i], outs[0].logits[i], V);
            if (e > worst) worst = e;
            CHECK(e <= g_tol, "%s: %s vs lazy, request %d: nmse %g", what, modes[mi], i, e);
            CHECK(outs[mi].n_toks[i] == N_PREDICT && outs[0].n_toks[i] == N_PREDICT,
                  "%s: %s request %d generated %d", what, modes[mi], i, outs[mi].n_toks[i]);
            if (g_tol == NMSE_TOL) {
                CHECK(!memcmp(outs[mi].toks[i], outs[0].toks[i], sizeof outs[0].toks[i]),
                      "%s: %s vs lazy, request %d: greedy tokens differ", what, modes[mi], i);
                continue;
            }
            // bf16 attention (GPU): a logit difference of ~1e-6 NMSE can flip a greedy choice
            // between two near-equal candidates of these random models, after which the
            // continuations differ. Allowed only after the first token or at a near tie of the
            // first token, and reported.
            int k = 0;
            while (k < N_PREDICT && outs[mi].toks[i][k] == outs[0].toks[i][k]) k++;
            if (k == N_PREDICT) continue;
            float gap;
            int top = test_argmax_gap(outs[0].logits[i], V, &gap);
            printf("#   %s: %s vs lazy, request %d: greedy tokens differ from step %d (first-token "
                   "top-2 margin %.3g)\n", what, modes[mi], i, k, gap);
            CHECK(k > 0 || gap < 1e-2f * fabsf(outs[0].logits[i][top]), "%s: %s vs lazy, request "
                  "%d: first token differs without a near tie", what, modes[mi], i);
            g_bf16_flips++;
        }
    return worst;
}

static const req_spec scenario[] = {
    {3, {0, 1, 2}, "Which one?", false},
    {3, {2, 0, 1}, "Which one?", false},  // permutation
    {3, {1, 1, 0}, "And now?", false},    // a document twice in one prompt
    {3, {0, 1, 2}, "Which one?", false},  // the first request again: everything cached
    {2, {3, 0}, "", true},                // chat with an empty user message
    {1, {2}, "Last", true},
    {2, {4, 3}, "Tell", false},           // the longest document arrives last: evictions
};
enum { N_SCEN = sizeof scenario / sizeof scenario[0] };

static void run_fixture(fixture *f, int V, const char *label) {
    run_out outs[N_MODES];
    li_cache_stats st[N_MODES];
    char name[256];

    // sequential requests, then the same requests all in one batch
    for (int batch = 0; batch < 2; batch++) {
        snprintf(name, sizeof name, "%s P=%d%s%s: lazy/copy/prefix/none agree", label, f->page_size,
                 f->budget ? " small budget" : "", batch ? " (one batch)" : "");
        TEST_BEGIN(name);
        bool ok = true;
        int one_copy = 1;
        for (int mi = 0; mi < N_MODES; mi++) {
            alloc_out(&outs[mi], V);
            ok = ok && run_mode(f, modes[mi], scenario, N_SCEN, batch, V, &outs[mi], &st[mi],
                                mi == 0 ? &one_copy : NULL);
        }
        CHECK(ok, "a run failed");
        if (ok) {
            double worst = compare(name, outs, N_SCEN, V);
            printf("#   worst nmse vs lazy %.3g\n", worst);
            CHECK(one_copy, "lazy held more than one copy of a document");
            // pool back to full apart from what the caches keep
            for (int mi = 0; mi < N_MODES; mi++) {
                int64_t held = st[mi].resident_bytes / st[mi].kv_page_bytes;
                CHECK(st[mi].kv_pages_free + held == st[mi].kv_pages_total,
                      "%s: %lld free + %lld cached != %lld pages", modes[mi],
                      (long long)st[mi].kv_pages_free, (long long)held,
                      (long long)st[mi].kv_pages_total);
            }
            if (!batch && !f->budget) {
                // the repeat of request 0 hits everything in lazy; copy needs the same Δs
                CHECK(st[0].doc_hits > 0 && st[0].copies_made == 0, "lazy stats");
                CHECK(st[1].copies_made > 0, "copy mode never re-rotated a copy");
                CHECK(st[2].prefix_hit_tokens > 0, "prefix mode never hit");
            }
            if (f->budget) CHECK(st[0].evictions > 0, "small budget but nothing evicted");
            if (!f->budget) {
                // every distinct block is prefilled once, however many requests wait for it —
                // also when they all arrive together: 5 documents, the chat system block and,
                // when the tokenizer adds BOS, the raw requests' [BOS] block
                static int64_t seq_misses;
                if (!batch) seq_misses = st[0].doc_misses;
                CHECK(st[0].doc_misses == seq_misses && (seq_misses == 6 || seq_misses == 7),
                      "lazy prefilled %lld blocks (sequential run: %lld), expected 6 or 7",
                      (long long)st[0].doc_misses, (long long)seq_misses);
            }
        }
        for (int mi = 0; mi < N_MODES; mi++) free_out(&outs[mi]);
        TEST_END();
    }
}

static void make_docs(fixture *f, li_rng *rng, int V, const int *lens, int n) {
    f->n_docs = n;
    for (int d = 0; d < n; d++) {
        f->doc_ids[d] = malloc((size_t)lens[d] * sizeof(int32_t));
        for (int i = 0; i < lens[d]; i++)
            f->doc_ids[d][i] = (int32_t)(32 + li_rng_u64(rng) % (uint64_t)(V > 256 ? 224 : V - 32));
        f->docs[d] = (li_doc){.ids = f->doc_ids[d], .n_ids = lens[d]};
    }
}

static void free_docs(fixture *f) {
    for (int d = 0; d < f->n_docs; d++) free(f->doc_ids[d]);
}

int main(void) {
    uint64_t seed = test_seed("test-rag");
    g_backend = test_backend(g_backend);
    g_kv_dtype = getenv("LI_TEST_KV_DTYPE");
    bool cpu = !strcmp(g_backend, "cpu") || !strcmp(g_backend, "cpu-ref");
    g_kv_bf16 = g_kv_dtype ? !strcmp(g_kv_dtype, "bf16") : !cpu;  // "auto": bf16 on devices
    if (!cpu || g_kv_bf16) g_tol = NMSE_TOL_BF16;
    printf("# backend %s, %s KV, nmse bound %g\n", g_backend, g_kv_bf16 ? "bf16" : "f32", g_tol);
    if (!test_backend_usable("test-rag", g_backend, "synth:tiny-llama")) return test_summary();
    li_rng rng;
    li_rng_seed(&rng, seed);
    static const char *models[] = {"tiny-llama", "tiny-llama-mha-gptj", "tiny-llama-gqa4-linear",
                                   "tiny-llama-gqa8-llama3", "tiny-llama-gqa2-yarn",
                                   "tiny-qwen2"};  // (Qwen2: q/k/v biases, ChatML)
    const int page_sizes[] = {1, 16, 64};
    int lens[] = {7, 23, 40, 16, 60};  // not multiples of P (but one equal to 16)
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char path[96];
        snprintf(path, sizeof path, "synth:%s:%llu", models[mi], (unsigned long long)(seed % 1000));
        fixture f = {.model = path};
        make_docs(&f, &rng, 384, lens, 5);
        for (int pi = 0; pi < 3; pi++) {
            f.page_size = page_sizes[(pi + mi) % 3];
            f.budget = 0;
            run_fixture(&f, 384, models[mi]);
            if (pi == 0) {
                // A budget that fits the largest request (its blocks, a system block of up to 16
                // tokens, 48 tokens of its own) but not every document: eviction and re-prefill.
                int P = f.page_size, most = 0, all = (16 + P - 1) / P;
                for (int d = 0; d < 5; d++) all += (lens[d] + P - 1) / P;
                for (int i = 0; i < N_SCEN; i++) {
                    int need = (16 + P - 1) / P + (48 + P - 1) / P;
                    for (int k = 0; k < scenario[i].n_docs; k++)
                        need += (lens[scenario[i].doc[k]] + P - 1) / P;
                    most = need > most ? need : most;
                }
                // L=2 layers × K,V × Dh=16 × (f32 or bf16) × P
                int64_t page_bytes = 2LL * 2 * 16 * (g_kv_bf16 ? 2 : 4) * P;
                int64_t hkv = (int[]){2, 4, 2, 1, 3, 2}[mi];   // kv heads of models[mi]
                f.budget = page_bytes * hkv * most;
                CHECK(most - (48 + P - 1) / P < all, "budget holds every document");
                run_fixture(&f, 384, models[mi]);
            }
        }
        free_docs(&f);
    }

    // SmolLM2 on real text (documents as text, chat formatting)
    const char *smol = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    FILE *fp = fopen(smol, "rb");
    if (!fp) {
        TEST_SKIP("SmolLM2 RAG exactness", "%s not present (make setup fetches it)", smol);
    } else {
        fclose(fp);
        static const char *texts[] = {
            "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889.\n\n",
            "Mount Everest, at 8,849 metres, is Earth's highest mountain above sea level.\n\n",
            "The Great Barrier Reef lies off the coast of Queensland, Australia.\n\n",
            "Honey never spoils: archaeologists found 3000-year-old honey in Egyptian tombs.\n\n",
            "Octopuses have three hearts and blue blood; two hearts pump blood to the gills, and "
            "the third pumps it to the rest of the body.\n\n",
        };
        fixture f = {.model = smol, .page_size = 16};
        f.n_docs = 5;
        for (int d = 0; d < 5; d++) f.docs[d] = (li_doc){.text = texts[d], .len = strlen(texts[d])};
        // the scenario's raw requests become chat requests here
        run_out outs[N_MODES];
        li_cache_stats st[N_MODES];
        req_spec reqs[N_SCEN];
        memcpy(reqs, scenario, sizeof reqs);
        for (int i = 0; i < N_SCEN; i++) reqs[i].chat = true;
        TEST_BEGIN("SmolLM2 P=16: lazy/copy/prefix/none agree on real text");
        bool ok = true;
        for (int mi = 0; mi < N_MODES; mi++) {
            alloc_out(&outs[mi], 49152);
            ok = ok && run_mode(&f, modes[mi], reqs, N_SCEN, false, 49152, &outs[mi], &st[mi], NULL);
        }
        CHECK(ok, "a run failed");
        if (ok) printf("#   worst nmse vs lazy %.3g\n", compare("smollm2", outs, N_SCEN, 49152));
        for (int mi = 0; mi < N_MODES; mi++) free_out(&outs[mi]);
        TEST_END();
    }

    TEST_BEGIN("li_cancel: waiting and running requests end at once and give their pages back");
    {
        li_model_params cp = li_model_default_params();
        cp.path = "synth:tiny-llama";
        cp.backend = g_backend;
        cp.max_seqs = 1;  // the second request waits while the first runs
        li_model *cm = NULL;
        li_status lrc = li_model_load(&cm, &cp);
        CHECK(lrc == LI_OK, "%s", li_last_error());
        if (lrc == LI_OK) {  // nothing to cancel without a model
            int32_t dids[40];
            for (int i = 0; i < 40; i++) dids[i] = 60 + i;
            li_doc cd = {.ids = dids, .n_ids = 40};
            li_request q = {.docs = &cd, .n_docs = 1, .query = "go"};
            q.gen = li_generate_default_params();
            q.gen.n_predict = 50;
            q.gen.stop_at_eos = false;
            int64_t a, b;
            int left;
            CHECK(li_submit(cm, &q, &a) == LI_OK && li_submit(cm, &q, &b) == LI_OK, "submit");
            for (int i = 0; i < 5; i++) li_step(cm, &left);  // a is decoding, b waits
            CHECK(li_cancel(cm, a) == LI_OK && li_cancel(cm, b) == LI_OK, "cancel");
            CHECK(li_cancel(cm, 12345) == LI_ERR_INVALID_ARG, "unknown id");
            li_step(cm, &left);
            CHECK(left == 0, "%d requests left", left);
            li_request_result ra, rb;
            CHECK(li_result(cm, a, &ra) == LI_OK && ra.cancelled && ra.n_generated > 0 &&
                      ra.n_generated < 50,
                  "a: cancelled %d after %d tokens", ra.cancelled, ra.n_generated);
            CHECK(li_result(cm, b, &rb) == LI_OK && rb.cancelled && rb.n_generated == 0, "b");
            li_cache_stats cs;
            li_get_cache_stats(cm, &cs);
            CHECK(cs.kv_pages_free + cs.resident_bytes / cs.kv_page_bytes == cs.kv_pages_total,
                  "pages not back: %lld free, %lld cached, %lld total", (long long)cs.kv_pages_free,
                  (long long)(cs.resident_bytes / cs.kv_page_bytes), (long long)cs.kv_pages_total);
            li_model_free(cm);
        }
    }
    TEST_END();

    TEST_BEGIN("bad requests: empty raw query, empty document, context overflow");
    li_model_params p = li_model_default_params();
    p.path = "synth:tiny-llama";
    p.n_ctx = 64;
    li_model *m;
    CHECK(li_model_load(&m, &p) == LI_OK, "%s", li_last_error());
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = 40 + i % 50;
    li_doc d = {.ids = ids, .n_ids = 30};
    li_request q = {.docs = &d, .n_docs = 1, .query = ""};
    q.gen = li_generate_default_params();
    q.gen.n_predict = 4;
    int64_t id;
    CHECK(li_submit(m, &q, &id) == LI_ERR_INVALID_ARG && strstr(li_last_error(), "query is empty"),
          "empty query: %s", li_last_error());
    li_doc empty = {.text = "", .len = 0};
    q.docs = &empty;
    q.query = "x";
    CHECK(li_submit(m, &q, &id) == LI_ERR_INVALID_ARG && strstr(li_last_error(), "empty"),
          "empty doc: %s", li_last_error());
    d.n_ids = 70;
    q.docs = &d;
    CHECK(li_submit(m, &q, &id) == LI_ERR_LIMIT && strstr(li_last_error(), "context"),
          "overflow: %s", li_last_error());
    ids[3] = 99999;
    d.n_ids = 10;
    CHECK(li_submit(m, &q, &id) == LI_ERR_INVALID_ARG && strstr(li_last_error(), "out of range"),
          "bad id: %s", li_last_error());
    li_model_free(m);
    TEST_END();
    if (g_tol != NMSE_TOL) {
        // 5 models x 5 fixtures x 2 (sequential, batch) x 7 requests x 3 modes: ~1050 comparisons.
        // The count depends on how many near ties the seed's random models have: over 39 seeds
        // of the CPU with a bf16 pool 3-73 (2026-12-01; seeds 4 and one CI run gave 73 and 74,
        // above the old bar of 60). Each parting is already checked to follow a near tie; a
        // wrong rotation or page parts nearly all ~1050 (and fails the logits' NMSE first).
        TEST_BEGIN("bf16 backend: greedy continuations that part at a near tie are rare");
        printf("#   %d of 1050 mode-vs-lazy continuations parted after a near tie\n", g_bf16_flips);
        CHECK(g_bf16_flips <= 150, "%d continuations parted (more than 150 of 1050)",
              g_bf16_flips);
        TEST_END();
    }
    return test_summary();
}
