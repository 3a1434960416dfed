// attention-prefill.cu — paged GQA attention for many query rows (prompt and document prefill)
// on tensor cores: the `attention` op when T >= LI_CUDA_ATTN_TC_MIN_T and Dh is 64 or 128.
//
// Flash-attention style. One block of 4 warps owns 64 query rows of one query head; each warp owns
// 16 of them. The block walks the sequence's keys in tiles of 64:
//   1. K and V rows of the tile are read from the f32 pool, K rotated by its page's Δ (deferred
//      RoPE: the page was stored at local positions, R_Δ k puts it at its place in this prompt),
//      both rounded to bf16 into shared memory;
//   2. S = Q Kᵀ (bf16 WMMA 16x16x16, fp32 accumulate), Q pre-scaled by scale·log2(e);
//   3. online softmax per row in fp32 (mask [kv_first, n_visible)), P = exp2(S - m) in bf16;
//   4. O = O·exp2(m_old - m_new) + P V (O kept in shared memory: WMMA fragments hide which
//      element is which row, so the per-row rescale happens there).
// Keys are located through a per-call index: li_cuda_unpack_keys turns the page table (one word per
// page, count valid keys) into one word per logical key (page id | slot | Δ) in a single block
// scan, so a tile gathers any mix of pages, partial pages and page sizes.
//
// Napkin maths (Llama-3.1-8B heads, prefill of 4096 tokens): causal FLOPs 4·T²·H·Dh/2 = 275 GFLOP.
// A block reuses each K/V row for 64 query rows: 32 FLOP per byte of f32 K/V, so HBM (4.8 TB/s)
// would allow ~150 TFLOP/s and L2 (G = 4 query-head blocks read the same K/V) more; WMMA through
// mma.sync, without wgmma/TMA pipelining, should land around 100-200 TFLOP/s. SDPA's flash kernel
// measured 273 TFLOP/s (cuDNN 533) on the same shape: the wgmma version is the next step.
#include <mma.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention.cuh"
#include "cuda-device.cuh"

using namespace nvcuda;

#define PF_ROWS 64     // query rows per block (4 warps x 16)
#define PF_KEYS 64     // keys per tile
#define PF_THREADS 128

// ---- page table -> per-key words -----------------------------------------------------------------

// keys[j] = the page word of logical key j with its count field replaced by the key's slot, and
// keys[n_pages * P] = the number of keys (the kernel clamps the rows' bounds to it: a key index
// past it would read a stale word). One block: chunks of 1024 pages, an inclusive scan of their
// counts in shared memory, each thread writing its page's keys. n_pages is a few thousand at most
// (20K keys / P 16): ~10 µs.
__global__ void __launch_bounds__(1024)
    unpack_keys_kernel(const uint64_t *pages, int n_pages, int P, uint64_t *keys) {
    __shared__ int scan[1024];
    __shared__ int base;
    const int tid = threadIdx.x;
    if (tid == 0) base = 0;
    __syncthreads();
    const uint64_t count_mask = ((1ull << 9) - 1) << 26;
    for (int c0 = 0; c0 < n_pages; c0 += 1024) {
        int p = c0 + tid;
        uint64_t w = p < n_pages ? pages[p] : 0;
        int cnt = (int)((w >> 26) & 511);
        scan[tid] = cnt;
        __syncthreads();
        for (int off = 1; off < 1024; off <<= 1) {
            int v = tid >= off ? scan[tid - off] : 0;
            __syncthreads();
            scan[tid] += v;
            __syncthreads();
        }
        int start = base + scan[tid] - cnt;
        for (int s = 0; s < cnt; s++) keys[start + s] = (w & ~count_mask) | ((uint64_t)s << 26);
        __syncthreads();
        if (tid == 1023) base += scan[1023];
        __syncthreads();
    }
    if (tid == 0) keys[(size_t)n_pages * P] = (uint64_t)base;
}

// ---- the tile kernel --------------------------------------------------------------------------

