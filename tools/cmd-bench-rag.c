// cmd-bench-rag.c — `lazyinfer bench rag`: RAG serving benchmark of the document-cache modes
// (docs/RAG-BENCH.md). One trace, replayed once per mode on a fresh model load:
//   documents  the passages "0".."5" of every RAG sample JSON (--samples DIR), each document's
//              text = passage + "\n\n", tokenised alone (optionally cut to --doc-len tokens);
//   requests   k distinct documents drawn with Zipf(α) popularity over a shuffled pool (the
//              sampler of `lazyinfer sim`, tools/zipf.c), in the order drawn, + the samples'
//              queries in turn, chat-formatted; greedy, exactly --out-len tokens (EOS ignored);
//   arrivals   Poisson at --rate on the wall clock (0: all at once); between two li_step calls
//              every request whose arrival time has passed is submitted; idle → sleep.
// Reports per mode TTFT p50/p90/p99/mean (arrival → first token: the submit lag, at most one
// step, plus li_request_result.ttft_ms), end-to-end latency, throughput, the document hit ratio
// (prompt block tokens served from cache / block tokens), resident bytes, evictions, and how many
// requests produced the same tokens as the first mode (the modes are exact: ARCHITECTURE.md §3.5).
//
// --synthetic replaces the samples by random tokens, for models with random weights
// (synth:llama-3.1-8b): N documents of exactly L token ids drawn uniformly
// from ordinary ids of the model's vocabulary, and per request a query of random lowercase words
// cut to Q tokens (li_request takes the query as text only). --rates / --budgets sweep every
// (rate, budget, mode) combination, one short table row each (and --csv rows for plotting).
//
// Not here: a test of cache correctness (tests/test-rag.c) or of hit ratios at scale (`sim`).
// Tested by tests/test_bench_rag.py (smoke run on synth:tiny-llama with hit/miss counts checked
// against the dumped trace; chi-square of the Zipf sampler). Results: docs/BENCHMARKS.md,
// usage: docs/RAG-BENCH.md.
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../src/core/core.h"
#include "../src/kv/blob-store.h"
#include "cli.h"
#include "lazyinfer.h"
#include "replay.h"
#include "zipf.h"

#define SAMPLES_REL "data/rag-samples" // the repository's CacheBlend samples (data/README.md)
#define MAX_MODES 10  // five modes, lazy and copy twice with tiers
#define MAX_K 64
#define MAX_REQUESTS 1000000
#define DRAW_TRIES 10000 // redraws for a distinct rank before the exact fallback
#define MAX_LIST 64      // values in --rates / --budgets
// Synthetic token ids: the ids of [SYN_ID_LO, min(V, SYN_ID_HI)) that are not special tokens.
// 32 skips the control bytes of byte-level vocabularies and the special tokens that some
// tokenizers put first (SmolLM2: 0..16); 30000 stays below the special tokens of large
// vocabularies (Llama 3: 128000+) and in the ordinary BPE range of every real tokenizer; the
// special tokens inside the range (those of the built-in byte-level tokenizer of synthetic
// models, from 256) are left out one by one.
#define SYN_ID_LO 32
#define SYN_ID_HI 30000
#define SYN_MAX_TOKENS (1LL << 30) // --docs × --doc-len: 4 GiB of token ids
#define ENGINE_CTX_CAP 4096        // li_model_load's default context: min(trained, this)

typedef struct {
    li_model_params mp; // --model, -c, -t, --backend, --gpu, --kv-dtype, --attn-impl
    const char *samples, *mode_s, *budget_s, *plot, *trace;
    const char *rates_s, *budgets_s, *csv; // sweep lists and their CSV output
    int n_docs, k, doc_len, query_len, out_len, n_requests, max_batch;
    const char *evict;  // document-cache eviction policy (li_model_params.doc_evict)
    const char *repair_s;  // --repair: the lazy and copy runs' requests repair their documents
    li_repair repair;
    float alpha, rate;
    uint64_t seed;
    bool dry_run, synthetic;
    cli_tier_args tiers;     // --host-cache … (runs lazy and copy once more with them)
    li_model_params tier_mp; // the tiers' fields, parsed
} bench_args;

// The corpus: every passage (+ "\n\n") and query of the sample files, in file order.
// With --synthetic: no texts (docs NULL, n_docs 0), the ids in syn_ids once a model's vocabulary
// is known, one query of random words per request, names "synthetic:I".
typedef struct {
    char **docs;
    char **doc_name; // "FILE:KEY", for logs
    int n_docs, n_names;
    char **queries;
    int n_queries;
    int32_t *syn_ids; // --synthetic: (n_syn × syn_len) document token ids, NULL otherwise
    int n_syn, syn_len;
} corpus;

typedef struct {
    double arrival_ms; // since the start of the run
    int query;         // index into corpus.queries
    int docs[MAX_K];   // (k) corpus document index, prompt order
    int ranks[MAX_K];  // (k) popularity rank (1-based) of each
} trace_req;

// One request's outcome in one mode.
typedef struct {
    li_request_result res;
    double submit_ms;  // since the start, when li_submit was called
    uint64_t tok_hash; // FNV-1a over the generated token ids
    int n_tok;
} req_out;

typedef struct {
    li_cache_mode mode;
    bool tiers;           // with the lower tiers (label "lazy+tiers")
    li_cache_tier_stats tier[3];  // host, disk, remote
    double rate;          // arrival rate of this run's trace
    const char *budget;   // the budget as given ("64K", or "default")
    int64_t budget_bytes; // parsed (0: the engine's default)
    char label[96];       // for the plot: the mode, plus rate and budget in a sweep
    int lc, dt;           // plot colour (per mode) and dash (per rate × budget); 0: default
    int n_ok, n_failed, n_same;
    char first_error[256];
    double ttft[4]; // p50, p90, p99, mean (ms)
    double e2e_mean, e2e_p90, lag_mean;
    double req_per_s, tok_per_s, wall_s;
    int64_t doc_tokens, cached_tokens, computed_tokens, doc_hits, doc_lookups;
    int64_t resident_bytes, evictions, copies, page_bytes, pages_total;
    double load_ms, loadavg;
    double cpu_s; // user + system CPU seconds of this process during the replay
    double avg_doc_tokens, avg_doc_pages; // over the pool (pages of page_size tokens)
    double *ttft_sorted;                  // (n_ok) for the plot
} mode_row;

// ---- small helpers -------------------------------------------------------------------------

static char *xstrdup(const char *s) {
    char *p = strdup(s);
    if (!p) li_error_set(LI_ERR_OOM, "out of memory");
    return p;
}

static double loadavg1(void) {
    double x = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &x) != 1) x = -1;
        fclose(f);
    }
    return x;
}

static double cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Percentile q in [0, 100] of sorted x (n >= 1), linear between order statistics (numpy's
// default "linear" method).
static double percentile(const double *x, int n, double q) {
    double h = (n - 1) * q / 100.0;
    int lo = (int)floor(h);
    if (lo >= n - 1) return x[n - 1];
    return x[lo] + (h - lo) * (x[lo + 1] - x[lo]);
}

// ---- the samples -----------------------------------------------------------------------------

// Sample files in natural order ("2.json" before "10.json").
static int cmp_names(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    if (isdigit((unsigned char)*x) && isdigit((unsigned char)*y)) {
        long nx = strtol(x, NULL, 10), ny = strtol(y, NULL, 10);
        if (nx != ny) return nx < ny ? -1 : 1;
    }
    return strcmp(x, y);
}

static void corpus_free(corpus *c) {
    for (int i = 0; i < c->n_docs; i++)
        free(c->docs[i]);
    for (int i = 0; i < c->n_names; i++)
        free(c->doc_name[i]);
    for (int i = 0; i < c->n_queries; i++)
        free(c->queries[i]);
    free(c->docs);
    free(c->doc_name);
    free(c->queries);
    free(c->syn_ids);
    memset(c, 0, sizeof *c);
}

static li_status push_str(char ***arr, int *n, char *s) {
    if (!s) return LI_ERR_OOM;
    char **p = realloc(*arr, (size_t)(*n + 1) * sizeof *p);
    if (!p) {
        free(s);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    *arr = p;
    p[(*n)++] = s;
    return LI_OK;
}

// One sample: {"0": passage, "1": …, "query": text, …}. Passages are the keys "0", "1", … up to
// the first one missing.
static li_status load_sample(corpus *c, const char *path, const char *name) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return li_error_set(LI_ERR_FORMAT, "%s:%d: not valid JSON: %s", path, jerr.line, jerr.text);
    li_status rc = LI_OK;
    if (!json_is_object(root)) {
        rc = li_error_set(LI_ERR_FORMAT, "%s: expected a JSON object", path);
        goto out;
    }
    json_t *q = json_object_get(root, "query");
    if (!json_is_string(q)) {
        rc = li_error_set(LI_ERR_FORMAT, "%s: field \"query\" missing or not a string", path);
        goto out;
    }
    int n_pass = 0;
    for (int i = 0;; i++, n_pass++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        json_t *p = json_object_get(root, key);
        if (!p) break;
        if (!json_is_string(p)) {
            rc = li_error_set(LI_ERR_FORMAT, "%s: passage \"%s\" is not a string", path, key);
            goto out;
        }
        size_t len = json_string_length(p);
        char *text = malloc(len + 3);
        if (!text) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
            goto out;
        }
        memcpy(text, json_string_value(p), len);
        memcpy(text + len, "\n\n", 3);
        char nm[300];
        snprintf(nm, sizeof nm, "%s:%s", name, key);
        if ((rc = push_str(&c->docs, &c->n_docs, text)) != LI_OK) goto out;
        if ((rc = push_str(&c->doc_name, &c->n_names, xstrdup(nm))) != LI_OK) goto out;
    }
    if (n_pass == 0) {
        rc = li_error_set(LI_ERR_FORMAT, "%s: no passages (keys \"0\", \"1\", …)", path);
        goto out;
    }
    rc = push_str(&c->queries, &c->n_queries, xstrdup(json_string_value(q)));
out:
    json_decref(root);
    return rc;
}

