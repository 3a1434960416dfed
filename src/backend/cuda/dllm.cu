// dllm.cu — the diffusion / FP8 ops of the op table on the GPU (LLaDA, DESIGN.md §4): correct
// first versions, not tuned.
//   flash_attn_tiles: one block per (query row, head); per tile, fp32 scores into shared memory,
//     block max and sum, o = a o + Σ p v (one thread per output dim). The oracle keeps fp64 inside
//     a tile; both store the state in fp32 between tiles.
//   fp8_quant_rows: one block per (row, 128-group); bit-exact with li_f32_to_e4m3 / li_fp8_scale
//     (src/core/fp8.c), ported line by line with explicitly rounded intrinsics.
//   matmul_fp8: one thread per output, groups in ascending order, S_g in fp64 (exact), then
//     acc = acc + ((float)S_g * sa) * ws with __fmul_rn / __fadd_rn so that nvcc cannot contract
//     them into an FMA: bit-identical to the CPU. This is a CUDA-core loop at a few TFLOP/s; the
//     fast version is a wgmma FP8 GEMM with per-group promotion (DeepGEMM-style), whose fp32
//     partial sums differ from this order — backend.h's bit-exact contract would have to allow it.
// Tested by tests/gpu/gpu-check.c against ops-ref.c (bit-exact where backend.h says so).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda-device.cuh"
#include "dllm.cuh"

#define LI_FP8_GROUP_ 128  // LI_FP8_GROUP (core.h)

// ---- flash_attn_tiles / finalize
// ------------------------------------------------------------------

#define FA_MAX_TILE 1024  // LI_FA_MAX_TILE (backend.h)

// grid (nq, H), 128 threads. ps is sized for the largest tile (4 KB) rather than per launch: with a
// 4-byte dynamic array (tile = 1) compute-sanitizer flagged a 12-byte shared read past its end in
// the unrolled loops (results were right); a fixed array keeps every such access in bounds.
__global__ void flash_attn_kernel_tiles(float *o, float *m, float *l, const float *q, int H,
                                        const float *k, const float *v, int nk, int Hkv, int Dh,
                                        int tile, float scale) {
    __shared__ float ps[FA_MAX_TILE];  // (tile) scores, then probabilities
    __shared__ float red[32];
    const int i = blockIdx.x, h = blockIdx.y, hk = h / (H / Hkv);
    const float *qr = q + ((int64_t)i * H + h) * Dh;
    float *orow = o + ((int64_t)i * H + h) * Dh;
    float *mr = m + (int64_t)i * H + h, *lr = l + (int64_t)i * H + h;
    for (int t0 = 0; t0 < nk; t0 += tile) {
        const int t1 = min(t0 + tile, nk);
        float mt = -INFINITY;
        for (int j = t0 + threadIdx.x; j < t1; j += blockDim.x) {
            const float *kr = k + ((int64_t)j * Hkv + hk) * Dh;
            float d = 0.0f;
            for (int x = 0; x < Dh; x++) d = fmaf(qr[x], kr[x], d);
            ps[j - t0] = d * scale;
            mt = fmaxf(mt, d * scale);
        }
        mt = block_max(mt, red);  // its barriers also publish ps
        const float m_old = *mr, m_new = fmaxf(m_old, mt);
        const float a = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        float sum = 0.0f;
        for (int j = t0 + threadIdx.x; j < t1; j += blockDim.x) {
            float p = expf(ps[j - t0] - m_new);
            ps[j - t0] = p;
            sum += p;
        }
        sum = block_sum(sum, red);  // barriers: every p written, every thread read m_old
        for (int x = threadIdx.x; x < Dh; x += blockDim.x) {
            float acc = a * orow[x];
            for (int j = t0; j < t1; j++)
                acc = fmaf(ps[j - t0], v[((int64_t)j * Hkv + hk) * Dh + x], acc);
            orow[x] = acc;
        }
        __syncthreads();  // orow and ps done before the state changes and the next tile
        if (threadIdx.x == 0) {
            *lr = a * *lr + sum;
            *mr = m_new;
        }
        __syncthreads();
    }
}

extern "C" cudaError_t li_cuda_flash_attn_tiles(cudaStream_t st, float *o, float *m, float *l,
                                                const float *q, int nq, int H, const float *k,
                                                const float *v, int nk, int Hkv, int Dh, int tile,
                                                float scale) {
    if (nq <= 0 || nk <= 0) return cudaSuccess;
    if (Hkv <= 0 || H % Hkv || tile < 1 || tile > FA_MAX_TILE || H > 65535)
        return cudaErrorInvalidValue;
    flash_attn_kernel_tiles<<<dim3(nq, H), 128, 0, st>>>(o, m, l, q, H, k, v, nk, Hkv, Dh, tile,
                                                         scale);
    return cudaGetLastError();
}

