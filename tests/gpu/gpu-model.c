// gpu-model.c — whole-model check of the CUDA backend against the CPU (make CUDA=1 gpu-check).
//
// For tiny checkpoints from tests/data/ref (HF directories: every GQA ratio and RoPE scaling of
// the reference suite) and the synthetic test models, both backends load the same weights (the
// CPU oracle holds the GPU's bf16 matrices: cpu-devsim-bf16) and:
//   1. logits of every position of a random prompt (li_eval_logits): NMSE GPU vs CPU <= 1e-3.
//      The GPU also rounds matmul inputs (and prefill attention's Q, K, V, P) to bf16 (8
//      significant bits, ~2^-9 relative per element). Rounding the weights alone the same way
//      moved these models' logits by NMSE 1e-5..4e-4 (cpu-devsim-bf16 vs cpu); the activations'
//      rounding is a perturbation of the same size: measured on the H200 1e-5..3e-4 (the tiny HF
//      checkpoints, whose logits are larger, at the top). A wrong op gives NMSE ~1e-2..1.
//   2. teacher-forced argmax over the CPU's greedy continuation: the GPU picks the CPU's token at
//      every step, except where the CPU's top-2 margin is within the logit error (a near tie:
//      allowed, counted and printed);
//   3. free-running greedy generation: the same tokens as the CPU up to the first near tie (of
//      the prefill, or where the decode path parts, of the CPU's own margin).
// Without a usable GPU every case is skipped with the reason (exit 0).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lazyinfer.h"
#include "../test.h"

#define NMSE_TOL 1e-3
// The oracle is the CPU with the GPU's bf16 weights (cpu-devsim-bf16), so the error left is the
// GPU's own: matmul inputs rounded to bf16 and other summation orders.
// LI_TEST_BACKEND=cpu-devsim LI_TEST_ORACLE=cpu runs the same checks with the CPU standing in for
// the GPU (the device data path: weights moved, index arrays staged): CI does, and expects
// bit-identical logits (nmse 0).
static const char *g_backend = "cuda", *g_oracle = "cpu-devsim-bf16";
// Both sides hold their KV pool as LI_TEST_KV_DTYPE says (default bf16, the GPU's default; the
// CPU stores bf16 the same way), so the comparison is of the compute, not of the pool's precision.
static const char *g_kv_dtype = "bf16";
static bool g_exact;
enum { N_PROMPT = 45, N_GEN = 24, MAX_V = 1 << 17 };

typedef struct {
    int32_t toks[N_GEN];
    test_tokens t;  // into toks
} collect;

// Greedy parameters of N_GEN tokens into *c.
static li_generate_params greedy_params(collect *c) {
    c->t = (test_tokens){c->toks, N_GEN, 0};
    return test_greedy_params(N_GEN, &c->t);
}

static li_model *load_fp8(const char *path, const char *backend, int max_seqs, const char *fp8) {
    li_model_params p = li_model_default_params();
    p.path = path;
    p.backend = backend;
    p.n_ctx = 256;
    p.max_seqs = max_seqs;
    p.kv_dtype = g_kv_dtype;
    p.fp8 = fp8;
    li_model *m = NULL;
    if (li_model_load(&m, &p) != LI_OK) {
        fprintf(stderr, "  load %s on %s: %s\n", path, backend, li_last_error());
        return NULL;
    }
    return m;
}
static li_model *load_seqs(const char *path, const char *backend, int max_seqs) {
    return load_fp8(path, backend, max_seqs, NULL);
}
static li_model *load(const char *path, const char *backend) { return load_seqs(path, backend, 1); }

static li_status greedy(li_model *m, const int32_t *prompt, int n, collect *out) {
    li_generate_params g = greedy_params(out);
    return li_generate(m, prompt, n, &g, NULL);
}

