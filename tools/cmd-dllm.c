// cmd-dllm.c — `lazyinfer dllm` (decode one prompt with a diffusion LM, SAR decoding) and
// `lazyinfer bench dllm` (the method combinations of docs/DLLM.md over GSM8K questions: vanilla,
// each LaCache component, all LaCache, parallel decoding, DPad, everything, as a markdown table).
//
// The decoding semantics live in src/engine/engine-dllm.c (contract: docs/DLLM.md); this file
// only parses options, renders prompts, prints text, traces and figures. Not here: the model.
// Tested by hand (docs/DLLM.md shows the runs) and by tests/test-dllm.c for everything below it.
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/core.h"
#include "../src/server/logits.h"
#include "cli.h"
#include "lazyinfer.h"

// ---- options shared by dllm and bench dllm -----------------------------------------------------

// Decoding options as typed. Reals are kept as text and parsed with strtod so that 0.9 reaches
// the engine as the double 0.9 (the Python reference's value), not as a float.
typedef struct {
    li_model_params mp; // --model (required here), --tokenizer, ..., --attn-impl
    const char *prompt, *system;
    const char *remasking, *confidence, *temp, *cfg, *threshold, *factor;
    const char *dpad_k, *dpad_scale, *lacache, *fp8;
    int dpad_window;
    bool chat, dpad, trace;
    // the integer and flag options the engine takes as they are (--gen-length ... --seed),
    // parsed into place over li_dllm_default_params(); args_to_params reads the rest
    li_dllm_params decode;
} dllm_args;

static void args_init(dllm_args *a) {
    memset(a, 0, sizeof *a);
    a->mp = li_model_default_params();
    a->decode = li_dllm_default_params();
    a->dpad_window = -1; // -1: not given
}

// A real option: "" → default kept; else the whole string must be a finite number.
static bool parse_real(const char *cmd, const char *flag, const char *s, double *out) {
    if (!s) return true;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "lazyinfer %s: bad value '%s' for option '%s' (expected a number)\n", cmd,
                s, flag);
        return false;
    }
    *out = v;
    return true;
}

// "embed,rope,fa,trunc" | "all" | "off" → LI_DLLM_LACACHE_* bits.
static bool parse_lacache(const char *cmd, const char *s, unsigned *out) {
    if (!strcmp(s, "all")) {
        *out = LI_DLLM_LACACHE_ALL;
        return true;
    }
    if (!strcmp(s, "off") || !strcmp(s, "none")) {
        *out = 0;
        return true;
    }
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {{"embed", LI_DLLM_LACACHE_EMBED},
                 {"rope", LI_DLLM_LACACHE_ROPE},
                 {"fa", LI_DLLM_LACACHE_FA},
                 {"trunc", LI_DLLM_LACACHE_TRUNC}};
    unsigned bits = 0;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && !strncmp(p, names[i].name, n)) {
                bits |= names[i].bit;
                found = true;
            }
        if (!found) {
            fprintf(stderr,
                    "lazyinfer %s: --lacache: unknown component '%.*s' in '%s' (expected a "
                    "comma-separated list of embed, rope, fa, trunc, or all, or off)\n",
                    cmd, (int)n, p, s);
            return false;
        }
        p += n;
        if (*p == ',') p++;
    }
    *out = bits;
    return true;
}

// Which of two words s is: 0 for w0, 1 for w1; -1 after printing "FLAG 's': expected W0 or W1".
static int pick_word(const char *cmd, const char *flag, const char *s, const char *w0,
                     const char *w1) {
    if (!strcmp(s, w0)) return 0;
    if (!strcmp(s, w1)) return 1;
    fprintf(stderr, "lazyinfer %s: %s '%s': expected %s or %s\n", cmd, flag, s, w0, w1);
    return -1;
}

// Options → engine parameters with the CLI's own checks (flags that conflict, values the engine
// would also reject but that read better named by their flag). Returns false after printing.
static bool args_to_params(const char *cmd, const dllm_args *a, li_dllm_params *p) {
    *p = a->decode;
    if (a->remasking) {
        int w = pick_word(cmd, "--remasking", a->remasking, "low_confidence", "random");
        if (w < 0) return false;
        p->remasking = w == 0 ? LI_DLLM_REMASK_LOW_CONFIDENCE : LI_DLLM_REMASK_RANDOM;
    }
    if (a->confidence) {
        if (!strcmp(a->confidence, "auto")) {
            p->confidence = LI_DLLM_CONF_AUTO;
        } else {
            int w = pick_word(cmd, "--confidence", a->confidence, "f32", "f64");
            if (w < 0) return false;  // ("expected f32 or f64": auto is the default)
            p->confidence = w == 0 ? LI_DLLM_CONF_F32 : LI_DLLM_CONF_F64;
        }
    }
    if (!parse_real(cmd, "--temp", a->temp, &p->temperature) ||
        !parse_real(cmd, "--cfg", a->cfg, &p->cfg) ||
        !parse_real(cmd, "--threshold", a->threshold, &p->threshold) ||
        !parse_real(cmd, "--factor", a->factor, &p->factor) ||
        !parse_real(cmd, "--dpad-k", a->dpad_k, &p->dpad_k_sigma) ||
        !parse_real(cmd, "--dpad-scale", a->dpad_scale, &p->dpad_scale))
        return false;
    if (a->threshold && a->factor) {
        fprintf(stderr, "lazyinfer %s: --threshold and --factor are exclusive: give one\n", cmd);
        return false;
    }
    if ((a->threshold || a->factor) && a->decode.commit_per_step) {
        fprintf(stderr, "lazyinfer %s: --commit-per-step excludes --threshold and --factor\n", cmd);
        return false;
    }
    if (a->threshold && !(p->threshold > 0 && p->threshold <= 1)) {
        fprintf(stderr, "lazyinfer %s: --threshold %s is outside (0, 1]\n", cmd, a->threshold);
        return false;
    }
    if (a->factor && !(p->factor > 0)) {
        fprintf(stderr, "lazyinfer %s: --factor %s must be > 0\n", cmd, a->factor);
        return false;
    }
    if (a->decode.commit_per_step < 0) {
        fprintf(stderr, "lazyinfer %s: --commit-per-step %d must be >= 1\n", cmd,
                a->decode.commit_per_step);
        return false;
    }
    p->dpad = a->dpad || a->dpad_window >= 0 || a->dpad_k || a->dpad_scale;
    if (a->dpad_window >= 0) p->dpad_window = a->dpad_window;
    if (a->lacache && !parse_lacache(cmd, a->lacache, &p->lacache)) return false;
    if (!a->lacache) p->lacache = LI_DLLM_LACACHE_ALL; // exact, so on unless asked otherwise
    if (a->fp8) {
        int w = pick_word(cmd, "--fp8", a->fp8, "on", "off");
        if (w < 0) return false;
        p->fp8 = w == 0;
    }
    if (li_dllm_check_params(p) != LI_OK) {
        // The engine's message names the parameter (gen_length for --gen-length, …).
        const char *msg = li_last_error();
        if (!strncmp(msg, "dllm: ", 6)) msg += 6;
        fprintf(stderr, "lazyinfer %s: %s (see --help)\n", cmd, msg);
        return false;
    }
    return true;
}

