// attention.cuh — launcher of the paged GQA attention kernel (attention.cu), the op table's
// `attention` on the GPU.
#ifndef LI_CUDA_ATTENTION_CUH
#define LI_CUDA_ATTENTION_CUH

#include "cuda-common.cuh"

// Everything the kernel needs, as plain data (device pointers unless noted).
typedef struct {
    float *out;                // (T, H, Dh)
    const float *q;            // (T, H, Dh), already rotated at the rows' positions
    int T, H, Hkv, Dh, P, L, il;
    const void *kv;            // pool (n_pages_pool, L, 2, Hkv, P, Dh) of f32, or bf16 if kv_bf16
    int kv_bf16;
    const uint64_t *pages;     // (n_pages) page-table words (backend.h), logical order
    int n_pages;               // with row_page0: the longest row's table
    const int32_t *row_page0;  // (T + 1) or NULL: row t reads its own table,
                               // pages[row_page0[t] .. row_page0[t + 1]) (decode rows of many
                               // sequences in one launch; li_cuda_attention_rows_ok shapes only)
    const int32_t *kv_first;   // (T) first visible key per row, or NULL (0)
    const int32_t *n_visible;  // (T) visible keys end per row
    float scale;
    int rotate;                // 0: Δ ignored (the op got rope = NULL, every Δ is 0)
    int n_split;               // pages split into n_split ranges (split-K); 1: no partials
    int pages_per_split;
    int keys_per_split;        // prefill kernel (n_split > 1): block z takes keys
                               // [z keys_per_split, (z + 1) keys_per_split), a multiple of 64
    float *part_o;             // (T, H, n_split, Dh) unnormalised partial outputs (n_split > 1)
    float *part_ml;            // (T, H, n_split, 2) partial (max, sum) (n_split > 1)
    unsigned *tickets;         // (T, Hkv) zeros, or NULL: the decode kernel merges the partials
                               // itself (the last block of a row and kv head; left zero again)
    // Dense mode of the tensor-core kernels (n_dense > 0): keys are rows of kd / vd (n_dense,
    // Hkv, Dh; f32, or bf16 when kv_bf16) instead of pages, every query row sees all of them
    // (bidirectional), no rotation.
    const void *kd, *vd;
    int n_dense;
    // Non-NULL (dense mode, no split): the output rounded to bf16 here instead of out (f32).
    uint16_t *out_bf16;
    // Non-NULL (dense mode, no split; the mma kernels): rows start from the online-softmax state
    // (st_m, st_l (T, H), st_o (T, H, Dh); m in natural-log units, o unnormalised) and write the
    // state back there instead of out — flash_attn_tiles on tensor cores.
    float *st_o, *st_m, *st_l;
} li_cuda_attn_args;

// Host-side plan: how many key ranges (split-K) for T rows, Hkv kv heads of G query heads each,
// head dim Dh, pool element type (kv_bf16) and n_pages pages on a GPU with n_sm multiprocessors. Fills *n_split and
// *pages_per_split; the partial buffers need T * H * n_split * (Dh + 2) floats when *n_split > 1.
LI_CUDA_API void li_cuda_attention_plan(int T, int Hkv, int G, int Dh, int kv_bf16, int n_pages,
                                        int n_sm, int *n_split, int *pages_per_split);
// out (rows, Dh) = the merge of n_split unnormalised partials per row: part_o (rows, n_split, Dh),
// part_ml (rows, n_split, 2) = (max in natural-log units, sum); a range without keys has m -inf.
LI_CUDA_API cudaError_t li_cuda_attention_combine(cudaStream_t st, float *out, const float *part_o,
                                                  const float *part_ml, int64_t rows, int n_split,
                                                  int Dh);
// Split-K of the tensor-core prefill kernel for T rows, H heads over at most max_keys keys on n_sm
// multiprocessors: a few row tiles (a query prefill over cached documents: 64 rows, 32 heads)
// would leave most of the GPU idle. Fills *n_split (1: none) and *keys_per_split; the partials
// need T * H * n_split * (Dh + 2) floats when *n_split > 1.
LI_CUDA_API void li_cuda_attention_prefill_plan(int T, int H, int max_keys, int n_sm, int *n_split,
                                                int *keys_per_split);
// The most partial floats any prefill split plan needs on n_sm multiprocessors at head dim Dh
// (reserved at start: a split never grows the scratch).
LI_CUDA_API size_t li_cuda_attention_prefill_part_floats(int n_sm, int Dh);
// Rows from which the tensor-core kernel (attention-prefill.cu) takes over, for Dh 64 and 128.
#define LI_CUDA_ATTN_TC_MIN_T 16
// 1 when li_cuda_attention_prefill serves (T, Dh).
LI_CUDA_API int li_cuda_attention_uses_tc(int T, int Dh);
// The tensor-core prefill kernel: keys is scratch of >= n_pages * P + 1 words (the per-key
// index). a->n_split > 1 (li_cuda_attention_prefill_plan): split-K over keys_per_split keys,
// partials in part_o / part_ml, merged by li_cuda_attention_combine in the same stream.
LI_CUDA_API cudaError_t li_cuda_attention_prefill(cudaStream_t st, const li_cuda_attn_args *a,
                                                  const li_cuda_rope_args *rope, uint64_t *keys);
// out (T, H, Dh) = bidirectional attention of q (T, H, Dh) over dense k, v (nk, Hkv, Dh) of f32,
// or bf16 when kv_bf16 (then 16-byte cp.async rows: the pipelined kernel), on the tensor-core
// kernels (Dh 64 or 128).
LI_CUDA_API cudaError_t li_cuda_attention_dense(cudaStream_t st, float *out, const float *q, int T,
                                                int H, const void *k, const void *v, int kv_bf16,
                                                int nk, int Hkv, int Dh, float scale);
// flash_attn_tiles (backend.h) on the tensor cores: rows q (nq, H, Dh) f32 carry the state o
// (nq, H, Dh), m, l (nq, H) over all keys k, v (nk, Hkv, Dh) bf16 (one pass, in 64-key tiles);
// Dh 64 or 128. Within bf16 rounding of the f32 kernel (Q, K, V, P rounded).
LI_CUDA_API cudaError_t li_cuda_flash_attn_tc(cudaStream_t st, float *o, float *m, float *l,
                                              const float *q, int nq, int H, const uint16_t *k,
                                              const uint16_t *v, int nk, int Hkv, int Dh,
                                              float scale);
// li_cuda_attention_dense writing out (f32) or, when out_bf16 is not NULL, out_bf16 (T, H, Dh)
// bf16: the same values rounded (4-byte aligned).
LI_CUDA_API cudaError_t li_cuda_attention_dense_out(cudaStream_t st, float *out, uint16_t *out_bf16,
                                                    const float *q, int T, int H, const void *k,
                                                    const void *v, int kv_bf16, int nk, int Hkv,
                                                    int Dh, float scale);
// 1 when li_cuda_attention takes per-row page tables (row_page0) for G query heads per kv head,
// head dim Dh and that pool element type.
LI_CUDA_API int li_cuda_attention_rows_ok(int G, int Dh, int kv_bf16);
// rope may be NULL when a->rotate == 0.
LI_CUDA_API cudaError_t li_cuda_attention(cudaStream_t st, const li_cuda_attn_args *a,
                                          const li_cuda_rope_args *rope);

#endif
