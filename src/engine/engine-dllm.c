// engine-dllm.c — semi-autoregressive (SAR) decoding of diffusion LMs (LLaDA): the canvas
// [prompt | MASK × gen_length] is denoised block by block; each step runs one forward over the
// canvas (li_llada_forward, with the LaCache flags passed through), picks x0 for every row that
// can be committed — the rows up to the block's end that hold the mask id: the block's, and
// before it the prompt's masks (infilling) and rows the model filled with the mask id itself —
// (argmax or Gumbel-max in float64), scores the masked ones (float64 softmax probability of x0,
// or a uniform draw) and commits some of them: the LLaDA schedule (top-k), Fast-dLLM threshold or
// factor, or a fixed K per step. Optional CFG (a second canvas, the prompt masked, in the same
// forward), DPad (suffix masks dropped from the canvas once per block, seeded) and early
// termination.
//
// The semantics are the binding contract of docs/DLLM.md (= LLaDA generate.py + Fast-dLLM + DPad),
// checked token for token against the public generate.py / Fast-dLLM code on small checkpoints
// (tests/ref/gen_llada_generate_ref.py) and implemented independently by tests/ref/gen_llada_ref.py;
// everything that decides a token (draw order, ties → lowest id; among equal confidences
// torch.topk's choice, li_dllm_topk_torch) is fixed there.
// Several requests decode in one batch: each step forwards the canvases of every request still
// decoding; each request keeps its own RNG, canvas and caches, so its tokens are those it would
// get alone. Every buffer is allocated before the first step; the step loop allocates nothing
// (except when a block ends holding the mask id: the next window grows once).
// On a device backend the window logits stay in device memory: steps 1-5 (dllm->x0), the commit
// choice (dllm->select) and DPad's per-block draw (dllm->dpad) run there as backend ops, each
// consuming the request's stream as the host would, and only what a step reports comes back
// (the commits; once per block the keep flags of the suffix rows).
//
// Not here: the model forward and its caches (src/model/arch-llada.c), the CLI (tools/cmd-dllm.c).
// Tested by tests/test-dllm.c (schedule and selection rules on hand-made inputs, DPad draws,
// an oracle of the contract, infilling, cache-flag exactness, seeds, batching, parameter errors)
// and tests/test-llada-generate-ref.c (the public generate.py / Fast-dLLM code's runs, torch.topk's
// ties).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rng-jump.h"
#include "../backend/dllm-rules.h"
#include "engine.h"

// ---- parameters ------------------------------------------------------------------------------

li_dllm_params li_dllm_default_params(void) {
    li_dllm_params p = {0};
    p.gen_length = 128;
    p.block_length = 32;
    p.steps = 128;
    p.remasking = LI_DLLM_REMASK_LOW_CONFIDENCE;
    p.dpad_window = 256;
    p.dpad_k_sigma = 4.0;
    p.dpad_scale = 2.0;
    return p;
}

li_status li_dllm_check_params(const li_dllm_params *p) {
    if (!p) return li_error_set(LI_ERR_INVALID_ARG, "dllm: no parameters given");
    if (p->gen_length < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: gen_length %d must be >= 1", p->gen_length);
    if (p->block_length < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: block_length %d must be >= 1",
                            p->block_length);
    if (p->gen_length % p->block_length)
        return li_error_set(LI_ERR_INVALID_ARG,
                            "dllm: gen_length %d is not a multiple of block_length %d",
                            p->gen_length, p->block_length);
    int n_blocks = p->gen_length / p->block_length;
    if (p->steps < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: steps %d must be >= 1", p->steps);
    if (p->steps % n_blocks)
        return li_error_set(LI_ERR_INVALID_ARG,
                            "dllm: steps %d is not a multiple of the number of blocks %d "
                            "(gen_length %d / block_length %d)",
                            p->steps, n_blocks, p->gen_length, p->block_length);
    if (p->remasking != LI_DLLM_REMASK_LOW_CONFIDENCE && p->remasking != LI_DLLM_REMASK_RANDOM)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: unknown remasking %d", (int)p->remasking);
    if (p->confidence != LI_DLLM_CONF_AUTO && p->confidence != LI_DLLM_CONF_F32 &&
        p->confidence != LI_DLLM_CONF_F64)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: unknown confidence %d (auto, f32, f64)",
                            (int)p->confidence);
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: temperature %g must be finite and >= 0",
                            p->temperature);
    if (!(p->cfg >= 0) || !isfinite(p->cfg))
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: cfg %g must be finite and >= 0", p->cfg);
    if (p->threshold != 0 && !(p->threshold > 0 && p->threshold <= 1))
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: threshold %g is outside (0, 1]",
                            p->threshold);
    if (p->factor != 0 && !(p->factor > 0 && isfinite(p->factor)))
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: factor %g must be > 0", p->factor);
    if (p->commit_per_step < 0)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: commit_per_step %d must be >= 0",
                            p->commit_per_step);
    int n_par = (p->threshold != 0) + (p->factor != 0) + (p->commit_per_step != 0);
    if (n_par > 1)
        return li_error_set(LI_ERR_INVALID_ARG,
                            "dllm: threshold, factor and commit_per_step are exclusive (%s%s%s "
                            "given)",
                            p->threshold != 0 ? "threshold " : "", p->factor != 0 ? "factor " : "",
                            p->commit_per_step != 0 ? "commit_per_step " : "");
    if (p->dpad) {
        if (p->dpad_window < 1)
            return li_error_set(LI_ERR_INVALID_ARG, "dllm: dpad_window %d must be >= 1",
                                p->dpad_window);
        if (!(p->dpad_k_sigma >= 0) || !isfinite(p->dpad_k_sigma))
            return li_error_set(LI_ERR_INVALID_ARG, "dllm: dpad_k_sigma %g must be finite and >= 0",
                                p->dpad_k_sigma);
        if (!(p->dpad_scale > 0) || !isfinite(p->dpad_scale))
            return li_error_set(LI_ERR_INVALID_ARG, "dllm: dpad_scale %g must be finite and > 0",
                                p->dpad_scale);
    }
    if (p->lacache & ~(unsigned)LI_DLLM_LACACHE_ALL)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: unknown lacache bits 0x%x", p->lacache);
    if (p->fa_tile < 0)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: fa_tile %d must be >= 0", p->fa_tile);
    return LI_OK;
}

