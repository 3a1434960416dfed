// cmd-rag.c — `lazyinfer rag`: answers questions over documents with the document KV cache.
//
//   lazyinfer rag -m MODEL --doc FILE [--doc FILE …] (--query TEXT | --queries FILE)
//                 [--cache MODE] [--budget BYTES] [-n N] [--temp T] [--workload FILE] …
//
// Every query becomes one request [system?][documents…][query]; answers go to stdout, one per
// request in order (nothing else there); per-request TTFT, cache hits and resident bytes go to
// stderr. --sample FILE.json takes the passages and the question of a RAG sample (the format of
// data/rag-samples: keys "0".."N" are passages, "query" the question). --workload FILE
// replays a JSONL of requests: {"docs": [text | {"id": …, "text": …} | {"file": path}, …],
// "query": …, "system": …, "max_tokens": N, "temperature": T}.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "cli.h"
#include "lazyinfer.h"

#define MAX_DOCS 256
#define MAX_REQS 4096

typedef struct {
    char *text;  // owned, ends with a blank line
    char *id;    // owned
} doc_text;

typedef struct {
    doc_text *docs;
    int n_docs;
    char *query, *system;
    int n_predict;
    float temp;
    bool has_temp;
} req_text;

typedef struct {
    req_text reqs[MAX_REQS];
    int n_reqs;
    doc_text docs[MAX_DOCS];  // documents given with --doc / --sample, shared by every --query
    int n_docs;
    char *queries[MAX_REQS];
    int n_queries;
} plan;

// A document's text as the engine sees it: trailing whitespace trimmed, then one blank line,
// so consecutive documents are separated the same way whatever the files end with.
static char *doc_normalise(const char *s, size_t n) {
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    char *out = malloc(n + 3);
    if (!out) return NULL;
    memcpy(out, s, n);
    memcpy(out + n, "\n\n", 3);
    return out;
}

static int add_doc(doc_text *docs, int *n, const char *text, size_t len, const char *id) {
    if (*n >= MAX_DOCS) {
        fprintf(stderr, "lazyinfer rag: more than %d documents\n", MAX_DOCS);
        return 2;
    }
    docs[*n].text = doc_normalise(text, len);
    docs[*n].id = strdup(id ? id : "");
    if (!docs[*n].text || !docs[*n].id) return cli_fail("out of memory");
    (*n)++;
    return 0;
}

static int add_doc_file(doc_text *docs, int *n, const char *path) {
    char *s;
    size_t len;
    if (li_file_read_all(path, &s, &len, 64u << 20) != LI_OK) return cli_fail("cannot read a document");
    int r = add_doc(docs, n, s, len, path);
    free(s);
    return r;
}

static int add_query(plan *p, const char *q) {
    if (p->n_queries >= MAX_REQS) {
        fprintf(stderr, "lazyinfer rag: more than %d queries\n", MAX_REQS);
        return 2;
    }
    p->queries[p->n_queries] = strdup(q);
    if (!p->queries[p->n_queries]) return cli_fail("out of memory");
    p->n_queries++;
    return 0;
}

static int load_sample(plan *p, const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root || !json_is_object(root)) {
        fprintf(stderr, "lazyinfer rag: %s: not a JSON object (line %d: %s)\n", path, err.line,
                err.text);
        json_decref(root);
        return 1;
    }
    int rc = 0;
    for (int i = 0; rc == 0; i++) {
        char key[16], id[64];
        snprintf(key, sizeof key, "%d", i);
        json_t *v = json_object_get(root, key);
        if (!v) break;
        if (!json_is_string(v)) {
            fprintf(stderr, "lazyinfer rag: %s: passage \"%s\" is not a string\n", path, key);
            rc = 1;
            break;
        }
        snprintf(id, sizeof id, "%.40s#%d", path, i);
        rc = add_doc(p->docs, &p->n_docs, json_string_value(v), json_string_length(v), id);
    }
    json_t *q = json_object_get(root, "query");
    if (rc == 0 && q && !json_is_string(q)) {
        fprintf(stderr, "lazyinfer rag: %s: \"query\" is not a string\n", path);
        rc = 1;
    }
    if (rc == 0 && q) rc = add_query(p, json_string_value(q));
    json_decref(root);
    return rc;
}

static int load_queries(plan *p, const char *path) {
    char *s;
    size_t len;
    if (li_file_read_all(path, &s, &len, 64u << 20) != LI_OK) return cli_fail("cannot read the queries");
    int rc = 0;
    for (char *line = strtok(s, "\n"); line && rc == 0; line = strtok(NULL, "\n"))
        if (*line) rc = add_query(p, line);
    free(s);
    return rc;
}

