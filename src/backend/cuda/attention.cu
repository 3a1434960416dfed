// attention.cu — paged GQA attention with per-page deferred RoPE (DESIGN.md §3), the GPU version
// of the op table's `attention`. Correctness first: fp32 CUDA cores, no tensor cores yet.
//
// Grid (n_split, Hkv, T): one block per (query row, kv head, key range) holds all G = H / Hkv query
// heads of that kv head, so each K/V chunk read from HBM serves G heads (GQA-aware). It walks its
// pages in logical order, 32 keys at a time: K and V chunk -> shared memory, G x 32 scores, online
// softmax per head (running max m and sum l), acc = acc * exp(m_old - m_new) + Σ p v. Keys outside
// [kv_first, n_visible) are masked; pages wholly before kv_first or after n_visible are skipped
// without being read.
//
// Deferred RoPE: the page's K was stored rotated at local positions; attention needs R_Δ k. Since
// R is orthogonal, q·(R_Δ k) = (R_-Δ q)·k, so the block rotates its G query rows by -Δ when Δ
// changes from one page to the next (once per document, not per key) and never touches K.
//
// Split-K: with few rows (decode) T * Hkv blocks cannot fill 132 SMs, so the page list is cut into
// n_split ranges; each writes unnormalised (o, m, l) partials and attention_kernel_combine merges
// them: M = max m_s, w_s = exp(m_s - M), out = Σ w_s o_s / Σ w_s l_s (two passes).
//
// Two kernels with that grid and those results: attention_kernel_warp (G 1/2/4/8, Dh 64/128, i.e.
// every Llama-family shape; below) and attention_kernel_paged (any shape; shared memory, 32 keys
// per chunk). LI_CUDA_ATTN_GENERIC=1 forces the generic one.
//
// Napkin maths (decode, Llama-3.1-8B heads: Hkv 8, Dh 128, ctx 20K): K + V of one layer are
// 20000 * 8 * 128 * 4 B * 2 = 164 MB, 34 µs at the H200's 4.8 TB/s. Measured on an H200
// (gpu-check's timing, 2026-11-30): the warp kernel 0.089 ms at batch 1 (~1.85 TB/s, also at batch
// 16/64 as one launch per sequence), the generic kernel ~0.31 ms (~0.52 TB/s); Δ rotation costs
// ~3% (each warp rotates its own query at its first page). Where the fast versions go (issue 4,
// grown in dev/cuda/ first): decode — cp.async/TMA double-buffered page loads, bf16 KV, the query
// rotated once per document in a pre-pass, one launch for a batch of sequences; prefill — a
// flash-attention tile kernel with wgmma (tensor cores) over Q tiles of 64 rows, K tiles rotated
// per page in shared memory.
//
// Tested by tests/gpu/gpu-check.c against ref_attention (ops-ref.c): GQA 1..8, P 1/16/64, random
// Δ per document, kv_first, lengths not a multiple of P, split and unsplit.
#include <stdlib.h>

#include <cuda_runtime.h>

#include "attention.cuh"
#include "cuda-device.cuh"

#define ATT_THREADS 128
// keys per shared-memory chunk of the generic kernel; = warp size (its softmax step uses one lane
// per key)
#define ATT_CHUNK 32

// Logical index of page p0's first key: Σ valid counts of the pages before it, for every thread
// of the block (sh: one shared int). Has barriers: call it from all threads.
__device__ __forceinline__ int keys_before_page(const uint64_t *pages, int p0, int *sh) {
    if (threadIdx.x == 0) *sh = 0;
    __syncthreads();
    int before = 0;
    for (int p = threadIdx.x; p < p0; p += blockDim.x) before += li_page_count(pages[p]);
    if (before) atomicAdd(sh, before);
    __syncthreads();
    return *sh;
}

