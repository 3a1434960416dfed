// engine-bd.c — block-diffusion decoding of Fast-dLLM v2 models (a Qwen2 fine-tune whose
// config.json says model_type "Fast_dLLM_Qwen"; li_hparams.bd_size > 0): the reference's
// `Fast_dLLM_QwenForCausalLM.generate` (HF Efficient-Large-Model/Fast_dLLM_v2_7B, modeling.py)
// at temperature 0 without its block cache. The contract, with the reference lines it follows,
// is docs/DLLM.md "Fast-dLLM v2"; tests/test-bd-generate-ref.c checks it token for token against
// files written by running the reference (tests/ref/gen_fast_dllm_v2_ref.py).
//
// The prompt and every finished block keep an exact KV cache in the model's paged pool, like an
// autoregressive sequence; each denoising step runs the current block only (B rows), every row
// seeing the cache and the whole block (bidirectional inside it), through the Qwen2 forward
// (li_llama_forward with n_visible = cache + B). The block's K/V are rewritten by every step, so
// the last forward over the finished block leaves exactly the K/V the reference's
// update_past_key_values forward stores. LaCache: the LM head runs only on the rows whose
// predictions the step reads (the sub-block's, shifted one row up), and layer 0 keeps its
// embedding rows, Q/K/V and prefix attention state across a block's steps (li_llama_bd0,
// src/model/llama-bd0.c); both exact, bit for bit (docs/DLLM.md "LaCache on it").
// Not here: LLaDA's SAR decoding (engine-dllm.c), the model (src/model/arch-llama.c).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/dllm-rules.h"
#include "engine.h"

// The token that ends generation: config.json's first eos_token_id (Qwen2.5-Instruct's
// <|im_end|>, the reference's stop_token default 151645), else the tokenizer's EOS.
int32_t li_bd_stop_token(const li_model *m) {
    const li_hparams *hp = &m->llama.hp;
    return hp->n_eos > 0 ? hp->eos_ids[0] : li_tokenizer_eos(m->tok);
}

// What one request holds while it decodes.
typedef struct {
    li_model *m;
    li_kv_seq_pages seq;  // the cache: prompt, finished blocks, then the current block's slots
    int32_t *canvas;      // (n_canvas) prompt, generated rows; mask where not yet committed
    int n_canvas;
    int32_t *pos;         // (B) positions of the current block
    int32_t *nvis;        // (max(B, chunk)) keys each row sees
    int32_t *rows;        // (B) logit rows
    int64_t *slots;       // (max(B, chunk)) KV slots
    float *logits;        // (B, V) host copy of the rows read
    bool trunc;           // LM head on the rows read only (else on the whole block, as HF)
    li_llama_bd0 l0;      // layer 0: its dense K/V and LaCache's layer-0 caches (llama.h)
    uint64_t read_hash;   // FNV-1a of every logit row the decoder read (tests: cache on = off)
    int nfe;
    li_dllm_stats *st;    // work counters, accumulated per forward
} bd_run;

// Where a request's decoding stands between two li_bd_step calls (each runs one forward): the
// loops of docs/DLLM.md "Fast-dLLM v2" unrolled, so that a batch's requests take turns per
// forward and a long request holds no other back.
typedef enum {
    BD_PREFILL,  // the prompt's whole blocks, a chunk per forward: rows [c0, c)
    BD_BLOCK,    // a new block starts at row c (or the request ends)
    BD_SUB,      // denoising the sub-block at s0 of the block at c
    BD_CLOSE,    // the finished block's closing forward (its K/V, the next block's first token)
    BD_DONE,
} bd_phase;

struct li_bd_run {
    bd_run r;
    void *parts;           // the block holding r's arrays
    li_dllm_params p;      // (on_step, user: the caller's)
    int P;                 // prompt rows
    bd_phase phase;
    int c0, c, chunk, blk, n_blocks, s0, step_in, steps;
    bool done;             // the stop token was decided: no more blocks
    bool lend_fp8;         // the FP8 FFN copies go into the forward for this request's steps
    li_dllm_stats st;
    double t0;
};

