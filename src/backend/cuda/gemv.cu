// gemv.cu — y = W x for one activation row (decode at batch 1): the matmul op when T == 1.
//
// Decode reads every weight once per token: the 8B model's 15 GB of bf16 in ~3.5 ms at the H200's
// copy rate (4.3 TB/s measured), so the kernel only has to stream W at full bandwidth. cuBLASLt's
// T = 1 kernels reached 2.1-3.4 TB/s here, plus a separate f32 -> bf16 conversion of x. This one:
// one warp per output row, 16-byte streaming loads of W (8 bf16 per lane, 4 loads in flight per
// lane), x read as f32 through the read-only cache (every warp of an SM reads the same x), fp32
// FMAs, a warp reduction. x is not rounded to bf16: closer to the f32 model than the GEMM path.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gemv.cuh"

#define GEMV_WARPS 8

__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_bf16_kernel(float *__restrict__ y, const uint4 *__restrict__ W,
                     const float4 *__restrict__ x, int N, int K8) {
    const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const uint4 *w = W + (size_t)row * K8;
    float acc = 0.0f;
#pragma unroll 4
    for (int i = lane; i < K8; i += 32) {
        uint4 u = __ldcs(w + i);  // streamed: each weight is read once per token
        float4 xa = __ldg(x + 2 * i), xb = __ldg(x + 2 * i + 1);
        float2 w0 = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
        float2 w1 = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
        float2 w2 = __bfloat1622float2(*(const __nv_bfloat162 *)&u.z);
        float2 w3 = __bfloat1622float2(*(const __nv_bfloat162 *)&u.w);
        acc = fmaf(w0.x, xa.x, acc);
        acc = fmaf(w0.y, xa.y, acc);
        acc = fmaf(w1.x, xa.z, acc);
        acc = fmaf(w1.y, xa.w, acc);
        acc = fmaf(w2.x, xb.x, acc);
        acc = fmaf(w2.y, xb.y, acc);
        acc = fmaf(w3.x, xb.z, acc);
        acc = fmaf(w3.y, xb.w, acc);
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
    unsigned blocks = (unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS);
    gemv_bf16_kernel<<<blocks, GEMV_WARPS * 32, 0, st>>>(y, (const uint4 *)W, (const float4 *)x,
                                                          (int)N, (int)(K / 8));
    return cudaGetLastError();
}
