// backend-cuda-internal.h — what the CUDA backend's host files share (backend-cuda.c and
// backend-cuda-{attention,gemm,graphs,memory,profile}.c): the backend state li_cuda_impl with its
// caches and scratch, the first-error recording every op goes through (record, cu_fail, lt_fail),
// and the functions one file calls in another (li_cu_*; the op functions are named after their
// table entry: li_cu_matmul is li_cuda_ops.matmul's F32 form).
//
// Not a public header: only src/backend/cuda/*.c include it (the API is backend-cuda.h). Tested
// with the files it serves, by tests/gpu/gpu-check.c on a GPU machine.
#ifndef LI_BACKEND_CUDA_INTERNAL_H
#define LI_BACKEND_CUDA_INTERNAL_H

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
#include "sample.cuh"

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
    char name[64];          // "matmul bf16 N=… K=…": the op's name in LI_CUDA_PROFILE
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lw, lx, ly;  // W^T as (K, N) col-major, x as (K, T), y as (N, T)
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

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

// The slot for a new entry of a bounded cache of cap slots, *n of them in use (plan_cache, the
// step graphs): the next unused one, else the round-robin victim *next_evict, which moves on.
// The caller empties the victim.
static inline int cache_slot_pick(int *n, int *next_evict, int cap) {
    if (*n < cap) return (*n)++;
    const int i = *next_evict;
    *next_evict = (i + 1) % cap;
    return i;
}

#define LI_GRAPH_SLOTS 16
#define LI_GRAPH_SEEN 64
#define LI_GRAPH_MAX_FAILURES 4

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
    int direct_row;           // >= 0: every covered row is in one real slot and packed row r is
                              // the call's row direct_row + r (a bf16 out needs no merge); -1: not
    int64_t q_rows, kv_keys;  // packed rows (qb, ob, lse) and keys (kb, vb) the call needs
    void *dev;                // slots, seq_q, seq_kv, q_off, kv_off, lse_off, pages, rows, list
    size_t dev_cap;
    li_cuda_block_slot *d_slots;
    int32_t *d_seq_q, *d_seq_kv, *d_q_off, *d_kv_off, *d_lse_off, *d_pages, *d_slot_list;
    li_cuda_block_row *d_rows;
    uint64_t last_used;
} lib_plan;

#define LI_LIB_PLANS 16

// The CUDA backend's environment switches, read once by li_backend_cuda_init (env_read) and
// listed in docs/CUDA.md ("Environment switches"): nothing else in src/backend/cuda/ reads the
// environment. Debugging and measuring only: no switch selects a kernel generation.
typedef struct {
    bool graphs;          // LI_CUDA_GRAPHS=1: step graphs on (off by default: 2-3 % slower)
    bool graph_stats;     // LI_CUDA_GRAPH_STATS=1: the graphs' counts on stderr at teardown
    bool profile;         // LI_CUDA_PROFILE=1: an event per op, the table at teardown; no graphs
    bool pdl;             // true unless LI_CUDA_PDL=0: programmatic dependent launches
    char cudnn_lib[512];  // LI_CUDNN_LIB: the cuDNN library file ("": libcudnn.so.9)
    bool dense_pad;       // LI_CUDNN_DENSE_PAD=1: dense cuDNN plans per 256-row size class
} li_cuda_env;

// Grow-only device scratch. Growth frees the old buffer (cudaFree waits for the device), so it
// must not happen during graph capture: the engine sizes these at start.
typedef struct {
    void *p;
    size_t cap;
} dev_scratch;

typedef struct {
    li_cuda_env env;  // the switches, read at init
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
    dev_scratch dense; // attention_dense and flash_attn_tiles: K and V in bf16, (2, nk, Hkv, Dh)
    // FP8 GEMM through cuBLASLt (matmul_fp8, not exact): which scale-table layouts the library
    // takes, found once by comparing it with the exact kernel (li_cu_fp8_calibrate): -1 not tried,
    // 0 not usable (fp8_note says why), else 1 + (weight scales transposed) + 2 (activation scales
    // transposed)
    int fp8_mode;
    bool fp8_t4;  // the library took the activation scales only with T a multiple of 4
    int fp8_status;  // the last heuristic query's cublasStatus_t (for the note)
    char fp8_note[1200];
    plan_cache fp8_plans;
    dev_scratch fp8_ws, fp8_as;  // transposed scale tables when the layout needs them
    dev_scratch fp8_acc;         // matmul_fp8 accumulating through the exact kernel
    li_cuda_sampler *sampler;
    uint64_t *jump_table;  // dllm->x0: device copy of li_rng_jump_table() (512 KiB), on first use
    dev_scratch x0s;       // dllm->x0: per-chunk partial argmaxes
    int64_t scratch_allocs;  // scratch allocations and the jump table's (scratch_allocs op)
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
    dev_scratch lib_f32;  // attention_seqs' f32 rows of our kernels before a bf16 out
    int32_t *lib_iota;  // (LI_CUDNN_IOTA) 0, 1, 2, ...: a padded call's lengths point into it
    li_attn_blocks *lib_blocks;  // (lib_cap_blocks) per-sequence plans while a call is planned
    int lib_cap_blocks, lib_init_blocks;
    li_status err;     // first error since init
    char err_msg[512];
} li_cuda_impl;

// backend-cuda-profile.c (LI_CUDA_PROFILE)
void li_cu_prof_mark(li_cuda_impl *im, const char *op);  // an event after op (when profiling)
void li_cu_prof_report(li_cuda_impl *im);                // the per-op table on stderr

// ---- error recording (every file) -------------------------------------------------------------