// ---- per-request state -----------------------------------------------------------------------

typedef struct {
    li_dllm_request *req;
    const li_dllm_params *p;
    int P, G, B, T;  // prompt, generated, block length; T = P + G canvas rows
    int n_blocks, S; // blocks; steps per block (vanilla schedule)
    bool cfg;
    int32_t *x;        // (T) the canvas
    int32_t *ctok;     // (T) canvas given to the model: DPad-dropped rows removed
    int32_t *utok;     // (T) its unconditional twin (the prompt's non-mask rows masked), CFG only
    int32_t *cpos;     // (T) original positions of the rows of ctok
    int *crow;         // (T) canvas row of each row of ctok
    int n_rows;        // rows of ctok in the current block's layout
    uint8_t *keep;     // (G) DPad keep flags of the suffix rows (index d = row - block end)
    double *dpad_prob; // (dpad_window)
    // Their device copies where the backend draws DPad (dllm->dpad): the probabilities uploaded
    // once, the flags drawn there and downloaded into keep once per block. NULL: host draws.
    uint8_t *dkeep;     // (G + 1)
    double *ddpad_prob; // (dpad_window)
    // The step window, fixed at a block's start: the rows that still hold the mask id before the
    // block (prompt masks: infilling; rows the model filled with the mask id itself), then the
    // block's rows — every row a step can commit (the references' candidates: masks up to the
    // block's end). wrow (W) their canvas rows, ascending; wlo = wrow[0] starts the LaCache block
    // [wlo, hi) handed to the model, which returns the window rows' logits. Buffers hold Wcap rows.
    int W, Wcap, wlo;
    int32_t *wrow;
    // Window logits (W, V), the unconditional twin (CFG only): host memory on the CPU, backend
    // memory on a device (d*), where they stay: the backend's dllm->x0 op runs steps 2-5 there and
    // only x0 and the confidences (W each) or the commits come back.
    float *logits, *ulogits;
    li_backend *be;
    float *dlogits, *dulogits;
    uint8_t *masked, *dmasked;  // (W) 1 where the window row is still a mask (host, device)
    int32_t *x0, *dx0;          // (W) predicted token per window row (host, device)
    double *wconf, *dconf;      // (W) confidence per window row, -inf for non-candidates
    int32_t *commit, *dcommit;  // (W + 1) dllm->select's answer (host, device)
    void *whost;                // the block holding wrow, masked, x0, wconf and commit
    int n_committed;            // this step's
    double *conf;      // (T) the canvas's confidence vector for li_dllm_select
    int *sel;          // (T) selected canvas rows
    li_dllm_pair *work;  // (T) li_dllm_select's scratch
    li_llada_cache *cache, *ucache;
    li_rng rng;
    int block, step_in_block, n_block_masks;
    bool done;
} req_state;

typedef struct {
    int32_t mask, eos, eot;
    int V;
} specials;

// The buffers sized by the window (W rows), freed.
static void window_free(req_state *r) {
    li_free(r->whost);
    li_free(r->logits);
    li_free(r->ulogits);
    li_be_free(r->be, r->dlogits);
    li_be_free(r->be, r->dulogits);
    li_be_free(r->be, r->dmasked);
    li_be_free(r->be, r->dx0);
    li_be_free(r->be, r->dconf);
    li_be_free(r->be, r->dcommit);
    r->whost = NULL;
    r->wrow = r->x0 = r->dx0 = r->commit = r->dcommit = NULL;
    r->logits = r->ulogits = r->dlogits = r->dulogits = NULL;
    r->masked = r->dmasked = NULL;
    r->wconf = r->dconf = NULL;
    r->Wcap = 0;
}

// The window buffers for up to cap rows: host memory, and backend memory on a device.
static li_status window_alloc(req_state *r, li_backend *be, int V, int cap) {
    window_free(r);
    const bool dev = li_be_is_device(be);
    size_t W = (size_t)cap, WV = W * (size_t)V;
    li_part parts[] = {{(void **)&r->wrow, W * sizeof *r->wrow},
                       {(void **)&r->masked, W},
                       {(void **)&r->x0, W * sizeof *r->x0},
                       {(void **)&r->wconf, W * sizeof *r->wconf},
                       {(void **)&r->commit, (W + 1) * sizeof *r->commit}};
    if (!(r->whost = li_alloc_parts(parts, sizeof parts / sizeof parts[0], "dllm window")))
        return LI_ERR_OOM;
    if (!dev && (!(r->logits = li_alloc(WV * sizeof *r->logits, "dllm logits")) ||
                 (r->cfg && !(r->ulogits = li_alloc(WV * sizeof *r->ulogits,
                                                    "dllm uncond logits")))))
        return LI_ERR_OOM;
    if (dev) {
        r->be = be;
        if (!(r->dx0 = li_be_alloc(be, W * sizeof(int32_t), "dllm x0 (device)")) ||
            !(r->dconf = li_be_alloc(be, W * sizeof(double), "dllm conf (device)")) ||
            !(r->dmasked = li_be_alloc(be, W, "dllm mask flags (device)")) ||
            (be->ops->dllm->select &&
             !(r->dcommit = li_be_alloc(be, (W + 1) * sizeof(int32_t), "dllm commits (device)"))) ||
            !(r->dlogits = li_be_alloc(be, WV * sizeof(float), "dllm logits (device)")) ||
            (r->cfg && !(r->dulogits = li_be_alloc(be, WV * sizeof(float), "dllm uncond logits "
                                                   "(device)"))))
            return LI_ERR_OOM;
    }
    r->Wcap = cap;
    return LI_OK;
}