// One JSONL line → a request.
static int parse_workload_line(req_text *r, json_t *o, const char *where) {
    if (!json_is_object(o)) {
        fprintf(stderr, "lazyinfer rag: %s: not a JSON object\n", where);
        return 1;
    }
    json_t *docs = json_object_get(o, "docs"), *q = json_object_get(o, "query");
    json_t *sys = json_object_get(o, "system"), *n = json_object_get(o, "max_tokens");
    json_t *t = json_object_get(o, "temperature");
    if (!q || !json_is_string(q)) {
        fprintf(stderr, "lazyinfer rag: %s: \"query\" must be a string\n", where);
        return 1;
    }
    if ((docs && !json_is_array(docs)) || (sys && !json_is_string(sys)) ||
        (n && !json_is_integer(n)) || (t && !json_is_number(t))) {
        fprintf(stderr, "lazyinfer rag: %s: wrong type for docs (array), system (string), "
                        "max_tokens (integer) or temperature (number)\n", where);
        return 1;
    }
    r->query = strdup(json_string_value(q));
    r->system = sys ? strdup(json_string_value(sys)) : NULL;
    r->n_predict = n ? (int)json_integer_value(n) : -1;
    r->has_temp = t != NULL;
    r->temp = t ? (float)json_number_value(t) : 0;
    size_t nd = docs ? json_array_size(docs) : 0;
    if (nd > MAX_DOCS) {
        fprintf(stderr, "lazyinfer rag: %s: more than %d documents\n", where, MAX_DOCS);
        return 1;
    }
    r->docs = calloc(nd ? nd : 1, sizeof *r->docs);
    if (!r->query || !r->docs) return cli_fail("out of memory");
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(docs, i);
        int rc;
        if (json_is_string(d)) {
            rc = add_doc(r->docs, &r->n_docs, json_string_value(d), json_string_length(d), NULL);
        } else if (json_is_object(d) && json_is_string(json_object_get(d, "text"))) {
            json_t *id = json_object_get(d, "id"), *tx = json_object_get(d, "text");
            rc = add_doc(r->docs, &r->n_docs, json_string_value(tx), json_string_length(tx),
                         json_is_string(id) ? json_string_value(id) : NULL);
        } else if (json_is_object(d) && json_is_string(json_object_get(d, "file"))) {
            rc = add_doc_file(r->docs, &r->n_docs, json_string_value(json_object_get(d, "file")));
        } else {
            fprintf(stderr, "lazyinfer rag: %s: document %zu must be a string or an object with "
                            "\"text\" or \"file\"\n", where, i);
            rc = 1;
        }
        if (rc) return rc;
    }
    return 0;
}