static li_status load_corpus(corpus *c, const char *dir) {
    memset(c, 0, sizeof *c);
    DIR *d = opendir(dir);
    if (!d)
        return li_error_set(LI_ERR_IO,
                            "cannot open the RAG samples directory '%s': %s (give --samples DIR: "
                            "a folder of JSON files with passages \"0\"..\"5\" and \"query\")",
                            dir, strerror(errno));
    char **names = NULL;
    int n = 0;
    li_status rc = LI_OK;
    struct dirent *e;
    while (rc == LI_OK && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json"))
            rc = push_str(&names, &n, xstrdup(e->d_name));
    }
    closedir(d);
    if (rc == LI_OK && n == 0) rc = li_error_set(LI_ERR_IO, "no *.json sample in '%s'", dir);
    if (rc == LI_OK) qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n && rc == LI_OK; i++) {
        char path[2 * PATH_MAX + 64];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= sizeof path)
            rc = li_error_set(LI_ERR_INVALID_ARG, "sample path '%s/%s' is too long", dir, names[i]);
        else
            rc = load_sample(c, path, names[i]);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc != LI_OK) corpus_free(c);
    return rc;
}

// ---- the synthetic workload (--synthetic) ------------------------------------------------------

// Names and queries; the document ids need the model's vocabulary (synthetic_docs). Each request
// gets its own query: Q random lowercase words of 2..7 letters, which every tokenizer maps to at
// least Q tokens (one per byte with a byte-level vocabulary, one or more per word with BPE), so
// the cut to --query-len in prepare() gives exactly Q tokens with the byte-level tokenizer of
// synthetic models (about Q with BPE: the cut text is tokenised again by li_submit).
static li_status synthetic_corpus(corpus *c, const bench_args *a) {
    memset(c, 0, sizeof *c);
    li_rng rng;
    // A stream of its own: make_trace's stream (seeded with --seed alone) draws as with samples.
    li_rng_seed(&rng, a->seed ^ 0x51ed2701a9e5c0d3ull);
    li_status rc = LI_OK;
    for (int i = 0; i < a->n_docs && rc == LI_OK; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "synthetic:%d", i);
        rc = push_str(&c->doc_name, &c->n_names, xstrdup(nm));
    }
    for (int i = 0; i < a->n_requests && rc == LI_OK; i++) {
        char *q = malloc((size_t)a->query_len * 8 + 1);
        if (!q) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
            break;
        }
        size_t len = 0;
        for (int w = 0; w < a->query_len; w++) {
            if (w) q[len++] = ' ';
            int n = 2 + (int)(li_rng_u64(&rng) % 6);
            for (int j = 0; j < n; j++)
                q[len++] = (char)('a' + li_rng_u64(&rng) % 26);
        }
        q[len] = 0;
        rc = push_str(&c->queries, &c->n_queries, q);
    }
    if (rc != LI_OK) corpus_free(c);
    return rc;
}

// True when token `id`'s text tokenises differently with and without special-token matching:
// a special token ("<|im_start|>") is itself only with matching. Ordinary tokens, byte tokens and
// ids without text (the unused ids of the byte-level vocabulary of synth:llama-3.1-8b) are not.
// Nor is a token whose text li_tokenize refuses: a special token's text is valid UTF-8, the
// pieces refused are parts of multi-byte characters (BPE byte tokens such as 0xA1).
static li_status is_special(const li_model *m, int32_t id, bool *out) {
    char buf[256];
    size_t len;
    *out = false;
    LI_TRY(li_token_to_piece(m, id, buf, sizeof buf, &len));
    if (len > sizeof buf) len = sizeof buf;
    int32_t *x, *y;
    int nx, ny;
    if (li_tokenize(m, buf, len, false, true, &x, &nx) != LI_OK) return LI_OK;
    li_status rc = li_tokenize(m, buf, len, false, false, &y, &ny);
    if (rc == LI_OK) {
        *out = nx != ny || (nx > 0 && memcmp(x, y, (size_t)nx * sizeof *x) != 0);
        li_free_tokens(y);
    }
    li_free_tokens(x);
    return rc;
}