// (a, b) -> (a c - b s, a s + b c): pair pi of a K row rotated by Δ. cos/sin from the tile's table
// (cs[pi], cs[sin_off + pi]) when every key of the tile shares Δ, else computed here.
__device__ __forceinline__ void rotate_pair(float &a, float &b, int pi, int delta, bool uniform,
                                            const float *cs, int sin_off,
                                            const li_cuda_rope_args &r) {
    float c, sn;
    if (uniform) {
        c = cs[pi];
        sn = cs[sin_off + pi];
    } else {
        rope_sincos((double)delta, r.inv_freq[pi], &c, &sn);
    }
    const float ra = a * c - b * sn, rb = a * sn + b * c;
    a = ra;
    b = rb;
}

template <int DH>
struct pf_smem {
    static constexpr int LDQ = DH + 8;           // bf16 row strides: +8 breaks bank conflicts
    static constexpr int LDS = PF_KEYS + 4;      // f32 scores
    static constexpr int LDP = 2 * LDS;          // bf16 probabilities, written over the scores
    static constexpr int LDO = DH + 4;           // f32 output accumulator
    static constexpr size_t q = 0;
    static constexpr size_t k = q + (size_t)PF_ROWS * LDQ * 2;
    static constexpr size_t v = k + (size_t)PF_KEYS * LDQ * 2;
    static constexpr size_t s = v + (size_t)PF_KEYS * LDQ * 2;
    static constexpr size_t o = s + (size_t)PF_ROWS * LDS * 4;
    static constexpr size_t rows = o + (size_t)PF_ROWS * LDO * 4;  // lo, hi (int), m, l, alpha
    static constexpr size_t cs = rows + (size_t)PF_ROWS * 5 * 4;   // (DH / 2) cos, sin
    static constexpr size_t bytes = cs + (size_t)DH * 4;
};