__global__ void flash_attn_kernel_finalize(float *out, const float *o, const float *l, int64_t n,
                                           int Dh) {
    const int64_t total = n * Dh;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x)
        out[e] = __fdiv_rn(o[e], l[e / Dh]);
}

extern "C" cudaError_t li_cuda_flash_attn_finalize(cudaStream_t st, float *out, const float *o,
                                                   const float *l, int64_t n, int Dh) {
    int64_t total = n * Dh;
    if (total <= 0) return cudaSuccess;
    int64_t blocks = (total + 255) / 256;
    if (blocks > 65535 * 32) blocks = 65535 * 32;
    flash_attn_kernel_finalize<<<(unsigned)blocks, 256, 0, st>>>(out, o, l, n, Dh);
    return cudaGetLastError();
}

// ---- fp8
// -------------------------------------------------------------------------------------------

// li_f32_to_e4m3 (src/core/fp8.c), line by line.
__device__ __forceinline__ uint8_t f32_to_e4m3(float f) {
    uint32_t u = __float_as_uint(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;   // NaN stays NaN
    if (a >= 0x43e00000u) return sign | 0x7e;  // >= 448 (and inf): saturate to 448
    if (a < 0x3c800000u) {                     // below 2^-6: subnormal codes m * 2^-9
        float x = __fmul_rn(fabsf(f), 512.0f);  // exact
        int mm = (int)rintf(x);                 // round to nearest even
        return sign | (uint8_t)mm;
    }
    uint32_t code = ((((a >> 23) - 127u + 7u) << 3) | ((a >> 20) & 7u));
    uint32_t rem = a & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (code & 1u))) code++;
    return sign | (uint8_t)code;
}

// li_e4m3_to_f32: exact.
__device__ __forceinline__ float e4m3_to_f32(uint8_t b) {
    int e = (b >> 3) & 15, mm = b & 7;
    float val;
    if (e == 15 && mm == 7)
        val = __int_as_float(0x7fc00000);
    else if (e == 0)
        val = ldexpf((float)mm, -9);
    else
        val = ldexpf((float)(8 + mm), e - 10);
    return (b & 0x80) ? -val : val;
}

// grid (groups, T), 128 threads: one thread per element of the group.
__global__ void fp8_quant_kernel_rows(uint8_t *q, float *scale, const float *x, int K, int G) {
    __shared__ float red[32];
    const int g = blockIdx.x, t = blockIdx.y;
    const int k = g * LI_FP8_GROUP_ + threadIdx.x;
    const bool in = k < K;
    const float xv = in ? x[(int64_t)t * K + k] : 0.0f;
    const float amax = block_max(fabsf(xv), red);
    // li_fp8_scale: max(amax, LI_FP8_AMAX_MIN) / 448 (fp32 division)
    const float sc = __fdiv_rn(amax > 1e-4f ? amax : 1e-4f, 448.0f);
    if (threadIdx.x == 0) scale[(int64_t)t * G + g] = sc;
    if (in) q[(int64_t)t * K + k] = f32_to_e4m3(__fdiv_rn(xv, sc));
}

// One block per 128 x 128 weight block (grid (blocks per row, block rows)), 256 threads: the
// block's amax (exact in any order), its scale, then every code — li_fp8_weight_quantize's
// arithmetic (llada-load.c), so the codes and scales equal the host's bit for bit.
__global__ void fp8_quant_kernel_weight(uint8_t *q, float *scale, const void *w, int bf16,
                                        int64_t N, int64_t K, int GK) {
    __shared__ float red[32];
    const int64_t n0 = (int64_t)blockIdx.y * LI_FP8_GROUP_, k0 = (int64_t)blockIdx.x * LI_FP8_GROUP_;
    const int64_t n1 = n0 + LI_FP8_GROUP_ < N ? n0 + LI_FP8_GROUP_ : N;
    const int64_t k1 = k0 + LI_FP8_GROUP_ < K ? k0 + LI_FP8_GROUP_ : K;
    const int64_t cols = k1 - k0, n_el = (n1 - n0) * cols;
    auto at = [&](int64_t i) -> float {
        int64_t idx = (n0 + i / cols) * K + k0 + i % cols;
        return bf16 ? __bfloat162float(((const __nv_bfloat16 *)w)[idx]) : ((const float *)w)[idx];
    };
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < n_el; i += blockDim.x) amax = fmaxf(amax, fabsf(at(i)));
    amax = block_max(amax, red);
    const float sc = __fdiv_rn(amax > 1e-4f ? amax : 1e-4f, 448.0f);  // li_fp8_scale
    if (threadIdx.x == 0) scale[(int64_t)blockIdx.y * GK + blockIdx.x] = sc;
    for (int64_t i = threadIdx.x; i < n_el; i += blockDim.x)
        q[(n0 + i / cols) * K + k0 + i % cols] = f32_to_e4m3(__fdiv_rn(at(i), sc));
}

