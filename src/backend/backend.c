// backend.c — backend memory: the li_be_* calls dispatch to a backend's memory ops (CUDA device
// memory) or fall back to host memory when it has none (the CPU tables). See backend.h.
#include <string.h>

#include "backend.h"
#ifdef LI_CUDA
#include "cuda/backend-cuda.h"
#endif

li_status li_backend_open(li_backend **out, const char *name, int n_threads, int device) {
    *out = NULL;
    if (!name || !strcmp(name, "cpu")) return li_backend_cpu_init(out, n_threads);
    if (!strcmp(name, "cpu-ref")) return li_backend_cpu_ref_init(out);
    if (!strcmp(name, "cpu-devsim") || !strcmp(name, "cpu-devsim-bf16"))
        return li_backend_cpu_devsim_init(out, n_threads, strstr(name, "bf16") != NULL);
    if (!strcmp(name, "cuda")) {
#ifdef LI_CUDA
        return li_backend_cuda_init(out, device);
#else
        (void)device;
        return li_error_set(LI_ERR_UNSUPPORTED, "backend 'cuda': this build has no CUDA backend "
                            "(build ./lazyinfer-cuda with `make CUDA=1`)");
#endif
    }
    return li_error_set(LI_ERR_INVALID_ARG,
                        "unknown backend '%s' (known: cpu, cpu-ref, cpu-devsim, cpu-devsim-bf16, cuda)",
                        name);
}

bool li_be_is_device(const li_backend *be) { return be && be->ops && be->ops->alloc; }

void li_add_rmsnorm(li_backend *be, void *out, li_dtype dt, float *x, const float *y,
                    const float *w, int T, int D, float eps) {
    if (li_be_takes(be, LI_ACT_ADD_RMSNORM, dt)) {
        be->ops->add_rmsnorm(be, out, dt, x, y, w, T, D, eps);
        return;
    }
    const li_fp8_rows *r = dt == LI_DTYPE_FP8 ? out : NULL;
    LI_ASSERT(r || (dt == LI_DTYPE_F32 && y));
    if (y) be->ops->add(be, x, y, (int64_t)T * D);
    be->ops->rmsnorm(be, r ? r->tmp : out, LI_DTYPE_F32, x, w, T, D, eps);
    if (r) be->ops->fp8_quant_rows(be, r, r->tmp, T, D);
}

void li_swiglu(li_backend *be, void *out, li_dtype dt, const float *gate, const float *up, int T,
               int64_t F, int64_t ld) {
    if (dt != LI_DTYPE_FP8 || li_be_takes(be, LI_ACT_SWIGLU, dt)) {
        be->ops->swiglu(be, out, dt, gate, up, T, F, ld);
        return;
    }
    const li_fp8_rows *r = out;
    LI_ASSERT(ld == F);
    be->ops->swiglu(be, r->tmp, LI_DTYPE_F32, gate, up, T, F, F);
    be->ops->fp8_quant_rows(be, r, r->tmp, T, (int)F);
}

void li_qkv_rope_store(li_backend *be, float *q, float *k, float *v, const li_kv_storage *kv,
                       int il, const float *qkv, const float *bias, const int32_t *pos,
                       const int64_t *slot, int T, int H, const li_rope_table *table) {
    const li_backend_ops *o = be->ops;
    if (o->qkv_rope_store) {
        o->qkv_rope_store(be, q, kv, il, qkv, bias, pos, slot, T, H, table);
        return;
    }
    const int Hkv = kv->n_head_kv, Dh = kv->head_dim, HD = H * Dh, KD = Hkv * Dh;
    const size_t row = (size_t)HD + 2 * (size_t)KD;
    for (int t = 0; t < T; t++) {
        const float *r = qkv + t * row;
        li_be_copy(be, q + (size_t)t * HD, r, sizeof(float) * HD);
        li_be_copy(be, k + (size_t)t * KD, r + HD, sizeof(float) * KD);
        li_be_copy(be, v + (size_t)t * KD, r + HD + KD, sizeof(float) * KD);
    }
    if (bias) {
        o->add_bias(be, q, bias, T, HD);
        o->add_bias(be, k, bias + HD, T, KD);
        o->add_bias(be, v, bias + HD + KD, T, KD);
    }
    o->rope(be, q, LI_DTYPE_F32, q, pos, T, H, Dh, table);
    o->rope(be, k, LI_DTYPE_F32, k, pos, T, Hkv, Dh, table);
    o->kv_store(be, kv, il, k, v, slot, T);
}

void *li_be_alloc(li_backend *be, size_t n_bytes, const char *what) {
    return li_be_is_device(be) ? be->ops->alloc(be, n_bytes, what) : li_alloc(n_bytes, what);
}

void li_be_free(li_backend *be, void *p) {
    if (!p) return;
    if (li_be_is_device(be)) be->ops->free(be, p);
    else li_free(p);
}

