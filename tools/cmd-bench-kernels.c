// cmd-bench-kernels.c — `lazyinfer bench kernels` (docs/CUDA.md): the ops of one transformer layer
// timed one at a time through a backend's op table, with the bytes and FLOPs each must move and
// its share of the ceilings measured in the same run:
//   copy      a device copy of a large buffer: the memory ceiling (bytes read + written);
//   GEMM      matmul of M rows through D x D bf16 weights: the compute ceiling.
// Bandwidth-bound ops (norms, RoPE, SwiGLU, KV writes, the decode GEMV, decode attention) are
// given as GB/s and % of the copy rate, compute-bound ones (GEMMs, prefill attention) as
// TFLOP/s and % of the GEMM's.
//
// Shapes come from a model's hyper-parameters (-m; default synth:llama-3.1-8b, loaded as
// metadata only). Decode attention reads a paged pool of `--ctx` tokens per sequence in
// documents of 2,048 tokens, each with its own RoPE Δ (LazyAttention's deferred rotation), for
// each `--batch` (one attention_decode call for the batch where the backend has it, else one
// attention call per sequence); prefill attention is causal over `--prefill` tokens. The RoPE
// table is the model's theta without scaling (the rotation's cost does not depend on it).
//
// Timing: one untimed call (plans, scratch), then `--iters` calls between two li_be_sync; wall
// time / iters. Inputs are random; outputs are not checked (the tests and gpu-check do that).
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/backend/backend.h"
#include "../src/core/core.h"
#include "cli.h"
#include "lazyinfer.h"

#define BK_DOC_TOKENS 2048  // tokens per document of the decode context (one Δ each)
#define BK_MAX_BATCH 8      // batch sizes in --batch (each up to 4096 sequences)

typedef struct {
    li_backend *be;
    int D, F, H, Hkv, Dh, P;
    li_kv_storage kv;          // backend memory, one layer
    li_rope_table rope;
    float eps;
    // buffers (backend memory)
    float *x, *y, *out, *gate, *up, *q, *att, *normw;
    void *W;                   // bf16 weights, max(F, D) x max(F, D)
    int32_t *pos, *nvis;       // (rows) positions 0.., visible keys
    int64_t *slot;             // (rows) KV slots 0..
    uint64_t *words;           // (batch_max x pages_per_seq) decode page tables, consecutive
    int32_t *start, *start_host;  // (batch_max + 1) page_start of attention_decode, device / host
    int32_t *dec_nv;           // (batch_max) ctx each
    uint64_t *pre_words;       // prefill page table
    uint64_t *pre_words_host;  // host copies of the prefill table and of nvis: what the model
    int32_t *nvis_host;        // gives, so that a device backend may plan a library call
    li_kv_seq *seqs;           // host structs over words
    int pages_per_seq, pre_pages;
    // promotion from the host tier (kv-tiers.c): a document's pages, pinned host → pool
    li_kv_storage tier_kv;     // backend memory, all L layers, 2 x tier_n pages
    void *tier_host;           // (tier_n, page bytes) li_be_host_alloc: pinned on CUDA
    void *tier_dev;            // (tier_n x page bytes) contiguous: the plain copy's target
    int64_t *tier_pages;       // (tier_n) page ids 0, 2, 4, ..: no two consecutive
    int tier_n;
    // sizes of the run
    int T_max, batch_max;      // rows of every activation buffer (max(--prefill, --rows)),
                               // the largest --batch
    size_t act_bytes;          // x, y (past the copy), out: T_max x max(F, D, H Dh) floats
    size_t copy_bytes;         // the copy ceiling's buffer (x, y)
    size_t pool_bytes;         // the KV pool of one layer
    int64_t w_count;           // bf16 values in W
    double copy_gbs, gemm_tfs; // the ceilings, once timed (0 before)
    // the op being timed
    int T, N, K, batch;
} bk_ctx;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Mean wall time of one call (ms) after a warm-up call; < 0 when the backend reported an error.
static double time_op(bk_ctx *c, void (*fn)(bk_ctx *), int iters) {
    fn(c);
    if (li_be_sync(c->be) != LI_OK) return -1;
    double t0 = now_ms();
    for (int i = 0; i < iters; i++) fn(c);
    if (li_be_sync(c->be) != LI_OK) return -1;
    return (now_ms() - t0) / iters;
}

// ---- the ops ----------------------------------------------------------------------------------

