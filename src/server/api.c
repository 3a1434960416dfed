// api.c — OpenAI request parsing and response JSON for `lazyinfer serve` (jansson).
//
// Parsing is strict about types (a string where a number belongs is a 400 naming the field, as
// OpenAI does) and about fields: one it does not know, or an option it does not implement, is a
// 400 naming it, never silently ignored. It is a pure function of the bytes: no model, no
// globals; the fuzz target tests/fuzz/fuzz-request.c drives it and tests/test_server*.py check
// the error responses end to end. Also /tokenize and /detokenize bodies, and logprobs output. Not here: HTTP (server.c) and
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
    free(r->bias_ids);
    free(r->bias);
    free(r->json_schema);
    free(r->repair);
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

// Optional array (want_array) or object field: *n is its size, 0 when absent or null; any
// other type is refused with type_msg.
static bool get_collection(const json_t *o, const char *key, bool want_array, const char *type_msg,
                           const json_t **v, size_t *n, li_api_error *err) {
    *v = json_object_get(o, key);
    *n = 0;
    if (!*v || json_is_null(*v)) return true;
    if (want_array ? !json_is_array(*v) : !json_is_object(*v)) return BAD(key, "%s", type_msg);
    *n = want_array ? json_array_size(*v) : json_object_size(*v);
    return true;
}

static bool get_bool(const json_t *o, const char *key, int *out, li_api_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return BAD(key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return true;
}

// get_bool into a bool: *out keeps its value unless the field is given.
static bool get_flag(const json_t *o, const char *key, bool *out, li_api_error *err) {
    int x = *out;
    if (!get_bool(o, key, &x, err)) return false;
    *out = x;
    return true;
}

static bool parse_docs(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v;
    size_t n;
    if (!get_collection(o, "documents", true,
                        "'documents' must be an array of strings or {\"id\", \"text\"} objects", &v, &n,
                        err))
        return false;
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
    if (!get_flag(o, "ignore_eos", &r->ignore_eos, err)) return false;
    const json_t *seed = json_object_get(o, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return BAD("seed", "'seed' must be an integer");
        r->seed = (uint64_t)json_integer_value(seed);
        r->has_seed = true;
    }
    const json_t *rp = json_object_get(o, "repair");
    if (rp && !json_is_null(rp)) {
        if (!json_is_string(rp))
            return BAD("repair", "'repair' must be a string: none, head[:K] or blend[:R]");
        if (!dup_string(rp, "repair", &r->repair, NULL, err)) return false;
    }
    return parse_stop(o, r, err);
}

// Every field a request may carry: OpenAI's that lazyinfer implements or that change nothing
// (user, metadata, store false, service_tier, parallel_tool_calls without tools), the ones it
// refuses with a reason below, and the extensions. Anything else is a 400 naming it: an option
// silently ignored is an answer the client did not ask for.
static const char *const FIELDS_BOTH[] = {
    "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "n", "stop", "seed",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "user", "response_format",
    "metadata", "store", "service_tier",
    // extensions
    "documents", "top_k", "min_p", "ignore_eos", "skip_special_tokens", "repetition_penalty",
    "gen_length", "block_length", "sub_block_length", "steps", "threshold", "factor", "confidence",
    "dpad", "lacache", "fp8", "repair", NULL};
static const char *const FIELDS_CHAT[] = {
    "messages", "top_logprobs", "tools", "tool_choice",
    "parallel_tool_calls", "functions", "function_call", "modalities", "audio", "prediction",
    "reasoning_effort", "web_search_options", NULL};
static const char *const FIELDS_COMPLETIONS[] = {"prompt", "echo", "best_of", "suffix", NULL};

static bool in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

static bool check_known(const json_t *o, li_api_endpoint ep, li_api_error *err) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        if (in_list(FIELDS_BOTH, k) || in_list(ep == LI_API_CHAT ? FIELDS_CHAT : FIELDS_COMPLETIONS, k))
            continue;
        if (in_list(ep == LI_API_CHAT ? FIELDS_COMPLETIONS : FIELDS_CHAT, k))
            return BAD(k, "'%.40s' is not a field of %s requests", k,
                       ep == LI_API_CHAT ? "chat completion" : "completion");
        return BAD(k, "unknown field '%.40s' (docs/SERVER.md lists the fields)", k);
    }
    // OpenAI fields that would change the answer and that lazyinfer does not implement
    static const char *const refused[] = {"functions", "function_call", "audio", "prediction",
                                          "reasoning_effort", "web_search_options", NULL};
    for (int i = 0; refused[i]; i++) {
        v = json_object_get(o, refused[i]);
        if (v && !json_is_null(v)) return BAD(refused[i], "'%s' is not supported", refused[i]);
    }
    v = json_object_get(o, "tool_choice");
    if (v && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        return BAD("tool_choice", "tools are not supported ('tool_choice' may only be \"none\")");
    v = json_object_get(o, "modalities");
    if (v && !json_is_null(v) &&
        !(json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)) &&
          !strcmp(json_string_value(json_array_get(v, 0)), "text")))
        return BAD("modalities", "only [\"text\"] output is supported");
    v = json_object_get(o, "store");
    if (v && json_is_true(v)) return BAD("store", "stored completions are not supported");
    long long x = 1;
    if (!get_int(o, "best_of", 1, 1, &x, err)) return false;
    v = json_object_get(o, "suffix");
    if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
        return BAD("suffix", "'suffix' (insertion) is not supported");
    return true;
}

