// backend-ops.h — the one table of op cases that every backend runs against the fp64 oracle
// (ops-ref.c), after llama.cpp's test-backend-ops: test-ops.c runs it on cpu and cpu-devsim,
// tests/gpu/gpu-check.c on cuda. A row names the op, draws its shapes and inputs, runs the op on
// the oracle (host memory) and on the backend under test (its own memory, guarded), and checks
// NMSE against the row's tolerance for that kind of backend, that no output holds a NaN or an
// infinity the oracle does not have, that the guard bytes around every buffer are intact, and
// that the backend recorded no error.
//
// Not here: checks with no oracle counterpart on every backend (the RoPE table against HF, the
// CUDA GEMM's batch invariance, kernel timings); those stay in their programs.
// Include after test.h and backend/backend.h; the program seeds the stream `rng` (test.h) first.
#ifndef LI_TEST_BACKEND_OPS_H
#define LI_TEST_BACKEND_OPS_H

#include <stdbool.h>

#include "backend/backend.h"
#include "paged-seq.h"
#include "test.h"

// ---- the backend under test ----------------------------------------------------------------

typedef struct {
    li_backend *ref;  // the fp64 oracle; its buffers are host memory
    li_backend *be;   // the backend under test
    const char *name; // "cpu", "cpu-devsim", "cuda": printed in every case name
    int device;       // 1: a device backend's tolerances (bo_case.tol[1]), 0: a CPU's
    bool fused_exact; // be's add_rmsnorm equals its add then rmsnorm bit for bit
    uint64_t seed;    // printed with every failure
    // The backend's first recorded error (li_backend_cuda_check); NULL where errors are not kept.
    li_status (*check)(li_backend *be);
    // The tensor-core kernel attention over T rows of head dim Dh takes, named for the case
    // (" (mma kernel)"), or NULL for the fp32 path; NULL hook: always the fp32 path.
    const char *(*attn_tc)(int T, int Dh, li_dtype dt);
    // Whether the GEMM for these arguments rounds x to bf16 (cuBLASLt; not the f32-x decode
    // GEMV); NULL hook: never. Device pointers W, x.
    bool (*matmul_x_bf16)(int T, int K, const void *W, const void *x);
} bo_ctx;

typedef struct bo_case bo_case;
struct bo_case {
    const char *group; // the op (LI_GPU_CHECK_ONLY names groups)
    void (*run)(const bo_ctx *c, const bo_case *k);
    double tol[2]; // NMSE bound: [0] on a CPU backend, [1] on a device (how chosen: BO_TOL_*)
};

static char bo_name_buf[256];
#define BO_NAME(c, ...)                                                                            \
    (snprintf(bo_name_buf, sizeof bo_name_buf, "[%s] ", (c)->name),                                \
     snprintf(bo_name_buf + strlen(bo_name_buf), sizeof bo_name_buf - strlen(bo_name_buf),         \
              __VA_ARGS__),                                                                        \
     bo_name_buf)

// Infrastructure failures (allocation, copies) end the run: every later case would fail too.
static void bo_need(const bo_ctx *c, li_status st, const char *what) {
    if (st == LI_OK) return;
    fprintf(stderr, "%s: %s: %s (seed %llu)\n", c->name, what, li_error_msg(),
            (unsigned long long)c->seed);
    printf("FAIL: [%s] %s\n", c->name, what);
    fprintf(stderr, "%d passed, %d failed\n", test_n_pass, test_n_fail + 1);
    exit(1);
}

// ---- guarded buffers in the backend's memory ------------------------------------------------

#define BO_GUARD 256            // bytes on each side (keeps the payload 256-byte aligned)
#define BO_SENTINEL 0x7fa5a5a5u // a NaN bit pattern that no op produces

typedef struct {
    li_backend *be; // whose memory
    uint8_t *base;  // BO_GUARD | payload (n bytes) | BO_GUARD
    void *p;        // the payload
    size_t n;
} bo_buf;

static void bo_pattern(uint8_t *h, size_t n) {
    uint32_t s = BO_SENTINEL;
    for (size_t i = 0; i + 4 <= n; i += 4)
        memcpy(h + i, &s, 4);
    for (size_t i = n & ~(size_t)3; i < n; i++)
        h[i] = 0xa5;
}

// Host memory where the backend has no memory ops (the CPU tables), its own otherwise. The
// library's li_be_* do the same, but gpu-check links only the oracle and the CUDA backend.
static void bo_down(const bo_ctx *c, li_backend *be, void *host, const void *src, size_t n) {
    if (be->ops->download)
        bo_need(c, be->ops->download(be, host, src, n), "download");
    else
        memcpy(host, src, n);
}

// A guarded buffer of n bytes in c->be's memory whose payload starts `off` bytes past the guard
// (off > 0 tests unaligned pointers); payload = src (host, n bytes) or the sentinel pattern.
static void *bo_new_off(const bo_ctx *c, bo_buf *b, size_t n, const void *src, size_t off) {
    li_backend *be = c->be;
    size_t total = n + off + 2 * BO_GUARD;
    uint8_t *h = xmalloc(total);
    bo_pattern(h, total);
    if (src) memcpy(h + BO_GUARD + off, src, n);
    if (be->ops->alloc) {
        b->base = be->ops->alloc(be, total, "backend-ops buffer");
        if (!b->base) bo_need(c, LI_ERR_OOM, "allocation");
        bo_need(c, be->ops->upload(be, b->base, h, total), "upload");
        free(h);
    } else {
        b->base = h;
    }
    b->be = be;
    b->p = b->base + BO_GUARD + off;
    b->n = n;
    return b->p;
}
static void *bo_new(const bo_ctx *c, bo_buf *b, size_t n, const void *src) {
    return bo_new_off(c, b, n, src, 0);
}

// A guarded buffer of n bytes in host memory for the oracle (c->ref), payload the sentinel
// pattern: the oracle's writes are checked against their bounds as the backend's are.
static void *bo_host(const bo_ctx *c, bo_buf *b, size_t n) {
    bo_ctx h = *c;
    h.be = c->ref;
    return bo_new(&h, b, n, NULL);
}

// 1 when the guard bytes before the payload (from base) and after it are intact.
static int bo_guard_ok(const bo_ctx *c, const bo_buf *b) {
    size_t lo = (size_t)((uint8_t *)b->p - b->base), all = lo + b->n + BO_GUARD;
    uint8_t *h = xmalloc(all), *want = xmalloc(all);
    bo_down(c, b->be, h, b->base, all);
    bo_pattern(want, all);
    int ok = memcmp(h, want, lo) == 0 && memcmp(h + lo + b->n, want + lo + b->n, BO_GUARD) == 0;
    free(h);
    free(want);
    return ok;
}
static void bo_get(const bo_ctx *c, void *host, const bo_buf *b) {
    bo_down(c, b->be, host, b->p, b->n);
}
// Host bytes into the payload's first n bytes (n <= b->n).
static void bo_put(const bo_ctx *c, bo_buf *b, const void *host, size_t n) {
    if (b->be->ops->upload)
        bo_need(c, b->be->ops->upload(b->be, b->p, host, n), "upload");
    else
        memcpy(b->p, host, n);
}
static void bo_free(bo_buf *b) {
    if (b->be && b->be->ops->free)
        b->be->ops->free(b->be, b->base);
    else
        free(b->base);
    memset(b, 0, sizeof *b);
}

// ---- the checks every case makes ------------------------------------------------------------

// The backend's first recorded error, as a check of the current case.
static void bo_check_backend(const bo_ctx *c) {
    if (!c->check) return;
    li_status st = c->check(c->be);
    CHECK(st == LI_OK, "backend error: %s; seed %llu", li_error_msg(), (unsigned long long)c->seed);
}

// Every buffer's guards intact (NULL-terminated list).
static void bo_check_guards(const bo_ctx *c, bo_buf *const *bufs) {
    int ok = 1;
    for (size_t i = 0; bufs[i]; i++)
        ok &= bo_guard_ok(c, bufs[i]);
    CHECK(ok, "guard damaged; seed %llu", (unsigned long long)c->seed);
}

// The end of a case: every buffer's guards intact, then the buffers and the host arrays freed
// (both lists NULL-terminated).
static void bo_finish(const bo_ctx *c, bo_buf *const *bufs, void *const *host) {
    bo_check_guards(c, bufs);
    for (size_t i = 0; bufs[i]; i++)
        bo_free(bufs[i]);
    for (size_t i = 0; host[i]; i++)
        free(host[i]);
}

