// cmd-bench-quality.c — `lazyinfer bench quality`: what cross-document repair (--repair, li_repair)
// buys against full attention over the same prompt, on multi-hop questions with gold answers
// (data/musique/musique_s-30.json, CacheBlend's format: {"question", "answers", "ctxs": [{"title",
// "text"}]}; data/README.md).
//
// Per question, one chat request [system][passage 1]…[passage k][question] runs
//   - in `full` (ordinary causal attention over the whole prompt): the reference;
//   - in the document cache mode (--cache, default lazy), once without timing to cache the
//     passages, then once per --modes entry (none = block attention as cached, head:K, blend:R)
//     with the passages cached, as a RAG server with warm documents runs it.
// Greedy, up to -n tokens (default 32), stopping at the end of turn. Per mode it reports the mean
// KL(full ‖ mode) of the first answer token's distribution, the fraction of answers whose tokens
// equal full's, F1 and exact match against the gold answers (CacheBlend's normalisation: first
// line, lower case, no punctuation or articles; word-level F1, the best over the aliases), the
// prompt tokens computed for the request (n_prompt − cached: the question, the repaired tokens),
// the mean TTFT, and how much of the gap between block attention (none) and full the mode
// closes in KL and in identity. The numbers for SmolLM2 are in docs/RAG.md ("Repair").
// Checked by tests/test_bench_quality.py.
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"
#include "cli.h"

#define DATA_REL "data/musique/musique_s-30.json"
#define MAX_MODES 16
#define MAX_CTXS 16
#define MAX_GEN 256
// CacheBlend's MuSiQue prompts (example/blend_musique.py), the system message and the question's
#define SYSTEM_PROMPT                                                                              \
    "You will be asked a question after reading several passages. Please directly answer the "   \
    "question based on the given passages. Do NOT repeat the question. The answer should be "     \
    "within 5 words."
#define QUERY_PROMPT                                                                               \
    "Answer the question directly based on the given passages. Do NOT repeat the question. The "  \
    "answer should be within 5 words.\nQuestion: "

typedef struct {
    int32_t toks[MAX_GEN];
    int n;
} gen_out;

static bool on_token(void *user, int32_t tok) {
    gen_out *g = user;
    if (g->n < MAX_GEN) g->toks[g->n++] = tok;
    return true;
}

// One mode's sums over the questions.
typedef struct {
    char name[32];
    li_repair repair;
    bool full;
    double kl, f1, em, computed, ttft;
    int identical, n;
} mode_sums;

// KL(p ‖ q) of the softmaxes of logits lp, lq (V), in fp64.
static double kl_div(const float *lp, const float *lq, int V) {
    double mp = -INFINITY, mq = -INFINITY, zp = 0, zq = 0, kl = 0;
    for (int i = 0; i < V; i++) {
        mp = lp[i] > mp ? lp[i] : mp;
        mq = lq[i] > mq ? lq[i] : mq;
    }
    for (int i = 0; i < V; i++) {
        zp += exp(lp[i] - mp);
        zq += exp(lq[i] - mq);
    }
    double lzp = log(zp) + mp, lzq = log(zq) + mq;
    for (int i = 0; i < V; i++) {
        double a = lp[i] - lzp, b = lq[i] - lzq;
        kl += exp(a) * (a - b);
    }
    return kl > 0 ? kl : 0;
}

// CacheBlend's utils.py: parse_generation (first line; Yes/No), then normalize_answer (lower
// case, ASCII punctuation out, articles out, whitespace collapsed) into words: out (cap bytes)
// holds them separated by single spaces; returns the word count.
static int normalize(const char *s, bool parse, char *out, size_t cap) {
    char buf[1024];
    size_t n = 0;
    while (parse && *s == '\n') s++;
    for (; *s && n + 1 < sizeof buf && !(parse && *s == '\n'); s++) {
        unsigned char c = (unsigned char)*s;
        if (ispunct(c)) continue;
        buf[n++] = (char)tolower(c);
    }
    buf[n] = 0;
    if (parse && (!strncmp(buf, "yes", 3))) strcpy(buf, "yes");
    else if (parse && !strncmp(buf, "no", 2) && (buf[2] == 0 || isspace((unsigned char)buf[2])))
        strcpy(buf, "no");
    int words = 0;
    size_t o = 0;
    for (char *w = strtok(buf, " \t\r\n"); w; w = strtok(NULL, " \t\r\n")) {
        if (!strcmp(w, "a") || !strcmp(w, "an") || !strcmp(w, "the")) continue;
        size_t l = strlen(w);
        if (o + l + 2 > cap) break;
        if (o) out[o++] = ' ';
        memcpy(out + o, w, l);
        o += l;
        words++;
    }
    out[o] = 0;
    return words;
}

