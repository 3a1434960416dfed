// dllm-sample.cuh — launchers of LLaDA's decoding step on the GPU (dllm-sample.cu): CFG, bans, x0
// by argmax or by Gumbel-max with the engine's own random stream, and the confidence of x0, so the
// logits never leave the device; the transfer selection; DPad's per-block draw. Plain C
// declarations: the C11 host side (backend-cuda-internal.h) includes this.
#ifndef LI_CUDA_DLLM_SAMPLE_CUH
#define LI_CUDA_DLLM_SAMPLE_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// xoshiro256** state (li_rng, core.h) by value: the stream's state before this step's draws.
typedef struct {
    uint64_t s[4];
} li_cuda_rng_state;

// Device bytes li_cuda_dllm_x0 needs as scratch (8-byte aligned) for B rows of V ids: 32
// partials of 24 bytes per 4096 ids (0.76 MB at B 32, V 126464).
size_t li_cuda_dllm_x0_scratch_bytes(int B, int V);

// backend.h dllm_x0 (engine-dllm.c step_decide steps 1-5), per row b of logits (B, V), changed in
// place; ulogits (B, V) or NULL; masked (B) bytes, 1: the row is a mask (a candidate):
//   1. ulogits: l = u + w (l - u) in fp32, unfused;  2. eos >= 0: l[eos] = -inf;
//   3. x0 (B): temperature <= 0: argmax_v l, lowest id on ties. temperature > 0: argmax_v
//      exp(l[v]) / (-log u_i)^T in fp64, u_i uniform number i = b V + v of the stream starting at
//      rng (li_rng_uniform's: (u64 >> 11) 2^-53), lowest id on ties; the draws of unmasked rows
//      are skipped, not computed. Unmasked rows: x0 = 0;
//   4. l[ban0] = l[ban1] = -inf for those >= 0;  5. conf (B) fp64: softmax(l)[x0] for masked
//      rows (terms and sums in fp64), -inf otherwise; conf_f32: generate.py's float32 softmax
//      (li_dllm_conf_f32's formula: expf terms, a float sum, e_x0 * (1 / sum); the sum's order
//      is a block reduction here, not torch's 8 lanes: last-bit differences, and a row at the
//      edge of rounding to exactly 1.0 may land on the other side).
// rng is not advanced here: the caller jumps its stream by B V draws when temperature > 0.
// jump_table: a device copy of li_rng_jump_table() (64 x 256 x 4 words, 16-byte aligned as
// cudaMalloc's are; may be NULL when temperature <= 0). scratch: scratch_bytes >=
// li_cuda_dllm_x0_scratch_bytes(B, V) of device memory, reused by the next call once this one is
// done on st.
cudaError_t li_cuda_dllm_x0(cudaStream_t st, int32_t *x0, double *conf, float *logits,
                            const float *ulogits, const uint8_t *masked, int B, int V, float w,
                            int32_t eos, int32_t ban0, int32_t ban1, double temperature,
                            bool conf_f32, li_cuda_rng_state rng, const uint64_t *jump_table, void *scratch,
                            size_t scratch_bytes);

// backend.h dllm_select: which masked window rows take their x0 this step. conf (B) from
// dllm_x0, or at random_remask the uniform numbers 0..B-1 of the stream at rng (jump_table as
// above); mode 0 top-k, 1 threshold tau, 2 factor f (li_dllm_take's count, li_dllm_select's
// order: higher conf, then lower row). commit (B + 1): x0[b] for a selected row, -1 otherwise;
// commit[B] = the number selected, or -1 (every row -1) when modes 0 / 2 cut between equal
// confidences: the host then picks torch.topk's rows among them.
cudaError_t li_cuda_dllm_select(cudaStream_t st, int32_t *commit, const int32_t *x0,
                                const double *conf, const uint8_t *masked, int B, int mode, int k,
                                double tau, double f, int random_remask, li_cuda_rng_state rng,
                                const uint64_t *jump_table);

// backend.h dllm_dpad: DPad's keep flags of one block. keep (n_suffix) bytes: 1 iff d < window
// and u_d < prob[d], u_d the uniform number d of the stream at rng (jump_table as above,
// required); prob (window) doubles in device memory. window >= 1, n_suffix >= 0 (0: nothing to
// do). One thread per suffix row (256-thread blocks); rng is not advanced here.
cudaError_t li_cuda_dllm_dpad(cudaStream_t st, uint8_t *keep, const double *prob, int window,
                              int n_suffix, li_cuda_rng_state rng, const uint64_t *jump_table);

#ifdef __cplusplus
}
#endif

#endif