template <int DH>
__global__ void __launch_bounds__(PF_THREADS)
    attention_prefill_tc(const li_cuda_attn_args a, const li_cuda_rope_args r,
                         const uint64_t *keys) {
    typedef pf_smem<DH> L;
    extern __shared__ __align__(128) unsigned char sm[];
    __nv_bfloat16 *qs = (__nv_bfloat16 *)(sm + L::q);
    __nv_bfloat16 *ks = (__nv_bfloat16 *)(sm + L::k);
    __nv_bfloat16 *vs = (__nv_bfloat16 *)(sm + L::v);
    float *ss = (float *)(sm + L::s);
    __nv_bfloat16 *ps = (__nv_bfloat16 *)(sm + L::s);  // row r's P over row r's S (see below)
    float *os = (float *)(sm + L::o);
    int *row_lo = (int *)(sm + L::rows), *row_hi = row_lo + PF_ROWS;
    float *row_m = (float *)(row_hi + PF_ROWS), *row_l = row_m + PF_ROWS,
          *row_alpha = row_l + PF_ROWS;
    float *cs = (float *)(sm + L::cs);  // [i] cos, [DH/2 + i] sin of the tile's Δ
    __shared__ int kmin_s, kmax_s;
    __shared__ long long key_off[PF_KEYS];  // float offset of the key's K row in the pool; -1: none
    __shared__ int key_delta[PF_KEYS];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int t0 = blockIdx.x * PF_ROWS, h = blockIdx.y, G = a.H / a.Hkv, hk = h / G;
    const int n_rows = min(PF_ROWS, a.T - t0);
    const float qscale = a.scale * 1.4426950408889634f;  // exp(x) = exp2(x log2 e)

    // Q rows (scaled, bf16), row bounds, fresh softmax state, O = 0
    for (int i = tid; i < PF_ROWS * DH; i += PF_THREADS) {
        int rr = i / DH, d = i % DH;
        float x = rr < n_rows ? a.q[((size_t)(t0 + rr) * a.H + h) * DH + d] * qscale : 0.0f;
        qs[rr * L::LDQ + d] = __float2bfloat16_rn(x);
    }
    for (int i = tid; i < PF_ROWS * L::LDO; i += PF_THREADS) os[i] = 0.0f;
    if (tid == 0) {
        kmin_s = 0x7fffffff;
        kmax_s = 0;
    }
    __syncthreads();
    if (tid < PF_ROWS) {
        int lo = 0, hi = 0;
        if (tid < n_rows) {
            lo = a.kv_first ? a.kv_first[t0 + tid] : 0;
            hi = a.n_visible[t0 + tid];  // clamped to the keys below (kmax)
            atomicMin(&kmin_s, lo);
            atomicMax(&kmax_s, hi);
        }
        row_lo[tid] = lo;
        row_hi[tid] = hi;
        row_m[tid] = -INFINITY;
        row_l[tid] = 0.0f;
    }
    __syncthreads();
    // never past the keys the page table holds (a bad n_visible must not read stale index words)
    const int n_keys = (int)keys[(size_t)a.n_pages * a.P];
    const int kmin = kmin_s, kmax = min(kmax_s, n_keys);
    const size_t page_stride = (size_t)a.L * 2 * a.Hkv * a.P * DH;  // floats per page
    const size_t kv_off = ((size_t)a.il * 2 * a.Hkv + hk) * a.P * DH;  // K of (il, hk) in a page
    const size_t v_off = (size_t)a.Hkv * a.P * DH;                    // V after K
    const int half = r.n_dims / 2;
    const bool vec = !a.rotate || r.n_dims % 8 == 0;  // float4 chunks never straddle a pair half

    for (int j0 = kmin; j0 < kmax; j0 += PF_KEYS) {
        const int nk = min(PF_KEYS, kmax - j0);
        // the tile's Δ: one cos/sin table when every key shares it (tiles inside a document)
        const int delta0 = a.rotate ? (int)(keys[j0] >> 35) : 0;
        const bool uniform = __syncthreads_and(
            tid >= nk || !a.rotate || (int)(keys[j0 + tid] >> 35) == delta0);
        if (uniform && delta0 != 0)
            for (int i = tid; i < half; i += PF_THREADS)
                rope_sincos((double)delta0, r.inv_freq[i], &cs[i], &cs[DH / 2 + i]);
        __syncthreads();
        // 1. K (rotated by Δ) and V of the tile -> bf16 shared memory; keys past nk are zeros.
        // The rows' pool offsets first (one word per key), then float4 loads, unrolled so that
        // each thread has 2 x PER loads in flight: the loop is bound by load latency otherwise.
        if (tid < PF_KEYS) {
            long long off = -1;
            int dl = 0;
            if (tid < nk) {
                uint64_t w = keys[j0 + tid];
                off = (long long)((w & ((1ull << 26) - 1)) * page_stride + kv_off +
                                  ((w >> 26) & 511) * DH);
                dl = a.rotate ? (int)(w >> 35) : 0;
            }
            key_off[tid] = off;
            key_delta[tid] = dl;
        }
        __syncthreads();
        if (vec) {
            // Work units of a key row, all loads issued up front (no load behind a branch):
            // with NEOX rotation a unit is a pair of float4 chunks half a rotation apart (chunk u
            // and u + n_dims/8: every pair (i, i + n_dims/2) inside one unit, each element read
            // once), then the unrotated tail one chunk per unit; otherwise one chunk per unit
            // (GPT-J pairs (2i, 2i + 1) lie inside a chunk).
            const int n_pair = a.rotate && !r.gptj ? half / 4 : 0;
            const int n_units = DH / 4 - n_pair;  // pairs + single chunks per key
            const int tail0 = 2 * n_pair;         // first single chunk
            const float4 *pool4 = (const float4 *)a.kv;
#pragma unroll 2
            for (int i = tid; i < PF_KEYS * n_units; i += PF_THREADS) {
                const int jj = i / n_units, u = i % n_units;
                const bool pair = u < n_pair;
                const int c0 = pair ? u : tail0 + (u - n_pair), c1 = c0 + half / 4;
                const long long off = key_off[jj];
                float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0, v0 = x0, v1 = x0;
                if (off >= 0) {
                    const float4 *krow = pool4 + off / 4, *vrow = pool4 + (off + (long long)v_off) / 4;
                    x0 = __ldg(krow + c0);
                    v0 = __ldg(vrow + c0);
                    if (pair) {
                        x1 = __ldg(krow + c1);
                        v1 = __ldg(vrow + c1);
                    }
                    const int delta = key_delta[jj];
                    const int d0 = 4 * c0;
                    if (delta != 0 && (pair || (r.gptj && d0 < r.n_dims))) {
                        if (r.gptj) {  // pairs (2i, 2i + 1) inside the chunk
                            rotate_pair(x0.x, x0.y, d0 / 2, delta, uniform, cs, DH / 2, r);
                            rotate_pair(x0.z, x0.w, d0 / 2 + 1, delta, uniform, cs, DH / 2, r);
                        } else {  // NEOX pairs (i, i + n_dims/2) across the two chunks
                            rotate_pair(x0.x, x1.x, d0, delta, uniform, cs, DH / 2, r);
                            rotate_pair(x0.y, x1.y, d0 + 1, delta, uniform, cs, DH / 2, r);
                            rotate_pair(x0.z, x1.z, d0 + 2, delta, uniform, cs, DH / 2, r);
                            rotate_pair(x0.w, x1.w, d0 + 3, delta, uniform, cs, DH / 2, r);
                        }
                    }
                }
                __nv_bfloat162 *kd = (__nv_bfloat162 *)(ks + jj * L::LDQ + 4 * c0);
                __nv_bfloat162 *vd = (__nv_bfloat162 *)(vs + jj * L::LDQ + 4 * c0);
                kd[0] = __floats2bfloat162_rn(x0.x, x0.y);
                kd[1] = __floats2bfloat162_rn(x0.z, x0.w);
                vd[0] = __floats2bfloat162_rn(v0.x, v0.y);
                vd[1] = __floats2bfloat162_rn(v0.z, v0.w);
                if (pair) {
                    kd = (__nv_bfloat162 *)(ks + jj * L::LDQ + 4 * c1);
                    vd = (__nv_bfloat162 *)(vs + jj * L::LDQ + 4 * c1);
                    kd[0] = __floats2bfloat162_rn(x1.x, x1.y);
                    kd[1] = __floats2bfloat162_rn(x1.z, x1.w);
                    vd[0] = __floats2bfloat162_rn(v1.x, v1.y);
                    vd[1] = __floats2bfloat162_rn(v1.z, v1.w);
                }
            }
        } else {  // rotary dims not a multiple of 8: one element at a time
            for (int i = tid; i < PF_KEYS * DH; i += PF_THREADS) {
                int jj = i / DH, d = i % DH;
                float kx = 0.0f, vx = 0.0f;
                const long long off = key_off[jj];
                if (off >= 0) {
                    const float *row = a.kv + off;
                    kx = row[d];
                    vx = row[v_off + d];
                    int delta = key_delta[jj];
                    if (delta != 0 && d < r.n_dims) {
                        int pi, is_b, partner;  // pair index, second element?, the other element
                        if (r.gptj) {
                            pi = d >> 1;
                            is_b = d & 1;
                            partner = d ^ 1;
                        } else {
                            pi = d < half ? d : d - half;
                            is_b = d >= half;
                            partner = is_b ? d - half : d + half;
                        }
                        float c, sn;
                        rope_sincos((double)delta, r.inv_freq[pi], &c, &sn);
                        float o = row[partner];
                        kx = is_b ? o * sn + kx * c : kx * c - o * sn;
                    }
                }
                ks[jj * L::LDQ + d] = __float2bfloat16_rn(kx);
                vs[jj * L::LDQ + d] = __float2bfloat16_rn(vx);
            }
        }
        __syncthreads();

        // 2. S (16 x 64 per warp) = Q Kᵀ
        const int r0 = warp * 16;
        for (int c = 0; c < PF_KEYS / 16; c++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < DH / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, qs + r0 * L::LDQ + kk * 16, L::LDQ);
                wmma::load_matrix_sync(fb, ks + c * 16 * L::LDQ + kk * 16, L::LDQ);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(ss + r0 * L::LDS + c * 16, acc, L::LDS, wmma::mem_row_major);
        }
        __syncwarp();

        // 3. online softmax: two lanes per row, 32 keys each; P overwrites the row's S after
        // both lanes hold their scores in registers
        {
            const int rr = r0 + (lane >> 1), c0 = (lane & 1) * 32;
            const int lo = row_lo[rr] - j0, hi = row_hi[rr] - j0;  // visible: [lo, hi) in tile
            float sv[32];
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 32; c++) {
                int jj = c0 + c;
                float x = (jj >= lo && jj < hi && jj < nk) ? ss[rr * L::LDS + jj] : -INFINITY;
                sv[c] = x;
                mx = fmaxf(mx, x);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = row_m[rr];
            const float m_new = fmaxf(m_old, mx);
            // no visible key yet: keep everything at zero (exp2 of -inf - -inf would be NaN)
            const float base = m_new == -INFINITY ? 0.0f : m_new;
            float sum = 0.0f;
            __syncwarp();
#pragma unroll
            for (int c = 0; c < 32; c++) {
                float p = exp2f(sv[c] - base);
                __nv_bfloat16 pb = __float2bfloat16_rn(p);
                sum += __bfloat162float(pb);  // the sum of what P·V will use
                ps[rr * L::LDP + c0 + c] = pb;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            if ((lane & 1) == 0) {
                float alpha = exp2f(m_old - base);  // m_old = -inf: 0
                row_alpha[rr] = alpha;
                row_l[rr] = row_l[rr] * alpha + sum;
                row_m[rr] = m_new;
            }
        }
        __syncwarp();
        // 4. O = O * alpha + P V for the warp's rows
        for (int i = lane; i < 16 * DH; i += 32) {
            int rr = r0 + i / DH;
            os[rr * L::LDO + i % DH] *= row_alpha[rr];
        }
        __syncwarp();
        for (int c = 0; c < DH / 16; c++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, os + r0 * L::LDO + c * 16, L::LDO, wmma::mem_row_major);
            for (int kk = 0; kk < PF_KEYS / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, ps + r0 * L::LDP + kk * 16, L::LDP);
                wmma::load_matrix_sync(fb, vs + kk * 16 * L::LDQ + c * 16, L::LDQ);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(os + r0 * L::LDO + c * 16, acc, L::LDO, wmma::mem_row_major);
        }
        __syncthreads();  // K/V/S of this tile are overwritten by the next
    }

    // out = O / l (rows with no visible key: 0)
    for (int i = tid; i < n_rows * DH; i += PF_THREADS) {
        int rr = i / DH, d = i % DH;
        float l = row_l[rr];
        a.out[((size_t)(t0 + rr) * a.H + h) * DH + d] = l > 0.0f ? os[rr * L::LDO + d] / l : 0.0f;
    }
}