// Work of one forward of T rows over `keys` keys per row with n_head_rows through the head, into
// the counters bench dllm reports; before: the layer-0 counters before the forward. FLOPs: 2 per
// MAC of every matmul (Q/K/V/O, the FFN, the head) and of attention's QK^T and PV, less layer
// 0's Q/K/V of the rows its RoPECache kept and its attention over the prefix for the query rows
// FACache served; norms, RoPE, softmax and SwiGLU are not counted (as LLaDA's).
static void count_work(bd_run *r, const li_llama_bd0 *before, bool whole, int T, int64_t keys,
                       int n_head_rows, bool fp8) {
    const li_hparams *hp = &r->m->llama.hp;
    const double D = hp->n_embd, F = hp->n_ff, qo = (double)hp->n_head * hp->head_dim,
                 kv = (double)hp->n_head_kv * hp->head_dim, L = hp->n_layer;
    const li_llama_bd0 *z = &r->l0;
    li_dllm_stats *st = r->st;
    const int64_t qkv = z->n_qkv - before->n_qkv;
    st->canvas_rows += T;
    st->embed_rows += z->n_embed - before->n_embed;
    st->qkv_rows += qkv;
    st->fa_tiles += z->fa_tiles - before->fa_tiles;
    st->fa_tiles_skipped += z->fa_tiles_skipped - before->fa_tiles_skipped;
    st->head_rows += n_head_rows;
    if (fp8 && T > 1) st->fp8_gemm_rows += (int64_t)T * 3 * (hp->n_layer - 1);
    double served = 0;  // block rows whose state over the keys - T of the prefix FACache served
    for (int g = 0; whole && z->use_fa && g < T / z->group; g++)
        if (!(z->redo >> g & 1)) served += z->group;
    st->flops += 2.0 * T * L * (D * (qo + 2 * kv) + qo * D + 3 * D * F) -
                 2.0 * (T - qkv) * D * (qo + 2 * kv) + 4.0 * T * L * (double)keys * qo -
                 4.0 * served * (double)(keys - T) * qo + 2.0 * n_head_rows * D * hp->n_vocab;
}

// One forward of rows [c0, c0 + T) of the canvas over the cache [0, c0): K/V written at the rows'
// slots, every row seeing keys [0, c0 + T) when `whole` (a block: bidirectional), else its own
// block's end (the prompt prefill: block-causal, the reference's eval_block_diff_mask). Logits
// of rows[0..n_rows) (batch indices) land in r->logits.
static li_status bd_forward(bd_run *r, int c0, int T, const int64_t *slots, const int32_t *rows,
                            int n_rows, bool whole) {
    li_model *m = r->m;
    for (int i = 0; i < T; i++) r->pos[i] = c0 + i;
    li_batch_seq bs = {.t0 = 0, .n = T, .kv = li_kv_seq_view(&r->seq)};
    li_batch b = {.n_tokens = T, .tokens = r->canvas + c0, .pos = r->pos, .slot = slots,
                  .n_visible = r->nvis, .n_seqs = 1, .seqs = &bs, .n_logits = n_rows,
                  .logit_rows = rows, .bd0 = &r->l0, .bd_block = whole};
    li_llama_bd0 before = r->l0;
    LI_TRY(li_llama_forward(&m->llama, &m->scratch, &m->kv.storage, &b, m->logits));
    if (!whole) r->l0.n_embed += T, r->l0.n_qkv += T;  // (a prompt chunk: every row)
    count_work(r, &before, whole, T, c0 + T, n_rows, m->llama.fp8 != NULL);
    r->nfe++;
    const size_t V = (size_t)m->llama.hp.n_vocab;
    if (n_rows > 0)
        LI_TRY(li_be_download(m->be, r->logits, m->logits, (size_t)n_rows * V * sizeof(float)));
    return LI_OK;
}

// A logit row the decoder reads (V floats), folded into r->read_hash first: the bits every
// decision of the request came from, which tests compare between cache settings.
static const float *read_row(bd_run *r, const float *l) {
    const unsigned char *bytes = (const unsigned char *)l;
    for (size_t i = 0; i < (size_t)r->m->llama.hp.n_vocab * sizeof(float); i++)
        r->read_hash = (r->read_hash ^ bytes[i]) * 1099511628211ull;
    return l;
}

// argmax with ties to the lowest id (torch.argmax: the first maximal value).
static int32_t argmax_f32(const float *l, int V) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[best]) best = v;
    return best;
}

