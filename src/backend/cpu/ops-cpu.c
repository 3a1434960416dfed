// ops-cpu.c — the fast CPU op table: fp32 compute on the backend's thread pool (li_parallel_for),
// AVX+FMA dot/axpy kernels chosen at run time (__builtin_cpu_supports; plain C otherwise, and no
// -march=native anywhere, so one binary runs on any x86-64), loops the compiler vectorises
// (target_clones), and OpenBLAS sgemm for batched matmuls.
//
// Not here: anything numerically different from the oracle beyond fp32 rounding. Every op must
// agree with ops-ref.c within the NMSE tolerances of tests/test-ops.c (exactly for embed,
// kv_store and sample; qkv_rope_store equals this table's own add_bias, rope and kv_store bit for
// bit), which is how this file is tested; the test also prints the speed-ups.
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// Element-wise loops: one clone per ISA level, vectorised with the dynamic cost model (GCC 12's
// -O2 "very cheap" model refuses any loop that needs a scalar epilogue).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LI_VEC __attribute__((target_clones("fma", "default"), optimize("vect-cost-model=dynamic")))
#else
#define LI_VEC
#endif

// ---- scratch -------------------------------------------------------------------------------

void *li_cpu_scratch_get(li_cpu_scratch *s, size_t n) {
    if (n <= s->cap) return s->p;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < n) cap *= 2;
    void *p = li_alloc(cap, "cpu backend scratch");
    if (!p) {
        li_error_clear();
        return NULL;
    }
    li_free(s->p);
    s->p = p;
    s->cap = cap;
    return p;
}

void li_cpu_scratch_free(li_cpu_scratch *s) {
    li_free(s->p);
    s->p = NULL;
    s->cap = 0;
}

static li_cpu_impl *impl_of(li_backend *be) { return be ? (li_cpu_impl *)be->impl : NULL; }

static inline float f32_f32(float x) { return x; }  // the dot products' f32 "conversion"
static inline float bf16_f32(uint16_t h) {  // bf16 is the top half of an f32
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- hot kernels: dot products -------------------------------------------------------------

// -DLI_CPU_NO_SIMD builds the portable kernels only (to test them on an AVX machine).
#if defined(__x86_64__) && !defined(LI_CPU_NO_SIMD)
#define HAVE_X86 1
static inline int has_avx_fma(void) {
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma");
}

__attribute__((target("avx,fma"))) static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int has_avx512(void) { return __builtin_cpu_supports("avx512f"); }

// AVX-512: 4 accumulators of 16 lanes; the tail (n % 16) through a masked load. Decode matvecs
// stream the weights once: half the instructions of the AVX2 loop keep more loads in flight.
__attribute__((target("avx512f"))) static float dot_f32_avx512(const float *a, const float *b,
                                                               int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + i), _mm512_maskz_loadu_ps(mk, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

// The f32 and bf16 dot products share each body below, written over the weights' element type
// TB, ELEM(x) (one element as f32) and, for AVX, LOAD8(p) (8 elements from p as f32).
//
// AVX/FMA: 4 independent accumulators of 8 lanes hide the FMA latency (4 cycles, 2 ports).
#define DOT_FMA(name, TB, LOAD8, ELEM)                                                             \
    __attribute__((target("avx,fma"))) static float name(const float *a, const TB *b,             \
                                                         int64_t n) {                              \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                                \
        int64_t i = 0;                                                                             \
        for (; i + 32 <= n; i += 32) {                                                             \
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LOAD8(b + i), s0);                        \
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), LOAD8(b + i + 8), s1);                \
            s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), LOAD8(b + i + 16), s2);              \
            s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), LOAD8(b + i + 24), s3);              \
        }                                                                                          \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LOAD8(b + i), s0); \
        float s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));            \
        for (; i < n; i++) s += a[i] * ELEM(b[i]);                                                 \
        return s;                                                                                  \
    }

// 8 bf16 -> 8 f32 with AVX1 only: bf16 is the top half of an f32, so interleave zeros below it
// (SSE2 unpack) and join the two halves.
__attribute__((target("avx,fma"))) static inline __m256 load_bf16x8(const uint16_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p), z = _mm_setzero_si128();
    __m128 lo = _mm_castsi128_ps(_mm_unpacklo_epi16(z, v));
    __m128 hi = _mm_castsi128_ps(_mm_unpackhi_epi16(z, v));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

DOT_FMA(dot_f32_fma, float, _mm256_loadu_ps, f32_f32)
DOT_FMA(dot_bf16_fma, uint16_t, load_bf16x8, bf16_f32)
#else
#define HAVE_X86 0
#endif

// Portable versions (over TB and ELEM as DOT_FMA): 8 accumulators so that the compiler can keep
// them in registers.
#define DOT_C(name, TB, ELEM)                                                                      \
    static float name(const float *a, const TB *b, int64_t n) {                                    \
        float s[8] = {0};                                                                          \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int k = 0; k < 8; k++) s[k] += a[i + k] * ELEM(b[i + k]);                         \
        float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));              \
        for (; i < n; i++) r += a[i] * ELEM(b[i]);                                                 \
        return r;                                                                                  \
    }
DOT_C(dot_f32_c, float, f32_f32)
DOT_C(dot_bf16_c, uint16_t, bf16_f32)

static inline float dot_f32(const float *a, const float *b, int64_t n) {
#if HAVE_X86
    if (has_avx512()) return dot_f32_avx512(a, b, n);
    if (has_avx_fma()) return dot_f32_fma(a, b, n);
#endif
    return dot_f32_c(a, b, n);
}

static inline float dot_bf16(const float *a, const uint16_t *b, int64_t n) {
#if HAVE_X86
    if (has_avx_fma()) return dot_bf16_fma(a, b, n);
#endif
    return dot_bf16_c(a, b, n);
}

