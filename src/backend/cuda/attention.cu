// attention.cu — paged GQA attention with per-page deferred RoPE (ARCHITECTURE.md §3.3), the
// GPU op table's `attention` for rows below the tensor-core threshold (decode; prefill tiles:
// attention-prefill.cu), and of `attention_decode` (decode rows of many sequences in one launch).
//
// Grid (n_split, Hkv, T): one block per (query row, kv head, key range) holds all G = H / Hkv query
// heads of that kv head, so each K/V row read from HBM serves G heads (GQA-aware). It walks its
// pages in logical order with an online softmax per head (running max m and sum l, acc = acc *
// exp(m_old - m_new) + Σ p v). Keys outside [kv_first, n_visible) are masked; pages wholly before
// kv_first or after n_visible are skipped without being read.
//
// Deferred RoPE: the page's K was stored rotated at local positions; attention needs R_Δ k. Since
// R is orthogonal, q·(R_Δ k) = (R_-Δ q)·k, so the query rows are rotated by -Δ when Δ changes
// from one page to the next (once per document, not per key) and K is never touched.
//
// Split-K: with few rows (decode) T * Hkv blocks cannot fill 132 SMs, so the page list is cut into
// n_split ranges (li_cuda_attention_plan); each writes unnormalised (o, m, l) partials, merged as
// M = max m_s, w_s = exp(m_s - M), out = Σ w_s o_s / Σ w_s l_s.
//
// Three kernels with that grid and those results, for G 1/2/4/8 and Dh 64/128 (every
// Llama-family shape): attention_kernel_decode_mma (bf16 pools, the default: tensor cores, K/V
// from HBM straight into mma fragments) and attention_kernel_slots (f32 pools: lanes own keys,
// 16-byte loads), both merging their split-K partials in the kernel (the last block of each row
// and kv head); for any other shape attention_kernel_paged (shared memory, 32 keys per chunk,
// partials merged by attention_kernel_combine).
//
// Napkin maths (decode, Llama-3.1-8B heads: Hkv 8, Dh 128, ctx 20K): K + V of one layer are
// 20000 * 8 * 128 * 2 B * 2 = 82 MB in bf16, 17 µs at the H200's 4.8 TB/s. Measured (H200,
// 2026-11-30, gpu-check's bench group; docs/BENCHMARKS.md "fifth session"): the tensor-core
// kernel 0.040 ms at batch 1 (2.0 TB/s; latency-bound), 4.3 / 4.5 TB/s at batch 16 / 64 in one
// launch (SDPA 4.5 / 4.6); the slot kernel 3.3-3.5 TB/s on bf16 (bound by instructions:
// unpacking and fp32 FMAs per byte are twice f32's) and 4.4 TB/s on f32; the warp-per-key kernel
// they replaced took 0.090 ms (0.9 TB/s of bf16); the generic kernel ~0.31 ms.
//
// Tested by tests/gpu/gpu-check.c against ref_attention (ops-ref.c): GQA 1..8, P 1/16/64, random
// Δ per document, kv_first, lengths not a multiple of P, split and unsplit, batches of sequences.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "attention.cuh"
#include "cuda-device.cuh"

#define ATT_THREADS 128

typedef void (*attn_kernel_fn)(const li_cuda_attn_args, const li_cuda_rope_args);
// keys per shared-memory chunk of the generic kernel; = warp size (its softmax step uses one lane
// per key)
#define ATT_CHUNK 32

// Logical index of page p0's first key: Σ valid counts of the pages before it, for every thread
// of the block (sh: one shared int). Has barriers: call it from all threads.
// This thread's share of the key count of pages [0, p0): 8 independent loads in flight per
// thread (a 20K-token table: 1,250 words in 2 rounds of a 128-thread block).
__device__ __forceinline__ int thread_keys_before(const uint64_t *pages, int p0) {
    constexpr int LOADS = 8;
    int before = 0;
    for (int p = threadIdx.x; p < p0; p += LOADS * blockDim.x) {
        uint64_t w[LOADS];
#pragma unroll
        for (int k = 0; k < LOADS; k++)
            w[k] = p + k * (int)blockDim.x < p0 ? pages[p + k * blockDim.x] : 0;
#pragma unroll
        for (int k = 0; k < LOADS; k++)
            before += li_page_count(w[k]);
    }
    return before;
}

