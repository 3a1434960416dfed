// backend-cuda.c — the CUDA backend's host side (C11): creation and teardown, first-error
// recording, device-memory helpers, the cuBLASLt GEMM with its per-shape plan cache, and the op
// table li_cuda_ops, which converts the backend.h structs into the plain launcher arguments of the
// kernels (pointwise.cu, attention.cu, sample.cu, dllm.cu).
//
// Not here: kernels; engine integration (weights, KV pool and activations living in device memory,
// CUDA graphs) — see docs/CUDA.md. Tested by tests/gpu/gpu-check.c on a GPU machine
// (`make CUDA=1 gpu-check`), which compares every op with the CPU oracle.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "../../core/rng-jump.h"
#include "../attn-blocks.h"
#include "attention-blocks.cuh"
#include "attention-cudnn.h"
#include "attention.cuh"
#include "backend-cuda.h"
#include "dllm-sample.cuh"
#include "dllm.cuh"
#include "gemv.cuh"
#include "pointwise.cuh"
#include "kv-transfer.h"
#include "sample.cuh"

_Static_assert(LI_CUDA_ROPE_MAX_PAIRS == LI_ROPE_MAX_PAIRS, "rope table sizes differ");

// GEMM workspace: 32 MiB is what cuBLAS itself recommends for Hopper (its default workspace).
#define CUDA_GEMM_WORKSPACE (32u << 20)
#define CUDA_MAX_PLANS 64
#define LI_PROF_EVENTS 2048
#define LI_PROF_ROWS 64

// One cached GEMM: descriptors and the heuristic's algorithm for one (N, K, T) and pointer
// alignment (alignments change which kernels are legal).
typedef struct {
    int64_t N, K;
    int T;
    uint32_t align_w, align_y;
    bool invariant;  // made without split-K (li_backend.batch_invariant)
    int algo_idx;    // FP8 plans: which of the heuristic's candidates (LI_CUDA_FP8_ALGO, A/B)
    char name[64];          // "matmul bf16 N=… K=…": the op's name in LI_CUDA_PROFILE
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lw, lx, ly;  // W^T as (K, N) col-major, x as (K, T), y as (N, T)
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

static void plan_destroy(gemm_plan *p);

// One line of the LI_CUDA_PROFILE table: an op name's summed time.
typedef struct {
    char op[48];
    double ms;
    int64_t calls;
} prof_row;

// A bounded cache of plans: looked up by (N, K, T, alignments), replaced round-robin when full
// (a model has a handful of shapes per batch size).
typedef struct {
    gemm_plan p[CUDA_MAX_PLANS];
    int n, next_evict;
} plan_cache;

// One step graph: the key its steps share and the executable graph (updated per step).
typedef struct {
    uint64_t key;
    cudaGraphExec_t exec;
} graph_slot;

#define LI_GRAPH_SLOTS 16
#define LI_GRAPH_SEEN 64
#define LI_GRAPH_MAX_FAILURES 4

// A batched cuBLASLt GEMM of attention_dense: scores S = Q K^T (kind 0) or O = P V (kind 1) for
// nb heads at once (strided batches), keyed by the shapes and the pointers' alignments.
typedef struct {
    int kind, T, nk, nb, Dh, ldq, ldk;
    uint32_t align[3];
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} attn_plan;

#define LI_ATTN_PLANS 16

static void attn_plan_destroy(attn_plan *p);

// A paged attention call planned for cuDNN (attn-blocks.h): the call's host inputs serialised
// (compared on lookup: the layers of one forward share them), which of its sequences the plan
// covers, its library shapes and the device copies of its slot tables (uploaded once, read by
// every layer).
typedef struct {
    int64_t *key;             // (key_len) the call's host inputs (lib_plan_key)
    int key_len, key_cap;
    bool ok;                  // a plan exists and cuDNN took it
    uint8_t *covered;         // (n_seqs) 1: the sequence runs through cuDNN; 0: our kernels
    int n_seqs, cap_seqs;
    int B1, B2;               // slots of the non-causal and the causal call (padded)
    int s_q, s_kv;            // bounds on a slot's rows and keys (powers of two: plan class)
    int max_rows, max_keys;   // the largest slot's rows and keys (kernel grids)
    int n_rows;               // rows merged (of the covered sequences)
    int64_t q_rows, kv_keys;  // packed rows (qb, ob, lse) and keys (kb, vb) the call needs
    void *dev;                // slots, seq_q, seq_kv, q_off, kv_off, lse_off, pages, rows, list
    size_t dev_cap;
    li_cuda_block_slot *d_slots;
    int32_t *d_seq_q, *d_seq_kv, *d_q_off, *d_kv_off, *d_lse_off, *d_pages, *d_slot_list;
    li_cuda_block_row *d_rows;
    uint64_t last_used;
} lib_plan;

#define LI_LIB_PLANS 16

// Grow-only device scratch. Growth frees the old buffer (cudaFree waits for the device), so it
// must not happen during graph capture: the engine sizes these at start.
typedef struct {
    void *p;
    size_t cap;
} dev_scratch;

typedef struct {
    int device, n_sm;
    char name[256];
    size_t total_mem;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *ws;  // (CUDA_GEMM_WORKSPACE) cuBLASLt workspace
    plan_cache plans;
    dev_scratch xbf;   // matmul: activations converted to bf16, (T, K)
    dev_scratch attn;  // attention split-K partials: (T, H, n_split, Dh) then (T, H, n_split, 2)
    dev_scratch keys;  // prefill attention: one word per key of the page table
    dev_scratch tickets;  // decode attention: (T, Hkv) arrival counters of split-K, kept zero
    dev_scratch dense; // attention_dense through GEMMs: q, k, v in bf16, scores, probabilities
    attn_plan attn_plans[LI_ATTN_PLANS];
    int n_attn_plans, attn_next_evict;
    // FP8 GEMM through cuBLASLt (matmul_fp8_fast): which scale-table layouts the library takes,
    // found once by comparing it with the exact kernel (fp8_calibrate): -1 not tried, 0 not
    // usable (fp8_note says why), else 1 + (weight scales transposed) + 2 (activation scales
    // transposed)
    int fp8_mode;
    bool fp8_t4;  // the library took the activation scales only with T a multiple of 4
    int fp8_status;  // the last heuristic query's cublasStatus_t (for the note)
    int fp8_algo;    // which heuristic candidate FP8 plans take (LI_CUDA_FP8_ALGO at init; A/B)
    char fp8_note[1200];
    plan_cache fp8_plans;
    dev_scratch fp8_ws, fp8_as;  // transposed scale tables when the layout needs them
    dev_scratch fp8_acc;         // matmul_fp8_fast accumulating through the exact kernel
    li_cuda_sampler *sampler;
    uint64_t *jump_table;  // dllm->x0: device copy of li_rng_jump_table() (512 KiB), on first use
    dev_scratch x0s;       // dllm->x0: per-chunk partial argmaxes
    int64_t scratch_allocs;  // scratch_get's allocations and the jump table's (scratch_allocs op)
    // LI_CUDA_PROFILE=1: an event after every op; the time between two events is the later
    // op's (host gaps included), summed per op name and printed on stderr at the end.
    bool prof;
    cudaEvent_t prof_ev[LI_PROF_EVENTS];
    const char *prof_op[LI_PROF_EVENTS];
    int n_prof_ev;
    prof_row prof_rows[LI_PROF_ROWS];
    int n_prof_rows;
    // Step graphs (graph_begin/graph_end): one instantiated graph per step key, updated in place
    // with each new recording of that key; keys seen once (run eagerly the first time).
    bool graphs_off;  // not LI_CUDA_GRAPHS=1, LI_CUDA_PROFILE, or recording failed too often
    bool capturing;
    int graph_failures;
    uint64_t cur_key;
    graph_slot graphs[LI_GRAPH_SLOTS];
    int n_graphs, graph_next_evict;
    uint64_t seen[LI_GRAPH_SEEN];
    int n_seen;
    li_cuda_graph_stats gstats;
    // attention through cuDNN (LI_ATTN_AUTO / LI_ATTN_LIBRARY): loaded on first use
    li_cudnn *cudnn;
    bool cudnn_tried;
    char cudnn_note[512];  // why cuDNN is not used, when it is not
    lib_plan lib[LI_LIB_PLANS + 1];  // the last one holds the key of the call being looked up
    uint64_t lib_tick;
    dev_scratch lib_q, lib_o, lib_lse, lib_kv;  // packed bf16 Q / O, LSE, gathered K and V
    li_attn_blocks *lib_blocks;  // (lib_cap_blocks) per-sequence plans while a call is planned
    int lib_cap_blocks, lib_init_blocks;
    li_status err;     // first error since init
    char err_msg[512];
} li_cuda_impl;

// ---- error recording --------------------------------------------------------------------------

static void record(li_cuda_impl *im, li_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void record(li_cuda_impl *im, li_status st, const char *fmt, ...) {
    if (im->err != LI_OK) return;  // the first error is the useful one
    im->err = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->err_msg, sizeof im->err_msg, fmt, ap);
    va_end(ap);
}

// ---- LI_CUDA_PROFILE ----------------------------------------------------------------------------

// Waits for the recorded events and adds each interval to its op's row; the last event stays as
// the start of the next interval.
static void prof_flush(li_cuda_impl *im) {
    if (im->n_prof_ev < 2) return;
    cudaEventSynchronize(im->prof_ev[im->n_prof_ev - 1]);
    for (int i = 1; i < im->n_prof_ev; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, im->prof_ev[i - 1], im->prof_ev[i]) != cudaSuccess) continue;
        int r = 0;
        while (r < im->n_prof_rows && strncmp(im->prof_rows[r].op, im->prof_op[i],
                                              sizeof im->prof_rows[r].op - 1))
            r++;
        if (r == im->n_prof_rows) {
            if (r == LI_PROF_ROWS) continue;
            im->n_prof_rows++;
            snprintf(im->prof_rows[r].op, sizeof im->prof_rows[r].op, "%s", im->prof_op[i]);
        }
        im->prof_rows[r].ms += ms;
        im->prof_rows[r].calls++;
    }
    cudaEvent_t last = im->prof_ev[im->n_prof_ev - 1];
    im->prof_ev[im->n_prof_ev - 1] = im->prof_ev[0];
    im->prof_ev[0] = last;
    im->n_prof_ev = 1;
}

static void prof_mark(li_cuda_impl *im, const char *op) {
    if (!im->prof) return;
    if (im->n_prof_ev == LI_PROF_EVENTS) prof_flush(im);
    if (cudaEventRecord(im->prof_ev[im->n_prof_ev], im->stream) == cudaSuccess)
        im->prof_op[im->n_prof_ev++] = op;
}

static void prof_report(li_cuda_impl *im) {
    prof_flush(im);
    double total = 0;
    for (int r = 0; r < im->n_prof_rows; r++) total += im->prof_rows[r].ms;
    fprintf(stderr, "cuda profile (LI_CUDA_PROFILE): %.1f ms in all\n%-44s %9s %10s %6s\n",
            total, "op", "calls", "ms", "%");
    for (int k = 0; k < im->n_prof_rows; k++) {  // largest first
        int b = k;
        for (int r = k + 1; r < im->n_prof_rows; r++)
            if (im->prof_rows[r].ms > im->prof_rows[b].ms) b = r;
        prof_row t = im->prof_rows[k];
        im->prof_rows[k] = im->prof_rows[b];
        im->prof_rows[b] = t;
        fprintf(stderr, "%-44s %9lld %10.2f %6.1f\n", im->prof_rows[k].op,
                (long long)im->prof_rows[k].calls, im->prof_rows[k].ms,
                total > 0 ? 100 * im->prof_rows[k].ms / total : 0);
    }
}

// Records e (if not cudaSuccess) for op; returns 1 when it was an error.
static int cu_fail(li_cuda_impl *im, const char *op, cudaError_t e) {
    if (e == cudaSuccess) {
        prof_mark(im, op);
        return 0;
    }
    record(im, LI_ERR_BACKEND, "cuda %s: %s (%s)", op, cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
}

// The recorded error as a status (LI_OK if none), then cleared: a request that failed (an
// unsupported shape, an allocation) does not fail every later one. A CUDA error that breaks the
// context (an illegal address) is reported again by the next call that touches the device.
static li_status take_error(li_cuda_impl *im) {
    if (im->err == LI_OK) return LI_OK;
    li_status st = li_error_set(im->err, "%s", im->err_msg);
    im->err = LI_OK;
    return st;
}

static int lt_fail(li_cuda_impl *im, const char *op, cublasStatus_t s) {
    if (s == CUBLAS_STATUS_SUCCESS) {
        prof_mark(im, op);
        return 0;
    }
    record(im, LI_ERR_BACKEND, "cuda %s: cuBLASLt %s", op, cublasLtGetStatusString(s));
    return 1;
}

static void *scratch_get(li_cuda_impl *im, dev_scratch *s, size_t n, const char *what) {
    if (n <= s->cap) return s->p;
    if (im->capturing) {  // cudaFree would wait for the device: record, graph_end reruns eagerly
        record(im, LI_ERR_BACKEND, "cuda %s: scratch grows while a step graph is recorded", what);
        return NULL;
    }
    cudaFree(s->p);
    s->p = NULL;
    s->cap = 0;
    im->scratch_allocs++;
    if (cu_fail(im, what, cudaMalloc(&s->p, n))) {
        s->p = NULL;
        return NULL;
    }
    s->cap = n;
    return s->p;
}

static li_cuda_rope_args rope_args(const li_rope_table *t) {
    li_cuda_rope_args r;
    memset(&r, 0, sizeof r);
    r.gptj = t->layout == LI_ROPE_GPTJ;
    r.n_dims = t->n_dims;
    r.mscale = t->mscale;
    memcpy(r.inv_freq, t->inv_freq, sizeof(float) * (size_t)(t->n_dims / 2));
    return r;
}

// ---- creation ---------------------------------------------------------------------------------

li_status li_backend_cuda_init(li_backend **out, int device) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND,
                            "cuda backend: no usable GPU: cudaGetDeviceCount: %s (%s)",
                            cudaGetErrorName(e), cudaGetErrorString(e));
    if (count == 0) return li_error_set(LI_ERR_BACKEND, "cuda backend: no GPU found");
    if (device < 0 || device >= count)
        return li_error_set(LI_ERR_INVALID_ARG, "cuda backend: device %d out of range (%d GPUs)",
                            device, count);
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND, "cuda backend: device %d: %s", device,
                            cudaGetErrorString(e));
    // -gencode arch=compute_90a,code=sm_90a: the 'a' cubin runs on compute capability 9.0 only.
    if (prop.major != 9 || prop.minor != 0)
        return li_error_set(LI_ERR_UNSUPPORTED,
                            "cuda backend: %s is sm_%d%d; this build has code for sm_90a "
                            "(H100/H200) only (NVFLAGS -gencode in the Makefile)",
                            prop.name, prop.major, prop.minor);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND, "cuda backend: cudaSetDevice(%d): %s", device,
                            cudaGetErrorString(e));

    li_backend *be = li_alloc(sizeof *be, "cuda backend");
    li_cuda_impl *im = li_alloc(sizeof *im, "cuda backend state");
    if (!be || !im) {
        li_free(be);
        li_free(im);
        return LI_ERR_OOM;
    }
    be->ops = &li_cuda_ops;
    be->destroy = li_backend_cuda_destroy;  // li_backend_free dispatches here
    be->tp = NULL;
    be->n_threads = 1;
    be->impl = im;
    im->device = device;
    im->fp8_mode = -1;
    // LI_CUDA_FP8_ALGO=i: FP8 plans take the heuristic's i-th candidate (A/B of the algorithms)
    const char *fp8_algo = getenv("LI_CUDA_FP8_ALGO");
    im->fp8_algo = fp8_algo ? atoi(fp8_algo) : 0;
    if (im->fp8_algo < 0 || im->fp8_algo > 7) im->fp8_algo = 0;
    im->n_sm = prop.multiProcessorCount;
    im->total_mem = prop.totalGlobalMem;
    snprintf(im->name, sizeof im->name, "%s", prop.name);
    li_status st = LI_OK;
    cublasStatus_t cs;
    if ((e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = li_error_set(LI_ERR_BACKEND, "cuda backend: creating the stream: %s",
                          cudaGetErrorString(e));
        goto fail;
    }
    if ((cs = cublasLtCreate(&im->lt)) != CUBLAS_STATUS_SUCCESS) {
        st = li_error_set(LI_ERR_BACKEND, "cuda backend: cublasLtCreate: %s",
                          cublasLtGetStatusString(cs));
        goto fail;
    }
    // Off by default: recording every step measured 2-3 % slower than launching op by op on the
    // H200 (Llama-8B decode 5.21 vs 5.08 ms, LLaDA step at 1024 52.2 vs 50.6 ms: the device is
    // the bottleneck and the recording delays its start); LI_CUDA_GRAPHS=1 turns them on.
    const char *graphs = getenv("LI_CUDA_GRAPHS");
    im->graphs_off = !(graphs && *graphs && strcmp(graphs, "0"));
    const char *prof = getenv("LI_CUDA_PROFILE");
    if (prof && *prof && strcmp(prof, "0")) {
        im->prof = true;
        im->graphs_off = true;  // an event per op, read back between ops: no recording
        for (int i = 0; i < LI_PROF_EVENTS && im->prof; i++)
            im->prof = cudaEventCreate(&im->prof_ev[i]) == cudaSuccess;
    }
    if ((e = cudaMalloc(&im->ws, CUDA_GEMM_WORKSPACE)) != cudaSuccess) {
        st = li_error_set(LI_ERR_OOM, "cuda backend: GEMM workspace (%u MiB): %s",
                          CUDA_GEMM_WORKSPACE >> 20, cudaGetErrorString(e));
        goto fail;
    }
    *out = be;
    return LI_OK;
fail:
    li_backend_cuda_destroy(be);
    return st;
}

