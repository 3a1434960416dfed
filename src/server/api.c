// api.c — OpenAI request parsing and response JSON for `lazyinfer serve` (jansson).
//
// Parsing is strict about types (a string where a number belongs is a 400 naming the field, as
// OpenAI does) and lenient about fields it does not know (ignored). It is a pure function of the
// bytes: no model, no globals; the fuzz target tests/fuzz/fuzz-request.c drives it and
// tests/test_server.py checks the error responses end to end. Not here: HTTP (server.c) and
// checks that need the model (context length, token ids in range: the engine does those).
#include "api.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyinfer.h"

bool li_api_error_set(li_api_error *err, int status, const char *type, const char *param,
                      const char *code, const char *fmt, ...) {
    err->status = status;
    snprintf(err->type, sizeof err->type, "%s", type ? type : "invalid_request_error");
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) li_api_error_set(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

void li_api_request_free(li_api_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    for (int i = 0; i < r->n_docs; i++) {
        free(r->docs[i].id);
        free(r->docs[i].text);
    }
    free(r->docs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

// A copy of a JSON string; false (400) if it holds a NUL byte (the engine takes C strings).
static bool dup_string(const json_t *v, const char *param, char **out, size_t *out_len,
                       li_api_error *err) {
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (memchr(s, 0, n)) return BAD(param, "'%s' must not contain NUL characters", param);
    *out = malloc(n + 1);
    if (!*out) return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(*out, s, n);
    (*out)[n] = 0;
    if (out_len) *out_len = n;
    return true;
}

// Optional number field in [lo, hi]; *has tells whether it was present (null counts as absent).
static bool get_number(const json_t *o, const char *key, double lo, double hi, double *out,
                       bool *has, li_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (has) *has = false;
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) return BAD(key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return BAD(key, "'%s' is %g, outside [%g, %g]", key, x, lo, hi);
    *out = x;
    if (has) *has = true;
    return true;
}

// Optional integer field in [lo, hi]; absent or null leaves *out alone.
static bool get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out,
                    li_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) return BAD(key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(key, "'%s' is %lld, outside [%lld, %lld]", key, x, lo, hi);
    *out = x;
    return true;
}

static bool get_bool(const json_t *o, const char *key, int *out, li_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return BAD(key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return true;
}

static bool parse_docs(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v = json_object_get(o, "documents");
    if (!v || json_is_null(v)) return true;
    if (!json_is_array(v))
        return BAD("documents", "'documents' must be an array of strings or {\"id\", \"text\"} objects");
    size_t n = json_array_size(v);
    if (n > LI_API_MAX_DOCS)
        return BAD("documents", "%zu documents, at most %d per request", n, LI_API_MAX_DOCS);
    if (n == 0) return true;
    r->docs = calloc(n, sizeof *r->docs);
    if (!r->docs) return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(v, i);
        li_api_doc *doc = &r->docs[r->n_docs];
        const json_t *text = d, *id = NULL;
        if (json_is_object(d)) {
            text = json_object_get(d, "text");
            id = json_object_get(d, "id");
            if (id && !json_is_null(id) && !json_is_string(id))
                return BAD("documents", "documents[%zu].id must be a string", i);
        }
        if (!text || !json_is_string(text))
            return BAD("documents", "documents[%zu] must be a string or an object with a string 'text'", i);
        if (json_string_length(text) == 0)
            return BAD("documents", "documents[%zu] is empty", i);
        if (!dup_string(text, "documents", &doc->text, &doc->len, err)) return false;
        r->n_docs++;
        if (id && json_is_string(id) && !dup_string(id, "documents", &doc->id, NULL, err)) return false;
    }
    return true;
}

// Chat content: a string, or an array of {"type": "text", "text": ...} parts (joined).
static bool parse_content(const json_t *c, size_t i, char **out, li_api_error *err) {
    if (json_is_string(c)) return dup_string(c, "messages", out, NULL, err);
    if (!json_is_array(c))
        return BAD("messages", "messages[%zu].content must be a string or an array of text parts", i);
    size_t total = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *part = json_array_get(c, k);
        const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text))
            return BAD("messages", "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                       "parts are supported", i, k);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    size_t w = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *text = json_object_get(json_array_get(c, k), "text");
        memcpy(s + w, json_string_value(text), json_string_length(text));
        w += json_string_length(text);
    }
    s[w] = 0;
    if (strlen(s) != w) {
        free(s);
        return BAD("messages", "messages[%zu].content must not contain NUL characters", i);
    }
    *out = s;
    return true;
}