static int load_model(const char *cmd, const dllm_args *a, li_model **m) {
    if (!a->mp.path) {
        fprintf(stderr,
                "lazyinfer %s: -m MODEL is required: there is no default diffusion model (use an "
                "HF LLaDA directory, or e.g. -m synth:tiny-llada)\n",
                cmd);
        return 2;
    }
    if (li_model_load(m, &a->mp) != LI_OK) return cli_fail("cannot load the model");
    li_model_info info;
    li_model_get_info(*m, &info);
    if (!info.diffusion) {
        fprintf(stderr,
                "lazyinfer %s: %s is not a diffusion model (arch '%s'); use `lazyinfer generate` "
                "for it, or a LLaDA model such as synth:tiny-llada\n",
                cmd, a->mp.path, info.arch);
        li_model_free(*m);
        *m = NULL;
        return 2;
    }
    return 0;
}

// Raw text (BOS when the tokenizer wants one) or a user message through the chat format.
static li_status render_prompt(li_model *m, const char *system, const char *text, bool chat,
                               int32_t **ids, int *n) {
    if (!chat) return li_tokenize(m, text, strlen(text), true, false, ids, n);
    char *r;
    LI_TRY(li_chat_render(m, system, text, &r));
    li_status rc = li_tokenize(m, r, strlen(r), false, true, ids, n);
    free(r);
    return rc;
}

// ---- dllm --------------------------------------------------------------------------------------

typedef struct {
    li_model *m;
    int32_t eos, eot;
    li_buf line, piece; // the line being built; one token's bytes
} trace_ctx;

// Length of the valid UTF-8 character at s (at most n bytes), 0 if it is not one.
static size_t utf8_len(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xf0 && s[0] < 0xf5   ? 4
                 : s[0] >= 0xe0                ? 3
                 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
                                               : 0;
    if (s[0] >= 0xf5) len = 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return len;
}

// One line per step on stderr: the generated part, masks as ▒, EOS/EOT as ⟨eos⟩/⟨eot⟩, newlines
// as ⏎, tokens without text as ∅, so that a person can watch the canvas fill in.
static void trace_step(void *user, const li_dllm_step *s) {
    trace_ctx *t = user;
    t->line.len = 0;
    li_buf_printf(&t->line, "[block %d step %d | nfe %d | +%d] ", s->block, s->step_in_block,
                  s->nfe, s->n_committed);
    for (int i = 0; i < s->gen_length; i++) {
        int32_t id = s->gen[i];
        if (id == s->mask_id) {
            li_buf_append(&t->line, "▒", strlen("▒"));
            continue;
        }
        if (id == t->eos || id == t->eot) {
            const char *w = id == t->eos ? "⟨eos⟩" : "⟨eot⟩";
            li_buf_append(&t->line, w, strlen(w));
            continue;
        }
        t->piece.len = 0;
        if (li_piece_append(t->m, id, &t->piece) != LI_OK) continue;
        const char *piece = t->piece.data;
        size_t len = t->piece.len;
        if (len == 0) li_buf_append(&t->line, "∅", strlen("∅")); // a token without text
        for (size_t k = 0; k < len;) {
            unsigned char c = (unsigned char)piece[k];
            size_t u = utf8_len((const unsigned char *)piece + k, len - k);
            if (c == '\n')
                li_buf_append(&t->line, "⏎", strlen("⏎"));
            else if (c < 0x20)
                li_buf_append(&t->line, "·", strlen("·"));
            else if (u)
                li_buf_append(&t->line, piece + k, u);
            else
                li_buf_append(&t->line, "�", strlen("�")); // a byte of a split character
            k += u ? u : 1;
        }
    }
    li_buf_append(&t->line, "\n", 1);
    fwrite(t->line.data, 1, t->line.len, stderr);
    fflush(stderr);
}

