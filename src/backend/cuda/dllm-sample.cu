// dllm-sample.cu — LLaDA's x0 step (backend.h dllm_x0, engine-dllm.c step_decide steps 1-5) on
// the GPU: CFG and the EOS ban in place, x0 by argmax (temperature 0) or by Gumbel-max over the
// engine's own xoshiro256** stream (temperature > 0, the same draws as the CPU), the confidence
// bans (EOT; EOS too at temperature 0) and the fp64 softmax probability of x0. Only x0 and conf
// (12 B bytes) need to reach the host. Below it, in sections of their own: the transfer selection (dllm_select, then only the commits come back)
// and DPad's per-block draw (dllm_dpad, the keep flags of the suffix rows).
//
// The CPU draws u_i, i = b V + v, in one sequence. Here a row is cut into regions of 32 chunks of
// X0_C consecutive ids, one warp per region, one chunk per lane. A warp starts at its region's
// first draw b V + r0 by multiplying the stream's state with the table matrices M^(2^k) of the set
// bits of b V + r0 (rng-jump.h; one 256 x 256 GF(2) product per bit, done by the whole warp:
// 8 columns per lane, XOR-reduced by shuffles); its lanes' starts follow by doubling (lanes
// h..2h-1 = M^(X0_C h) applied to lanes 0..h-1: 31 products). Each lane then steps xoshiro through
// its chunk exactly as li_rng_u64 does.
//
//   kernel 1, dllm_x0_kernel_scan, grid (regions / X0_WARPS, B): per region, coalesced (lanes
//     stride 32): CFG, EOS ban, the greedy candidate (largest l, lowest id) and the online softmax
//     state (max m, Σ exp(l - m) in fp64) with the banned ids (EOT; EOS at temperature 0 under
//     confidence_eos_eot_inf) left out; then, at temperature > 0 in masked rows, the lane's
//     Gumbel scan (largest g, lowest id). One partial per lane to scratch.
//   kernel 2, dllm_x0_kernel_finish, one block per row: the partials combined (largest key, lowest
//     id on equal keys: the order does not matter, so the result is the CPU's), the bans, and
//     conf = exp(l[x0] - M) / Σ_slots s exp(m - M) in fp64.
// Differences from the CPU: exp / log / pow in fp64 are within 1-2 ulp of glibc's (not always the
// same bits), so at a near tie (top-2 g within ~1e-15 relative) x0 may differ; the softmax sum is
// a tree of per-lane online fp64 sums instead of one sequential fp64 sum (last-bits differences,
// ~1e-16 relative).
//
// Napkin maths, H200 (132 SMs, 64 fp64 lanes per SM per clock at ~1.98 GHz: 16.7 T fp64
// instructions/s; 33.5 TFLOP/s counts an FMA twice), B = 32 masked rows, V = 126,464: 4.05M draws.
//   fp64 per draw: u = (x >> 11) 2^-53 (2), -log u (~25), exp (~15), pow (~65: its log is
//   double-double), division (~10): ~115 instructions -> 465M, 28 µs at peak. T = 1 skips pow:
//   ~50 -> 12 µs.
//   integer per draw: xoshiro on 64-bit words as 32-bit halves (two multiplies by 5 and 9 as
//   shift-adds, rotates as funnel shifts, 4 XORs): ~25, plus load / compare / loop ~10 -> 142M
//   on separate pipes (8.5 µs); all instructions together ~20M warp-instructions: 19 µs of issue.
//   jumps: ~11 + 31 warp-wide products of ~150 instructions per warp, 992 warps: ~6M
//   warp-instructions, overlapping the other warps' fp64 work.
//   memory: 16 MB of logits read (coalesced) and re-read by the scans (from L2); with CFG also
//   16 MB of ulogits read and 16 MB written: <= 50 MB, ~15 µs at HBM speed, overlapped.
//   kernel 2: B x 992 partials of 24 bytes; a few µs with its launch.
// With ~8 warps per SM the fp64 chains are latency- rather than throughput-bound; expected
// ~40-60 µs for T != 1, ~20-30 µs for T = 1, ~10-15 µs at temperature 0 (memory-bound: one pass,
// where the old greedy kernel made three). Half the rows masked: the Gumbel part halves.
// The softmax terms in fp64 (Fast-dLLM's precision: the fp32 sum overstated a 126,464-id
// confidence by up to 2.3e-4): B V exp in fp64 (~20 instructions) at temperature 0 add ~80M
// instructions, ~5 µs at the fp64 peak. Not yet measured on a GPU.
//
// Tested by tests/gpu/gpu-check.c (dllm_x0 against ops-ref.c, dllm_select and dllm_dpad against
// oracles of the decoder's rules) and, for the jump arithmetic on the CPU, tests/test-rng-jump.c.
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../../core/rng.h"
#include "cuda-device.cuh"
#include "dllm-sample.cuh"