static bool parse_messages(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v = json_object_get(o, "messages");
    if (!v) return BAD("messages", "'messages' is required");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(v);
    if (n > LI_API_MAX_MESSAGES)
        return BAD("messages", "%zu messages, at most %d per request", n, LI_API_MAX_MESSAGES);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *msg = json_array_get(v, i);
        if (!json_is_object(msg)) return BAD("messages", "messages[%zu] must be an object", i);
        const json_t *role = json_object_get(msg, "role"), *content = json_object_get(msg, "content");
        if (!json_is_string(role)) return BAD("messages", "messages[%zu].role must be a string", i);
        const char *rs = json_string_value(role);
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return BAD("messages", "messages[%zu].role '%.40s' is not supported (system, developer, "
                       "user, assistant)", i, json_string_value(role));
        if (!content) return BAD("messages", "messages[%zu].content is required", i);
        li_api_message *m = &r->messages[r->n_messages];
        snprintf(m->role, sizeof m->role, "%s", rs);
        if (!parse_content(content, i, &m->content, err)) return false;
        r->n_messages++;
    }
    return true;
}

static bool parse_prompt(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v = json_object_get(o, "prompt");
    if (!v) return BAD("prompt", "'prompt' is required");
    if (json_is_string(v)) return dup_string(v, "prompt", &r->prompt, NULL, err);
    if (!json_is_array(v) || json_array_size(v) == 0)
        return BAD("prompt", "'prompt' must be a string, an array of one string, or an array of "
                   "token ids");
    const json_t *first = json_array_get(v, 0);
    if (json_is_string(first)) {
        if (json_array_size(v) != 1)
            return BAD("prompt", "only one prompt per request is supported (got %zu)",
                       json_array_size(v));
        return dup_string(first, "prompt", &r->prompt, NULL, err);
    }
    size_t n = json_array_size(v);
    if (n > (1u << 24)) return BAD("prompt", "prompt of %zu tokens is too long", n);
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return BAD("prompt", "prompt[%zu] must be a token id (a non-negative integer)", i);
        r->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_ids = (int)n;
    return true;
}

static bool parse_stop(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return true;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return true;
        if (!dup_string(v, "stop", &r->stop[0], NULL, err)) return false;
        r->n_stop = 1;
        return true;
    }
    if (!json_is_array(v)) return BAD("stop", "'stop' must be a string or an array of strings");
    if (json_array_size(v) > LI_API_MAX_STOP)
        return BAD("stop", "at most %d stop sequences (got %zu)", LI_API_MAX_STOP, json_array_size(v));
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) return BAD("stop", "stop[%zu] must be a string", i);
        if (json_string_length(s) == 0) continue;
        if (!dup_string(s, "stop", &r->stop[r->n_stop], NULL, err)) return false;
        r->n_stop++;
    }
    return true;
}

bool li_api_parse_sampling(const json_t *o, li_api_request *r, li_api_error *err) {
    long long x = -1;
    // max_completion_tokens is the newer chat name of max_tokens; either may be given.
    if (!get_int(o, "max_tokens", 1, 1 << 24, &x, err)) return false;
    if (!get_int(o, "max_completion_tokens", 1, 1 << 24, &x, err)) return false;
    r->max_tokens = (int)x;
    if (!get_number(o, "temperature", 0, 2, &r->temperature, &r->has_temperature, err)) return false;
    if (!get_number(o, "top_p", 0, 1, &r->top_p, &r->has_top_p, err)) return false;
    if (r->has_top_p && r->top_p <= 0) return BAD("top_p", "'top_p' must be > 0");
    bool has_min_p;
    r->min_p = -1;
    if (!get_number(o, "min_p", 0, 1, &r->min_p, &has_min_p, err)) return false;
    x = -1;
    if (!get_int(o, "top_k", 0, 1 << 24, &x, err)) return false;
    r->top_k = (int)x;
    int ignore_eos = 0;
    if (!get_bool(o, "ignore_eos", &ignore_eos, err)) return false;
    r->ignore_eos = ignore_eos;
    const json_t *seed = json_object_get(o, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return BAD("seed", "'seed' must be an integer");
        r->seed = (uint64_t)json_integer_value(seed);
        r->has_seed = true;
    }
    return parse_stop(o, r, err);
}

