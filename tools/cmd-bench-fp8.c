// cmd-bench-fp8.c — lazyinfer bench fp8: what FP8 prefill (--fp8 ffn|all) changes against the
// same model's bf16 (device) or f32 (CPU) prefill, per prompt: the greedy tokens generated after
// it (how many of the first N agree before the first difference) and the prompt's logits (top-1
// agreement over its positions, and the relative error of each position's logits,
// max |fp8 - ref| / max |ref|, its worst and mean).
//
// Prompts: the README's `generate` prompts and the RAG samples (data/rag-samples: each sample's
// system, passages and question through the chat template, run as one causal prompt), or --random
// K prompts of random token ids (synthetic models, which have no text). Two loads of the model,
// one with FP8, run the same prompts one after another. Checked by tests/test_bench_fp8.py.
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "cli.h"
#include "rag-requests.h"

#define SAMPLES_REL "data/rag-samples"

typedef struct {
    char label[64];
    int32_t *ids;
    int n;
} fp8_prompt;

typedef struct {
    fp8_prompt *p;
    int n, cap;
} fp8_prompts;

static li_status add_prompt(fp8_prompts *ps, const char *label, int32_t *ids, int n) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 16;
        fp8_prompt *p = realloc(ps->p, (size_t)cap * sizeof *p);
        if (!p) return li_error_set(LI_ERR_OOM, "out of memory");
        ps->p = p;
        ps->cap = cap;
    }
    fp8_prompt *p = &ps->p[ps->n++];
    snprintf(p->label, sizeof p->label, "%s", label);
    p->ids = ids;
    p->n = n;
    return LI_OK;
}

// The README's generate examples: two raw prompts and one chat message.
static li_status readme_prompts(li_model *m, fp8_prompts *ps) {
    static const char *raw[] = {"The capital of France is", "Once upon a time"};
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        int32_t *ids;
        int n;
        LI_TRY(li_tokenize(m, raw[i], strlen(raw[i]), true, false, &ids, &n));
        LI_TRY(add_prompt(ps, raw[i], ids, n));
    }
    char *text;
    const char *chat = "Give me three facts about owls.";
    LI_TRY(li_chat_render(m, NULL, chat, &text));
    int32_t *ids;
    int n;
    li_status rc = li_tokenize(m, text, strlen(text), false, true, &ids, &n);
    free(text);
    return rc == LI_OK ? add_prompt(ps, "chat: Give me three facts about owls.", ids, n) : rc;
}

// One RAG sample's request, tokenised as li_submit would, its parts concatenated.
static li_status sample_prompt(li_model *m, const char *path, const char *label, int max_n,
                               fp8_prompts *ps) {
    rag_list l = {0};
    li_status rc = rag_load_sample(&l, path);
    li_doc *docs = NULL;
    li_request_tokens *t = NULL;
    int32_t *ids = NULL;
    if (rc == LI_OK) {
        const rag_req *r = &l.reqs[0];
        docs = calloc((size_t)r->n_docs + 1, sizeof *docs);
        if (!docs) rc = li_error_set(LI_ERR_OOM, "out of memory");
        for (int i = 0; rc == LI_OK && i < r->n_docs; i++)
            docs[i] = (li_doc){.text = r->docs[i].text, .len = r->docs[i].len};
        li_request q = {.docs = docs, .n_docs = r->n_docs, .query = r->query, .chat = true};
        if (rc == LI_OK) rc = li_request_tokenize(m, &q, &t);
    }
    int n = 0;
    if (rc == LI_OK) {
        n = li_request_tokens_count(t);
        if (n > max_n)
            rc = li_error_set(LI_ERR_LIMIT, "%s: %d prompt tokens, more than the context allows "
                              "(%d; raise -c)", path, n, max_n);
        else if (!(ids = malloc((size_t)n * sizeof *ids)))
            rc = li_error_set(LI_ERR_OOM, "out of memory");
    }
    for (int i = 0, at = 0; rc == LI_OK; i++) {
        const int32_t *part;
        int k = li_request_tokens_part(t, i, &part);
        if (k < 0) break;
        memcpy(ids + at, part, (size_t)k * sizeof *ids);
        at += k;
    }
    if (rc == LI_OK) rc = add_prompt(ps, label, ids, n);
    else free(ids);
    li_request_tokens_free(t);
    free(docs);
    rag_list_free(&l);
    return rc;
}

static int by_number(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    long nx = strtol(x, NULL, 10), ny = strtol(y, NULL, 10);
    return nx != ny ? (nx < ny ? -1 : 1) : strcmp(x, y);
}