li_status li_be_upload(li_backend *be, void *dst, const void *src_host, size_t n_bytes) {
    if (li_be_is_device(be)) return be->ops->upload(be, dst, src_host, n_bytes);
    if (n_bytes) memcpy(dst, src_host, n_bytes);
    return LI_OK;
}

li_status li_be_download(li_backend *be, void *dst_host, const void *src, size_t n_bytes) {
    if (li_be_is_device(be)) return be->ops->download(be, dst_host, src, n_bytes);
    if (n_bytes) memcpy(dst_host, src, n_bytes);
    return LI_OK;
}

void li_be_copy(li_backend *be, void *dst, const void *src, size_t n_bytes) {
    if (li_be_is_device(be)) be->ops->copy(be, dst, src, n_bytes);
    else if (n_bytes) memmove(dst, src, n_bytes);
}

void li_matmul_rows(li_backend *be, float *y, const void *x, li_dtype dt, const li_weight *W,
                    int T) {
    const int n = be->ops->matmul_invariant_rows > 0 ? be->ops->matmul_invariant_rows : T;
    const size_t esz = dt == LI_DTYPE_BF16 ? 2 : 4, K = (size_t)W->n_cols, N = (size_t)W->n_rows;
    for (int t = 0; t < T; t += n)
        be->ops->matmul(be, y + t * N, (const char *)x + t * K * esz, dt, W,
                        T - t < n ? T - t : n, false);
}

void li_be_fill(li_backend *be, float *x, float value, int64_t n) {
    if (li_be_is_device(be)) {
        be->ops->fill(be, x, value, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] = value;
}

li_status li_be_sync(li_backend *be) {
    return li_be_is_device(be) && be->ops->sync ? be->ops->sync(be) : LI_OK;
}

bool li_be_graph_begin(li_backend *be, uint64_t key) {
    return be && be->ops && be->ops->graph_begin && be->ops->graph_begin(be, key);
}

li_status li_be_graph_end(li_backend *be, bool *rerun) {
    *rerun = false;
    return be && be->ops && be->ops->graph_end ? be->ops->graph_end(be, rerun) : LI_OK;
}

bool li_be_takes(const li_backend *be, li_act_op op, li_dtype dt) {
    const li_backend_ops *o = be->ops;
    bool there = false;
    switch (op) {
    case LI_ACT_RMSNORM: there = o->rmsnorm != NULL; break;
    case LI_ACT_MATMUL: there = o->matmul != NULL; break;
    case LI_ACT_ROPE: there = o->rope != NULL; break;
    case LI_ACT_SWIGLU: there = o->swiglu != NULL; break;
    case LI_ACT_ATTENTION_DENSE: there = o->attention_dense != NULL; break;
    case LI_ACT_ADD_RMSNORM: there = o->add_rmsnorm != NULL; break;
    case LI_ACT_QKV_ROPE: there = o->qkv_rope != NULL; break;
    default: return false;
    }
    uint32_t m = o->act_dtypes[op];
    return there && (m ? (unsigned)dt < 32 && ((m >> dt) & 1u) != 0 : dt == LI_DTYPE_F32);
}

// ---- KV tier transfers -------------------------------------------------------------------------

void *li_be_host_alloc(li_backend *be, size_t n_bytes, const char *what) {
    if (be && be->ops && be->ops->host_alloc) return be->ops->host_alloc(be, n_bytes, what);
    return li_alloc(n_bytes, what);
}

void li_be_host_free(li_backend *be, void *p) {
    if (!p) return;
    if (be && be->ops && be->ops->host_free) be->ops->host_free(be, p);
    else li_free(p);
}

// The fallback of both directions: one li_be_upload / li_be_download per run of consecutive page
// ids (memcpy on the CPU; a synchronous copy on a device backend without the async entries).
static li_status kv_move(li_backend *be, li_kv_storage *kv, const int64_t *pages, int n,
                         void *host, bool up) {
    const size_t pb = li_kv_storage_page_bytes(kv);
    for (int i = 0; i < n;) {
        int run = li_page_run(pages, i, n);
        char *dev = (char *)kv->data + (size_t)pages[i] * pb;
        char *h = (char *)host + (size_t)i * pb;
        LI_TRY(up ? li_be_upload(be, dev, h, (size_t)run * pb)
                  : li_be_download(be, h, dev, (size_t)run * pb));
        i += run;
    }
    return LI_OK;
}

li_status li_be_kv_gather(li_backend *be, void *dst_host, const li_kv_storage *kv,
                          const int64_t *pages, int n) {
    if (be && be->ops && be->ops->kv_gather) return be->ops->kv_gather(be, dst_host, kv, pages, n);
    return kv_move(be, (li_kv_storage *)kv, pages, n, dst_host, false);
}

li_status li_be_kv_scatter(li_backend *be, li_kv_storage *kv, const int64_t *pages, int n,
                           const void *src_host) {
    if (be && be->ops && be->ops->kv_scatter) return be->ops->kv_scatter(be, kv, pages, n, src_host);
    return kv_move(be, kv, pages, n, (void *)src_host, true);
}