static inline void record(li_cuda_impl *im, li_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void record(li_cuda_impl *im, li_status st, const char *fmt, ...) {
    if (im->err != LI_OK) return;  // the first error is the useful one
    im->err = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->err_msg, sizeof im->err_msg, fmt, ap);
    va_end(ap);
}

// Records e (if not cudaSuccess) for op; returns 1 when it was an error.
static inline int cu_fail(li_cuda_impl *im, const char *op, cudaError_t e) {
    if (e == cudaSuccess) {
        li_cu_prof_mark(im, op);
        return 0;
    }
    record(im, LI_ERR_BACKEND, "cuda %s: %s (%s)", op, cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
}

// The recorded error as a status (LI_OK if none), then cleared: a request that failed (an
// unsupported shape, an allocation) does not fail every later one. A CUDA error that breaks the
// context (an illegal address) is reported again by the next call that touches the device.
static inline li_status take_error(li_cuda_impl *im) {
    if (im->err == LI_OK) return LI_OK;
    li_status st = li_error_set(im->err, "%s", im->err_msg);
    im->err = LI_OK;
    return st;
}

static inline int lt_fail(li_cuda_impl *im, const char *op, cublasStatus_t s) {
    if (s == CUBLAS_STATUS_SUCCESS) {
        li_cu_prof_mark(im, op);
        return 0;
    }
    record(im, LI_ERR_BACKEND, "cuda %s: cuBLASLt %s", op, cublasLtGetStatusString(s));
    return 1;
}

// A RoPE table as the kernels' launcher argument.
static inline li_cuda_rope_args rope_args(const li_rope_table *t) {
    li_cuda_rope_args r;
    memset(&r, 0, sizeof r);
    r.gptj = t->layout == LI_ROPE_GPTJ;
    r.n_dims = t->n_dims;
    r.mscale = t->mscale;
    memcpy(r.inv_freq, t->inv_freq, sizeof(float) * (size_t)(t->n_dims / 2));
    return r;
}

// ---- across files ---------------------------------------------------------------------------

// backend-cuda-memory.c: grow-only scratch (NULL after recording an error), the RNG jump table
// on the device, and the table's memory entries
void *li_cu_scratch_get(li_cuda_impl *im, dev_scratch *s, size_t n, const char *what);
bool li_cu_jump_table_ready(li_cuda_impl *im);
void *li_cu_alloc(li_backend *be, size_t n, const char *what);
void li_cu_free(li_backend *be, void *p);
void li_cu_copy(li_backend *be, void *dst, const void *src, size_t n);
void li_cu_fill(li_backend *be, float *x, float value, int64_t n);
li_status li_cu_reserve(li_backend *be, const li_backend_reserve *r);
void li_cu_attn_prepare(li_backend *be, int H, int Hkv, int Dh);
int64_t li_cu_scratch_allocs(li_backend *be);
li_status li_cu_fill_random(li_backend *be, void *x, li_dtype dtype, int64_t n, uint64_t seed,
                            float a, float mean);

// backend-cuda-gemm.c: cuBLASLt's bf16 and FP8 GEMMs, the exact FP8 kernel's entry
void li_cu_matmul(li_backend *be, float *y, const float *x, const li_weight *W, int T);
void li_cu_matmul_bf16(li_backend *be, float *y, const uint16_t *x, const li_weight *W, int T,
                       bool accumulate);
void li_cu_matmul_fp8(li_backend *be, float *y, const li_fp8_rows *x, int T,
                      const li_fp8_weight *W, bool exact, bool accumulate);
void li_cu_fp8_calibrate(li_cuda_impl *im);  // which scale layouts cuBLASLt takes (im->fp8_mode)
void li_cu_gemm_free(li_cuda_impl *im);      // the plan caches

// backend-cuda-attention.c: paged attention (our kernels, cuDNN), LLaDA's dense and layer-0
// attention
unsigned *li_cu_attn_tickets(li_cuda_impl *im, size_t n);
void li_cu_attention(li_backend *be, float *out, const float *q, int T, int H,
                     const li_kv_storage *kv, int il, const li_kv_seq *seq,
                     const int32_t *kv_first, const int32_t *n_visible, float scale,
                     const li_rope_table *rope);
void li_cu_attention_seqs(li_backend *be, void *out, li_dtype out_dt, const float *q, int n_seqs,
                          const li_attn_seq *seqs, int H, const li_kv_storage *kv, int il,
                          const int32_t *kv_first, const int32_t *n_visible, float scale,
                          const li_rope_table *rope);
void li_cu_attention_decode(li_backend *be, float *out, const float *q, int n, int H,
                            const li_kv_storage *kv, int il, const uint64_t *pages,
                            const int32_t *page_start, const int32_t *page_start_host,
                            const int32_t *n_visible, float scale, const li_rope_table *rope);
void li_cu_flash_attn_tiles(li_backend *be, float *o, float *m, float *l, const float *q, int nq,
                            int H, const float *k, const float *v, int nk, int Hkv, int Dh,
                            int tile, float scale);
void li_cu_flash_attn_finalize(li_backend *be, float *out, const float *o, const float *l,
                               int64_t n, int Dh);
void li_cu_attention_dense_dt(li_backend *be, void *out, li_dtype dt, const float *q, int T,
                              int H, const void *k, const void *v, int nk, int Hkv, int Dh,
                              float scale);
void li_cu_attention_free(li_cuda_impl *im);  // cuDNN, its plans and scratch lists

// backend-cuda-graphs.c: step graphs (the backend side of src/backend/step.c)
bool li_cu_graph_begin(li_backend *be, uint64_t key);
li_status li_cu_graph_end(li_backend *be, bool *rerun);
void li_cu_graphs_free(li_cuda_impl *im);  // an abandoned recording, the executable graphs

#endif