static void op_copy(bk_ctx *c) { li_be_copy(c->be, c->y, c->x, (size_t)c->N * sizeof(float)); }
static void op_promote(bk_ctx *c) {
    if (li_be_kv_scatter(c->be, &c->tier_kv, c->tier_pages, c->tier_n, c->tier_host) != LI_OK)
        LI_WARN("bench kernels: promotion: %s", li_error_msg());
}
static void op_plain_h2d(bk_ctx *c) {
    size_t bytes = li_kv_storage_page_bytes(&c->tier_kv) * (size_t)c->tier_n;
    if (li_be_upload(c->be, c->tier_dev, c->tier_host, bytes) != LI_OK)
        LI_WARN("bench kernels: host copy: %s", li_error_msg());
}
static void op_rmsnorm(bk_ctx *c) {
    c->be->ops->rmsnorm(c->be, c->out, LI_DTYPE_F32, c->x, c->normw, c->T, c->D, c->eps);
}
static void op_add_rmsnorm(bk_ctx *c) {
    li_add_rmsnorm(c->be, c->out, LI_DTYPE_F32, c->x, c->y, c->normw, c->T, c->D, c->eps);
}
static void op_rope(bk_ctx *c) {
    c->be->ops->rope(c->be, c->q, LI_DTYPE_F32, c->q, c->pos, c->T, c->H, c->Dh, &c->rope);
}
static void op_swiglu(bk_ctx *c) {
    c->be->ops->swiglu(c->be, c->gate, LI_DTYPE_F32, c->gate, c->up, c->T, c->F, c->F);
}
static void op_kv_store(bk_ctx *c) {
    c->be->ops->kv_store(c->be, &c->kv, 0, c->x, c->y, c->slot, c->T);
}
static void op_matmul(bk_ctx *c) {
    li_weight w = {LI_DTYPE_BF16, c->N, c->K, c->W};
    c->be->ops->matmul(c->be, c->out, c->x, LI_DTYPE_F32, &w, c->T, false);
}
static void op_decode(bk_ctx *c) {
    const float scale = 1.0f / sqrtf((float)c->Dh);
    const li_backend_ops *o = c->be->ops;
    if (o->attention_decode && c->batch > 1) {
        o->attention_decode(c->be, c->att, c->q, c->batch, c->H, &c->kv, 0, c->words, c->start,
                            c->start_host, c->dec_nv, scale, &c->rope);
        return;
    }
    const size_t row = (size_t)c->H * c->Dh;
    for (int i = 0; i < c->batch; i++)
        o->attention(c->be, c->att + i * row, c->q + i * row, 1, c->H, &c->kv, 0, &c->seqs[i], NULL,
                     c->dec_nv + i, scale, &c->rope);
}
static void op_prefill(bk_ctx *c) {
    li_kv_seq seq = {.pages = c->pre_words, .n_pages = c->pre_pages,
                     .pages_host = c->pre_words_host, .n_visible_host = c->nvis_host};
    c->be->ops->attention(c->be, c->att, c->q, c->T, c->H, &c->kv, 0, &seq, NULL, c->nvis,
                          1.0f / sqrtf((float)c->Dh), &c->rope);
}

// ---- set-up -----------------------------------------------------------------------------------

static float *bk_alloc(li_backend *be, size_t bytes, const char *what, bool *ok) {
    void *p = *ok ? li_be_alloc(be, bytes ? bytes : 4, what) : NULL;
    if (!p) *ok = false;
    return p;
}

// n values uniform in [-a, a) (f32 or bf16) into backend memory; false with the error set.
static bool bk_fill(li_backend *be, void *dst, li_dtype dt, int64_t n, uint64_t seed, float a) {
    if (be->ops->fill_random) return be->ops->fill_random(be, dst, dt, n, seed, a, 0.0f) == LI_OK;
    const size_t esz = dt == LI_DTYPE_BF16 ? 2 : 4, chunk = 1 << 20;
    void *h = malloc(chunk * esz);
    if (!h) {
        li_error_set(LI_ERR_OOM, "out of memory (bench inputs)");
        return false;
    }
    li_rng rng;
    li_rng_seed(&rng, seed);
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i += (int64_t)chunk) {
        int64_t m = n - i < (int64_t)chunk ? n - i : (int64_t)chunk;
        for (int64_t j = 0; j < m; j++) {
            float v = (float)(2.0 * li_rng_uniform(&rng) - 1.0) * a;
            if (dt == LI_DTYPE_BF16) ((uint16_t *)h)[j] = li_f32_to_bf16(v);
            else ((float *)h)[j] = v;
        }
        ok = li_be_upload(be, (char *)dst + (size_t)i * esz, h, (size_t)m * esz) == LI_OK;
    }
    free(h);
    return ok;
}

static bool bk_upload(li_backend *be, void *dst, const void *src, size_t bytes) {
    return li_be_upload(be, dst, src, bytes) == LI_OK;
}

