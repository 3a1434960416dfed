// test-model-ref.c — the Llama-family forward pass (Qwen2 included) checked against HF
// transformers.
//
// For every tests/data/ref/*.json (written once by tests/ref/gen_llama_ref.py and
// gen_qwen2_ref.py, see tests/ref/README.md) this loads the case's model through the public API only and compares:
//   - the last-position logits with the raw float32 file next to the JSON (max relative error
//     max|a-b| / max|b| and NMSE),
//   - the top-20 (id, logit) of every prompt position,
//   - the 64 greedy tokens of li_generate (temperature 0, no EOS stop),
//   - for cases with a text prompt, li_tokenize(prompt) against HF's prompt ids, and for chat
//     cases li_chat_render(system, user) against HF's apply_chat_template.
// Then it writes the tiny Qwen2 checkpoints as GGUF files (general.architecture "qwen2", read from
// the committed safetensors with the format layer, the one use of an internal header here) and
// compares their logits with the same reference files.
// It is not a unit test of any one op (tests/test-ops.c does that) and needs no Python or torch:
// the reference files are committed. Cases whose model lives under the git-ignored models/
// folder are skipped when the file is absent; a missing committed checkpoint is a failure.
//
// Environment: LI_REF_DIR overrides the case folder (default tests/data/ref, relative to the
// repository root, where tests/run.sh runs the tests); LI_REF_ROOT the folder model paths are
// relative to (default "."); LI_REF_ONLY=substring runs only matching cases.
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "gguf-write.h"
#include "lazyinfer.h"
#include "test.h"

// Tolerances. Both sides compute in fp32 from the same weights: for GGUF cases transformers
// dequantises Q4_1/Q8_0 to fp32 as lazyinfer does (d·q + m from f16 d, m: equal up to one rounding
// of the multiply-add), and the tiny checkpoints are stored in fp32. What differs is the order of
// fp32 summations (GEMM blocking, softmax, RMSNorm reductions), whose error grows like
// sqrt(K)·2^-24 per dot product and compounds over layers. gen_llama_ref.py measured HF's fp32
// logits against the same model run in float64 and stored it per case ("fp32_vs_fp64_max_rel"):
// 1.4e-6 .. 1.7e-6 for SmolLM2-135M (30 layers), 2.9e-7 .. 1.8e-6 for the tiny models. Two fp32
// implementations each that close to the exact result are within ~4e-6 of each other, so 1e-4
// leaves 25× headroom for a different summation order while real bugs cannot pass: measured on
// the 45-token tiny cases, RMSNorm eps 1e-6 for 1e-5 moves the logits 1.9e-4 .. 2.9e-4, ignoring
// rope_scaling 0.6 .. 1.15, dropping YaRN's attention factor 0.11 (tests/ref/README.md).
// lazyinfer's CPU backend measured 2.8e-7 .. 2.7e-6 on these cases when this test was written.
#define REL_TOL 1e-4   // max|a-b| / max|b| over a logit row
#define NMSE_TOL 1e-8  // (REL_TOL)^2: a uniform error at REL_TOL of the largest logit
// 10× the worst fp32-vs-fp64 error measured by gen_llama_ref.py (1.8e-6): two fp32
// implementations cannot disagree on an argmax whose top-2 margin is larger than this.
#define GREEDY_TIE_REL 1e-5
#define TOPK 20
#define MAX_GREEDY 256

typedef struct {
    int32_t id;
    float logit;
} ref_top; // one of a position's reference top-20

typedef struct {
    char name[256];      // file name without ".json"
    char model[1024];    // model path, relative to LI_REF_ROOT
    json_t *doc;         // owned: the case file, which prompt and chat_* point into
    const char *prompt;  // NULL when the case is given as token ids only
    bool has_chat;       // prompt is HF's apply_chat_template of (chat_system, chat_user)
    const char *chat_system; // NULL: none given (the template may add its default)
    const char *chat_user;
    int32_t *prompt_ids;
    int n_prompt;
    ref_top *top; // (n_prompt, TOPK), descending logits per position
    int32_t greedy[MAX_GREEDY];
    float greedy_margin[MAX_GREEDY];  // ref top-1 minus top-2 logit per step (+inf if absent)
    int n_greedy;
    float *last_logits;  // (V,) of position n_prompt-1
    int n_vocab;
} ref_case;