static void check_model(const char *path, li_rng *rng) {
    char name[256];
    snprintf(name, sizeof name, "%s: %s logits and greedy tokens = %s", path, g_backend, g_oracle);
    TEST_BEGIN(name);
    li_model *cpu = load(path, g_oracle), *gpu = cpu ? load(path, g_backend) : NULL;
    CHECK(cpu && gpu, "load failed");
    if (!cpu || !gpu) {
        li_model_free(cpu);
        li_model_free(gpu);
        TEST_END();
        return;
    }
    li_model_info in;
    li_model_get_info(cpu, &in);
    int V = in.n_vocab, N = N_PROMPT + N_GEN;
    int32_t ids[N_PROMPT + N_GEN];
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)(li_rng_u64(rng) % (uint64_t)(V < 256 ? V : 256));
    // 3. free-running greedy on both
    collect gc, gg;
    li_status rc = greedy(cpu, ids, N_PROMPT, &gc);
    CHECK(rc == LI_OK && gc.t.n == N_GEN, "cpu generate: %s", li_last_error());
    rc = greedy(gpu, ids, N_PROMPT, &gg);
    CHECK(rc == LI_OK && gg.t.n == N_GEN, "gpu generate: %s", li_last_error());
    // 1 + 2. logits over the prompt and the CPU's continuation
    memcpy(ids + N_PROMPT, gc.toks, sizeof gc.toks);
    float *lc = malloc((size_t)N * V * sizeof(float)), *lg = malloc((size_t)N * V * sizeof(float));
    CHECK(lc && lg, "out of memory");
    if (lc && lg && li_eval_logits(cpu, ids, N, lc) == LI_OK &&
        li_eval_logits(gpu, ids, N, lg) == LI_OK) {
        double e = test_nmse(lg, lc, (long)N * V), max_err = 0;
        for (long i = 0; i < (long)N * V; i++) {
            CHECK(isfinite(lg[i]), "logit %ld not finite", i);
            if (!isfinite(lg[i])) break;
            double d = fabs((double)lg[i] - lc[i]);
            if (d > max_err) max_err = d;
        }
        printf("#   %s: logits nmse %.3g, max |error| %.3g over %d positions\n", path, e, max_err, N);
        CHECK(e <= NMSE_TOL, "logits nmse %g > %g", e, NMSE_TOL);
        if (g_exact) CHECK(e == 0, "the device data path on the CPU changed the logits: nmse %g", e);
        int near_ties = 0, first_tie = N_GEN;
        for (int s = 0; s < N_GEN; s++) {  // the token after position N_PROMPT - 1 + s
            float mc, mg;
            int tc = test_argmax_gap(lc + (size_t)(N_PROMPT - 1 + s) * V, V, &mc);
            int tg = test_argmax_gap(lg + (size_t)(N_PROMPT - 1 + s) * V, V, &mg);
            CHECK(tc == gc.toks[s], "cpu eval and cpu generate disagree at step %d", s);
            if (tg != tc) {
                near_ties++;
                if (s < first_tie) first_tie = s;
                CHECK(mc <= 2 * max_err, "step %d: gpu %d, cpu %d with margin %g > 2 x max error "
                      "%g", s, tg, tc, mc, max_err);
            }
        }
        int same = 0;
        while (same < N_GEN && gg.toks[same] == gc.toks[same]) same++;
        printf("#   %s: teacher-forced argmax equal at %d/%d steps (near ties %d); free-running "
               "greedy equal for %d/%d tokens\n", path, N_GEN - near_ties, N_GEN, near_ties, same,
               N_GEN);
        // Free-running decodes one token per step (the GEMV keeps x in f32, decode attention
        // reads the f32 KV): another rounding than the teacher-forced prefill above, so it may
        // part at a step where the prefill did not, but only where the CPU's own top-2 margin is
        // within the logit error there too.
        if (same < first_tie) {
            float mc;
            test_argmax_gap(lc + (size_t)(N_PROMPT - 1 + same) * V, V, &mc);
            printf("#   %s: free-running parted at token %d, CPU top-2 margin %g (2 x max error "
                   "%g)\n", path, same, mc, 2 * max_err);
            CHECK(mc <= 2 * max_err, "free-running greedy differs at token %d, where the CPU's "
                  "margin %g is no near tie (2 x max error %g)", same, mc, 2 * max_err);
        }
    } else {
        CHECK(false, "eval_logits: %s", li_last_error());
    }
    free(lc);
    free(lg);
    li_model_free(cpu);
    li_model_free(gpu);
    TEST_END();
}

