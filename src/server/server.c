// server.c — HTTP layer (libmicrohttpd, thread per connection) and the engine thread of
// `lazyinfer serve` (server.h).
//
// A request's life: the connection thread parses the body (api.c), checks key, model and limits,
// tokenises the prompt once (prepare_prompt; context overflow is a 400 here), puts an sreq on the
// queue (bounded: 503 beyond max_queue) and waits. The engine thread takes queued requests while
// fewer than max_running are in the engine, submits their tokens (li_submit, which tokenises
// nothing more), and loops li_step. on_token (engine thread, inside li_step)
// decodes the token, appends it to the request's text, looks for stop strings and wakes the
// connection thread; returning false when the client is gone or a stop string matched makes the
// scheduler finish the request at the end of that step, which frees its sequence and pages.
// After each step the engine collects finished requests with li_result.
// Diffusion models: the engine starts the waiting requests that share LaCache/FP8 options as one
// batch (li_dllm_batch_begin); batches take turns one denoising step each, so a long request
// cannot starve later ones, and a request whose client left is dropped between two steps.
// Streaming responses are MHD callback responses whose reader blocks until text arrives.
// Connections: conn.c's guard holds each phase to a deadline and sheds idle connections; what the
// headers decide (route, key, Content-Length, Content-Type) is answered before the body is read.
// A request of n choices is n engine requests (choice i seeded seed + i); logit_bias,
// penalties, response_format's grammar and logprobs act on each choice's logits through the
// engine's on_logits hook (logits.c, json-grammar.c).
// Not here: TLS (bind to localhost, or put a proxy in front), tools.
// Every sreq is reference-counted (connection context, engine, stream response); one mutex
// (srv->mu) guards every sreq field that two threads touch.
// Tested by tests/test_server.py (openai client, curl, load test, disconnects).
#define _GNU_SOURCE  // POLLRDHUP
#include "server.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../engine/engine.h"
#include "api.h"
#include "conn.h"
#include "json-grammar.h"
#include "logits.h"
#include "metrics.h"

typedef enum { SR_QUEUED, SR_SUBMITTED, SR_DONE } sr_state;

typedef struct sreq sreq;

// One generated sequence of a request: n > 1 asks for several, each its own engine request.
typedef struct {
    sreq *r;
    int index;
    // engine side (engine thread only)
    int64_t engine_id;
    li_logits_proc proc;  // bias, penalties, grammar, logprobs (logits.h); unused when none
    bool complete;        // the grammar's document is complete: stop
    // output, under srv->mu
    li_buf text;    // generated text, stop string trimmed
    size_t safe;    // bytes of text that may be sent (no partial stop string / character)
    size_t sent;    // streaming: bytes already turned into events
    bool stopped, length, done, sent_first, sent_final;
    int n_generated;
    li_api_logprob *lp;  // (n_lp) logprobs of its tokens, when asked
    int n_lp, cap_lp, lp_sent;
} choice;

struct sreq {
    int refs;  // under srv->mu
    pthread_cond_t cv;
    struct li_server *srv;
    li_api_request api;
    li_api_meta meta;
    char id[48];
    double t_arrive, t_first;  // li_time_ms
    int fd;                    // client socket, to notice a disconnect while waiting
    struct MHD_Connection *conn;  // a stream's connection (its reader runs on that thread)
    // the prompt, tokenised once on the connection thread (prepare_prompt): tok (blocks + query
    // of an autoregressive request with documents or a one-turn chat), else ids
    li_request_tokens *tok;
    int32_t *ids;  // (n_ids)
    int n_ids;
    bool own_ids;
    int n_predict;  // tokens each choice may generate (autoregressive)
    uint64_t seed;  // choice i draws with seed + i
    li_json_grammar *grammar;  // response_format's, NULL: none
    choice *ch;     // (n_ch)
    int n_ch, n_ch_done;
    // output, under srv->mu
    sr_state state;
    bool cancelled, failed;
    li_api_error err;
    int n_prompt, n_cached;
    // streaming output (connection thread only)
    char *pending;
    size_t pending_len, pending_off;
    bool sent_final;
    sreq *next;  // queue link
};

struct li_server {
    li_model *m;
    li_server_params p;
    char model_id[256], model_path[1024], api_key[256];
    bool dllm;
    struct MHD_Daemon *daemon;
    int port;
    pthread_t engine;
    pthread_mutex_t mu;
    pthread_cond_t engine_cv;
    pthread_cond_t drain_cv;   // shutdown: a request done, an sreq freed, or hurry
    bool draining;             // shutting down: no new request, what is left gets 503
    bool hurry;                // end the drain now (li_server_hurry)
    bool stopping;             // the engine stops (end of the drain)
    int n_sreqs;               // sreqs alive (connection, engine or stream still holds one)
    sreq *queue, *queue_tail;
    int n_queued, n_accepted;  // queued; accepted and not done (queued + in the engine)
    choice **active;           // (max_running) choices in the engine (engine thread only)
    int n_active;
    struct dllm_run *runs;     // (max_running) diffusion batches decoding (engine thread only)
    int n_runs, rr;            // batches; the one whose turn is next
    int n_dllm;                // diffusion requests in them
    uint64_t id_counter;
    li_metrics mx;
    li_conn_guard *guard;  // connection deadlines and shedding (conn.h)
    li_vocab vocab;        // every token's text (logits.h), for logprobs and response_format
};

// Per-HTTP-request context (MHD's con_cls): the body as it arrives, what to log.
typedef struct {
    li_server *srv;
    double t0;
    char method[16], url[128];
    int endpoint;  // 0 completions, 1 chat, 2 other, 3 tokenize, 4 detokenize
    li_buf body;
    bool too_big;
    int status;
    bool stream;
    sreq *r;
} conn_ctx;

static double now_ms(void) {
    return li_time_ms();
}

