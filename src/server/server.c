// server.c — the lifetime of `lazyinfer serve` (server.h): the listening socket, the HTTP
// daemon and the engine thread started together, the drain and the stop. A request's path is in
// server-http.c (connection threads: parsing, routing, responses) and server-engine.c (the engine
// thread: queue, batches, token hand-off); server-internal.h holds what they share.
// Not here: HTTP handling, the engine loop, TLS (bind to localhost, or put a proxy in front),
// tools. Tested by tests/test_server.py, test_server_api.py, test_server_robust.py.
#define _GNU_SOURCE  // POLLRDHUP
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server-internal.h"

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

// What li_server_start made after the socket and threads: the guard, the metrics, the locks,
// the engine's tables, the vocabulary, s itself.
static void server_free(li_server *s) {
    li_conn_guard_stop(s->guard);
    li_metrics_free(&s->mx);
    pthread_cond_destroy(&s->drain_cv);
    pthread_cond_destroy(&s->engine_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->active);
    free(s->partial);
    free(s->runs);
    li_vocab_free(&s->vocab);
    free(s);
}

li_server_params li_server_default_params(void) {
    return (li_server_params){.host = "127.0.0.1", .port = 8080, .max_running = 8, .max_queue = 256,
                              .default_max_tokens = 256, .max_gen = LI_SERVER_DEFAULT_MAX_GEN,
                              .max_body_bytes = 16u << 20, .idle_timeout_s = 30,
                              .header_timeout_s = 10, .body_timeout_s = 60, .drain_timeout_s = 30,
                              .max_connections = 4096, .max_connections_per_client = 256,
                              .batch_wait_ms = 20};
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
    if (p->trusted_proxy && !li_srv_addr_text(p->trusted_proxy, strlen(p->trusted_proxy),
                                              s->trusted_proxy)) {
        free(s);
        return li_error_set(LI_ERR_INVALID_ARG, "serve: --trusted-proxy '%s' is not an IPv4 or "
                            "IPv6 address", p->trusted_proxy);
    }
    s->p.host = NULL;  // borrowed strings are copied above or used only here
    s->p.model_id = s->p.model_path = s->p.api_key = s->p.trusted_proxy = NULL;
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
    li_model_get_info(m, &s->info);
    s->dllm = s->info.diffusion;
    if (!s->dllm && s->info.metadata_only) {
        free(s);
        return li_error_set(LI_ERR_INVALID_ARG, "serve: the model was loaded without a scheduler");
    }
    if (!s->dllm && li_vocab_init(&s->vocab, m) != LI_OK) {
        free(s);
        return li_error_set(LI_ERR_OOM, "serve: out of memory for the vocabulary");
    }
    s->active = calloc((size_t)s->p.max_running, sizeof *s->active);
    s->partial = calloc((size_t)s->p.max_running, sizeof *s->partial);
    s->runs = calloc((size_t)s->p.max_running, sizeof *s->runs);
    if (!s->active || !s->partial || !s->runs) {
        free(s->active);
        free(s->partial);
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
                          .per_client = (int)s->p.max_connections_per_client,
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
    if (pthread_create(&s->engine, NULL, li_srv_engine_main, s) != 0) {
        close(lfd);
        rc = li_error_set(LI_ERR_BACKEND, "serve: cannot start the engine thread");
        goto fail;
    }
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, li_http_on_access, s, MHD_OPTION_LISTEN_SOCKET, lfd,
                                 MHD_OPTION_NOTIFY_COMPLETED, li_http_on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, li_http_on_connection, s,
                                 MHD_OPTION_URI_LOG_CALLBACK, li_http_on_uri, s,
                                 MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
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
    server_free(s);
    return rc;
}

int li_server_port(const li_server *s) {
    return s->port;
}

// Waits on drain_cv (s->mu held) until done(s), hurry, or `ms` milliseconds have passed.
static void drain_wait(li_server *s, bool (*done)(const li_server *), double ms) {
    double end = li_srv_now_ms() + ms;
    while (!done(s) && !s->hurry && li_srv_now_ms() < end) {
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

// Each phase of the stop says how long it took, and what it waited for, in the log: a stop that
// is slow (a test harness kills the server 10 s after SIGTERM) explains itself there.
void li_server_stop(li_server *s) {
    if (!s) return;
    double t0 = li_srv_now_ms();
    // 1. no new connection (the listening socket closes); a request on an open one gets 503
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    // 2. queued requests, not started: 503 now
    sreq *q = s->queue;
    s->queue = s->queue_tail = NULL;
    s->n_queued = 0;
    for (sreq *r = q; r; r = r->next) li_srv_fail_locked(s, r, LI_ERR_BACKEND, "");
    pthread_mutex_unlock(&s->mu);
    for (sreq *r = q, *next; r; r = next) {
        next = r->next;
        li_sreq_unref(s, r);
    }
    // 3. running requests finish within the drain deadline; then the engine cuts the rest
    pthread_mutex_lock(&s->mu);
    if (s->n_accepted > 0)
        fprintf(stderr, "serve: stopping: %d request(s) running or queued, up to %u s to finish\n",
                s->n_accepted, s->p.drain_timeout_s);
    drain_wait(s, nothing_running, s->p.drain_timeout_s * 1e3);
    int cut = s->n_accepted;
    s->stopping = true;
    pthread_cond_signal(&s->engine_cv);
    pthread_mutex_unlock(&s->mu);
    double t_drained = li_srv_now_ms();
    pthread_join(s->engine, NULL);
    double t_engine = li_srv_now_ms();
    // 4. connection threads send their last bytes (answers, a stream's error event and [DONE]);
    // a client that does not read them is not waited for long
    pthread_mutex_lock(&s->mu);
    s->hurry = false;
    if (s->n_sreqs > 0)
        fprintf(stderr, "serve: stopping: %d request(s) still sending their last bytes, up to 5 s\n",
                s->n_sreqs);
    drain_wait(s, nothing_held, 5000);
    int held = s->n_sreqs;
    pthread_mutex_unlock(&s->mu);
    double t_held = li_srv_now_ms();
    MHD_stop_daemon(s->daemon);
    double t_http = li_srv_now_ms();
    server_free(s);
    fprintf(stderr, "serve: stopped in %.0f ms: drain %.0f ms (%d cut), engine %.0f ms, last bytes "
            "%.0f ms (%d left), connections %.0f ms\n", li_srv_now_ms() - t0, t_drained - t0, cut,
            t_engine - t_drained, t_held - t_engine, held, t_http - t_held);
}
