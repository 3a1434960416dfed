// cmd-sim.c — `lazyinfer sim`: the trace-driven hit-ratio simulator (ARCHITECTURE.md §3.6): replays
// a synthetic RAG trace (N documents of L tokens, Zipf(α) popularity, k distinct documents per
// request, D possible positions) through the engine's own caches on a virtual page pool
// (li_kv_pool_init_virtual: pages are counted, no KV memory exists):
//   lazy    src/kv/doc-cache.c, position_agnostic = true  (one copy per document)
//   copy    src/kv/doc-cache.c, position_agnostic = false (one copy per (document, Δ))
//   prefix  src/kv/prefix-cache.c, hash-chained full pages of the concatenated prompt
// and compares the measured hit ratios with the closed form of the paper (static top-M,
// ratio Σ_{i≤M} i^-α / Σ_{i≤⌊M/D⌋} i^-α) and with Che's approximation of LRU.
//
// Not here: any model, attention or timing (that is `lazyinfer bench rag`); a cache of its own
// (every hit, miss and eviction comes from the real cache code).
// Tested by tests/test_sim.py (independent Python LRU replays of --trace dumps, the sampler's
// distribution, closed-form agreement, determinism, argument errors). See docs/SIM.md.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kv/doc-cache.h"
#include "../src/kv/prefix-cache.h"
#include "cli.h"
#include "zipf.h"
#include "lazyinfer.h"

#define SIM_MAX_DOCS 10000000     // N: the α <= 1 sampler keeps an (N) double table
#define SIM_MAX_DOC_LEN 1000000   // L
#define SIM_MAX_K 4096            // documents per request
#define SIM_MAX_POSITIONS 1000000 // D
#define SIM_MAX_ALPHA 100.0       // beyond this every draw is rank 1 anyway
#define SIM_MODEL_ID "lazyinfer-sim"

typedef enum { POL_LAZY, POL_COPY, POL_PREFIX, N_POL } policy_id;
static const char *const policy_names[N_POL] = {"lazy", "copy", "prefix"};

typedef struct {
    int64_t n_docs;     // N
    double alpha;       // Zipf exponent
    int k;              // documents per request (distinct)
    int positions;      // D: slots a document may occupy, Δ = slot · L
    int doc_len;        // L tokens
    int page_size;      // P tokens
    int64_t n_requests; // R
    int64_t warmup;     // first requests not counted
    int64_t budget;     // C tokens; pool pages = C / P
    uint64_t seed;
    const li_evict_policy *evict;
} sim_config;

// ---- trace ------------------------------------------------------------------------------------

// The request stream, regenerated identically from the seed for every policy (same seed → same
// trace), so nothing of size R × k is stored.
typedef struct {
    const sim_config *cfg;
    li_rng rng;
    int64_t *pool;       // (N) rank r (1-based) → document id pool[r - 1]: the shuffled pool
    li_zipf zipf;        // rank sampler (tools/zipf.h)
    int64_t *seen;       // (N) request index + 1 that last drew each rank (distinctness)
    int *slot_pool;      // (D) scratch for choosing distinct slots
    int64_t n_made;      // requests produced so far
} trace_gen;

typedef struct {
    int64_t rank[SIM_MAX_K]; // (k) popularity rank, in prompt order
    int64_t doc[SIM_MAX_K];  // (k) document id
    int slot[SIM_MAX_K];     // (k) ascending slots; Δ = slot · L
} request;

static li_status trace_init(trace_gen *g, const sim_config *cfg) {
    memset(g, 0, sizeof *g);
    g->cfg = cfg;
    int64_t N = cfg->n_docs;
    li_rng_seed(&g->rng, cfg->seed);
    g->pool = malloc((size_t)N * sizeof *g->pool);
    g->seen = calloc((size_t)N, sizeof *g->seen);
    g->slot_pool = malloc((size_t)cfg->positions * sizeof *g->slot_pool);
    if (!g->pool || !g->seen || !g->slot_pool) goto oom;
    // Shuffled pool (Fisher-Yates), as the paper's scripts shuffle the corpus before ranking.
    for (int64_t i = 0; i < N; i++)
        g->pool[i] = i;
    for (int64_t i = N - 1; i > 0; i--) {
        int64_t j = (int64_t)(li_rng_u64(&g->rng) % (uint64_t)(i + 1));
        int64_t t = g->pool[i];
        g->pool[i] = g->pool[j];
        g->pool[j] = t;
    }
    if (li_zipf_init(&g->zipf, N, cfg->alpha) != LI_OK) goto oom;
    return LI_OK;
oom:
    free(g->pool);
    free(g->seen);
    free(g->slot_pool);
    return li_error_set(LI_ERR_OOM, "out of memory for a trace over %lld documents", (long long)N);
}

static void trace_free(trace_gen *g) {
    free(g->pool);
    li_zipf_free(&g->zipf);
    free(g->seen);
    free(g->slot_pool);
}

