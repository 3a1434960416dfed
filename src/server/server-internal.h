// server-internal.h — what the files of `lazyinfer serve` share: a request (sreq) and its
// choices, the server's state, the per-HTTP-request context, and the few functions one file
// calls in another. server.c: lifetime (start, drain, stop); server-http.c: the connection
// threads (parsing, routing, responses); server-engine.c: the engine thread (queue, batches,
// token hand-off to the waiting connections).
// Every sreq is reference-counted (connection context, engine, stream response); one mutex
// (srv->mu) guards every sreq field that two threads touch. Internal to src/server/.
#ifndef LI_SERVER_INTERNAL_H
#define LI_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>

#include "../core/core.h"
#include "api.h"
#include "conn.h"
#include "json-grammar.h"
#include "logits.h"
#include "metrics.h"
#include "server.h"

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
    li_repair repair;  // the request's 'repair', else the server's --repair
    uint64_t seed;  // choice i draws with seed + i
    li_json_grammar *grammar;  // response_format's, NULL: none
    choice *ch;     // (n_ch)
    int n_ch, n_ch_done;
    int n_started, n_running;  // choices given to the engine so far; running now (engine thread)
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

// A diffusion request in a batch (engine thread only).
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

struct li_server {
    li_model *m;
    li_model_info info;  // m's, read once at start
    li_server_params p;
    char model_id[256], model_path[1024], api_key[256];
    char trusted_proxy[LI_CONN_ADDR_LEN];  // normalised (li_srv_addr_text); "": none
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
    sreq **partial;            // (max_running) requests some of whose choices wait to start, in
    int n_partial;             // arrival order (engine thread only; each has a choice running or
                               // the first turn at a free row)
    dllm_run *runs;     // (max_running) diffusion batches decoding (engine thread only)
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
    bool refused;  // over the per-client cap: counted and summarised by the guard, not logged
    bool close;    // the response closes the connection
    int status;
    bool stream;
    sreq *r;
} conn_ctx;

// ---- across the files ------------------------------------------------------------------------

double li_srv_now_ms(void);  // CLOCK_MONOTONIC, milliseconds
// The text of the IP address text[0, len) (spaces around it ignored), normalised so that equal
// addresses compare equal (an IPv4-mapped IPv6 address as IPv4); false when it is none.
bool li_srv_addr_text(const char *text, size_t len, char out[LI_CONN_ADDR_LEN]);
void li_sreq_free(sreq *r);
// Drops one reference to r (s->mu held); the last frees it.
void li_sreq_unref(li_server *s, sreq *r);
// e = the API error of status st with message msg (400, 429, 500... by status); false.
bool li_srv_error_of(li_api_error *e, li_status st, const char *msg);
// r failed with st / msg (s->mu held): its choices end, its connection wakes.
void li_srv_fail_locked(li_server *s, sreq *r, li_status st, const char *msg);
// A diffusion request's decoding parameters from its API fields.
void li_srv_dllm_params(const li_api_request *a, li_dllm_params *p);
void *li_srv_engine_main(void *arg);  // the engine thread (server-engine.c)
// libmicrohttpd's callbacks (server-http.c).
enum MHD_Result li_http_on_access(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls);
void *li_http_on_uri(void *cls, const char *uri, struct MHD_Connection *c);
void li_http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode code);
void li_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe);

#endif
