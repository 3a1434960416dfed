// fuzz-request.c — libFuzzer target for the OpenAI request parser of `lazyinfer serve`
// (src/server/api.c, compiled in here because the fuzz build links only core/format/tokenizer).
// The input is a request body, not NUL-terminated, parsed as a completions and as a chat request.
// Checks: a parse either succeeds with fields inside their documented ranges or fails with a 4xx/
// 5xx error whose JSON (li_api_error_json) parses back; the UTF-8 helpers always produce valid
// UTF-8 (jansson refuses anything else) and a complete prefix never exceeds its input; responses
// built from the parsed text parse back. Seeds in tests/fuzz/corpus/fuzz-request/.
//   make fuzz      or      build/fuzz/fuzz-request -runs=1000000 tests/fuzz/corpus/fuzz-request
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.c"

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
    li_api_meta meta = {.id = "cmpl-fuzz", .model = r->model ? "m" : "x", .created = 1,
                        .endpoint = r->endpoint};
    check_json(li_api_response_json(&meta, t, "stop", 1, 2, 0));
    check_json(li_api_chunk_sse(&meta, t, true, NULL, false, 0, 0));
    free(t);
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
