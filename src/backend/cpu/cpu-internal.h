// cpu-internal.h — what backend-cpu.c and ops-cpu.c share and nobody else sees: the CPU backend's
// private state (li_backend.impl) with its grow-only scratch buffers.
//
// A backend is driven by one thread at a time (ops are not reentrant on one li_backend); the
// scratch below is grown by that thread before a parallel_for and only read by the workers.
// Buffers grow on the first call at a given size and are reused afterwards, so steady-state
// decoding allocates nothing. A failed growth never fails an op: each op that uses scratch has a
// slower path that needs none.
#ifndef LI_CPU_INTERNAL_H
#define LI_CPU_INTERNAL_H

#include "../backend.h"

typedef struct {
    void *p;
    size_t cap;  // bytes
} li_cpu_scratch;

typedef struct {
    li_cpu_scratch delta_tab;  // attention: cos/sin of Δ·w_i per distinct page Δ, + page index
    li_cpu_scratch kv_wide;    // attention on a bf16 pool: per thread, a page's K, V rows in f32
    li_cpu_scratch wtile;      // matmul: bf16 rows converted to f32 for sgemm
    li_cpu_scratch samp_p;     // sample: (V) double unnormalised probabilities
    li_cpu_scratch samp_idx;   // sample: (V) candidates (p, id)
} li_cpu_impl;

// The index of the largest of x (n >= 1), the lowest on ties: the greedy pick of both samplers.
static inline int32_t li_cpu_argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// Returns a buffer of at least n bytes (contents not kept on growth) or NULL (error cleared:
// the caller falls back to a path that needs no scratch).
void *li_cpu_scratch_get(li_cpu_scratch *s, size_t n);
void li_cpu_scratch_free(li_cpu_scratch *s);
// dllm->x0 for both CPU tables (ops-ref.c): the decoder's steps 1-5 at any temperature, and
// the table both point to (x0 only).
extern const li_dllm_ops li_cpu_dllm_ops;
void li_cpu_dllm_x0(li_backend *be, int32_t *x0, double *conf, float *logits,
                    const float *ulogits, const uint8_t *masked, int B, int V, float w,
                    int32_t eos, int32_t ban0, int32_t ban1, double temperature,
                    bool conf_f32, const li_rng *rng);

#endif