// The next request: k distinct documents in random order (the order of distinct draws is
// already uniformly random), placed at k distinct slots of D in ascending order.
static void trace_next(trace_gen *g, request *rq) {
    const sim_config *c = g->cfg;
    int64_t stamp = ++g->n_made;
    for (int j = 0; j < c->k; j++) {
        int64_t r;
        do
            r = li_zipf_draw(&g->zipf, &g->rng);
        while (g->seen[r - 1] == stamp);
        g->seen[r - 1] = stamp;
        rq->rank[j] = r;
        rq->doc[j] = g->pool[r - 1];
    }
    if (c->positions == c->k) {
        for (int j = 0; j < c->k; j++)
            rq->slot[j] = j;
        return;
    }
    // k distinct slots of D (partial Fisher-Yates), then sorted so Δ grows along the prompt.
    int D = c->positions;
    for (int s = 0; s < D; s++)
        g->slot_pool[s] = s;
    for (int j = 0; j < c->k; j++) {
        int t = j + (int)(li_rng_u64(&g->rng) % (uint64_t)(D - j));
        int x = g->slot_pool[j];
        g->slot_pool[j] = g->slot_pool[t];
        g->slot_pool[t] = x;
    }
    for (int j = 0; j < c->k; j++)
        rq->slot[j] = g->slot_pool[j];
    for (int j = 1; j < c->k; j++) // insertion sort: k is small
        for (int i = j; i > 0 && rq->slot[i - 1] > rq->slot[i]; i--) {
            int x = rq->slot[i];
            rq->slot[i] = rq->slot[i - 1];
            rq->slot[i - 1] = x;
        }
}

// ---- documents as tokens ------------------------------------------------------------------------

