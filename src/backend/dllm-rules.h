// dllm-rules.h — the diffusion decoder's rules (dllm-rules.c): the transfer schedule, the commit
// selection (top-k, Fast-dLLM threshold and factor, with the references' order among tied
// confidences) and DPad's keep probabilities and drop rule. Owned by the decoder
// (src/engine/engine-dllm.c, docs/DLLM.md); a backend that runs a step's choice itself
// (ops.dllm_select, ops.dllm_dpad) follows these rules through this header. Not a public API.
#ifndef LI_BACKEND_DLLM_RULES_H
#define LI_BACKEND_DLLM_RULES_H

#include "../core/core.h"

// Tokens committed at step i (0-based) of a block that had n masks at its start, S steps per
// block: n / S, plus one for the first n % S steps (LLaDA get_num_transfer_tokens).
int li_dllm_schedule(int n, int S, int i);

typedef enum {
    LI_DLLM_SEL_TOPK,      // the k best candidates (LLaDA generate.py: torch.topk)
    LI_DLLM_SEL_THRESHOLD, // the best (lowest row among equals) + every candidate >= tau
    LI_DLLM_SEL_FACTOR,    // Fast-dLLM's factor rule over the ranked confidences, see li_dllm_take
} li_dllm_sel;

// How many of nc candidates a rule commits, from their confidences sorted descending (ranked,
// (nc)): TOPK min(k, nc) (k < 0 counts as 0); THRESHOLD 1 + the others >= tau; FACTOR Fast-dLLM
// get_transfer_index_dynamic: the first rank i >= 1 (0-based) with ranked[i] < 1 - f / (i + 2)
// ends the prefix (take i), except that a failure at the last rank i = nc - 1 alone is ignored
// (that code's `top_i == len(threshs) - 1` bump: take nc); no failure: nc. 0 when nc == 0.
int li_dllm_take(const double *ranked, int nc, li_dllm_sel mode, int k, double tau, double f);

// One (value, index) element of the tie-breaking selection (scratch of li_dllm_select).
typedef struct {
    double v;
    int i;
} li_dllm_pair;

// Commit selection over the confidence vector of a canvas, conf (n): one entry per canvas row,
// -INFINITY for rows that are not candidates (not masks, or past the block end) — the vector the
// references hand to torch.topk. Candidates are ranked by confidence descending, then lower row,
// and li_dllm_take says how many are committed. Where the cut falls inside a run of equal
// confidences (exact ties: the zero confidences of EOS / EOT rows under confidence_eos_eot_inf
// at temperature 0) and the rule is TOPK or FACTOR, the tied rows committed are those
// torch.topk(conf, k) returns on the CPU (li_dllm_topk_torch); THRESHOLD's best among equals is
// the lowest row (torch.argmax). rows (n) out: the selected rows, best first (the tied ones at
// the end, in row order). work (n) scratch. Returns how many were selected.
int li_dllm_select(const double *conf, int n, li_dllm_sel mode, int k, double tau, double f,
                   int *rows, li_dllm_pair *work);

// torch.topk(conf, k, largest=True) on the CPU, as PyTorch's topk_impl_loop runs it (ATen
// TopKImpl.h): (value, index) pairs compared by value only, then std::partial_sort of the first
// k when 64 k <= n, else std::nth_element at k - 1 — with libstdc++'s algorithms (heap select;
// introselect: median of three, unguarded Hoare partition, insertion sort below 4 elements,
// depth limit 2 floor(log2 n)), reproduced step for step so that equal values land where they
// land there. idx (k) out: the selected indices in ascending order. work (n) scratch.
// 1 <= k <= n. Checked against torch by tests/test-llada-generate-ref.c.
void li_dllm_topk_torch(const double *conf, int n, int k, int *idx, li_dllm_pair *work);

// DPad keep probabilities: prob[d] = scale * exp(-x_d^2 / 2) / sqrt(2 pi), x = numpy
// linspace(0, k_sigma, window), for d = 0..window-1. prob: (window).
void li_dllm_dpad_probs(int window, double k_sigma, double scale, double *prob);

// One DPad draw for a block: window uniforms from rng (d = 0..window-1, always all of them);
// keep[d] = u_d < prob[d] for d < n_suffix (rows past the window are dropped: keep = 0).
// keep: (n_suffix). Returns the number kept.
int li_dllm_dpad_draw(li_rng *rng, const double *prob, int window, int n_suffix, uint8_t *keep);

#endif
