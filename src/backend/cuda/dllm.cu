// dllm.cu — the diffusion / FP8 ops of the op table on the GPU (LLaDA, ARCHITECTURE.md §5).
//   flash_attn_tiles: for Dh 64/128 16 query rows of one head per block sharing K/V chunks in
//     shared memory (flash_attn_kernel_rows); otherwise one block per (query row, head). Per tile,
//     fp32 scores in shared memory, the tile's max and sum, o = a o + Σ p v. The oracle keeps fp64
//     inside a tile; both store the state in fp32 between tiles.
//   fp8_quant_rows: one block per (row, 128-group); bit-exact with li_f32_to_e4m3 / li_fp8_scale
//     (src/core/fp8.c), ported line by line with explicitly rounded intrinsics.
//   matmul_fp8: one thread per output, groups in ascending order, S_g in fp64 (exact), then
//     acc = acc + ((float)S_g * sa) * ws with __fmul_rn / __fadd_rn so that nvcc cannot contract
//     them into an FMA: bit-identical to the CPU. This is a CUDA-core loop at a few TFLOP/s; the
//     fast version is a wgmma FP8 GEMM with per-group promotion (DeepGEMM-style), whose fp32
//     partial sums differ from this order — backend.h's bit-exact contract would have to allow it.
// Tested by tests/gpu/gpu-check.c against ops-ref.c (bit-exact where backend.h says so).
#include <stdlib.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../../core/fp8.h"
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

// The same update for FA_QR query rows of one head per block (Dh 64 or 128), K and V read once
// per block instead of once per row: the kernel above re-reads all of K and V for every (row,
// head) — at LLaDA-8B's canvas 1024 that is ~32 GB of L2 traffic per layer-0 call, 1.2 TFLOP/s
// measured on the H200 (14 ms of a 68 ms step). Here a block of 256 threads stages FA_KC keys at
// a time in shared memory; the tile's scores (FA_QR x tile fp32) stay in shared memory between the
// tile's max, its exponentials and P·V; o lives in registers for the whole call (FA_QR * Dh / 256
// outputs per thread) and m, l in shared memory. The arithmetic per row is the op's definition in
// the same order as the kernel above (fp32, s = scale q·k, a = exp(m - m'), p = exp(s - m'),
// l = a l + Σ p, o = a o + Σ_j p_j v_j over ascending j); only q·k's summation order differs.
// Roofline: per key FA_QR rows share one K and one V row from shared memory, ~4 shared loads per
// 4 FMAs in QKᵀ and 1 per FA_QR/(256/Dh) in P·V: shared-memory bound near 10-20 TFLOP/s of fp32.
#define FA_QR 16   // query rows per block
#define FA_KC 64   // keys staged per chunk
#define FA_NT 256  // threads

