// test-llada-ref.c — lazyinfer's LLaDA forward and SAR decoder checked against the independent
// Python reference tests/ref/gen_llada_ref.py (tests/ref/README-llada.md).
//
// The reference files under tests/data/llada-ref/ are committed; this needs no Python. For the
// tiny random LLaDA HF directory tests/data/llada-ref/model and every case file in
// tests/data/llada-ref/cases/:
//   - SAR cases: li_model_load on the directory, li_dllm_generate with the case's parameters;
//     the generated tokens must equal the reference exactly, and so must NFE, the steps taken,
//     early stopping and, step by step through the trace callback, which rows each step
//     committed and to which tokens. Each case runs twice, with LaCache all off and all on
//     (the caches are exact, so the tokens must not change), and all cases run once more
//     together through li_dllm_generate_batch (each request must commit what it does alone).
//   - Logits: the step-1 block-row logits of every SAR case (conditional pass, and the
//     unconditional one for CFG cases) and the full-canvas logits of the single-forward cases,
//     through the model layer's li_llada_forward (src/model/llada.h: the public API has no call
//     that returns one denoising step's logits), with LaCache off and all on.
// The reference chose every case so that each decision it takes (x0 argmax, commit ranking,
// thresholds, DPad draws) has a relative margin > 1e-4, far above fp32-vs-fp64 differences
// (~1e-6): a token mismatch is a bug, not a near-tie. On a mismatch the step's recorded margins
// are printed so that a reader can check that claim.
// Not here: LaCache/FP8 exactness on their own (tests/test-llada.c), the schedule and selection
// helpers (tests/test-dllm.c).
//
// Environment: LI_LLADA_REF_DIR overrides the case folder (default tests/data/llada-ref/cases,
// relative to the repository root where tests/run.sh runs the tests); LI_REF_ROOT the folder
// model paths are relative to (default "."); LI_REF_ONLY=substring runs only matching cases.
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "lazyinfer.h"
#include "model/llada.h"
#include "test.h"

// Logit tolerance, max|a-b| / max|b| over a logit matrix. Both sides start from the same fp32
// weights; the reference computes in float64, the C side in fp32 with its own summation order.
// gen_llada_ref.py measured the same forward in float32 numpy against float64 at 9.8e-7 ..
// 2.1e-6 ("fp32_numpy_vs_fp64_max_rel" in the forward cases; lazyinfer's CPU backend: 1.8e-6
// when this was written), so 1e-4 leaves ~50× headroom for a different summation order, while
// the mistakes it measured ("sensitivity_max_rel") move these logits 370× .. 15000× more:
// rms_norm_eps 1e-6 for 1e-5 0.037 .. 0.11, RoPE theta 10000 for 50000 0.6 .. 0.84, contiguous
// positions instead of DPad's kept ones 0.19, a causal mask 0.66 .. 1.5, interleaved RoPE
// 1.3 .. 1.4, gate and up swapped 0.74 .. 1.5.
#define REL_TOL 1e-4
// The reference keeps only cases whose every decision margin is > 1e-4 relative (MARGIN_MIN in
// gen_llada_ref.py); a mismatch at a step whose margin is below 1e-5 would be a genuine fp32
// near-tie and is reported as such (it cannot happen with the committed files).
#define NEAR_TIE_REL 1e-5
#define MAX_CASES 64

typedef struct {
    int block, step, nfe;
    int n_commit;
    struct {
        int32_t row, tok; // row: a generated-part index, ascending along the array
    } * commit;           // (n_commit)
    double x0_margin, conf_margin;
} ref_step;

typedef struct {
    char name[256];
    char model[1024];
    int32_t mask, eos, eot;
    li_dllm_params params;
    int32_t *prompt;
    int n_prompt;
    int32_t *expected;  // (gen_length)
    int nfe, steps;
    bool stopped_early;
    ref_step *trace;
    int n_trace;
    int step1_lo, step1_hi;  // canvas rows of block 1
    float *step1;            // (B, V) conditional logits of block 1 step 1
    float *step1_un;         // (B, V) unconditional ones (CFG cases), else NULL
    int32_t *rows0;          // (n_rows0) canvas rows of block 1 (DPad drops some suffix rows)
    int n_rows0;
    int n_vocab;
} sar_case;