// Decode steps of several sequences at once (the backend's attention_decode, one call per layer
// for all rows): 5 requests of different prompt lengths submitted together and run to the end
// against each one generated alone on the same backend. On cpu-devsim (CI) the batch must give
// the same tokens (bit-exact ops; a prompt under 16 tokens excepted at its first token, see
// check_short_prompt_part). On a GPU a batch step's GEMMs round differently from a lone
// step's (bf16 inputs vs the GEMV's f32 x), so a sequence may part at a near tie and then goes
// its own way: the equal prefixes must cover a quarter of all tokens (a wrong page table parts
// every sequence within a token or two: 5 of 120 when CI's devsim was given one). Measured on the
// H200 over seeds: 49-120 of 120 — the bar was half until seed 1796095165 gave 49 on
// tiny-gqa3-llama3 with f32 KV, on this code and on the code before this session alike: that
// model's random logits have many near ties.
// cpu-devsim's matmul is the CPU's: the row kernel below 16 rows, sgemm from 16 on
// (ops-cpu.c, MM_BLAS_MIN_T), and the two sum in different orders. The batch's prefill has 139
// rows, so a prompt under 16 tokens goes through sgemm there but through the row kernel alone and
// may take another first token at a near tie (a CI run: smollm2-135m, the 3-token request). Its
// decode steps use the row kernel both ways (5 rows, 1 row), so token 0 is the only place it may
// part. Where it does, each first token must be the argmax of its own kernel's logits: the prompt
// evaluated alone (row kernel) and the prompt followed by 16 more tokens (sgemm; causal, so the
// prompt's last row sees only the prompt).
enum { MM_SGEMM_MIN_ROWS = 16 };
static void check_short_prompt_part(li_model *m, const int32_t *prompt, int n, int32_t alone0,
                                    int32_t batch0) {
    li_model_info in;
    li_model_get_info(m, &in);
    int V = in.n_vocab, n_long = n + MM_SGEMM_MIN_ROWS;
    int32_t ids[2 * MM_SGEMM_MIN_ROWS];
    memcpy(ids, prompt, (size_t)n * sizeof *ids);
    for (int i = n; i < n_long; i++) ids[i] = prompt[i % n];
    float *rows = malloc((size_t)n * V * sizeof(float));
    float *gemm = malloc((size_t)n_long * V * sizeof(float));
    CHECK(rows && gemm, "out of memory");
    if (rows && gemm && li_eval_logits(m, prompt, n, rows) == LI_OK &&
        li_eval_logits(m, ids, n_long, gemm) == LI_OK) {
        float gap_rows, gap_gemm;
        int t_rows = test_argmax_gap(rows + (size_t)(n - 1) * V, V, &gap_rows);
        int t_gemm = test_argmax_gap(gemm + (size_t)(n - 1) * V, V, &gap_gemm);
        printf("#   a %d-token prompt parts at token 0 in the batch: alone %d (row kernel: %d, "
               "top-2 gap %g), batched %d (sgemm: %d, top-2 gap %g)\n", n, alone0, t_rows,
               gap_rows, batch0, t_gemm, gap_gemm);
        CHECK(t_rows == alone0 && t_gemm == batch0,
              "a %d-token prompt's first token is %d alone and %d batched, but the row kernel's "
              "argmax is %d and sgemm's %d", n, alone0, batch0, t_rows, t_gemm);
    } else {
        CHECK(false, "eval_logits: %s", li_last_error());
    }
    free(rows);
    free(gemm);
}