// What a synthetic run needs from the model before it runs: the ordinary ids of [SYN_ID_LO, *hi)
// (*ids, n_ids of them, malloc'ed; see SYN_ID_LO), the tokens the chat template adds around the
// documents and the query (*chat_tokens), which size the context, and the model's default
// context (*def_ctx). From a metadata-only load: no weights, no KV pool.
static li_status synthetic_model_facts(const bench_args *a, int32_t **ids, int *n_ids, int32_t *hi,
                                       int *chat_tokens, int *def_ctx) {
    li_model_params mp = li_model_default_params();
    mp.path = a->mp.path;
    mp.metadata_only = true;
    mp.n_threads = 1;
    li_model *m = NULL;
    LI_TRY(li_model_load(&m, &mp));
    li_model_info info;
    li_model_get_info(m, &info);
    *def_ctx = info.n_ctx_train > ENGINE_CTX_CAP || info.n_ctx_train <= 0 ? ENGINE_CTX_CAP
                                                                          : info.n_ctx_train;
    li_status rc = LI_OK;
    *hi = info.n_vocab < SYN_ID_HI ? info.n_vocab : SYN_ID_HI;
    *n_ids = 0;
    *ids = malloc((size_t)(*hi > SYN_ID_LO ? *hi - SYN_ID_LO : 1) * sizeof **ids);
    if (!*ids) rc = li_error_set(LI_ERR_OOM, "out of memory");
    for (int32_t id = SYN_ID_LO; id < *hi && rc == LI_OK; id++) {
        bool sp = false;
        if ((rc = is_special(m, id, &sp)) == LI_OK && !sp) (*ids)[(*n_ids)++] = id;
    }
    if (rc == LI_OK && *n_ids < 2)
        rc = li_error_set(LI_ERR_INVALID_ARG,
                          "--synthetic: %s has %d ordinary token id(s) in [%d, %d) (vocabulary "
                          "of %d ids): too few for random documents",
                          mp.path, *n_ids, SYN_ID_LO, *hi, info.n_vocab);
    char *chat = NULL;
    if (rc == LI_OK) rc = li_chat_render(m, NULL, "", &chat);
    if (rc == LI_OK) {
        int32_t *ids;
        if ((rc = li_tokenize(m, chat, strlen(chat), true, true, &ids, chat_tokens)) == LI_OK)
            li_free_tokens(ids);
    }
    free(chat);
    li_model_free(m);
    if (rc != LI_OK) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

// N × L ids drawn uniformly from ids[0..n_ids), one document after the other from a stream of
// their own, so a document is the same for every mode, rate and budget (and the first N' of a
// larger --docs).
static li_status synthetic_docs(corpus *c, const bench_args *a, const int32_t *ids, int n_ids) {
    size_t n = (size_t)a->n_docs * (size_t)a->doc_len;
    c->syn_ids = malloc(n * sizeof *c->syn_ids);
    if (!c->syn_ids) return li_error_set(LI_ERR_OOM, "out of memory (%zu synthetic tokens)", n);
    li_rng rng;
    li_rng_seed(&rng, a->seed ^ 0xd0c5d0c5d0c5d0c5ull);
    for (size_t i = 0; i < n; i++)
        c->syn_ids[i] = ids[li_rng_u64(&rng) % (uint64_t)n_ids];
    c->n_syn = a->n_docs;
    c->syn_len = a->doc_len;
    return LI_OK;
}

// ---- the trace -------------------------------------------------------------------------------

// k distinct ranks: redraw on a repeat (the simulator's rule). Redrawing until distinct is the
// pmf conditioned on the ranks not yet taken, so after DRAW_TRIES repeats (only at extreme α)
// that conditional law is sampled exactly instead, by inversion over the remaining ranks.
static int64_t draw_distinct(const li_zipf *z, li_rng *rng, const int *taken, int n_taken) {
    for (int t = 0; t < DRAW_TRIES; t++) {
        int64_t r = li_zipf_draw(z, rng);
        bool dup = false;
        for (int j = 0; j < n_taken; j++)
            dup |= taken[j] == r;
        if (!dup) return r;
    }
    double total = 0;
    for (int64_t r = 1; r <= z->n; r++) {
        bool dup = false;
        for (int j = 0; j < n_taken; j++)
            dup |= taken[j] == r;
        if (!dup) total += pow((double)r, -z->alpha);
    }
    double u = li_rng_uniform(rng) * total, s = 0;
    int64_t last = 1;
    for (int64_t r = 1; r <= z->n; r++) {
        bool dup = false;
        for (int j = 0; j < n_taken; j++)
            dup |= taken[j] == r;
        if (dup) continue;
        last = r;
        if ((s += pow((double)r, -z->alpha)) > u) return r;
    }
    return last;
}

// The pool is the first N corpus documents, shuffled (rank r → pool[r - 1]); arrivals are a
// Poisson process started at the first request (t = 0), gaps Exp(rate). every_gap: draw a gap
// even at rate 0 (where it is not used), so that the documents of a sweep's traces are the same
// at every rate (a single --rate 0 run keeps its old draws).
static li_status make_trace(const bench_args *a, int n_queries, bool every_gap, trace_req *tr) {
    li_rng rng;
    li_rng_seed(&rng, a->seed);
    int N = a->n_docs;
    int *pool = malloc((size_t)N * sizeof *pool);
    if (!pool) return li_error_set(LI_ERR_OOM, "out of memory");
    for (int i = 0; i < N; i++)
        pool[i] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(li_rng_u64(&rng) % (uint64_t)(i + 1));
        int t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
    li_zipf z;
    li_status rc = li_zipf_init(&z, N, a->alpha);
    if (rc != LI_OK) {
        free(pool);
        return rc;
    }
    double t = 0;
    for (int i = 0; i < a->n_requests; i++) {
        if (i > 0 && (a->rate > 0 || every_gap)) {
            double e = -log(1.0 - li_rng_uniform(&rng)); // Exp(1)
            if (a->rate > 0) t += e / a->rate * 1e3;
        }
        tr[i].arrival_ms = t;
        tr[i].query = i % n_queries;
        for (int j = 0; j < a->k; j++) {
            tr[i].ranks[j] = (int)draw_distinct(&z, &rng, tr[i].ranks, j);
            tr[i].docs[j] = pool[tr[i].ranks[j] - 1];
        }
    }
    li_zipf_free(&z);
    free(pool);
    return LI_OK;
}

static li_status write_trace(const char *path, const bench_args *a, const trace_req *tr) {
    FILE *f = fopen(path, "w");
    if (!f)
        return li_error_set(LI_ERR_IO, "cannot write the trace '%s': %s", path, strerror(errno));
    // one line per request: arrival_ms query rank@doc … (doc = corpus index, 0-based)
    for (int i = 0; i < a->n_requests; i++) {
        fprintf(f, "%.3f %d", tr[i].arrival_ms, tr[i].query);
        for (int j = 0; j < a->k; j++)
            fprintf(f, " %d@%d", tr[i].ranks[j], tr[i].docs[j]);
        fputc('\n', f);
    }
    if (fclose(f) != 0) return li_error_set(LI_ERR_IO, "cannot write the trace '%s'", path);
    return LI_OK;
}

// ---- one mode --------------------------------------------------------------------------------

static bool on_token(void *user, int32_t tok) {
    req_out *o = user;
    o->tok_hash = (o->tok_hash ^ (uint32_t)tok) * 0x100000001b3ull;
    o->n_tok++;
    return true;
}

// Documents and queries as the model sees them: document ids (cut to doc_len), query text (cut
// to query_len tokens and detokenised, since li_request takes the query as text).
typedef struct {
    int32_t **doc_ids; // (N) per pool document
    int *doc_n;
    char **query;  // (n_queries)
    bool borrowed; // doc_ids point into corpus.syn_ids (--synthetic)
} prepared;

static void prepared_free(prepared *p, int N, int nq) {
    for (int i = 0; p->doc_ids && !p->borrowed && i < N; i++)
        li_free_tokens(p->doc_ids[i]);
    for (int i = 0; p->query && i < nq; i++)
        free(p->query[i]);
    free(p->doc_ids);
    free(p->doc_n);
    free(p->query);
}

static li_status prepare(li_model *m, const bench_args *a, const corpus *c, prepared *p) {
    int N = a->n_docs;
    p->doc_ids = calloc((size_t)N, sizeof *p->doc_ids);
    p->doc_n = calloc((size_t)N, sizeof *p->doc_n);
    p->query = calloc((size_t)c->n_queries, sizeof *p->query);
    if (!p->doc_ids || !p->doc_n || !p->query) return li_error_set(LI_ERR_OOM, "out of memory");
    p->borrowed = c->syn_ids != NULL;
    for (int i = 0; p->borrowed && i < N; i++) { // already ids: nothing to tokenise
        p->doc_ids[i] = c->syn_ids + (size_t)i * c->syn_len;
        p->doc_n[i] = c->syn_len;
    }
    for (int i = 0; !p->borrowed && i < N; i++) {
        LI_TRY(li_tokenize(m, c->docs[i], strlen(c->docs[i]), false, false, &p->doc_ids[i],
                           &p->doc_n[i]));
        if (a->doc_len > 0 && p->doc_n[i] > a->doc_len) p->doc_n[i] = a->doc_len;
        if (p->doc_n[i] == 0)
            return li_error_set(LI_ERR_INVALID_ARG, "document %s has no tokens", c->doc_name[i]);
    }
    for (int i = 0; i < c->n_queries; i++) {
        if (a->query_len <= 0) {
            if (!(p->query[i] = xstrdup(c->queries[i]))) return LI_ERR_OOM;
            continue;
        }
        int32_t *ids;
        int n;
        LI_TRY(li_tokenize(m, c->queries[i], strlen(c->queries[i]), false, false, &ids, &n));
        if (n > a->query_len) n = a->query_len;
        size_t cap = 64, len = 0;
        char *s = malloc(cap);
        li_status rc = s ? LI_OK : li_error_set(LI_ERR_OOM, "out of memory");
        for (int t = 0; t < n && rc == LI_OK; t++) {
            char buf[256];
            size_t pl;
            if ((rc = li_token_to_piece(m, ids[t], buf, sizeof buf, &pl)) != LI_OK) break;
            if (pl > sizeof buf) pl = sizeof buf;
            if (len + pl + 1 > cap) {
                while (len + pl + 1 > cap)
                    cap *= 2;
                char *q = realloc(s, cap);
                if (!q) {
                    rc = li_error_set(LI_ERR_OOM, "out of memory");
                    break;
                }
                s = q;
            }
            memcpy(s + len, buf, pl);
            len += pl;
        }
        li_free_tokens(ids);
        if (rc != LI_OK) {
            free(s);
            return rc;
        }
        s[len] = 0;
        p->query[i] = s;
    }
    return LI_OK;
}

// What submit_one needs to build request i of the trace.
typedef struct {
    const bench_args *a;
    const corpus *c;
    const trace_req *tr;
    const prepared *p;
    req_out *out;
    li_repair repair;  // the run's: --repair in lazy and copy, else none
} replay_ctx;

// Request i: its k documents as token ids, its query, greedy, exactly out_len tokens.
static li_status submit_one(void *user, li_model *m, int i, int64_t *id) {
    const replay_ctx *x = user;
    li_doc docs[MAX_K];
    for (int j = 0; j < x->a->k; j++) {
        int d = x->tr[i].docs[j];
        docs[j] =
            (li_doc){.ids = x->p->doc_ids[d], .n_ids = x->p->doc_n[d], .id = x->c->doc_name[d]};
    }
    li_request q = {.docs = docs,
                    .n_docs = x->a->k,
                    .query = x->p->query[x->tr[i].query],
                    .chat = true,
                    .gen = li_generate_default_params()};
    q.gen.n_predict = x->a->out_len;
    q.gen.sampling.temperature = 0;
    q.gen.stop_at_eos = false; // every request decodes exactly out_len tokens
    q.gen.on_token = on_token;
    q.gen.user = &x->out[i];
    q.repair = x->repair;
    x->out[i].tok_hash = 0xcbf29ce484222325ull;
    return li_submit(m, &q, id);
}

// Loads the model in `mode`, replays the trace, fills the row. Errors of the engine (not of one
// request) end the benchmark.
static void wipe_one(void *ctx, const li_doc_key *key, int64_t bytes) {
    (void)bytes;
    li_blob_del(ctx, key);
}

// Empties the disk directory and the Redis namespace of --disk-cache / --kv-remote, so that each
// run with tiers starts cold (one run's entries would otherwise serve the next).
static void tiers_wipe(const li_model_params *p) {
    li_blob_store *s[2] = {NULL, NULL};
    if (p->disk_cache_dir && li_blob_disk_open(&s[0], p->disk_cache_dir) != LI_OK) s[0] = NULL;
    if (p->kv_remote && li_blob_redis_open(&s[1], p->kv_remote, p->kv_remote_password_file) != LI_OK)
        s[1] = NULL;
    for (int i = 0; i < 2; i++) {
        if (!s[i]) continue;
        li_blob_list(s[i], wipe_one, s[i]);
        li_blob_close(s[i]);
    }
    li_error_clear();
}

static li_status run_mode(const bench_args *a, const corpus *c, const trace_req *tr, int64_t budget,
                          li_cache_mode mode, bool tiers, req_out *out, mode_row *row) {
    const int R = a->n_requests;
    memset(row, 0, sizeof *row);
    row->mode = mode;
    row->tiers = tiers;
    li_model_params mp = a->mp;
    mp.max_seqs = a->max_batch;
    mp.cache_mode = li_cache_mode_name(mode);
    mp.kv_budget_bytes = budget;
    mp.doc_evict = a->evict;
    if (tiers) {
        mp.host_cache_bytes = a->tier_mp.host_cache_bytes;
        mp.disk_cache_dir = a->tier_mp.disk_cache_dir;
        mp.disk_budget_bytes = a->tier_mp.disk_budget_bytes;
        mp.kv_remote = a->tier_mp.kv_remote;
        mp.kv_remote_password_file = a->tier_mp.kv_remote_password_file;
        tiers_wipe(&mp);
    }
    double t_load = li_time_ms();
    li_model *m = NULL;
    LI_TRY(li_model_load(&m, &mp));
    row->load_ms = li_time_ms() - t_load;
    prepared p = {0};
    double *arrival = malloc((size_t)R * sizeof *arrival);
    replay_out *ro = malloc((size_t)R * sizeof *ro);
    li_status rc = arrival && ro ? prepare(m, a, c, &p) : li_error_set(LI_ERR_OOM, "out of memory");
    memset(out, 0, (size_t)R * sizeof *out);
    for (int i = 0; arrival && i < R; i++)
        arrival[i] = tr[i].arrival_ms;
    int n_tokens = 0;
    double t_end = 0;
    double cpu0 = cpu_seconds();
    replay_ctx ctx = {a, c, tr, &p, out, {0}};
    if (mode == LI_CACHE_LAZY || mode == LI_CACHE_COPY) ctx.repair = a->repair;
    replay_plan plan = {
        .n = R, .arrival_ms = arrival, .submit = submit_one, .user = &ctx, .progress = "bench rag"};
    if (rc == LI_OK) rc = replay_run(m, &plan, ro);
    for (int i = 0; rc == LI_OK && i < R; i++) {
        out[i].res = ro[i].res;
        out[i].submit_ms = ro[i].submit_ms;
        double end = ro[i].submit_ms + ro[i].res.total_ms;
        if (ro[i].res.status == LI_OK && end > t_end) t_end = end;
    }
    row->cpu_s = cpu_seconds() - cpu0;
    if (rc == LI_OK) {
        li_cache_stats cs;
        li_get_cache_stats(m, &cs);
        row->resident_bytes = cs.resident_bytes;
        memcpy(row->tier, cs.tiers, sizeof row->tier);
        row->evictions = cs.evictions;
        row->copies = cs.copies_made;
        row->page_bytes = cs.kv_page_bytes;
        row->pages_total = cs.kv_pages_total;
        int page_size = mp.page_size > 0 ? mp.page_size : 16; // li_model_params: 0 means 16
        for (int i = 0; i < a->n_docs; i++) {
            row->avg_doc_tokens += (double)p.doc_n[i] / a->n_docs;
            row->avg_doc_pages += (double)((p.doc_n[i] + page_size - 1) / page_size) / a->n_docs;
        }
        row->loadavg = loadavg1();
        double *ttft = malloc((size_t)R * sizeof *ttft), *e2e = malloc((size_t)R * sizeof *e2e);
        if (!ttft || !e2e) {
            free(ttft);
            free(e2e);
            rc = li_error_set(LI_ERR_OOM, "out of memory");
        } else {
            for (int i = 0; i < R; i++) {
                const req_out *o = &out[i];
                if (o->res.status != LI_OK) {
                    if (row->n_failed++ == 0)
                        snprintf(row->first_error, sizeof row->first_error, "%s", o->res.error);
                    continue;
                }
                double lag = o->submit_ms - tr[i].arrival_ms;
                ttft[row->n_ok] = lag + o->res.ttft_ms;
                e2e[row->n_ok] = lag + o->res.total_ms;
                row->lag_mean += lag;
                row->doc_tokens += o->res.n_doc_tokens;
                row->cached_tokens += o->res.n_cached_tokens;
                row->computed_tokens += o->res.n_prompt - o->res.n_cached_tokens;
                row->doc_hits += o->res.doc_hits;
                row->doc_lookups += o->res.doc_hits + o->res.doc_misses;
                n_tokens += o->res.n_generated;
                row->n_ok++;
            }
            int n = row->n_ok;
            if (n > 0) {
                double s = 0, se = 0;
                for (int i = 0; i < n; i++) {
                    s += ttft[i];
                    se += e2e[i];
                }
                qsort(ttft, (size_t)n, sizeof *ttft, cmp_double);
                qsort(e2e, (size_t)n, sizeof *e2e, cmp_double);
                row->ttft[0] = percentile(ttft, n, 50);
                row->ttft[1] = percentile(ttft, n, 90);
                row->ttft[2] = percentile(ttft, n, 99);
                row->ttft[3] = s / n;
                row->e2e_mean = se / n;
                row->e2e_p90 = percentile(e2e, n, 90);
                row->lag_mean /= n;
            }
            row->wall_s = t_end / 1e3;
            row->req_per_s = t_end > 0 ? n / (t_end / 1e3) : 0;
            row->tok_per_s = t_end > 0 ? n_tokens / (t_end / 1e3) : 0;
            row->ttft_sorted = ttft;
            free(e2e);
        }
    }
    prepared_free(&p, a->n_docs, c->n_queries);
    free(arrival);
    free(ro);
    li_model_free(m);
    return rc;
}

// ---- output ----------------------------------------------------------------------------------

// The runs with tiers: where their documents came from. "served" counts documents not prefilled
// (pool hits and promotions: the requests' doc_hits) over the documents looked up.
static void print_tier_rows(const mode_row *rows, int n_rows) {
    static const char *names[3] = {"host", "disk", "remote"};
    bool any = false;
    for (int i = 0; i < n_rows; i++) any |= rows[i].tiers;
    if (!any) return;
    printf("\n| run | documents served from a cache | pool hits | tier | tier hits | misses | "
           "promoted MiB | promotion ms (mean) | written MiB | evictions | dropped | "
           "write errors |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_rows; i++) {
        const mode_row *r = &rows[i];
        if (!r->tiers) continue;
        // the requests' hits less the promotions: the documents their pool served (the cache's
        // own counter also counts lookups of admissions retried for room)
        int64_t pool_hits = r->doc_hits;
        for (int t = 0; t < 3; t++) pool_hits -= r->tier[t].promotions;
        for (int t = 0; t < 3; t++) {
            const li_cache_tier_stats *s = &r->tier[t];
            if (!s->enabled) continue;
            printf("| %s | %.3f | %lld | %s | %lld | %lld | %.1f | %.2f | %.1f | %lld | %lld | "
                   "%lld |\n",
                   r->label,
                   r->doc_lookups ? (double)r->doc_hits / r->doc_lookups : 0.0,
                   (long long)(pool_hits > 0 ? pool_hits : 0), names[t], (long long)s->hits, (long long)s->misses,
                   s->bytes_in / 1048576.0, s->promotions ? s->promote_ms / s->promotions : 0.0,
                   s->bytes_out / 1048576.0, (long long)s->evictions, (long long)s->dropped,
                   (long long)s->errors);
        }
    }
}

static void print_table(const mode_row *rows, int n_rows, int R) {
    printf("| mode | done | TTFT p50 ms | p90 | p99 | mean | e2e mean ms | req/s | gen tok/s | "
           "doc hit ratio | doc hits/lookups | prompt tok computed | resident MiB | evictions | "
           "copies | same tokens | CPU s | load1 |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_rows; i++) {
        const mode_row *r = &rows[i];
        printf("| %s | %d/%d | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f | %.2f | %.3f | %lld/%lld | "
               "%lld | %.1f | %lld | %lld | %d/%d | %.1f | %.1f |\n",
               r->label, r->n_ok, R, r->ttft[0], r->ttft[1], r->ttft[2],
               r->ttft[3], r->e2e_mean, r->req_per_s, r->tok_per_s,
               r->doc_tokens ? (double)r->cached_tokens / r->doc_tokens : 0.0,
               (long long)r->doc_hits, (long long)r->doc_lookups, (long long)r->computed_tokens,
               r->resident_bytes / 1048576.0, (long long)r->evictions, (long long)r->copies,
               r->n_same, r->n_ok, r->cpu_s, r->loadavg);
    }
    for (int i = 0; i < n_rows; i++)
        if (rows[i].n_failed)
            printf("\n%s: %d request(s) failed, first: %s\n", li_cache_mode_name(rows[i].mode),
                   rows[i].n_failed, rows[i].first_error);
    print_tier_rows(rows, n_rows);
}

// The sweep's table (--rates / --budgets): one row per (rate, budget, mode), printed as each run
// ends so that a long sweep shows its results as it goes.
static void print_sweep_header(void) {
    printf("| mode | rate /s | budget | TTFT p50 ms | TTFT p99 ms | req/s | gen tok/s | "
           "doc hit ratio | done |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
}

// A run where no request finished has no TTFT: "-" here, an empty field in the CSV (NaN to a
// plotting script), not a 0 that would read as instantaneous.
static void print_sweep_row(const mode_row *r, int R) {
    char p50[32] = "-", p99[32] = "-";
    if (r->n_ok > 0) {
        snprintf(p50, sizeof p50, "%.0f", r->ttft[0]);
        snprintf(p99, sizeof p99, "%.0f", r->ttft[2]);
    }
    printf("| %s | %g | %s | %s | %s | %.3f | %.2f | %.3f | %d/%d |\n", li_cache_mode_name(r->mode),
           r->rate, r->budget, p50, p99, r->req_per_s, r->tok_per_s,
           r->doc_tokens ? (double)r->cached_tokens / r->doc_tokens : 0.0, r->n_ok, R);
}

// --csv: the sweep's columns (in every run, list options or not), plus the bytes behind the
// budget and the average document size in pages, so a plot can put the budget in documents.
static void csv_header(FILE *f) {
    fprintf(f, "mode,rate,budget,budget_bytes,kv_pool_bytes,page_bytes,avg_doc_pages,ttft_p50_ms,"
               "ttft_p99_ms,req_per_s,gen_tok_per_s,doc_hit_ratio,done,requests\n");
    fflush(f);
}

static void csv_row(FILE *f, const mode_row *r, int R) {
    char p50[32] = "", p99[32] = "";
    if (r->n_ok > 0) {
        snprintf(p50, sizeof p50, "%.3f", r->ttft[0]);
        snprintf(p99, sizeof p99, "%.3f", r->ttft[2]);
    }
    fprintf(f, "%s,%g,%s,%lld,%lld,%lld,%.3f,%s,%s,%.4f,%.3f,%.4f,%d,%d\n",
            li_cache_mode_name(r->mode), r->rate, r->budget, (long long)r->budget_bytes,
            (long long)(r->pages_total * r->page_bytes), (long long)r->page_bytes, r->avg_doc_pages,
            p50, p99, r->req_per_s, r->tok_per_s,
            r->doc_tokens ? (double)r->cached_tokens / r->doc_tokens : 0.0, r->n_ok, R);
    fflush(f); // a sweep cut short keeps the rows it finished
}

// TTFT CDF per mode through gnuplot (pngcairo), log-scaled time axis.
static int plot_cdf(const char *path, const mode_row *rows, int n_rows, const char *title) {
    FILE *probe = popen("command -v gnuplot >/dev/null 2>&1", "r");
    int have = probe && pclose(probe) == 0;
    if (!have) {
        fprintf(stderr, "lazyinfer bench rag: --plot needs gnuplot, which is not installed "
                        "(Debian: apt-get install gnuplot-nox)\n");
        return 1;
    }
    FILE *gp = popen("gnuplot", "w");
    if (!gp) {
        fprintf(stderr, "lazyinfer bench rag: cannot start gnuplot: %s\n", strerror(errno));
        return 1;
    }
    fprintf(gp, "set terminal pngcairo size 960,600 font 'sans,11'\nset output '%s'\n", path);
    fprintf(gp,
            "set title \"%s\" noenhanced\nset xlabel 'TTFT (s, arrival to first token)'\n"
            "set ylabel 'fraction of requests'\nset logscale x\nset grid\nset key bottom right\n"
            "set yrange [0:1.02]\n",
            title);
    for (int i = 0; i < n_rows; i++) {
        fprintf(gp, "$m%d << EOD\n", i);
        int n = rows[i].n_ok;
        if (n > 0) fprintf(gp, "%.6f 0\n", rows[i].ttft_sorted[0] / 1e3); // the step up from 0
        for (int j = 0; j < n; j++)
            fprintf(gp, "%.6f %.6f\n", rows[i].ttft_sorted[j] / 1e3, (j + 1.0) / n);
        fprintf(gp, "EOD\n");
    }
    fprintf(gp, "plot ");
    for (int i = 0; i < n_rows; i++) {
        fprintf(gp, "%s$m%d using 1:2 with steps lw 2", i ? ", " : "", i);
        if (rows[i].lc) fprintf(gp, " lc %d dt %d", rows[i].lc, rows[i].dt);
        fprintf(gp, " title '%s'", rows[i].label);
    }
    fprintf(gp, "\n");
    if (pclose(gp) != 0) {
        fprintf(stderr, "lazyinfer bench rag: gnuplot failed writing '%s'\n", path);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", path);
    return 0;
}

// ---- the command -----------------------------------------------------------------------------

static const char usage_text[] =
    "usage: lazyinfer bench rag [-m MODEL] [--samples DIR | --synthetic] [--docs N] [--alpha A]\n"
    "                           [--k K] [--doc-len L] [--query-len Q] [--out-len O]\n"
    "                           [--rate R | --rates R1,R2,...] [--requests R]\n"
    "                           [--budget BYTES | --budgets B1,B2,...] [--csv out.csv]\n"
    "                           [--mode lazy|copy|prefix|none|all] [--max-batch B] [--seed S]\n"
    "                           [--evict lru|gdsf] [-c CTX] [-t THREADS] [--plot out.png]\n"
    "                           [--host-cache SIZE] [--disk-cache DIR --disk-budget SIZE]\n"
    "                           [--kv-remote redis://HOST:PORT[/DB]]\n\n"
    "RAG serving benchmark: one Zipf(α) trace over the RAG samples' passages (or, with\n"
    "--synthetic, over documents of random token ids), replayed through the engine's scheduler\n"
    "once per cache mode (fresh model load each, load time excluded). Prints a markdown table of\n"
    "TTFT percentiles, throughput and document hit ratio per mode; with --rates / --budgets, one\n"
    "row per (rate, budget, mode). With --host-cache / --disk-cache / --kv-remote, lazy and copy\n"
    "run twice, pool only and with the tiers (\"lazy+tiers\"), and a second table says where\n"
    "documents came from; each run with tiers first EMPTIES the --disk-cache directory and the\n"
    "--kv-remote database's lazyinfer entries, so that it starts cold.";

// Parses a mode list: a mode, a comma-separated list, or "all" (lazy, copy, prefix, none).
static bool parse_modes(const char *s, li_cache_mode *modes, int *n) {
    *n = 0;
    if (!strcmp(s, "all")) {
        li_cache_mode all[] = {LI_CACHE_LAZY, LI_CACHE_COPY, LI_CACHE_PREFIX, LI_CACHE_NONE};
        memcpy(modes, all, sizeof all);
        *n = 4;
        return true;
    }
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n >= MAX_MODES / 2 || li_cache_mode_parse(t, &modes[*n]) != LI_OK) return false;
        (*n)++;
    }
    return *n > 0;
}

// Splits a comma list in place (buf) into at most MAX_LIST items. An empty list or an empty
// item ("1,,2", "1,") is an error rather than skipped: it is most likely a typo.
static bool split_list(char *buf, char **items, int *n) {
    *n = 0;
    for (char *t = buf;;) {
        char *comma = strchr(t, ',');
        if (comma) *comma = 0;
        if (!*t || *n >= MAX_LIST) return false;
        items[(*n)++] = t;
        if (!comma) return true;
        t = comma + 1;
    }
}

// --rates: arrival rates >= 0 (requests/s).
static bool parse_rates(const char *s, char *buf, size_t cap, double *rates, int *n) {
    char *items[MAX_LIST];
    if ((size_t)snprintf(buf, cap, "%s", s) >= cap || !split_list(buf, items, n)) return false;
    for (int i = 0; i < *n; i++) {
        char *end;
        errno = 0;
        rates[i] = strtod(items[i], &end);
        if (end == items[i] || *end || errno || !(rates[i] >= 0) || isinf(rates[i])) return false;
    }
    return true;
}

// --budgets: KV pool bytes > 0 with K/M/G suffixes; items[i] (in buf) keeps each as written.
static bool parse_budgets(const char *s, char *buf, size_t cap, char **items, int64_t *bytes,
                          int *n) {
    if ((size_t)snprintf(buf, cap, "%s", s) >= cap || !split_list(buf, items, n)) return false;
    for (int i = 0; i < *n; i++)
        if (!cli_parse_bytes(items[i], &bytes[i]) || bytes[i] <= 0) return false;
    return true;
}

// Whether option `name` is on the command line, walking argv as cli_parse_args does (an option's
// value is never taken for an option). Tells "--rate 0.5" from the default 0.5, and --docs 0
// (an error with --synthetic) from no --docs.
static bool opt_given(int argc, char **argv, const opt *opts, int n_opts, const char *name) {
    for (int i = 1; i < argc; i++) {
        const opt *o = cli_find_opt(opts, n_opts, argv[i]);
        if (!o) continue;
        if (!strcmp(o->long_name, name)) return true;
        if (o->kind != OPT_FLAG) i++;
    }
    return false;
}

// --synthetic: defaults and checks of the workload's sizes. 0 if fine, else 2 (message printed).
static int synthetic_args(bench_args *a, int argc, char **argv, const opt *opts, int n_opts) {
    struct {
        const char *name;
        int *v, def;
        const char *what;
    } lens[] = {
        {"--docs", &a->n_docs, 100, "documents"},
        {"--doc-len", &a->doc_len, 2048, "tokens per document"},
        {"--query-len", &a->query_len, 64, "tokens per query"},
    };
    if (a->samples) {
        fprintf(stderr, "lazyinfer bench rag: --samples and --synthetic exclude each other: "
                        "--synthetic makes documents and queries of random tokens instead of "
                        "reading sample files\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        if (!opt_given(argc, argv, opts, n_opts, lens[i].name)) {
            *lens[i].v = lens[i].def;
        } else if (*lens[i].v < 1) {
            fprintf(stderr,
                    "lazyinfer bench rag: %s %d: with --synthetic it is the number of %s, so it "
                    "must be >= 1\n",
                    lens[i].name, *lens[i].v, lens[i].what);
            return 2;
        }
    }
    if ((long long)a->n_docs * a->doc_len > SYN_MAX_TOKENS) {
        fprintf(stderr,
                "lazyinfer bench rag: --docs %d × --doc-len %d = %lld synthetic tokens: at most "
                "%lld\n",
                a->n_docs, a->doc_len, (long long)a->n_docs * a->doc_len, SYN_MAX_TOKENS);
        return 2;
    }
    if (a->k >= 1 && a->k <= MAX_K &&
        (long long)a->k * a->doc_len + a->query_len + a->out_len > INT_MAX / 2) {
        fprintf(stderr,
                "lazyinfer bench rag: --k %d × --doc-len %d + --query-len %d + --out-len %d "
                "tokens per request is too long\n",
                a->k, a->doc_len, a->query_len, a->out_len);
        return 2;
    }
    return 0;
}

// With tiers, lazy and copy run twice: each of them in modes (n) is followed by itself again
// with tiers[i] true. Returns the new count (at most 2 n <= MAX_MODES: parse_modes keeps n <=
// MAX_MODES / 2).
static int add_tier_runs(li_cache_mode *modes, bool *tiers, int n) {
    li_cache_mode m2[MAX_MODES];
    bool t2[MAX_MODES];
    int n2 = 0;
    for (int i = 0; i < n; i++) {
        m2[n2] = modes[i];
        t2[n2++] = false;
        if (modes[i] == LI_CACHE_LAZY || modes[i] == LI_CACHE_COPY) {
            m2[n2] = modes[i];
            t2[n2++] = true;
        }
    }
    memcpy(modes, m2, sizeof m2);
    memcpy(tiers, t2, sizeof t2);
    return n2;
}

// The numeric options' ranges and --plot's name; false after printing the one line that says
// what is wrong.
static bool args_in_range(const bench_args *a) {
    if (a->k < 1 || a->k > MAX_K || a->out_len < 1 || a->n_requests < 1 ||
        a->n_requests > MAX_REQUESTS || a->max_batch < 1 || a->mp.n_threads < 0 ||
        a->n_docs < 0 || a->doc_len < 0 || a->query_len < 0 || !(a->rate >= 0) ||
        !(a->alpha >= 0 && a->alpha <= 100)) {
        fprintf(stderr,
                "lazyinfer bench rag: out of range: need 1 <= --k <= %d, --out-len >= 1, "
                "1 <= --requests <= %d, --max-batch >= 1, 0 <= --alpha <= 100, and "
                "--docs, --doc-len, --query-len, --rate, -t >= 0\n",
                MAX_K, MAX_REQUESTS);
        return false;
    }
    if (a->mp.n_ctx < 0) {
        fprintf(stderr, "lazyinfer bench rag: --ctx-size %d: must be >= 0 (0: the default)\n",
                a->mp.n_ctx);
        return false;
    }
    if (a->plot && strpbrk(a->plot, "'\n\\")) { // it goes into the gnuplot script in quotes
        fprintf(stderr,
                "lazyinfer bench rag: --plot '%s': the file name must not contain a quote, "
                "backslash or newline\n",
                a->plot);
        return false;
    }
    return true;
}

// The runs: every rate × budget × mode. Without the list options it is the one --rate and
// --budget, and the output is the full per-mode table (a sweep prints a short row per run).
typedef struct {
    li_cache_mode modes[MAX_MODES];
    bool mode_tiers[MAX_MODES];   // (n_modes) run with the tiers: the second lazy / copy run
    int n_modes;
    double rates[MAX_LIST];       // (n_rates) requests/s
    int64_t budgets[MAX_LIST];    // (n_budgets) KV pool bytes, 0: the engine's default
    char *budget_names[MAX_LIST]; // (n_budgets) as given (in budgets_buf), or "default"
    int n_rates, n_budgets;
    bool sweep;                   // --rates or --budgets given
    char rates_buf[1024], budgets_buf[1024];
} sweep_plan;

// The buffers of the runs, allocated once for all of them.
typedef struct {
    trace_req *tr;   // (n_requests) the trace of the rate being run
    req_out *out;    // (n_requests) the outcomes of the run
    uint64_t *hash0; // (n_requests) the tokens every run must generate, where have0
    bool *have0;     // (n_requests)
    mode_row *rows;  // (n_runs) the runs done: n_rows
    int n_runs, n_rows;
    FILE *csv;       // --csv, opened before the runs; NULL without it
} bench_runs;

// What the model says of a synthetic workload (synthetic_model_facts).
typedef struct {
    int32_t *ok_ids; // (n_ok_ids) the ordinary token ids documents are drawn from
    int n_ok_ids;
    int32_t id_hi;   // they are those of [SYN_ID_LO, id_hi)
    int def_ctx;     // the model's default context
} syn_facts;

// The checks of the options past their syntax, and the plan of runs into sp: the modes (lazy and
// copy twice with tiers), the rates and the budgets. -1 to go on, else 2 after the message.
static int plan_runs(int argc, char **argv, const opt *opts, int n_opts, bench_args *a,
                     sweep_plan *sp) {
    memset(sp, 0, sizeof *sp);
    int64_t budget = 0;
    if (!parse_modes(a->mode_s, sp->modes, &sp->n_modes)) {
        fprintf(stderr,
                "lazyinfer bench rag: --mode '%s': expected lazy, copy, prefix, none, full, "
                "a comma list of them, or all\n",
                a->mode_s);
        return 2;
    }
    a->evict = a->tiers.evict;  // (--evict is one of CLI_TIER_OPTS: checked below)
    if (li_repair_parse(a->repair_s, &a->repair) != LI_OK) {
        fprintf(stderr, "lazyinfer bench rag: --repair: %s\n", li_last_error());
        return 2;
    }
    // With tiers, lazy and copy run twice: pool only, then with the tiers (the disk directory
    // and the Redis namespace emptied first, so every run starts cold).
    a->tier_mp = li_model_default_params();
    if (!cli_tier_params("bench rag", &a->tiers, &a->tier_mp)) return 2;
    if (a->tier_mp.host_cache_bytes > 0 || a->tier_mp.disk_cache_dir || a->tier_mp.kv_remote)
        sp->n_modes = add_tier_runs(sp->modes, sp->mode_tiers, sp->n_modes);
    if (a->budget_s && !cli_parse_bytes(a->budget_s, &budget)) {
        fprintf(stderr,
                "lazyinfer bench rag: --budget '%s': expected bytes with an optional "
                "K/M/G suffix (e.g. 256M)\n",
                a->budget_s);
        return 2;
    }
    sp->sweep = a->rates_s || a->budgets_s;
    sp->rates[0] = a->rate;
    sp->budgets[0] = budget;
    sp->budget_names[0] = (char *)(a->budget_s ? a->budget_s : "default");
    sp->n_rates = 1, sp->n_budgets = 1;
    if (a->rates_s && opt_given(argc, argv, opts, n_opts, "--rate")) {
        fprintf(stderr, "lazyinfer bench rag: give --rate or --rates, not both\n");
        return 2;
    }
    if (a->budgets_s && a->budget_s) {
        fprintf(stderr, "lazyinfer bench rag: give --budget or --budgets, not both\n");
        return 2;
    }
    if (a->rates_s && !parse_rates(a->rates_s, sp->rates_buf, sizeof sp->rates_buf, sp->rates,
                                   &sp->n_rates)) {
        fprintf(stderr,
                "lazyinfer bench rag: --rates '%s': expected a comma list of 1 to %d arrival "
                "rates >= 0 in requests/s (e.g. 0,0.5,1), no empty item\n",
                a->rates_s, MAX_LIST);
        return 2;
    }
    if (a->budgets_s && !parse_budgets(a->budgets_s, sp->budgets_buf, sizeof sp->budgets_buf,
                                       sp->budget_names, sp->budgets, &sp->n_budgets)) {
        fprintf(stderr,
                "lazyinfer bench rag: --budgets '%s': expected a comma list of 1 to %d byte "
                "counts > 0 with optional K/M/G suffixes (e.g. 256M,1G), no empty item\n",
                a->budgets_s, MAX_LIST);
        return 2;
    }
    int r;
    if (a->synthetic && (r = synthetic_args(a, argc, argv, opts, n_opts)) != 0) return r;
    if (!args_in_range(a)) return 2;
    return -1;
}

// The command line into a, the runs into sp. -1 to go on, else the exit code: 0 after --help,
// 2 after the message saying what is wrong.
static int parse_args(int argc, char **argv, bench_args *a, sweep_plan *sp) {
    *a = (bench_args){.mode_s = "all",
                      .repair_s = "none",
                      .n_docs = 0,
                      .k = 3,
                      .out_len = 16,
                      .n_requests = 16,
                      .max_batch = 4,
                      .alpha = 1.5f,
                      .rate = 0.5f,
                      .seed = 1,
                      .mp = li_model_default_params()};
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &a->mp.path, "model (default: the model setup fetched)"},
        {"--samples", NULL, OPT_STR, &a->samples,
         "folder of RAG sample JSONs (default " SAMPLES_REL ", under the working directory or "
         "next to the binary)"},
        {"--synthetic", NULL, OPT_FLAG, &a->synthetic,
         "no sample files: N documents of exactly L random token ids (uniform over ordinary ids "
         "of the model's vocabulary, from --seed) and per request a query of random lowercase "
         "words cut to Q tokens (a request takes its query as text; exactly Q with a byte-level "
         "tokenizer, about Q with BPE); defaults --docs 100 --doc-len 2048 --query-len 64"},
        {"--docs", NULL, OPT_INT, &a->n_docs,
         "document pool size N (default: every passage of the samples; 100 with --synthetic)"},
        {"--alpha", NULL, OPT_FLOAT, &a->alpha, "Zipf exponent, P(rank r) ∝ r^-α (default 1.5)"},
        {"--k", NULL, OPT_INT, &a->k, "distinct documents per request (default 3)"},
        {"--doc-len", NULL, OPT_INT, &a->doc_len,
         "cut documents to at most L tokens (default: as they are); with --synthetic every "
         "document has exactly L (default 2048)"},
        {"--query-len", NULL, OPT_INT, &a->query_len,
         "cut queries to at most Q tokens (default: as they are; 64 with --synthetic)"},
        {"--out-len", NULL, OPT_INT, &a->out_len,
         "tokens generated per request, greedy, EOS ignored (default 16)"},
        {"--rate", NULL, OPT_FLOAT, &a->rate,
         "Poisson arrival rate, requests/s; 0 = all at once (default 0.5)"},
        {"--rates", NULL, OPT_STR, &a->rates_s,
         "sweep: comma list of arrival rates (e.g. 0,0.5,1), one run per rate, budget and mode"},
        {"--requests", NULL, OPT_INT, &a->n_requests, "requests in the trace (default 16)"},
        {"--budget", NULL, OPT_STR, &a->budget_s,
         "KV pool bytes, K/M/G suffixes (default: max-batch × context)"},
        {"--budgets", NULL, OPT_STR, &a->budgets_s,
         "sweep: comma list of KV pool budgets (e.g. 256M,1G,4G)"},
        {"--csv", NULL, OPT_STR, &a->csv,
         "also write one CSV row per (rate, budget, mode) run, header line first"},
        {"--mode", NULL, OPT_STR, &a->mode_s,
         "lazy, copy, prefix, none, full, a comma list, or all (= lazy,copy,prefix,none; default)"},
        {"--repair", NULL, OPT_STR, &a->repair_s,
         "none (default), head[:K] or blend[:R]: the lazy and copy runs recompute document tokens "
         "in each request's context (docs/RAG.md \"Repair\"); labels say so"},
        {"--max-batch", NULL, OPT_INT, &a->max_batch, "requests running at once (default 4)"},
        {"--seed", NULL, OPT_U64, &a->seed, "trace seed (default 1)"},
        {"--ctx-size", "-c", OPT_INT, &a->mp.n_ctx,
         "context per request in tokens (default: min(trained, 4096); with --synthetic what a "
         "request needs: k × doc-len + query-len + out-len + the chat template's tokens)"},
        CLI_DEVICE_OPTS(a->mp),
        CLI_KV_DTYPE_OPT(a->mp),
        CLI_FP8_OPT(a->mp),
        {"--plot", NULL, OPT_STR, &a->plot,
         "also write a PNG of the TTFT CDF per mode (needs gnuplot)"},
        {"--trace", NULL, OPT_STR, &a->trace,
         "write the trace: per request 'arrival_ms query rank@doc …' (with several --rates, "
         "one file per rate: FILE.rate-R)"},
        {"--dry-run", NULL, OPT_FLAG, &a->dry_run, "make (and --trace) the workload, run nothing"},
        CLI_TIER_OPTS(a->tiers),
    };
    const int n_opts = sizeof opts / sizeof opts[0];
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(argc, argv, usage_text, opts, n_opts, pos, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (!a->mp.path) a->mp.path = cli_default_model();
    return plan_runs(argc, argv, opts, n_opts, a, sp);
}

