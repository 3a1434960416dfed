// cmd-rag.c — `lazyinfer rag`: answers questions over documents with the document KV cache
// (docs/RAG.md). The requests come from --doc + --query / --queries, --sample files or a JSONL
// --workload (tools/rag-requests.c); they are replayed through the engine's scheduler with
// continuous batching (tools/replay.c): as slots free up (at most --max-batch unfinished), or at
// their arrival_ms when the workload gives them. Output, one record per request in input order:
// a text line with the answer escaped onto one line (figures on stderr), or a JSON object
// (--output jsonl). A request that is bad or fails is an error record and the run goes on; the
// exit status is 1 when any request failed, 2 for a bad option.
//
// Without --budget the KV pool holds the engine's default (--max-batch requests of a whole
// context) plus every document of the run at once (of the requests that fit the context: the
// others are refused), at most half the memory available (CPU backends), so that no question
// re-prefills a document an earlier one used; the run warns when documents were evicted and
// prefilled again.
//
// Not here: the cache modes themselves (src/engine/scheduler.c, tested by tests/test-rag.c).
// Tested by tests/test_rag_cli.py.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "../src/server/api.h"
#include "cli.h"
#include "lazyinfer.h"
#include "rag-requests.h"
#include "replay.h"

#define MAX_ARG_FILES 1024 // --doc / --sample options

static const char usage_text[] =
    "usage: lazyinfer rag [-m MODEL] --doc FILE [--doc FILE …] (--query TEXT | --queries FILE) "
    "[options]\n"
    "       lazyinfer rag [-m MODEL] --sample FILE.json [--sample FILE.json …] [options]\n"
    "       lazyinfer rag [-m MODEL] --workload FILE.jsonl [--output jsonl] [options]\n\n"
    "Answers questions over documents with the document KV cache (docs/RAG.md): a request is\n"
    "[system][document …][question]. --doc and --queries files are UTF-8 text (CRLF is read as\n"
    "LF); a --sample's passages go with its own question only.\n\n"
    "--workload FILE: one request per line (blank lines and lines starting with # skipped):\n"
    "  {\"id\": \"q1\",           string or integer, echoed in the output (default: the index)\n"
    "   \"documents\": [\"text\", {\"id\": \"a\", \"text\": \"…\"}, {\"id\": \"b\", \"file\": "
    "\"notes.txt\"}],\n"
    "   \"query\": \"the question\",\n"
    "   \"system\": \"…\", \"max_tokens\": 64, \"temperature\": 0,\n"
    "   \"top_p\": 0.95, \"top_k\": 40, \"min_p\": 0.05, \"seed\": 1,\n"
    "   \"stop\": [\"\\n\\n\"], \"ignore_eos\": false, \"repair\": \"head:16\",\n"
    "   \"arrival_ms\": 250}      submitted no earlier than this, ms after the start (as bench "
    "rag)\n"
    "  Only \"query\" is required; the others default to the options below. \"file\" paths are\n"
    "  read from the working directory. A bad line (an empty or blank question or document\n"
    "  too) becomes an error record, the run goes on. A request id that repeats, and a document\n"
    "  id naming two different texts, are warnings.\n\n"
    "Output: --output text (default): stdout has one line per request, the answer with a newline\n"
    "written \\n and a backslash \\\\ (an empty line for a failed request); figures and errors go\n"
    "to stderr. --output jsonl: one JSON object per request, in input order: id, answer,\n"
    "finish_reason (stop, length, error), error, prompt_tokens, cached_tokens, computed_tokens,\n"
    "generated_tokens, doc_hits, doc_misses and repair_tokens (lazy and copy), ttft_ms, total_ms,\n"
    "queue_ms,"
    " start_ms and end_ms (since the start of the run). An answer cut by max_tokens (length)\n"
    "ends before a character whose last bytes it cut.\n"
    "Requests run continuously batched, at most --max-batch at once. Exit status: 0 when every\n"
    "request was answered, 1 when any failed, 2 for a bad option.";

// Tokens request r may generate: its max_tokens, else -n.
static int max_tokens_of(const rag_req *r, int n_predict) {
    return r->opt.max_tokens > 0 ? r->opt.max_tokens : n_predict;
}

// ---- the default budget --------------------------------------------------------------------

// A set of 64-bit keys with a value each (open addressing; a key is a hash, never 0).
typedef struct {
    uint64_t *key;
    int64_t *val;
    size_t cap, n;
} kv_set;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

// The slot of `key`: found (*found) or where it would go. The set is never full (set_put grows).
static size_t set_slot(const kv_set *s, uint64_t key, bool *found) {
    size_t i = key & (s->cap - 1);
    while (s->key[i] && s->key[i] != key)
        i = (i + 1) & (s->cap - 1);
    *found = s->key[i] == key;
    return i;
}

