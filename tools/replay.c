// replay.c — a list of requests through the scheduler, open or closed loop (see replay.h).
#include "replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/core/core.h"

typedef struct {
    double t; // arrival, ms since the start
    int i;    // request index
} arrival;

// By arrival, then by index: requests that arrive together are submitted in list order.
static int cmp_arrival(const void *a, const void *b) {
    const arrival *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

static void fail(replay_out *o, li_status st, const char *why, const char *msg, double now) {
    o->res.status = st;
    snprintf(o->res.error, sizeof o->res.error, "%s%s", why, msg);
    o->end_ms = now;
    o->done = true;
}

li_status replay_run(li_model *m, const replay_plan *p, replay_out *out) {
    const int n = p->n;
    arrival *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int64_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    int *live = malloc((size_t)(n ? n : 1) * sizeof *live); // submitted, not finished
    if (!order || !ids || !live) {
        free(order);
        free(ids);
        free(live);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].submit_ms = -1;
        order[i] = (arrival){p->arrival_ms ? p->arrival_ms[i] : 0, i};
    }
    if (p->arrival_ms) qsort(order, (size_t)n, sizeof *order, cmp_arrival);
    const int cap = p->arrival_ms || p->max_in_flight <= 0 ? n : p->max_in_flight;
    int next = 0, n_live = 0, n_done = 0;
    li_status rc = LI_OK;
    const double t0 = li_time_ms();
    while (n_done < n) {
        for (; next < n && n_live < cap && order[next].t <= li_time_ms() - t0; next++) {
            int i = order[next].i;
            out[i].submit_ms = li_time_ms() - t0;
            li_status src = p->submit(p->user, m, i, &ids[i]);
            if (src == LI_OK) {
                live[n_live++] = i;
                continue;
            }
            fail(&out[i], src, "", li_last_error(), li_time_ms() - t0);
            n_done++;
            if (p->done) p->done(p->user, i, &out[i]);
        }
        if (n_live == 0) {
            if (next < n) sleep_ms(order[next].t - (li_time_ms() - t0));
            continue;
        }
        if ((rc = li_step(m, NULL)) != LI_OK) break;
        for (int k = 0; k < n_live;) {
            int i = live[k];
            // li_result fails (and sets the error message) for requests not finished yet
            if (li_result(m, ids[i], &out[i].res) != LI_OK) {
                k++;
                continue;
            }
            out[i].end_ms = li_time_ms() - t0;
            out[i].done = true;
            live[k] = live[--n_live];
            n_done++;
            if (p->done) p->done(p->user, i, &out[i]);
        }
        if (p->progress) li_progress(p->progress, n_done, n);
    }
    if (rc != LI_OK) { // the engine failed: every request not finished fails with it
        char msg[200]; // + the prefix below fits li_request_result.error
        snprintf(msg, sizeof msg, "%s", li_last_error());
        for (int i = 0; i < n; i++) {
            if (out[i].done) continue;
            fail(&out[i], rc, "not finished, the engine failed: ", msg, li_time_ms() - t0);
            if (p->done) p->done(p->user, i, &out[i]);
        }
        li_error_set(rc, "%s", msg);
    }
    free(order);
    free(ids);
    free(live);
    return rc;
}
