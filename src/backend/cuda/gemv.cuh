// gemv.cuh — launcher of the decode GEMV (gemv.cu): y (N) = W (N, K) bf16 · x (K) f32.
#ifndef LI_CUDA_GEMV_CUH
#define LI_CUDA_GEMV_CUH

#include "cuda-common.cuh"

// 1 when the GEMV serves this matmul: one row (T == 1), K a multiple of 8, W and x 16-byte aligned.
LI_CUDA_API int li_cuda_gemv_ok(int T, int64_t K, const void *W, const void *x);
LI_CUDA_API cudaError_t li_cuda_gemv_bf16(cudaStream_t st, float *y, const void *W, const float *x,
                                          int64_t N, int64_t K);

#endif