// Every *.json of dir, in the order of their numbers (1.json, 2.json, …, 10.json).
static li_status sample_prompts(li_model *m, const char *dir, int max_n, fp8_prompts *ps) {
    DIR *d = opendir(dir);
    if (!d) return li_error_set(LI_ERR_IO, "--samples %s: cannot open the directory", dir);
    char *names[256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 256;) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_number);
    li_status rc = LI_OK;
    for (int i = 0; i < n; i++) {
        char path[4096], label[64];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(label, sizeof label, "rag sample %s", names[i]);
        if (rc == LI_OK) rc = sample_prompt(m, path, label, max_n, ps);
        free(names[i]);
    }
    if (rc == LI_OK && n == 0)
        rc = li_error_set(LI_ERR_INVALID_ARG, "--samples %s: no .json sample there", dir);
    return rc;
}

typedef struct {
    int32_t *ids;
    int n, cap;
} token_list;

static bool keep_token(void *user, int32_t tok) {
    token_list *l = user;
    if (l->n < l->cap) l->ids[l->n++] = tok;
    return true;
}

static li_status greedy(li_model *m, const fp8_prompt *p, int n_gen, token_list *out) {
    li_generate_params gp = li_generate_default_params();
    gp.n_predict = n_gen;
    gp.sampling.temperature = 0;
    gp.stop_at_eos = false;
    gp.on_token = keep_token;
    gp.user = out;
    out->n = 0;
    return li_generate(m, p->ids, p->n, &gp, NULL);
}

// The prompt logits of ref and q (n, V): top-1 agreements, the worst and mean row's relative
// error max_v |q - ref| / max_v |ref|.
static void compare_logits(const float *ref, const float *q, int n, int V, int *top1,
                           double *worst, double *mean) {
    *top1 = 0;
    *worst = *mean = 0;
    for (int t = 0; t < n; t++) {
        const float *a = ref + (size_t)t * V, *b = q + (size_t)t * V;
        int ia = 0, ib = 0;
        double amax = 0, dmax = 0;
        for (int v = 0; v < V; v++) {
            if (a[v] > a[ia]) ia = v;
            if (b[v] > b[ib]) ib = v;
            if (fabs(a[v]) > amax) amax = fabs(a[v]);
            if (fabs((double)b[v] - a[v]) > dmax) dmax = fabs((double)b[v] - a[v]);
        }
        double e = amax > 0 ? dmax / amax : dmax;
        *top1 += ia == ib;
        if (e > *worst) *worst = e;
        *mean += e / n;
    }
}

