// main.c — the command-line tool: `lazyinfer <subcommand> [options]`.
//
//   generate   prompt → completion on stdout, speeds on stderr
//   tokenize   text → token ids
//   info       architecture, shapes, dtype, parameter count
//   bench      benchmarks (bench generate: pp512 / tg128, mean ± std)
//
// Every subcommand has --help; an unknown flag is an error naming it. Only this file (and the
// tests) call exit(). Long work shows progress on stderr when it is a terminal.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/core.h"
#include "cli.h"
#include "lazyinfer.h"


// ---- generate ----------------------------------------------------------------------------------

typedef struct {
    li_model *m;
    bool ok;
} print_ctx;

static bool print_token(void *user, int32_t tok) {
    print_ctx *pc = user;
    char buf[256];
    size_t len;
    if (li_token_to_piece(pc->m, tok, buf, sizeof buf, &len) != LI_OK) {
        pc->ok = false;
        return false;
    }
    if (len > sizeof buf) len = sizeof buf;
    fwrite(buf, 1, len, stdout);
    fflush(stdout);
    return true;
}

typedef struct {
    li_model_params mp; // --model, --tokenizer, --chat-template, -c, -t, ...
    const char *prompt, *system;
    int n_predict;
    li_sampling_params sp;
    bool chat, ignore_eos;
} gen_args;

// Tokenises the prompt: raw (with BOS when the model wants it) or through the chat format.
static li_status prompt_tokens(li_model *m, const gen_args *a, int32_t **ids, int *n) {
    if (!a->chat) return li_tokenize(m, a->prompt, strlen(a->prompt), true, false, ids, n);
    char *text;
    LI_TRY(li_chat_render(m, a->system, a->prompt, &text));
    li_status rc = li_tokenize(m, text, strlen(text), false, true, ids, n);
    free(text);
    return rc;
}

