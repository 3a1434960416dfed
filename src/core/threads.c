// threads.c — a fixed pool of worker threads for data-parallel loops.
//
// li_parallel_for splits [0, n) into one contiguous chunk per thread; the calling thread runs
// chunk 0 and then waits for the others. A decode step of a small model issues hundreds of these
// per token (~10 ops × layers), each lasting tens of microseconds, so waking a sleeping thread
// (~10-50 µs through a condition variable) would cost as much as the work. Workers therefore spin
// on an atomic job counter for a short while (SPIN_ROUNDS pauses, ~100 µs) before going to sleep
// on the condition variable, and the caller spins on the completion counter. An idle pool sleeps
// and costs nothing. The job counter only changes under the mutex, so a worker that decided to
// sleep cannot miss a job. Tested by tests/test-core.c.
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_MAX 20000  // pauses before sleeping: ~100 µs on current x86 cores
// When another process holds our cores, spinning only delays the thread we wait for: after a
// wait that needed sleeping the spin budget halves (down to 0: plain blocking), after a wait that
// spinning served it doubles back. A quiet machine spins; a busy one blocks.

struct li_threadpool {
    int n_threads;  // including the caller
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;       // the caller waits here when spinning took too long
    bool caller_sleeping;         // (under mu)
    _Atomic uint64_t generation;  // bumped (under mu) for each parallel_for
    _Atomic int n_pending;        // workers still running the current job
    int n_sleeping;               // workers waiting on work_cv (under mu)
    _Atomic bool stop;
    _Atomic int spin_rounds;      // current spin budget, SPIN_MAX .. 0
    unsigned n_calls;             // parallel_for calls (caller only)
    // the current job, written before `generation` is bumped
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

// Waits until the job counter moves past `seen` (or stop); returns the new value.
static uint64_t wait_for_job(li_threadpool *tp, uint64_t seen) {
    int spin = atomic_load_explicit(&tp->spin_rounds, memory_order_relaxed);
    for (int i = 0; i < spin; i++) {
        uint64_t g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (g != seen || atomic_load(&tp->stop)) return g;
        CPU_RELAX();
    }
    pthread_mutex_lock(&tp->mu);
    while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop)) {
        tp->n_sleeping++;
        pthread_cond_wait(&tp->work_cv, &tp->mu);
        tp->n_sleeping--;
    }
    uint64_t g = atomic_load(&tp->generation);
    pthread_mutex_unlock(&tp->mu);
    return g;
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    li_threadpool *tp = wa->tp;
    int id = wa->id;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_job(tp, seen);
        if (atomic_load(&tp->stop)) break;
        int64_t begin, end;
        chunk_of(tp->n, tp->n_threads, id, &begin, &end);
        if (begin < end) tp->fn(tp->ctx, begin, end, id);
        if (atomic_fetch_sub_explicit(&tp->n_pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);  // the last one out wakes a sleeping caller
            if (tp->caller_sleeping) pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
    }
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
    atomic_store(&tp->spin_rounds, SPIN_MAX);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->work_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    tp->workers = calloc((size_t)n_threads, sizeof *tp->workers);
    if (!tp->workers) {
        free(tp);
        return li_error_set(LI_ERR_OOM, "out of memory creating a thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->tp = tp;
            wa->id = i;
        }
        if (!wa || pthread_create(&tp->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n_threads = i;  // only workers 1..i-1 exist
            li_threadpool_free(tp);
            return li_error_set(LI_ERR_OOM, "cannot start worker thread %d", i);
        }
    }
    *out = tp;
    return LI_OK;
}

void li_threadpool_free(li_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
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
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    atomic_store(&tp->n_pending, tp->n_threads - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    if (tp->n_sleeping > 0) pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);

    int64_t begin, end;
    chunk_of(n, tp->n_threads, 0, &begin, &end);
    if (begin < end) fn(ctx, begin, end, 0);

    // The other chunks take about as long as ours: spin a while; if a worker is late (its core
    // is busy with another process), sleep until the last one wakes us.
    // Every 256th call retries full spinning, so a budget that decayed while the machine was
    // busy comes back once it is quiet (under contention it decays again within ~8 calls).
    int spin = ++tp->n_calls % 256 == 0 ? SPIN_MAX
                                         : atomic_load_explicit(&tp->spin_rounds, memory_order_relaxed);
    for (int i = 0; i < spin; i++) {
        if (atomic_load_explicit(&tp->n_pending, memory_order_acquire) == 0) {
            atomic_store_explicit(&tp->spin_rounds, spin * 2 + 64 < SPIN_MAX ? spin * 2 + 64 : SPIN_MAX,
                                  memory_order_relaxed);
            return;
        }
        CPU_RELAX();
    }
    if (atomic_load_explicit(&tp->n_pending, memory_order_acquire) == 0) return;
    atomic_store_explicit(&tp->spin_rounds, spin / 2, memory_order_relaxed);
    pthread_mutex_lock(&tp->mu);
    tp->caller_sleeping = true;
    while (atomic_load(&tp->n_pending) > 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
    tp->caller_sleeping = false;
    pthread_mutex_unlock(&tp->mu);
}
