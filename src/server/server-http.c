// server-http.c — the HTTP side of `lazyinfer serve` (libmicrohttpd, thread per connection):
// routing, checks, request preparation and responses. A request's life here: the connection
// thread parses the body (api.c), checks key, model and limits, tokenises the prompt once
// (prepare_prompt; context overflow is a 400 here), puts an sreq on the queue (bounded: 503 beyond
// max_queue) and waits for the engine thread (server-engine.c). Streaming responses are MHD
// callback responses whose reader blocks until text arrives.
// Connections: conn.c's guard holds each phase to a deadline and sheds idle connections; what the
// headers decide (route, key, Content-Length, Content-Type) is answered before the body is read.
// A request of n choices is n engine requests (choice i seeded seed + i).
// Not here: the engine loop (server-engine.c), start and stop (server.c), TLS (bind to
// localhost, or put a proxy in front).
// Tested by tests/test_server.py (openai client, curl, load test, disconnects), test_server_api.py,
// test_server_robust.py.
#define _GNU_SOURCE  // POLLRDHUP
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server-internal.h"

// Renders a conversation through the model's chat format and tokenises it.
static li_status chat_tokens(li_server *s, const li_api_request *a, int32_t **ids, int *n) {
    li_chat_message *msgs = malloc((size_t)a->n_messages * sizeof *msgs);
    if (!msgs) return li_error_set(LI_ERR_OOM, "out of memory");
    for (int i = 0; i < a->n_messages; i++)
        msgs[i] = (li_chat_message){a->messages[i].role, a->messages[i].content};
    // the template's special tokens are tokens; the messages' text is only text, in any turn
    li_status rc = li_chat_tokenize_messages(s->m, msgs, a->n_messages, true, ids, n);
    free(msgs);
    return rc;
}

// The chat is [system?][user]: it maps onto li_request's system + documents + query.
static bool simple_chat(const li_api_request *a, const char **system, const char **user) {
    int i = 0;
    *system = NULL;
    if (a->n_messages == 2 && !strcmp(a->messages[0].role, "system")) *system = a->messages[i++].content;
    if (a->n_messages != i + 1 || strcmp(a->messages[i].role, "user")) return false;
    *user = a->messages[i].content;
    return true;
}

static uint64_t fresh_seed(li_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ (++s->id_counter << 32);
}

// ---- HTTP ------------------------------------------------------------------------------------

// Whether the client closed its side (connection thread, while a request waits).
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

// Waits (s->mu held) until pred(r) or the client is gone; returns false if it is gone.
static bool wait_for(li_server *s, sreq *r, bool (*pred)(const sreq *)) {
    while (!pred(r)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;  // check the socket 5 times a second
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->cv, &s->mu, &ts);
        if (!pred(r) && client_gone(r->fd)) {
            if (!r->cancelled) li_metrics_cancelled(&s->mx);
            r->cancelled = true;
            return false;
        }
    }
    return true;
}

static bool is_done(const sreq *r) {
    return r->state == SR_DONE;
}

// A stream's headers wait for its first token (or its end), so that a request the scheduler
// refuses at admission (larger than the KV budget) still gets a real 4xx status.
static bool first_token_or_done(const sreq *r) {
    return r->t_first > 0 || r->state == SR_DONE;
}

static bool has_output(const sreq *r) {
    if (r->state == SR_DONE) return true;
    for (int i = 0; i < r->n_ch; i++)
        if (r->ch[i].safe > r->ch[i].sent || (r->ch[i].done && !r->ch[i].sent_final)) return true;
    return false;
}

// Restarts libmicrohttpd's inactivity timeout: the writes that follow must make progress within
// --idle-timeout (a client that stops reading is closed then), however long the answer took.
static void refresh_timeout(li_server *s, struct MHD_Connection *c) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->p.idle_timeout_s);
}