typedef struct {
    char name[256];
    char model[1024];
    int32_t *tokens, *pos;
    int n_tokens;
    int block_lo, block_hi;
    float *logits;  // (T, V)
    int n_vocab;
} fwd_case;

// ---- reading the case files --------------------------------------------------------------------

static long read_f32_file(const char *path, float **out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "  %s: %s\n", path, strerror(errno));
        return -1;
    }
    long n = -1;
    unsigned char *raw = NULL;
    float *v = NULL;
    long bytes = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (bytes <= 0 || bytes % 4 != 0 || fseek(f, 0, SEEK_SET) != 0) goto done;
    raw = malloc((size_t)bytes);
    v = malloc((size_t)bytes);
    if (!raw || !v || fread(raw, 1, (size_t)bytes, f) != (size_t)bytes) goto done;
    for (long i = 0; i < bytes / 4; i++) {  // little-endian on disk whatever the host is
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                     (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&v[i], &u, 4);
    }
    *out = v;
    v = NULL;
    n = bytes / 4;
done:
    if (n < 0) fprintf(stderr, "  %s: size %ld, not a readable float32 file\n", path, bytes);
    free(v);
    free(raw);
    fclose(f);
    return n;
}

// Reads the float32 file `name` next to the case and checks it has exactly n values.
static float *read_logits(const char *dir, const char *name, long n) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float *v = NULL;
    long got = read_f32_file(path, &v);
    if (got != n) {
        if (got >= 0) fprintf(stderr, "  %s: %ld values, expected %ld\n", path, got, n);
        free(v);
        return NULL;
    }
    return v;
}

static int32_t *int_array(const json_t *a, int *n_out) {
    if (!json_is_array(a)) return NULL;
    size_t n = json_array_size(a);
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e)) {
            free(v);
            return NULL;
        }
        v[i] = (int32_t)json_integer_value(e);
    }
    *n_out = (int)n;
    return v;
}

