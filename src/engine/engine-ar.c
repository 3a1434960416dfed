// engine-ar.c — autoregressive generation for one sequence: chunked prefill, then one decode
// step per token, sampling on the backend. Pages come from the model's pool and go back to it
// before returning. (Continuous batching of many requests builds on the same li_batch.)
#include <string.h>

#include "engine.h"

li_generate_params li_generate_default_params(void) {
    li_generate_params p = {0};
    p.n_predict = 128;
    p.sampling = li_sampling_default_params();
    p.stop_at_eos = true;
    return p;
}

// Appends tokens[0..n) at positions pos0.. to `seq` and runs them through the model in chunks of
// at most n_batch. Logits: every row into all_logits (n, V, host memory) when it is non-NULL; the
// last row's logits are always left in m->logits[0..V) (backend memory).
static li_status run_tokens(li_model *m, li_kv_seq_pages *seq, const int32_t *tokens, int n,
                            float *all_logits) {
    const int V = m->llama.hp.n_vocab;
    int32_t pos[m->n_batch], n_visible[m->n_batch], rows[m->n_batch];
    int64_t slots[m->n_batch];
    for (int c0 = 0; c0 < n; c0 += m->n_batch) {
        int T = n - c0 < m->n_batch ? n - c0 : m->n_batch;
        int pos0 = seq->n_tokens;
        if (pos0 + T > m->n_ctx)
            return li_error_set(LI_ERR_LIMIT, "context full: %d tokens exceed n_ctx = %d",
                                pos0 + T, m->n_ctx);
        LI_TRY(li_kv_seq_append(&m->kv, seq, T, slots));
        for (int i = 0; i < T; i++) {
            pos[i] = pos0 + i;
            n_visible[i] = pos0 + i + 1;  // causal: itself and everything before it
            rows[i] = i;
        }
        bool last_chunk = c0 + T == n;
        li_batch_seq bs = {.t0 = 0, .n = T, .kv = li_kv_seq_view(seq)};
        li_batch b = {
            .n_tokens = T, .tokens = tokens + c0, .pos = pos, .slot = slots,
            .n_visible = n_visible, .n_seqs = 1, .seqs = &bs,
            .n_logits = all_logits ? T : (last_chunk ? 1 : 0),
            .logit_rows = all_logits ? rows : &rows[T - 1],
        };
        LI_TRY(li_llama_forward(&m->llama, &m->scratch, &m->kv.storage, &b, m->logits));
        if (all_logits) {  // m->logits is in backend memory (the GPU's on CUDA)
            LI_TRY(li_be_download(m->be, all_logits + (size_t)c0 * V, m->logits,
                                  (size_t)T * V * sizeof(float)));
            if (last_chunk && T > 1)
                li_be_copy(m->be, m->logits, m->logits + (size_t)(T - 1) * V,
                           (size_t)V * sizeof(float));
        }
    }
    return LI_OK;
}

static li_status check_usable(const li_model *m, int n_prompt) {
    if (m->metadata_only)
        return li_error_set(LI_ERR_INVALID_ARG, "model was loaded for metadata only");
    if (m->llada)
        return li_error_set(LI_ERR_INVALID_ARG, "%s is a diffusion model: use li_dllm_generate "
                            "(lazyinfer dllm)", li_model_hparams(m)->name);
    if (n_prompt < 1) return li_error_set(LI_ERR_INVALID_ARG, "empty prompt");
    if (n_prompt > m->n_ctx)
        return li_error_set(LI_ERR_LIMIT, "prompt of %d tokens exceeds the context of %d tokens",
                            n_prompt, m->n_ctx);
    return LI_OK;
}

// One plain request through the scheduler (the same path as every other request).
li_status li_generate(li_model *m, const int32_t *prompt, int n_prompt,
                      const li_generate_params *params, li_generate_stats *stats) {
    LI_TRY(check_usable(m, n_prompt));
    li_request q = {.prompt_ids = prompt, .n_prompt_ids = n_prompt, .gen = *params};
    int64_t id;
    double t0 = li_time_ms();
    LI_TRY(li_submit(m, &q, &id));
    li_status rc = li_run(m);
    li_request_result res = {0};
    li_status rc2 = li_result(m, id, &res);
    if (rc == LI_OK) rc = rc2;
    if (rc == LI_OK && res.status != LI_OK) rc = li_error_set(res.status, "%s", res.error);
    if (stats) {
        stats->n_prompt = n_prompt;
        stats->n_generated = res.n_generated;
        stats->prompt_ms = res.ttft_ms;
        stats->generate_ms = li_time_ms() - t0 - res.ttft_ms;
    }
    return rc;
}

li_status li_eval_logits(li_model *m, const int32_t *tokens, int n_tokens, float *logits) {
    LI_TRY(check_usable(m, n_tokens));
    if (li_sched_n_unfinished(m) > 0)
        return li_error_set(LI_ERR_INVALID_ARG, "li_eval_logits while %d submitted requests are "
                            "unfinished", li_sched_n_unfinished(m));
    LI_TRY(li_engine_make_room(m, (n_tokens + m->kv.storage.page_size - 1) / m->kv.storage.page_size));
    li_kv_seq_pages seq = {0};
    li_status rc = run_tokens(m, &seq, tokens, n_tokens, logits);
    if (rc == LI_OK) rc = li_be_sync(m->be);
    li_kv_seq_free(&m->kv, &seq);
    return rc;
}