static int cmd_generate(int argc, char **argv) {
    gen_args a = {.mp = li_model_default_params(), .n_predict = 128,
                  .sp = li_sampling_default_params()};
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &a.mp.path, "HF directory, .gguf file or synth:NAME[:SEED] (default: the model setup fetched)"},
        {"--prompt", "-p", OPT_STR, &a.prompt, "prompt text (required)"},
        {"--n-predict", "-n", OPT_INT, &a.n_predict, "tokens to generate (default 128)"},
        {"--temp", NULL, OPT_FLOAT, &a.sp.temperature, "temperature, 0 = greedy (default 0.8)"},
        {"--top-k", NULL, OPT_INT, &a.sp.top_k, "top-k, 0 = off (default 40)"},
        {"--top-p", NULL, OPT_FLOAT, &a.sp.top_p, "top-p, 1 = off (default 0.95)"},
        {"--min-p", NULL, OPT_FLOAT, &a.sp.min_p, "min-p, 0 = off (default 0.05)"},
        {"--seed", NULL, OPT_U64, &a.sp.seed, "sampling seed (default 0)"},
        {"--chat", NULL, OPT_FLAG, &a.chat, "format the prompt as a user message with the model's chat format"},
        {"--system", NULL, OPT_STR, &a.system, "system message for --chat"},
        {"--chat-template", NULL, OPT_STR, &a.mp.chat_template, "chat format override: llama3, chatml, llada"},
        {"--tokenizer", NULL, OPT_STR, &a.mp.tokenizer_path, "tokenizer.json to use instead of the model's"},
        CLI_DEVICE_OPTS(a.mp),
        {"--ctx-size", "-c", OPT_INT, &a.mp.n_ctx, "context size in tokens (default: min(trained, 4096))"},
        CLI_KV_DTYPE_OPT(a.mp),
        CLI_FP8_OPT(a.mp),
        {"--ignore-eos", NULL, OPT_FLAG, &a.ignore_eos, "keep generating after end-of-sequence tokens"},
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(argc, argv, "usage: lazyinfer generate -m MODEL -p PROMPT [options]", opts,
                       sizeof opts / sizeof opts[0], pos, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (!a.prompt) {
        fprintf(stderr, "lazyinfer generate: -p PROMPT is required (see --help)\n");
        return 2;
    }
    if (a.n_predict < 0 || a.mp.n_threads < 0 || a.mp.n_ctx < 0 || a.sp.top_k < 0) {
        fprintf(stderr, "lazyinfer generate: -n, -t, -c and --top-k must not be negative\n");
        return 2;
    }
    if (!a.mp.path) a.mp.path = cli_default_model();
    li_model *m;
    if (li_model_load(&m, &a.mp) != LI_OK) return cli_fail("cannot load the model");
    int32_t *ids = NULL;
    int n = 0;
    if (prompt_tokens(m, &a, &ids, &n) != LI_OK) {
        li_model_free(m);
        return cli_fail("cannot tokenize the prompt");
    }
    print_ctx pc = {m, true};
    li_generate_params gp = li_generate_default_params();
    gp.n_predict = a.n_predict;
    gp.sampling = a.sp;
    gp.stop_at_eos = !a.ignore_eos;
    gp.on_token = print_token;
    gp.user = &pc;
    li_generate_stats st = {0};
    li_status rc = a.n_predict > 0 ? li_generate(m, ids, n, &gp, &st) : LI_OK;
    printf("\n");
    fflush(stdout);
    li_free_tokens(ids);
    if (rc != LI_OK || !pc.ok) {
        li_model_free(m);
        return cli_fail("generation failed");
    }
    fprintf(stderr, "prompt: %d tokens in %.1f ms (%.1f tokens/s)\n", st.n_prompt, st.prompt_ms,
            st.prompt_ms > 0 ? 1e3 * st.n_prompt / st.prompt_ms : 0.0);
    fprintf(stderr, "generation: %d tokens in %.1f ms (%.1f tokens/s)\n", st.n_generated,
            st.generate_ms, st.generate_ms > 0 ? 1e3 * st.n_generated / st.generate_ms : 0.0);
    li_model_free(m);
    return 0;
}

// ---- tokenize ----------------------------------------------------------------------------------

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool add_bos = false, no_special = false;
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &model, "model (as for generate) or a tokenizer.json file"},
        {"--add-bos", NULL, OPT_FLAG, &add_bos, "prepend BOS when the tokenizer wants one"},
        {"--no-special", NULL, OPT_FLAG, &no_special, "treat special-token text as plain text"},
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(argc, argv, "usage: lazyinfer tokenize -m MODEL_OR_TOKENIZER_JSON TEXT", opts,
                       sizeof opts / sizeof opts[0], pos, 1, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (n_pos != 1) {
        fprintf(stderr, "lazyinfer tokenize: expected one TEXT argument (see --help)\n");
        return 2;
    }
    if (!model) model = cli_default_model();
    int32_t *ids = NULL;
    int n = 0;
    li_status rc;
    li_model *m = NULL;
    if (ends_with(model, ".json")) {
        rc = li_tokenize_file(model, pos[0], strlen(pos[0]), add_bos, !no_special, &ids, &n);
    } else {
        li_model_params mp = li_model_default_params();
        mp.path = model;
        mp.metadata_only = true;
        if (li_model_load(&m, &mp) != LI_OK) return cli_fail("cannot load the model");
        rc = li_tokenize(m, pos[0], strlen(pos[0]), add_bos, !no_special, &ids, &n);
    }
    if (rc == LI_OK) {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    li_model_free(m);
    return rc == LI_OK ? 0 : cli_fail("cannot tokenize");
}

// ---- info --------------------------------------------------------------------------------------

static int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &model, "HF directory, .gguf file or synth:NAME[:SEED]"},
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(argc, argv, "usage: lazyinfer info -m MODEL", opts, 1, pos, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    li_model_params mp = li_model_default_params();
    mp.path = model ? model : cli_default_model();
    mp.metadata_only = true;
    li_model *m;
    if (li_model_load(&m, &mp) != LI_OK) return cli_fail("cannot load the model");
    li_model_info in;
    li_model_get_info(m, &in);
    printf("model:          %s\n", mp.path);
    printf("name:           %s\n", in.name);
    printf("architecture:   %s\n", in.arch);
    printf("layers:         %d\n", in.n_layer);
    printf("embedding:      %d\n", in.n_embd);
    printf("ffn:            %d\n", in.n_ff);
    printf("heads:          %d (kv %d, GQA %d:1), head dim %d\n", in.n_head, in.n_head_kv,
           in.n_head / in.n_head_kv, in.head_dim);
    printf("vocab:          %d\n", in.n_vocab);
    printf("context:        %d (trained)\n", in.n_ctx_train);
    printf("rope:           theta %g, scaling %s\n", in.rope_theta, in.rope_scaling);
    printf("rms eps:        %g\n", in.rms_eps);
    printf("tied embedding: %s\n", in.tied_embeddings ? "yes" : "no");
    printf("weights dtype:  %s in the source, %s in memory (activations f32)\n", in.weight_dtype,
           in.compute_dtype);
    printf("parameters:     %lld (%.1f M)\n", (long long)in.n_params, in.n_params / 1e6);
    li_model_free(m);
    return 0;
}

