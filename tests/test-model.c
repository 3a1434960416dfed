// test-model.c — whole-model invariants on synthetic weights (synth:tiny-llama, its weights
// seeded from test_seed()):
//   * the fast CPU backend equals the fp64 oracle backend over a prompt longer than one prefill
//     chunk;
//   * KV-cached decoding agrees with a full recomputation (each greedy token is the argmax of the
//     logits recomputed over prompt + generated tokens);
//   * page sizes 1 / 16 / 64 give the same logits;
//   * the same seed gives the same tokens, different seeds different ones;
//   * bad requests are errors with messages, not crashes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lazyinfer.h"
#include "test.h"

static li_model *load(const char *path, const char *backend, int page_size, int n_ctx) {
    li_model_params p = li_model_default_params();
    p.path = path;
    p.backend = backend;
    p.page_size = page_size;
    p.n_ctx = n_ctx;
    li_model *m = NULL;
    if (li_model_load(&m, &p) != LI_OK) fprintf(stderr, "load %s: %s\n", path, li_last_error());
    return m;
}

typedef struct {
    int32_t toks[512];
    int n;
} collect;

static bool collect_tok(void *u, int32_t t) {
    collect *c = u;
    if (c->n < 512) c->toks[c->n++] = t;
    return true;
}

int main(void) {
    uint64_t seed = test_seed("test-model");
    li_rng rng;
    li_rng_seed(&rng, seed);
    char path[64];
    snprintf(path, sizeof path, "synth:tiny-llama:%llu", (unsigned long long)(seed % 100000));
    li_model *fast = load(path, "cpu", 16, 1024), *ref = load(path, "cpu-ref", 16, 1024);
    if (!fast || !ref) {
        TEST_BEGIN("load synth:tiny-llama");
        CHECK(0, "%s", li_last_error());
        TEST_END();
        return test_summary();
    }
    li_model_info info;
    li_model_get_info(fast, &info);
    const int V = info.n_vocab, N = 300;  // 300 > one prefill chunk of 256
    int32_t prompt[300];
    for (int i = 0; i < N; i++) prompt[i] = (int32_t)(li_rng_u64(&rng) % 256);
    float *a = malloc((size_t)N * V * sizeof(float)), *b = malloc((size_t)N * V * sizeof(float));

    TEST_BEGIN("fast backend == fp64 oracle over 300 tokens (two prefill chunks)");
    CHECK(li_eval_logits(fast, prompt, N, a) == LI_OK, "%s", li_last_error());
    CHECK(li_eval_logits(ref, prompt, N, b) == LI_OK, "%s", li_last_error());
    // fp32 with different summation orders vs fp64 through 2 layers: relative error per logit
    // ~1e-6, so NMSE ~1e-12; 1e-9 leaves three orders of margin and still catches any wrong op
    // (a wrong op gives NMSE ~1).
    double e = test_nmse(a, b, (long)N * V);
    CHECK(e < 1e-9, "nmse %g", e);
    CHECK(!test_has_nan(a, (long)N * V), "NaN in logits");
    TEST_END();

    TEST_BEGIN("KV-cached greedy decoding agrees with recomputation from scratch");
    li_generate_params gp = li_generate_default_params();
    gp.sampling.temperature = 0;
    gp.stop_at_eos = false;
    gp.n_predict = 40;
    collect c = {.n = 0};
    gp.on_token = collect_tok;
    gp.user = &c;
    CHECK(li_generate(fast, prompt, 20, &gp, NULL) == LI_OK, "%s", li_last_error());
    CHECK(c.n == 40, "generated %d", c.n);
    int32_t full[60];
    memcpy(full, prompt, 20 * sizeof(int32_t));
    memcpy(full + 20, c.toks, 40 * sizeof(int32_t));
    CHECK(li_eval_logits(fast, full, 60, a) == LI_OK, "%s", li_last_error());
    int checked = 0;
    for (int i = 0; i < 40; i++) {
        float gap;
        int am = test_argmax_gap(a + (size_t)(19 + i) * V, V, &gap);
        if (gap < 1e-4f) continue;  // a near-tie may flip between two summation orders
        checked++;
        CHECK(am == c.toks[i], "step %d: cached decode chose %d, recomputation %d", i, c.toks[i], am);
    }
    CHECK(checked > 30, "only %d of 40 steps had a clear argmax", checked);
    TEST_END();

    TEST_BEGIN("page sizes 1, 16, 64 give the same logits");
    int sizes[] = {1, 64};
    CHECK(li_eval_logits(fast, prompt, 100, a) == LI_OK, "%s", li_last_error());
    for (int k = 0; k < 2; k++) {
        li_model *mp = load(path, "cpu", sizes[k], 256);
        CHECK(mp != NULL, "load");
        if (!mp) break;
        CHECK(li_eval_logits(mp, prompt, 100, b) == LI_OK, "%s", li_last_error());
        // only the order of key blocks in the online softmax differs: fp32 rounding
        double e2 = test_nmse(b, a, 100L * V);
        CHECK(e2 < 1e-10, "P=%d nmse %g", sizes[k], e2);
        li_model_free(mp);
    }
    TEST_END();

    TEST_BEGIN("same seed → same tokens; another seed → other tokens");
    gp.sampling = li_sampling_default_params();
    gp.sampling.temperature = 1.0f;
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 1.0f;
    gp.sampling.min_p = 0;
    gp.sampling.seed = seed;
    collect c1 = {0}, c2 = {0}, c3 = {0};
    gp.user = &c1;
    li_generate(fast, prompt, 10, &gp, NULL);
    gp.user = &c2;
    li_generate(fast, prompt, 10, &gp, NULL);
    gp.sampling.seed = seed + 1;
    gp.user = &c3;
    li_generate(fast, prompt, 10, &gp, NULL);
    CHECK(c1.n == 40 && c2.n == 40 && c3.n == 40, "counts %d %d %d", c1.n, c2.n, c3.n);
    CHECK(!memcmp(c1.toks, c2.toks, sizeof c1.toks), "same seed differs");
    CHECK(memcmp(c1.toks, c3.toks, sizeof c1.toks) != 0, "different seeds gave the same 40 tokens");
    TEST_END();

    TEST_BEGIN("bad requests are errors with messages");
    int32_t bad[2] = {5, V + 3};
    CHECK(li_eval_logits(fast, bad, 2, a) == LI_ERR_INVALID_ARG, "token out of range");
    CHECK(strstr(li_last_error(), "out of range") != NULL, "message: %s", li_last_error());
    int32_t *longp = calloc(1100, sizeof(int32_t));
    CHECK(li_eval_logits(fast, longp, 1100, NULL) == LI_ERR_LIMIT, "prompt over n_ctx");
    free(longp);
    CHECK(li_eval_logits(fast, prompt, 0, a) == LI_ERR_INVALID_ARG, "empty prompt");
    li_model *none = load("synth:no-such-model", "cpu", 16, 64);
    CHECK(!none && strstr(li_last_error(), "no-such-model"), "unknown synth: %s", li_last_error());
    none = load("synth:tiny-llama:12x", "cpu", 16, 64);
    CHECK(!none && strstr(li_last_error(), "12x"), "bad seed: %s", li_last_error());
    none = load("synth:tiny-llama", "gpu9000", 16, 64);
    CHECK(!none && strstr(li_last_error(), "gpu9000"), "bad backend: %s", li_last_error());
    none = load("/nonexistent/model.gguf", "cpu", 16, 64);
    CHECK(!none && strstr(li_last_error(), "/nonexistent/model.gguf"), "missing: %s", li_last_error());
    TEST_END();

    TEST_BEGIN("info: context and K/V bytes per token, also from a metadata-only load");
    // The oracle is the pool itself: a full load's page size × bytes per token must be the page
    // the pool reports, for both K/V dtypes and the default and explicit contexts.
    const char *dtypes[] = {"f32", "bf16"};
    const int ctxs[] = {0, 320};
    for (int k = 0; k < 4; k++) {
        li_model_params mp = li_model_default_params();
        mp.path = path;
        mp.kv_dtype = dtypes[k % 2];
        mp.n_ctx = ctxs[k / 2];
        mp.page_size = 8 + 8 * k;
        li_model *full = NULL, *meta = NULL;
        CHECK(li_model_load(&full, &mp) == LI_OK, "%s", li_last_error());
        mp.metadata_only = true;
        CHECK(li_model_load(&meta, &mp) == LI_OK, "%s", li_last_error());
        if (!full || !meta) {
            li_model_free(full);
            li_model_free(meta);
            break;
        }
        li_model_info fi, mi;
        li_cache_stats cs;
        li_model_get_info(full, &fi);
        li_model_get_info(meta, &mi);
        li_get_cache_stats(full, &cs);
        CHECK(fi.kv_token_bytes > 0 && fi.kv_token_bytes * mp.page_size == cs.kv_page_bytes,
              "%s: %lld bytes/token × %d != page of %lld", dtypes[k % 2],
              (long long)fi.kv_token_bytes, mp.page_size, (long long)cs.kv_page_bytes);
        CHECK(mi.kv_token_bytes == fi.kv_token_bytes, "metadata-only: %lld bytes/token, full %lld",
              (long long)mi.kv_token_bytes, (long long)fi.kv_token_bytes);
        // the pool of a default load holds one context: max_seqs (1) × n_ctx tokens
        int want_ctx = ctxs[k / 2] ? ctxs[k / 2] : info.n_ctx_train < 4096 ? info.n_ctx_train : 4096;
        CHECK(fi.n_ctx == want_ctx && mi.n_ctx == want_ctx, "n_ctx %d / %d, want %d", fi.n_ctx,
              mi.n_ctx, want_ctx);
        CHECK(cs.kv_pages_total == (want_ctx + mp.page_size - 1) / mp.page_size,
              "%lld pages for a context of %d", (long long)cs.kv_pages_total, want_ctx);
        li_model_free(full);
        li_model_free(meta);
    }
    TEST_END();

    free(a);
    free(b);
    li_model_free(fast);
    li_model_free(ref);
    return test_summary();
}