static enum MHD_Result send_text(struct MHD_Connection *c, conn_ctx *x, int status,
                                 const char *ctype, char *body) {
    if (!body) {
        body = strdup("{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                      "\"param\": null, \"code\": null}}");
        status = 500;
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (x->close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == 503) MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    x->status = status;
    refresh_timeout(x->srv, c);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn_ctx *x, int status, char *body) {
    return send_text(c, x, status, "application/json", body);
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn_ctx *x, const li_api_error *e) {
    return send_json(c, x, e->status, li_api_error_json(e));
}

static enum MHD_Result send_err(struct MHD_Connection *c, conn_ctx *x, int status, const char *type,
                                const char *code, const char *msg) {
    li_api_error e;
    li_api_error_set(&e, status, type, NULL, code, "%s", msg);
    return send_error(c, x, &e);
}

static const char *finish_reason(const choice *c) {
    return c->length ? "length" : "stop";
}

// A choice's text [from, to) as an API choice (sanitized into *text, free()), with the logprobs
// of the tokens that start before `to` from index *lp_from on (advanced past them); `last` (the
// rest of a finished choice): every token left, those that added no text at its end included
// (a special token, an empty piece), so that there is one entry per generated token.
static li_api_choice api_choice(const choice *c, size_t from, size_t to, bool last, char **text,
                                int *lp_from) {
    li_api_choice a = {.index = c->index, .logprobs = c->r->api.logprobs, .first = !c->sent_first};
    *text = li_api_utf8_sanitize(c->text.data ? c->text.data + from : "", to - from, NULL);
    a.text = *text;
    int k = *lp_from;
    while (k < c->n_lp && (last || c->lp[k].offset < to)) k++;
    a.lp = c->lp + *lp_from;
    a.n_lp = k - *lp_from;
    *lp_from = k;
    return a;
}

static li_api_usage usage_of(const sreq *r) {
    li_api_usage u = {.prompt_tokens = r->n_prompt, .cached_tokens = r->n_cached};
    for (int i = 0; i < r->n_ch; i++) u.completion_tokens += r->ch[i].n_generated;
    return u;
}

static void add_event(li_buf *b, char *e) {
    if (e) li_buf_append(b, e, strlen(e));
    free(e);
}

// The next SSE bytes of a stream (s->mu held): each choice's text delta, each finished choice's
// final chunk; at the end the usage chunk if asked, and [DONE]; a failure: an error event.
static void next_events_locked(sreq *r) {
    li_buf b = {0};
    for (int i = 0; i < r->n_ch && !r->failed; i++) {
        choice *c = &r->ch[i];
        bool last = c->done && c->safe == c->text.len;
        if (c->safe > c->sent || (last && c->lp_sent < c->n_lp)) {
            char *t;
            li_api_choice a = api_choice(c, c->sent, c->safe, last, &t, &c->lp_sent);
            add_event(&b, t ? li_api_chunk_sse(&r->meta, &a, NULL) : NULL);
            free(t);
            c->sent = c->safe;
            c->sent_first = true;
        }
        if (c->done && c->sent == c->text.len && !c->sent_final) {
            li_api_choice a = {.index = c->index, .finish = finish_reason(c), .first = !c->sent_first,
                               .logprobs = r->api.logprobs};
            add_event(&b, li_api_chunk_sse(&r->meta, &a, NULL));
            c->sent_final = true;
        }
    }
    if (r->state == SR_DONE && !r->sent_final) {
        if (r->failed) {
            char *j = li_api_error_json(&r->err);
            if (j) li_buf_printf(&b, "data: %s\n\n", j);
            free(j);
        } else if (r->api.include_usage) {
            li_api_usage u = usage_of(r);
            add_event(&b, li_api_chunk_sse(&r->meta, NULL, &u));
        }
        li_buf_append(&b, "data: [DONE]\n\n", 14);
        r->sent_final = true;
    }
    r->pending = b.data;
    r->pending_len = b.len;
    r->pending_off = 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sreq *r = cls;
    li_server *s = r->srv;
    (void)pos;
    for (;;) {
        if (r->pending && r->pending_off < r->pending_len) {
            size_t n = r->pending_len - r->pending_off < max ? r->pending_len - r->pending_off : max;
            memcpy(buf, r->pending + r->pending_off, n);
            r->pending_off += n;
            return (ssize_t)n;
        }
        free(r->pending);
        r->pending = NULL;
        pthread_mutex_lock(&s->mu);
        if (r->sent_final) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (!wait_for(s, r, has_output)) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        next_events_locked(r);
        pthread_mutex_unlock(&s->mu);
        refresh_timeout(s, r->conn);  // the wait was ours, not the client's
    }
}

static void stream_free(void *cls) {
    sreq *r = cls;
    li_sreq_unref(r->srv, r);
}

// `Authorization: Bearer KEY`; the scheme is case-insensitive (RFC 9110 §11.1), one or more
// spaces follow it.
static bool auth_ok(li_server *s, struct MHD_Connection *c) {
    if (!s->api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h), k = strlen(s->api_key);
    unsigned diff = n != k;
    for (size_t i = 0; i < n && i < k; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->api_key[i];
    return diff == 0;  // constant time in the key's length
}

static char *models_json(li_server *s, bool one) {
    li_model_info in;
    li_model_get_info(s->m, &in);
    li_buf b = {0};
    char *esc = li_api_utf8_sanitize(s->model_id, strlen(s->model_id), NULL);
    // model ids are file names: escape what JSON needs
    li_buf idq = {0};
    for (const char *p = esc ? esc : ""; *p; p++) {
        if (*p == '"' || *p == '\\') li_buf_append(&idq, "\\", 1);
        if ((unsigned char)*p >= 0x20) li_buf_append(&idq, p, 1);
    }
    li_buf_append(&idq, "", 1);
    free(esc);
    li_buf_printf(&b,
                  "%s{\"id\": \"%s\", \"object\": \"model\", \"created\": 0, \"owned_by\": "
                  "\"lazyinfer\", \"arch\": \"%s\", \"n_ctx\": %d, \"cache_mode\": \"%s\"}%s",
                  one ? "" : "{\"object\": \"list\", \"data\": [", idq.data ? idq.data : "", in.arch,
                  s->info.n_ctx, s->info.cache_mode, one ? "" : "]}");
    li_buf_free(&idq);
    return b.data;
}

// Tokenises the prompt (connection thread, once: the engine thread never tokenises, so a huge
// prompt costs its own client's thread, not every stream's next token) and fixes how many tokens
// the request may generate. False with *e filled (400) when it is malformed or cannot fit.
static bool prepare_prompt(li_server *s, sreq *r, li_api_error *e) {
    const li_api_request *a = &r->api;
    li_status rc = LI_OK;
    const char *system = NULL, *user = NULL;
    bool chat = a->endpoint == LI_API_CHAT, simple = chat && !s->dllm && simple_chat(a, &system, &user);
    if (a->n_docs && s->dllm)
        return li_api_error_set(e, 400, "invalid_request_error", "documents", NULL,
                                "'documents' are not supported with diffusion models");
    if (a->repair && s->dllm)
        return li_api_error_set(e, 400, "invalid_request_error", "repair", NULL,
                                "'repair' is not supported with diffusion models");
    r->repair = s->p.repair;
    if (a->repair && li_repair_parse(a->repair, &r->repair) != LI_OK)
        return li_api_error_set(e, 400, "invalid_request_error", "repair", NULL, "%s",
                                li_last_error());
    if (r->repair.mode != LI_REPAIR_NONE && strcmp(s->info.cache_mode, "lazy") &&
        strcmp(s->info.cache_mode, "copy"))
        return li_api_error_set(e, 400, "invalid_request_error", "repair", NULL,
                                "'repair' needs a server whose --cache is lazy or copy (this one "
                                "runs %s)", s->info.cache_mode);
    if (a->n_docs && chat && !simple)
        return li_api_error_set(e, 400, "invalid_request_error", "documents", NULL,
                                "with 'documents' the messages must be one user message, "
                                "optionally after one system message");
    if (a->n_docs && a->prompt_ids)
        return li_api_error_set(e, 400, "invalid_request_error", "documents", NULL,
                                "'documents' need a text prompt, not token ids");
    if (chat && !simple) {
        rc = chat_tokens(s, a, &r->ids, &r->n_ids);
        r->own_ids = true;
    } else if (a->prompt_ids) {
        r->ids = a->prompt_ids;
        r->n_ids = a->n_prompt_ids;
    } else if (s->dllm) {
        rc = li_tokenize(s->m, a->prompt, strlen(a->prompt), true, false, &r->ids, &r->n_ids);
        r->own_ids = true;
    } else {  // blocks: [system][documents][query] (ARCHITECTURE.md §3.1)
        li_request q = {.chat = simple, .system = system, .query = simple ? user : a->prompt};
        li_doc *docs = a->n_docs ? calloc((size_t)a->n_docs, sizeof *docs) : NULL;
        if (a->n_docs && !docs) return li_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        for (int i = 0; i < a->n_docs; i++)
            docs[i] = (li_doc){.text = a->docs[i].text, .len = a->docs[i].len, .id = a->docs[i].id};
        q.docs = docs;
        q.n_docs = a->n_docs;
        rc = li_request_tokenize(s->m, &q, &r->tok);
        free(docs);
    }
    if (rc != LI_OK) return li_srv_error_of(e, rc, li_last_error());
    int n = r->tok ? li_request_tokens_count(r->tok) : r->n_ids, n_ctx = s->info.n_ctx;
    int V = s->info.n_vocab;
    r->n_prompt = n;  // the engine's count replaces it at the end; a request cancelled before logs it
    for (int i = 0; i < r->n_ids; i++)
        if (r->ids[i] < 0 || r->ids[i] >= V)
            return li_api_error_set(e, 400, "invalid_request_error", "prompt", NULL,
                                    "prompt token %d is outside the vocabulary [0, %d)", r->ids[i], V);
    if (s->dllm) {
        li_dllm_params p;
        li_srv_dllm_params(a, &p);
        if ((int64_t)n + p.gen_length > n_ctx)
            return li_api_error_set(e, 400, "invalid_request_error", NULL, "context_length_exceeded",
                                    "prompt of %d tokens + gen_length %d exceeds the context of %d "
                                    "tokens (-c)", n, p.gen_length, n_ctx);
        return true;
    }
    if (a->max_tokens > 0) {
        r->n_predict = a->max_tokens;
    } else {  // the default, shrunk to what the context leaves
        r->n_predict = chat ? s->p.default_max_tokens : 16;
        if (n < n_ctx && r->n_predict > n_ctx - n) r->n_predict = n_ctx - n;
    }
    if ((int64_t)n + r->n_predict > n_ctx)
        return li_api_error_set(e, 400, "invalid_request_error", NULL, "context_length_exceeded",
                                "request of %d prompt tokens + %d to generate exceeds the context of "
                                "%d tokens", n, r->n_predict, n_ctx);
    return true;
}

#define BAD_FIELD(param, ...) li_api_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

// The fields that one kind of model does not take (a 400 naming the first given): sampling
// options of autoregressive decoding on a diffusion model, and the diffusion fields elsewhere.
static bool check_model_fields(const li_server *s, const li_api_request *a, li_api_error *e) {
    if (s->dllm) {
        const char *f = a->has_top_p ? "top_p" : a->top_k >= 0 ? "top_k" : a->min_p >= 0 ? "min_p"
                        : a->ignore_eos ? "ignore_eos" : a->has_presence ? "presence_penalty"
                        : a->has_frequency ? "frequency_penalty"
                        : a->has_repetition ? "repetition_penalty" : a->n_bias ? "logit_bias"
                        : a->logprobs ? "logprobs" : a->n > 1 ? "n"
                        : a->format != LI_API_FORMAT_TEXT ? "response_format"
                        : a->skip_special == 0 ? "skip_special_tokens" : NULL;
        if (f) return BAD_FIELD(f, "'%s' is not supported with diffusion models", f);
        return true;
    }
    const char *f = a->gen_length > 0 ? "gen_length" : a->block_length > 0 ? "block_length"
                    : a->sub_block_length > 0 ? "sub_block_length" : a->steps > 0 ? "steps" : a->threshold > 0 ? "threshold"
                    : a->factor > 0 ? "factor" : a->dpad >= 0 ? "dpad" : a->lacache >= 0 ? "lacache"
                    : a->fp8 >= 0 ? "fp8" : NULL;
    if (f) return BAD_FIELD(f, "'%s' is a field of diffusion models; this one is autoregressive", f);
    return true;
}

// Work bounds that need no tokens (connection thread): --max-gen, n <= --max-batch, token ids of
// logit_bias in the vocabulary; for diffusion models steps <= gen_length and gen_length within
// the context (the prompt is checked once tokenised). False with *e filled (400 naming the limit).
static bool check_limits(const li_server *s, const li_api_request *a, li_api_error *e) {
    if (!check_model_fields(s, a, e)) return false;
    if (!s->dllm) {
        if (a->max_tokens > s->p.max_gen)
            return li_api_error_set(e, 400, "invalid_request_error", "max_tokens", NULL,
                                    "max_tokens is %d; this server generates at most %d tokens "
                                    "per request (--max-gen)", a->max_tokens, s->p.max_gen);
        if (a->n > s->p.max_running)
            return BAD_FIELD("n", "n is %d; this server decodes at most %d sequences at once "
                             "(--max-batch)", a->n, s->p.max_running);
        int V = s->vocab.V;
        for (int i = 0; i < a->n_bias; i++)
            if (a->bias_ids[i] >= V)
                return BAD_FIELD("logit_bias", "logit_bias: token id %d is outside the vocabulary "
                                 "[0, %d)", a->bias_ids[i], V);
        return true;
    }
    li_dllm_params p;
    li_srv_dllm_params(a, &p);
    const char *param = a->gen_length > 0 ? "gen_length" : "max_tokens";
    if (p.gen_length > s->p.max_gen)
        return li_api_error_set(e, 400, "invalid_request_error", param, NULL,
                                "gen_length is %d; this server generates at most %d tokens per "
                                "request (--max-gen)", p.gen_length, s->p.max_gen);
    if (p.gen_length > s->info.n_ctx)
        return li_api_error_set(e, 400, "invalid_request_error", param, "context_length_exceeded",
                                "gen_length %d exceeds the context of %d tokens (-c)",
                                p.gen_length, s->info.n_ctx);
    if (p.steps > p.gen_length)
        return li_api_error_set(e, 400, "invalid_request_error", "steps", NULL,
                                "steps is %d, more than gen_length %d: at most one denoising step "
                                "per generated token", p.steps, p.gen_length);
    return true;
}

// The request's choices (n) and what their logits need: the grammar of response_format (400 for
// a schema it does not support), the processing state (logits.h) with the prompt's tokens for
// repetition_penalty.
static bool prepare_choices(li_server *s, sreq *r, li_api_error *e) {
    const li_api_request *a = &r->api;
    li_status rc = LI_OK;
    if (a->format == LI_API_FORMAT_JSON_OBJECT) rc = li_json_grammar_object(&r->grammar);
    if (a->format == LI_API_FORMAT_JSON_SCHEMA) rc = li_json_grammar_schema(a->json_schema, &r->grammar);
    if (rc != LI_OK)
        return li_api_error_set(e, rc == LI_ERR_OOM ? 500 : 400, rc == LI_ERR_OOM ? "server_error"
                                : "invalid_request_error", "response_format", NULL, "%s",
                                li_last_error());
    r->n_ch = a->n > 0 ? a->n : 1;
    if (!(r->ch = calloc((size_t)r->n_ch, sizeof *r->ch)))
        return li_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int i = 0; i < r->n_ch; i++) {
        choice *c = &r->ch[i];
        c->r = r;
        c->index = i;
        if (!li_logits_wanted(a)) continue;
        if (li_logits_proc_init(&c->proc, a, &s->vocab, r->grammar) != LI_OK)
            return li_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        li_logits_proc_seen(&c->proc, r->ids, r->n_ids);
        const int32_t *part;
        for (int k = 0, n; r->tok && (n = li_request_tokens_part(r->tok, k, &part)) >= 0; k++)
            li_logits_proc_seen(&c->proc, part, n);
    }
    return true;
}

static enum MHD_Result handle_completion(li_server *s, struct MHD_Connection *c, conn_ctx *x) {
    li_api_error e;
    sreq *r = calloc(1, sizeof *r);
    if (!r) return send_err(c, x, 500, "server_error", NULL, "out of memory");
    if (!li_api_parse(x->body.data ? x->body.data : "", x->body.len,
                      x->endpoint == 1 ? LI_API_CHAT : LI_API_COMPLETIONS, &r->api, &e)) {
        free(r);
        return send_error(c, x, &e);
    }
    bool ok = true;
    if (r->api.model && strcmp(r->api.model, s->model_id) && strcmp(r->api.model, s->model_path))
        ok = li_api_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                              "The model '%.200s' does not exist; this server serves '%.200s'",
                              r->api.model, s->model_id);
    pthread_cond_init(&r->cv, NULL);
    if (ok) ok = check_limits(s, &r->api, &e);
    if (ok) ok = prepare_prompt(s, r, &e);
    if (ok) ok = prepare_choices(s, r, &e);
    if (!ok) {
        li_sreq_free(r);
        return send_error(c, x, &e);
    }
    r->srv = s;
    r->refs = 2;  // connection context + engine
    r->t_arrive = x->t0;
    r->meta.endpoint = r->api.endpoint;
    r->meta.model = s->model_id;
    r->meta.created = (int64_t)time(NULL);
    r->meta.id = r->id;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    x->r = r;
    x->stream = r->api.stream;
    pthread_mutex_lock(&s->mu);
    snprintf(r->id, sizeof r->id, "%s-%llx%04llx", x->endpoint == 1 ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)(++s->id_counter & 0xffff));
    r->seed = r->api.has_seed ? r->api.seed : fresh_seed(s);
    s->n_sreqs++;
    if (s->draining || s->n_accepted >= s->p.max_queue) {
        bool stopping = s->draining;
        r->refs = 1;
        r->state = SR_DONE;
        pthread_mutex_unlock(&s->mu);
        return send_err(c, x, 503, "server_error", "overloaded",
                        stopping ? "the server is shutting down"
                                 : "the server is overloaded: too many requests queued; retry later");
    }
    s->n_accepted++;
    s->n_queued++;
    if (s->queue_tail) s->queue_tail->next = r;
    else s->queue = r;
    s->queue_tail = r;
    pthread_cond_signal(&s->engine_cv);
    bool here = wait_for(s, r, r->api.stream ? first_token_or_done : is_done);
    if (!here) {  // client gone: the engine drops it (queued) or on_token stops it (running)
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    if (r->failed && (!r->api.stream || r->state == SR_DONE)) {
        e = r->err;
        pthread_mutex_unlock(&s->mu);
        return send_error(c, x, &e);
    }
    if (r->api.stream) {
        r->refs++;  // the stream response's
        r->conn = c;
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, r, stream_free);
        if (!resp) {
            stream_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        x->status = 200;
        refresh_timeout(s, c);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    li_api_choice *chs = calloc((size_t)r->n_ch, sizeof *chs);
    char **texts = calloc((size_t)r->n_ch, sizeof *texts);
    bool built = chs && texts;
    for (int i = 0; built && i < r->n_ch; i++) {
        int from = 0;
        chs[i] = api_choice(&r->ch[i], 0, r->ch[i].text.len, true, &texts[i], &from);
        chs[i].finish = finish_reason(&r->ch[i]);
        built = texts[i] != NULL;
    }
    li_api_usage u = usage_of(r);
    char *body = built ? li_api_response_json(&r->meta, chs, r->n_ch, &u) : NULL;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; texts && i < r->n_ch; i++) free(texts[i]);
    free(texts);
    free(chs);
    return send_json(c, x, 200, body);
}

