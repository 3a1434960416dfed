// pointwise.cu — the CUDA backend's memory-bound kernels: embedding, RMSNorm, residual add,
// SwiGLU, softmax, RoPE, KV page writes (alone, and fused with the split, bias and RoPE of the QKV
// projection's rows), the copy mode's page copy + re-rotation, f32 -> bf16 activation conversion
// and a counter-based random fill.
//
// Not here: GEMMs (cuBLASLt, backend-cuda-gemm.c), attention (attention.cu), sampling (sample.cu).
// Napkin maths: each of these reads and writes every element once, so the ceiling is the H200's
// ~4.8 TB/s HBM3e; none is tuned yet (plain coalesced loads, one element per thread or one block
// per row), which is enough while GEMMs and attention dominate; the residual add fused with the
// next RMSNorm saves a pass and a launch per norm. Tested by tests/gpu/gpu-check.c against the CPU oracle (ops-ref.c).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda-device.cuh"
#include "pointwise.cuh"

static inline unsigned grid_for(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g < 65535 * 32 ? g : 65535 * 32);  // grid-stride loops cover the rest
}

// ---- embed ---------------------------------------------------------------------------------

// grid (x: chunks of D, y: T)
__global__ void embed_kernel(float *out, const void *W, int w_bf16, int64_t D,
                             const int32_t *tokens) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    int t = blockIdx.y;
    int64_t row = tokens[t];
    for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < D;
         d += (int64_t)gridDim.x * blockDim.x) {
        float v = w_bf16 ? __bfloat162float(((const __nv_bfloat16 *)W)[row * D + d])
                         : ((const float *)W)[row * D + d];
        out[(int64_t)t * D + d] = v;
    }
}

extern "C" cudaError_t li_cuda_embed(cudaStream_t st, float *out, const void *W, int w_bf16,
                                     int64_t D, const int32_t *tokens, int T) {
    if (T <= 0 || D <= 0) return cudaSuccess;
    if (T > 65535) return cudaErrorInvalidValue;  // grid.y; batches are far smaller
    unsigned gx = (unsigned)((D + 255) / 256);
    if (gx > 1024) gx = 1024;
    return launch_pdl(embed_kernel, dim3(gx, T), dim3(256), 0, st, out, W, w_bf16, D, tokens);
}

// ---- rmsnorm -------------------------------------------------------------------------------

// One block per row: fp32 sum of squares (block tree reduction: error ~ log2(D) ulp, the oracle
// uses fp64), then one pass writing x * r * w — as f32, or rounded to bf16 (rmsnorm_bf16: the
// next GEMM's input; the same f32 value rounded, so the bits of rmsnorm then f32_to_bf16). out
// may alias x (f32): every x[d] is read before the block writes (the reduction's barrier).
__device__ __forceinline__ void store_act(float *o, int64_t i, float v) { o[i] = v; }
__device__ __forceinline__ void store_act(__nv_bfloat16 *o, int64_t i, float v) {
    o[i] = __float2bfloat16_rn(v);
}

template <typename OutT>
__global__ void rmsnorm_kernel(OutT *out, const float *x, const float *w, int D, float eps) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * D;
    OutT *orow = out + (int64_t)blockIdx.x * D;
    float ss = 0;
    for (int d = threadIdx.x; d < D; d += blockDim.x) ss += xr[d] * xr[d];
    ss = block_sum(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)D + eps);  // IEEE sqrt and division (no fast-math)
    for (int d = threadIdx.x; d < D; d += blockDim.x) store_act(orow, d, xr[d] * r * w[d]);
}

static int rmsnorm_block(int D) { return D >= 1024 ? 1024 : D >= 256 ? 256 : 64; }

extern "C" cudaError_t li_cuda_rmsnorm(cudaStream_t st, float *out, const float *x,
                                       const float *w, int T, int D, float eps) {
    if (T <= 0 || D <= 0) return cudaSuccess;
    return launch_pdl(rmsnorm_kernel<float>, dim3(T), dim3(rmsnorm_block(D)), 0, st, out, x, w,
                      D, eps);
}

extern "C" cudaError_t li_cuda_rmsnorm_bf16(cudaStream_t st, uint16_t *out, const float *x,
                                            const float *w, int T, int D, float eps) {
    if (T <= 0 || D <= 0) return cudaSuccess;
    return launch_pdl(rmsnorm_kernel<__nv_bfloat16>, dim3(T), dim3(rmsnorm_block(D)), 0, st,
                      (__nv_bfloat16 *)out, x, w, D, eps);
}

