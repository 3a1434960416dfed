// attention-blocks.cu — attention-blocks.cuh. All three kernels are copies at heart: the query
// rotation reads 4 and writes 2 bytes per element, the gather moves 2 + 2, the merge reads
// 2 x blocks and writes 4. At the H200's ~4 TB/s a 2048-row chunk of Llama-8B's query (8 M
// elements) is ~12 µs through blocks_q, against ~1 ms of attention over 20 K keys.
#include <cuda_bf16.h>

#include "attention-blocks.cuh"
#include "cuda-device.cuh"

// One block per (row, slot): the row's cos / sin of -Δ per pair into shared memory, then every
// (head, pair) rotated (a' = a cos - b sin, b' = b cos + a sin; magnitude 1) and stored as bf16;
// dims past n_dims converted as they are.
__global__ void __launch_bounds__(256) blocks_q_kernel(__nv_bfloat16 *qb, const float *q,
                                                       const li_cuda_block_slot *slots, int H,
                                                       int Dh, const li_cuda_rope_args r) {
    __shared__ float cs[2 * LI_CUDA_ROPE_MAX_PAIRS];
    const li_cuda_block_slot sl = slots[blockIdx.y];
    const int row = blockIdx.x;
    if (row >= sl.n_rows) return;
    const int pairs = sl.delta ? r.n_dims / 2 : 0;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float c, s;
        rope_sincos(-(double)sl.delta, r.inv_freq[p], &c, &s);
        cs[p] = c;
        cs[LI_CUDA_ROPE_MAX_PAIRS + p] = s;
    }
    __syncthreads();
    const float *x = q + (int64_t)(sl.row0 + row) * H * Dh;
    __nv_bfloat16 *y = qb + ((int64_t)sl.q_row + row) * H * Dh;
    for (int i = threadIdx.x; i < H * pairs; i += blockDim.x) {
        const int h = i / pairs, p = i - h * pairs;
        int ia, ib;
        rope_pair(r, p, &ia, &ib);
        const float a = x[h * Dh + ia], b = x[h * Dh + ib];
        const float c = cs[p], s = cs[LI_CUDA_ROPE_MAX_PAIRS + p];
        y[h * Dh + ia] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        y[h * Dh + ib] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
    }
    const int from = pairs ? r.n_dims : 0, rest = Dh - from;
    for (int i = threadIdx.x; i < H * rest; i += blockDim.x) {
        const int h = i / rest, d = from + (i - h * rest);
        y[h * Dh + d] = __float2bfloat16_rn(x[h * Dh + d]);
    }
}

extern "C" cudaError_t li_cuda_blocks_q(cudaStream_t st, uint16_t *qb, const float *q,
                                        const li_cuda_block_slot *slots, int n_slots,
                                        int max_rows, int H, int Dh, const li_cuda_rope_args *r) {
    if (n_slots <= 0 || max_rows <= 0) return cudaSuccess;
    if (n_slots > 65535) return cudaErrorInvalidValue;
    blocks_q_kernel<<<dim3((unsigned)max_rows, (unsigned)n_slots), 256, 0, st>>>(
        (__nv_bfloat16 *)qb, q, slots, H, Dh, *r);
    return cudaGetLastError();
}

// One warp per (key, slot): the key's Hkv heads of K and V, 16 bytes per lane and step.
__global__ void __launch_bounds__(256) blocks_gather_kernel(
    uint4 *kb, uint4 *vb, const __nv_bfloat16 *pool, int L, int il, int Hkv, int P, int Dh,
    const li_cuda_block_slot *slots, const int32_t *pages) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j = blockIdx.x * (blockDim.x >> 5) + warp, s = blockIdx.y;
    const li_cuda_block_slot sl = slots[s];
    uint4 *kd = kb + (((int64_t)sl.kv_row + j) * Hkv * Dh) / 8;
    uint4 *vd = vb + (((int64_t)sl.kv_row + j) * Hkv * Dh) / 8;
    if (j >= sl.n_keys) {
        // zeros past the slot's keys up to a 256-key tile: the library reads whole tiles and
        // masks their scores, but a stale NaN in V would still reach the output (0 x NaN)
        const int tail = (sl.n_keys + 255) & ~255;
        if (j >= tail) return;
        for (int i = lane; i < Hkv * Dh / 8; i += 32) kd[i] = vd[i] = make_uint4(0, 0, 0, 0);
        return;
    }
    const int idx = sl.off + j;
    const int64_t page = pages[sl.table0 + idx / P];
    const int slot = idx % P, vec = Dh / 8;  // 8 bf16 per uint4
    const int64_t head_elems = (int64_t)P * Dh;
    const __nv_bfloat16 *kbase = pool + ((page * L + il) * 2 * Hkv) * head_elems + (int64_t)slot * Dh;
    const __nv_bfloat16 *vbase = kbase + Hkv * head_elems;
    for (int i = lane; i < Hkv * vec; i += 32) {
        const int h = i / vec, e = i - h * vec;
        kd[i] = __ldg((const uint4 *)(kbase + h * head_elems) + e);
        vd[i] = __ldg((const uint4 *)(vbase + h * head_elems) + e);
    }
}