// /tokenize and /detokenize cover at most TOKENIZE_CONTEXTS contexts' worth of tokens, so their
// work and answer are bounded by the model, not by the 16 MiB body (15 MiB of text took 9 s and
// answered 88 MB with pieces). The text of /tokenize is checked first, at TOKEN_BYTES bytes a
// token (longer than nearly every token), so a text over it costs no tokenising.
#define TOKENIZE_CONTEXTS 8
#define TOKEN_BYTES 16

static int64_t tokenize_max_tokens(const li_server *s) {
    return (int64_t)TOKENIZE_CONTEXTS * s->info.n_ctx;
}

// POST /tokenize (llama-server's shape; the connection thread tokenises: the tokenizer is
// read-only).
static enum MHD_Result handle_tokenize(li_server *s, struct MHD_Connection *c, conn_ctx *x) {
    li_api_error e;
    li_api_tokenize t;
    if (!li_api_parse_tokenize(x->body.data ? x->body.data : "", x->body.len, &t, &e))
        return send_error(c, x, &e);
    int64_t max_tokens = tokenize_max_tokens(s), max_bytes = max_tokens * TOKEN_BYTES;
    if ((int64_t)t.len > max_bytes) {
        free(t.content);
        li_api_error_set(&e, 400, "invalid_request_error", "content", NULL,
                         "content of %zu bytes: /tokenize takes at most %lld bytes (%d contexts "
                         "of %d tokens, -c)", t.len, (long long)max_bytes, TOKENIZE_CONTEXTS,
                         s->info.n_ctx);
        return send_error(c, x, &e);
    }
    int32_t *ids = NULL;
    int n = 0;
    li_status rc = li_tokenize(s->m, t.content, t.len, t.add_special, t.parse_special, &ids, &n);
    free(t.content);
    if (rc != LI_OK) {
        li_srv_error_of(&e, rc, li_last_error());
        return send_error(c, x, &e);
    }
    if (n > max_tokens) {
        li_free_tokens(ids);
        li_api_error_set(&e, 400, "invalid_request_error", "content", NULL,
                         "content of %d tokens: /tokenize answers at most %lld tokens (%d "
                         "contexts of %d tokens, -c)", n, (long long)max_tokens, TOKENIZE_CONTEXTS,
                         s->info.n_ctx);
        return send_error(c, x, &e);
    }
    char **texts = t.with_pieces ? calloc((size_t)n + 1, sizeof *texts) : NULL;
    size_t *lens = t.with_pieces ? calloc((size_t)n + 1, sizeof *lens) : NULL;
    li_buf piece = {0};
    bool ok = !t.with_pieces || (texts && lens);
    for (int i = 0; ok && t.with_pieces && i < n; i++) {
        piece.len = 0;
        ok = li_piece_append(s->m, ids[i], &piece) == LI_OK &&
             (texts[i] = malloc(piece.len + 1)) != NULL;
        if (ok) memcpy(texts[i], piece.data ? piece.data : "", piece.len);
        if (ok) lens[i] = piece.len;
    }
    char *body = ok ? li_api_tokenize_json(ids, n, t.with_pieces ? (const char *const *)texts : NULL,
                                           lens)
                    : NULL;
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(lens);
    li_buf_free(&piece);
    li_free_tokens(ids);
    return send_json(c, x, 200, body);
}