// x += y, then out = rmsnorm(x) * w: one block per row, the row read once from HBM (the second
// pass re-reads it from L1/L2), the same arithmetic as add_kernel + rmsnorm_kernel.
__global__ void add_rmsnorm_kernel(float *out, float *x, const float *y, const float *w, int D,
                                   float eps) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    __shared__ float sh[32];
    float *xr = x + (int64_t)blockIdx.x * D;
    const float *yr = y + (int64_t)blockIdx.x * D;
    float *orow = out + (int64_t)blockIdx.x * D;
    float ss = 0;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = xr[d] + yr[d];
        xr[d] = v;
        ss += v * v;
    }
    ss = block_sum(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)D + eps);
    for (int d = threadIdx.x; d < D; d += blockDim.x) orow[d] = xr[d] * r * w[d];
}

extern "C" cudaError_t li_cuda_add_rmsnorm(cudaStream_t st, float *out, float *x, const float *y,
                                           const float *w, int T, int D, float eps) {
    if (T <= 0 || D <= 0) return cudaSuccess;
    return launch_pdl(add_rmsnorm_kernel, dim3(T), dim3(rmsnorm_block(D)), 0, st, out, x, y, w, D,
                      eps);
}

// ---- add, swiglu ---------------------------------------------------------------------------

__global__ void add_kernel(float *x, const float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

__global__ void add_kernel4(float4 *x, const float4 *y, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 a = x[i];
        const float4 b = y[i];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        x[i] = a;
    }
}

static bool aligned16(const void *a, const void *b, const void *c) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

// float4 when every pointer is 16-byte aligned (elementwise: ~2x the scalar kernels' bandwidth
// on the H200 for the LLaDA FFN's (T, 12288) arrays), the scalar kernels for the tail.
extern "C" cudaError_t li_cuda_add(cudaStream_t st, float *x, const float *y, int64_t n) {
    if (n <= 0) return cudaSuccess;
    int64_t done = 0;
    if (aligned16(x, y, x) && n >= 4) {
        done = n / 4 * 4;
        add_kernel4<<<grid_for(n / 4, 256), 256, 0, st>>>((float4 *)x, (const float4 *)y, n / 4);
    }
    if (done < n) add_kernel<<<grid_for(n - done, 256), 256, 0, st>>>(x + done, y + done, n - done);
    return cudaGetLastError();
}

// One thread per element of x (T, N); b (N) is read T times but stays in L2 (N * 4 bytes).
__global__ void add_bias_kernel(float *x, const float *b, int64_t n, int N) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] += b[i % N];
}

// Bytes: 8 T N (x read and written); a projection's T x N output, 10-100x smaller than the GEMM
// that makes it, so one plain grid-stride pass is enough.
extern "C" cudaError_t li_cuda_add_bias(cudaStream_t st, float *x, const float *b, int T, int N) {
    int64_t n = (int64_t)T * N;
    if (n <= 0) return cudaSuccess;
    add_bias_kernel<<<grid_for(n, 256), 256, 0, st>>>(x, b, n, N);
    return cudaGetLastError();
}

__global__ void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
    pdl_trigger();  // a plain launch (the unaligned tail): lets the GEMV after it start early
    pdl_wait();     // a no-op here; kept so that a PDL launch of this kernel stays correct
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = silu_mul(gate[i], up[i]);
}

__global__ void swiglu_kernel4(float4 *out, const float4 *gate, const float4 *up, int64_t n4) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float4 g = gate[i], u = up[i];
        out[i] = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z),
                             silu_mul(g.w, u.w));
    }
}

extern "C" cudaError_t li_cuda_swiglu(cudaStream_t st, float *out, const float *gate,
                                      const float *up, int64_t n) {
    if (n <= 0) return cudaSuccess;
    int64_t done = 0;
    if (aligned16(out, gate, up) && n >= 4) {
        done = n / 4 * 4;
        cudaError_t e = launch_pdl(swiglu_kernel4, dim3(grid_for(n / 4, 256)), dim3(256), 0, st,
                                   (float4 *)out, (const float4 *)gate, (const float4 *)up, n / 4);
        if (e != cudaSuccess) return e;
    }
    if (done < n)
        swiglu_kernel<<<grid_for(n - done, 256), 256, 0, st>>>(out + done, gate + done, up + done,
                                                               n - done);
    return cudaGetLastError();
}