// The reference's stop rule (its `if stop_token in x_t[:, prompt_length:]` checks): the first
// stop token among rows [lo, hi) with no mask before it ends the request. Returns its row or -1.
static int stop_row(const bd_run *r, int lo, int hi, int32_t stop, int32_t mask) {
    for (int i = lo; i < hi; i++) {
        if (r->canvas[i] == mask) return -1;
        if (r->canvas[i] == stop) return i;
    }
    return -1;
}

li_status li_bd_check(const li_model *m, const li_dllm_params *p, const int32_t *prompt,
                      int n_prompt) {
    if (!p) return li_error_set(LI_ERR_INVALID_ARG, "dllm: no parameters given");
    if (n_prompt > 0 && !prompt) return li_error_set(LI_ERR_INVALID_ARG, "dllm: no prompt given");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->llama.hp.n_vocab)
            return li_error_set(LI_ERR_INVALID_ARG, "dllm: prompt token %d at %d is outside the "
                                "vocabulary (%d)", prompt[i], i, m->llama.hp.n_vocab);
    const char *no = NULL;
    if (p->factor != 0) no = "factor";
    else if (p->commit_per_step != 0) no = "commit_per_step";
    else if (p->cfg != 0) no = "cfg";
    else if (p->dpad) no = "dpad";
    else if (p->temperature != 0) no = "temperature > 0 (the reference samples top-p with torch)";
    else if (p->remasking != LI_DLLM_REMASK_LOW_CONFIDENCE) no = "random remasking";
    else if (p->early_stop) no = "early_stop (it stops at its stop token anyway)";
    else if (p->logits_eos_inf || p->confidence_eos_eot_inf) no = "the EOS/EOT bans";
    else if (p->confidence == LI_DLLM_CONF_F64) no = "confidence f64 (the reference's is f32)";
    if (no)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: %s is not available for a Fast-dLLM v2 "
                            "(block diffusion) model", no);
    int B = p->block_length, S = p->sub_block_length ? p->sub_block_length : 8;
    if (B < 2 || S < 1 || B % S)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: block_length %d must be >= 2 and a "
                            "multiple of sub_block_length %d", B, S);
    if (p->gen_length < B || p->gen_length % B)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: gen_length %d is not a positive multiple "
                            "of block_length %d", p->gen_length, B);
    if (!(p->threshold >= 0 && p->threshold <= 1))
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: threshold %g is outside [0, 1]",
                            p->threshold);
    if (n_prompt < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "dllm: a Fast-dLLM v2 model needs a prompt of at "
                            "least one token");
    if (B > m->n_batch)
        return li_error_set(LI_ERR_LIMIT, "dllm: block_length %d exceeds the forward's %d rows",
                            B, m->n_batch);
    int64_t need = (int64_t)(n_prompt / B) * B + p->gen_length + B + 1;
    if (need > m->n_ctx)
        return li_error_set(LI_ERR_LIMIT, "dllm: prompt %d + gen_length %d needs %lld positions, "
                            "more than n_ctx = %d", n_prompt, p->gen_length, (long long)need,
                            m->n_ctx);
    return LI_OK;
}

static void trace(const bd_run *r, const li_dllm_params *p, int n_prompt, int block, int step_in,
                  int steps, int committed, int32_t mask) {
    if (!p->on_step) return;
    li_dllm_step s = {.block = block, .step_in_block = step_in, .step = steps, .nfe = r->nfe,
                      .n_committed = committed, .gen = r->canvas + n_prompt,
                      .gen_length = p->gen_length, .mask_id = mask};
    p->on_step(p->user, &s);
}

