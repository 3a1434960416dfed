// dev/cuda/softmax.cu — workbench for the row softmax that turns attention scores into bf16
// probabilities: P (rows, n) bf16 = softmax of S (rows, n) f32, one row per block. llm.c's pattern:
// a CPU reference, numbered kernel versions, every version validated at every size, then timed
// with CUDA events against the copy ceiling.
//
//   v1  three passes over the row in global memory (max, sum of exp, normalised write): the
//       general kernel, any n.
//   v2  the row held in registers (VPT values per thread, n <= 16 x 256): one read of S, one exp
//       per score.
//
// Why it is here and not in src/: both served LLaDA's dense attention through cuBLASLt (S = Q Kᵀ,
// this softmax, O = P V), which lost its A/B to the fused flash kernel on the H200 (a LLaDA-8B
// step at canvas 1024: 43.78 ms through the GEMMs against 42.07 ms) and was removed; v1 measured
// 1.5 TB/s there (0.125 ms per layer, 128 MB of scores), v2 was written to approach the copy
// ceiling (~4 TB/s of the H200's 4.8). v1 is the engine's own softmax (softmax_kernel in
// src/backend/cuda/cuda-device.cuh; pointwise.cu runs it f32 in place for the sampler), included
// here with a bf16 output, as are its block reductions.
//
// Napkin maths: 4 bytes read + 2 written per score; ceiling = HBM bandwidth (4.8 TB/s on H200).
// Not here: masking, scaling (the GEMM applied the scale), anything the engine links.
// Build: make CUDA=1 dev-cuda (or make -C dev/cuda); run: build/release-cuda/dev-cuda/softmax
// [version] on a Hopper GPU. Exits non-zero when a version fails validation.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda-device.cuh"

#define CHECK_CUDA(x)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

// ---- v2: the row in registers ----------------------------------------------------------------------

template <int VPT>
__global__ void __launch_bounds__(256) softmax_v2(__nv_bfloat16 *p, const float *s, int n) {
    __shared__ float sh[32];
    const float *sr = s + (int64_t)blockIdx.x * n;
    __nv_bfloat16 *pr = p + (int64_t)blockIdx.x * n;
    float v[VPT];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int i = threadIdx.x + j * 256;
        v[j] = i < n ? sr[i] : -INFINITY;
        mx = fmaxf(mx, v[j]);
    }
    mx = block_max(mx, sh);
    float z = 0;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        v[j] = expf(v[j] - mx);  // -inf (past n) -> 0
        z += v[j];
    }
    z = block_sum(z, sh);
    const float rz = 1.0f / z;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        int i = threadIdx.x + j * 256;
        if (i < n) pr[i] = __float2bfloat16_rn(v[j] * rz);
    }
}

// Launches version `ver` over rows x n; false when the version does not serve n.
static bool launch(int ver, __nv_bfloat16 *p, const float *s, int rows, int n) {
    if (ver == 1) {  // the engine's softmax_kernel (cuda-device.cuh)
        softmax_kernel<<<rows, n >= 4096 ? 1024 : n >= 256 ? 256 : 64>>>(p, s, n);
    } else if (ver == 2) {
        if (n <= 4 * 256) softmax_v2<4><<<rows, 256>>>(p, s, n);
        else if (n <= 8 * 256) softmax_v2<8><<<rows, 256>>>(p, s, n);
        else if (n <= 16 * 256) softmax_v2<16><<<rows, 256>>>(p, s, n);
        else return false;
    } else {
        return false;
    }
    CHECK_CUDA(cudaGetLastError());
    return true;
}

// ---- CPU reference -----------------------------------------------------------------------------