// Dynamic shared memory of attention_kernel_paged, in floats.
static size_t attn_smem_floats(int G, int Dh) {
    return 3 * (size_t)G * Dh + (size_t)ATT_CHUNK * (Dh + 1) + (size_t)ATT_CHUNK * Dh +
           (size_t)G * ATT_CHUNK + 3 * (size_t)G;
}

template <typename KV>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_kernel_paged(const li_cuda_attn_args a, const li_cuda_rope_args r) {
    extern __shared__ float sm[];
    const int G = a.H / a.Hkv, Dh = a.Dh, C = ATT_CHUNK;
    const int sp = blockIdx.x, hk = blockIdx.y, t = blockIdx.z;
    float *qs = sm;                 // (G, Dh) the query heads of kv head hk
    float *qr = qs + G * Dh;        // (G, Dh) qs rotated by -Δ of the current page
    float *acc = qr + G * Dh;       // (G, Dh) unnormalised output
    float *ks = acc + G * Dh;       // (C, Dh + 1) K chunk; padded rows: column reads conflict-free
    float *vs = ks + C * (Dh + 1);  // (C, Dh) V chunk
    float *ps = vs + C * Dh;        // (G, C) scores, then probabilities
    float *mrow = ps + G * C;       // (G) running max
    float *lrow = mrow + G;         // (G) running sum of exp
    float *alpha = lrow + G;        // (G) this chunk's rescale factor exp(m_old - m_new)
    __shared__ int j0_sh;

    const int tid = threadIdx.x, nth = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int first = a.kv_first ? a.kv_first[t] : 0, nv = a.n_visible[t];
    const int p0 = sp * a.pages_per_split;
    const int p1 = min(a.n_pages, p0 + a.pages_per_split);

    const float *qsrc = a.q + ((int64_t)t * a.H + (int64_t)hk * G) * Dh;  // G heads, contiguous
    for (int i = tid; i < G * Dh; i += nth) {
        qs[i] = qsrc[i];
        acc[i] = 0.0f;
    }
    for (int g = tid; g < G; g += nth) {
        mrow[g] = -INFINITY;
        lrow[g] = 0.0f;
    }
    __syncthreads();
    int j0 = keys_before_page(a.pages, p0, &j0_sh);
    int64_t cur_delta = -1;
    const int64_t head_stride = (int64_t)a.P * Dh;  // one (kv head) block of a page: P rows

    for (int p = p0; p < p1 && j0 < nv; p++) {
        // page metadata unpacked from one 64-bit word (page-word.h)
        const uint64_t w = a.pages[p];
        const int cnt = li_page_count(w);
        const int64_t id = li_page_id(w);
        const int64_t delta = a.rotate ? li_page_delta(w) : 0;
        if (j0 + cnt <= first) {  // wholly before the first visible key: never read
            j0 += cnt;
            continue;
        }
        if (delta != cur_delta) {  // q' = R_-Δ q for the G heads (a' = a c + b s, b' = b c - a s)
            for (int i = tid; i < G * Dh; i += nth) qr[i] = qs[i];
            __syncthreads();
            if (delta != 0) {
                const int pairs = r.n_dims / 2;
                for (int i = tid; i < G * pairs; i += nth) {
                    int g = i / pairs, pi = i % pairs, ia, ib;
                    float c, s;
                    rope_sincos((double)delta, r.inv_freq[pi], &c, &s);
                    rope_pair(r, pi, &ia, &ib);
                    float x = qs[g * Dh + ia], y = qs[g * Dh + ib];
                    qr[g * Dh + ia] = x * c + y * s;
                    qr[g * Dh + ib] = y * c - x * s;
                }
            }
            cur_delta = delta;
            __syncthreads();
        }
        // K rows of (page id, layer il, kv head hk) are contiguous (P, Dh); V follows Hkv heads on.
        const KV *kbase = (const KV *)a.kv + (((id * a.L + a.il) * 2) * a.Hkv + hk) * head_stride;
        const KV *vbase = kbase + (int64_t)a.Hkv * head_stride;
        for (int c0 = 0; c0 < cnt; c0 += C) {
            const int nc = min(C, cnt - c0), jc = j0 + c0;
            if (jc >= nv) break;
            if (jc + nc <= first) continue;
            for (int i = tid; i < nc * Dh; i += nth) {
                int c = i / Dh, d = i - c * Dh;
                ks[c * (Dh + 1) + d] = kv_get(kbase + (int64_t)c0 * Dh + i);
                vs[i] = kv_get(vbase + (int64_t)c0 * Dh + i);
            }
            __syncthreads();
            for (int i = tid; i < G * nc; i += nth) {
                int g = i / nc, c = i - g * nc, j = jc + c;
                float s = -INFINITY;
                if (j >= first && j < nv) {
                    const float *qg = qr + g * Dh, *kc = ks + c * (Dh + 1);
                    float dot = 0.0f;
                    for (int d = 0; d < Dh; d++) dot = fmaf(qg[d], kc[d], dot);
                    s = dot * a.scale;
                }
                ps[g * C + c] = s;
            }
            __syncthreads();
            for (int g = warp; g < G; g += nth / 32) {  // online softmax: one warp per head
                float s = lane < nc ? ps[g * C + lane] : -INFINITY;
                float mx = s;
                for (int o = 16; o > 0; o >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                float m_old = mrow[g], m_new = fmaxf(m_old, mx);
                // m_new = -inf: nothing visible yet (p = 0, acc stays 0); s = -inf: a masked key
                float pr = (m_new == -INFINITY || s == -INFINITY) ? 0.0f : expf(s - m_new);
                float al = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
                float sum = pr;
                for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                if (lane < nc) ps[g * C + lane] = pr;
                __syncwarp();  // every lane has read mrow[g] before lane 0 replaces it
                if (lane == 0) {
                    mrow[g] = m_new;
                    lrow[g] = al * lrow[g] + sum;
                    alpha[g] = al;
                }
            }
            __syncthreads();
            for (int i = tid; i < G * Dh; i += nth) {
                int g = i / Dh, d = i - g * Dh;
                float o = acc[i] * alpha[g];
                const float *pg = ps + g * C;
                for (int c = 0; c < nc; c++) o = fmaf(pg[c], vs[c * Dh + d], o);
                acc[i] = o;
            }
            __syncthreads();
        }
        j0 += cnt;
    }

    if (a.n_split == 1) {
        float *dst = a.out + ((int64_t)t * a.H + (int64_t)hk * G) * Dh;
        for (int i = tid; i < G * Dh; i += nth) dst[i] = acc[i] / lrow[i / Dh];
    } else {
        for (int i = tid; i < G * Dh; i += nth) {
            int g = i / Dh, d = i - g * Dh;
            int64_t row = (int64_t)t * a.H + (int64_t)hk * G + g;
            a.part_o[(row * a.n_split + sp) * Dh + d] = acc[i];
        }
        for (int g = tid; g < G; g += nth) {
            int64_t row = (int64_t)t * a.H + (int64_t)hk * G + g;
            a.part_ml[(row * a.n_split + sp) * 2] = mrow[g];
            a.part_ml[(row * a.n_split + sp) * 2 + 1] = lrow[g];
        }
    }
}

// ---- warp-per-page variant (Dh 64 or 128, G 1/2/4/8: every Llama-family shape) ----------------
//
// Same grid and results as attention_kernel_paged, organised for bandwidth: the block's 4 warps
// take the range's pages round-robin and run independently (no block barrier inside the loop), each
// with its own rotated query, online-softmax state and output accumulator in registers. A lane owns
// dims lane + 32 i (i < DV = Dh / 32) of every head, so K/V row loads are 128-byte coalesced and a
// dot product is DV FMAs + a 5-step butterfly. KB = 32 / DV keys are loaded before any is used
// (64 floats of K and V in flight per lane). At the end the 4 warps' (m, l, acc) are merged through
// shared memory exactly as split-K partials are. The generic kernel above stays for other shapes.
//
// Which dims a lane owns depends on the pool's element type (kv_lanes): f32 rows, dims lane + 32 i
// (each of the DV loads of a warp reads 128 contiguous bytes); bf16 rows, the DV consecutive dims
// from lane * DV (one 8-byte load at Dh 128: a warp reads the 256-byte row at once).
template <typename KV, int DV> struct kv_lanes;
template <int DV> struct kv_lanes<float, DV> {
    static __device__ __forceinline__ int dim(int lane, int i) { return lane + 32 * i; }
    static __device__ __forceinline__ void load(const float *row, int lane, bool in, float (&x)[DV]) {
#pragma unroll
        for (int i = 0; i < DV; i++) x[i] = in ? row[lane + 32 * i] : 0.0f;
    }
};
template <int DV> struct kv_lanes<__nv_bfloat16, DV> {
    static_assert(DV == 2 || DV == 4, "bf16 rows: Dh 64 or 128");
    static __device__ __forceinline__ int dim(int lane, int i) { return lane * DV + i; }
    static __device__ __forceinline__ void load(const __nv_bfloat16 *row, int lane, bool in,
                                                float (&x)[DV]) {
        if constexpr (DV == 4) {
            const float4 f = in ? kv_get4(row + 4 * lane) : make_float4(0.f, 0.f, 0.f, 0.f);
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
        } else {
            float2 f = make_float2(0.f, 0.f);
            if (in) f = __bfloat1622float2(*(const __nv_bfloat162 *)(row + 2 * lane));
            x[0] = f.x, x[1] = f.y;
        }
    }
};

template <int G, int DV, typename KV>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_kernel_warp(const li_cuda_attn_args a, const li_cuda_rope_args r) {
    typedef kv_lanes<KV, DV> lanes;
    constexpr int Dh = DV * 32, KB = 32 / DV, NW = ATT_THREADS / 32;
    __shared__ float qsh[G * Dh];       // (G, Dh) the query heads of kv head hk
    __shared__ float qw[NW][G * Dh];    // per warp: q rotated by -Δ; at the end, the warp's acc
    __shared__ float mw[NW][G], lw[NW][G];
    __shared__ int j0_sh;
    const int sp = blockIdx.x, hk = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int first = a.kv_first ? a.kv_first[t] : 0, nv = a.n_visible[t];
    const int p0 = sp * a.pages_per_split;
    const int p1 = min(a.n_pages, p0 + a.pages_per_split);

    const float *qsrc = a.q + ((int64_t)t * a.H + (int64_t)hk * G) * Dh;
    for (int i = tid; i < G * Dh; i += ATT_THREADS) qsh[i] = qsrc[i];
    __syncthreads();

    float qreg[G][DV], acc[G][DV], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < DV; i++) acc[g][i] = qreg[g][i] = 0.0f;
    }
    int j0 = keys_before_page(a.pages, p0, &j0_sh);
    int64_t cur_delta = -1;
    const int64_t head_stride = (int64_t)a.P * Dh;
    float *qr = qw[warp];

    for (int p = p0; p < p1 && j0 < nv; p++) {
        const uint64_t w = a.pages[p];
        const int cnt = li_page_count(w);
        if ((p - p0) % NW != warp || j0 + cnt <= first) {  // another warp's page, or wholly masked
            j0 += cnt;
            continue;
        }
        const int64_t id = li_page_id(w);
        const int64_t delta = a.rotate ? li_page_delta(w) : 0;
        const KV *kbase = (const KV *)a.kv + (((id * a.L + a.il) * 2) * a.Hkv + hk) * head_stride;
        const KV *vbase = kbase + (int64_t)a.Hkv * head_stride;
        for (int c0 = 0; c0 < cnt; c0 += KB) {
            const int jc = j0 + c0;
            if (jc >= nv) break;
            float kr[KB][DV], vr[KB][DV];
#pragma unroll
            for (int c = 0; c < KB; c++) {
                const bool in = c0 + c < cnt;
                lanes::load(kbase + (int64_t)(c0 + c) * Dh, lane, in, kr[c]);
                lanes::load(vbase + (int64_t)(c0 + c) * Dh, lane, in, vr[c]);
            }
            // q' = R_-Δ q (a' = a c + b s, b' = b c - a s), this warp only; after the first K/V
            // loads are issued, so that the rotation's latency hides behind them
            if (c0 == 0 && delta != cur_delta) {
                for (int i = lane; i < G * Dh; i += 32) qr[i] = qsh[i];
                __syncwarp();
                if (delta != 0) {
                    const int pairs = r.n_dims / 2;
                    for (int i = lane; i < G * pairs; i += 32) {
                        int g = i / pairs, pi = i - g * pairs, ia, ib;
                        float c, s;
                        rope_sincos((double)delta, r.inv_freq[pi], &c, &s);
                        rope_pair(r, pi, &ia, &ib);
                        float x = qsh[g * Dh + ia], y = qsh[g * Dh + ib];
                        qr[g * Dh + ia] = x * c + y * s;
                        qr[g * Dh + ib] = y * c - x * s;
                    }
                }
                __syncwarp();
#pragma unroll
                for (int g = 0; g < G; g++)
#pragma unroll
                    for (int i = 0; i < DV; i++) qreg[g][i] = qr[g * Dh + lanes::dim(lane, i)];
                __syncwarp();  // qr is rewritten at the next Δ change
                cur_delta = delta;
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                float s[KB];
#pragma unroll
                for (int c = 0; c < KB; c++) {
                    float d = 0.0f;
#pragma unroll
                    for (int i = 0; i < DV; i++) d = fmaf(qreg[g][i], kr[c][i], d);
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    int j = jc + c;
                    s[c] = (c0 + c < cnt && j >= first && j < nv) ? d * a.scale : -INFINITY;
                }
                float mx = -INFINITY;
#pragma unroll
                for (int c = 0; c < KB; c++) mx = fmaxf(mx, s[c]);
                const float m_new = fmaxf(m[g], mx);
                if (m_new == -INFINITY) continue;  // nothing visible yet (same on every lane)
                const float al = m[g] == -INFINITY ? 0.0f : expf(m[g] - m_new);
                float psum = 0.0f;
#pragma unroll
                for (int i = 0; i < DV; i++) acc[g][i] *= al;
#pragma unroll
                for (int c = 0; c < KB; c++) {
                    float pc = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);
                    psum += pc;
#pragma unroll
                    for (int i = 0; i < DV; i++) acc[g][i] = fmaf(pc, vr[c][i], acc[g][i]);
                }
                l[g] = l[g] * al + psum;
                m[g] = m_new;
            }
        }
        j0 += cnt;
    }

    // merge the warps: M = max m_w, weights exp(m_w - M) (0 for a warp that saw nothing)
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int i = 0; i < DV; i++) qr[g * Dh + lanes::dim(lane, i)] = acc[g][i];
        if (lane == 0) {
            mw[warp][g] = m[g];
            lw[warp][g] = l[g];
        }
    }
    __syncthreads();
    for (int e = tid; e < G * Dh; e += ATT_THREADS) {
        const int g = e / Dh, d = e - g * Dh;
        float M = -INFINITY;
#pragma unroll
        for (int v = 0; v < NW; v++) M = fmaxf(M, mw[v][g]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int v = 0; v < NW; v++) {
                if (mw[v][g] == -INFINITY) continue;
                float wv = expf(mw[v][g] - M);
                L += wv * lw[v][g];
                O += wv * qw[v][g * Dh + d];
            }
        }
        const int64_t row = (int64_t)t * a.H + (int64_t)hk * G + g;
        if (a.n_split == 1) {
            a.out[row * Dh + d] = O / L;
        } else {
            a.part_o[(row * a.n_split + sp) * Dh + d] = O;
            if (d == 0) {
                a.part_ml[(row * a.n_split + sp) * 2] = M;
                a.part_ml[(row * a.n_split + sp) * 2 + 1] = L;
            }
        }
    }
}