static void case_free(ref_case *c) {
    json_decref(c->doc);
    free(c->prompt_ids);
    free(c->top);
    free(c->last_logits);
    memset(c, 0, sizeof(*c));
}

// Reads a whole file of float32 little-endian values. Returns the count, or -1 with a message.
static long read_f32_file(const char *path, float **out, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    long n = -1;
    unsigned char *raw = NULL;
    long bytes = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (bytes < 0 || bytes % 4 != 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, err_size, "%s: size %ld is not a whole number of float32", path, bytes);
        goto done;
    }
    raw = malloc(bytes ? (size_t)bytes : 1);
    float *v = malloc(bytes ? (size_t)bytes : 1);
    if (!raw || !v || fread(raw, 1, (size_t)bytes, f) != (size_t)bytes) {
        snprintf(err, err_size, "%s: short read", path);
        free(v);
        goto done;
    }
    // Little-endian on disk whatever the host is.
    for (long i = 0; i < bytes / 4; i++) {
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
                     (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&v[i], &u, 4);
    }
    *out = v;
    n = bytes / 4;
done:
    free(raw);
    fclose(f);
    return n;
}

static int json_int_array(const json_t *a, int32_t *dst, int max_n) {
    if (!json_is_array(a) || (int)json_array_size(a) > max_n) return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e)) return -1;
        json_int_t v = json_integer_value(e);
        if (v < 0 || v > INT32_MAX) return -1;
        dst[i] = (int32_t)v;
    }
    return (int)json_array_size(a);
}

// Parses <dir>/<name>.json and its logits file. Returns 0, or -1 with a message in err.
#define BAD(what)                                                                                  \
    do {                                                                                           \
        field = (what);                                                                            \
        goto bad;                                                                                  \
    } while (0)
