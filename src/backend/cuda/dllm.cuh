// dllm.cuh — launchers of the diffusion / FP8 ops (dllm.cu): FlashAttention's inner loop over
// dense K/V tiles with its final normalisation, per-token-group FP8 quantisation, and the
// block-scaled FP8 GEMM with the bit-exact accumulation order of backend.h.
#ifndef LI_CUDA_DLLM_CUH
#define LI_CUDA_DLLM_CUH

#include "cuda-common.cuh"

// o (nq, H, Dh), m, l (nq, H) running state; q (nq, H, Dh); k, v (nk, Hkv, Dh).
LI_CUDA_API cudaError_t li_cuda_flash_attn_tiles(cudaStream_t st, float *o, float *m, float *l,
                                                 const float *q, int nq, int H, const float *k,
                                                 const float *v, int nk, int Hkv, int Dh, int tile,
                                                 float scale);
// out (n, Dh) = o / l (n). out may alias o.
LI_CUDA_API cudaError_t li_cuda_flash_attn_finalize(cudaStream_t st, float *out, const float *o,
                                                    const float *l, int64_t n, int Dh);
// q (T, K) e4m3 codes, scale (T, ceil(K/128)) from x (T, K).
LI_CUDA_API cudaError_t li_cuda_fp8_quant_rows(cudaStream_t st, uint8_t *q, float *scale,
                                               const float *x, int T, int K);
// Fused activation quantisation (codes and scales as fp8_quant_rows of the f32 result):
// x += y (y NULL: none), then q, scale of rmsnorm(x) * w (T, D); and q, scale of silu(gate) * up
// (T, F). li_cuda_fp8_fused_ok: the kernels take K (K <= 16384).
LI_CUDA_API bool li_cuda_fp8_fused_ok(int K, bool norm);
LI_CUDA_API cudaError_t li_cuda_add_rmsnorm_fp8(cudaStream_t st, uint8_t *q, float *scale,
                                                float *x, const float *y, const float *w, int T,
                                                int D, float eps);
LI_CUDA_API cudaError_t li_cuda_swiglu_fp8(cudaStream_t st, uint8_t *q, float *scale,
                                           const float *gate, const float *up, int T, int F);
// W (N, K) (bf16 when bf16, else f32) per 128 x 128 block: q (N, K) codes, scale (ceil(N/128),
// ceil(K/128)), bit-exact with li_fp8_weight_quantize.
LI_CUDA_API cudaError_t li_cuda_fp8_quant_weight(cudaStream_t st, uint8_t *q, float *scale,
                                                 const void *w, int bf16, int64_t N, int64_t K);
// y (T, N) from qa (T, K), sa (T, ceil(K/128)) and W: wq (N, K), wscale (ceil(N/128), ceil(K/128)).
LI_CUDA_API cudaError_t li_cuda_matmul_fp8(cudaStream_t st, float *y, const uint8_t *qa,
                                           const float *sa, int T, const uint8_t *wq,
                                           const float *wscale, int64_t N, int64_t K);

#endif