// Comma-separated batch sizes >= 1 into b (at most BK_MAX_BATCH); the count, or -1.
static int parse_batches(const char *s, int *b) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || n == BK_MAX_BATCH || (*end && *end != ',')) return -1;
        b[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

typedef struct {
    const char *op, *shape;
    double ms, bytes, flops;
    int ceiling;  // 0: memory (GB/s), 1: compute (TFLOP/s)
} bk_row;

static void print_row(const bk_row *r, double copy_gbs, double gemm_tfs) {
    char ms[32], gbs[32] = "", tfs[32] = "", pct[32] = "";
    if (r->ms < 0) {
        printf("| %s | %s | failed: %s | | | |\n", r->op, r->shape, li_error_msg());
        return;
    }
    snprintf(ms, sizeof ms, "%.4f", r->ms);
    double g = r->bytes / (r->ms * 1e-3) / 1e9, t = r->flops / (r->ms * 1e-3) / 1e12;
    // (below 1, significant digits: a tiny CPU shape's 0.0005 TFLOP/s is not "0.00")
    if (r->bytes > 0) snprintf(gbs, sizeof gbs, g >= 1 ? "%.1f" : "%.2g", g);
    if (r->flops > 0) snprintf(tfs, sizeof tfs, t >= 1 ? "%.2f" : "%.2g", t);
    if (r->ceiling == 0 && copy_gbs > 0 && r->bytes > 0)
        snprintf(pct, sizeof pct, "%.0f %%", 100.0 * g / copy_gbs);
    if (r->ceiling == 1 && gemm_tfs > 0 && r->flops > 0)
        snprintf(pct, sizeof pct, "%.0f %%", 100.0 * t / gemm_tfs);
    printf("| %s | %s | %s | %s | %s | %s |\n", r->op, r->shape, ms, gbs, tfs, pct);
}

// ---- the command ------------------------------------------------------------------------------

// The command line. INT_MIN in ctx .. iters and NULL in batches, kv_dtype: not given (the
// backend's default, filled in by check_args, which also parses --batch into batch).
typedef struct {
    const char *model, *backend, *batches, *kv_dtype;
    int ctx, prefill, rows, iters;
    int page_size, threads, gpu;
    int batch[BK_MAX_BATCH], n_batch;
} bk_args;

// The options into a; cli_parse_args's result: 0 to go on, 1 after --help, else the message
// is printed.
static int parse_args(int argc, char **argv, bk_args *a) {
    *a = (bk_args){.model = "synth:llama-3.1-8b", .backend = "cpu", .ctx = INT_MIN,
                   .prefill = INT_MIN, .rows = INT_MIN, .iters = INT_MIN, .page_size = 16};
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &a->model, "model whose shapes are timed (synth:llama-3.1-8b)"},
        {"--backend", NULL, OPT_STR, &a->backend, "cpu (default), cpu-devsim, cuda"},
        {"--gpu", NULL, OPT_INT, &a->gpu, "CUDA device (0)"},
        {"--threads", "-t", OPT_INT, &a->threads, "CPU threads (0: all)"},
        {"--ctx", NULL, OPT_INT, &a->ctx, "decode context per sequence (device 20000, CPU 4096)"},
        {"--batch", NULL, OPT_STR, &a->batches, "decode batch sizes, comma-separated (device 1,16,64; CPU 1,4)"},
        {"--prefill", NULL, OPT_INT, &a->prefill, "prefill rows: norms, RoPE, SwiGLU, KV writes, causal attention (device 4096, CPU 256)"},
        {"--rows", NULL, OPT_INT, &a->rows, "GEMM rows (device 4096, CPU 256)"},
        {"--kv-dtype", NULL, OPT_STR, &a->kv_dtype, "f32 or bf16 (device bf16, CPU f32)"},
        {"--page-size", NULL, OPT_INT, &a->page_size, "KV page size (16)"},
        {"--iters", "-r", OPT_INT, &a->iters, "timed calls per op (device 20, CPU 3)"},
    };
    const char *usage = "usage: lazyinfer bench kernels [-m MODEL] [--backend B] [--ctx N] [--batch LIST] "
                        "[--prefill T] [--rows M] [--kv-dtype f32|bf16] [--iters N]";
    int n_pos = 0;
    return cli_parse_args(argc, argv, usage, opts, sizeof opts / sizeof opts[0], NULL, 0, &n_pos);
}