// The corpus: with --synthetic an empty one (its documents are made once the model is known),
// else the samples' passages and queries, --docs defaulting to all of them; dir: the samples
// folder (left NULL with --synthetic). -1 to go on, else the exit code after the message.
static int open_corpus(bench_args *a, corpus *c, const char **dir) {
    if (a->synthetic) {
        if (a->k > a->n_docs) {
            fprintf(stderr, "lazyinfer bench rag: --k %d needs at least as many --docs (%d)\n", a->k,
                    a->n_docs);
            return 2;
        }
        if (synthetic_corpus(c, a) != LI_OK) return cli_fail("bench rag: synthetic workload");
        return -1;
    }
    static char dir_buf[PATH_MAX + sizeof SAMPLES_REL + 1];
    if (!(*dir = a->samples) && !(*dir = cli_data_path(SAMPLES_REL, dir_buf, sizeof dir_buf))) {
        cli_data_missing("bench rag", "RAG samples folder", SAMPLES_REL, dir_buf,
                         "run from the repository root (the samples are in git), pass "
                         "--samples DIR or use --synthetic");
        return 2;
    }
    if (load_corpus(c, *dir) != LI_OK) return cli_fail("bench rag: samples");
    if (a->n_docs == 0) a->n_docs = c->n_docs;
    if (a->n_docs > c->n_docs || a->k > a->n_docs) {
        fprintf(stderr,
                "lazyinfer bench rag: --docs %d and --k %d need k <= N <= %d (the passages "
                "in %s)\n",
                a->n_docs, a->k, c->n_docs, *dir);
        corpus_free(c);
        return 2;
    }
    return -1;
}

