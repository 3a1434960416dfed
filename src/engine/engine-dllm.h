// engine-dllm.h — the pieces of the SAR decoder (engine-dllm.c) that tests/test-dllm.c checks on
// their own: the transfer schedule, the commit selection (top-k, Fast-dLLM threshold and factor)
// and DPad's keep probabilities and drop rule. Not a public API.
#ifndef LI_ENGINE_DLLM_H
#define LI_ENGINE_DLLM_H

#include "../core/core.h"

// Tokens committed at step i (0-based) of a block that had n masks at its start, S steps per
// block: n / S, plus one for the first n % S steps (LLaDA get_num_transfer_tokens).
int li_dllm_schedule(int n, int S, int i);

typedef enum {
    LI_DLLM_SEL_TOPK,      // the k best candidates
    LI_DLLM_SEL_THRESHOLD, // the best + every other candidate with confidence >= tau
    LI_DLLM_SEL_FACTOR,    // the largest prefix n >= 1 with c_i >= 1 - f/(i+1), i = 1..n
} li_dllm_sel;

// Commit selection over n rows. conf: (n) confidences (double: random remasking draws are
// doubles, softmax probabilities are fp32 values), -INFINITY for rows that are not
// candidates (committed, or outside the block). Candidates are ranked by confidence descending,
// ties by lowest row. rows: (n) out, the selected rows in rank order. Returns how many were
// selected (0 only when there is no candidate; TOPK selects min(k, candidates)).
int li_dllm_select(const double *conf, int n, li_dllm_sel mode, int k, double tau, double f,
                   int *rows);

// DPad keep probabilities: prob[d] = scale * exp(-x_d^2 / 2) / sqrt(2 pi), x = numpy
// linspace(0, k_sigma, window), for d = 0..window-1. prob: (window).
void li_dllm_dpad_probs(int window, double k_sigma, double scale, double *prob);

// One DPad draw for a block: window uniforms from rng (d = 0..window-1, always all of them);
// keep[d] = u_d < prob[d] for d < n_suffix (rows past the window are dropped: keep = 0).
// keep: (n_suffix). Returns the number kept.
int li_dllm_dpad_draw(li_rng *rng, const double *prob, int window, int n_suffix, uint8_t *keep);

#endif