static double num(const json_t *o, const char *key, double dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static bool flag(const json_t *o, const char *key) {
    return json_is_true(json_object_get(o, key));
}

static void read_ids(const json_t *root, int32_t *mask, int32_t *eos, int32_t *eot) {
    json_t *ids = json_object_get(root, "ids");
    *mask = (int32_t)num(ids, "mask", -1);
    *eos = (int32_t)num(ids, "eos", -1);
    *eot = (int32_t)num(ids, "eot", -1);
}

static void sar_case_free(sar_case *c) {
    for (int i = 0; i < c->n_trace; i++)
        free(c->trace[i].commit);
    free(c->trace);
    free(c->prompt);
    free(c->expected);
    free(c->step1);
    free(c->step1_un);
    free(c->rows0);
    memset(c, 0, sizeof *c);
}

static void fwd_case_free(fwd_case *c) {
    free(c->tokens);
    free(c->pos);
    free(c->logits);
    memset(c, 0, sizeof *c);
}

// The case's parameters as li_dllm_params (callbacks and LaCache left to the caller).
static bool read_params(const json_t *p, li_dllm_params *o) {
    *o = li_dllm_default_params();
    o->gen_length = (int)num(p, "gen_length", -1);
    o->block_length = (int)num(p, "block_length", -1);
    o->steps = (int)num(p, "steps", -1);
    const char *rm = json_string_value(json_object_get(p, "remasking"));
    if (!rm) return false;
    if (strcmp(rm, "low_confidence") == 0) {
        o->remasking = LI_DLLM_REMASK_LOW_CONFIDENCE;
    } else if (strcmp(rm, "random") == 0) {
        o->remasking = LI_DLLM_REMASK_RANDOM;
    } else {
        return false;
    }
    o->temperature = num(p, "temperature", 0);
    o->cfg = num(p, "cfg_scale", 0);
    o->threshold = num(p, "threshold", 0);  // JSON null: off
    o->factor = num(p, "factor", 0);
    o->commit_per_step = 0;
    json_t *dp = json_object_get(p, "dpad");
    o->dpad = json_is_object(dp);
    if (o->dpad) {
        o->dpad_window = (int)num(dp, "window", -1);
        o->dpad_k_sigma = num(dp, "k_sigma", -1);
        o->dpad_scale = num(dp, "scale", -1);
    }
    o->early_stop = flag(p, "early_stop");
    o->logits_eos_inf = flag(p, "logits_eos_inf");
    o->confidence_eos_eot_inf = flag(p, "confidence_eos_eot_inf");
    json_t *seed = json_object_get(p, "seed");
    if (!json_is_integer(seed)) return false;
    o->seed = (uint64_t)json_integer_value(seed);
    o->lacache = 0;
    o->fp8 = false;
    o->fa_tile = 0;
    o->on_step = NULL;
    o->user = NULL;
    return o->gen_length > 0 && o->block_length > 0 && o->steps > 0;
}

static bool read_trace(const json_t *tr, int P, sar_case *c) {
    if (!json_is_array(tr)) return false;
    c->n_trace = (int)json_array_size(tr);
    c->trace = calloc(c->n_trace ? (size_t)c->n_trace : 1, sizeof *c->trace);
    if (!c->trace) return false;
    for (int i = 0; i < c->n_trace; i++) {
        json_t *s = json_array_get(tr, (size_t)i);
        ref_step *r = &c->trace[i];
        r->block = (int)num(s, "block", -1);
        r->step = (int)num(s, "step", -1);
        r->nfe = (int)num(s, "nfe", -1);
        r->x0_margin = num(s, "x0_margin", INFINITY);
        r->conf_margin = num(s, "conf_margin", INFINITY);
        json_t *cm = json_object_get(s, "committed");  // [[row, token, confidence], ...]
        if (!json_is_array(cm)) return false;
        r->n_commit = (int)json_array_size(cm);
        r->commit = malloc((r->n_commit ? (size_t)r->n_commit : 1) * sizeof *r->commit);
        if (!r->commit) return false;
        for (int j = 0; j < r->n_commit; j++) {
            json_t *e = json_array_get(cm, (size_t)j);
            r->commit[j].row = (int32_t)json_integer_value(json_array_get(e, 0)) - P;
            r->commit[j].tok = (int32_t)json_integer_value(json_array_get(e, 1));
        }
        if (i == 0) {  // block 1's canvas rows: all rows before the block's end + DPad's kept
            json_t *dp = json_object_get(s, "dpad");
            int hi = c->step1_hi;
            int n_kept = 0;
            int32_t *kept = dp ? int_array(json_object_get(dp, "kept"), &n_kept) : NULL;
            if (dp && !kept) return false;
            int n_all = dp ? hi + n_kept : P + c->params.gen_length;
            c->rows0 = malloc((size_t)n_all * sizeof *c->rows0);
            if (!c->rows0) {
                free(kept);
                return false;
            }
            for (int k = 0; k < n_all; k++) c->rows0[k] = k < hi || !dp ? k : kept[k - hi];
            c->n_rows0 = n_all;
            free(kept);
        }
    }
    return true;
}

static bool load_sar(const char *dir, json_t *root, const char *name, sar_case *c) {
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->model, sizeof c->model, "%s",
             json_string_value(json_object_get(root, "model")) ? json_string_value(
                 json_object_get(root, "model")) : "");
    read_ids(root, &c->mask, &c->eos, &c->eot);
    if (!read_params(json_object_get(root, "params"), &c->params)) return false;
    c->prompt = int_array(json_object_get(root, "prompt_ids"), &c->n_prompt);
    if (!c->prompt) return false;
    json_t *ex = json_object_get(root, "expected");
    int n_gen = 0;
    c->expected = int_array(json_object_get(ex, "generated"), &n_gen);
    if (!c->expected || n_gen != c->params.gen_length) return false;
    c->nfe = (int)num(ex, "nfe", -1);
    c->steps = (int)num(ex, "steps", -1);
    c->stopped_early = flag(ex, "stopped_early");
    json_t *s1 = json_object_get(root, "step1");
    json_t *rows = json_object_get(s1, "rows");
    c->step1_lo = (int)json_integer_value(json_array_get(rows, 0));
    c->step1_hi = (int)json_integer_value(json_array_get(rows, 1));
    c->n_vocab = (int)num(s1, "n_vocab", -1);
    long n = (long)(c->step1_hi - c->step1_lo) * c->n_vocab;
    const char *f = json_string_value(json_object_get(s1, "logits_file"));
    if (n <= 0 || !f || !(c->step1 = read_logits(dir, f, n))) return false;
    f = json_string_value(json_object_get(s1, "uncond_logits_file"));
    if (f && !(c->step1_un = read_logits(dir, f, n))) return false;
    return read_trace(json_object_get(root, "trace"), c->n_prompt, c);
}

