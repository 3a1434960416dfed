// scheduler.c — requests with documents (RAG) and continuous batching for Llama-family models.
//
// A request is blocks [system?][doc…] followed by a query (ARCHITECTURE.md §3). Per cache mode:
//   lazy    each block is a document-cache copy encoded alone at local positions 0..n-1; the
//           request's page table points at the copy's pages with the block's Δ, which attention
//           applies as one relative rotation. One physical copy serves every position.
//   copy    a copy per (document, Δ), encoded at global positions; a hit at another Δ is served
//           by copying the pages and re-rotating K by the difference (kv_copy_rotate).
//   none    every block recomputed into the request's private pages, at global positions.
//   prefix  the whole prompt laid out contiguously; full pages reused through the hash chain of
//           vLLM's prefix caching; block semantics kept with a first visible key per token.
//   full    the whole prompt causal (ordinary attention; other semantics, quality reference).
// One li_step: admit waiting requests (look documents up, pin them, create prefill work for the
// missing ones — one work item per missing copy, however many requests wait for it — and reserve
// the request's own pages for its query and every token it may generate, so decoding can never
// run out of pages), run ready page copies, then one forward whose rows are: one decode token for
// every running sequence, then document prefill chunks, then query prefill chunks, up to n_batch.
// Tested by tests/test-rag.c (all modes give the same logits and tokens).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "repair.h"

typedef struct work work;

// A block of a request: the system block or one document.
typedef struct {
    int32_t *tokens;
    int n;
    int64_t delta;        // global position of its first token
    li_doc_copy *copy;    // lazy / copy: the copy serving it (pinned)
    int64_t *priv;        // none: private pages holding it (one reference each)
    int n_priv;
    bool ready;           // none: prefilled
    work *job;            // the work item filling it, if this request created one
    int64_t *ovl;         // repair: overlay page per page of the block (-1: the copy's), one
                          // reference each; NULL: not repaired (repair.h)
    int n_ovl;
} block;

typedef enum { RQ_WAITING, RQ_PREFILL, RQ_DECODE, RQ_DONE } rq_state;

typedef struct request request;
struct request {
    int64_t id;
    rq_state state;
    block *blocks;
    int n_blocks;
    int n_block_tokens;   // Σ block lengths (lazy/copy/none); 0 for prefix/full
    int32_t *prompt;      // tokens the request itself runs: the query (lazy/copy/none) or the
    int n_prompt;         // whole prompt (prefix/full)
    int32_t *first_key;   // (n_prompt) prefix: first visible key of each prompt token
    li_doc_key *chain;    // (n_prompt / P) prefix: the prompt's page-chain keys, made once
    int n_total_prompt;   // all prompt tokens, for results
    li_kv_seq_pages own;  // pages of the tokens in `prompt` and the generated tokens
    uint64_t *table;      // attention page table: blocks' pages then own pages
    int cap_table;
    int n_done_prompt;    // rows already run: the repair's, then the prompt's
    li_repair repair;
    bool repair_begun;    // the overlay is filled; blend's selection pass may still be running
    bool repair_planned;  // the pass is done and `rep` holds the rows to recompute
    li_repair_pass pass;  // blend's selection pass (repair.h), run as the batch's tail rows
    li_repair_rows rep;   // repair rows (true positions, overlay slots), run before the prompt
    li_generate_params gen;
    float *first_logits;
    li_sampler sampler;
    int32_t last_token;
    int n_generated;
    bool finished_tokens; // stop reached; free at the end of the step
    li_request_result res;
    double t_submit, t_admit;
    request *next;
};

struct work {
    li_doc_copy *copy;     // lazy/copy: the copy to fill; NULL for a none-mode block
    block *blk;            // none: the request block it fills
    const int64_t *pages;  // the pages to write, in order
    int32_t *tokens;       // (n) owned copy
    int n, done;
    int64_t pos0;          // RoPE position of token 0
    li_doc_copy *source;   // copy mode: copy + re-rotate from this copy instead of prefilling
    int64_t rotate_by;
    li_kv_promotion *promo;  // a lower tier (disk, Redis) is loading the copy: not prefilled
                             // unless the load finds nothing
    uint64_t *table;       // (n_pages) page-table words while prefilling
    work *next;
};

typedef struct li_sched {
    request *reqs;       // every request not yet collected by li_result, in submit order
    work *jobs;          // FIFO
    int64_t next_id;
    // per-step batch arrays (n_batch rows), allocated once
    int32_t *tok, *pos, *nvis, *first, *rows;
    int64_t *slot;
    li_batch_seq *seqs;
    request **row_req;   // which request a logits row belongs to
    float *host_logits;  // (V) a row's logits in host memory for on_logits (device backends)
    void *arrays;        // the block holding the arrays above (li_alloc_parts)
} li_sched;

// ---- small helpers -------------------------------------------------------------------------

li_status li_cache_mode_parse(const char *name, li_cache_mode *out) {
    static const char *names[] = {"lazy", "copy", "prefix", "none", "full"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, names[i])) {
            *out = (li_cache_mode)i;
            return LI_OK;
        }
    return li_error_set(LI_ERR_INVALID_ARG, "unknown cache mode '%s' (lazy, copy, prefix, none, full)",
                        name);
}

const char *li_cache_mode_name(li_cache_mode mode) {
    static const char *names[] = {"lazy", "copy", "prefix", "none", "full"};
    return (unsigned)mode < 5 ? names[mode] : "?";
}

static int n_pages_for(const li_model *m, int n) {
    int P = m->kv.storage.page_size;
    return (n + P - 1) / P;
}

li_status li_engine_make_room(li_model *m, int64_t n_pages) {
    if (li_kv_pool_n_free(&m->kv) >= n_pages) return LI_OK;
    if (m->docs) return li_doc_cache_make_room(m->docs, n_pages);
    if (m->prefix) return li_prefix_cache_make_room(m->prefix, n_pages);
    return li_error_set(LI_ERR_KV_FULL, "KV cache full: %lld pages needed, %lld free",
                        (long long)n_pages, (long long)li_kv_pool_n_free(&m->kv));
}

static li_status append_tokens(int32_t **dst, int *n, int *cap, const int32_t *src, int k) {
    if (*n + k > *cap) {
        int c = *cap ? *cap : 64;
        while (c < *n + k) c *= 2;
        int32_t *p = realloc(*dst, (size_t)c * sizeof *p);
        if (!p) return li_error_set(LI_ERR_OOM, "out of memory");
        *dst = p;
        *cap = c;
    }
    memcpy(*dst + *n, src, (size_t)k * sizeof *src);
    *n += k;
    return LI_OK;
}

static li_status tokenize_into(const li_model *m, const char *text, size_t len, bool special,
                               int32_t **out, int *n) {
    return li_tokenizer_encode(m->tok, text, len, false, special, out, n);
}

