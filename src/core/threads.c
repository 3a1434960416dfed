// threads.c — a fixed pool of worker threads for data-parallel loops.
//
// li_parallel_for splits [0, n) into one contiguous chunk per thread; the calling thread runs
// chunk 0 and then waits for the others. Workers sleep on a condition variable between calls, so
// an idle pool costs nothing. A generation counter tells workers that new work was posted.
// Tested by tests/test-core.c.
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core.h"

struct li_threadpool {
    int n_threads;  // including the caller
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint64_t generation;  // bumped for each parallel_for
    int n_pending;        // workers still running the current job
    bool stop;
    // the current job
    li_range_fn fn;
    void *ctx;
    int64_t n;
};

typedef struct {
    li_threadpool *tp;
    int id;
} worker_arg;

static void chunk_of(int64_t n, int n_threads, int id, int64_t *begin, int64_t *end) {
    int64_t base = n / n_threads, rem = n % n_threads;
    *begin = id * base + (id < rem ? id : rem);
    *end = *begin + base + (id < rem ? 1 : 0);
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    li_threadpool *tp = wa->tp;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->stop && tp->generation == seen) pthread_cond_wait(&tp->work_cv, &tp->mu);
        if (tp->stop) break;
        seen = tp->generation;
        li_range_fn fn = tp->fn;
        void *ctx = tp->ctx;
        int64_t begin, end;
        chunk_of(tp->n, tp->n_threads, id, &begin, &end);
        pthread_mutex_unlock(&tp->mu);
        if (begin < end) fn(ctx, begin, end, id);
        pthread_mutex_lock(&tp->mu);
        if (--tp->n_pending == 0) pthread_cond_signal(&tp->done_cv);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

li_status li_threadpool_init(li_threadpool **out, int n_threads) {
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 256) return li_error_set(LI_ERR_INVALID_ARG, "too many threads: %d", n_threads);
    li_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return li_error_set(LI_ERR_OOM, "out of memory creating a thread pool");
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->work_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    tp->workers = calloc((size_t)n_threads, sizeof *tp->workers);
    if (!tp->workers) goto fail;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) goto fail_started;
        wa->tp = tp;
        wa->id = i;
        if (pthread_create(&tp->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            goto fail_started;
        }
        continue;
    fail_started:
        tp->n_threads = i;  // only workers 1..i-1 exist
        li_threadpool_free(tp);
        return li_error_set(LI_ERR_OOM, "cannot start worker thread %d", i);
    }
    *out = tp;
    return LI_OK;
fail:
    free(tp);
    return li_error_set(LI_ERR_OOM, "out of memory creating a thread pool");
}

void li_threadpool_free(li_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->stop = true;
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->work_cv);
    pthread_cond_destroy(&tp->done_cv);
    free(tp->workers);
    free(tp);
}

int li_threadpool_size(const li_threadpool *tp) { return tp ? tp->n_threads : 1; }

void li_parallel_for(li_threadpool *tp, int64_t n, li_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!tp || tp->n_threads == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    tp->n_pending = tp->n_threads - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);

    int64_t begin, end;
    chunk_of(n, tp->n_threads, 0, &begin, &end);
    if (begin < end) fn(ctx, begin, end, 0);

    pthread_mutex_lock(&tp->mu);
    while (tp->n_pending > 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