static void sreq_free(sreq *r) {
    li_request_tokens_free(r->tok);
    if (r->own_ids) li_free_tokens(r->ids);
    for (int i = 0; i < r->n_ch; i++) {
        li_logits_proc_free(&r->ch[i].proc);
        li_buf_free(&r->ch[i].text);
        free(r->ch[i].lp);
    }
    free(r->ch);
    li_json_grammar_free(r->grammar);
    li_api_request_free(&r->api);
    free(r->pending);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void sreq_unref(li_server *s, sreq *r) {
    pthread_mutex_lock(&s->mu);
    int left = --r->refs;
    if (left == 0 && --s->n_sreqs == 0) pthread_cond_broadcast(&s->drain_cv);
    pthread_mutex_unlock(&s->mu);
    if (left == 0) sreq_free(r);
}

// ---- engine thread ---------------------------------------------------------------------------

// Marks r done (under s->mu) and wakes its connection thread.
static void done_locked(li_server *s, sreq *r) {
    if (r->state == SR_DONE) return;
    r->state = SR_DONE;
    for (int i = 0; i < r->n_ch; i++) {
        r->ch[i].done = true;
        r->ch[i].safe = r->ch[i].text.len;
    }
    s->n_accepted--;
    pthread_cond_broadcast(&r->cv);
    if (s->draining) pthread_cond_broadcast(&s->drain_cv);
}

// The answer to an engine status: limits are 400 context_length_exceeded, bad input 400, the
// rest 500. Returns false (for `return error_of(...)`).
static bool error_of(li_api_error *e, li_status st, const char *msg) {
    int status = 500;
    const char *type = "server_error", *code = NULL;
    switch (st) {
    case LI_ERR_LIMIT:
    case LI_ERR_KV_FULL:
        status = 400;
        type = "invalid_request_error";
        code = "context_length_exceeded";
        break;
    case LI_ERR_INVALID_ARG:
    case LI_ERR_UNSUPPORTED:
    case LI_ERR_FORMAT:
        status = 400;
        type = "invalid_request_error";
        break;
    default:
        break;
    }
    return li_api_error_set(e, status, type, NULL, code, "%s", msg);
}

static void fail_locked(li_server *s, sreq *r, li_status st, const char *msg) {
    if (s->draining)  // what shutdown cuts (queued, or past the drain deadline) is a 503
        li_api_error_set(&r->err, 503, "server_error", NULL, "overloaded",
                         "the server is shutting down; retry on another server or later");
    else
        error_of(&r->err, st, msg);
    r->failed = true;
    done_locked(s, r);
}

static void fail_request(li_server *s, sreq *r, li_status st, const char *msg) {
    pthread_mutex_lock(&s->mu);
    fail_locked(s, r, st, msg);
    pthread_mutex_unlock(&s->mu);
}

// A choice is finished (under s->mu); the request is done with its last choice.
static void choice_done_locked(li_server *s, choice *c) {
    if (c->done) return;
    c->done = true;
    c->safe = c->text.len;
    pthread_cond_broadcast(&c->r->cv);
    if (++c->r->n_ch_done == c->r->n_ch) done_locked(s, c->r);
}

// Longest suffix of text[0, n) that is a proper prefix of some stop string.
static size_t stop_holdback(const sreq *r, const char *text, size_t n) {
    size_t hold = 0;
    for (int i = 0; i < r->api.n_stop; i++) {
        size_t L = strlen(r->api.stop[i]);
        if (L == 0) continue;  // an empty stop string never matches (li_api_stop_find)
        for (size_t k = L - 1 < n ? L - 1 : n; k > hold; k--)
            if (!memcmp(text + n - k, r->api.stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

// Appends generated bytes to a choice (under s->mu): trims at the first stop string (and the
// logprobs of tokens after it), updates `safe`.
static void append_text_locked(choice *c, const char *piece, size_t len) {
    sreq *r = c->r;
    size_t old = c->text.len;
    if (li_buf_append(&c->text, piece, len) != LI_OK) {
        r->cancelled = true;  // out of memory: stop this request
        return;
    }
    size_t cut = li_api_stop_find(c->text.data, c->text.len, old, r->api.stop, r->api.n_stop);
    if (cut != SIZE_MAX) {
        c->text.len = cut;
        c->stopped = true;
        c->safe = cut;
        while (c->n_lp > 0 && c->lp[c->n_lp - 1].offset >= cut && c->n_lp > c->lp_sent) c->n_lp--;
        return;
    }
    size_t safe = c->text.len - stop_holdback(r, c->text.data, c->text.len);
    safe = li_api_utf8_complete_prefix(c->text.data, safe);
    if (safe > c->safe) c->safe = safe;
}

// Records a token's logprobs (under s->mu; the text before it is c->text.len long).
static void add_logprob_locked(choice *c, int32_t tok) {
    if (c->n_lp == c->cap_lp) {
        int cap = c->cap_lp ? 2 * c->cap_lp : 16;
        li_api_logprob *lp = realloc(c->lp, (size_t)cap * sizeof *lp);
        if (!lp) {
            c->r->cancelled = true;
            return;
        }
        c->lp = lp;
        c->cap_lp = cap;
    }
    li_api_logprob *l = &c->lp[c->n_lp++];
    li_logits_report(&c->proc, tok, c->r->api.top_logprobs, l);
    l->offset = c->text.len;
}

// li_generate_params.on_logits (engine thread): the choice's processing (logits.h).
static void on_logits(void *user, float *logits, int V) {
    choice *c = user;
    (void)V;
    if (!li_logits_apply(&c->proc, logits)) {
        // the grammar left no token: cannot happen with a vocabulary of all bytes; stop cleanly
        LI_WARN("serve: response_format: no token fits the grammar; stopping request %s", c->r->id);
        c->complete = true;
    }
}

static bool on_token(void *user, int32_t tok) {
    choice *c = user;
    sreq *r = c->r;
    li_server *s = r->srv;
    char small[256], *piece = small;
    size_t len = 0;
    // special tokens (an end of turn generated past with ignore_eos...) are not text unless asked
    bool skip = r->api.skip_special != 0 && li_tokenizer_is_special(s->m->tok, tok);
    if (skip || li_token_to_piece(s->m, tok, small, sizeof small, &len) != LI_OK) len = 0;
    if (len > sizeof small) {
        piece = malloc(len);
        if (!piece || li_token_to_piece(s->m, tok, piece, len, &len) != LI_OK) len = 0;
    }
    bool complete = c->complete || li_logits_take(&c->proc, tok);  // the JSON document ends
    li_metrics_tokens(&s->mx, 1);
    pthread_mutex_lock(&s->mu);
    bool go_on = !r->cancelled && !c->stopped;
    if (go_on) {
        if (r->t_first == 0) r->t_first = now_ms();
        if (r->api.logprobs) add_logprob_locked(c, tok);
        append_text_locked(c, piece ? piece : "", piece ? len : 0);
        if (complete) c->stopped = true;
        go_on = !r->cancelled && !c->stopped;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (piece != small) free(piece);
    return go_on;
}

// Renders a conversation through the model's chat format and tokenises it.
static li_status chat_tokens(li_server *s, const li_api_request *a, int32_t **ids, int *n) {
    li_chat_message *msgs = malloc((size_t)a->n_messages * sizeof *msgs);
    if (!msgs) return li_error_set(LI_ERR_OOM, "out of memory");
    for (int i = 0; i < a->n_messages; i++)
        msgs[i] = (li_chat_message){a->messages[i].role, a->messages[i].content};
    // the template's special tokens are tokens; the messages' text is only text, in any turn
    li_status rc = li_chat_tokenize(s->m->tok, msgs, a->n_messages, true, ids, n);
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

// Submits r's choices, tokenised by prepare_prompt, to the scheduler (engine thread: no
// tokenising here); each that is submitted goes to s->active with one reference of r. On
// failure r is failed (the choices already submitted are cancelled and collected as usual).
static void submit(li_server *s, sreq *r) {
    const li_api_request *a = &r->api;
    li_request q = {0};
    if (r->tok) {
        q.tokens = r->tok;
    } else {
        q.prompt_ids = r->ids;
        q.n_prompt_ids = r->n_ids;
    }
    q.gen = li_generate_default_params();
    q.gen.stop_at_eos = !a->ignore_eos;
    q.gen.on_token = on_token;
    q.gen.on_logits = li_logits_wanted(a) ? on_logits : NULL;
    // OpenAI semantics: temperature 1 and top_p 1 unless given; no top-k / min-p unless given.
    li_sampling_params sp = li_sampling_default_params();
    sp.temperature = a->has_temperature ? (float)a->temperature : 1.0f;
    sp.top_p = a->has_top_p ? (float)a->top_p : 1.0f;
    sp.top_k = a->top_k >= 0 ? a->top_k : 0;
    sp.min_p = a->min_p >= 0 ? (float)a->min_p : 0.0f;
    q.gen.n_predict = r->n_predict;
    for (int i = 0; i < r->n_ch; i++) {
        choice *c = &r->ch[i];
        sp.seed = r->seed + (uint64_t)i;
        q.gen.sampling = sp;
        q.gen.user = c;
        li_status rc = li_submit(s->m, &q, &c->engine_id);
        if (rc != LI_OK) {
            pthread_mutex_lock(&s->mu);
            fail_locked(s, r, rc, li_last_error());
            r->cancelled = true;  // the choices submitted stop at their next token
            pthread_mutex_unlock(&s->mu);
            for (int k = 0; k < i; k++) li_cancel(s->m, r->ch[k].engine_id);
            sreq_unref(s, r);  // the engine's reference of the choices not submitted
            for (int k = i + 1; k < r->n_ch; k++) sreq_unref(s, r);
            return;
        }
        s->active[s->n_active++] = c;
    }
    pthread_mutex_lock(&s->mu);
    r->state = SR_SUBMITTED;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&s->mu);
}

// ---- diffusion: requests decoded together in batches (li_dllm_batch) -------------------------

typedef struct {
    li_server *s;
    sreq *r;
    const int32_t *ids;  // (n_ids) prompt, the request's
    int n_ids;
    li_dllm_params p;
    int32_t *out;  // (p.gen_length) generated canvas
    int n_use;     // generated tokens returned (max_tokens may cut the canvas)
    int n_streamed;   // committed prefix already turned into text
    size_t n_text;    // bytes of that text given to the request
    int q;            // index in its batch
    bool finished;    // answered (and the engine's reference dropped)
} dllm_job;

// A diffusion batch in progress (li_dllm_batch): its requests' jobs, decoded step by step.
typedef struct dllm_run {
    li_dllm_batch *b;
    dllm_job *jobs;         // (n)
    li_dllm_request *reqs;  // (n) the batch's view of the jobs
    int n, n_live;          // requests; those not finished
} dllm_run;

// Appends the text of tokens gen[0, n) beyond what j already gave (engine thread).
static void dllm_push_text(dllm_job *j, const int32_t *gen, int n) {
    char *text = NULL;
    if (li_dllm_detokenize(j->s->m, gen, n, &text) != LI_OK) return;
    size_t len = strlen(text);
    if (len > j->n_text) {
        pthread_mutex_lock(&j->s->mu);
        if (j->r->t_first == 0) j->r->t_first = now_ms();
        if (!j->r->ch[0].stopped) append_text_locked(&j->r->ch[0], text + j->n_text, len - j->n_text);
        pthread_cond_broadcast(&j->r->cv);
        pthread_mutex_unlock(&j->s->mu);
        j->n_text = len;
    }
    free(text);
}

// After every denoising step: stream the committed prefix (tokens before the first mask; SAR
// never changes a committed token, so the text only grows).
static void dllm_on_step(void *user, const li_dllm_step *ev) {
    dllm_job *j = user;
    int limit = j->n_use < ev->gen_length ? j->n_use : ev->gen_length, n = 0;
    while (n < limit && ev->gen[n] != ev->mask_id) n++;
    if (n <= j->n_streamed) return;
    dllm_push_text(j, ev->gen, n);
    j->n_streamed = n;
}

// The options a batch must share (li_dllm_batch_begin): LaCache bits and FP8.
static unsigned dllm_lacache(const li_api_request *a) {
    return a->lacache >= 0 ? (unsigned)a->lacache : LI_DLLM_LACACHE_ALL;  // exact: on by default
}

static bool dllm_same_batch(const li_api_request *a, const li_api_request *b) {
    return dllm_lacache(a) == dllm_lacache(b) && (a->fp8 == 1) == (b->fp8 == 1);
}

// The decoding parameters of a request (the seed and callbacks aside): the fields given, else
// gen_length from max_tokens rounded up to a block (128 without either), block_length 32 or
// gen_length when smaller, steps = gen_length.
static void dllm_params_of(const li_api_request *a, li_dllm_params *p) {
    *p = li_dllm_default_params();
    p->lacache = dllm_lacache(a);
    if (a->block_length > 0) p->block_length = a->block_length;
    if (a->gen_length > 0) {
        p->gen_length = a->gen_length;
    } else if (a->max_tokens > 0) {
        if (a->block_length <= 0 && a->max_tokens < p->block_length) p->block_length = a->max_tokens;
        p->gen_length = (a->max_tokens + p->block_length - 1) / p->block_length * p->block_length;
    }
    if (a->gen_length > 0 && a->block_length <= 0 && p->gen_length < p->block_length)
        p->block_length = p->gen_length;
    p->steps = a->steps > 0 ? a->steps : p->gen_length;
    if (a->threshold > 0) p->threshold = a->threshold;
    if (a->factor > 0) p->factor = a->factor;
    if (a->dpad >= 0) p->dpad = a->dpad;
    p->fp8 = a->fp8 == 1;
    if (a->has_temperature) p->temperature = a->temperature;
}

// Tokenises the prompt and builds the parameters; on failure the request is failed (400).
static bool dllm_prepare(li_server *s, sreq *r, dllm_job *j) {
    const li_api_request *a = &r->api;
    memset(j, 0, sizeof *j);
    j->s = s;
    j->r = r;
    j->ids = r->ids;  // the request's (prepare_prompt)
    j->n_ids = r->n_ids;
    li_dllm_params *p = &j->p;
    dllm_params_of(a, p);
    p->seed = r->seed;
    p->on_step = dllm_on_step;
    p->user = j;
    j->n_use = a->max_tokens > 0 && a->max_tokens < p->gen_length ? a->max_tokens : p->gen_length;
    li_status rc = li_dllm_check_params(p);
    if (rc == LI_OK) {
        j->out = malloc((size_t)p->gen_length * sizeof *j->out);
        if (!j->out) rc = li_error_set(LI_ERR_OOM, "out of memory");
    }
    if (rc != LI_OK) {
        fail_request(s, r, rc, li_last_error());
        return false;
    }
    pthread_mutex_lock(&s->mu);  // parameters are valid: a stream may send its headers now
    r->state = SR_SUBMITTED;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&s->mu);
    return true;
}

// Turns the decoded canvas into the answer (rc: how decoding went, LI_OK with r->cancelled: the
// client left and the batch dropped it); frees the job's buffers and the engine's reference.
static void dllm_finish(li_server *s, dllm_job *j, li_status rc, const char *msg) {
    sreq *r = j->r;
    int n_use = j->n_use, n_gen = n_use;
    pthread_mutex_lock(&s->mu);
    bool cancelled = r->cancelled;
    pthread_mutex_unlock(&s->mu);
    if (rc == LI_OK && !cancelled) {
        int32_t mask, eos, eot;
        li_dllm_special_tokens(s->m, &mask, &eos, &eot);
        for (int i = 0; i < n_use; i++)
            if (j->out[i] == eos || j->out[i] == eot) {
                n_gen = i;
                break;
            }
        dllm_push_text(j, j->out, n_use);  // the rest of the text (all of it without streaming)
    }
    if (rc != LI_OK) {
        fail_request(s, r, rc, msg);
    } else {
        if (!cancelled) li_metrics_tokens(&s->mx, n_gen);
        pthread_mutex_lock(&s->mu);
        if (r->t_first == 0 && !cancelled) r->t_first = now_ms();
        r->n_prompt = j->n_ids;
        r->ch[0].n_generated = cancelled ? 0 : n_gen;
        r->ch[0].length = !r->ch[0].stopped && n_gen == n_use;
        done_locked(s, r);
        pthread_mutex_unlock(&s->mu);
    }
    free(j->out);
    j->out = NULL;
    j->finished = true;
    sreq_unref(s, r);
}

static void dllm_run_free(dllm_run *run) {
    li_dllm_batch_free(run->b);
    free(run->jobs);
    free(run->reqs);
}

// Starts a batch of the jobs jobs[0..n) (prepared; the run takes them): on success it joins
// s->runs and takes its turns from the next step on.
static li_status dllm_run_start(li_server *s, dllm_job *jobs, int n) {
    dllm_run run = {.jobs = jobs, .n = n, .n_live = n};
    run.reqs = calloc((size_t)n, sizeof *run.reqs);
    if (!run.reqs) return li_error_set(LI_ERR_OOM, "out of memory");
    for (int i = 0; i < n; i++) {
        jobs[i].q = i;
        run.reqs[i] = (li_dllm_request){.prompt = jobs[i].ids, .n_prompt = jobs[i].n_ids,
                                        .params = jobs[i].p, .out = jobs[i].out};
    }
    li_status rc = li_dllm_batch_begin(s->m, run.reqs, n, &run.b);
    if (rc != LI_OK) {
        free(run.reqs);
        return rc;
    }
    s->runs[s->n_runs++] = run;
    s->n_dllm += n;
    if (n > 1) li_metrics_dllm_batch(&s->mx, n);
    return LI_OK;
}

// Prepares the requests rs[0..n) (same LaCache/FP8 options) and starts them as one batch; each
// commits exactly the tokens it would alone. If the batch cannot start (one request's canvas too
// large for the memory left), each starts alone so one cannot sink the rest.
static void dllm_start(li_server *s, sreq **rs, int n) {
    dllm_job *jobs = calloc((size_t)n, sizeof *jobs);
    if (!jobs) {
        for (int i = 0; i < n; i++) {
            fail_request(s, rs[i], LI_ERR_OOM, "out of memory");
            sreq_unref(s, rs[i]);
        }
        return;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (dllm_prepare(s, rs[i], &jobs[k])) k++;
        else sreq_unref(s, rs[i]);
    }
    if (k == 0) {
        free(jobs);
        return;
    }
    li_status rc = dllm_run_start(s, jobs, k);
    if (rc == LI_OK) return;  // the run owns jobs now
    char msg[256];
    snprintf(msg, sizeof msg, "%s", li_last_error());
    if (k > 1) LI_WARN("serve: a diffusion batch of %d cannot start (%s); starting them one by one",
                       k, msg);
    for (int i = 0; i < k; i++) {
        dllm_job *one = k > 1 ? malloc(sizeof *one) : NULL;
        if (one) {
            *one = jobs[i];
            one->p.user = one;  // the step callback's
            if ((rc = dllm_run_start(s, one, 1)) == LI_OK) continue;
            snprintf(msg, sizeof msg, "%s", li_last_error());
            jobs[i] = *one;
            free(one);
        } else if (k > 1) {
            rc = LI_ERR_OOM;
            snprintf(msg, sizeof msg, "out of memory");
        }
        dllm_finish(s, &jobs[i], rc, msg);
    }
    free(jobs);
}

// Ends every live request of run (rc != LI_OK: failed with msg; else: the client left).
static void dllm_run_end(li_server *s, dllm_run *run, li_status rc, const char *msg) {
    for (int q = 0; q < run->n; q++)
        if (!run->jobs[q].finished) {
            li_dllm_batch_cancel(run->b, q);
            dllm_finish(s, &run->jobs[q], rc, msg);
        }
    run->n_live = 0;
}

// Drops finished runs from s->runs, keeping the order of the others.
static void dllm_runs_compact(li_server *s) {
    int w = 0;
    for (int i = 0; i < s->n_runs; i++) {
        if (s->runs[i].n_live > 0) {
            s->runs[w++] = s->runs[i];
        } else {
            if (i < s->rr) s->rr--;
            dllm_run_free(&s->runs[i]);
        }
    }
    s->n_runs = w;
    if (s->rr >= s->n_runs) s->rr = 0;
}

// One turn of the diffusion engine: requests whose client left are dropped from their batch
// (between steps: a batch whose clients all left stops at once), then the next batch in turn
// takes one step. Batches alternate step by step, so a long request cannot starve short ones.
static void dllm_turn(li_server *s) {
    for (int i = 0; i < s->n_runs; i++) {
        dllm_run *run = &s->runs[i];
        for (int q = 0; q < run->n; q++) {
            if (run->jobs[q].finished) continue;
            pthread_mutex_lock(&s->mu);
            bool gone = run->jobs[q].r->cancelled;
            pthread_mutex_unlock(&s->mu);
            if (!gone) continue;
            li_dllm_batch_cancel(run->b, q);
            dllm_finish(s, &run->jobs[q], LI_OK, "");
            run->n_live--;
            s->n_dllm--;
        }
    }
    dllm_runs_compact(s);
    if (s->n_runs == 0) return;
    dllm_run *run = &s->runs[s->rr];
    int left = 0;
    li_status rc = li_dllm_batch_step(run->b, &left);
    if (rc != LI_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", li_last_error());
        LI_WARN("serve: diffusion step failed: %s", msg);
        s->n_dllm -= run->n_live;
        dllm_run_end(s, run, rc, msg);
    } else {
        for (int q = 0; q < run->n; q++)
            if (!run->jobs[q].finished && li_dllm_batch_done(run->b, q)) {
                dllm_finish(s, &run->jobs[q], LI_OK, "");
                run->n_live--;
                s->n_dllm--;
            }
    }
    s->rr++;
    dllm_runs_compact(s);
}

// Collects the choices the last step finished.
static void collect(li_server *s) {
    for (int i = 0; i < s->n_active;) {
        choice *c = s->active[i];
        sreq *r = c->r;
        li_request_result res;
        if (li_result(s->m, c->engine_id, &res) != LI_OK) {
            i++;
            continue;
        }
        pthread_mutex_lock(&s->mu);
        r->n_prompt = res.n_prompt;
        r->n_cached = res.n_cached_tokens;
        c->n_generated = res.n_generated;
        c->length = !c->stopped && res.n_generated >= r->n_predict;
        if (res.status != LI_OK) fail_locked(s, r, res.status, res.error);
        else choice_done_locked(s, c);
        pthread_mutex_unlock(&s->mu);
        sreq_unref(s, r);
        s->active[i] = s->active[--s->n_active];
    }
}

static void snapshot(li_server *s) {
    li_cache_stats cs;
    li_get_cache_stats(s->m, &cs);
    pthread_mutex_lock(&s->mu);
    int waiting = s->n_queued;
    pthread_mutex_unlock(&s->mu);
    li_metrics_engine(&s->mx, &cs, s->dllm ? s->n_dllm : s->n_active, waiting);
}

static void *engine_main(void *arg) {
    li_server *s = arg;
    snapshot(s);
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        while (!s->stopping && s->n_active == 0 && s->n_runs == 0 && !s->queue)
            pthread_cond_wait(&s->engine_cv, &s->mu);
        if (s->stopping) break;
        // take what fits: the scheduler admits at most max_running at once; later ones wait
        // here, where a client that leaves costs nothing
        int room = s->p.max_running - (s->dllm ? s->n_dllm : s->n_active);
        sreq *take = NULL, **tail = &take, *first = NULL;
        while (s->queue && room > 0) {
            sreq *r = s->queue;
            if (!r->cancelled && r->n_ch > room) break;  // n choices run together
            // diffusion: one batch shares LaCache/FP8 options; stop at the first that differs
            if (s->dllm && first && !r->cancelled && !dllm_same_batch(&first->api, &r->api)) break;
            s->queue = r->next;
            if (!s->queue) s->queue_tail = NULL;
            s->n_queued--;
            r->next = NULL;
            if (r->cancelled) {
                done_locked(s, r);
                r->next = NULL;
                *tail = r;  // dropped below (unref outside the lock)
                tail = &r->next;
                continue;
            }
            *tail = r;
            tail = &r->next;
            room -= r->n_ch;
            if (!first) first = r;
        }
        pthread_mutex_unlock(&s->mu);
        if (s->dllm) {
            sreq *batch[256];
            int nb = 0;
            for (sreq *r = take; r && nb < 256; r = r->next)
                if (r->state != SR_DONE) batch[nb++] = r;
            for (sreq *r = take, *next; r; r = next) {
                next = r->next;
                r->next = NULL;
                if (r->state == SR_DONE) sreq_unref(s, r);  // cancelled before it ran
            }
            if (nb) dllm_start(s, batch, nb);  // the runs hold the engine's references now
            take = NULL;
            dllm_turn(s);
        }
        for (sreq *r = take, *next; r; r = next) {
            next = r->next;
            r->next = NULL;
            if (r->state == SR_DONE) {  // cancelled before it ran
                sreq_unref(s, r);
            } else {  // the engine's reference, one per choice, moves to s->active
                pthread_mutex_lock(&s->mu);
                r->refs += r->n_ch - 1;
                pthread_mutex_unlock(&s->mu);
                submit(s, r);
            }
        }
        if (s->n_active > 0) {
            // clients that left: their sequences and pages go back now, not at their next token
            pthread_mutex_lock(&s->mu);
            for (int i = 0; i < s->n_active; i++)
                if (s->active[i]->r->cancelled) li_cancel(s->m, s->active[i]->engine_id);
            pthread_mutex_unlock(&s->mu);
            int left = 0;
            li_status rc = li_step(s->m, &left);
            if (rc != LI_OK) {
                // the step failed as a whole: fail every running request; each finishes inside
                // the scheduler at its next token (on_token sees the cancel) and is collected then
                LI_WARN("serve: engine step failed: %s", li_last_error());
                char msg[300];
                snprintf(msg, sizeof msg, "engine step failed: %s", li_last_error());
                pthread_mutex_lock(&s->mu);
                for (int i = 0; i < s->n_active; i++) {
                    s->active[i]->r->cancelled = true;
                    fail_locked(s, s->active[i]->r, LI_ERR_BACKEND, msg);
                }
                pthread_mutex_unlock(&s->mu);
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            collect(s);
        }
        snapshot(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    // the drain is over: what still runs is cut between two steps (503; a stream gets an error
    // event and [DONE]) and gives its sequence and pages back
    for (int i = 0; i < s->n_runs; i++)
        dllm_run_end(s, &s->runs[i], LI_ERR_BACKEND, "the server is shutting down");
    s->n_dllm = 0;
    dllm_runs_compact(s);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_active; i++) {
        li_cancel(s->m, s->active[i]->engine_id);
        fail_locked(s, s->active[i]->r, LI_ERR_BACKEND, "the server is shutting down");
    }
    pthread_mutex_unlock(&s->mu);
    collect(s);
    return NULL;
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
// of the tokens that start before `to` from index *lp_from on (advanced past them).
static li_api_choice api_choice(const choice *c, size_t from, size_t to, char **text, int *lp_from) {
    li_api_choice a = {.index = c->index, .logprobs = c->r->api.logprobs, .first = !c->sent_first};
    *text = li_api_utf8_sanitize(c->text.data ? c->text.data + from : "", to - from, NULL);
    a.text = *text;
    int k = *lp_from;
    while (k < c->n_lp && c->lp[k].offset < to) k++;
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
        if (c->safe > c->sent) {
            char *t;
            li_api_choice a = api_choice(c, c->sent, c->safe, &t, &c->lp_sent);
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
    sreq_unref(r->srv, r);
}

static bool auth_ok(li_server *s, struct MHD_Connection *c) {
    if (!s->api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
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
                  s->m->n_ctx, li_cache_mode_name(s->m->cache_mode), one ? "" : "]}");
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
    if (rc != LI_OK) return error_of(e, rc, li_last_error());
    int n = r->tok ? li_request_tokens_count(r->tok) : r->n_ids, n_ctx = s->m->n_ctx;
    int V = li_model_hparams(s->m)->n_vocab;
    for (int i = 0; i < r->n_ids; i++)
        if (r->ids[i] < 0 || r->ids[i] >= V)
            return li_api_error_set(e, 400, "invalid_request_error", "prompt", NULL,
                                    "prompt token %d is outside the vocabulary [0, %d)", r->ids[i], V);
    if (s->dllm) {
        li_dllm_params p;
        dllm_params_of(a, &p);
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
                    : a->steps > 0 ? "steps" : a->threshold > 0 ? "threshold"
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
    dllm_params_of(a, &p);
    const char *param = a->gen_length > 0 ? "gen_length" : "max_tokens";
    if (p.gen_length > s->p.max_gen)
        return li_api_error_set(e, 400, "invalid_request_error", param, NULL,
                                "gen_length is %d; this server generates at most %d tokens per "
                                "request (--max-gen)", p.gen_length, s->p.max_gen);
    if (p.gen_length > s->m->n_ctx)
        return li_api_error_set(e, 400, "invalid_request_error", param, "context_length_exceeded",
                                "gen_length %d exceeds the context of %d tokens (-c)",
                                p.gen_length, s->m->n_ctx);
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
        sreq_free(r);
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
        chs[i] = api_choice(&r->ch[i], 0, r->ch[i].text.len, &texts[i], &from);
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

// POST /tokenize (llama-server's shape; the connection thread tokenises: the tokenizer is
// read-only).
static enum MHD_Result handle_tokenize(li_server *s, struct MHD_Connection *c, conn_ctx *x) {
    li_api_error e;
    li_api_tokenize t;
    if (!li_api_parse_tokenize(x->body.data ? x->body.data : "", x->body.len, &t, &e))
        return send_error(c, x, &e);
    int32_t *ids = NULL;
    int n = 0;
    li_status rc = li_tokenize(s->m, t.content, t.len, t.add_special, t.parse_special, &ids, &n);
    free(t.content);
    if (rc != LI_OK) {
        error_of(&e, rc, li_last_error());
        return send_error(c, x, &e);
    }
    char **texts = t.with_pieces ? calloc((size_t)n + 1, sizeof *texts) : NULL;
    size_t *lens = t.with_pieces ? calloc((size_t)n + 1, sizeof *lens) : NULL;
    li_buf piece = {0};
    bool ok = !t.with_pieces || (texts && lens);
    for (int i = 0; ok && t.with_pieces && i < n; i++) {
        piece.len = 0;
        ok = li_tokenizer_decode_token(s->m->tok, ids[i], &piece) == LI_OK &&
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
    int V = li_model_hparams(s->m)->n_vocab;
    for (int i = 0; i < n && rc == LI_OK; i++)
        rc = ids[i] < V ? li_tokenizer_decode_token(s->m->tok, ids[i], &b)
                        : li_error_set(LI_ERR_INVALID_ARG, "token %d is outside the vocabulary "
                                       "[0, %d)", ids[i], V);
    free(ids);
    if (rc != LI_OK) {
        li_buf_free(&b);
        error_of(&e, rc, li_last_error());
        e.status = rc == LI_ERR_OOM ? 500 : 400;
        snprintf(e.param, sizeof e.param, "tokens");
        return send_error(c, x, &e);
    }
    char *body = li_api_detokenize_json(b.data ? b.data : "", b.len);
    li_buf_free(&b);
    return send_json(c, x, 200, body);
}

// The connection's guard entry (conn.h), set when it opened.
static li_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

// What the headers alone decide, answered before any byte of the body is read (a client without
// the key, with a body over the limit or of another type costs no memory): route, method, API key,
// Content-Length, Content-Type. Returns true with *ret set when it answered.
static bool answer_from_headers(li_server *s, struct MHD_Connection *c, conn_ctx *x,
                                const char *url, const char *method, enum MHD_Result *ret) {
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

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
    li_server *s = cls;
    conn_ctx *x = *con_cls;
    (void)version;
    if (!x) {  // the headers are in
        x = calloc(1, sizeof *x);
        if (!x) return MHD_NO;
        x->srv = s;
        x->t0 = now_ms();
        snprintf(x->method, sizeof x->method, "%s", method);
        snprintf(x->url, sizeof x->url, "%s", url);
        x->endpoint = !strcmp(url, "/v1/completions") ? 0 : !strcmp(url, "/v1/chat/completions") ? 1
                      : !strcmp(url, "/tokenize") ? 3 : !strcmp(url, "/detokenize") ? 4 : 2;
        *con_cls = x;
        enum MHD_Result ret;
        if (answer_from_headers(s, c, x, url, method, &ret)) return ret;
        li_conn_set_phase(s->guard, conn_of(c), strcmp(method, "POST") ? LI_CONN_BUSY : LI_CONN_BODY);
        return MHD_YES;
    }
    if (*upload_size) {
        if (x->body.len + *upload_size > s->p.max_body_bytes) x->too_big = true;
        if (!x->too_big && li_buf_append(&x->body, upload, *upload_size) != LI_OK) x->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    li_conn_set_phase(s->guard, conn_of(c), LI_CONN_BUSY);
    // answering may take long (the engine, a stream): libmicrohttpd's inactivity timeout waits
    // (refreshed before each write, refresh_timeout)
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
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
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    li_server *s = cls;
    (void)uri;
    li_conn_set_phase(s->guard, conn_of(c), LI_CONN_HEADERS);
    return NULL;
}

// libmicrohttpd: a connection opened or closed (the guard's list).
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    li_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? li_conn_open(s->guard, ci->connect_fd) : NULL;
    } else {
        li_conn_close(s->guard, *socket_context);
        *socket_context = NULL;
    }
}

// One log line per request, metrics, and the cancel of a stream whose client went away.
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    li_server *s = cls;
    conn_ctx *x = *con_cls;
    li_conn_set_phase(s->guard, conn_of(c), LI_CONN_IDLE);  // kept alive: the next request's wait
    if (!x) return;
    double t = now_ms();
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
        sreq_unref(s, r);
    }
    if (x->status) {
        li_metrics_request(&s->mx, x->endpoint, cancelled ? 499 : x->status,
                           ttft >= 0 ? ttft / 1e3 : -1, (t - x->t0) / 1e3, n_prompt, n_gen);
        if (!s->p.quiet && x->r)
            fprintf(stderr, "serve: %s %s %d%s %.1f ms, ttft %.1f ms, prompt %d, generated %d%s\n",
                    x->method, x->url, x->status, cancelled ? " (client gone)" : "", t - x->t0,
                    ttft >= 0 ? ttft : 0.0, n_prompt, n_gen, x->stream ? ", stream" : "");
        else if (!s->p.quiet)
            fprintf(stderr, "serve: %s %s %d %.1f ms\n", x->method, x->url, x->status, t - x->t0);
    } else if (x->r && !s->p.quiet) {
        fprintf(stderr, "serve: %s %s client gone before the answer after %.1f ms\n", x->method,
                x->url, t - x->t0);
    }
    li_buf_free(&x->body);
    free(x);
    *con_cls = NULL;
}

// ---- lifetime --------------------------------------------------------------------------------

// Binds and listens on host:port (0: any free port, *port gets the one bound). SO_REUSEADDR, so
// that a restart rebinds a port whose old connections linger in TIME_WAIT; SO_REUSEPORT only
// when asked: without it a second server on a port in use fails here, where it used to start
// and silently take half the clients.
static li_status listen_socket(const char *host, int port, bool reuse_port, int *out_fd,
                               int *family, int *bound_port) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int gai = getaddrinfo(host, service, &hints, &ai);
    if (gai != 0)
        return li_error_set(LI_ERR_INVALID_ARG, "serve: cannot resolve host '%s': %s", host,
                            gai_strerror(gai));
    li_status rc = LI_OK;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) {
        rc = li_error_set(LI_ERR_IO, "serve: socket: %s", strerror(errno));
        goto out;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
        rc = li_error_set(LI_ERR_UNSUPPORTED, "serve: --reuse-port: %s", strerror(errno));
        goto out;
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        int err = errno;
        rc = li_error_set(LI_ERR_IO, "serve: cannot listen on %s port %d: %s%s", host, port,
                          strerror(err), err == EADDRINUSE ? " (another server has it; "
                          "--reuse-port shares a port on purpose)" : "");
        goto out;
    }
    if (listen(fd, SOMAXCONN) != 0) {
        rc = li_error_set(LI_ERR_IO, "serve: listen on %s port %d: %s", host, port, strerror(errno));
        goto out;
    }
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    *bound_port = port;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        *bound_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                     : ((struct sockaddr_in *)&sa)->sin_port);
    *family = ai->ai_family;
    *out_fd = fd;
    fd = -1;
out:
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return rc;
}

li_server_params li_server_default_params(void) {
    return (li_server_params){.host = "127.0.0.1", .port = 8080, .max_running = 8, .max_queue = 256,
                              .default_max_tokens = 256, .max_gen = LI_SERVER_DEFAULT_MAX_GEN,
                              .max_body_bytes = 16u << 20, .idle_timeout_s = 30,
                              .header_timeout_s = 10, .body_timeout_s = 60, .drain_timeout_s = 30,
                              .max_connections = 4096, .max_connections_per_client = 256};
}

li_status li_server_start(li_server **out, li_model *m, const li_server_params *p) {
    *out = NULL;
    li_server *s = calloc(1, sizeof *s);
    if (!s) return li_error_set(LI_ERR_OOM, "out of memory");
    s->m = m;
    s->p = *p;
    if (!s->p.host) s->p.host = "127.0.0.1";
    if (s->p.max_running < 1) s->p.max_running = 1;
    if (s->p.max_queue < s->p.max_running) s->p.max_queue = s->p.max_running;
    if (s->p.max_gen < 1) s->p.max_gen = LI_SERVER_DEFAULT_MAX_GEN;
    if (s->p.default_max_tokens < 1) s->p.default_max_tokens = 256;
    if (s->p.default_max_tokens > s->p.max_gen) s->p.default_max_tokens = s->p.max_gen;
    if (!s->p.max_body_bytes) s->p.max_body_bytes = 16u << 20;
    snprintf(s->model_id, sizeof s->model_id, "%s", p->model_id ? p->model_id : "lazyinfer");
    snprintf(s->model_path, sizeof s->model_path, "%s", p->model_path ? p->model_path : s->model_id);
    snprintf(s->api_key, sizeof s->api_key, "%s", p->api_key ? p->api_key : "");
    s->p.host = NULL;  // borrowed strings are copied above or used only here
    s->p.model_id = s->p.model_path = s->p.api_key = NULL;
    li_server_params d = li_server_default_params();
    if (!s->p.idle_timeout_s) s->p.idle_timeout_s = d.idle_timeout_s;
    if (!s->p.header_timeout_s) s->p.header_timeout_s = d.header_timeout_s;
    if (!s->p.body_timeout_s) s->p.body_timeout_s = d.body_timeout_s;
    if (!s->p.max_connections) s->p.max_connections = d.max_connections;
    // A connection is a descriptor: stay below the process's limit. libmicrohttpd's own limit
    // is twice ours, so that connections the guard shut and it has not closed yet never keep a
    // new client out (the guard counts connections open and not shut, conn.h).
    unsigned fd_room = 1u << 20;
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
        fd_room = nofile.rlim_cur > 128 ? (unsigned)nofile.rlim_cur - 64 : 64;
    if (s->p.max_connections > fd_room) {
        LI_WARN("serve: %u connections need more file descriptors than the limit of %u "
                "(ulimit -n): at most %u", s->p.max_connections, fd_room + 64, fd_room);
        s->p.max_connections = fd_room;
    }
    unsigned mhd_limit = s->p.max_connections * 2 < fd_room ? s->p.max_connections * 2 : fd_room;
    s->dllm = m->llada != NULL;
    if (!s->dllm && !m->sched) {
        free(s);
        return li_error_set(LI_ERR_INVALID_ARG, "serve: the model was loaded without a scheduler");
    }
    if (!s->dllm && li_vocab_init(&s->vocab, m) != LI_OK) {
        free(s);
        return li_error_set(LI_ERR_OOM, "serve: out of memory for the vocabulary");
    }
    s->active = calloc((size_t)s->p.max_running, sizeof *s->active);
    s->runs = calloc((size_t)s->p.max_running, sizeof *s->runs);
    if (!s->active || !s->runs) {
        free(s->active);
        free(s->runs);
        li_vocab_free(&s->vocab);
        free(s);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->engine_cv, NULL);
    pthread_cond_init(&s->drain_cv, NULL);
    li_metrics_init(&s->mx);
    s->mx.model = s->m;
    unsigned reserve = s->p.max_connections / 16 > 0 ? s->p.max_connections / 16 : 1;
    li_conn_limits lim = {.idle_s = s->p.idle_timeout_s, .header_s = s->p.header_timeout_s,
                          .body_s = s->p.body_timeout_s, .max_open = (int)s->p.max_connections,
                          .shed_at = (int)(s->p.max_connections > reserve
                                               ? s->p.max_connections - reserve : 1)};
    li_status rc = li_conn_guard_start(&s->guard, &lim);
    if (rc != LI_OK) goto fail;

    const char *host = p->host ? p->host : "127.0.0.1";
    int lfd = -1, family = AF_INET;
    if ((rc = listen_socket(host, p->port, p->reuse_port, &lfd, &family, &s->port)) != LI_OK)
        goto fail;
    // ITC: a connection thread that ends wakes the listening thread, which frees its slot at once
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (family == AF_INET6) flags |= MHD_USE_IPv6;
    if (pthread_create(&s->engine, NULL, engine_main, s) != 0) {
        close(lfd);
        rc = li_error_set(LI_ERR_BACKEND, "serve: cannot start the engine thread");
        goto fail;
    }
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s, MHD_OPTION_LISTEN_SOCKET, lfd,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                                 MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->p.max_connections_per_client,
                                 MHD_OPTION_CONNECTION_TIMEOUT, s->p.idle_timeout_s, MHD_OPTION_END);
    if (!s->daemon) {
        close(lfd);
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_signal(&s->engine_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->engine, NULL);
        rc = li_error_set(LI_ERR_IO, "serve: cannot start the HTTP daemon on %s:%d", host, s->port);
        goto fail;
    }
    *out = s;
    return LI_OK;
fail:
    li_conn_guard_stop(s->guard);
    li_metrics_free(&s->mx);
    pthread_cond_destroy(&s->drain_cv);
    pthread_cond_destroy(&s->engine_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->active);
    free(s->runs);
    li_vocab_free(&s->vocab);
    free(s);
    return rc;
}

int li_server_port(const li_server *s) {
    return s->port;
}

// Waits on drain_cv (s->mu held) until done(s), hurry, or `ms` milliseconds have passed.
static void drain_wait(li_server *s, bool (*done)(const li_server *), double ms) {
    double end = now_ms() + ms;
    while (!done(s) && !s->hurry && now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->drain_cv, &s->mu, &ts);
    }
}

static bool nothing_running(const li_server *s) { return s->n_accepted == 0; }
static bool nothing_held(const li_server *s) { return s->n_sreqs == 0; }

void li_server_hurry(li_server *s) {
    pthread_mutex_lock(&s->mu);
    s->hurry = true;
    pthread_cond_broadcast(&s->drain_cv);
    pthread_mutex_unlock(&s->mu);
}

void li_server_stop(li_server *s) {
    if (!s) return;
    // 1. no new connection (the listening socket closes); a request on an open one gets 503
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    // 2. queued requests, not started: 503 now
    sreq *q = s->queue;
    s->queue = s->queue_tail = NULL;
    s->n_queued = 0;
    for (sreq *r = q; r; r = r->next) fail_locked(s, r, LI_ERR_BACKEND, "");
    pthread_mutex_unlock(&s->mu);
    for (sreq *r = q, *next; r; r = next) {
        next = r->next;
        sreq_unref(s, r);
    }
    // 3. running requests finish within the drain deadline; then the engine cuts the rest
    pthread_mutex_lock(&s->mu);
    drain_wait(s, nothing_running, s->p.drain_timeout_s * 1e3);
    s->stopping = true;
    pthread_cond_signal(&s->engine_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->engine, NULL);
    // 4. connection threads send their last bytes (answers, a stream's error event and [DONE]);
    // a client that does not read them is not waited for long
    pthread_mutex_lock(&s->mu);
    s->hurry = false;
    drain_wait(s, nothing_held, 5000);
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->daemon);
    li_conn_guard_stop(s->guard);
    li_metrics_free(&s->mx);
    pthread_cond_destroy(&s->drain_cv);
    pthread_cond_destroy(&s->engine_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->active);
    free(s->runs);
    li_vocab_free(&s->vocab);
    free(s);
}