// ---- launch -------------------------------------------------------------------------------------

extern "C" int li_cuda_attention_uses_tc(int T, int Dh) {
    static int off = -1;  // LI_CUDA_ATTN_NO_TC=1: the fp32 kernels only (A/B runs)
    if (off < 0) off = getenv("LI_CUDA_ATTN_NO_TC") != NULL;
    return !off && T >= LI_CUDA_ATTN_TC_MIN_T && (Dh == 64 || Dh == 128);
}

template <int DH>
static cudaError_t launch_tc(cudaStream_t st, const li_cuda_attn_args *a,
                             const li_cuda_rope_args *r, const uint64_t *keys) {
    const size_t smem = pf_smem<DH>::bytes;
    static bool attr_set = false;  // once per DH (benign race: same value)
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(attention_prefill_tc<DH>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    dim3 grid((unsigned)((a->T + PF_ROWS - 1) / PF_ROWS), (unsigned)a->H);
    attention_prefill_tc<DH><<<grid, PF_THREADS, smem, st>>>(*a, *r, keys);
    return cudaGetLastError();
}

extern "C" cudaError_t li_cuda_attention_prefill(cudaStream_t st, const li_cuda_attn_args *a,
                                                 const li_cuda_rope_args *rope, uint64_t *keys) {
    // the fp32 launcher's checks (attention.cu), and the cos/sin table holds Dh floats
    if (a->T <= 0) return cudaSuccess;
    if (a->n_pages < 1 || a->Hkv <= 0 || a->H % a->Hkv || a->H > 65535 ||
        (a->T + PF_ROWS - 1) / PF_ROWS > 0x7fffffff || a->P < 1)
        return cudaErrorInvalidValue;
    if (a->rotate && (rope->n_dims > a->Dh || rope->n_dims % 2)) return cudaErrorInvalidValue;
    unpack_keys_kernel<<<1, 1024, 0, st>>>(a->pages, a->n_pages, a->P, keys);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (a->Dh == 128) return launch_tc<128>(st, a, rope, keys);
    if (a->Dh == 64) return launch_tc<64>(st, a, rope, keys);
    return cudaErrorInvalidValue;
}