int cmd_bench_fp8(int argc, char **argv) {
    li_model_params mp = li_model_default_params();
    const char *scope = "all", *samples = NULL;
    int n_gen = 64, n_random = 0, random_len = 512;
    uint64_t seed = 1234;
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &mp.path, "model (default: the model setup fetched)"},
        {"--fp8", NULL, OPT_STR, &scope, "the FP8 scope compared with off: ffn or all (default all)"},
        {"--n-gen", "-n", OPT_INT, &n_gen, "greedy tokens generated after each prompt (default 64)"},
        {"--samples", NULL, OPT_STR, &samples,
         "directory of RAG sample JSON files (default " SAMPLES_REL ")"},
        {"--random", NULL, OPT_INT, &n_random,
         "K prompts of random token ids instead of the README's and the samples' (synth models)"},
        {"--random-len", NULL, OPT_INT, &random_len, "tokens of each random prompt (default 512)"},
        {"--seed", NULL, OPT_U64, &seed, "seed of the random prompts (default 1234)"},
        {"--ctx-size", "-c", OPT_INT, &mp.n_ctx, "context size in tokens (default: min(trained, 4096))"},
        CLI_KV_DTYPE_OPT(mp),
        CLI_DEVICE_OPTS(mp),
    };
    int n_pos;
    int r = cli_parse_args(argc, argv,
                           "usage: lazyinfer bench fp8 [-m MODEL] [--fp8 ffn|all] [-n N] "
                           "[--samples DIR | --random K [--random-len L]]",
                           opts, sizeof opts / sizeof opts[0], NULL, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (strcmp(scope, "ffn") && strcmp(scope, "all")) {
        fprintf(stderr, "lazyinfer bench fp8: --fp8 '%s': expected ffn or all\n", scope);
        return 2;
    }
    if (n_gen < 0 || n_random < 0 || random_len < 1 || mp.n_ctx < 0) {
        fprintf(stderr, "lazyinfer bench fp8: -n, --random and -c must not be negative, "
                        "--random-len must be >= 1\n");
        return 2;
    }
    if (!mp.path) mp.path = cli_default_model();
    if (n_random > 0 && mp.n_ctx == 0) mp.n_ctx = random_len + n_gen + 1;
    char buf[4096];
    if (!n_random && !samples && !(samples = cli_data_path(SAMPLES_REL, buf, sizeof buf))) {
        cli_data_missing("bench fp8", "RAG samples", SAMPLES_REL, buf,
                         "pass --samples DIR, or --random K");
        return 2;
    }
    li_model *ref = NULL, *q8 = NULL;
    if (li_model_load(&ref, &mp) != LI_OK) return cli_fail("cannot load the model");
    li_model_params mp8 = mp;
    mp8.fp8 = scope;
    if (li_model_load(&q8, &mp8) != LI_OK) {
        li_model_free(ref);
        return cli_fail("cannot load the model with FP8");
    }
    li_model_info in;
    li_model_get_info(ref, &in);
    fp8_prompts ps = {0};
    li_status rc = LI_OK;
    if (n_random > 0) {
        li_rng rng;
        li_rng_seed(&rng, seed);
        for (int k = 0; rc == LI_OK && k < n_random; k++) {
            int32_t *ids = malloc((size_t)random_len * sizeof *ids);
            if (!ids) rc = li_error_set(LI_ERR_OOM, "out of memory");
            for (int i = 0; ids && i < random_len; i++)
                ids[i] = (int32_t)(li_rng_u64(&rng) % (uint64_t)in.n_vocab_text);
            char label[64];
            snprintf(label, sizeof label, "random %d (%d tokens)", k + 1, random_len);
            if (rc == LI_OK) rc = add_prompt(&ps, label, ids, random_len);
        }
    } else {
        rc = readme_prompts(ref, &ps);
        if (rc == LI_OK) rc = sample_prompts(ref, samples, in.n_ctx - n_gen, &ps);
    }
    printf("# bench fp8: %s, --fp8 %s against off, backend %s, %d greedy tokens per prompt\n",
           mp.path, scope, mp.backend ? mp.backend : "cpu", n_gen);
    printf("| prompt | tokens | greedy tokens equal (of %d) | prompt top-1 equal | logits rel. err. "
           "max / mean |\n|---|---:|---:|---:|---:|\n", n_gen);
    token_list ta = {0}, tb = {0};
    ta.cap = tb.cap = n_gen;
    ta.ids = malloc(((size_t)n_gen + 1) * sizeof(int32_t));
    tb.ids = malloc(((size_t)n_gen + 1) * sizeof(int32_t));
    int all_equal = 0, sum_equal = 0, sum_top1 = 0, sum_rows = 0;
    double worst = 0, sum_mean = 0;
    for (int i = 0; rc == LI_OK && i < ps.n; i++) {
        const fp8_prompt *p = &ps.p[i];
        size_t nl = (size_t)p->n * in.n_vocab;
        float *la = malloc(nl * sizeof(float)), *lb = malloc(nl * sizeof(float));
        if (!la || !lb || !ta.ids || !tb.ids) rc = li_error_set(LI_ERR_OOM, "out of memory");
        if (rc == LI_OK) rc = li_eval_logits(ref, p->ids, p->n, la);
        if (rc == LI_OK) rc = li_eval_logits(q8, p->ids, p->n, lb);
        if (rc == LI_OK && n_gen > 0) rc = greedy(ref, p, n_gen, &ta);
        if (rc == LI_OK && n_gen > 0) rc = greedy(q8, p, n_gen, &tb);
        if (rc == LI_OK) {
            int eq = 0, top1;
            while (eq < ta.n && eq < tb.n && ta.ids[eq] == tb.ids[eq]) eq++;
            double w, mean;
            compare_logits(la, lb, p->n, in.n_vocab, &top1, &w, &mean);
            printf("| %s | %d | %d | %d / %d | %.4f / %.4f |\n", p->label, p->n, eq, top1, p->n,
                   w, mean);
            fflush(stdout);
            all_equal += eq == n_gen;
            sum_equal += eq;
            sum_top1 += top1;
            sum_rows += p->n;
            if (w > worst) worst = w;
            sum_mean += mean;
        }
        free(la);
        free(lb);
    }
    if (rc == LI_OK)
        printf("\nsummary: %d of %d prompts generate the same %d greedy tokens; %.1f equal before "
               "the first difference on average; prompt top-1 %.2f %%; logits relative error: "
               "worst row %.4f, mean %.4f\n",
               all_equal, ps.n, n_gen, ps.n ? (double)sum_equal / ps.n : 0,
               sum_rows ? 100.0 * sum_top1 / sum_rows : 0, worst, ps.n ? sum_mean / ps.n : 0);
    free(ta.ids);
    free(tb.ids);
    for (int i = 0; i < ps.n; i++) li_free_tokens(ps.p[i].ids);
    free(ps.p);
    li_model_free(q8);
    li_model_free(ref);
    return rc == LI_OK ? 0 : cli_fail("bench fp8");
}