static uint64_t mix64(uint64_t x) { // splitmix64 finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Token j of document d: a pseudo-random non-negative id, so that no two documents share a
// page (the prefix cache only ever sees token ids).
static int32_t doc_token(int64_t d, int j) {
    return (int32_t)(mix64(((uint64_t)d << 20) ^ (uint64_t)j ^ 0x5eedull) & 0x7fffffff);
}

static void doc_key(li_doc_key *key, int64_t d) {
    // The document cache keys content; the content of document d is fixed by d, so hashing d
    // stands for hashing its L tokens (same key space, L times less SHA-256 work).
    int32_t id[2] = {(int32_t)(d & 0x7fffffff), (int32_t)(d >> 31)};
    li_doc_key_compute(key, SIM_MODEL_ID, "sim-doc", id, 2);
}

// ---- one policy over the trace
// -------------------------------------------------------------------

typedef struct {
    bool ran;
    int64_t lookups;  // documents requested (counted requests only)
    int64_t hits;     // documents served from cache (copy: exact Δ; prefix: all L tokens)
    int64_t any_hits; // copy: hits at any Δ (exact + copied and re-rotated)
    int64_t hit_tokens, any_hit_tokens, req_tokens;
    int64_t evictions;     // copies (lazy, copy) or pages (prefix), counted requests only
    int64_t resident_docs; // at the end (prefix: documents whose every page is cached)
    int64_t resident_pages;
} pol_result;

static double ratio(int64_t a, int64_t b) {
    return b > 0 ? (double)a / (double)b : 0.0;
}

static int64_t pages_per_doc(const sim_config *c) {
    return (c->doc_len + c->page_size - 1) / c->page_size;
}

// Evictions so far, to leave out those of the warm-up requests.
static int64_t doc_cache_evictions(const li_doc_cache *dc) {
    li_doc_cache_stats st;
    li_doc_cache_get_stats(dc, &st);
    return st.evictions;
}

static int64_t prefix_cache_evictions(const li_prefix_cache *pc) {
    li_prefix_cache_stats st;
    li_prefix_cache_get_stats(pc, &st);
    return st.evictions;
}

static li_status run_doc_cache(const sim_config *c, bool agnostic, pol_result *res,
                               const char *label) {
    li_kv_pool pool;
    li_doc_cache *dc = NULL;
    trace_gen g;
    li_doc_copy **held = NULL;
    request *rq = NULL;
    li_status rc = li_kv_pool_init_virtual(&pool, c->page_size, c->budget / c->page_size);
    if (rc != LI_OK) return rc;
    if ((rc = trace_init(&g, c)) != LI_OK) {
        li_kv_pool_free(&pool);
        return rc;
    }
    rc = li_doc_cache_init(&dc, &pool, c->evict, 0);
    held = malloc((size_t)c->k * sizeof *held);
    rq = malloc(sizeof *rq);
    if (rc == LI_OK && (!held || !rq)) rc = li_error_set(LI_ERR_OOM, "out of memory");
    int64_t ev0 = 0;
    for (int64_t r = 0; rc == LI_OK && r < c->n_requests; r++) {
        bool count = r >= c->warmup;
        if (r == c->warmup) ev0 = doc_cache_evictions(dc);
        trace_next(&g, rq);
        int n_held = 0;
        for (int j = 0; j < c->k; j++) {
            li_doc_key key;
            doc_key(&key, rq->doc[j]);
            li_doc_copy *src = NULL;
            li_doc_lookup_result lr;
            int64_t delta = (int64_t)rq->slot[j] * c->doc_len;
            rc = li_doc_cache_acquire(dc, &key, c->doc_len, agnostic, delta, &held[n_held], &src,
                                      &lr);
            if (rc != LI_OK) {
                rc = li_error_wrap(rc, "%s: request %lld, document %d of %d", label, (long long)r,
                                   j + 1, c->k);
                break;
            }
            // A miss is prefilled, a hit at another Δ copied and re-rotated: either way the new
            // copy is ready before the request runs, and the source is no longer needed.
            if (lr != LI_DOC_HIT) li_doc_cache_mark_ready(dc, held[n_held]);
            if (src) li_doc_cache_release(dc, src);
            n_held++;
            if (count) {
                res->lookups++;
                res->req_tokens += c->doc_len;
                if (lr == LI_DOC_HIT) {
                    res->hits++;
                    res->hit_tokens += c->doc_len;
                }
                if (lr != LI_DOC_MISS) {
                    res->any_hits++;
                    res->any_hit_tokens += c->doc_len;
                }
            }
        }
        for (int j = 0; j < n_held; j++)
            li_doc_cache_release(dc, held[j]);
        if ((r & 1023) == 0 || r + 1 == c->n_requests) li_progress(label, r + 1, c->n_requests);
    }
    if (rc == LI_OK) {
        li_doc_cache_stats st;
        li_doc_cache_get_stats(dc, &st);
        res->evictions = st.evictions - ev0;
        res->resident_docs = st.resident_docs;
        res->resident_pages = st.resident_pages;
        res->ran = true;
    }
    li_doc_cache_free(dc);
    free(held);
    free(rq);
    trace_free(&g);
    li_kv_pool_free(&pool);
    return rc;
}

// The prompt of one request for the prefix cache: slots 0..last slot, each L tokens; a slot
// holding no document (only when D > k) holds request-unique filler, i.e. other content that no
// later request repeats. Returns the token count.
static int prefix_prompt(const sim_config *c, const request *rq, int64_t r, int32_t *tokens,
                         int8_t *is_doc_slot) {
    int n_slots = rq->slot[c->k - 1] + 1;
    for (int s = 0; s < n_slots; s++)
        is_doc_slot[s] = 0;
    for (int j = 0; j < c->k; j++) {
        is_doc_slot[rq->slot[j]] = 1;
        for (int t = 0; t < c->doc_len; t++)
            tokens[(size_t)rq->slot[j] * c->doc_len + t] = doc_token(rq->doc[j], t);
    }
    for (int s = 0; s < n_slots; s++)
        if (!is_doc_slot[s]) {
            int32_t f =
                -1 - (int32_t)(((uint64_t)r * (uint64_t)c->positions + (uint64_t)s) & 0x3fffffff);
            for (int t = 0; t < c->doc_len; t++)
                tokens[(size_t)s * c->doc_len + t] = f;
        }
    return n_slots * c->doc_len;
}

static li_status run_prefix(const sim_config *c, pol_result *res) {
    li_kv_pool pool;
    li_prefix_cache *pc = NULL;
    trace_gen g;
    int P = c->page_size, L = c->doc_len;
    int max_tokens = c->positions * L; // checked against INT_MAX by validate()
    int max_pages = (max_tokens + P - 1) / P;
    li_status rc = li_kv_pool_init_virtual(&pool, P, c->budget / P);
    if (rc != LI_OK) return rc;
    if ((rc = trace_init(&g, c)) != LI_OK) {
        li_kv_pool_free(&pool);
        return rc;
    }
    rc = li_prefix_cache_init(&pc, &pool, 0);
    int32_t *tokens = malloc((size_t)max_tokens * sizeof *tokens);
    int8_t *is_doc_slot = malloc((size_t)c->positions);
    li_doc_key *keys = malloc((size_t)max_pages * sizeof *keys);
    int64_t *pages = malloc((size_t)max_pages * sizeof *pages);
    request *rq = malloc(sizeof *rq);
    if (rc == LI_OK && (!tokens || !is_doc_slot || !keys || !pages || !rq))
        rc = li_error_set(LI_ERR_OOM, "out of memory");
    int64_t ev0 = 0;
    for (int64_t r = 0; rc == LI_OK && r < c->n_requests; r++) {
        bool count = r >= c->warmup;
        if (r == c->warmup) ev0 = prefix_cache_evictions(pc);
        trace_next(&g, rq);
        int n_tok = prefix_prompt(c, rq, r, tokens, is_doc_slot);
        int n_full = n_tok / P, n_pages = (n_tok + P - 1) / P;
        li_prefix_chain(SIM_MODEL_ID, tokens, n_tok, P, keys);
        int m = li_prefix_cache_match(pc, keys, n_full, pages);
        // The rest of the prompt is computed into new pages; the full ones are offered to the
        // cache (vLLM caches every full page it computes), the partial tail stays private.
        rc = li_prefix_cache_make_room(pc, n_pages - m);
        int n_have = m;
        for (; rc == LI_OK && n_have < n_pages; n_have++)
            rc = li_kv_page_alloc(&pool, &pages[n_have]);
        for (int i = m; rc == LI_OK && i < n_full; i++)
            rc = li_prefix_cache_insert(pc, &keys[i], pages[i]);
        for (int i = 0; i < n_have; i++)
            li_kv_page_unref(&pool, pages[i]);
        if (rc != LI_OK) {
            rc = li_error_wrap(rc, "prefix: request %lld (%d pages)", (long long)r, n_pages);
            break;
        }
        if (count) {
            // Document tokens inside the matched run [0, m·P) of the prompt.
            int64_t hit_end = (int64_t)m * P;
            for (int j = 0; j < c->k; j++) {
                int64_t s0 = (int64_t)rq->slot[j] * L, s1 = s0 + L;
                int64_t in = (hit_end < s1 ? hit_end : s1) - s0;
                if (in < 0) in = 0;
                res->hit_tokens += in;
                res->hits += in == L;
                res->lookups++;
                res->req_tokens += L;
            }
        }
        if ((r & 1023) == 0 || r + 1 == c->n_requests)
            li_progress("sim prefix", r + 1, c->n_requests);
    }
    if (rc == LI_OK) {
        li_prefix_cache_stats st;
        li_prefix_cache_get_stats(pc, &st);
        res->evictions = st.evictions - ev0;
        res->resident_pages = st.resident_pages;
        res->any_hits = res->hits;
        res->any_hit_tokens = res->hit_tokens;
        // Documents whose every page is cached when the document starts the prompt (the only
        // place a later request could reuse all of it without depending on what precedes it).
        int64_t n_res = 0;
        int32_t *dt = tokens;
        int n_dp = L / P;
        for (int64_t d = 0; d < c->n_docs && n_dp > 0; d++) {
            for (int t = 0; t < n_dp * P; t++)
                dt[t] = doc_token(d, t);
            li_prefix_chain(SIM_MODEL_ID, dt, n_dp * P, P, keys);
            int m = li_prefix_cache_match(pc, keys, n_dp, pages);
            for (int i = 0; i < m; i++)
                li_kv_page_unref(&pool, pages[i]);
            n_res += m == n_dp;
            if (d > 100000) { // bounded work: larger pools are not scanned
                n_res = -1;
                break;
            }
        }
        res->resident_docs = n_res;
        res->ran = true;
    }
    li_prefix_cache_free(pc);
    free(tokens);
    free(is_doc_slot);
    free(keys);
    free(pages);
    free(rq);
    trace_free(&g);
    li_kv_pool_free(&pool);
    return rc;
}

static li_status run_policy(const sim_config *c, policy_id p, pol_result *res) {
    memset(res, 0, sizeof *res);
    switch (p) {
    case POL_LAZY: return run_doc_cache(c, true, res, "sim lazy");
    case POL_COPY: return run_doc_cache(c, false, res, "sim copy");
    case POL_PREFIX: return run_prefix(c, res);
    default: LI_ASSERT(!"policy");
    }
    return LI_OK;
}

// ---- closed forms
// --------------------------------------------------------------------------------

// H(n) = Σ_{i=1..n} i^-α.
static double zipf_h(int64_t n, double alpha) {
    double s = 0;
    for (int64_t i = n; i >= 1; i--)
        s += pow((double)i, -alpha); // small terms first
    return s;
}

// The paper's ratio Σ_{i≤M} i^-α / Σ_{i≤⌊M/D⌋} i^-α (infinite when ⌊M/D⌋ = 0).
static double paper_ratio(int64_t M, int D, double alpha) {
    int64_t m = M / D;
    return m > 0 ? zipf_h(M, alpha) / zipf_h(m, alpha) : INFINITY;
}

// α with paper_ratio(M, D, α) = target, by bisection (the ratio falls from M/⌊M/D⌋ at α = 0
// towards 1 as α grows). NAN if the target is out of that range.
static double solve_alpha(int64_t M, int D, double target) {
    double lo = 0.0, hi = 20.0;
    if (!(paper_ratio(M, D, lo) > target && paper_ratio(M, D, hi) < target)) return NAN;
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi);
        if (paper_ratio(M, D, mid) > target)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

// Che's approximation of LRU under independent requests: items with request probabilities
// pi[0..n) (sorted descending), a cache of `cap` items (may be fractional, see copy below):
// characteristic time T solves Σ (1 - e^{-π_i T}) = cap; hit ratio Σ π_i (1 - e^{-π_i T}).
static double che_hit(const double *pi, int64_t n, double cap) {
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++)
        nz += pi[i] > 0;
    if (cap >= (double)nz) return 1.0;
    if (cap <= 0) return 0.0;
    double lo = 0, hi = 1;
    for (;;) { // bracket
        double f = 0;
        for (int64_t i = 0; i < nz; i++)
            f += -expm1(-pi[i] * hi);
        if (f >= cap) break;
        lo = hi;
        hi *= 2;
    }
    for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi), f = 0;
        for (int64_t i = 0; i < nz; i++)
            f += -expm1(-pi[i] * mid);
        if (f < cap)
            lo = mid;
        else
            hi = mid;
    }
    double T = 0.5 * (lo + hi), h = 0;
    for (int64_t i = 0; i < nz; i++)
        h += pi[i] * -expm1(-pi[i] * T);
    return h;
}