// POST /detokenize: the text of token ids (special tokens as their text, as llama-server).
static enum MHD_Result handle_detokenize(li_server *s, struct MHD_Connection *c, conn_ctx *x) {
    li_api_error e;
    int32_t *ids;
    int n;
    if (!li_api_parse_detokenize(x->body.data ? x->body.data : "", x->body.len, &ids, &n, &e))
        return send_error(c, x, &e);
    li_buf b = {0};
    li_status rc = LI_OK;
    int V = s->info.n_vocab;
    if (n > tokenize_max_tokens(s))
        rc = li_error_set(LI_ERR_INVALID_ARG, "%d tokens: /detokenize takes at most %lld (%d "
                          "contexts of %d tokens, -c)", n, (long long)tokenize_max_tokens(s),
                          TOKENIZE_CONTEXTS, s->info.n_ctx);
    for (int i = 0; i < n && rc == LI_OK; i++)
        rc = ids[i] < V ? li_piece_append(s->m, ids[i], &b)
                        : li_error_set(LI_ERR_INVALID_ARG, "token %d is outside the vocabulary "
                                       "[0, %d)", ids[i], V);
    free(ids);
    if (rc != LI_OK) {
        li_buf_free(&b);
        li_srv_error_of(&e, rc, li_last_error());
        e.status = rc == LI_ERR_OOM ? 500 : 400;
        snprintf(e.param, sizeof e.param, "tokens");
        return send_error(c, x, &e);
    }
    char *body = li_api_detokenize_json(b.data ? b.data : "", b.len);
    li_buf_free(&b);
    return send_json(c, x, 200, body);
}