// logit_bias: {"token id": bias in [-100, 100], ...}.
static bool parse_logit_bias(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v;
    size_t n;
    if (!get_collection(o, "logit_bias", false, "'logit_bias' must be an object of token id -> bias",
                        &v, &n, err))
        return false;
    if (n > LI_API_MAX_LOGIT_BIAS)
        return BAD("logit_bias", "%zu logit_bias entries, at most %d", n, LI_API_MAX_LOGIT_BIAS);
    if (n == 0) return true;
    r->bias_ids = malloc(n * sizeof *r->bias_ids);
    r->bias = malloc(n * sizeof *r->bias);
    if (!r->bias_ids || !r->bias)
        return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    const char *k;
    const json_t *b;
    json_object_foreach((json_t *)v, k, b) {
        char *end;
        long long id = strtoll(k, &end, 10);
        if (!*k || *end || id < 0 || id > INT32_MAX || !(k[0] >= '0' && k[0] <= '9'))
            return BAD("logit_bias", "logit_bias key '%.40s' is not a token id", k);
        if (!json_is_number(b) || !(json_number_value(b) >= -100 && json_number_value(b) <= 100))
            return BAD("logit_bias", "logit_bias[%.40s] must be a number in [-100, 100]", k);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)json_number_value(b);
    }
    return true;
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}}. The schema's features are checked when it is compiled
// (json-grammar.c).
static bool parse_format(const json_t *o, li_api_request *r, li_api_error *err) {
    const json_t *v = json_object_get(o, "response_format");
    if (!v || json_is_null(v)) return true;
    const json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(type))
        return BAD("response_format", "'response_format' must be an object with a string 'type'");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return true;
    if (!strcmp(t, "json_object")) {
        r->format = LI_API_FORMAT_JSON_OBJECT;
        return true;
    }
    if (strcmp(t, "json_schema"))
        return BAD("response_format", "response_format type '%.40s' is not one of text, "
                   "json_object, json_schema", t);
    const json_t *js = json_object_get(v, "json_schema");
    const json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
    if (!json_is_object(schema))
        return BAD("response_format", "response_format json_schema needs {\"json_schema\": "
                   "{\"name\": ..., \"schema\": {...}}}");
    r->format = LI_API_FORMAT_JSON_SCHEMA;
    r->json_schema = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!r->json_schema) return li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    return true;
}

