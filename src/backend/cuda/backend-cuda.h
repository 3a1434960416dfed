// backend-cuda.h — the CUDA backend (NVIDIA sm_90a: H100/H200): creation, error reporting and the
// device-memory helpers that its callers (tests/gpu/gpu-check.c, later the engine) need. Plain C:
// no CUDA header leaks out of src/backend/cuda/ (STYLE.md), so device pointers are void * here.
//
// Contract of the op table on this backend (li_cuda_ops, backend-cuda.c):
// - Every pointer an op takes is a DEVICE pointer: activations, weights' data, the KV pool's data,
//   and also the index arrays (embed's tokens, rope's pos, kv_store's slot, the page table
//   seq->pages, attention's kv_first / n_visible), so that a decode step can be captured as a CUDA
//   graph. The structs themselves (li_weight, li_kv_storage, li_kv_seq, li_rope_table,
//   li_sampler_config) are host structs read at call time.
// - Weights are bf16 for matmul (f32 or bf16 for embed); activations are f32.
// - Ops are asynchronous on the backend's stream and return nothing: the first failure (a CUDA
//   error, a cuBLASLt status, an unsupported dtype) is recorded with the op's name and returned by
//   li_backend_cuda_check, which also synchronises and catches asynchronous faults. `sample` is
//   the one op that synchronises (it returns a token id to the host); on failure it returns 0.
// - A backend is driven by one thread at a time, on which li_backend_cuda_init made `device`
//   current.
// Nothing here is verified without a GPU except that it compiles and that init fails cleanly;
// tests/gpu/gpu-check.c checks every op against the CPU oracle on the GPU machine (docs/CUDA.md).
#ifndef LI_BACKEND_CUDA_H
#define LI_BACKEND_CUDA_H

#include "../backend.h"

extern const li_backend_ops li_cuda_ops;

// Creates a CUDA backend on GPU `device` (0-based): stream, cuBLASLt handle, GEMM workspace.
// LI_ERR_BACKEND with the CUDA error when there is no GPU or no driver; LI_ERR_UNSUPPORTED when
// the device is not sm_90 (the build targets sm_90a only); LI_ERR_INVALID_ARG for a bad index.
li_status li_backend_cuda_init(li_backend **out, int device);
// Frees everything the backend owns (not the buffers from li_backend_cuda_alloc). NULL is a no-op.
// (li_backend_free in backend-cpu.c frees CPU backends only.)
void li_backend_cuda_destroy(li_backend *be);

// LI_OK, or the first error any op hit since init, as LI_ERR_BACKEND / LI_ERR_UNSUPPORTED with a
// message naming the op and the CUDA / cuBLASLt error. Synchronises the stream first.
li_status li_backend_cuda_check(li_backend *be);

// Device memory (n_bytes may be 0: *dptr = NULL). cudaMalloc alignment (256 bytes).
li_status li_backend_cuda_alloc(li_backend *be, void **dptr, size_t n_bytes, const char *what);
void li_backend_cuda_free(li_backend *be, void *dptr);  // NULL is a no-op
// Host <-> device copies on the backend's stream; both return after the copy is complete (and so
// after every op queued before them).
li_status li_backend_cuda_upload(li_backend *be, void *dst_dev, const void *src_host, size_t n);
li_status li_backend_cuda_download(li_backend *be, void *dst_host, const void *src_dev, size_t n);
// x (n, device) = uniform in [-scale, scale), a pure function of (seed, index): random weights
// and KV pools built on the GPU without a host copy.
li_status li_backend_cuda_fill_uniform(li_backend *be, float *x, int64_t n, uint64_t seed,
                                       float scale);

// Times fn(be, ctx) called n_iter times back to back on the stream with CUDA events; fn queues
// work with the ops. *ms_per_iter = elapsed / n_iter. Errors of the timed ops are returned.
li_status li_backend_cuda_time(li_backend *be, void (*fn)(li_backend *be, void *ctx), void *ctx,
                               int n_iter, double *ms_per_iter);

// True when matmul takes the GEMV path for these arguments (T == 1: x stays f32, no bf16
// rounding) rather than cuBLASLt (x rounded to bf16).
bool li_backend_cuda_matmul_gemv(int T, int64_t K, const void *W, const void *x);
// Which FP8 GEMM matmul_fp8 uses when not exact (cuBLASLt's block-scaled one and its scale layout,
// or why not: then the exact kernel). Runs the one-time check on first call.
const char *li_backend_cuda_fp8_note(li_backend *be);
// True when the attention op runs T rows of head size head_dim on the bf16 tensor-core kernel
// (attention-prefill.cu; tolerances differ from the fp32 kernels').
bool li_backend_cuda_attention_tc(int T, int head_dim);

// How attention runs through cuDNN, into buf: its version, plans built and their build time,
// calls, refused shapes; or why cuDNN is not used.
void li_backend_cuda_attn_note(li_backend *be, char *buf, size_t n);

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)" into buf.
void li_backend_cuda_describe(li_backend *be, char *buf, size_t n);

// Step graphs (backend.h graph_begin/graph_end): how many steps ran eagerly (a key's first),
// as graphs (launched; of them instantiated vs updated in place), recordings that failed, and
// why graphs are off when they are. li_backend_cuda_graph_stats returns false when graphs are
// off (not LI_CUDA_GRAPHS=1, LI_CUDA_PROFILE=1, or recording failed repeatedly).
typedef struct {
    long long eager_steps, launched, instantiated, updated, failed;
    char note[256];
} li_cuda_graph_stats;
bool li_backend_cuda_graph_stats(li_backend *be, li_cuda_graph_stats *out);

#endif