#define X0_LOG2C 7
#define X0_C (1 << X0_LOG2C)       // consecutive ids per lane in the Gumbel scan
#define X0_REGION (32 * X0_C)      // ids per warp
#define X0_WARPS 4                 // warps per block of kernel 1
#define X0_FINISH_THREADS 256      // kernel 2
#define X0_JUMP_WORDS (256 * 4)    // LI_RNG_JUMP_WORDS (rng-jump.h): one matrix
#define X0_NONE 0x7fffffff         // arg of a partial without a candidate
#define FULL_MASK 0xffffffffu

// One lane's result, kernel 1 -> kernel 2.
typedef struct {
    double key;   // largest g (temperature > 0) or logit (else); -inf: no candidate
    int32_t arg;  // its lowest id; X0_NONE: none
    float m;      // max of the lane's logits (the banned ids left out); -inf: none
    double s;     // Σ exp(l - m) over them, fp64
} x0_partial;

static __host__ __device__ int x0_regions(int V) { return (V + X0_REGION - 1) / X0_REGION; }

extern "C" size_t li_cuda_dllm_x0_scratch_bytes(int B, int V) {
    if (B <= 0 || V <= 0) return 0;
    return (size_t)B * x0_regions(V) * 32 * sizeof(x0_partial);
}

// x = M x for one column-form matrix M (256 columns x 4 words), by the whole warp (every lane
// passes the same x and gets the result): lane L XORs the columns 8L..8L+7 whose bits are set in
// x (bits 8(L % 8).. of word L / 8: 256 contiguous bytes of M per lane, the warp reads M's 8 KiB
// coalesced, from L2 after the first warps), then 5 shuffle rounds XOR the 32 partial sums.
__device__ __forceinline__ void warp_apply(uint64_t x[4], const uint64_t *M, int lane) {
    const int wi = lane >> 3;
    const uint64_t word = wi == 0 ? x[0] : wi == 1 ? x[1] : wi == 2 ? x[2] : x[3];
    const unsigned bits = (unsigned)(word >> (8 * (lane & 7))) & 0xffu;
    const ulonglong2 *col = (const ulonglong2 *)(M + 32 * lane);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma unroll
    for (int t = 0; t < 8; t++)
        if (bits >> t & 1u) {
            const ulonglong2 lo = __ldg(col + 2 * t), hi = __ldg(col + 2 * t + 1);
            a0 ^= lo.x;
            a1 ^= lo.y;
            a2 ^= hi.x;
            a3 ^= hi.y;
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a0 ^= __shfl_xor_sync(FULL_MASK, a0, o);
        a1 ^= __shfl_xor_sync(FULL_MASK, a1, o);
        a2 ^= __shfl_xor_sync(FULL_MASK, a2, o);
        a3 ^= __shfl_xor_sync(FULL_MASK, a3, o);
    }
    x[0] = a0;
    x[1] = a1;
    x[2] = a2;
    x[3] = a3;
}