typedef struct {
    int64_t M, m_aware;            // capacities in documents: agnostic, position-aware
    double paper_lazy, paper_copy; // static top-M with p_i ∝ i^-α
    double trace_lazy, trace_copy; // static top-M with the trace's per-document frequencies
    double che_lazy, che_copy;     // Che's LRU approximation with those frequencies
} predictions;

// The trace's per-document frequency π_i (counted requests), sorted descending (rank order is
// not quite frequency order: k distinct documents per request flatten the head).
static li_status trace_frequencies(const sim_config *c, double **out) {
    *out = NULL;
    trace_gen g;
    LI_TRY(trace_init(&g, c));
    double *pi = calloc((size_t)c->n_docs, sizeof *pi);
    request *rq = malloc(sizeof *rq);
    if (!pi || !rq) {
        free(pi);
        free(rq);
        trace_free(&g);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    int64_t total = 0;
    for (int64_t r = 0; r < c->n_requests; r++) {
        trace_next(&g, rq);
        if (r < c->warmup) continue;
        for (int j = 0; j < c->k; j++)
            pi[rq->rank[j] - 1] += 1;
        total += c->k;
    }
    for (int64_t i = 0; i < c->n_docs; i++)
        pi[i] /= (double)total;
    qsort(pi, (size_t)c->n_docs, sizeof *pi, cmp_desc);
    free(rq);
    trace_free(&g);
    *out = pi;
    return LI_OK;
}

static li_status predict(const sim_config *c, predictions *pr) {
    int64_t N = c->n_docs;
    int D = c->positions;
    pr->M = (c->budget / c->page_size) / pages_per_doc(c);
    pr->m_aware = pr->M / D;
    int64_t M = pr->M < N ? pr->M : N, m = pr->m_aware < N ? pr->m_aware : N;
    double hN = zipf_h(N, c->alpha);
    pr->paper_lazy = zipf_h(M, c->alpha) / hN;
    pr->paper_copy = zipf_h(m, c->alpha) / hN;
    double *pi;
    LI_TRY(trace_frequencies(c, &pi));
    double s = 0;
    for (int64_t i = 0; i < N; i++) {
        if (i == m) pr->trace_copy = s;
        if (i == M) pr->trace_lazy = s;
        s += pi[i];
    }
    if (m >= N) pr->trace_copy = s;
    if (M >= N) pr->trace_lazy = s;
    pr->che_lazy = che_hit(pi, N, (double)pr->M);
    // copy: items (document, Δ) with probability π_i / D each and a cache of M copies; Che's
    // fixed point then equals that of documents with a cache of M / D (fractional) documents.
    pr->che_copy = che_hit(pi, N, (double)pr->M / D);
    free(pi);
    return LI_OK;
}

// ---- output
// --------------------------------------------------------------------------------------

static void print_row(const char *name, int64_t lookups, int64_t hits, int64_t hit_tok,
                      int64_t req_tok, int64_t ev, const char *ev_unit, int64_t res_docs,
                      int64_t res_pages) {
    char docs[32];
    if (res_docs >= 0)
        snprintf(docs, sizeof docs, "%lld", (long long)res_docs);
    else
        snprintf(docs, sizeof docs, "n/a");
    printf("%-9s %10lld %10lld %10lld %9.4f %10lld %-6s %9s %9lld\n", name, (long long)hits,
           (long long)(lookups - hits), (long long)hit_tok, ratio(hit_tok, req_tok), (long long)ev,
           ev_unit, docs, (long long)res_pages);
}

static void print_results(const pol_result *res) {
    printf("%-9s %10s %10s %10s %9s %10s %-6s %9s %9s\n", "policy", "hits", "misses", "hit_tok",
           "hit_ratio", "evictions", "", "res_docs", "res_pages");
    for (int p = 0; p < N_POL; p++) {
        const pol_result *r = &res[p];
        if (!r->ran) continue;
        if (p == POL_COPY) {
            print_row("copy", r->lookups, r->hits, r->hit_tokens, r->req_tokens, r->evictions,
                      "copies", r->resident_docs, r->resident_pages);
            print_row("copy-any", r->lookups, r->any_hits, r->any_hit_tokens, r->req_tokens,
                      r->evictions, "copies", r->resident_docs, r->resident_pages);
        } else {
            print_row(policy_names[p], r->lookups, r->hits, r->hit_tokens, r->req_tokens,
                      r->evictions, p == POL_PREFIX ? "pages" : "copies", r->resident_docs,
                      r->resident_pages);
        }
    }
}

static void print_ratio(const char *label, double a, double b) {
    if (b > 0)
        printf("  %-42s lazy %.4f  copy %.4f  ratio %.3fx\n", label, a, b, a / b);
    else
        printf("  %-42s lazy %.4f  copy %.4f  ratio inf\n", label, a, b);
}

static void print_closed_form(const sim_config *c, const predictions *pr, const pol_result *res) {
    printf("\nclosed form (ARCHITECTURE.md §3.6): lazy holds the top M documents, copy ⌊M/D⌋\n");
    printf("  M = (budget / P) / ceil(L / P) = %lld documents, ⌊M/D⌋ = %lld (D = %d)%s\n",
           (long long)pr->M, (long long)pr->m_aware, c->positions,
           (c->doc_len % c->page_size || c->budget % c->page_size)
               ? "  [L or budget not a multiple of P: M counts whole pages]"
               : "");
    print_ratio("static top-M, Zipf p(i) ~ i^-alpha (paper):", pr->paper_lazy, pr->paper_copy);
    print_ratio("static top-M, trace frequencies:", pr->trace_lazy, pr->trace_copy);
    print_ratio("LRU, Che's approximation (trace freq.):", pr->che_lazy, pr->che_copy);
    const pol_result *l = &res[POL_LAZY], *cp = &res[POL_COPY];
    if (l->ran && cp->ran) {
        double sl = ratio(l->hit_tokens, l->req_tokens), sc = ratio(cp->hit_tokens, cp->req_tokens);
        print_ratio("simulated (real caches, exact delta):", sl, sc);
        if (pr->trace_lazy > 0 && pr->trace_copy > 0)
            printf("  %-42s lazy %.3f  copy %.3f\n",
                   "simulated / static top-M (trace freq.):", sl / pr->trace_lazy,
                   sc / pr->trace_copy);
    }
    printf(
        "  (LRU keeps recently used documents, not the most popular ones, so it stays below the\n"
        "  static optimum; Che's approximation is the closed form for LRU itself)\n");
    printf("  paper ratio Σ_{i≤%lld} i^-α / Σ_{i≤%lld} i^-α at α = %g: ", (long long)pr->M,
           (long long)pr->m_aware, c->alpha);
    double pr_here = paper_ratio(pr->M, c->positions, c->alpha);
    if (isfinite(pr_here))
        printf("%.3fx\n", pr_here);
    else
        printf("inf (⌊M/D⌋ = 0)\n");
    printf("  α giving the paper's 2.86x at D = 20, C = 100 documents: %.4f\n",
           solve_alpha(100, 20, 2.86));
}

// ---- plot
// ------------------------------------------------------------------------------------------

// Hit ratio against budget (in documents) for each policy, through gnuplot (pngcairo).
static int do_plot(const sim_config *base, bool want[N_POL], const char *path) {
    FILE *probe = popen("command -v gnuplot >/dev/null 2>&1", "r");
    int prc = probe ? pclose(probe) : -1;
    if (prc != 0) {
        fprintf(stderr, "lazyinfer sim: --plot needs gnuplot, which is not installed "
                        "(Debian: apt-get install gnuplot-nox; scripts/setup.sh installs it)\n");
        return 1;
    }
    enum { N_PTS = 14 };
    sim_config c = *base;
    int64_t ppd = pages_per_doc(&c);
    // Smallest budget every policy can run: k copies pinned plus a copy source (copy), and a
    // whole prompt of D slots (prefix). Largest: all N documents (lazy then hits everything).
    int64_t lo_docs = c.positions + 1 > 10 ? c.positions + 1 : 10, hi_docs = c.n_docs;
    if (hi_docs <= lo_docs) hi_docs = lo_docs + 1;
    double x[N_PTS], y[N_PTS][N_POL + 1], yp[N_PTS][2];
    int n = 0;
    for (int i = 0; i < N_PTS; i++) {
        double f = (double)i / (N_PTS - 1);
        int64_t docs =
            (int64_t)llround(exp(log((double)lo_docs) * (1 - f) + log((double)hi_docs) * f));
        if (n > 0 && docs <= (int64_t)x[n - 1]) continue;
        c.budget = docs * ppd * c.page_size;
        x[n] = (double)docs;
        for (int p = 0; p < N_POL; p++) {
            pol_result r;
            y[n][p] = NAN;
            if (!want[p]) continue;
            if (run_policy(&c, (policy_id)p, &r) != LI_OK) return cli_fail("sim --plot");
            y[n][p] = ratio(r.hit_tokens, r.req_tokens);
            if (p == POL_COPY) y[n][N_POL] = ratio(r.any_hit_tokens, r.req_tokens);
        }
        if (!want[POL_COPY]) y[n][N_POL] = NAN;
        predictions pr;
        if (predict(&c, &pr) != LI_OK) return cli_fail("sim --plot");
        yp[n][0] = pr.paper_lazy;
        yp[n][1] = pr.paper_copy;
        n++;
        li_progress("sim --plot", i + 1, N_PTS);
    }
    FILE *gp = popen("gnuplot", "w");
    if (!gp) {
        fprintf(stderr, "lazyinfer sim: cannot start gnuplot: %s\n", strerror(errno));
        return 1;
    }
    fprintf(gp, "set terminal pngcairo size 960,600 font 'sans,11'\n");
    fprintf(gp, "set output '");
    for (const char *s = path; *s; s++)
        fputs(*s == '\'' ? "''" : (char[2]){*s, 0}, gp);
    fprintf(gp, "'\n");
    fprintf(gp,
            "set title \"Document hit ratio vs KV budget: N=%lld docs of L=%d tokens, "
            "Zipf α=%g, k=%d, D=%d, P=%d, %lld requests\"\n",
            (long long)c.n_docs, c.doc_len, c.alpha, c.k, c.positions, c.page_size,
            (long long)c.n_requests);
    fprintf(gp, "set xlabel 'budget (documents of L tokens)'\nset ylabel 'hit ratio "
                "(document tokens from cache / requested)'\n");
    fprintf(gp, "set logscale x\nset yrange [0:1.02]\nset grid\nset key left top\n");
    fprintf(gp, "$d << EOD\n");
    for (int i = 0; i < n; i++) {
        fprintf(gp, "%g", x[i]);
        for (int p = 0; p <= N_POL; p++)
            fprintf(gp, isnan(y[i][p]) ? " NaN" : " %.6f", y[i][p]);
        fprintf(gp, " %.6f %.6f\n", yp[i][0], yp[i][1]);
    }
    fprintf(gp, "EOD\nplot ");
    const char *sep = "";
    if (want[POL_LAZY]) {
        fprintf(gp, "%s$d u 1:2 w lp lw 2 pt 7 lc rgb '#1f77b4' t 'lazy (simulated, LRU)'", sep);
        fprintf(gp, ", $d u 1:6 w l dt 2 lc rgb '#1f77b4' t 'lazy closed form (static top-M)'");
        sep = ", ";
    }
    if (want[POL_COPY]) {
        fprintf(gp, "%s$d u 1:3 w lp lw 2 pt 5 lc rgb '#d62728' t 'copy, exact Δ (simulated)'",
                sep);
        fprintf(gp, ", $d u 1:5 w lp lw 1 pt 4 lc rgb '#ff9896' t 'copy, any copy (re-rotated)'");
        fprintf(gp, ", $d u 1:7 w l dt 2 lc rgb '#d62728' t 'copy closed form (top ⌊M/D⌋)'");
        sep = ", ";
    }
    if (want[POL_PREFIX])
        fprintf(gp, "%s$d u 1:4 w lp lw 2 pt 9 lc rgb '#2ca02c' t 'prefix (simulated)'", sep);
    fprintf(gp, "\n");
    if (pclose(gp) != 0) {
        fprintf(stderr, "lazyinfer sim: gnuplot failed writing '%s'\n", path);
        return 1;
    }
    fprintf(stderr, "sim: wrote %s (%d budgets)\n", path, n);
    return 0;
}

// ---- trace dump
// --------------------------------------------------------------------------------------

// One line per request: "rank@slot" for each document in prompt order (rank 1 = most popular).
static int dump_trace(const sim_config *c, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "lazyinfer sim: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    trace_gen g;
    request *rq = malloc(sizeof *rq);
    if (!rq || trace_init(&g, c) != LI_OK) {
        free(rq);
        fclose(f);
        return cli_fail("sim --trace");
    }
    for (int64_t r = 0; r < c->n_requests; r++) {
        trace_next(&g, rq);
        for (int j = 0; j < c->k; j++)
            fprintf(f, j ? " %lld@%d" : "%lld@%d", (long long)rq->rank[j], rq->slot[j]);
        fputc('\n', f);
    }
    trace_free(&g);
    free(rq);
    if (fclose(f) != 0) {
        fprintf(stderr, "lazyinfer sim: error writing '%s': %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

// ---- command
// -------------------------------------------------------------------------------------

static const char *const sim_usage =
    "usage: lazyinfer sim [--docs N] [--alpha A] [--k K] [--requests R] [--budget TOKENS]\n"
    "                     [--doc-len L] [--positions D] [--policy lazy|copy|prefix|all]\n"
    "                     [--page-size P] [--warmup W] [--evict lru|largest|gdsf] [--seed S]\n"
    "                     [--plot out.png] [--trace out.txt]\n\n"
    "Replays a Zipf(α) RAG trace through the engine's document and prefix caches on a virtual\n"
    "page pool and prints hit ratios per policy next to the paper's closed form (docs/SIM.md).";

// Checks the configuration; prints the problem and returns false when it is unusable.
static bool validate(const sim_config *c) {
#define BAD(...) (fprintf(stderr, "lazyinfer sim: " __VA_ARGS__), fputc('\n', stderr), false)
    if (c->n_docs < 1 || c->n_docs > SIM_MAX_DOCS)
        return BAD("--docs %lld outside [1, %d]", (long long)c->n_docs, SIM_MAX_DOCS);
    if (!(c->alpha >= 0 && c->alpha <= SIM_MAX_ALPHA))
        return BAD("--alpha %g outside [0, %g]", c->alpha, SIM_MAX_ALPHA);
    if (c->k < 1 || c->k > SIM_MAX_K || c->k > c->n_docs)
        return BAD("--k %d outside [1, min(%d, --docs %lld)] (documents of a request are "
                   "distinct)",
                   c->k, SIM_MAX_K, (long long)c->n_docs);
    if (c->positions > SIM_MAX_POSITIONS)
        return BAD("--positions %d outside [k, %d]", c->positions, SIM_MAX_POSITIONS);
    if (c->positions < c->k)
        return BAD("--positions %d is less than --k %d: a request's documents need distinct slots",
                   c->positions, c->k);
    if (c->doc_len < 1 || c->doc_len > SIM_MAX_DOC_LEN)
        return BAD("--doc-len %d outside [1, %d]", c->doc_len, SIM_MAX_DOC_LEN);
    if ((int64_t)c->positions * c->doc_len > INT_MAX / 2 ||
        (int64_t)(c->positions - 1) * c->doc_len > LI_PAGE_MAX_DELTA)
        return BAD("--positions %d × --doc-len %d: the last slot's offset exceeds the page "
                   "table's Δ field (%lld) or the prompt length limit",
                   c->positions, c->doc_len, (long long)LI_PAGE_MAX_DELTA);
    if (c->page_size < 1 || c->page_size > LI_PAGE_MAX_SIZE)
        return BAD("--page-size %d outside [1, %d]", c->page_size, LI_PAGE_MAX_SIZE);
    if (c->n_requests < 1 || c->n_requests > (int64_t)1 << 40)
        return BAD("--requests %lld outside [1, 2^40]", (long long)c->n_requests);
    if (c->warmup < 0 || c->warmup >= c->n_requests)
        return BAD("--warmup %lld must be in [0, --requests %lld)", (long long)c->warmup,
                   (long long)c->n_requests);
    int64_t pages = c->budget / c->page_size;
    if (pages < 1 || pages > LI_PAGE_MAX_ID + 1)
        return BAD("--budget %lld tokens is %lld pages of %d: outside [1, %lld]",
                   (long long)c->budget, (long long)pages, c->page_size,
                   (long long)LI_PAGE_MAX_ID + 1);
    return true;
#undef BAD
}

// The smallest pool each policy can replay the trace in (pages): a request pins all its k
// documents at once (copy: when the source of a re-rotation cannot be held too, the cache
// recomputes instead, a miss); prefix holds the whole prompt.
static int64_t min_pages(const sim_config *c, policy_id p) {
    int64_t ppd = pages_per_doc(c);
    switch (p) {
    case POL_LAZY:
    case POL_COPY: return c->k * ppd;
    default: return ((int64_t)c->positions * c->doc_len + c->page_size - 1) / c->page_size;
    }
}

int cmd_sim(int argc, char **argv) {
    sim_config c = {.n_docs = 1000,
                    .alpha = 0.85,
                    .k = 5,
                    .positions = 0,
                    .doc_len = 128,
                    .page_size = 16,
                    .n_requests = 20000,
                    .warmup = -1,
                    .budget = 0,
                    .seed = 0};
    uint64_t n_docs = 1000, n_requests = 20000, budget = 0;
    int warmup_i = INT_MIN; // INT_MIN: not given
    const char *alpha_s = NULL, *policy_s = "all", *plot = NULL, *trace = NULL, *evict_s = "lru";
    const opt opts[] = {
        {"--docs", NULL, OPT_U64, &n_docs, "N: documents in the pool (default 1000)"},
        {"--alpha", NULL, OPT_STR, &alpha_s,
         "Zipf exponent α >= 0, P(rank r) ∝ r^-α (default 0.85)"},
        {"--k", NULL, OPT_INT, &c.k, "distinct documents per request (default 5)"},
        {"--requests", NULL, OPT_U64, &n_requests, "R: requests in the trace (default 20000)"},
        {"--budget", NULL, OPT_U64, &budget,
         "C: KV budget in tokens, pool = C / P pages (default 100 documents)"},
        {"--doc-len", NULL, OPT_INT, &c.doc_len, "L: tokens per document (default 128)"},
        {"--positions", NULL, OPT_INT, &c.positions,
         "D: slots a document may take, Δ = slot·L (default k)"},
        {"--policy", NULL, OPT_STR, &policy_s, "lazy, copy, prefix or all (default all)"},
        {"--page-size", NULL, OPT_INT, &c.page_size, "P: tokens per KV page (default 16)"},
        {"--warmup", NULL, OPT_INT, &warmup_i, "first requests not counted (default R/10)"},
        {"--evict", NULL, OPT_STR, &evict_s,
         "document-cache eviction policy: lru, largest or gdsf (default lru)"},
        {"--seed", NULL, OPT_U64, &c.seed, "trace seed (default 0)"},
        {"--plot", NULL, OPT_STR, &plot, "also write a PNG of hit ratio vs budget (needs gnuplot)"},
        {"--trace", NULL, OPT_STR, &trace, "also write the trace: one line per request, rank@slot"},
    };
    const char *pos[1];
    int n_pos;
    int r =
        cli_parse_args(argc, argv, sim_usage, opts, sizeof opts / sizeof opts[0], pos, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (alpha_s) {
        char *end;
        errno = 0;
        c.alpha = strtod(alpha_s, &end);
        if (*alpha_s == 0 || *end || errno) {
            fprintf(stderr, "lazyinfer sim: bad value '%s' for --alpha\n", alpha_s);
            return 2;
        }
    }
    if (n_docs > INT64_MAX / 2 || n_requests > INT64_MAX / 2 || budget > INT64_MAX / 2) {
        fprintf(stderr, "lazyinfer sim: --docs, --requests or --budget is too large\n");
        return 2;
    }
    c.n_docs = (int64_t)n_docs;
    c.n_requests = (int64_t)n_requests;
    if (c.positions == 0) c.positions = c.k;
    bool want[N_POL] = {false};
    if (!strcmp(policy_s, "all")) {
        for (int p = 0; p < N_POL; p++)
            want[p] = true;
    } else {
        int p = 0;
        while (p < N_POL && strcmp(policy_s, policy_names[p]))
            p++;
        if (p == N_POL) {
            fprintf(stderr, "lazyinfer sim: unknown --policy '%s' (lazy, copy, prefix or all)\n",
                    policy_s);
            return 2;
        }
        want[p] = true;
    }
    if (li_evict_policy_parse(evict_s, &c.evict) != LI_OK) {
        fprintf(stderr, "lazyinfer sim: --evict: %s\n", li_last_error());
        return 2;
    }
    c.warmup = warmup_i == INT_MIN ? c.n_requests / 10 : warmup_i;
    c.budget = budget ? (int64_t)budget : 100 * (int64_t)c.doc_len;
    if (!validate(&c)) return 2;
    for (int p = 0; p < N_POL; p++)
        if (want[p] && c.budget / c.page_size < min_pages(&c, (policy_id)p)) {
            fprintf(stderr,
                    "lazyinfer sim: --budget %lld tokens (%lld pages of %d) cannot hold "
                    "one %s request: it needs %lld pages at once%s\n",
                    (long long)c.budget, (long long)(c.budget / c.page_size), c.page_size,
                    policy_names[p], (long long)min_pages(&c, (policy_id)p),
                    p == POL_PREFIX ? " (the whole prompt of D slots)"
                                    : " (its k documents pinned at once)");
            return 2;
        }
    if (trace && dump_trace(&c, trace)) return 1;

    printf("sim: N=%lld documents, L=%d tokens, Zipf α=%g, k=%d per request, D=%d positions, "
           "P=%d\n",
           (long long)c.n_docs, c.doc_len, c.alpha, c.k, c.positions, c.page_size);
    printf("     budget C=%lld tokens = %lld pages = %.2f documents, %lld requests (first %lld "
           "not counted), seed %llu, eviction %s\n\n",
           (long long)c.budget, (long long)(c.budget / c.page_size),
           (double)(c.budget / c.page_size) / (double)pages_per_doc(&c), (long long)c.n_requests,
           (long long)c.warmup, (unsigned long long)c.seed, c.evict->name);
    pol_result res[N_POL];
    memset(res, 0, sizeof res);
    for (int p = 0; p < N_POL; p++)
        if (want[p] && run_policy(&c, (policy_id)p, &res[p]) != LI_OK) return cli_fail("sim");
    print_results(res);
    printf("(hit_ratio = document tokens served from cache / requested; copy = only a copy at "
           "the same Δ hits,\n copy-any = any copy, re-rotated; prefix: hits = documents served "
           "whole, evictions in pages)\n");
    predictions pr;
    if (predict(&c, &pr) != LI_OK) return cli_fail("sim");
    print_closed_form(&c, &pr, res);
    fflush(stdout);
    if (plot) return do_plot(&c, want, plot);
    return 0;
}
