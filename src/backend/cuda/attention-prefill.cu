// attention-prefill.cu — paged GQA attention for many query rows (prompt and document prefill)
// on tensor cores: the `attention` op when T >= LI_CUDA_ATTN_TC_MIN_T and Dh is 64 or 128, and
// `attention_dense` (LLaDA's bidirectional layers).
//
// Flash-attention style. One block of 4 warps owns 64 query rows of one query head; each warp owns
// 16 of them. The block walks the sequence's keys in tiles of 64:
//   1. K and V rows of the tile into shared memory as bf16 (bf16 pools and bf16 dense keys: cp.async,
//      two buffers, the next tile in flight; f32: loaded and converted through registers);
//   2. deferred RoPE: the page was stored at local positions, R_Δ k puts it at its place in this
//      prompt. A tile whose keys share one Δ (every tile inside a document) is served by the query
//      rows staged at -Δ instead (Q·R_Δk = R_-Δq·k: once per document, not per tile); a tile across
//      documents rotates its K rows in shared memory;
//   3. S = Q Kᵀ (mma.sync m16n8k16, bf16 in, fp32 accumulate), Q pre-scaled by scale·log2(e);
//   4. online softmax per row in fp32 (mask [kv_first, n_visible) only where a tile needs it),
//      P = exp2(S - m) in bf16, O = O·exp2(m_old - m_new) + P V, all in registers.
// Keys are located through a per-call index: li_cuda_attention_prefill unpacks the page table (one
// word per page, count valid keys) into one word per logical key (page id | slot | Δ) in a single
// block scan, so a tile gathers any mix of pages, partial pages and page sizes. With few row tiles
// (a query over cached documents) the keys are split across blocks (split-K) and merged after.
//
// Napkin maths (Llama-3.1-8B heads, prefill of 4096 tokens): causal FLOPs 2·T²·H·Dh = 137 GFLOP.
// A block reuses each K/V row for 64 query rows; the K/V of all heads (16 MB in bf16) stay in L2.
// mma.sync tops out near 660 TFLOP/s on this GPU; measured (H200, 2026-11-30, sixth session):
// 0.754 ms = 182 TFLOP/s without Δ, +11 % with a Δ per 512-token document, against SDPA flash
// 273 and cuDNN 527 in the same call. ncu: ~6 cycles per issued instruction with 12 warps per SM
// (168 registers, 70 KB of shared memory per block): latency-bound; 32 rows per warp or wgmma is
// the next step.
#include <stdlib.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention.cuh"
#include "cuda-device.cuh"

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
    const uint64_t count_mask = ((1ull << LI_PAGE_COUNT_BITS) - 1) << LI_PAGE_ID_BITS;
    for (int c0 = 0; c0 < n_pages; c0 += 1024) {
        int p = c0 + tid;
        uint64_t w = p < n_pages ? pages[p] : 0;
        int cnt = li_page_count(w);
        scan[tid] = cnt;
        __syncthreads();
        for (int off = 1; off < 1024; off <<= 1) {
            int v = tid >= off ? scan[tid - off] : 0;
            __syncthreads();
            scan[tid] += v;
            __syncthreads();
        }
        int start = base + scan[tid] - cnt;
        for (int s = 0; s < cnt; s++) keys[start + s] = (w & ~count_mask) | ((uint64_t)s << LI_PAGE_ID_BITS);
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

// Step 1 of both tile kernels: the keys [j0, j0 + nk) of a 64-key tile, K rotated by its page's
// Δ, rounded to bf16 into ks and vs (key-major, row stride ld). Keys past nk are zeros. The rows'
// pool offsets first (one word per key), then float4 loads issued before any arithmetic: the
// loop is bound by load latency otherwise. Ends with a barrier.
__device__ __forceinline__ void store4(__nv_bfloat16 *ks, __nv_bfloat16 *vs, int ld, int jj,
                                       int d, float4 k, float4 v) {
    __nv_bfloat162 *kd = (__nv_bfloat162 *)(ks + jj * ld + d);
    kd[0] = __floats2bfloat162_rn(k.x, k.y);
    kd[1] = __floats2bfloat162_rn(k.z, k.w);
    __nv_bfloat162 *vd = (__nv_bfloat162 *)(vs + jj * ld + d);
    vd[0] = __floats2bfloat162_rn(v.x, v.y);
    vd[1] = __floats2bfloat162_rn(v.z, v.w);
}

// KV: the pool's element type; dense mode (LLaDA's f32 activations) is served by KV = float only.
template <int DH, typename KV>
__device__ __forceinline__ void load_kv_tile(const li_cuda_attn_args &a,
                                             const li_cuda_rope_args &r, const uint64_t *keys,
                                             int j0, int nk, __nv_bfloat16 *ks, __nv_bfloat16 *vs,
                                             int ld, float *cs, long long *key_off,
                                             int *key_delta) {
    const int tid = threadIdx.x, G = a.H / a.Hkv, hk = blockIdx.y / G;
    const size_t page_stride = (size_t)a.L * 2 * a.Hkv * a.P * DH;  // elements per page
    const size_t kv_off = ((size_t)a.il * 2 * a.Hkv + hk) * a.P * DH;  // K of (il, hk) in a page
    const size_t v_off = (size_t)a.Hkv * a.P * DH;                    // V after K
    const int half = r.n_dims / 2;
    const bool vec = !a.rotate || r.n_dims % 8 == 0;  // float4 chunks never straddle a pair half
    // the tile's Δ: one cos/sin table when every key shares it (tiles inside a document)
    const int delta0 = a.rotate ? (int)li_page_delta(keys[j0]) : 0;
    const bool uniform = __syncthreads_and(
        tid >= nk || !a.rotate || (int)li_page_delta(keys[j0 + tid]) == delta0);
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
        if (tid < nk && a.n_dense) {  // dense rows (nk, Hkv, Dh) of kd / vd
            off = ((long long)(j0 + tid) * a.Hkv + hk) * DH;
        } else if (tid < nk) {
            uint64_t w = keys[j0 + tid];
            // a per-key word: the count field holds the key's slot in its page
            off = (long long)(li_page_id(w) * page_stride + kv_off + li_page_count(w) * DH);
            dl = a.rotate ? (int)li_page_delta(w) : 0;
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
        // K rows at kp + off, V rows at vp + off (the pool's V follows its K by v_off)
        const KV *kp = a.n_dense ? (const KV *)a.kd : (const KV *)a.kv;
        const KV *vp = a.n_dense ? (const KV *)a.vd : (const KV *)a.kv + v_off;
#pragma unroll 2
        for (int i = tid; i < PF_KEYS * n_units; i += PF_THREADS) {
            const int jj = i / n_units, u = i % n_units;
            const bool pair = u < n_pair;
            const int c0 = pair ? u : tail0 + (u - n_pair), c1 = c0 + half / 4;
            const long long off = key_off[jj];
            float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0, v0 = x0, v1 = x0;
            if (off >= 0) {
                const KV *krow = kp + off, *vrow = vp + off;
                x0 = kv_get4(krow + 4 * c0);
                v0 = kv_get4(vrow + 4 * c0);
                if (pair) {
                    x1 = kv_get4(krow + 4 * c1);
                    v1 = kv_get4(vrow + 4 * c1);
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
            store4(ks, vs, ld, jj, 4 * c0, x0, v0);
            if (pair) store4(ks, vs, ld, jj, 4 * c1, x1, v1);
        }
    } else {  // rotary dims not a multiple of 8: one element at a time
        for (int i = tid; i < PF_KEYS * DH; i += PF_THREADS) {
            int jj = i / DH, d = i % DH;
            float kx = 0.0f, vx = 0.0f;
            const long long off = key_off[jj];
            if (off >= 0) {
                const KV *kp = a.n_dense ? (const KV *)a.kd : (const KV *)a.kv;
                const KV *vp = a.n_dense ? (const KV *)a.vd : (const KV *)a.kv + v_off;
                const KV *row = kp + off;
                kx = kv_get(row + d);
                vx = kv_get(vp + off + d);
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
                    float o = kv_get(row + partner);
                    kx = is_b ? o * sn + kx * c : kx * c - o * sn;
                }
            }
            ks[jj * ld + d] = __float2bfloat16_rn(kx);
            vs[jj * ld + d] = __float2bfloat16_rn(vx);
        }
    }
    __syncthreads();

}

// The block's first query row. Row tiles in reverse launch order: in causal prefill the last rows
// see the most keys, so the longest blocks start first and the short ones fill the tail.
__device__ __forceinline__ int pf_row0() { return (gridDim.x - 1 - blockIdx.x) * PF_ROWS; }

// The block's query rows into qs (bf16, row stride ldq), scaled by scale·log2 e (exp(x) =
// exp2(x log2 e)), rotated by -Δ when delta > 0 (r, cs: cos / sin of Δ·θ_i, build_cs). Rows past
// T are zeros. Q·(R_Δ k) = (R_-Δ q)·k: a tile whose keys all share Δ needs no K rotation when Q
// is staged this way — the block rotates its 64 query rows once per document instead of 64 K
// rows per tile (backend.h rotates K; the product is the same, the rotation moves to the side
// that changes less often). Each value is rounded to bf16 once, as the unrotated path does.
template <int DH>
__device__ __forceinline__ void stage_query(const li_cuda_attn_args &a,
                                            const li_cuda_rope_args *r, int delta,
                                            const float *cs, __nv_bfloat16 *qs, int ldq) {
    const int tid = threadIdx.x, t0 = pf_row0(), h = blockIdx.y;
    const int n_rows = min(PF_ROWS, a.T - t0);
    const float qscale = a.scale * 1.4426950408889634f;
    const int n_dims = delta ? r->n_dims : 0;  // dims [0, n_dims) rotated
    const bool gptj = delta && r->gptj;
    // float4 chunks, all loads of a batch issued before any use (a block stages 32 KB from L2;
    // one load at a time would cost ~10 µs per staging). NEOX pairs (i, i + n_dims/2): a unit is
    // two chunks n_dims/8 apart; GPT-J pairs sit inside a chunk; dims past n_dims one chunk each.
    if (((uintptr_t)a.q & 15) == 0 && n_dims % 8 == 0) {
        constexpr int B = 4;                  // units per thread in flight
        const int hc = n_dims / 8;            // chunk offset of a NEOX partner
        const int n_pair = gptj ? 0 : hc;     // paired units per row
        const int n_units = DH / 4 - n_pair;  // units per row
        const int total = PF_ROWS * n_units;
        for (int i0 = tid; i0 < total; i0 += B * PF_THREADS) {
            float4 x[B], y[B];
            int c0[B];
            __nv_bfloat16 *dst[B];
#pragma unroll
            for (int b = 0; b < B; b++) {
                const int i = i0 + b * PF_THREADS, rr = i / n_units, u = i - rr * n_units;
                c0[b] = u < n_pair ? u : 2 * n_pair + (u - n_pair);
                dst[b] = i < total ? qs + rr * ldq : NULL;
                x[b] = y[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (i < total && rr < n_rows) {
                    const float4 *row = (const float4 *)(a.q + ((size_t)(t0 + rr) * a.H + h) * DH);
                    x[b] = __ldg(row + c0[b]);
                    if (u < n_pair) y[b] = __ldg(row + c0[b] + hc);
                }
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
                if (!dst[b]) continue;
                const int d0 = 4 * c0[b];
                float *xv = (float *)&x[b], *yv = (float *)&y[b];
                if (d0 < n_dims) {
                    if (!gptj) {  // R_-Δ on (x, y) = (x c + y s, y c - x s), pairs d0 + e
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float cn = cs[d0 + e], sn = cs[DH / 2 + d0 + e], x0 = xv[e];
                            xv[e] = x0 * cn + yv[e] * sn;
                            yv[e] = yv[e] * cn - x0 * sn;
                        }
                        __nv_bfloat162 *py = (__nv_bfloat162 *)(dst[b] + d0 + 4 * hc);
                        py[0] = __floats2bfloat162_rn(yv[0] * qscale, yv[1] * qscale);
                        py[1] = __floats2bfloat162_rn(yv[2] * qscale, yv[3] * qscale);
                    } else {  // pairs (d0, d0 + 1), (d0 + 2, d0 + 3)
#pragma unroll
                        for (int e = 0; e < 4; e += 2) {
                            const int pi = d0 / 2 + e / 2;
                            const float cn = cs[pi], sn = cs[DH / 2 + pi], x0 = xv[e];
                            xv[e] = x0 * cn + xv[e + 1] * sn;
                            xv[e + 1] = xv[e + 1] * cn - x0 * sn;
                        }
                    }
                }
                __nv_bfloat162 *px = (__nv_bfloat162 *)(dst[b] + d0);
                px[0] = __floats2bfloat162_rn(xv[0] * qscale, xv[1] * qscale);
                px[1] = __floats2bfloat162_rn(xv[2] * qscale, xv[3] * qscale);
            }
        }
        return;
    }
    // other layouts (rotary dims not a multiple of 8, unaligned q): one element or pair at a time
    for (int i = tid; i < PF_ROWS * DH; i += PF_THREADS) {
        const int rr = i / DH, d = i % DH;
        if (d < n_dims) continue;
        const float x = rr < n_rows ? a.q[((size_t)(t0 + rr) * a.H + h) * DH + d] * qscale : 0.0f;
        qs[rr * ldq + d] = __float2bfloat16_rn(x);
    }
    const int half = n_dims / 2;
    for (int i = tid; i < PF_ROWS * half; i += PF_THREADS) {
        const int rr = i / half, pi = i % half;
        int ia, ib;
        rope_pair(*r, pi, &ia, &ib);
        float x = 0.0f, y = 0.0f;
        if (rr < n_rows) {
            const float *row = a.q + ((size_t)(t0 + rr) * a.H + h) * DH;
            x = row[ia];
            y = row[ib];
        }
        const float cn = cs[pi], sn = cs[DH / 2 + pi];  // R_-Δ: (x c + y s, y c - x s)
        qs[rr * ldq + ia] = __float2bfloat16_rn((x * cn + y * sn) * qscale);
        qs[rr * ldq + ib] = __float2bfloat16_rn((y * cn - x * sn) * qscale);
    }
}

// The start of both tile kernels: the block's query rows (scaled by scale·log2 e, bf16) into qs
// (row stride ldq), each row's visible keys [row_lo, row_hi) (dense mode: all), and the block's key
// range [*kmin, *kmax), never past the keys the page table holds (a bad n_visible must not read
// stale index words). Ends with a barrier.
template <int DH>
__device__ __forceinline__ void tile_setup(const li_cuda_attn_args &a, const uint64_t *keys,
                                           __nv_bfloat16 *qs, int ldq, int *row_lo, int *row_hi,
                                           int *kmin, int *kmax) {
    __shared__ int kmin_s, kmax_s;
    const int tid = threadIdx.x, t0 = pf_row0();
    const int n_rows = min(PF_ROWS, a.T - t0);
    stage_query<DH>(a, NULL, 0, NULL, qs, ldq);
    if (tid == 0) {
        kmin_s = 0x7fffffff;
        kmax_s = 0;
    }
    __syncthreads();
    if (tid < PF_ROWS) {
        int lo = 0, hi = 0;
        if (tid < n_rows) {
            lo = a.kv_first ? a.kv_first[t0 + tid] : 0;
            hi = a.n_dense ? a.n_dense : a.n_visible[t0 + tid];
            atomicMin(&kmin_s, lo);
            atomicMax(&kmax_s, hi);
        }
        row_lo[tid] = lo;
        row_hi[tid] = hi;
    }
    __syncthreads();
    const int n_keys = a.n_dense ? a.n_dense : (int)keys[(size_t)a.n_pages * a.P];
    *kmin = kmin_s;
    *kmax = min(kmax_s, n_keys);
}

// ---- the register kernel (mma.sync) ---------------------------------------------------------------
//
// The same tiles, with S, P and O in registers (FlashAttention-2's layout): per warp 16 query rows,
// mma.sync.m16n8k16 bf16 -> fp32. Fragment ownership (PTX ISA, m16n8k16): with g = lane / 4 and
// c = lane % 4, a thread holds rows g and g + 8; of an 8-column accumulator block the columns
// 2c, 2c + 1. So the softmax of a row is a reduction over the 4 lanes of a quad, the rescale by
// exp2(m_old - m_new) happens in registers, and two adjacent 8-key blocks of P are exactly the A
// operand of one 16-key step of P·V. K and V are key-major; K is the B operand of Q·Kᵀ as it is,
// V's B fragments for P·V come from ldmatrix.trans. No shared-memory round trip for S or O (the
// cost of the WMMA kernel it replaced: 86 vs 37 TFLOP/s at T = 4096 causal on the H200,
// 2026-11-30; that kernel is in git history, commit e471f47 and before).

// NBUF K/V tile buffers: 1 for the synchronous loads, 2 for the cp.async pipeline (bf16 pools).
// The second buffer's K lives where Q was staged (Q is in registers once the loop starts), so the
// pipeline costs one more tile of shared memory: 3 blocks per SM at Dh 128 either way.
template <int DH, int NBUF = 1>
struct pfm_smem {
    static constexpr int LDQ = DH + 8;        // bf16; (LDQ / 2) % 32 == 4: conflict-free fragments
    static constexpr size_t tile = (size_t)PF_KEYS * LDQ * 2;  // one K or V tile, bytes
    static_assert(PF_KEYS == PF_ROWS, "buffer 1's K reuses Q's tile");
    static constexpr size_t q = 0;                             // also buffer 1's K
    static constexpr size_t k = q + (size_t)PF_ROWS * LDQ * 2;  // buffer 0's K
    static constexpr size_t v = k + tile;                        // buffer b's V: v + b tile
    static constexpr size_t rows = v + NBUF * tile;              // lo, hi (int)
    static constexpr size_t cs = rows + (size_t)PF_ROWS * 2 * 4;   // (DH / 2) cos, sin
    static constexpr size_t bytes = cs + (size_t)DH * 4;
};

// ---- the cp.async tile pipeline (bf16 pools) ------------------------------------------------
//
// A bf16 pool holds K and V exactly as the tensor cores read them, so a tile is copied global ->
// shared with cp.async (16 bytes per instruction, no registers) while the previous tile is being
// computed on: two buffers, tile j + 1 in flight during tile j. Keys whose page has Δ != 0 are
// rotated afterwards in shared memory (bf16 -> f32 -> R_Δ -> bf16: the same values as the
// synchronous loader's), a pass only tiles with such keys pay.

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Queues the copies of keys [j0, j0 + nk) of a 64-key tile into ks / vs (key-major, row stride
// ld); rows past nk are zeroed. Coalesced: the DH / 8 threads of a key row copy its consecutive
// 16-byte chunks, so a warp instruction reads whole 32-byte sectors of 2 (Dh 128) or 4 (Dh 64)
// rows and writes whole 128-byte lines of shared memory (half-row-per-thread copies read half
// sectors: ncu saw the L2 at 72 % busy with 49 % excess sectors). The chunk-0 thread of each row
// records the key's Δ in delta[] (0: none; -1: no key). No barrier.
template <int DH>
__device__ __forceinline__ void issue_kv_tile(const li_cuda_attn_args &a, const uint64_t *keys,
                                              int j0, int nk, __nv_bfloat16 *ks,
                                              __nv_bfloat16 *vs, int ld, int *delta) {
    constexpr int CPR = DH / 8;                 // 16-byte chunks per row
    constexpr int RPP = PF_THREADS / CPR;       // rows per pass
    constexpr int PASSES = PF_KEYS / RPP;
    const int tid = threadIdx.x, chunk = tid % CPR, row0 = tid / CPR, G = a.H / a.Hkv,
              hk = blockIdx.y / G;
    const size_t page_stride = (size_t)a.L * 2 * a.Hkv * a.P * DH;
    const size_t head_off = ((size_t)a.il * 2 * a.Hkv + hk) * a.P * DH + (size_t)chunk * 8;
    const size_t v_off = (size_t)a.Hkv * a.P * DH;  // V follows the Hkv K heads
    uint64_t w[PASSES];  // the rows' key words first: their loads in flight together
#pragma unroll
    for (int p = 0; p < PASSES; p++) {
        const int jj = row0 + p * RPP;
        w[p] = jj < nk && !a.n_dense ? __ldg(keys + j0 + jj) : 0;
    }
#pragma unroll
    for (int p = 0; p < PASSES; p++) {
        const int jj = row0 + p * RPP;
        __nv_bfloat16 *kd = ks + jj * ld + chunk * 8, *vd = vs + jj * ld + chunk * 8;
        if (jj < nk && a.n_dense) {  // dense rows (n_dense, Hkv, Dh) of bf16 kd / vd
            const size_t off = ((size_t)(j0 + jj) * a.Hkv + hk) * DH + (size_t)chunk * 8;
            cp_async16(kd, (const __nv_bfloat16 *)a.kd + off);
            cp_async16(vd, (const __nv_bfloat16 *)a.vd + off);
            if (chunk == 0) delta[jj] = 0;
        } else if (jj < nk) {
            // a per-key word: the count field holds the key's slot in its page
            const size_t off = li_page_id(w[p]) * page_stride + head_off + (size_t)li_page_count(w[p]) * DH;
            const __nv_bfloat16 *kg = (const __nv_bfloat16 *)a.kv + off;
            cp_async16(kd, kg);
            cp_async16(vd, kg + v_off);
            if (chunk == 0) delta[jj] = a.rotate ? (int)li_page_delta(w[p]) : 0;
        } else {
            *(uint4 *)kd = make_uint4(0, 0, 0, 0);
            *(uint4 *)vd = make_uint4(0, 0, 0, 0);
            if (chunk == 0) delta[jj] = -1;
        }
    }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    return *(uint32_t *)&v;
}

// The Δ every key of a landed tile shares (0: none), or -1 when its keys carry different Δs (a
// tile across a document boundary). delta[] as issue_kv_tile leaves it (-1: no key). Every warp
// reads all 64 entries (two per lane) and reaches the same verdict.
__device__ __forceinline__ int tile_delta(const int *delta) {
    static_assert(PF_KEYS == 64, "two keys per lane");
    const int lane = threadIdx.x & 31;
    const int da = delta[lane], db = delta[lane + 32];
    const int d0 = max(__reduce_max_sync(0xffffffffu, max(da, db)), 0);
    const bool same = __all_sync(0xffffffffu, (da < 0 || da == d0) && (db < 0 || db == d0));
    return same ? d0 : -1;
}

// cs[i], cs[DH / 2 + i] = cos, sin of Δ·θ_i for the rotary pairs, rebuilt only when Δ differs
// from *cs_delta (the last one built: a document spans many tiles). Block-uniform call (every
// thread passes the same Δ); ends with a barrier when it rebuilt.
template <int DH>
__device__ __forceinline__ void build_cs(const li_cuda_rope_args &r, int d0, float *cs,
                                         int *cs_delta) {
    if (d0 == *cs_delta) return;
    for (int i = threadIdx.x; i < r.n_dims / 2; i += PF_THREADS)
        rope_sincos((double)d0, r.inv_freq[i], &cs[i], &cs[DH / 2 + i]);
    *cs_delta = d0;
    __syncthreads();
}

// After a tile has landed (and a barrier), for tiles whose keys carry different Δs: K rows whose
// key has Δ > 0 rotated in place. Every thread takes the same branch (the Δs are in shared
// memory). When the keys with a Δ share one, the cos/sin table cs serves them (build_cs). Ends
// with a barrier when it rotated anything.
template <int DH>
__device__ __forceinline__ void rotate_kv_tile(const li_cuda_rope_args &r, __nv_bfloat16 *ks,
                                               int ld, const int *delta, float *cs,
                                               int *cs_delta) {
    static_assert(PF_KEYS == 64, "two keys per lane");
    const int tid = threadIdx.x, lane = tid & 31;
    // every warp reads all 64 Δs (two per lane; -1: no key) and reaches the same verdict
    const int da = delta[lane], db = delta[lane + 32];
    const int d0 = __reduce_max_sync(0xffffffffu, max(da, db));
    if (d0 <= 0) return;
    const bool uniform = __all_sync(0xffffffffu, (da <= 0 || da == d0) && (db <= 0 || db == d0));
    if (uniform) build_cs<DH>(r, d0, cs, cs_delta);  // keys without Δ are skipped below
    const int half = r.n_dims / 2;
    if (uniform && r.n_dims % 16 == 0) {
        // 8 pairs per work item, 16-byte shared loads and stores: NEOX pairs (i, i + half) from
        // two chunks half a row apart, GPT-J pairs (2i, 2i + 1) inside one chunk (4 per chunk)
        const int per_row = r.gptj ? r.n_dims / 8 : half / 8;
        for (int i = tid; i < PF_KEYS * per_row; i += PF_THREADS) {
            const int jj = i / per_row, c8 = (i - jj * per_row) * 8;
            if (delta[jj] <= 0) continue;
            __nv_bfloat16 *row = ks + jj * ld;
            uint4 *pa = (uint4 *)(row + c8), *pb = (uint4 *)(row + (r.gptj ? c8 : half + c8));
            uint4 ua = *pa, ub = *pb;
            __nv_bfloat162 *xa = (__nv_bfloat162 *)&ua, *xb = (__nv_bfloat162 *)&ub;
            if (!r.gptj) {
#pragma unroll
                for (int e = 0; e < 4; e++) {  // pairs c8 + 2e, c8 + 2e + 1
                    const float2 x = __bfloat1622float2(xa[e]), y = __bfloat1622float2(xb[e]);
                    const int p0 = c8 + 2 * e;
                    const float c0 = cs[p0], s0 = cs[DH / 2 + p0], c1 = cs[p0 + 1], s1 = cs[DH / 2 + p0 + 1];
                    xa[e] = __floats2bfloat162_rn(x.x * c0 - y.x * s0, x.y * c1 - y.y * s1);
                    xb[e] = __floats2bfloat162_rn(x.x * s0 + y.x * c0, x.y * s1 + y.y * c1);
                }
                *pa = ua;
                *pb = ub;
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {  // pair c8 / 2 + e = elements (2 pi, 2 pi + 1)
                    const float2 x = __bfloat1622float2(xa[e]);
                    const int pi = c8 / 2 + e;
                    const float c = cs[pi], sn = cs[DH / 2 + pi];
                    xa[e] = __floats2bfloat162_rn(x.x * c - x.y * sn, x.x * sn + x.y * c);
                }
                *pa = ua;
            }
        }
        __syncthreads();
        return;
    }
    for (int i = tid; i < PF_KEYS * half; i += PF_THREADS) {
        const int jj = i / half, pi = i - jj * half, dl = delta[jj];
        if (dl <= 0) continue;
        int ia, ib;
        rope_pair(r, pi, &ia, &ib);
        __nv_bfloat16 *row = ks + jj * ld;
        float x = __bfloat162float(row[ia]), y = __bfloat162float(row[ib]);
        rotate_pair(x, y, pi, dl, uniform, cs, DH / 2, r);
        row[ia] = __float2bfloat16_rn(x);
        row[ib] = __float2bfloat16_rn(y);
    }
    __syncthreads();
}

// B fragment of P·V from key-major V: two 8x8 bf16 matrices (keys k..k+7 and k+8..k+15, 8 dims
// each) loaded transposed, so a thread gets (keys 2c, 2c+1; dim g) of each: b0, b1. Lanes 0-15 give
// the 16 row addresses (16-byte aligned: LDQ * 2 and 8 dims * 2 bytes are multiples of 16).
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t &b0, uint32_t &b1,
                                                  const __nv_bfloat16 *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b0), "=r"(b1)
                 : "r"(a));
}