// One denoising forward of the sub-block at s0 and its commits (the reference's inner loop body).
static li_status denoise(li_bd_run *d) {
    bd_run *r = &d->r;
    li_model *m = r->m;
    const li_dllm_params *p = &d->p;
    const int V = m->llama.hp.n_vocab, B = p->block_length, c = d->c, s0 = d->s0;
    const int S = p->sub_block_length ? p->sub_block_length : 8;
    const int32_t mask = m->llama.hp.bd_mask_id;
    // HF: threshold=1 by default (strictly above: only the forced best commits); x1_p > threshold
    // compares float32 probabilities with the threshold rounded to float32
    const float tau = p->threshold > 0 ? (float)p->threshold : 1.0f;
    // HF: logits = cat([logits[:, :1], logits[:, :-1]]): row j is predicted by output row j - 1
    // (row 0 by itself; never a mask: it holds the prompt or the AR token)
    int n_rows = 0;
    for (int j = s0; j < s0 + S; j++) r->rows[n_rows++] = j > 0 ? j - 1 : 0;
    if (!r->trunc) {  // HF: the whole block through the head, then the slice
        for (int j = 0; j < B; j++) r->rows[j] = j;
        n_rows = B;
    }
    LI_TRY(bd_forward(r, c, B, r->slots, r->rows, n_rows, true));
    d->steps++;
    // HF sample_with_top_p at temperature 0: p = softmax(logits) (float32), x = argmax
    int best = -1;
    float best_p = -INFINITY, conf[S];
    int32_t x[S];
    for (int k = 0; k < S; k++) {
        // row s0 + k of the block reads output row max(s0 + k - 1, 0): the k-th row returned
        // (trunc), or that row of the whole block's
        int j = s0 + k > 0 ? s0 + k - 1 : 0;
        const float *l = read_row(r, r->logits + (size_t)(r->trunc ? k : j) * V);
        x[k] = argmax_f32(l, V);
        conf[k] = r->canvas[c + s0 + k] == mask ? li_dllm_conf_f32(l, V, x[k]) : -INFINITY;
        if (conf[k] > best_p) {  // x1_p.argmax(): the first maximum
            best_p = conf[k];
            best = k;
        }
    }
    int committed = 0;
    for (int k = 0; k < S; k++) {
        if (r->canvas[c + s0 + k] != mask || !(k == best || conf[k] > tau)) continue;
        r->canvas[c + s0 + k] = x[k];
        committed++;
    }
    trace(r, p, d->P, d->blk, d->step_in++, d->steps, committed, mask);
    return LI_OK;
}