static void check_batched(const char *path, li_rng *rng) {
    enum { NR = 5 };
    char name[256];
    snprintf(name, sizeof name, "%s: %s batched decode of %d requests = each alone", path, g_backend,
             NR);
    TEST_BEGIN(name);
    li_model *m = load_seqs(path, g_backend, NR);
    CHECK(m != NULL, "load failed");
    if (!m) {
        TEST_END();
        return;
    }
    li_model_info in;
    li_model_get_info(m, &in);
    static const int lens[NR] = {7, 45, 20, 64, 3};
    int32_t prompts[NR][64];
    collect alone[NR], batch[NR];
    int64_t ids[NR];
    for (int r = 0; r < NR; r++) {
        for (int i = 0; i < lens[r]; i++)
            prompts[r][i] = (int32_t)(li_rng_u64(rng) % (uint64_t)(in.n_vocab < 256 ? in.n_vocab : 256));
        CHECK(greedy(m, prompts[r], lens[r], &alone[r]) == LI_OK, "generate: %s", li_last_error());
    }
    for (int r = 0; r < NR; r++) {
        li_request q;
        memset(&q, 0, sizeof q);
        q.prompt_ids = prompts[r];
        q.n_prompt_ids = lens[r];
        q.gen = greedy_params(&batch[r]);
        CHECK(li_submit(m, &q, &ids[r]) == LI_OK, "submit: %s", li_last_error());
    }
    CHECK(li_run(m) == LI_OK, "run: %s", li_last_error());
    int equal = 0, total = 0;
    for (int r = 0; r < NR; r++) {
        li_request_result res;
        CHECK(li_result(m, ids[r], &res) == LI_OK && res.status == LI_OK, "request %d: %s", r,
              res.error);
        CHECK(batch[r].t.n == N_GEN && alone[r].t.n == N_GEN, "request %d: %d and %d tokens", r,
              batch[r].t.n, alone[r].t.n);
        int same = 0;
        while (same < N_GEN && batch[r].toks[same] == alone[r].toks[same]) same++;
        equal += same;
        total += N_GEN;
        if (g_exact && lens[r] < MM_SGEMM_MIN_ROWS && same == 0)
            check_short_prompt_part(m, prompts[r], lens[r], alone[r].toks[0], batch[r].toks[0]);
        else if (g_exact)
            CHECK(same == N_GEN, "request %d parts at token %d", r, same);
    }
    printf("#   %s: batched = alone for %d/%d tokens (equal prefixes)\n", path, equal, total);
    CHECK(4 * equal >= total, "batched = alone for only %d/%d tokens", equal, total);
    li_model_free(m);
    TEST_END();
}

// The logits (N, V) of the prompt ids on m, which is freed here (*V: its vocabulary); with draw,
// the ids are drawn from rng over that vocabulary first. NULL when the call failed
// (li_last_error says why).
static float *prompt_logits(li_model *m, int32_t *ids, int N, bool draw, li_rng *rng, int *V) {
    li_model_info in;
    li_model_get_info(m, &in);
    *V = in.n_vocab;
    if (draw)
        for (int i = 0; i < N; i++) ids[i] = (int32_t)(li_rng_u64(rng) % (uint64_t)*V);
    float *l = malloc((size_t)N * *V * sizeof(float));
    if (l && li_eval_logits(m, ids, N, l) != LI_OK) {
        free(l);
        l = NULL;
    }
    li_model_free(m);
    return l;
}