// 2^x on the SFU (ex2.approx.ftz: relative error < 2^-22, below P's bf16 rounding; -inf -> 0).
// exp2f adds range handling around the same instruction.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16 *p) {
    return *(const uint32_t *)p;
}

// 3 blocks per SM: at Dh 128 the kernel needs ~170 registers, and one more per thread (176 after
// allocation rounding) leaves room for only 2 blocks — measured 1.58 ms vs 2.10 ms for the
// 4096-token causal prefill on the H200. The bound keeps the compiler at <= 168.
// ASYNC (bf16 pools and bf16 dense keys): the cp.async double-buffered tile pipeline above, with
// uniform-Δ tiles served by restaged Q (stage_query); otherwise each tile is loaded (and
// converted, K rotated) synchronously by load_kv_tile. n_split > 1: blockIdx.z's share of the
// keys, written as partials.
template <int DH, typename KV, bool ASYNC>
__global__ void __launch_bounds__(PF_THREADS, 3)
    attention_prefill_mma(const li_cuda_attn_args a, const li_cuda_rope_args r,
                          const uint64_t *keys) {
    typedef pfm_smem<DH, ASYNC ? 2 : 1> L;
    constexpr int NB = PF_KEYS / 8;  // 8-key accumulator blocks per tile
    constexpr int ND = DH / 8;       // 8-dim output blocks
    constexpr int KQ = DH / 16;      // 16-dim steps of Q·Kᵀ
    extern __shared__ __align__(128) unsigned char sm[];
    __nv_bfloat16 *qs = (__nv_bfloat16 *)(sm + L::q);
    __nv_bfloat16 *ks = (__nv_bfloat16 *)(sm + L::k);
    __nv_bfloat16 *vs = (__nv_bfloat16 *)(sm + L::v);
    int *row_lo = (int *)(sm + L::rows), *row_hi = row_lo + PF_ROWS;
    float *cs = (float *)(sm + L::cs);
    __shared__ long long key_off[PF_KEYS];
    __shared__ int key_delta[ASYNC ? 2 : 1][PF_KEYS];  // per buffer

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, c = lane & 3, r0 = warp * 16;
    const int t0 = pf_row0(), h = blockIdx.y;
    const int n_rows = min(PF_ROWS, a.T - t0);
    int kmin, kmax;
    tile_setup<DH>(a, keys, qs, L::LDQ, row_lo, row_hi, &kmin, &kmax);
    if (a.n_split > 1) {  // split-K: this block's share of the keys (blockIdx.z)
        kmin = max(kmin, (int)blockIdx.z * a.keys_per_split);
        kmax = min(kmax, ((int)blockIdx.z + 1) * a.keys_per_split);
    }

    // this thread's Q fragments for the whole kernel: rows r0 + g (+ 8), dims 16 kk + 2c (+ 8)
    uint32_t qf[KQ][4];
    // this thread's Q fragments from staged rows: rows r0 + g (+ 8), dims 16 kk + 2c (+ 8)
    auto load_qf = [&](const __nv_bfloat16 *src) {
#pragma unroll
        for (int kk = 0; kk < KQ; kk++) {
            const __nv_bfloat16 *q0 = src + (r0 + g) * L::LDQ + kk * 16 + 2 * c;
            qf[kk][0] = ld32(q0);
            qf[kk][1] = ld32(q0 + 8 * L::LDQ);
            qf[kk][2] = ld32(q0 + 8);
            qf[kk][3] = ld32(q0 + 8 * L::LDQ + 8);
        }
    };
    load_qf(qs);
    const int lo0 = row_lo[r0 + g], hi0 = row_hi[r0 + g];          // row g
    const int lo1 = row_lo[r0 + g + 8], hi1 = row_hi[r0 + g + 8];  // row g + 8
    // tiles [j0, j0 + 64) inside [lo_max, hi_min) need no mask for this thread's rows
    const int lo_max = max(lo0, lo1), hi_min = min(min(hi0, hi1), kmax);
    float o[ND][4];
#pragma unroll
    for (int j = 0; j < ND; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    if (a.st_o) {  // a carried state (flash_attn_tiles): m from natural-log to the scores' log2
        const float log2e = 1.4426950408889634f;
        const size_t ia = (size_t)(t0 + r0 + g) * a.H + h, ib = ia + 8 * (size_t)a.H;
        const bool va = r0 + g < n_rows, vb = r0 + g + 8 < n_rows;
        if (va) m0 = a.st_m[ia] * log2e, l0 = a.st_l[ia];
        if (vb) m1 = a.st_m[ib] * log2e, l1 = a.st_l[ib];
#pragma unroll
        for (int jd = 0; jd < ND; jd++) {
            const int d = jd * 8 + 2 * c;
            if (va) {
                const float2 x = *(const float2 *)(a.st_o + ia * DH + d);
                o[jd][0] = x.x, o[jd][1] = x.y;
            }
            if (vb) {
                const float2 x = *(const float2 *)(a.st_o + ib * DH + d);
                o[jd][2] = x.x, o[jd][3] = x.y;
            }
        }
    }

    // ASYNC: buffer b holds K at kbuf(b), V at vbuf(b)
    auto kbuf = [&](int b) { return b ? qs : ks; };
    auto vbuf = [&](int b) { return vs + b * (L::tile / 2); };
    int cs_delta = 0;  // the Δ whose cos/sin cs holds (0: none yet)
    int q_delta = 0;   // the Δ qf is rotated by (-Δ)
    if constexpr (ASYNC) {
        __syncthreads();  // every thread has its Q fragments: qs becomes buffer 1's K
        if (kmin < kmax) issue_kv_tile<DH>(a, keys, kmin, min(PF_KEYS, kmax - kmin), kbuf(0),
                                           vbuf(0), L::LDQ, key_delta[0]);
        cp_async_commit();
        __syncthreads();  // tile 0's Δs (plain stores) visible to every warp
    }
    for (int j0 = kmin, buf = 0; j0 < kmax; j0 += PF_KEYS, buf ^= 1) {
        const int nk = min(PF_KEYS, kmax - j0);
        if constexpr (ASYNC) {
            // Tile j's Δs are known before it lands (issue_kv_tile read its words). A tile whose
            // keys share one Δ is served by Q rotated by -Δ, restaged only when Δ changes, in the
            // other buffer's K space (free until tile j + 1 is issued below); mixed tiles rotate
            // their K rows.
            const int dt = tile_delta(key_delta[buf]);  // -1: mixed
            const int want_q = dt > 0 ? dt : 0;
            if (want_q != q_delta) {  // block-uniform
                if (want_q) build_cs<DH>(r, want_q, cs, &cs_delta);
                stage_query<DH>(a, &r, want_q, cs, kbuf(buf ^ 1), L::LDQ);
                __syncthreads();
                load_qf(kbuf(buf ^ 1));
                __syncthreads();  // before tile j + 1 lands there
                q_delta = want_q;
            }
            // tile j + 1 into the other buffer (free: the previous iteration ended with a
            // barrier), then wait for tile j only
            const int j1 = j0 + PF_KEYS;
            if (j1 < kmax)
                issue_kv_tile<DH>(a, keys, j1, min(PF_KEYS, kmax - j1), kbuf(buf ^ 1),
                                  vbuf(buf ^ 1), L::LDQ, key_delta[buf ^ 1]);
            cp_async_commit();  // an empty group past the last tile keeps the count uniform
            cp_async_wait<1>();
            __syncthreads();
            if (dt < 0) rotate_kv_tile<DH>(r, kbuf(buf), L::LDQ, key_delta[buf], cs, &cs_delta);
        } else {
            load_kv_tile<DH, KV>(a, r, keys, j0, nk, ks, vs, L::LDQ, cs, key_off, key_delta[0]);
        }
        const __nv_bfloat16 *kt = ASYNC ? kbuf(buf) : ks, *vt = ASYNC ? vbuf(buf) : vs;  // this tile

        // S (16 x 64 per warp) = Q Kᵀ: 8 accumulator blocks of 8 keys
        float sacc[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            sacc[nb][0] = sacc[nb][1] = sacc[nb][2] = sacc[nb][3] = 0.0f;
            const __nv_bfloat16 *kr = kt + (nb * 8 + g) * L::LDQ + 2 * c;  // key nb*8+g
#pragma unroll
            for (int kk = 0; kk < KQ; kk++)
                mma_bf16(sacc[nb], qf[kk], ld32(kr + kk * 16), ld32(kr + kk * 16 + 8));
        }
        // mask (only tiles that some key of this thread's two rows cannot see: the diagonal and
        // the ends), row max over the tile (a quad holds a row), online-softmax update
        if (!(j0 >= lo_max && j0 + PF_KEYS <= hi_min)) {
#pragma unroll
            for (int nb = 0; nb < NB; nb++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int jj = nb * 8 + 2 * c + e, j = j0 + jj;
                    if (!(jj < nk && j >= lo0 && j < hi0)) sacc[nb][e] = -INFINITY;
                    if (!(jj < nk && j >= lo1 && j < hi1)) sacc[nb][2 + e] = -INFINITY;
                }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            mx0 = fmaxf(mx0, fmaxf(sacc[nb][0], sacc[nb][1]));
            mx1 = fmaxf(mx1, fmaxf(sacc[nb][2], sacc[nb][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        // no visible key yet: everything stays zero (exp2(-inf - -inf) would be NaN)
        const float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;
        const float al0 = exp2f(m0 - b0), al1 = exp2f(m1 - b1);  // m = -inf: 0
        m0 = mn0;
        m1 = mn1;
        // P = exp2(S - m), summed in fp32 and rounded to bf16 as A fragments (round to nearest:
        // the sum of the rounded values differs by ~2^-9 / sqrt(keys) relative)
        uint32_t pf[PF_KEYS / 16][4];
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            const float e0 = fast_exp2(sacc[nb][0] - b0), e1 = fast_exp2(sacc[nb][1] - b0);
            const float e2 = fast_exp2(sacc[nb][2] - b1), e3 = fast_exp2(sacc[nb][3] - b1);
            s0 += e0 + e1;
            s1 += e2 + e3;
            __nv_bfloat162 p0 = __floats2bfloat162_rn(e0, e1);
            __nv_bfloat162 p1 = __floats2bfloat162_rn(e2, e3);
            // keys 16 kk + [0, 8) are block 2 kk (a0, a1), keys 16 kk + [8, 16) block 2 kk + 1
            pf[nb / 2][(nb & 1) * 2 + 0] = *(uint32_t *)&p0;
            pf[nb / 2][(nb & 1) * 2 + 1] = *(uint32_t *)&p1;
        }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        l0 = l0 * al0 + s0;
        l1 = l1 * al1 + s1;
        // O = O * alpha + P V; the rescale is skipped when no row of the warp saw a new max
        // (most tiles once the running max has settled)
        if (!__all_sync(0xffffffffu, al0 == 1.0f && al1 == 1.0f)) {
#pragma unroll
            for (int jd = 0; jd < ND; jd++) {
                o[jd][0] *= al0;
                o[jd][1] *= al0;
                o[jd][2] *= al1;
                o[jd][3] *= al1;
            }
        }
#pragma unroll
        for (int jd = 0; jd < ND; jd++) {
            // lane l addresses key kk*16 + l % 16 at dims [8 jd, 8 jd + 8)
            const __nv_bfloat16 *vr = vt + (lane & 15) * L::LDQ + jd * 8;
#pragma unroll
            for (int kk = 0; kk < PF_KEYS / 16; kk++) {
                uint32_t b0, b1;
                ldmatrix_x2_trans(b0, b1, vr + kk * 16 * L::LDQ);
                mma_bf16(o[jd], pf[kk], b0, b1);
            }
        }
        __syncthreads();  // this buffer is overwritten by the next tile (ASYNC: the one after)
    }

    const int ra = r0 + g, rb = r0 + g + 8;
    if (a.st_o || a.n_split > 1) {
        // unnormalised: O, and (m, l) with m in natural-log units (the kernel's scores are in log2
        // units); no key: m -inf, l 0. Rows ra, rb go to rows ia, ib of the state (st_o, st_m,
        // st_l) or else of the partials for attention_kernel_combine (attention.cu: part_o,
        // part_ml as (m, l) pairs).
        const float ln2 = 0.6931471805599453f;
        const float ma = l0 > 0.0f ? m0 * ln2 : -INFINITY, mb = l1 > 0.0f ? m1 * ln2 : -INFINITY;
        size_t ia = (size_t)(t0 + ra) * a.H + h, ib = (size_t)(t0 + rb) * a.H + h;
        float *dst = a.st_o;
        if (!a.st_o) {
            ia = ia * a.n_split + blockIdx.z, ib = ib * a.n_split + blockIdx.z;
            dst = a.part_o;
        }
#pragma unroll
        for (int jd = 0; jd < ND; jd++) {
            const int d = jd * 8 + 2 * c;
            if (ra < n_rows) *(float2 *)(dst + ia * DH + d) = make_float2(o[jd][0], o[jd][1]);
            if (rb < n_rows) *(float2 *)(dst + ib * DH + d) = make_float2(o[jd][2], o[jd][3]);
        }
        if (c != 0) return;
        if (a.st_o) {
            if (ra < n_rows) a.st_m[ia] = ma, a.st_l[ia] = l0;
            if (rb < n_rows) a.st_m[ib] = mb, a.st_l[ib] = l1;
        } else {
            if (ra < n_rows) *(float2 *)(a.part_ml + ia * 2) = make_float2(ma, l0);
            if (rb < n_rows) *(float2 *)(a.part_ml + ib * 2) = make_float2(mb, l1);
        }
        return;
    }
    // out = O / l (rows with no visible key: 0); thread: rows g, g + 8, dims 8 jd + 2c (+1)
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
    for (int jd = 0; jd < ND; jd++) {
        const int d = jd * 8 + 2 * c;
        const size_t ia = ((size_t)(t0 + ra) * a.H + h) * DH + d,
                     ib = ((size_t)(t0 + rb) * a.H + h) * DH + d;
        if (a.out_bf16) {  // the next GEMM's input (attention_dense_bf16): the same values rounded
            if (ra < n_rows)
                *(__nv_bfloat162 *)((__nv_bfloat16 *)a.out_bf16 + ia) =
                    __floats2bfloat162_rn(o[jd][0] * inv0, o[jd][1] * inv0);
            if (rb < n_rows)
                *(__nv_bfloat162 *)((__nv_bfloat16 *)a.out_bf16 + ib) =
                    __floats2bfloat162_rn(o[jd][2] * inv1, o[jd][3] * inv1);
            continue;
        }
        if (ra < n_rows) {
            a.out[ia] = o[jd][0] * inv0;
            a.out[ia + 1] = o[jd][1] * inv0;
        }
        if (rb < n_rows) {
            a.out[ib] = o[jd][2] * inv1;
            a.out[ib + 1] = o[jd][3] * inv1;
        }
    }
}

// ---- launch -------------------------------------------------------------------------------------

extern "C" int li_cuda_attention_uses_tc(int T, int Dh) {
    return T >= LI_CUDA_ATTN_TC_MIN_T && (Dh == 64 || Dh == 128);
}

template <int DH, typename KV>
static cudaError_t launch_tc_kv(cudaStream_t st, const li_cuda_attn_args *a,
                                const li_cuda_rope_args *r, const uint64_t *keys) {
    // bf16 pages: the cp.async pipeline (synchronous loads measured slower; f32 keys are
    // converted through registers, so they load synchronously)
    constexpr bool async = sizeof(KV) == 2;
    const size_t smem = async ? pfm_smem<DH, 2>::bytes : pfm_smem<DH>::bytes;
    static bool attr_set = false;  // once per DH and KV (benign race)
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(attention_prefill_mma<DH, KV, async>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    const int n_split = a->n_split > 1 ? a->n_split : 1;
    dim3 grid((unsigned)((a->T + PF_ROWS - 1) / PF_ROWS), (unsigned)a->H, (unsigned)n_split);
    attention_prefill_mma<DH, KV, async><<<grid, PF_THREADS, smem, st>>>(*a, *r, keys);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || n_split == 1) return e;
    return li_cuda_attention_combine(st, a->out, a->part_o, a->part_ml, (int64_t)a->T * a->H,
                                     n_split, DH);
}

// f32 dense keys and f32 pools take the float instance, bf16 pools and bf16 dense keys the bf16
// one (the cp.async pipeline).
template <int DH>
static cudaError_t launch_tc(cudaStream_t st, const li_cuda_attn_args *a,
                             const li_cuda_rope_args *r, const uint64_t *keys) {
    if (a->kv_bf16) return launch_tc_kv<DH, __nv_bfloat16>(st, a, r, keys);
    return launch_tc_kv<DH, float>(st, a, r, keys);
}

extern "C" cudaError_t li_cuda_attention_dense(cudaStream_t st, float *out, const float *q, int T,
                                               int H, const void *k, const void *v, int kv_bf16,
                                               int nk, int Hkv, int Dh, float scale) {
    return li_cuda_attention_dense_out(st, out, NULL, q, T, H, k, v, kv_bf16, nk, Hkv, Dh, scale);
}

// Dense mode (every row over every key of k, v (nk, Hkv, Dh)): the checks both entry points share,
// then the arguments; *a is left for the caller's output fields.
static cudaError_t dense_args(li_cuda_attn_args *a, const float *q, int T, int H, const void *k,
                              const void *v, int kv_bf16, int nk, int Hkv, int Dh, float scale) {
    if (nk < 1 || Hkv <= 0 || H % Hkv || H > 65535 || (Dh != 64 && Dh != 128) ||
        ((uintptr_t)k & 15) || ((uintptr_t)v & 15))  // 16-byte row loads
        return cudaErrorInvalidValue;
    *a = li_cuda_attn_args{};
    a->q = q;
    a->T = T;
    a->H = H;
    a->Hkv = Hkv;
    a->Dh = Dh;
    a->P = 1;
    a->L = 1;
    a->scale = scale;
    a->n_split = 1;
    a->kd = k;
    a->vd = v;
    a->kv_bf16 = kv_bf16;
    a->n_dense = nk;
    return cudaSuccess;
}

static cudaError_t launch_dense(cudaStream_t st, const li_cuda_attn_args *a) {
    li_cuda_rope_args none = {};
    return a->Dh == 128 ? launch_tc<128>(st, a, &none, NULL) : launch_tc<64>(st, a, &none, NULL);
}

extern "C" cudaError_t li_cuda_flash_attn_tc(cudaStream_t st, float *o, float *m, float *l,
                                             const float *q, int nq, int H, const uint16_t *k,
                                             const uint16_t *v, int nk, int Hkv, int Dh,
                                             float scale) {
    if (nq <= 0 || nk <= 0) return cudaSuccess;
    if ((uintptr_t)o & 7) return cudaErrorInvalidValue;  // float2 state rows
    li_cuda_attn_args a;
    cudaError_t e = dense_args(&a, q, nq, H, k, v, 1, nk, Hkv, Dh, scale);
    if (e != cudaSuccess) return e;
    a.st_o = o;
    a.st_m = m;
    a.st_l = l;
    return launch_dense(st, &a);
}

extern "C" cudaError_t li_cuda_attention_dense_out(cudaStream_t st, float *out, uint16_t *out_bf16,
                                                   const float *q, int T, int H, const void *k,
                                                   const void *v, int kv_bf16, int nk, int Hkv,
                                                   int Dh, float scale) {
    if (T <= 0) return cudaSuccess;
    if (out_bf16 && ((uintptr_t)out_bf16 & 3)) return cudaErrorInvalidValue;  // bf16 pairs
    li_cuda_attn_args a;
    cudaError_t e = dense_args(&a, q, T, H, k, v, kv_bf16, nk, Hkv, Dh, scale);
    if (e != cudaSuccess) return e;
    a.out = out;
    a.out_bf16 = out_bf16;
    return launch_dense(st, &a);
}

// Blocks per SM of the pipelined kernel at Dh 128 (launch bounds) and the least keys worth a split
// (the partials and the merge cost about what 4 tiles do).
#define PF_BLOCKS_PER_SM 3
#define PF_MIN_SPLIT_KEYS (4 * PF_KEYS)

extern "C" void li_cuda_attention_prefill_plan(int T, int H, int max_keys, int n_sm, int *n_split,
                                               int *keys_per_split) {
    *n_split = 1;
    *keys_per_split = max_keys;
    const long blocks = (long)((T + PF_ROWS - 1) / PF_ROWS) * H, wave = (long)n_sm * PF_BLOCKS_PER_SM;
    if (T <= 0 || H <= 0 || max_keys < 2 * PF_MIN_SPLIT_KEYS || blocks * 2 > wave) return;
    int n = (int)(wave / blocks);                                  // fill about one wave
    if (n > max_keys / PF_MIN_SPLIT_KEYS) n = max_keys / PF_MIN_SPLIT_KEYS;
    if (n > 64) n = 64;
    if (n < 2) return;
    int per = (max_keys + n - 1) / n;
    per = (per + PF_KEYS - 1) / PF_KEYS * PF_KEYS;  // whole tiles
    *n_split = (max_keys + per - 1) / per;
    *keys_per_split = per;
}

extern "C" size_t li_cuda_attention_prefill_part_floats(int n_sm, int Dh) {
    // a split plan has blocks * n_split <= one wave and rows <= 64 per block
    return (size_t)PF_ROWS * PF_BLOCKS_PER_SM * (size_t)n_sm * ((size_t)Dh + 2);
}

extern "C" cudaError_t li_cuda_attention_prefill(cudaStream_t st, const li_cuda_attn_args *a,
                                                 const li_cuda_rope_args *rope, uint64_t *keys) {
    // the fp32 launcher's checks (attention.cu), and the cos/sin table holds Dh floats
    if (a->T <= 0) return cudaSuccess;
    if (a->n_pages < 1 || a->Hkv <= 0 || a->H % a->Hkv || a->H > 65535 ||
        (a->T + PF_ROWS - 1) / PF_ROWS > 0x7fffffff || a->P < 1)
        return cudaErrorInvalidValue;
    if (a->rotate && (rope->n_dims > a->Dh || rope->n_dims % 2)) return cudaErrorInvalidValue;
    if (a->n_split > 1 && (a->n_split > 65535 || !a->part_o || !a->part_ml ||
                           a->keys_per_split < PF_KEYS || a->keys_per_split % PF_KEYS))
        return cudaErrorInvalidValue;
    unpack_keys_kernel<<<1, 1024, 0, st>>>(a->pages, a->n_pages, a->P, keys);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (a->Dh == 128) return launch_tc<128>(st, a, rope, keys);
    if (a->Dh == 64) return launch_tc<64>(st, a, rope, keys);
    return cudaErrorInvalidValue;
}