// Runs the request on to its next forward (true in *finished instead once it has decided every
// row): docs/DLLM.md "Fast-dLLM v2" step by step, each phase as the reference's loops order it.
static li_status advance(li_bd_run *d, bool *finished) {
    bd_run *r = &d->r;
    li_model *m = r->m;
    const li_dllm_params *p = &d->p;
    const int V = m->llama.hp.n_vocab, B = p->block_length, P = d->P;
    const int S = p->sub_block_length ? p->sub_block_length : 8;
    const int32_t mask = m->llama.hp.bd_mask_id, stop = li_bd_stop_token(m);
    *finished = false;
    for (;;) switch (d->phase) {
    case BD_PREFILL:
        // The prompt's whole blocks (HF: `if input_ids.shape[1] > block_size`), block-causal; a
        // prompt that ends on a block boundary gets its next token from the last row (argmax).
        // (The reference skips this for a prompt of exactly one block and then decodes the
        // first block without the prompt: here such a prompt is prefilled like any other.)
        if (d->c0 >= d->c) {
            if (d->c > 0 && P == d->c)  // the last chunk's
                r->canvas[P] = argmax_f32(read_row(r, r->logits), V);
            d->phase = BD_BLOCK;
            continue;
        }
        {
            const int c0 = d->c0, T = d->c - c0 < d->chunk ? d->c - c0 : d->chunk;
            LI_TRY(li_kv_seq_append(&m->kv, &r->seq, T, r->slots));
            for (int i = 0; i < T; i++) r->nvis[i] = (c0 + i) / B * B + B;
            int32_t row = T - 1;
            LI_TRY(bd_forward(r, c0, T, r->slots, &row, c0 + T == d->c && P == d->c ? 1 : 0,
                              false));
            d->c0 += T;
        }
        return LI_OK;
    case BD_BLOCK:  // rows [c, c + B): the prompt's tail or the AR token, then masks
        if (d->blk >= d->n_blocks || d->done) {
            d->phase = BD_DONE;
            continue;
        }
        d->step_in = 0;
        d->s0 = 0;
        LI_TRY(li_kv_seq_append(&m->kv, &r->seq, B, r->slots));
        for (int i = 0; i < B; i++) r->nvis[i] = d->c + B;
        d->phase = BD_SUB;
        continue;
    case BD_SUB: {
        if (d->s0 >= B) {
            d->phase = BD_CLOSE;
            continue;
        }
        int n_mask = 0;
        for (int j = d->s0; j < d->s0 + S; j++) n_mask += r->canvas[d->c + j] == mask;
        if (n_mask == 0) {  // the next sub-block
            d->s0 += S;
            continue;
        }
        if (stop_row(r, P, d->c + B, stop, mask) >= 0) {
            d->done = true;
            d->phase = BD_DONE;
            continue;
        }
        // A row committed with the mask id stays a mask (as in the reference, which then never
        // ends); trained models do not get here
        if (d->step_in >= 8 * B + 64)  // engine-dllm.c's bound
            return li_error_set(LI_ERR_LIMIT, "dllm: block %d still has masks after %d steps: "
                                "the model keeps predicting the mask token %d",
                                d->blk, d->step_in, mask);
        return denoise(d);
    }
    case BD_CLOSE: {
        if (stop_row(r, P, d->c + B, stop, mask) >= 0) {
            d->done = true;
            d->phase = BD_DONE;
            continue;
        }
        // The finished block: one more forward stores its K/V (its slots are already written,
        // with these tokens, by this same forward) and predicts the next block's first token.
        int32_t last = B - 1;
        LI_TRY(bd_forward(r, d->c, B, r->slots, &last, 1, true));
        d->steps++;
        d->c += B;
        r->canvas[d->c] = argmax_f32(read_row(r, r->logits), V);
        trace(r, p, P, d->blk, d->step_in, d->steps, 1, mask);
        d->blk++;
        d->phase = BD_BLOCK;
        return LI_OK;
    }
    case BD_DONE: {
        // Output: the generated rows up to and including the first stop token (the reference
        // truncates there), stop tokens after it; the AR token after the last block is dropped
        // when it falls past gen_length (a prompt ending on a block boundary).
        int hi = d->done ? stop_row(r, P, d->c + B, stop, mask) + 1 : d->c + 1;  // decided: [P, hi)
        if (hi > r->n_canvas) hi = r->n_canvas;
        for (int i = hi; i < r->n_canvas; i++) r->canvas[i] = stop;
        li_dllm_stats *st = &d->st;
        st->steps = d->steps;
        st->nfe = r->nfe;
        st->n_tokens_dinfer = hi - P;
        st->n_tokens_fastdllm = 0;
        for (int i = P; i < hi; i++) st->n_tokens_fastdllm += r->canvas[i] != stop;
        *finished = true;
        return LI_OK;
    }
    }
}

uint64_t li_bd_read_hash(const li_bd_run *d) {
    return d->r.read_hash;
}

void li_bd_free(li_bd_run *d) {
    if (!d) return;
    li_kv_seq_free(&d->r.m->kv, &d->r.seq);
    li_llama_bd0_free(&d->r.l0);
    li_free(d->parts);
    free(d);
}