static bool parse_fields(const json_t *o, li_api_endpoint ep, li_api_request *r, li_api_error *err) {
    if (!check_known(o, ep, err)) return false;
    const json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return BAD("model", "'model' must be a string");
        if (!dup_string(model, "model", &r->model, NULL, err)) return false;
    }
    if (ep == LI_API_CHAT ? !parse_messages(o, r, err) : !parse_prompt(o, r, err)) return false;
    if (!parse_docs(o, r, err)) return false;
    if (!get_flag(o, "stream", &r->stream, err)) return false;
    const json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        if (!get_flag(so, "include_usage", &r->include_usage, err)) return false;
    }
    if (!li_api_parse_sampling(o, r, err)) return false;
    long long x = 1;
    if (!get_int(o, "n", 1, LI_API_MAX_N, &x, err)) return false;
    r->n = (int)x;
    // logprobs: chat {"logprobs": true, "top_logprobs": k}; completions {"logprobs": k}
    x = 0;
    if (ep == LI_API_CHAT) {
        int lp = 0;
        if (!get_bool(o, "logprobs", &lp, err)) return false;
        if (!get_int(o, "top_logprobs", 0, LI_API_MAX_TOP_LOGPROBS, &x, err)) return false;
        if (json_object_get(o, "top_logprobs") && !json_is_null(json_object_get(o, "top_logprobs")) && !lp)
            return BAD("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        r->logprobs = lp;
    } else {
        const json_t *lp = json_object_get(o, "logprobs");
        if (!get_int(o, "logprobs", 0, LI_API_MAX_TOP_LOGPROBS, &x, err)) return false;
        r->logprobs = lp && !json_is_null(lp);
    }
    r->top_logprobs = (int)x;
    if (!parse_logit_bias(o, r, err) || !parse_format(o, r, err)) return false;
    if (!get_number(o, "presence_penalty", -2, 2, &r->presence_penalty, &r->has_presence, err) ||
        !get_number(o, "frequency_penalty", -2, 2, &r->frequency_penalty, &r->has_frequency, err) ||
        !get_number(o, "repetition_penalty", 0, 10, &r->repetition_penalty, &r->has_repetition, err))
        return false;
    if (r->has_repetition && r->repetition_penalty <= 0)
        return BAD("repetition_penalty", "'repetition_penalty' must be > 0");
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
    if (!get_int(o, "sub_block_length", 1, 1 << 20, &x, err)) return false;
    r->sub_block_length = (int)x;
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
    r->confidence = -1;
    const json_t *cv = json_object_get(o, "confidence");
    if (cv && !json_is_null(cv)) {
        const char *cs = json_is_string(cv) ? json_string_value(cv) : "";
        r->confidence = !strcmp(cs, "auto") ? LI_DLLM_CONF_AUTO
                        : !strcmp(cs, "f32") ? LI_DLLM_CONF_F32
                        : !strcmp(cs, "f64") ? LI_DLLM_CONF_F64
                                             : -1;
        if (r->confidence < 0)
            return BAD("confidence", "'confidence' must be \"auto\", \"f32\" or \"f64\"");
    }
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

// Parses a body into a JSON object whose keys are all in `known` (NULL-terminated).
static json_t *load_object(const char *body, size_t len, const char *const *known, li_api_error *err) {
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        BAD(NULL, "malformed JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        BAD(NULL, "the request body must be a JSON object");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!in_list(known, k)) {
            BAD(k, "unknown field '%.40s'", k);
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

bool li_api_parse_tokenize(const char *body, size_t len, li_api_tokenize *out, li_api_error *err) {
    static const char *const known[] = {"content", "add_special", "parse_special", "with_pieces", NULL};
    memset(out, 0, sizeof *out);
    json_t *o = load_object(body, len, known, err);
    if (!o) return false;
    const json_t *c = json_object_get(o, "content");
    int add = 0, parse = 1, pieces = 0;
    bool ok = json_is_string(c) ? true : BAD("content", "'content' must be a string");
    ok = ok && get_bool(o, "add_special", &add, err) && get_bool(o, "parse_special", &parse, err) &&
         get_bool(o, "with_pieces", &pieces, err) &&
         dup_string(c, "content", &out->content, &out->len, err);
    json_decref(o);
    out->add_special = add;
    out->parse_special = parse;
    out->with_pieces = pieces;
    if (!ok) {
        free(out->content);
        out->content = NULL;
    }
    return ok;
}

bool li_api_parse_detokenize(const char *body, size_t len, int32_t **ids, int *n,
                             li_api_error *err) {
    static const char *const known[] = {"tokens", NULL};
    *ids = NULL;
    *n = 0;
    json_t *o = load_object(body, len, known, err);
    if (!o) return false;
    const json_t *t = json_object_get(o, "tokens");
    size_t k = json_is_array(t) ? json_array_size(t) : 0;
    bool ok = json_is_array(t) ? true : BAD("tokens", "'tokens' must be an array of token ids");
    if (ok && k > (1u << 24)) ok = BAD("tokens", "%zu tokens, at most %d", k, 1 << 24);
    if (ok && !(*ids = malloc((k ? k : 1) * sizeof **ids)))
        ok = li_api_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < k; i++) {
        const json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            ok = BAD("tokens", "tokens[%zu] is not a token id", i);
        else
            (*ids)[(*n)++] = (int32_t)json_integer_value(v);
    }
    json_decref(o);
    if (!ok) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
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

static json_t *usage_json(const li_api_usage *u) {
    json_t *o = json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", u->prompt_tokens,
                          "completion_tokens", u->completion_tokens, "total_tokens",
                          u->prompt_tokens + u->completion_tokens, "prompt_tokens_details",
                          "cached_tokens", u->cached_tokens);
    return o;
}

// A token's text as JSON: a string (invalid UTF-8, a split character, shown as U+FFFD).
static json_t *token_string(const char *text, size_t len) {
    char *t = li_api_utf8_sanitize(text, len, NULL);
    json_t *s = t ? json_string(t) : NULL;
    free(t);
    return s ? s : json_string("");
}

static json_t *token_bytes(const char *text, size_t len) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++) json_array_append_new(a, json_integer((unsigned char)text[i]));
    return a;
}