void li_backend_cuda_destroy(li_backend *be) {
    if (!be) return;
    li_cuda_impl *im = be->impl;
    if (im) {
        if (im->stream) cudaStreamSynchronize(im->stream);
        if (im->prof) prof_report(im);
        const char *gs = getenv("LI_CUDA_GRAPH_STATS");
        if (gs && *gs && strcmp(gs, "0"))
            fprintf(stderr, "cuda step graphs: %s; %lld steps as graphs (%lld instantiated, %lld "
                    "updated in place), %lld eager (a key's first step), %lld recordings failed%s%s\n",
                    im->graphs_off ? "off" : "on", im->gstats.launched, im->gstats.instantiated,
                    im->gstats.updated, im->gstats.eager_steps, im->gstats.failed,
                    im->gstats.note[0] ? "; " : "", im->gstats.note);
        for (int i = 0; i < LI_PROF_EVENTS; i++)
            if (im->prof_ev[i]) cudaEventDestroy(im->prof_ev[i]);
        for (int i = 0; i < im->plans.n; i++) plan_destroy(&im->plans.p[i]);
        for (int i = 0; i < im->fp8_plans.n; i++) plan_destroy(&im->fp8_plans.p[i]);
        if (im->capturing) {  // a step abandoned mid-recording (an error path)
            cudaGraph_t g = NULL;
            cudaStreamEndCapture(im->stream, &g);
            if (g) cudaGraphDestroy(g);
        }
        for (int i = 0; i < im->n_graphs; i++) cudaGraphExecDestroy(im->graphs[i].exec);
        li_cuda_sampler_free(im->sampler);
        cudaFree(im->jump_table);
        cudaFree(im->x0s.p);
        cudaFree(im->xbf.p);
        cudaFree(im->attn.p);
        cudaFree(im->keys.p);
        cudaFree(im->tickets.p);
        cudaFree(im->dense.p);
        for (int i = 0; i <= LI_LIB_PLANS; i++) {
            lib_plan *p = &im->lib[i];
            li_free(p->key);
            li_free(p->covered);
            cudaFree(p->dev);
        }
        for (int i = 0; i < im->lib_cap_blocks; i++) li_attn_blocks_free(&im->lib_blocks[i]);
        li_free(im->lib_blocks);
        cudaFree(im->lib_q.p);
        cudaFree(im->lib_o.p);
        cudaFree(im->lib_lse.p);
        cudaFree(im->lib_kv.p);
        if (im->cudnn && im->prof) {
            li_cudnn_stats cs;
            li_cudnn_get_stats(im->cudnn, &cs);
            fprintf(stderr, "cudnn (LI_CUDA_PROFILE): %lld plans built in %.1f ms, %lld calls, "
                    "%lld shapes refused, %lld workspace allocations\n",
                    (long long)cs.plans_built, cs.build_ms, (long long)cs.calls,
                    (long long)cs.unsupported, (long long)cs.workspace_allocs);
        }
        li_cudnn_close(im->cudnn);
        for (int i = 0; i < im->n_attn_plans; i++) attn_plan_destroy(&im->attn_plans[i]);
        cudaFree(im->fp8_ws.p);
        cudaFree(im->fp8_as.p);
        cudaFree(im->ws);
        if (im->lt) cublasLtDestroy(im->lt);
        if (im->stream) cudaStreamDestroy(im->stream);
        li_free(im);
    }
    li_free(be);
}

li_status li_backend_cuda_check(li_backend *be) {
    li_cuda_impl *im = be->impl;
    cudaError_t e = cudaStreamSynchronize(im->stream);
    if (e != cudaSuccess) cu_fail(im, "(asynchronous, after the ops queued so far)", e);
    return take_error(im);
}

// ---- memory helpers ---------------------------------------------------------------------------

li_status li_backend_cuda_alloc(li_backend *be, void **dptr, size_t n_bytes, const char *what) {
    (void)be;
    *dptr = NULL;
    if (n_bytes == 0) return LI_OK;
    cudaError_t e = cudaMalloc(dptr, n_bytes);
    if (e != cudaSuccess) {
        *dptr = NULL;
        return li_error_set(LI_ERR_OOM, "cuda: allocating %zu bytes for %s: %s", n_bytes, what,
                            cudaGetErrorString(e));
    }
    return LI_OK;
}

void li_backend_cuda_free(li_backend *be, void *dptr) {
    (void)be;
    if (dptr) cudaFree(dptr);
}

static li_status copy(li_backend *be, void *dst, const void *src, size_t n, int up) {
    li_cuda_impl *im = be->impl;
    if (n == 0) return LI_OK;
    cudaError_t e = cudaMemcpyAsync(
        dst, src, n, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND, "cuda: %s of %zu bytes: %s", up ? "upload" : "download",
                            n, cudaGetErrorString(e));
    return take_error(im);  // an earlier op's
}

li_status li_backend_cuda_upload(li_backend *be, void *dst_dev, const void *src_host, size_t n) {
    return copy(be, dst_dev, src_host, n, 1);
}

li_status li_backend_cuda_download(li_backend *be, void *dst_host, const void *src_dev, size_t n) {
    return copy(be, dst_host, src_dev, n, 0);
}

li_status li_backend_cuda_fill_uniform(li_backend *be, float *x, int64_t n, uint64_t seed,
                                       float scale) {
    li_cuda_impl *im = be->impl;
    cudaError_t e = li_cuda_fill_uniform(im->stream, x, n, seed, scale);
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND, "cuda fill_uniform: %s", cudaGetErrorString(e));
    return LI_OK;
}

li_status li_backend_cuda_time(li_backend *be, void (*fn)(li_backend *be, void *ctx), void *ctx,
                               int n_iter, double *ms_per_iter) {
    li_cuda_impl *im = be->impl;
    cudaEvent_t a = NULL, b = NULL;
    li_status st = LI_OK;
    float ms = 0;
    *ms_per_iter = 0;
    cudaError_t e = cudaEventCreate(&a);
    if (e == cudaSuccess) e = cudaEventCreate(&b);
    if (e == cudaSuccess) e = cudaEventRecord(a, im->stream);
    if (e == cudaSuccess) {
        for (int i = 0; i < n_iter; i++) fn(be, ctx);
        e = cudaEventRecord(b, im->stream);
    }
    if (e == cudaSuccess) e = cudaEventSynchronize(b);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
    if (e != cudaSuccess)
        st = li_error_set(LI_ERR_BACKEND, "cuda timing: %s", cudaGetErrorString(e));
    else if ((st = li_backend_cuda_check(be)) == LI_OK)
        *ms_per_iter = (double)ms / (n_iter > 0 ? n_iter : 1);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    return st;
}

void li_backend_cuda_describe(li_backend *be, char *buf, size_t n) {
    li_cuda_impl *im = be->impl;
    snprintf(buf, n, "%s (device %d, %d SMs, %.1f GiB)", im->name, im->device, im->n_sm,
             (double)im->total_mem / (1024.0 * 1024 * 1024));
}

// ---- matmul: cuBLASLt ------------------------------------------------------------------------
//
// y (T, N) = x (T, K) @ W^T, W (N, K) bf16 row-major. cuBLASLt is column-major, so the row-major
// arrays are read as their transposes: W is a (K, N) col-major matrix with ld K, used transposed
// (op T -> N x K); x is (K, T) with ld K; y is (N, T) with ld N: y = op_T(W) x, the "TN" layout
// Hopper GEMMs prefer. Inputs bf16, fp32 accumulation (CUBLAS_COMPUTE_32F), output fp32.
// Napkin maths: dense bf16 on the H200 peaks at ~989 TFLOP/s (~780 reachable by cuBLAS at large
// M, N, K); prefill GEMMs (T >= 1024, 4096 x 4096 .. 14336) should reach 600-750 TFLOP/s. Decode
// (T = 1..64) is bandwidth-bound: 2 bytes per weight at ~4.8 TB/s, e.g. the 8B model's 15 GB of
// weights in ~3.2 ms per token. The f32 -> bf16 conversion of x costs 6 bytes per activation,
// negligible at decode; at T = 4096, K = 14336 it is ~10% of the GEMM and goes away when the
// previous op writes bf16 directly. Measured on an H200 (gpu-check's timing, conversion
// included): 600-716 TFLOP/s at T = 4096, 2.1-3.4 TB/s of weights at T = 1.

static uint32_t ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al >>= 1;
    return al;
}

static void plan_destroy(gemm_plan *p) {
    if (p->lw) cublasLtMatrixLayoutDestroy(p->lw);
    if (p->lx) cublasLtMatrixLayoutDestroy(p->lx);
    if (p->ly) cublasLtMatrixLayoutDestroy(p->ly);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

// The cached plan for the key, or NULL.
static gemm_plan *plan_find(plan_cache *c, int64_t N, int64_t K, int T, uint32_t aw, uint32_t ay,
                            bool inv) {
    for (int i = 0; i < c->n; i++) {
        gemm_plan *p = &c->p[i];
        if (p->N == N && p->K == K && p->T == T && p->align_w == aw && p->align_y == ay &&
            p->invariant == inv)
            return p;
    }
    return NULL;
}

// A cleared slot for a new plan: a free one, else the next round-robin victim, destroyed. The
// caller fills it; a slot left with N = 0 never matches a lookup.
static gemm_plan *plan_slot(plan_cache *c) {
    gemm_plan *p;
    if (c->n < CUDA_MAX_PLANS) {
        p = &c->p[c->n++];
    } else {
        p = &c->p[c->next_evict];
        c->next_evict = (c->next_evict + 1) % CUDA_MAX_PLANS;
    }
    plan_destroy(p);
    return p;
}

// A heuristic preference: the 32 MiB workspace, the pointers' alignments (A, B, and C = D), and
// with no_split_k only plans that do not split K (batch-invariant: no reduction scheme).
static cublasStatus_t pref_create(cublasLtMatmulPreference_t *pref, uint32_t align_a,
                                  uint32_t align_b, uint32_t align_cd, bool no_split_k) {
    const uint64_t ws = CUDA_GEMM_WORKSPACE;
    const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(pref);
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const void *v;
        size_t n;
    } set[] = {{CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof align_cd},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof align_cd},
               {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof no_reduction}};
    const int n = no_split_k ? 6 : 5;
    for (int i = 0; i < n && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(*pref, set[i].attr, set[i].v, set[i].n);
    return s;
}

// Finds or builds the plan for (N, K, T, alignments); NULL after recording an error.
static gemm_plan *plan_get(li_cuda_impl *im, int64_t N, int64_t K, int T, uint32_t aw,
                           uint32_t ay, bool inv) {
    gemm_plan *p = plan_find(&im->plans, N, K, T, aw, ay, inv);
    if (p) return p;
    p = plan_slot(&im->plans);
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    uint32_t ax = 256;  // x goes through the cudaMalloc'd bf16 scratch
    // Batch invariance (be->batch_invariant): without split-K every output element is one K loop
    // in the same order whatever T is, so a row's result does not depend on how many rows share
    // the GEMM. LaCache's truncated head and RoPECache's block-only Q/K/V then give the bits of
    // the full-canvas GEMM (cached = uncached); gpu-check tests it.
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    cublasStatus_t s;
    const char *op = "matmul (cuBLASLt plan)";
    if (lt_fail(im, op, s = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        lt_fail(im, op, s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                            &ta, sizeof ta)) ||
        lt_fail(im, op, s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                            &tb, sizeof tb)) ||
        lt_fail(im, op, s = cublasLtMatrixLayoutCreate(&p->lw, CUDA_R_16BF, (uint64_t)K,
                                                        (uint64_t)N, K)) ||
        lt_fail(im, op, s = cublasLtMatrixLayoutCreate(&p->lx, CUDA_R_16BF, (uint64_t)K,
                                                        (uint64_t)T, K)) ||
        lt_fail(im, op, s = cublasLtMatrixLayoutCreate(&p->ly, CUDA_R_32F, (uint64_t)N,
                                                        (uint64_t)T, N)) ||
        lt_fail(im, op, s = pref_create(&pref, aw, ax, ay, inv)) ||
        lt_fail(im, op, s = cublasLtMatmulAlgoGetHeuristic(im->lt, p->desc, p->lw, p->lx, p->ly,
                                                            p->ly, pref, 1, &res, &n_res)))
        goto fail;
    if (n_res == 0) {
        record(im, LI_ERR_UNSUPPORTED, "cuda matmul: cuBLASLt has no algorithm for N=%lld K=%lld "
               "T=%d (alignments W %u, y %u)", (long long)N, (long long)K, T, aw, ay);
        goto fail;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    p->algo = res.algo;
    p->N = N;
    p->K = K;
    p->T = T;
    snprintf(p->name, sizeof p->name, "matmul bf16 N=%lld K=%lld",
             (long long)N, (long long)K);
    p->align_w = aw;
    p->align_y = ay;
    p->invariant = inv;
    return p;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_destroy(p);  // leaves N = 0: never matches a lookup
    return NULL;
}

