// weights-fp8.c — FP8 (e4m3) copies of weight matrices, per 128 x 128 block: the host quantiser
// (the reference every backend's ops.fp8_quant_weight matches bit for bit) and its backend-memory
// form. Used by the Llama forward's FP8 FFN (arch-llama.c, li_llama_set_fp8) and by LLaDA's
// (llada-load.c, li_llada_fp8_prepare).
//
// Not here: the FP8 GEMMs and activation quantising (backend ops fp8_quant_rows, matmul_fp8).
// Tested by tests/test-llada.c (FP8 forward against f32), tests/test-ops-llada.c (the ops) and
// gpu-check (the device quantiser against this one).
#include <math.h>
#include <string.h>

#include "weights-fp8.h"


typedef struct {
    li_fp8_weight *out;
    const li_weight *W;
    int64_t GK; // blocks per block-row
} fp8q_ctx;

static float weight_f32(const li_weight *W, size_t i) {
    return W->dtype == LI_DTYPE_F32 ? ((const float *)W->data)[i]
                                    : li_bf16_to_f32(((const uint16_t *)W->data)[i]);
}

// One 128 x 128 block per item: amax, scale, codes.
static void fp8q_blocks(void *p, int64_t b, int64_t e, int tid) {
    fp8q_ctx *c = p;
    int64_t N = c->W->n_rows, K = c->W->n_cols;
    for (int64_t blk = b; blk < e; blk++) {
        int64_t n0 = blk / c->GK * LI_FP8_GROUP, k0 = blk % c->GK * LI_FP8_GROUP;
        int64_t n1 = n0 + LI_FP8_GROUP < N ? n0 + LI_FP8_GROUP : N;
        int64_t k1 = k0 + LI_FP8_GROUP < K ? k0 + LI_FP8_GROUP : K;
        float amax = 0;
        for (int64_t n = n0; n < n1; n++)
            for (int64_t k = k0; k < k1; k++)
                amax = fmaxf(amax, fabsf(weight_f32(c->W, (size_t)(n * K + k))));
        float sc = li_fp8_scale(amax);
        c->out->scale[blk] = sc;
        for (int64_t n = n0; n < n1; n++)
            for (int64_t k = k0; k < k1; k++)
                c->out->q[n * K + k] = li_f32_to_e4m3(weight_f32(c->W, (size_t)(n * K + k)) / sc);
    }
}

li_status li_fp8_weight_quantize(li_fp8_weight *out, const li_weight *W, li_threadpool *tp) {
    LI_ASSERT(W->dtype == LI_DTYPE_F32 || W->dtype == LI_DTYPE_BF16);
    memset(out, 0, sizeof *out);
    int64_t N = W->n_rows, K = W->n_cols;
    int64_t GN = (N + LI_FP8_GROUP - 1) / LI_FP8_GROUP, GK = (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    out->n_rows = N;
    out->n_cols = K;
    out->q = li_alloc((size_t)(N * K), "fp8 weight codes");
    out->scale = li_alloc((size_t)(GN * GK) * sizeof(float), "fp8 weight scales");
    if (!out->q || !out->scale) {
        li_fp8_weight_free(out);
        return LI_ERR_OOM;
    }
    fp8q_ctx c = {out, W, GK};
    li_parallel_for(tp, GN * GK, fp8q_blocks, &c);
    return LI_OK;
}

void li_fp8_weight_free(li_fp8_weight *w) {
    li_free(w->q);
    li_free(w->scale);
    memset(w, 0, sizeof *w);
}

// Device backends: W is in device memory. The backend's fp8_quant_weight op when it has one (bit
// for bit the host's result), else a host copy quantised by the same code and moved back.
static li_status quantize_device(li_backend *be, li_fp8_weight *out, const li_weight *W) {
    size_t esz = W->dtype == LI_DTYPE_BF16 ? 2 : 4, n = (size_t)(W->n_rows * W->n_cols);
    if (be->ops->fp8_quant_weight) {  // on the device, bit-exact with the host code below
        size_t ns = (size_t)((W->n_rows + LI_FP8_GROUP - 1) / LI_FP8_GROUP *
                             ((W->n_cols + LI_FP8_GROUP - 1) / LI_FP8_GROUP)) * sizeof(float);
        *out = (li_fp8_weight){.n_rows = W->n_rows, .n_cols = W->n_cols};
        out->q = li_be_alloc(be, n, "fp8 weight codes");
        out->scale = out->q ? li_be_alloc(be, ns, "fp8 weight scales") : NULL;
        if (!out->scale) {
            li_fp8_weight_free_be(be, out);
            return LI_ERR_OOM;
        }
        be->ops->fp8_quant_weight(be, out, W);
        return LI_OK;
    }
    li_weight hw = *W;
    hw.data = li_alloc(n * esz, "fp8: host copy of a weight");
    if (!hw.data) return LI_ERR_OOM;
    li_fp8_weight h;
    li_status rc = li_be_download(be, hw.data, W->data, n * esz);
    if (rc == LI_OK) rc = li_fp8_weight_quantize(&h, &hw, be->tp);
    li_free(hw.data);
    if (rc != LI_OK) return rc;
    size_t ns = (size_t)((W->n_rows + LI_FP8_GROUP - 1) / LI_FP8_GROUP *
                         ((W->n_cols + LI_FP8_GROUP - 1) / LI_FP8_GROUP)) * sizeof(float);
    *out = (li_fp8_weight){.n_rows = W->n_rows, .n_cols = W->n_cols};
    out->q = li_be_alloc(be, n, "fp8 weight codes");
    out->scale = out->q ? li_be_alloc(be, ns, "fp8 weight scales") : NULL;
    rc = out->scale ? LI_OK : LI_ERR_OOM;
    if (rc == LI_OK) rc = li_be_upload(be, out->q, h.q, n);
    if (rc == LI_OK) rc = li_be_upload(be, out->scale, h.scale, ns);
    li_fp8_weight_free(&h);
    if (rc != LI_OK) li_fp8_weight_free_be(be, out);
    return rc;
}

li_status li_fp8_weight_quantize_be(li_backend *be, li_fp8_weight *out, const li_weight *W) {
    return li_be_is_device(be) ? quantize_device(be, out, W)
                               : li_fp8_weight_quantize(out, W, be->tp);
}

void li_fp8_weight_free_be(li_backend *be, li_fp8_weight *w) {
    if (li_be_is_device(be)) {
        li_be_free(be, w->q);
        li_be_free(be, w->scale);
        memset(w, 0, sizeof *w);
    } else {
        li_fp8_weight_free(w);
    }
}