// Splits the model's chat rendering of one user turn around the user's text:
// prefix = everything before it (BOS, system turn, user header), suffix = everything after it
// (end of turn, assistant header). sys (2): where the system message's text lies in the prefix
// (never parsed for special tokens), {0, 0} without one.
#define USER_MARKER "\x01lazyinfer-user\x01"
static li_status chat_split(const li_model *m, const char *system, char **prefix, char **suffix,
                            size_t sys[2]) {
    li_chat_message msgs[2];
    size_t spans[4] = {0};
    int n = 0;
    if (system) msgs[n++] = (li_chat_message){"system", system};
    msgs[n++] = (li_chat_message){"user", USER_MARKER};
    li_buf b = {0};
    LI_TRY(li_chat_render_spans(m->tok, msgs, n, true, &b, spans));
    char *at = strstr(b.data, USER_MARKER);
    if (!at) {
        li_buf_free(&b);
        return li_error_set(LI_ERR_UNSUPPORTED, "the chat template does not place the user message");
    }
    sys[0] = system ? spans[0] : 0;
    sys[1] = system ? spans[1] : 0;
    *at = 0;
    *prefix = strdup(b.data);
    *suffix = strdup(at + strlen(USER_MARKER));
    li_buf_free(&b);
    if (!*prefix || !*suffix) {
        free(*prefix);
        free(*suffix);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    return LI_OK;
}

// ---- requests: building ----------------------------------------------------------------------

static void request_free_memory(request *r) {
    for (int i = 0; i < r->n_blocks; i++) {
        free(r->blocks[i].tokens);
        free(r->blocks[i].priv);
        free(r->blocks[i].ovl);
    }
    li_repair_rows_free(&r->rep);
    li_repair_pass_free(&r->pass);
    free(r->blocks);
    free(r->prompt);
    free(r->first_key);
    free(r->chain);
    free(r->table);
    free(r->own.pages);
    free(r->own.spare);
    free(r);
}

// A request's token ids before it is submitted: its blocks and its query (li_request_tokenize).
typedef struct {
    int32_t *tokens;
    int n;
} block_tokens;

struct li_request_tokens {
    block_tokens *blocks;  // (n_blocks) system block, then documents
    int n_blocks;
    int32_t *query;        // (n_query)
    int n_query;
};

static void tokens_clear(li_request_tokens *t) {
    for (int i = 0; i < t->n_blocks; i++) free(t->blocks[i].tokens);
    free(t->blocks);
    free(t->query);
}

void li_request_tokens_free(li_request_tokens *t) {
    if (!t) return;
    tokens_clear(t);
    free(t);
}

int li_request_tokens_count(const li_request_tokens *t) {
    int64_t n = t->n_query;
    for (int i = 0; i < t->n_blocks; i++) n += t->blocks[i].n;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

int li_request_tokens_part(const li_request_tokens *t, int i, const int32_t **ids) {
    if (i < 0 || i > t->n_blocks) return -1;
    *ids = i < t->n_blocks ? t->blocks[i].tokens : t->query;
    return i < t->n_blocks ? t->blocks[i].n : t->n_query;
}

static li_status add_block(li_request_tokens *t, int32_t *tokens, int n) {
    block_tokens *b = realloc(t->blocks, (size_t)(t->n_blocks + 1) * sizeof *b);
    if (!b) {
        free(tokens);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    t->blocks = b;
    b[t->n_blocks++] = (block_tokens){tokens, n};
    return LI_OK;
}

// Tokenises the request into blocks + query (ARCHITECTURE.md §3.1; README "Documents"). Reads
// only the tokenizer: any thread may call it while another steps the model.
static li_status build_blocks(const li_model *m, const li_request *q, li_request_tokens *r) {
    char *prefix = NULL, *suffix = NULL;
    int32_t *ids = NULL;
    int n = 0;
    li_status rc = LI_OK;
    int32_t **query = &r->query;
    int *n_query = &r->n_query;
    if (q->chat) {
        size_t sys[2];
        if ((rc = chat_split(m, q->system, &prefix, &suffix, sys)) != LI_OK) goto out;
        if (*prefix) {
            // the template's special tokens, but none in the system message's text
            if ((rc = li_tokenizer_encode_spans(m->tok, prefix, strlen(prefix), false, sys,
                                                sys[1] > sys[0], &ids, &n)) != LI_OK)
                goto out;
            if (n > 0 && (rc = add_block(r, ids, n)) != LI_OK) goto out;
            if (n == 0) free(ids);
            ids = NULL;
        }
    } else {
        // raw: [BOS][system text] as the first block, when there is any
        int32_t bos = li_tokenizer_bos(m->tok);
        bool want_bos = bos >= 0 && li_tokenizer_add_bos(m->tok);
        if (q->system || want_bos) {
            int32_t *sys = NULL;
            int ns = 0;
            if (q->system &&
                (rc = tokenize_into(m, q->system, strlen(q->system), false, &sys, &ns)) != LI_OK)
                goto out;
            ids = malloc((size_t)(ns + 1) * sizeof *ids);
            if (!ids) {
                free(sys);
                rc = li_error_set(LI_ERR_OOM, "out of memory");
                goto out;
            }
            n = 0;
            if (want_bos) ids[n++] = bos;
            if (ns) memcpy(ids + n, sys, (size_t)ns * sizeof *ids);
            n += ns;
            free(sys);
            if (n > 0 && (rc = add_block(r, ids, n)) != LI_OK) goto out;
            if (n == 0) free(ids);
            ids = NULL;
        }
    }
    for (int d = 0; d < q->n_docs; d++) {
        const li_doc *doc = &q->docs[d];
        if (doc->ids) {
            if (doc->n_ids <= 0) {
                rc = li_error_set(LI_ERR_INVALID_ARG, "document %d%s%s has no tokens", d,
                                  doc->id ? " " : "", doc->id ? doc->id : "");
                goto out;
            }
            ids = malloc((size_t)doc->n_ids * sizeof *ids);
            if (!ids) {
                rc = li_error_set(LI_ERR_OOM, "out of memory");
                goto out;
            }
            memcpy(ids, doc->ids, (size_t)doc->n_ids * sizeof *ids);
            n = doc->n_ids;
        } else {
            if (!doc->text) {
                rc = li_error_set(LI_ERR_INVALID_ARG, "document %d has neither text nor ids", d);
                goto out;
            }
            if ((rc = tokenize_into(m, doc->text, doc->len, false, &ids, &n)) != LI_OK) {
                li_error_wrap(rc, "document %d%s%s: ", d, doc->id ? " " : "", doc->id ? doc->id : "");
                goto out;
            }
            if (n == 0) {
                free(ids);
                ids = NULL;
                rc = li_error_set(LI_ERR_INVALID_ARG, "document %d%s%s is empty", d,
                                  doc->id ? " " : "", doc->id ? doc->id : "");
                goto out;
            }
        }
        if ((rc = add_block(r, ids, n)) != LI_OK) goto out;
        ids = NULL;
    }
    // query block: the user's text (never parsed for special tokens) + the template's suffix
    int cap = 0;
    if (q->query && *q->query) {
        if ((rc = tokenize_into(m, q->query, strlen(q->query), false, &ids, &n)) != LI_OK) goto out;
        rc = append_tokens(query, n_query, &cap, ids, n);
        free(ids);
        ids = NULL;
        if (rc != LI_OK) goto out;
    }
    if (suffix && *suffix) {
        if ((rc = tokenize_into(m, suffix, strlen(suffix), true, &ids, &n)) != LI_OK) goto out;
        rc = append_tokens(query, n_query, &cap, ids, n);
        free(ids);
        ids = NULL;
        if (rc != LI_OK) goto out;
    }
    if (*n_query == 0)
        rc = li_error_set(LI_ERR_INVALID_ARG,
                          "the query is empty: without a chat template there is no token to "
                          "generate from (give a query or use chat formatting)");
out:
    free(ids);
    free(prefix);
    free(suffix);
    return rc;
}

li_status li_request_tokenize(const li_model *m, const li_request *q, li_request_tokens **out) {
    *out = NULL;
    if (!m->sched)
        return li_error_set(LI_ERR_INVALID_ARG, "the model has no request scheduler");
    if (q->prompt_ids || q->tokens)
        return li_error_set(LI_ERR_INVALID_ARG, "the request is tokenised already");
    if (q->n_docs < 0 || (q->n_docs > 0 && !q->docs))
        return li_error_set(LI_ERR_INVALID_ARG, "bad document list");
    li_request_tokens *t = calloc(1, sizeof *t);
    if (!t) return li_error_set(LI_ERR_OOM, "out of memory");
    li_status rc = build_blocks(m, q, t);
    if (rc != LI_OK) {
        li_request_tokens_free(t);
        return rc;
    }
    *out = t;
    return LI_OK;
}

li_status li_submit(li_model *m, const li_request *q, int64_t *id) {
    if (!m->sched)
        return li_error_set(LI_ERR_INVALID_ARG, m->llada ? "a diffusion model takes li_dllm_generate"
                                                         : "model was loaded for metadata only");
    li_sched *S = m->sched;
    const int V = m->llama.hp.n_vocab;
    if (q->gen.n_predict < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "n_predict must be >= 1 (got %d)", q->gen.n_predict);
    if (q->n_docs < 0 || (q->n_docs > 0 && !q->docs))
        return li_error_set(LI_ERR_INVALID_ARG, "bad document list");
    request *r = calloc(1, sizeof *r);
    if (!r) return li_error_set(LI_ERR_OOM, "out of memory");
    int32_t *query = NULL;
    int n_query = 0;
    li_status rc;
    li_request_tokens own = {0};
    const li_request_tokens *t = q->tokens ? q->tokens : &own;
    if (q->prompt_ids) {
        if (q->n_docs || q->query || q->system || q->tokens) {
            rc = li_error_set(LI_ERR_INVALID_ARG, "give one of prompt_ids, tokens, system/docs/query");
            goto fail;
        }
        if (q->n_prompt_ids < 1) {
            rc = li_error_set(LI_ERR_INVALID_ARG, "empty prompt");
            goto fail;
        }
        int cap = 0;
        if ((rc = append_tokens(&query, &n_query, &cap, q->prompt_ids, q->n_prompt_ids)) != LI_OK)
            goto fail;
    } else {
        if (!q->tokens && (rc = build_blocks(m, q, &own)) != LI_OK) goto fail;
        // the request's copy of the tokens (q->tokens may serve several requests: n > 1)
        if (t->n_blocks && !(r->blocks = calloc((size_t)t->n_blocks, sizeof *r->blocks))) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
            goto fail;
        }
        for (int b = 0; b < t->n_blocks; b++, r->n_blocks++) {
            int cap = 0;
            if ((rc = append_tokens(&r->blocks[b].tokens, &r->blocks[b].n, &cap,
                                    t->blocks[b].tokens, t->blocks[b].n)) != LI_OK)
                goto fail;
        }
        int cap = 0;
        if ((rc = append_tokens(&query, &n_query, &cap, t->query, t->n_query)) != LI_OK) goto fail;
    }
    // block offsets Δ (contiguous: page padding never shifts positions), ids in range, context
    int64_t delta = 0;
    for (int b = 0; b < r->n_blocks; b++) {
        r->blocks[b].delta = delta;
        delta += r->blocks[b].n;
    }
    int64_t total = delta + n_query;
    r->res.n_doc_tokens = (int)delta;
    for (int b = 0; b <= r->n_blocks; b++) {
        const int32_t *t = b < r->n_blocks ? r->blocks[b].tokens : query;
        int n = b < r->n_blocks ? r->blocks[b].n : n_query;
        for (int i = 0; i < n; i++)
            if (t[i] < 0 || t[i] >= V) {
                rc = li_error_set(LI_ERR_INVALID_ARG, "token id %d out of range [0, %d)", t[i], V);
                goto fail;
            }
    }
    if (total + q->gen.n_predict > m->n_ctx) {
        rc = li_error_set(LI_ERR_LIMIT,
                          "request of %lld prompt tokens + %d to generate exceeds the context "
                          "of %d tokens",
                          (long long)total, q->gen.n_predict, m->n_ctx);
        goto fail;
    }
    r->n_total_prompt = (int)total;
    if (q->repair.mode != LI_REPAIR_NONE) {
        char name[32];
        li_repair_format(&q->repair, name, sizeof name);
        if (m->cache_mode != LI_CACHE_LAZY && m->cache_mode != LI_CACHE_COPY) {
            rc = li_error_set(LI_ERR_INVALID_ARG, "repair %s needs the cache mode lazy or copy "
                              "(not %s)", name, li_cache_mode_name(m->cache_mode));
            goto fail;
        }
        if ((q->repair.mode == LI_REPAIR_HEAD && q->repair.head_k < 1) ||
            (q->repair.mode == LI_REPAIR_BLEND && !(q->repair.blend_r > 0 && q->repair.blend_r <= 1)) ||
            (unsigned)q->repair.mode > LI_REPAIR_BLEND) {
            rc = li_error_set(LI_ERR_INVALID_ARG, "repair %s: K must be >= 1 and R in (0, 1]", name);
            goto fail;
        }
    }
    r->repair = q->repair;
    if (m->cache_mode == LI_CACHE_PREFIX || m->cache_mode == LI_CACHE_FULL) {
        // the whole prompt is the request's own sequence; blocks remember where they start
        int cap = 0;
        r->first_key = malloc((size_t)total * sizeof *r->first_key);
        if (!r->first_key) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
            goto fail;
        }
        for (int b = 0; b < r->n_blocks; b++) {
            for (int i = 0; i < r->blocks[b].n; i++)
                r->first_key[r->n_prompt + i] =
                    m->cache_mode == LI_CACHE_PREFIX ? (int32_t)r->blocks[b].delta : 0;
            if ((rc = append_tokens(&r->prompt, &r->n_prompt, &cap, r->blocks[b].tokens,
                                    r->blocks[b].n)) != LI_OK)
                goto fail;
        }
        for (int i = 0; i < n_query; i++) r->first_key[r->n_prompt + i] = 0;
        if ((rc = append_tokens(&r->prompt, &r->n_prompt, &cap, query, n_query)) != LI_OK) goto fail;
        free(query);
        query = NULL;
        r->n_block_tokens = 0;
        // the blocks live on only as spans of the prompt
        for (int b = 0; b < r->n_blocks; b++) free(r->blocks[b].tokens);
        free(r->blocks);
        r->blocks = NULL;
        r->n_blocks = 0;
    } else {
        r->prompt = query;
        r->n_prompt = n_query;
        query = NULL;
        r->n_block_tokens = (int)(total - n_query);
    }
    r->gen = q->gen;
    r->first_logits = q->first_logits;
    li_sampler_init(&r->sampler, &q->gen.sampling);
    r->id = S->next_id++;
    r->t_submit = li_time_ms();
    r->state = RQ_WAITING;
    r->res.n_prompt = (int)total;
    // append to the list (submit order)
    request **pp = &S->reqs;
    while (*pp) pp = &(*pp)->next;
    *pp = r;
    *id = r->id;
    tokens_clear(&own);  // the request holds its own copies
    return LI_OK;
fail:
    free(query);
    tokens_clear(&own);
    request_free_memory(r);
    return rc;
}

// ---- admission -------------------------------------------------------------------------------

static li_status new_job(li_sched *S, block *bl, li_doc_copy *copy, li_doc_copy *source,
                         int64_t rotate_by, int64_t pos0, const int64_t *pages, int n_pages) {
    work *w = calloc(1, sizeof *w);
    if (w) {
        w->tokens = malloc((size_t)bl->n * sizeof *w->tokens);
        w->table = malloc((size_t)n_pages * sizeof *w->table);
    }
    if (!w || !w->tokens || !w->table) {
        if (w) {
            free(w->tokens);
            free(w->table);
        }
        free(w);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    memcpy(w->tokens, bl->tokens, (size_t)bl->n * sizeof *w->tokens);
    w->n = bl->n;
    w->copy = copy;
    w->blk = copy ? NULL : bl;
    w->source = source;
    w->rotate_by = rotate_by;
    w->pos0 = pos0;
    w->pages = pages;
    work **pp = &S->jobs;
    while (*pp) pp = &(*pp)->next;
    *pp = w;
    bl->job = w;
    return LI_OK;
}

static void drop_job(li_model *m, work *w) {
    li_sched *S = m->sched;
    if (w->promo) li_kv_tiers_cancel(m->tiers, w->promo);
    work **pp = &S->jobs;
    while (*pp != w) pp = &(*pp)->next;
    *pp = w->next;
    free(w->tokens);
    free(w->table);
    free(w);
}

// Gives back what blocks [0, n) and the own pages hold. Jobs this request created and nobody
// else can be waiting for (not started, copy not shared) are dropped with it.
static void release_request(li_model *m, request *r, int n_blocks) {
    for (int b = 0; b < n_blocks; b++) {
        block *bl = &r->blocks[b];
        if (bl->job && (!bl->copy || (bl->copy->pins == 1 && !bl->copy->ready))) {
            if (bl->job->source) li_doc_cache_release(m->docs, bl->job->source);
            drop_job(m, bl->job);
        }
        bl->job = NULL;
        if (bl->copy) li_doc_cache_release(m->docs, bl->copy);
        bl->copy = NULL;
        for (int i = 0; i < bl->n_priv; i++) li_kv_page_unref(&m->kv, bl->priv[i]);
        free(bl->priv);
        bl->priv = NULL;
        bl->n_priv = 0;
        bl->ready = false;
        for (int i = 0; i < bl->n_ovl; i++)
            if (bl->ovl[i] >= 0) li_kv_page_unref(&m->kv, bl->ovl[i]);
        free(bl->ovl);
        bl->ovl = NULL;
        bl->n_ovl = 0;
    }
    li_kv_seq_clear(&m->kv, &r->own);
    r->rep.n = 0;
    li_repair_pass_free(&r->pass);
    r->repair_begun = r->repair_planned = false;
}

// Copy mode: fills a new copy from a ready copy at another offset (page copy + re-rotation of K
// by the offset difference), then drops the job and the pin on the source.
static void run_copy_job(li_model *m, work *w) {
    li_sched *S = m->sched;
    const int P = m->kv.storage.page_size;
    for (int k = 0; k < w->copy->n_pages; k++) {
        int cnt = w->n - k * P < P ? w->n - k * P : P;
        m->be->ops->kv_copy_rotate(m->be, &m->kv.storage, w->source->pages[k], w->pages[k], cnt,
                                   w->rotate_by, &m->llama.rope);
    }
    li_doc_cache_mark_ready(m->docs, w->copy);
    if (m->tiers && li_kv_tiers_demote(m->tiers, w->copy) != LI_OK)
        LI_WARN("KV tiers: demoting a copy failed: %s", li_error_msg());
    li_doc_cache_release(m->docs, w->source);
    for (request *r = S->reqs; r; r = r->next)
        for (int b = 0; b < r->n_blocks; b++)
            if (r->blocks[b].job == w) r->blocks[b].job = NULL;
    drop_job(m, w);
}

// A new copy missed in the pool: an L1 hit fills it now (ready at once); a promotion from disk
// or Redis becomes a work item that waits for the load; otherwise a prefill work item.
static li_status miss_from_tiers(li_model *m, block *bl, li_doc_copy *copy, bool lazy) {
    li_kv_promotion *promo = NULL;
    li_kv_tiers_result tr = LI_TIERS_ABSENT;
    if (m->tiers) LI_TRY(li_kv_tiers_promote(m->tiers, copy, &promo, &tr));
    if (tr == LI_TIERS_LOADED) {
        li_doc_cache_mark_ready(m->docs, copy);
        return LI_OK;
    }
    li_status rc = new_job(m->sched, bl, copy, NULL, 0, lazy ? 0 : bl->delta, copy->pages,
                           copy->n_pages);
    if (rc != LI_OK) li_kv_tiers_cancel(m->tiers, promo);
    else bl->job->promo = promo;
    return rc;
}

// Pending promotions: a loaded copy is ready; one the tiers did not have is prefilled.
static li_status poll_promotions(li_model *m) {
    li_sched *S = m->sched;
    for (work *w = S->jobs, *next; w; w = next) {
        next = w->next;
        if (!w->promo) continue;
        li_kv_tiers_result tr;
        LI_TRY(li_kv_tiers_poll(m->tiers, &w->promo, &tr));
        if (tr != LI_TIERS_LOADED) continue;  // pending, or absent: w->promo is NULL, prefill
        li_doc_cache_mark_ready(m->docs, w->copy);
        for (request *r = S->reqs; r; r = r->next)
            for (int b = 0; b < r->n_blocks; b++)
                if (r->blocks[b].job == w) {
                    r->blocks[b].job = NULL;
                    r->res.doc_misses--;  // the request that missed: served after all
                    r->res.doc_hits++;
                    r->res.n_cached_tokens += r->blocks[b].n;
                }
        drop_job(m, w);
    }
    return LI_OK;
}

// The overlay pages a repaired block needs (repair.h), from the pool (one reference each).
static li_status reserve_overlay(li_model *m, const request *r, block *bl) {
    int np = li_repair_pages(&r->repair, bl->n, bl->delta, m->kv.storage.page_size);
    if (np == 0) return LI_OK;
    LI_TRY(li_engine_make_room(m, np));
    if (!(bl->ovl = malloc((size_t)np * sizeof *bl->ovl)))
        return li_error_set(LI_ERR_OOM, "out of memory");
    for (; bl->n_ovl < np; bl->n_ovl++) {
        li_status rc = li_kv_page_alloc(&m->kv, &bl->ovl[bl->n_ovl]);
        LI_ASSERT(rc == LI_OK);  // make_room made room
    }
    return LI_OK;
}

// The request's blocks as the repair sees them (repair.h); rb has n_blocks entries.
static void repair_blocks(const li_model *m, const request *r, li_repair_block *rb) {
    for (int b = 0; b < r->n_blocks; b++) {
        const block *bl = &r->blocks[b];
        rb[b] = (li_repair_block){.tokens = bl->tokens, .n = bl->n, .delta = bl->delta,
                                  .shared = bl->copy->pages,
                                  .rotate = m->cache_mode == LI_CACHE_LAZY ? bl->delta : 0,
                                  .ovl = bl->ovl, .n_ovl = bl->n_ovl};
    }
}

// The repair of a request whose blocks are ready: fill its overlay, then (head, or blend once
// its selection pass ran) choose the rows to recompute.
static li_status plan_repair(li_model *m, request *r) {
    li_repair_block *rb = calloc((size_t)r->n_blocks + 1, sizeof *rb);
    if (!rb) return li_error_set(LI_ERR_OOM, "out of memory");
    repair_blocks(m, r, rb);
    li_status rc = LI_OK;
    if (!r->repair_begun) {
        rc = li_repair_begin(m, &r->repair, rb, r->n_blocks, &r->pass, &r->rep);
        r->repair_begun = rc == LI_OK;
    }
    if (rc == LI_OK && r->pass.n_done == r->pass.rows.n) {
        rc = li_repair_select(m, &r->repair, rb, r->n_blocks, &r->pass, &r->rep);
        if (rc == LI_OK) {
            r->repair_planned = true;
            r->res.n_repair_tokens = r->rep.n;
            // recomputed in context: not served from the cache
            r->res.n_cached_tokens =
                r->res.n_cached_tokens > r->rep.n ? r->res.n_cached_tokens - r->rep.n : 0;
        }
    }
    free(rb);
    return rc;
}

// Pins or creates the blocks' KV, reserves the request's own pages. LI_ERR_KV_FULL: not now.
static li_status try_admit(li_model *m, request *r) {
    li_sched *S = m->sched;
    const int P = m->kv.storage.page_size;
    li_status rc = LI_OK;
    int b = 0;
    int hits = 0, misses = 0, cached = 0;
    for (; b < r->n_blocks && rc == LI_OK; b++) {
        block *bl = &r->blocks[b];
        bl->job = NULL;
        if (m->cache_mode == LI_CACHE_LAZY || m->cache_mode == LI_CACHE_COPY) {
            bool lazy = m->cache_mode == LI_CACHE_LAZY;
            li_doc_key key;
            li_doc_key_compute(&key, m->model_id, m->tokenizer_id, bl->tokens, bl->n);
            li_doc_copy *copy = NULL, *src = NULL;
            li_doc_lookup_result res;
            rc = li_doc_cache_acquire(m->docs, &key, bl->n, lazy, bl->delta, &copy, &src, &res);
            if (rc != LI_OK) break;
            bl->copy = copy;
            if ((rc = reserve_overlay(m, r, bl)) != LI_OK) break;
            if (res == LI_DOC_MISS) {
                rc = miss_from_tiers(m, bl, copy, lazy);
                // a copy promoted from the host tier now is a hit for the request (not
                // recomputed); one loading from disk / Redis counts when it lands (poll)
                if (rc == LI_OK && copy->ready) {
                    hits++;
                    cached += bl->n;
                } else {
                    misses++;
                }
            } else {
                hits++;
                cached += bl->n;
                if (res == LI_DOC_HIT_OTHER_DELTA) {
                    rc = new_job(S, bl, copy, src, bl->delta - src->delta, bl->delta, copy->pages,
                                 copy->n_pages);
                    // copy now, so sources are not held while later blocks need room
                    if (rc == LI_OK && src->ready) run_copy_job(m, bl->job);
                }
            }
        } else if (m->cache_mode == LI_CACHE_NONE) {
            int np = n_pages_for(m, bl->n);
            if ((rc = li_engine_make_room(m, np)) != LI_OK) break;
            bl->priv = malloc((size_t)np * sizeof *bl->priv);
            if (!bl->priv) {
                rc = li_error_set(LI_ERR_OOM, "out of memory");
                break;
            }
            for (int i = 0; i < np; i++) {
                li_status arc = li_kv_page_alloc(&m->kv, &bl->priv[i]);
                LI_ASSERT(arc == LI_OK);  // make_room made room
                bl->n_priv++;
            }
            misses++;
            rc = new_job(S, bl, NULL, NULL, 0, bl->delta, bl->priv, np);
        }
    }
    if (rc == LI_OK && m->cache_mode == LI_CACHE_PREFIX) {
        int n_full = r->n_prompt / P;
        if (!r->chain && (r->chain = malloc(((size_t)n_full + 1) * sizeof *r->chain)))
            li_prefix_chain(m->model_id, r->prompt, r->n_prompt, P, r->chain);
        int64_t *pages = malloc(((size_t)n_full + 1) * sizeof *pages);
        if (!r->chain || !pages) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
        } else {
            int k = li_prefix_cache_match(m->prefix, r->chain, n_full, pages);
            if (k * P == r->n_prompt) li_kv_page_unref(&m->kv, pages[--k]);  // keep one to compute
            for (int i = 0; i < k && rc == LI_OK; i++) rc = li_kv_seq_push_page(&r->own, pages[i], P, 0);
            r->n_done_prompt = r->own.n_tokens;
            cached = r->n_done_prompt;
        }
        free(pages);
    }
    if (rc == LI_OK) {
        // own pages for the rest of the prompt and every token that may be generated
        int n_more = r->n_prompt - r->n_done_prompt + r->gen.n_predict;
        int used = r->own.n_pages ? li_page_count(r->own.pages[r->own.n_pages - 1]) : P;
        int need = n_more > P - used ? (n_more - (P - used) + P - 1) / P : 0;
        rc = li_engine_make_room(m, need);
        if (rc == LI_OK) rc = li_kv_seq_reserve(&m->kv, &r->own, n_more);
    }
    if (rc != LI_OK) {
        release_request(m, r, b < r->n_blocks ? b + 1 : r->n_blocks);
        r->n_done_prompt = 0;
        return rc;
    }
    r->res.doc_hits = hits;
    r->res.doc_misses = misses;
    r->res.n_cached_tokens = cached;
    return LI_OK;
}

// ---- the step --------------------------------------------------------------------------------

static bool blocks_ready(const request *r) {
    for (int b = 0; b < r->n_blocks; b++) {
        const block *bl = &r->blocks[b];
        if (bl->copy ? !bl->copy->ready : (bl->priv && !bl->ready)) return false;
    }
    return true;
}

static bool repair_pending(const request *r) {
    return r->repair.mode != LI_REPAIR_NONE && !r->repair_planned;
}

// The request's attention page table: its blocks' pages, then its own pages.
static li_status build_table(li_model *m, request *r, li_kv_seq *view) {
    const int P = m->kv.storage.page_size;
    int n = r->own.n_pages;
    for (int b = 0; b < r->n_blocks; b++) n += n_pages_for(m, r->blocks[b].n);
    if (n > r->cap_table) {
        uint64_t *t = realloc(r->table, (size_t)n * sizeof *t);
        if (!t) return li_error_set(LI_ERR_OOM, "out of memory");
        r->table = t;
        r->cap_table = n;
    }
    int w = 0;
    for (int b = 0; b < r->n_blocks; b++) {
        const block *bl = &r->blocks[b];
        // lazy: K stored at local positions, rotated by Δ in attention; copy/none: stored at Δ;
        // a repair's overlay pages replace the copy's: K at true positions
        li_repair_block rb = {.n = bl->n, .shared = bl->copy ? bl->copy->pages : bl->priv,
                              .rotate = m->cache_mode == LI_CACHE_LAZY ? bl->delta : 0,
                              .ovl = bl->ovl, .n_ovl = bl->n_ovl};
        w += li_repair_table(&rb, P, r->table + w);
    }
    memcpy(r->table + w, r->own.pages, (size_t)r->own.n_pages * sizeof *r->table);
    view->pages = r->table;
    view->n_pages = n;
    return LI_OK;
}

static void finish(li_model *m, request *r) {
    release_request(m, r, r->n_blocks);
    r->state = RQ_DONE;
    r->res.n_generated = r->n_generated;
    r->res.total_ms = li_time_ms() - r->t_submit;
}

static void fail_request(li_model *m, request *r, li_status rc) {
    r->res.status = rc;
    snprintf(r->res.error, sizeof r->res.error, "%s", li_last_error());
    finish(m, r);
}

// A token sampled for r: report it, decide whether r goes on.
static void take_token(li_model *m, request *r, int32_t tok, const float *logits) {
    if (r->n_generated == 0 && r->res.ttft_ms == 0) {
        r->res.ttft_ms = li_time_ms() - r->t_submit;
        if (r->first_logits &&  // logits are in backend memory; a failure shows at the sync
            li_be_download(m->be, r->first_logits, logits,
                           (size_t)m->llama.hp.n_vocab * sizeof(float)) != LI_OK)
            LI_WARN("copying the first logits of request %lld failed: %s", (long long)r->id,
                    li_last_error());
    }
    if (r->gen.stop_at_eos && li_tokenizer_is_eog(m->tok, tok)) {
        r->finished_tokens = true;
        return;
    }
    r->n_generated++;
    r->last_token = tok;
    r->state = RQ_DECODE;
    if (r->gen.on_token && !r->gen.on_token(r->gen.user, tok)) r->finished_tokens = true;
    if (r->n_generated >= r->gen.n_predict) r->finished_tokens = true;
}

static int count_unfinished(const li_sched *S) {
    int n = 0;
    for (const request *r = S->reqs; r; r = r->next) n += r->state != RQ_DONE;
    return n;
}

li_status li_step(li_model *m, int *n_unfinished) {
    li_sched *S = m->sched;
    if (!S) return li_error_set(LI_ERR_INVALID_ARG, "this model has no request scheduler");
    const int P = m->kv.storage.page_size, V = m->llama.hp.n_vocab;

    // 1. admission, in submit order (a request that does not fit waits, and so do later ones)
    int running = 0;
    for (request *r = S->reqs; r; r = r->next) running += r->state == RQ_PREFILL || r->state == RQ_DECODE;
    for (request *r = S->reqs; r && running < m->max_running; r = r->next) {
        if (r->state != RQ_WAITING) continue;
        li_status rc = try_admit(m, r);
        if (rc == LI_OK) {
            r->state = RQ_PREFILL;
            r->t_admit = li_time_ms();
            r->res.queue_ms = r->t_admit - r->t_submit;
            running++;
            continue;
        }
        if (rc == LI_ERR_KV_FULL && (running > 0 || S->jobs)) break;  // wait for room
        if (rc == LI_ERR_KV_FULL)
            li_error_wrap(rc, "request %lld does not fit in the KV budget: ", (long long)r->id);
        fail_request(m, r, rc);
    }

    // 2. promotions from disk / Redis that finished; in copy mode, page copies with re-rotation
    // whose source became ready
    if (m->tiers) LI_TRY(poll_promotions(m));
    for (work *w = S->jobs, *next; w; w = next) {
        next = w->next;
        if (w->source && w->source->ready) run_copy_job(m, w);
    }

    // 2b. repairs of requests whose blocks became ready (blend's selection pass joins the batch)
    for (request *r = S->reqs; r; r = r->next) {
        if (r->state != RQ_PREFILL || !repair_pending(r) || r->repair_begun || !blocks_ready(r))
            continue;
        li_status prc = plan_repair(m, r);
        if (prc == LI_ERR_OOM) fail_request(m, r, prc);
        else if (prc != LI_OK) return prc;
    }

    // 3. the batch: decode rows, then document prefill chunks, then query prefill chunks
    int rows = 0, n_seq = 0, n_log = 0;
    int chunk_of_job[64];
    work *job_in_batch[64];
    int n_jobs_in = 0;
    request *pre_in_batch[256], *pass_in_batch[256];
    int pre_chunk[256], n_pre = 0, pass_chunk[256], n_pass = 0, tail0;
    li_status rc = LI_OK;
    for (request *r = S->reqs; r && rows < m->n_batch; r = r->next) {
        if (r->state != RQ_DECODE || r->finished_tokens) continue;
        if ((rc = li_kv_seq_append(&m->kv, &r->own, 1, S->slot + rows)) != LI_OK) return rc;
        S->tok[rows] = r->last_token;
        S->pos[rows] = r->n_block_tokens + r->own.n_tokens - 1;
        S->nvis[rows] = r->n_block_tokens + r->own.n_tokens;
        S->first[rows] = 0;
        li_batch_seq *sq = &S->seqs[n_seq++];
        sq->t0 = rows;
        sq->n = 1;
        if ((rc = build_table(m, r, &sq->kv)) != LI_OK) return rc;
        S->rows[n_log] = rows;
        S->row_req[n_log++] = r;
        rows++;
    }
    for (work *w = S->jobs; w && rows < m->n_batch && n_jobs_in < 64; w = w->next) {
        if (w->source || w->promo) continue;
        int chunk = w->n - w->done < m->n_batch - rows ? w->n - w->done : m->n_batch - rows;
        for (int i = 0; i < chunk; i++) {
            int idx = w->done + i;
            S->tok[rows + i] = w->tokens[idx];
            S->pos[rows + i] = (int32_t)(w->pos0 + idx);
            S->slot[rows + i] = w->pages[idx / P] * P + idx % P;
            S->nvis[rows + i] = idx + 1;  // causal within the block only
            S->first[rows + i] = 0;
        }
        int upto = w->done + chunk, np = n_pages_for(m, upto);
        for (int k = 0; k < np; k++)
            w->table[k] = li_page_word(w->pages[k], upto - k * P < P ? upto - k * P : P, 0);
        li_batch_seq *sq = &S->seqs[n_seq++];
        sq->t0 = rows;
        sq->n = chunk;
        sq->kv.pages = w->table;
        sq->kv.n_pages = np;
        chunk_of_job[n_jobs_in] = chunk;
        job_in_batch[n_jobs_in++] = w;
        rows += chunk;
    }
    for (request *r = S->reqs; r && rows < m->n_batch && n_pre < 256; r = r->next) {
        if (r->state != RQ_PREFILL || !blocks_ready(r) || repair_pending(r)) continue;
        // the repair's rows (at their true positions, into the overlay), then the prompt's
        int left = r->rep.n + r->n_prompt - r->n_done_prompt;
        int chunk = left < m->n_batch - rows ? left : m->n_batch - rows;
        int n_rep = r->rep.n - r->n_done_prompt;
        n_rep = n_rep < 0 ? 0 : n_rep < chunk ? n_rep : chunk;
        if ((rc = li_kv_seq_append(&m->kv, &r->own, chunk - n_rep, S->slot + rows + n_rep)) != LI_OK)
            return rc;
        for (int i = 0; i < n_rep; i++) {
            int idx = r->n_done_prompt + i;
            S->tok[rows + i] = r->rep.tok[idx];
            S->pos[rows + i] = r->rep.pos[idx];
            S->slot[rows + i] = r->rep.slot[idx];
            S->nvis[rows + i] = r->rep.pos[idx] + 1;  // every key before it: the table is in
            S->first[rows + i] = 0;                    // position order
        }
        for (int i = n_rep; i < chunk; i++) {
            int idx = r->n_done_prompt + i - r->rep.n;
            S->tok[rows + i] = r->prompt[idx];
            S->pos[rows + i] = r->n_block_tokens + idx;
            S->nvis[rows + i] = r->n_block_tokens + idx + 1;
            S->first[rows + i] = r->first_key ? r->first_key[idx] : 0;
        }
        li_batch_seq *sq = &S->seqs[n_seq++];
        sq->t0 = rows;
        sq->n = chunk;
        if ((rc = build_table(m, r, &sq->kv)) != LI_OK) return rc;
        if (chunk == left) {
            S->rows[n_log] = rows + chunk - 1;
            S->row_req[n_log++] = r;
        }
        pre_chunk[n_pre] = chunk;
        pre_in_batch[n_pre++] = r;
        rows += chunk;
    }

    // the selection passes of blend repairs last: the batch's tail, which stops at the check
    // layer's K/V (li_batch.n_tail; at check layer 2 a pass costs ~2.1/L of a prefill of its
    // documents: layers 0 and 1 whole, layer 2's K and V projections)
    tail0 = rows;
    for (request *r = S->reqs; r && rows < m->n_batch && n_pass < 256; r = r->next) {
        if (r->state != RQ_PREFILL || !repair_pending(r) || !r->repair_begun) continue;
        const li_repair_pass *p = &r->pass;
        int chunk = p->rows.n - p->n_done < m->n_batch - rows ? p->rows.n - p->n_done
                                                               : m->n_batch - rows;
        for (int i = 0; i < chunk; i++) {
            int idx = p->n_done + i;
            S->tok[rows + i] = p->rows.tok[idx];
            S->pos[rows + i] = p->rows.pos[idx];
            S->slot[rows + i] = p->rows.slot[idx];
            S->nvis[rows + i] = p->rows.pos[idx] + 1;  // every key before it, as repair rows
            S->first[rows + i] = 0;
        }
        li_batch_seq *sq = &S->seqs[n_seq++];
        sq->t0 = rows;
        sq->n = chunk;
        if ((rc = build_table(m, r, &sq->kv)) != LI_OK) return rc;
        pass_chunk[n_pass] = chunk;
        pass_in_batch[n_pass++] = r;
        rows += chunk;
    }

    // 4. one forward over everything
    if (rows == 0 && S->jobs) {
        // only promotions left to wait for: give the worker the core instead of spinning
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    if (rows > 0) {
        li_batch b = {.n_tokens = rows, .tokens = S->tok, .pos = S->pos, .slot = S->slot,
                      .n_visible = S->nvis, .kv_first = S->first, .n_seqs = n_seq,
                      .seqs = S->seqs, .n_logits = n_log, .logit_rows = S->rows,
                      .n_tail = rows - tail0,
                      .tail_layer = n_pass ? pass_in_batch[0]->pass.layer : 0};
        if ((rc = li_llama_forward(&m->llama, &m->scratch, &m->kv.storage, &b, m->logits)) != LI_OK)
            return rc;
        // a device backend records op failures: catch them before any token is sampled
        if ((rc = li_be_sync(m->be)) != LI_OK) return rc;
    }

    // 5. bookkeeping
    for (int j = 0; j < n_jobs_in; j++) {
        work *w = job_in_batch[j];
        w->done += chunk_of_job[j];
        if (w->done < w->n) continue;
        if (w->copy) {
            li_doc_cache_mark_ready(m->docs, w->copy);
            // write-through: the pages' D2H is queued behind the forward that wrote them
            if (m->tiers && (rc = li_kv_tiers_demote(m->tiers, w->copy)) != LI_OK) return rc;
        } else {
            w->blk->ready = true;
        }
        for (request *r = S->reqs; r; r = r->next)
            for (int bb = 0; bb < r->n_blocks; bb++)
                if (r->blocks[bb].job == w) r->blocks[bb].job = NULL;
        drop_job(m, w);
    }
    for (int j = 0; j < n_pre; j++) {
        request *r = pre_in_batch[j];
        r->n_done_prompt += pre_chunk[j];
        if (r->n_done_prompt == r->rep.n + r->n_prompt && m->prefix) {
            // offer every full prompt page to the prefix cache (vLLM caches full blocks)
            // tail-first, so the prompt's first pages are the most recently used (vLLM order)
            for (int k = r->n_prompt / P - 1; k >= 0 && rc == LI_OK; k--)
                rc = li_prefix_cache_insert(m->prefix, &r->chain[k], li_page_id(r->own.pages[k]));
            if (rc != LI_OK) return rc;
        }
    }
    for (int j = 0; j < n_pass; j++) {
        request *r = pass_in_batch[j];
        r->pass.n_done += pass_chunk[j];
        if (r->pass.n_done < r->pass.rows.n) continue;
        li_status prc = plan_repair(m, r);
        if (prc == LI_ERR_OOM) fail_request(m, r, prc);
        else if (prc != LI_OK) return prc;
    }
    for (int i = 0; i < n_log; i++) {
        request *r = S->row_req[i];
        float *lg = m->logits + (size_t)i * V;
        if (r->gen.on_logits) {  // the caller's processing, on a host copy on a device backend
            bool dev = li_be_is_device(m->be);
            float *h = dev ? S->host_logits : lg;
            if (dev && (rc = li_be_download(m->be, h, lg, (size_t)V * sizeof *h)) != LI_OK) return rc;
            r->gen.on_logits(r->gen.user, h, V);
            if (dev && (rc = li_be_upload(m->be, lg, h, (size_t)V * sizeof *h)) != LI_OK) return rc;
        }
        take_token(m, r, li_sampler_sample(&r->sampler, m->be, lg, V), lg);
    }
    // and the sampling's, and the tiers' transfers queued in this step
    if ((rc = li_be_sync(m->be)) != LI_OK) return rc;
    if (m->tiers) li_kv_tiers_step_done(m->tiers);
    for (request *r = S->reqs; r; r = r->next)
        if (r->state != RQ_DONE && r->finished_tokens) finish(m, r);
    if (n_unfinished) *n_unfinished = count_unfinished(S);
    return LI_OK;
}

int li_sched_n_unfinished(const li_model *m) { return m->sched ? count_unfinished(m->sched) : 0; }

li_status li_run(li_model *m) {
    int left = 1;
    while (left > 0) LI_TRY(li_step(m, &left));
    return LI_OK;
}

li_status li_cancel(li_model *m, int64_t id) {
    li_sched *S = m->sched;
    if (!S) return li_error_set(LI_ERR_INVALID_ARG, "this model has no request scheduler");
    for (request *r = S->reqs; r; r = r->next) {
        if (r->id != id) continue;
        if (r->state != RQ_DONE) {
            r->res.cancelled = true;
            finish(m, r);
        }
        return LI_OK;
    }
    return li_error_set(LI_ERR_INVALID_ARG, "no request %lld", (long long)id);
}

li_status li_result(li_model *m, int64_t id, li_request_result *out) {
    li_sched *S = m->sched;
    if (!S) return li_error_set(LI_ERR_INVALID_ARG, "this model has no request scheduler");
    for (request **pp = &S->reqs; *pp; pp = &(*pp)->next) {
        request *r = *pp;
        if (r->id != id) continue;
        if (r->state != RQ_DONE)
            return li_error_set(LI_ERR_INVALID_ARG, "request %lld has not finished", (long long)id);
        *out = r->res;
        *pp = r->next;
        request_free_memory(r);
        return LI_OK;
    }
    return li_error_set(LI_ERR_INVALID_ARG, "no request %lld", (long long)id);
}

void li_get_cache_stats(const li_model *m, li_cache_stats *o) {
    memset(o, 0, sizeof *o);
    if (m->docs) {
        li_doc_cache_stats d;
        li_doc_cache_get_stats(m->docs, &d);
        *o = (li_cache_stats){.doc_lookups = d.lookups, .doc_hits = d.hits,
                              .doc_misses = d.misses, .doc_hit_tokens = d.hit_tokens,
                              .doc_miss_tokens = d.miss_tokens, .copies_made = d.copies_made,
                              .evictions = d.evictions, .resident_docs = d.resident_docs,
                              .resident_copies = d.resident_copies,
                              .resident_bytes = d.resident_bytes,
                              .copy_baseline_bytes = d.copy_baseline_bytes};
    }
    if (m->prefix) {
        li_prefix_cache_stats p;
        li_prefix_cache_get_stats(m->prefix, &p);
        o->prefix_lookup_tokens = p.lookup_tokens;
        o->prefix_hit_tokens = p.hit_tokens;
        o->evictions = p.evictions;
        o->resident_bytes = p.resident_pages * (int64_t)m->kv.page_bytes;
    }
    if (m->tiers) li_kv_tiers_get_stats(m->tiers, o->tiers);
    o->kv_pages_total = li_kv_pool_n_pages(&m->kv);
    o->kv_pages_free = li_kv_pool_n_free(&m->kv);
    o->kv_page_bytes = (int64_t)m->kv.page_bytes;
}

// ---- lifetime --------------------------------------------------------------------------------

li_status li_sched_init_tiers(li_model *m, const li_model_params *p, double cost_per_token,
                              double cost_per_pair) {
    li_kv_tiers_config tc = {.host_bytes = p->host_cache_bytes, .disk_dir = p->disk_cache_dir,
                             .disk_bytes = p->disk_budget_bytes, .remote_url = p->kv_remote,
                             .remote_password_file = p->kv_remote_password_file,
                             .cost_per_token = cost_per_token, .cost_per_pair = cost_per_pair};
    if (tc.host_bytes <= 0 && !tc.disk_dir && !tc.remote_url) return LI_OK;
    if (!m->docs)
        return li_error_set(LI_ERR_INVALID_ARG, "--host-cache / --disk-cache / --kv-remote keep "
                            "documents: they need --cache lazy or copy (not %s)",
                            li_cache_mode_name(m->cache_mode));
    // the tiers evict like the pool (--evict): GDSF's cost there is the document's tokens
    LI_TRY(li_tier_policy_parse(p->doc_evict ? p->doc_evict : "lru", &tc.policy));
    return li_kv_tiers_init(&m->tiers, &tc, &m->kv, m->be);
}

void li_cache_tiers_wait(li_model *m) {
    if (m && m->tiers) li_kv_tiers_wait(m->tiers);
}

void li_cache_tier_stats_get(li_model *m, li_cache_tier_stats out[3]) {
    memset(out, 0, 3 * sizeof *out);
    if (m && m->tiers) li_kv_tiers_get_stats(m->tiers, out);
}

li_status li_sched_init(li_model *m) {
    li_sched *S = calloc(1, sizeof *S);
    if (!S) return li_error_set(LI_ERR_OOM, "out of memory");
    m->sched = S;
    size_t n = (size_t)m->n_batch, V = (size_t)m->llama.hp.n_vocab;
    li_part parts[] = {
        {(void **)&S->tok, n * sizeof *S->tok},     {(void **)&S->pos, n * sizeof *S->pos},
        {(void **)&S->nvis, n * sizeof *S->nvis},   {(void **)&S->first, n * sizeof *S->first},
        {(void **)&S->rows, n * sizeof *S->rows},   {(void **)&S->slot, n * sizeof *S->slot},
        {(void **)&S->seqs, n * sizeof *S->seqs},   {(void **)&S->row_req, n * sizeof *S->row_req},
        {(void **)&S->host_logits, V * sizeof *S->host_logits},
    };
    S->arrays = li_alloc_parts(parts, sizeof parts / sizeof parts[0], "the scheduler");
    if (!S->arrays) return li_error_set(LI_ERR_OOM, "out of memory for the scheduler");
    if (m->cache_mode == LI_CACHE_LAZY || m->cache_mode == LI_CACHE_COPY)
        LI_TRY(li_doc_cache_init(&m->docs, &m->kv, &li_evict_lru, 0));
    if (m->cache_mode == LI_CACHE_PREFIX) LI_TRY(li_prefix_cache_init(&m->prefix, &m->kv, 0));
    return LI_OK;
}

void li_sched_free(li_model *m) {
    li_sched *S = m->sched;
    if (!S) return;
    while (S->reqs) {
        request *r = S->reqs;
        S->reqs = r->next;
        if (r->state != RQ_DONE) release_request(m, r, r->n_blocks);
        request_free_memory(r);
    }
    while (S->jobs) drop_job(m, S->jobs);
    li_kv_tiers_free(m->tiers);  // after the jobs: their promotions are cancelled
    m->tiers = NULL;
    li_doc_cache_free(m->docs);
    li_prefix_cache_free(m->prefix);
    m->docs = NULL;
    m->prefix = NULL;
    li_free(S->arrays);
    free(S);
    m->sched = NULL;
}