// Every lane's xoshiro state at draw `first + lane * X0_C` of the stream starting at s0.
__device__ __forceinline__ void warp_lane_states(uint64_t st[4], li_cuda_rng_state s0,
                                                 uint64_t first, const uint64_t *table, int lane) {
    for (int w = 0; w < 4; w++) st[w] = s0.s[w];
    for (int k = 0; first; k++, first >>= 1)  // warp-uniform
        if (first & 1) warp_apply(st, table + (size_t)k * X0_JUMP_WORDS, lane);
    // lanes 0..h-1 are done; lane i + h = M^(X0_C h) lane i
    for (int t = 0; t < 5; t++) {
        const uint64_t *M = table + (size_t)(X0_LOG2C + t) * X0_JUMP_WORDS;
        const int h = 1 << t;
        for (int i = 0; i < h; i++) {
            uint64_t x[4];
            for (int w = 0; w < 4; w++) x[w] = __shfl_sync(FULL_MASK, st[w], i);
            warp_apply(x, M, lane);
            if (lane == i + h)
                for (int w = 0; w < 4; w++) st[w] = x[w];
        }
    }
}

// grid (ceil(regions / X0_WARPS), B), X0_WARPS warps; warp = one region of X0_REGION ids of row
// blockIdx.y. part (B, regions * 32).
__global__ void __launch_bounds__(32 * X0_WARPS)
    dllm_x0_kernel_scan(x0_partial *part, float *logits, const float *ulogits,
                        const uint8_t *masked, int V, float w, int32_t eos, int32_t ban0,
                        int32_t ban1, double temperature, li_cuda_rng_state rng,
                        const uint64_t *jump_table) {
    const int lane = threadIdx.x & 31, b = blockIdx.y;
    const int region = blockIdx.x * X0_WARPS + (threadIdx.x >> 5);
    const int r0 = region * X0_REGION, r1 = min(V, r0 + X0_REGION);
    if (r0 >= V) return;  // the whole warp
    float *l = logits + (int64_t)b * V;
    const float *u = ulogits ? ulogits + (int64_t)b * V : NULL;
    const bool is_mask = masked[b] != 0;
    if (!is_mask && !u) {  // only the EOS ban to do here
        if (lane == 0 && eos >= r0 && eos < r1) l[eos] = -INFINITY;
        return;
    }
    float best = -INFINITY, m = -INFINITY;
    double s = 0.0;
    int arg = X0_NONE;
    for (int v = r0 + lane; v < r1; v += 32) {
        float x = l[v];
        if (u) {  // u + w (x - u) as the CPU rounds it: no fused multiply-add
            x = __fadd_rn(u[v], __fmul_rn(w, __fsub_rn(x, u[v])));
            l[v] = x;
        }
        if (v == eos) l[v] = x = -INFINITY;
        if (!is_mask) continue;
        if (x > best) {  // v ascends per lane: strict > keeps the lowest id
            best = x;
            arg = v;
        }
        if (v == ban0 || v == ban1) continue;  // banned after x0: out of the softmax only
        if (x > m) {  // Fast-dLLM's softmax(logits.to(float64)): the terms and sums in fp64
            s = s * exp((double)m - (double)x) + 1.0;
            m = x;
        } else if (m > -INFINITY) {
            s += exp((double)x - (double)m);
        }
    }
    if (!is_mask) return;
    double key = best;
    if (temperature > 0) {
        __syncwarp();  // the CFG / EOS writes above, visible to the lane that scans each id
        uint64_t st[4];
        warp_lane_states(st, rng, (uint64_t)b * V + r0, jump_table, lane);
        // LLaDA add_gumbel_noise: exp(l) / (-log u)^T in fp64. At T = 1, pow(y, 1) is y exactly in
        // glibc (tests/test-rng-jump.c checks it), so the shortcut is the CPU's value too.
        const bool t1 = temperature == 1.0;
        double gbest = -INFINITY;
        arg = X0_NONE;
        const int c0 = r0 + lane * X0_C, c1 = min(V, c0 + X0_C);
        for (int v = c0; v < c1; v++) {
            const double uu = (double)(li_xoshiro_next(st) >> 11) * 0x1p-53;
            const double y = -log(uu);
            double d = y;
            if (!t1) d = pow(y, temperature);
            const double g = exp((double)l[v]) / d;
            if (g > gbest) {
                gbest = g;
                arg = v;
            }
        }
        key = gbest;
    }
    x0_partial p;
    p.key = key;
    p.arg = arg;
    p.m = m;
    p.s = s;
    part[((int64_t)b * x0_regions(V) + region) * 32 + lane] = p;
}