// out (T, F) = bf16(silu(gate) * up), rows of gate and up ld apart (the fused gate|up GEMM's
// output: ld = 2F): the down GEMM's input made where the FFN's product is (the same silu_mul,
// then the rounding f32_to_bf16 applies). 16-byte loads of gate and up, 8-byte stores when F, ld
// and the pointers allow: 10 bytes per element, ~25 µs for LLaDA's (1024, 12288) at copy rate.
__global__ void swiglu_bf16_kernel4(uint2 *out, const float4 *gate, const float4 *up, int64_t F4,
                                    int64_t ld4, int64_t n4) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / F4, j = t * ld4 + (i - t * F4);
        const float4 g = gate[j], u = up[j];
        __nv_bfloat162 a = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
        __nv_bfloat162 b = __floats2bfloat162_rn(silu_mul(g.z, u.z), silu_mul(g.w, u.w));
        uint2 o;
        o.x = *(const unsigned *)&a;
        o.y = *(const unsigned *)&b;
        out[i] = o;
    }
}

__global__ void swiglu_bf16_kernel(__nv_bfloat16 *out, const float *gate, const float *up,
                                   int64_t F, int64_t ld, int64_t n) {
    pdl_trigger();
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / F, j = t * ld + (i - t * F);
        out[i] = __float2bfloat16_rn(silu_mul(gate[j], up[j]));
    }
}

extern "C" cudaError_t li_cuda_swiglu_bf16(cudaStream_t st, uint16_t *out, const float *gate,
                                           const float *up, int T, int F, int64_t ld) {
    const int64_t n = (int64_t)T * F;
    if (n <= 0) return cudaSuccess;
    if (aligned16(gate, up, gate) && ((uintptr_t)out & 7) == 0 && F % 4 == 0 && ld % 4 == 0)
        return launch_pdl(swiglu_bf16_kernel4, dim3(grid_for(n / 4, 256)), dim3(256), 0, st,
                          (uint2 *)out, (const float4 *)gate, (const float4 *)up,
                          (int64_t)F / 4, ld / 4, n / 4);
    return launch_pdl(swiglu_bf16_kernel, dim3(grid_for(n, 256)), dim3(256), 0, st,
                      (__nv_bfloat16 *)out, gate, up, (int64_t)F, ld, n);
}

// ---- programmatic dependent launches (cuda-device.cuh launch_pdl) ----------------------------

extern "C" int li_cuda_pdl_on = 1;

extern "C" void li_cuda_set_pdl(int on) { li_cuda_pdl_on = on != 0; }

// ---- softmax -------------------------------------------------------------------------------

extern "C" cudaError_t li_cuda_softmax(cudaStream_t st, float *x, int rows, int n) {
    if (rows <= 0 || n <= 0) return cudaSuccess;
    int block = n >= 4096 ? 1024 : n >= 256 ? 256 : 64;
    softmax_kernel<float><<<rows, block, 0, st>>>(x, x, n);  // cuda-device.cuh
    return cudaGetLastError();
}

// ---- rope ----------------------------------------------------------------------------------

// cs[p], cs[LI_CUDA_ROPE_MAX_PAIRS + p] = m cos, m sin of pos * w_p for the row's pairs (the
// block's threads share them; the caller synchronises before reading).
__device__ __forceinline__ void row_cos_sin(float *cs, int32_t pos, int pairs,
                                            const li_cuda_rope_args &r) {
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float c, s;
        rope_sincos((double)pos, r.inv_freq[p], &c, &s);
        cs[p] = c * r.mscale;
        cs[LI_CUDA_ROPE_MAX_PAIRS + p] = s * r.mscale;
    }
}

