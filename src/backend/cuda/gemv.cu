// gemv.cu — y = W x for one activation row (decode at batch 1): the matmul op when T == 1.
//
// Decode reads every weight once per token: the 8B model's 15 GB of bf16 in ~3.5 ms at the H200's
// copy rate (4.3 TB/s measured), so the kernel only has to stream W at full bandwidth. cuBLASLt's
// T = 1 kernels reached 2.1-3.4 TB/s here, plus a separate f32 -> bf16 conversion of x. This one:
// one warp per output row, 16-byte streaming loads of W (8 bf16 per lane; batches of 4 per lane,
// the next batch in flight during this one's FMAs), x read as f32 through the read-only cache
// (every warp of an SM reads the same x), fp32 FMAs, a warp reduction. x is not rounded to bf16:
// closer to the f32 model than the GEMM path. Launched as a programmatic dependent of the kernel
// before it (LI_CUDA_PDL=0: plain launches), so its ramp-up overlaps that kernel's tail.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda-device.cuh"
#include "gemv.cuh"

#define GEMV_WARPS 8
#define GEMV_DEPTH 4  // 16-byte loads of W per lane per batch; two batches in flight

// Launched as a programmatic dependent (li_cuda_gemv_bf16): the first batch of W, which no kernel
// writes, is loaded before pdl_wait, so a decode layer's GEMV fills the GPU and starts streaming
// while the kernel before it (the norm, SwiGLU or attention that makes x) finishes.
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_kernel(float *__restrict__ y, const uint4 *__restrict__ W,
                     const float4 *__restrict__ x, int N, int K8) {
    pdl_trigger();
    const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const uint4 *w = W + (size_t)row * K8;
    constexpr int STEP = 32 * GEMV_DEPTH;
    uint4 u[GEMV_DEPTH];
#pragma unroll
    for (int j = 0; j < GEMV_DEPTH; j++) {
        const int i = lane + 32 * j;
        u[j] = i < K8 ? __ldcs(w + i) : make_uint4(0, 0, 0, 0);  // streamed: read once per token
    }
    pdl_wait();  // x (and y) belong to the kernels before
    float acc = 0.0f;
    for (int i0 = lane; i0 < K8; i0 += STEP) {
        uint4 nu[GEMV_DEPTH];  // the next batch in flight during this one's FMAs
#pragma unroll
        for (int j = 0; j < GEMV_DEPTH; j++) {
            const int i = i0 + STEP + 32 * j;
            nu[j] = i < K8 ? __ldcs(w + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < GEMV_DEPTH; j++) {
            const int i = i0 + 32 * j;
            if (i >= K8) break;
            const float4 xa = __ldg(x + 2 * i), xb = __ldg(x + 2 * i + 1);
            const float2 w0 = __bfloat1622float2(*(const __nv_bfloat162 *)&u[j].x);
            const float2 w1 = __bfloat1622float2(*(const __nv_bfloat162 *)&u[j].y);
            const float2 w2 = __bfloat1622float2(*(const __nv_bfloat162 *)&u[j].z);
            const float2 w3 = __bfloat1622float2(*(const __nv_bfloat162 *)&u[j].w);
            acc = fmaf(w0.x, xa.x, acc);
            acc = fmaf(w0.y, xa.y, acc);
            acc = fmaf(w1.x, xa.z, acc);
            acc = fmaf(w1.y, xa.w, acc);
            acc = fmaf(w2.x, xb.x, acc);
            acc = fmaf(w2.y, xb.y, acc);
            acc = fmaf(w3.x, xb.z, acc);
            acc = fmaf(w3.y, xb.w, acc);
        }
#pragma unroll
        for (int j = 0; j < GEMV_DEPTH; j++) u[j] = nu[j];
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[row] = acc;
}

extern "C" int li_cuda_gemv_ok(int T, int64_t K, const void *W, const void *x) {
    return T == 1 && K % 8 == 0 && K / 8 <= 0x7fffffff && ((uintptr_t)W & 15) == 0 &&
           ((uintptr_t)x & 15) == 0;
}

extern "C" cudaError_t li_cuda_gemv_bf16(cudaStream_t st, float *y, const void *W, const float *x,
                                         int64_t N, int64_t K) {
    if (N <= 0) return cudaSuccess;
    return launch_pdl(gemv_bf16_kernel, dim3((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS)),
                      dim3(GEMV_WARPS * 32), 0, st, y, (const uint4 *)W, (const float4 *)x, (int)N,
                      (int)(K / 8));
}