// got (n) against the oracle's want (n): NMSE <= tol, no NaN, an infinity only where the oracle
// has the same one. `what` names the output.
static void bo_check_close(const bo_ctx *c, const char *what, const float *got, const float *want,
                           long n, double tol) {
    double e = test_nmse(got, want, n);
    long bad_inf = 0;
    for (long i = 0; i < n; i++)
        bad_inf += (isinf(got[i]) || isinf(want[i])) && got[i] != want[i];
    CHECK(e <= tol, "%s: nmse %g > %g; seed %llu", what, e, tol, (unsigned long long)c->seed);
    CHECK(!test_has_nan(got, n), "%s: NaN; seed %llu", what, (unsigned long long)c->seed);
    CHECK(bad_inf == 0, "%s: %ld infinities differ from the oracle's; seed %llu", what, bad_inf,
          (unsigned long long)c->seed);
}

// ---- tolerances (NMSE = Σ (got - ref)² / Σ ref², the oracle accumulating in fp64) -------------
// Point-wise ops (rmsnorm, add, swiglu, softmax, rope, kv_copy_rotate of an f32 pool):
// - CPU: each fp32 result carries a few ulp of relative error (u = 6e-8), i.e. NMSE ~ u² ≈ 4e-15;
//   rmsnorm's fp32 sum of squares adds ~sqrt(D)·u to the scale. Largest seen over 40 seeds:
//   1e-14. 1e-12 leaves 100x headroom and is far below what a wrong index or a missing term
//   produces (NMSE 1e-6 to 1).
// - CUDA: expf / sincosf are within 2 ulp, rmsnorm's and softmax's fp32 block sums add ~log2(n)
//   ulp, i.e. NMSE ~ 1e-14..1e-13. 1e-11 leaves 100x.
#define BO_TOL_POINTWISE                                                                           \
    { 1e-12, 1e-11 }
// A copy (embed: bf16 -> f32 is exact; kv_store: the same rounding on both): bit-identical.
#define BO_TOL_EXACT                                                                               \
    { 0, 0 }

static const int bo_Ts[] = {1, 3, 17};
// 4096: a model width on the GPU; 4099 (T = 17: T·D >= 64K) the CPU's threaded path.
static const int bo_Ds[] = {1, 31, 67, 576, 4096, 4099};
#define BO_N_DS (int)(sizeof bo_Ds / sizeof bo_Ds[0])

static uint16_t *bo_bf16_weights(int64_t n, float scale) {
    uint16_t *w = xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        w[i] = li_f32_to_bf16(randn() * scale);
    return w;
}

// ---- embed, rmsnorm, add_rmsnorm, add, swiglu, softmax ----------------------------------------

static void bo_embed(const bo_ctx *c, const bo_case *k) {
    (void)k;
    for (int dt = 0; dt < 2; dt++)
        for (int it = 0; it < 3; it++)
            for (int id = 0; id < BO_N_DS; id++) {
                int T = bo_Ts[it], D = bo_Ds[id], V = randint(1000, 5000);
                li_dtype dtype = dt ? LI_DTYPE_BF16 : LI_DTYPE_F32;
                TEST_BEGIN(BO_NAME(c, "embed %s T=%d D=%d V=%d", li_dtype_name(dtype), T, D, V));
                size_t wb = (size_t)V * D * (dt ? 2 : 4);
                void *wh;
                if (dt) {
                    wh = bo_bf16_weights((int64_t)V * D, 1.0f);
                } else {
                    wh = xmalloc(wb);
                    fill(wh, (long)V * D, 1.0f);
                }
                int32_t tok[17];
                for (int t = 0; t < T; t++)
                    tok[t] = randint(0, V - 1);
                tok[0] = V - 1; // the last row too
                bo_buf gw, gt, go;
                li_weight Wh = {dtype, V, D, wh}, Wd = {dtype, V, D, bo_new(c, &gw, wb, wh)};
                int32_t *dtok = bo_new(c, &gt, sizeof(int32_t) * T, tok);
                float *dout = bo_new(c, &go, sizeof(float) * T * D, NULL);
                bo_buf ho1; // the oracle's output, guarded too
                float *o1 = bo_host(c, &ho1, sizeof(float) * T * D);
                float *o2 = xmalloc(sizeof(float) * T * D);
                c->ref->ops->embed(c->ref, o1, &Wh, tok, T);
                c->be->ops->embed(c->be, dout, &Wd, dtok, T);
                bo_check_backend(c);
                bo_get(c, o2, &go);
                CHECK(memcmp(o1, o2, sizeof(float) * T * D) == 0, "not bit-identical; seed %llu",
                      (unsigned long long)c->seed);
                bo_check_close(c, "out", o2, o1, (long)T * D, k->tol[c->device]);
                bo_finish(c, (bo_buf *[]){&gw, &gt, &go, &ho1, NULL}, (void *[]){wh, o2, NULL});
                TEST_END();
            }
}

static void bo_rmsnorm(const bo_ctx *c, const bo_case *k) {
    for (int it = 0; it < 3; it++)
        for (int id = 0; id < BO_N_DS; id++)
            for (int alias = 0; alias < 2; alias++) {
                int T = bo_Ts[it], D = bo_Ds[id];
                float eps = alias ? 1e-6f : 1e-5f;
                TEST_BEGIN(BO_NAME(c, "rmsnorm T=%d D=%d%s", T, D, alias ? " out=x" : ""));
                long n = (long)T * D;
                float *x = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * D);
                bo_buf ho1;
                float *o1 = bo_host(c, &ho1, sizeof(float) * n), *o2 = xmalloc(sizeof(float) * n);
                fill(x, n, 2.0f);
                fill(w, D, 1.0f);
                bo_buf gx, gw, go = {0};
                float *dx = bo_new(c, &gx, sizeof(float) * n, x);
                float *dw = bo_new(c, &gw, sizeof(float) * D, w);
                float *dout = alias ? dx : bo_new(c, &go, sizeof(float) * n, NULL);
                c->ref->ops->rmsnorm(c->ref, o1, LI_DTYPE_F32, x, w, T, D, eps);
                c->be->ops->rmsnorm(c->be, dout, LI_DTYPE_F32, dx, dw, T, D, eps);
                bo_check_backend(c);
                bo_get(c, o2, alias ? &gx : &go);
                bo_check_close(c, "out", o2, o1, n, k->tol[c->device]);
                bo_finish(c, (bo_buf *[]){&gx, &gw, &ho1, alias ? NULL : &go, NULL},
                          (void *[]){x, w, o2, NULL});
                TEST_END();
            }
}

// add_rmsnorm: x += y and out = rmsnorm(x) * w against the oracle's add then rmsnorm; where the
// backend promises it (c->fused_exact, backend.h), also equal bit for bit to its own add then
// rmsnorm.
static void bo_add_rmsnorm(const bo_ctx *c, const bo_case *k) {
    for (int it = 0; it < 3; it++)
        for (int id = 0; id < BO_N_DS; id++) {
            int T = bo_Ts[it], D = bo_Ds[id];
            TEST_BEGIN(BO_NAME(c, "add_rmsnorm T=%d D=%d", T, D));
            long n = (long)T * D;
            size_t nb = sizeof(float) * n;
            bo_buf hx, ho1;
            float *x = bo_host(c, &hx, nb), *y = xmalloc(nb), *w = xmalloc(sizeof(float) * D);
            float *o1 = bo_host(c, &ho1, nb), *o2 = xmalloc(nb), *x2 = xmalloc(nb);
            float *o3 = xmalloc(nb), *x3 = xmalloc(nb);
            fill(x, n, 2.0f);
            fill(y, n, 1.0f);
            fill(w, D, 1.0f);
            bo_buf gx, gy, gw, go, gx3, go3;
            float *dx = bo_new(c, &gx, nb, x), *dy = bo_new(c, &gy, nb, y);
            float *dw = bo_new(c, &gw, sizeof(float) * D, w), *dout = bo_new(c, &go, nb, NULL);
            float *dx3 = bo_new(c, &gx3, nb, x), *dout3 = bo_new(c, &go3, nb, NULL);
            c->ref->ops->add(c->ref, x, y, n);
            c->ref->ops->rmsnorm(c->ref, o1, LI_DTYPE_F32, x, w, T, D, 1e-5f);
            c->be->ops->add_rmsnorm(c->be, dout, LI_DTYPE_F32, dx, dy, dw, T, D, 1e-5f);
            bo_check_backend(c);
            bo_get(c, o2, &go);
            bo_get(c, x2, &gx);
            bo_check_close(c, "out", o2, o1, n, k->tol[c->device]);
            bo_check_close(c, "x", x2, x, n, k->tol[c->device]);
            if (c->fused_exact) {
                c->be->ops->add(c->be, dx3, dy, n);
                c->be->ops->rmsnorm(c->be, dout3, LI_DTYPE_F32, dx3, dw, T, D, 1e-5f);
                bo_check_backend(c);
                bo_get(c, o3, &go3);
                bo_get(c, x3, &gx3);
                CHECK(!memcmp(o2, o3, nb) && !memcmp(x2, x3, nb),
                      "fused != add + rmsnorm; seed %llu", (unsigned long long)c->seed);
            }
            bo_finish(c, (bo_buf *[]){&gx, &gy, &gw, &go, &gx3, &go3, &hx, &ho1, NULL},
                      (void *[]){y, w, o2, x2, o3, x3, NULL});
            TEST_END();
        }
}