static bool load_fwd(const char *dir, json_t *root, const char *name, fwd_case *c) {
    snprintf(c->name, sizeof c->name, "%s", name);
    const char *model = json_string_value(json_object_get(root, "model"));
    snprintf(c->model, sizeof c->model, "%s", model ? model : "");
    int n_pos = 0;
    c->tokens = int_array(json_object_get(root, "tokens"), &c->n_tokens);
    c->pos = int_array(json_object_get(root, "pos"), &n_pos);
    if (!c->tokens || !c->pos || n_pos != c->n_tokens || c->n_tokens < 1) return false;
    json_t *blk = json_object_get(root, "block");
    c->block_lo = (int)json_integer_value(json_array_get(blk, 0));
    c->block_hi = (int)json_integer_value(json_array_get(blk, 1));
    c->n_vocab = (int)num(root, "n_vocab", -1);
    const char *f = json_string_value(json_object_get(root, "logits_file"));
    long n = (long)c->n_tokens * c->n_vocab;
    return n > 0 && f && (c->logits = read_logits(dir, f, n)) != NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Sorted case names (without ".json") of dir matching LI_REF_ONLY. Returns the count.
static int list_cases(const char *dir, char **names, int max) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    const char *only = getenv("LI_REF_ONLY");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        if (only && !strstr(e->d_name, only)) continue;
        names[n] = strndup(e->d_name, len - 5);
        if (names[n]) n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    return n;
}

// ---- the trace recorder ------------------------------------------------------------------------

typedef struct {
    int block, step_in_block, step, nfe, n_committed; // li_dllm_step's
} rec_step;

typedef struct {
    int n, cap, gen_length;
    rec_step *steps; // (n)
    int32_t *gens;  // (n, gen_length) snapshots of the generated part after each step
    bool oom;
} recorder;

static void rec_free(recorder *r) {
    free(r->steps);
    free(r->gens);
    memset(r, 0, sizeof *r);
}

static bool grow(void **p, size_t elem, int cap) {
    void *q = realloc(*p, elem * (size_t)cap);
    if (!q) return false;
    *p = q;
    return true;
}

static void record(recorder *r, const li_dllm_step *s) {
    if (r->oom) return;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        if (!grow((void **)&r->steps, sizeof *r->steps, cap) ||
            !grow((void **)&r->gens, sizeof(int32_t) * (size_t)s->gen_length, cap)) {
            r->oom = true;
            return;
        }
        r->cap = cap;
    }
    r->gen_length = s->gen_length;
    r->steps[r->n] = (rec_step){.block = s->block,
                                .step_in_block = s->step_in_block,
                                .step = s->step,
                                .nfe = s->nfe,
                                .n_committed = s->n_committed};
    memcpy(r->gens + (size_t)r->n * s->gen_length, s->gen, sizeof(int32_t) * s->gen_length);
    r->n++;
}

static void on_step(void *user, const li_dllm_step *s) {
    recorder *recs = user;  // one per request of the batch
    record(&recs[s->request], s);
}

// ---- comparisons -------------------------------------------------------------------------------