// The weight check matmul and matmul_bf16 share: false (recorded) unless W is bf16.
static bool weight_bf16(li_cuda_impl *im, const char *op, const li_weight *W) {
    if (W->dtype == LI_DTYPE_BF16) return true;
    record(im, LI_ERR_UNSUPPORTED, "cuda %s: weight dtype %s (this backend takes bf16)", op,
           li_dtype_name(W->dtype));
    return false;
}

// y (T, N) = xb (T, K) bf16 @ W^T through the cached plan; beta 1 adds to y (C = D = y).
static void gemm_bf16(li_backend *be, float *y, const uint16_t *xb, const li_weight *W, int T,
                      float beta) {
    li_cuda_impl *im = be->impl;
    gemm_plan *p = plan_get(im, W->n_rows, W->n_cols, T, ptr_align(W->data), ptr_align(y),
                            be->batch_invariant);
    if (!p) return;
    const float alpha = 1.0f;
    lt_fail(im, p->name, cublasLtMatmul(im->lt, p->desc, &alpha, W->data, p->lw, xb, p->lx,
                                         &beta, y, p->ly, y, p->ly, &p->algo, im->ws,
                                         CUDA_GEMM_WORKSPACE, im->stream));
}

static void cu_matmul(li_backend *be, float *y, const float *x, const li_weight *W, int T) {
    li_cuda_impl *im = be->impl;
    int64_t N = W->n_rows, K = W->n_cols;
    if (T <= 0 || N <= 0 || K <= 0 || !weight_bf16(im, "matmul", W)) return;
    // one row (decode): stream W at full bandwidth — not on a batch-invariant backend, whose rows
    // must equal the same rows of a larger GEMM (the GEMV keeps x in f32, another summation)
    if (!be->batch_invariant && li_cuda_gemv_ok(T, K, W->data, x)) {
        cu_fail(im, "matmul (gemv)", li_cuda_gemv_bf16(im->stream, y, W->data, x, N, K));
        return;
    }
    uint16_t *xb = scratch_get(im, &im->xbf, (size_t)T * (size_t)K * 2, "matmul (bf16 scratch)");
    if (!xb) return;
    if (cu_fail(im, "matmul (f32 -> bf16)", li_cuda_f32_to_bf16(im->stream, xb, x, (int64_t)T * K)))
        return;
    gemm_bf16(be, y, xb, W, T, 0.0f);
}

// matmul with x already bf16 (the op that made x rounded it): the same plan, so the same bits as
// matmul of the f32 x it came from; accumulate (beta = 1, C = D = y) adds the product to y in the
// GEMM's epilogue, fl(acc + y) as the add kernel computes it, saving the residual add's pass
// (3 x 4 bytes per element). x must be 16-byte aligned; one not 256-byte aligned (a plan is
// chosen for the scratch's 256) goes through the scratch.
static void cu_matmul_bf16(li_backend *be, float *y, const uint16_t *x, const li_weight *W, int T,
                           bool accumulate) {
    li_cuda_impl *im = be->impl;
    int64_t N = W->n_rows, K = W->n_cols;
    if (T <= 0 || N <= 0 || K <= 0 || !weight_bf16(im, "matmul_bf16", W)) return;
    if (ptr_align(x) < 256) {
        uint16_t *xb =
            scratch_get(im, &im->xbf, (size_t)T * (size_t)K * 2, "matmul (bf16 scratch)");
        if (!xb) return;
        if (cu_fail(im, "matmul_bf16 (realign)",
                    cudaMemcpyAsync(xb, x, (size_t)T * (size_t)K * 2, cudaMemcpyDeviceToDevice,
                                    im->stream)))
            return;
        x = xb;
    }
    gemm_bf16(be, y, x, W, T, accumulate ? 1.0f : 0.0f);
}

// ---- the other ops ----------------------------------------------------------------------------

static void cu_embed(li_backend *be, float *out, const li_weight *W, const int32_t *tokens, int T) {
    li_cuda_impl *im = be->impl;
    if (W->dtype != LI_DTYPE_BF16 && W->dtype != LI_DTYPE_F32) {
        record(im, LI_ERR_UNSUPPORTED, "cuda embed: weight dtype %s (bf16 or f32 only)",
               li_dtype_name(W->dtype));
        return;
    }
    cu_fail(im, "embed", li_cuda_embed(im->stream, out, W->data, W->dtype == LI_DTYPE_BF16,
                                       W->n_cols, tokens, T));
}

static void cu_rmsnorm(li_backend *be, float *out, const float *x, const float *w, int T, int D,
                       float eps) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "rmsnorm", li_cuda_rmsnorm(im->stream, out, x, w, T, D, eps));
}

static void cu_add(li_backend *be, float *x, const float *y, int64_t n) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "add", li_cuda_add(im->stream, x, y, n));
}

static void cu_add_rmsnorm(li_backend *be, float *out, float *x, const float *y, const float *w,
                           int T, int D, float eps) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "add_rmsnorm", li_cuda_add_rmsnorm(im->stream, out, x, y, w, T, D, eps));
}

static void cu_rope(li_backend *be, float *x, const int32_t *pos, int T, int nh, int Dh,
                    const li_rope_table *table) {
    li_cuda_impl *im = be->impl;
    li_cuda_rope_args r = rope_args(table);
    cu_fail(im, "rope", li_cuda_rope(im->stream, x, pos, T, nh, Dh, &r));
}

static void cu_kv_store(li_backend *be, const li_kv_storage *kv, int il, const float *k,
                        const float *v, const int64_t *slot, int T) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "kv_store",
            li_cuda_kv_store(im->stream, kv->data, kv->dtype == LI_DTYPE_BF16, kv->n_layer,
                             kv->n_head_kv, kv->head_dim, kv->page_size, il, k, v, slot, T));
}

static void cu_kv_copy_rotate(li_backend *be, const li_kv_storage *kv, int64_t src, int64_t dst,
                              int count, int64_t delta, const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    li_cuda_rope_args r;
    memset(&r, 0, sizeof r);
    if (rope) r = rope_args(rope);
    else if (delta != 0) {
        record(im, LI_ERR_INVALID_ARG, "cuda kv_copy_rotate: delta %lld without a rope table",
               (long long)delta);
        return;
    }
    cu_fail(im, "kv_copy_rotate",
            li_cuda_kv_copy_rotate(im->stream, kv->data, kv->dtype == LI_DTYPE_BF16, kv->n_layer,
                                   kv->n_head_kv, kv->head_dim, kv->page_size, src, dst, count,
                                   delta, &r));
}

// The decode attention's split-K tickets: zeroed when allocated, left zero by every launch.
static unsigned *attn_tickets(li_cuda_impl *im, size_t n) {
    size_t cap = im->tickets.cap;
    unsigned *p =
        scratch_get(im, &im->tickets, n * sizeof(unsigned), "attention (split-K tickets)");
    if (p && im->tickets.cap != cap &&
        cu_fail(im, "attention (split-K tickets)",
                cudaMemsetAsync(p, 0, im->tickets.cap, im->stream)))
        return NULL;
    return p;
}

// The kernel arguments every attention launch shares; false (error recorded) for a bad shape.
static bool attn_args(li_cuda_impl *im, li_cuda_attn_args *a, float *out, const float *q, int T,
                      int H, const li_kv_storage *kv, int il, const uint64_t *pages, int n_pages,
                      const int32_t *kv_first, const int32_t *n_visible, float scale,
                      const li_rope_table *rope) {
    memset(a, 0, sizeof *a);
    a->out = out;
    a->q = q;
    a->T = T;
    a->H = H;
    a->Hkv = kv->n_head_kv;
    a->Dh = kv->head_dim;
    a->P = kv->page_size;
    a->L = kv->n_layer;
    a->il = il;
    a->kv = kv->data;
    a->kv_bf16 = kv->dtype == LI_DTYPE_BF16;
    a->pages = pages;
    a->n_pages = n_pages;
    a->kv_first = kv_first;
    a->n_visible = n_visible;
    a->scale = scale;
    a->rotate = rope != NULL;
    if (a->Hkv <= 0 || H % a->Hkv) {
        record(im, LI_ERR_INVALID_ARG, "cuda attention: H %d is not a multiple of Hkv %d", H,
               a->Hkv);
        return false;
    }
    return true;
}

// Split-K for the decode kernels: the plan, then partials and tickets from scratch.
static bool attn_split(li_cuda_impl *im, li_cuda_attn_args *a) {
    li_cuda_attention_plan(a->T, a->Hkv, a->H / a->Hkv, a->Dh, a->kv_bf16, a->n_pages, im->n_sm,
                           &a->n_split, &a->pages_per_split);
    if (a->n_split == 1) return true;
    size_t n_o = (size_t)a->T * a->H * a->n_split * a->Dh,
           n_ml = (size_t)a->T * a->H * a->n_split * 2;
    float *part =
        scratch_get(im, &im->attn, (n_o + n_ml) * sizeof(float), "attention (split-K partials)");
    if (!part) return false;
    a->part_o = part;
    a->part_ml = part + n_o;
    a->tickets = attn_tickets(im, (size_t)a->T * a->Hkv);
    return a->tickets != NULL;
}

// ---- attention through cuDNN -------------------------------------------------------------------
//
// Prefill chunks (T >= LI_CUDNN_MIN_ROWS rows) over the paged pool run as cuDNN SDPA calls: the
// call is cut into blocks by attn-blocks.c (each block: a group of rows over a run of keys with
// one Δ, non-causal or ending on the rows' diagonal), every block's rows rotated back by its Δ
// into bf16 (li_cuda_blocks_q), its keys gathered from the pool's pages into a dense bf16 block
// (li_cuda_blocks_gather), the non-causal blocks in one cuDNN call and the causal ones in another
// (the batch slots of a call are the blocks), and the blocks merged by their log-sum-exp
// (li_cuda_blocks_merge). One physical copy of each document serves every position, as in the
// native kernels. Napkin maths: attention of T rows over n keys is 4 T n H Dh FLOP (half that
// causal); cuDNN reaches 450-530 TFLOP/s on causal T 4096; the extra passes move ~6 bytes per
// query element and 8 per K / V element — ~10 % of a 2048-row chunk's time at 20 K keys.
// Measured on the H200 (docs/BENCHMARKS.md): reading the pages through cuDNN's page tables was
// slower than gathering them first (0.48 vs 0.43 ms at causal T 4096, 1.42 vs 1.21 ms for a
// 2048-row chunk over 20 K keys), so only the gathered layout is kept; and 64 query rows over
// five cached documents run faster on our split-K kernel (0.09 vs 0.13 ms), hence the row bound.
#define LI_CUDNN_MIN_ROWS 256

static unsigned pow2_at_least(unsigned n, unsigned floor) {
    unsigned p = floor;
    while (p < n) p <<= 1;
    return p;
}

// Loads cuDNN on first use; false (with the reason in cudnn_note, recorded as an error under
// LI_ATTN_LIBRARY) when it cannot be used.
static bool cudnn_ready(li_backend *be) {
    li_cuda_impl *im = be->impl;
    if (!im->cudnn_tried) {
        im->cudnn_tried = true;
        im->cudnn = li_cudnn_open(im->stream, im->cudnn_note, sizeof im->cudnn_note);
    }
    if (!im->cudnn && be->attn_impl == LI_ATTN_LIBRARY)
        record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: %s", im->cudnn_note);
    return im->cudnn != NULL;
}

// Runs one cuDNN call; 0 queued, 1 cuDNN refused the shape (nothing queued), -1 error recorded.
static int cudnn_call(li_backend *be, const li_sdpa_args *a, const char *op) {
    li_cuda_impl *im = be->impl;
    char err[512] = "";
    int rc = li_cudnn_sdpa(im->cudnn, a, err, sizeof err);
    if (rc == 0) prof_mark(im, op);
    else if (rc < 0) record(im, LI_ERR_BACKEND, "cuda %s: %s", op, err);
    else if (be->attn_impl == LI_ATTN_LIBRARY) record(im, LI_ERR_UNSUPPORTED, "cuda %s: %s", op, err);
    else snprintf(im->cudnn_note, sizeof im->cudnn_note, "%s", err);
    return rc;
}