// Lengths of the element-wise ops: odd, one past a vector or block multiple, 2^20.
static const long bo_ns[] = {1, 31, 37, 577, 1535, 8193 * 3, 100003, 1 << 20};
#define BO_N_NS (int)(sizeof bo_ns / sizeof bo_ns[0])

// x (n) += y: add with y (n) when T == 0, else add_bias over T rows with y (n / T) their bias.
// y of magnitude 3 against x of 1: a dropped or misplaced element shows as NMSE ~ 1.
static void bo_add_one(const bo_ctx *c, const bo_case *k, long n, int T) {
    long ny = T ? n / T : n;
    bo_buf hx;
    float *x = bo_host(c, &hx, sizeof(float) * n), *y = xmalloc(sizeof(float) * ny);
    float *o2 = xmalloc(sizeof(float) * n);
    fill(x, n, 1.0f);
    fill(y, ny, 3.0f);
    bo_buf gx, gy;
    float *dx = bo_new(c, &gx, sizeof(float) * n, x), *dy = bo_new(c, &gy, sizeof(float) * ny, y);
    if (T) {
        c->ref->ops->add_bias(c->ref, x, y, T, (int)ny);
        c->be->ops->add_bias(c->be, dx, dy, T, (int)ny);
    } else {
        c->ref->ops->add(c->ref, x, y, n);
        c->be->ops->add(c->be, dx, dy, n);
    }
    bo_check_backend(c);
    bo_get(c, o2, &gx);
    // fp32 a + b vs fp64 a + b rounded once to fp32: equal but for rare double roundings
    bo_check_close(c, "x", o2, x, n, k->tol[c->device]);
    bo_finish(c, (bo_buf *[]){&gx, &gy, &hx, NULL}, (void *[]){y, o2, NULL});
}

static void bo_add(const bo_ctx *c, const bo_case *k) {
    for (int i = 0; i < BO_N_NS; i++) {
        TEST_BEGIN(BO_NAME(c, "add n=%ld", bo_ns[i]));
        bo_add_one(c, k, bo_ns[i], 0);
        TEST_END();
    }
}

// add_bias: x (T, N) += b (N), at the rmsnorm shapes.
static void bo_add_bias(const bo_ctx *c, const bo_case *k) {
    for (int it = 0; it < 3; it++)
        for (int id = 0; id < BO_N_DS; id++) {
            TEST_BEGIN(BO_NAME(c, "add_bias T=%d N=%d", bo_Ts[it], bo_Ds[id]));
            bo_add_one(c, k, (long)bo_Ts[it] * bo_Ds[id], bo_Ts[it]);
            TEST_END();
        }
}

static void bo_swiglu(const bo_ctx *c, const bo_case *k) {
    for (int i = 0; i < BO_N_NS; i++)
        for (int alias = 0; alias < 2; alias++) {
            long n = bo_ns[i];
            TEST_BEGIN(BO_NAME(c, "swiglu n=%ld%s", n, alias ? " out=gate" : ""));
            float *g = xmalloc(sizeof(float) * n), *u = xmalloc(sizeof(float) * n);
            bo_buf ho1;
            float *o1 = bo_host(c, &ho1, sizeof(float) * n), *o2 = xmalloc(sizeof(float) * n);
            fill(g, n, 3.0f);
            fill(u, n, 1.0f);
            // exp(100) overflows fp32: fp32 gives -0 where the fp64 oracle gives a subnormal
            // (~-4e-42), an absolute error far below anything NMSE over n > 1 elements can see;
            // not done at n = 1, where that element would be the whole denominator
            if (n > 1) g[0] = -100.0f;
            bo_buf gg, gu, go = {0};
            float *dg = bo_new(c, &gg, sizeof(float) * n, g);
            float *du = bo_new(c, &gu, sizeof(float) * n, u);
            float *dout = alias ? dg : bo_new(c, &go, sizeof(float) * n, NULL);
            c->ref->ops->swiglu(c->ref, o1, LI_DTYPE_F32, g, u, 1, n, n);
            c->be->ops->swiglu(c->be, dout, LI_DTYPE_F32, dg, du, 1, n, n);
            bo_check_backend(c);
            bo_get(c, o2, alias ? &gg : &go);
            bo_check_close(c, "out", o2, o1, n, k->tol[c->device]);
            bo_finish(c, (bo_buf *[]){&gg, &gu, &ho1, alias ? NULL : &go, NULL},
                      (void *[]){g, u, o2, NULL});
            TEST_END();
        }
}

