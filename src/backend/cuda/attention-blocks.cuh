// attention-blocks.cuh — the kernels around a library attention call split into blocks
// (src/backend/attn-blocks.h): each block's query rows rotated back by its Δ into bf16, keys
// gathered from the pool when a block does not start on a page, and the blocks' outputs merged
// by their log-sum-exp.
#ifndef LI_CUDA_ATTENTION_BLOCKS_CUH
#define LI_CUDA_ATTENTION_BLOCKS_CUH

#include "cuda-common.cuh"

// One batch slot of the library call (device memory): a block of one sequence. The slots of all
// the call's sequences are packed one after another in the library's tensors ("ragged").
typedef struct {
    int32_t row0;    // first query row of the block in the op's q and out
    int32_t n_rows;  // rows of its group
    int32_t delta;   // Δ of its keys: the rows are rotated by -Δ
    int32_t off;     // slot of its first key in its first page
    int32_t n_keys;  // keys
    int32_t q_row;   // first row of the block in the packed qb / ob (and lse)
    int32_t kv_row;  // first key of the block in the packed kb / vb
    int32_t table0; // its first page id in the call's page list
} li_cuda_block_slot;

// One query row of the op (device memory): its output row t, its blocks are slots[first ..
// first + count) of the call's slot list, and it is row r of each of them.
typedef struct {
    int32_t first, count, r, t;
} li_cuda_block_row;

// qb (packed rows, H, Dh) bf16: row r < n_rows of slot s (at packed row q_row + r) = q (T, H, Dh)
// row row0 + r rotated by -delta (pure rotation: no mscale; the first r.n_dims of each head).
// Grid: max_rows x n_slots.
LI_CUDA_API cudaError_t li_cuda_blocks_q(cudaStream_t st, uint16_t *qb, const float *q,
                                         const li_cuda_block_slot *slots, int n_slots,
                                         int max_rows, int H, int Dh, const li_cuda_rope_args *r);

// kb, vb (packed keys, Hkv, Dh) bf16: key j < n_keys of slot s (packed key kv_row + j) = pool key
// `off + j` of the slot's pages (pages[table0 ..] page ids; a bf16 pool (n_pages, L, 2, Hkv, P,
// Dh)); keys from n_keys up to the next multiple of 256 zeroed (the packer leaves room for them).
LI_CUDA_API cudaError_t li_cuda_blocks_gather(cudaStream_t st, uint16_t *kb, uint16_t *vb,
                                              const void *pool, int L, int il, int Hkv, int P,
                                              int Dh, const li_cuda_block_slot *slots,
                                              const int32_t *pages, int n_slots, int max_keys);

// out rows: row rows[i].t of out (·, H, Dh) f32, or bf16 (out_bf16: the f32 value rounded once)
// = Σ_b w_b ob[slot_b, r] / Σ_b w_b over its blocks, w_b = exp(lse[slot_b, r, h] - max_b lse),
// from ob (packed rows, H, Dh) bf16 and lse (packed rows, H) f32; rows (n_rows), slot_list (the
// rows' slot ids). One block per row.
LI_CUDA_API cudaError_t li_cuda_blocks_merge(cudaStream_t st, void *out, int out_bf16,
                                             const uint16_t *ob, const float *lse,
                                             const li_cuda_block_slot *slots,
                                             const li_cuda_block_row *rows,
                                             const int32_t *slot_list, int n_rows, int H, int Dh);

// dst (n) f32 = src (n) bf16.
LI_CUDA_API cudaError_t li_cuda_bf16_to_f32(cudaStream_t st, float *dst, const uint16_t *src,
                                            int64_t n);

#endif
