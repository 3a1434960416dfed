// conn.c — the connection guard (conn.h): a list of open connections with phase deadlines, a
// thread that shuts the sockets past theirs, shedding of idle connections under pressure, and
// the per-client count. One mutex guards the list; the thread scans it (a few thousand entries at
// most) ten times a second, and a new connection or request of a capped client counts its
// client's entries in one pass: microseconds either way. Tested by tests/test_server_robust.py.
#include "conn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

struct li_conn {
    int fd;
    li_conn_phase phase;
    double deadline;  // li_time_ms; 0: none
    bool shut;        // shutdown(2) done, waiting for the server to close it
    bool proxied;     // a trusted proxy's: `client` is its current request's, "" between them
    char client[LI_CONN_ADDR_LEN];  // the address it counts for; "": none
    li_conn *prev, *next;
};

struct li_conn_guard {
    li_conn_limits lim;
    pthread_mutex_t mu;
    pthread_cond_t cv;  // CLOCK_MONOTONIC: wakes the thread to stop
    bool stop;
    pthread_t thread;
    li_conn *head;
    int n_open, n_shut;  // open; of those, shut and not closed yet
    int64_t n_timed_out, n_shed;
    int64_t n_full, n_over_cap;  // refused: server full; a client over its cap
    int64_t n_logged;            // refusals already in a log line
    double next_log;             // li_time_ms before which no refusal is logged
};

#define SCAN_MS 100  // how often deadlines are checked: a deadline is met within 0.1 s

static double phase_limit_ms(const li_conn_guard *g, li_conn_phase p) {
    switch (p) {
    case LI_CONN_IDLE: return g->lim.idle_s * 1e3;
    case LI_CONN_HEADERS: return g->lim.header_s * 1e3;
    case LI_CONN_BODY: return g->lim.body_s * 1e3;
    default: return 0;
    }
}

static void shut_locked(li_conn_guard *g, li_conn *c) {
    if (c->shut) return;
    c->shut = true;
    g->n_shut++;
    shutdown(c->fd, SHUT_RDWR);
}

// The IDLE or HEADERS connection nearest its deadline, other than `skip`, of `client` (NULL:
// any); NULL when there is none.
static li_conn *idle_victim(li_conn_guard *g, const li_conn *skip, const char *client) {
    li_conn *victim = NULL;
    for (li_conn *o = g->head; o; o = o->next)
        if (o != skip && !o->shut && (o->phase == LI_CONN_IDLE || o->phase == LI_CONN_HEADERS) &&
            (!client || !strcmp(o->client, client)) && (!victim || o->deadline < victim->deadline))
            victim = o;
    return victim;
}

// Whether c's client is within its cap, after shedding one of its idle connections if it was
// over (a connection is counted until it is shut).
static bool client_within_cap_locked(li_conn_guard *g, li_conn *c) {
    if (g->lim.per_client <= 0 || !c->client[0]) return true;
    int n = 0;
    for (li_conn *o = g->head; o; o = o->next) n += !o->shut && !strcmp(o->client, c->client);
    if (n <= g->lim.per_client) return true;
    li_conn *victim = idle_victim(g, c, c->client);
    if (!victim) return false;
    shut_locked(g, victim);
    g->n_shed++;
    return true;
}

// One line for the refusals not logged yet, at most every LI_CONN_LOG_S seconds (at once at the
// end: `now` <= 0).
static void log_refusals_locked(li_conn_guard *g, double now) {
    int64_t n = g->n_full + g->n_over_cap;
    if (n == g->n_logged || (now > 0 && now < g->next_log)) return;
    LI_WARN("serve: %lld connections refused since the last such line (%lld in all: %lld with the "
            "server full, %lld from clients over --max-connections-per-client)",
            (long long)(n - g->n_logged), (long long)n, (long long)g->n_full,
            (long long)g->n_over_cap);
    g->n_logged = n;
    g->next_log = now + LI_CONN_LOG_S * 1e3;
}

static void *guard_main(void *arg) {
    li_conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = li_time_ms();
        for (li_conn *c = g->head; c; c = c->next)
            if (!c->shut && c->deadline > 0 && now > c->deadline) {
                shut_locked(g, c);
                g->n_timed_out++;
            }
        log_refusals_locked(g, now);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += SCAN_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

li_status li_conn_guard_start(li_conn_guard **out, const li_conn_limits *lim) {
    *out = NULL;
    if (!(lim->idle_s > 0 && lim->header_s > 0 && lim->body_s > 0 && lim->shed_at > 0 &&
          lim->max_open >= lim->shed_at))
        return li_error_set(LI_ERR_INVALID_ARG, "connection limits must be > 0");
    li_conn_guard *g = calloc(1, sizeof *g);
    if (!g) return li_error_set(LI_ERR_OOM, "out of memory");
    g->lim = *lim;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return li_error_set(LI_ERR_BACKEND, "serve: cannot start the connection guard thread");
    }
    *out = g;
    return LI_OK;
}

void li_conn_guard_stop(li_conn_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    log_refusals_locked(g, 0);
    while (g->head) {  // the server closed every connection before; this is only a safety net
        li_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

li_conn *li_conn_open(li_conn_guard *g, int fd, const char *client) {
    li_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->phase = LI_CONN_IDLE;
    c->proxied = !client;
    snprintf(c->client, sizeof c->client, "%s", client ? client : "");
    double now = li_time_ms();
    c->deadline = now + phase_limit_ms(g, LI_CONN_IDLE);
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->n_open++;
    // over its client's cap with none of them idle: kept, its request is refused (li_conn_admit)
    client_within_cap_locked(g, c);
    if (g->n_open - g->n_shut > g->lim.shed_at) {
        // shed the idle or half-sent connection nearest its deadline (the new one never)
        li_conn *victim = idle_victim(g, c, NULL);
        if (victim) {
            shut_locked(g, victim);
            g->n_shed++;
        }
    }
    if (g->n_open - g->n_shut > g->lim.max_open) {  // every other one is busy: refuse this one
        shut_locked(g, c);
        g->n_full++;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

bool li_conn_admit(li_conn_guard *g, li_conn *c, const char *client) {
    if (!c) return true;
    pthread_mutex_lock(&g->mu);
    c->phase = LI_CONN_BUSY;
    c->deadline = 0;
    if (c->proxied) snprintf(c->client, sizeof c->client, "%s", client ? client : "");
    bool ok = client_within_cap_locked(g, c);
    if (!ok) g->n_over_cap++;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

void li_conn_close(li_conn_guard *g, li_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n_open--;
    g->n_shut -= c->shut;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void li_conn_set_phase(li_conn_guard *g, li_conn *c, li_conn_phase phase) {
    if (!c) return;
    double limit = phase_limit_ms(g, phase);
    pthread_mutex_lock(&g->mu);
    c->phase = phase;
    c->deadline = limit > 0 ? li_time_ms() + limit : 0;
    if (c->proxied && phase == LI_CONN_IDLE) c->client[0] = 0;
    pthread_mutex_unlock(&g->mu);
}

void li_conn_counts(li_conn_guard *g, int *open, int64_t *timed_out, int64_t *shed,
                    int64_t *refused) {
    pthread_mutex_lock(&g->mu);
    if (open) *open = g->n_open - g->n_shut;
    if (timed_out) *timed_out = g->n_timed_out;
    if (shed) *shed = g->n_shed;
    if (refused) *refused = g->n_full + g->n_over_cap;
    pthread_mutex_unlock(&g->mu);
}
