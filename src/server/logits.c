// logits.c — logits processing and log-probabilities of `lazyinfer serve` (logits.h).
// Napkin maths per processed token, V = 49,152: the penalties touch only the tokens seen; the
// bias its entries; the grammar feeds each token's bytes (~300k byte steps, ~1 ms, the largest
// cost); the log-softmax two passes over V (~0.1 ms). The model's own step is ~20 ms on SmolLM2.
#include "logits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

li_status li_piece_append(const li_model *m, int32_t id, li_buf *b) {
    char small[256];
    size_t n;
    LI_TRY(li_token_to_piece(m, id, small, sizeof small, &n));
    if (n <= sizeof small) return li_buf_append(b, small, n);
    char *big = malloc(n);
    if (!big) return li_error_set(LI_ERR_OOM, "out of memory for token %d's text", id);
    li_status rc = li_token_to_piece(m, id, big, n, &n);
    if (rc == LI_OK) rc = li_buf_append(b, big, n);
    free(big);
    return rc;
}

li_status li_vocab_init(li_vocab *v, const li_model *m) {
    memset(v, 0, sizeof *v);
    li_model_info info;
    li_model_get_info(m, &info);
    v->V = info.n_vocab;
    v->off = calloc((size_t)v->V + 1, sizeof *v->off);
    v->special = calloc((size_t)v->V, 1);
    li_buf b = {0};
    if (!v->off || !v->special) goto oom;
    for (int id = 0; id < v->V; id++) {
        v->off[id] = b.len;
        // ids past the tokenizer's (the embedding is larger) have no text
        if (id < info.n_vocab_text && li_piece_append(m, id, &b) != LI_OK) goto oom;
        v->special[id] = li_token_is_special(m, id);
    }
    v->off[v->V] = b.len;
    v->bytes = b.data ? b.data : calloc(1, 1);
    if (!v->bytes) goto oom;
    return LI_OK;
oom:
    li_buf_free(&b);
    li_vocab_free(v);
    return li_error_set(LI_ERR_OOM, "out of memory for the vocabulary's texts");
}

void li_vocab_free(li_vocab *v) {
    free(v->bytes);
    free(v->off);
    free(v->special);
    memset(v, 0, sizeof *v);
}

bool li_logits_wanted(const li_api_request *a) {
    return a->n_bias || a->has_presence || a->has_frequency || a->has_repetition || a->logprobs ||
           a->format != LI_API_FORMAT_TEXT;
}

li_status li_logits_proc_init(li_logits_proc *p, const li_api_request *a, const li_vocab *vocab,
                              const li_json_grammar *g) {
    memset(p, 0, sizeof *p);
    p->a = a;
    p->vocab = vocab;
    size_t V = (size_t)vocab->V;
    if ((a->has_presence || a->has_frequency) && !(p->count = calloc(V, sizeof *p->count))) goto oom;
    if (a->has_repetition && !(p->seen = calloc(V, 1))) goto oom;
    if (a->logprobs && !(p->logp = malloc(V * sizeof *p->logp))) goto oom;
    if (g) {
        if (!(p->json = malloc(sizeof *p->json))) goto oom;
        li_json_state_init(p->json, g);
    }
    return LI_OK;
oom:
    li_logits_proc_free(p);
    return li_error_set(LI_ERR_OOM, "out of memory");
}

void li_logits_proc_seen(li_logits_proc *p, const int32_t *ids, int n) {
    for (int i = 0; p->seen && i < n; i++)
        if (ids[i] >= 0 && ids[i] < p->vocab->V) p->seen[ids[i]] = 1;
}

void li_logits_proc_free(li_logits_proc *p) {
    free(p->count);
    free(p->seen);
    free(p->json);
    free(p->logp);
    memset(p, 0, sizeof *p);
}

bool li_logits_apply(li_logits_proc *p, float *logits) {
    const li_api_request *a = p->a;
    const int V = p->vocab->V;
    if (p->seen) {
        float rp = (float)a->repetition_penalty;
        for (int t = 0; t < V; t++)
            if (p->seen[t]) logits[t] = logits[t] > 0 ? logits[t] / rp : logits[t] * rp;
    }
    if (p->count) {
        float fp = (float)a->frequency_penalty, pp = (float)a->presence_penalty;
        for (int t = 0; t < V; t++)
            if (p->count[t]) logits[t] -= (float)p->count[t] * fp + pp;
    }
    for (int i = 0; i < a->n_bias; i++)
        if (a->bias_ids[i] < V) logits[a->bias_ids[i]] += a->bias[i];
    bool any = true;
    if (p->json) {
        any = false;
        const li_vocab *v = p->vocab;
        for (int t = 0; t < V; t++) {
            size_t n = v->off[t + 1] - v->off[t];
            // special tokens and tokens without text are never part of the document
            if (v->special[t] || n == 0 || !li_json_state_accepts(p->json, v->bytes + v->off[t], n))
                logits[t] = -INFINITY;
            else
                any = true;
        }
    }
    if (p->logp) {
        float mx = -INFINITY;
        for (int t = 0; t < V; t++) mx = logits[t] > mx ? logits[t] : mx;
        double sum = 0;
        for (int t = 0; t < V; t++) sum += exp((double)logits[t] - mx);
        float lse = mx + (float)log(sum);
        for (int t = 0; t < V; t++) p->logp[t] = logits[t] - lse;
    }
    return any;
}

bool li_logits_take(li_logits_proc *p, int32_t tok) {
    if (!p->vocab || tok < 0 || tok >= p->vocab->V) return false;  // nothing asked
    if (p->count) p->count[tok]++;
    if (p->seen) p->seen[tok] = 1;
    if (!p->json) return false;
    const li_vocab *v = p->vocab;
    li_json_state_feed(p->json, v->bytes + v->off[tok], v->off[tok + 1] - v->off[tok]);
    return p->json->done;
}

// A log-probability as JSON can carry it: -inf (a forbidden token) as OpenAI's floor, -9999.
static float finite_lp(float x) { return isfinite(x) ? x : -9999.0f; }

void li_logits_report(const li_logits_proc *p, int32_t tok, int k, li_api_logprob *l) {
    const li_vocab *v = p->vocab;
    l->text = v->bytes + v->off[tok];
    l->len = v->off[tok + 1] - v->off[tok];
    l->logprob = finite_lp(p->logp[tok]);
    // the k largest, by insertion into a sorted list (k <= 20)
    int ids[LI_API_MAX_TOP_LOGPROBS], n = 0;
    for (int t = 0; t < v->V && k > 0; t++) {
        float x = p->logp[t];
        if (n == k && x <= p->logp[ids[n - 1]]) continue;
        int i = n < k ? n++ : k - 1;
        while (i > 0 && p->logp[ids[i - 1]] < x) {
            ids[i] = ids[i - 1];
            i--;
        }
        ids[i] = t;
    }
    l->n_top = n;
    for (int i = 0; i < n; i++)
        l->top[i] = (li_api_top){v->bytes + v->off[ids[i]], v->off[ids[i] + 1] - v->off[ids[i]],
                                 finite_lp(p->logp[ids[i]])};
}