static void bo_softmax(const bo_ctx *c, const bo_case *k) {
    const int shapes[][2] = {{1, 1},     {3, 31},   {17, 67},   {9, 577},
                             {2, 49152}, {64, 512}, {1, 128256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int rows = shapes[i][0], n = shapes[i][1];
        long m = (long)rows * n;
        TEST_BEGIN(BO_NAME(c, "softmax rows=%d n=%d", rows, n));
        bo_buf hx;
        float *x = bo_host(c, &hx, sizeof(float) * m), *o2 = xmalloc(sizeof(float) * m);
        fill(x, m, 5.0f);
        x[0] = 80.0f; // exp would overflow without the max subtraction
        bo_buf gx;
        float *dx = bo_new(c, &gx, sizeof(float) * m, x);
        c->ref->ops->softmax(c->ref, x, rows, n);
        c->be->ops->softmax(c->be, dx, rows, n);
        bo_check_backend(c);
        bo_get(c, o2, &gx);
        bo_check_close(c, "x", o2, x, m, k->tol[c->device]);
        double s = 0;
        for (int j = 0; j < n; j++)
            s += o2[j];
        // fp32 terms summed in fp64 here: off 1 by ~n·u at most; 1e-5 catches a missing term
        CHECK(fabs(s - 1) < 1e-5, "row 0 sums to %.9g; seed %llu", s, (unsigned long long)c->seed);
        bo_finish(c, (bo_buf *[]){&gx, &hx, NULL}, (void *[]){o2, NULL});
        TEST_END();
    }
}

// ---- matmul ---------------------------------------------------------------------------------

// A random weight (n_rows, n_cols) in dtype f32 or bf16 (normal draws * scale, bf16 rounded).
static li_weight bo_make_weight(li_dtype dt, int64_t n_rows, int64_t n_cols, float scale) {
    li_weight W = {dt, n_rows, n_cols, NULL};
    int64_t n = n_rows * n_cols;
    if (dt == LI_DTYPE_F32) {
        float *d = xmalloc((size_t)n * sizeof(float));
        fill(d, (long)n, scale);
        W.data = d;
    } else {
        W.data = bo_bf16_weights(n, scale);
    }
    return W;
}

// Σ (y - ref)² / Σ_t,n Σ_k (x[t,k] W[n,k])²: the NMSE with each output's denominator replaced by
// the magnitude of its terms, which is what fp32 rounding scales with. Plain NMSE is ill-posed
// for a single output that happens to cancel to near zero (N = 1, T = 1). W host, f32 or bf16.
static double bo_matmul_err(const float *y, const float *ref, const float *x, const li_weight *W,
                            int T) {
    double num = 0, den = 0;
    for (int t = 0; t < T; t++)
        for (int64_t n = 0; n < W->n_rows; n++) {
            double d = (double)y[t * W->n_rows + n] - ref[t * W->n_rows + n];
            num += d * d;
            for (int64_t k = 0; k < W->n_cols; k++) {
                size_t i = (size_t)(n * W->n_cols + k);
                double w = W->dtype == LI_DTYPE_F32
                               ? ((const float *)W->data)[i]
                               : li_bf16_to_f32(((const uint16_t *)W->data)[i]);
                double term = (double)x[t * W->n_cols + k] * w;
                den += term * term;
            }
        }
    return num / den;
}

// Tolerances of matmul (bo_matmul_err):
// - x kept in f32, CPU: a K-term fp32 dot product has an error ~ sqrt(K)·u times the size of its
//   terms, so the measure is ~K·u² ≈ 5e-12 at K = 1536 in the worst case; seen up to 2e-13.
//   1e-10.
// - x kept in f32 (the decode GEMV) or compared with the oracle fed the same bf16-rounded x, on a
//   device: only fp32 accumulation remains, ~K u² <= 1.5e-11 at K = 4096; 1e-9 still catches any
//   layout or transpose error (which would give ~1), but also small systematic errors.
#define BO_TOL_MATMUL                                                                              \
    { 1e-10, 1e-9 }
// - x rounded to bf16 (8 significant bits: relative error <= 2^-8, variance 2^-16 / 3 = 5.1e-6)
//   against the f32-x oracle: the measure averages ~5e-6, the "~1e-5" expected of bf16 GEMM
//   inputs. With few outputs (N = 1, T = 1..3) it is a chi-square of 1..3 degrees of freedom:
//   seen up to 1.3e-5 on the H200. 1e-4 is 20x the mean (a 1-in-1e5 tail for one output); a
//   wrong layout gives ~1.
#define BO_TOL_MATMUL_BF16 1e-4

// y (T, N) = x (T, K) @ W (N, K)^T: f32 and bf16 weights on a CPU, bf16 on a device (what the
// models keep there); T from 1 (decode) to 200; one y not 256-byte aligned.
static void bo_matmul(const bo_ctx *c, const bo_case *k) {
    const int shapes[][2] = {{1, 1},      {31, 67},    {67, 31},     {1, 576},     {1537, 33},
                             {576, 1536}, {129, 1000}, {4096, 4096}, {6144, 4096}, {4096, 14336}};
    const int mts[] = {1, 3, 4, 17, 64, 200};
    // keep the fp64 oracle under ~1 s per case (a device's cases the CPU's twice over)
    const long max_macs = c->device ? 80000000 : 30000000;
    for (int dt = c->device ? 1 : 0; dt < 2; dt++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int it = 0; it < 6; it++) {
                int N = shapes[s][0], K = shapes[s][1], T = mts[it];
                if ((long)N * K * T > max_macs) continue;
                li_dtype dtype = dt ? LI_DTYPE_BF16 : LI_DTYPE_F32;
                size_t yoff = (s == 2 && it == 1) ? 4 : 0;
                TEST_BEGIN(BO_NAME(c, "matmul %s N=%d K=%d T=%d%s", li_dtype_name(dtype), N, K, T,
                                   yoff ? " (y misaligned)" : ""));
                li_weight Wh = bo_make_weight(dtype, N, K, 1.0f);
                size_t wb = (size_t)N * K * (dt ? 2 : 4);
                float *x = xmalloc(sizeof(float) * T * K), *xr = xmalloc(sizeof(float) * T * K);
                bo_buf hy1, hy3;
                float *y1 = bo_host(c, &hy1, sizeof(float) * T * N);
                float *y2 = xmalloc(sizeof(float) * T * N),
                      *y3 = bo_host(c, &hy3, sizeof(float) * T * N);
                fill(x, (long)T * K, 1.0f);
                for (long i = 0; i < (long)T * K; i++)
                    xr[i] = li_bf16_to_f32(li_f32_to_bf16(x[i]));
                c->ref->ops->matmul(c->ref, y1, x, LI_DTYPE_F32, &Wh, T, false);  // the model's
                c->ref->ops->matmul(c->ref, y3, xr, LI_DTYPE_F32, &Wh, T, false); // bf16 x's
                bo_buf gw, gx, gy;
                li_weight Wd = {dtype, N, K, bo_new(c, &gw, wb, Wh.data)};
                float *dx = bo_new(c, &gx, sizeof(float) * T * K, x);
                float *dy = bo_new_off(c, &gy, sizeof(float) * T * N, NULL, yoff);
                c->be->ops->matmul(c->be, dy, dx, LI_DTYPE_F32, &Wd, T, false);
                bo_check_backend(c);
                bo_get(c, y2, &gy);
                double e = bo_matmul_err(y2, y1, x, &Wh, T), e3 = bo_matmul_err(y2, y3, xr, &Wh, T);
                double tol = k->tol[c->device];
                if (c->matmul_x_bf16 && c->matmul_x_bf16(T, K, Wd.data, dx)) {
                    CHECK(e <= BO_TOL_MATMUL_BF16, "error vs f32 x %g; seed %llu", e,
                          (unsigned long long)c->seed);
                    CHECK(e3 <= tol, "error vs bf16-rounded x %g; seed %llu", e3,
                          (unsigned long long)c->seed);
                } else {
                    CHECK(e <= tol, "error vs f32 x %g; seed %llu", e, (unsigned long long)c->seed);
                }
                bo_check_close(c, "y", y2, y1, (long)T * N, INFINITY); // NaN and inf only
                bo_finish(c, (bo_buf *[]){&gw, &gx, &gy, &hy1, &hy3, NULL},
                          (void *[]){Wh.data, x, xr, y2, NULL});
                TEST_END();
            }
}

// ---- rope, kv_store, kv_copy_rotate ---------------------------------------------------------

// The RoPE scalings the op cases draw from (n_dims and layout set per case): [0] plain theta 1e4,
// [1] llama3 (Llama-3.1's), [2] yarn (mscale != 1), [3] yarn with attention_factor and beta
// overrides, [4] plain theta 1e5, [5] yarn with DeepSeek's mscale / mscale_all_dim. [1], [2],
// [3], [4], [5] are rows of test-ops.c's table of HF numbers (cases 3, 5, 7, 0, 6).
// clang-format off
static const li_rope_config bo_rope_cfgs[] = {
    {.scaling = LI_ROPE_SCALING_NONE, .theta = 10000.0f},
    {.scaling = LI_ROPE_SCALING_LLAMA3, .theta = 500000.0f, .factor = 8.0f, .low_freq_factor = 1.0f,
     .high_freq_factor = 4.0f, .original_max_pos = 8192, .max_pos = 131072},
    {.scaling = LI_ROPE_SCALING_YARN, .theta = 10000.0f, .factor = 4.0f, .original_max_pos = 4096,
     .max_pos = 16384},
    {.scaling = LI_ROPE_SCALING_YARN, .theta = 1000000.0f, .factor = 3.0f, .original_max_pos = 2048,
     .max_pos = 6144, .beta_fast = 16.0f, .beta_slow = 2.0f, .attention_factor = 0.9f},
    {.scaling = LI_ROPE_SCALING_NONE, .theta = 100000.0f, .max_pos = 2048},
    {.scaling = LI_ROPE_SCALING_YARN, .theta = 10000.0f, .factor = 40.0f, .original_max_pos = 4096,
     .max_pos = 163840, .mscale = 1.0f, .mscale_all_dim = 0.707f},
};
// clang-format on
#define BO_N_ROPE (int)(sizeof bo_rope_cfgs / sizeof bo_rope_cfgs[0])

static li_rope_table bo_rope_table(const bo_ctx *c, int which, li_rope_layout layout, int n_dims) {
    li_rope_config cfg = bo_rope_cfgs[which];
    cfg.layout = layout;
    cfg.n_dims = n_dims;
    li_rope_table t;
    bo_need(c, li_rope_table_init(&t, &cfg), "rope table");
    return t;
}

static void bo_rope(const bo_ctx *c, const bo_case *k) {
    const int dhs[][2] = {{64, 64}, {18, 18}, {64, 32}, {128, 128}}; // (Dh, n_dims)
    for (int ci = 0; ci < BO_N_ROPE; ci++)
        for (int di = 0; di < 4; di++)
            for (int lay = 0; lay < 2; lay++) {
                int Dh = dhs[di][0], nd = dhs[di][1], nh = randint(1, 9);
                // T = 300: the CPU's threaded path, a grid of many blocks on a GPU
                int T = di == 3 && (ci == 2 || ci == 3) ? 300 : bo_Ts[(ci + di) % 3];
                li_rope_table tab = bo_rope_table(c, ci, lay ? LI_ROPE_GPTJ : LI_ROPE_NEOX, nd);
                TEST_BEGIN(BO_NAME(c, "rope %s table %d T=%d nh=%d Dh=%d n_dims=%d",
                                   lay ? "gptj" : "neox", ci, T, nh, Dh, nd));
                long n = (long)T * nh * Dh;
                bo_buf hx;
                float *x = bo_host(c, &hx, sizeof(float) * n), *x0 = xmalloc(sizeof(float) * n);
                float *o2 = xmalloc(sizeof(float) * n);
                int32_t *pos = xmalloc(sizeof(int32_t) * T);
                fill(x, n, 1.0f);
                memcpy(x0, x, sizeof(float) * n);
                for (int t = 0; t < T; t++)
                    pos[t] = randint(0, t == 0 ? 0 : 200000);
                bo_buf gx, gp;
                float *dx = bo_new(c, &gx, sizeof(float) * n, x);
                int32_t *dp = bo_new(c, &gp, sizeof(int32_t) * T, pos);
                c->ref->ops->rope(c->ref, x, LI_DTYPE_F32, x, pos, T, nh, Dh, &tab);
                c->be->ops->rope(c->be, dx, LI_DTYPE_F32, dx, dp, T, nh, Dh, &tab);
                bo_check_backend(c);
                bo_get(c, o2, &gx);
                bo_check_close(c, "x", o2, x, n, k->tol[c->device]);
                int pass_ok = 1; // dims past n_dims pass through untouched, on both
                for (long r = 0; r < (long)T * nh; r++)
                    for (int d = nd; d < Dh; d++)
                        if (o2[r * Dh + d] != x0[r * Dh + d] || x[r * Dh + d] != x0[r * Dh + d])
                            pass_ok = 0;
                CHECK(pass_ok, "dims past n_dims changed; seed %llu", (unsigned long long)c->seed);
                bo_finish(c, (bo_buf *[]){&gx, &gp, &hx, NULL}, (void *[]){x0, o2, pos, NULL});
                TEST_END();
            }
}

// Pool contents of either dtype: n random values (bf16: rounded), so a bf16 pool holds no NaN.
static void bo_fill_pool(void *pool, li_dtype dt, long n) {
    fill(pool, n, 1.0f);
    if (dt == LI_DTYPE_BF16) // in place, front to back: element i's bf16 overwrites bytes < 4 i
        for (long i = 0; i < n; i++)
            ((uint16_t *)pool)[i] = li_f32_to_bf16(((float *)pool)[i]);
}

// A pool of either dtype widened to f32.
static void bo_pool_f32(float *dst, const void *pool, li_dtype dt, long n) {
    for (long i = 0; i < n; i++)
        dst[i] = dt == LI_DTYPE_BF16 ? li_bf16_to_f32(((const uint16_t *)pool)[i])
                                     : ((const float *)pool)[i];
}

// slot (n) = a random permutation of 0 .. n-1: distinct slots of a pool of n.
static void bo_random_slots(int64_t *slot, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        slot[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(li_rng_u64(&rng) % (uint64_t)(i + 1)), tmp = slot[i];
        slot[i] = slot[j];
        slot[j] = tmp;
    }
}

// Stores are bit-exact against the oracle for both pool dtypes (bf16: both round to nearest
// even), and the oracle puts K where li_kv_offset says.
static void bo_kv_store(const bo_ctx *c, const bo_case *k) {
    (void)k;
    for (int rep = 0; rep < 20; rep++) {
        li_kv_storage kv;
        int T;
        if (rep < 8) { // GQA up to 4, Dh 64 / 18
            kv = (li_kv_storage){randint(1, 3),
                                 randint(1, 4),
                                 rep % 2 ? 18 : 64,
                                 (int[]){1, 16, 64, 7}[rep % 4],
                                 randint(3, 9),
                                 NULL,
                                 rep < 4 ? LI_DTYPE_F32 : LI_DTYPE_BF16};
            T = bo_Ts[rep % 3] + rep % 4;
        } else { // up to 8 KV heads, Dh 128, T 40
            int r = rep - 8;
            kv = (li_kv_storage){randint(1, 3),
                                 randint(1, 8),
                                 (int[]){64, 18, 128}[r % 3],
                                 (int[]){1, 16, 64, 7, 16, 1}[r % 6],
                                 randint(3, 9),
                                 NULL,
                                 r < 6 ? LI_DTYPE_F32 : LI_DTYPE_BF16};
            T = (int[]){1, 3, 17, 40, 1, 5}[r % 6];
        }
        int64_t cap = kv.n_pages * kv.page_size;
        if (T > cap) T = (int)cap;
        TEST_BEGIN(BO_NAME(c, "kv_store L=%d Hkv=%d Dh=%d P=%d T=%d %s", kv.n_layer, kv.n_head_kv,
                           kv.head_dim, kv.page_size, T, li_dtype_name(kv.dtype)));
        long n = (long)kv.n_pages * kv.n_layer * 2 * kv.n_head_kv * kv.page_size * kv.head_dim;
        const size_t esz = li_kv_elem_bytes(kv.dtype);
        long kn = (long)T * kv.n_head_kv * kv.head_dim;
        bo_buf hpool;
        float *pool = bo_host(c, &hpool, sizeof(float) * n), *pool2 = xmalloc(sizeof(float) * n);
        float *kk = xmalloc(sizeof(float) * kn), *v = xmalloc(sizeof(float) * kn);
        bo_fill_pool(pool, kv.dtype, n);
        fill(kk, kn, 1.0f);
        fill(v, kn, 1.0f);
        int64_t *slot = xmalloc(sizeof(int64_t) * cap);
        bo_random_slots(slot, cap);
        int il = randint(0, kv.n_layer - 1);
        bo_buf gpool, gk, gv, gs;
        li_kv_storage kvd = kv, kvh = kv;
        kvd.data = bo_new(c, &gpool, esz * n, pool);
        kvh.data = pool;
        float *dk = bo_new(c, &gk, sizeof(float) * kn, kk);
        float *dv = bo_new(c, &gv, sizeof(float) * kn, v);
        int64_t *ds = bo_new(c, &gs, sizeof(int64_t) * T, slot);
        c->ref->ops->kv_store(c->ref, &kvh, il, kk, v, slot, T);
        c->be->ops->kv_store(c->be, &kvd, il, dk, dv, ds, T);
        bo_check_backend(c);
        bo_get(c, pool2, &gpool);
        CHECK(memcmp(pool, pool2, esz * n) == 0, "pools differ; seed %llu",
              (unsigned long long)c->seed);
        // the oracle put the last K row where li_kv_offset says (bf16: rounded to nearest even)
        int64_t pg = slot[T - 1] / kv.page_size;
        int off = (int)(slot[T - 1] % kv.page_size), h = kv.n_head_kv - 1;
        const float *kr = kk + ((size_t)(T - 1) * kv.n_head_kv + h) * kv.head_dim;
        size_t at = li_kv_offset(&kv, pg, il, 0, h, off);
        bool same = true;
        for (int d = 0; d < kv.head_dim; d++)
            same &= kv.dtype == LI_DTYPE_BF16 ? ((uint16_t *)pool)[at + d] == li_f32_to_bf16(kr[d])
                                              : pool[at + d] == kr[d];
        CHECK(same, "K row not at li_kv_offset; seed %llu", (unsigned long long)c->seed);
        bo_finish(c, (bo_buf *[]){&gpool, &gk, &gv, &gs, &hpool, NULL},
                  (void *[]){pool2, kk, v, slot, NULL});
        TEST_END();
    }
}

// kv_copy_rotate: the destination page rotated by Δ (NMSE: k->tol for f32 pools, BO_TOL_KV_BF16
// for bf16 ones), every other page bit-identical.
// bf16 pools: the backend and the fp64 oracle rotate with different roundings before the final
// bf16 rounding, so an element can land one bf16 step apart (relative 2^-8 on a few elements).
#define BO_TOL_KV_BF16 1e-5
static void bo_kv_copy_rotate(const bo_ctx *c, const bo_case *k) {
    for (int rep0 = 0; rep0 < 16; rep0++) {
        const int rep = rep0 % 8;
        const li_dtype dt = rep0 < 8 ? LI_DTYPE_F32 : LI_DTYPE_BF16;
        int P = (int[]){1, 16, 64, 7}[rep % 4], Dh = (int[]){64, 18, 128, 64}[rep % 4];
        li_kv_storage kv = {randint(1, 3), randint(1, 8), Dh, P, randint(3, 6), NULL, dt};
        int64_t src = randint(0, (int)kv.n_pages - 1),
                dst = (src + randint(1, (int)kv.n_pages - 1)) % kv.n_pages;
        int count = randint(1, P);
        int64_t delta = rep == 0   ? 0
                        : rep == 1 ? -randint(1, 5000)
                                   : randint(1, rep == 7 ? 100000000 : 50000);
        li_rope_table tab = bo_rope_table(c, rep % 3, rep % 2 ? LI_ROPE_GPTJ : LI_ROPE_NEOX,
                                          rep == 3 ? Dh / 2 : Dh);
        TEST_BEGIN(BO_NAME(c, "kv_copy_rotate L=%d Hkv=%d Dh=%d P=%d count=%d delta=%lld %s",
                           kv.n_layer, kv.n_head_kv, Dh, P, count, (long long)delta,
                           li_dtype_name(dt)));
        long n = (long)kv.n_pages * kv.n_layer * 2 * kv.n_head_kv * P * Dh;
        const size_t esz = li_kv_elem_bytes(dt);
        bo_buf hpool;
        float *pool = bo_host(c, &hpool, sizeof(float) * n), *pool2 = xmalloc(sizeof(float) * n);
        float *w1 = xmalloc(sizeof(float) * n), *w2 = xmalloc(sizeof(float) * n);
        bo_fill_pool(pool, dt, n);
        bo_buf gpool;
        li_kv_storage kvd = kv, kvh = kv;
        kvd.data = bo_new(c, &gpool, esz * n, pool);
        kvh.data = pool;
        c->ref->ops->kv_copy_rotate(c->ref, &kvh, src, dst, count, delta, &tab);
        c->be->ops->kv_copy_rotate(c->be, &kvd, src, dst, count, delta, &tab);
        bo_check_backend(c);
        bo_get(c, pool2, &gpool);
        long page = n / kv.n_pages;
        bo_pool_f32(w1, pool, dt, n);
        bo_pool_f32(w2, pool2, dt, n);
        bo_check_close(c, "destination page", w2 + dst * page, w1 + dst * page, page,
                       dt == LI_DTYPE_BF16 ? BO_TOL_KV_BF16 : k->tol[c->device]);
        int rest_ok =
            memcmp(pool2, pool, esz * dst * page) == 0 &&
            memcmp((char *)pool2 + esz * (dst + 1) * page, (char *)pool + esz * (dst + 1) * page,
                   esz * (n - (dst + 1) * page)) == 0;
        CHECK(rest_ok, "other pages changed; seed %llu", (unsigned long long)c->seed);
        CHECK(!test_has_nan(w2, n), "NaN; seed %llu", (unsigned long long)c->seed);
        bo_finish(c, (bo_buf *[]){&gpool, &hpool, NULL}, (void *[]){pool2, w1, w2, NULL});
        TEST_END();
    }
}

// ---- qkv_rope_store -------------------------------------------------------------------------

// The rows of layer il at slot[t] (t < T) of a pool of either dtype, widened: out (T, 2, Hkv, Dh),
// K then V.
static void bo_pool_rows(float *out, const li_kv_storage *kv, int il, const int64_t *slot, int T) {
    const int Hkv = kv->n_head_kv, Dh = kv->head_dim, P = kv->page_size;
    const size_t esz = li_kv_elem_bytes(kv->dtype);
    for (int t = 0; t < T; t++)
        for (int is_v = 0; is_v < 2; is_v++)
            for (int h = 0; h < Hkv; h++) {
                size_t at = li_kv_offset(kv, slot[t] / P, il, is_v, h, (int)(slot[t] % P));
                bo_pool_f32(out + (((size_t)t * 2 + is_v) * Hkv + h) * Dh,
                            (const char *)kv->data + esz * at, kv->dtype, Dh);
            }
}

// The inputs of one qkv_rope_store case (host memory).
typedef struct {
    li_kv_storage kv; // data: the pool's starting contents
    int il, T, H;
    const float *qkv, *parts, *bias; // parts: q (T, H Dh) | k (T, Hkv Dh) | v: qkv's, split
    const int32_t *pos;
    const int64_t *slot;
    const li_rope_table *tab;
} bo_qkv_in;

// On `be` (c->be or the oracle): qkv_rope_store into q and a copy of the pool, and add_bias, rope
// (q, k) and kv_store on the parts into another copy; checks the two bit for bit, and returns the
// fused op's q (T, H, Dh) and written pool rows (bo_pool_rows) in q_out and rows_out.
static void bo_qkv_run(const bo_ctx *c0, li_backend *be, const char *who, const bo_qkv_in *in,
                       float *q_out, float *rows_out) {
    bo_ctx c = *c0;
    c.be = be;
    const int T = in->T, H = in->H, Hkv = in->kv.n_head_kv, Dh = in->kv.head_dim;
    const long HD = (long)H * Dh, KD = (long)Hkv * Dh, row = HD + 2 * KD;
    const long n = (long)in->kv.n_pages * in->kv.n_layer * 2 * KD * in->kv.page_size;
    const size_t pb = li_kv_elem_bytes(in->kv.dtype) * n;
    bo_buf gqkv, gb, gp, gs, gq1, gq2, gk, gv, gpool1, gpool2;
    const float *dqkv = bo_new(&c, &gqkv, sizeof(float) * T * row, in->qkv);
    const float *db = bo_new(&c, &gb, sizeof(float) * row, in->bias ? in->bias : in->qkv);
    const int32_t *dp = bo_new(&c, &gp, sizeof(int32_t) * T, in->pos);
    const int64_t *ds = bo_new(&c, &gs, sizeof(int64_t) * T, in->slot);
    float *dq1 = bo_new(&c, &gq1, sizeof(float) * T * HD, NULL);
    float *dq2 = bo_new(&c, &gq2, sizeof(float) * T * HD, in->parts);
    float *dk = bo_new(&c, &gk, sizeof(float) * T * KD, in->parts + T * HD);
    float *dv = bo_new(&c, &gv, sizeof(float) * T * KD, in->parts + T * (HD + KD));
    li_kv_storage kv1 = in->kv, kv2 = in->kv;
    kv1.data = bo_new(&c, &gpool1, pb, in->kv.data);
    kv2.data = bo_new(&c, &gpool2, pb, in->kv.data);
    be->ops->qkv_rope_store(be, dq1, &kv1, in->il, dqkv, in->bias ? db : NULL, dp, ds, T, H,
                            in->tab);
    if (in->bias) {
        be->ops->add_bias(be, dq2, db, T, (int)HD);
        be->ops->add_bias(be, dk, db + HD, T, (int)KD);
        be->ops->add_bias(be, dv, db + HD + KD, T, (int)KD);
    }
    be->ops->rope(be, dq2, LI_DTYPE_F32, dq2, dp, T, H, Dh, in->tab);
    be->ops->rope(be, dk, LI_DTYPE_F32, dk, dp, T, Hkv, Dh, in->tab);
    be->ops->kv_store(be, &kv2, in->il, dk, dv, ds, T);
    if (be == c0->be) bo_check_backend(c0);
    float *q2 = xmalloc(sizeof(float) * T * HD);
    void *pool1 = xmalloc(pb), *pool2 = xmalloc(pb);
    bo_get(&c, q_out, &gq1);
    bo_get(&c, q2, &gq2);
    bo_get(&c, pool1, &gpool1);
    bo_get(&c, pool2, &gpool2);
    CHECK(memcmp(q_out, q2, sizeof(float) * T * HD) == 0, "%s: q is not rope's; seed %llu", who,
          (unsigned long long)c.seed);
    CHECK(memcmp(pool1, pool2, pb) == 0, "%s: pool is not kv_store's; seed %llu", who,
          (unsigned long long)c.seed);
    li_kv_storage kvh = in->kv;
    kvh.data = pool1;
    bo_pool_rows(rows_out, &kvh, in->il, in->slot, T);
    bo_finish(&c, (bo_buf *[]){&gqkv, &gb, &gp, &gs, &gq1, &gq2, &gk, &gv, &gpool1, &gpool2, NULL},
              (void *[]){q2, pool1, pool2, NULL});
}

// qkv_rope_store = add_bias, rope and kv_store on the parts, bit for bit on the backend and on the
// oracle; the backend's q and written pool rows against the oracle's (bf16 pool: BO_TOL_KV_BF16,
// as kv_copy_rotate). With and without bias, f32 and bf16 pools, GQA, partial rotation
// (n_dims < Dh), Dh 18 (no vector path), odd T (37: the CPU's threaded path).
static void bo_qkv_rope_store(const bo_ctx *c, const bo_case *k) {
    // H, Hkv, Dh, n_dims
    static const int shapes[][4] = {
        {4, 4, 64, 64}, {8, 2, 128, 128}, {6, 3, 64, 32}, {9, 3, 18, 18}};
    for (int rep = 0; rep < 32; rep++) {
        const int *sh = shapes[rep >> 3];
        const int H = sh[0], Hkv = sh[1], Dh = sh[2], with_bias = rep & 1, lay = (rep >> 2) & 1;
        const li_dtype dt = (rep >> 1) & 1 ? LI_DTYPE_BF16 : LI_DTYPE_F32;
        const int T = (int[]){1, 3, 17, 37}[(rep + (rep >> 3)) % 4], P = (int[]){1, 16, 7}[rep % 3];
        li_kv_storage kv = {randint(1, 3), Hkv, Dh, P, T / P + randint(1, 3), NULL, dt};
        li_rope_table tab =
            bo_rope_table(c, rep % BO_N_ROPE, lay ? LI_ROPE_GPTJ : LI_ROPE_NEOX, sh[3]);
        TEST_BEGIN(BO_NAME(c, "qkv_rope_store T=%d H=%d Hkv=%d Dh=%d n_dims=%d %s %s pool%s", T, H,
                           Hkv, Dh, sh[3], lay ? "gptj" : "neox", li_dtype_name(dt),
                           with_bias ? " bias" : ""));
        const long HD = (long)H * Dh, KD = (long)Hkv * Dh, row = HD + 2 * KD;
        const long n = (long)kv.n_pages * kv.n_layer * 2 * KD * P;
        float *qkv = xmalloc(sizeof(float) * T * row), *parts = xmalloc(sizeof(float) * T * row);
        float *bias = xmalloc(sizeof(float) * row), *pool = xmalloc(sizeof(float) * n);
        float *q1 = xmalloc(sizeof(float) * T * HD), *q0 = xmalloc(sizeof(float) * T * HD);
        float *r1 = xmalloc(sizeof(float) * T * 2 * KD), *r0 = xmalloc(sizeof(float) * T * 2 * KD);
        int32_t *pos = xmalloc(sizeof(int32_t) * T);
        int64_t *slot = xmalloc(sizeof(int64_t) * kv.n_pages * P);
        fill(qkv, (long)T * row, 1.0f);
        fill(bias, row, 1.0f);
        bo_fill_pool(pool, dt, n);
        for (int t = 0; t < T; t++) {
            pos[t] = randint(0, 200000);
            memcpy(parts + t * HD, qkv + t * row, sizeof(float) * HD);
            memcpy(parts + T * HD + t * KD, qkv + t * row + HD, sizeof(float) * KD);
            memcpy(parts + T * (HD + KD) + t * KD, qkv + t * row + HD + KD, sizeof(float) * KD);
        }
        bo_random_slots(slot, kv.n_pages * P);
        kv.data = pool;
        const bo_qkv_in in = {.kv = kv, .il = randint(0, kv.n_layer - 1), .T = T, .H = H,
                              .qkv = qkv, .parts = parts, .bias = with_bias ? bias : NULL,
                              .pos = pos, .slot = slot, .tab = &tab};
        bo_qkv_run(c, c->be, c->name, &in, q1, r1);
        bo_qkv_run(c, c->ref, "oracle", &in, q0, r0);
        bo_check_close(c, "q", q1, q0, (long)T * HD, k->tol[c->device]);
        bo_check_close(c, "pool rows", r1, r0, (long)T * 2 * KD,
                       dt == LI_DTYPE_BF16 ? BO_TOL_KV_BF16 : k->tol[c->device]);
        free(qkv), free(parts), free(bias), free(pool), free(q1), free(q0), free(r1), free(r0);
        free(pos), free(slot);
        TEST_END();
    }
}

// ---- attention over a paged pool ------------------------------------------------------------

typedef struct {
    li_kv_storage kv; // host pool
    uint64_t *pages;
    int n_pages, n_keys;
} bo_paged;

// A random pool (host) and a page table over shuffled physical pages (paged-seq.h): documents of
// doc_max tokens at most; K and V random.
static void bo_make_paged(bo_paged *s, int L, int Hkv, int Dh, int P, int min_keys, int with_delta,
                          int doc_max, li_dtype dt) {
    paged_table t;
    paged_table_make(&t, &rng, P, min_keys, with_delta, doc_max);
    *s = (bo_paged){.kv = paged_table_kv(&t, L, Hkv, Dh, P, dt),
                    .pages = t.pages,
                    .n_pages = t.n_pages,
                    .n_keys = t.n_keys};
    long n = (long)t.n_pool * L * 2 * Hkv * P * Dh;
    s->kv.data = xmalloc(sizeof(float) * n);
    bo_fill_pool(s->kv.data, dt, n);
}

// Tolerances of attention (NMSE against the fp64 oracle):
// - CPU: attention's dot products and weighted sums are length-K fp32 reductions: ~K·u² ≈ 5e-12
//   at K = 1536 in the worst case (outputs are convex combinations of V rows, plain NMSE); seen
//   up to 2e-13. 1e-10.
// - CUDA, fp32 path: fp32 dot products of length Dh, online softmax in fp32, the query rotated by
//   -Δ in fp32 where the oracle rotates K in fp64: ~Dh u² amplified by the softmax, ~1e-13..1e-12
//   expected; 1e-9 (the middle of the 1e-10..1e-8 range for f32 attention).
#define BO_TOL_ATTENTION                                                                           \
    { 1e-10, 1e-9 }
// - tensor cores (c->attn_tc: T >= 16 rows, Dh 64/128): Q, K (after its Δ rotation in fp32), V
//   and P are rounded to bf16 (relative 2^-9 each), fp32 accumulation; with unit-range random
//   inputs the output NMSE is ~1e-6..1e-5. 1e-4 still catches a wrong key, a missed rotation or
//   mask (those give NMSE ~1e-2..1).
#define BO_TOL_ATTENTION_TC 1e-4

// One attention case: T rows at the end of the sequence (causal), mode 0 decode / 1 prefill /
// 2 prefill with every Δ = 0 and rope NULL / 3 prefill with a first visible key; RoPE scaling
// bo_rope_cfgs[which]. tol: the fp32 path's bound (tensor cores: BO_TOL_ATTENTION_TC).
static void bo_attention_case(const bo_ctx *c, double tol, int P, int G, int Hkv, int Dh, int T,
                              int min_keys, int mode, int doc_max, li_dtype dt, int which,
                              li_rope_layout layout) {
    const char *mode_name =
        (const char *[]){"decode", "prefill", "prefill Δ=0", "prefill kv_first"}[mode];
    bo_paged s;
    bo_make_paged(&s, 2, Hkv, Dh, P, min_keys, mode != 2, doc_max, dt);
    int H = G * Hkv, il = 1;
    li_rope_table tab = bo_rope_table(c, which, layout, Dh);
    if (T > s.n_keys - 1) T = s.n_keys - 1;
    const char *tc = c->attn_tc ? c->attn_tc(T, Dh, dt) : NULL;
    TEST_BEGIN(BO_NAME(c, "attention %s P=%d H=%d Hkv=%d Dh=%d T=%d keys=%d pages=%d %s%s",
                       mode_name, P, H, Hkv, Dh, T, s.n_keys, s.n_pages, li_dtype_name(dt),
                       tc ? tc : ""));
    int32_t *nv = xmalloc(sizeof(int32_t) * T), *first = xmalloc(sizeof(int32_t) * T);
    int n_past = s.n_keys - T;
    int f0 = mode == 3 ? randint(0, n_past) : 0; // often mid-page: sees only its own keys
    for (int t = 0; t < T; t++) {
        nv[t] = n_past + t + 1;
        first[t] = f0;
    }
    long qn = (long)T * H * Dh;
    bo_buf ho1;
    float *q = xmalloc(sizeof(float) * qn), *o1 = bo_host(c, &ho1, sizeof(float) * qn);
    float *o2 = xmalloc(sizeof(float) * qn);
    fill(q, qn, 1.0f);
    float scale = 1.0f / sqrtf((float)Dh);
    li_kv_seq seq = {.pages = s.pages, .n_pages = s.n_pages};
    const li_rope_table *rp = mode == 2 ? NULL : &tab;
    c->ref->ops->attention(c->ref, o1, q, T, H, &s.kv, il, &seq, mode == 3 ? first : NULL, nv,
                           scale, rp);
    long pool_n = (long)s.kv.n_pages * s.kv.n_layer * 2 * Hkv * P * Dh;
    bo_buf gpool, gpages, gq, go, gnv, gfirst;
    li_kv_storage kvd = s.kv;
    kvd.data = bo_new(c, &gpool, li_kv_elem_bytes(dt) * pool_n, s.kv.data);
    li_kv_seq seqd = {.pages = bo_new(c, &gpages, sizeof(uint64_t) * s.n_pages, s.pages),
                      .n_pages = s.n_pages};
    float *dq = bo_new(c, &gq, sizeof(float) * qn, q);
    float *dout = bo_new(c, &go, sizeof(float) * qn, NULL);
    int32_t *dnv = bo_new(c, &gnv, sizeof(int32_t) * T, nv);
    int32_t *dfirst = bo_new(c, &gfirst, sizeof(int32_t) * T, first);
    c->be->ops->attention(c->be, dout, dq, T, H, &kvd, il, &seqd, mode == 3 ? dfirst : NULL, dnv,
                          scale, rp);
    bo_check_backend(c);
    bo_get(c, o2, &go);
    bo_check_close(c, tc ? "out (tensor cores)" : "out", o2, o1, qn,
                   tc ? BO_TOL_ATTENTION_TC : tol);
    bo_finish(c, (bo_buf *[]){&gpool, &gpages, &gq, &go, &gnv, &gfirst, &ho1, NULL},
              (void *[]){q, o2, nv, first, s.kv.data, s.pages, NULL});
    TEST_END();
}

// Pages of 1, 16, 64 tokens; GQA ratios (a device: the warp kernel's 1, 2, 4, 8; gpu-check takes
// G 3 and 12 on the generic kernel itself); Dh 18, 64, 128; both pool dtypes; every mode.
static void bo_attention(const bo_ctx *c, const bo_case *k) {
    const int Ps[] = {1, 16, 64};
    const int ratios_cpu[] = {1, 2, 3, 4, 8, 12}, ratios_dev[] = {1, 2, 4, 8};
    const int *ratios = c->device ? ratios_dev : ratios_cpu, n_ratios = c->device ? 4 : 6;
    int n_case = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int ri = 0; ri < n_ratios; ri++)
            for (int mode = 0; mode < 4; mode++) {
                int P = Ps[pi], G = ratios[ri], Hkv = randint(1, 3);
                int Dh = (int[]){18, 64, 128}[n_case++ % 3];
                int T = mode == 0 ? 1 : (int[]){3, 17}[ri % 2];
                int min_keys = randint(T + 1, P == 1 ? 90 : 300);
                li_dtype dt = (ri + mode + pi) % 2 ? LI_DTYPE_BF16 : LI_DTYPE_F32;
                // the device's scalings (0..2) as before; a CPU cycles through all six
                int which = c->device ? (P + G) % 3 : (pi + ri + mode) % BO_N_ROPE;
                bo_attention_case(c, k->tol[c->device], P, G, Hkv, Dh, T, min_keys, mode, 3 * P + 5,
                                  dt, which, G % 2 ? LI_ROPE_GPTJ : LI_ROPE_NEOX);
            }
}