static float bf16_to_f32(__nv_bfloat16 b) {
    uint16_t u;
    memcpy(&u, &b, 2);
    uint32_t w = (uint32_t)u << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

// fp64 softmax of each row, compared with the GPU's bf16: the GPU rounds its fp32 value once, so
// a correct kernel is within one bf16 rounding (2^-8 relative) plus fp32's error in the sum
// (~n 2^-24, far smaller); 2^-7 leaves a factor 2.
static bool validate(const __nv_bfloat16 *got, const float *s, int rows, int n, double *worst) {
    *worst = 0;
    for (int r = 0; r < rows; r++) {
        const float *sr = s + (size_t)r * n;
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, sr[i]);
        for (int i = 0; i < n; i++) z += exp(sr[i] - mx);
        for (int i = 0; i < n; i++) {
            double want = exp(sr[i] - mx) / z, g = bf16_to_f32(got[(size_t)r * n + i]);
            double rel = fabs(g - want) / (want > 1e-30 ? want : 1e-30);
            if (rel > *worst) *worst = rel;
            if (rel > 1.0 / 128 && fabs(g - want) > 1e-38) return false;
        }
    }
    return true;
}

int main(int argc, char **argv) {
    int only = argc > 1 ? atoi(argv[1]) : 0;  // 0: every version
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP: softmax workbench: no GPU\n");
        return 0;
    }
    // (rows, n): odd lengths, the register kernel's bounds, LLaDA-8B's scores at canvas 1024
    // (32 heads x 1024 rows of 1024 keys), a vocabulary-sized row for v1
    const int sizes[][2] = {{1, 1}, {7, 33}, {64, 1000}, {128, 1024}, {64, 2049},
                            {32, 4096}, {32768, 1024}, {16384, 2048}, {8, 152064}};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    size_t max_elems = 0;
    for (int k = 0; k < n_sizes; k++) {
        size_t e = (size_t)sizes[k][0] * sizes[k][1];
        if (e > max_elems) max_elems = e;
    }
    float *hs = (float *)malloc(max_elems * 4);
    __nv_bfloat16 *hp = (__nv_bfloat16 *)malloc(max_elems * 2);
    float *ds;
    __nv_bfloat16 *dp;
    CHECK_CUDA(cudaMalloc(&ds, max_elems * 4));
    CHECK_CUDA(cudaMalloc(&dp, max_elems * 2));
    uint64_t st = 12345;  // fixed seed: scores in [-8, 8), like scaled attention logits
    for (size_t i = 0; i < max_elems; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        hs[i] = (float)((st >> 11) * (1.0 / 9007199254740992.0) * 16.0 - 8.0);
    }
    CHECK_CUDA(cudaMemcpy(ds, hs, max_elems * 4, cudaMemcpyHostToDevice));
    int failed = 0;
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    printf("%-3s %7s %7s %10s %9s %7s %s\n", "ver", "rows", "n", "ms", "GB/s", "% 4.8T", "max rel err");
    for (int ver = 1; ver <= 2; ver++) {
        if (only && ver != only) continue;
        for (int k = 0; k < n_sizes; k++) {
            const int rows = sizes[k][0], n = sizes[k][1];
            const size_t elems = (size_t)rows * n;
            CHECK_CUDA(cudaMemset(dp, 0xff, elems * 2));  // NaN bits: a missed write shows
            if (!launch(ver, dp, ds, rows, n)) continue;
            CHECK_CUDA(cudaMemcpy(hp, dp, elems * 2, cudaMemcpyDeviceToHost));
            double worst;
            if (!validate(hp, hs, rows, n, &worst)) {
                printf("v%d  %7d %7d FAIL: worst relative error %.3g\n", ver, rows, n, worst);
                failed++;
                continue;
            }
            const int iters = 20;
            launch(ver, dp, ds, rows, n);  // warm-up
            CHECK_CUDA(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) launch(ver, dp, ds, rows, n);
            CHECK_CUDA(cudaEventRecord(e1));
            CHECK_CUDA(cudaEventSynchronize(e1));
            float ms = 0;
            CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            ms /= iters;
            const double gbs = elems * 6.0 / (ms * 1e-3) / 1e9;
            printf("v%d  %7d %7d %10.4f %9.1f %6.1f%% %.3g\n", ver, rows, n, ms, gbs,
                   100 * gbs / 4800, worst);
        }
    }
    cudaFree(ds);
    cudaFree(dp);
    free(hs);
    free(hp);
    printf("%s\n", failed ? "FAIL" : "PASS: every version validated at every size it serves");
    return failed ? 1 : 0;
}