// The defaults of what was not given (dev: a GPU, bigger ones), the options' ranges, then the
// model's hyper-parameters into in; 0, or the exit code after the message.
static int check_args(bk_args *a, bool dev, li_model_info *in) {
    if (a->ctx == INT_MIN) a->ctx = dev ? 20000 : 4096;
    if (a->prefill == INT_MIN) a->prefill = dev ? 4096 : 256;
    if (a->rows == INT_MIN) a->rows = dev ? 4096 : 256;
    if (a->iters == INT_MIN) a->iters = dev ? 20 : 3;
    if (!a->batches) a->batches = dev ? "1,16,64" : "1,4";
    if (!a->kv_dtype) a->kv_dtype = dev ? "bf16" : "f32";
    a->n_batch = parse_batches(a->batches, a->batch);
    const int ctx = a->ctx, prefill = a->prefill, rows = a->rows, page_size = a->page_size;
    const char *bad = ctx < 1 || ctx > (1 << 24) ? "--ctx must be in [1, 16777216]"
                      : prefill < 1 || prefill > (1 << 20) ? "--prefill must be in [1, 1048576]"
                      : rows < 1 || rows > (1 << 20) ? "--rows must be in [1, 1048576]"
                      : a->iters < 1 ? "--iters must be >= 1"
                      : page_size < 1 || page_size > LI_PAGE_MAX_SIZE ? "--page-size must be in [1, 256]"
                      : a->n_batch < 1 ? "--batch must be up to 8 comma-separated sizes in [1, 4096]"
                      : strcmp(a->kv_dtype, "f32") && strcmp(a->kv_dtype, "bf16") ? "--kv-dtype must be f32 or bf16"
                                                                                    : NULL;
    if (bad) {
        fprintf(stderr, "lazyinfer bench kernels: %s\n", bad);
        return 2;
    }
    li_model_params mp = li_model_default_params();
    mp.path = a->model;
    mp.metadata_only = true;
    li_model *m = NULL;
    if (li_model_load(&m, &mp) != LI_OK)
        return cli_fail("bench kernels: loading the model's hyper-parameters");
    li_model_get_info(m, in);
    li_model_free(m);
    if (in->head_dim > 512 || in->n_head % in->n_head_kv) {
        fprintf(stderr, "lazyinfer bench kernels: %s: head_dim %d / heads %d / %d not supported\n",
                a->model, in->head_dim, in->n_head, in->n_head_kv);
        return 2;
    }
    return 0;
}

// The layer's shapes (the model's, --page-size), its RoPE table, the page tables' lengths, the
// KV pool (one layer, pages for the largest batch or the prefill, whichever is more) and the
// buffers' sizes; 0, or the exit code after the message.
static int setup_shapes(bk_ctx *c, const bk_args *a, const li_model_info *in, bool dev) {
    c->D = in->n_embd, c->F = in->n_ff, c->H = in->n_head, c->Hkv = in->n_head_kv;
    c->Dh = in->head_dim;
    c->P = a->page_size;
    c->eps = in->rms_eps > 0 ? in->rms_eps : 1e-5f;
    li_rope_config rc;
    memset(&rc, 0, sizeof rc);
    rc.layout = LI_ROPE_NEOX;
    rc.theta = in->rope_theta > 0 ? in->rope_theta : 10000.0f;
    rc.n_dims = c->Dh;
    if (li_rope_table_init(&c->rope, &rc) != LI_OK) return cli_fail("bench kernels: RoPE table");
    c->batch_max = 1;
    for (int i = 0; i < a->n_batch; i++)
        c->batch_max = a->batch[i] > c->batch_max ? a->batch[i] : c->batch_max;
    c->T_max = a->prefill > a->rows ? a->prefill : a->rows;
    const int64_t wide = c->F > c->D ? c->F : c->D, HDh = (int64_t)c->H * c->Dh;
    c->pages_per_seq = (a->ctx + c->P - 1) / c->P;
    c->pre_pages = (a->prefill + c->P - 1) / c->P;
    int64_t pool_pages = (int64_t)c->pages_per_seq * c->batch_max;
    if (pool_pages < c->pre_pages) pool_pages = c->pre_pages;
    if (pool_pages > LI_PAGE_MAX_ID) {
        fprintf(stderr, "lazyinfer bench kernels: --ctx %d x batch %d needs %lld pages, more than a "
                "page word addresses (%lld)\n", a->ctx, c->batch_max, (long long)pool_pages,
                (long long)LI_PAGE_MAX_ID);
        return 2;
    }
    li_dtype kdt = strcmp(a->kv_dtype, "bf16") ? LI_DTYPE_F32 : LI_DTYPE_BF16;
    c->kv = (li_kv_storage){1, c->Hkv, c->Dh, c->P, pool_pages, NULL, kdt};
    c->pool_bytes =
        (size_t)2 * c->Hkv * c->P * c->Dh * li_kv_elem_bytes(kdt) * (size_t)pool_pages;  // L = 1
    c->act_bytes = (size_t)c->T_max * (size_t)(wide > HDh ? wide : HDh) * sizeof(float);
    c->copy_bytes = dev ? ((size_t)1 << 30) : ((size_t)1 << 28);  // the copy ceiling
    c->w_count = (int64_t)c->F * c->D > (int64_t)c->D * c->D ? (int64_t)c->F * c->D
                                                               : (int64_t)c->D * c->D;
    return 0;
}