static void state_free(req_state *r) {
    window_free(r);
    li_free(r->x);
    li_free(r->ctok);
    li_free(r->utok);
    li_free(r->cpos);
    li_free(r->crow);
    li_free(r->keep);
    li_free(r->dpad_prob);
    li_be_free(r->be, r->dkeep);
    li_be_free(r->be, r->ddpad_prob);
    li_free(r->conf);
    li_free(r->sel);
    li_free(r->work);
    li_llada_cache_free(r->cache);
    li_llada_cache_free(r->ucache);
}

static int count_masks(const int32_t *x, int lo, int hi, int32_t mask) {
    int n = 0;
    for (int i = lo; i < hi; i++)
        n += x[i] == mask;
    return n;
}

static li_status state_init(req_state *r, li_dllm_request *req, const li_llada *lm,
                            li_backend *be, const specials *sp) {
    const li_dllm_params *p = &req->params;
    r->req = req;
    r->p = p;
    r->P = req->n_prompt;
    r->G = p->gen_length;
    r->B = p->block_length;
    r->T = r->P + r->G;
    r->n_blocks = r->G / r->B;
    r->S = p->steps / r->n_blocks;
    r->cfg = p->cfg > 0;
    r->be = be;
    size_t T = (size_t)r->T;
    bool dev = li_be_is_device(be);
    if (!(r->x = li_alloc(T * sizeof *r->x, "dllm canvas")) ||
        !(r->ctok = li_alloc(T * sizeof *r->ctok, "dllm canvas")) ||
        !(r->cpos = li_alloc(T * sizeof *r->cpos, "dllm positions")) ||
        !(r->crow = li_alloc(T * sizeof *r->crow, "dllm rows")) ||
        !(r->keep = li_alloc((size_t)r->G + 1, "dllm dpad flags")) ||
        !(r->conf = li_alloc(T * sizeof *r->conf, "dllm confidences")) ||
        !(r->sel = li_alloc(T * sizeof *r->sel, "dllm selection")) ||
        !(r->work = li_alloc(T * sizeof *r->work, "dllm selection scratch")))
        return LI_ERR_OOM;
    if (r->cfg && !(r->utok = li_alloc(T * sizeof *r->utok, "dllm uncond canvas")))
        return LI_ERR_OOM;
    // The window: the block plus the prompt's masks; it grows at a block's start only when an
    // earlier block was left holding the mask id (a model that predicts the mask token).
    LI_TRY(window_alloc(r, be, sp->V, r->B + count_masks(req->prompt, 0, r->P, sp->mask)));
    if (p->dpad) {
        if (!(r->dpad_prob = li_alloc((size_t)p->dpad_window * sizeof *r->dpad_prob, "dpad")))
            return LI_ERR_OOM;
        li_dllm_dpad_probs(p->dpad_window, p->dpad_k_sigma, p->dpad_scale, r->dpad_prob);
        if (dev && be->ops->dllm->dpad) {
            size_t nb = (size_t)p->dpad_window * sizeof *r->dpad_prob;
            if (!(r->ddpad_prob = li_be_alloc(be, nb, "dpad (device)")) ||
                !(r->dkeep = li_be_alloc(be, (size_t)r->G + 1, "dllm dpad flags (device)")))
                return LI_ERR_OOM;
            LI_TRY(li_be_upload(be, r->ddpad_prob, r->dpad_prob, nb));
        }
    }
    LI_TRY(li_llada_cache_init(&r->cache, lm, r->T));
    if (r->cfg) LI_TRY(li_llada_cache_init(&r->ucache, lm, r->T));
    if (r->P) memcpy(r->x, req->prompt, (size_t)r->P * sizeof *r->x);
    for (int i = r->P; i < r->T; i++)
        r->x[i] = sp->mask;
    li_rng_seed(&r->rng, p->seed);
    memset(&req->stats, 0, sizeof req->stats);
    req->stats.n_prompt = r->P;
    req->stats.gen_length = r->G;
    return LI_OK;
}

// Start of a block: DPad draws and the canvas layout (rows kept, their positions), the step
// window, masks left. On a device with dllm->dpad the draws run there (the op leaves the stream as
// it is; it moves the window draws on here) and only the n_suffix keep flags come back.
static li_status block_begin(req_state *r, const specials *sp) {
    int lo = r->P + r->block * r->B, hi = lo + r->B, n_suffix = r->T - hi;
    const int window = r->p->dpad_window;
    if (r->dkeep) {
        if (n_suffix > 0) {  // (the last block's draws only move the stream)
            r->be->ops->dllm->dpad(r->be, r->dkeep, r->ddpad_prob, window, n_suffix, &r->rng);
            // the download waits for the op and reports its error
            LI_TRY(li_be_download(r->be, r->keep, r->dkeep, (size_t)n_suffix));
        }
        li_rng_jump(&r->rng, (uint64_t)window);
    } else if (r->p->dpad) {
        li_dllm_dpad_draw(&r->rng, r->dpad_prob, window, n_suffix, r->keep);
    }
    int n = 0;
    for (int i = 0; i < r->T; i++) {
        if (i >= hi && r->p->dpad && !r->keep[i - hi]) continue;
        r->crow[n] = i;
        r->cpos[n] = i;
        n++;
    }
    r->n_rows = n;
    r->n_block_masks = count_masks(r->x, lo, hi, sp->mask);
    int W = r->B + count_masks(r->x, 0, lo, sp->mask);
    if (W > r->Wcap) LI_TRY(window_alloc(r, r->be, sp->V, W));  // (a mask left behind)
    r->W = 0;
    for (int i = 0; i < hi; i++)
        if (i >= lo || r->x[i] == sp->mask) r->wrow[r->W++] = i;
    LI_ASSERT(r->W == W);
    r->wlo = r->wrow[0];
    return LI_OK;
}