// logprobs of a choice: chat {"content": [{token, logprob, bytes, top_logprobs}]}; completions
// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
static json_t *logprobs_json(bool chat, const li_api_choice *c) {
    if (!c->logprobs) return json_null();
    if (chat) {
        json_t *content = json_array();
        for (int i = 0; i < c->n_lp; i++) {
            const li_api_logprob *l = &c->lp[i];
            json_t *top = json_array();
            for (int k = 0; k < l->n_top; k++)
                json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token",
                                                     token_string(l->top[k].text, l->top[k].len),
                                                     "logprob", (double)l->top[k].logprob, "bytes",
                                                     token_bytes(l->top[k].text, l->top[k].len)));
            json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token",
                                                     token_string(l->text, l->len), "logprob",
                                                     (double)l->logprob, "bytes",
                                                     token_bytes(l->text, l->len), "top_logprobs", top));
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < c->n_lp; i++) {
        const li_api_logprob *l = &c->lp[i];
        json_array_append_new(tokens, token_string(l->text, l->len));
        json_array_append_new(lps, json_real(l->logprob));
        json_t *top = json_object();
        for (int k = 0; k < l->n_top; k++) {
            char *t = li_api_utf8_sanitize(l->top[k].text, l->top[k].len, NULL);
            if (t) json_object_set_new(top, t, json_real(l->top[k].logprob));
            free(t);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)l->offset));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *finish_json(const char *finish) { return finish ? json_string(finish) : json_null(); }

char *li_api_response_json(const li_api_meta *meta, const li_api_choice *ch, int n,
                           const li_api_usage *usage) {
    bool chat = meta->endpoint == LI_API_CHAT;
    json_t *choices = json_array();
    for (int i = 0; i < n; i++) {
        const li_api_choice *c = &ch[i];
        const char *text = c->text ? c->text : "";
        json_array_append_new(choices,
                              chat ? json_pack("{s:i, s:{s:s, s:s}, s:o, s:o}", "index", c->index,
                                               "message", "role", "assistant", "content", text,
                                               "logprobs", logprobs_json(true, c),
                                               "finish_reason", finish_json(c->finish))
                                   : json_pack("{s:i, s:s, s:o, s:o}", "index", c->index, "text",
                                               text, "logprobs", logprobs_json(false, c),
                                               "finish_reason", finish_json(c->finish)));
    }
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", meta->id, "object",
                          chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)meta->created, "model", meta->model, "choices", choices,
                          "usage", usage_json(usage)));
}

char *li_api_chunk_sse(const li_api_meta *meta, const li_api_choice *c, const li_api_usage *usage) {
    bool chat = meta->endpoint == LI_API_CHAT;
    json_t *choices = json_array();
    if (c) {
        json_t *choice;
        if (chat) {
            json_t *delta = json_object();
            if (c->first) json_object_set_new(delta, "role", json_string("assistant"));
            if (c->text) json_object_set_new(delta, "content", json_string(c->text));
            choice = json_pack("{s:i, s:o, s:o, s:o}", "index", c->index, "delta", delta,
                               "logprobs", logprobs_json(true, c), "finish_reason",
                               finish_json(c->finish));
        } else {
            choice = json_pack("{s:i, s:s, s:o, s:o}", "index", c->index, "text",
                               c->text ? c->text : "", "logprobs", logprobs_json(false, c),
                               "finish_reason", finish_json(c->finish));
        }
        json_array_append_new(choices, choice);
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", meta->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)meta->created, "model", meta->model, "choices", choices);
    if (o && !c && usage) json_object_set_new(o, "usage", usage_json(usage));
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

char *li_api_tokenize_json(const int32_t *ids, int n, const char *const *texts, const size_t *lens) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        if (!texts) {
            json_array_append_new(a, json_integer(ids[i]));
            continue;
        }
        bool utf8 = li_api_utf8_check(texts[i], lens[i]) == lens[i];
        char *t = utf8 ? li_api_utf8_sanitize(texts[i], lens[i], NULL) : NULL;
        json_t *piece = utf8 && t ? json_string(t) : token_bytes(texts[i], lens[i]);
        free(t);
        json_array_append_new(a, json_pack("{s:i, s:o}", "id", ids[i], "piece", piece));
    }
    return dump(json_pack("{s:o}", "tokens", a));
}

char *li_api_detokenize_json(const char *text, size_t len) {
    char *t = li_api_utf8_sanitize(text, len, NULL);
    char *s = t ? dump(json_pack("{s:s}", "content", t)) : NULL;
    free(t);
    return s;
}