__device__ __forceinline__ int keys_before_page(const uint64_t *pages, int p0, int *sh) {
    if (threadIdx.x == 0) *sh = 0;
    __syncthreads();
    const int before = thread_keys_before(pages, p0);
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
    pdl_trigger();  // a plain launch: lets the GEMV after it (launch_pdl) start early
    pdl_wait();     // a no-op here; kept so that a PDL launch of this kernel stays correct
    extern __shared__ float sm[];
    const int G = a.H / a.Hkv, Dh = a.Dh, C = ATT_CHUNK;
    const int sp = blockIdx.x, hk = blockIdx.y, t = blockIdx.z;
    float *qs = sm;                // (G, Dh) the query heads of kv head hk
    float *qr = qs + G * Dh;       // (G, Dh) qs rotated by -Δ of the current page
    float *acc = qr + G * Dh;      // (G, Dh) unnormalised output
    float *ks = acc + G * Dh;      // (C, Dh + 1) K chunk; padded rows: column reads conflict-free
    float *vs = ks + C * (Dh + 1); // (C, Dh) V chunk
    float *ps = vs + C * Dh;       // (G, C) scores, then probabilities
    float *mrow = ps + G * C;      // (G) running max
    float *lrow = mrow + G;        // (G) running sum of exp
    float *alpha = lrow + G;       // (G) this chunk's rescale factor exp(m_old - m_new)
    __shared__ int j0_sh;

    const int tid = threadIdx.x, nth = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int first = a.kv_first ? a.kv_first[t] : 0, nv = a.n_visible[t];
    const int p0 = sp * a.pages_per_split;
    const int p1 = min(a.n_pages, p0 + a.pages_per_split);

    const float *qsrc = a.q + ((int64_t)t * a.H + (int64_t)hk * G) * Dh; // G heads, contiguous
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
    const int64_t head_stride = (int64_t)a.P * Dh; // one (kv head) block of a page: P rows

    for (int p = p0; p < p1 && j0 < nv; p++) {
        // page metadata unpacked from one 64-bit word (page-word.h)
        const uint64_t w = a.pages[p];
        const int cnt = li_page_count(w);
        const int64_t id = li_page_id(w);
        const int64_t delta = a.rotate ? li_page_delta(w) : 0;
        if (j0 + cnt <= first) { // wholly before the first visible key: never read
            j0 += cnt;
            continue;
        }
        if (delta != cur_delta) { // q' = R_-Δ q for the G heads (a' = a c + b s, b' = b c - a s)
            for (int i = tid; i < G * Dh; i += nth)
                qr[i] = qs[i];
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
                    for (int d = 0; d < Dh; d++)
                        dot = fmaf(qg[d], kc[d], dot);
                    s = dot * a.scale;
                }
                ps[g * C + c] = s;
            }
            __syncthreads();
            for (int g = warp; g < G; g += nth / 32) { // online softmax: one warp per head
                float s = lane < nc ? ps[g * C + lane] : -INFINITY;
                float mx = s;
                for (int o = 16; o > 0; o >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                float m_old = mrow[g], m_new = fmaxf(m_old, mx);
                // m_new = -inf: nothing visible yet (p = 0, acc stays 0); s = -inf: a masked key
                float pr = (m_new == -INFINITY || s == -INFINITY) ? 0.0f : expf(s - m_new);
                float al = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
                float sum = pr;
                for (int o = 16; o > 0; o >>= 1)
                    sum += __shfl_xor_sync(0xffffffffu, sum, o);
                if (lane < nc) ps[g * C + lane] = pr;
                __syncwarp(); // every lane has read mrow[g] before lane 0 replaces it
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
                for (int c = 0; c < nc; c++)
                    o = fmaf(pg[c], vs[c * Dh + d], o);
                acc[i] = o;
            }
            __syncthreads();
        }
        j0 += cnt;
    }

    if (a.n_split == 1) {
        float *dst = a.out + ((int64_t)t * a.H + (int64_t)hk * G) * Dh;
        for (int i = tid; i < G * Dh; i += nth)
            dst[i] = acc[i] / lrow[i / Dh];
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

// ---- key-slot variant (every Llama-family shape: G 1/2/4/8, Dh 64/128; f32 or bf16 pages) ------
//
// Same grid and results as the generic kernel above; the block's 4 warps take the range's pages
// round-robin and run independently (no block barrier inside a chunk of pages), organised so that a
// lane's loads are as wide as they can be and the dot products need few shuffles: a key row (Dh
// elements) is read by LPK = Dh / VEC lanes, each with one vector load of VEC elements (16 bytes: 8
// bf16 or 4 f32; 8 bytes of bf16 when G = 8, to keep the query and accumulator registers at G VEC
// <= 32 each), so a warp reads SLOTS = 32 / LPK rows per load instruction. Slot s of a warp handles
// the keys c0 + u SLOTS + s (u < U) of each step of KS = U SLOTS <= 16 keys: one load instruction
// covers SLOTS consecutive rows (contiguous bytes), a score is VEC FMAs and a log2(LPK)-step
// butterfly within the slot's lanes (bf16, Dh 128, G 4: 4 shuffles per (head, key) where a
// warp-per-key layout needs 5 on 32 lanes). Every slot keeps its own online-softmax state (m, l,
// acc) in registers, in log2 units (the query is pre-scaled by scale · log2 e, so p = exp2(s - m));
// slots merge by shuffles, warps through shared memory, at the end. All 2 U loads of a step are
// issued before any is used (bf16 Dh 128: 16 x 16 bytes per lane, 8 KB per warp in flight).
//
// Napkin maths (Llama-3.1-8B heads, bf16 pages, P 16, G 4): per 16-key step a lane issues 16
// loads, 128 bf16 -> f32 unpacks, 256 + 256 FMAs, 64 shuffles + adds and ~80 softmax ops: ~1,100
// warp instructions per 8 KB, i.e. ~29 bytes per issue slot: at 4 issues per clock per SM the
// issue ceiling is ~7 TB/s, above HBM's 4.8 TB/s, so the kernel should be bandwidth-bound given
// enough bytes in flight (3 blocks of 4 warps per SM: ~96 KB per SM).
//
// Split-K partials are merged in the kernel: the last block of a (row, kv head) to finish (an
// atomic ticket per (row, kv head), reset by that block) combines the n_split partials, so a
// decode step is one launch.
template <typename KV, int G> struct slot_shape {
    static constexpr int VEC = sizeof(KV) == 2 ? (G >= 8 ? 4 : 8) : 4; // elements per lane load
    static constexpr int WORDS = VEC * (int)sizeof(KV) / 4;            // 32-bit words per load
};

// VEC elements of a row from a lane's load: f32 words as they are, bf16 pairs unpacked.
template <typename KV, int VEC> struct slot_words;
template <int VEC> struct slot_words<float, VEC> {
    static __device__ __forceinline__ float get(const uint32_t *w, int i) {
        return __uint_as_float(w[i]);
    }
};
template <int VEC> struct slot_words<__nv_bfloat16, VEC> {
    static __device__ __forceinline__ float get(const uint32_t *w, int i) {
        const uint32_t x = w[i >> 1];
        return __uint_as_float((i & 1) ? (x & 0xffff0000u) : (x << 16));
    }
};

// One lane's WORDS consecutive 32-bit words at p (16-byte aligned, or 8 when WORDS == 2), as
// 16-byte (8-byte) loads on the read-only path; zeros when !in.
template <int WORDS>
__device__ __forceinline__ void slot_load(const void *p, bool in, uint32_t (&w)[WORDS]) {
    if constexpr (WORDS % 4 == 0) {
#pragma unroll
        for (int i = 0; i < WORDS / 4; i++) {
            const uint4 v = in ? __ldg((const uint4 *)p + i) : make_uint4(0, 0, 0, 0);
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    } else {
        static_assert(WORDS == 2, "8- or 16-byte lane loads");
        const uint2 v = in ? __ldg((const uint2 *)p) : make_uint2(0, 0);
        w[0] = v.x, w[1] = v.y;
    }
}

// (m, l) of another slot or warp merged into this one's, log2 units; x = its weight for acc.
__device__ __forceinline__ void softmax_merge(float &m, float &l, float mo, float lo, float &w_self,
                                              float &w_other) {
    const float M = fmaxf(m, mo);
    w_self = m == -INFINITY ? 0.0f : exp2f(m - M);
    w_other = mo == -INFINITY ? 0.0f : exp2f(mo - M);
    l = w_self * l + w_other * lo;
    m = M;
}

// What the decode kernels' blocks start from: row t's page table (the shared one, or with
// row_page0 its sequence's own), this block's range [p0, p1) of it (empty for a short row's extra
// ranges) and the row's visible keys [first, nv).
struct decode_range {
    const uint64_t *pages;
    int p0, p1, first, nv;
};
__device__ __forceinline__ decode_range decode_range_of(const li_cuda_attn_args &a, int t, int sp) {
    decode_range d;
    d.first = a.kv_first ? a.kv_first[t] : 0;
    d.nv = a.n_visible[t];
    d.pages = a.pages;
    int n_pages = a.n_pages;
    if (a.row_page0) {
        d.pages += a.row_page0[t];
        n_pages = a.row_page0[t + 1] - a.row_page0[t];
    }
    d.p0 = min(sp * a.pages_per_split, n_pages);
    d.p1 = min(n_pages, d.p0 + a.pages_per_split);
    return d;
}

// The G query heads of (row t, kv head hk): loaded into registers at once, stored to shared
// memory (store, walk_pages' pre) once the walk's own first loads are in flight too.
template <int G, int Dh> struct query_stage {
    static constexpr int PER = (G * Dh + ATT_THREADS - 1) / ATT_THREADS; // per thread
    float v[PER];
    __device__ __forceinline__ void load(const li_cuda_attn_args &a, int t, int hk) {
        const float *src = a.q + ((int64_t)t * a.H + (int64_t)hk * G) * Dh;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = threadIdx.x + k * ATT_THREADS;
            v[k] = i < G * Dh ? src[i] : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float *qsh) const {
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = threadIdx.x + k * ATT_THREADS;
            if (i < G * Dh) qsh[i] = v[k];
        }
    }
};

// K rows (P, Dh) of page word w, layer a.il, kv head hk; its V rows are Hkv heads further on
// (page_v).
template <typename KV>
__device__ __forceinline__ const KV *page_k(const li_cuda_attn_args &a, uint64_t w, int hk,
                                            int Dh) {
    const int64_t head = (int64_t)a.P * Dh;
    return (const KV *)a.kv + (((li_page_id(w) * a.L + a.il) * 2) * a.Hkv + hk) * head;
}
template <typename KV>
__device__ __forceinline__ const KV *page_v(const li_cuda_attn_args &a, const KV *k, int Dh) {
    return k + (int64_t)a.Hkv * a.P * Dh;
}

// The pages [p0, p1) of a row's table, a warp at a time: fn(word, count, first logical key) for
// each page of this warp (pages round-robin over the block's warps) that has visible keys. The
// words and their first keys are staged ATT_THREADS pages at a time in shared memory (one
// coalesced load and a block scan of the counts), so that a warp finds its pages without walking
// the others' words one dependent load at a time. Has barriers: call it from all threads.
template <typename Pre, typename Fn>
__device__ __forceinline__ void walk_pages(const uint64_t *pages, int p0, int p1, int first, int nv,
                                           Pre &&pre, Fn &&fn) {
    constexpr int NW = ATT_THREADS / 32;
    __shared__ uint64_t page_sh[ATT_THREADS];
    __shared__ int pj0_sh[ATT_THREADS], scan_sh[NW], j0_sh;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Every load the walk starts with is issued before any is waited for: the first chunk's
    // words, the counts before p0 (the range's first logical key; 8 per thread in flight, a
    // 20K-token table of 1,250 words in 2 rounds) and, in pre(), the caller's (the query).
    uint64_t wt = tid < min(ATT_THREADS, p1 - p0) ? pages[p0 + tid] : 0;
    const int before = thread_keys_before(pages, p0);
    pre();
    if (tid == 0) j0_sh = 0;
    __syncthreads();
    if (before) atomicAdd(&j0_sh, before);
    __syncthreads();
    int j0 = j0_sh; // block-uniform
    for (int pc = p0; pc < p1 && j0 < nv; pc += ATT_THREADS) {
        const int nc = min(ATT_THREADS, p1 - pc);
        if (pc != p0) wt = tid < nc ? pages[pc + tid] : 0;
        const int ct = tid < nc ? li_page_count(wt) : 0;
        int incl = ct; // inclusive scan of the counts within the warp, then across warps
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += y;
        }
        if (lane == 31) scan_sh[warp] = incl;
        __syncthreads();
        int before = 0, total = 0;
#pragma unroll
        for (int v = 0; v < NW; v++) {
            before += v < warp ? scan_sh[v] : 0;
            total += scan_sh[v];
        }
        page_sh[tid] = wt;
        pj0_sh[tid] = j0 + before + incl - ct;
        __syncthreads();
        for (int pi = warp; pi < nc; pi += NW) {
            const uint64_t w = page_sh[pi];
            const int cnt = li_page_count(w), pj0 = pj0_sh[pi];
            if (pj0 >= nv) break;
            if (pj0 + cnt <= first) continue; // wholly masked: never read
            fn(w, cnt, pj0);
        }
        j0 += total;
        __syncthreads(); // page_sh and pj0_sh are rewritten for the next chunk
    }
}