extern "C" cudaError_t li_cuda_fp8_quant_weight(cudaStream_t st, uint8_t *q, float *scale,
                                                const void *w, int bf16, int64_t N, int64_t K) {
    if (N <= 0 || K <= 0) return cudaSuccess;
    int64_t GN = (N + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_, GK = (K + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_;
    if (GN > 65535 || GK > 0x7fffffff) return cudaErrorInvalidValue;
    fp8_quant_kernel_weight<<<dim3((unsigned)GK, (unsigned)GN), 256, 0, st>>>(q, scale, w, bf16, N,
                                                                            K, (int)GK);
    return cudaGetLastError();
}

// ---- the greedy denoising step (backend.h dllm_greedy) ---------------------------------------------

// One block per block row, 1024 threads: CFG and the EOS ban in place while looking for the
// argmax (value, lowest id), the EOT ban, then max and Σ exp for the softmax probability of x0.
// Three passes over V floats per row (126,464 for LLaDA-8B: ~1.5 MB a row, µs at HBM speed).
__global__ void __launch_bounds__(1024)
    dllm_greedy_kernel(int32_t *x0, float *conf, float *logits, const float *ulogits, int V,
                       float w, int32_t eos, int32_t eot) {
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ float red[32];
    float *l = logits + (int64_t)blockIdx.x * V;
    const float *u = ulogits ? ulogits + (int64_t)blockIdx.x * V : NULL;
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float x = l[v];
        if (u) {  // u + w (x - u) as the CPU rounds it: no fused multiply-add
            x = __fadd_rn(u[v], __fmul_rn(w, __fsub_rn(x, u[v])));
            l[v] = x;
        }
        if (v == eos) l[v] = x = -INFINITY;
        if (x > best || (x == best && v < bi)) {
            best = x;
            bi = v;
        }
    }
    const int arg = block_argmax(best, bi, sv, si);  // lowest id on ties; none: 0, as the CPU
    if (eot >= 0 && threadIdx.x == 0) l[eot] = -INFINITY;
    __syncthreads();
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, l[v]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(l[v] - mx);
    sum = block_sum(sum, red);
    if (threadIdx.x == 0) {
        x0[blockIdx.x] = arg;
        conf[blockIdx.x] = expf(l[arg] - mx) / sum;
    }
}

extern "C" cudaError_t li_cuda_dllm_greedy(cudaStream_t st, int32_t *x0, float *conf,
                                           float *logits, const float *ulogits, int B, int V,
                                           float w, int32_t eos, int32_t eot) {
    if (B <= 0 || V <= 0) return cudaSuccess;
    dllm_greedy_kernel<<<B, 1024, 0, st>>>(x0, conf, logits, ulogits, V, w, eos, eot);
    return cudaGetLastError();
}

extern "C" cudaError_t li_cuda_fp8_quant_rows(cudaStream_t st, uint8_t *q, float *scale,
                                              const float *x, int T, int K) {
    if (T <= 0 || K <= 0) return cudaSuccess;
    int G = (K + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_;
    if (T > 65535) return cudaErrorInvalidValue;
    fp8_quant_kernel_rows<<<dim3(G, T), LI_FP8_GROUP_, 0, st>>>(q, scale, x, K, G);
    return cudaGetLastError();
}

// One thread per y[t, n] (consecutive threads: consecutive n, so sa reads broadcast).
__global__ void matmul_fp8_kernel_simple(float *y, const uint8_t *qa, const float *sa, int T,
                                         const uint8_t *wq, const float *wscale, int64_t N,
                                         int64_t K) {
    const int64_t G = (K + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (int64_t)T * N;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / N, n = e - t * N;
        const uint8_t *ar = qa + t * K, *wr = wq + n * K;
        float acc = 0.0f;
        for (int64_t g = 0; g < G; g++) {
            const int64_t k0 = g * LI_FP8_GROUP_, k1 = min(k0 + LI_FP8_GROUP_, K);
            double S = 0;  // exact: each product fits fp32, 128 of them < 44 bits
            for (int64_t kk = k0; kk < k1; kk++)
                S += (double)e4m3_to_f32(ar[kk]) * (double)e4m3_to_f32(wr[kk]);
            float part = __fmul_rn((float)S, sa[t * G + g]);
            part = __fmul_rn(part, wscale[(n / LI_FP8_GROUP_) * G + g]);
            acc = __fadd_rn(acc, part);
        }
        y[e] = acc;
    }
}

extern "C" cudaError_t li_cuda_matmul_fp8(cudaStream_t st, float *y, const uint8_t *qa,
                                          const float *sa, int T, const uint8_t *wq,
                                          const float *wscale, int64_t N, int64_t K) {
    int64_t total = (int64_t)T * N;
    if (total <= 0) return cudaSuccess;
    int64_t blocks = (total + 127) / 128;
    if (blocks > 65535 * 32) blocks = 65535 * 32;
    matmul_fp8_kernel_simple<<<(unsigned)blocks, 128, 0, st>>>(y, qa, sa, T, wq, wscale, N, K);
    return cudaGetLastError();
}