typedef void (*attn_kernel_fn)(const li_cuda_attn_args, const li_cuda_rope_args);

// The warp kernel instantiated for (G, Dh) and the pool's element type, or NULL: the generic
// kernel serves the rest.
static attn_kernel_fn warp_kernel_for(int G, int Dh, int kv_bf16) {
#define LI_ATTN_CASE(g, dv)                                                                        \
    if (G == g && Dh == 32 * dv)                                                                   \
        return kv_bf16 ? attention_kernel_warp<g, dv, __nv_bfloat16> : attention_kernel_warp<g, dv, float>;
    LI_ATTN_CASE(1, 2) LI_ATTN_CASE(2, 2) LI_ATTN_CASE(4, 2) LI_ATTN_CASE(8, 2)
    LI_ATTN_CASE(1, 4) LI_ATTN_CASE(2, 4) LI_ATTN_CASE(4, 4) LI_ATTN_CASE(8, 4)
#undef LI_ATTN_CASE
    return NULL;
}

// grid (T * H): merges the n_split partials of one (row, head). A range with no visible key has
// m = -inf, l = 0 and weight 0.
__global__ void attention_kernel_combine(float *out, const float *part_o, const float *part_ml,
                                         int n_split, int Dh) {
    const int64_t row = blockIdx.x;
    const float *ml = part_ml + row * n_split * 2;
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, ml[2 * s]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++)
        if (ml[2 * s] != -INFINITY) L += expf(ml[2 * s] - M) * ml[2 * s + 1];
    const float *po = part_o + row * n_split * Dh;
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < n_split; s++)
            if (ml[2 * s] != -INFINITY) o += expf(ml[2 * s] - M) * po[(int64_t)s * Dh + d];
        out[row * Dh + d] = o / L;
    }
}

