// server-engine.c — the engine thread of `lazyinfer serve`: it takes queued requests while fewer
// than max_running are in the engine, submits their tokens (li_submit, which tokenises nothing
// more) and loops li_step. on_token (engine thread, inside li_step) decodes the token, appends it
// to the request's text, looks for stop strings and wakes the connection thread; returning false
// when the client is gone or a stop string matched makes the scheduler finish the request at the
// end of that step, which frees its sequence and pages. After each step the engine collects
// finished requests with li_result.
// Diffusion models: the engine starts the waiting requests that share LaCache/FP8 options as one
// batch (li_dllm_batch_begin); batches take turns one denoising step each, so a long request
// cannot starve later ones, and a request whose client left is dropped between two steps.
// logit_bias, penalties, response_format's grammar and logprobs act on each choice's logits
// through the engine's on_logits hook (logits.c, json-grammar.c).
// Not here: HTTP, parsing and responses (server-http.c), start and stop (server.c).
// Tested by tests/test_server.py, test_server_api.py, test_server_robust.py.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server-internal.h"

double li_srv_now_ms(void) {
    return li_time_ms();
}

void li_sreq_free(sreq *r) {
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

void li_sreq_unref(li_server *s, sreq *r) {
    pthread_mutex_lock(&s->mu);
    int left = --r->refs;
    if (left == 0 && --s->n_sreqs == 0) pthread_cond_broadcast(&s->drain_cv);
    pthread_mutex_unlock(&s->mu);
    if (left == 0) li_sreq_free(r);
}

// ---- engine thread ---------------------------------------------------------------------------

// A choice's text is final (under s->mu): all of it may be sent. One that max_tokens cut ends
// before a character whose first bytes alone would read as one U+FFFD each (docs/SERVER.md);
// its tokens still count, in usage and logprobs, those of the dropped bytes at the text's end.
static void finish_text_locked(choice *c) {
    c->done = true;
    if (c->length) {
        c->text.len = li_api_utf8_complete_prefix(c->text.data, c->text.len);
        for (int k = 0; k < c->n_lp; k++)
            if (c->lp[k].offset > c->text.len) c->lp[k].offset = c->text.len;
    }
    c->safe = c->text.len;
}

// Marks r done (under s->mu) and wakes its connection thread.
static void done_locked(li_server *s, sreq *r) {
    if (r->state == SR_DONE) return;
    r->state = SR_DONE;
    for (int i = 0; i < r->n_ch; i++)
        if (!r->ch[i].done) finish_text_locked(&r->ch[i]);
    s->n_accepted--;
    pthread_cond_broadcast(&r->cv);
    if (s->draining) pthread_cond_broadcast(&s->drain_cv);
}

// The answer to an engine status: limits are 400 context_length_exceeded, bad input 400, the
// rest 500. Returns false (for `return li_srv_error_of(...)`).
bool li_srv_error_of(li_api_error *e, li_status st, const char *msg) {
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

void li_srv_fail_locked(li_server *s, sreq *r, li_status st, const char *msg) {
    if (s->draining)  // what shutdown cuts (queued, or past the drain deadline) is a 503
        li_api_error_set(&r->err, 503, "server_error", NULL, "overloaded",
                         "the server is shutting down; retry on another server or later");
    else
        li_srv_error_of(&r->err, st, msg);
    r->failed = true;
    done_locked(s, r);
}

static void fail_request(li_server *s, sreq *r, li_status st, const char *msg) {
    pthread_mutex_lock(&s->mu);
    li_srv_fail_locked(s, r, st, msg);
    pthread_mutex_unlock(&s->mu);
}

// A choice is finished (under s->mu); the request is done with its last choice.
static void choice_done_locked(li_server *s, choice *c) {
    if (c->done) return;
    finish_text_locked(c);
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
    bool skip = r->api.skip_special != 0 && li_token_is_special(s->m, tok);
    if (skip || li_token_to_piece(s->m, tok, small, sizeof small, &len) != LI_OK) len = 0;
    if (len > sizeof small) {
        piece = malloc(len);
        if (!piece || li_token_to_piece(s->m, tok, piece, len, &len) != LI_OK) len = 0;
    }
    bool complete = c->complete || li_logits_take(&c->proc, tok);  // the JSON document ends
    li_metrics_tokens(&s->mx, 1);
    pthread_mutex_lock(&s->mu);
    c->n_generated++;  // so far; collect sets the engine's count at the end
    bool go_on = !r->cancelled && !c->stopped;
    if (go_on) {
        if (r->t_first == 0) r->t_first = li_srv_now_ms();
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

// A request's choices in the engine at once: at most half the batch rows (one with
// --max-batch 1), so that a request of n choices never holds every row while others wait (n = 8
// on --max-batch 8 made a 4-token request sent 1 s later wait 11.4 s); its other choices start
// as those finish, each still drawn with seed + i, so the answer is the same.
static int choice_share(const li_server *s) {
    return s->p.max_running > 1 ? s->p.max_running / 2 : 1;
}

// How many more of r's choices may start with `room` free rows.
static int choices_to_start(const li_server *s, const sreq *r, int room) {
    int k = r->n_ch - r->n_started, cap = choice_share(s) - r->n_running;
    if (k > cap) k = cap;
    if (k > room) k = room;
    return k > 0 ? k : 0;
}

// Submits k more of r's choices, tokenised by prepare_prompt, to the scheduler (engine thread: no
// tokenising here); each that is submitted goes to s->active with one reference of r. On
// failure r is failed (the choices already submitted are cancelled and collected as usual, the
// engine's references of the others dropped).
static void submit(li_server *s, sreq *r, int k) {
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
    q.repair = r->repair;
    for (int end = r->n_started + k; r->n_started < end; r->n_started++) {
        choice *c = &r->ch[r->n_started];
        sp.seed = r->seed + (uint64_t)c->index;
        q.gen.sampling = sp;
        q.gen.user = c;
        li_status rc = li_submit(s->m, &q, &c->engine_id);
        if (rc != LI_OK) {
            pthread_mutex_lock(&s->mu);
            li_srv_fail_locked(s, r, rc, li_last_error());
            r->cancelled = true;  // the choices submitted stop at their next token
            pthread_mutex_unlock(&s->mu);
            for (int i = 0; i < s->n_active; i++)
                if (s->active[i]->r == r) li_cancel(s->m, s->active[i]->engine_id);
            int n_left = r->n_ch - r->n_started;
            r->n_started = r->n_ch;
            for (int i = 0; i < n_left; i++) li_sreq_unref(s, r);  // the choices not submitted
            return;
        }
        s->active[s->n_active++] = c;
        r->n_running++;
    }
    pthread_mutex_lock(&s->mu);
    if (r->state == SR_QUEUED) r->state = SR_SUBMITTED;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&s->mu);
}

// ---- diffusion: requests decoded together in batches (li_dllm_batch) -------------------------

// Appends the text of tokens gen[0, n) beyond what j already gave (engine thread).
static void dllm_push_text(dllm_job *j, const int32_t *gen, int n) {
    char *text = NULL;
    if (li_dllm_detokenize(j->s->m, gen, n, &text) != LI_OK) return;
    size_t len = strlen(text);
    if (len > j->n_text) {
        pthread_mutex_lock(&j->s->mu);
        if (j->r->t_first == 0) j->r->t_first = li_srv_now_ms();
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
void li_srv_dllm_params(const li_api_request *a, li_dllm_params *p) {
    *p = li_dllm_default_params();
    p->lacache = dllm_lacache(a);
    if (a->block_length > 0) p->block_length = a->block_length;
    if (a->sub_block_length > 0) p->sub_block_length = a->sub_block_length;
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
    if (a->confidence >= 0) p->confidence = (li_dllm_confidence)a->confidence;
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
    li_srv_dllm_params(a, p);
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
        if (r->t_first == 0 && !cancelled) r->t_first = li_srv_now_ms();
        r->n_prompt = j->n_ids;
        r->ch[0].n_generated = cancelled ? j->n_streamed : n_gen;  // committed when it left
        r->ch[0].length = !r->ch[0].stopped && n_gen == n_use;
        done_locked(s, r);
        pthread_mutex_unlock(&s->mu);
    }
    free(j->out);
    j->out = NULL;
    j->finished = true;
    li_sreq_unref(s, r);
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
            li_sreq_unref(s, rs[i]);
        }
        return;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (dllm_prepare(s, rs[i], &jobs[k])) k++;
        else li_sreq_unref(s, rs[i]);
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

// The rows that the choices waiting in s->partial take before any new request, out of `room`.
static int partial_demand(const li_server *s, int room) {
    int need = 0;
    for (int i = 0; i < s->n_partial; i++) need += choices_to_start(s, s->partial[i], room - need);
    return need;
}

// Ends the choices of r not started (r failed, or its client left) and drops the engine's
// references to them; r may be freed by the last.
static void drop_unstarted(li_server *s, sreq *r) {
    int n_left = r->n_ch - r->n_started;
    pthread_mutex_lock(&s->mu);
    for (int i = r->n_started; i < r->n_ch; i++) choice_done_locked(s, &r->ch[i]);
    pthread_mutex_unlock(&s->mu);
    r->n_started = r->n_ch;
    for (int i = 0; i < n_left; i++) li_sreq_unref(s, r);
}

// Starts more choices of the requests in s->partial, in arrival order, each up to its share of
// the free rows; a request that failed or whose client left starts no more.
static void start_partial(li_server *s) {
    int w = 0;
    for (int i = 0; i < s->n_partial; i++) {
        sreq *r = s->partial[i];
        pthread_mutex_lock(&s->mu);
        bool over = r->cancelled || r->state == SR_DONE;
        pthread_mutex_unlock(&s->mu);
        if (over) {
            drop_unstarted(s, r);
            continue;
        }
        submit(s, r, choices_to_start(s, r, s->p.max_running - s->n_active));
        if (r->n_started < r->n_ch) s->partial[w++] = r;
    }
    s->n_partial = w;
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
        r->n_running--;
        if (res.status != LI_OK) li_srv_fail_locked(s, r, res.status, res.error);
        else choice_done_locked(s, c);
        pthread_mutex_unlock(&s->mu);
        li_sreq_unref(s, r);
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

// Diffusion, nothing decoding: waits (s->mu held) until the queue holds a full batch, the server
// stops, or batch_wait_ms have passed since this call, so that requests sent together start as
// one batch rather than the first alone and the rest beside it, taking turns.
static void gather_arrivals(li_server *s) {
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);  // engine_cv's clock (default attributes)
    long ns = end.tv_nsec + (long)(s->p.batch_wait_ms % 1000) * 1000000L;
    end.tv_sec += s->p.batch_wait_ms / 1000 + ns / 1000000000L;
    end.tv_nsec = ns % 1000000000L;
    while (!s->stopping && s->n_queued < s->p.max_running &&
           pthread_cond_timedwait(&s->engine_cv, &s->mu, &end) == 0) {
    }
}

void *li_srv_engine_main(void *arg) {
    li_server *s = arg;
    snapshot(s);
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        while (!s->stopping && s->n_active == 0 && s->n_partial == 0 && s->n_runs == 0 && !s->queue)
            pthread_cond_wait(&s->engine_cv, &s->mu);
        if (s->stopping) break;
        if (s->dllm && s->n_runs == 0 && s->p.batch_wait_ms > 0) gather_arrivals(s);
        // take what fits: the scheduler admits at most max_running at once; later ones wait
        // here, where a client that leaves costs nothing. The choices of requests already
        // started come first (choice_share).
        int room = s->p.max_running - (s->dllm ? s->n_dllm : s->n_active);
        room -= partial_demand(s, room);
        sreq *take = NULL, **tail = &take, *first = NULL;
        while (s->queue && room > 0) {
            sreq *r = s->queue;
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
            room -= choices_to_start(s, r, room);
            if (!first) first = r;
        }
        pthread_mutex_unlock(&s->mu);
        if (!s->dllm) start_partial(s);
        if (s->dllm) {
            sreq *batch[256];
            int nb = 0;
            for (sreq *r = take; r && nb < 256; r = r->next)
                if (r->state != SR_DONE) batch[nb++] = r;
            for (sreq *r = take, *next; r; r = next) {
                next = r->next;
                r->next = NULL;
                if (r->state == SR_DONE) li_sreq_unref(s, r);  // cancelled before it ran
            }
            if (nb) dllm_start(s, batch, nb);  // the runs hold the engine's references now
            take = NULL;
            dllm_turn(s);
        }
        for (sreq *r = take, *next; r; r = next) {
            next = r->next;
            r->next = NULL;
            if (r->state == SR_DONE) {  // cancelled before it ran
                li_sreq_unref(s, r);
            } else {  // the engine's reference, one per choice, moves to s->active
                pthread_mutex_lock(&s->mu);
                r->refs += r->n_ch - 1;
                pthread_mutex_unlock(&s->mu);
                submit(s, r, choices_to_start(s, r, s->p.max_running - s->n_active));
                if (r->n_started < r->n_ch) {
                    LI_ASSERT(s->n_partial < s->p.max_running);
                    s->partial[s->n_partial++] = r;
                }
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
                    li_srv_fail_locked(s, s->active[i]->r, LI_ERR_BACKEND, msg);
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
        li_srv_fail_locked(s, s->active[i]->r, LI_ERR_BACKEND, "the server is shutting down");
    }
    for (int i = 0; i < s->n_partial; i++)
        li_srv_fail_locked(s, s->partial[i], LI_ERR_BACKEND, "the server is shutting down");
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_partial; i++) drop_unstarted(s, s->partial[i]);
    s->n_partial = 0;
    collect(s);
    return NULL;
}