template <int DH>
__global__ void __launch_bounds__(FA_NT)
    flash_attn_kernel_rows(float *o, float *m, float *l, const float *q, int nq, int H,
                           const float *k, const float *v, int nk, int Hkv, int tile,
                           float scale) {
    constexpr int KP = DH + 1;                  // K/V row pitch: (j + x) % 32 banks, no conflict
    constexpr int RPT = FA_QR * DH / FA_NT;     // outputs (rows) per thread in P·V
    extern __shared__ float fa_sh[];
    float *qs = fa_sh;                          // (FA_QR, DH)
    float *kv = qs + FA_QR * DH;                // (FA_KC, KP): K, then V, of one chunk
    float *sc = kv + FA_KC * KP;                // (FA_QR, tile_eff): scores, then p
    __shared__ float ms[FA_QR], ls[FA_QR], as[FA_QR];
    const int tid = threadIdx.x, r0 = blockIdx.x * FA_QR, h = blockIdx.y, hk = h / (H / Hkv);
    const int tile_eff = min(tile, nk);
    for (int e = tid; e < FA_QR * DH; e += FA_NT) {
        int r = e / DH, x = e % DH;
        qs[e] = r0 + r < nq ? q[((int64_t)(r0 + r) * H + h) * DH + x] : 0.0f;
    }
    if (tid < FA_QR) {
        bool in = r0 + tid < nq;
        ms[tid] = in ? m[(int64_t)(r0 + tid) * H + h] : -INFINITY;
        ls[tid] = in ? l[(int64_t)(r0 + tid) * H + h] : 0.0f;
    }
    // P·V ownership: dim x = tid % DH of rows rb + i * (FA_NT / DH)
    const int x = tid % DH, rb = tid / DH;
    float acc[RPT];
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        int r = rb + i * (FA_NT / DH);
        acc[i] = r0 + r < nq ? o[((int64_t)(r0 + r) * H + h) * DH + x] : 0.0f;
    }
    // scores: row sr = tid / 16 against keys sj + 16 c of the chunk (c = 0..3)
    const int sr = tid / 16, sj = tid % 16;
    for (int t0 = 0; t0 < nk; t0 += tile) {
        const int t1 = min(t0 + tile, nk);
        for (int c0 = t0; c0 < t1; c0 += FA_KC) {
            const int cn = min(FA_KC, t1 - c0);
            __syncthreads();  // the previous chunk's K (or V) is no longer read
            for (int e = tid; e < FA_KC * DH; e += FA_NT) {
                int j = e / DH, xx = e % DH;
                kv[j * KP + xx] = j < cn ? k[((int64_t)(c0 + j) * Hkv + hk) * DH + xx] : 0.0f;
            }
            __syncthreads();
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const float *qr = qs + sr * DH;
#pragma unroll 8
            for (int xx = 0; xx < DH; xx++) {
                float qv = qr[xx];
#pragma unroll
                for (int c = 0; c < 4; c++) d[c] = fmaf(qv, kv[(sj + 16 * c) * KP + xx], d[c]);
            }
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (sj + 16 * c < cn) sc[sr * tile_eff + (c0 - t0) + sj + 16 * c] = d[c] * scale;
        }
        __syncthreads();  // every score of the tile written
        // per row (16 lanes each): the tile's max, the new state, p and its sum
        const int n = t1 - t0;
        float mt = -INFINITY;
        for (int j = sj; j < n; j += 16) mt = fmaxf(mt, sc[sr * tile_eff + j]);
#pragma unroll
        for (int off = 8; off; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off, 16));
        const float m_old = ms[sr], m_new = fmaxf(m_old, mt);
        const float a = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        float sum = 0.0f;
        for (int j = sj; j < n; j += 16) {
            float p = expf(sc[sr * tile_eff + j] - m_new);
            sc[sr * tile_eff + j] = p;
            sum += p;
        }