// The model's vocabulary and chat template size the synthetic documents and the context, so
// they are known before the header: the documents into c, the facts into sf, a longer context
// into a. 0, or 1 after the message.
static int size_synthetic(bench_args *a, corpus *c, syn_facts *sf) {
    int chat_tokens = 0;
    li_status rc = synthetic_model_facts(a, &sf->ok_ids, &sf->n_ok_ids, &sf->id_hi, &chat_tokens,
                                         &sf->def_ctx);
    if (rc == LI_OK) rc = synthetic_docs(c, a, sf->ok_ids, sf->n_ok_ids);
    if (rc != LI_OK) return cli_fail("bench rag: synthetic workload");
    // The default context (4096 for Llama 3.1) is too short for k long documents: raise it
    // to what a request needs, in whole pages of 16. Never lower it: the engine caps its
    // tokens per forward at the context, which would change the batching being measured.
    int need = a->k * a->doc_len + a->query_len + a->out_len + chat_tokens + 16;
    if (a->mp.n_ctx == 0 && need > sf->def_ctx) a->mp.n_ctx = (need + 15) / 16 * 16;
    return 0;
}

// The trace of every rate (a dry run's output), each written to --trace (FILE.rate-R with
// several rates); tr keeps the last. 0, or 1 after the message.
static int make_traces(bench_args *a, const sweep_plan *sp, const corpus *c, trace_req *tr) {
    for (int ri = 0; ri < sp->n_rates; ri++) {
        a->rate = (float)sp->rates[ri];
        if (make_trace(a, c->n_queries, sp->sweep, tr) != LI_OK)
            return cli_fail("bench rag: trace");
        if (!a->trace) continue;
        char path[PATH_MAX + 64];
        if (sp->n_rates > 1)
            snprintf(path, sizeof path, "%s.rate-%g", a->trace, sp->rates[ri]);
        else
            snprintf(path, sizeof path, "%s", a->trace);
        if (write_trace(path, a, tr) != LI_OK) return cli_fail("bench rag");
    }
    return 0;
}

