// backend-cuda.c — the CUDA backend's host side (C11): creation and teardown, taking the first
// recorded error, the op table li_cuda_ops and its small dispatchers, which convert the backend.h
// structs into the plain launcher arguments of the kernels (pointwise.cu, sample.cu, dllm.cu,
// dllm-sample.cu).
//
// Not here: kernels; the larger host parts, each in its own file sharing backend-cuda-internal.h:
// GEMMs (backend-cuda-gemm.c), attention (backend-cuda-attention.c), step graphs
// (backend-cuda-graphs.c), scratch and device memory (backend-cuda-memory.c), LI_CUDA_PROFILE
// (backend-cuda-profile.c). Tested by tests/gpu/gpu-check.c on a GPU machine
// (`make CUDA=1 gpu-check`), which compares every op with the CPU oracle.
#include "backend-cuda-internal.h"
#include "kv-transfer.h"

_Static_assert(LI_CUDA_ROPE_MAX_PAIRS == LI_ROPE_MAX_PAIRS, "rope table sizes differ");

// A switch given as anything but "" or "0".
static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0");
}

// The environment switches (li_cuda_env), read once here.
static void env_read(li_cuda_env *env) {
    env->graphs = env_on("LI_CUDA_GRAPHS");
    env->graph_stats = env_on("LI_CUDA_GRAPH_STATS");
    env->profile = env_on("LI_CUDA_PROFILE");
    const char *pdl = getenv("LI_CUDA_PDL");
    env->pdl = !(pdl && pdl[0] == '0');
    const char *lib = getenv("LI_CUDNN_LIB");
    snprintf(env->cudnn_lib, sizeof env->cudnn_lib, "%s", lib ? lib : "");
    env->dense_pad = env_on("LI_CUDNN_DENSE_PAD");
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
    env_read(&im->env);
    li_cuda_set_pdl(im->env.pdl);
    im->fp8_mode = -1;
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
    im->graphs_off = !im->env.graphs;
    if (im->env.profile) {
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
        if (im->prof) li_cu_prof_report(im);
        if (im->env.graph_stats)
            fprintf(stderr, "cuda step graphs: %s; %lld steps as graphs (%lld instantiated, %lld "
                    "updated in place), %lld eager (a key's first step), %lld recordings failed%s%s\n",
                    im->graphs_off ? "off" : "on", im->gstats.launched, im->gstats.instantiated,
                    im->gstats.updated, im->gstats.eager_steps, im->gstats.failed,
                    im->gstats.note[0] ? "; " : "", im->gstats.note);
        for (int i = 0; i < LI_PROF_EVENTS; i++)
            if (im->prof_ev[i]) cudaEventDestroy(im->prof_ev[i]);
        li_cu_gemm_free(im);
        li_cu_graphs_free(im);
        li_cuda_sampler_free(im->sampler);
        cudaFree(im->jump_table);
        cudaFree(im->x0s.p);
        cudaFree(im->xbf.p);
        cudaFree(im->attn.p);
        cudaFree(im->keys.p);
        cudaFree(im->tickets.p);
        cudaFree(im->dense.p);
        li_cu_attention_free(im);
        cudaFree(im->fp8_ws.p);
        cudaFree(im->fp8_as.p);
        cudaFree(im->fp8_acc.p);
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

static void cu_add_bias(li_backend *be, float *x, const float *b, int T, int N) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "add_bias", li_cuda_add_bias(im->stream, x, b, T, N));
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

static void cu_qkv_rope_store(li_backend *be, float *q, const li_kv_storage *kv, int il,
                              const float *qkv, const float *bias, const int32_t *pos,
                              const int64_t *slot, int T, int H, const li_rope_table *table) {
    li_cuda_impl *im = be->impl;
    li_cuda_rope_args r = rope_args(table);
    cu_fail(im, "qkv_rope_store",
            li_cuda_qkv_rope_store(im->stream, q, kv->data, kv->dtype == LI_DTYPE_BF16, kv->n_layer,
                                   kv->n_head_kv, kv->head_dim, kv->page_size, il, qkv, bias, pos,
                                   slot, T, H, &r));
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

static void cu_fp8_quant_rows(li_backend *be, const li_fp8_rows *out, const float *x, int T,
                              int K) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "fp8_quant_rows", li_cuda_fp8_quant_rows(im->stream, out->q, out->scale, x, T, K));
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

static void cu_qkv_rope(li_backend *be, float *q, void *k, void *v, li_dtype dt,
                        const float *qkv, const int32_t *pos, int T, int H, int Hkv, int Dh,
                        const li_rope_table *table) {
    li_cuda_impl *im = be->impl;
    if (dt != LI_DTYPE_BF16) {
        record(im, LI_ERR_UNSUPPORTED, "cuda qkv_rope: dtype %s", li_dtype_name(dt));
        return;
    }
    li_cuda_rope_args r = rope_args(table);
    cu_fail(im, "qkv_rope", li_cuda_qkv_bf16(im->stream, q, k, v, qkv, pos, T, H, Hkv, Dh, &r));
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
    if (random_remask && !li_cu_jump_table_ready(im)) return;
    cu_fail(im, "dllm_select",
            li_cuda_dllm_select(im->stream, commit, x0, conf, masked, B, mode, k, tau, f,
                                random_remask, rng_state(rng), im->jump_table));
}

// DPad's draw of a block (backend.h dllm->dpad): dllm-sample.cu. Called between forwards, so the
// jump table may be made here.
static void cu_dllm_dpad(li_backend *be, uint8_t *keep, const double *prob, int window,
                         int n_suffix, const li_rng *rng) {
    li_cuda_impl *im = be->impl;
    if (!li_cu_jump_table_ready(im)) return;
    cu_fail(im, "dllm_dpad",
            li_cuda_dllm_dpad(im->stream, keep, prob, window, n_suffix, rng_state(rng),
                              im->jump_table));
}

// LLaDA's step at any temperature (backend.h dllm->x0): dllm-sample.cu. Runs between forwards
// (never inside a step graph), so the jump table and the scratch may be allocated here.
static void cu_dllm_x0(li_backend *be, int32_t *x0, double *conf, float *logits,
                       const float *ulogits, const uint8_t *masked, int B, int V, float w,
                       int32_t eos, int32_t ban0, int32_t ban1, double temperature,
                       bool conf_f32, const li_rng *rng) {
    li_cuda_impl *im = be->impl;
    if (temperature > 0 && !li_cu_jump_table_ready(im)) return;
    size_t nb = li_cuda_dllm_x0_scratch_bytes(B, V);
    void *scratch = li_cu_scratch_get(im, &im->x0s, nb, "dllm_x0 (partials)");
    if (!scratch) return;
    cu_fail(im, "dllm_x0",
            li_cuda_dllm_x0(im->stream, x0, conf, logits, ulogits, masked, B, V, w, eos, ban0,
                            ban1, temperature, conf_f32, rng_state(rng), im->jump_table,
                            scratch, nb));
}

_Static_assert(LI_FP8_GROUP == 128, "dllm.cu assumes 128-wide FP8 groups");
_Static_assert(LI_FA_MAX_TILE == 1024, "dllm.cu sizes its score buffer for 1024-key tiles");

// ---- the [dt] entries (backend.h): each op's F32 and BF16 forms above behind one entry ---------

// (the GEMM forms live in backend-cuda-gemm.c under their li_cu_ names)
#define cu_matmul li_cu_matmul
#define cu_matmul_bf16 li_cu_matmul_bf16
LI_DT_FORMS(cu)
#undef cu_matmul
#undef cu_matmul_bf16

// The FP8 forms (LI_DTYPE_FP8: out is an li_fp8_rows) next to the ones above.
static void cu_add_rmsnorm_forms(li_backend *be, void *out, li_dtype dt, float *x, const float *y,
                                 const float *w, int T, int D, float eps) {
    if (dt == LI_DTYPE_FP8) {
        const li_fp8_rows *r = out;
        cu_add_rmsnorm_fp8(be, r->q, r->scale, r->tmp, x, y, w, T, D, eps);
        return;
    }
    LI_ASSERT(dt == LI_DTYPE_F32);
    cu_add_rmsnorm(be, out, x, y, w, T, D, eps);
}
static void cu_swiglu_forms(li_backend *be, void *out, li_dtype dt, const float *gate,
                            const float *up, int T, int64_t F, int64_t ld) {
    if (dt == LI_DTYPE_FP8) {
        const li_fp8_rows *r = out;
        LI_ASSERT(ld == F);
        cu_swiglu_fp8(be, r->q, r->scale, r->tmp, gate, up, T, (int)F);
        return;
    }
    cu_swiglu_dt(be, out, dt, gate, up, T, F, ld);
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
    .add_bias = cu_add_bias,
    .add_rmsnorm = cu_add_rmsnorm_forms,
    .rope = cu_rope_dt,
    .kv_store = cu_kv_store,
    .qkv_rope_store = cu_qkv_rope_store,
    .kv_copy_rotate = cu_kv_copy_rotate,
    .attention = li_cu_attention,
    .attention_seqs = li_cu_attention_seqs,
    .attention_decode = li_cu_attention_decode,
    .swiglu = cu_swiglu_forms,
    .softmax = cu_softmax,
    .sample = cu_sample,
    .flash_attn_tiles = li_cu_flash_attn_tiles,
    .flash_attn_finalize = li_cu_flash_attn_finalize,
    .fp8_quant_rows = cu_fp8_quant_rows,
    .matmul_fp8 = li_cu_matmul_fp8,
    .fp8_quant_weight = cu_fp8_quant_weight,
    .dllm = &cu_dllm_ops,
    .qkv_rope = cu_qkv_rope,
    .attention_dense = li_cu_attention_dense_dt,
    .act_dtypes = LI_ACT_BF16_FORMS(LI_ACT_F32_BF16, LI_ACT_FP8),
    .matrices_bf16 = true,
    .alloc = li_cu_alloc,
    .free = li_cu_free,
    .upload = li_backend_cuda_upload,
    .download = li_backend_cuda_download,
    .copy = li_cu_copy,
    .fill = li_cu_fill,
    .sync = li_backend_cuda_check,
    .reserve = li_cu_reserve,
    .scratch_allocs = li_cu_scratch_allocs,
    .fill_random = li_cu_fill_random,
    .graph_begin = li_cu_graph_begin,
    .graph_end = li_cu_graph_end,
    .host_alloc = li_cuda_host_alloc,
    .host_free = li_cuda_host_free,
    .kv_gather = li_cuda_kv_gather,
    .kv_scatter = li_cuda_kv_scatter,
};

void *li_backend_cuda_stream(li_backend *be) { return ((li_cuda_impl *)be->impl)->stream; }