// ---- bench -------------------------------------------------------------------------------------

static void mean_std(const double *x, int n, double *mean, double *std) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *std = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

// pp: prompt processing of n_pp random tokens; tg: n_tg greedy tokens after a 1-token prompt,
// both as llama-bench defines them (tokens/s, mean ± std over reps runs after one warm-up).
static int cmd_bench_generate(int argc, char **argv) {
    li_model_params mp = li_model_default_params();
    int n_pp = 512, n_tg = 128, reps = 3;
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &mp.path, "model (default: the model setup fetched)"},
        {"--n-prompt", "-p", OPT_INT, &n_pp, "prompt tokens for pp (default 512)"},
        CLI_KV_DTYPE_OPT(mp),
        CLI_FP8_OPT(mp),
        {"--n-gen", "-n", OPT_INT, &n_tg, "generated tokens for tg (default 128)"},
        {"--reps", "-r", OPT_INT, &reps, "repetitions (default 3)"},
        CLI_DEVICE_OPTS(mp),
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(argc, argv, "usage: lazyinfer bench generate [-m MODEL] [-p N] [-n N] [-r N] [-t N]",
                       opts, sizeof opts / sizeof opts[0], pos, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (n_pp < 1 || n_tg < 1 || reps < 1 || reps > 1000 || mp.n_threads < 0) {
        fprintf(stderr, "lazyinfer bench generate: -p, -n and -r must be >= 1\n");
        return 2;
    }
    mp.n_ctx = (n_pp > n_tg ? n_pp : n_tg) + 1;  // prompt + the token sampled after it
    if (!mp.path) mp.path = cli_default_model();
    li_model *m;
    if (li_model_load(&m, &mp) != LI_OK) return cli_fail("cannot load the model");
    li_model_info in;
    li_model_get_info(m, &in);
    int32_t *toks = malloc((size_t)n_pp * sizeof *toks);
    double *pp = malloc((size_t)reps * sizeof *pp), *tg = malloc((size_t)reps * sizeof *tg);
    li_rng rng;
    li_rng_seed(&rng, 1234);
    for (int i = 0; i < n_pp; i++) toks[i] = (int32_t)(li_rng_u64(&rng) % (uint64_t)in.n_vocab);
    li_generate_params gp = li_generate_default_params();
    gp.sampling.temperature = 0;
    gp.stop_at_eos = false;
    int status = 0;
    for (int rep = -1; rep < reps; rep++) {  // rep -1: warm-up
        li_generate_stats st;
        gp.n_predict = 1;
        if (li_generate(m, toks, n_pp, &gp, &st) != LI_OK) { status = cli_fail("pp run"); break; }
        double pp_tps = 1e3 * n_pp / st.prompt_ms;
        gp.n_predict = n_tg;
        if (li_generate(m, toks, 1, &gp, &st) != LI_OK) { status = cli_fail("tg run"); break; }
        // tg: n_tg sampled tokens need n_tg - 1 decode steps after the prompt.
        double tg_tps = 1e3 * (st.n_generated - 1) / st.generate_ms;
        if (rep >= 0) {
            pp[rep] = pp_tps;
            tg[rep] = tg_tps;
        }
        li_progress("bench", rep + 2, reps + 1);
    }
    if (!status) {
        double pm, ps, tm, ts;
        mean_std(pp, reps, &pm, &ps);
        mean_std(tg, reps, &tm, &ts);
        int th = in.n_threads;
        printf("| model | params | weights | threads | test | t/s |\n|---|---|---|---|---|---|\n");
        printf("| %s | %.1f M | %s→%s | %d | pp%d | %.2f ± %.2f |\n", in.name, in.n_params / 1e6,
               in.weight_dtype, in.compute_dtype, th, n_pp, pm, ps);
        printf("| %s | %.1f M | %s→%s | %d | tg%d | %.2f ± %.2f |\n", in.name, in.n_params / 1e6,
               in.weight_dtype, in.compute_dtype, th, n_tg, tm, ts);
    }
    free(toks);
    free(pp);
    free(tg);
    li_model_free(m);
    return status;
}