// block_sum (cuda-device.cuh) in fp64.
__device__ __forceinline__ double block_sum_f64(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    __syncthreads();
    return v;
}

// One block per row, X0_FINISH_THREADS threads over the row's n_slots partials.
__global__ void __launch_bounds__(X0_FINISH_THREADS)
    dllm_x0_kernel_finish(int32_t *x0, double *conf, float *logits, const uint8_t *masked,
                          const x0_partial *part, int V, int n_slots, int32_t ban0,
                          int32_t ban1, bool conf_f32) {
    __shared__ double sk[32];
    __shared__ int si[32];
    __shared__ float red[32];
    __shared__ double red64[32];
    const int b = blockIdx.x;
    float *l = logits + (int64_t)b * V;
    if (!masked[b]) {
        if (threadIdx.x == 0) {
            if (ban0 >= 0) l[ban0] = -INFINITY;
            if (ban1 >= 0) l[ban1] = -INFINITY;
            x0[b] = 0;
            conf[b] = -INFINITY;
        }
        return;
    }
    const x0_partial *p = part + (int64_t)b * n_slots;
    double key = -INFINITY;
    int arg = X0_NONE;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n_slots; i += blockDim.x) {
        const x0_partial q = p[i];
        if (q.key > key || (q.key == key && q.arg < arg)) {
            key = q.key;
            arg = q.arg;
        }
        m = fmaxf(m, q.m);
    }
    arg = block_argmax(key, arg, sk, si);  // no candidate (all NaN): 0, as the CPU keeps
    const float mx = block_max(m, red);
    double sum = 0.0;
    for (int i = threadIdx.x; i < n_slots; i += blockDim.x) {
        const x0_partial q = p[i];
        if (q.m > -INFINITY) sum += q.s * exp((double)q.m - (double)mx);
    }
    sum = block_sum_f64(sum, red64);
    float sum32 = 0.0f;
    if (conf_f32) {  // generate.py's float32 softmax: a second pass over the row (V floats)
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            if (v != ban0 && v != ban1) sum32 += expf(l[v] - mx);
        sum32 = block_sum(sum32, red);
    }
    if (threadIdx.x == 0) {
        if (ban0 >= 0) l[ban0] = -INFINITY;
        if (ban1 >= 0) l[ban1] = -INFINITY;
        const double la = arg == ban0 || arg == ban1 ? -INFINITY : (double)l[arg];
        x0[b] = arg;
        conf[b] = conf_f32 ? (double)(expf((float)la - mx) * (1.0f / sum32))
                           : exp(la - (double)mx) / sum;
    }
}

