// replay.h — replays a list of requests through the engine's scheduler (continuous batching):
// each request is submitted when its arrival time has passed (open loop, as `bench rag`'s trace),
// or, without arrival times, as soon as fewer than max_in_flight requests are unfinished (closed
// loop: a request joins the running batch the step after another one leaves it, and its TTFT is
// its own). Between submissions the scheduler is stepped with li_step; idle, the replay sleeps
// until the next arrival. A request that li_submit refuses, or that the scheduler fails, is
// recorded as failed and the replay goes on; only an engine error (li_step failing) ends it.
// Shared by `lazyinfer rag` and `lazyinfer bench rag`; tested through tests/test_rag_cli.py and
// tests/test_bench_rag.py.
#ifndef LI_TOOLS_REPLAY_H
#define LI_TOOLS_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "lazyinfer.h"

typedef struct {
    li_request_result res; // status != LI_OK: failed (res.error says why)
    double submit_ms;      // when li_submit was called, since the start (-1: never)
    double end_ms;         // when the replay saw it finished, since the start
    bool done;
} replay_out;

// Builds request i and submits it (li_submit): what the request points to need only live through
// the call. Returns li_submit's status, or its own error (message set with li_error_set) for a
// request that cannot be built; either way the request is recorded as failed.
typedef li_status (*replay_submit_fn)(void *user, li_model *m, int i, int64_t *id);
// Called once per request when it has finished or failed (in that order, not request order).
typedef void (*replay_done_fn)(void *user, int i, const replay_out *o);

typedef struct {
    int n;                    // requests
    const double *arrival_ms; // (n) earliest submission, ms since the start; NULL: closed loop
    int max_in_flight;        // closed loop: unfinished requests at most (0: all at once)
    replay_submit_fn submit;
    replay_done_fn done; // optional
    void *user;
    const char *progress; // li_progress label (NULL: none)
} replay_plan;

// Runs every request of the plan; out (n) receives each one's outcome. Returns LI_OK, or the
// engine error that ended the replay: then every request not finished is failed with it.
li_status replay_run(li_model *m, const replay_plan *p, replay_out *out);

#endif