bool li_srv_addr_text(const char *text, size_t len, char out[LI_CONN_ADDR_LEN]) {
    while (len && (*text == ' ' || *text == '\t')) text++, len--;
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--;
    char t[LI_CONN_ADDR_LEN];
    unsigned char a[16];
    if (len == 0 || len >= sizeof t) return false;
    memcpy(t, text, len);
    t[len] = 0;
    if (inet_pton(AF_INET, t, a) == 1) return inet_ntop(AF_INET, a, out, LI_CONN_ADDR_LEN) != NULL;
    if (inet_pton(AF_INET6, t, a) != 1) return false;
    static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(a, v4_mapped, sizeof v4_mapped))
        return inet_ntop(AF_INET, a + 12, out, LI_CONN_ADDR_LEN) != NULL;
    return inet_ntop(AF_INET6, a, out, LI_CONN_ADDR_LEN) != NULL;
}

// The address of the connection's peer as text (li_srv_addr_text); false when it has none.
static bool peer_text(struct MHD_Connection *c, char out[LI_CONN_ADDR_LEN]) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    char t[LI_CONN_ADDR_LEN];
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) return false;
    const void *a = sa->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                                             : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    return inet_ntop(sa->sa_family, a, t, sizeof t) && li_srv_addr_text(t, strlen(t), out);
}