// The canvases of this step (current tokens through the block layout). The unconditional one
// masks the prompt's rows that were not masks (generate.py: un_x[prompt_index] = mask_id,
// prompt_index = x != mask_id at the start): prompt masks keep what the decoder filled in.
static void build_canvas(req_state *r, int32_t mask) {
    for (int j = 0; j < r->n_rows; j++)
        r->ctok[j] = r->x[r->crow[j]];
    if (r->cfg)
        for (int j = 0; j < r->n_rows; j++) {
            int i = r->crow[j];
            r->utok[j] = i < r->P && r->req->prompt[i] != mask ? mask : r->ctok[j];
        }
}

// Step 6's rule for this request and step: the li_dllm_sel mode and its k, tau or f.
static li_dllm_sel sel_rule(const req_state *r, int *k, double *tau, double *f) {
    const li_dllm_params *p = r->p;
    *k = 0;
    *tau = p->threshold;
    *f = p->factor;
    if (p->threshold > 0) return LI_DLLM_SEL_THRESHOLD;
    if (p->factor > 0) return LI_DLLM_SEL_FACTOR;
    *k = p->commit_per_step > 0 ? p->commit_per_step
                                : li_dllm_schedule(r->n_block_masks, r->S, r->step_in_block);
    return LI_DLLM_SEL_TOPK;
}

// Steps 1-6 of the contract for one request on its window logits from the forward just run
// (logits, ulogits: where the forward wrote them); sets r->n_committed. Steps 1-5 run as the
// backend's dllm->x0 op: x0 and the confidence of every masked window row. The op draws the
// Gumbel noise from the request's stream (one draw per window row and id) without advancing it:
// the stream jumps W V draws here, then random remasking takes one number per window row. On a
// device with dllm->select (and W <= LI_DLLM_SELECT_MAX_ROWS) step 6 runs there too and only the
// commits (W + 1 ints) come back — unless the cut falls among equal confidences, which the op
// leaves to li_dllm_select here; otherwise x0 and conf come back (W each) and li_dllm_select
// chooses on the host.
static li_status step_decide(li_backend *be, req_state *r, const specials *sp, float *logits,
                             const float *ulogits) {
    const li_dllm_params *p = r->p;
    const int W = r->W, V = sp->V;
    for (int w = 0; w < W; w++) r->masked[w] = r->x[r->wrow[w]] == sp->mask;
    if (r->dmasked) LI_TRY(li_be_upload(be, r->dmasked, r->masked, (size_t)W));
    const float cw = r->cfg ? (float)(p->cfg + 1.0) : 0.0f;
    int32_t eos = p->logits_eos_inf ? sp->eos : -1;
    // confidence_eos_eot_inf: generate.py runs `logits_with_noise[:, :, EOS] = logits[:, :, EOT]
    // = -inf`; at temperature 0 logits_with_noise is the logits tensor itself, so EOS leaves the
    // confidence softmax too; at temperature > 0 it is a float64 copy and only EOT does.
    int32_t ban0 = p->confidence_eos_eot_inf ? sp->eot : -1;
    int32_t ban1 = p->confidence_eos_eot_inf && p->temperature == 0 ? sp->eos : -1;
    int k;
    double tau, f;
    li_dllm_sel mode = sel_rule(r, &k, &tau, &f);
    // The confidence's precision: each rule's reference under auto (docs/DLLM.md step 5).
    const bool conf_f32 = p->confidence == LI_DLLM_CONF_F32 ||
                          (p->confidence == LI_DLLM_CONF_AUTO && mode == LI_DLLM_SEL_TOPK);
    be->ops->dllm->x0(be, r->dx0 ? r->dx0 : r->x0, r->dconf ? r->dconf : r->wconf, logits, ulogits,
                     r->dmasked ? r->dmasked : r->masked, W, V, cw, eos, ban0, ban1,
                     p->temperature, conf_f32, &r->rng);
    if (p->temperature > 0) li_rng_jump(&r->rng, (uint64_t)W * (uint64_t)V);
    const bool random = p->remasking == LI_DLLM_REMASK_RANDOM;
    if (r->dcommit && W <= LI_DLLM_SELECT_MAX_ROWS) {  // 6. on the device
        be->ops->dllm->select(be, r->dcommit, r->dx0, r->dconf, r->dmasked, W, (int)mode, k, tau,
                             f, random, &r->rng);
        LI_TRY(li_be_download(be, r->commit, r->dcommit, (size_t)(W + 1) * sizeof(int32_t)));
        if (r->commit[W] >= 0) {  // (the download waited for the ops and reported their errors)
            if (random) li_rng_jump(&r->rng, (uint64_t)W);
            for (int w = 0; w < W; w++)
                if (r->commit[w] >= 0) r->x[r->wrow[w]] = r->commit[w];
            r->n_committed = r->commit[W];
            return LI_OK;
        }
        // -1: the cut splits equal confidences; the host picks the tied rows torch.topk picks
    }
    if (r->dx0) {
        LI_TRY(li_be_download(be, r->x0, r->dx0, (size_t)W * sizeof(int32_t)));
        LI_TRY(li_be_download(be, r->wconf, r->dconf, (size_t)W * sizeof(double)));
    }
    // 6. Commit, over the canvas's confidence vector (-inf outside the window's masks).
    for (int i = 0; i < r->T; i++) r->conf[i] = -INFINITY;
    for (int w = 0; w < W; w++) {
        double c = r->wconf[w];
        if (random) c = li_rng_uniform(&r->rng);  // one per window row, masked or not
        if (r->masked[w]) r->conf[r->wrow[w]] = c;
    }
    int n_sel = li_dllm_select(r->conf, r->T, mode, k, tau, f, r->sel, r->work);
    for (int i = 0; i < n_sel; i++) {
        int row = r->sel[i], w = 0;
        while (r->wrow[w] != row) w++;  // (W is tens of rows; a commit is a few of them)
        r->x[row] = r->x0[w];
    }
    r->n_committed = n_sel;
    return LI_OK;
}