// A decode kernel's walk over its range rg for kv head hk: the staged query stored to qsh as the
// walk's pre, then fn(K rows, V rows (P, Dh), count, first logical key, Δ) for each of this warp's
// pages, Δ the page's document offset (0 unless a.rotate). Has barriers: call it from all threads.
template <typename KV, int G, int Dh, typename Fn>
__device__ __forceinline__ void
walk_decode_pages(const li_cuda_attn_args &a, const decode_range &rg, int hk,
                  const query_stage<G, Dh> &qst, float *qsh, Fn &&fn) {
    walk_pages(
        rg.pages, rg.p0, rg.p1, rg.first, rg.nv, [&] { qst.store(qsh); },
        [&](uint64_t w, int cnt, int j0) {
            const int64_t delta = a.rotate ? li_page_delta(w) : 0;
            const KV *kbase = page_k<KV>(a, w, hk, Dh);
            fn(kbase, page_v(a, kbase, Dh), cnt, j0, delta);
        });
}

// qr = R_-Δ q of the G query heads in qsh (G, Dh) (a' = a c + b s, b' = b c - a s), by one warp
// into its own shared buffer, one cos/sin per rotation pair for all G heads; synchronised within
// the warp before and after.
template <int G, int Dh>
__device__ __forceinline__ void rotate_query(float *qr, const float *qsh, int64_t delta,
                                             const li_cuda_rope_args &r, int lane) {
    __syncwarp(); // the warp's last reads of qr are done
    for (int i = lane; i < G * Dh; i += 32)
        qr[i] = qsh[i];
    __syncwarp();
    if (delta != 0)
        for (int pi = lane; pi < r.n_dims / 2; pi += 32) {
            int ia, ib;
            float cs, sn;
            rope_sincos((double)delta, r.inv_freq[pi], &cs, &sn);
            rope_pair(r, pi, &ia, &ib);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float x = qsh[g * Dh + ia], y = qsh[g * Dh + ib];
                qr[g * Dh + ia] = x * cs + y * sn;
                qr[g * Dh + ib] = y * cs - x * sn;
            }
        }
    __syncwarp();
}