static int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: lazyinfer bench generate|dllm|rag|kernels|fp8|quality [options]\n\n"
               "  generate   prompt processing (pp512) and generation (tg128) tokens/s\n"
               "  dllm       diffusion decoding methods on GSM8K (LaCache, parallel, DPad)\n"
               "  rag        RAG serving: TTFT and throughput per document-cache mode\n"
               "  kernels    one layer's ops: ms, GB/s, TFLOP/s, %% of the measured ceilings\n"
               "  fp8        FP8 prefill (--fp8 ffn|all) against off: greedy agreement, logits error\n"
               "  quality    --repair modes against full attention: first-token KL, answers, F1\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "generate")) return cmd_bench_generate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "dllm")) return cmd_bench_dllm(argc - 1, argv + 1);
    if (!strcmp(argv[1], "rag")) return cmd_bench_rag(argc - 1, argv + 1);
    if (!strcmp(argv[1], "kernels")) return cmd_bench_kernels(argc - 1, argv + 1);
    if (!strcmp(argv[1], "fp8")) return cmd_bench_fp8(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quality")) return cmd_bench_quality(argc - 1, argv + 1);
    fprintf(stderr, "lazyinfer bench: unknown benchmark '%s' (see --help)\n", argv[1]);
    return 2;
}

// ---- main --------------------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(f, "usage: lazyinfer <command> [options]   (lazyinfer <command> --help for details)\n\n"
               "commands:\n"
               "  generate   generate a completion for a prompt\n"
               "  tokenize   print the token ids of a text\n"
               "  info       print a model's architecture, shapes, dtype and parameter count\n"
               "  rag        answer questions over documents with the document KV cache\n"
               "  dllm       decode a prompt with a diffusion LM (LLaDA SAR decoding)\n"
               "  bench      run a benchmark (bench generate, bench dllm, bench rag, bench kernels, bench fp8, bench quality)\n"
               "  sim        trace-driven document-cache hit-ratio simulator\n"
               "  serve      OpenAI-compatible HTTP server (docs/SERVER.md)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (getenv("LAZYINFER_VERBOSE")) li_log_set_level(LI_LOG_DEBUG);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "rag")) return cmd_rag(argc - 1, argv + 1);
    if (!strcmp(cmd, "dllm")) return cmd_dllm(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "sim")) return cmd_sim(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    fprintf(stderr, "lazyinfer: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
