// api.h — the OpenAI request/response JSON of `lazyinfer serve`, apart from HTTP and the model.
//
// li_api_parse turns a request body into an li_api_request (every field checked for type and
// range) or an li_api_error in the OpenAI error shape with its HTTP status. It is a pure function
// of the bytes (no model, no I/O, no globals) so libFuzzer can drive it: tests/fuzz/fuzz-request.c.
// The builders below write the JSON the server sends. Not here: anything that needs the model
// (token counts, context limits) — server.c checks those when it submits the request.
#ifndef LI_SERVER_API_H
#define LI_SERVER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LI_API_MAX_STOP 4        // OpenAI: up to 4 stop sequences
#define LI_API_MAX_DOCS 1024     // documents per request
#define LI_API_MAX_MESSAGES 1024 // chat messages per request

typedef enum { LI_API_COMPLETIONS, LI_API_CHAT } li_api_endpoint;

typedef struct {
    char *id;    // optional caller id (NULL)
    char *text;  // NUL-free UTF-8 as sent (len bytes, NUL-terminated)
    size_t len;
} li_api_doc;

typedef struct {
    char role[16];  // "system" ("developer" is mapped to it), "user", "assistant"
    char *content;  // text (array-of-parts content is joined)
} li_api_message;

typedef struct {
    li_api_endpoint endpoint;
    char *model;  // NULL when absent
    // completions: a prompt string, or a prompt of token ids
    char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    // chat
    li_api_message *messages;
    int n_messages;
    // both (extension): documents for RAG
    li_api_doc *docs;
    int n_docs;
    bool stream, include_usage;  // include_usage: stream_options.include_usage
    int max_tokens;              // -1: not given
    bool has_temperature, has_top_p, has_seed;
    double temperature, top_p;
    int top_k;                   // extension, -1: not given
    bool ignore_eos;             // extension (as vLLM): generate max_tokens even past EOS
    double min_p;                // extension, < 0: not given
    uint64_t seed;
    char *stop[LI_API_MAX_STOP];
    int n_stop;
    int skip_special;            // extension (as vLLM): special tokens left out of the text;
                                 // -1 not given (= 1), else 0/1
    // diffusion models (extension); -1 / negative: not given
    int gen_length, block_length, steps;
    double threshold, factor;  // < 0: not given
    int dpad, fp8;             // -1 not given, else 0/1
    int lacache;               // -1 not given, else LI_DLLM_LACACHE_* bits (true = all)
} li_api_request;

typedef struct {
    int status;        // HTTP status: 400, 401, 404, 405, 413, 429, 500, 503
    char type[40];     // "invalid_request_error", "authentication_error", "server_error", ...
    char param[40];    // offending field ("" → null)
    char code[40];     // machine code ("" → null): "context_length_exceeded", "model_not_found" ...
    char message[512];
} li_api_error;

// Fills *err and returns false (for `return api_fail(...)`-style call sites).
bool li_api_error_set(li_api_error *err, int status, const char *type, const char *param,
                      const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

// Parses `len` bytes of JSON (not NUL-terminated) for endpoint ep. On success returns true and
// *out owns its strings (li_api_request_free); on failure returns false, *err is filled (status
// 400) and *out holds nothing.
bool li_api_parse(const char *body, size_t len, li_api_endpoint ep, li_api_request *out,
                  li_api_error *err);
void li_api_request_free(li_api_request *r);

// The sampling fields of a request object `o` (a jansson json_t): max_tokens (or
// max_completion_tokens), temperature, top_p, min_p, top_k, ignore_eos, seed and stop, checked
// for type and range into r (which must be zeroed: fields absent keep the "not given" values
// -1 / false). Shared with `lazyinfer rag`'s workload lines (tools/rag-requests.c). On failure
// *err names the field; r's strings are freed by li_api_request_free either way.
struct json_t;
bool li_api_parse_sampling(const struct json_t *o, li_api_request *r, li_api_error *err);

// {"error": {"message", "type", "param", "code"}} as a malloc'ed string.
char *li_api_error_json(const li_api_error *err);

// Copies `len` bytes into a malloc'ed NUL-terminated string in which every invalid UTF-8 sequence
// is replaced by U+FFFD (model output can split or garble characters; JSON must be UTF-8).
char *li_api_utf8_sanitize(const char *s, size_t len, size_t *out_len);
// Offset of the first byte of s[0, len) that is not part of valid UTF-8 (a NUL byte counts as
// invalid: the engine takes C strings); len when all of it is valid.
size_t li_api_utf8_check(const char *s, size_t len);
// Offset in text[0, len) of the earliest match of any of the n_stop stop strings that ends past
// `old` (text[0, old) was searched before, without a match); SIZE_MAX when there is none.
size_t li_api_stop_find(const char *text, size_t len, size_t old, char *const *stop, int n_stop);
// Largest n <= len such that s[0, n) does not end inside a UTF-8 sequence that may still be
// completed by later bytes (streaming: hold the tail of a character back).
size_t li_api_utf8_complete_prefix(const char *s, size_t len);

typedef struct {
    const char *id;       // "chatcmpl-…" / "cmpl-…"
    const char *model;    // model id echoed back
    int64_t created;      // unix seconds
    li_api_endpoint endpoint;
} li_api_meta;

// A whole (non-streaming) response. text: sanitized UTF-8. finish: "stop" / "length".
char *li_api_response_json(const li_api_meta *meta, const char *text, const char *finish,
                           int prompt_tokens, int completion_tokens, int cached_tokens);
// One SSE event "data: {...}\n\n" of a stream: a text delta (text != NULL; first: the chat role
// is announced), a final chunk with finish reason (finish != NULL), or the usage chunk
// (usage == true). Returns a malloc'ed string.
char *li_api_chunk_sse(const li_api_meta *meta, const char *text, bool first, const char *finish,
                       bool usage, int prompt_tokens, int completion_tokens);

#endif