// The end of the decode kernels: each warp has left its (m, l) per head (log2 units) in mw, lw
// and its unnormalised output in qw. Merges the warps; writes the output (one key range) or the
// range's partial, and the last block of the row and kv head to finish merges all n_split
// partials (tickets: an atomic count per (row, kv head), reset by that block).
template <int G, int Dh>
__device__ __forceinline__ void decode_finish(const li_cuda_attn_args &a, float (*qw)[G * Dh],
                                              float (*mw)[G], float (*lw)[G]) {
    constexpr int NW = ATT_THREADS / 32;
    __shared__ int last_sh;
    const int sp = blockIdx.x, hk = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    __syncthreads();
    for (int e = tid; e < G * Dh; e += ATT_THREADS) {
        const int g = e / Dh, d = e - g * Dh;
        float M = -INFINITY, L = 0.0f, O = 0.0f;
#pragma unroll
        for (int v = 0; v < NW; v++) {
            float ws, wo;
            softmax_merge(M, L, mw[v][g], lw[v][g], ws, wo);
            O = ws * O + wo * qw[v][g * Dh + d];
        }
        const int64_t row = (int64_t)t * a.H + (int64_t)hk * G + g;
        if (a.n_split == 1) {
            a.out[row * Dh + d] = O / L;
        } else { // partials in natural-log units, as the other kernels write them
            a.part_o[(row * a.n_split + sp) * Dh + d] = O;
            if (d == 0) {
                a.part_ml[(row * a.n_split + sp) * 2] = M * 0.6931471805599453f;
                a.part_ml[(row * a.n_split + sp) * 2 + 1] = L;
            }
        }
    }
    if (a.n_split == 1 || !a.tickets) return;
    // the last of the n_split blocks of (t, hk) to get here merges their partials
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        unsigned *ticket = a.tickets + (int64_t)t * a.Hkv + hk;
        last_sh = atomicAdd(ticket, 1u) == (unsigned)a.n_split - 1;
        if (last_sh) *ticket = 0; // ready for the next launch (stream order)
    }
    __syncthreads();
    if (!last_sh) return;
    __threadfence();
    // per head (a warp each): M = max of the partial maxima, weights exp(m_s - M) -> wsh, L
    float *wsh = &qw[0][0]; // (G, n_split): n_split <= 256 <= NW Dh
    __shared__ float Lsh[G];
    const int ns = a.n_split;
    for (int g = warp; g < G; g += NW) {
        const float *ml = a.part_ml + ((int64_t)t * a.H + (int64_t)hk * G + g) * ns * 2;
        float M = -INFINITY;
        for (int s2 = lane; s2 < ns; s2 += 32)
            M = fmaxf(M, __ldcg(ml + 2 * s2));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        float L = 0.0f;
        for (int s2 = lane; s2 < ns; s2 += 32) {
            const float ms = __ldcg(ml + 2 * s2);
            const float wgt = ms == -INFINITY ? 0.0f : expf(ms - M);
            wsh[g * ns + s2] = wgt;
            L += wgt * __ldcg(ml + 2 * s2 + 1);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            L += __shfl_xor_sync(0xffffffffu, L, o);
        if (lane == 0) Lsh[g] = L;
    }
    __syncthreads();
    // out = Σ_s w_s o_s / L: a thread per 4 consecutive outputs, 8 partial rows in flight
    for (int e = 4 * tid; e < G * Dh; e += 4 * ATT_THREADS) {
        const int g = e / Dh, d = e - g * Dh;
        const int64_t row = (int64_t)t * a.H + (int64_t)hk * G + g;
        const float4 *po = (const float4 *)(a.part_o + row * ns * Dh + d);
        const float *wg = wsh + g * ns;
        float4 O = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s0 = 0; s0 < ns; s0 += 8) {
            float4 v[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = s0 + k < ns ? __ldcg(po + (int64_t)(s0 + k) * (Dh / 4))
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float wk = s0 + k < ns ? wg[s0 + k] : 0.0f;
                O.x = fmaf(wk, v[k].x, O.x), O.y = fmaf(wk, v[k].y, O.y);
                O.z = fmaf(wk, v[k].z, O.z), O.w = fmaf(wk, v[k].w, O.w);
            }
        }
        const float inv = 1.0f / Lsh[g]; // out: any 4-byte alignment (the caller's buffer)
        float *o = a.out + row * Dh + d;
        o[0] = O.x * inv, o[1] = O.y * inv, o[2] = O.z * inv, o[3] = O.w * inv;
    }
}