static bool from_trusted_proxy(li_server *s, struct MHD_Connection *c, char peer[LI_CONN_ADDR_LEN]) {
    return s->trusted_proxy[0] && peer_text(c, peer) && !strcmp(peer, s->trusted_proxy);
}

static enum MHD_Result join_forwarded(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value) {
    li_buf *b = cls;
    (void)kind;
    if (value && !strcasecmp(key, "X-Forwarded-For")) {
        if (b->len) li_buf_append(b, ",", 1);
        li_buf_append(b, value, strlen(value));
    }
    return MHD_YES;
}

// The client a trusted proxy's request counts for (conn.h): the right-most X-Forwarded-For
// address that is not the proxy itself, over every X-Forwarded-For line in order (the proxy
// appends the address it saw, which a client cannot forge; what is left of it, a client can
// write). The proxy's own address when there is none, or that one is not an IP address.
static void forwarded_client(li_server *s, struct MHD_Connection *c, char out[LI_CONN_ADDR_LEN]) {
    li_buf b = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, join_forwarded, &b);
    snprintf(out, LI_CONN_ADDR_LEN, "%s", s->trusted_proxy);
    for (size_t end = b.len; end > 0;) {
        size_t start = end;
        while (start > 0 && b.data[start - 1] != ',') start--;
        char a[LI_CONN_ADDR_LEN];
        if (!li_srv_addr_text(b.data + start, end - start, a)) break;
        if (strcmp(a, s->trusted_proxy)) {
            snprintf(out, LI_CONN_ADDR_LEN, "%s", a);
            break;
        }
        end = start > 0 ? start - 1 : 0;
    }
    li_buf_free(&b);
}

// The connection's guard entry (conn.h), set when it opened.
static li_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

// How the request's body is framed, counted over every header line (MHD keeps duplicates).
typedef struct {
    int n_length, n_encoding;  // Content-Length and Transfer-Encoding lines
    const char *encoding;      // the last Transfer-Encoding value
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
    framing *f = cls;
    (void)kind;
    if (!strcasecmp(key, "Content-Length")) f->n_length++;
    if (!strcasecmp(key, "Transfer-Encoding")) {
        f->n_encoding++;
        f->encoding = value;
    }
    return MHD_YES;
}