static bool set_get(const kv_set *s, uint64_t key, int64_t *val) {
    bool found = false;
    size_t i = s->cap ? set_slot(s, key, &found) : 0;
    if (found) *val = s->val[i];
    return found;
}

// Adds key → val; false when it was there already (then nothing changes) or on OOM (*oom).
static bool set_put(kv_set *s, uint64_t key, int64_t val, bool *oom) {
    key |= !key; // 0 marks an empty slot
    if (2 * (s->n + 1) > s->cap) {
        kv_set g = {.cap = s->cap ? 2 * s->cap : 256};
        g.key = calloc(g.cap, sizeof *g.key);
        g.val = calloc(g.cap, sizeof *g.val);
        if (!g.key || !g.val) {
            free(g.key);
            free(g.val);
            *oom = true;
            return false;
        }
        for (size_t i = 0; i < s->cap; i++)
            if (s->key[i]) {
                bool f;
                size_t j = set_slot(&g, s->key[i], &f);
                g.key[j] = s->key[i];
                g.val[j] = s->val[i];
            }
        g.n = s->n;
        free(s->key);
        free(s->val);
        *s = g;
    }
    bool found;
    size_t i = set_slot(s, key, &found);
    if (found) return false;
    s->key[i] = key;
    s->val[i] = val;
    s->n++;
    return true;
}

typedef struct {
    int64_t base_pages; // the engine's default: max_batch × a context
    int64_t keep_pages; // every cached block of the run resident at once
    int64_t page_bytes;
    int64_t cap_pages; // half the available memory (-1: unknown)
    int n_distinct;    // distinct blocks (system blocks and document texts) the run looks up
    int n_over_ctx;    // requests left out: the engine refuses them (prompt + max_tokens > -c)
} budget_plan;

typedef struct {
    const rag_list *l;
    const char *system; // --system
    bool chat;
    li_cache_mode mode;
    int page_size, max_batch;
    int n_predict; // -n: max_tokens of a request without one
} plan_args;

static int64_t pages_of(int64_t tokens, int P) {
    return (tokens + P - 1) / P;
}

// Tokens of text (memoised by content in `counts`); -1 if it does not tokenise (li_submit will
// fail that request with the reason).
static int64_t count_tokens(li_model *meta, kv_set *counts, const char *text, size_t len, bool bos,
                            bool special, bool *oom) {
    uint64_t h = fnv(fnv(0xcbf29ce484222325ull, &bos, 1), text, len) ^ (uint64_t)special;
    int64_t n;
    if (set_get(counts, h | !h, &n)) return n;
    int32_t *ids;
    int k;
    if (li_tokenize(meta, text, len, bos, special, &ids, &k) != LI_OK) return -1;
    li_free_tokens(ids);
    set_put(counts, h, k, oom);
    return k;
}

// The system block's tokens (and a key naming it): the chat template up to the user's text, or
// BOS + the system text without chat. The count includes the template's end of turn (the query
// block's): a few tokens more than the block, fine for sizing a budget.
static int64_t system_tokens(li_model *meta, kv_set *counts, const char *system, bool chat,
                             uint64_t *key, bool *oom) {
    *key = fnv(fnv(0x5157e11ull, &chat, 1), system ? system : "", system ? strlen(system) + 1 : 0);
    if (!chat)
        return count_tokens(meta, counts, system ? system : "", system ? strlen(system) : 0, true,
                            false, oom);
    char *r = NULL;
    if (li_chat_render(meta, system, "", &r) != LI_OK) return -1;
    int64_t n = count_tokens(meta, counts, r, strlen(r), false, true, oom);
    free(r);
    return n;
}

// Tokens of request r's prompt (system block with the template's end of turn, documents,
// question), as li_submit counts them give or take a token where the template's pieces meet;
// -1 when a part does not tokenise.
static int64_t prompt_tokens(li_model *meta, kv_set *counts, const plan_args *a, const rag_req *r,
                             bool *oom) {
    const rag_doc *docs = r->shared_docs ? a->l->docs : r->docs;
    int n_docs = r->shared_docs ? a->l->n_docs : r->n_docs;
    uint64_t sk;
    int64_t total =
        system_tokens(meta, counts, r->system ? r->system : a->system, a->chat, &sk, oom);
    int64_t nq = count_tokens(meta, counts, r->query, strlen(r->query), false, false, oom);
    if (total < 0 || nq < 0) return -1;
    total += nq;
    for (int k = 0; k < n_docs; k++) {
        int64_t n = count_tokens(meta, counts, docs[k].text, docs[k].len, false, false, oom);
        if (n < 0) return -1;
        total += n;
    }
    return total;
}