// Blocks of the kernel serving (G, Dh) that fit on one SM (occupancy), cached per warp-kernel
// shape; at least 1.
static int blocks_per_sm(int G, int Dh, int kv_bf16) {
    static int cache[9][2][2];  // [G][Dh == 128][bf16]; 0 = not computed (a benign race)
    attn_kernel_fn wk = warp_kernel_for(G, Dh, kv_bf16);
    int *slot = wk ? &cache[G][Dh == 128][kv_bf16 != 0] : NULL;
    if (slot && *slot) return *slot;
    int nb = 0;
    cudaError_t e;
    if (wk) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, wk, ATT_THREADS, 0);
    } else {
        size_t smem = attn_smem_floats(G, Dh) * sizeof(float);
        if (smem > 48 * 1024)
            cudaFuncSetAttribute(attention_kernel_paged<float>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        // the bf16 instance differs only in its loads: the same occupancy
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, attention_kernel_paged<float>,
                                                          ATT_THREADS, smem);
    }
    if (e != cudaSuccess || nb < 1) {
        cudaGetLastError();  // clear it: the launch itself will report a real problem
        nb = 1;
    }
    if (slot) *slot = nb;
    return nb;
}

// Split-K only when T * Hkv blocks leave SMs idle: as many key ranges as fill one wave of resident
// blocks (n_sm * occupancy; floor, so that no second, mostly empty wave follows), with >= 4 pages
// per range so that a range amortises its query load and rotation.
extern "C" void li_cuda_attention_plan(int T, int Hkv, int G, int Dh, int kv_bf16, int n_pages,
                                       int n_sm, int *n_split, int *pages_per_split) {
    int64_t base = (int64_t)T * Hkv;
    int64_t target = (int64_t)(n_sm > 0 ? n_sm : 132) * blocks_per_sm(G, Dh, kv_bf16);
    // pages per key range at least (LI_CUDA_ATTN_MIN_PAGES, default 4; read once: A/B runs)
    static int min_pages = 0;
    if (!min_pages) {
        const char *e = getenv("LI_CUDA_ATTN_MIN_PAGES");
        min_pages = e && atoi(e) > 0 ? atoi(e) : 4;
    }
    int ns = 1;
    if (2 * base <= target && n_pages >= 2 * min_pages) {
        ns = (int)(target / base);
        if (ns > n_pages / min_pages) ns = n_pages / min_pages;
        if (ns > 256) ns = 256;
        if (ns < 1) ns = 1;
    }
    int pps = n_pages > 0 ? (n_pages + ns - 1) / ns : 1;
    if (pps < 1) pps = 1;
    *pages_per_split = pps;
    *n_split = n_pages > 0 ? (n_pages + pps - 1) / pps : 1;
}