li_status li_bd_begin(li_model *m, const int32_t *prompt, int n_prompt, const li_dllm_params *p,
                      li_bd_run **out) {
    *out = NULL;
    LI_TRY(li_bd_check(m, p, prompt, n_prompt));
    const int V = m->llama.hp.n_vocab, B = p->block_length;
    li_bd_run *d = calloc(1, sizeof *d);
    if (!d) return li_error_set(LI_ERR_OOM, "dllm: out of memory");
    bd_run *r = &d->r;
    *r = (bd_run){.m = m, .n_canvas = n_prompt + p->gen_length};
    int chunk = m->n_batch / B * B, rows = chunk > B ? chunk : B;
    // canvas has one row more than it keeps: the AR token after the last block may land there
    li_part parts_[] = {{(void **)&r->canvas, sizeof(int32_t) * (r->n_canvas + 1)},
                        {(void **)&r->pos, sizeof(int32_t) * rows},
                        {(void **)&r->nvis, sizeof(int32_t) * rows},
                        {(void **)&r->rows, sizeof(int32_t) * B},
                        {(void **)&r->slots, sizeof(int64_t) * rows},
                        {(void **)&r->logits, sizeof(float) * B * (size_t)V}};
    if (!(d->parts = li_alloc_parts(parts_, sizeof parts_ / sizeof parts_[0],
                                    "Fast-dLLM v2 decoding"))) {
        free(d);
        return LI_ERR_OOM;
    }
    d->p = *p;
    d->P = n_prompt;
    d->st = (li_dllm_stats){.n_prompt = n_prompt, .gen_length = p->gen_length};
    r->st = &d->st;
    r->trunc = p->lacache & LI_DLLM_LACACHE_TRUNC;
    r->read_hash = 1469598103934665603ull;
    // layer 0's dense K/V reach the last block's end: the cached prompt blocks + gen_length
    const int S = p->sub_block_length ? p->sub_block_length : 8;
    li_status rc0 = li_llama_bd0_init(&r->l0, &m->llama, (n_prompt >= B ? n_prompt / B * B : 0) +
                                      p->gen_length, B, S, p->fa_tile,
                                      p->lacache & LI_DLLM_LACACHE_EMBED,
                                      p->lacache & LI_DLLM_LACACHE_ROPE,
                                      p->lacache & LI_DLLM_LACACHE_FA);
    if (rc0 != LI_OK) {
        li_bd_free(d);
        return rc0;
    }
    // FP8 FFN of layers >= 1 (LaCache's approximate part): the copies quantised by the first
    // request that wants them, in the forward for this request's steps only. A model loaded
    // with FP8 prefill (--fp8 ffn|all) keeps it for every request.
    d->lend_fp8 = p->fp8 && !m->llama.fp8;
    if (d->lend_fp8 && !m->bd_fp8) {
        li_status rc = li_llama_set_fp8(&m->llama, LI_FP8_FFN, 1);
        if (rc != LI_OK) {
            li_bd_free(d);
            return rc;
        }
        m->bd_fp8 = m->llama.fp8;
        m->llama.fp8 = NULL;
        m->llama.fp8_scope = LI_FP8_OFF;
    }
    const int32_t mask = m->llama.hp.bd_mask_id;
    memcpy(r->canvas, prompt, sizeof(int32_t) * n_prompt);
    for (int i = n_prompt; i < r->n_canvas; i++) r->canvas[i] = mask;
    d->c = n_prompt >= B ? n_prompt / B * B : 0;  // cache length: rows [0, c) cached
    d->chunk = chunk;
    d->n_blocks = p->gen_length / B;
    d->phase = BD_PREFILL;
    d->t0 = li_time_ms();
    *out = d;
    return LI_OK;
}

li_status li_bd_step(li_bd_run *d, bool *finished) {
    li_model *m = d->r.m;
    if (d->lend_fp8) m->llama.fp8 = m->bd_fp8;
    li_status rc = advance(d, finished);
    if (d->lend_fp8) m->llama.fp8 = NULL;
    if (rc == LI_OK && *finished) {
        li_dllm_stats *st = &d->st;
        st->latency_ms = li_time_ms() - d->t0;
        double s = st->latency_ms > 0 ? st->latency_ms / 1e3 : 1e-9;
        st->ms_per_step = st->steps ? st->latency_ms / st->steps : 0;
        st->tps_fastdllm = st->n_tokens_fastdllm / s;
        st->tps_dinfer = st->n_tokens_dinfer / s;
        li_kv_seq_free(&m->kv, &d->r.seq);  // the cache is no longer read
    }
    return rc;
}

void li_bd_result(const li_bd_run *d, int32_t *out, li_dllm_stats *stats) {
    memcpy(out, d->r.canvas + d->P, sizeof(int32_t) * d->p.gen_length);
    if (d->p.canvas_out)
        memcpy(d->p.canvas_out, d->r.canvas, sizeof(int32_t) * (d->P + d->p.gen_length));
    if (stats) *stats = d->st;
}

li_status li_bd_generate(li_model *m, const int32_t *prompt, int n_prompt,
                         const li_dllm_params *p, int32_t *out, li_dllm_stats *stats) {
    if (!out) return li_error_set(LI_ERR_INVALID_ARG, "dllm: no output buffer");
    li_bd_run *d;
    LI_TRY(li_bd_begin(m, prompt, n_prompt, p, &d));
    bool finished = false;
    li_status rc = LI_OK;
    while (rc == LI_OK && !finished) rc = li_bd_step(d, &finished);
    if (rc == LI_OK) li_bd_result(d, out, stats);
    li_bd_free(d);
    return rc;
}