// What the run's blocks take in the pool, per mode: lazy holds a document once; copy once per
// (document, offset Δ); prefix the full pages of each distinct prompt. A request the engine will
// refuse (its prompt and max_tokens over the context, or a part that does not tokenise) holds
// nothing: one such document could otherwise plan gigabytes that no request ever uses.
static li_status plan_budget(li_model *meta, const plan_args *a, budget_plan *bp) {
    li_model_info info;
    li_model_get_info(meta, &info);
    const int P = a->page_size;
    memset(bp, 0, sizeof *bp);
    bp->page_bytes = info.kv_token_bytes * P;
    bp->base_pages = (int64_t)a->max_batch * pages_of(info.n_ctx, P);
    bp->cap_pages = -1;
    kv_set counts = {0}, keep = {0}, distinct = {0};
    bool oom = false;
    for (int i = 0; i < a->l->n_reqs && !oom; i++) {
        const rag_req *r = &a->l->reqs[i];
        if (r->error) continue;
        const int64_t total = prompt_tokens(meta, &counts, a, r, &oom);
        if (total < 0) continue;
        if (total + max_tokens_of(r, a->n_predict) > info.n_ctx) {
            bp->n_over_ctx++;
            continue;
        }
        const rag_doc *docs = r->shared_docs ? a->l->docs : r->docs;
        int n_docs = r->shared_docs ? a->l->n_docs : r->n_docs;
        uint64_t sk;
        int64_t delta =
            system_tokens(meta, &counts, r->system ? r->system : a->system, a->chat, &sk, &oom);
        if (delta < 0) continue;
        if (delta > 0 && set_put(&distinct, sk, 0, &oom)) bp->n_distinct++;
        if (delta > 0 && a->mode != LI_CACHE_PREFIX && set_put(&keep, sk, 0, &oom))
            bp->keep_pages += pages_of(delta, P);
        uint64_t prompt = fnv(sk, "P", 1);
        for (int k = 0; k < n_docs && !oom; k++) {
            int64_t n = count_tokens(meta, &counts, docs[k].text, docs[k].len, false, false, &oom);
            if (n < 0) break;
            uint64_t dk = fnv(0xd0c5ull, docs[k].text, docs[k].len);
            if (set_put(&distinct, dk, 0, &oom)) bp->n_distinct++;
            uint64_t ck = a->mode == LI_CACHE_COPY ? fnv(dk, &delta, sizeof delta) : dk;
            if (a->mode != LI_CACHE_PREFIX && set_put(&keep, ck, 0, &oom))
                bp->keep_pages += pages_of(n, P);
            prompt = fnv(prompt, &dk, sizeof dk);
            delta += n;
        }
        if (a->mode == LI_CACHE_PREFIX) { // full pages of the whole prompt, the query's too
            prompt = fnv(prompt, r->query, strlen(r->query));
            if (set_put(&keep, prompt, 0, &oom)) bp->keep_pages += total / P;
        }
    }
    free(counts.key);
    free(counts.val);
    free(keep.key);
    free(keep.val);
    free(distinct.key);
    free(distinct.val);
    return oom ? li_error_set(LI_ERR_OOM, "out of memory") : LI_OK;
}

static double mib(int64_t bytes) {
    return bytes / 1048576.0;
}

// Loads the model. With a plan (no --budget), the KV budget is the plan's: the engine's default
// plus every document of the run, cut to half the memory available on the CPU backends (never
// below the engine's default), and halved while a device pool does not fit.
static li_status load_model(li_model **m, li_model_params *mp, budget_plan *bp, int max_batch) {
    if (!bp) return li_model_load(m, mp);
    const int64_t need = bp->base_pages + bp->keep_pages;
    int64_t pages = need;
    // the CPU backends' pool is host memory (zero-filled at load, so all of it is touched)
    int64_t avail = mp->backend && !strncmp(mp->backend, "cuda", 4) ? -1 : cli_mem_available();
    if (avail > 0) bp->cap_pages = avail / 2 / bp->page_bytes;
    if (bp->cap_pages >= 0 && pages > bp->cap_pages)
        pages = bp->cap_pages > bp->base_pages ? bp->cap_pages : bp->base_pages;
    li_status st;
    for (;;) {
        mp->kv_budget_bytes = pages * bp->page_bytes;
        st = li_model_load(m, mp);
        if (st != LI_ERR_OOM || pages / 2 < bp->base_pages) break;
        pages /= 2;
    }
    if (st != LI_OK) return st;
    fprintf(stderr,
            "KV budget %.2f MiB: %d × a context (%.2f MiB) + the run's documents (%.2f MiB)%s",
            mib(mp->kv_budget_bytes), max_batch, mib(bp->base_pages * bp->page_bytes),
            mib(bp->keep_pages * bp->page_bytes),
            pages >= need            ? ""
            : pages > bp->base_pages ? ", cut to what the memory holds"
                                     : ", without the documents: the memory holds no more");
    if (bp->n_over_ctx)
        fprintf(stderr, "; not those of %d request%s over the context", bp->n_over_ctx,
                bp->n_over_ctx == 1 ? "" : "s");
    fputc('\n', stderr);
    return st;
}