// The header: the workload's parameters (also the plot's title, into title) and where its
// documents come from (dir: the samples folder; sf: a synthetic workload's facts).
static void print_header(const bench_args *a, const char *dir, const corpus *c,
                         const syn_facts *sf, char *title, size_t title_cap) {
    char rate_s[1100], budget_s[1100];
    if (a->rates_s)
        snprintf(rate_s, sizeof rate_s, "rates %s/s", a->rates_s);
    else
        snprintf(rate_s, sizeof rate_s, "rate %g/s", a->rate);
    if (a->budgets_s)
        snprintf(budget_s, sizeof budget_s, "budgets %s", a->budgets_s);
    else
        snprintf(budget_s, sizeof budget_s, "budget %s", a->budget_s ? a->budget_s : "default");
    snprintf(title, title_cap,
             "bench rag: N=%d docs, Zipf alpha=%g, k=%d, %d requests, %s, out %d, %s, "
             "max batch %d, seed %llu, eviction %s",
             a->n_docs, a->alpha, a->k, a->n_requests, rate_s, a->out_len, budget_s, a->max_batch,
             (unsigned long long)a->seed, a->evict ? a->evict : "lru");
    printf("%s\n", title);
    if (!a->synthetic)
        printf("samples: %s (%d passages, %d queries)\n", dir, c->n_docs, c->n_queries);
    else if (a->dry_run)
        printf("workload: synthetic, %d documents of %d random token ids, queries of %d tokens "
               "(random lowercase words)\n",
               a->n_docs, a->doc_len, a->query_len);
    else
        printf("workload: synthetic, %d documents of %d random token ids (the %d ordinary ids "
               "of [%d, %d)), queries of %d tokens (random lowercase words); context %d tokens "
               "per request\n",
               a->n_docs, a->doc_len, sf->n_ok_ids, SYN_ID_LO, sf->id_hi, a->query_len,
               a->mp.n_ctx ? a->mp.n_ctx : sf->def_ctx);
}