// Steps a parallel-decoding block may take before it is declared stuck. Each step commits at
// least one row, so a block of B masks needs at most B steps — unless the model predicts the
// mask token itself (untrained weights): the contract commits it like any token, the row stays a
// mask, and at temperature 0 the same canvas would repeat forever.
#define MAX_BLOCK_STEPS(B) (8 * (B) + 64)

// After a step: block end (schedule done or no mask left), early termination, request end.
static li_status step_advance(req_state *r, const specials *sp) {
    const li_dllm_params *p = r->p;
    int lo = r->P + r->block * r->B, hi = lo + r->B;
    r->step_in_block++;
    bool parallel = p->threshold > 0 || p->factor > 0 || p->commit_per_step > 0;
    bool block_done =
        parallel ? count_masks(r->x, lo, hi, sp->mask) == 0 : r->step_in_block == r->S;
    if (!block_done) {
        if (parallel && r->step_in_block >= MAX_BLOCK_STEPS(r->B))
            return li_error_set(LI_ERR_LIMIT,
                                "dllm: block %d still has masks after %d steps: the model keeps "
                                "predicting the mask token (untrained weights?)",
                                r->block, r->step_in_block);
        return LI_OK;
    }
    r->step_in_block = 0;
    r->block++;
    if (p->early_stop && sp->eos >= 0) {
        bool has_eos = false;
        for (int i = lo; i < hi && !has_eos; i++)
            has_eos = r->x[i] == sp->eos;
        if (has_eos) {
            for (int i = hi; i < r->T; i++)
                r->x[i] = sp->eos;
            r->req->stats.early_stopped = hi < r->T;
            r->done = true;
        }
    }
    if (r->block == r->n_blocks) r->done = true;
    return LI_OK;
}

static void add_info(li_dllm_stats *s, const li_llada_step_info *in) {
    s->embed_rows += in->embed_rows;
    s->qkv_rows += in->qkv_rows;
    s->fa_tiles += in->fa_tiles;
    s->fa_tiles_skipped += in->fa_tiles_skipped;
    s->head_rows += in->head_rows;
    s->fp8_gemm_rows += in->fp8_gemm_rows;
    s->flops += in->flops;
}

static void finish_stats(li_dllm_stats *s, const int32_t *gen, int G, int32_t eos,
                         double latency_ms) {
    s->latency_ms = latency_ms;
    s->ms_per_step = s->steps > 0 ? latency_ms / s->steps : 0;
    if (gen) {
        s->n_tokens_dinfer = G;
        s->n_tokens_fastdllm = 0;
        for (int i = 0; i < G; i++)
            s->n_tokens_fastdllm += gen[i] != eos;
    }
    s->tps_fastdllm = latency_ms > 0 ? 1e3 * s->n_tokens_fastdllm / latency_ms : 0;
    s->tps_dinfer = latency_ms > 0 ? 1e3 * s->n_tokens_dinfer / latency_ms : 0;
}

static li_status get_specials(const li_model *m, specials *sp) {
    if (!m->llada && m->llama.hp.bd_size > 0) {  // Fast-dLLM v2: config.json's ids
        sp->mask = m->llama.hp.bd_mask_id;
        sp->eos = li_bd_stop_token(m);
        sp->eot = -1;
        sp->V = m->llama.hp.n_vocab;
        return LI_OK;
    }
    sp->mask = li_tokenizer_find(m->tok, "<|mdm_mask|>");
    sp->eos = li_tokenizer_find(m->tok, "<|endoftext|>");
    if (sp->eos < 0) sp->eos = li_tokenizer_eos(m->tok);
    sp->eot = li_tokenizer_find(m->tok, "<|eot_id|>");
    sp->V = m->llada ? li_llada_hparams(m->llada)->n_vocab : 0;
    return LI_OK;
}

// ---- the decoding loop -----------------------------------------------------------------------

// A batch being decoded (li_dllm_batch_begin … _step … _free): the requests' states and the
// forward's arrays, allocated at the start.
struct li_dllm_batch {
    li_model *m;
    li_dllm_request *reqs;  // (n) the caller's, which outlive the batch
    int n;
    specials sp;
    li_lacache lc;
    req_state *rs;             // (n)
    li_llada_cache **caches;   // (2n) per canvas of a forward: its cache, canvas, logits, request
    li_llada_canvas *canv;
    float **outs;
    int *owner;
    void *arrays;              // the block holding rs .. owner (li_alloc_parts)
    li_llada_scratch *scratch;
    int64_t (*allocs)(li_backend *);
    int64_t allocs0;
    li_dllm_stats tot;
    double t0;
    // A Fast-dLLM v2 model (engine-bd.c): a step runs one forward of every live request
    bool bd;
    li_bd_run **bd_runs;       // (n) NULL once a request finished or was cancelled
};

void li_dllm_batch_free(li_dllm_batch *b) {
    if (!b) return;
    if (b->bd_runs)
        for (int q = 0; q < b->n; q++)
            li_bd_free(b->bd_runs[q]);
    if (b->rs)
        for (int q = 0; q < b->n; q++)
            state_free(&b->rs[q]);
    li_llada_scratch_free(b->scratch);
    li_free(b->arrays);
    free(b);
}

