// attention-blocks.cuh — the kernels around a library attention call split into blocks
// (src/backend/attn-blocks.h): each block's query rows rotated back by its Δ into bf16, keys
// gathered from the pool when a block does not start on a page, and the blocks' outputs merged
// by their log-sum-exp.
#ifndef LI_CUDA_ATTENTION_BLOCKS_CUH
#define LI_CUDA_ATTENTION_BLOCKS_CUH

#include "cuda-common.cuh"

// One batch slot of the library call (device memory). Padding slots repeat slot 0.
typedef struct {
    int32_t row0;    // first query row of the call
    int32_t n_rows;  // rows of its group
    int32_t delta;   // Δ of its keys: the rows are rotated by -Δ
    int32_t off;     // slot of its first key in its first page
    int32_t n_keys;  // keys
    int32_t pad;
} li_cuda_block_slot;

// One query row of the call (device memory): its blocks are slots[first .. first + count) of the
// call's slot list, and it is row r of each of them.
typedef struct {
    int32_t first, count, r, pad;
} li_cuda_block_row;

// qb (n_slots, s_q, H, Dh) bf16: row r < n_rows of slot s = q (T, H, Dh) row row0 + r rotated by
// -delta (pure rotation: no mscale; the first r.n_dims of each head). Rows past n_rows untouched.
LI_CUDA_API cudaError_t li_cuda_blocks_q(cudaStream_t st, uint16_t *qb, const float *q,
                                         const li_cuda_block_slot *slots, int n_slots, int s_q,
                                         int H, int Dh, const li_cuda_rope_args *r);

// kb, vb (n_slots, s_kv, Hkv, Dh) bf16: key j < n_keys of slot s = pool key `off + j` of the
// slot's pages (pages (n_slots, table) page ids; a bf16 pool (n_pages, L, 2, Hkv, P, Dh)); keys
// from n_keys up to the next multiple of 256 (within s_kv) zeroed.
LI_CUDA_API cudaError_t li_cuda_blocks_gather(cudaStream_t st, uint16_t *kb, uint16_t *vb,
                                              const void *pool, int L, int il, int Hkv, int P,
                                              int Dh, const li_cuda_block_slot *slots,
                                              const int32_t *pages, int table, int n_slots,
                                              int s_kv);

// out (T, H, Dh) f32: row t = Σ_b w_b ob[slot_b, r] / Σ_b w_b over its blocks, w_b =
// exp(lse[slot_b, h, r] - max_b lse), from ob (n_slots, s_q, H, Dh) bf16, lse (n_slots, H, s_q)
// f32, rows (T), slot_list (the rows' slot ids). One block per row.
LI_CUDA_API cudaError_t li_cuda_blocks_merge(cudaStream_t st, float *out, const uint16_t *ob,
                                             const float *lse, const li_cuda_block_row *rows,
                                             const int32_t *slot_list, int T, int s_q, int H,
                                             int Dh);

// dst (n) f32 = src (n) bf16.
LI_CUDA_API cudaError_t li_cuda_bf16_to_f32(cudaStream_t st, float *dst, const uint16_t *src,
                                            int64_t n);

#endif