static bool parse_fields(const json_t *o, li_api_endpoint ep, li_api_request *r, li_api_error *err) {
    const json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return BAD("model", "'model' must be a string");
        if (!dup_string(model, "model", &r->model, NULL, err)) return false;
    }
    if (ep == LI_API_CHAT ? !parse_messages(o, r, err) : !parse_prompt(o, r, err)) return false;
    if (!parse_docs(o, r, err)) return false;
    int stream = 0;
    if (!get_bool(o, "stream", &stream, err)) return false;
    r->stream = stream;
    const json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        int iu = 0;
        if (!get_bool(so, "include_usage", &iu, err)) return false;
        r->include_usage = iu;
    }
    if (!li_api_parse_sampling(o, r, err)) return false;
    long long x = 1;
    if (!get_int(o, "n", LLONG_MIN, LLONG_MAX, &x, err)) return false;
    if (x != 1) return BAD("n", "only n=1 is supported (got %lld)", x);
    const json_t *lp = json_object_get(o, "logprobs");
    if (lp && !json_is_null(lp) && !json_is_false(lp) && !(json_is_integer(lp) && json_integer_value(lp) == 0))
        return BAD("logprobs", "logprobs are not supported");
    const json_t *echo = json_object_get(o, "echo");
    if (echo && json_is_true(echo)) return BAD("echo", "echo is not supported");
    const json_t *tools = json_object_get(o, "tools");
    if (tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0))
        return BAD("tools", "tools are not supported");
    r->skip_special = -1;
    if (!get_bool(o, "skip_special_tokens", &r->skip_special, err)) return false;
    // diffusion extension fields (checked against each other by li_dllm_check_params later)
    x = -1;
    if (!get_int(o, "gen_length", 1, 1 << 20, &x, err)) return false;
    r->gen_length = (int)x;
    x = -1;
    if (!get_int(o, "block_length", 1, 1 << 20, &x, err)) return false;
    r->block_length = (int)x;
    x = -1;
    if (!get_int(o, "steps", 1, 1 << 20, &x, err)) return false;
    r->steps = (int)x;
    r->threshold = r->factor = -1;
    bool has;
    if (!get_number(o, "threshold", 0, 1, &r->threshold, &has, err)) return false;
    if (has && r->threshold <= 0) return BAD("threshold", "'threshold' must be in (0, 1]");
    if (!get_number(o, "factor", 0, 1e6, &r->factor, &has, err)) return false;
    if (has && r->factor <= 0) return BAD("factor", "'factor' must be > 0");
    if (r->threshold > 0 && r->factor > 0)
        return BAD("factor", "'threshold' and 'factor' are exclusive: give one");
    r->dpad = r->fp8 = r->lacache = -1;
    if (!get_bool(o, "dpad", &r->dpad, err) || !get_bool(o, "fp8", &r->fp8, err)) return false;
    const json_t *lc = json_object_get(o, "lacache");
    if (lc && !json_is_null(lc)) {
        if (json_is_boolean(lc)) {
            r->lacache = json_is_true(lc) ? LI_DLLM_LACACHE_ALL : 0;
        } else if (json_is_integer(lc) && json_integer_value(lc) >= 0 &&
                   json_integer_value(lc) <= LI_DLLM_LACACHE_ALL) {
            r->lacache = (int)json_integer_value(lc);
        } else {
            return BAD("lacache", "'lacache' must be true/false or an integer bit mask in [0, %d] "
                       "(1 embed, 2 rope, 4 fa, 8 trunc)", LI_DLLM_LACACHE_ALL);
        }
    }
    return true;
}

bool li_api_parse(const char *body, size_t len, li_api_endpoint ep, li_api_request *out,
                  li_api_error *err) {
    memset(out, 0, sizeof *out);
    out->endpoint = ep;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return BAD(NULL, "malformed JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
    bool ok;
    if (!json_is_object(o)) ok = BAD(NULL, "the request body must be a JSON object");
    else ok = parse_fields(o, ep, out, err);
    json_decref(o);
    if (!ok) li_api_request_free(out);
    return ok;
}

// ---- responses -------------------------------------------------------------------------------

static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static json_t *str_or_null(const char *s) {
    return s && *s ? json_string(s) : json_null();
}

char *li_api_error_json(const li_api_error *err) {
    // the message may quote the client's bytes (jansson's parse errors do) or be cut inside a
    // character by snprintf: make it UTF-8, or jansson refuses it
    char *msg = li_api_utf8_sanitize(err->message, strlen(err->message), NULL);
    if (!msg) return NULL;
    char *s = dump(json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", err->type,
                             "param", str_or_null(err->param), "code", str_or_null(err->code)));
    free(msg);
    return s;
}

// Length of the UTF-8 sequence starting at s (at most n bytes), 0 if invalid there; *incomplete
// when the bytes so far are a valid beginning that runs past n.
static size_t utf8_seq(const unsigned char *s, size_t n, bool *incomplete) {
    *incomplete = false;
    unsigned c = s[0];
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;   // no overlong forms
        if (c == 0xED) hi = 0x9F;   // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;   // <= U+10FFFF
    } else return 0;
    for (size_t i = 1; i < k; i++) {
        if (i >= n) {
            *incomplete = true;
            return 0;
        }
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    }
    return k;
}