static void print_tokens(const char *what, const int32_t *t, int n) {
    fprintf(stderr, "    %-9s", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", t[i]);
    fprintf(stderr, "\n");
}

// Checks one run of case c (out, stats, trace) against the reference, inside the current test.
static void compare_run(const sar_case *c, const int32_t *out, const li_dllm_stats *st,
                        const recorder *rec) {
    int G = c->params.gen_length;
    int first_diff = -1;
    for (int i = 0; i < G && first_diff < 0; i++)
        if (out[i] != c->expected[i]) first_diff = i;
    CHECK(first_diff < 0, "generated tokens differ from position %d", first_diff);
    if (first_diff >= 0) {
        print_tokens("expected", c->expected, G);
        print_tokens("got", out, G);
    }
    if (st) {
        CHECK(st->nfe == c->nfe, "NFE %d, reference %d", st->nfe, c->nfe);
        CHECK(st->steps == c->steps, "steps %d, reference %d", st->steps, c->steps);
        CHECK(st->early_stopped == c->stopped_early, "early_stopped %d, reference %d",
              st->early_stopped, c->stopped_early);
    }
    CHECK(!rec->oom, "trace recorder out of memory");
    CHECK(rec->n == c->n_trace, "trace callback called %d times, reference steps %d", rec->n,
          c->n_trace);
    // Step by step: which rows went from mask to a token, and to which token.
    int32_t *prev = malloc((size_t)G * sizeof *prev);
    int32_t *rows = malloc((size_t)G * sizeof *rows);
    if (!prev || !rows) {
        CHECK(0, "out of memory");
        free(prev);
        free(rows);
        return;
    }
    for (int i = 0; i < G; i++) prev[i] = c->mask;
    int n_steps = rec->n < c->n_trace ? rec->n : c->n_trace;
    for (int s = 0; s < n_steps; s++) {
        const ref_step *r = &c->trace[s];
        const rec_step *o = &rec->steps[s]; // ours
        const int32_t *g = rec->gens + (size_t)s * G;
        int n = 0;
        bool same = o->block == r->block && o->step_in_block == r->step && o->nfe == r->nfe &&
                    o->step == s + 1;
        // Early stop: the last step's snapshot may already show the rows after its block
        // filled with EOS; that fill is not a commit (the final tokens are checked above).
        int fill_from = c->stopped_early && s == rec->n - 1
                            ? (r->block + 1) * c->params.block_length : G;
        for (int i = 0; i < G; i++) {
            if (i >= fill_from && g[i] == c->eos && prev[i] == c->mask) continue;
            if (g[i] != prev[i]) {
                if (prev[i] != c->mask || n >= r->n_commit || r->commit[n].row != i ||
                    r->commit[n].tok != g[i])
                    same = false;
                rows[n++] = i;
            }
        }
        same = same && n == r->n_commit && o->n_committed == n;
        if (!same) {
            double m = fmin(r->x0_margin, r->conf_margin);
            CHECK(0, "step %d (block %d step %d): committed differs from the reference; the "
                  "reference's decision margins here: x0 %.3g, confidence %.3g (relative) — %s",
                  s + 1, r->block, r->step, r->x0_margin, r->conf_margin,
                  m < NEAR_TIE_REL ? "an fp32 near-tie" : "not a near-tie: a bug");
            fprintf(stderr,
                    "    ours: block %d step %d nfe %d n_committed %d rows/tokens:", o->block,
                    o->step_in_block, o->nfe, o->n_committed);
            for (int i = 0; i < n; i++) fprintf(stderr, " %d:%d", rows[i], g[rows[i]]);
            fprintf(stderr, "\n    reference: block %d step %d nfe %d rows/tokens:", r->block,
                    r->step, r->nfe);
            for (int i = 0; i < r->n_commit; i++)
                fprintf(stderr, " %d:%d", r->commit[i].row, r->commit[i].tok);
            fprintf(stderr, "\n");
            break;  // later steps follow from a different canvas
        }
        memcpy(prev, g, (size_t)G * sizeof *prev);
    }
    free(prev);
    free(rows);
}

// max|a-b| / max|b| over n values.
static double max_rel(const float *a, const float *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d;  // NaN propagates
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

// ---- the model layer's forward (logit checks) --------------------------------------------------

typedef struct {
    li_backend *be;
    li_llada *m;
    li_llada_scratch *s;
    li_llada_cache *cache;
} fwd_model;

static void fwd_model_free(fwd_model *f) {
    li_llada_cache_free(f->cache);
    li_llada_scratch_free(f->s);
    li_llada_free(f->m);
    li_backend_free(f->be);
    memset(f, 0, sizeof *f);
}

static li_status fwd_model_load(fwd_model *f, const char *path) {
    memset(f, 0, sizeof *f);
    li_status st = li_backend_cpu_init(&f->be, 0);
    if (st == LI_OK) st = li_llada_load(&f->m, path, f->be, false);
    if (st == LI_OK) st = li_llada_scratch_init(&f->s, f->m, 256);
    if (st == LI_OK) st = li_llada_cache_init(&f->cache, f->m, 256);
    if (st != LI_OK) fwd_model_free(f);
    return st;
}

// Logits (hi - lo, V) of canvas rows [lo, hi) for tokens/pos (T), LaCache as given.
static li_status fwd_logits(fwd_model *f, const li_lacache *lc, const int32_t *tokens,
                            const int32_t *pos, int T, int lo, int hi, float *out) {
    li_llada_canvas cv = {.n_tokens = T, .tokens = tokens, .pos = pos, .block_lo = lo,
                          .block_hi = hi, .block_start = true};
    li_llada_cache *caches[1] = {f->cache};
    float *outs[1] = {out};
    return li_llada_forward(f->m, lc, f->s, caches, &cv, 1, outs, NULL);
}

static const li_lacache lacache_off = {0};
static const li_lacache lacache_all = {.embed = true, .rope = true, .fa = true, .trunc = true};

static void check_logits(const char *what, const float *got, const float *ref, long n,
                         double *worst) {
    double rel = max_rel(got, ref, n);
    CHECK(!test_has_nan(got, n), "%s: NaN in the logits", what);
    CHECK(rel <= REL_TOL, "%s: max rel error %.3g > %.0e", what, rel, REL_TOL);
    if (rel > *worst) *worst = rel;
}

static void test_forward_case(fwd_model *f, const fwd_case *c, double *worst) {
    char name[400];
    int T = c->n_tokens, V = c->n_vocab, Bn = c->block_hi - c->block_lo;
    float *got = malloc((size_t)T * V * sizeof *got);
    snprintf(name, sizeof name, "llada-ref forward %.200s (T %d, all rows, LaCache off)", c->name, T);
    TEST_BEGIN(name);
    li_status st = got ? fwd_logits(f, &lacache_off, c->tokens, c->pos, T, 0, T, got)
                       : LI_ERR_OOM;
    CHECK(st == LI_OK, "li_llada_forward: %s", li_last_error());
    if (st == LI_OK) check_logits("full canvas", got, c->logits, (long)T * V, worst);
    TEST_END();
    snprintf(name, sizeof name, "llada-ref forward %.200s (block rows [%d, %d), LaCache all)",
             c->name, c->block_lo, c->block_hi);
    TEST_BEGIN(name);
    st = got ? fwd_logits(f, &lacache_all, c->tokens, c->pos, T, c->block_lo, c->block_hi, got)
             : LI_ERR_OOM;
    CHECK(st == LI_OK, "li_llada_forward: %s", li_last_error());
    if (st == LI_OK)
        check_logits("block rows", got, c->logits + (size_t)c->block_lo * V, (long)Bn * V, worst);
    TEST_END();
    free(got);
}

// Block 1, step 1 of a SAR case: the canvas is the prompt and masks (DPad: minus the dropped
// suffix rows), positions are the original rows.
static void test_step1_logits(fwd_model *f, const sar_case *c, double *worst) {
    char name[400];
    int T = c->n_rows0, V = c->n_vocab;
    int lo = c->step1_lo, hi = c->step1_hi, Bn = hi - lo;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    float *got = malloc((size_t)Bn * V * sizeof *got);
    snprintf(name, sizeof name, "llada-ref step-1 logits %.200s (canvas %d rows%s)", c->name, T,
             c->step1_un ? ", cond + uncond" : "");
    TEST_BEGIN(name);
    if (!tok || !got) {
        CHECK(0, "out of memory");
    } else {
        for (int i = 0; i < T; i++) tok[i] = c->rows0[i] < c->n_prompt ? c->prompt[c->rows0[i]]
                                                                        : c->mask;
        for (int pass = 0; pass < (c->step1_un ? 2 : 1); pass++) {
            if (pass == 1)  // CFG's unconditional canvas: every prompt row masked
                for (int i = 0; i < c->n_prompt; i++) tok[i] = c->mask;
            const float *ref = pass ? c->step1_un : c->step1;
            for (int lcv = 0; lcv < 2; lcv++) {
                li_status st = fwd_logits(f, lcv ? &lacache_all : &lacache_off, tok, c->rows0, T,
                                          lo, hi, got);
                CHECK(st == LI_OK, "li_llada_forward: %s", li_last_error());
                if (st != LI_OK) break;
                char what[64];
                snprintf(what, sizeof what, "%s, LaCache %s", pass ? "uncond" : "cond",
                         lcv ? "all" : "off");
                check_logits(what, got, ref, (long)Bn * V, worst);
            }
        }
    }
    TEST_END();
    free(tok);
    free(got);
}

// ---- main --------------------------------------------------------------------------------------

static void run_single(li_model *m, const sar_case *c, unsigned lacache) {
    char name[400];
    snprintf(name, sizeof name, "llada-ref sar %.200s (LaCache %s)", c->name,
             lacache ? "all" : "off");
    TEST_BEGIN(name);
    recorder rec = {0};
    li_dllm_params p = c->params;
    p.lacache = lacache;
    p.on_step = on_step;
    p.user = &rec;
    int32_t *out = malloc((size_t)p.gen_length * sizeof *out);
    li_dllm_stats st;
    memset(&st, 0, sizeof st);
    li_status rc = out ? li_dllm_generate(m, c->prompt, c->n_prompt, &p, out, &st) : LI_ERR_OOM;
    CHECK(rc == LI_OK, "li_dllm_generate: %s: %s", li_status_str(rc), li_last_error());
    if (rc == LI_OK) compare_run(c, out, &st, &rec);
    TEST_END();
    free(out);
    rec_free(&rec);
}

static void run_batch(li_model *m, sar_case *cases, int n) {
    char name[128];
    snprintf(name, sizeof name, "llada-ref sar batch of all %d cases (LaCache all)", n);
    li_dllm_request *reqs = calloc((size_t)n, sizeof *reqs);
    recorder *recs = calloc((size_t)n, sizeof *recs);
    bool ok = reqs && recs;
    for (int i = 0; ok && i < n; i++) {
        reqs[i].prompt = cases[i].prompt;
        reqs[i].n_prompt = cases[i].n_prompt;
        reqs[i].params = cases[i].params;
        reqs[i].params.lacache = LI_DLLM_LACACHE_ALL;
        reqs[i].params.on_step = on_step;
        reqs[i].params.user = recs;
        reqs[i].out = malloc((size_t)cases[i].params.gen_length * sizeof(int32_t));
        ok = reqs[i].out != NULL;
    }
    li_status rc = ok ? li_dllm_generate_batch(m, reqs, n, NULL) : LI_ERR_OOM;
    for (int i = 0; i < n; i++) {
        char cname[600];
        snprintf(cname, sizeof cname, "%.120s: request %d %.200s", name, i, cases[i].name);
        TEST_BEGIN(cname);
        CHECK(rc == LI_OK, "li_dllm_generate_batch: %s: %s", li_status_str(rc), li_last_error());
        if (rc == LI_OK) compare_run(&cases[i], reqs[i].out, &reqs[i].stats, &recs[i]);
        TEST_END();
    }
    for (int i = 0; reqs && i < n; i++) free(reqs[i].out);
    for (int i = 0; recs && i < n; i++) rec_free(&recs[i]);
    free(reqs);
    free(recs);
}

int main(void) {
    const char *dir = getenv("LI_LLADA_REF_DIR");
    if (!dir) dir = "tests/data/llada-ref/cases";
    const char *root = getenv("LI_REF_ROOT");
    if (!root) root = ".";
    char *names[MAX_CASES];
    int n_names = list_cases(dir, names, MAX_CASES);
    TEST_BEGIN("llada-ref case files");
    CHECK(n_names > 0, "no case files in %s (%s)", dir, n_names < 0 ? strerror(errno) : "empty");
    TEST_END();
    if (n_names <= 0) return test_summary();

    static sar_case sar[MAX_CASES];
    static fwd_case fwd[MAX_CASES];
    int n_sar = 0, n_fwd = 0;
    char model_rel[1024] = "";
    TEST_BEGIN("llada-ref case files parse");
    for (int i = 0; i < n_names; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s.json", dir, names[i]);
        json_error_t err;
        json_t *j = json_load_file(path, 0, &err);
        CHECK(j != NULL, "%s: %s (line %d)", path, err.text, err.line);
        if (!j) continue;
        bool is_fwd = json_is_string(json_object_get(j, "kind")) &&
                      strcmp(json_string_value(json_object_get(j, "kind")), "forward") == 0;
        bool ok = is_fwd ? load_fwd(dir, j, names[i], &fwd[n_fwd])
                         : load_sar(dir, j, names[i], &sar[n_sar]);
        if (ok)
            snprintf(model_rel, sizeof model_rel, "%s",
                     is_fwd ? fwd[n_fwd++].model : sar[n_sar++].model);
        else if (is_fwd)
            fwd_case_free(&fwd[n_fwd]);
        else
            sar_case_free(&sar[n_sar]);
        CHECK(ok, "%s: malformed case file", path);
        json_decref(j);
    }
    TEST_END();
    for (int i = 0; i < n_names; i++) free(names[i]);

    // All cases share one checkpoint (the generator writes one).
    char model_path[2048];
    snprintf(model_path, sizeof model_path, "%s/%s", root, model_rel);
    for (int i = 0; i < n_sar; i++)
        if (strcmp(sar[i].model, model_rel) != 0)
            fprintf(stderr, "  %s: model %s differs from %s\n", sar[i].name, sar[i].model,
                    model_rel);

    li_model_params mp = li_model_default_params();
    mp.path = model_path;
    li_model *m = NULL;
    li_status rc = li_model_load(&m, &mp);
    TEST_BEGIN("llada-ref li_model_load + special tokens");
    CHECK(rc == LI_OK, "li_model_load(%s): %s: %s", model_path, li_status_str(rc),
          li_last_error());
    if (rc == LI_OK) {
        li_model_info info;
        li_model_get_info(m, &info);
        CHECK(strcmp(info.arch, "llada") == 0, "arch '%s'", info.arch);
        // The shape as config.json states it (LLaDA's key names; mlp_ratio is a decoy).
        char cfg_path[2100];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", model_path);
        json_error_t err;
        json_t *cfg = json_load_file(cfg_path, 0, &err);
        CHECK(cfg != NULL, "%s: %s", cfg_path, err.text);
        if (cfg) {
            int L = (int)num(cfg, "n_layers", -1), D = (int)num(cfg, "d_model", -1);
            int F = (int)num(cfg, "mlp_hidden_size", -1), H = (int)num(cfg, "n_heads", -1);
            int Hkv = (int)num(cfg, "n_kv_heads", -1), V = (int)num(cfg, "embedding_size", -1);
            CHECK(info.n_layer == L && info.n_embd == D && info.n_ff == F && info.n_head == H &&
                  info.n_head_kv == Hkv && info.head_dim == D / H && info.n_vocab == V,
                  "shape L %d D %d F %d H %d/%d Dh %d V %d, config.json says %d %d %d %d/%d %d "
                  "%d", info.n_layer, info.n_embd, info.n_ff, info.n_head, info.n_head_kv,
                  info.head_dim, info.n_vocab, L, D, F, H, Hkv, D / H, V);
            CHECK(fabs(info.rope_theta - num(cfg, "rope_theta", -1)) < 1e-3 &&
                  fabs(info.rms_eps - num(cfg, "rms_norm_eps", -1)) < 1e-9,
                  "rope_theta %g rms_eps %g", info.rope_theta, info.rms_eps);
            json_decref(cfg);
        }
        CHECK(!info.tied_embeddings, "LLaDA's head is untied");
        int32_t mask = -2, eos = -2, eot = -2;
        li_status st = li_dllm_special_tokens(m, &mask, &eos, &eot);
        CHECK(st == LI_OK, "li_dllm_special_tokens: %s", li_last_error());
        for (int i = 0; i < n_sar; i++) {
            CHECK(mask == sar[i].mask && eos == sar[i].eos && eot == sar[i].eot,
                  "%s: special ids mask/eos/eot %d/%d/%d, reference %d/%d/%d", sar[i].name,
                  mask, eos, eot, sar[i].mask, sar[i].eos, sar[i].eot);
        }
    }
    TEST_END();

    if (rc == LI_OK) {
        for (int i = 0; i < n_sar; i++) {
            run_single(m, &sar[i], 0);
            run_single(m, &sar[i], LI_DLLM_LACACHE_ALL);
        }
        if (n_sar > 1) run_batch(m, sar, n_sar);
    }
    li_model_free(m);

    // Logits through the model layer.
    fwd_model f;
    rc = fwd_model_load(&f, model_path);
    TEST_BEGIN("llada-ref li_llada_load (model layer)");
    CHECK(rc == LI_OK, "%s: %s", li_status_str(rc), li_last_error());
    TEST_END();
    if (rc == LI_OK) {
        double worst = 0;
        for (int i = 0; i < n_fwd; i++) test_forward_case(&f, &fwd[i], &worst);
        for (int i = 0; i < n_sar; i++) test_step1_logits(&f, &sar[i], &worst);
        fprintf(stderr, "llada-ref: worst logit max rel error %.3g (tolerance %.0e)\n", worst,
                REL_TOL);
        fwd_model_free(&f);
    }
    for (int i = 0; i < n_sar; i++) sar_case_free(&sar[i]);
    for (int i = 0; i < n_fwd; i++) fwd_case_free(&fwd[i]);
    return test_summary();
}