extern "C" cudaError_t li_cuda_dllm_x0(cudaStream_t st, int32_t *x0, double *conf, float *logits,
                                       const float *ulogits, const uint8_t *masked, int B, int V,
                                       float w, int32_t eos, int32_t ban0, int32_t ban1,
                                       double temperature, bool conf_f32,
                                       li_cuda_rng_state rng, const uint64_t *jump_table,
                                       void *scratch, size_t scratch_bytes) {
    if (B <= 0 || V <= 0) return cudaSuccess;
    if (B > 65535 || eos >= V || ban0 >= V || ban1 >= V || !scratch ||
        scratch_bytes < li_cuda_dllm_x0_scratch_bytes(B, V) || (temperature > 0 && !jump_table))
        return cudaErrorInvalidValue;
    const int R = x0_regions(V);
    x0_partial *part = (x0_partial *)scratch;
    dllm_x0_kernel_scan<<<dim3((R + X0_WARPS - 1) / X0_WARPS, B), 32 * X0_WARPS, 0, st>>>(
        part, logits, ulogits, masked, V, w, eos, ban0, ban1, temperature, rng, jump_table);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    dllm_x0_kernel_finish<<<B, X0_FINISH_THREADS, 0, st>>>(x0, conf, logits, masked, part, V,
                                                           R * 32, ban0, ban1, conf_f32);
    return cudaGetLastError();
}

// ---- the transfer selection (backend.h dllm_select) ----------------------------------------------
//
// One block of B threads (B <= 1024), thread b for window row b: its confidence (conf of
// dllm_x0, or at random remasking the uniform number b of the stream, reached by applying the
// table matrices of b's set bits: <= 10 products of ~128 column XORs), its rank among the
// candidates (conf > -inf) by counting those that rank before it (higher conf, then lower row:
// li_dllm_select's order, O(B) per thread), then how many to take (li_dllm_take): top-k, the
// best plus every candidate >= tau (a prefix of the ranking), or Fast-dLLM's factor rule (the
// first rank i >= 1, 0-based, with c < 1 - f / (i + 2) ends the prefix, a failure at the last
// rank alone ignored). A cut between equal confidences (top-k, factor; threshold: a best below
// tau tied) is answered -1: the rows torch.topk picks among them depend on the whole canvas's
// vector (li_dllm_topk_torch, li_dllm_topk_torch_first), so the host decides. B = 32: a few µs.

// x = M x, one thread (the column form of rng-jump.h).
__device__ __forceinline__ void thread_apply(uint64_t x[4], const uint64_t *M) {
    uint64_t r[4] = {0, 0, 0, 0};
    for (int w = 0; w < 4; w++)
        for (uint64_t word = x[w]; word; word &= word - 1) {
            const uint64_t *col = M + 4 * (64 * w + __ffsll((long long)word) - 1);
            r[0] ^= col[0];
            r[1] ^= col[1];
            r[2] ^= col[2];
            r[3] ^= col[3];
        }
    for (int w = 0; w < 4; w++) x[w] = r[w];
}

__global__ void __launch_bounds__(1024)
    dllm_select_kernel(int32_t *commit, const int32_t *x0, const double *conf,
                       const uint8_t *masked, int B, int mode, int k, double tau, double f,
                       int random_remask, li_cuda_rng_state rng, const uint64_t *jump_table) {
    __shared__ double c[1024];
    __shared__ double by_rank[1024];  // the candidates' confidences, best first
    __shared__ int n_cand, fail_sh;
    const int b = threadIdx.x;
    if (b == 0) {
        n_cand = 0;
        fail_sh = 0x7fffffff;
    }
    double cb = -INFINITY;
    if (b < B) {
        if (random_remask) {
            uint64_t s[4] = {rng.s[0], rng.s[1], rng.s[2], rng.s[3]};
            for (int bit = 0; bit < 10; bit++)
                if (b >> bit & 1) thread_apply(s, jump_table + (size_t)bit * X0_JUMP_WORDS);
            const double u = (double)(li_xoshiro_next(s) >> 11) * 0x1p-53;
            cb = masked[b] ? u : -INFINITY;
        } else {
            cb = masked[b] ? conf[b] : -INFINITY;
        }
        c[b] = cb;
    }
    __syncthreads();
    const bool cand = b < B && cb > -INFINITY;
    int rank = 0;
    if (cand) {
        atomicAdd(&n_cand, 1);
        for (int a = 0; a < B; a++)
            rank += c[a] > -INFINITY && (c[a] > cb || (c[a] == cb && a < b));
        by_rank[rank] = cb;
        // mode 1 threshold, 2 factor: the first rank >= 1 that fails ends the prefix
        if (rank > 0 && ((mode == 1 && !(cb >= tau)) ||
                         (mode == 2 && cb < 1.0 - f / (double)(rank + 2))))
            atomicMin(&fail_sh, rank);
    }
    __syncthreads();
    const int nc = n_cand;
    int take;
    if (mode == 0) {
        take = k < nc ? (k > 0 ? k : 0) : nc;
    } else {
        take = fail_sh < nc ? fail_sh : nc;
        if (nc == 0) take = 0;
        if (mode == 2 && take == nc - 1) take = nc;  // Fast-dLLM's last-rank bump
    }
    // (under threshold only a best below tau can tie: take 1, torch.topk's first on the host)
    const bool tie = take > 0 && take < nc && by_rank[take - 1] == by_rank[take];
    if (b < B) commit[b] = !tie && cand && rank < take ? x0[b] : -1;
    if (b == 0) commit[B] = tie ? -1 : take;
}

