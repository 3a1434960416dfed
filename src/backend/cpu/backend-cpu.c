// backend-cpu.c — creation and destruction of CPU backends: the fast table with its thread pool
// and scratch (li_backend_cpu_init) or the scalar oracle (li_backend_cpu_ref_init).
//
// Not here: the ops themselves (ops-cpu.c, ops-ref.c). Tested by tests/test-ops.c, which creates
// both and compares them.
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../dllm-rules.h"
#include "cpu-internal.h"

li_status li_backend_cpu_init(li_backend **out, int n_threads) {
    *out = NULL;
    if (n_threads < 0)
        return li_error_set(LI_ERR_INVALID_ARG, "cpu backend: thread count must be >= 0, got %d",
                            n_threads);
    li_backend *be = li_alloc(sizeof *be, "cpu backend");
    if (!be) return LI_ERR_OOM;
    be->impl = li_alloc(sizeof(li_cpu_impl), "cpu backend state");
    if (!be->impl) {
        li_free(be);
        return LI_ERR_OOM;
    }
    li_status st = li_threadpool_init(&be->tp, n_threads);  // 0: one thread per online CPU
    if (st != LI_OK) {
        li_free(be->impl);
        li_free(be);
        return li_error_wrap(st, "cpu backend: ");
    }
    be->n_threads = li_threadpool_size(be->tp);
    be->ops = &li_cpu_fast_ops;
    // Each of our workers calls a single-threaded sgemm on its share of the output (ops-cpu.c):
    // OpenBLAS's own pool would spin beside ours on the same cores.
    openblas_set_num_threads(1);
    *out = be;
    return LI_OK;
}

// ---- cpu-devsim: the device data path without a device -----------------------------------------
//
// The fast CPU ops with memory ops of their own, so li_be_is_device is true: the model moves its
// weights (bf16 matrices) and stages every batch's index arrays through upload/download exactly
// as on CUDA. CI runs that path with it (tests/test-model.c); the buffers are host memory.
static void *devsim_alloc(li_backend *be, size_t n, const char *what) { return li_alloc(n, what); }
static void devsim_free(li_backend *be, void *p) { li_free(p); }
static li_status devsim_copy_in(li_backend *be, void *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n);
    return LI_OK;
}
static void devsim_copy(li_backend *be, void *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n);
}
static li_status devsim_sync(li_backend *be) { return LI_OK; }
static void devsim_fill(li_backend *be, float *x, float value, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = value;
}

// dllm->select as a device runs it (backend.h): the candidates ranked here, li_dllm_take's count,
// and at a cut among equal confidences the answer "decide on the host" (-1), as the CUDA kernel
// gives it — so that CI drives the decoder's device branch (commits downloaded, the stream moved
// W draws for random remasking, the host's tie path) and checks it against the CPU's host branch
// (gpu-check tests the CUDA kernel against an independent oracle).
static void devsim_dllm_select(li_backend *be, int32_t *commit, const int32_t *x0,
                               const double *conf, const uint8_t *masked, int B, int mode, int k,
                               double tau, double f, bool random_remask, const li_rng *rng) {
    li_dllm_pair c[LI_DLLM_SELECT_MAX_ROWS];
    double ranked[LI_DLLM_SELECT_MAX_ROWS];
    LI_ASSERT(B <= LI_DLLM_SELECT_MAX_ROWS);  // the decoder selects larger windows on the host
    li_rng r = *rng;
    int nc = 0;
    for (int b = 0; b < B; b++) {
        double u = random_remask ? li_rng_uniform(&r) : 0;  // one per row, masked or not
        if (masked[b]) c[nc++] = (li_dllm_pair){random_remask ? u : conf[b], b};
        commit[b] = -1;
    }
    // insertion sort by (confidence desc, row asc): B is a window of tens of rows
    for (int i = 1; i < nc; i++) {
        li_dllm_pair v = c[i];
        int j = i;
        while (j > 0 && c[j - 1].v < v.v) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = v;
    }
    for (int i = 0; i < nc; i++) ranked[i] = c[i].v;
    int take = li_dllm_take(ranked, nc, (li_dllm_sel)mode, k, tau, f);
    if (take > 0 && take < nc && ranked[take - 1] == ranked[take]) {  // (threshold: take 1)
        commit[B] = -1;
        return;
    }
    for (int i = 0; i < take; i++) commit[c[i].i] = x0[c[i].i];
    commit[B] = take;
}

// dllm->dpad likewise: the decoder's own draw on a copy of the stream (the decoder moves its
// stream window draws on), so that CI drives the device branch of block_begin.
static void devsim_dllm_dpad(li_backend *be, uint8_t *keep, const double *prob, int window,
                             int n_suffix, const li_rng *rng) {
    li_rng r = *rng;
    li_dllm_dpad_draw(&r, prob, window, n_suffix, keep);
}

static li_backend_ops devsim_ops[2];  // [0] loader dtypes, [1] bf16 matrices
static pthread_once_t devsim_once = PTHREAD_ONCE_INIT;
static const li_dllm_ops devsim_dllm = {
    .x0 = li_cpu_dllm_x0,
    .select = devsim_dllm_select,
    .dpad = devsim_dllm_dpad,
};

static void devsim_make_ops(void) {
    for (int i = 0; i < 2; i++) {
        li_backend_ops *o = &devsim_ops[i];
        *o = li_cpu_fast_ops;
        o->name = i ? "cpu-devsim-bf16" : "cpu-devsim";
        o->matrices_bf16 = i == 1;
        o->alloc = devsim_alloc;
        o->free = devsim_free;
        o->upload = devsim_copy_in;
        o->download = devsim_copy_in;
        o->copy = devsim_copy;
        o->sync = devsim_sync;
        o->fill = devsim_fill;
        o->dllm = &devsim_dllm;
    }
}

li_status li_backend_cpu_devsim_init(li_backend **out, int n_threads, bool bf16) {
    LI_TRY(li_backend_cpu_init(out, n_threads));
    pthread_once(&devsim_once, devsim_make_ops);
    (*out)->ops = &devsim_ops[bf16 ? 1 : 0];
    return LI_OK;
}

li_status li_backend_cpu_ref_init(li_backend **out) {
    *out = NULL;
    li_backend *be = li_alloc(sizeof *be, "cpu reference backend");
    if (!be) return LI_ERR_OOM;
    be->ops = &li_cpu_ref_ops;
    be->tp = NULL;
    be->n_threads = 1;
    be->impl = NULL;
    *out = be;
    return LI_OK;
}

void li_backend_free(li_backend *be) {
    if (!be) return;
    if (be->destroy) {  // another backend (CUDA) frees itself
        be->destroy(be);
        return;
    }
    li_cpu_impl *im = be->impl;
    if (im) {
        li_cpu_scratch_free(&im->delta_tab);
        li_cpu_scratch_free(&im->kv_wide);
        li_cpu_scratch_free(&im->wtile);
        li_cpu_scratch_free(&im->samp_p);
        li_cpu_scratch_free(&im->samp_idx);
        li_free(im);
    }
    li_threadpool_free(be->tp);
    li_free(be);
}