static bool grow_host(void **p, int *cap, int n, size_t size) {
    if (n <= *cap) return true;
    int c = *cap > 16 ? *cap : 16;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

// The host inputs that decide a call's plan, as one int64 vector: P, the sequences' count, then
// per sequence its rows (t0, n), whether it has kv_first, its page words, and its rows' n_visible
// (and kv_first). Equal vectors: equal plans (the layers of one forward, or a repeated batch).
static bool lib_plan_key(li_cuda_impl *im, int64_t **key, int *len, int *cap,
                         const li_attn_seq *seqs, int n_seqs, int P) {
    int n = 2;
    for (int i = 0; i < n_seqs; i++)
        n += 4 + seqs[i].kv.n_pages + seqs[i].n * (seqs[i].kv.kv_first_host ? 2 : 1);
    if (!grow_host((void **)key, cap, n, sizeof **key)) {
        record(im, LI_ERR_OOM, "cuda attention (cudnn plan): out of host memory");
        return false;
    }
    int64_t *k = *key;
    int at = 0;
    k[at++] = P;
    k[at++] = n_seqs;
    for (int i = 0; i < n_seqs; i++) {
        const li_attn_seq *sq = &seqs[i];
        const bool has_first = sq->kv.kv_first_host != NULL;
        k[at++] = sq->t0, k[at++] = sq->n, k[at++] = sq->kv.n_pages, k[at++] = has_first;
        for (int p = 0; p < sq->kv.n_pages; p++) k[at++] = (int64_t)sq->kv.pages_host[p];
        for (int t = 0; t < sq->n; t++) k[at++] = sq->kv.n_visible_host[t];
        for (int t = 0; has_first && t < sq->n; t++) k[at++] = sq->kv.kv_first_host[t];
    }
    *len = at;
    return true;
}

// Packs the blocks of the covered sequences into p's slots (non-causal first, then causal, each
// call padded to a power of two with one-row, one-key slots), their page lists, the rows' slot
// lists, and uploads them in one copy. false: the plan does not apply (p->ok stays false) or an
// error was recorded.
static bool lib_plan_pack(li_cuda_impl *im, lib_plan *p, const li_attn_seq *seqs, int n_seqs,
                          int P, int H, int Hkv, int Dh) {
    const li_attn_blocks *bl = im->lib_blocks;
    int n_nc = 0, n_c = 0, n_pages = 0, n_list = 0, n_rows = 0;
    p->max_rows = p->max_keys = 1;
    for (int i = 0; i < n_seqs; i++) {
        if (!p->covered[i]) continue;
        const li_attn_blocks *b = &bl[i];
        n_nc += b->n_noncausal;
        n_c += b->n_entries - b->n_noncausal;
        n_list += b->group_first[b->n_groups];
        n_rows += seqs[i].n;
        for (int e = 0; e < b->n_entries; e++) {
            const li_attn_entry *en = &b->entries[e];
            const int off = (int)((en->key0 - b->segs[en->seg].k0) % P);
            n_pages += (off + en->n_keys + P - 1) / P;
        }
        if (b->max_rows > p->max_rows) p->max_rows = b->max_rows;
        if (b->max_keys > p->max_keys) p->max_keys = b->max_keys;
    }
    p->B1 = n_nc ? (int)pow2_at_least((unsigned)n_nc, 1) : 0;
    p->B2 = n_c ? (int)pow2_at_least((unsigned)n_c, 1) : 0;
    const int n_slots = p->B1 + p->B2;
    if (n_slots == 0 || n_slots > 65535) return false;
    // row and key bounds rounded up to powers of two: a new batch reuses a plan of its class
    p->s_q = (int)pow2_at_least((unsigned)p->max_rows, 16);
    p->s_kv = (int)pow2_at_least((unsigned)p->max_keys, 64);
    p->n_rows = n_rows;
    n_pages += n_slots - n_nc - n_c;  // a padding slot reads one page

    size_t n_slot_b = (size_t)n_slots * sizeof(li_cuda_block_slot), n_len_b = (size_t)n_slots * 4;
    size_t n_off_b = ((size_t)n_slots + 1) * 4, n_pages_b = (size_t)n_pages * 4;
    size_t n_rows_b = (size_t)n_rows * sizeof(li_cuda_block_row), n_list_b = (size_t)n_list * 4;
    size_t bytes = n_slot_b + 2 * n_len_b + 3 * n_off_b + n_pages_b + n_rows_b + n_list_b;
    int n_entries = 0;
    for (int i = 0; i < n_seqs; i++) n_entries += p->covered[i] ? bl[i].n_entries : 0;
    char *h = malloc(bytes);
    int *slot_of = malloc((size_t)(n_entries ? n_entries : 1) * sizeof *slot_of);
    if (!h || !slot_of) {
        free(h);
        free(slot_of);
        record(im, LI_ERR_OOM, "cuda attention (cudnn plan): out of host memory");
        return false;
    }
    li_cuda_block_slot *slots = (li_cuda_block_slot *)h;
    int32_t *seq_q = (int32_t *)(h + n_slot_b), *seq_kv = seq_q + n_slots;
    int32_t *q_off = seq_kv + n_slots, *kv_off = q_off + n_slots + 1, *lse_off = kv_off + n_slots + 1;
    int32_t *pages = lse_off + n_slots + 1;
    li_cuda_block_row *rows = (li_cuda_block_row *)(pages + n_pages);
    int32_t *list = (int32_t *)(rows + n_rows);
    // slots: pass 0 the non-causal blocks of every covered sequence, pass 1 the causal ones
    int64_t q_row = 0, kv_row = 0;
    int slot = 0, page = 0, first_row = -1;
    for (int pass = 0; pass < 2; pass++) {
        int base = 0;  // entry ids of sequence i in slot_of start at base
        for (int i = 0; i < n_seqs; i++) {
            if (!p->covered[i]) continue;
            const li_attn_blocks *b = &bl[i];
            if (first_row < 0) first_row = seqs[i].t0;
            const int e0 = pass ? b->n_noncausal : 0, e1 = pass ? b->n_entries : b->n_noncausal;
            for (int e = e0; e < e1; e++) {
                const li_attn_entry *en = &b->entries[e];
                const li_attn_segment *sg = &b->segs[en->seg];
                const int64_t rel = en->key0 - sg->k0;
                const int pg0 = sg->page0 + (int)(rel / P), off = (int)(rel % P);
                const int n_pg = (off + en->n_keys + P - 1) / P;
                const li_attn_group *gr = &b->groups[en->group];
                slots[slot] = (li_cuda_block_slot){
                    .row0 = seqs[i].t0 + gr->t0, .n_rows = gr->n, .delta = (int32_t)sg->delta,
                    .off = off, .n_keys = en->n_keys, .q_row = (int32_t)q_row,
                    .kv_row = (int32_t)kv_row, .table0 = page};
                for (int k = 0; k < n_pg; k++)
                    pages[page++] = (int32_t)li_page_id(seqs[i].kv.pages_host[pg0 + k]);
                slot_of[base + e] = slot++;
                q_row += gr->n;
                kv_row += (en->n_keys + 255) & ~255;  // room for the zeroed tail
            }
            base += b->n_entries;
        }
        const int pad_to = pass ? p->B1 + p->B2 : p->B1;
        while (slot < pad_to) {  // one row over one real key; its output is never read
            slots[slot] = (li_cuda_block_slot){.row0 = first_row, .n_rows = 1, .n_keys = 1,
                                               .q_row = (int32_t)q_row, .kv_row = (int32_t)kv_row,
                                               .table0 = page};
            pages[page++] = pages[0];
            slot++;
            q_row += 1;
            kv_row += 256;
        }
    }
    for (int s = 0; s < n_slots; s++) {
        seq_q[s] = slots[s].n_rows;
        seq_kv[s] = slots[s].n_keys;
        q_off[s] = slots[s].q_row * H * Dh;
        kv_off[s] = slots[s].kv_row * Hkv * Dh;
        lse_off[s] = slots[s].q_row * H;
    }
    q_off[n_slots] = (int32_t)(q_row * H * Dh);
    kv_off[n_slots] = (int32_t)(kv_row * Hkv * Dh);
    lse_off[n_slots] = (int32_t)(q_row * H);
    p->q_rows = q_row;
    p->kv_keys = kv_row;
    // rows: each covered row's output row and its group's slots
    int r_at = 0, l_at = 0, base = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (!p->covered[i]) continue;
        const li_attn_blocks *b = &bl[i];
        for (int g = 0; g < b->n_groups; g++) {
            const int first = l_at;
            for (int k = b->group_first[g]; k < b->group_first[g + 1]; k++)
                list[l_at++] = slot_of[base + b->group_entries[k]];
            for (int r = 0; r < b->groups[g].n; r++)
                rows[r_at++] = (li_cuda_block_row){.first = first, .count = l_at - first, .r = r,
                                                   .t = seqs[i].t0 + b->groups[g].t0 + r};
        }
        base += b->n_entries;
    }
    free(slot_of);
    bool ok = true;
    if (bytes > p->dev_cap) {
        cudaFree(p->dev);
        p->dev = NULL;
        p->dev_cap = 0;
        im->scratch_allocs++;
        ok = !cu_fail(im, "attention (cudnn plan)", cudaMalloc(&p->dev, bytes));
        if (ok) p->dev_cap = bytes;
    }
    ok = ok && !cu_fail(im, "attention (cudnn plan upload)",
                        cudaMemcpyAsync(p->dev, h, bytes, cudaMemcpyHostToDevice, im->stream));
    free(h);  // pageable source: staged before cudaMemcpyAsync returns
    if (!ok) return false;
    char *d = p->dev;
    p->d_slots = (li_cuda_block_slot *)d;
    p->d_seq_q = (int32_t *)(d + n_slot_b);
    p->d_seq_kv = p->d_seq_q + n_slots;
    p->d_q_off = p->d_seq_kv + n_slots;
    p->d_kv_off = p->d_q_off + n_slots + 1;
    p->d_lse_off = p->d_kv_off + n_slots + 1;
    p->d_pages = p->d_lse_off + n_slots + 1;
    p->d_rows = (li_cuda_block_row *)(p->d_pages + n_pages);
    p->d_slot_list = (int32_t *)(p->d_rows + n_rows);
    return true;
}

// The plan for this call: found among the kept ones (same host inputs) or made and uploaded.
// Sequences of min_rows rows or more whose visibility splits into blocks are covered; the plan
// applies (p->ok) when they hold min_total rows in all and the packed offsets fit int32. NULL:
// an error was recorded.
static lib_plan *lib_plan_get(li_cuda_impl *im, const li_attn_seq *seqs, int n_seqs, int P,
                              int H, int Hkv, int Dh, int min_rows, int min_total) {
    im->lib_tick++;
    lib_plan *lru = &im->lib[0];
    lib_plan *probe = &im->lib[LI_LIB_PLANS];  // the key of this call, built in a spare entry
    if (!lib_plan_key(im, &probe->key, &probe->key_len, &probe->key_cap, seqs, n_seqs, P))
        return NULL;
    for (int i = 0; i < LI_LIB_PLANS; i++) {
        lib_plan *p = &im->lib[i];
        if (p->key_len == probe->key_len &&
            !memcmp(p->key, probe->key, (size_t)p->key_len * sizeof *p->key)) {
            p->last_used = im->lib_tick;
            return p;
        }
        if (p->last_used < lru->last_used) lru = p;
    }
    lib_plan *p = lru;
    int64_t *k = p->key;  // swap keys: the probe's becomes the plan's
    int cap = p->key_cap;
    p->key = probe->key, p->key_len = probe->key_len, p->key_cap = probe->key_cap;
    probe->key = k, probe->key_cap = cap, probe->key_len = 0;
    p->last_used = im->lib_tick;
    p->ok = false;
    if (!grow_host((void **)&p->covered, &p->cap_seqs, n_seqs, 1) ||
        !grow_host((void **)&im->lib_blocks, &im->lib_cap_blocks, n_seqs, sizeof(li_attn_blocks))) {
        p->key_len = 0;
        record(im, LI_ERR_OOM, "cuda attention (cudnn plan): out of host memory");
        return NULL;
    }
    // grow_host leaves new li_attn_blocks uninitialised: zero them once (they own their arrays)
    for (int i = im->lib_init_blocks; i < im->lib_cap_blocks; i++)
        memset(&im->lib_blocks[i], 0, sizeof im->lib_blocks[i]);
    im->lib_init_blocks = im->lib_cap_blocks;
    p->n_seqs = n_seqs;
    int total = 0;
    for (int i = 0; i < n_seqs; i++) {
        const li_attn_seq *sq = &seqs[i];
        p->covered[i] = sq->n >= min_rows && sq->kv.pages_host && sq->kv.n_visible_host &&
                        li_attn_blocks_plan(&im->lib_blocks[i], sq->kv.pages_host, sq->kv.n_pages,
                                            P, sq->kv.kv_first_host, sq->kv.n_visible_host, sq->n);
        if (p->covered[i]) total += sq->n;
    }
    if (total == 0 || total < min_total) return p;
    if (!lib_plan_pack(im, p, seqs, n_seqs, P, H, Hkv, Dh)) return im->err == LI_OK ? p : NULL;
    // element offsets are int32 in the library's ragged tensors
    p->ok = p->q_rows * H * Dh < INT32_MAX && p->kv_keys * Hkv * Dh < INT32_MAX;
    return p;
}

void li_backend_cuda_attn_note(li_backend *be, char *buf, size_t n) {
    li_cuda_impl *im = be->impl;
    if (!im->cudnn) {
        snprintf(buf, n, "not used: %s", im->cudnn_tried ? im->cudnn_note : "no call asked for it");
        return;
    }
    li_cudnn_stats cs;
    li_cudnn_get_stats(im->cudnn, &cs);
    snprintf(buf, n, "cuDNN %d: %lld plans built in %.1f ms, %lld calls, %lld shapes refused%s%s",
             li_cudnn_version(im->cudnn), (long long)cs.plans_built, cs.build_ms,
             (long long)cs.calls, (long long)cs.unsupported, im->cudnn_note[0] ? "; last: " : "",
             im->cudnn_note);
}

// The multi-row chunks of a batch's sequences through cuDNN, all in one non-causal and one
// causal call. Returns the plan (its `covered` says which sequences it ran: the caller runs the
// others on its own kernels) or NULL when none ran through cuDNN (nothing was queued that writes
// `out`, or an error was recorded).
static const lib_plan *attention_cudnn(li_backend *be, float *out, const float *q, int n_seqs,
                                       const li_attn_seq *seqs, int H, const li_kv_storage *kv,
                                       int il, float scale, const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    const int Hkv = kv->n_head_kv, Dh = kv->head_dim, P = kv->page_size;
    const bool lib = be->attn_impl == LI_ATTN_LIBRARY;
    if (be->attn_impl == LI_ATTN_NATIVE || im->capturing || n_seqs <= 0) return NULL;
    if (kv->dtype != LI_DTYPE_BF16 || Dh % 8 || Dh > 256 || Hkv <= 0 || H % Hkv) {
        if (lib)
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: needs a bf16 KV pool and a head "
                   "size that is a multiple of 8 up to 256 (pool %s, Dh %d)",
                   li_dtype_name(kv->dtype), Dh);
        return NULL;
    }
    // auto: the row bound over the call; --attn-impl cudnn: every chunk of 2 rows or more
    int multi = 0;
    for (int i = 0; i < n_seqs; i++) multi += seqs[i].n >= 2 ? seqs[i].n : 0;
    if (multi == 0 || (!lib && multi < LI_CUDNN_MIN_ROWS)) return NULL;
    if (!cudnn_ready(be)) return NULL;
    lib_plan *p = lib_plan_get(im, seqs, n_seqs, P, H, Hkv, Dh, 2, lib ? 1 : LI_CUDNN_MIN_ROWS);
    if (!p || !p->ok) {
        if (p && lib && im->err == LI_OK)
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: no sequence of this call has a "
                   "visibility pattern that splits into library blocks (attn-blocks.h)");
        return NULL;
    }
    bool any_delta = false;
    for (int i = 0; i < n_seqs && !any_delta; i++)
        for (int k = 0; p->covered[i] && k < seqs[i].kv.n_pages && !any_delta; k++)
            any_delta = li_page_delta(seqs[i].kv.pages_host[k]) != 0;
    if (any_delta && !rope) {
        record(im, LI_ERR_INVALID_ARG, "cuda attention: pages with a RoPE offset but no table");
        return NULL;
    }
    const int n_slots = p->B1 + p->B2;
    // packed Q / O rows and gathered keys, plus a tile of slack: the library reads whole tiles
    const size_t q_elems = (size_t)(p->q_rows + 256) * H * Dh;
    uint16_t *qb = scratch_get(im, &im->lib_q, q_elems * 2, "attention (cudnn q)");
    uint16_t *ob = scratch_get(im, &im->lib_o, q_elems * 2, "attention (cudnn o)");
    float *lse = scratch_get(im, &im->lib_lse, (size_t)(p->q_rows + 256) * H * 4,
                             "attention (cudnn lse)");
    const size_t kv_elems = (size_t)(p->kv_keys + 256) * Hkv * Dh;
    uint16_t *kb = scratch_get(im, &im->lib_kv, kv_elems * 4, "attention (cudnn gathered K / V)");
    if (!qb || !ob || !lse || !kb) return NULL;
    uint16_t *vb = kb + kv_elems;
    li_cuda_rope_args r;
    memset(&r, 0, sizeof r);
    if (rope) r = rope_args(rope);
    if (cu_fail(im, "attention (cudnn q)",
                li_cuda_blocks_q(im->stream, qb, q, p->d_slots, n_slots, p->max_rows, H, Dh, &r)) ||
        cu_fail(im, "attention (cudnn gather)",
                li_cuda_blocks_gather(im->stream, kb, vb, kv->data, kv->n_layer, il, Hkv, P, Dh,
                                      p->d_slots, p->d_pages, n_slots, p->max_keys)))
        return NULL;
    for (int causal = 0; causal < 2; causal++) {
        const int s0 = causal ? p->B1 : 0, nb = causal ? p->B2 : p->B1;
        if (nb == 0) continue;
        li_sdpa_args a = {
            .kind = LI_SDPA_RAGGED, .b = nb, .H = H, .Hkv = Hkv, .Dh = Dh, .s_q = p->s_q,
            .s_kv = p->s_kv, .causal = causal, .scale = scale, .q = qb, .o = ob, .k = kb,
            .v = vb, .lse = lse, .seq_q = p->d_seq_q + s0, .seq_kv = p->d_seq_kv + s0,
            .q_off = p->d_q_off + s0, .kv_off = p->d_kv_off + s0, .lse_off = p->d_lse_off + s0};
        int rc = cudnn_call(be, &a, causal ? "attention (cudnn causal)" : "attention (cudnn)");
        if (rc < 0) return NULL;
        if (rc > 0) {  // refused: this call runs on our kernels from now on
            p->ok = false;
            return NULL;
        }
    }
    if (cu_fail(im, "attention (cudnn merge)",
                li_cuda_blocks_merge(im->stream, out, ob, lse, p->d_slots, p->d_rows,
                                     p->d_slot_list, p->n_rows, H, Dh)))
        return NULL;
    return p;
}