static int load_workload(plan *p, const char *path) {
    char *s;
    size_t len;
    if (li_file_read_all(path, &s, &len, 256u << 20) != LI_OK) return cli_fail("cannot read the workload");
    int rc = 0, line_no = 0;
    char *save = NULL;
    for (char *line = strtok_r(s, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        if (!*line || *line == '#') continue;
        if (p->n_reqs >= MAX_REQS) {
            fprintf(stderr, "lazyinfer rag: %s: more than %d requests\n", path, MAX_REQS);
            rc = 2;
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "%s:%d", path, line_no);
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (!o) {
            fprintf(stderr, "lazyinfer rag: %s: bad JSON: %s\n", where, err.text);
            rc = 1;
            break;
        }
        rc = parse_workload_line(&p->reqs[p->n_reqs++], o, where);
        json_decref(o);
    }
    free(s);
    return rc;
}

static void plan_free(plan *p) {
    for (int i = 0; i < p->n_docs; i++) {
        free(p->docs[i].text);
        free(p->docs[i].id);
    }
    for (int i = 0; i < p->n_reqs; i++) {
        req_text *r = &p->reqs[i];
        if (r->docs == p->docs) continue;  // --query requests share the --doc documents
        for (int k = 0; k < r->n_docs; k++) {
            free(r->docs[k].text);
            free(r->docs[k].id);
        }
        free(r->docs);
        free(r->query);
        free(r->system);
    }
    for (int i = 0; i < p->n_queries; i++) free(p->queries[i]);
    memset(p, 0, sizeof *p);
}

typedef struct {
    li_buf text;
    li_model *m;
} answer;

static bool collect(void *u, int32_t tok) {
    answer *a = u;
    char buf[256];
    size_t n;
    if (li_token_to_piece(a->m, tok, buf, sizeof buf, &n) != LI_OK) return false;
    return li_buf_append(&a->text, buf, n < sizeof buf ? n : sizeof buf) == LI_OK;
}

static bool parse_bytes(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (end == s || *end || !(v > 0) || v * mul > 9e18) return false;
    *out = (int64_t)(v * mul);
    return true;
}

int cmd_rag(int argc, char **argv) {
    const char *model = NULL, *query = NULL, *queries = NULL, *workload = NULL, *system = NULL;
    const char *cache = "lazy", *budget_s = NULL, *chat_template = NULL;
    const char *docs_arg[MAX_DOCS], *samples_arg[MAX_DOCS];
    int n_docs_arg = 0, n_samples_arg = 0;
    int n_predict = 64, n_threads = 0, page_size = 16, max_batch = 1, n_ctx = 0, gpu = 0;
    const char *backend = NULL, *kv_dtype = NULL, *attn_impl = NULL;
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
            if ((is_doc ? n_docs_arg : n_samples_arg) >= MAX_DOCS) {
                fprintf(stderr, "lazyinfer rag: too many %s options\n", argv[i]);
                free(rest);
                return 2;
            }
            if (is_doc) docs_arg[n_docs_arg++] = argv[++i];
            else samples_arg[n_samples_arg++] = argv[++i];
            continue;
        }
        rest[n_rest++] = argv[i];
    }
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &model, "model (default: the model setup fetched)"},
        {"--doc", NULL, OPT_STR, &docs_arg[0], "a document file (repeat for more)"},
        {"--sample", NULL, OPT_STR, &samples_arg[0], "a RAG sample JSON: its passages and question (repeatable)"},
        {"--query", NULL, OPT_STR, &query, "the question"},
        {"--queries", NULL, OPT_STR, &queries, "a file of questions, one per line"},
        {"--workload", NULL, OPT_STR, &workload, "a JSONL file of requests to replay"},
        {"--system", NULL, OPT_STR, &system, "system message"},
        {"--cache", NULL, OPT_STR, &cache, "lazy (default), copy, prefix, none, full"},
        {"--budget", NULL, OPT_STR, &budget_s, "KV pool size in bytes (K/M/G suffixes)"},
        {"--kv-dtype", NULL, OPT_STR, &kv_dtype, "how K/V are stored: f32, bf16 or auto (default: bf16 on cuda, f32 on the CPU)"},
        {"--attn-impl", NULL, OPT_STR, &attn_impl, CLI_ATTN_IMPL_HELP},
        {"--n-predict", "-n", OPT_INT, &n_predict, "tokens per answer (default 64)"},
        {"--temp", NULL, OPT_FLOAT, &temp, "temperature (default 0: greedy)"},
        {"--seed", NULL, OPT_U64, &seed, "sampling seed"},
        {"--no-chat", NULL, OPT_FLAG, &no_chat, "raw text instead of the chat template"},
        {"--chat-template", NULL, OPT_STR, &chat_template, "llama3, chatml or llada"},
        {"--page-size", NULL, OPT_INT, &page_size, "KV page size in tokens (default 16)"},
        {"--max-batch", NULL, OPT_INT, &max_batch, "requests decoded together (default 1)"},
        {"--ctx-size", "-c", OPT_INT, &n_ctx, "context per request (default: min(trained, 4096))"},
        {"--threads", "-t", OPT_INT, &n_threads, "CPU threads (default: all cores)"},
        {"--backend", NULL, OPT_STR, &backend, "compute backend: cpu (default), cpu-ref, cuda (./lazyinfer-cuda)"},
        {"--gpu", NULL, OPT_INT, &gpu, "GPU index for --backend cuda (default 0)"},
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(n_rest, rest, "usage: lazyinfer rag -m MODEL --doc FILE [--doc FILE …] "
                           "(--query TEXT | --queries FILE) [options]", opts,
                           sizeof opts / sizeof opts[0], pos, 0, &n_pos);
    free(rest);
    if (r) return r == 1 ? 0 : 2;
    int64_t budget = 0;
    if (budget_s && !parse_bytes(budget_s, &budget)) {
        fprintf(stderr, "lazyinfer rag: bad --budget '%s' (bytes, with an optional K/M/G suffix)\n",
                budget_s);
        return 2;
    }
    if (n_predict < 1 || max_batch < 1 || page_size < 1 || n_threads < 0 || n_ctx < 0) {
        fprintf(stderr, "lazyinfer rag: -n, --max-batch and --page-size must be >= 1\n");
        return 2;
    }
    li_cache_mode mode;
    if (li_cache_mode_parse(cache, &mode) != LI_OK) return cli_fail("--cache");

    static plan p;
    int rc = 0;
    for (int i = 0; i < n_docs_arg && rc == 0; i++) rc = add_doc_file(p.docs, &p.n_docs, docs_arg[i]);
    for (int i = 0; i < n_samples_arg && rc == 0; i++) rc = load_sample(&p, samples_arg[i]);
    if (rc == 0 && query) rc = add_query(&p, query);
    if (rc == 0 && queries) rc = load_queries(&p, queries);
    if (rc == 0 && workload) rc = load_workload(&p, workload);
    if (rc) {
        plan_free(&p);
        return rc;
    }
    for (int i = 0; i < p.n_queries && p.n_reqs < MAX_REQS; i++) {
        req_text *rq = &p.reqs[p.n_reqs++];
        rq->docs = p.docs;
        rq->n_docs = p.n_docs;
        rq->query = p.queries[i];
        rq->n_predict = -1;
    }
    if (p.n_reqs == 0) {
        fprintf(stderr, "lazyinfer rag: nothing to answer: give --query, --queries, --sample or "
                        "--workload (see --help)\n");
        plan_free(&p);
        return 2;
    }

    li_model_params mp = li_model_default_params();
    mp.path = model ? model : cli_default_model();
    mp.cache_mode = cache;
    mp.kv_budget_bytes = budget;
    mp.kv_dtype = kv_dtype;
    mp.attn_impl = attn_impl;
    mp.page_size = page_size;
    mp.max_seqs = max_batch;
    mp.n_threads = n_threads;
    mp.backend = backend;
    mp.device = gpu;
    mp.n_ctx = n_ctx;
    mp.chat_template = chat_template;
    li_model *m;
    if (li_model_load(&m, &mp) != LI_OK) {
        plan_free(&p);
        return cli_fail("cannot load the model");
    }

    answer *ans = calloc((size_t)p.n_reqs, sizeof *ans);
    int64_t *ids = calloc((size_t)p.n_reqs, sizeof *ids);
    li_request_result *res = calloc((size_t)p.n_reqs, sizeof *res);
    if (!ans || !ids || !res) return cli_fail("out of memory");
    int status = 0;
    // With --max-batch 1 each request runs alone (its TTFT is its own); otherwise all are queued
    // at once and share the scheduler's batches.
    for (int i0 = 0; i0 < p.n_reqs && status == 0; i0 += max_batch) {
        int i1 = i0 + max_batch < p.n_reqs ? i0 + max_batch : p.n_reqs;
        for (int i = i0; i < i1 && status == 0; i++) {
            req_text *rq = &p.reqs[i];
            li_doc d[MAX_DOCS];
            for (int k = 0; k < rq->n_docs; k++)
                d[k] = (li_doc){.text = rq->docs[k].text, .len = strlen(rq->docs[k].text),
                                .id = rq->docs[k].id};
            ans[i].m = m;
            li_request q = {.system = rq->system ? rq->system : system, .docs = d,
                            .n_docs = rq->n_docs, .query = rq->query, .chat = !no_chat};
            q.gen = li_generate_default_params();
            q.gen.n_predict = rq->n_predict > 0 ? rq->n_predict : n_predict;
            q.gen.sampling.temperature = rq->has_temp ? rq->temp : temp;
            q.gen.sampling.seed = seed + (uint64_t)i;
            q.gen.on_token = collect;
            q.gen.user = &ans[i];
            if (li_submit(m, &q, &ids[i]) != LI_OK) {
                char what[64];
                snprintf(what, sizeof what, "request %d", i);
                status = cli_fail(what);
            }
        }
        if (status == 0 && li_run(m) != LI_OK) status = cli_fail("generation failed");
        for (int i = i0; i < i1 && status == 0; i++) {
            if (li_result(m, ids[i], &res[i]) != LI_OK) status = cli_fail("result");
            li_cache_stats cs;
            li_get_cache_stats(m, &cs);
            if (res[i].status != LI_OK) {
                fprintf(stderr, "lazyinfer rag: request %d failed: %s\n", i, res[i].error);
                status = 1;
                continue;
            }
            printf("%s\n", ans[i].text.data ? ans[i].text.data : "");
            fflush(stdout);
            fprintf(stderr,
                    "request %d: TTFT %.1f ms, total %.1f ms, prompt %d tokens (%d from cache), "
                    "docs %d hit / %d miss, %d generated, resident %.2f MB in %lld documents\n",
                    i, res[i].ttft_ms, res[i].total_ms, res[i].n_prompt, res[i].n_cached_tokens,
                    res[i].doc_hits, res[i].doc_misses, res[i].n_generated,
                    cs.resident_bytes / 1048576.0, (long long)cs.resident_docs);
        }
    }
    li_cache_stats cs;
    li_get_cache_stats(m, &cs);
    fprintf(stderr, "cache %s: %lld document hits, %lld misses, %lld evictions, %lld copies made; "
                    "resident %.2f MB (a position-aware cache would hold %.2f MB)\n",
            li_cache_mode_name(mode), (long long)cs.doc_hits, (long long)cs.doc_misses,
            (long long)cs.evictions, (long long)cs.copies_made, cs.resident_bytes / 1048576.0,
            cs.copy_baseline_bytes / 1048576.0);
    for (int i = 0; i < p.n_reqs; i++) li_buf_free(&ans[i].text);
    free(ans);
    free(ids);
    free(res);
    li_model_free(m);
    plan_free(&p);
    return status;
}