extern "C" cudaError_t li_cuda_dllm_select(cudaStream_t st, int32_t *commit, const int32_t *x0,
                                           const double *conf, const uint8_t *masked, int B,
                                           int mode, int k, double tau, double f,
                                           int random_remask, li_cuda_rng_state rng,
                                           const uint64_t *jump_table) {
    if (B <= 0) return cudaSuccess;
    if (B > 1024 || mode < 0 || mode > 2 || (random_remask && !jump_table))
        return cudaErrorInvalidValue;
    dllm_select_kernel<<<1, B < 32 ? 32 : (B + 31) / 32 * 32, 0, st>>>(
        commit, x0, conf, masked, B, mode, k, tau, f, random_remask, rng, jump_table);
    return cudaGetLastError();
}

// ---- DPad's draw (backend.h dllm_dpad) -----------------------------------------------------------
//
// Grid ceil(n_suffix / 256) blocks of 256 threads, thread d for suffix row d: for d < window it
// reaches the stream's draw d by applying the table matrices of d's set bits (as
// dllm_select_kernel does for row b; 31 bits cover any int) and keeps the row iff
// u = (next >> 11) 2^-53 < prob[d]; rows d >= window are dropped. Cost at window 256: <= 8
// products of ~128 column loads (32 bytes each, from L2 after the first warps) per thread, 256
// threads: ~1M loads, a few µs with the launch; one per block, next to a step's milliseconds.
__global__ void __launch_bounds__(256)
    dllm_dpad_kernel(uint8_t *keep, const double *prob, int window, int n_suffix,
                     li_cuda_rng_state rng, const uint64_t *jump_table) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_suffix) return;
    uint8_t k = 0;
    if (d < window) {
        uint64_t s[4] = {rng.s[0], rng.s[1], rng.s[2], rng.s[3]};
        for (int bit = 0; bit < 31; bit++)
            if (d >> bit & 1) thread_apply(s, jump_table + (size_t)bit * X0_JUMP_WORDS);
        const double u = (double)(li_xoshiro_next(s) >> 11) * 0x1p-53;
        k = u < prob[d];
    }
    keep[d] = k;
}

extern "C" cudaError_t li_cuda_dllm_dpad(cudaStream_t st, uint8_t *keep, const double *prob,
                                         int window, int n_suffix, li_cuda_rng_state rng,
                                         const uint64_t *jump_table) {
    if (window < 1 || n_suffix < 0 || !jump_table) return cudaErrorInvalidValue;
    if (n_suffix == 0) return cudaSuccess;
    dllm_dpad_kernel<<<(n_suffix + 255) / 256, 256, 0, st>>>(keep, prob, window, n_suffix, rng,
                                                             jump_table);
    return cudaGetLastError();
}