template <int G, int Dh, typename KV, int U>
__global__ void __launch_bounds__(ATT_THREADS, 3)
    attention_kernel_slots(const li_cuda_attn_args a, const li_cuda_rope_args r) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    typedef slot_shape<KV, G> shape;
    typedef slot_words<KV, shape::VEC> words;
    constexpr int VEC = shape::VEC, WORDS = shape::WORDS, LPK = Dh / VEC, SLOTS = 32 / LPK;
    constexpr int KS = U * SLOTS, NW = ATT_THREADS / 32;
    static_assert(LPK <= 32 && (LPK & (LPK - 1)) == 0 && KS <= 16, "slot layout");
    __shared__ float qsh[G * Dh];    // (G, Dh) the query heads of kv head hk
    __shared__ float qw[NW][G * Dh]; // per warp: q rotated by -Δ; at the end, the warp's acc
    __shared__ float mw[NW][G], lw[NW][G];
    const int hk = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int slot = lane / LPK, d0 = (lane % LPK) * VEC; // this lane: dims [d0, d0 + VEC)
    const decode_range rg = decode_range_of(a, t, blockIdx.x);
    const int first = rg.first, nv = rg.nv;
    const float qscale = a.scale * 1.4426950408889634f; // scores in log2 units

    query_stage<G, Dh> qst;
    qst.load(a, t, hk);

    float q[G][VEC], acc[G][VEC], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < VEC; i++)
            acc[g][i] = q[g][i] = 0.0f;
    }
    int64_t cur_delta = -1;
    float *qr = qw[warp];

    walk_decode_pages<KV>(
        a, rg, hk, qst, qsh, [&](const KV *kbase, const KV *vbase, int cnt, int j0, int64_t delta) {
            for (int c0 = 0; c0 < cnt; c0 += KS) {
                const int jc = j0 + c0;
                if (jc >= nv) break;
                uint32_t kr[U][WORDS], vr[U][WORDS];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = c0 + u * SLOTS + slot;
                    slot_load(kbase + (int64_t)c * Dh + d0, c < cnt, kr[u]);
                    slot_load(vbase + (int64_t)c * Dh + d0, c < cnt, vr[u]);
                }
                // q' = R_-Δ q (a' = a c + b s, b' = b c - a s) for this warp, one cos/sin per pair
                // for all G heads; after the first loads are issued, so that it hides behind them
                if (c0 == 0 && delta != cur_delta) {
                    rotate_query<G, Dh>(qr, qsh, delta, r, lane);
#pragma unroll
                    for (int g = 0; g < G; g++)
#pragma unroll
                        for (int i = 0; i < VEC; i++)
                            q[g][i] = qr[g * Dh + d0 + i] * qscale;
                    cur_delta = delta;
                }
                float s[G][U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = c0 + u * SLOTS + slot, j = j0 + c;
                    const bool vis = c < cnt && j >= first && j < nv;
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        float d = 0.0f;
#pragma unroll
                        for (int i = 0; i < VEC; i++)
                            d = fmaf(q[g][i], words::get(kr[u], i), d);
#pragma unroll
                        for (int o = LPK / 2; o > 0; o >>= 1)
                            d += __shfl_xor_sync(0xffffffffu, d, o);
                        s[g][u] = vis ? d : -INFINITY;
                    }
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float mx = m[g];
#pragma unroll
                    for (int u = 0; u < U; u++)
                        mx = fmaxf(mx, s[g][u]);
                    const float ref = mx == -INFINITY ? 0.0f : mx; // nothing visible yet: p = 0
                    const float al = exp2f(m[g] - ref);
                    float psum = 0.0f;
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        s[g][u] = exp2f(s[g][u] - ref);
                        psum += s[g][u];
                    }
                    l[g] = l[g] * al + psum;
                    m[g] = mx;
#pragma unroll
                    for (int i = 0; i < VEC; i++)
                        acc[g][i] *= al;
                }
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int i = 0; i < VEC; i++) {
                        const float v = words::get(vr[u], i);
#pragma unroll
                        for (int g = 0; g < G; g++)
                            acc[g][i] = fmaf(s[g][u], v, acc[g][i]);
                    }
            }
        });

    // merge the warp's slots (butterfly over the slot bits of the lane index), then the warps
#pragma unroll
    for (int o = LPK; o < 32; o <<= 1)
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
            const float lo = __shfl_xor_sync(0xffffffffu, l[g], o);
            float ws, wo;
            softmax_merge(m[g], l[g], mo, lo, ws, wo);
#pragma unroll
            for (int i = 0; i < VEC; i++)
                acc[g][i] = ws * acc[g][i] + wo * __shfl_xor_sync(0xffffffffu, acc[g][i], o);
        }
    __syncthreads(); // every warp is done with qr before it holds accumulators
    if (slot == 0)
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (int i = 0; i < VEC; i++)
                qr[g * Dh + d0 + i] = acc[g][i];
            if (lane == 0) {
                mw[warp][g] = m[g];
                lw[warp][g] = l[g];
            }
        }
    decode_finish<G, Dh>(a, qw, mw, lw);
}