// A batch of a Fast-dLLM v2 model: each step runs one forward of every live request (a prompt
// chunk, a denoising step or a block's closing forward), so requests take turns per forward as
// LLaDA's do per step, and a long request holds no later one back. Each keeps its own KV cache in
// the model's pool while it decodes; the forwards are the request's alone (not batched).
static li_status bd_batch_begin(li_model *m, li_dllm_request *reqs, int n, li_dllm_batch **out) {
    for (int q = 0; q < n; q++) {
        li_status st = li_bd_check(m, &reqs[q].params, reqs[q].prompt, reqs[q].n_prompt);
        if (st == LI_OK && !reqs[q].out)
            st = li_error_set(LI_ERR_INVALID_ARG, "dllm: no output buffer");
        if (st != LI_OK) return n > 1 ? li_error_wrap(st, "request %d: ", q) : st;
    }
    li_dllm_batch *b = calloc(1, sizeof *b);
    if (!b) return li_error_set(LI_ERR_OOM, "dllm: out of memory");
    *b = (li_dllm_batch){.m = m, .reqs = reqs, .n = n, .bd = true, .t0 = li_time_ms()};
    li_part parts[] = {{(void **)&b->rs, (size_t)n * sizeof *b->rs},
                       {(void **)&b->bd_runs, (size_t)n * sizeof *b->bd_runs}};
    if (!(b->arrays = li_alloc_parts(parts, 2, "the dllm batch"))) {
        free(b);
        return li_error_set(LI_ERR_OOM, "dllm: out of memory");
    }
    li_status rc = get_specials(m, &b->sp);
    for (int q = 0; q < n && rc == LI_OK; q++)
        rc = li_bd_begin(m, reqs[q].prompt, reqs[q].n_prompt, &reqs[q].params, &b->bd_runs[q]);
    if (rc != LI_OK) {
        li_dllm_batch_free(b);
        return rc;
    }
    *out = b;
    return LI_OK;
}

static li_status bd_batch_step(li_dllm_batch *b, int *n_left) {
    for (int q = 0; q < b->n; q++) {
        if (b->rs[q].done) continue;
        bool finished = false;
        LI_TRY(li_bd_step(b->bd_runs[q], &finished));
        if (!finished) continue;
        li_dllm_request *rq = &b->reqs[q];
        li_bd_result(b->bd_runs[q], rq->out, &rq->stats);
        li_bd_free(b->bd_runs[q]);
        b->bd_runs[q] = NULL;
        b->rs[q].done = true;
        const li_dllm_stats *a = &rq->stats;  // (work counters live in the total)
        li_llada_step_info work = {.embed_rows = a->embed_rows, .qkv_rows = a->qkv_rows,
                                   .fa_tiles = a->fa_tiles,
                                   .fa_tiles_skipped = a->fa_tiles_skipped,
                                   .head_rows = a->head_rows, .fp8_gemm_rows = a->fp8_gemm_rows,
                                   .flops = a->flops};
        add_info(&b->tot, &work);
        b->tot.steps += a->steps;
        b->tot.nfe += a->nfe;
        b->tot.canvas_rows += a->canvas_rows;
    }
    *n_left = 0;
    for (int i = 0; i < b->n; i++) *n_left += !b->rs[i].done;
    return LI_OK;
}