// dst (n) = src (n) widened from bf16 (exact)
LI_VEC static void bf16_to_f32_run(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

// dst (n) = src (n) rounded to bf16 (nearest even)
static void f32_to_bf16_run(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = li_f32_to_bf16(src[i]);
}

// y (n) += a * x (n)
LI_VEC static void axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

LI_VEC static void scale_inplace(float *restrict y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

// ---- embed ----------------------------------------------------------------------------------

static void cpu_embed(li_backend *be, float *out, const li_weight *W, const int32_t *tokens,
                      int T) {
    int64_t D = W->n_cols;
    for (int t = 0; t < T; t++) {
        LI_ASSERT(tokens[t] >= 0 && tokens[t] < W->n_rows);
        size_t row = (size_t)tokens[t] * (size_t)D;
        if (W->dtype == LI_DTYPE_F32) {
            memcpy(out + (size_t)t * D, (const float *)W->data + row, (size_t)D * sizeof(float));
        } else {
            LI_ASSERT(W->dtype == LI_DTYPE_BF16);
            bf16_to_f32_run(out + (size_t)t * D, (const uint16_t *)W->data + row, D);
        }
    }
}

// ---- rmsnorm --------------------------------------------------------------------------------

typedef struct {
    float *out;
    const float *x, *w;
    int D;
    float eps;
} rmsnorm_ctx;

LI_VEC static void mul_scaled(float *out, const float *x, const float *w, float r, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void rmsnorm_rows(void *p, int64_t b, int64_t e, int tid) {
    rmsnorm_ctx *c = p;
    for (int64_t t = b; t < e; t++) {
        const float *x = c->x + t * c->D;
        float ss = dot_f32(x, x, c->D);
        float r = 1.0f / sqrtf(ss / (float)c->D + c->eps);  // HF: x * rsqrt(mean(x^2) + eps) * w
        mul_scaled(c->out + t * c->D, x, c->w, r, c->D);
    }
}

// Threads only pay off above ~64K elements (a wake-up of the pool costs a few µs).
#define PAR_MIN_ELEMS 65536

typedef struct {
    rmsnorm_ctx n;
    float *x;
    const float *y;
} add_rmsnorm_ctx;

// One pass per row while it is in L1: x += y, then the row's norm (rmsnorm_rows' arithmetic).
static void add_rmsnorm_rows(void *p, int64_t b, int64_t e, int tid) {
    add_rmsnorm_ctx *c = p;
    const int64_t D = c->n.D;
    for (int64_t t = b; t < e; t++) {
        float *x = c->x + t * D;
        const float *y = c->y + t * D;
        for (int64_t d = 0; d < D; d++) x[d] += y[d];
        rmsnorm_rows(&c->n, t, t + 1, tid);
    }
}

static void cpu_add_rmsnorm(li_backend *be, float *out, float *x, const float *y, const float *w,
                            int T, int D, float eps) {
    add_rmsnorm_ctx c = {{out, x, w, D, eps}, x, y};
    if ((int64_t)T * D >= PAR_MIN_ELEMS && T > 1)
        li_parallel_for(be->tp, T, add_rmsnorm_rows, &c);
    else
        add_rmsnorm_rows(&c, 0, T, 0);
}

static void cpu_rmsnorm(li_backend *be, float *out, const float *x, const float *w, int T, int D,
                        float eps) {
    rmsnorm_ctx c = {out, x, w, D, eps};
    if ((int64_t)T * D >= PAR_MIN_ELEMS && T > 1)
        li_parallel_for(be->tp, T, rmsnorm_rows, &c);
    else
        rmsnorm_rows(&c, 0, T, 0);
}

// ---- matmul ---------------------------------------------------------------------------------
//
// Decode (T = 1) is a matrix-vector product and memory-bound: it moves N*K*4 bytes of f32 weights
// (N*K*2 for bf16) once and does 2*N*K FLOPs, 0.5 FLOP/byte (f32). Rows are split across the
// threads; each row is one AVX+FMA dot product. The ceiling is memory bandwidth. Measured here
// (2 cores, AMD EPYC, best of 30): the SmolLM2 head 49152x576 f32 (113 MB, from DRAM) in 3.2 ms =
// 36 GB/s, i.e. at the DRAM bandwidth two cores can draw; 1536x576 f32 (3.5 MB, cache-resident
// when repeated) in 0.05 ms = 68 GB/s.
//
// For T > 1 the same kernel is run for each row of x while the weight row is hot in L1 (W read
// once); OpenBLAS sgemm wins once T is large enough for its register blocking. Crossover measured
// with OpenBLAS 0.3.21 (pthread) on 1536x576, 576x1536 and 49152x576 f32, T = 1..64: the row
// kernel is 2-5x faster than sgemm up to T = 6 (OpenBLAS is slow for skinny products), still
// ahead at T = 8-12, and sgemm is 1.6-4x faster from T = 16 on. Hence:
#define MM_BLAS_MIN_T 16
// bf16 weights go to sgemm in tiles of this many rows converted to f32 (64 KB-1 MB scratch).
#define MM_TILE_ROWS 256

typedef struct {
    float *y;
    const float *x;
    const li_weight *W;
    int T;
} matmul_ctx;

static void matmul_rows(void *p, int64_t b, int64_t e, int tid) {
    matmul_ctx *c = p;
    int64_t N = c->W->n_rows, K = c->W->n_cols;
    for (int64_t n = b; n < e; n++) {
        if (c->W->dtype == LI_DTYPE_F32) {
            const float *w = (const float *)c->W->data + n * K;
            for (int t = 0; t < c->T; t++) c->y[t * N + n] = dot_f32(c->x + t * K, w, K);
        } else {
            const uint16_t *w = (const uint16_t *)c->W->data + n * K;
            for (int t = 0; t < c->T; t++) c->y[t * N + n] = dot_bf16(c->x + t * K, w, K);
        }
    }
}

// sgemm over a contiguous range of output columns [b, e) per worker (OpenBLAS itself runs
// single-threaded: its own idle threads spin, which on 2 cores steals time from ours).
// bf16 weights are widened MM_TILE_ROWS rows at a time into the worker's own tile.
typedef struct {
    float *y;
    const float *x;
    const li_weight *W;
    int T;
    float *tiles;  // (n_threads, MM_TILE_ROWS, K) for bf16; NULL for f32
} gemm_ctx;

static void gemm_cols(void *p, int64_t b, int64_t e, int tid) {
    gemm_ctx *c = p;
    int64_t N = c->W->n_rows, K = c->W->n_cols;
    if (c->W->dtype == LI_DTYPE_F32) {
        // y[:, b:e] (T, e-b) = x (T, K) · W[b:e] (e-b, K)^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->T, (int)(e - b), (int)K, 1.0f,
                    c->x, (int)K, (const float *)c->W->data + b * K, (int)K, 0.0f, c->y + b,
                    (int)N);
        return;
    }
    float *tile = c->tiles + (size_t)tid * MM_TILE_ROWS * K;
    const uint16_t *wd = c->W->data;
    for (int64_t n0 = b; n0 < e; n0 += MM_TILE_ROWS) {
        int64_t rows = e - n0 < MM_TILE_ROWS ? e - n0 : MM_TILE_ROWS;
        bf16_to_f32_run(tile, wd + n0 * K, rows * K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->T, (int)rows, (int)K, 1.0f, c->x,
                    (int)K, tile, (int)K, 0.0f, c->y + n0, (int)N);
    }
}

static void cpu_matmul(li_backend *be, float *y, const float *x, const li_weight *W, int T) {
    LI_ASSERT(W->dtype == LI_DTYPE_F32 || W->dtype == LI_DTYPE_BF16);
    int64_t N = W->n_rows, K = W->n_cols;
    matmul_ctx c = {y, x, W, T};
    if (T < MM_BLAS_MIN_T) {
        li_parallel_for(be->tp, N, matmul_rows, &c);
        return;
    }
    gemm_ctx g = {y, x, W, T, NULL};
    if (W->dtype == LI_DTYPE_BF16) {
        li_cpu_impl *im = impl_of(be);
        g.tiles = im ? li_cpu_scratch_get(&im->wtile, (size_t)be->n_threads * MM_TILE_ROWS * K *
                                                          sizeof(float))
                     : NULL;
        if (!g.tiles) {  // no scratch: the row kernel needs none
            li_parallel_for(be->tp, N, matmul_rows, &c);
            return;
        }
    }
    li_parallel_for(be->tp, N, gemm_cols, &g);
}

// ---- add, swiglu, softmax -------------------------------------------------------------------

typedef struct {
    float *x;
    const float *y;
} add_ctx;

LI_VEC static void add_run(float *restrict x, const float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void add_range(void *p, int64_t b, int64_t e, int tid) {
    add_ctx *c = p;
    add_run(c->x + b, c->y + b, e - b);
}

static void cpu_add(li_backend *be, float *x, const float *y, int64_t n) {
    add_ctx c = {x, y};
    if (n >= PAR_MIN_ELEMS)
        li_parallel_for(be->tp, n, add_range, &c);
    else
        add_range(&c, 0, n, 0);
}

typedef struct {
    float *x;
    const float *b;
    int N;
} add_bias_ctx;

static void add_bias_rows(void *p, int64_t b, int64_t e, int tid) {
    add_bias_ctx *c = p;
    for (int64_t t = b; t < e; t++) add_run(c->x + t * c->N, c->b, c->N);
}

// Rows of a projection's output: threads over rows when there are many, as for add.
static void cpu_add_bias(li_backend *be, float *x, const float *b, int T, int N) {
    add_bias_ctx c = {x, b, N};
    if ((int64_t)T * N >= PAR_MIN_ELEMS)
        li_parallel_for(be->tp, T, add_bias_rows, &c);
    else
        add_bias_rows(&c, 0, T, 0);
}

typedef struct {
    float *out;
    const float *gate, *up;
} swiglu_ctx;

static void swiglu_range(void *p, int64_t b, int64_t e, int tid) {
    swiglu_ctx *c = p;
    for (int64_t i = b; i < e; i++) {
        float g = c->gate[i];
        c->out[i] = g / (1.0f + expf(-g)) * c->up[i];  // HF: silu(gate) * up
    }
}

static void cpu_swiglu(li_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    swiglu_ctx c = {out, gate, up};
    if (n >= PAR_MIN_ELEMS / 4)  // expf makes this ~4x heavier per element than add
        li_parallel_for(be->tp, n, swiglu_range, &c);
    else
        swiglu_range(&c, 0, n, 0);
}

typedef struct {
    float *x;
    int n;
} softmax_ctx;

static void softmax_rows(void *p, int64_t b, int64_t e, int tid) {
    softmax_ctx *c = p;
    for (int64_t r = b; r < e; r++) {
        float *x = c->x + r * c->n;
        float mx = -INFINITY;
        for (int i = 0; i < c->n; i++) mx = x[i] > mx ? x[i] : mx;
        double z = 0;  // fp64 sum: rows can be as long as the vocabulary
        for (int i = 0; i < c->n; i++) {
            x[i] = expf(x[i] - mx);
            z += x[i];
        }
        scale_inplace(x, (float)(1.0 / z), c->n);
    }
}

static void cpu_softmax(li_backend *be, float *x, int rows, int n) {
    softmax_ctx c = {x, n};
    if ((int64_t)rows * n >= PAR_MIN_ELEMS / 4 && rows > 1)
        li_parallel_for(be->tp, rows, softmax_rows, &c);
    else
        softmax_rows(&c, 0, rows, 0);
}

// ---- rope -----------------------------------------------------------------------------------

typedef struct {
    float *x;
    const int32_t *pos;
    int nh, Dh;
    const li_rope_table *tab;
} rope_ctx;

// Rotates pairs of head vector v with cos c[i], sin s[i] (magnitude already folded in).
static inline void rotate_pairs(float *v, const float *c, const float *s, int n_dims,
                                li_rope_layout layout) {
    int half = n_dims / 2;
    if (layout == LI_ROPE_NEOX) {
        // HF: q*cos + rotate_half(q)*sin
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * c[i] - b * s[i];
            v[i + half] = b * c[i] + a * s[i];
        }
    } else {
        for (int i = 0; i < half; i++) {
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c[i] - b * s[i];
            v[2 * i + 1] = b * c[i] + a * s[i];
        }
    }
}

// cos/sin of pos * w_i in fp64 (pos up to 2^29: fp32 angles would lose the phase), times m.
static void rope_cos_sin(float *c, float *s, double pos, const li_rope_table *tab, double m) {
    for (int i = 0; i < tab->n_dims / 2; i++) {
        double ang = pos * (double)tab->inv_freq[i];
        c[i] = (float)(cos(ang) * m);
        s[i] = (float)(sin(ang) * m);
    }
}

static void rope_rows(void *p, int64_t b, int64_t e, int tid) {
    rope_ctx *c = p;
    float cs[LI_ROPE_MAX_PAIRS], sn[LI_ROPE_MAX_PAIRS];
    for (int64_t t = b; t < e; t++) {
        rope_cos_sin(cs, sn, (double)c->pos[t], c->tab, c->tab->mscale);
        for (int h = 0; h < c->nh; h++)
            rotate_pairs(c->x + (t * c->nh + h) * c->Dh, cs, sn, c->tab->n_dims, c->tab->layout);
    }
}

static void cpu_rope(li_backend *be, float *x, const int32_t *pos, int T, int nh, int Dh,
                     const li_rope_table *table) {
    LI_ASSERT(table->n_dims <= Dh && table->n_dims % 2 == 0);
    rope_ctx c = {x, pos, nh, Dh, table};
    if (T > 1 && (int64_t)T * nh * Dh >= PAR_MIN_ELEMS / 4)
        li_parallel_for(be->tp, T, rope_rows, &c);
    else
        rope_rows(&c, 0, T, 0);
}

// ---- kv_store -------------------------------------------------------------------------------

// One K or V row of Dh elements into the pool at element offset off (f32: copied; bf16: rounded).
static void kv_row_put(const li_kv_storage *kv, size_t off, const float *x) {
    if (kv->dtype == LI_DTYPE_BF16)
        f32_to_bf16_run((uint16_t *)kv->data + off, x, kv->head_dim);
    else
        memcpy((float *)kv->data + off, x, (size_t)kv->head_dim * sizeof(float));
}

// n consecutive rows of the pool from element offset off as f32 into dst (n, Dh); returns dst, or
// the rows themselves when the pool is f32 (no copy).
static const float *kv_rows_f32(const li_kv_storage *kv, size_t off, int n, float *dst) {
    if (kv->dtype != LI_DTYPE_BF16) return (const float *)kv->data + off;
    bf16_to_f32_run(dst, (const uint16_t *)kv->data + off, (int64_t)n * kv->head_dim);
    return dst;
}

static void cpu_kv_store(li_backend *be, const li_kv_storage *kv, int il, const float *k,
                         const float *v, const int64_t *slot, int T) {
    int Hkv = kv->n_head_kv, Dh = kv->head_dim, P = kv->page_size;
    for (int t = 0; t < T; t++) {
        LI_ASSERT(slot[t] >= 0 && slot[t] / P < kv->n_pages);
        int64_t page = slot[t] / P;
        int off = (int)(slot[t] % P);
        for (int h = 0; h < Hkv; h++) {
            size_t src = ((size_t)t * Hkv + h) * Dh;
            kv_row_put(kv, li_kv_offset(kv, page, il, 0, h, off), k + src);
            kv_row_put(kv, li_kv_offset(kv, page, il, 1, h, off), v + src);
        }
    }
}

// ---- attention ------------------------------------------------------------------------------
//
// One work item = (query row t, kv head): the G = H/Hkv query heads that share that kv head run
// together (in chunks of ATT_GMAX), so each K and V row is loaded once per group; items are
// split over the threads. Per page: scores of the visible keys for all heads of the chunk, one
// max/rescale per page (online softmax over pages, as flash attention does per tile), then
// out += p * V.
//
// Deferred RoPE: instead of rotating every K row of a page by its Δ, the query is rotated by -Δ
// (q·R_Δ k = (R_-Δ q)·k, rotations are orthogonal), for every T: a work item holds one query row,
// so this costs G*Dh per page where Δ changes instead of P*Dh per page. cos/sin of Δ·w_i are
// computed once per call per distinct Δ (fp64 angle, then fp32) into scratch shared by all items;
// without scratch each item computes them itself.
#define ATT_GMAX 8
#define ATT_DH_MAX 512

typedef struct {
    float *out;
    const float *q;
    int T, H;
    const li_kv_storage *kv;
    int il;
    const li_kv_seq *seq;
    const int32_t *kv_first;  // (T) or NULL
    const int32_t *n_visible;
    float scale;
    const li_rope_table *rope;
    const int32_t *page_tab;  // (n_pages) index of the page's cos/sin row, -1 for Δ = 0; or NULL
    const float *cs_tab;      // (n_distinct, 2, n_pairs) cos then sin
    float *wide;              // bf16 pool: per worker 2 P Dh floats (a page's K, V in f32), or NULL
} att_ctx;

// qr = R_{-Δ} q for one head: a' = a c + b s, b' = b c - a s.
static void rotate_back(float *qr, const float *q, const float *c, const float *s, int Dh,
                        const li_rope_table *tab) {
    memcpy(qr, q, (size_t)Dh * sizeof(float));
    int half = tab->n_dims / 2;
    for (int i = 0; i < half; i++) {
        int ia = tab->layout == LI_ROPE_NEOX ? i : 2 * i;
        int ib = tab->layout == LI_ROPE_NEOX ? i + half : 2 * i + 1;
        float a = q[ia], b = q[ib];
        qr[ia] = a * c[i] + b * s[i];
        qr[ib] = b * c[i] - a * s[i];
    }
}

static void attention_items(void *p, int64_t b, int64_t e, int tid) {
    att_ctx *c = p;
    const li_kv_storage *kv = c->kv;
    int Hkv = kv->n_head_kv, Dh = kv->head_dim, G = c->H / Hkv;
    int half = c->rope ? c->rope->n_dims / 2 : 0;
    float qr[ATT_GMAX][ATT_DH_MAX], acc[ATT_GMAX][ATT_DH_MAX];
    float sc[ATT_GMAX][LI_PAGE_MAX_SIZE];
    float m[ATT_GMAX], l[ATT_GMAX];
    float cs_own[2 * LI_ROPE_MAX_PAIRS];
    // a bf16 pool: each page's visible K and V rows widened to f32 in this worker's part of the
    // scratch (P, Dh) each; without scratch, one row at a time into krow / vrow
    float *kwide = NULL, *vwide = NULL, krow[ATT_DH_MAX], vrow[ATT_DH_MAX];
    const bool bf16 = kv->dtype == LI_DTYPE_BF16;
    if (bf16 && c->wide) {
        kwide = c->wide + (size_t)tid * 2 * kv->page_size * Dh;
        vwide = kwide + (size_t)kv->page_size * Dh;
    }
    for (int64_t item = b; item < e; item++) {
        int t = (int)(item / Hkv), hk = (int)(item % Hkv);
        int nv = c->n_visible[t], first = c->kv_first ? c->kv_first[t] : 0;
        LI_ASSERT(first >= 0 && first < nv);
        for (int g0 = 0; g0 < G; g0 += ATT_GMAX) {
            int gn = G - g0 < ATT_GMAX ? G - g0 : ATT_GMAX;
            const float *q0 = c->q + ((size_t)t * c->H + (size_t)hk * G + g0) * Dh;
            for (int g = 0; g < gn; g++) {
                memcpy(qr[g], q0 + (size_t)g * Dh, (size_t)Dh * sizeof(float));
                memset(acc[g], 0, (size_t)Dh * sizeof(float));
                m[g] = -INFINITY;
                l[g] = 0;
            }
            int64_t cur_delta = 0;
            int j = 0;
            for (int pg = 0; pg < c->seq->n_pages && j < nv; pg++) {
                uint64_t w = c->seq->pages[pg];
                int64_t id = li_page_id(w), delta = li_page_delta(w);
                int cnt = li_page_count(w);
                LI_ASSERT(id < kv->n_pages && cnt >= 1 && cnt <= kv->page_size);
                int n_use = cnt < nv - j ? cnt : nv - j;
                if (j + n_use <= first) {  // the whole page lies before the first visible key
                    j += n_use;
                    continue;
                }
                int s0 = first > j ? first - j : 0;  // first visible slot of this page
                if (delta != cur_delta) {
                    const float *cs;
                    if (delta == 0) {
                        for (int g = 0; g < gn; g++)
                            memcpy(qr[g], q0 + (size_t)g * Dh, (size_t)Dh * sizeof(float));
                    } else {
                        if (c->page_tab) {
                            cs = c->cs_tab + (size_t)c->page_tab[pg] * 2 * half;
                        } else {
                            rope_cos_sin(cs_own, cs_own + half, (double)delta, c->rope, 1.0);
                            cs = cs_own;
                        }
                        for (int g = 0; g < gn; g++)
                            rotate_back(qr[g], q0 + (size_t)g * Dh, cs, cs + half, Dh, c->rope);
                    }
                    cur_delta = delta;
                }
                // rows s0 .. n_use - 1 are read; kb / vb index them by slot s (NULL: a bf16
                // pool without scratch, rows widened one at a time from ko / vo)
                const size_t ko = li_kv_offset(kv, id, c->il, 0, hk, 0);
                const size_t vo = li_kv_offset(kv, id, c->il, 1, hk, 0);
                const bool whole = !bf16 || kwide;
                const float *kb = whole ? kv_rows_f32(kv, ko + (size_t)s0 * Dh, n_use - s0, kwide) -
                                              (size_t)s0 * Dh
                                        : NULL;
                const float *vb = whole ? kv_rows_f32(kv, vo + (size_t)s0 * Dh, n_use - s0, vwide) -
                                              (size_t)s0 * Dh
                                        : NULL;
                for (int g = 0; g < gn; g++) {
                    float bm = -INFINITY;
                    for (int s = s0; s < n_use; s++) {
                        const float *kr =
                            kb ? kb + (size_t)s * Dh : kv_rows_f32(kv, ko + (size_t)s * Dh, 1, krow);
                        sc[g][s] = dot_f32(qr[g], kr, Dh) * c->scale;
                        bm = sc[g][s] > bm ? sc[g][s] : bm;
                    }
                    float mn = bm > m[g] ? bm : m[g];
                    if (mn > m[g] && l[g] > 0) {
                        float corr = expf(m[g] - mn);
                        l[g] *= corr;
                        scale_inplace(acc[g], corr, Dh);
                    }
                    m[g] = mn;
                    for (int s = s0; s < n_use; s++) {
                        float pe = expf(sc[g][s] - mn);
                        l[g] += pe;
                        const float *vr =
                            vb ? vb + (size_t)s * Dh : kv_rows_f32(kv, vo + (size_t)s * Dh, 1, vrow);
                        axpy(acc[g], pe, vr, Dh);
                    }
                }
                j += n_use;
            }
            float *o0 = c->out + ((size_t)t * c->H + (size_t)hk * G + g0) * Dh;
            for (int g = 0; g < gn; g++) {
                float inv = 1.0f / l[g];
                for (int d = 0; d < Dh; d++) o0[(size_t)g * Dh + d] = acc[g][d] * inv;
            }
        }
    }
}

typedef struct {
    const li_kv_storage *kv;
    int64_t src, dst;
    int count;
    const float *c, *sn;  // cos/sin of delta·w_i (n_dims/2 each), NULL for delta = 0
    const li_rope_table *rope;
} copy_ctx;

// One layer per item: K rows copied then rotated with the shared cos/sin, V copied. A bf16 pool's
// rotated K is rounded to bf16 again (copy mode's second rounding; lazy mode has none).
static void copy_rotate_layers(void *p, int64_t b, int64_t e, int tid) {
    copy_ctx *c = p;
    const li_kv_storage *kv = c->kv;
    const size_t esz = li_kv_elem_bytes(kv->dtype), row = (size_t)kv->head_dim * esz;
    char *base = kv->data;
    float kw[ATT_DH_MAX];
    for (int64_t il = b; il < e; il++)
        for (int h = 0; h < kv->n_head_kv; h++) {
            const size_t kd_off = li_kv_offset(kv, c->dst, (int)il, 0, h, 0);
            memcpy(base + kd_off * esz, base + li_kv_offset(kv, c->src, (int)il, 0, h, 0) * esz,
                   row * c->count);
            memcpy(base + li_kv_offset(kv, c->dst, (int)il, 1, h, 0) * esz,
                   base + li_kv_offset(kv, c->src, (int)il, 1, h, 0) * esz, row * c->count);
            if (!c->c) continue;
            int half = c->rope->n_dims / 2;
            for (int s = 0; s < c->count; s++) {
                const size_t ko = kd_off + (size_t)s * kv->head_dim;
                float *k = kv->dtype == LI_DTYPE_BF16 ? kw : (float *)kv->data + ko;
                if (k == kw) bf16_to_f32_run(kw, (const uint16_t *)kv->data + ko, kv->head_dim);
                for (int i = 0; i < half; i++) {
                    int ia = c->rope->layout == LI_ROPE_NEOX ? i : 2 * i;
                    int ib = c->rope->layout == LI_ROPE_NEOX ? i + half : 2 * i + 1;
                    float a = k[ia], bb = k[ib];
                    k[ia] = a * c->c[i] - bb * c->sn[i];
                    k[ib] = bb * c->c[i] + a * c->sn[i];
                }
                if (k == kw) f32_to_bf16_run((uint16_t *)kv->data + ko, kw, kv->head_dim);
            }
        }
}

// Bytes: 2 × count × L × Hkv × Dh × (4 or 2) read and written once — a page copy at memory speed.
static void cpu_kv_copy_rotate(li_backend *be, const li_kv_storage *kv, int64_t src, int64_t dst,
                               int count, int64_t delta, const li_rope_table *rope) {
    LI_ASSERT(src != dst && count >= 0 && count <= kv->page_size);
    float cs[LI_ROPE_MAX_PAIRS], sn[LI_ROPE_MAX_PAIRS];
    copy_ctx c = {kv, src, dst, count, NULL, NULL, rope};
    if (delta != 0) {
        LI_ASSERT(rope != NULL);
        rope_cos_sin(cs, sn, (double)delta, rope, 1.0);
        c.c = cs;
        c.sn = sn;
    }
    li_parallel_for(be->tp, kv->n_layer, copy_rotate_layers, &c);
}

static void cpu_attention(li_backend *be, float *out, const float *q, int T, int H,
                          const li_kv_storage *kv, int il, const li_kv_seq *seq,
                          const int32_t *kv_first, const int32_t *n_visible, float scale,
                          const li_rope_table *rope) {
    int Hkv = kv->n_head_kv;
    LI_ASSERT(H % Hkv == 0 && kv->head_dim <= ATT_DH_MAX && kv->page_size <= LI_PAGE_MAX_SIZE);
    att_ctx c = {out, q, T, H, kv, il, seq, kv_first, n_visible, scale, rope, NULL, NULL, NULL};
    li_cpu_impl *im = impl_of(be);
    if (kv->dtype == LI_DTYPE_BF16 && im) {  // NULL (no memory): the row-at-a-time path
        size_t per = 2 * (size_t)kv->page_size * kv->head_dim;
        int workers = be->n_threads > 0 ? be->n_threads : 1;
        c.wide = li_cpu_scratch_get(&im->kv_wide, per * (size_t)workers * sizeof(float));
    }
    // Pass 1 (this thread): which pages need a rotation, cos/sin per distinct consecutive Δ.
    int n_rot = 0;
    for (int p = 0; p < seq->n_pages; p++) {
        int64_t d = li_page_delta(seq->pages[p]);
        if (d != 0 && (p == 0 || d != li_page_delta(seq->pages[p - 1]))) n_rot++;
    }
    if (n_rot > 0) {
        LI_ASSERT(rope != NULL && rope->n_dims <= kv->head_dim);
        int half = rope->n_dims / 2;
        size_t tab_bytes = (size_t)seq->n_pages * sizeof(int32_t);
        tab_bytes = (tab_bytes + 63) & ~(size_t)63;
        char *buf = im ? li_cpu_scratch_get(&im->delta_tab,
                                            tab_bytes + (size_t)n_rot * 2 * half * sizeof(float))
                       : NULL;
        if (buf) {
            int32_t *pt = (int32_t *)buf;
            float *cs = (float *)(buf + tab_bytes);
            int k = -1;
            for (int p = 0; p < seq->n_pages; p++) {
                int64_t d = li_page_delta(seq->pages[p]);
                if (d == 0) {
                    pt[p] = -1;
                    continue;
                }
                if (p == 0 || d != li_page_delta(seq->pages[p - 1])) {
                    k++;
                    rope_cos_sin(cs + (size_t)k * 2 * half, cs + (size_t)k * 2 * half + half,
                                 (double)d, rope, 1.0);  // pure rotation: no mscale
                }
                pt[p] = k;
            }
            c.page_tab = pt;
            c.cs_tab = cs;
        }
    }
    li_parallel_for(be->tp, (int64_t)T * Hkv, attention_items, &c);
}

// Decode rows of several sequences: attention per row (each already runs its kv heads on the
// pool's threads).
static void cpu_attention_decode(li_backend *be, float *out, const float *q, int n, int H,
                                 const li_kv_storage *kv, int il, const uint64_t *pages,
                                 const int32_t *page_start, const int32_t *page_start_host,
                                 const int32_t *n_visible, float scale, const li_rope_table *rope) {
    (void)page_start;  // host memory here: page_start_host holds the same values
    li_attention_decode_rows(be, out, q, n, H, kv, il, pages, page_start_host, n_visible, scale,
                             rope);
}

// ---- qkv_rope_store -------------------------------------------------------------------------

typedef struct {
    float *q;
    const li_kv_storage *kv;
    int il, H;
    const float *qkv, *bias;
    const int32_t *pos;
    const int64_t *slot;
    const li_rope_table *tab;
} qkv_store_ctx;

// Rows [b, e): each head of the row (q heads, k heads, v heads) copied out, its bias added
// (add_run), q and k heads rotated (rope_cos_sin, rotate_pairs), then q heads left in q and k, v
// heads put into the pool (kv_row_put) — cpu_add_bias's, rope_rows's and cpu_kv_store's
// arithmetic element for element, so the bits of those ops.
static void qkv_store_rows(void *p, int64_t b, int64_t e, int tid) {
    const qkv_store_ctx *c = p;
    const li_kv_storage *kv = c->kv;
    const int H = c->H, Hkv = kv->n_head_kv, Dh = kv->head_dim, P = kv->page_size;
    const int64_t row = (int64_t)(H + 2 * Hkv) * Dh;
    float cs[LI_ROPE_MAX_PAIRS], sn[LI_ROPE_MAX_PAIRS], kvrow[ATT_DH_MAX];
    for (int64_t t = b; t < e; t++) {
        rope_cos_sin(cs, sn, (double)c->pos[t], c->tab, c->tab->mscale);
        const int64_t page = c->slot[t] / P;
        const int off = (int)(c->slot[t] % P);
        for (int hh = 0; hh < H + 2 * Hkv; hh++) {
            float *y = hh < H ? c->q + (t * H + hh) * Dh : kvrow;
            memcpy(y, c->qkv + t * row + (int64_t)hh * Dh, (size_t)Dh * sizeof(float));
            if (c->bias) add_run(y, c->bias + (int64_t)hh * Dh, Dh);
            if (hh < H + Hkv) rotate_pairs(y, cs, sn, c->tab->n_dims, c->tab->layout);
            if (hh < H) continue;
            const int is_v = hh >= H + Hkv, h = hh - H - (is_v ? Hkv : 0);
            kv_row_put(kv, li_kv_offset(kv, page, c->il, is_v, h, off), kvrow);
        }
    }
}

// Threads over rows as cpu_rope (slots are distinct, so rows write disjoint pool rows).
static void cpu_qkv_rope_store(li_backend *be, float *q, const li_kv_storage *kv, int il,
                               const float *qkv, const float *bias, const int32_t *pos,
                               const int64_t *slot, int T, int H, const li_rope_table *table) {
    const int Dh = kv->head_dim;
    LI_ASSERT(table->n_dims <= Dh && table->n_dims % 2 == 0 && Dh <= ATT_DH_MAX);
    for (int t = 0; t < T; t++)
        LI_ASSERT(slot[t] >= 0 && slot[t] / kv->page_size < kv->n_pages);
    qkv_store_ctx c = {q, kv, il, H, qkv, bias, pos, slot, table};
    if (T > 1 && (int64_t)T * (H + 2 * kv->n_head_kv) * Dh >= PAR_MIN_ELEMS / 4)
        li_parallel_for(be->tp, T, qkv_store_rows, &c);
    else
        qkv_store_rows(&c, 0, T, 0);
}

// ---- sample ---------------------------------------------------------------------------------
//
// Same arithmetic as ops-ref.c (see the comment above ref_sample there), but instead of sorting
// all V candidates it keeps the first `have` of the order (p desc, id asc) sorted, found by
// quickselect, and doubles `have` whenever a walk needs more. Typical distributions need 64.

typedef struct {
    double p;
    int32_t id;
} cand;

static inline int before(cand a, cand b) {  // a precedes b in the order (p desc, id asc)
    return a.p > b.p || (a.p == b.p && a.id < b.id);
}

static int cand_cmp(const void *x, const void *y) {
    cand a = *(const cand *)x, b = *(const cand *)y;
    return before(a, b) ? -1 : (a.id == b.id ? 0 : 1);
}

typedef struct {
    const double *p;  // (V) unnormalised probabilities, id order
    cand *c;          // (V) a permutation of the candidates; c[0..have) sorted
    int V, have;
} cand_set;

// Moves the first (in order) target - lo candidates of c[lo..hi) to c[lo..target), unordered.
static void select_top(cand *c, int lo, int hi, int target) {
    while (hi - lo > 1 && lo < target && target < hi) {
        int mid = lo + (hi - lo) / 2;
        cand a = c[lo], b = c[mid], z = c[hi - 1], pv;  // median of three
        if (before(a, b))
            pv = before(b, z) ? b : (before(a, z) ? z : a);
        else
            pv = before(a, z) ? a : (before(b, z) ? z : b);
        // partition: [lo, i) precede pv, [i, hi) do not (pv is among them: keys are unique)
        int i = lo, k = hi - 1;
        while (i <= k) {
            if (before(c[i], pv)) {
                i++;
            } else {
                cand tmp = c[i];
                c[i] = c[k];
                c[k] = tmp;
                k--;
            }
        }
        if (i >= target) {
            hi = i;
        } else {
            for (int r = i; r < hi; r++)  // put pv, the first of the rest, at i
                if (c[r].id == pv.id) {
                    c[r] = c[i];
                    c[i] = pv;
                    break;
                }
            lo = i + 1;
        }
    }
}

// Makes c[0..m) the first m candidates in order (m clipped to V).
static void cands_ensure(cand_set *cs, int m) {
    if (m > cs->V) m = cs->V;
    if (m <= cs->have) return;
    select_top(cs->c, cs->have, cs->V, m);
    qsort(cs->c + cs->have, (size_t)(m - cs->have), sizeof(cand), cand_cmp);
    cs->have = m;
}

// Σ p over the survivors (the first n in order) in id order — as survivor_sum in ops-ref.c.
static double survivors_sum(cand_set *cs, int n) {
    double z = 0;
    if (n >= cs->V) {
        for (int i = 0; i < cs->V; i++)
            if (cs->p[i] != 0) z += cs->p[i];
        return z;
    }
    cands_ensure(cs, n);
    cand last = cs->c[n - 1];
    for (int i = 0; i < cs->V; i++) {
        cand x = {cs->p[i], i};
        if (cs->p[i] != 0 && (i == last.id || before(x, last))) z += cs->p[i];
    }
    return z;
}

static int32_t cpu_sample(li_backend *be, const float *logits, int V, const li_sampler_config *cfg,
                          double u) {
    LI_ASSERT(V >= 1);
    // greedy (argmax, lowest id on ties) needs no candidates: the reference's
    if (cfg->temperature <= 0) return li_cpu_ref_ops.sample(be, logits, V, cfg, u);
    li_cpu_impl *im = impl_of(be);
    double *p = im ? li_cpu_scratch_get(&im->samp_p, (size_t)V * sizeof(double)) : NULL;
    cand *c = im ? li_cpu_scratch_get(&im->samp_idx, (size_t)V * sizeof(cand)) : NULL;
    if (!p || !c) return li_cpu_ref_ops.sample(be, logits, V, cfg, u);

    double lmax = logits[li_cpu_argmax(logits, V)], temp = cfg->temperature;
    for (int i = 0; i < V; i++) {
        p[i] = exp(((double)logits[i] - lmax) / temp);  // HF: softmax(logits / temperature)
        c[i].p = p[i];
        c[i].id = i;
    }
    cand_set cs = {p, c, V, 0};
    int n = V;  // survivors: the first n in order
    if (cfg->top_k > 0 && cfg->top_k < n) n = cfg->top_k;
    cands_ensure(&cs, n < 64 ? n : 64);
    if (cfg->top_p < 1) {
        double lim = (double)cfg->top_p * survivors_sum(&cs, n), cum = 0;
        int m = 0;
        while (m < n && cum < lim) {
            if (m == cs.have) cands_ensure(&cs, 2 * cs.have);
            cum += c[m++].p;
        }
        n = m > 0 ? m : 1;
    }
    if (cfg->min_p > 0) {
        double thr = (double)cfg->min_p * c[0].p;
        int m = 1;
        while (m < n) {
            if (m == cs.have) cands_ensure(&cs, 2 * cs.have);
            if (!(c[m].p >= thr)) break;
            m++;
        }
        n = m;
    }
    double target = u * survivors_sum(&cs, n), cum = 0;
    int32_t tok = -1, last_pos = c[0].id;
    for (int i = 0; i < n; i++) {
        if (i == cs.have) cands_ensure(&cs, 2 * cs.have);
        if (c[i].p > 0) last_pos = c[i].id;
        cum += c[i].p;
        if (cum > target) {
            tok = c[i].id;
            break;
        }
    }
    return tok >= 0 ? tok : last_pos;
}

// ---- diffusion / FP8 ops --------------------------------------------------------------------
//
// flash_attn_tiles: one work item per (query row, head); the tile's scores live on the stack
// (tile <= LI_FA_MAX_TILE); dot products and the o update use the AVX kernels above. fp32 state
// and arithmetic (expf): agrees with the fp64 oracle within fp32 rounding.

// Below this many multiply-adds an op runs on the calling thread (a pool wake-up costs ~10 us).
#define SMALL_WORK (1 << 16)

typedef struct {
    float *o, *m, *l;
    const float *q, *k, *v;
    int H, Hkv, Dh, nk, tile;
    float scale;
} fa_ctx;

static void fa_items(void *p, int64_t b, int64_t e, int tid) {
    fa_ctx *c = p;
    float s[LI_FA_MAX_TILE];
    int group = c->H / c->Hkv, Dh = c->Dh;
    for (int64_t it = b; it < e; it++) {  // item = query row * H + head
        int h = (int)(it % c->H), hk = h / group;
        const float *qr = c->q + (size_t)it * Dh;
        float *orow = c->o + (size_t)it * Dh;
        float m = c->m[it], l = c->l[it];
        for (int t0 = 0; t0 < c->nk; t0 += c->tile) {
            int t1 = t0 + c->tile < c->nk ? t0 + c->tile : c->nk;
            float mt = -INFINITY;
            for (int j = t0; j < t1; j++) {
                float d = dot_f32(qr, c->k + ((size_t)j * c->Hkv + hk) * Dh, Dh) * c->scale;
                s[j - t0] = d;
                mt = d > mt ? d : mt;
            }
            float m_new = m > mt ? m : mt;
            float a = m == -INFINITY ? 0.0f : expf(m - m_new);
            if (a != 1.0f) scale_inplace(orow, a, Dh);
            float sum = 0;
            for (int j = t0; j < t1; j++) {
                float pj = expf(s[j - t0] - m_new);
                sum += pj;
                axpy(orow, pj, c->v + ((size_t)j * c->Hkv + hk) * Dh, Dh);
            }
            l = a * l + sum;
            m = m_new;
        }
        c->m[it] = m;
        c->l[it] = l;
    }
}

static void cpu_flash_attn_tiles(li_backend *be, float *o, float *m, float *l, const float *q,
                                 int nq, int H, const float *k, const float *v, int nk, int Hkv,
                                 int Dh, int tile, float scale) {
    LI_ASSERT(H % Hkv == 0 && tile >= 1 && tile <= LI_FA_MAX_TILE);
    if (nq <= 0 || nk <= 0) return;
    fa_ctx c = {o, m, l, q, k, v, H, Hkv, Dh, nk, tile, scale};
    if ((int64_t)nq * H * nk * Dh < SMALL_WORK)  // waking the pool costs more than the work
        fa_items(&c, 0, (int64_t)nq * H, 0);
    else
        li_parallel_for(be->tp, (int64_t)nq * H, fa_items, &c);
}

typedef struct {
    float *out;
    const float *o, *l;
    int Dh;
} fin_ctx;

static void fin_rows(void *p, int64_t b, int64_t e, int tid) {
    fin_ctx *c = p;
    for (int64_t r = b; r < e; r++) {
        float lr = c->l[r];
        for (int x = 0; x < c->Dh; x++) c->out[r * c->Dh + x] = c->o[r * c->Dh + x] / lr;
    }
}

static void cpu_flash_attn_finalize(li_backend *be, float *out, const float *o, const float *l,
                                    int64_t n, int Dh) {
    fin_ctx c = {out, o, l, Dh};
    if (n * Dh < SMALL_WORK)
        fin_rows(&c, 0, n, 0);
    else
        li_parallel_for(be->tp, n, fin_rows, &c);
}

// FP8: the conversions are the bit-exact ones of src/core/fp8.c; decoding goes through a table.
typedef struct {
    uint8_t *q;
    float *scale;
    const float *x;
    int K, G;
} q8_ctx;

static void q8_rows(void *p, int64_t b, int64_t e, int tid) {
    q8_ctx *c = p;
    for (int64_t t = b; t < e; t++)
        for (int g = 0; g < c->G; g++) {
            int k0 = g * LI_FP8_GROUP, k1 = k0 + LI_FP8_GROUP < c->K ? k0 + LI_FP8_GROUP : c->K;
            const float *xr = c->x + (size_t)t * c->K;
            float amax = 0;
            for (int k = k0; k < k1; k++) amax = fmaxf(amax, fabsf(xr[k]));
            float sc = li_fp8_scale(amax);
            c->scale[t * c->G + g] = sc;
            for (int k = k0; k < k1; k++) c->q[(size_t)t * c->K + k] = li_f32_to_e4m3(xr[k] / sc);
        }
}

static void cpu_fp8_quant_rows(li_backend *be, const li_fp8_rows *out, const float *x, int T,
                               int K) {
    q8_ctx c = {out->q, out->scale, x, K, (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP};
    if ((int64_t)T * K < SMALL_WORK)
        q8_rows(&c, 0, T, 0);
    else
        li_parallel_for(be->tp, T, q8_rows, &c);
}

static float e4m3_table[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;
static void e4m3_table_fill(void) {
    for (int i = 0; i < 256; i++) e4m3_table[i] = li_e4m3_to_f32((uint8_t)i);
}

// Σ a_k w_k over one group, exactly: each product is exact in fp32 (4-bit significands), the sum
// exact in fp64 whatever the order.
static double group_dot_c(const float *a, const float *w, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)(a[i] * w[i]);
        s1 += (double)(a[i + 1] * w[i + 1]);
        s2 += (double)(a[i + 2] * w[i + 2]);
        s3 += (double)(a[i + 3] * w[i + 3]);
    }
    for (; i < n; i++) s0 += (double)(a[i] * w[i]);
    return (s0 + s1) + (s2 + s3);
}

#if HAVE_X86
__attribute__((target("avx"))) static double group_dot_avx(const float *a, const float *w, int n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(w + i));  // exact
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(s0, s1));
    double s = (t[0] + t[1]) + (t[2] + t[3]);
    for (; i < n; i++) s += (double)(a[i] * w[i]);
    return s;
}
#endif