// (a, b) rotated by (c, s), each product and sum rounded on its own (no FMA contraction: every
// kernel below computes the same bits).
__device__ __forceinline__ void rope_rot(float a, float b, float c, float s, float *ya, float *yb) {
    *ya = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    *yb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// One block per row t: the row's cos / sin (fp64-reduced angle, rope_sincos) computed once per
// pair into shared memory, then every (head, pair) of the row rotated from them —
// a' = m(a cos - b sin), b' = m(a sin + b cos) (HF: q*cos + rotate_half(q)*sin), explicitly
// rounded (no FMA contraction: the f32 and bf16 instances give the same values). The old
// one-thread-per-element kernel recomputed the angle for every head (32x for LLaDA's q) and ran
// at ~1.2 TB/s; this one is a copy. In place (OutT float, out == x) or into bf16 out (rope_bf16:
// the unrotated dims past n_dims are converted too).
template <typename OutT>
__global__ void __launch_bounds__(256) rope_kernel(OutT *out, const float *x, const int32_t *pos,
                                                   int nh, int Dh, const li_cuda_rope_args r) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    __shared__ float cs[2 * LI_CUDA_ROPE_MAX_PAIRS];
    const int pairs = r.n_dims / 2, t = blockIdx.x;
    if (pos) {
        row_cos_sin(cs, pos[t], pairs, r);
        __syncthreads();
    }
    const float *xr = x + (int64_t)t * nh * Dh;
    OutT *orow = out + (int64_t)t * nh * Dh;
    const int rot = pos ? pairs : 0;
    for (int i = threadIdx.x; i < nh * rot; i += blockDim.x) {
        const int h = i / rot, p = i - h * rot;
        int ia, ib;
        rope_pair(r, p, &ia, &ib);
        const float c = cs[p], s = cs[LI_CUDA_ROPE_MAX_PAIRS + p];
        float ya, yb;
        rope_rot(xr[h * Dh + ia], xr[h * Dh + ib], c, s, &ya, &yb);
        store_act(orow, h * Dh + ia, ya);
        store_act(orow, h * Dh + ib, yb);
    }
    if ((const void *)orow == (const void *)xr) return;  // in place: the rest stays as it is
    const int from = pos ? r.n_dims : 0, rest = Dh - from;  // dims not rotated: converted
    for (int i = threadIdx.x; i < nh * rest; i += blockDim.x) {
        const int h = i / rest, d = from + (i - h * rest);
        store_act(orow, h * Dh + d, xr[h * Dh + d]);
    }
}

static cudaError_t rope_check(const li_cuda_rope_args *rope, int Dh) {
    if (rope->n_dims > Dh || rope->n_dims % 2 || rope->n_dims / 2 > LI_CUDA_ROPE_MAX_PAIRS)
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

extern "C" cudaError_t li_cuda_rope(cudaStream_t st, float *x, const int32_t *pos, int T, int nh,
                                    int Dh, const li_cuda_rope_args *rope) {
    cudaError_t e = rope_check(rope, Dh);
    if (e != cudaSuccess || T <= 0 || nh <= 0 || rope->n_dims == 0) return e;
    return launch_pdl(rope_kernel<float>, dim3(T), dim3(256), 0, st, x, (const float *)x, pos, nh,
                      Dh, *rope);
}

extern "C" cudaError_t li_cuda_rope_bf16(cudaStream_t st, uint16_t *out, const float *x,
                                         const int32_t *pos, int T, int nh, int Dh,
                                         const li_cuda_rope_args *rope) {
    if (!pos) return li_cuda_f32_to_bf16(st, out, x, (int64_t)T * nh * Dh);
    cudaError_t e = rope_check(rope, Dh);
    if (e != cudaSuccess || T <= 0 || nh <= 0) return e;
    return launch_pdl(rope_kernel<__nv_bfloat16>, dim3(T), dim3(256), 0, st,
                      (__nv_bfloat16 *)out, x, pos, nh, Dh, *rope);
}

// VEC's 4 consecutive NEOX pairs (p .. p+3 with their partners half a head on) rotated as one.
__device__ __forceinline__ void rot4(const float4 &a, const float4 &b, const float *cs,
                                     int p, float4 &ya, float4 &yb) {
    const float *av = (const float *)&a, *bv = (const float *)&b;
    float *ra = (float *)&ya, *rb = (float *)&yb;
#pragma unroll
    for (int e = 0; e < 4; e++)
        rope_rot(av[e], bv[e], cs[p + e], cs[LI_CUDA_ROPE_MAX_PAIRS + p + e], &ra[e], &rb[e]);
}

__device__ __forceinline__ void store4(float *o, const float4 &y) { *(float4 *)o = y; }
__device__ __forceinline__ void store4(__nv_bfloat16 *o, const float4 &y) {
    __nv_bfloat162 a = __floats2bfloat162_rn(y.x, y.y), b = __floats2bfloat162_rn(y.z, y.w);
    uint2 u;
    u.x = *(const unsigned *)&a;
    u.y = *(const unsigned *)&b;
    *(uint2 *)o = u;
}

// ---- kv_store ------------------------------------------------------------------------------

// Offset of (page, il, is_v, h, slot) in the pool (n_pages, L, 2, Hkv, P, Dh): li_kv_offset.
__device__ __forceinline__ int64_t kv_off(int64_t page, int L, int il, int is_v, int Hkv, int h,
                                          int P, int slot, int Dh) {
    return ((((page * L + il) * 2 + is_v) * Hkv + h) * (int64_t)P + slot) * Dh;
}

// grid (T * Hkv), threads over Dh
template <typename KV>
__global__ void kv_store_kernel(KV *data, int L, int Hkv, int Dh, int P, int il, const float *k,
                                const float *v, const int64_t *slot) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    int t = blockIdx.x / Hkv, h = blockIdx.x % Hkv;
    int64_t sl = slot[t], page = sl / P;
    int off = (int)(sl % P);
    const float *kr = k + ((int64_t)t * Hkv + h) * Dh, *vr = v + ((int64_t)t * Hkv + h) * Dh;
    KV *kd = data + kv_off(page, L, il, 0, Hkv, h, P, off, Dh);
    KV *vd = data + kv_off(page, L, il, 1, Hkv, h, P, off, Dh);
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
        kv_set(kd + d, kr[d]);
        kv_set(vd + d, vr[d]);
    }
}