// ---- tensor-core decode (bf16 pools, G 1/2/4/8, Dh 64/128) -------------------------------------
//
// The slot kernel spends ~1,100 instructions per 8 KB of bf16 K/V (unpacking and fp32 FMAs): at
// batch 16+ it is bound by issue (3.3-3.5 TB/s) where f32 pools reach 4.2 TB/s. Here the G heads'
// scores and outputs come from mma.sync.m16n8k16 (bf16 in, fp32 accumulate), ~180 instructions
// per 16-key step of 8 KB: a warp takes one 16-key step of a page at a time,
//   S (16 x 8 keys, two n-tiles) = Q (16 rows: the G heads, rest zero) · Kᵀ,
//   Oᵀ (Dh x 8: dims x heads, Dh / 16 m-tiles) += Vᵀ · Pᵀ (16 keys x 8: P of the G heads),
// with K and V read from global memory straight into fragments (no shared memory, no ldmatrix):
// a dot product does not care in which order its dims are summed, so each operand's k index is
// mapped to the dims a thread can load as whole 16-byte vectors. With g = lane / 4, c = lane % 4:
//   Q·Kᵀ: the thread loads key g of the n-tile, dims [c Dh/4, (c+1) Dh/4) (Dh / 2 bytes); its
//     k-step s pairs (2c, 2c+1 | 2c+8, 2c+9) are dims c Dh/4 + 4s + (0, 1 | 2, 3), which is word
//     (2s | 2s+1) of what it loaded — and Q's A fragment is built with the same map;
//   Vᵀ·Pᵀ: the thread loads keys 2c, 2c+1, 2c+8, 2c+9 (the k index of the B operand Pᵀ, which
//     is S's accumulator layout: FlashAttention-2's register reuse), dims [g Dh/8, (g+1) Dh/8);
//     m-tile t's rows g and g+8 are dims g Dh/8 + 2t and + 2t + 1, the two halves of its word
//     t, so an A register is two halves of two keys' words (one byte_perm).
// Exactness: Q and P are split into bf16 hi + lo (x = hi + lo to ~2^-16 relative) and both halves
// go through the tensor cores, so the products keep ~fp32 accuracy against the fp32 oracle (K
// and V are bf16 already); 4x the minimal MMA count, still ~10 % of the tensor cores at HBM speed.
// The rest is the slot kernel's: pages round-robin over 4 warps (walk_pages), the query rotated
// by -Δ per document (rotate_query), online softmax in log2 units (per head g on its quad's lanes),
// warps and split-K ranges merged by decode_finish.
template <int G, int Dh>
__global__ void __launch_bounds__(ATT_THREADS, 3)
    attention_kernel_decode_mma(const li_cuda_attn_args a, const li_cuda_rope_args r) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    constexpr int NW = ATT_THREADS / 32, KSTEPS = Dh / 16, MT = Dh / 16;
    constexpr int KSEG = Dh / 4, VSEG = Dh / 8; // K, V elements a thread loads of a key row
    constexpr int KW = KSEG / 2, VW = VSEG / 2; // the same in 32-bit words
    static_assert(G >= 1 && G <= 8 && (Dh == 64 || Dh == 128), "decode mma shapes");
    __shared__ float qsh[G * Dh];
    __shared__ float qw[NW][G * Dh]; // per warp: q rotated by -Δ; at the end, the warp's output
    __shared__ float mw[NW][G], lw[NW][G];
    // per warp and k-step, each lane's Q fragments (hi a[0], a[2], lo a[0], a[2]): shared memory
    // rather than 32 registers, read as one 16-byte vector per k-step
    __shared__ uint4 qf[NW][KSTEPS][32];
    const int hk = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const decode_range rg = decode_range_of(a, t, blockIdx.x);
    const int first = rg.first, nv = rg.nv;
    const float qscale = a.scale * 1.4426950408889634f; // scores in log2 units

    query_stage<G, Dh> qst;
    qst.load(a, t, hk);

    float o[MT][4]; // Oᵀ: (dims g Dh/8 + 2t (+1), heads 2c, 2c + 1)