// ---- sample ----------------------------------------------------------------------------------

// x (V) = normal logits at a random scale; with ties, rounded to quarters (many exact ties, also
// at the top).
static void bo_random_logits(float *x, int V, int ties) {
    float sc = 0.5f + 4.5f * (float)li_rng_uniform(&rng);
    for (int i = 0; i < V; i++) {
        x[i] = randn() * sc;
        if (ties) x[i] = roundf(x[i] * 4) / 4; // many exact ties, also at the top
    }
}

static void bo_sample(const bo_ctx *c, const bo_case *k) {
    (void)k;
    const int Vmax = 152064; // Qwen-sized vocabulary
    float *lg = xmalloc(sizeof(float) * Vmax);
    bo_buf gl;
    float *dl = bo_new(c, &gl, sizeof(float) * Vmax, NULL);

    TEST_BEGIN(BO_NAME(
        c, "sample: greedy == oracle (argmax, lowest id on ties), 100 draws, V up to 152064"));
    int bad = 0;
    for (int tr = 0; tr < 100; tr++) {
        int V = tr % 10 == 0 ? Vmax : randint(1, 40000);
        bo_random_logits(lg, V, tr % 2);
        if (V > 1 && tr % 3 == 0) lg[V - 1] = lg[randint(0, V - 2)] = 1000.0f; // tie at the top
        bo_put(c, &gl, lg, sizeof(float) * V);
        li_sampler_config g = {0, 0, 1, 0};
        double u = li_rng_uniform(&rng);
        int32_t a = c->ref->ops->sample(c->ref, lg, V, &g, u),
                b = c->be->ops->sample(c->be, dl, V, &g, u);
        if (a != b && bad++ < 5)
            fprintf(stderr, "  trial %d V=%d: oracle %d backend %d\n", tr, V, a, b);
    }
    CHECK(bad == 0, "%d of 100 greedy draws differ; seed %llu", bad, (unsigned long long)c->seed);
    bo_check_backend(c);
    TEST_END();

    // Same u -> same token. A device sums in scan order, the oracle in id order: the two differ by
    // a few fp64 ulp, which changes the token only when u falls within ~1e-15 of a boundary, so
    // every draw should agree; 1 disagreement in 300 is tolerated so that such a coincidence
    // cannot fail the run, 2 or more is a bug.
    const float temps[] = {0.05f, 0.7f, 1, 1.5f};
    const int topks[] = {0, 1, 5, 40, 100, -1}; // -1: V + 7
    const float topps[] = {1, 0.95f, 0.5f, 0.05f};
    const float minps[] = {0, 0.02f, 0.3f};
    TEST_BEGIN(BO_NAME(
        c, "sample: temperature/top-k/top-p/min-p, same u -> oracle's token (300 configs)"));
    int mism = 0, n_diff = 0;
    int32_t first_tok = -1;
    for (int tr = 0; tr < 300; tr++) {
        int V = tr % 10 == 0 ? randint(100000, Vmax) : randint(1000, 6000);
        bo_random_logits(lg, V, tr % 3 == 0);
        li_sampler_config cfg = {temps[randint(0, 3)], topks[randint(0, 5)], topps[randint(0, 3)],
                                 minps[randint(0, 2)]};
        if (cfg.top_k < 0) cfg.top_k = V + 7;
        double u = tr % 50 == 1 ? 0.0 : tr % 50 == 2 ? 1.0 - 0x1p-53 : li_rng_uniform(&rng);
        bo_put(c, &gl, lg, sizeof(float) * V);
        int32_t a = c->ref->ops->sample(c->ref, lg, V, &cfg, u),
                b = c->be->ops->sample(c->be, dl, V, &cfg, u);
        if (a != b || b < 0 || b >= V) {
            if (mism++ < 5)
                fprintf(stderr,
                        "  trial %d V=%d temp=%g top_k=%d top_p=%g min_p=%g u=%.17g: "
                        "oracle %d backend %d\n",
                        tr, V, (double)cfg.temperature, cfg.top_k, (double)cfg.top_p,
                        (double)cfg.min_p, u, a, b);
        }
        if (first_tok < 0)
            first_tok = b;
        else if (b != first_tok)
            n_diff++;
    }
    printf("  sample: %d of 300 draws differ from the oracle\n", mism);
    CHECK(mism <= 1, "%d of 300 draws differ; seed %llu", mism, (unsigned long long)c->seed);
    CHECK(n_diff > 0, "every draw gave the same token");
    bo_check_backend(c);
    TEST_END();

    // Distribution: V = 12 logits at temperature 0.8, 20000 draws with fresh u; each frequency
    // within 5 standard deviations (sqrt(p(1-p)/n)) of softmax(l / 0.8) computed here in fp64
    // (a wrong scale, order or cumulative sum moves several by far more).
    TEST_BEGIN(
        BO_NAME(c, "sample: empirical distribution at temperature 0.8 (12 tokens, 20000 draws)"));
    {
        enum { VV = 12, ND = 20000 };
        float l[VV];
        for (int i = 0; i < VV; i++)
            l[i] = randn();
        double p[VV], z = 0, mx = -INFINITY;
        for (int i = 0; i < VV; i++)
            mx = l[i] > mx ? l[i] : mx;
        for (int i = 0; i < VV; i++)
            z += p[i] = exp((l[i] - mx) / 0.8);
        int cnt[VV] = {0};
        bo_put(c, &gl, l, sizeof l);
        li_sampler_config sc = {0.8f, 0, 1, 0};
        int out_of_range = 0;
        for (int d = 0; d < ND; d++) {
            int32_t t = c->be->ops->sample(c->be, dl, VV, &sc, li_rng_uniform(&rng));
            if (t < 0 || t >= VV)
                out_of_range++;
            else
                cnt[t]++;
        }
        double worst = 0;
        for (int i = 0; i < VV; i++) {
            double pi = p[i] / z, sd = sqrt(pi * (1 - pi) / ND),
                   dev = fabs((double)cnt[i] / ND - pi);
            if (sd > 0 && dev / sd > worst) worst = dev / sd;
        }
        CHECK(out_of_range == 0, "%d tokens out of range", out_of_range);
        CHECK(worst < 5, "a frequency is %.2f standard deviations off; seed %llu", worst,
              (unsigned long long)c->seed);
        bo_check_backend(c);
    }
    bo_finish(c, (bo_buf *[]){&gl, NULL}, (void *[]){lg, NULL});
    TEST_END();
}