// attention_dense / attention_dense_bf16 through cuDNN: q converted to bf16 (unscaled: cuDNN
// scales the scores in fp32), K / V bf16, out bf16 (outb) or f32 (outf, through lib_o). false
// when it does not apply (the caller runs its kernel).
static bool dense_cudnn(li_backend *be, float *outf, uint16_t *outb, const float *q, int T, int H,
                        const uint16_t *k, const uint16_t *v, int nk, int Hkv, int Dh,
                        float scale) {
    li_cuda_impl *im = be->impl;
    // Recorded into step graphs too (a key's first step ran eagerly, so the plan and scratch
    // exist): a graph must compute the bits of the op-by-op step. If cuDNN cannot be recorded,
    // the recording fails and graph_end re-runs the step eagerly, through cuDNN again.
    if (be->attn_impl == LI_ATTN_NATIVE || T < 1 || nk < 1) return false;
    if (Dh % 8 || Dh > 256 || Hkv <= 0 || H % Hkv) {
        if (be->attn_impl == LI_ATTN_LIBRARY)
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: head size %d not supported", Dh);
        return be->attn_impl == LI_ATTN_LIBRARY;
    }
    if (!cudnn_ready(be)) return be->attn_impl == LI_ATTN_LIBRARY;
    const size_t nq = (size_t)T * H * Dh;
    uint16_t *qb = scratch_get(im, &im->lib_q, nq * 2, "attention_dense (cudnn q)");
    uint16_t *ob = outb ? outb : scratch_get(im, &im->lib_o, nq * 2, "attention_dense (cudnn o)");
    if (!qb || !ob) return true;
    if (cu_fail(im, "attention_dense (cudnn q)", li_cuda_f32_to_bf16(im->stream, qb, q, (int64_t)nq)))
        return true;
    li_sdpa_args a = {.kind = LI_SDPA_DENSE, .b = 1, .H = H, .Hkv = Hkv, .Dh = Dh, .s_q = T,
                      .s_kv = nk, .scale = scale, .q = qb, .k = k, .v = v, .o = ob};
    int rc = cudnn_call(be, &a, "attention_dense (cudnn)");
    if (rc > 0) return be->attn_impl == LI_ATTN_LIBRARY;
    if (rc == 0 && outf)
        cu_fail(im, "attention_dense (cudnn out)", li_cuda_bf16_to_f32(im->stream, outf, ob, (int64_t)nq));
    return true;
}

// One sequence's rows on our own kernels (the decode kernel for few rows, the tensor-core tile
// kernel for many).
static void attention_native(li_backend *be, float *out, const float *q, int T, int H,
                             const li_kv_storage *kv, int il, const li_kv_seq *seq,
                             const int32_t *kv_first, const int32_t *n_visible, float scale,
                             const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    li_cuda_attn_args a;
    if (T <= 0 || !attn_args(im, &a, out, q, T, H, kv, il, seq->pages, seq->n_pages, kv_first,
                             n_visible, scale, rope))
        return;
    li_cuda_rope_args r;
    if (rope) r = rope_args(rope);
    if (li_cuda_attention_uses_tc(T, a.Dh)) { // many rows: the tensor-core tile kernel
        if (seq->n_pages < 1) {
            record(im, LI_ERR_INVALID_ARG, "cuda attention: a sequence without pages");
            return;
        }
        // one word per page slot, then the number of keys the page table holds
        uint64_t *keys = scratch_get(im, &im->keys, ((size_t)seq->n_pages * kv->page_size + 1) * 8,
                                     "attention (key index)");
        if (!keys) return;
        // few row tiles (a query over cached documents): split the keys so that the GPU fills
        li_cuda_attention_prefill_plan(T, H, seq->n_pages * kv->page_size, im->n_sm, &a.n_split,
                                       &a.keys_per_split);
        if (a.n_split > 1) {
            size_t n_o = (size_t)T * H * a.n_split * a.Dh, n_ml = (size_t)T * H * a.n_split * 2;
            float *part = scratch_get(im, &im->attn, (n_o + n_ml) * sizeof(float),
                                      "attention (prefill split-K partials)");
            if (!part) return;
            a.part_o = part;
            a.part_ml = part + n_o;
        }
        li_cuda_rope_args none;
        memset(&none, 0, sizeof none);
        cu_fail(im, "attention (prefill)",
                li_cuda_attention_prefill(im->stream, &a, rope ? &r : &none, keys));
        return;
    }
    if (attn_split(im, &a))
        cu_fail(im, "attention", li_cuda_attention(im->stream, &a, rope ? &r : NULL));
}

// Several sequences' rows (backend.h attention_seqs): the multi-row chunks through cuDNN in one
// call when it applies (attention_cudnn), the rest sequence by sequence on our kernels.
static void cu_attention_seqs(li_backend *be, float *out, const float *q, int n_seqs,
                              const li_attn_seq *seqs, int H, const li_kv_storage *kv, int il,
                              const int32_t *kv_first, const int32_t *n_visible, float scale,
                              const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    const size_t row = (size_t)H * kv->head_dim;
    const lib_plan *p = attention_cudnn(be, out, q, n_seqs, seqs, H, kv, il, scale, rope);
    const bool lib = be->attn_impl == LI_ATTN_LIBRARY;
    for (int i = 0; i < n_seqs && im->err == LI_OK; i++) {
        const li_attn_seq *sq = &seqs[i];
        if (p && p->covered[i]) continue;
        if (lib && sq->n >= 2) {  // the A/B switch: a chunk the library cannot run is an error
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: a chunk of %d rows has no split "
                   "into library blocks (attn-blocks.h)", sq->n);
            return;
        }
        attention_native(be, out + sq->t0 * row, q + sq->t0 * row, sq->n, H, kv, il, &sq->kv,
                         kv_first ? kv_first + sq->t0 : NULL, n_visible + sq->t0, scale, rope);
    }
}

static void cu_attention(li_backend *be, float *out, const float *q, int T, int H,
                         const li_kv_storage *kv, int il, const li_kv_seq *seq,
                         const int32_t *kv_first, const int32_t *n_visible, float scale,
                         const li_rope_table *rope) {
    li_attn_seq one = {.t0 = 0, .n = T, .kv = *seq};
    cu_attention_seqs(be, out, q, 1, &one, H, kv, il, kv_first, n_visible, scale, rope);
}

// Decode rows of n sequences (backend.h attention_decode): one launch of the slot kernel, each
// row reading its own table (row_page0 = page_start); a launch per row for the shapes it does
// not serve.
static void cu_attention_decode(li_backend *be, float *out, const float *q, int n, int H,
                                const li_kv_storage *kv, int il, const uint64_t *pages,
                                const int32_t *page_start, const int32_t *page_start_host,
                                const int32_t *n_visible, float scale, const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    const int Hkv = kv->n_head_kv;
    if (n <= 0) return;
    if (n > 65535 || Hkv <= 0 || H % Hkv ||
        !li_cuda_attention_rows_ok(H / Hkv, kv->head_dim, kv->dtype == LI_DTYPE_BF16)) {
        li_attention_decode_rows(be, out, q, n, H, kv, il, pages, page_start_host, n_visible, scale,
                                 rope);
        return;
    }
    int max_pages = 0;
    for (int i = 0; i < n; i++) {
        const int np = page_start_host[i + 1] - page_start_host[i];
        if (np < 1) {
            record(im, LI_ERR_INVALID_ARG, "cuda attention: a sequence without pages");
            return;
        }
        if (np > max_pages) max_pages = np;
    }
    li_cuda_attn_args a;
    if (!attn_args(im, &a, out, q, n, H, kv, il, pages, max_pages, NULL, n_visible, scale, rope))
        return;
    a.row_page0 = page_start;
    li_cuda_rope_args r;
    if (rope) r = rope_args(rope);
    if (attn_split(im, &a))
        cu_fail(im, "attention_decode", li_cuda_attention(im->stream, &a, rope ? &r : NULL));
}

static void cu_swiglu(li_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "swiglu", li_cuda_swiglu(im->stream, out, gate, up, n));
}

static void cu_softmax(li_backend *be, float *x, int rows, int n) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "softmax", li_cuda_softmax(im->stream, x, rows, n));
}

static int32_t cu_sample(li_backend *be, const float *logits, int V, const li_sampler_config *cfg,
                         double u) {
    li_cuda_impl *im = be->impl;
    int32_t tok = 0;
    if (cu_fail(im, "sample", li_cuda_sample(&im->sampler, im->stream, logits, V, cfg->temperature,
                                             cfg->top_k, cfg->top_p, cfg->min_p, u, &tok)))
        return 0;
    return tok;
}

// ---- diffusion / FP8 ops (dllm.cu) --------------------------------------------------------------

// Layer-0 attention of LLaDA (FACache carries its state between calls). From 16 query rows at
// Dh 64 / 128 the keys are rounded to bf16 once per call and streamed by the tensor-core kernel
// with the state in and out (64-key tiles, whatever `tile` says: the result is the same online
// softmax within bf16 rounding, and a call's bits depend only on its inputs, so cached = uncached
// still holds). The fp32 kernel took ~1.6 ms of a 32 ms LLaDA-8B step at canvas 1024, 13x the
// time of a tensor-core layer. LI_CUDA_FA_TC=0: the fp32 kernel always (A/B; read per call).
static void cu_flash_attn_tiles(li_backend *be, float *o, float *m, float *l, const float *q,
                                int nq, int H, const float *k, const float *v, int nk, int Hkv,
                                int Dh, int tile, float scale) {
    li_cuda_impl *im = be->impl;
    const char *env = getenv("LI_CUDA_FA_TC");
    if (!(env && env[0] == '0') && li_cuda_attention_uses_tc(nq, Dh) && nk > 0 && Hkv > 0 &&
        H % Hkv == 0) {
        const size_t nkv = (size_t)nk * Hkv * Dh;
        uint16_t *kb = scratch_get(im, &im->dense, nkv * 4, "flash_attn_tiles (bf16 K / V)");
        if (!kb) return;
        uint16_t *vb = kb + nkv;
        if (cu_fail(im, "flash_attn_tiles (bf16 k)",
                    li_cuda_f32_to_bf16(im->stream, kb, k, (int64_t)nkv)) ||
            cu_fail(im, "flash_attn_tiles (bf16 v)",
                    li_cuda_f32_to_bf16(im->stream, vb, v, (int64_t)nkv)))
            return;
        cu_fail(im, "flash_attn_tiles",
                li_cuda_flash_attn_tc(im->stream, o, m, l, q, nq, H, kb, vb, nk, Hkv, Dh, scale));
        return;
    }
    cu_fail(im, "flash_attn_tiles", li_cuda_flash_attn_tiles(im->stream, o, m, l, q, nq, H, k, v,
                                                             nk, Hkv, Dh, tile, scale));
}

static void cu_flash_attn_finalize(li_backend *be, float *out, const float *o, const float *l,
                                   int64_t n, int Dh) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "flash_attn_finalize", li_cuda_flash_attn_finalize(im->stream, out, o, l, n, Dh));
}

static void cu_fp8_quant_rows(li_backend *be, uint8_t *q, float *scale, const float *x, int T,
                              int K) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "fp8_quant_rows", li_cuda_fp8_quant_rows(im->stream, q, scale, x, T, K));
}

static void cu_add_rmsnorm_fp8(li_backend *be, uint8_t *q, float *scale, float *xn, float *x,
                               const float *y, const float *w, int T, int D, float eps) {
    li_cuda_impl *im = be->impl;
    if (li_cuda_fp8_fused_ok(D, true)) {
        cu_fail(im, "add_rmsnorm_fp8",
                li_cuda_add_rmsnorm_fp8(im->stream, q, scale, x, y, w, T, D, eps));
        return;
    }
    cudaError_t e = y ? li_cuda_add_rmsnorm(im->stream, xn, x, y, w, T, D, eps)
                      : li_cuda_rmsnorm(im->stream, xn, x, w, T, D, eps);
    if (!cu_fail(im, "add_rmsnorm_fp8 (unfused)", e))
        cu_fail(im, "add_rmsnorm_fp8 (unfused)", li_cuda_fp8_quant_rows(im->stream, q, scale, xn, T, D));
}

static void cu_swiglu_fp8(li_backend *be, uint8_t *q, float *scale, float *h, const float *gate,
                          const float *up, int T, int F) {
    li_cuda_impl *im = be->impl;
    if (li_cuda_fp8_fused_ok(F, false)) {
        cu_fail(im, "swiglu_fp8", li_cuda_swiglu_fp8(im->stream, q, scale, gate, up, T, F));
        return;
    }
    if (!cu_fail(im, "swiglu_fp8 (unfused)", li_cuda_swiglu(im->stream, h, gate, up, (int64_t)T * F)))
        cu_fail(im, "swiglu_fp8 (unfused)", li_cuda_fp8_quant_rows(im->stream, q, scale, h, T, F));
}

static void cu_matmul_fp8(li_backend *be, float *y, const uint8_t *qa, const float *sa, int T,
                          const li_fp8_weight *W) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "matmul_fp8", li_cuda_matmul_fp8(im->stream, y, qa, sa, T, W->q, W->scale,
                                                 W->n_rows, W->n_cols));
}

