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
    LI_DLLM_SEL_THRESHOLD, // the best (torch.topk's first among equals) + every candidate >= tau
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
// at temperature 0; rows that round to exactly 1 in float32 confidences) and the rule is TOPK or
// FACTOR, the tied rows committed are those torch.topk(conf, k) returns on the CPU
// (li_dllm_topk_torch). THRESHOLD's best among equals (when below tau, committed alone) is
// torch.topk(conf, nc).indices[0], the row Fast-dLLM keeps (li_dllm_topk_torch_first). rows (n)
// out: the selected rows, best first (the tied ones at the end, in row order). work (n) scratch.
// Returns how many were selected.
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

// torch.topk(conf, k).indices[0] (sorted=True) on the CPU: the same selection, then the order
// torch sorts it in — std::partial_sort's heap sort, or std::sort (introsort) of the first k - 1
// after nth_element. Checked against torch by tests/test-llada-generate-ref.c.
int li_dllm_topk_torch_first(const double *conf, int n, int k, li_dllm_pair *work);

// generate.py's confidence, F.softmax(logits, dim=-1)[x0] in float32, the way torch's AVX2 CPU
// kernel takes it: m = max l; terms e_v = exp(l_v - m) in float (here correctly rounded; torch
// uses Sleef's expf, within an ulp); their float sum in 8 lanes (lane j: v = j mod 8 in order,
// the tail into the first lanes) reduced by the shuffle tree ((0+4)+(2+6))+((1+5)+(3+7)) (V < 8:
// in index order); p = e_x0 * (1 / sum). A row whose other terms sum below ~2^-24 gets exactly
// 1.0, as in torch. l (V) with the banned ids already -inf.
float li_dllm_conf_f32(const float *l, int V, int32_t x0);

// DPad keep probabilities: prob[d] = scale * exp(-x_d^2 / 2) / sqrt(2 pi), x = numpy
// linspace(0, k_sigma, window), for d = 0..window-1. prob: (window).
void li_dllm_dpad_probs(int window, double k_sigma, double scale, double *prob);

// One DPad draw for a block: window uniforms from rng (d = 0..window-1, always all of them);
// keep[d] = u_d < prob[d] for d < n_suffix (rows past the window are dropped: keep = 0).
// keep: (n_suffix). Returns the number kept.
int li_dllm_dpad_draw(li_rng *rng, const double *prob, int window, int n_suffix, uint8_t *keep);

// ---- the decoder's steps as backend ops ---------------------------------------------------------
// A backend that holds the window logits in its own memory runs steps 1-6 and DPad's draws there
// (li_backend_ops.dllm points to its table). The decoder (engine-dllm.c) is the only caller; the
// rules above are the contract each entry follows. Tested by tests/test-dllm.c (cpu, cpu-devsim)
// and tests/gpu/gpu-check.c (CUDA against ops-ref.c and these rules).
typedef struct li_backend li_backend;

#define LI_DLLM_SELECT_MAX_ROWS 1024  // select: one CUDA block of B threads

typedef struct {
    // LLaDA's denoising step over B window rows (docs/DLLM.md steps 2-5) on logits (B, V),
    // changed in place, ulogits (B, V) or NULL, for the rows with masked[b] != 0 (masked (B)):
    //   1. CFG when ulogits: l = u + w (l - u) (fp32);  2. l[eos] = -inf when eos >= 0;
    //   3. x0[b]: temperature 0: argmax_v l[b, v], the lowest id on ties; temperature > 0: LLaDA's
    //      Gumbel-max in float64, argmax_v exp(l[v]) / (-log u)^T (lowest id on ties), u = uniform
    //      number b V + v of the stream *rng (li_rng_uniform; one draw per row and id, masked or
    //      not, as the CPU decoder consumes them);  4. l[ban0] = l[ban1] = -inf for those >= 0
    //      (confidence_eos_eot_inf: EOT, and EOS at temperature 0);
    //   5. conf[b] = exp(l[x0] - max) / Σ_v exp(l[v] - max) in float64 (as Fast-dLLM's softmax of
    //      the logits cast to float64; the CPU sums in index order, a GPU's reduction order
    //      differs in the last bits); with conf_f32, generate.py's float32 softmax as torch's
    //      CPU kernel takes it (li_dllm_conf_f32: expf terms, a float sum in 8 lanes, times
    //      1 / sum), widened to double — rows whose other terms sum below ~2^-24 get exactly 1.
    // Rows not masked: x0 = 0, conf = -inf. x0 (B) and conf (B) in backend memory. *rng is not
    // advanced: the caller jumps it by B V draws (li_rng_jump) when temperature > 0.
    void (*x0)(li_backend *be, int32_t *x0, double *conf, float *logits,
               const float *ulogits, const uint8_t *masked, int B, int V, float w,
               int32_t eos, int32_t ban0, int32_t ban1, double temperature, bool conf_f32,
               const li_rng *rng);
    // Step 6's choice where x0 and conf are (a device; NULL: the decoder selects on the host
    // with li_dllm_select, whose rules and order this follows): candidates are the rows with
    // masked[b]; their confidence is conf[b], or with random_remask the uniform number b of the
    // stream *rng (not advanced: the caller moves it B draws on). How many: li_dllm_take over the
    // confidences ranked descending (mode 0 top-k, 1 threshold tau, 2 factor f); which: the best
    // ranked (higher conf, then lower row). commit (B + 1) in backend memory: x0[b] for a
    // selected row, -1 otherwise; commit[B] = how many: all a step reports. When the cut falls
    // between equal confidences (modes 0 and 2), torch.topk's choice among them is the host's
    // (li_dllm_topk_torch needs the whole canvas): then commit[B] = -1, every row -1, the stream
    // not to be moved, and the decoder selects on the host; likewise under threshold when the
    // best is below tau and tied (torch.topk's first of them, li_dllm_topk_torch_first). B <= LI_DLLM_SELECT_MAX_ROWS (the
    // decoder selects larger windows on the host).
    void (*select)(li_backend *be, int32_t *commit, const int32_t *x0, const double *conf,
                   const uint8_t *masked, int B, int mode, int k, double tau, double f,
                   bool random_remask, const li_rng *rng);
    // DPad's draw for one block where its flags are needed next (a device; NULL: the decoder
    // draws on the host with li_dllm_dpad_draw, whose rule this follows): keep[d] = 1 iff
    // d < window and u_d < prob[d], u_d the uniform number d of the stream *rng (not advanced:
    // the caller moves it window draws on, the draws of d >= n_suffix included), for
    // d = 0..n_suffix-1. keep (n_suffix) bytes, prob (window) in backend memory; window >= 1.
    void (*dpad)(li_backend *be, uint8_t *keep, const double *prob, int window, int n_suffix,
                 const li_rng *rng);
} li_dllm_ops;

#endif