li_status li_dllm_batch_begin(li_model *m, li_dllm_request *reqs, int n, li_dllm_batch **out) {
    *out = NULL;
    if (!m || !reqs || n < 1) return li_error_set(LI_ERR_INVALID_ARG, "dllm: no requests given");
    if (!m->llada && m->llama.hp.bd_size > 0 && !m->metadata_only)
        return bd_batch_begin(m, reqs, n, out);
    if (!m->llada)
        return li_error_set(LI_ERR_UNSUPPORTED,
                            "dllm: the model is not a diffusion model (arch '%s'); load a LLaDA "
                            "model, e.g. synth:tiny-llada",
                            m->llama.hp.arch);
    if (m->metadata_only)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: the model was loaded metadata-only");
    if (!m->be->ops->dllm || !m->be->ops->dllm->x0)
        return li_error_set(LI_ERR_UNSUPPORTED, "dllm: backend '%s' lacks the dllm_x0 op",
                            m->be->ops->name);
    specials sp;
    LI_TRY(get_specials(m, &sp));
    if (sp.mask < 0)
        return li_error_set(LI_ERR_FORMAT, "dllm: the tokenizer has no <|mdm_mask|> token");
    for (int q = 0; q < n; q++) {
        const li_dllm_request *rq = &reqs[q];
        li_status st = li_dllm_check_params(&rq->params);
        if (st != LI_OK) return n > 1 ? li_error_wrap(st, "request %d: ", q) : st;
        if (rq->n_prompt < 0 || (rq->n_prompt > 0 && !rq->prompt) || !rq->out)
            return li_error_set(LI_ERR_INVALID_ARG, "dllm: request %d: no prompt or output buffer",
                                q);
        for (int i = 0; i < rq->n_prompt; i++)
            if (rq->prompt[i] < 0 || rq->prompt[i] >= sp.V)
                return li_error_set(LI_ERR_INVALID_ARG,
                                    "dllm: request %d: prompt token %d at %d is outside the "
                                    "vocabulary (%d)",
                                    q, rq->prompt[i], i, sp.V);
        if ((int64_t)rq->n_prompt + rq->params.gen_length > (1 << 24))
            return li_error_set(LI_ERR_LIMIT, "dllm: request %d: canvas of %lld tokens is too long",
                                q, (long long)rq->n_prompt + rq->params.gen_length);
        const li_dllm_params *a = &reqs[0].params, *b = &rq->params;
        if (a->lacache != b->lacache || a->fp8 != b->fp8 || a->fa_tile != b->fa_tile)
            return li_error_set(LI_ERR_INVALID_ARG,
                                "dllm: request %d: lacache, fp8 and fa_tile must be the same for "
                                "every request of a batch",
                                q);
        if (b->logits_eos_inf && sp.eos < 0)
            return li_error_set(LI_ERR_INVALID_ARG, "dllm: logits_eos_inf: no EOS token");
        if (b->confidence_eos_eot_inf && sp.eot < 0)
            return li_error_set(LI_ERR_INVALID_ARG,
                                "dllm: confidence_eos_eot_inf: the tokenizer has no <|eot_id|>");
    }
    const li_dllm_params *p0 = &reqs[0].params;
    li_dllm_batch *b = calloc(1, sizeof *b);
    if (!b) return li_error_set(LI_ERR_OOM, "dllm: out of memory");
    b->m = m;
    b->reqs = reqs;
    b->n = n;
    b->sp = sp;
    b->lc = (li_lacache){
        .embed = p0->lacache & LI_DLLM_LACACHE_EMBED,
        .rope = p0->lacache & LI_DLLM_LACACHE_ROPE,
        .fa = p0->lacache & LI_DLLM_LACACHE_FA,
        .trunc = p0->lacache & LI_DLLM_LACACHE_TRUNC,
        .fp8 = p0->fp8,
        .fa_tile = p0->fa_tile,
    };
    li_status rc = LI_OK;
    int n_canv_max = 2 * n;
    size_t nc = (size_t)n_canv_max;
    li_part parts[] = {
        {(void **)&b->rs, (size_t)n * sizeof *b->rs}, {(void **)&b->caches, nc * sizeof *b->caches},
        {(void **)&b->canv, nc * sizeof *b->canv},    {(void **)&b->outs, nc * sizeof *b->outs},
        {(void **)&b->owner, nc * sizeof *b->owner},
    };
    b->arrays = li_alloc_parts(parts, sizeof parts / sizeof parts[0], "the dllm batch");
    if (!b->arrays) {
        rc = li_error_set(LI_ERR_OOM, "dllm: out of memory");
        goto fail;
    }
    int64_t max_rows = 0;
    int max_canvas = 0, max_window = 0;  // (the backend's reservation)
    for (int q = 0; q < n; q++) {
        if ((rc = state_init(&b->rs[q], &reqs[q], m->llada, m->be, &sp)) != LI_OK) goto fail;
        max_rows += (int64_t)b->rs[q].T * (b->rs[q].cfg ? 2 : 1);
        if (b->rs[q].T > max_canvas) max_canvas = b->rs[q].T;
        if (b->rs[q].Wcap > max_window) max_window = b->rs[q].Wcap;
    }
    if (max_rows > (1 << 28)) {
        rc = li_error_set(LI_ERR_LIMIT, "dllm: batch of %lld canvas rows is too large",
                          (long long)max_rows);
        goto fail;
    }
    if ((rc = li_llada_scratch_init(&b->scratch, m->llada, (int)max_rows)) != LI_OK) goto fail;
    if ((rc = li_llada_reserve(m->llada, b->scratch, max_canvas, max_window, b->lc.fp8)) != LI_OK)
        goto fail;
    b->allocs = m->be->ops->scratch_allocs;
    b->allocs0 = b->allocs ? b->allocs(m->be) : 0;
    b->t0 = li_time_ms();
    *out = b;
    return LI_OK;
fail:
    li_dllm_batch_free(b);
    return rc;
}

li_status li_dllm_batch_step(li_dllm_batch *b, int *n_left) {
    if (b->bd) return bd_batch_step(b, n_left);
    li_model *m = b->m;
    const specials sp = b->sp;
    req_state *rs = b->rs;
    li_dllm_stats *tot = &b->tot;
    int nc = 0;
    li_status rc = LI_OK;
    *n_left = 0;
    for (int q = 0; q < b->n; q++) {
        req_state *r = &rs[q];
        if (r->done) continue;
        bool start = r->step_in_block == 0;
        if (start) LI_TRY(block_begin(r, &sp));
        build_canvas(r, sp.mask);
        // rows before the block end are never dropped: window rows are canvas rows
        int hi = r->P + (r->block + 1) * r->B;
        li_llada_canvas c = {r->n_rows, r->ctok, r->cpos, r->wlo, hi, start, r->wrow, r->W};
        b->canv[nc] = c;
        b->caches[nc] = r->cache;
        b->outs[nc] = r->dlogits ? r->dlogits : r->logits;
        b->owner[nc++] = q;
        if (r->cfg) {
            c.tokens = r->utok;
            b->canv[nc] = c;
            b->caches[nc] = r->ucache;
            b->outs[nc] = r->dulogits ? r->dulogits : r->ulogits;
            b->owner[nc++] = q;
        }
    }
    if (nc == 0) return LI_OK;
    li_llada_step_info info = {0};
    if ((rc = li_llada_forward(m->llada, &b->lc, b->scratch, b->caches, b->canv, nc, b->outs,
                               &info)) != LI_OK)
        return li_error_wrap(rc, "dllm step %d: ", tot->steps + 1);
    for (int c = 0; c < nc && rc == LI_OK; c++) {  // steps 1-6 where the logits are
        if (c > 0 && b->owner[c] == b->owner[c - 1]) continue;  // the CFG twin of the one before
        req_state *r = &rs[b->owner[c]];
        rc = step_decide(m->be, r, &sp, b->outs[c], r->cfg ? b->outs[c + 1] : NULL);
    }
    if (rc != LI_OK) return rc;
    add_info(tot, &info);
    tot->nfe += nc;
    tot->steps++;
    for (int c = 0; c < nc; c++)
        tot->canvas_rows += b->canv[c].n_tokens;
    for (int c = 0; c < nc; c++) {
        if (c > 0 && b->owner[c] == b->owner[c - 1]) continue;  // the CFG twin of the one before
        req_state *r = &rs[b->owner[c]];
        li_dllm_stats *s = &r->req->stats;
        int committed = r->n_committed;
        s->steps++;
        s->nfe += r->cfg ? 2 : 1;
        int block = r->block, sib = r->step_in_block;
        LI_TRY(step_advance(r, &sp));
        if (r->p->on_step) {
            li_dllm_step ev = {b->owner[c], block,       sib,  s->steps, s->nfe,
                               committed,   r->x + r->P, r->G, sp.mask};
            r->p->on_step(r->p->user, &ev);
        }
        if (r->done) {
            memcpy(r->req->out, r->x + r->P, (size_t)r->G * sizeof *r->x);
            if (r->p->canvas_out) memcpy(r->p->canvas_out, r->x, (size_t)r->T * sizeof *r->x);
            finish_stats(s, r->req->out, r->G, sp.eos, li_time_ms() - b->t0);
        }
    }
    for (int q = 0; q < b->n; q++)
        *n_left += !rs[q].done;
    return LI_OK;
}