// The Llama forward's two activation paths on one backend (src/model/llama.h): li_eval_logits
// of a random prompt with LI_LLAMA_ACT=f32 and =bf16. Each bf16 form stores the f32 form's value
// rounded where the next op would round it anyway (a GEMM's input) and the residual adds move
// into the GEMM's epilogue (backend.h): on CUDA, whose f32 GEMMs round their input to bf16, the
// two paths give the same bits with gate and up as two GEMMs (LI_LLAMA_FUSED=0); the one GEMM
// over w_gate_up may pick another algorithm, so fused is held to NMSE 1e-8 (fp32 rounding of a
// few ulp; a wrong ld or half gives ~1). On cpu-ref, whose f32 GEMM reads x in f32, bf16 rounds
// every GEMM input: NMSE <= NMSE_TOL as for the GPU's own rounding, and not 0 (the path ran).
// A backend without the BF16 forms (cpu, cpu-devsim) runs f32 both times: nothing to compare.
static void check_act_paths(const char *path, const char *backend, li_rng *rng) {
    char name[256];
    snprintf(name, sizeof name, "%s: %s llama bf16 activations = f32 activations", path, backend);
    TEST_BEGIN(name);
    bool exact = strcmp(backend, "cpu-ref") != 0;
    enum { N = 37 };
    int32_t ids[N];
    float *l[3] = {NULL, NULL, NULL};
    const char *act[3] = {"f32", "bf16", "bf16"}, *fused[3] = {"0", "0", "1"};
    int V = 0;
    for (int k = 0; k < 3; k++) {
        setenv("LI_LLAMA_ACT", act[k], 1);
        setenv("LI_LLAMA_FUSED", fused[k], 1);
        li_model *m = load(path, backend);
        CHECK(m != NULL, "load %s on %s", path, backend);
        if (!m) break;
        l[k] = prompt_logits(m, ids, N, k == 0, rng, &V);
        CHECK(l[k], "eval_logits (%s): %s", act[k], li_last_error());
    }
    unsetenv("LI_LLAMA_ACT");
    unsetenv("LI_LLAMA_FUSED");
    if (l[0] && l[1] && l[2]) {
        double split = test_nmse(l[1], l[0], (long)N * V), fu = test_nmse(l[2], l[0], (long)N * V);
        printf("#   %s on %s: bf16 vs f32 activations: nmse %.3g (gate, up split), %.3g (fused)\n",
               path, backend, split, fu);
        if (exact) {
            CHECK(split == 0, "bf16 activations changed the logits: nmse %g", split);
            CHECK(fu <= 1e-8, "fused gate|up: nmse %g > 1e-8", fu);
        } else {
            CHECK(split > 0 && split <= NMSE_TOL, "nmse %g not in (0, %g]", split, NMSE_TOL);
            CHECK(fu > 0 && fu <= NMSE_TOL, "fused: nmse %g not in (0, %g]", fu, NMSE_TOL);
        }
    }
    for (int k = 0; k < 3; k++) free(l[k]);
    TEST_END();
}

// FP8 prefill (--fp8 ffn|all): the prompt logits of the backend under test with FP8 against its
// own logits without (the quantisation's error, printed: NMSE in (0, FP8_FFN_TOL] and (0,
// FP8_ALL_TOL]; measured 0.009-0.016 and 0.022-0.075 on these tiny random models, whose few
// dimensions average little of each code's 2^-4 relative rounding away; a wrong scale or
// layout gives ~1), and with FP8 all
// against the oracle with FP8 all (the same codes where the inputs round alike: bit for bit on
// cpu-devsim vs cpu; on CUDA the bf16 attention and cuBLASLt's accumulation move some inputs
// across an e4m3 rounding boundary, one code step (2^-3 relative) each: NMSE <= FP8_PAIR_TOL;
// measured on the H100 on 2026-12-07: 0.0105 with the bf16 KV pool, 0.0116 with f32, where all
// against off is 0.0219 and ffn against off 0.0089 — so this bound catches a wrong scale or
// layout (~1), not a scope that quantises less than the oracle's).
#define FP8_FFN_TOL 5e-2
#define FP8_ALL_TOL 0.15
#define FP8_PAIR_TOL 2e-2
static void check_fp8(const char *path, li_rng *rng) {
    char name[256];
    snprintf(name, sizeof name, "%s: %s FP8 prefill (ffn, all) near bf16, all = %s all", path,
             g_backend, g_oracle);
    TEST_BEGIN(name);
    enum { N = 41 };
    int32_t ids[N];
    const char *be[4] = {g_backend, g_backend, g_backend, g_oracle};
    const char *fp8[4] = {"off", "ffn", "all", "all"};
    float *l[4] = {NULL, NULL, NULL, NULL};
    int V = 0;
    for (int k = 0; k < 4; k++) {
        li_model *m = load_fp8(path, be[k], 1, fp8[k]);
        CHECK(m != NULL, "load %s on %s with --fp8 %s", path, be[k], fp8[k]);
        if (!m) break;
        l[k] = prompt_logits(m, ids, N, k == 0, rng, &V);
        CHECK(l[k], "eval_logits (--fp8 %s): %s", fp8[k], li_last_error());
    }
    if (l[0] && l[1] && l[2] && l[3]) {
        const long n = (long)N * V;
        double ffn = test_nmse(l[1], l[0], n), all = test_nmse(l[2], l[0], n);
        double pair = test_nmse(l[2], l[3], n);
        printf("#   %s on %s: nmse against --fp8 off: ffn %.3g, all %.3g; all against %s all: "
               "%.3g\n", path, g_backend, ffn, all, g_oracle, pair);
        CHECK(ffn > 0 && ffn <= FP8_FFN_TOL, "--fp8 ffn: nmse %g not in (0, %g]", ffn,
              FP8_FFN_TOL);
        CHECK(all > 0 && all <= FP8_ALL_TOL, "--fp8 all: nmse %g not in (0, %g]", all,
              FP8_ALL_TOL);
        if (g_exact) CHECK(pair == 0, "--fp8 all differs from the oracle's: nmse %g", pair);
        else CHECK(pair <= FP8_PAIR_TOL, "--fp8 all vs the oracle: nmse %g > %g", pair,
                   FP8_PAIR_TOL);
    }
    for (int k = 0; k < 4; k++) free(l[k]);
    TEST_END();
}