static int case_load(ref_case *c, const char *dir, const char *name, char *err, size_t err_size) {
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%.*s", (int)(strlen(name) - 5), name);
    char path[1536];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    json_error_t jerr;
    json_t *root = c->doc = json_load_file(path, 0, &jerr);
    if (!root) {
        snprintf(err, err_size, "%s:%d: %s", path, jerr.line, jerr.text);
        return -1;
    }
    int rc = -1;
    const char *field = NULL;
    json_t *model = json_object_get(root, "model"), *prompt = json_object_get(root, "prompt");
    json_t *ids = json_object_get(root, "prompt_ids"), *top = json_object_get(root, "top20");
    json_t *greedy = json_object_get(root, "greedy"), *lf = json_object_get(root, "logits_file");
    json_t *margins = json_object_get(root, "greedy_margins");
    if (!json_is_string(model)) BAD("model");
    snprintf(c->model, sizeof(c->model), "%s", json_string_value(model));
    if (json_is_string(prompt)) {
        c->prompt = json_string_value(prompt);
    } else if (prompt && !json_is_null(prompt)) {
        BAD("prompt");
    }
    json_t *chat = json_object_get(root, "chat");
    if (chat) {
        json_t *sys = json_object_get(chat, "system"), *user = json_object_get(chat, "user");
        if (!json_is_object(chat) || !json_is_string(user) || !c->prompt ||
            (sys && !json_is_null(sys) && !json_is_string(sys))) {
            BAD("chat");
        }
        c->has_chat = true;
        c->chat_user = json_string_value(user);
        if (json_is_string(sys)) c->chat_system = json_string_value(sys);
    }
    if (!json_is_array(ids) || json_array_size(ids) == 0) BAD("prompt_ids");
    c->n_prompt = (int)json_array_size(ids);
    c->prompt_ids = malloc(sizeof(int32_t) * c->n_prompt);
    if (!c->prompt_ids) BAD("prompt_ids (out of memory)");
    if (json_int_array(ids, c->prompt_ids, c->n_prompt) != c->n_prompt) BAD("prompt_ids");
    c->n_greedy = json_int_array(greedy, c->greedy, MAX_GREEDY);
    if (c->n_greedy <= 0) BAD("greedy");
    for (int i = 0; i < c->n_greedy; i++) c->greedy_margin[i] = INFINITY;
    if (margins) {
        if (!json_is_array(margins) || (int)json_array_size(margins) != c->n_greedy) {
            BAD("greedy_margins");
        }
        for (int i = 0; i < c->n_greedy; i++) {
            json_t *e = json_array_get(margins, i);
            if (!json_is_number(e)) BAD("greedy_margins");
            c->greedy_margin[i] = (float)json_number_value(e);
        }
    }
    // top20: [[[id, logit], ...TOPK] per prompt position]
    if (!json_is_array(top) || (int)json_array_size(top) != c->n_prompt) BAD("top20");
    c->top = malloc(sizeof *c->top * c->n_prompt * TOPK);
    if (!c->top) BAD("top20 (out of memory)");
    for (int p = 0; p < c->n_prompt; p++) {
        json_t *row = json_array_get(top, p);
        if (!json_is_array(row) || json_array_size(row) != TOPK) BAD("top20 row");
        for (int k = 0; k < TOPK; k++) {
            json_t *pair = json_array_get(row, k);
            json_t *id = json_array_get(pair, 0), *lg = json_array_get(pair, 1);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(id) ||
                !json_is_number(lg) || json_integer_value(id) < 0) {
                BAD("top20 entry");
            }
            c->top[p * TOPK + k] =
                (ref_top){(int32_t)json_integer_value(id), (float)json_number_value(lg)};
        }
    }
    if (!json_is_string(lf) || strchr(json_string_value(lf), '/')) BAD("logits_file");
    snprintf(path, sizeof(path), "%s/%s", dir, json_string_value(lf));
    long n = read_f32_file(path, &c->last_logits, err, err_size);
    if (n < 0) goto done;
    if (n < TOPK) {
        snprintf(err, err_size, "%s: %ld logits, fewer than %d", path, n, TOPK);
        goto done;
    }
    c->n_vocab = (int)n;
    for (int p = 0; p < c->n_prompt; p++)
        for (int k = 0; k < TOPK; k++)
            if (c->top[p * TOPK + k].id >= c->n_vocab) BAD("top20 (an id >= n_vocab)");
    for (int i = 0; i < c->n_greedy; i++)
        if (c->greedy[i] >= c->n_vocab) BAD("greedy (an id >= n_vocab)");
    rc = 0;
    goto done;
bad:
    snprintf(err, err_size, "%s/%s.json: \"%s\" missing or malformed", dir, c->name, field);
done:
    if (rc != 0) case_free(c);
    return rc;
}
#undef BAD