// ---- matmul_fp8_fast: cuBLASLt's block-scaled FP8 GEMM ------------------------------------------
//
// y (T, N) = x W^T with x as e4m3 codes qa (T, K) and per-1x128 scales sa (T, K/128), W as codes
// (N, K) and per-128x128 scales (N/128, K/128): "TN" like the bf16 path (W is a column-major K x N
// matrix used transposed, x a K x T matrix), A scale mode BLK128x128_32F, B scale mode
// VEC128_32F, fp32 accumulation and output. Napkin maths: the 8B-class FFN GEMMs at M = 1024 are
// ~100-300 GFLOP each; FP8 tensor cores peak at twice bf16's rate, so ~1.5-1.8x over the bf16
// GEMM is the realistic gain once the activation quantisation is fused (issue 5's goal: 1.5x).
// The scale tables' expected orientation is not spelled out in the header; fp8_calibrate runs the
// library on a small random problem with each orientation and keeps the one that reproduces the
// exact kernel (dllm.cu), so a wrong guess costs a fallback, never a wrong answer. cuBLASLt 13.1
// answers the heuristic with CUBLAS_STATUS_INVALID_VALUE unless the scale pointers are set
// first. Measured on the H200: 900-990 TFLOP/s at M >= 1024 for 12288 x 4096 (1.32-1.38x bf16).

// A cached plan for (N, K, T), or NULL when cuBLASLt cannot serve the shape (not an error: the
// caller falls back to the exact kernel). Pointers are 16-byte aligned (cu_matmul_fp8_fast
// checks), which the preference states so that the heuristic does not assume 256.
static gemm_plan *fp8_plan_get(li_cuda_impl *im, int64_t N, int64_t K, int T, const float *ws,
                               const float *as) {
    const int want = im->fp8_algo;
    for (int i = 0; i < im->fp8_plans.n; i++) {  // 16-byte aligned (the caller checked)
        gemm_plan *q = &im->fp8_plans.p[i];
        if (q->N == N && q->K == K && q->T == T && q->algo_idx == want) return q;
    }
    gemm_plan *p;
    p = plan_slot(&im->fp8_plans);
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int32_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    int32_t mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulHeuristicResult_t res[8];
    int n_res = 0;
    cublasStatus_t hs = CUBLAS_STATUS_NOT_INITIALIZED;
    bool ok =
        cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0 &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma,
                                       sizeof ma) == 0 &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb,
                                       sizeof mb) == 0 &&
        // block scaling: the heuristic checks the scale pointers too (run sets them each call)
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws,
                                       sizeof ws) == 0 &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &as,
                                       sizeof as) == 0 &&
        cublasLtMatrixLayoutCreate(&p->lw, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, K) == 0 &&
        cublasLtMatrixLayoutCreate(&p->lx, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)T, K) == 0 &&
        cublasLtMatrixLayoutCreate(&p->ly, CUDA_R_32F, (uint64_t)N, (uint64_t)T, N) == 0 &&
        pref_create(&pref, 16, 16, 16, false) == 0 &&
        (hs = cublasLtMatmulAlgoGetHeuristic(im->lt, p->desc, p->lw, p->lx, p->ly, p->ly, pref,
                                             want + 1 < 8 ? want + 1 : 8, res, &n_res)) == 0 &&
        n_res > 0;
    im->fp8_status = hs == 0 && n_res == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : (int)hs;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        plan_destroy(p);  // N = 0: never matches a lookup, so the shape is tried again later
        return NULL;
    }
    p->algo = res[want < n_res ? want : n_res - 1].algo;
    p->algo_idx = want;
    p->N = N;
    p->K = K;
    p->T = T;
    p->align_w = p->align_y = 16;
    snprintf(p->name, sizeof p->name, "matmul fp8 N=%lld K=%lld",
             (long long)N, (long long)K);
    return p;
}

// One cuBLASLt FP8 GEMM with the scale tables in the orientation `mode` says (1 + bits). false
// when the library refused (nothing recorded: the caller falls back); a failed transposition is
// recorded like any op's error.
static bool fp8_lt_run(li_cuda_impl *im, int mode, float *y, const uint8_t *qa, const float *sa,
                       int T, const li_fp8_weight *W, bool accumulate) {
    int64_t N = W->n_rows, K = W->n_cols, GN = N / 128, GK = K / 128;
    const float *ws = W->scale, *as = sa;
    if ((mode - 1) & 1) {  // weight scales as (K/128, N/128)
        float *t = scratch_get(im, &im->fp8_ws, (size_t)GN * GK * 4, "matmul_fp8_fast (scales)");
        if (!t || cu_fail(im, "matmul_fp8_fast (transpose)",
                          li_cuda_transpose_f32(im->stream, t, W->scale, (int)GN, (int)GK)))
            return true;  // recorded
        ws = t;
    }
    if ((mode - 1) & 2) {  // activation scales as (K/128, T)
        float *t = scratch_get(im, &im->fp8_as, (size_t)T * GK * 4, "matmul_fp8_fast (scales)");
        if (!t || cu_fail(im, "matmul_fp8_fast (transpose)",
                          li_cuda_transpose_f32(im->stream, t, sa, T, (int)GK)))
            return true;
        as = t;
    }
    gemm_plan *p = fp8_plan_get(im, N, K, T, ws, as);
    if (!p) return false;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    bool ok =
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws,
                                       sizeof ws) == 0 &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &as,
                                       sizeof as) == 0 &&
        cublasLtMatmul(im->lt, p->desc, &alpha, W->q, p->lw, qa, p->lx, &beta, y, p->ly, y, p->ly,
                       &p->algo, im->ws, CUDA_GEMM_WORKSPACE, im->stream) == 0;
    if (ok) prof_mark(im, p->name);
    return ok;
}

// Shapes cuBLASLt's block scaling is asked to serve: whole 128-blocks, and weight-scale tables
// whose rows are a multiple of 4 floats (16 bytes) either way round (PyTorch pads its tables so;
// ours are packed). LLaDA-8B's FFN (4096 x 12288 and back) qualifies.
static bool fp8_lt_shape_ok(int64_t N, int64_t K) {
    return N % 512 == 0 && K % 512 == 0;
}

// Finds the scale orientation cuBLASLt takes (see above): a 512 x 1024 weight (4 x 8 blocks of
// random scales, so a wrongly oriented table reads other blocks' scales) and Tc activation rows
// of random codes and scales, each of the 4 orientations against the exact kernel: first Tc = 37
// (odd: a table of T-long rows with no padding), then Tc = 40 (rows of a multiple of 4 floats;
// if only that works, matmul_fp8_fast takes only such T). Leaves im->err as it found it (clean).
static void fp8_calibrate_at(li_cuda_impl *im, int Tc);
static void fp8_calibrate(li_cuda_impl *im) {
    fp8_calibrate_at(im, 37);
    if (im->fp8_mode == 0) {
        char first[sizeof im->fp8_note];
        memcpy(first, im->fp8_note, sizeof first);
        fp8_calibrate_at(im, 40);
        im->fp8_t4 = im->fp8_mode > 0;
        if (im->fp8_mode == 0) {  // both failed: keep what each size gave
            size_t n = strlen(im->fp8_note);
            snprintf(im->fp8_note + n, sizeof im->fp8_note - n, " | %s", first);
        }
    }
}

static void fp8_calibrate_at(li_cuda_impl *im, int Tc) {
    enum { N = 512, K = 1024, TMAX = 40, GN = 4, GK = 8 };
    const int T = Tc;
    if (im->err != LI_OK) return;  // an op's error waits to be reported: try at a later call
    im->fp8_mode = 0;
    snprintf(im->fp8_note, sizeof im->fp8_note, "exact kernel: no orientation of the scale "
             "tables reproduced it in cuBLASLt");
    struct {
        uint8_t hq[N * K], hqa[TMAX * K];
        float hws[GN * GK], has[TMAX * GK], ref[TMAX * N], got[TMAX * N];
    } *h = malloc(sizeof *h);  // ~700 KB: not on a worker thread's stack
    if (!h) {
        snprintf(im->fp8_note, sizeof im->fp8_note, "exact kernel: no host memory for the check");
        return;
    }
    li_rng rng;
    li_rng_seed(&rng, 12345);
    for (int i = 0; i < N * K; i++) h->hq[i] = li_f32_to_e4m3((float)(4 * li_rng_uniform(&rng) - 2));
    for (int i = 0; i < T * K; i++) h->hqa[i] = li_f32_to_e4m3((float)(4 * li_rng_uniform(&rng) - 2));
    for (int i = 0; i < GN * GK; i++) h->hws[i] = (float)(0.25 + li_rng_uniform(&rng));
    for (int i = 0; i < T * GK; i++) h->has[i] = (float)(0.25 + li_rng_uniform(&rng));
    void *dq = NULL, *dqa = NULL, *dws = NULL, *das = NULL, *dy = NULL;
    cudaStream_t st = im->stream;
    cudaError_t e = cudaMalloc(&dq, sizeof h->hq);
    if (!e) e = cudaMalloc(&dqa, sizeof h->hqa);
    if (!e) e = cudaMalloc(&dws, sizeof h->hws);
    if (!e) e = cudaMalloc(&das, sizeof h->has);
    if (!e) e = cudaMalloc(&dy, sizeof h->ref);
    if (!e) e = cudaMemcpyAsync(dq, h->hq, sizeof h->hq, cudaMemcpyHostToDevice, st);
    if (!e) e = cudaMemcpyAsync(dqa, h->hqa, (size_t)T * K, cudaMemcpyHostToDevice, st);
    if (!e) e = cudaMemcpyAsync(dws, h->hws, sizeof h->hws, cudaMemcpyHostToDevice, st);
    if (!e) e = cudaMemcpyAsync(das, h->has, (size_t)T * GK * 4, cudaMemcpyHostToDevice, st);
    if (!e) e = li_cuda_matmul_fp8(st, dy, dqa, das, T, dq, dws, N, K);
    if (!e) e = cudaMemcpyAsync(h->ref, dy, (size_t)T * N * 4, cudaMemcpyDeviceToHost, st);
    if (!e) e = cudaStreamSynchronize(st);
    if (e) {
        cudaGetLastError();  // not left for an unrelated op's launch check
        im->fp8_mode = -1;   // a transient failure: try again at the next call
        snprintf(im->fp8_note, sizeof im->fp8_note, "exact kernel: the check failed (%s)",
                 cudaGetErrorString(e));
        goto done;
    }
    li_fp8_weight W = {N, K, dq, dws};
    char tried[400] = "";  // what each orientation gave, for the note
    size_t tl = 0;
    for (int mode = 1; mode <= 4; mode++) {
        bool ran = fp8_lt_run(im, mode, dy, dqa, das, T, &W, false);
        e = cudaMemcpyAsync(h->got, dy, (size_t)T * N * 4, cudaMemcpyDeviceToHost, st);
        if (!e) e = cudaStreamSynchronize(st);
        if (im->err != LI_OK || e) {  // a transposition failed or the device did
            snprintf(im->fp8_note, sizeof im->fp8_note, "exact kernel: the check failed (%s)",
                     im->err != LI_OK ? im->err_msg : cudaGetErrorString(e));
            im->err = LI_OK;
            cudaGetLastError();
            goto done;
        }
        if (!ran) {  // the heuristic has no kernel for the descriptors: the same for any mode
            snprintf(tried + tl, sizeof tried - tl, "no algorithm (status %d)", im->fp8_status);
            break;
        }
        double num = 0, den = 0;
        for (int i = 0; i < T * N; i++) {
            double d = (double)h->got[i] - h->ref[i];
            num += d * d;
            den += (double)h->ref[i] * h->ref[i];
        }
        // Right scales: only accumulation differs (Hopper's FP8 MMA adds inside a 128-wide block
        // with fewer than fp32's bits: NMSE ~1e-9..1e-7; 1.2e-8 measured on the H200); a wrong
        // orientation pairs blocks with other blocks' scales in [0.25, 1.25): NMSE ~1e-2..1
        if (den > 0 && num / den < 1e-4) {
            im->fp8_mode = mode;
            snprintf(im->fp8_note, sizeof im->fp8_note,
                     "cuBLASLt %zu block-scaled FP8 (scales: weight %s, activation %s; check NMSE "
                     "%.2g)%s%s",
                     cublasLtGetVersion(), (mode - 1) & 1 ? "(K/128, N/128)" : "(N/128, K/128)",
                     (mode - 1) & 2 ? "(K/128, T)" : "(T, K/128)", num / den,
                     tl ? "; before: " : "", tried);
            goto done;
        }
        tl += (size_t)snprintf(tried + tl, sizeof tried - tl, "mode %d: NMSE %.2g; ", mode,
                               num / den);
        if (tl >= sizeof tried) tl = sizeof tried - 1;
    }
    snprintf(im->fp8_note, sizeof im->fp8_note, "exact kernel: cuBLASLt %zu, T %d: %s",
             cublasLtGetVersion(), T, tried);
done:
    free(h);
    cudaFree(dq);
    cudaFree(dqa);
    cudaFree(dws);
    cudaFree(das);
    cudaFree(dy);
}

static void cu_matmul_fp8_fast(li_backend *be, float *y, const uint8_t *qa, const float *sa, int T,
                               const li_fp8_weight *W, bool accumulate) {
    li_cuda_impl *im = be->impl;
    if (im->fp8_mode < 0) fp8_calibrate(im);
    bool ok = im->fp8_mode > 0 && fp8_lt_shape_ok(W->n_rows, W->n_cols) && T > 0 &&
              (!im->fp8_t4 || T % 4 == 0) &&
              ((uintptr_t)W->q & 15) == 0 && ((uintptr_t)qa & 15) == 0 &&
              ((uintptr_t)y & 15) == 0 && ((uintptr_t)W->scale & 15) == 0 &&
              ((uintptr_t)sa & 15) == 0;
    // the exact kernel serves what the library cannot (shape, alignment, a refused plan)
    if (ok && fp8_lt_run(im, im->fp8_mode, y, qa, sa, T, W, accumulate)) return;
    if (!accumulate) {
        cu_matmul_fp8(be, y, qa, sa, T, W);
        return;
    }
    float *tmp = scratch_get(im, &im->fp8_acc, (size_t)T * (size_t)W->n_rows * 4,
                             "matmul_fp8_fast (accumulator)");
    if (!tmp) return;
    cu_matmul_fp8(be, tmp, qa, sa, T, W);
    cu_fail(im, "add", li_cuda_add(im->stream, y, tmp, (int64_t)T * W->n_rows));
}

const char *li_backend_cuda_fp8_note(li_backend *be) {
    li_cuda_impl *im = be->impl;
    if (im->fp8_mode < 0) fp8_calibrate(im);
    if (im->fp8_mode < 0 && !im->fp8_note[0])
        return "not checked yet (an earlier op's error is waiting to be reported)";
    return im->fp8_note;
}

bool li_backend_cuda_matmul_gemv(int T, int64_t K, const void *W, const void *x) {
    return li_cuda_gemv_ok(T, K, W, x) != 0;
}

void li_backend_cuda_set_fp8_algo(li_backend *be, int i) {
    li_cuda_impl *im = be->impl;
    im->fp8_algo = i >= 0 && i <= 7 ? i : 0;
}

bool li_backend_cuda_attention_tc(int T, int head_dim) {
    return li_cuda_attention_uses_tc(T, head_dim) != 0;
}

// ---- memory ops (backend.h: what li_be_* dispatch to) --------------------------------------------