// A finished run's rate, budget and label (for the plot: the mode, plus rate and budget in a
// sweep, with a colour per mode and a dash pattern per rate × budget).
static void label_row(mode_row *row, const bench_args *a, const sweep_plan *sp, int ri, int bi,
                      int mi) {
    const char *mode = li_cache_mode_name(sp->modes[mi]);
    row->rate = sp->rates[ri];
    row->budget = sp->budget_names[bi];
    row->budget_bytes = sp->budgets[bi];
    if (sp->sweep) {
        snprintf(row->label, sizeof row->label, "%s %g/s %s", mode, sp->rates[ri],
                 sp->budget_names[bi]);
        row->lc = mi + 1; // a colour per mode, a dash pattern per rate × budget
        row->dt = (ri * sp->n_budgets + bi) % 5 + 1;
    } else
        snprintf(row->label, sizeof row->label, "%s%s", mode, sp->mode_tiers[mi] ? "+tiers" : "");
    if (a->repair.mode != LI_REPAIR_NONE &&
        (sp->modes[mi] == LI_CACHE_LAZY || sp->modes[mi] == LI_CACHE_COPY)) {
        char rp[32];
        li_repair_format(&a->repair, rp, sizeof rp);
        snprintf(row->label + strlen(row->label), sizeof row->label - strlen(row->label),
                 " repair %s", rp);
    }
    if (sp->sweep && sp->mode_tiers[mi])
        strncat(row->label, " +tiers", sizeof row->label - strlen(row->label) - 1);
}