// The option table both subcommands share, then each one's own.
// clang-format off
#define DLLM_DECODE_OPTS(a)                                                                        \
    {"--model", "-m", OPT_STR, &(a).mp.path, "HF LLaDA or Fast-dLLM v2 directory or synth:NAME[:SEED] (required; e.g. synth:tiny-llada)"}, \
    {"--gen-length", NULL, OPT_INT, &(a).decode.gen_length, "tokens to generate (default 128)"},    \
    {"--block-length", NULL, OPT_INT, &(a).decode.block_length, "SAR block length (default 32)"},   \
    {"--sub-block-length", NULL, OPT_INT, &(a).decode.sub_block_length, "Fast-dLLM v2 sub-block (default 8)"}, \
    {"--steps", NULL, OPT_INT, &(a).decode.steps, "denoising steps in all (default 128; multiple of gen/block)"}, \
    {"--remasking", NULL, OPT_STR, &(a).remasking, "low_confidence (default) or random"},         \
    {"--confidence", NULL, OPT_STR, &(a).confidence, "auto (default: f32 top-k as generate.py, f64 threshold/factor as Fast-dLLM), f32 or f64"}, \
    {"--temp", NULL, OPT_STR, &(a).temp, "temperature, Gumbel-max in float64 (default 0: argmax)"}, \
    {"--cfg", NULL, OPT_STR, &(a).cfg, "classifier-free guidance scale (default 0: off)"},         \
    {"--threshold", NULL, OPT_STR, &(a).threshold, "Fast-dLLM threshold tau in (0, 1]"},          \
    {"--factor", NULL, OPT_STR, &(a).factor, "Fast-dLLM factor f > 0 (excludes --threshold)"},    \
    {"--commit-per-step", NULL, OPT_INT, &(a).decode.commit_per_step, "commit exactly K per step (random-weight benchmarks)"}, \
    {"--dpad", NULL, OPT_FLAG, &(a).dpad, "DPad suffix dropout with the defaults (256, 4, 2)"},   \
    {"--dpad-window", NULL, OPT_INT, &(a).dpad_window, "DPad window W (turns DPad on; default 256)"}, \
    {"--dpad-k", NULL, OPT_STR, &(a).dpad_k, "DPad k_sigma (turns DPad on; default 4)"},           \
    {"--dpad-scale", NULL, OPT_STR, &(a).dpad_scale, "DPad scale (turns DPad on; default 2)"},     \
    {"--early-stop", NULL, OPT_FLAG, &(a).decode.early_stop, "stop after a finished block holding EOS"}, \
    {"--logits-eos-inf", NULL, OPT_FLAG, &(a).decode.logits_eos_inf, "never predict EOS"},        \
    {"--confidence-eos-eot-inf", NULL, OPT_FLAG, &(a).decode.confidence_eos_eot_inf,            \
     "EOT confidence 0 (and EOS at temperature 0)"},                                            \
    {"--fa-tile", NULL, OPT_INT, &(a).decode.fa_tile, "FACache tile in tokens (default 64)"},     \
    {"--fp8", NULL, OPT_STR, &(a).fp8, "on|off: FP8 FFN for layers >= 1 (default off; approximate)"}, \
    {"--seed", NULL, OPT_U64, &(a).decode.seed, "RNG seed (default 0)"},                            \
    {"--chat", NULL, OPT_FLAG, &(a).chat, "format prompts as a user message (chat format)"},       \
    {"--system", NULL, OPT_STR, &(a).system, "system message for --chat"},                          \
    {"--chat-template", NULL, OPT_STR, &(a).mp.chat_template, "chat format override: llada, llama3, chatml"}, \
    {"--tokenizer", NULL, OPT_STR, &(a).mp.tokenizer_path, "tokenizer.json to use instead of the model's"}, \
    CLI_DEVICE_OPTS((a).mp)
// clang-format on

static const char dllm_usage[] =
    "usage: lazyinfer dllm -m MODEL -p PROMPT [--chat] --gen-length N "
    "--block-length B --steps S [--remasking low_confidence|random]\n"
    "       [--confidence auto|f32|f64]"
    "       [--temp T] [--cfg C] [--threshold TAU | --factor F] "
    "[--dpad-window W --dpad-k K --dpad-scale X]\n"
    "       [--lacache embed,rope,fa,trunc|all|off] [--fp8 on|off] "
    "[--seed S] [--trace] [-t THREADS]\n\n"
    "Fast-dLLM v2 models: --block-length B --sub-block-length S --threshold TAU.\n\n"
    "Decodes PROMPT with a diffusion LM (LLaDA SAR decoding or Fast-dLLM v2 block diffusion, "
    "docs/DLLM.md): "
    "text on stdout, figures on stderr.";

