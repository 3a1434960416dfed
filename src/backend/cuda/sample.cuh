// sample.cuh — token sampling on the GPU (sample.cu): only the chosen token id crosses to the host.
#ifndef LI_CUDA_SAMPLE_CUH
#define LI_CUDA_SAMPLE_CUH

#include "cuda-common.cuh"

// Device scratch for sampling over vocabularies of up to `cap` tokens (sort buffers, CUB's
// temporary storage, the result word). Opaque; owned by the backend.
typedef struct li_cuda_sampler li_cuda_sampler;

// Makes *s hold scratch for V tokens (allocates on first use and when V grows; the engine calls
// it at start with its vocabulary so that decoding allocates nothing).
LI_CUDA_API cudaError_t li_cuda_sampler_reserve(li_cuda_sampler **s, int V);
LI_CUDA_API void li_cuda_sampler_free(li_cuda_sampler *s);

// Picks a token from logits (V, device) as li_sampler_config says (backend.h): temperature <= 0
// is greedy (argmax, lowest id on ties). Writes the token to *out_token (host) after
// synchronising the stream.
LI_CUDA_API cudaError_t li_cuda_sample(li_cuda_sampler **s, cudaStream_t st, const float *logits,
                                       int V, float temperature, int top_k, float top_p,
                                       float min_p, double u, int32_t *out_token);

#endif