int main(int argc, char **argv) {
    g_backend = test_backend(g_backend);
    if (getenv("LI_TEST_ORACLE")) g_oracle = getenv("LI_TEST_ORACLE");
    if (getenv("LI_TEST_KV_DTYPE")) g_kv_dtype = getenv("LI_TEST_KV_DTYPE");
    printf("# %s against %s, %s KV pools\n", g_backend, g_oracle, g_kv_dtype);
    g_exact = !strcmp(g_backend, "cpu-devsim") && !strcmp(g_oracle, "cpu");
    li_model_params p = li_model_default_params();
    p.path = "synth:tiny-llama";
    p.backend = g_backend;
    li_model *probe = NULL;
    if (li_model_load(&probe, &p) != LI_OK) {
        TEST_SKIP("gpu-model", "no usable '%s' backend here: %s", g_backend, li_last_error());
        return test_summary();
    }
    li_model_free(probe);
    uint64_t seed = test_seed("gpu-model");
    li_rng rng;
    li_rng_seed(&rng, seed);
    static const char *models[] = {
        "tests/data/ref/tiny-mha-none",      "tests/data/ref/tiny-gqa2-linear",
        "tests/data/ref/tiny-gqa3-llama3",   "tests/data/ref/tiny-gqa4-yarn",
        "synth:tiny-llama",                  "synth:tiny-llama-mha-gptj",
        "synth:tiny-llama-gqa4-linear",      "synth:tiny-llama-gqa8-llama3",
        "synth:tiny-llama-gqa2-yarn",        "synth:smollm2-135m",
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) check_model(models[i], &rng);
    // one GQA ratio the one-launch decode kernel serves (4), one it does not (3: a launch per row)
    check_batched("synth:tiny-llama-gqa4-linear", &rng);
    check_batched("tests/data/ref/tiny-gqa3-llama3", &rng);
    check_batched("synth:smollm2-135m", &rng);
    // the bf16 activation path: on the backend under test where it takes the BF16 forms (CUDA),
    // and on the CPU oracle, which takes them too (CI)
    // (and a Qwen2 checkpoint: its q/k/v biases on that path)
    static const char *act_models[] = {"tests/data/ref/tiny-gqa3-llama3",
                                       "tests/data/ref/tiny-qwen2-untied"};
    for (size_t i = 0; i < sizeof act_models / sizeof act_models[0]; i++) {
        if (!g_exact) check_act_paths(act_models[i], g_backend, &rng);
        check_act_paths(act_models[i], "cpu-ref", &rng);
    }
    // FP8 prefill: a Llama checkpoint and a Qwen2 one (biases after FP8 projections)
    check_fp8("tests/data/ref/tiny-gqa3-llama3", &rng);
    check_fp8("tests/data/ref/tiny-qwen2-untied", &rng);
    check_fp8("synth:smollm2-135m", &rng);
    // extra models (e.g. a real GGUF) from the command line
    for (int i = 1; i < argc; i++) check_model(argv[i], &rng);
    return test_summary();
}