extern "C" cudaError_t li_cuda_blocks_gather(cudaStream_t st, uint16_t *kb, uint16_t *vb,
                                             const void *pool, int L, int il, int Hkv, int P,
                                             int Dh, const li_cuda_block_slot *slots,
                                             const int32_t *pages, int n_slots, int max_keys) {
    if (n_slots <= 0 || max_keys <= 0) return cudaSuccess;
    if (Dh % 8 || n_slots > 65535) return cudaErrorInvalidValue;
    const int keys_per_block = 8, span = (max_keys + 255) & ~255;  // keys and zeroed tail
    blocks_gather_kernel<<<dim3((unsigned)((span + keys_per_block - 1) / keys_per_block),
                                (unsigned)n_slots),
                           32 * keys_per_block, 0, st>>>(
        (uint4 *)kb, (uint4 *)vb, (const __nv_bfloat16 *)pool, L, il, Hkv, P, Dh, slots, pages);
    return cudaGetLastError();
}

// One block per row; thread i handles elements i, i + blockDim, … of the row's H x Dh. O: float,
// or __nv_bfloat16 rounded once from the same f32 value (the O projection's input directly).
template <typename O>
__global__ void __launch_bounds__(256) blocks_merge_kernel(O *out, const __nv_bfloat16 *ob,
                                                           const float *lse,
                                                           const li_cuda_block_slot *slots,
                                                           const li_cuda_block_row *rows,
                                                           const int32_t *slot_list, int H,
                                                           int Dh) {
    const li_cuda_block_row rw = rows[blockIdx.x];
    O *o = out + (int64_t)rw.t * H * Dh;
    for (int i = threadIdx.x; i < H * Dh; i += blockDim.x) {
        const int h = i / Dh;
        float m = -INFINITY;
        for (int b = 0; b < rw.count; b++) {
            const int64_t qr = slots[slot_list[rw.first + b]].q_row + rw.r;
            m = fmaxf(m, lse[qr * H + h]);
        }
        float w = 0, acc = 0;
        for (int b = 0; b < rw.count; b++) {
            const int64_t qr = slots[slot_list[rw.first + b]].q_row + rw.r;
            const float c = __expf(lse[qr * H + h] - m);
            w += c;
            acc += c * __bfloat162float(ob[qr * H * Dh + i]);
        }
        kv_set(o + i, acc / w);
    }
}

extern "C" cudaError_t li_cuda_blocks_merge(cudaStream_t st, void *out, int out_bf16,
                                            const uint16_t *ob, const float *lse,
                                            const li_cuda_block_slot *slots,
                                            const li_cuda_block_row *rows,
                                            const int32_t *slot_list, int n_rows, int H, int Dh) {
    if (n_rows <= 0) return cudaSuccess;
    const __nv_bfloat16 *o16 = (const __nv_bfloat16 *)ob;
    if (out_bf16)
        blocks_merge_kernel<<<(unsigned)n_rows, 256, 0, st>>>((__nv_bfloat16 *)out, o16, lse,
                                                              slots, rows, slot_list, H, Dh);
    else
        blocks_merge_kernel<<<(unsigned)n_rows, 256, 0, st>>>((float *)out, o16, lse, slots,
                                                              rows, slot_list, H, Dh);
    return cudaGetLastError();
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" cudaError_t li_cuda_bf16_to_f32(cudaStream_t st, float *dst, const uint16_t *src,
                                           int64_t n) {
    if (n <= 0) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    bf16_to_f32_kernel<<<(unsigned)blocks, 256, 0, st>>>(dst, (const __nv_bfloat16 *)src, n);
    return cudaGetLastError();
}