// ---- the table and its runner ---------------------------------------------------------------

static const bo_case bo_cases[] = {
    {"embed", bo_embed, BO_TOL_EXACT},
    {"rmsnorm", bo_rmsnorm, BO_TOL_POINTWISE},
    {"add_rmsnorm", bo_add_rmsnorm, BO_TOL_POINTWISE},
    {"add", bo_add, BO_TOL_POINTWISE},
    {"add", bo_add_bias, BO_TOL_POINTWISE},
    {"add", bo_swiglu, BO_TOL_POINTWISE}, // group "add" as gpu-check always called it
    {"softmax", bo_softmax, BO_TOL_POINTWISE},
    {"matmul", bo_matmul, BO_TOL_MATMUL},
    {"rope", bo_rope, BO_TOL_POINTWISE},
    {"kv_store", bo_kv_store, BO_TOL_EXACT},
    {"kv_copy_rotate", bo_kv_copy_rotate, BO_TOL_POINTWISE},
    {"qkv_rope_store", bo_qkv_rope_store, BO_TOL_POINTWISE},
    {"attention", bo_attention, BO_TOL_ATTENTION},
    {"sample", bo_sample, BO_TOL_EXACT}, // tokens: the oracle's (counts in the case)
};

// 1 when the comma-separated `list` names `name`.
static int bo_list_has(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

// Every row of the table on c->be, or only the groups `only` names (NULL: all).
static void bo_run_all(const bo_ctx *c, const char *only) {
    for (size_t i = 0; i < sizeof bo_cases / sizeof bo_cases[0]; i++)
        if (!only || bo_list_has(only, bo_cases[i].group)) bo_cases[i].run(c, &bo_cases[i]);
}

#endif