#pragma unroll
        for (int off = 8; off; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off, 16);
        __syncthreads();  // every lane read ms[sr] before it changes
        if (sj == 0) {
            as[sr] = a;
            ls[sr] = a * ls[sr] + sum;
            ms[sr] = m_new;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < RPT; i++) acc[i] = as[rb + i * (FA_NT / DH)] * acc[i];
        for (int c0 = t0; c0 < t1; c0 += FA_KC) {
            const int cn = min(FA_KC, t1 - c0);
            __syncthreads();
            for (int e = tid; e < FA_KC * DH; e += FA_NT) {
                int j = e / DH, xx = e % DH;
                kv[j * KP + xx] = j < cn ? v[((int64_t)(c0 + j) * Hkv + hk) * DH + xx] : 0.0f;
            }
            __syncthreads();
            for (int j = 0; j < cn; j++) {
                float vv = kv[j * KP + x];
#pragma unroll
                for (int i = 0; i < RPT; i++)
                    acc[i] = fmaf(sc[(rb + i * (FA_NT / DH)) * tile_eff + (c0 - t0) + j], vv,
                                  acc[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        int r = rb + i * (FA_NT / DH);
        if (r0 + r < nq) o[((int64_t)(r0 + r) * H + h) * DH + x] = acc[i];
    }
    __syncthreads();
    if (tid < FA_QR && r0 + tid < nq) {
        m[(int64_t)(r0 + tid) * H + h] = ms[tid];
        l[(int64_t)(r0 + tid) * H + h] = ls[tid];
    }
}

// Dynamic shared memory of flash_attn_kernel_rows for tiles of tile_eff keys: q, one K/V chunk,
// the tile's scores (105 KB at Dh 128 and the largest tile).
static size_t rows_smem(int dh, int tile_eff) {
    return sizeof(float) * ((size_t)FA_QR * dh + (size_t)FA_KC * (dh + 1) + (size_t)FA_QR * tile_eff);
}

template <int DH>
static cudaError_t launch_rows(cudaStream_t st, float *o, float *m, float *l, const float *q,
                               int nq, int H, const float *k, const float *v, int nk, int Hkv,
                               int tile, float scale) {
    static bool attr_set = false;  // once per DH (benign race: same value)
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(flash_attn_kernel_rows<DH>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)rows_smem(DH, FA_MAX_TILE));
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    const size_t smem = rows_smem(DH, min(tile, nk));
    flash_attn_kernel_rows<DH><<<dim3((nq + FA_QR - 1) / FA_QR, H), FA_NT, smem, st>>>(
        o, m, l, q, nq, H, k, v, nk, Hkv, tile, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t li_cuda_flash_attn_tiles(cudaStream_t st, float *o, float *m, float *l,
                                                const float *q, int nq, int H, const float *k,
                                                const float *v, int nk, int Hkv, int Dh, int tile,
                                                float scale) {
    if (nq <= 0 || nk <= 0) return cudaSuccess;
    if (Hkv <= 0 || H % Hkv || tile < 1 || tile > FA_MAX_TILE || H > 65535)
        return cudaErrorInvalidValue;
    // Dh 64 / 128: rows per block; the one-row-per-block kernel serves the other head sizes
    if (Dh == 128) return launch_rows<128>(st, o, m, l, q, nq, H, k, v, nk, Hkv, tile, scale);
    if (Dh == 64) return launch_rows<64>(st, o, m, l, q, nq, H, k, v, nk, Hkv, tile, scale);
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

// One warp per 128-group (8 groups per 256-thread block, grid over T x groups): lane l holds
// elements 4l .. 4l + 3 of its group (one 16-byte load when K % 4 == 0; single loads at a partial
// group or odd K), the amax by shuffles (a max is exact in any order; fmaxf skips NaN as the
// scalar code does), then 4 codes stored as one word. Same arithmetic as li_fp8_quant per element,
// so the codes and scales equal the CPU's bit for bit. A copy at heart: 4 bytes in, ~1 out per
// element, ~3.5 TB/s on the H200 (the block-per-group kernel it replaced ran at 0.8 TB/s).
#define FQ_ROWS_WARPS 8
__global__ void __launch_bounds__(32 * FQ_ROWS_WARPS)
    fp8_quant_kernel_rows(uint8_t *q, float *scale, const float *x, int T, int K, int G) {
    const int lane = threadIdx.x & 31;
    const int64_t gid = (int64_t)blockIdx.x * FQ_ROWS_WARPS + (threadIdx.x >> 5);
    if (gid >= (int64_t)T * G) return;
    const int t = (int)(gid / G), g = (int)(gid % G);
    const int k0 = g * LI_FP8_GROUP_ + 4 * lane;
    const float *xr = x + (int64_t)t * K;
    float v[4];
    const bool vec = (K & 3) == 0 && k0 + 3 < K && ((uintptr_t)x & 15) == 0 &&
                     ((uintptr_t)q & 3) == 0;
    if (vec) {
        const float4 f = __ldg((const float4 *)(xr + k0));
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
        for (int j = 0; j < 4; j++) v[j] = k0 + j < K ? xr[k0 + j] : 0.0f;
    }
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // li_fp8_scale: max(amax, LI_FP8_AMAX_MIN) / 448 (fp32 division)
    const float sc = __fdiv_rn(amax > 1e-4f ? amax : 1e-4f, 448.0f);
    if (lane == 0) scale[(int64_t)t * G + g] = sc;
    uint8_t c[4];
    for (int j = 0; j < 4; j++) c[j] = li_f32_to_e4m3(__fdiv_rn(v[j], sc));
    uint8_t *qr = q + (int64_t)t * K;
    if (vec) {
        *(uint32_t *)(qr + k0) = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
                                 (uint32_t)c[3] << 24;
    } else {
        for (int j = 0; j < 4; j++)
            if (k0 + j < K) qr[k0 + j] = c[j];
    }
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
        q[(n0 + i / cols) * K + k0 + i % cols] = li_f32_to_e4m3(__fdiv_rn(at(i), sc));
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

extern "C" cudaError_t li_cuda_fp8_quant_rows(cudaStream_t st, uint8_t *q, float *scale,
                                              const float *x, int T, int K) {
    if (T <= 0 || K <= 0) return cudaSuccess;
    int G = (K + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_;
    const int64_t blocks = ((int64_t)T * G + FQ_ROWS_WARPS - 1) / FQ_ROWS_WARPS;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    fp8_quant_kernel_rows<<<(unsigned)blocks, 32 * FQ_ROWS_WARPS, 0, st>>>(q, scale, x, T, K, G);
    return cudaGetLastError();
}

// ---- activation quantisation fused into the op that makes the activations ---------------------
//
// The FP8 FFN quantises its two inputs: norm(x + attention) and silu(gate) * up. Written as f32
// and re-read by fp8_quant_rows they cost 8 bytes per element of traffic (at canvas 1024, LLaDA-
// 8B: 32 MB + 100 MB per layer, ~1 ms per step at HBM speed); fused, the values stay in
// registers and only the codes (1 byte) and scales leave. A warp owns a 128-group: lane l holds
// elements 4l .. 4l + 3, the group's amax comes from shuffles (exact in any order; fmaxf skips a
// NaN as fp8_quant_rows does) and the 4 codes leave as one word. Values are computed with the
// unfused kernels' arithmetic (and, for the norm, their reduction order), so the codes equal
// fp8_quant_rows applied to add_rmsnorm's / swiglu's f32 output, bit for bit (gpu-check). The
// first version kept a row per block and took each group's amax with shared-memory atomics
// (128 threads on one address): 0.14 ms per 1024 x 12288 swiglu, 4x swiglu_bf16; this one is a
// copy: 2 x 4 bytes in, ~1 out per element.
#define FQ_MAX_GROUPS 128  // K <= 16384

// The codes and scale of one 128-group whose elements are v[0..3] of each lane (elements past K
// hold anything: they are neither in the amax nor stored).
__device__ __forceinline__ void fq_group(uint8_t *qrow, float *srow, int g, const float v[4],
                                         int K, bool vec) {
    const int lane = threadIdx.x & 31, k0 = g * LI_FP8_GROUP_ + 4 * lane;
    float amax = 0.0f;
    for (int j = 0; j < 4; j++)
        if (k0 + j < K) amax = fmaxf(amax, fabsf(v[j]));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float sc = __fdiv_rn(amax > 1e-4f ? amax : 1e-4f, 448.0f);  // li_fp8_scale
    if (lane == 0) srow[g] = sc;
    uint8_t c[4];
    for (int j = 0; j < 4; j++) c[j] = li_f32_to_e4m3(__fdiv_rn(v[j], sc));
    if (vec && k0 + 3 < K) {
        *(uint32_t *)(qrow + k0) = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
                                   (uint32_t)c[3] << 24;
    } else {
        for (int j = 0; j < 4; j++)
            if (k0 + j < K) qrow[k0 + j] = c[j];
    }
}

// One block per row (add_rmsnorm_kernel's block size, whose strided sum of squares it repeats):
// x += y (y NULL: no add), then each warp quantises its groups of x * r * w, reading the row
// back (this block just wrote it: an L1/L2 hit).
__global__ void add_rmsnorm_fp8_kernel(uint8_t *q, float *scale, float *x, const float *y,
                                       const float *w, int D, float eps) {
    __shared__ float sh[32];
    const int G = (D + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_;
    float *xr = x + (int64_t)blockIdx.x * D;
    const float *yr = y ? y + (int64_t)blockIdx.x * D : NULL;
    float ss = 0;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = yr ? xr[d] + yr[d] : xr[d];
        if (yr) xr[d] = v;
        ss += v * v;
    }
    ss = block_sum(ss, sh);  // its barriers also make the row's new x visible to every warp
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n_warps = blockDim.x >> 5;
    const bool vec = (D & 3) == 0 && ((uintptr_t)q & 3) == 0;
    uint8_t *qrow = q + (int64_t)blockIdx.x * D;
    float *srow = scale + (int64_t)blockIdx.x * G;
    for (int g = warp; g < G; g += n_warps) {
        const int k0 = g * LI_FP8_GROUP_ + 4 * lane;
        float v[4];
        for (int j = 0; j < 4; j++) v[j] = k0 + j < D ? xr[k0 + j] * r * w[k0 + j] : 0.0f;
        fq_group(qrow, srow, g, v, D, vec);
    }
}

// One warp per 128-group of a row of F (8 per block): the codes of silu(gate) * up (silu_mul,
// as swiglu's kernels).
#define FQ_SWIGLU_WARPS 8
__global__ void __launch_bounds__(32 * FQ_SWIGLU_WARPS)
    swiglu_fp8_kernel(uint8_t *q, float *scale, const float *gate, const float *up, int T, int F) {
    const int G = (F + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_;
    const int64_t gid = (int64_t)blockIdx.x * FQ_SWIGLU_WARPS + (threadIdx.x >> 5);
    if (gid >= (int64_t)T * G) return;
    const int t = (int)(gid / G), g = (int)(gid % G), lane = threadIdx.x & 31;
    const int k0 = g * LI_FP8_GROUP_ + 4 * lane;
    const float *gr = gate + (int64_t)t * F, *ur = up + (int64_t)t * F;
    const bool vec = (F & 3) == 0 && ((uintptr_t)gate & 15) == 0 && ((uintptr_t)up & 15) == 0 &&
                     ((uintptr_t)q & 3) == 0;
    float v[4];
    if (vec && k0 + 3 < F) {
        const float4 a = __ldg((const float4 *)(gr + k0)), b = __ldg((const float4 *)(ur + k0));
        v[0] = silu_mul(a.x, b.x), v[1] = silu_mul(a.y, b.y);
        v[2] = silu_mul(a.z, b.z), v[3] = silu_mul(a.w, b.w);
    } else {
        for (int j = 0; j < 4; j++) v[j] = k0 + j < F ? silu_mul(gr[k0 + j], ur[k0 + j]) : 0.0f;
    }
    fq_group(q + (int64_t)t * F, scale + (int64_t)t * G, g, v, F, vec);
}

// add_rmsnorm_kernel's block size for D (the reduction order must match it).
static int norm_block(int D) { return D >= 1024 ? 1024 : D >= 256 ? 256 : 64; }

extern "C" bool li_cuda_fp8_fused_ok(int K, bool norm) {
    (void)norm;
    return K > 0 && K <= FQ_MAX_GROUPS * LI_FP8_GROUP_;
}

extern "C" cudaError_t li_cuda_add_rmsnorm_fp8(cudaStream_t st, uint8_t *q, float *scale,
                                               float *x, const float *y, const float *w, int T,
                                               int D, float eps) {
    if (T <= 0 || D <= 0) return cudaSuccess;
    if (!li_cuda_fp8_fused_ok(D, true)) return cudaErrorInvalidValue;
    add_rmsnorm_fp8_kernel<<<T, norm_block(D), 0, st>>>(q, scale, x, y, w, D, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t li_cuda_swiglu_fp8(cudaStream_t st, uint8_t *q, float *scale,
                                          const float *gate, const float *up, int T, int F) {
    if (T <= 0 || F <= 0) return cudaSuccess;
    if (!li_cuda_fp8_fused_ok(F, false)) return cudaErrorInvalidValue;
    const int64_t groups = (int64_t)T * ((F + LI_FP8_GROUP_ - 1) / LI_FP8_GROUP_);
    const int64_t blocks = (groups + FQ_SWIGLU_WARPS - 1) / FQ_SWIGLU_WARPS;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    swiglu_fp8_kernel<<<(unsigned)blocks, 32 * FQ_SWIGLU_WARPS, 0, st>>>(q, scale, gate, up, T, F);
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
                S += (double)li_e4m3_to_f32(ar[kk]) * (double)li_e4m3_to_f32(wr[kk]);
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
