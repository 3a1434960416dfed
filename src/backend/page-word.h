// page-word.h — the 64-bit page-table word of a sequence (one per page, in logical order), shared
// by the C code (backend.h) and the CUDA kernels, which unpack it on the device:
//   bits  0..25  physical page id      (< 2^26 pages)
//   bits 26..34  valid tokens in page  (1..P, P <= 256)
//   bits 35..63  Δ: RoPE offset to apply to this page's K at attention time (< 2^29)
// Keys are numbered logically across the table (page 0's valid tokens first, then page 1's, …).
#ifndef LI_PAGE_WORD_H
#define LI_PAGE_WORD_H

#include <stdint.h>

#ifdef __CUDACC__
#define LI_PAGE_FN __host__ __device__ static inline
#else
#define LI_PAGE_FN static inline
#endif

#define LI_PAGE_ID_BITS 26
#define LI_PAGE_COUNT_BITS 9
#define LI_PAGE_DELTA_BITS 29
#define LI_PAGE_MAX_ID ((1ll << LI_PAGE_ID_BITS) - 1)
#define LI_PAGE_MAX_SIZE 256
#define LI_PAGE_MAX_DELTA ((1ll << LI_PAGE_DELTA_BITS) - 1)

LI_PAGE_FN uint64_t li_page_word(int64_t page, int count, int64_t delta) {
    return (uint64_t)page | ((uint64_t)count << LI_PAGE_ID_BITS) |
           ((uint64_t)delta << (LI_PAGE_ID_BITS + LI_PAGE_COUNT_BITS));
}
LI_PAGE_FN int64_t li_page_id(uint64_t w) { return (int64_t)(w & LI_PAGE_MAX_ID); }
LI_PAGE_FN int li_page_count(uint64_t w) {
    return (int)((w >> LI_PAGE_ID_BITS) & ((1u << LI_PAGE_COUNT_BITS) - 1));
}
LI_PAGE_FN int64_t li_page_delta(uint64_t w) {
    return (int64_t)(w >> (LI_PAGE_ID_BITS + LI_PAGE_COUNT_BITS));
}

#endif
