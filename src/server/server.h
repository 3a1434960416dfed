// server.h — the OpenAI-compatible HTTP server of `lazyinfer serve` (libmicrohttpd + jansson).
//
// Threads: libmicrohttpd runs one thread per connection; those threads parse requests
// (api.c), put them on a bounded queue and wait on the request's condition variable. ONE engine
// thread owns the li_model: between li_step calls it submits queued requests (li_submit), the
// on_token callback appends text to the request and wakes its connection thread. Diffusion models
// decode the requests waiting together as one batch; batches take turns step by step. See
// docs/SERVER.md.
// Not here: option parsing (tools/cmd-serve.c). Tested by tests/test_server.py.
#ifndef LI_SERVER_H
#define LI_SERVER_H

#include <stddef.h>

#include "lazyinfer.h"

#define LI_SERVER_DEFAULT_MAX_GEN 2048

typedef struct {
    const char *host;        // address to bind (default "127.0.0.1")
    int port;                // 0: any free port (li_server_port tells which)
    bool reuse_port;         // SO_REUSEPORT: several servers share the port (else in use: error)
    const char *api_key;     // NULL or "": no authentication
    const char *model_id;    // name served in /v1/models (also accepted: model_path)
    const char *model_path;
    int max_running;         // requests in the engine at once (the model's max_seqs)
    int max_queue;           // requests accepted (queued + running) before 503
    int default_max_tokens;  // chat requests without max_tokens (completions: 16, as OpenAI)
    int max_gen;             // tokens one request may generate (max_tokens, gen_length); 0: the
                             // default, LI_SERVER_DEFAULT_MAX_GEN
    size_t max_body_bytes;   // larger bodies: 413
    bool quiet;              // no per-request log line
    // Connections (conn.h): a connection without a request (new, or kept alive after a response)
    // and a response the client stops reading are closed after idle_timeout_s; a request's
    // headers must arrive within header_timeout_s of its request line, its body within
    // body_timeout_s of its headers.
    unsigned idle_timeout_s, header_timeout_s, body_timeout_s;
    unsigned max_connections;             // open at once (within RLIMIT_NOFILE); more: refused,
                                          // and past 15/16 of it idle ones are shed
    unsigned max_connections_per_client;  // per client address; 0: no limit. Beyond it the
                                          // client's idle connections are shed, else 503
    const char *trusted_proxy;  // NULL or the address of a reverse proxy in front: its requests
                                // count for their X-Forwarded-For client (server-http.c)
    unsigned drain_timeout_s;  // shutdown: seconds running requests have to finish (0: none)
    // Diffusion models: a batch takes no request once it runs, so when none is decoding the
    // first arrival waits up to this long for others to start with it (clients sending at once
    // arrive within milliseconds of each other; a request takes seconds). 0: start at once.
    unsigned batch_wait_ms;
    li_repair repair;  // cross-document repair of requests without a 'repair' field (zero: none)
} li_server_params;

li_server_params li_server_default_params(void);

typedef struct li_server li_server;

// Starts the HTTP daemon and the engine thread; the model stays the caller's and must outlive
// the server (li_server_stop first).
li_status li_server_start(li_server **out, li_model *m, const li_server_params *p);
int li_server_port(const li_server *s);
// Graceful shutdown: stops accepting connections, answers queued requests and new ones on open
// connections with 503, gives running requests drain_timeout_s to finish, then cuts the rest
// between two steps (503; a stream gets an error event and [DONE]), lets the connections send
// their last bytes (5 s at most), joins every thread and frees s (NULL: no-op).
void li_server_stop(li_server *s);
// Ends a li_server_stop's drain now (another thread; e.g. on a second signal).
void li_server_hurry(li_server *s);

#endif
