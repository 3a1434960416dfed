// fuzz-request.c — libFuzzer target for the OpenAI request parser of `lazyinfer serve`
// (src/server/api.c) and the JSON-schema grammar of response_format (json-grammar.c), compiled in
// here because the fuzz build links only core/format/tokenizer.
// The input is a request body, not NUL-terminated, parsed as a completions and as a chat request.
// Checks: a parse either succeeds with fields inside their documented ranges or fails with a 4xx/
// 5xx error whose JSON (li_api_error_json) parses back; the UTF-8 helpers always produce valid
// UTF-8 (jansson refuses anything else) and a complete prefix never exceeds its input; responses
// built from the parsed text parse back; a json_schema compiles or is refused with a message, and
// its grammar's state takes any bytes. Seeds in tests/fuzz/corpus/fuzz-request/.
//   make fuzz      or      build/fuzz/fuzz-request -runs=1000000 tests/fuzz/corpus/fuzz-request
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.c"
#include "server/json-grammar.c"

static void check_json(char *s) {
    if (!s) abort();
    json_error_t je;
    const char *p = strncmp(s, "data: ", 6) ? s : s + 6;
    json_t *o = json_loads(p, JSON_DISABLE_EOF_CHECK, &je);
    if (!o) abort();
    json_decref(o);
    free(s);
}

static void check_request(const li_api_request *r) {
    if (r->n_stop < 0 || r->n_stop > LI_API_MAX_STOP) abort();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0]) abort();
    if (r->n_docs < 0 || r->n_docs > LI_API_MAX_DOCS) abort();
    for (int i = 0; i < r->n_docs; i++)
        if (!r->docs[i].text || r->docs[i].len == 0 || strlen(r->docs[i].text) != r->docs[i].len) abort();
    if (r->endpoint == LI_API_CHAT) {
        if (r->n_messages < 1 || r->n_messages > LI_API_MAX_MESSAGES) abort();
        for (int i = 0; i < r->n_messages; i++)
            if (!r->messages[i].content || (strcmp(r->messages[i].role, "system") &&
                                            strcmp(r->messages[i].role, "user") &&
                                            strcmp(r->messages[i].role, "assistant")))
                abort();
    } else if (!r->prompt == !r->prompt_ids) {
        abort();  // exactly one of the two
    }
    if (r->max_tokens != -1 && (r->max_tokens < 1 || r->max_tokens > (1 << 24))) abort();
    if (r->has_temperature && !(r->temperature >= 0 && r->temperature <= 2)) abort();
    if (r->has_top_p && !(r->top_p > 0 && r->top_p <= 1)) abort();
    if (r->threshold > 0 && r->factor > 0) abort();
    if (r->lacache < -1 || r->lacache > LI_DLLM_LACACHE_ALL) abort();
    // responses built from what was parsed must be valid JSON
    const char *text = r->endpoint == LI_API_CHAT ? r->messages[0].content : r->prompt ? r->prompt : "";
    char *t = li_api_utf8_sanitize(text, strlen(text), NULL);
    if (!t) abort();
    if (r->n < 1 || r->n > LI_API_MAX_N) abort();
    if (r->top_logprobs < 0 || r->top_logprobs > LI_API_MAX_TOP_LOGPROBS) abort();
    if (r->n_bias < 0 || r->n_bias > LI_API_MAX_LOGIT_BIAS) abort();
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] < 0 || !(r->bias[i] >= -100 && r->bias[i] <= 100)) abort();
    if ((r->format == LI_API_FORMAT_JSON_SCHEMA) != (r->json_schema != NULL)) abort();
    li_api_meta meta = {.id = "cmpl-fuzz", .model = r->model ? "m" : "x", .created = 1,
                        .endpoint = r->endpoint};
    // the parsed text as a token with itself as an alternative: logprobs render as JSON too
    li_api_logprob lp = {.text = text, .len = strlen(text), .logprob = -1.5f, .n_top = 1,
                         .top = {{text, strlen(text), -0.25f}}};
    li_api_choice ch[2] = {{.index = 0, .text = t, .finish = "stop", .logprobs = r->logprobs,
                            .lp = &lp, .n_lp = 1},
                           {.index = 1, .text = t, .first = true}};
    li_api_usage u = {1, 2, 0};
    check_json(li_api_response_json(&meta, ch, 2, &u));
    check_json(li_api_chunk_sse(&meta, &ch[1], NULL));
    check_json(li_api_chunk_sse(&meta, NULL, &u));
    free(t);
    // a schema compiles or is refused with a reason; a grammar's state takes any bytes
    li_json_grammar *g = NULL;
    if (r->json_schema) {
        if (li_json_grammar_schema(r->json_schema, &g) != LI_OK && !li_last_error()[0]) abort();
        if (g) {
            li_json_state st;
            li_json_state_init(&st, g);
            li_json_state_feed(&st, text, strlen(text));
        }
        li_json_grammar_free(g);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int ep = 0; ep < 2; ep++) {
        li_api_request r;
        li_api_error err;
        if (li_api_parse((const char *)data, size, (li_api_endpoint)ep, &r, &err)) {
            check_request(&r);
            li_api_request_free(&r);
        } else {
            if (err.status < 400 || err.status > 599 || !err.message[0]) abort();
            check_json(li_api_error_json(&err));
        }
    }
    // UTF-8 helpers on raw bytes
    size_t n = li_api_utf8_complete_prefix((const char *)data, size);
    if (n > size || (size >= 4 && n + 3 < size)) abort();
    size_t out_len;
    char *s = li_api_utf8_sanitize((const char *)data, size, &out_len);
    if (!s || strlen(s) != out_len) abort();
    json_t *j = json_stringn(s, out_len);
    if (!j) abort();  // not valid UTF-8
    json_decref(j);
    free(s);
    return 0;
}