li_status li_dllm_batch_cancel(li_dllm_batch *b, int q) {
    if (q < 0 || q >= b->n)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: no request %d in a batch of %d", q, b->n);
    b->rs[q].done = true;
    if (b->bd_runs) {  // its KV pages go back now
        li_bd_free(b->bd_runs[q]);
        b->bd_runs[q] = NULL;
    }
    return LI_OK;
}

bool li_dllm_batch_done(const li_dllm_batch *b, int q) {
    return q < 0 || q >= b->n || b->rs[q].done;
}

void li_dllm_batch_stats(const li_dllm_batch *b, li_dllm_stats *total) {
    li_dllm_stats tot = b->tot;
    double wall = li_time_ms() - b->t0;
    tot.backend_allocs = b->allocs ? b->allocs(b->m->be) - b->allocs0 : 0;
    tot.n_prompt = 0;
    for (int q = 0; q < b->n; q++) {
        const li_dllm_request *rq = &b->reqs[q];
        tot.n_prompt += rq->n_prompt;
        tot.gen_length += rq->params.gen_length;
        tot.n_tokens_fastdllm += rq->stats.n_tokens_fastdllm;
        tot.n_tokens_dinfer += rq->stats.n_tokens_dinfer;
        tot.early_stopped |= rq->stats.early_stopped;
    }
    finish_stats(&tot, NULL, 0, b->sp.eos, wall);
    *total = tot;
}

li_status li_dllm_generate_batch(li_model *m, li_dllm_request *reqs, int n, li_dllm_stats *total) {
    li_dllm_batch *b;
    LI_TRY(li_dllm_batch_begin(m, reqs, n, &b));
    li_status rc = LI_OK;
    int left = n;
    while (left > 0 && rc == LI_OK) rc = li_dllm_batch_step(b, &left);
    if (rc == LI_OK && total) li_dllm_batch_stats(b, total);
    li_dllm_batch_free(b);
    return rc;
}

li_status li_dllm_generate(li_model *m, const int32_t *prompt, int n_prompt,
                           const li_dllm_params *params, int32_t *out, li_dllm_stats *stats) {
    if (!params) return li_error_set(LI_ERR_INVALID_ARG, "dllm: no parameters given");
    li_dllm_request rq = {prompt, n_prompt, *params, out, {0}};
    li_dllm_stats tot;
    LI_TRY(li_dllm_generate_batch(m, &rq, 1, &tot));
    if (stats) {
        // One request: the batch's work counters are its own.
        li_dllm_stats s = rq.stats;
        s.embed_rows = tot.embed_rows;
        s.qkv_rows = tot.qkv_rows;
        s.fa_tiles = tot.fa_tiles;
        s.fa_tiles_skipped = tot.fa_tiles_skipped;
        s.head_rows = tot.head_rows;
        s.fp8_gemm_rows = tot.fp8_gemm_rows;
        s.canvas_rows = tot.canvas_rows;
        s.flops = tot.flops;
        s.backend_allocs = tot.backend_allocs;
        *stats = s;
    }
    return LI_OK;
}

// ---- tokens ------------------------------------------------------------------------------------

li_status li_dllm_special_tokens(const li_model *m, int32_t *mask, int32_t *eos, int32_t *eot) {
    specials sp;
    LI_TRY(get_specials(m, &sp));
    if (mask) *mask = sp.mask;
    if (eos) *eos = sp.eos;
    if (eot) *eot = sp.eot;
    return LI_OK;
}

// A special token: its text is "<|…|>" and the tokenizer maps that text back to it.
static bool is_special(const li_tokenizer *t, const char *text, size_t len, int32_t id) {
    if (len < 4 || len > 255 || memcmp(text, "<|", 2) || memcmp(text + len - 2, "|>", 2))
        return false;
    char buf[256];
    memcpy(buf, text, len);
    buf[len] = 0;
    return li_tokenizer_find(t, buf) == id;
}

li_status li_dllm_detokenize(const li_model *m, const int32_t *gen, int n, char **out) {
    *out = NULL;
    specials sp;
    LI_TRY(get_specials(m, &sp));
    li_buf text = {0}, piece = {0};
    li_status rc = LI_OK;
    for (int i = 0; i < n; i++) {
        if (gen[i] == sp.eos || gen[i] == sp.eot) break;
        if (gen[i] == sp.mask) continue;
        piece.len = 0;
        if ((rc = li_tokenizer_decode_token(m->tok, gen[i], &piece)) != LI_OK) goto fail;
        if (is_special(m->tok, piece.data, piece.len, gen[i])) continue;
        if ((rc = li_buf_append(&text, piece.data, piece.len)) != LI_OK) goto fail;
    }
    if ((rc = li_buf_append(&text, "", 1)) != LI_OK) goto fail; // NUL
    li_buf_free(&piece);
    *out = text.data;
    return LI_OK;
fail:
    li_buf_free(&piece);
    li_buf_free(&text);
    return rc;
}