extern "C" cudaError_t li_cuda_kv_store(cudaStream_t st, void *data, int kv_bf16, int L, int Hkv,
                                        int Dh, int P, int il, const float *k, const float *v,
                                        const int64_t *slot, int T) {
    if (T <= 0) return cudaSuccess;
    int block = Dh >= 128 ? 128 : Dh >= 64 ? 64 : 32;
    if (kv_bf16)
        return launch_pdl(kv_store_kernel<__nv_bfloat16>, dim3((unsigned)T * Hkv), dim3(block), 0,
                          st, (__nv_bfloat16 *)data, L, Hkv, Dh, P, il, k, v, slot);
    return launch_pdl(kv_store_kernel<float>, dim3((unsigned)T * Hkv), dim3(block), 0, st,
                      (float *)data, L, Hkv, Dh, P, il, k, v, slot);
}

// ---- the fused QKV projection's rows: qkv_rope (BF16), qkv_rope_store -----------------------

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z),
                       __fadd_rn(a.w, b.w));
}

// Where qkv_rows_kernel puts row t's k and v heads: dense (T, Hkv, Dh) arrays k, v (slot NULL),
// or the pool k (n_pages, L, 2, Hkv, P, Dh) at layer il and slot[t] (v unused).
template <typename KV> struct qkv_dst {
    KV *k, *v;
    const int64_t *slot;
    int L, P, il;
};