static inline double group_dot(const float *a, const float *w, int n) {
#if HAVE_X86
    if (__builtin_cpu_supports("avx")) return group_dot_avx(a, w, n);
#endif
    return group_dot_c(a, w, n);
}

typedef struct {
    float *y;
    const uint8_t *qa;
    const float *a;  // (T, K) decoded activations, or NULL: decode on the fly
    const float *sa;
    const li_fp8_weight *W;
    int T;
    bool accumulate;  // y += acc (the bits of y + the product, as add would give them)
} mm8_ctx;

static void mm8_rows(void *p, int64_t b, int64_t e, int tid) {
    mm8_ctx *c = p;
    int64_t N = c->W->n_rows, K = c->W->n_cols, G = (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    float wgrp[LI_FP8_GROUP], agrp[LI_FP8_GROUP];
    float *wfull = malloc((size_t)K * sizeof(float));  // one decoded weight row; NULL: per group
    for (int64_t n = b; n < e; n++) {
        const uint8_t *wq = c->W->q + n * K;
        const float *ws = c->W->scale + (n / LI_FP8_GROUP) * G;
        if (wfull)
            for (int64_t k = 0; k < K; k++) wfull[k] = e4m3_table[wq[k]];
        for (int t = 0; t < c->T; t++) {
            float acc = 0;
            for (int64_t g = 0; g < G; g++) {
                int64_t k0 = g * LI_FP8_GROUP;
                int len = (int)(K - k0 < LI_FP8_GROUP ? K - k0 : LI_FP8_GROUP);
                const float *wr = wfull ? wfull + k0 : wgrp;
                if (!wfull)
                    for (int i = 0; i < len; i++) wgrp[i] = e4m3_table[wq[k0 + i]];
                const float *ar = c->a ? c->a + t * K + k0 : agrp;
                if (!c->a)
                    for (int i = 0; i < len; i++) agrp[i] = e4m3_table[c->qa[t * K + k0 + i]];
                float part = (float)group_dot(ar, wr, len) * c->sa[t * G + g];
                part = part * ws[g];
                acc = acc + part;
            }
            c->y[t * N + n] = c->accumulate ? c->y[t * N + n] + acc : acc;
        }
    }
    free(wfull);
}

typedef struct {
    float *dst;
    const uint8_t *src;
} dec8_ctx;

static void dec8_range(void *p, int64_t b, int64_t e, int tid) {
    dec8_ctx *c = p;
    for (int64_t i = b; i < e; i++) c->dst[i] = e4m3_table[c->src[i]];
}

// Codes times their scales, as f32: rows (n, K) of q with scales (ceil(n/bh), ceil(K/128)), a scale
// per bh rows and 128 columns (bh 1: activation rows; 128: weight blocks).
typedef struct {
    float *dst;
    const uint8_t *q;
    const float *scale;
    int64_t K;
    int bh;
} scaled8_ctx;

static void scaled8_rows(void *p, int64_t b, int64_t e, int tid) {
    scaled8_ctx *c = p;
    int64_t G = (c->K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    for (int64_t r = b; r < e; r++) {
        const float *s = c->scale + (r / c->bh) * G;
        for (int64_t k = 0; k < c->K; k++)
            c->dst[r * c->K + k] = e4m3_table[c->q[r * c->K + k]] * s[k / LI_FP8_GROUP];
    }
}

// Not exact, batches of MM_BLAS_MIN_T rows or more: the block-scaled product as one f32 GEMM of
// the decoded, scaled activations and weights (cpu_matmul's blocked kernel, ~fp32 rounding from
// the exact order): a CPU has no FP8 units, and the exact kernel's per-group sums run ~50x
// slower than the f32 GEMM. false: no memory for the decoded copies (the caller runs exact).
static bool matmul_fp8_decoded(li_backend *be, float *y, const li_fp8_rows *x, int T,
                               const li_fp8_weight *W, bool accumulate) {
    int64_t N = W->n_rows, K = W->n_cols;
    float *a = malloc((size_t)T * (size_t)K * sizeof(float));
    float *w = a ? malloc((size_t)N * (size_t)K * sizeof(float)) : NULL;
    float *out = w && accumulate ? malloc((size_t)T * (size_t)N * sizeof(float)) : y;
    if (!out) {
        free(a);
        free(w);
        return false;
    }
    scaled8_ctx ca = {a, x->q, x->scale, K, 1}, cw = {w, W->q, W->scale, K, LI_FP8_GROUP};
    li_parallel_for(be->tp, T, scaled8_rows, &ca);
    li_parallel_for(be->tp, N, scaled8_rows, &cw);
    li_weight wf = {.dtype = LI_DTYPE_F32, .n_rows = N, .n_cols = K, .data = w};
    cpu_matmul(be, out, a, &wf, T);
    if (accumulate) {
        for (int64_t i = 0; i < (int64_t)T * N; i++) y[i] += out[i];
        free(out);
    }
    free(a);
    free(w);
    return true;
}

// exact: the order backend.h fixes; not exact: matmul_fp8_decoded for large batches.
static void cpu_matmul_fp8(li_backend *be, float *y, const li_fp8_rows *x, int T,
                           const li_fp8_weight *W, bool exact, bool accumulate) {
    const uint8_t *qa = x->q;
    const float *sa = x->scale;
    pthread_once(&e4m3_once, e4m3_table_fill);
    if (!exact && T >= MM_BLAS_MIN_T && matmul_fp8_decoded(be, y, x, T, W, accumulate)) return;
    int64_t K = W->n_cols;
    // The activations are decoded once (T*K floats); without the buffer, per group on the fly.
    float *a = malloc((size_t)T * (size_t)K * sizeof(float));
    if (a) {
        dec8_ctx d = {a, qa};
        dec8_range(&d, 0, (int64_t)T * K, 0);  // a table lookup per element: never worth a wake-up
    }
    mm8_ctx c = {y, qa, a, sa, W, T, accumulate};
    if ((int64_t)T * W->n_rows * K < SMALL_WORK)
        mm8_rows(&c, 0, W->n_rows, 0);
    else
        li_parallel_for(be->tp, W->n_rows, mm8_rows, &c);
    free(a);
}

// ---- the [dt] entries (backend.h): this table has the F32 forms only ------------------------

static void cpu_rmsnorm_dt(li_backend *be, void *out, li_dtype dt, const float *x, const float *w,
                           int T, int D, float eps) {
    LI_ASSERT(dt == LI_DTYPE_F32);
    cpu_rmsnorm(be, out, x, w, T, D, eps);
}
static void cpu_matmul_dt(li_backend *be, float *y, const void *x, li_dtype dt, const li_weight *W,
                          int T, bool accumulate) {
    LI_ASSERT(dt == LI_DTYPE_F32 && !accumulate);
    cpu_matmul(be, y, x, W, T);
}
static void cpu_rope_dt(li_backend *be, void *out, li_dtype dt, float *x, const int32_t *pos, int T,
                        int nh, int Dh, const li_rope_table *table) {
    LI_ASSERT(dt == LI_DTYPE_F32 && out == x);
    cpu_rope(be, x, pos, T, nh, Dh, table);
}
static void cpu_add_rmsnorm_dt(li_backend *be, void *out, li_dtype dt, float *x, const float *y,
                               const float *w, int T, int D, float eps) {
    LI_ASSERT(dt == LI_DTYPE_F32);  // (FP8: li_add_rmsnorm runs add, rmsnorm, fp8_quant_rows)
    cpu_add_rmsnorm(be, out, x, y, w, T, D, eps);
}
static void cpu_swiglu_dt(li_backend *be, void *out, li_dtype dt, const float *gate,
                          const float *up, int T, int64_t F, int64_t ld) {
    LI_ASSERT(dt == LI_DTYPE_F32 && ld == F);
    cpu_swiglu(be, out, gate, up, (int64_t)T * F);
}

const li_backend_ops li_cpu_fast_ops = {
    .name = "cpu",
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm_dt,
    .matmul = cpu_matmul_dt,
    .add = cpu_add,
    .add_bias = cpu_add_bias,
    .add_rmsnorm = cpu_add_rmsnorm_dt,
    .rope = cpu_rope_dt,
    .kv_store = cpu_kv_store,
    .qkv_rope_store = cpu_qkv_rope_store,
    .kv_copy_rotate = cpu_kv_copy_rotate,
    .attention = cpu_attention,
    .attention_decode = cpu_attention_decode,
    .swiglu = cpu_swiglu_dt,
    .softmax = cpu_softmax,
    .sample = cpu_sample,
    // below MM_BLAS_MIN_T the row kernel: one dot product per output, whatever T (sgemm's bits
    // depend on the call's rows: 1050 of 1110 sub-GEMMs of 30 shapes differed, OpenBLAS 0.3.21)
    .matmul_invariant_rows = MM_BLAS_MIN_T - 1,
    .flash_attn_tiles = cpu_flash_attn_tiles,
    .flash_attn_finalize = cpu_flash_attn_finalize,
    .fp8_quant_rows = cpu_fp8_quant_rows,
    .matmul_fp8 = cpu_matmul_fp8,
    .dllm = &li_cpu_dllm_ops,  // ops-ref.c: one pass over B rows, not worth threads
};