// The body's framing must be one Content-Length, or none (no body). Ambiguous framing is the
// request-smuggling pattern behind proxies: several Content-Length lines, or Content-Length with
// Transfer-Encoding (RFC 9112 §6.3), is a 400. Chunked bodies are a 411: libmicrohttpd (0.9.75)
// decodes chunks itself and shows the application neither a chunk's size (a 7fffffff chunk held
// the connection until --body-timeout) nor an over-long chunk line (a 1 MB chunk extension got
// its HTML 500), and every client of this API sends Content-Length. The answer closes the
// connection (its body is never read), so nothing after it can be taken as a next request.
// False with *e filled when the framing is refused.
static bool framing_ok(struct MHD_Connection *c, li_api_error *e) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.n_length > 1)
        return li_api_error_set(e, 400, "invalid_request_error", NULL, "ambiguous_framing",
                                "%d Content-Length headers: the body's length is ambiguous; send "
                                "one", f.n_length);
    if (f.n_encoding && f.n_length)
        return li_api_error_set(e, 400, "invalid_request_error", NULL, "ambiguous_framing",
                                "Content-Length and Transfer-Encoding together: the body's length "
                                "is ambiguous; send Content-Length alone");
    if (f.n_encoding > 1 || (f.n_encoding && strcasecmp(f.encoding, "chunked")))
        return li_api_error_set(e, 400, "invalid_request_error", NULL, "ambiguous_framing",
                                "Transfer-Encoding '%.100s' is not supported: send Content-Length",
                                f.n_encoding > 1 ? "(several headers)" : f.encoding);
    if (f.n_encoding)
        return li_api_error_set(e, 411, "invalid_request_error", NULL, "length_required",
                                "chunked request bodies are not accepted: send Content-Length");
    return true;
}

// The per-client cap at a request's headers (conn.h): false, with x->refused, when its client (a
// trusted proxy's: from X-Forwarded-For) is over it. A direct client gets its 503 at once and its
// connection closes; a proxy's request gets it after its body is read (and dropped): an answer
// before the body closes the connection, which the proxy's other clients share.
static bool admitted(li_server *s, struct MHD_Connection *c, conn_ctx *x) {
    char peer[LI_CONN_ADDR_LEN], client[LI_CONN_ADDR_LEN];
    bool proxied = from_trusted_proxy(s, c, peer);
    if (proxied) forwarded_client(s, c, client);
    if (li_conn_admit(s->guard, conn_of(c), proxied ? client : NULL)) return true;
    x->refused = true;
    x->close = !proxied;
    return false;
}

static enum MHD_Result send_over_cap(li_server *s, struct MHD_Connection *c, conn_ctx *x) {
    char msg[200];
    snprintf(msg, sizeof msg, "too many connections from this client (more than %u, "
             "--max-connections-per-client); retry later", s->p.max_connections_per_client);
    return send_err(c, x, 503, "server_error", "overloaded", msg);
}

// What the headers alone decide, answered before any byte of the body is read (a client without
// the key, with a body over the limit or of another type costs no memory): framing, route,
// method, API key, Content-Length, Content-Type. Returns true with *ret set when it answered.
static bool answer_from_headers(li_server *s, struct MHD_Connection *c, conn_ctx *x,
                                const char *url, const char *method, enum MHD_Result *ret) {
    li_api_error e;
    if (!framing_ok(c, &e)) {
        *ret = send_error(c, x, &e);
        return true;
    }
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    bool models = !strcmp(url, "/v1/models"), model_one = !strncmp(url, "/v1/models/", 11);
    if (!strcmp(url, "/health") || !strcmp(url, "/metrics")) {
        if (get) return false;
        *ret = send_err(c, x, 405, "invalid_request_error", NULL, "use GET");
        return true;
    }
    if (!models && !model_one && x->endpoint == 2) {
        *ret = send_err(c, x, 404, "invalid_request_error", "unknown_url",
                        "unknown URL (see docs/SERVER.md)");
        return true;
    }
    if (!auth_ok(s, c)) {
        *ret = send_err(c, x, 401, "invalid_request_error", "invalid_api_key",
                        "missing or incorrect API key: send 'Authorization: Bearer KEY'");
        return true;
    }
    if (models || model_one) {
        if (get) return false;
        *ret = send_err(c, x, 405, "invalid_request_error", NULL, "use GET");
        return true;
    }
    if (!post) {
        *ret = send_err(c, x, 405, "invalid_request_error", NULL, "use POST");
        return true;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->p.max_body_bytes) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->p.max_body_bytes);
        *ret = send_err(c, x, 413, "invalid_request_error", "request_too_large", msg);
        return true;
    }
    // JSON bodies only; no Content-Type is taken as JSON (as most servers of this API do)
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    size_t n = ct ? strcspn(ct, "; \t") : 0;
    if (ct && !(n == 16 && !strncasecmp(ct, "application/json", 16))) {
        char msg[200];
        snprintf(msg, sizeof msg, "Content-Type '%.100s' is not supported: send "
                 "'Content-Type: application/json'", ct);
        *ret = send_err(c, x, 415, "invalid_request_error", "unsupported_media_type", msg);
        return true;
    }
    return false;
}