// Every buffer of c sized by setup_shapes (backend memory) and the host tables; false with the
// error set.
static bool alloc_buffers(bk_ctx *c) {
    li_backend *be = c->be;
    const int T = c->T_max, bmax = c->batch_max;
    const int64_t HDh = (int64_t)c->H * c->Dh;
    const size_t xy = c->act_bytes > c->copy_bytes ? c->act_bytes : c->copy_bytes;
    bool ok = true;
    c->x = bk_alloc(be, xy, "bench x", &ok);
    c->y = bk_alloc(be, xy, "bench y", &ok);
    c->out = bk_alloc(be, c->act_bytes, "bench out", &ok);
    c->gate = bk_alloc(be, (size_t)T * c->F * 4, "bench gate", &ok);
    c->up = bk_alloc(be, (size_t)T * c->F * 4, "bench up", &ok);
    c->q = bk_alloc(be, (size_t)(T > bmax ? T : bmax) * HDh * 4, "bench q", &ok);
    c->att = bk_alloc(be, (size_t)(T > bmax ? T : bmax) * HDh * 4, "bench attention out", &ok);
    c->normw = bk_alloc(be, (size_t)c->D * 4, "bench norm weight", &ok);
    c->W = bk_alloc(be, (size_t)c->w_count * 2, "bench weights", &ok);
    c->pos = (int32_t *)bk_alloc(be, (size_t)T * 4, "bench positions", &ok);
    c->nvis = (int32_t *)bk_alloc(be, (size_t)T * 4, "bench visible keys", &ok);
    c->slot = (int64_t *)bk_alloc(be, (size_t)T * 8, "bench slots", &ok);
    c->words = (uint64_t *)bk_alloc(be, (size_t)c->pages_per_seq * bmax * 8, "bench page tables", &ok);
    c->pre_words = (uint64_t *)bk_alloc(be, (size_t)c->pre_pages * 8, "bench prefill table", &ok);
    c->start = (int32_t *)bk_alloc(be, (size_t)(bmax + 1) * 4, "bench page_start", &ok);
    c->start_host = malloc((size_t)(bmax + 1) * 4);
    c->dec_nv = (int32_t *)bk_alloc(be, (size_t)bmax * 4, "bench decode lengths", &ok);
    c->kv.data = bk_alloc(be, c->pool_bytes, "bench KV pool", &ok);
    c->seqs = calloc((size_t)bmax, sizeof *c->seqs);
    c->pre_words_host = malloc((size_t)c->pre_pages * 8);
    c->nvis_host = malloc((size_t)T * 4);
    if (ok && (!c->seqs || !c->start_host || !c->pre_words_host || !c->nvis_host)) {
        li_error_set(LI_ERR_OOM, "out of memory (bench tables)");
        ok = false;
    }
    return ok;
}

// The inputs: random activations, weights and pool; positions 0.., slots 0.., causal visible
// keys over the prefill; the decode page tables (sequence s on pages s * pages_per_seq .., of
// ctx tokens, a new Δ every BK_DOC_TOKENS) and the prefill's. False with the error set.
static bool fill_inputs(bk_ctx *c, int ctx, int prefill) {
    li_backend *be = c->be;
    const int T = c->T_max, bmax = c->batch_max;
    const int64_t HDh = (int64_t)c->H * c->Dh, pool_pages = c->kv.n_pages;
    const li_dtype kdt = c->kv.dtype;
    int32_t *hi = malloc((size_t)(T > bmax ? T : bmax) * 8);
    uint64_t *hw = malloc((size_t)c->pages_per_seq * bmax * 8 + (size_t)c->pre_pages * 8);
    bool ok = hi && hw;
    if (!ok) li_error_set(LI_ERR_OOM, "out of memory (bench tables)");
    ok = ok && bk_fill(be, c->x, LI_DTYPE_F32, (int64_t)(c->act_bytes / 4), 1, 1.0f) &&
         bk_fill(be, c->y, LI_DTYPE_F32, (int64_t)(c->act_bytes / 4), 2, 1.0f) &&
         bk_fill(be, c->gate, LI_DTYPE_F32, (int64_t)T * c->F, 3, 1.0f) &&
         bk_fill(be, c->up, LI_DTYPE_F32, (int64_t)T * c->F, 4, 1.0f) &&
         bk_fill(be, c->q, LI_DTYPE_F32, (int64_t)(T > bmax ? T : bmax) * HDh, 5, 1.0f) &&
         bk_fill(be, c->normw, LI_DTYPE_F32, c->D, 6, 1.0f) &&
         bk_fill(be, c->W, LI_DTYPE_BF16, c->w_count, 7, 0.05f) &&
         bk_fill(be, c->kv.data, kdt, (int64_t)(c->pool_bytes / li_kv_elem_bytes(kdt)), 8, 1.0f);
    if (ok) {
        for (int t = 0; t < T; t++) hi[t] = t;
        ok = bk_upload(be, c->pos, hi, (size_t)T * 4);
        for (int t = 0; t < T; t++) hi[t] = t < prefill ? t + 1 : prefill;
        memcpy(c->nvis_host, hi, (size_t)T * 4);
        ok = ok && bk_upload(be, c->nvis, hi, (size_t)T * 4);
        int64_t *hs = (int64_t *)hi;  // hi holds >= 2 T ints
        for (int t = 0; t < T; t++) hs[t] = t % (pool_pages * c->P);
        ok = ok && bk_upload(be, c->slot, hs, (size_t)T * 8);
        for (int s = 0; s < bmax; s++) {  // sequence s on pages s * pages_per_seq ..
            for (int p = 0; p < c->pages_per_seq; p++) {
                int cnt = (p + 1) * c->P <= ctx ? c->P : ctx - p * c->P;
                int64_t delta = (int64_t)(p * c->P / BK_DOC_TOKENS) * BK_DOC_TOKENS + 17;
                hw[(size_t)s * c->pages_per_seq + p] =
                    li_page_word((int64_t)s * c->pages_per_seq + p, cnt, delta);
            }
            c->seqs[s] = (li_kv_seq){.pages = c->words + (size_t)s * c->pages_per_seq,
                                     .n_pages = c->pages_per_seq};
            hi[s] = ctx;
        }
        ok = ok && bk_upload(be, c->words, hw, (size_t)c->pages_per_seq * bmax * 8) &&
             bk_upload(be, c->dec_nv, hi, (size_t)bmax * 4);
        for (int p = 0; p < c->pre_pages; p++)
            hw[p] = li_page_word(p, (p + 1) * c->P <= prefill ? c->P : prefill - p * c->P, 0);
        memcpy(c->pre_words_host, hw, (size_t)c->pre_pages * 8);
        ok = ok && bk_upload(be, c->pre_words, hw, (size_t)c->pre_pages * 8);
    }
    free(hi);
    free(hw);
    return ok;
}