// Word-level F1 (SQuAD) of normalised pred against normalised gold, and exact match.
static double f1_of(const char *pred, const char *gold, bool *em) {
    char p[1024], g[1024];
    int np = normalize(pred, true, p, sizeof p), ng = normalize(gold, false, g, sizeof g);
    *em = !strcmp(p, g);
    if (np == 0 || ng == 0) return np == ng;
    char *pw[256], *gw[256];
    int a = 0, b = 0;
    for (char *w = strtok(p, " "); w && a < 256; w = strtok(NULL, " ")) pw[a++] = w;
    for (char *w = strtok(g, " "); w && b < 256; w = strtok(NULL, " ")) gw[b++] = w;
    bool used[256] = {0};
    int same = 0;
    for (int i = 0; i < a; i++)
        for (int j = 0; j < b; j++)
            if (!used[j] && !strcmp(pw[i], gw[j])) {
                used[j] = true;
                same++;
                break;
            }
    if (same == 0) return 0;
    double prec = (double)same / a, rec = (double)same / b;
    return 2 * prec * rec / (prec + rec);
}

static void detokenize(li_model *m, const gen_out *g, li_buf *text) {
    text->len = 0;
    for (int i = 0; i < g->n; i++) {
        char piece[256];
        size_t n;
        if (li_token_is_special(m, g->toks[i])) continue;
        if (li_token_to_piece(m, g->toks[i], piece, sizeof piece, &n) == LI_OK)
            li_buf_append(text, piece, n < sizeof piece ? n : sizeof piece);
    }
    li_buf_append(text, "", 0);
    if (text->data) text->data[text->len] = 0;
}

// Runs one request to its end: first logits into logits (V), tokens into g.
static li_status run_one(li_model *m, const li_request *base, li_repair repair, int n_predict,
                         float *logits, gen_out *g, li_request_result *res) {
    li_request q = *base;
    q.repair = repair;
    q.first_logits = logits;
    q.gen = li_generate_default_params();
    q.gen.n_predict = n_predict;
    q.gen.sampling.temperature = 0;
    q.gen.on_token = on_token;
    q.gen.user = g;
    g->n = 0;
    int64_t id;
    LI_TRY(li_submit(m, &q, &id));
    LI_TRY(li_run(m));
    LI_TRY(li_result(m, id, res));
    if (res->status != LI_OK) return li_error_set(res->status, "%s", res->error);
    return LI_OK;
}

static int usage_error(const char *fmt, const char *v) {
    fprintf(stderr, "lazyinfer bench quality: ");
    fprintf(stderr, fmt, v);
    fputc('\n', stderr);
    return 2;
}