#pragma unroll
    for (int i = 0; i < MT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m = -INFINITY, l = 0.0f; // head g: running max; this lane's share of the sum
    int64_t cur_delta = -1;
    float *qr = qw[warp];

    walk_decode_pages<__nv_bfloat16>(
        a, rg, hk, qst, qsh,
        [&](const __nv_bfloat16 *kbase, const __nv_bfloat16 *vbase, int cnt, int j0,
            int64_t delta) {
            for (int c0 = 0; c0 < cnt; c0 += 16) {
                if (j0 + c0 >= nv) break;
                uint32_t kr[2][KW], vr[4][VW];
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int key = c0 + 8 * j + g;
                    slot_load(kbase + (int64_t)key * Dh + c * KSEG, key < cnt, kr[j]);
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const int key = c0 + 2 * c + (u & 1) + 8 * (u >> 1);
                    slot_load(vbase + (int64_t)key * Dh + g * VSEG, key < cnt, vr[u]);
                }
                if (c0 == 0 && delta != cur_delta) { // Q's fragments at this Δ: hi + lo
                    rotate_query<G, Dh>(qr, qsh, delta, r, lane);
#pragma unroll
                    for (int s = 0; s < KSTEPS; s++) {
                        uint32_t hi[2], lo[2];
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int d = c * KSEG + 4 * s + 2 * h;
                            const float x = g < G ? qr[g * Dh + d] * qscale : 0.0f;
                            const float y = g < G ? qr[g * Dh + d + 1] * qscale : 0.0f;
                            hi[h] = pack_bf16x2(x, y);
                            const float2 back = __bfloat1622float2(*(const __nv_bfloat162 *)&hi[h]);
                            lo[h] = pack_bf16x2(x - back.x, y - back.y);
                        }
                        qf[warp][s][lane] = make_uint4(hi[0], hi[1], lo[0], lo[1]);
                    }
                    __syncwarp();
                    cur_delta = delta;
                }
                // four independent accumulator chains (n-tile x hi/lo), summed after: a chain of
                // dependent MMAs is the step's latency
                float sc[2][4], sl[2][4];
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[j][e] = sl[j][e] = 0.0f;
#pragma unroll
                for (int s = 0; s < KSTEPS; s++)
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const uint4 f = qf[warp][s][lane];
                        const uint32_t ah[4] = {f.x, 0u, f.y, 0u}, al4[4] = {f.z, 0u, f.w, 0u};
                        mma_bf16(sc[j], ah, kr[j][2 * s], kr[j][2 * s + 1]);
                        mma_bf16(sl[j], al4, kr[j][2 * s], kr[j][2 * s + 1]);
                    }
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        sc[j][e] += sl[j][e];
                // head g's scores of keys c0 + 8j + 2c + e: sc[j][e]
                float p[2][2], mx = m;
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int key = c0 + 8 * j + 2 * c + e, jj = j0 + key;
                        p[j][e] = key < cnt && jj >= first && jj < nv ? sc[j][e] : -INFINITY;
                        mx = fmaxf(mx, p[j][e]);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float ref = mx == -INFINITY ? 0.0f : mx; // nothing visible yet: p = 0
                const float al = exp2f(m - ref);
                float psum = 0.0f;
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        p[j][e] = exp2f(p[j][e] - ref);
                        psum += p[j][e];
                    }
                l = l * al + psum;
                m = mx;
                // Oᵀ's columns are heads 2c, 2c + 1, whose rescale factors live on quads 2c, 2c + 1
                const float al0 = __shfl_sync(0xffffffffu, al, 8 * c);
                const float al1 = __shfl_sync(0xffffffffu, al, 8 * c + 4);
                uint32_t ph[2], pl[2]; // Pᵀ's B fragment: keys (2c, 2c+1 | 2c+8, 2c+9), head g
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    ph[j] = pack_bf16x2(p[j][0], p[j][1]);
                    const float2 back = __bfloat1622float2(*(const __nv_bfloat162 *)&ph[j]);
                    pl[j] = pack_bf16x2(p[j][0] - back.x, p[j][1] - back.y);
                }
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    o[i][0] *= al0, o[i][1] *= al1, o[i][2] *= al0, o[i][3] *= al1;
                    const uint32_t va[4] = {__byte_perm(vr[0][i], vr[1][i], 0x5410),
                                            __byte_perm(vr[0][i], vr[1][i], 0x7632),
                                            __byte_perm(vr[2][i], vr[3][i], 0x5410),
                                            __byte_perm(vr[2][i], vr[3][i], 0x7632)};
                    mma_bf16(o[i], va, ph[0], ph[1]);
                    mma_bf16(o[i], va, pl[0], pl[1]);
                }
            }
        });

    l += __shfl_xor_sync(0xffffffffu, l, 1); // head g's sum over its quad
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __syncwarp(); // the warp's last reads of qr are done
#pragma unroll
    for (int e = 0; e < 2; e++)
        if (2 * c + e < G)
#pragma unroll
            for (int i = 0; i < MT; i++) {
                qr[(2 * c + e) * Dh + g * VSEG + 2 * i] = o[i][e];
                qr[(2 * c + e) * Dh + g * VSEG + 2 * i + 1] = o[i][2 + e];
            }
    if (c == 0 && g < G) {
        mw[warp][g] = m;
        lw[warp][g] = l;
    }
    decode_finish<G, Dh>(a, qw, mw, lw);
}

// Keys per slot and step of the slot kernel for (KV, G, Dh): a power of two that keeps a step
// within 16 keys (a page) and a lane's registers for the query and accumulator (2 G VEC), the
// step's loads (2 U WORDS) and its scores (G U) within ~128.
template <typename KV, int G, int Dh> constexpr int slot_keys() {
    constexpr int vec = slot_shape<KV, G>::VEC, words = slot_shape<KV, G>::WORDS;
    constexpr int slots = 32 / (Dh / vec), by_page = 16 / slots;
    constexpr int by_regs = (128 - 2 * G * vec) / (2 * words + G);
    int u = 1;
    while (2 * u <= by_page && 2 * u <= by_regs)
        u *= 2;
    return u;
}

template <int G, int DV, typename KV> static attn_kernel_fn slot_kernel(void) {
    return attention_kernel_slots<G, 32 * DV, KV, slot_keys<KV, G, 32 * DV>()>;
}

// bf16 pools: the tensor-core kernel (the slot kernel on bf16 measured slower; removed).
template <int G, int DV> static attn_kernel_fn bf16_kernel(void) {
    return attention_kernel_decode_mma<G, 32 * DV>;
}

// The decode kernel instantiated for (G, Dh) and the pool's element type, or NULL: the generic
// kernel serves the rest. *merges: it combines split-K partials itself (tickets).
static attn_kernel_fn slot_kernel_for(int G, int Dh, int kv_bf16, bool *merges) {
    attn_kernel_fn k = NULL;
    // clang-format off
#define LI_ATTN_CASE(g, dv) \
    if (G == g && Dh == 32 * dv) k = kv_bf16 ? bf16_kernel<g, dv>() : slot_kernel<g, dv, float>();
    LI_ATTN_CASE(1, 2) LI_ATTN_CASE(2, 2) LI_ATTN_CASE(4, 2) LI_ATTN_CASE(8, 2)
    LI_ATTN_CASE(1, 4) LI_ATTN_CASE(2, 4) LI_ATTN_CASE(4, 4) LI_ATTN_CASE(8, 4)
#undef LI_ATTN_CASE
        // clang-format on
        if (merges) *merges = k != NULL;
    return k;
}