// The fused QKV projection's row t (+ bias, NULL: none) split for attention: the row's cos / sin
// once, then q heads rotated into q (f32), k heads rotated and v heads as they are into dst (KV:
// f32 or bf16, rounded to nearest even) — add_bias_kernel's fp32 add (__fadd_rn), rope_kernel's
// rotation (rope_rot) and kv_store_kernel's store, so the bits of add_bias, rope / rope_bf16 and
// kv_store on separate arrays. One block per row.
// Bytes per row (Llama-3.1-8B: H 32, Hkv 8, Dh 128): reads 4 (H + 2 Hkv) Dh = 24.6 KB (the bias
// stays in L2), writes 4 H Dh + 2 * 2 Hkv Dh = 20.5 KB into a bf16 pool, where the unfused
// add_bias-free path (rope q, rope k in place, kv_store reading f32 k and v) moves 53 KB in three
// launches. At T = 2048, 92 MB: ~31 us at 3 TB/s. The dense split (LLaDA-8B's row: reads 48 KB,
// writes 32 KB) ran at 2.2 TB/s before VEC; this loop should reach ~70-80% of 3 TB/s on the H100
// with the pool too (its rows are contiguous Dh runs; not measured yet). VEC (NEOX pairs over the
// whole head, Dh a multiple of 8, aligned rows): a thread takes 4 consecutive pairs of a head as
// two 16-byte loads, a quarter of the requests.
template <typename KV, bool VEC>
__global__ void __launch_bounds__(256)
    qkv_rows_kernel(float *__restrict__ q, const qkv_dst<KV> dst, const float *__restrict__ qkv,
                    const float *__restrict__ bias, const int32_t *pos, int H, int Hkv, int Dh,
                    const li_cuda_rope_args r) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    __shared__ float cs[2 * LI_CUDA_ROPE_MAX_PAIRS];
    const int pairs = r.n_dims / 2, t = blockIdx.x;
    row_cos_sin(cs, pos[t], pairs, r);
    __syncthreads();
    const int64_t HD = (int64_t)H * Dh, KD = (int64_t)Hkv * Dh;
    const float *row = qkv + (int64_t)t * (HD + 2 * KD);
    float *qr = q + (int64_t)t * HD;
    KV *kr, *vr;  // head 0's k and v rows; head h's are hs elements on
    int64_t hs = Dh;
    if (dst.slot) {
        const int64_t sl = dst.slot[t], page = sl / dst.P;
        const int off = (int)(sl % dst.P);
        kr = dst.k + kv_off(page, dst.L, dst.il, 0, Hkv, 0, dst.P, off, Dh);
        vr = dst.k + kv_off(page, dst.L, dst.il, 1, Hkv, 0, dst.P, off, Dh);
        hs = (int64_t)dst.P * Dh;
    } else {
        kr = dst.k + (int64_t)t * KD;
        vr = dst.v + (int64_t)t * KD;
    }
    if constexpr (VEC) {
        const int units = pairs / 4;  // 4-pair units per head (n_dims = Dh)
#pragma unroll 2
        for (int i = threadIdx.x; i < (H + Hkv) * units; i += blockDim.x) {
            const int hh = i / units, p = (i - hh * units) * 4;
            const int64_t o = (int64_t)hh * Dh;  // q heads, then k heads
            float4 a = *(const float4 *)(row + o + p), b = *(const float4 *)(row + o + pairs + p);
            if (bias) {
                a = add4(a, *(const float4 *)(bias + o + p));
                b = add4(b, *(const float4 *)(bias + o + pairs + p));
            }
            float4 ya, yb;
            rot4(a, b, cs, p, ya, yb);
            if (hh < H) {
                store4(qr + o + p, ya);
                store4(qr + o + pairs + p, yb);
            } else {
                store4(kr + (hh - H) * hs + p, ya);
                store4(kr + (hh - H) * hs + pairs + p, yb);
            }
        }
#pragma unroll 2
        for (int64_t i = 4 * threadIdx.x; i < KD; i += 4 * blockDim.x) {
            const int64_t h = i / Dh, o = HD + KD + i;
            float4 x = *(const float4 *)(row + o);
            if (bias) x = add4(x, *(const float4 *)(bias + o));
            store4(vr + h * hs + (i - h * Dh), x);
        }
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < (H + Hkv) * pairs; i += blockDim.x) {  // rotated pairs
            const int hh = i / pairs, p = i - hh * pairs;
            int ia, ib;
            rope_pair(r, p, &ia, &ib);
            const int64_t o = (int64_t)hh * Dh;
            float a = row[o + ia], b = row[o + ib], ya, yb;
            if (bias) {
                a = __fadd_rn(a, bias[o + ia]);
                b = __fadd_rn(b, bias[o + ib]);
            }
            rope_rot(a, b, cs[p], cs[LI_CUDA_ROPE_MAX_PAIRS + p], &ya, &yb);
            if (hh < H) {
                qr[o + ia] = ya;
                qr[o + ib] = yb;
            } else {
                store_act(kr, (hh - H) * hs + ia, ya);
                store_act(kr, (hh - H) * hs + ib, yb);
            }
        }
        const int rest = Dh - r.n_dims;  // dims past n_dims of q and k: the bias only
        for (int i = threadIdx.x; i < (H + Hkv) * rest; i += blockDim.x) {
            const int hh = i / rest, d = r.n_dims + (i - hh * rest);
            const int64_t o = (int64_t)hh * Dh + d;
            const float x = bias ? __fadd_rn(row[o], bias[o]) : row[o];
            if (hh < H)
                qr[o] = x;
            else
                store_act(kr, (hh - H) * hs + d, x);
        }
#pragma unroll 4
        for (int64_t i = threadIdx.x; i < KD; i += blockDim.x) {
            const int64_t h = i / Dh, o = HD + KD + i;
            store_act(vr, h * hs + (i - h * Dh), bias ? __fadd_rn(row[o], bias[o]) : row[o]);
        }
    }
}

// The vector form where the rows and dst allow it (f32 dst: 16-byte stores, bf16: 8-byte).
template <typename KV>
static cudaError_t qkv_rows_launch(cudaStream_t st, float *q, const qkv_dst<KV> &dst,
                                   const float *qkv, const float *bias, const int32_t *pos, int T,
                                   int H, int Hkv, int Dh, const li_cuda_rope_args *rope) {
    cudaError_t e = rope_check(rope, Dh);
    if (e != cudaSuccess || T <= 0) return e;
    const uintptr_t kv_align = sizeof(KV) == 4 ? 15 : 7;
    const bool vec = !rope->gptj && rope->n_dims == Dh && Dh % 8 == 0 &&
                     (((uintptr_t)q | (uintptr_t)qkv | (uintptr_t)bias) & 15) == 0 &&
                     (((uintptr_t)dst.k | (uintptr_t)dst.v) & kv_align) == 0;
    return launch_pdl(vec ? qkv_rows_kernel<KV, true> : qkv_rows_kernel<KV, false>, dim3(T),
                      dim3(256), 0, st, q, dst, qkv, bias, pos, H, Hkv, Dh, *rope);
}