static void *cu_alloc(li_backend *be, size_t n, const char *what) {
    li_cuda_impl *im = be->impl;
    void *p = NULL;
    if (li_backend_cuda_alloc(be, &p, n ? n : 1, what) != LI_OK) return NULL;
    cudaError_t e = cudaMemsetAsync(p, 0, n ? n : 1, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        li_error_set(LI_ERR_BACKEND, "cuda: zeroing %zu bytes for %s: %s", n, what,
                     cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cu_free(li_backend *be, void *p) { li_backend_cuda_free(be, p); }

static void cu_copy(li_backend *be, void *dst, const void *src, size_t n) {
    li_cuda_impl *im = be->impl;
    if (n) cu_fail(im, "copy", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, im->stream));
}

static void cu_fill(li_backend *be, float *x, float value, int64_t n) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "fill", li_cuda_fill_f32(im->stream, x, n, value));
}

// Sizes every grow-only scratch for the largest work (li_backend_reserve) so that generating
// allocates nothing. Each part only where r asks for it:
//   max_in      the matmul's bf16 copy of an f32 x (T, K);
//   max_keys    paged attention: the decode attention's split-K partials (rows below the
//               tensor-core threshold, up to 256 key ranges), the prefill's key index, tickets;
//   sampler     the sampler's buffers over V;
//   dense_kv    dense attention and flash_attn_tiles: K and V rounded to bf16;
//   fp8_n/k     matmul_fp8_fast: transposed scale tables (whichever orientation the library took,
//               so it is asked now), and the accumulator of its fallback when the library is not
//               usable for every shape;
//   dllm_rows   dllm->x0's partials for a block of rows over V, and the RNG jump table.
static bool jump_table_ready(li_cuda_impl *im);
static li_status cu_reserve(li_backend *be, const li_backend_reserve *r) {
    li_cuda_impl *im = be->impl;
    const size_t T = r->max_rows > 0 ? (size_t)r->max_rows : 0;
    bool ok = true;
    if (r->max_in > 0)
        ok = ok && scratch_get(im, &im->xbf, T * (size_t)r->max_in * 2, "matmul (bf16 scratch)");
    if (r->max_keys > 0) {
        size_t split_rows = T < LI_CUDA_ATTN_TC_MIN_T ? T : LI_CUDA_ATTN_TC_MIN_T - 1;
        // key ranges: <= 256 for rows of one sequence, <= 8 per row for a batch of decode rows
        size_t ranges = split_rows * 256;
        if (T * 8 > ranges) ranges = T * 8;
        size_t part = ranges * r->max_heads * ((size_t)r->head_dim + 2) * 4;
        size_t prefill_part = li_cuda_attention_prefill_part_floats(im->n_sm, r->head_dim) * 4;
        if (prefill_part > part) part = prefill_part;  // a split prefill (few row tiles) too
        ok = ok && scratch_get(im, &im->attn, part, "attention (split-K partials)") &&
             scratch_get(im, &im->keys, ((size_t)r->max_keys + 1) * 8, "attention (key index)") &&
             attn_tickets(im, T * r->max_heads);
    }
    if (r->dense_kv > 0) {
        ok = ok && scratch_get(im, &im->dense, (size_t)r->dense_kv * 4, "attention (bf16 K / V)");
        // dense attention through cuDNN: the queries in bf16, and the f32 path's bf16 output
        const size_t qo = T * (size_t)r->max_heads * (size_t)r->head_dim * 2;
        if (qo > 0 && be->attn_impl != LI_ATTN_NATIVE)
            ok = ok && scratch_get(im, &im->lib_q, qo, "attention_dense (cudnn q)") &&
                 scratch_get(im, &im->lib_o, qo, "attention_dense (cudnn o)");
    }
    if (r->fp8_n > 0 && r->fp8_k > 0) {
        if (im->fp8_mode < 0) fp8_calibrate(im);  // which tables need transposing
        size_t GN = (size_t)r->fp8_n / LI_FP8_GROUP, GK = (size_t)r->fp8_k / LI_FP8_GROUP;
        ok = ok && scratch_get(im, &im->fp8_ws, GN * GK * 4, "matmul_fp8_fast (scales)") &&
             scratch_get(im, &im->fp8_as, T * GK * 4, "matmul_fp8_fast (scales)");
        if (im->fp8_mode <= 0 || im->fp8_t4)  // the exact kernel may serve an accumulating GEMM
            ok = ok && scratch_get(im, &im->fp8_acc, T * (size_t)r->fp8_n * 4,
                                   "matmul_fp8_fast (accumulator)");
    }
    if (r->dllm_rows > 0 && r->n_vocab > 0)
        ok = ok && jump_table_ready(im) &&
             scratch_get(im, &im->x0s, li_cuda_dllm_x0_scratch_bytes(r->dllm_rows, r->n_vocab),
                         "dllm_x0 (partials)");
    if (!ok) return li_error_set(LI_ERR_OOM, "%s", im->err_msg);
    cudaError_t e = r->sampler && r->n_vocab > 0 ? li_cuda_sampler_reserve(&im->sampler, r->n_vocab)
                                                 : cudaSuccess;
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_OOM, "cuda: sampler scratch for %d tokens: %s", r->n_vocab,
                            cudaGetErrorString(e));
    return LI_OK;
}

static int64_t cu_scratch_allocs(li_backend *be) {
    li_cuda_impl *im = be->impl;
    return im->scratch_allocs;
}

static li_status cu_fill_random(li_backend *be, void *x, li_dtype dtype, int64_t n, uint64_t seed,
                                float a, float mean) {
    li_cuda_impl *im = be->impl;
    if (dtype != LI_DTYPE_F32 && dtype != LI_DTYPE_BF16)
        return li_error_set(LI_ERR_UNSUPPORTED, "cuda fill_random: dtype %s", li_dtype_name(dtype));
    cudaError_t e = li_cuda_fill_random(im->stream, x, dtype == LI_DTYPE_BF16, n, seed, a, mean);
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND, "cuda fill_random: %s", cudaGetErrorString(e));
    return LI_OK;
}

static void cu_fp8_quant_weight(li_backend *be, li_fp8_weight *out, const li_weight *W) {
    li_cuda_impl *im = be->impl;
    if (W->dtype != LI_DTYPE_BF16 && W->dtype != LI_DTYPE_F32) {
        record(im, LI_ERR_UNSUPPORTED, "cuda fp8_quant_weight: dtype %s", li_dtype_name(W->dtype));
        return;
    }
    cu_fail(im, "fp8_quant_weight",
            li_cuda_fp8_quant_weight(im->stream, out->q, out->scale, W->data,
                                     W->dtype == LI_DTYPE_BF16, W->n_rows, W->n_cols));
}

// ---- attention_dense through cuBLASLt ----------------------------------------------------------
//
// LLaDA's layers >= 1 attend bidirectionally over the whole canvas (no cache depends on their
// summation order), which is two GEMMs per head and a softmax: S = scale Q K^T (T x nk, f32),
// P = softmax(S) (bf16), O = P V. At canvas 1024 (H 32, Dh 128) that is 17 GFLOP per layer that
// cuBLASLt runs at ~500+ TFLOP/s (~35 µs), plus 6 bytes per score through HBM for the softmax
// (192 MB, ~50 µs); the fused flash kernel (attention-prefill.cu) reached ~50 TFLOP/s on this
// shape (11 ms of a 50 ms step). Memory: (4 + 2) T nk bytes per head of scratch, heads taken in
// chunks of at most 1 GiB. Numerics as the fused kernel's: Q, K, V and P rounded to bf16, fp32
// accumulation and softmax.

static void attn_plan_destroy(attn_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

static bool layout_batched(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows,
                           uint64_t cols, int64_t ld, int32_t batch, int64_t stride) {
    return cublasLtMatrixLayoutCreate(l, t, rows, cols, ld) == 0 &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                            sizeof batch) == 0 &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof stride) == 0;
}

// The plan for kind (0: S^T (nk, T) = K^T-op x Q, i.e. row-major S = Q K^T; 1: O^T (Dh, T) = V x
// P^T-as-stored, i.e. row-major O = P V), in column-major terms with the row-major arrays read as
// their transposes: Q (T rows, stride ldq), K and V (nk rows, stride ldk), S and P (T, nk)
// contiguous per head, O (T rows, stride ldq). NULL after recording an error.
static attn_plan *attn_plan_get(li_cuda_impl *im, int kind, int T, int nk, int nb, int Dh,
                                int ldq, int ldk, int qstride, const void *a, const void *b,
                                const void *c) {
    uint32_t al[3] = {ptr_align(a), ptr_align(b), ptr_align(c)};
    for (int i = 0; i < im->n_attn_plans; i++) {
        attn_plan *p = &im->attn_plans[i];
        if (p->kind == kind && p->T == T && p->nk == nk && p->nb == nb && p->Dh == Dh &&
            p->ldq == ldq && p->ldk == ldk && !memcmp(p->align, al, sizeof al))
            return p;
    }
    attn_plan *p;
    if (im->n_attn_plans < LI_ATTN_PLANS) {
        p = &im->attn_plans[im->n_attn_plans++];
    } else {
        p = &im->attn_plans[im->attn_next_evict];
        im->attn_next_evict = (im->attn_next_evict + 1) % LI_ATTN_PLANS;
    }
    attn_plan_destroy(p);
    cublasOperation_t ta = kind == 0 ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    bool ok = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0 &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                             sizeof ta) == 0 &&
              cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                             sizeof tb) == 0;
    if (kind == 0)  // A = K (Dh x nk, ld ldk) transposed, B = Q (Dh x T, ld ldq), C = S^T (nk x T)
        ok = ok && layout_batched(&p->la, CUDA_R_16BF, Dh, nk, ldk, nb, Dh) &&
             layout_batched(&p->lb, CUDA_R_16BF, Dh, T, ldq, nb, qstride) &&
             layout_batched(&p->lc, CUDA_R_32F, nk, T, nk, nb, (int64_t)T * nk);
    else  // A = V (Dh x nk, ld ldk), B = P^T (nk x T, ld nk), C = O^T (Dh x T, ld ldq)
        ok = ok && layout_batched(&p->la, CUDA_R_16BF, Dh, nk, ldk, nb, Dh) &&
             layout_batched(&p->lb, CUDA_R_16BF, nk, T, nk, nb, (int64_t)T * nk) &&
             layout_batched(&p->lc, CUDA_R_32F, Dh, T, ldq, nb, qstride);
    ok = ok && pref_create(&pref, al[0], al[1], al[2], true) == 0 &&
         cublasLtMatmulAlgoGetHeuristic(im->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                        &n_res) == 0 &&
         n_res > 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        attn_plan_destroy(p);
        return NULL;  // not an error: the caller runs the fused kernel
    }
    p->algo = res.algo;
    p->kind = kind;
    p->T = T;
    p->nk = nk;
    p->nb = nb;
    p->Dh = Dh;
    p->ldq = ldq;
    p->ldk = ldk;
    memcpy(p->align, al, sizeof al);
    return p;
}

// The GEMM path; false when cuBLASLt has no plan for a shape (nothing recorded: the caller runs
// the fused kernel). Errors of the ops it queued are recorded.
static bool dense_gemm(li_cuda_impl *im, float *out, const float *q, int T, int H, const float *k,
                       const float *v, int nk, int Hkv, int Dh, float scale) {
    const int G = H / Hkv;
    const size_t nq = (size_t)T * H * Dh, nkv = (size_t)nk * Hkv * Dh;
    const size_t per_head = (size_t)T * nk * 6;  // S (f32) and P (bf16)
    const size_t cap = (size_t)1 << 30;
    int hc = per_head >= cap ? 1 : (int)(cap / per_head);
    if (hc > Hkv) hc = Hkv;
    const size_t in_bytes = (nq + 2 * nkv) * 2, sp_off = (in_bytes + 255) & ~(size_t)255;
    char *base = scratch_get(im, &im->dense, sp_off + (size_t)hc * per_head, "attention_dense (GEMM scratch)");
    if (!base) return true;  // recorded
    uint16_t *qb = (uint16_t *)base, *kb = qb + nq, *vb = kb + nkv;
    float *S = (float *)(base + sp_off);
    uint16_t *Pm = (uint16_t *)(S + (size_t)hc * T * nk);
    if (cu_fail(im, "attention_dense (bf16 q)", li_cuda_f32_to_bf16(im->stream, qb, q, (int64_t)nq)) ||
        cu_fail(im, "attention_dense (bf16 k)", li_cuda_f32_to_bf16(im->stream, kb, k, (int64_t)nkv)) ||
        cu_fail(im, "attention_dense (bf16 v)", li_cuda_f32_to_bf16(im->stream, vb, v, (int64_t)nkv)))
        return true;
    const float one = 1.0f, zero = 0.0f;
    // query head h = hk G + g uses kv head hk: for each g, a batch over kv heads with query
    // stride G Dh
    for (int g = 0; g < G; g++)
        for (int h0 = 0; h0 < Hkv; h0 += hc) {
            int nb = Hkv - h0 < hc ? Hkv - h0 : hc;
            const uint16_t *qh = qb + ((size_t)h0 * G + g) * Dh, *kh = kb + (size_t)h0 * Dh;
            const uint16_t *vh = vb + (size_t)h0 * Dh;
            float *oh = out + ((size_t)h0 * G + g) * Dh;
            attn_plan *ps = attn_plan_get(im, 0, T, nk, nb, Dh, H * Dh, Hkv * Dh, G * Dh, kh, qh, S);
            attn_plan *po = ps ? attn_plan_get(im, 1, T, nk, nb, Dh, H * Dh, Hkv * Dh, G * Dh, vh,
                                               Pm, oh)
                               : NULL;
            if (!ps || !po) return false;
            if (lt_fail(im, "attention_dense (scores GEMM)",
                        cublasLtMatmul(im->lt, ps->desc, &scale, kh, ps->la, qh, ps->lb, &zero, S,
                                       ps->lc, S, ps->lc, &ps->algo, im->ws, CUDA_GEMM_WORKSPACE,
                                       im->stream)) ||
                cu_fail(im, "attention_dense (softmax)",
                        li_cuda_softmax_bf16(im->stream, Pm, S, (int64_t)nb * T, nk)) ||
                lt_fail(im, "attention_dense (output GEMM)",
                        cublasLtMatmul(im->lt, po->desc, &one, vh, po->la, Pm, po->lb, &zero, oh,
                                       po->lc, oh, po->lc, &po->algo, im->ws, CUDA_GEMM_WORKSPACE,
                                       im->stream)))
                return true;
        }
    return true;
}