// grid (T * H): merges the n_split partials of one (row, head). A range with no visible key has
// m = -inf, l = 0 and weight 0.
__global__ void attention_kernel_combine(float *out, const float *part_o, const float *part_ml,
                                         int n_split, int Dh) {
    const int64_t row = blockIdx.x;
    const float *ml = part_ml + row * n_split * 2;
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++)
        M = fmaxf(M, ml[2 * s]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++)
        if (ml[2 * s] != -INFINITY) L += expf(ml[2 * s] - M) * ml[2 * s + 1];
    const float *po = part_o + row * n_split * Dh;
    for (int d = threadIdx.x; d < Dh; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < n_split; s++)
            if (ml[2 * s] != -INFINITY) o += expf(ml[2 * s] - M) * po[(int64_t)s * Dh + d];
        out[row * Dh + d] = L > 0.0f ? o / L : 0.0f;  // no visible key in any range: 0
    }
}

extern "C" cudaError_t li_cuda_attention_combine(cudaStream_t st, float *out, const float *part_o,
                                                 const float *part_ml, int64_t rows, int n_split,
                                                 int Dh) {
    if (rows <= 0) return cudaSuccess;
    if (rows > 0x7fffffff || n_split < 1) return cudaErrorInvalidValue;
    attention_kernel_combine<<<(unsigned)rows, 128, 0, st>>>(out, part_o, part_ml, n_split, Dh);
    return cudaGetLastError();
}

// Blocks of the kernel serving (G, Dh) that fit on one SM (occupancy), cached per warp-kernel
// shape; at least 1.
static int blocks_per_sm(int G, int Dh, int kv_bf16) {
    static int cache[9][2][2]; // [G][Dh == 128][bf16]; 0 = not computed (a benign race)
    attn_kernel_fn wk = slot_kernel_for(G, Dh, kv_bf16, NULL);
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
        cudaGetLastError(); // clear it: the launch itself will report a real problem
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
    const int min_pages = 4;  // pages per key range at least
    int ns = 1;
    if (2 * base <= target && n_pages >= 2 * min_pages) {
        ns = (int)(target / base);  // one wave
        if (ns > n_pages / min_pages) ns = n_pages / min_pages;
        if (ns > 256) ns = 256;
        if (ns < 1) ns = 1;
    } else if (n_pages >= 2 * min_pages) {
        // more rows than half a wave (a batch of decode rows): the split (<= 8) whose last wave
        // is fullest, e.g. 64 rows x 8 kv heads on 396 block slots: 1 -> 1.29 waves (65 % of
        // the second used), 3 -> 3.88 (97 %)
        double best = 0;
        for (int c = 1; c <= 8 && c <= n_pages / min_pages; c++) {
            double waves = (double)c * base / target, used = waves / ceil(waves);
            if (used > best + 0.02) best = used, ns = c;
        }
    }
    int pps = n_pages > 0 ? (n_pages + ns - 1) / ns : 1;
    if (pps < 1) pps = 1;
    *pages_per_split = pps;
    *n_split = n_pages > 0 ? (n_pages + pps - 1) / pps : 1;
}

static cudaError_t launch_generic(cudaStream_t st, const li_cuda_attn_args *a,
                                  const li_cuda_rope_args *rope, dim3 grid);

extern "C" int li_cuda_attention_rows_ok(int G, int Dh, int kv_bf16) {
    bool merges = false;
    slot_kernel_for(G, Dh, kv_bf16, &merges);
    return merges;
}

extern "C" cudaError_t li_cuda_attention(cudaStream_t st, const li_cuda_attn_args *a,
                                         const li_cuda_rope_args *rope) {
    if (a->T <= 0) return cudaSuccess;
    if (a->Hkv <= 0 || a->H % a->Hkv || a->T > 65535 || a->Hkv > 65535 || a->n_split < 1 ||
        a->n_split > 65535 || a->n_pages < 1)
        return cudaErrorInvalidValue;
    li_cuda_rope_args none = {}; // no rotation: n_dims 0
    if (!a->rotate || !rope) {
        if (a->rotate) return cudaErrorInvalidValue;
        rope = &none;
    } else if (rope->n_dims > a->Dh || rope->n_dims % 2) {
        return cudaErrorInvalidValue;
    }
    dim3 grid(a->n_split, a->Hkv, a->T);
    bool merges = false;
    attn_kernel_fn wk = slot_kernel_for(a->H / a->Hkv, a->Dh, a->kv_bf16, &merges);
    if (a->row_page0 && !merges) return cudaErrorInvalidValue; // li_cuda_attention_rows_ok
    if (wk) {
        cudaError_t e = launch_pdl(wk, grid, dim3(ATT_THREADS), 0, st, *a, *rope);
        if (e != cudaSuccess) return e;
    } else {
        cudaError_t e = launch_generic(st, a, rope, grid);
        if (e != cudaSuccess) return e;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || a->n_split == 1 || (merges && a->tickets)) return e;
    attention_kernel_combine<<<(unsigned)(a->T * a->H), 128, 0, st>>>(a->out, a->part_o, a->part_ml,
                                                                      a->n_split, a->Dh);
    return cudaGetLastError();
}

static cudaError_t launch_generic(cudaStream_t st, const li_cuda_attn_args *a,
                                  const li_cuda_rope_args *rope, dim3 grid) {
    size_t smem = attn_smem_floats(a->H / a->Hkv, a->Dh) * sizeof(float);
    if (smem > 48 * 1024) {
        cudaError_t e =
            a->kv_bf16
                ? cudaFuncSetAttribute(attention_kernel_paged<__nv_bfloat16>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
                : cudaFuncSetAttribute(attention_kernel_paged<float>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e; // more than the 227 KB an H100/H200 block can have
    }
    if (a->kv_bf16)
        attention_kernel_paged<__nv_bfloat16><<<grid, ATT_THREADS, smem, st>>>(*a, *rope);
    else
        attention_kernel_paged<float><<<grid, ATT_THREADS, smem, st>>>(*a, *rope);
    return cudaGetLastError();
}