extern "C" cudaError_t li_cuda_qkv_bf16(cudaStream_t st, float *q, uint16_t *k, uint16_t *v,
                                        const float *qkv, const int32_t *pos, int T, int H,
                                        int Hkv, int Dh, const li_cuda_rope_args *rope) {
    const qkv_dst<__nv_bfloat16> dst = {(__nv_bfloat16 *)k, (__nv_bfloat16 *)v, NULL, 0, 0, 0};
    return qkv_rows_launch(st, q, dst, qkv, NULL, pos, T, H, Hkv, Dh, rope);
}

extern "C" cudaError_t li_cuda_qkv_rope_store(cudaStream_t st, float *q, void *data, int kv_bf16,
                                              int L, int Hkv, int Dh, int P, int il,
                                              const float *qkv, const float *bias,
                                              const int32_t *pos, const int64_t *slot, int T, int H,
                                              const li_cuda_rope_args *rope) {
    if (kv_bf16) {
        const qkv_dst<__nv_bfloat16> dst = {(__nv_bfloat16 *)data, NULL, slot, L, P, il};
        return qkv_rows_launch(st, q, dst, qkv, bias, pos, T, H, Hkv, Dh, rope);
    }
    const qkv_dst<float> dst = {(float *)data, NULL, slot, L, P, il};
    return qkv_rows_launch(st, q, dst, qkv, bias, pos, T, H, Hkv, Dh, rope);
}

// ---- kv_copy_rotate ------------------------------------------------------------------------

// grid (L * Hkv * count): one K row and one V row per block. K pairs rotated by R_delta
// (magnitude 1: the stored K already carries mscale), the rest of K and all of V copied. A bf16
// pool's rotated K is rounded again (copy mode's second rounding).
template <typename KV>
__global__ void kv_copy_rotate_kernel(KV *data, int L, int Hkv, int Dh, int P, int64_t src,
                                      int64_t dst, int count, int64_t delta,
                                      const li_cuda_rope_args r) {
    int s = blockIdx.x % count, h = (blockIdx.x / count) % Hkv, il = blockIdx.x / (count * Hkv);
    const KV *ks = data + kv_off(src, L, il, 0, Hkv, h, P, s, Dh);
    const KV *vs = data + kv_off(src, L, il, 1, Hkv, h, P, s, Dh);
    KV *kd = data + kv_off(dst, L, il, 0, Hkv, h, P, s, Dh);
    KV *vd = data + kv_off(dst, L, il, 1, Hkv, h, P, s, Dh);
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) vd[d] = vs[d];
    int pairs = delta != 0 ? r.n_dims / 2 : 0;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float c, sn;
        rope_sincos((double)delta, r.inv_freq[p], &c, &sn);
        int ia, ib;
        rope_pair(r, p, &ia, &ib);
        float a = kv_get(ks + ia), b = kv_get(ks + ib);
        kv_set(kd + ia, a * c - b * sn);
        kv_set(kd + ib, b * c + a * sn);
    }
    for (int d = pairs * 2 + threadIdx.x; d < Dh; d += blockDim.x) kd[d] = ks[d];
}

extern "C" cudaError_t li_cuda_kv_copy_rotate(cudaStream_t st, void *data, int kv_bf16, int L,
                                              int Hkv, int Dh, int P, int64_t src, int64_t dst,
                                              int count, int64_t delta,
                                              const li_cuda_rope_args *rope) {
    if (count <= 0) return cudaSuccess;
    if (src == dst || count > P) return cudaErrorInvalidValue;
    if (delta != 0 && (rope->n_dims > Dh || rope->n_dims % 2)) return cudaErrorInvalidValue;
    int64_t blocks = (int64_t)L * Hkv * count;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    int block = Dh >= 128 ? 128 : Dh >= 64 ? 64 : 32;
    if (kv_bf16)
        kv_copy_rotate_kernel<<<(unsigned)blocks, block, 0, st>>>(
            (__nv_bfloat16 *)data, L, Hkv, Dh, P, src, dst, count, delta, *rope);
    else
        kv_copy_rotate_kernel<<<(unsigned)blocks, block, 0, st>>>((float *)data, L, Hkv, Dh, P,
                                                                  src, dst, count, delta, *rope);
    return cudaGetLastError();
}