// The same requests (documents and query) in every run of a sweep too: the traces of all rates
// draw the same documents (make_trace's every_gap). A sweep compares with the first run where
// the request finished (a small budget can fail every request of a run); a single run keeps its
// first-mode reference. Counts into row->n_same the requests that generated the reference's
// tokens.
static void compare_tokens(bench_runs *br, int n_requests, bool sweep, mode_row *row) {
    for (int q = 0; q < n_requests; q++) {
        bool ok = br->out[q].res.status == LI_OK;
        if (sweep ? ok && !br->have0[q] : br->n_rows == 0) {
            br->hash0[q] = br->out[q].tok_hash;
            br->have0[q] = true;
        }
        row->n_same += ok && br->out[q].tok_hash == br->hash0[q];
    }
}

// Every run of the plan into br->rows, in a sweep each row printed as it finishes, and each
// written to --csv. 0, or 1 after the message.
static int run_all(bench_args *a, const sweep_plan *sp, const corpus *c, bench_runs *br) {
    for (int ri = 0; ri < sp->n_rates; ri++) {
        a->rate = (float)sp->rates[ri];
        if (sp->n_rates > 1 && make_trace(a, c->n_queries, sp->sweep, br->tr) != LI_OK)
            return cli_fail("bench rag: trace");
        for (int bi = 0; bi < sp->n_budgets; bi++) {
            for (int mi = 0; mi < sp->n_modes; mi++) {
                mode_row *row = &br->rows[br->n_rows];
                const char *mode = li_cache_mode_name(sp->modes[mi]);
                if (sp->sweep)
                    fprintf(stderr,
                            "bench rag: run %d of %d: mode %s, rate %g/s, budget %s (load "
                            "average %.2f)\n",
                            br->n_rows + 1, br->n_runs, mode, sp->rates[ri],
                            sp->budget_names[bi], loadavg1());
                else
                    fprintf(stderr, "bench rag: mode %s (load average %.2f)\n", mode, loadavg1());
                if (run_mode(a, c, br->tr, sp->budgets[bi], sp->modes[mi], sp->mode_tiers[mi],
                             br->out, row) != LI_OK)
                    return cli_fail("bench rag");
                label_row(row, a, sp, ri, bi, mi);
                compare_tokens(br, a->n_requests, sp->sweep, row);
                br->n_rows++;
                fprintf(stderr, "bench rag: mode %s: %.1f s (load %.1f s excluded)\n", mode,
                        row->wall_s, row->load_ms / 1e3);
                if (sp->sweep) {
                    if (row->n_same != row->n_ok)
                        fprintf(stderr,
                                "bench rag: %s: %d of %d requests generated other tokens than "
                                "in the first run\n",
                                row->label, row->n_ok - row->n_same, row->n_ok);
                    print_sweep_row(row, a->n_requests);
                    fflush(stdout);
                }
                if (br->csv) csv_row(br->csv, row, a->n_requests);
            }
        }
    }
    return 0;
}

// After the runs: the pool's documents and the table (one run), or the documents and the
// failed requests of each run (a sweep, whose rows are printed already).
static void print_summary(const mode_row *rows, int n_rows, int n_requests, bool sweep) {
    if (!sweep && n_rows > 0 && rows[0].page_bytes > 0) {
        const mode_row *r0 = &rows[0];
        printf("documents: %.0f tokens on average (%.1f pages); KV pool: %lld pages of %lld bytes "
               "(%.1f MiB) = %.1f average documents\n\n",
               r0->avg_doc_tokens, r0->avg_doc_pages, (long long)r0->pages_total,
               (long long)r0->page_bytes, r0->pages_total * r0->page_bytes / 1048576.0,
               r0->avg_doc_pages > 0 ? r0->pages_total / r0->avg_doc_pages : 0.0);
    }
    if (!sweep) {
        print_table(rows, n_rows, n_requests);
        return;
    }
    if (n_rows > 0 && rows[0].page_bytes > 0)
        printf("\ndocuments: %.0f tokens on average (%.1f pages of %lld bytes)\n",
               rows[0].avg_doc_tokens, rows[0].avg_doc_pages, (long long)rows[0].page_bytes);
    bool first = true;
    for (int i = 0; i < n_rows; i++)
        if (rows[i].n_failed) {
            printf("%s%s: %d request(s) failed, first: %s\n", first ? "\n" : "", rows[i].label,
                   rows[i].n_failed, rows[i].first_error);
            first = false;
        }
}

// Parse and check the options, load the corpus, make the traces and print the header (all a
// dry run does), then run every rate × budget × mode and print the table, the CSV and the plot.
int cmd_bench_rag(int argc, char **argv) {
    bench_args a;
    sweep_plan sp;
    int status = parse_args(argc, argv, &a, &sp);
    if (status >= 0) return status;
    corpus c;
    const char *dir = NULL;
    if ((status = open_corpus(&a, &c, &dir)) >= 0) return status;
    const int n_runs = sp.n_rates * sp.n_budgets * sp.n_modes;
    bench_runs br = {.tr = calloc((size_t)a.n_requests, sizeof *br.tr),
                     .out = calloc((size_t)a.n_requests, sizeof *br.out),
                     .hash0 = calloc((size_t)a.n_requests, sizeof *br.hash0),
                     .have0 = calloc((size_t)a.n_requests, sizeof *br.have0),
                     .rows = calloc((size_t)n_runs, sizeof *br.rows),
                     .n_runs = n_runs};
    syn_facts sf = {0};
    status = 0;
    if (!br.tr || !br.out || !br.hash0 || !br.have0 || !br.rows) {
        li_error_set(LI_ERR_OOM, "out of memory");
        status = cli_fail("bench rag");
        goto done;
    }
    // (a dry run loads nothing: its synthetic documents stay unmade)
    if (a.synthetic && !a.dry_run && (status = size_synthetic(&a, &c, &sf)) != 0) goto done;
    // Opened before the runs: a path that cannot be written fails now, not after a long sweep.
    if (a.csv && !a.dry_run) {
        if (!(br.csv = fopen(a.csv, "w"))) {
            li_error_set(LI_ERR_IO, "cannot write --csv '%s': %s", a.csv, strerror(errno));
            status = cli_fail("bench rag");
            goto done;
        }
        csv_header(br.csv);
    }
    if ((status = make_traces(&a, &sp, &c, br.tr)) != 0) goto done;
    char title[3072];
    print_header(&a, dir, &c, &sf, title, sizeof title);
    if (a.dry_run) goto done;
    printf("model: %s\n\n", a.mp.path);
    if (sp.sweep) print_sweep_header();
    fflush(stdout);
    if ((status = run_all(&a, &sp, &c, &br)) != 0) goto done;
    print_summary(br.rows, br.n_rows, a.n_requests, sp.sweep);
    if (br.csv) {
        FILE *f = br.csv;
        br.csv = NULL;
        if (fclose(f) != 0) {
            li_error_set(LI_ERR_IO, "cannot write --csv '%s'", a.csv);
            status = cli_fail("bench rag");
            goto done;
        }
        fprintf(stderr, "wrote %s\n", a.csv);
    }
    if (a.plot && br.n_rows > 0) status = plot_cdf(a.plot, br.rows, br.n_rows, title);
done:
    if (br.csv) fclose(br.csv);
    for (int i = 0; br.rows && i < n_runs; i++)
        free(br.rows[i].ttft_sorted);
    free(br.rows);
    free(br.tr);
    free(br.out);
    free(br.hash0);
    free(br.have0);
    free(sf.ok_ids);
    corpus_free(&c);
    return status;
}