// ---- answers and records -------------------------------------------------------------------

typedef struct {
    li_buf text;  // the answer so far (a stop string and what follows cut off)
    bool stopped; // a stop string matched
    const rag_req *req;
    li_model *m;
    replay_out out;
    bool done;
} answer;

typedef struct {
    const rag_list *l;
    answer *ans;
    int next_print; // records are printed in input order, each as soon as those before are
    bool jsonl;
    li_cache_mode mode;
    // the command's defaults for what a request leaves out
    const char *system;
    int n_predict;
    float temp;
    uint64_t seed;
    bool chat;
    li_repair repair;  // --repair, for lines without their own
    int n_failed;
} run_ctx;

static bool on_token(void *user, int32_t tok) {
    answer *a = user;
    char buf[256];
    size_t n, old = a->text.len;
    if (li_token_to_piece(a->m, tok, buf, sizeof buf, &n) != LI_OK) return false;
    if (li_buf_append(&a->text, buf, n < sizeof buf ? n : sizeof buf) != LI_OK) return false;
    const li_api_request *o = &a->req->opt;
    size_t cut = li_api_stop_find(a->text.data, a->text.len, old, o->stop, o->n_stop);
    if (cut == SIZE_MAX) return true;
    a->text.len = cut;
    a->text.data[cut] = 0;
    a->stopped = true;
    return false;
}

static li_status submit_one(void *user, li_model *m, int i, int64_t *id) {
    run_ctx *x = user;
    const rag_req *r = &x->l->reqs[i];
    if (r->error) return li_error_set(LI_ERR_INVALID_ARG, "%s", r->error);
    const rag_doc *docs = r->shared_docs ? x->l->docs : r->docs;
    int n_docs = r->shared_docs ? x->l->n_docs : r->n_docs;
    li_doc *d = malloc((size_t)(n_docs ? n_docs : 1) * sizeof *d);
    if (!d) return li_error_set(LI_ERR_OOM, "out of memory");
    for (int k = 0; k < n_docs; k++)
        d[k] = (li_doc){.text = docs[k].text, .len = docs[k].len, .id = docs[k].id};
    answer *a = &x->ans[i];
    a->m = m;
    a->req = r;
    li_request q = {.system = r->system ? r->system : x->system,
                    .docs = d,
                    .n_docs = n_docs,
                    .query = r->query,
                    .chat = x->chat,
                    .gen = li_generate_default_params()};
    const li_api_request *o = &r->opt;
    q.gen.n_predict = max_tokens_of(r, x->n_predict);
    q.gen.sampling.temperature = o->has_temperature ? (float)o->temperature : x->temp;
    if (o->has_top_p) q.gen.sampling.top_p = (float)o->top_p;
    if (o->top_k >= 0) q.gen.sampling.top_k = o->top_k;
    if (o->min_p >= 0) q.gen.sampling.min_p = (float)o->min_p;
    q.gen.sampling.seed = o->has_seed ? o->seed : x->seed + (uint64_t)i;
    q.gen.stop_at_eos = !o->ignore_eos;
    q.gen.on_token = on_token;
    q.gen.user = a;
    q.repair = x->repair;
    if (o->repair && li_repair_parse(o->repair, &q.repair) != LI_OK) {  // checked at the load
        free(d);
        return LI_ERR_INVALID_ARG;
    }
    li_status rc = li_submit(m, &q, id);
    free(d);
    return rc;
}

// The answer on one line: a newline is written \n, a carriage return \r, a backslash \\.
static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n')
            fputs("\\n", stdout);
        else if (s[i] == '\r')
            fputs("\\r", stdout);
        else if (s[i] == '\\')
            fputs("\\\\", stdout);
        else
            putchar(s[i]);
    }
    putchar('\n');
}

static const char *finish_reason(const answer *a, const rag_req *r, int n_predict) {
    if (a->out.res.status != LI_OK) return "error";
    if (a->stopped) return "stop";
    return a->out.res.n_generated >= max_tokens_of(r, n_predict) ? "length" : "stop";
}

static bool has_doc_lookups(li_cache_mode mode) {
    return mode == LI_CACHE_LAZY || mode == LI_CACHE_COPY;
}