// max|a-b| / max|b| over n values.
static double max_rel_err(const float *a, const float *ref, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

// Indices of the k largest values of row (n,), descending, ties broken by the lower index.
// O(n·k) insertion: n ≤ 49152, k = 20, once per position.
static void top_k(const float *row, int n, int k, int32_t *out) {
    for (int j = 0; j < k; j++) out[j] = -1;
    for (int i = 0; i < n; i++) {
        int j = k;
        while (j > 0 && (out[j - 1] < 0 || row[i] > row[out[j - 1]])) j--;
        if (j >= k) continue;
        memmove(&out[j + 1], &out[j], sizeof(int32_t) * (k - 1 - j));
        out[j] = i;
    }
}

// Compares one position's logits (V,) with the reference top-20. tol is absolute.
// Every reference entry's logit must be within tol; our ranking must match the reference
// ranking except where two candidates are within 2·tol of each other (an fp32 near-tie, whose
// order neither side can claim). Returns the number of violations, printing the first few.
static int check_top20(const ref_case *c, int p, const float *row, double tol) {
    const ref_top *ref = &c->top[p * TOPK];
    int32_t ours[TOPK];
    top_k(row, c->n_vocab, TOPK, ours);
    int bad = 0;
    for (int k = 0; k < TOPK; k++) {
        double d = fabs((double)row[ref[k].id] - ref[k].logit);
        if (!(d <= tol)) {
            if (bad++ < 3)
                fprintf(stderr,
                        "    %s pos %d rank %d: id %d logit %.6f, ref %.6f (|d| %.3g > %.3g)\n",
                        c->name, p, k, ref[k].id, row[ref[k].id], ref[k].logit, d, tol);
        }
        if (ours[k] != ref[k].id && !(fabs((double)row[ours[k]] - row[ref[k].id]) <= 2 * tol)) {
            if (bad++ < 3)
                fprintf(stderr, "    %s pos %d rank %d: id %d (%.6f), ref id %d (%.6f here)\n",
                        c->name, p, k, ours[k], row[ours[k]], ref[k].id, row[ref[k].id]);
        }
    }
    return bad;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void run_case(ref_case *c, const char *root) {
    char tname[512], model_path[2048];
    snprintf(model_path, sizeof(model_path), "%s/%s", root, c->model);
    if (!file_exists(model_path)) {
        snprintf(tname, sizeof(tname), "ref %s", c->name);
        // Committed checkpoints must be there; models/ is git-ignored and fetched by setup.
        if (strncmp(c->model, "models/", 7) == 0) {
            TEST_SKIP(tname, "%s absent (run make setup to fetch it)", model_path);
        } else {
            TEST_BEGIN(tname);
            CHECK(0, "%s: committed checkpoint missing", model_path);
            TEST_END();
        }
        return;
    }

    li_model_params mp = li_model_default_params();
    mp.path = model_path;
    mp.n_ctx = c->n_prompt + c->n_greedy;  // both the eval and prompt + generated tokens fit
    mp.max_seqs = 1;
    li_model *m = NULL;
    snprintf(tname, sizeof(tname), "ref %s: load", c->name);
    TEST_BEGIN(tname);
    li_status st = li_model_load(&m, &mp);
    CHECK(st == LI_OK, "li_model_load(%s): %s: %s", model_path, li_status_str(st), li_last_error());
    if (st == LI_OK) {
        li_model_info info;
        li_model_get_info(m, &info);
        CHECK(info.n_vocab == c->n_vocab, "n_vocab %d, reference logits have %d", info.n_vocab,
              c->n_vocab);
        if (info.n_vocab != c->n_vocab) st = LI_ERR_FORMAT;
    }
    TEST_END();
    if (st != LI_OK) {
        li_model_free(m);
        return;
    }

    if (c->prompt) {
        snprintf(tname, sizeof(tname), "ref %s: tokenize", c->name);
        TEST_BEGIN(tname);
        int32_t *ids = NULL;
        int n = 0;
        // add_bos=true means "as the model wants", which is what HF's add_special_tokens=True did.
        st = li_tokenize(m, c->prompt, strlen(c->prompt), true, true, &ids, &n);
        CHECK(st == LI_OK, "li_tokenize: %s: %s", li_status_str(st), li_last_error());
        if (st == LI_OK) {
            CHECK(n == c->n_prompt, "%d ids, HF has %d", n, c->n_prompt);
            int first = -1;
            for (int i = 0; i < n && i < c->n_prompt; i++)
                if (ids[i] != c->prompt_ids[i]) {
                    first = i;
                    break;
                }
            CHECK(first < 0, "first difference at %d: %d vs HF %d", first,
                  first >= 0 ? ids[first] : 0, first >= 0 ? c->prompt_ids[first] : 0);
        }
        li_free_tokens(ids);
        TEST_END();
    }

    if (c->has_chat) {
        snprintf(tname, sizeof(tname), "ref %s: chat render", c->name);
        TEST_BEGIN(tname);
        char *text = NULL;
        st = li_chat_render(m, c->chat_system, c->chat_user, &text);
        CHECK(st == LI_OK, "li_chat_render: %s: %s", li_status_str(st), li_last_error());
        if (st == LI_OK)
            CHECK(strcmp(text, c->prompt) == 0, "rendered\n%s\nHF's apply_chat_template\n%s", text,
                  c->prompt);
        free(text);
        TEST_END();
    }

    // Logits of every prompt position.
    snprintf(tname, sizeof(tname), "ref %s: logits T=%d V=%d", c->name, c->n_prompt, c->n_vocab);
    TEST_BEGIN(tname);
    float *logits = malloc(sizeof(float) * (size_t)c->n_prompt * c->n_vocab);
    st = logits ? li_eval_logits(m, c->prompt_ids, c->n_prompt, logits) : LI_ERR_OOM;
    CHECK(st == LI_OK, "li_eval_logits: %s: %s", li_status_str(st), li_last_error());
    if (st == LI_OK) {
        const float *last = &logits[(size_t)(c->n_prompt - 1) * c->n_vocab];
        double rel = max_rel_err(last, c->last_logits, c->n_vocab);
        double nmse = test_nmse(last, c->last_logits, c->n_vocab);
        printf("  %s: last-position max rel err %.3g, nmse %.3g\n", c->name, rel, nmse);
        CHECK(!test_has_nan(logits, (long)c->n_prompt * c->n_vocab), "NaN in logits");
        CHECK(rel <= REL_TOL, "last-position max|a-b|/max|b| = %.3g > %.1g", rel, REL_TOL);
        CHECK(nmse <= NMSE_TOL, "last-position nmse = %.3g > %.1g", nmse, NMSE_TOL);
        int bad_pos = 0;
        for (int p = 0; p < c->n_prompt; p++) {
            // Scale of the row: the largest |logit| the reference recorded for this position
            // (the full row at the last position, the top-20 elsewhere).
            double scale = 0;
            if (p == c->n_prompt - 1) {
                for (int i = 0; i < c->n_vocab; i++)
                    if (fabs(c->last_logits[i]) > scale) scale = fabs(c->last_logits[i]);
            } else {
                for (int k = 0; k < TOPK; k++)
                    if (fabs(c->top[p * TOPK + k].logit) > scale)
                        scale = fabs(c->top[p * TOPK + k].logit);
            }
            if (scale < 1) scale = 1;
            if (check_top20(c, p, &logits[(size_t)p * c->n_vocab], REL_TOL * scale)) bad_pos++;
        }
        CHECK(bad_pos == 0, "top-20 differs at %d of %d positions", bad_pos, c->n_prompt);
    }
    free(logits);
    TEST_END();

    // Greedy generation.
    snprintf(tname, sizeof(tname), "ref %s: greedy %d", c->name, c->n_greedy);
    TEST_BEGIN(tname);
    int32_t toks[MAX_GREEDY];
    test_tokens col = {toks, MAX_GREEDY, 0};
    li_generate_params gp = test_greedy_params(c->n_greedy, &col);
    li_generate_stats gs;
    st = li_generate(m, c->prompt_ids, c->n_prompt, &gp, &gs);
    CHECK(st == LI_OK, "li_generate: %s: %s", li_status_str(st), li_last_error());
    if (st == LI_OK) {
        CHECK(col.n == c->n_greedy, "%d tokens generated, expected %d", col.n, c->n_greedy);
        int first = -1;
        for (int i = 0; i < col.n && i < c->n_greedy; i++)
            if (col.toks[i] != c->greedy[i]) {
                first = i;
                break;
            }
        // A divergence is only excusable right where HF itself had an fp32 near-tie between its
        // top two candidates; after that the texts differ legitimately. "Near" is GREEDY_TIE_REL
        // of the logit scale, not REL_TOL: every recorded case has min margin ≥ 1e-4 of its
        // scale (fp32 and fp64 HF agree on all greedy tokens), so a divergence here is a bug.
        double scale = 1;  // logit scale of this model: max|logit| of the last prompt position
        for (int i = 0; i < c->n_vocab; i++)
            if (fabs(c->last_logits[i]) > scale) scale = fabs(c->last_logits[i]);
        double tie_tol = GREEDY_TIE_REL * scale;
        if (first >= 0 && c->greedy_margin[first] <= tie_tol) {
            printf("  %s: greedy diverges at step %d where HF's top-2 margin is %.3g (near-tie)\n",
                   c->name, first, c->greedy_margin[first]);
        } else {
            CHECK(first < 0, "first difference at step %d: %d vs HF %d (HF margin %.3g)", first,
                  first >= 0 ? col.toks[first] : 0, first >= 0 ? c->greedy[first] : 0,
                  first >= 0 ? c->greedy_margin[first] : 0.0);
        }
    }
    TEST_END();
    li_model_free(m);
}

// ---- Qwen2 as GGUF -----------------------------------------------------------------------------

static void kv_key(wbuf *b, const char *k, uint32_t type) {
    w_str(b, k);
    w_u32(b, type);
}
static void kv_u32(wbuf *b, const char *k, uint32_t v) {
    kv_key(b, k, LI_GGUF_UINT32);
    w_u32(b, v);
}
static void kv_f32(wbuf *b, const char *k, float v) {
    kv_key(b, k, LI_GGUF_FLOAT32);
    w_bytes(b, &v, 4);
}
static void kv_str(wbuf *b, const char *k, const char *v) {
    kv_key(b, k, LI_GGUF_STRING);
    w_str(b, v);
}

// The GGUF name of an HF Qwen2 tensor (llama.cpp's convert_hf_to_gguf), or false.
static bool gguf_name(const char *hf, char *out, size_t cap) {
    static const char *const map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"},   {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    int il, off = 0;
    if (strcmp(hf, "model.embed_tokens.weight") == 0) return snprintf(out, cap, "token_embd.weight") > 0;
    if (strcmp(hf, "model.norm.weight") == 0) return snprintf(out, cap, "output_norm.weight") > 0;
    if (strcmp(hf, "lm_head.weight") == 0) return snprintf(out, cap, "output.weight") > 0;
    if (sscanf(hf, "model.layers.%d.%n", &il, &off) != 1 || off == 0) return false;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(hf + off, map[i][0]) == 0) return snprintf(out, cap, "blk.%d.%s", il, map[i][1]) > 0;
    return false;
}

static double cfg_num(json_t *cfg, const char *key) {
    return json_number_value(json_object_get(cfg, key));
}

// Writes dir's Qwen2 checkpoint (config.json, model.safetensors, tokenizer.json) as an F32 GGUF
// with general.architecture "qwen2", as llama.cpp's converter lays it out: qwen2.* keys, Q/K
// rows not permuted, blk.N.attn_{q,k,v}.bias, no output.weight when the head is tied,
// tokenizer.ggml.pre "qwen2". Returns false with a message on failure.
static bool write_qwen2_gguf(const char *dir, const char *path) {
    char p[1100];
    json_error_t jerr;
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *cfg = json_load_file(p, 0, &jerr);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    json_t *tok = json_load_file(p, 0, &jerr);
    li_safetensors *st = NULL;
    bool ok = false;
    FILE *f = NULL;
    wbuf b = {0};
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(cfg && tok && li_safetensors_open(&st, p) == LI_OK, "%s: %s %s", dir, jerr.text,
          li_last_error());
    if (!cfg || !tok || !st) goto done;
    json_t *vocab = json_object_get(json_object_get(tok, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(tok, "model"), "merges");
    int V = (int)cfg_num(cfg, "vocab_size"), n_tok = (int)json_object_size(vocab);
    int64_t n_t = li_safetensors_count(st);
    w_bytes(&b, "GGUF", 4);
    w_u32(&b, 3);
    w_u64(&b, (uint64_t)n_t);
    w_u64(&b, 16);
    kv_str(&b, "general.architecture", "qwen2");
    kv_u32(&b, "qwen2.block_count", (uint32_t)cfg_num(cfg, "num_hidden_layers"));
    kv_u32(&b, "qwen2.context_length", (uint32_t)cfg_num(cfg, "max_position_embeddings"));
    kv_u32(&b, "qwen2.embedding_length", (uint32_t)cfg_num(cfg, "hidden_size"));
    kv_u32(&b, "qwen2.feed_forward_length", (uint32_t)cfg_num(cfg, "intermediate_size"));
    kv_u32(&b, "qwen2.attention.head_count", (uint32_t)cfg_num(cfg, "num_attention_heads"));
    kv_u32(&b, "qwen2.attention.head_count_kv", (uint32_t)cfg_num(cfg, "num_key_value_heads"));
    kv_f32(&b, "qwen2.rope.freq_base", (float)cfg_num(cfg, "rope_theta"));
    kv_f32(&b, "qwen2.attention.layer_norm_rms_epsilon", (float)cfg_num(cfg, "rms_norm_eps"));
    kv_u32(&b, "qwen2.vocab_size", (uint32_t)V);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", "qwen2");
    kv_u32(&b, "tokenizer.ggml.eos_token_id", (uint32_t)cfg_num(cfg, "eos_token_id"));
    // tokenizer.ggml.tokens: the vocabulary in id order (ids it lacks as "[PADi]", as the
    // converter pads to vocab_size), the added tokens as control (type 3)
    const char **names = calloc((size_t)V, sizeof *names);
    if (!names) abort();
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) if (json_integer_value(v) < V) names[json_integer_value(v)] = key;
    size_t i;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < V) names[id] = json_string_value(json_object_get(v, "content"));
    }
    kv_key(&b, "tokenizer.ggml.tokens", LI_GGUF_ARRAY);
    w_u32(&b, LI_GGUF_STRING);
    w_u64(&b, (uint64_t)V);
    for (int k = 0; k < V; k++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%d]", k);
        w_str(&b, names[k] ? names[k] : pad);
    }
    kv_key(&b, "tokenizer.ggml.token_type", LI_GGUF_ARRAY);
    w_u32(&b, LI_GGUF_INT32);
    w_u64(&b, (uint64_t)V);
    for (int k = 0; k < V; k++) w_u32(&b, k >= n_tok || !names[k] ? 5 : 1);
    json_array_foreach(json_object_get(tok, "added_tokens"), i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < V) memcpy(b.p + b.n - 4 * (size_t)(V - id), &(uint32_t){3}, 4);
    }
    free(names);
    kv_key(&b, "tokenizer.ggml.merges", LI_GGUF_ARRAY);
    w_u32(&b, LI_GGUF_STRING);
    w_u64(&b, json_array_size(merges));
    json_array_foreach(merges, i, v) {
        char m[256];
        if (json_is_string(v)) snprintf(m, sizeof m, "%s", json_string_value(v));
        else snprintf(m, sizeof m, "%s %s", json_string_value(json_array_get(v, 0)),
                      json_string_value(json_array_get(v, 1)));
        w_str(&b, m);
    }
    uint64_t off = 0;
    for (int64_t k = 0; k < n_t; k++) {
        const li_st_tensor *t = li_safetensors_at(st, k);
        char gn[128];
        CHECK(gguf_name(t->name, gn, sizeof gn) && t->dtype == LI_DTYPE_F32, "tensor %s", t->name);
        w_str(&b, gn);
        w_u32(&b, (uint32_t)t->n_dims);
        for (int d = t->n_dims - 1; d >= 0; d--) w_u64(&b, (uint64_t)t->shape[d]);  // ne[0] innermost
        w_u32(&b, 0);  // GGML_TYPE_F32
        w_u64(&b, off);
        off += (t->n_bytes + 31) / 32 * 32;
    }
    w_pad(&b, 32);
    for (int64_t k = 0; k < n_t; k++) {
        const li_st_tensor *t = li_safetensors_at(st, k);
        w_bytes(&b, t->data, t->n_bytes);
        w_pad(&b, 32);
    }
    f = fopen(path, "wb");
    ok = f && fwrite(b.p, 1, b.n, f) == b.n;
    CHECK(ok, "write %s", path);