static cudaError_t launch_generic(cudaStream_t st, const li_cuda_attn_args *a,
                                  const li_cuda_rope_args *rope, dim3 grid);

extern "C" cudaError_t li_cuda_attention(cudaStream_t st, const li_cuda_attn_args *a,
                                         const li_cuda_rope_args *rope) {
    if (a->T <= 0) return cudaSuccess;
    if (a->Hkv <= 0 || a->H % a->Hkv || a->T > 65535 || a->Hkv > 65535 || a->n_split < 1 ||
        a->n_split > 65535 || a->n_pages < 1)
        return cudaErrorInvalidValue;
    li_cuda_rope_args none = {};  // no rotation: n_dims 0
    if (!a->rotate || !rope) {
        if (a->rotate) return cudaErrorInvalidValue;
        rope = &none;
    } else if (rope->n_dims > a->Dh || rope->n_dims % 2) {
        return cudaErrorInvalidValue;
    }
    dim3 grid(a->n_split, a->Hkv, a->T);
    // LI_CUDA_ATTN_GENERIC=1 forces the generic kernel (A/B timing); read once.
    static int force_generic = -1;
    if (force_generic < 0) force_generic = getenv("LI_CUDA_ATTN_GENERIC") != NULL;
    attn_kernel_fn wk = force_generic ? NULL : warp_kernel_for(a->H / a->Hkv, a->Dh, a->kv_bf16);
    if (wk) {
        wk<<<grid, ATT_THREADS, 0, st>>>(*a, *rope);
    } else {
        cudaError_t e = launch_generic(st, a, rope, grid);
        if (e != cudaSuccess) return e;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || a->n_split == 1) return e;
    attention_kernel_combine<<<(unsigned)(a->T * a->H), 128, 0, st>>>(a->out, a->part_o, a->part_ml,
                                                                      a->n_split, a->Dh);
    return cudaGetLastError();
}

static cudaError_t launch_generic(cudaStream_t st, const li_cuda_attn_args *a,
                                  const li_cuda_rope_args *rope, dim3 grid) {
    size_t smem = attn_smem_floats(a->H / a->Hkv, a->Dh) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e = a->kv_bf16 ? cudaFuncSetAttribute(attention_kernel_paged<__nv_bfloat16>,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          (int)smem)
                                   : cudaFuncSetAttribute(attention_kernel_paged<float>,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          (int)smem);
        if (e != cudaSuccess) return e;  // more than the 227 KB an H100/H200 block can have
    }
    if (a->kv_bf16) attention_kernel_paged<__nv_bfloat16><<<grid, ATT_THREADS, smem, st>>>(*a, *rope);
    else attention_kernel_paged<float><<<grid, ATT_THREADS, smem, st>>>(*a, *rope);
    return cudaGetLastError();
}