// Three paths, LI_CUDA_DENSE picks one (read per call, for A/B runs):
//   bf16 (default): K and V rounded to bf16 (what the tensor cores read anyway), then the
//        pipelined flash kernel (cp.async tiles, S and P in registers: no score round trip);
//   gemm: cuBLASLt S = Q Kᵀ, bf16 softmax, O = P V per head chunk (T and nk >= 64);
//   f32:  the flash kernel reading f32 K / V (converted per tile).
static void cu_attention_dense(li_backend *be, float *out, const float *q, int T, int H,
                               const float *k, const float *v, int nk, int Hkv, int Dh,
                               float scale) {
    li_cuda_impl *im = be->impl;
    const char *mode = getenv("LI_CUDA_DENSE");
    if (mode && !strcmp(mode, "gemm") && T >= 64 && nk >= 64 && Hkv > 0 && H % Hkv == 0 &&
        dense_gemm(im, out, q, T, H, k, v, nk, Hkv, Dh, scale))
        return;
    if (!(mode && !strcmp(mode, "f32")) && T > 0 && nk > 0 && Hkv > 0) {
        const size_t nkv = (size_t)nk * Hkv * Dh;
        uint16_t *kb = scratch_get(im, &im->dense, nkv * 4, "attention_dense (bf16 K / V)");
        if (!kb) return;
        uint16_t *vb = kb + nkv;
        if (cu_fail(im, "attention_dense (bf16 k)", li_cuda_f32_to_bf16(im->stream, kb, k, (int64_t)nkv)) ||
            cu_fail(im, "attention_dense (bf16 v)", li_cuda_f32_to_bf16(im->stream, vb, v, (int64_t)nkv)))
            return;
        if (dense_cudnn(be, out, NULL, q, T, H, kb, vb, nk, Hkv, Dh, scale)) return;
        cu_fail(im, "attention_dense",
                li_cuda_attention_dense(im->stream, out, q, T, H, kb, vb, 1, nk, Hkv, Dh, scale));
        return;
    }
    cu_fail(im, "attention_dense",
            li_cuda_attention_dense(im->stream, out, q, T, H, k, v, 0, nk, Hkv, Dh, scale));
}

// ---- bf16 activations (backend.h): the f32 ops' kernels storing bf16 ----------------------------

static void cu_rmsnorm_bf16(li_backend *be, uint16_t *out, const float *x, const float *w, int T,
                            int D, float eps) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "rmsnorm_bf16", li_cuda_rmsnorm_bf16(im->stream, out, x, w, T, D, eps));
}

static void cu_rope_bf16(li_backend *be, uint16_t *out, const float *x, const int32_t *pos, int T,
                         int nh, int Dh, const li_rope_table *table) {
    li_cuda_impl *im = be->impl;
    li_cuda_rope_args r;
    memset(&r, 0, sizeof r);
    if (table) r = rope_args(table);
    else if (pos) {
        record(im, LI_ERR_INVALID_ARG, "cuda rope_bf16: positions without a rope table");
        return;
    }
    cu_fail(im, pos ? "rope_bf16" : "rope_bf16 (convert)",
            li_cuda_rope_bf16(im->stream, out, x, pos, T, nh, Dh, &r));
}

static void cu_swiglu_bf16(li_backend *be, uint16_t *out, const float *gate, const float *up,
                           int T, int F, int64_t ld) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "swiglu_bf16", li_cuda_swiglu_bf16(im->stream, out, gate, up, T, F, ld));
}

static void cu_qkv_bf16(li_backend *be, float *q, uint16_t *k, uint16_t *v, const float *qkv,
                        const int32_t *pos, int T, int H, int Hkv, int Dh,
                        const li_rope_table *table) {
    li_cuda_impl *im = be->impl;
    li_cuda_rope_args r = rope_args(table);
    cu_fail(im, "qkv_bf16", li_cuda_qkv_bf16(im->stream, q, k, v, qkv, pos, T, H, Hkv, Dh, &r));
}

// The pipelined flash kernel's dense mode on the bf16 K / V as given, storing bf16 (no conversion
// passes: attention_dense's three are what this op exists to remove).
static void cu_attention_dense_bf16(li_backend *be, uint16_t *out, const float *q, int T, int H,
                                    const uint16_t *k, const uint16_t *v, int nk, int Hkv, int Dh,
                                    float scale) {
    li_cuda_impl *im = be->impl;
    if (dense_cudnn(be, NULL, out, q, T, H, k, v, nk, Hkv, Dh, scale)) return;
    cu_fail(im, "attention_dense_bf16",
            li_cuda_attention_dense_out(im->stream, NULL, out, q, T, H, k, v, 1, nk, Hkv, Dh,
                                        scale));
}

// ---- step graphs ------------------------------------------------------------------------------
//
// A decode step of Llama-8B is ~400 kernels of 5-40 µs; a LLaDA step ~450 larger ones. Launched
// one by one each costs the host ~3-5 µs and the device a gap between kernels; as one CUDA graph
// the device runs them back to back. Each step is recorded again (stream capture: the host
// still walks the forward, ~1-2 µs per op, but nothing runs) and the recording replaces the
// parameters of the executable graph kept for its key (cudaGraphExecUpdate: same kernels in
// the same order, new arguments — page counts, split-K plans, block bounds); a step of another
// shape under the same key fails the update and is instantiated afresh. Recording every step
// keeps graphs correct by construction: no argument is ever replayed stale.

bool li_backend_cuda_graph_stats(li_backend *be, li_cuda_graph_stats *out) {
    li_cuda_impl *im = be->impl;
    *out = im->gstats;
    return !im->graphs_off;
}

static bool cu_graph_begin(li_backend *be, uint64_t key) {
    li_cuda_impl *im = be->impl;
    if (im->graphs_off || im->capturing || im->err != LI_OK) return false;
    int i = 0;
    while (i < im->n_seen && im->seen[i] != key) i++;
    if (i == im->n_seen) {  // first time: eagerly, so that scratch and plans exist
        im->seen[im->n_seen < LI_GRAPH_SEEN ? im->n_seen++ : (int)(key % LI_GRAPH_SEEN)] = key;
        im->gstats.eager_steps++;
        return false;
    }
    cudaError_t e = cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        im->graphs_off = true;
        snprintf(im->gstats.note, sizeof im->gstats.note, "cudaStreamBeginCapture: %s",
                 cudaGetErrorString(e));
        return false;
    }
    im->capturing = true;
    im->cur_key = key;
    return true;
}

// The slot kept for key, or a free / evicted one (exec NULL).
static graph_slot *graph_slot_for(li_cuda_impl *im, uint64_t key) {
    for (int i = 0; i < im->n_graphs; i++)
        if (im->graphs[i].key == key) return &im->graphs[i];
    graph_slot *g;
    if (im->n_graphs < LI_GRAPH_SLOTS) {
        g = &im->graphs[im->n_graphs++];
    } else {
        g = &im->graphs[im->graph_next_evict];
        im->graph_next_evict = (im->graph_next_evict + 1) % LI_GRAPH_SLOTS;
        if (g->exec) cudaGraphExecDestroy(g->exec);
    }
    g->key = key;
    g->exec = NULL;
    return g;
}

// Nothing of the step ran (its recording, instantiation or launch failed): forget the key so
// that its next step runs eagerly first, and have the caller queue the ops again, eagerly. After
// LI_GRAPH_MAX_FAILURES failures in a row graphs are turned off.
static li_status graph_failed(li_cuda_impl *im, const char *what, cudaError_t e, bool *rerun) {
    snprintf(im->gstats.note, sizeof im->gstats.note, "%s failed: %.200s", what,
             im->err != LI_OK ? im->err_msg : cudaGetErrorString(e));
    cudaGetLastError();
    im->err = LI_OK;
    for (int i = 0; i < im->n_seen; i++)
        if (im->seen[i] == im->cur_key) im->seen[i] = im->seen[--im->n_seen];
    if (++im->graph_failures >= LI_GRAPH_MAX_FAILURES) im->graphs_off = true;
    im->gstats.failed++;
    *rerun = true;
    return LI_OK;
}

static li_status cu_graph_end(li_backend *be, bool *rerun) {
    li_cuda_impl *im = be->impl;
    *rerun = false;
    if (!im->capturing) return LI_OK;
    im->capturing = false;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(im->stream, &graph);
    if (e != cudaSuccess || im->err != LI_OK || !graph) {  // an op could not be recorded
        if (graph) cudaGraphDestroy(graph);
        return graph_failed(im, "recording", e, rerun);
    }
    graph_slot *g = graph_slot_for(im, im->cur_key);
    if (g->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(g->exec, graph, &info) == cudaSuccess) {
            im->gstats.updated++;
        } else {  // another shape under this key
            cudaGetLastError();
            cudaGraphExecDestroy(g->exec);
            g->exec = NULL;
        }
    }
    if (!g->exec) {
        e = cudaGraphInstantiate(&g->exec, graph, 0);
        if (e != cudaSuccess) {
            g->exec = NULL;  // the slot stays: the key's next step instantiates again
            cudaGraphDestroy(graph);
            return graph_failed(im, "instantiation", e, rerun);
        }
        im->gstats.instantiated++;
    }
    cudaGraphDestroy(graph);
    e = cudaGraphLaunch(g->exec, im->stream);
    if (e != cudaSuccess) return graph_failed(im, "launch", e, rerun);
    im->gstats.launched++;
    im->graph_failures = 0;
    return LI_OK;
}

// The device copy of li_rng_jump_table(), made on first use (between forwards: never inside a
// step graph). false after recording an error.
static bool jump_table_ready(li_cuda_impl *im) {
    if (im->jump_table) return true;
    const size_t n = (size_t)LI_RNG_JUMP_MATRICES * LI_RNG_JUMP_WORDS * sizeof(uint64_t);
    im->scratch_allocs++;
    if (cu_fail(im, "dllm (jump table)", cudaMalloc((void **)&im->jump_table, n))) {
        im->jump_table = NULL;
        return false;
    }
    // on the backend's (non-blocking) stream, so that the kernels queued after it see the whole
    // table: a plain cudaMemcpy from pageable memory may return before the DMA lands
    if (cu_fail(im, "dllm (jump table)",
                cudaMemcpyAsync(im->jump_table, li_rng_jump_table(), n, cudaMemcpyHostToDevice,
                                im->stream))) {
        cudaFree(im->jump_table);
        im->jump_table = NULL;
        return false;
    }
    return true;
}

static li_cuda_rng_state rng_state(const li_rng *rng) {
    li_cuda_rng_state st;
    memcpy(st.s, rng->s, sizeof st.s);
    return st;
}

static void cu_dllm_select(li_backend *be, int32_t *commit, const int32_t *x0, const double *conf,
                           const uint8_t *masked, int B, int mode, int k, double tau, double f,
                           bool random_remask, const li_rng *rng) {
    li_cuda_impl *im = be->impl;
    if (random_remask && !jump_table_ready(im)) return;
    cu_fail(im, "dllm_select",
            li_cuda_dllm_select(im->stream, commit, x0, conf, masked, B, mode, k, tau, f,
                                random_remask, rng_state(rng), im->jump_table));
}

// DPad's draw of a block (backend.h dllm->dpad): dllm-sample.cu. Called between forwards, so the
// jump table may be made here.
static void cu_dllm_dpad(li_backend *be, uint8_t *keep, const double *prob, int window,
                         int n_suffix, const li_rng *rng) {
    li_cuda_impl *im = be->impl;
    if (!jump_table_ready(im)) return;
    cu_fail(im, "dllm_dpad",
            li_cuda_dllm_dpad(im->stream, keep, prob, window, n_suffix, rng_state(rng),
                              im->jump_table));
}

// LLaDA's step at any temperature (backend.h dllm->x0): dllm-sample.cu. Runs between forwards
// (never inside a step graph), so the jump table and the scratch may be allocated here.
static void cu_dllm_x0(li_backend *be, int32_t *x0, double *conf, float *logits,
                       const float *ulogits, const uint8_t *masked, int B, int V, float w,
                       int32_t eos, int32_t ban0, int32_t ban1, double temperature,
                       const li_rng *rng) {
    li_cuda_impl *im = be->impl;
    if (temperature > 0 && !jump_table_ready(im)) return;
    size_t nb = li_cuda_dllm_x0_scratch_bytes(B, V);
    void *scratch = scratch_get(im, &im->x0s, nb, "dllm_x0 (partials)");
    if (!scratch) return;
    cu_fail(im, "dllm_x0",
            li_cuda_dllm_x0(im->stream, x0, conf, logits, ulogits, masked, B, V, w, eos, ban0,
                            ban1, temperature, rng_state(rng), im->jump_table, scratch, nb));
}

_Static_assert(LI_FP8_GROUP == 128, "dllm.cu assumes 128-wide FP8 groups");
_Static_assert(LI_FA_MAX_TILE == 1024, "dllm.cu sizes its score buffer for 1024-key tiles");

// ---- the [dt] entries (backend.h): each op's F32 and BF16 forms above behind one entry ---------

LI_DT_FORMS(cu)

static void cu_attention_dense_dt(li_backend *be, void *out, li_dtype dt, const float *q, int T,
                                  int H, const void *k, const void *v, int nk, int Hkv, int Dh,
                                  float scale) {
    if (dt == LI_DTYPE_BF16)
        cu_attention_dense_bf16(be, out, q, T, H, k, v, nk, Hkv, Dh, scale);
    else
        cu_attention_dense(be, out, q, T, H, k, v, nk, Hkv, Dh, scale);
}

static const li_dllm_ops cu_dllm_ops = {
    .x0 = cu_dllm_x0,
    .select = cu_dllm_select,
    .dpad = cu_dllm_dpad,
};

const li_backend_ops li_cuda_ops = {
    .name = "cuda",
    .embed = cu_embed,
    .rmsnorm = cu_rmsnorm_dt,
    .matmul = cu_matmul_dt,
    .add = cu_add,
    .add_rmsnorm = cu_add_rmsnorm,
    .rope = cu_rope_dt,
    .kv_store = cu_kv_store,
    .kv_copy_rotate = cu_kv_copy_rotate,
    .attention = cu_attention,
    .attention_seqs = cu_attention_seqs,
    .attention_decode = cu_attention_decode,
    .swiglu = cu_swiglu_dt,
    .softmax = cu_softmax,
    .sample = cu_sample,
    .flash_attn_tiles = cu_flash_attn_tiles,
    .flash_attn_finalize = cu_flash_attn_finalize,
    .fp8_quant_rows = cu_fp8_quant_rows,
    .add_rmsnorm_fp8 = cu_add_rmsnorm_fp8,
    .swiglu_fp8 = cu_swiglu_fp8,
    .matmul_fp8 = cu_matmul_fp8,
    .fp8_quant_weight = cu_fp8_quant_weight,
    .matmul_fp8_fast = cu_matmul_fp8_fast,
    .dllm = &cu_dllm_ops,
    .qkv_bf16 = cu_qkv_bf16,
    .attention_dense = cu_attention_dense_dt,
    .act_dtypes = LI_ACT_BF16_FORMS(LI_ACT_F32_BF16),
    .matrices_bf16 = true,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = li_backend_cuda_upload,
    .download = li_backend_cuda_download,
    .copy = cu_copy,
    .fill = cu_fill,
    .sync = li_backend_cuda_check,
    .reserve = cu_reserve,
    .scratch_allocs = cu_scratch_allocs,
    .fill_random = cu_fill_random,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .host_alloc = li_cuda_host_alloc,
    .host_free = li_cuda_host_free,
    .kv_gather = li_cuda_kv_gather,
    .kv_scatter = li_cuda_kv_scatter,
};

void *li_backend_cuda_stream(li_backend *be) { return ((li_cuda_impl *)be->impl)->stream; }