int cmd_dllm(int argc, char **argv) {
    dllm_args a;
    args_init(&a);
    const opt opts[] = {
        {"--prompt", "-p", OPT_STR, &a.prompt, "prompt text (required)"},
        {"--lacache", NULL, OPT_STR, &a.lacache,
         "embed,rope,fa,trunc | all | off (default all: exact)"},
        {"--trace", NULL, OPT_FLAG, &a.trace,
         "print the canvas after every step on stderr (masks ▒)"},
        DLLM_DECODE_OPTS(a),
    };
    int r =
        cli_parse_args(argc, argv, dllm_usage, opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r == 1 ? 0 : 2;
    li_dllm_params p;
    if (!args_to_params("dllm", &a, &p)) return 2;
    if (!a.prompt) {
        fprintf(stderr, "lazyinfer dllm: -p PROMPT is required (see --help)\n");
        return 2;
    }
    if (a.mp.n_threads < 0) {
        fprintf(stderr, "lazyinfer dllm: -t %d must not be negative\n", a.mp.n_threads);
        return 2;
    }
    li_model *m = NULL;
    if ((r = load_model("dllm", &a, &m))) return r;
    int status = 0;
    int32_t *ids = NULL, *gen = NULL;
    int n = 0;
    char *text = NULL;
    trace_ctx tc = {m, -1, -1, {0}, {0}};
    if (render_prompt(m, a.system, a.prompt, a.chat, &ids, &n) != LI_OK) {
        status = cli_fail("cannot tokenize the prompt");
        goto out;
    }
    li_dllm_special_tokens(m, NULL, &tc.eos, &tc.eot);
    if (a.trace) {
        p.on_step = trace_step;
        p.user = &tc;
    }
    gen = malloc((size_t)p.gen_length * sizeof *gen);
    if (!gen) {
        fprintf(stderr, "lazyinfer dllm: out of memory\n");
        status = 1;
        goto out;
    }
    li_dllm_stats st;
    if (li_dllm_generate(m, ids, n, &p, gen, &st) != LI_OK) {
        status = cli_fail("decoding failed");
        goto out;
    }
    if (li_dllm_detokenize(m, gen, p.gen_length, &text) != LI_OK) {
        status = cli_fail("cannot decode the tokens");
        goto out;
    }
    printf("%s\n", text);
    fflush(stdout);
    fprintf(stderr, "prompt %d tokens, gen_length %d, block %d, %d steps taken%s\n", n,
            p.gen_length, p.block_length, st.steps, st.early_stopped ? " (early stop)" : "");
    fprintf(stderr, "latency %.1f ms | NFE %d | %.2f ms/step\n", st.latency_ms, st.nfe,
            st.ms_per_step);
    if (st.backend_allocs > 0)  // (the latency includes them)
        fprintf(stderr, "note: the backend grew its scratch %lld times during the steps\n",
                (long long)st.backend_allocs);
    fprintf(stderr,
            "tokens/s %.2f (Fast-dLLM: %d generated tokens that are not EOS) | %.2f (dInfer: "
            "all %d generated positions, prompt excluded)\n",
            st.tps_fastdllm, st.n_tokens_fastdllm, st.tps_dinfer, st.n_tokens_dinfer);
out:
    li_buf_free(&tc.line);
    li_buf_free(&tc.piece);
    free(text);
    free(gen);
    li_free_tokens(ids);
    li_model_free(m);
    return status;
}

// ---- bench dllm --------------------------------------------------------------------------------

// The default prompts: the repository's GSM8K subset (data/README.md).
#define GSM8K_REL "data/gsm8k/test.jsonl"

// GSM8K: one JSON object per line with "question" and "answer".
typedef struct {
    char **q, **a;
    int n;
} gsm8k;

static void gsm8k_free(gsm8k *g) {
    for (int i = 0; i < g->n; i++) {
        free(g->q[i]);
        free(g->a[i]);
    }
    free(g->q);
    free(g->a);
}

static int gsm8k_load(const char *path, int max, gsm8k *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "lazyinfer bench dllm: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    g->q = calloc((size_t)max, sizeof *g->q);
    g->a = calloc((size_t)max, sizeof *g->a);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, status = 0;
    while (g->q && g->a && g->n < max && getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        const char *q = o ? json_string_value(json_object_get(o, "question")) : NULL;
        const char *a = o ? json_string_value(json_object_get(o, "answer")) : NULL;
        if (!q || !a) {
            fprintf(stderr,
                    "lazyinfer bench dllm: %s:%d: expected a JSON object with string "
                    "fields \"question\" and \"answer\"\n",
                    path, lineno);
            json_decref(o);
            status = 1;
            break;
        }
        g->q[g->n] = strdup(q);
        g->a[g->n] = strdup(a);
        g->n++;
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (!g->q || !g->a) {
        fprintf(stderr, "lazyinfer bench dllm: out of memory\n");
        status = 1;
    }
    return status;
}

typedef struct {
    const char *name;
    unsigned lacache;
    bool parallel, dpad;
    int fp8;  // 1: FP8 FFN on, 0: off, -1: as --fp8 says (default off)
} method;

// The counters of li_dllm_stats a method's row sums over the questions, each into an int64_t
// field of method_sum of the same name.
// clang-format off
#define METHOD_COUNTS(X)                                                                           \
    X(steps) X(nfe) X(n_tokens_fastdllm) X(n_tokens_dinfer) X(canvas_rows) X(embed_rows)           \
    X(qkv_rows) X(fa_tiles) X(fa_tiles_skipped) X(head_rows) X(fp8_gemm_rows)
// clang-format on

typedef struct {
    double latency_ms, flops;
#define COUNT_FIELD(f) int64_t f;
    METHOD_COUNTS(COUNT_FIELD)
#undef COUNT_FIELD
    int same_as_vanilla, n;
} method_sum;

// One question's stats into the method's sums.
static void method_add(method_sum *s, const li_dllm_stats *st) {
    s->latency_ms += st->latency_ms;
    s->flops += st->flops;
#define ADD_COUNT(f) s->f += st->f;
    METHOD_COUNTS(ADD_COUNT)
#undef ADD_COUNT
}

// One row of bench dllm's table, printed as soon as the method has run (a long GPU run that is
// cut short still shows the methods it finished).
static void print_method_row(const char *name, int k, const method_sum *s, double v_flops,
                             int n_prompts) {
    double lat = s->latency_ms / n_prompts;
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %lld | %lld | %lld | %lld / %lld | %lld | "
           "%.3f | %.1f%% | %lld | %s |\n",
           name, lat, s->latency_ms > 0 ? 1e3 * s->n_tokens_fastdllm / s->latency_ms : 0,
           s->latency_ms > 0 ? 1e3 * s->n_tokens_dinfer / s->latency_ms : 0,
           (double)s->nfe / n_prompts, s->steps ? s->latency_ms / s->steps : 0,
           (long long)s->canvas_rows, (long long)s->embed_rows, (long long)s->qkv_rows,
           (long long)s->fa_tiles, (long long)s->fa_tiles_skipped, (long long)s->head_rows,
           s->flops / 1e9, v_flops > 0 ? 100.0 * (1.0 - s->flops / v_flops) : 0.0,
           (long long)s->fp8_gemm_rows,
           k == 0               ? "—"
           : s->same_as_vanilla ? "yes"
                                : "no");
    fflush(stdout);
}

// `bench dllm --canvas 512,1024,2048`: the cost of one denoising step at fixed canvas sizes, the
// issue's per-step comparison (a PyTorch eager model of the same shapes is timed by
// bench/torch_baselines.py --only llada). For each size N: random prompt tokens (no special
// token), one block of B = --block-length masks at the end (P = N - B), B steps committing one
// token each, so "ms/step" is the mean over a whole block: its first step fills the caches, the
// others reuse them. A vanilla run first warms up (GEMM plans, FP8 calibration) untimed.
// true when `name` is one of the comma-separated names in `only` (NULL: every name)
static bool method_selected(const char *only, const char *name) {
    if (!only) return true;
    for (const char *p = only; *p;) {
        size_t n = strcspn(p, ",");
        if (strlen(name) == n && !strncmp(p, name, n)) return true;
        p += n + (p[n] == ',');
    }
    return false;
}

#define MAX_CANVAS_SIZES 32

// --canvas "512,1024,...": sizes > the block length B, at most 2^20; the count, or -1 after a
// message.
static int parse_canvas_list(const char *list, int B, long *sizes) {
    int n = 0;
    for (const char *p = list; *p; n++) {
        char *end;
        long N = strtol(p, &end, 10);
        if (end == p || N <= B || N > 1 << 20 || (*end && *end != ',') ||
            n == MAX_CANVAS_SIZES) {
            fprintf(stderr, "lazyinfer bench dllm: --canvas wants at most %d sizes > block "
                            "length %d and <= 1048576, comma-separated (at '%s')\n",
                    MAX_CANVAS_SIZES, B, p);
            return -1;
        }
        sizes[n] = N;
        p = *end ? end + 1 : end;
    }
    if (!n) fprintf(stderr, "lazyinfer bench dllm: --canvas wants at least one size\n");
    return n ? n : -1;
}

static int bench_dllm_canvas(li_model *m, const dllm_args *a, const li_dllm_params *base,
                             const long *sizes, int n_sizes, const char *only) {
    static const struct {
        const char *name;
        unsigned lacache;
        bool fp8;
    } rows[] = {
        {"vanilla", 0, false},
        {"+EmbedCache", LI_DLLM_LACACHE_EMBED, false},
        {"+RoPECache", LI_DLLM_LACACHE_ROPE, false},
        {"+FACache", LI_DLLM_LACACHE_FA, false},
        {"+LM-head trunc", LI_DLLM_LACACHE_TRUNC, false},
        {"+FP8 FFN", 0, true},
        {"LaCache (caches + trunc)", LI_DLLM_LACACHE_ALL, false},
        {"LaCache + FP8", LI_DLLM_LACACHE_ALL, true},
    };
    const int B = base->block_length;
    int32_t MASK, EOS, EOT;
    if (li_dllm_special_tokens(m, &MASK, &EOS, &EOT) != LI_OK) return cli_fail("special tokens");
    li_model_info info;
    li_model_get_info(m, &info);
    printf("## lazyinfer bench dllm --canvas — %s (%s), backend %s\n\n", a->mp.path, info.name,
           a->mp.backend ? a->mp.backend : "cpu");
    printf("One block of %d masks after N - %d random prompt tokens, %d steps of one token; "
           "ms/step = the block's latency / %d (its first step fills the caches). FLOPs: the "
           "engine's count of the block's work.\n\n",
           B, B, B, B);
    printf("| canvas | method | ms/step | speed-up vs vanilla | GFLOP/step | FLOPs saved | "
           "= vanilla |\n|---:|---|---:|---:|---:|---:|:-:|\n");
    fflush(stdout);
    int status = 0;
    for (int si = 0; si < n_sizes && !status; si++) {
        const long N = sizes[si];
        int P = (int)N - B;
        int32_t *prompt = malloc((size_t)P * sizeof *prompt), *gen = malloc((size_t)B * 4),
                *ref = malloc((size_t)B * 4);
        if (!prompt || !gen || !ref) {
            free(prompt), free(gen), free(ref);
            return cli_fail("out of memory");
        }
        li_rng rng;
        li_rng_seed(&rng, a->decode.seed ^ (uint64_t)N);
        int lo = 100 < info.n_vocab / 4 ? 100 : 0, span = info.n_vocab / 2;
        for (int i = 0; i < P; i++) {
            int32_t t;
            do t = lo + (int32_t)(li_rng_u64(&rng) % (uint64_t)span);
            while (t == MASK || t == EOS || t == EOT);
            prompt[i] = t;
        }
        li_dllm_params q = *base;
        q.gen_length = q.block_length = q.steps = B;
        q.threshold = q.factor = 0;
        q.commit_per_step = 0;
        q.dpad = false;
        double v_ms = 0, v_flops = 0;
        li_dllm_stats st;
        q.lacache = 0;
        q.fp8 = false;
        if (li_dllm_generate(m, prompt, P, &q, ref, &st) != LI_OK) { // warm-up
            fprintf(stderr, "lazyinfer bench dllm: canvas %ld warm-up: %s\n", N, li_last_error());
            status = 1;
        }
        for (size_t k = 0; k < sizeof rows / sizeof rows[0] && !status; k++) {
            if (k > 0 && !method_selected(only, rows[k].name)) continue;  // vanilla: the baseline
            q.lacache = rows[k].lacache;
            q.fp8 = rows[k].fp8;
            if (li_dllm_generate(m, prompt, P, &q, gen, &st) != LI_OK) {
                fprintf(stderr, "lazyinfer bench dllm: canvas %ld, %s: %s\n", N, rows[k].name,
                        li_last_error());
                status = 1;
                break;
            }
            double ms = st.latency_ms / st.steps, fl = st.flops / st.steps;
            if (st.backend_allocs > 0)
                fprintf(stderr, "note: canvas %ld, %s: the backend grew its scratch %lld times "
                        "during the timed steps\n", N, rows[k].name, (long long)st.backend_allocs);
            if (k == 0) v_ms = ms, v_flops = fl;
            printf("| %ld | %s | %.2f | %.2fx | %.3g | %.1f%% | %s |\n", N, rows[k].name, ms,
                   v_ms / ms, fl / 1e9, 100.0 * (1.0 - fl / v_flops),
                   memcmp(gen, ref, (size_t)B * 4) ? "no" : "yes");
            fflush(stdout);
        }
        free(prompt), free(gen), free(ref);
    }
    printf("\n= vanilla: the block's committed tokens equal the vanilla run's (FP8 is approximate: "
           "a difference there is expected, not a failure).\n");
    return status;
}

// --prompt-out FILE: the token ids each question was decoded from, with the settings of the
// vanilla schedule, as one JSON object:
//   {"model", "shots", "prompt_tokens_cut" (0: not cut), "gen_length", "block_length", "steps",
//    "prompts": [{"n_tokens": P, "ids": [P ids]}, ...]}
// A baseline outside the engine (bench/torch_baselines.py --llada-prompt-ids) reads it to decode
// the very same prompt: a synthetic model has a byte tokenizer that no other program shares.
// Returns 0, or 1 after a message.
static int write_prompts(const char *path, const char *model, int32_t *const *ids, const int *n_ids,
                         int n_prompts, int shots, int prompt_tokens, const li_dllm_params *p) {
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "model", model, "shots", shots,
                             "prompt_tokens_cut", prompt_tokens, "gen_length", p->gen_length,
                             "block_length", p->block_length, "steps", p->steps);
    json_t *list = json_array();
    bool ok = root && list && !json_object_set(root, "prompts", list);
    for (int i = 0; ok && i < n_prompts; i++) {
        json_t *one = json_pack("{s:i}", "n_tokens", n_ids[i]), *arr = json_array();
        ok = one && arr && !json_object_set(one, "ids", arr) && !json_array_append(list, one);
        for (int t = 0; ok && t < n_ids[i]; t++)
            ok = !json_array_append_new(arr, json_integer(ids[i][t]));
        json_decref(one);
        json_decref(arr);
    }
    int status = 0;
    if (!ok) {
        fprintf(stderr, "lazyinfer bench dllm: --prompt-out: out of memory\n");
        status = 1;
    } else if (json_dump_file(root, path, JSON_COMPACT) != 0) {
        fprintf(stderr, "lazyinfer bench dllm: cannot write --prompt-out %s: %s\n", path,
                strerror(errno));
        status = 1;
    }
    json_decref(list);
    json_decref(root);
    return status;
}