static void print_header(const bk_ctx *c, const bk_args *a, const li_model_info *in) {
    char desc[256] = "";
    if (c->be->ops->name) snprintf(desc, sizeof desc, "%s", c->be->ops->name);
    printf("## lazyinfer bench kernels — %s shapes (D %d, F %d, H %d, Hkv %d, Dh %d), backend %s\n\n",
           in->name, c->D, c->F, c->H, c->Hkv, c->Dh, desc);
    printf("One layer's ops; %d timed calls each. KV pool %s, P %d; decode context %d tokens in "
           "documents of %d (a Δ each). %% = of the copy rate (GB/s rows) or of the GEMM's "
           "TFLOP/s; an op whose data stay in cache can pass the copy rate.\n\n",
           a->iters, a->kv_dtype, c->P, a->ctx, BK_DOC_TOKENS);
    printf("| op | shape | ms | GB/s | TFLOP/s | %% of ceiling |\n|---|---|---:|---:|---:|---:|\n");
}

// The rows of the two ceilings, their rates into c->copy_gbs and c->gemm_tfs: a device copy of
// copy_bytes (memory) and a GEMM of --rows through D x D bf16 weights (compute).
static void time_ceilings(bk_ctx *c, const bk_args *a) {
    char sh[2][96];
    int ns = 0;
    const int rows = a->rows;
    c->N = (int)(c->copy_bytes / 4);
    bk_row row = {"copy (memory ceiling)", sh[ns], time_op(c, op_copy, a->iters),
                  2.0 * c->copy_bytes, 0, 0};
    snprintf(sh[ns++], 96, "%zu MiB", c->copy_bytes >> 20);
    if (row.ms > 0) c->copy_gbs = row.bytes / (row.ms * 1e-3) / 1e9;
    print_row(&row, c->copy_gbs, 0);
    c->T = rows, c->N = c->D, c->K = c->D;
    row = (bk_row){"matmul GEMM (compute ceiling)", sh[ns], time_op(c, op_matmul, a->iters), 0,
                   2.0 * rows * c->D * c->D, 1};
    snprintf(sh[ns++], 96, "M %d, N %d, K %d, bf16 W", rows, c->D, c->D);
    if (row.ms > 0) c->gemm_tfs = row.flops / (row.ms * 1e-3) / 1e12;
    print_row(&row, c->copy_gbs, c->gemm_tfs);
}