done:
    if (f) fclose(f);
    free(b.p);
    li_safetensors_close(st);
    json_decref(cfg);
    json_decref(tok);
    return ok;
}

// The tiny Qwen2 checkpoints converted to GGUF (general.architecture "qwen2") give HF's logits:
// the qwen2.* keys, the q/k/v biases and the unpermuted (NEOX) RoPE layout are read from GGUF.
static void test_qwen2_gguf(const char *dir) {
    static const char *const ckpts[] = {"tiny-qwen2-tied", "tiny-qwen2-untied"};
    for (int ci = 0; ci < 2; ci++) {
        char tname[256], src[1024], tmpl[] = "/tmp/li-qwen2-gguf-XXXXXX", path[64];
        snprintf(tname, sizeof tname, "qwen2 gguf %s: logits vs HF", ckpts[ci]);
        TEST_BEGIN(tname);
        snprintf(src, sizeof src, "%s/%s", dir, ckpts[ci]);
        CHECK(mkdtemp(tmpl) != NULL, "mkdtemp");
        snprintf(path, sizeof path, "%s/model.gguf", tmpl);
        li_model *m = NULL;
        if (write_qwen2_gguf(src, path)) {
            li_model_params mp = li_model_default_params();
            mp.path = path;
            mp.n_ctx = 64;
            mp.max_seqs = 1;
            li_status st = li_model_load(&m, &mp);
            CHECK(st == LI_OK, "li_model_load(%s): %s", path, li_last_error());
        }
        for (int T = 7; m && T <= 45; T += 38) {
            ref_case c;
            char err[1024], name[128];
            snprintf(name, sizeof name, "%s-t%d.json", ckpts[ci], T);
            if (case_load(&c, dir, name, err, sizeof err) != 0) {
                CHECK(false, "%s", err);
                continue;
            }
            float *logits = malloc(sizeof(float) * (size_t)c.n_prompt * c.n_vocab);
            li_status st = logits ? li_eval_logits(m, c.prompt_ids, c.n_prompt, logits) : LI_ERR_OOM;
            CHECK(st == LI_OK, "li_eval_logits: %s", li_last_error());
            if (st == LI_OK) {
                double rel = max_rel_err(&logits[(size_t)(c.n_prompt - 1) * c.n_vocab],
                                         c.last_logits, c.n_vocab);
                printf("  %s as gguf, T=%d: last-position max rel err %.3g\n", ckpts[ci], T, rel);
                CHECK(rel <= REL_TOL, "T=%d: max|a-b|/max|b| = %.3g > %.1g", T, rel, REL_TOL);
            }
            free(logits);
            case_free(&c);
        }
        li_model_free(m);
        remove(path);
        rmdir(tmpl);
        TEST_END();
    }
}

