// cuda-common.cuh — what the CUDA backend's .cu files and its C11 host side (backend-cuda*.c)
// share: plain-C argument types for the kernel launchers. Both nvcc (C++) and the C compiler read
// it, so it holds no C++ and no lazyinfer headers (core.h is C11-only); the host side converts the
// backend.h structs into these.
//
// Every launcher is `extern "C" cudaError_t li_cuda_<op>(cudaStream_t, ...)`: it validates what it
// can, launches, and returns cudaGetLastError() so the caller records the first failure with the
// op's name. Pointers are device pointers unless a comment says otherwise.
#ifndef LI_CUDA_COMMON_CUH
#define LI_CUDA_COMMON_CUH

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
#define LI_CUDA_API extern "C"
#else
#define LI_CUDA_API
#endif

// Mirrors LI_ROPE_MAX_PAIRS (hparams.h); backend-cuda.c checks they agree.
#define LI_CUDA_ROPE_MAX_PAIRS 256

// li_rope_table as kernels take it: passed by value as a kernel parameter (1 KiB of the 4 KiB
// parameter space), so every block reads it from the constant bank without a copy.
typedef struct {
    int gptj;    // 0: NEOX pairs (i, i + n_dims/2); 1: GPT-J pairs (2i, 2i + 1)
    int n_dims;  // rotated dims per head (even)
    float mscale;
    float inv_freq[LI_CUDA_ROPE_MAX_PAIRS];
} li_cuda_rope_args;

#endif