int cmd_bench_quality(int argc, char **argv) {
    li_model_params mp = li_model_default_params();
    const char *data = NULL, *modes_s = "none,head:16,head:32,blend:0.10,blend:0.15,blend:0.25";
    const char *cache = "lazy";
    int n_predict = 32, n_questions = 0, n_ctxs = 0;
    bool verbose = false;
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &mp.path, "model (default: the model setup fetched)"},
        {"--data", NULL, OPT_STR, &data, "questions, CacheBlend's JSON format (default " DATA_REL ")"},
        {"--modes", NULL, OPT_STR, &modes_s,
         "repairs to compare with full attention, comma-separated (default "
         "none,head:16,head:32,blend:0.10,blend:0.15,blend:0.25)"},
        {"--cache", NULL, OPT_STR, &cache, "document cache of the repaired runs: lazy (default) or copy"},
        {"--n-predict", "-n", OPT_INT, &n_predict, "answer tokens compared with full's (default 32)"},
        {"--questions", NULL, OPT_INT, &n_questions, "the first N questions (default: all)"},
        {"--passages", NULL, OPT_INT, &n_ctxs, "the first N passages of each (default: all)"},
        {"--verbose", "-v", OPT_FLAG, &verbose, "one line per question and mode on stderr"},
        CLI_KV_DTYPE_OPT(mp),
        {"--ctx-size", "-c", OPT_INT, &mp.n_ctx, "context (default: min(trained, 4096))"},
        CLI_DEVICE_OPTS(mp),
    };
    int r = cli_parse_args(argc, argv,
                           "usage: lazyinfer bench quality [--data FILE] [--modes LIST] [-n N] "
                           "[--questions N] [--cache lazy|copy] [model options]",
                           opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r == 1 ? 0 : 2;
    if (n_predict < 1 || n_predict > MAX_GEN) {
        fprintf(stderr, "lazyinfer bench quality: -n %d: must be in 1..%d\n", n_predict, MAX_GEN);
        return 2;
    }
    if (n_questions < 0 || n_ctxs < 0)
        return usage_error("%s: --questions and --passages must be >= 0", "bad count");
    if (strcmp(cache, "lazy") && strcmp(cache, "copy"))
        return usage_error("--cache '%s': expected lazy or copy", cache);

    mode_sums modes[MAX_MODES] = {0};
    int n_modes = 0;
    {
        char list[512];
        snprintf(list, sizeof list, "%s", modes_s);
        for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
            if (n_modes == MAX_MODES - 1) return usage_error("--modes: more than %s", "15 modes");
            mode_sums *s = &modes[n_modes++];
            if (li_repair_parse(t, &s->repair) != LI_OK)
                return usage_error("--modes: %s", li_last_error());
            snprintf(s->name, sizeof s->name, "%s", t);
        }
        mode_sums *f = &modes[n_modes++];
        f->full = true;
        snprintf(f->name, sizeof f->name, "full");
    }

    char pathbuf[1024];
    if (!data && !(data = cli_data_path(DATA_REL, pathbuf, sizeof pathbuf))) {
        cli_data_missing("bench quality", "question set", DATA_REL, pathbuf,
                         "give --data FILE (CacheBlend's JSON format)");
        return 2;
    }
    json_error_t jerr;
    json_t *root = json_load_file(data, 0, &jerr);
    if (!root || !json_is_array(root)) {
        fprintf(stderr, "lazyinfer bench quality: %s:%d: %s\n", data, jerr.line,
                root ? "expected an array of questions" : jerr.text);
        json_decref(root);
        return 2;
    }
    int nq = (int)json_array_size(root);
    if (n_questions && n_questions < nq) nq = n_questions;

    if (!mp.path) mp.path = cli_default_model();
    li_model *ref = NULL, *m = NULL;
    mp.cache_mode = "full";
    li_status st = li_model_load(&ref, &mp);
    mp.cache_mode = cache;
    // the engine's default budget is max_seqs contexts: one for the cached passages, one for a
    // request's own pages and its repair's overlay (blend's holds every passage page at first)
    mp.max_seqs = 2;
    if (st == LI_OK) st = li_model_load(&m, &mp);
    if (st != LI_OK) {
        li_model_free(ref);
        json_decref(root);
        return cli_fail("cannot load the model");
    }
    li_model_info info;
    li_model_get_info(m, &info);
    const int V = info.n_vocab;
    float *lref = malloc((size_t)V * sizeof *lref), *lmode = malloc((size_t)V * sizeof *lmode);
    gen_out gref, gmode;
    li_buf text = {0};
    int status = 0;
    if (!lref || !lmode) {
        status = cli_fail("out of memory");
        goto done;
    }
    printf("# bench quality: %s, %d questions of %s, %s cache, greedy %d tokens, against full\n",
           mp.path, nq, data, cache, n_predict);
    for (int qi = 0; qi < nq; qi++) {
        const json_t *ex = json_array_get(root, (size_t)qi);
        const json_t *ctxs = json_object_get(ex, "ctxs"), *ans = json_object_get(ex, "answers");
        const char *question = json_string_value(json_object_get(ex, "question"));
        if (!question || !json_is_array(ctxs) || !json_is_array(ans) || !json_array_size(ans)) {
            fprintf(stderr, "lazyinfer bench quality: %s: question %d lacks question, answers "
                    "or ctxs\n", data, qi);
            status = 2;
            goto done;
        }
        int nd = (int)json_array_size(ctxs);
        if (n_ctxs && n_ctxs < nd) nd = n_ctxs;
        if (nd > MAX_CTXS) nd = MAX_CTXS;
        char *doc_text[MAX_CTXS] = {0};
        li_doc docs[MAX_CTXS];
        for (int d = 0; d < nd; d++) {
            const json_t *c = json_array_get(ctxs, (size_t)d);
            const char *title = json_string_value(json_object_get(c, "title"));
            const char *body = json_string_value(json_object_get(c, "text"));
            li_buf b = {0};
            // utils.py: f"{title}\n\n{text}\n\n"; an empty title is left out
            if (title && *title) {
                li_buf_append(&b, title, strlen(title));
                li_buf_append(&b, "\n\n", 2);
            }
            if (body) li_buf_append(&b, body, strlen(body));
            li_buf_append(&b, "\n\n", 2);
            doc_text[d] = b.data;
            docs[d] = (li_doc){.text = b.data, .len = b.len};
        }
        // utils.py's normalize_question: a question mark, the first letter in lower case
        li_buf qb = {0};
        li_buf_append(&qb, QUERY_PROMPT, strlen(QUERY_PROMPT));
        size_t q0 = qb.len;
        li_buf_append(&qb, question, strlen(question));
        if (qb.len > q0) qb.data[q0] = (char)tolower((unsigned char)qb.data[q0]);
        if (qb.len == q0 || qb.data[qb.len - 1] != '?') li_buf_append(&qb, "?", 1);
        li_buf_append(&qb, "", 0);
        qb.data[qb.len] = 0;
        li_request base = {.system = SYSTEM_PROMPT, .docs = docs, .n_docs = nd, .query = qb.data,
                           .chat = true};
        li_request_result res, rref;
        li_repair none = {0};
        // the reference, then the passages cached (untimed), then every mode
        st = run_one(ref, &base, none, n_predict, lref, &gref, &rref);
        if (st == LI_OK) st = run_one(m, &base, none, 1, lmode, &gmode, &res);
        for (int mi = 0; mi < n_modes && st == LI_OK; mi++) {
            mode_sums *s = &modes[mi];
            if (!s->full) st = run_one(m, &base, s->repair, n_predict, lmode, &gmode, &res);
            const float *lg = s->full ? lref : lmode;
            const gen_out *g = s->full ? &gref : &gmode;
            const li_request_result *rs = s->full ? &rref : &res;
            if (st != LI_OK) break;
            detokenize(s->full ? ref : m, g, &text);
            double best_f1 = 0;
            bool any_em = false;
            for (size_t a = 0; a < json_array_size(ans); a++) {
                const char *gold = json_string_value(json_array_get(ans, a));
                bool em = false;
                double f = gold ? f1_of(text.data ? text.data : "", gold, &em) : 0;
                best_f1 = f > best_f1 ? f : best_f1;
                any_em |= em;
            }
            double kl = kl_div(lref, lg, V);
            bool same = g->n == gref.n && !memcmp(g->toks, gref.toks, (size_t)g->n * sizeof *g->toks);
            s->kl += kl;
            s->identical += same;
            s->f1 += best_f1;
            s->em += any_em;
            s->computed += rs->n_prompt - rs->n_cached_tokens;
            s->ttft += rs->ttft_ms;
            s->n++;
            if (verbose)
                fprintf(stderr, "q%d %-11s KL %.4f %s F1 %.2f ttft %7.1f ms: %s\n", qi, s->name, kl,
                        same ? "same" : "diff", best_f1, rs->ttft_ms, text.data ? text.data : "");
        }
        for (int d = 0; d < nd; d++) free(doc_text[d]);
        li_buf_free(&qb);
        if (st != LI_OK) {
            fprintf(stderr, "lazyinfer bench quality: question %d: %s\n", qi, li_last_error());
            status = 1;
            goto done;
        }
        li_progress("quality", qi + 1, nq);
    }
    {
        const mode_sums *none = NULL;
        for (int mi = 0; mi < n_modes; mi++)
            if (!modes[mi].full && modes[mi].repair.mode == LI_REPAIR_NONE) none = &modes[mi];
        printf("| mode | mean KL vs full | answers = full | F1 | EM | computed tokens | TTFT ms | "
               "KL gap closed | identity gap closed |\n|---|---|---|---|---|---|---|---|---|\n");
        for (int mi = 0; mi < n_modes; mi++) {
            const mode_sums *s = &modes[mi];
            int n = s->n ? s->n : 1;
            char kgap[16] = "", igap[16] = "";
            if (none && none->n && s != none) {
                double kn = none->kl / n, in = (double)none->identical / n;
                if (kn > 0) snprintf(kgap, sizeof kgap, "%.0f %%", 100 * (kn - s->kl / n) / kn);
                if (in < 1)
                    snprintf(igap, sizeof igap, "%.0f %%",
                             100 * ((double)s->identical / n - in) / (1 - in));
            }
            printf("| %s | %.4g | %d/%d | %.3f | %.3f | %.0f | %.1f | %s | %s |\n",
                   s->name, s->kl / n, s->identical, s->n, s->f1 / n, s->em / n, s->computed / n,
                   s->ttft / n, kgap, igap);
        }
    }
done:
    li_buf_free(&text);
    free(lref);
    free(lmode);
    li_model_free(m);
    li_model_free(ref);
    json_decref(root);
    return status;
}