static void print_record(run_ctx *x, int i) {
    const answer *a = &x->ans[i];
    const rag_req *r = &x->l->reqs[i];
    const li_request_result *res = &a->out.res;
    const bool ok = res->status == LI_OK;
    // TTFT from the arrival when the request has one (the submission lags it by up to a step)
    double ttft = res->ttft_ms + (r->arrival_ms >= 0 ? a->out.submit_ms - r->arrival_ms : 0);
    int computed = res->n_prompt - res->n_cached_tokens;
    char lb[32];
    const char *label = rag_req_label(r, i, lb, sizeof lb);
    if (!ok) x->n_failed++;
    if (!x->jsonl) {
        if (ok)
            print_escaped(a->text.data ? a->text.data : "", a->text.len);
        else
            putchar('\n');
        fflush(stdout);
        if (!ok) {
            fprintf(stderr, "request %s: error: %s\n", label, res->error);
            return;
        }
        char cache[128], rep[48] = "";
        if (res->n_repair_tokens)
            snprintf(rep, sizeof rep, ", %d tokens repaired", res->n_repair_tokens);
        if (has_doc_lookups(x->mode))
            snprintf(cache, sizeof cache, " (%d from cache), docs %d hit / %d miss%s",
                     res->n_cached_tokens, res->doc_hits, res->doc_misses, rep);
        else if (x->mode == LI_CACHE_PREFIX)
            snprintf(cache, sizeof cache, " (%d from cached prefix pages)", res->n_cached_tokens);
        else
            snprintf(cache, sizeof cache, " (all computed)");
        fprintf(stderr,
                "request %s: TTFT %.1f ms, total %.1f ms, prompt %d tokens%s, %d generated\n",
                label, ttft, res->total_ms, res->n_prompt, cache, res->n_generated);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", r->id ? json_incref(r->id) : json_integer(i));
    if (ok) {
        char *s = li_api_utf8_sanitize(a->text.data ? a->text.data : "", a->text.len, NULL);
        json_object_set_new(o, "answer", s ? json_string(s) : json_null());
        free(s);
    } else {
        json_object_set_new(o, "answer", json_null());
    }
    json_object_set_new(o, "finish_reason", json_string(finish_reason(a, r, x->n_predict)));
    if (!ok) {
        char *s = li_api_utf8_sanitize(res->error, strlen(res->error), NULL);
        json_object_set_new(o, "error", s ? json_string(s) : json_null());
        free(s);
    } else {
        json_object_set_new(o, "prompt_tokens", json_integer(res->n_prompt));
        json_object_set_new(o, "cached_tokens", json_integer(res->n_cached_tokens));
        json_object_set_new(o, "computed_tokens", json_integer(computed));
        json_object_set_new(o, "generated_tokens", json_integer(res->n_generated));
        if (has_doc_lookups(x->mode)) {
            json_object_set_new(o, "doc_hits", json_integer(res->doc_hits));
            json_object_set_new(o, "doc_misses", json_integer(res->doc_misses));
            json_object_set_new(o, "repair_tokens", json_integer(res->n_repair_tokens));
        }
        // 0.1 ms, printed with 10 significant digits: no binary tails (12.300000000000001)
        json_object_set_new(o, "ttft_ms", json_real(round(ttft * 10) / 10));
        json_object_set_new(o, "total_ms", json_real(round(res->total_ms * 10) / 10));
        json_object_set_new(o, "queue_ms", json_real(round(res->queue_ms * 10) / 10));
        json_object_set_new(o, "start_ms", json_real(round(a->out.submit_ms * 10) / 10));
        json_object_set_new(o, "end_ms", json_real(round(a->out.end_ms * 10) / 10));
    }
    char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (line)
        puts(line);
    else
        puts("{\"error\": \"out of memory\"}");
    free(line);
    fflush(stdout);
}

static void on_done(void *user, int i, const replay_out *o) {
    run_ctx *x = user;
    answer *a = &x->ans[i];
    a->out = *o;
    a->done = true;
    // max_tokens may cut a character whose first bytes are out: drop them (they would print as
    // a U+FFFD each); an answer the model ended keeps what it wrote
    if (!strcmp(finish_reason(a, &x->l->reqs[i], x->n_predict), "length") && a->text.data) {
        a->text.len = li_api_utf8_complete_prefix(a->text.data, a->text.len);
        a->text.data[a->text.len] = 0;
    }
    while (x->next_print < x->l->n_reqs && x->ans[x->next_print].done)
        print_record(x, x->next_print++);
}

// The cache's figures that mean something in this mode, and a warning when documents were
// evicted and prefilled again within the run.
static void print_summary(const run_ctx *x, li_model *m, const budget_plan *bp, bool planned) {
    li_cache_stats cs;
    li_get_cache_stats(m, &cs);
    const char *name = li_cache_mode_name(x->mode);
    int64_t misses = 0, blocks = 0, block_tokens = 0;
    for (int i = 0; i < x->l->n_reqs; i++) {
        const li_request_result *res = &x->ans[i].out.res;
        if (res->status != LI_OK) continue;
        misses += res->doc_misses;
        blocks += res->doc_hits + res->doc_misses;
        block_tokens += res->n_doc_tokens;
    }
    int64_t again = 0;
    switch (x->mode) {
    case LI_CACHE_LAZY:
    case LI_CACHE_COPY:
        fprintf(stderr, "cache %s: %lld document hits, %lld misses, %lld evictions", name,
                (long long)cs.doc_hits, (long long)cs.doc_misses, (long long)cs.evictions);
        if (x->mode == LI_CACHE_COPY)
            fprintf(stderr,
                    ", %lld copies made; resident %.2f MiB in %lld copies of %lld "
                    "documents\n",
                    (long long)cs.copies_made, mib(cs.resident_bytes),
                    (long long)cs.resident_copies, (long long)cs.resident_docs);
        else
            fprintf(stderr,
                    "; resident %.2f MiB in %lld documents (a position-aware cache would "
                    "hold %.2f MiB)\n",
                    mib(cs.resident_bytes), (long long)cs.resident_docs,
                    mib(cs.copy_baseline_bytes));
        again = planned ? misses - bp->n_distinct : 0;
        break;
    case LI_CACHE_PREFIX:
        fprintf(stderr,
                "cache prefix: %lld of %lld prompt tokens from cached pages, %lld "
                "evictions; resident %.2f MiB\n",
                (long long)cs.prefix_hit_tokens, (long long)cs.prefix_lookup_tokens,
                (long long)cs.evictions, mib(cs.resident_bytes));
        again = cs.evictions;
        break;
    case LI_CACHE_NONE:
        fprintf(stderr,
                "cache none: nothing cached; %lld document blocks (%lld tokens) computed, "
                "each in its request\n",
                (long long)blocks, (long long)block_tokens);
        break;
    case LI_CACHE_FULL:
        fprintf(stderr, "cache full: nothing cached; every prompt computed whole, with ordinary "
                        "causal attention\n");
        break;
    }
    cli_print_tier_stats(stderr, &cs);
    if (cs.evictions > 0 && again > 0 && planned) {
        int64_t want = (bp->base_pages + bp->keep_pages) * bp->page_bytes;
        fprintf(stderr,
                "lazyinfer rag: warning: the KV budget of %.1f MiB was too small to keep "
                "this run's documents: %lld evicted, then computed again (%lld %s); "
                "--budget %lldM keeps them all\n",
                mib(cs.kv_pages_total * cs.kv_page_bytes), (long long)cs.evictions,
                (long long)again, x->mode == LI_CACHE_PREFIX ? "prefix evictions" : "re-prefills",
                (long long)((want + (1 << 20) - 1) >> 20));
    }
}

// ---- the command -----------------------------------------------------------------------------

static int bad(const char *fmt, const char *v) {
    fprintf(stderr, "lazyinfer rag: ");
    fprintf(stderr, fmt, v);
    fputc('\n', stderr);
    return 2;
}

int cmd_rag(int argc, char **argv) {
    li_model_params mp = li_model_default_params(); // --model, --chat-template, -c, -t, ...
    const char *query = NULL, *queries = NULL, *workload = NULL, *system = NULL;
    const char *cache = "lazy", *budget_s = NULL, *output = "text", *repair_s = "none";
    const char *docs_arg[MAX_ARG_FILES], *samples_arg[MAX_ARG_FILES];
    int n_docs_arg = 0, n_samples_arg = 0;
    int n_predict = 64, page_size = 16, max_batch = 1;
    float temp = 0;
    uint64_t seed = 0;
    bool no_chat = false;
    // --doc and --sample repeat: collect them by hand before the generic parser sees argv
    char **rest = malloc((size_t)argc * sizeof *rest);
    if (!rest) return cli_fail("out of memory");
    int n_rest = 0;
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "--doc") || !strcmp(argv[i], "--sample")) && i + 1 < argc) {
            bool is_doc = !strcmp(argv[i], "--doc");
            if ((is_doc ? n_docs_arg : n_samples_arg) >= MAX_ARG_FILES) {
                fprintf(stderr, "lazyinfer rag: more than %d %s options\n", MAX_ARG_FILES, argv[i]);
                free(rest);
                return 2;
            }
            if (is_doc)
                docs_arg[n_docs_arg++] = argv[++i];
            else
                samples_arg[n_samples_arg++] = argv[++i];
            continue;
        }
        rest[n_rest++] = argv[i];
    }
    cli_tier_args tiers = {0};
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &mp.path, "model (default: the model setup fetched)"},
        {"--doc", NULL, OPT_STR, &docs_arg[0], "a document: a UTF-8 text file (repeat for more)"},
        {"--query", NULL, OPT_STR, &query, "a question over the --doc documents"},
        {"--queries", NULL, OPT_STR, &queries, "a UTF-8 file of questions over them, one per line"},
        {"--sample", NULL, OPT_STR, &samples_arg[0],
         "a RAG sample JSON (data/rag-samples): its question over its own passages (repeatable: "
         "one request each)"},
        {"--workload", NULL, OPT_STR, &workload,
         "a JSONL file of requests (the format above); alone, without --doc, --query, --queries, "
         "--sample"},
        {"--output", NULL, OPT_STR, &output, "text (default) or jsonl: one record per request"},
        {"--system", NULL, OPT_STR, &system, "system message (a workload line may give its own)"},
        {"--cache", NULL, OPT_STR, &cache, "lazy (default), copy, prefix, none, full"},
        {"--repair", NULL, OPT_STR, &repair_s,
         "none (default), head[:K] or blend[:R]: recompute document tokens in the request's "
         "context (lazy, copy; a workload line may give its own; docs/RAG.md)"},
        {"--budget", NULL, OPT_STR, &budget_s,
         "KV pool size in bytes, K/M/G suffixes (default: --max-batch contexts + every document "
         "of the run, at most half the available memory)"},
        CLI_KV_DTYPE_OPT(mp),
        CLI_FP8_OPT(mp),
        {"--n-predict", "-n", OPT_INT, &n_predict, "tokens per answer at most (default 64)"},
        {"--temp", NULL, OPT_FLOAT, &temp, "temperature >= 0 (default 0: greedy)"},
        {"--seed", NULL, OPT_U64, &seed, "sampling seed (request i draws from seed + i)"},
        {"--no-chat", NULL, OPT_FLAG, &no_chat, "raw text instead of the chat template"},
        {"--chat-template", NULL, OPT_STR, &mp.chat_template, "llama3, chatml or llada"},
        {"--page-size", NULL, OPT_INT, &page_size, "KV page size in tokens (default 16)"},
        {"--max-batch", NULL, OPT_INT, &max_batch, "requests decoded together (default 1)"},
        {"--ctx-size", "-c", OPT_INT, &mp.n_ctx,
         "context per request (default: min(trained, 4096); beyond the trained one: a warning)"},
        CLI_DEVICE_OPTS(mp),
        CLI_TIER_OPTS(tiers),
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(n_rest, rest, usage_text, opts, sizeof opts / sizeof opts[0], pos, 0,
                           &n_pos);
    free(rest);
    if (r) return r == 1 ? 0 : 2;

    // every bad value: exit 2 with one line naming it
    li_cache_mode mode;
    int64_t budget = 0;
    if (li_cache_mode_parse(cache, &mode) != LI_OK)
        return bad("--cache '%s': expected lazy, copy, prefix, none or full", cache);
    li_repair repair;
    if (li_repair_parse(repair_s, &repair) != LI_OK)
        return bad("--repair: %s", li_last_error());
    if (repair.mode != LI_REPAIR_NONE && mode != LI_CACHE_LAZY && mode != LI_CACHE_COPY)
        return bad("--repair %s: needs --cache lazy or copy (the repair overlays cached "
                   "documents)", repair_s);
    if (budget_s && (!cli_parse_bytes(budget_s, &budget) || budget <= 0))
        return bad("--budget '%s': expected bytes > 0 with an optional K/M/G suffix (e.g. 256M)",
                   budget_s);
    if (strcmp(output, "text") && strcmp(output, "jsonl"))
        return bad("--output '%s': expected text or jsonl", output);
    struct {
        const char *name;
        long long v, lo;
    } ints[] = {{"-n", n_predict, 1},          {"--max-batch", max_batch, 1},
                {"--page-size", page_size, 1}, {"--threads", mp.n_threads, 0},
                {"--ctx-size", mp.n_ctx, 0},   {"--gpu", mp.device, 0}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v < ints[i].lo) {
            fprintf(stderr, "lazyinfer rag: %s %lld: must be >= %lld\n", ints[i].name, ints[i].v,
                    ints[i].lo);
            return 2;
        }
    if (!(temp >= 0)) {
        fprintf(stderr, "lazyinfer rag: --temp %g: must be >= 0 (0: greedy)\n", temp);
        return 2;
    }
    if (workload && (n_docs_arg || n_samples_arg || query || queries))
        return bad("%s: a workload holds its own documents and questions; give --doc, --query, "
                   "--queries and --sample without --workload",
                   "--workload");
    if (n_samples_arg && (n_docs_arg || query || queries))
        return bad("%s: a sample holds its own passages and question; to ask other questions "
                   "about them, or to combine samples, write a --workload (docs/RAG.md)",
                   "--sample");
    if (n_docs_arg && !query && !queries)
        return bad("%s: no question: give --query TEXT or --queries FILE", "--doc");
    if (!workload && !n_samples_arg && !query && !queries)
        return bad("%s", "nothing to answer: give --doc with --query or --queries, --sample or "
                         "--workload (see --help)");

    rag_list l = {0};
    li_status st = LI_OK;
    for (int i = 0; i < n_docs_arg && st == LI_OK; i++)
        st = rag_add_doc_file(&l, docs_arg[i]);
    for (int i = 0; i < n_samples_arg && st == LI_OK; i++)
        st = rag_load_sample(&l, samples_arg[i]);
    if (st == LI_OK && query) st = rag_add_query(&l, query);
    if (st == LI_OK && queries) st = rag_load_queries(&l, queries);
    if (st == LI_OK && workload) st = rag_load_workload(&l, workload);
    if (st != LI_OK) {
        fprintf(stderr, "lazyinfer rag: %s\n", li_last_error());
        rag_list_free(&l);
        return st == LI_ERR_OOM ? 1 : 2;
    }
    rag_warn_repeated_ids(&l);

    if (!mp.path) mp.path = cli_default_model();
    mp.cache_mode = cache;
    mp.page_size = page_size;
    mp.max_seqs = max_batch;
    if (!cli_tier_params("rag", &tiers, &mp)) {
        rag_list_free(&l);
        return 2;
    }
    // A metadata-only load first (tokenizer and shapes, no weights): it checks the model options
    // and sizes the default budget from the run's documents.
    budget_plan bp = {0};
    bool planned = false;
    li_model *m = NULL;
    mp.metadata_only = true;
    st = li_model_load(&m, &mp);
    if (st == LI_OK && mode != LI_CACHE_NONE && mode != LI_CACHE_FULL) {
        plan_args pa = {&l, system, !no_chat, mode, page_size, max_batch, n_predict};
        st = plan_budget(m, &pa, &bp);
        planned = st == LI_OK;
    }
    li_model_free(m);
    m = NULL;
    mp.metadata_only = false;
    mp.kv_budget_bytes = budget;
    if (st != LI_OK) { // a model, or a model option, that does not load: a bad value
        fprintf(stderr, "lazyinfer rag: model %s: %s\n", mp.path, li_last_error());
        rag_list_free(&l);
        return st == LI_ERR_OOM || st == LI_ERR_BACKEND ? 1 : 2;
    }
    st = load_model(&m, &mp, planned && !budget ? &bp : NULL, max_batch);
    if (st != LI_OK) {
        fprintf(stderr, "lazyinfer rag: model %s: %s\n", mp.path, li_last_error());
        rag_list_free(&l);
        return st == LI_ERR_INVALID_ARG || st == LI_ERR_LIMIT ? 2 : 1;
    }

    answer *ans = calloc((size_t)l.n_reqs, sizeof *ans);
    double *arrival = l.n_arrivals ? malloc((size_t)l.n_reqs * sizeof *arrival) : NULL;
    replay_out *outs = malloc((size_t)l.n_reqs * sizeof *outs);
    int status = 0;
    if (!ans || !outs || (l.n_arrivals && !arrival)) {
        status = cli_fail("out of memory");
        goto done;
    }
    for (int i = 0; arrival && i < l.n_reqs; i++) // without one: at the start
        arrival[i] = l.reqs[i].arrival_ms >= 0 ? l.reqs[i].arrival_ms : 0;
    run_ctx x = {.l = &l,
                 .ans = ans,
                 .jsonl = !strcmp(output, "jsonl"),
                 .mode = mode,
                 .system = system,
                 .n_predict = n_predict,
                 .temp = temp,
                 .seed = seed,
                 .chat = !no_chat,
                 .repair = repair};
    replay_plan plan = {.n = l.n_reqs,
                        .arrival_ms = arrival,
                        .max_in_flight = max_batch,
                        .submit = submit_one,
                        .done = on_done,
                        .user = &x,
                        .progress = "rag"};
    double t0 = li_time_ms();
    st = replay_run(m, &plan, outs);
    if (st != LI_OK) fprintf(stderr, "lazyinfer rag: the engine failed: %s\n", li_last_error());
    fprintf(stderr, "%d request%s: %d answered, %d failed, %.2f s\n", l.n_reqs,
            l.n_reqs == 1 ? "" : "s", l.n_reqs - x.n_failed, x.n_failed, (li_time_ms() - t0) / 1e3);
    print_summary(&x, m, &bp, planned);
    status = st != LI_OK || x.n_failed ? 1 : 0;
done:
    for (int i = 0; ans && i < l.n_reqs; i++)
        li_buf_free(&ans[i].text);
    free(ans);
    free(arrival);
    free(outs);
    li_model_free(m);
    rag_list_free(&l);
    return status;
}