// The rows of the layer's GEMMs (decode GEMVs, the prefill GEMM) and of the pointwise ops over
// the prefill rows.
static void time_gemms_and_pointwise(bk_ctx *c, const bk_args *a) {
    char sh[8][96];
    int ns = 0;
    const int iters = a->iters, rows = a->rows, prefill = a->prefill;
    const double copy_gbs = c->copy_gbs, gemm_tfs = c->gemm_tfs;
    bk_row row;
    // decode: the GEMVs of one token through the layer's widest matrices
    const int mm[2][2] = {{c->F, c->D}, {c->D, c->F}};
    for (int i = 0; i < 2; i++) {
        c->T = 1, c->N = mm[i][0], c->K = mm[i][1];
        row = (bk_row){i ? "matmul decode (down)" : "matmul decode (gate / up)", sh[ns],
                       time_op(c, op_matmul, iters), 2.0 * c->N * c->K, 2.0 * c->N * c->K, 0};
        snprintf(sh[ns++], 96, "T 1, N %d, K %d, bf16 W", c->N, c->K);
        print_row(&row, copy_gbs, gemm_tfs);
    }
    c->T = rows, c->N = c->F, c->K = c->D;
    row = (bk_row){"matmul prefill (gate / up)", sh[ns], time_op(c, op_matmul, iters), 0,
                   2.0 * rows * c->F * c->D, 1};
    snprintf(sh[ns++], 96, "M %d, N %d, K %d", rows, c->F, c->D);
    print_row(&row, copy_gbs, gemm_tfs);
    // pointwise ops over the prefill rows
    c->T = prefill;
    const double TD = (double)prefill * c->D;
    row = (bk_row){"rmsnorm", sh[ns], time_op(c, op_rmsnorm, iters), 8 * TD, 0, 0};
    snprintf(sh[ns++], 96, "T %d, D %d", prefill, c->D);
    print_row(&row, copy_gbs, gemm_tfs);
    row = (bk_row){"add + rmsnorm", sh[ns], time_op(c, op_add_rmsnorm, iters), 16 * TD, 0, 0};
    snprintf(sh[ns++], 96, "T %d, D %d", prefill, c->D);
    print_row(&row, copy_gbs, gemm_tfs);
    const int64_t HDh = (int64_t)c->H * c->Dh;
    row = (bk_row){"rope (q)", sh[ns], time_op(c, op_rope, iters), 8.0 * prefill * HDh, 0, 0};
    snprintf(sh[ns++], 96, "T %d, H %d, Dh %d", prefill, c->H, c->Dh);
    print_row(&row, copy_gbs, gemm_tfs);
    row = (bk_row){"swiglu", sh[ns], time_op(c, op_swiglu, iters), 12.0 * prefill * c->F, 0, 0};
    snprintf(sh[ns++], 96, "T %d, F %d", prefill, c->F);
    print_row(&row, copy_gbs, gemm_tfs);
    const double kvrow = (double)c->Hkv * c->Dh;
    row = (bk_row){"kv_store", sh[ns], time_op(c, op_kv_store, iters),
                   prefill * kvrow * (8 + 2 * li_kv_elem_bytes(c->kv.dtype)), 0, 0};
    snprintf(sh[ns++], 96, "T %d, Hkv %d, Dh %d, %s pool", prefill, c->Hkv, c->Dh, a->kv_dtype);
    print_row(&row, copy_gbs, gemm_tfs);
}

// The rows of decode attention (one per --batch) and causal prefill attention; false when the
// page_start table could not be uploaded (message printed, the remaining rows skipped).
static bool time_attention(bk_ctx *c, const bk_args *a) {
    char sh[BK_MAX_BATCH + 1][96];
    int ns = 0;
    const int iters = a->iters, ctx = a->ctx, prefill = a->prefill;
    const double kvrow = (double)c->Hkv * c->Dh;
    const size_t esz = li_kv_elem_bytes(c->kv.dtype);
    const int64_t HDh = (int64_t)c->H * c->Dh;
    bk_row row;
    for (int i = 0; i < a->n_batch; i++) {
        c->batch = a->batch[i];
        if (c->be->ops->attention_decode) {
            for (int s = 0; s <= c->batch; s++) c->start_host[s] = s * c->pages_per_seq;
            if (!bk_upload(c->be, c->start, c->start_host, (size_t)(c->batch + 1) * 4)) {
                cli_fail("bench kernels: page_start");
                return false;
            }
        }
        row = (bk_row){"attention decode", sh[ns], time_op(c, op_decode, iters),
                       (double)c->batch * ctx * kvrow * 2 * esz, 0, 0};
        snprintf(sh[ns++], 96, "batch %d, ctx %d, %s%s", c->batch, ctx, a->kv_dtype,
                 c->batch > 1 && c->be->ops->attention_decode ? ", one call" : "");
        print_row(&row, c->copy_gbs, c->gemm_tfs);
    }
    c->T = prefill;
    row = (bk_row){"attention prefill (causal)", sh[ns], time_op(c, op_prefill, iters), 0,
                   4.0 * prefill * (double)prefill * HDh / 2, 1};
    snprintf(sh[ns++], 96, "T %d, H %d, Hkv %d, Dh %d", prefill, c->H, c->Hkv, c->Dh);
    print_row(&row, c->copy_gbs, c->gemm_tfs);
    return true;
}

