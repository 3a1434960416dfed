// cuda-device.cuh — device-side helpers shared by the CUDA kernels (C++ only, never included by
// C files): block reductions and the RoPE rotation of one pair; page-word.h for the page table.
#ifndef LI_CUDA_DEVICE_CUH
#define LI_CUDA_DEVICE_CUH

#include <math.h>
#include <stdlib.h>

#include <cuda_bf16.h>

#include "../page-word.h"
#include "cuda-common.cuh"

// ---- KV pool elements: f32 or bf16 (backend.h li_kv_storage) ----------------------------------
// Kernels that touch the pool are templates over its element type KV (float or __nv_bfloat16);
// they compute in f32 and store with round-to-nearest-even, as the CPU's li_f32_to_bf16.
__device__ __forceinline__ float kv_get(const float *p) { return *p; }
__device__ __forceinline__ float kv_get(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void kv_set(float *p, float x) { *p = x; }
__device__ __forceinline__ void kv_set(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
// Elements [0, 4) of p (16-byte aligned for f32, 8-byte for bf16), read-only path.
__device__ __forceinline__ float4 kv_get4(const float *p) { return __ldg((const float4 *)p); }
__device__ __forceinline__ float4 kv_get4(const __nv_bfloat16 *p) {
    const uint2 u = __ldg((const uint2 *)p);
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
    const float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

// Sum over the block; every thread gets the result. `sh` holds >= 32 floats of shared memory and
// is reused, so two calls in a row need a __syncthreads() between them (done here at the end).
__device__ __forceinline__ float block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    return v;
}

// Row softmax, one block per row of x (rows, n): max, fp32 sum of exp(x - max), then the
// normalised write to out, f32 or bf16 (kv_set) (exp twice rather than a row-sized buffer: n is up
// to the vocabulary). out may alias x. The engine's (pointwise.cu li_cuda_softmax) in f32; the
// workbench's v1 (dev/cuda/softmax.cu) in bf16.
template <typename T> __global__ void softmax_kernel(T *out, const float *x, int n) {
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    T *orow = out + (int64_t)blockIdx.x * n;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, xr[i]);
    mx = block_max(mx, sh);
    float z = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) z += expf(xr[i] - mx);
    z = block_sum(z, sh);
    float rz = 1.0f / z;
    for (int i = threadIdx.x; i < n; i += blockDim.x) kv_set(orow + i, expf(xr[i] - mx) * rz);
}

// Within a warp: the largest key and, among equal keys, the lowest index, to every lane.
template <typename K> __device__ __forceinline__ void warp_argmax(K &v, int &i) {
    for (int o = 16; o > 0; o >>= 1) {
        const K ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi < i)) {
            v = ov;
            i = oi;
        }
    }
}

// Block-wide argmax of each thread's (v, i) candidate (K: float or double keys): the largest v,
// the lowest i among equals (i = INT_MAX: no candidate). Returns the winning index to every
// thread, 0 when no thread had a candidate (all -inf or NaN), as the CPU's scans do. sv, si:
// >= 32 entries of shared memory.
template <typename K> __device__ __forceinline__ int block_argmax(K v, int i, K *sv, int *si) {
    warp_argmax(v, i);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        sv[warp] = v;
        si[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sv[lane] : (K)-INFINITY;
        i = lane < nw ? si[lane] : 0x7fffffff;
        warp_argmax(v, i);
        if (lane == 0) si[0] = i == 0x7fffffff ? 0 : i;
    }
    __syncthreads();
    const int r = si[0];
    __syncthreads();  // si may be reused right after
    return r;
}

// Element indices (ia, ib) of rotation pair i within a head (see li_rope_layout).
__device__ __forceinline__ void rope_pair(const li_cuda_rope_args &r, int i, int *ia, int *ib) {
    if (r.gptj) {
        *ia = 2 * i;
        *ib = 2 * i + 1;
    } else {
        *ia = i;
        *ib = i + r.n_dims / 2;
    }
}

// cos and sin of pos * w. The angle is formed and reduced to [-pi, pi] in fp64: pos * w reaches
// 2^29 rad for a large page Δ at w = 1, where an fp32 angle would be off by tens of radians. After
// the reduction (error ~ |k| * 2.4e-16 rad, < 1e-7 rad) sincosf is within 2 ulp. The CPU oracle
// uses fp64 cos/sin; the difference is a few fp32 ulp per element.
__device__ __forceinline__ void rope_sincos(double pos, float w, float *c, float *s) {
    const double two_pi = 6.283185307179586476925;
    double ang = pos * (double)w;
    ang -= two_pi * rint(ang * (1.0 / two_pi));
    sincosf((float)ang, s, c);
}

// d (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col): mma.sync.m16n8k16. Fragments (PTX
// ISA), g = lane / 4, c = lane % 4: a[0] = (row g, cols 2c, 2c+1), a[1] = (row g+8, the same),
// a[2] = (row g, cols 2c+8, 2c+9), a[3] = (row g+8, the same); b0 = (rows 2c, 2c+1; col g),
// b1 = (rows 2c+8, 2c+9; col g); d = (row g, cols 2c, 2c+1), (row g+8, the same). The lower
// 16 bits of a register hold the lower column (or row) index.
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (x, y) as bf16x2 (x in the low half), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float x, float y) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *(const uint32_t *)&v;
}

// Programmatic dependent launch (sm_90): pdl_trigger lets the next kernel in the stream, when it
// was launched with cudaLaunchAttributeProgrammaticStreamSerialization, start before this one
// ends; that kernel calls pdl_wait before touching anything this one writes or reads (it may
// read constant data — weights — before). Both are no-ops for plain launches.
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Launches kernel k as a programmatic dependent of the work before it in the stream: its blocks
// may be scheduled once every block of the kernel before has called pdl_trigger, so the launch
// latency and ramp-up hide behind that kernel's tail (a decode step is ~360 small kernels). k must
// call pdl_wait before it touches memory that other kernels write or read. li_cuda_set_pdl(0)
// (LI_CUDA_PDL=0 at the backend's init): plain launches.
extern "C" int li_cuda_pdl_on;  // pointwise.cu
static inline bool pdl_enabled() { return li_cuda_pdl_on != 0; }
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_pdl(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t st, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

// HF's silu(gate) * up, the one expression every SwiGLU kernel uses (swiglu and its FP8-fused
// twin must give the same bits). expf(-g) overflows to inf for g < -88: g / inf = -0, the limit.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

#endif
