// backend-cuda-memory.c — the CUDA backend's memory: the device-memory helpers of backend-cuda.h
// (alloc, free, upload, download, fill_uniform, event timing), the table's memory entries
// (alloc, free, copy, fill, fill_random, reserve, scratch_allocs), the grow-only scratch buffers
// every op draws from, and the device copy of the RNG jump table.
//
// Not here: what each scratch holds (the ops that use it say); the KV pool and weights (their
// owners allocate through li_be_alloc). Tested by tests/gpu/gpu-check.c (every buffer with guard
// bytes) and test-dllm's zero-allocation check (li_dllm_stats.backend_allocs).
#include "backend-cuda-internal.h"

void *li_cu_scratch_get(li_cuda_impl *im, dev_scratch *s, size_t n, const char *what) {
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

// ---- memory ops (backend.h: what li_be_* dispatch to) --------------------------------------------

void *li_cu_alloc(li_backend *be, size_t n, const char *what) {
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

void li_cu_free(li_backend *be, void *p) { li_backend_cuda_free(be, p); }

void li_cu_copy(li_backend *be, void *dst, const void *src, size_t n) {
    li_cuda_impl *im = be->impl;
    if (n) cu_fail(im, "copy", cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, im->stream));
}

void li_cu_fill(li_backend *be, float *x, float value, int64_t n) {
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
//   fp8_n/k     matmul_fp8 (not exact): transposed scale tables (whichever orientation the
//               library took, so it is asked now), and the accumulator of its fallback when the
//               library is not usable for every shape;
//   dllm_rows   dllm->x0's partials for a block of rows over V, and the RNG jump table.
bool li_cu_jump_table_ready(li_cuda_impl *im);
li_status li_cu_reserve(li_backend *be, const li_backend_reserve *r) {
    li_cuda_impl *im = be->impl;
    const size_t T = r->max_rows > 0 ? (size_t)r->max_rows : 0;
    bool ok = true;
    if (r->max_in > 0)
        ok = ok &&
             li_cu_scratch_get(im, &im->xbf, T * (size_t)r->max_in * 2, "matmul (bf16 scratch)");
    if (r->max_keys > 0) {
        size_t split_rows = T < LI_CUDA_ATTN_TC_MIN_T ? T : LI_CUDA_ATTN_TC_MIN_T - 1;
        // key ranges: <= 256 for rows of one sequence, <= 8 per row for a batch of decode rows
        size_t ranges = split_rows * 256;
        if (T * 8 > ranges) ranges = T * 8;
        size_t part = ranges * r->max_heads * ((size_t)r->head_dim + 2) * 4;
        size_t prefill_part = li_cuda_attention_prefill_part_floats(im->n_sm, r->head_dim) * 4;
        if (prefill_part > part) part = prefill_part;  // a split prefill (few row tiles) too
        ok = ok && li_cu_scratch_get(im, &im->attn, part, "attention (split-K partials)") &&
             li_cu_scratch_get(im, &im->keys, ((size_t)r->max_keys + 1) * 8,
                               "attention (key index)") &&
             li_cu_attn_tickets(im, T * r->max_heads);
        // attention_seqs with a bf16 out: our kernels' f32 rows before they are rounded
        if (T >= 2)
            ok = ok && li_cu_scratch_get(im, &im->lib_f32,
                                         T * (size_t)r->max_heads * (size_t)r->head_dim * 4,
                                         "attention (f32 rows before rounding)");
    }
    // cuDNN's one-time set-up now rather than in the first request (bench rag on the H200: the
    // first plans of a process took 2.6 s, the later ones ~60 ms each)
    if (ok && r->max_keys > 0 && r->n_head_kv > 0 && r->kv_dtype == LI_DTYPE_BF16)
        li_cu_attn_prepare(be, r->max_heads, r->n_head_kv, r->head_dim);
    if (r->dense_kv > 0) {
        ok = ok &&
             li_cu_scratch_get(im, &im->dense, (size_t)r->dense_kv * 4, "attention (bf16 K / V)");
        // dense attention through cuDNN: the queries in bf16, and the f32 path's bf16 output,
        // each with the rows of a padded size class
        const size_t qo = (T + LI_ATTN_DENSE_SLACK) * (size_t)r->max_heads * (size_t)r->head_dim * 2;
        if (qo > 0 && be->attn_impl != LI_ATTN_NATIVE)
            ok = ok && li_cu_scratch_get(im, &im->lib_q, qo, "attention_dense (cudnn q)") &&
                 li_cu_scratch_get(im, &im->lib_o, qo, "attention_dense (cudnn o)");
    }
    if (r->fp8_n > 0 && r->fp8_k > 0) {
        if (im->fp8_mode < 0) li_cu_fp8_calibrate(im);  // which tables need transposing
        size_t GN = (size_t)r->fp8_n / LI_FP8_GROUP, GK = (size_t)r->fp8_k / LI_FP8_GROUP;
        ok = ok && li_cu_scratch_get(im, &im->fp8_ws, GN * GK * 4, "matmul_fp8 fast (scales)") &&
             li_cu_scratch_get(im, &im->fp8_as, T * GK * 4, "matmul_fp8 fast (scales)");
        if (im->fp8_mode <= 0 || im->fp8_t4)  // the exact kernel may serve an accumulating GEMM
            ok = ok && li_cu_scratch_get(im, &im->fp8_acc, T * (size_t)r->fp8_n * 4,
                                         "matmul_fp8 fast (accumulator)");
    }
    if (r->dllm_rows > 0 && r->n_vocab > 0)
        ok = ok && li_cu_jump_table_ready(im) &&
             li_cu_scratch_get(im, &im->x0s,
                               li_cuda_dllm_x0_scratch_bytes(r->dllm_rows, r->n_vocab),
                               "dllm_x0 (partials)");
    if (!ok) return li_error_set(LI_ERR_OOM, "%s", im->err_msg);
    cudaError_t e = r->sampler && r->n_vocab > 0 ? li_cuda_sampler_reserve(&im->sampler, r->n_vocab)
                                                 : cudaSuccess;
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_OOM, "cuda: sampler scratch for %d tokens: %s", r->n_vocab,
                            cudaGetErrorString(e));
    return LI_OK;
}

int64_t li_cu_scratch_allocs(li_backend *be) {
    li_cuda_impl *im = be->impl;
    return im->scratch_allocs;
}

li_status li_cu_fill_random(li_backend *be, void *x, li_dtype dtype, int64_t n, uint64_t seed,
                                float a, float mean) {
    li_cuda_impl *im = be->impl;
    if (dtype != LI_DTYPE_F32 && dtype != LI_DTYPE_BF16)
        return li_error_set(LI_ERR_UNSUPPORTED, "cuda fill_random: dtype %s", li_dtype_name(dtype));
    cudaError_t e = li_cuda_fill_random(im->stream, x, dtype == LI_DTYPE_BF16, n, seed, a, mean);
    if (e != cudaSuccess)
        return li_error_set(LI_ERR_BACKEND, "cuda fill_random: %s", cudaGetErrorString(e));
    return LI_OK;
}

// The device copy of li_rng_jump_table(), made on first use (between forwards: never inside a
// step graph). false after recording an error.
bool li_cu_jump_table_ready(li_cuda_impl *im) {
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