enum MHD_Result li_http_on_access(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    li_server *s = cls;
    conn_ctx *x = *con_cls;
    (void)version;
    if (!x) {  // the headers are in
        x = calloc(1, sizeof *x);
        if (!x) return MHD_NO;
        x->srv = s;
        x->t0 = li_srv_now_ms();
        snprintf(x->method, sizeof x->method, "%s", method);
        snprintf(x->url, sizeof x->url, "%s", url);
        x->endpoint = !strcmp(url, "/v1/completions") ? 0 : !strcmp(url, "/v1/chat/completions") ? 1
                      : !strcmp(url, "/tokenize") ? 3 : !strcmp(url, "/detokenize") ? 4 : 2;
        *con_cls = x;
        enum MHD_Result ret;
        if (!admitted(s, c, x) && x->close) return send_over_cap(s, c, x);
        if (answer_from_headers(s, c, x, url, method, &ret)) return ret;
        li_conn_set_phase(s->guard, conn_of(c), strcmp(method, "POST") ? LI_CONN_BUSY : LI_CONN_BODY);
        return MHD_YES;
    }
    if (*upload_size) {
        // a refused request's body is dropped as it comes, as one over the limit
        if (x->refused || x->body.len + *upload_size > s->p.max_body_bytes) x->too_big = true;
        if (!x->too_big && li_buf_append(&x->body, upload, *upload_size) != LI_OK) x->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    li_conn_set_phase(s->guard, conn_of(c), LI_CONN_BUSY);
    // answering may take long (the engine, a stream): libmicrohttpd's inactivity timeout waits
    // (refreshed before each write, refresh_timeout)
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    if (x->refused) return send_over_cap(s, c, x);
    if (!strcmp(url, "/health")) return send_json(c, x, 200, strdup("{\"status\": \"ok\"}"));
    if (!strcmp(url, "/metrics")) {
        int open;
        int64_t timed_out, shed, refused;
        li_conn_counts(s->guard, &open, &timed_out, &shed, &refused);
        li_metrics_connections(&s->mx, open, timed_out, shed, refused);
        li_buf b = {0};
        if (li_metrics_render(&s->mx, &b) != LI_OK) {
            li_buf_free(&b);
            return send_err(c, x, 500, "server_error", NULL, "out of memory");
        }
        li_buf_append(&b, "", 1);
        return send_text(c, x, 200, "text/plain; version=0.0.4", b.data);
    }
    if (!strcmp(url, "/v1/models")) return send_json(c, x, 200, models_json(s, false));
    if (!strncmp(url, "/v1/models/", 11)) {
        if (strcmp(url + 11, s->model_id) && strcmp(url + 11, s->model_path))
            return send_err(c, x, 404, "invalid_request_error", "model_not_found", "no such model");
        return send_json(c, x, 200, models_json(s, true));
    }
    if (x->too_big) {  // a chunked body (no Content-Length) that grew past the limit
        char msg[128];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->p.max_body_bytes);
        return send_err(c, x, 413, "invalid_request_error", "request_too_large", msg);
    }
    if (x->endpoint == 3) return handle_tokenize(s, c, x);
    if (x->endpoint == 4) return handle_detokenize(s, c, x);
    return handle_completion(s, c, x);
}

// libmicrohttpd: a request line arrived (its headers are coming).
void *li_http_on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    li_server *s = cls;
    (void)uri;
    li_conn_set_phase(s->guard, conn_of(c), LI_CONN_HEADERS);
    return NULL;
}

// libmicrohttpd: a connection opened or closed (the guard's list).
void li_http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode code) {
    li_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        char peer[LI_CONN_ADDR_LEN];
        // a trusted proxy's connection counts for the clients its requests name (conn.h)
        const char *client = from_trusted_proxy(s, c, peer) ? NULL : peer_text(c, peer) ? peer : "";
        *socket_context = ci ? li_conn_open(s->guard, ci->connect_fd, client) : NULL;
    } else {
        li_conn_close(s->guard, *socket_context);
        *socket_context = NULL;
    }
}

// One log line per request, metrics, and the cancel of a stream whose client went away.
void li_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe) {
    li_server *s = cls;
    conn_ctx *x = *con_cls;
    li_conn_set_phase(s->guard, conn_of(c), LI_CONN_IDLE);  // kept alive: the next request's wait
    if (!x) return;
    double t = li_srv_now_ms();
    int n_prompt = 0, n_gen = 0;
    double ttft = -1;
    bool cancelled = false;
    if (x->r) {
        sreq *r = x->r;
        pthread_mutex_lock(&s->mu);
        if (r->state != SR_DONE || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
            if (r->state != SR_DONE && !r->cancelled) li_metrics_cancelled(&s->mx);
            if (r->state != SR_DONE) r->cancelled = true;
            cancelled = r->state != SR_DONE || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
        }
        n_prompt = r->n_prompt;
        n_gen = usage_of(r).completion_tokens;
        if (r->t_first > 0) ttft = r->t_first - r->t_arrive;
        pthread_mutex_unlock(&s->mu);
        li_sreq_unref(s, r);
    }
    if (x->status) {
        bool answered = !cancelled && x->status < 400;  // the prompt tokens the metric counts
        li_metrics_request(&s->mx, x->endpoint, cancelled ? 499 : x->status,
                           ttft >= 0 ? ttft / 1e3 : -1, (t - x->t0) / 1e3, answered ? n_prompt : 0,
                           n_gen);
        // a refusal of the per-client cap is in the guard's summary line instead (conn.h)
        bool log = !s->p.quiet && !x->refused;
        if (log && x->r)
            fprintf(stderr, "serve: %s %s %d%s %.1f ms, ttft %.1f ms, prompt %d, generated %d%s\n",
                    x->method, x->url, x->status, cancelled ? " (client gone)" : "", t - x->t0,
                    ttft >= 0 ? ttft : 0.0, n_prompt, n_gen, x->stream ? ", stream" : "");
        else if (log)
            fprintf(stderr, "serve: %s %s %d %.1f ms\n", x->method, x->url, x->status, t - x->t0);
    } else if (x->r && !s->p.quiet) {
        fprintf(stderr, "serve: %s %s client gone before the answer after %.1f ms, prompt %d, "
                "generated %d\n", x->method, x->url, t - x->t0, n_prompt, n_gen);
    }
    li_buf_free(&x->body);
    free(x);
    *con_cls = NULL;
}