// Promotion from the host tier (issue 21): one document of min(--prefill, 2048) tokens, every
// layer, from host memory the backend pins (li_be_host_alloc) into pool pages two apart (no
// run of consecutive ids: one copy per page, the worst case), then one plain copy of the same
// bytes from the same host buffer into one device buffer: the rate to compare with (goal:
// promotion >= 80 % of it). The % column here is of that plain copy, not of the device copy.
// 0, or 1 after the message.
static int time_promotion(bk_ctx *c, const bk_args *a, const li_model_info *in) {
    char sh[2][96];
    int ns = 0;
    li_backend *be = c->be;
    bool ok = true;
    int doc = a->prefill < BK_DOC_TOKENS ? a->prefill : BK_DOC_TOKENS;
    c->tier_kv = c->kv;
    c->tier_kv.n_layer = in->n_layer;
    c->tier_n = (doc + c->P - 1) / c->P;
    c->tier_kv.n_pages = 2 * (int64_t)c->tier_n;
    const size_t pb = li_kv_storage_page_bytes(&c->tier_kv), bytes = pb * (size_t)c->tier_n;
    c->tier_kv.data = bk_alloc(be, pb * (size_t)c->tier_kv.n_pages, "bench promotion pool", &ok);
    c->tier_dev = bk_alloc(be, bytes, "bench plain copy target", &ok);
    c->tier_host = ok ? li_be_host_alloc(be, bytes, "bench host tier") : NULL;
    c->tier_pages = malloc((size_t)c->tier_n * sizeof *c->tier_pages);
    if (!ok || !c->tier_host || !c->tier_pages) return cli_fail("bench kernels: promotion buffers");
    memset(c->tier_host, 0x3c, bytes);
    for (int i = 0; i < c->tier_n; i++) c->tier_pages[i] = 2 * (int64_t)i;
    bk_row plain = {"host → device plain copy", sh[ns], time_op(c, op_plain_h2d, a->iters),
                    (double)bytes, 0, 0};
    snprintf(sh[ns++], 96, "%.1f MiB, %s host memory", bytes / 1048576.0,
             be->ops->host_alloc ? "pinned" : "pageable");
    double plain_gbs = plain.ms > 0 ? plain.bytes / (plain.ms * 1e-3) / 1e9 : 0;
    print_row(&plain, plain_gbs, c->gemm_tfs);
    bk_row row = {"promotion (host tier → pool pages)", sh[ns], time_op(c, op_promote, a->iters),
                  (double)bytes, 0, 0};
    snprintf(sh[ns++], 96, "%d tokens, L %d: %d pages of %.2f MiB, none adjacent", doc,
             in->n_layer, c->tier_n, pb / 1048576.0);
    print_row(&row, plain_gbs, c->gemm_tfs);
    return 0;
}

// Every buffer of c (NULL ones skipped), not the backend.
static void free_buffers(bk_ctx *c) {
    void *host[] = {c->seqs, c->start_host, c->pre_words_host, c->nvis_host, c->tier_pages};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    li_be_host_free(c->be, c->tier_host);
    void *bufs[] = {c->x, c->y, c->out, c->gate, c->up, c->q, c->att, c->normw, c->W, c->pos,
                    c->nvis, c->slot, c->words, c->pre_words, c->start, c->dec_nv, c->kv.data,
                    c->tier_kv.data, c->tier_dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) li_be_free(c->be, bufs[i]);
}

// Parse and check the options, set up the buffers and inputs, time the rows (ceilings, GEMMs,
// pointwise ops, attention, promotion), free everything.
int cmd_bench_kernels(int argc, char **argv) {
    bk_args a;
    int r = parse_args(argc, argv, &a);
    if (r) return r == 1 ? 0 : 2;
    li_backend *be = NULL;
    if (li_backend_open(&be, a.backend, a.threads, a.gpu) != LI_OK) return cli_fail("bench kernels");
    const bool dev = li_be_is_device(be) && strncmp(a.backend, "cpu", 3);  // a GPU: bigger defaults
    li_model_info in;
    int status = check_args(&a, dev, &in);
    bk_ctx c;
    memset(&c, 0, sizeof c);
    c.be = be;
    if (status == 0) status = setup_shapes(&c, &a, &in, dev);
    if (status == 0 && !(alloc_buffers(&c) && fill_inputs(&c, a.ctx, a.prefill)))
        status = cli_fail("bench kernels: setting up the inputs");
    if (status == 0) {
        print_header(&c, &a, &in);
        time_ceilings(&c, &a);
        time_gemms_and_pointwise(&c, &a);
        // a failed page_start upload ends the table early: a failure (status 1), like any other
        status = time_attention(&c, &a) ? time_promotion(&c, &a, &in) : 1;
    }
    free_buffers(&c);
    li_backend_free(be);
    return status;
}