static int json_name_filter(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
}

int main(void) {
    const char *dir = getenv("LI_REF_DIR") ? getenv("LI_REF_DIR") : "tests/data/ref";
    const char *root = getenv("LI_REF_ROOT") ? getenv("LI_REF_ROOT") : ".";
    const char *only = getenv("LI_REF_ONLY");

    struct dirent **names = NULL;
    int n = scandir(dir, &names, json_name_filter, alphasort);
    TEST_BEGIN("ref cases present");
    CHECK(n > 0, "no *.json cases in %s (%s); run from the repository root", dir,
          n < 0 ? strerror(errno) : "empty");
    TEST_END();
    for (int i = 0; i < n; i++) {
        if (only && !strstr(names[i]->d_name, only)) {
            free(names[i]);
            continue;
        }
        ref_case c;
        char err[4096];
        char tname[512];
        snprintf(tname, sizeof(tname), "ref %s: read", names[i]->d_name);
        if (case_load(&c, dir, names[i]->d_name, err, sizeof(err)) != 0) {
            TEST_BEGIN(tname);
            CHECK(0, "%s", err);
            TEST_END();
        } else {
            run_case(&c, root);
            case_free(&c);
        }
        free(names[i]);
    }
    free(names);
    if (!only || strstr("qwen2 gguf", only)) test_qwen2_gguf(dir);
    return test_summary();
}
