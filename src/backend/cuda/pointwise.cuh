// pointwise.cuh — launchers of the CUDA backend's memory-bound kernels (pointwise.cu): embedding,
// RMSNorm, residual add, SwiGLU, softmax, RoPE, KV page writes, the copy mode's page copy with
// re-rotation, f32 -> bf16 activation conversion, and a random fill for tests and synthetic
// weights. Shapes and semantics are those of the op table (src/backend/backend.h).
#ifndef LI_CUDA_POINTWISE_CUH
#define LI_CUDA_POINTWISE_CUH

#include "cuda-common.cuh"

// out (T, D) = W[tokens[t]], W (V, D) bf16 (w_bf16 = 1) or f32; tokens (T) on the device.
LI_CUDA_API cudaError_t li_cuda_embed(cudaStream_t st, float *out, const void *W, int w_bf16,
                                      int64_t D, const int32_t *tokens, int T);
// out (T, D) = x / sqrt(mean(x^2) + eps) * w. out may alias x.
LI_CUDA_API cudaError_t li_cuda_rmsnorm(cudaStream_t st, float *out, const float *x,
                                        const float *w, int T, int D, float eps);
// out (T, D) bf16 = the rounding of li_cuda_rmsnorm's result (the same bits).
LI_CUDA_API cudaError_t li_cuda_rmsnorm_bf16(cudaStream_t st, uint16_t *out, const float *x,
                                             const float *w, int T, int D, float eps);
// x (T, D) += y (T, D); out (T, D) = rmsnorm(x) * w. out aliases neither.
LI_CUDA_API cudaError_t li_cuda_add_rmsnorm(cudaStream_t st, float *out, float *x, const float *y,
                                            const float *w, int T, int D, float eps);
// x (n) += y (n)
LI_CUDA_API cudaError_t li_cuda_add(cudaStream_t st, float *x, const float *y, int64_t n);
// x (T, N) += b (N) on every row
LI_CUDA_API cudaError_t li_cuda_add_bias(cudaStream_t st, float *x, const float *b, int T, int N);
// out (n) = silu(gate) * up. out may alias gate.
LI_CUDA_API cudaError_t li_cuda_swiglu(cudaStream_t st, float *out, const float *gate,
                                       const float *up, int64_t n);
// out (T, F) bf16 = the rounding of li_cuda_swiglu's result (the same bits); rows of gate and up
// ld floats apart.
LI_CUDA_API cudaError_t li_cuda_swiglu_bf16(cudaStream_t st, uint16_t *out, const float *gate,
                                            const float *up, int T, int F, int64_t ld);
// qkv (T, (H + 2 Hkv) Dh) f32 -> q (T, H, Dh) f32 rotated, k (T, Hkv, Dh) bf16 rotated, v bf16
// (backend.h qkv_bf16: the bits of li_cuda_rope and li_cuda_rope_bf16).
LI_CUDA_API cudaError_t li_cuda_qkv_bf16(cudaStream_t st, float *q, uint16_t *k, uint16_t *v,
                                         const float *qkv, const int32_t *pos, int T, int H,
                                         int Hkv, int Dh, const li_cuda_rope_args *rope);
// Programmatic dependent launches on (1, the default) or off (0: plain launches, for debugging);
// process-wide, set by li_backend_cuda_init from LI_CUDA_PDL.
LI_CUDA_API void li_cuda_set_pdl(int on);
// In place softmax over `rows` rows of length n.
LI_CUDA_API cudaError_t li_cuda_softmax(cudaStream_t st, float *x, int rows, int n);
// x (T, nh, Dh) rotated in place at pos (T, device), magnitude rope->mscale.
LI_CUDA_API cudaError_t li_cuda_rope(cudaStream_t st, float *x, const int32_t *pos, int T, int nh,
                                     int Dh, const li_cuda_rope_args *rope);
// out (T, nh, Dh) bf16 = the rounding of li_cuda_rope's result on a copy of x (the same bits; x
// unchanged); pos NULL: the plain conversion.
LI_CUDA_API cudaError_t li_cuda_rope_bf16(cudaStream_t st, uint16_t *out, const float *x,
                                          const int32_t *pos, int T, int nh, int Dh,
                                          const li_cuda_rope_args *rope);
// k, v (T, Hkv, Dh) -> pool data (n_pages, L, 2, Hkv, P, Dh) of f32 (kv_bf16 0) or bf16
// (rounded to nearest even), layer il, slots slot (T, device).
LI_CUDA_API cudaError_t li_cuda_kv_store(cudaStream_t st, void *data, int kv_bf16, int L, int Hkv,
                                         int Dh, int P, int il, const float *k, const float *v,
                                         const int64_t *slot, int T);
// qkv (T, (H + 2 Hkv) Dh) f32 (+ bias ((H + 2 Hkv) Dh), NULL: none) -> q (T, H, Dh) f32 rotated;
// k rotated and v into the pool as li_cuda_kv_store (backend.h qkv_rope_store: the bits of
// li_cuda_add_bias, li_cuda_rope and li_cuda_kv_store).
LI_CUDA_API cudaError_t li_cuda_qkv_rope_store(cudaStream_t st, float *q, void *data, int kv_bf16,
                                               int L, int Hkv, int Dh, int P, int il,
                                               const float *qkv, const float *bias,
                                               const int32_t *pos, const int64_t *slot, int T,
                                               int H, const li_cuda_rope_args *rope);
// Page dst = page src for the first `count` slots of every layer: V copied, K rotated by the pure
// rotation R_delta (magnitude 1). data as li_cuda_kv_store's.
LI_CUDA_API cudaError_t li_cuda_kv_copy_rotate(cudaStream_t st, void *data, int kv_bf16, int L,
                                               int Hkv, int Dh, int P, int64_t src, int64_t dst,
                                               int count, int64_t delta,
                                               const li_cuda_rope_args *rope);
// dst (n) bf16 = round-to-nearest-even(src (n) f32)
LI_CUDA_API cudaError_t li_cuda_f32_to_bf16(cudaStream_t st, uint16_t *dst, const float *src,
                                            int64_t n);
// x (n) = uniform in [-scale, scale), a counter-based hash of (seed, i): reproducible, no state.
LI_CUDA_API cudaError_t li_cuda_fill_uniform(cudaStream_t st, float *x, int64_t n, uint64_t seed,
                                             float scale);
// dst (cols, rows) = src (rows, cols)ᵀ, f32, row-major both (small matrices: scale tables).
LI_CUDA_API cudaError_t li_cuda_transpose_f32(cudaStream_t st, float *dst, const float *src,
                                              int rows, int cols);
// x (n) = v
LI_CUDA_API cudaError_t li_cuda_fill_f32(cudaStream_t st, float *x, int64_t n, float v);
// x (n) = mean + uniform [-a, a) as fill_uniform, stored as bf16 (bf16 = 1) or f32.
LI_CUDA_API cudaError_t li_cuda_fill_random(cudaStream_t st, void *x, int bf16, int64_t n,
                                            uint64_t seed, float a, float mean);

#endif
