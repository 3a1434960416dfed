// conn.c — the connection guard (conn.h): a list of open connections with phase deadlines, a
// thread that shuts the sockets past theirs, and shedding of idle connections under pressure.
// One mutex guards the list; the thread scans it (a few thousand entries at most) ten times a
// second, which costs microseconds. Tested by tests/test_server_robust.py.
#include "conn.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

struct li_conn {
    int fd;
    li_conn_phase phase;
    double deadline;  // li_time_ms; 0: none
    bool shut;        // shutdown(2) done, waiting for the server to close it
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
    int64_t n_timed_out, n_shed, n_refused;
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
    while (g->head) {  // the server closed every connection before; this is only a safety net
        li_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

li_conn *li_conn_open(li_conn_guard *g, int fd) {
    li_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->phase = LI_CONN_IDLE;
    double now = li_time_ms();
    c->deadline = now + phase_limit_ms(g, LI_CONN_IDLE);
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->n_open++;
    if (g->n_open - g->n_shut > g->lim.shed_at) {
        // shed the idle or half-sent connection nearest its deadline (the new one never)
        li_conn *victim = NULL;
        for (li_conn *o = c->next; o; o = o->next)
            if (!o->shut && (o->phase == LI_CONN_IDLE || o->phase == LI_CONN_HEADERS) &&
                (!victim || o->deadline < victim->deadline))
                victim = o;
        if (victim) {
            shut_locked(g, victim);
            g->n_shed++;
        }
    }
    if (g->n_open - g->n_shut > g->lim.max_open) {  // every other one is busy: refuse this one
        shut_locked(g, c);
        g->n_refused++;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
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
    pthread_mutex_unlock(&g->mu);
}

void li_conn_counts(li_conn_guard *g, int *open, int64_t *timed_out, int64_t *shed,
                    int64_t *refused) {
    pthread_mutex_lock(&g->mu);
    if (open) *open = g->n_open - g->n_shut;
    if (timed_out) *timed_out = g->n_timed_out;
    if (shed) *shed = g->n_shed;
    if (refused) *refused = g->n_refused;
    pthread_mutex_unlock(&g->mu);
}
