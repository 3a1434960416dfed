// kv-transfer.h — the KV tiers' host transfers on the CUDA backend (backend.h host_alloc,
// host_free, kv_gather, kv_scatter): pinned host memory and async copies of whole pool pages on
// the backend's stream. Plain C, like backend-cuda.h. Not here: what a tier stores
// (src/kv/kv-tiers.c). Tested on the GPU by test-kv-tiers (promoted = fresh prefill) and timed
// by `lazyinfer-cuda bench kernels`' promotion rows (against a plain pinned upload of the same
// bytes; bench/gpu-run.sh step tiers).
#ifndef LI_CUDA_KV_TRANSFER_H
#define LI_CUDA_KV_TRANSFER_H

#include "../backend.h"

void *li_cuda_host_alloc(li_backend *be, size_t n_bytes, const char *what);
void li_cuda_host_free(li_backend *be, void *p);
li_status li_cuda_kv_gather(li_backend *be, void *dst_host, const li_kv_storage *kv,
                            const int64_t *pages, int n);
li_status li_cuda_kv_scatter(li_backend *be, li_kv_storage *kv, const int64_t *pages, int n,
                             const void *src_host);

// The backend's stream as a cudaStream_t (backend-cuda.c owns it).
void *li_backend_cuda_stream(li_backend *be);

#endif