static const char bench_dllm_usage[] =
    "usage: lazyinfer bench dllm -m MODEL [--prompts FILE] [--n-prompts N] "
    "[--shots 0|1|4] [--chat]\n"
    "       [--gen-length N] [--block-length B] [--steps S] [--threshold TAU "
    "| --factor F | --commit-per-step K] [--dpad-window W] [--fp8 on|off]\n"
    "       [--prompt-out FILE]\n\n"
    "Decodes GSM8K questions with each method (vanilla, each LaCache "
    "component, all LaCache, parallel, DPad, all combined\n"
    "with FP8 FFN, all combined without it) and prints a markdown table.\n"
    "Defaults for CPU: gen 64, block 16, "
    "steps 64, 2 questions, 0-shot, parallel = threshold 0.9.";

int cmd_bench_dllm(int argc, char **argv) {
    dllm_args a;
    args_init(&a);
    a.decode.gen_length = 64;
    a.decode.block_length = 16;
    a.decode.steps = 64;
    const char *prompts = NULL, *only = NULL, *canvas = NULL, *prompt_out = NULL;
    int n_prompts = 2, shots = 0, prompt_tokens = 0;
    const opt opts[] = {
        {"--prompts", NULL, OPT_STR, &prompts,
         "GSM8K jsonl (default " GSM8K_REL ", under the working directory or next to the "
         "binary)"},
        {"--n-prompts", "-n", OPT_INT, &n_prompts, "questions to decode per method (default 2)"},
        {"--shots", NULL, OPT_INT, &shots,
         "few-shot examples before each question: 0 (default), 1 or 4"},
        {"--methods", NULL, OPT_STR, &only, "comma-separated subset of the method names"},
        {"--prompt-tokens", NULL, OPT_INT, &prompt_tokens,
         "keep only each prompt's last N tokens (synthetic models' byte tokenizer makes a "
         "prompt ~3.3x longer than a real one; 575 = the Llama-3 count of the 4-shot prompt)"},
        {"--prompt-out", NULL, OPT_STR, &prompt_out,
         "write the prompts' token ids, gen length, block and steps to FILE (JSON), for a "
         "baseline that must decode the same prompt (bench/torch_baselines.py)"},
        {"--canvas", NULL, OPT_STR, &canvas,
         "instead: time denoising steps at these canvas sizes (e.g. 512,1024,2048), one block "
         "of --block-length at the end, each LaCache component and FP8"},
        DLLM_DECODE_OPTS(a),
    };
    int r = cli_parse_args(argc, argv, bench_dllm_usage, opts, sizeof opts / sizeof opts[0], NULL,
                           0, NULL);
    if (r) return r == 1 ? 0 : 2;
    if (n_prompts < 1 || n_prompts > 10000) {
        fprintf(stderr, "lazyinfer bench dllm: --n-prompts %d must be in 1..10000\n", n_prompts);
        return 2;
    }
    if (prompt_tokens < 0) {
        fprintf(stderr, "lazyinfer bench dllm: --prompt-tokens %d must not be negative\n",
                prompt_tokens);
        return 2;
    }
    if (shots < 0 || shots > 8) {
        fprintf(stderr, "lazyinfer bench dllm: --shots %d must be in 0..8\n", shots);
        return 2;
    }
    if (a.lacache) {
        fprintf(stderr,
                "lazyinfer bench dllm: --lacache is chosen per method here (see --methods)\n");
        return 2;
    }
    if (a.mp.n_threads < 0) {
        fprintf(stderr, "lazyinfer bench dllm: -t %d must not be negative\n", a.mp.n_threads);
        return 2;
    }
    li_dllm_params base;
    if (!args_to_params("bench dllm", &a, &base)) return 2;
    li_dllm_params par = base; // the parallel setting: given, else threshold 0.9
    if (!(a.threshold || a.factor || a.decode.commit_per_step)) par.threshold = 0.9;
    par.dpad = false;
    base.threshold = base.factor = 0;
    base.commit_per_step = 0;
    li_dllm_params dp = base;
    if (!dp.dpad) dp.dpad = true; // DPad with the given (or default) window, k, scale
    base.dpad = false;

    if (canvas && prompt_out) {
        fprintf(stderr, "lazyinfer bench dllm: --prompt-out is for the GSM8K table, not "
                        "--canvas (its prompts are random)\n");
        return 2;
    }
    if (canvas) {  // the list is checked before the model loads
        long sizes[MAX_CANVAS_SIZES];
        int n_sizes = parse_canvas_list(canvas, base.block_length, sizes);
        if (n_sizes < 0) return 2;
        li_model *m = NULL;
        if ((r = load_model("bench dllm", &a, &m))) return r;
        li_model_info info;
        li_model_get_info(m, &info);
        if (info.bd_size > 0) {
            fprintf(stderr, "lazyinfer bench dllm: --canvas is for LLaDA models; a Fast-dLLM v2 "
                            "model is measured by the GSM8K table (drop --canvas)\n");
            li_model_free(m);
            return 2;
        }
        r = bench_dllm_canvas(m, &a, &base, sizes, n_sizes, only);
        li_model_free(m);
        return r;
    }
    char prompts_buf[PATH_MAX + sizeof GSM8K_REL + 1];
    if (!prompts && !(prompts = cli_data_path(GSM8K_REL, prompts_buf, sizeof prompts_buf))) {
        cli_data_missing("bench dllm", "GSM8K file", GSM8K_REL, prompts_buf,
                         "run from the repository root (the file is in git) or pass "
                         "--prompts FILE");
        return 2;
    }
    gsm8k g;
    if (gsm8k_load(prompts, n_prompts + shots, &g)) {
        gsm8k_free(&g);
        return 1;
    }
    if (g.n < n_prompts + shots) {
        fprintf(stderr,
                "lazyinfer bench dllm: %s has %d questions, %d needed (n-prompts + shots)\n",
                prompts, g.n, n_prompts + shots);
        gsm8k_free(&g);
        return 2;
    }

    // "all combined" is everything, the FP8 FFN included (part of LaCache's recipe); the row
    // after it is the same without FP8: the comparison with figures taken before FP8 joined it,
    // and the cost of FP8's approximation alone.
    const method llada_methods[] = {
        {"vanilla", 0, false, false, -1},
        {"+EmbedCache", LI_DLLM_LACACHE_EMBED, false, false, -1},
        {"+RoPECache", LI_DLLM_LACACHE_ROPE, false, false, -1},
        {"+FACache", LI_DLLM_LACACHE_FA, false, false, -1},
        {"+LM-head trunc", LI_DLLM_LACACHE_TRUNC, false, false, -1},
        {"+LaCache (all)", LI_DLLM_LACACHE_ALL, false, false, -1},
        {"+parallel", 0, true, false, -1},
        {"+DPad", 0, false, true, -1},
        {"all combined", LI_DLLM_LACACHE_ALL, true, true, 1},
        {"all combined (no FP8)", LI_DLLM_LACACHE_ALL, true, true, 0},
    };
    // A Fast-dLLM v2 model (block diffusion, threshold decoding always): the reference's
    // forward (vanilla), each LaCache component (exact: the layer-0 caches across a block's
    // steps, the head on the sub-block's rows), all of them, and all with the FP8 FFN of layers
    // >= 1 (approximate); the names of --canvas's rows.
    const method bd_methods[] = {
        {"vanilla", 0, true, false, 0},
        {"+EmbedCache", LI_DLLM_LACACHE_EMBED, true, false, 0},
        {"+RoPECache", LI_DLLM_LACACHE_ROPE, true, false, 0},
        {"+FACache", LI_DLLM_LACACHE_FA, true, false, 0},
        {"+LM-head trunc", LI_DLLM_LACACHE_TRUNC, true, false, 0},
        {"LaCache (caches + trunc)", LI_DLLM_LACACHE_ALL, true, false, 0},
        {"LaCache + FP8", LI_DLLM_LACACHE_ALL, true, false, 1},
    };

    li_model *m = NULL;
    if ((r = load_model("bench dllm", &a, &m))) {
        gsm8k_free(&g);
        return r;
    }
    li_model_info info;
    li_model_get_info(m, &info);
    const bool bd = info.bd_size > 0;
    const method *methods = bd ? bd_methods : llada_methods;
    const int n_methods = bd ? (int)(sizeof bd_methods / sizeof bd_methods[0])
                             : (int)(sizeof llada_methods / sizeof llada_methods[0]);
    int status = 0;
    int32_t **ids = calloc((size_t)n_prompts, sizeof *ids);
    int *n_ids = calloc((size_t)n_prompts, sizeof *n_ids);
    int32_t *vanilla = calloc((size_t)n_prompts * base.gen_length, sizeof *vanilla);
    int32_t *gen = calloc((size_t)base.gen_length, sizeof *gen);
    method_sum *sum = calloc((size_t)n_methods, sizeof *sum);
    li_buf text = {0};
    if (!ids || !n_ids || !vanilla || !gen || !sum) {
        fprintf(stderr, "lazyinfer bench dllm: out of memory\n");
        status = 1;
        goto out;
    }
    // Prompts: `shots` solved examples (the first records), then the question.
    int total_prompt = 0;
    for (int i = 0; i < n_prompts; i++) {
        text.len = 0;
        for (int s = 0; s < shots; s++)
            li_buf_printf(&text, "Question: %s\nAnswer: %s\n\n", g.q[s], g.a[s]);
        li_buf_printf(&text, "Question: %s\nAnswer:", g.q[shots + i]);
        if (render_prompt(m, a.system, text.data, a.chat, &ids[i], &n_ids[i]) != LI_OK) {
            status = cli_fail("cannot tokenize a prompt");
            goto out;
        }
        if (prompt_tokens > 0 && n_ids[i] > prompt_tokens) {  // its tail: the question last
            memmove(ids[i], ids[i] + (n_ids[i] - prompt_tokens),
                    (size_t)prompt_tokens * sizeof *ids[i]);
            n_ids[i] = prompt_tokens;
        }
        total_prompt += n_ids[i];
    }
    if (prompt_out &&
        write_prompts(prompt_out, a.mp.path, ids, n_ids, n_prompts, shots, prompt_tokens, &base)) {
        status = 1;
        goto out;
    }
    printf("## lazyinfer bench dllm — %s (%s, %.1f M params), %d threads\n\n", a.mp.path, info.name,
           info.n_params / 1e6, info.n_threads);
    printf(
        "%d GSM8K question(s) from %s, %d-shot%s, mean prompt %.0f tokens%s; gen_length %d, "
        "block %d, steps %d; parallel = %s; DPad window %d, k %g, scale %g; FP8 FFN %s (in "
        "\"all combined\" always, in \"all combined (no FP8)\" never); seed %llu.\n",
        n_prompts, prompts, shots, a.chat ? ", chat format" : "", (double)total_prompt / n_prompts,
        prompt_tokens > 0 ? " (each cut to its last --prompt-tokens)" : "",
        base.gen_length, base.block_length, base.steps,
        par.threshold > 0 ? "threshold"
        : par.factor > 0  ? "factor"
                          : "commit-per-step",
        dp.dpad_window, dp.dpad_k_sigma, dp.dpad_scale, base.fp8 ? "on" : "off",
        (unsigned long long)a.decode.seed);
    if (bd)
        printf("Fast-dLLM v2 (block diffusion): block %d, sub-block %d, every row decoded with the "
               "threshold below; the DPad and FP8 settings above do not apply, the rows say FP8.\n",
               base.block_length, base.sub_block_length ? base.sub_block_length : 8);
    printf("Prompt tokens per question:");
    for (int i = 0; i < n_prompts && i < 16; i++) printf(" %d", n_ids[i]);
    printf("%s; token ids %s.\n", n_prompts > 16 ? " …" : "",
           prompt_out ? prompt_out : "not written (--prompt-out FILE writes them)");
    if (par.threshold > 0)
        printf("Threshold tau = %g.", par.threshold);
    else if (par.factor > 0)
        printf("Factor f = %g.", par.factor);
    else
        printf("Commit exactly %d per step (a fixed schedule, not confidence-driven).",
               par.commit_per_step);
    printf(" tok/s F = Fast-dLLM count (generated tokens that are not EOS) / latency; tok/s D = "
           "dInfer count (all gen_length positions, prompt excluded) / latency. Latency, NFE and "
           "steps are per question (mean); work columns are totals over the questions. FLOPs "
           "saved: against vanilla's total. FP8 GEMM rows: rows through the FP8 FFN GEMMs (0: "
           "the FFN in the model's dtype). = vanilla: the committed tokens equal vanilla's.\n\n");
    printf("| method | latency ms | tok/s F | tok/s D | NFE | ms/step | canvas rows | embed rows | "
           "QKV rows | FA tiles done / served | head rows | GFLOP | FLOPs saved | FP8 GEMM rows | "
           "= vanilla |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|\n");
    // Warm-up, untimed: one forward per block of the first question, for each FP8 setting the
    // selected rows use (plans, cuDNN's set-up and the FP8 weights, quantised on first use, are
    // then not in the first timed row).
    for (int f = 0; f < 2 && !status; f++) {
        bool used = false;
        for (int k = 0; k < n_methods; k++)
            if ((k == 0 || method_selected(only, methods[k].name)) &&
                (methods[k].fp8 < 0 ? base.fp8 : methods[k].fp8 == 1) == (f == 1))
                used = true;
        if (!used) continue;
        li_dllm_params w = bd ? par : base;
        w.lacache = 0;  // vanilla's shapes
        w.fp8 = f == 1;
        w.steps = w.gen_length / w.block_length;
        li_dllm_stats st;
        li_status rc = li_dllm_generate(m, ids[0], n_ids[0], &w, gen, &st);
        if (rc != LI_OK && !(w.fp8 && rc == LI_ERR_UNSUPPORTED)) {
            fprintf(stderr, "lazyinfer bench dllm: warm-up: %s\n", li_last_error());
            status = 1;
            goto out;
        }
    }
    int n_run = 0;
    for (int k = 0; k < n_methods; k++) {
        if (k > 0 && !method_selected(only, methods[k].name)) continue;  // vanilla: baseline
        li_dllm_params p = methods[k].parallel ? par : base;
        if (methods[k].fp8 >= 0) p.fp8 = methods[k].fp8 == 1;
        if (methods[k].dpad) {
            p.dpad = true;
            p.dpad_window = dp.dpad_window;
            p.dpad_k_sigma = dp.dpad_k_sigma;
            p.dpad_scale = dp.dpad_scale;
        }
        p.lacache = methods[k].lacache;
        method_sum *s = &sum[k];
        s->n = 1;
        s->same_as_vanilla = 1;
        for (int i = 0; i < n_prompts; i++) {
            li_dllm_stats st;
            p.seed = a.decode.seed + (uint64_t)i;
            li_status rc = li_dllm_generate(m, ids[i], n_ids[i], &p, gen, &st);
            if (rc == LI_ERR_UNSUPPORTED && p.fp8) {  // a backend without the FP8 ops
                printf("| %s | — (%s) |\n", methods[k].name, li_last_error());
                s->n = 0;
                break;
            }
            if (rc != LI_OK) {
                fprintf(stderr, "lazyinfer bench dllm: method %s, question %d: %s\n",
                        methods[k].name, i, li_last_error());
                status = 1;
                goto out;
            }
            if (k == 0)
                memcpy(vanilla + (size_t)i * p.gen_length, gen, (size_t)p.gen_length * 4);
            else if (memcmp(vanilla + (size_t)i * p.gen_length, gen, (size_t)p.gen_length * 4))
                s->same_as_vanilla = 0;
            method_add(s, &st);
            li_progress("bench dllm", ++n_run, (int64_t)n_methods * n_prompts);
        }
        if (s->n) print_method_row(methods[k].name, k, s, sum[0].flops, n_prompts);  // as it ends
    }

    if (!strncmp(a.mp.path, "synth:", 6))
        printf("\nSynthetic model: random weights, so confidences are flat and the text is noise; "
               "threshold/factor then commit about one token per step — use --commit-per-step K "
               "to measure parallel decoding's cost per step.\n");
out:
    li_buf_free(&text);
    if (ids)
        for (int i = 0; i < n_prompts; i++)
            li_free_tokens(ids[i]);
    free(ids);
    free(n_ids);
    free(vanilla);
    free(gen);
    free(sum);
    gsm8k_free(&g);
    li_model_free(m);
    return status;
}