char *li_api_utf8_sanitize(const char *s, size_t len, size_t *out_len) {
    char *o = malloc(len * 3 + 1);  // each bad byte becomes 3 bytes at most
    if (!o) return NULL;
    size_t w = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        bool inc;
        size_t k = u[i] ? utf8_seq(u + i, len - i, &inc) : 0;
        if (k) {
            memcpy(o + w, s + i, k);
            w += k;
            i += k;
        } else {
            memcpy(o + w, "\xEF\xBF\xBD", 3);  // U+FFFD
            w += 3;
            i++;
        }
    }
    o[w] = 0;
    if (out_len) *out_len = w;
    return o;
}

size_t li_api_utf8_check(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        bool inc;
        size_t k = u[i] ? utf8_seq(u + i, len - i, &inc) : 0;
        if (!k) return i;
        i += k;
    }
    return len;
}

size_t li_api_stop_find(const char *text, size_t len, size_t old, char *const *stop, int n_stop) {
    size_t cut = SIZE_MAX;
    for (int i = 0; i < n_stop; i++) {
        size_t L = strlen(stop[i]);
        if (L == 0) continue;
        for (size_t p = old >= L ? old - L + 1 : 0; p + L <= len && p < cut; p++)
            if (!memcmp(text + p, stop[i], L)) {
                cut = p;
                break;
            }
    }
    return cut;
}

size_t li_api_utf8_complete_prefix(const char *s, size_t len) {
    // the last sequence starts at most 3 bytes before the end
    size_t start = len > 3 ? len - 3 : 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = len; i-- > start;) {
        if ((u[i] & 0xC0) == 0x80) continue;  // continuation byte
        bool inc;
        utf8_seq(u + i, len - i, &inc);
        return inc ? i : len;
    }
    return len;
}

static json_t *usage_json(int prompt_tokens, int completion_tokens, int cached_tokens) {
    json_t *u = json_pack("{s:i, s:i, s:i}", "prompt_tokens", prompt_tokens, "completion_tokens",
                          completion_tokens, "total_tokens", prompt_tokens + completion_tokens);
    if (u && cached_tokens >= 0)
        json_object_set_new(u, "prompt_tokens_details", json_pack("{s:i}", "cached_tokens", cached_tokens));
    return u;
}

char *li_api_response_json(const li_api_meta *meta, const char *text, const char *finish,
                           int prompt_tokens, int completion_tokens, int cached_tokens) {
    json_t *choice;
    if (meta->endpoint == LI_API_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:s}, s:n, s:s}", "index", 0, "message", "role", "assistant",
                           "content", text, "logprobs", "finish_reason", finish);
    else
        choice = json_pack("{s:i, s:s, s:n, s:s}", "index", 0, "text", text, "logprobs",
                           "finish_reason", finish);
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", meta->id, "object",
                          meta->endpoint == LI_API_CHAT ? "chat.completion" : "text_completion",
                          "created", (json_int_t)meta->created, "model", meta->model, "choices",
                          choice, "usage", usage_json(prompt_tokens, completion_tokens, cached_tokens)));
}

char *li_api_chunk_sse(const li_api_meta *meta, const char *text, bool first, const char *finish,
                       bool usage, int prompt_tokens, int completion_tokens) {
    bool chat = meta->endpoint == LI_API_CHAT;
    json_t *choices = json_array();
    if (!usage) {
        json_t *choice;
        if (chat) {
            json_t *delta = json_object();
            if (first) json_object_set_new(delta, "role", json_string("assistant"));
            if (text) json_object_set_new(delta, "content", json_string(text));
            choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs",
                               "finish_reason", finish ? json_string(finish) : json_null());
        } else {
            choice = json_pack("{s:i, s:s, s:n, s:o}", "index", 0, "text", text ? text : "",
                               "logprobs", "finish_reason", finish ? json_string(finish) : json_null());
        }
        json_array_append_new(choices, choice);
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", meta->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)meta->created, "model", meta->model, "choices", choices);
    if (o && usage) json_object_set_new(o, "usage", usage_json(prompt_tokens, completion_tokens, -1));
    char *s = dump(o);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *e = malloc(n + 9);
    if (e) {
        memcpy(e, "data: ", 6);
        memcpy(e + 6, s, n);
        memcpy(e + 6 + n, "\n\n", 3);
    }
    free(s);
    return e;
}