// ---- conversion and fill -------------------------------------------------------------------

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

// 4 elements per thread: 16-byte loads, 8-byte stores. Every GEMM input goes through this (6
// bytes per element): the scalar kernel above measured ~1.6 TB/s in a LLaDA step (9 % of it);
// this one should run near the copy ceiling.
__global__ void f32_to_bf16_kernel4(uint2 *dst, const float4 *src, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = src[i];
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        uint2 o;
        o.x = *(const unsigned *)&a;
        o.y = *(const unsigned *)&b;
        dst[i] = o;
    }
}

extern "C" cudaError_t li_cuda_f32_to_bf16(cudaStream_t st, uint16_t *dst, const float *src,
                                           int64_t n) {
    if (n <= 0) return cudaSuccess;
    if (((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 7) == 0) {
        const int64_t n4 = n / 4;
        if (n4 > 0)
            f32_to_bf16_kernel4<<<grid_for(n4, 256), 256, 0, st>>>((uint2 *)dst,
                                                                    (const float4 *)src, n4);
        if (n % 4)
            f32_to_bf16_kernel<<<1, 32, 0, st>>>((__nv_bfloat16 *)dst + 4 * n4, src + 4 * n4,
                                                  n % 4);
    } else {
        f32_to_bf16_kernel<<<grid_for(n, 256), 256, 0, st>>>((__nv_bfloat16 *)dst, src, n);
    }
    return cudaGetLastError();
}

// splitmix64 of (seed, i): a stateless generator, so the fill is the same for any launch shape.
__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(float *x, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = splitmix64(seed * 0x632be59bd9b4e019ull + (uint64_t)i);
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
        x[i] = (2.0f * u - 1.0f) * scale;
    }
}

extern "C" cudaError_t li_cuda_fill_uniform(cudaStream_t st, float *x, int64_t n, uint64_t seed,
                                            float scale) {
    if (n <= 0) return cudaSuccess;
    fill_uniform_kernel<<<grid_for(n, 256), 256, 0, st>>>(x, n, seed, scale);
    return cudaGetLastError();
}

// Same values as fill_uniform (scale a) plus mean, rounded to bf16: synthetic weights in place.
__global__ void fill_uniform_bf16_kernel(__nv_bfloat16 *x, int64_t n, uint64_t seed, float a,
                                         float mean) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = splitmix64(seed * 0x632be59bd9b4e019ull + (uint64_t)i);
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        x[i] = __float2bfloat16_rn(mean + (2.0f * u - 1.0f) * a);
    }
}

__global__ void fill_f32_kernel(float *x, int64_t n, float v) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = v;
}

extern "C" cudaError_t li_cuda_fill_f32(cudaStream_t st, float *x, int64_t n, float v) {
    if (n <= 0) return cudaSuccess;
    fill_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(x, n, v);
    return cudaGetLastError();
}

__global__ void transpose_f32_kernel(float *dst, const float *src, int rows, int cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (int64_t)rows * cols;
         i += (int64_t)gridDim.x * blockDim.x) {
        int r = (int)(i / cols), c = (int)(i % cols);
        dst[(int64_t)c * rows + r] = src[i];
    }
}

extern "C" cudaError_t li_cuda_transpose_f32(cudaStream_t st, float *dst, const float *src,
                                             int rows, int cols) {
    int64_t n = (int64_t)rows * cols;
    if (n <= 0) return cudaSuccess;
    transpose_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(dst, src, rows, cols);
    return cudaGetLastError();
}

__global__ void add_scalar_kernel(float *x, int64_t n, float c) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] += c;
}

extern "C" cudaError_t li_cuda_fill_random(cudaStream_t st, void *x, int bf16, int64_t n,
                                           uint64_t seed, float a, float mean) {
    if (n <= 0) return cudaSuccess;
    if (bf16) {
        fill_uniform_bf16_kernel<<<grid_for(n, 256), 256, 0, st>>>((__nv_bfloat16 *)x, n, seed, a,
                                                                   mean);
        return cudaGetLastError();
    }
    fill_uniform_kernel<<<grid_for(n, 256), 256, 0, st>>>((float *)x, n, seed, a);
    if (mean != 0.0f) add_scalar_kernel<<<grid_for(n, 256), 256, 0, st>>>((float *)x, n, mean);
    return cudaGetLastError();
}
