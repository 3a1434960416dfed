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
#define LI_API_MAX_N 16          // choices per request (n)
#define LI_API_MAX_TOP_LOGPROBS 20
#define LI_API_MAX_LOGIT_BIAS 1024  // entries of logit_bias

typedef enum { LI_API_FORMAT_TEXT, LI_API_FORMAT_JSON_OBJECT, LI_API_FORMAT_JSON_SCHEMA } li_api_format;

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
    char *repair;                // extension: cross-document repair, "none", "head[:K]",
                                 // "blend[:R]" as given (li_repair_parse checks it where the
                                 // model is: server-http.c, rag-requests.c); NULL: not given
    double min_p;                // extension, < 0: not given
    uint64_t seed;
    char *stop[LI_API_MAX_STOP];
    int n_stop;
    int skip_special;            // extension (as vLLM): special tokens left out of the text;
                                 // -1 not given (= 1), else 0/1
    int n;                       // choices (1 .. LI_API_MAX_N)
    bool logprobs;               // chat: logprobs; completions: logprobs given (an int)
    int top_logprobs;            // alternatives per token (0 .. 20)
    int32_t *bias_ids;           // (n_bias) logit_bias: token ids and what is added to their logits
    float *bias;
    int n_bias;
    bool has_presence, has_frequency, has_repetition;
    double presence_penalty, frequency_penalty;  // [-2, 2]; subtracted per generated token (OpenAI)
    double repetition_penalty;   // extension (as vLLM), (0, 10]: logits of prompt and generated
                                 // tokens divided (> 0) or multiplied (< 0) by it
    li_api_format format;        // response_format
    char *json_schema;           // LI_API_FORMAT_JSON_SCHEMA: the schema, as compact JSON text
    // diffusion models (extension); -1 / negative: not given
    int gen_length, block_length, steps;
    int sub_block_length;      // Fast-dLLM v2 models
    double threshold, factor;  // < 0: not given
    int confidence;            // -1 not given, else li_dllm_confidence ("auto", "f32", "f64")
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
// max_completion_tokens), temperature, top_p, min_p, top_k, ignore_eos, seed, stop and repair
// (a string; its value is checked by li_repair_parse), checked
// for type and range into r (which must be zeroed: fields absent keep the "not given" values
// -1 / false). Shared with `lazyinfer rag`'s workload lines (tools/rag-requests.c). On failure
// *err names the field; r's strings are freed by li_api_request_free either way.
struct json_t;
bool li_api_parse_sampling(const struct json_t *o, li_api_request *r, li_api_error *err);

// POST /tokenize (llama-server's shape): {"content": string, "add_special": false,
// "parse_special": true, "with_pieces": false}. *content is malloc'ed (free()).
typedef struct {
    char *content;
    size_t len;
    bool add_special, parse_special, with_pieces;
} li_api_tokenize;
bool li_api_parse_tokenize(const char *body, size_t len, li_api_tokenize *out, li_api_error *err);
// POST /detokenize: {"tokens": [int, ...]}. *ids is malloc'ed (free()).
bool li_api_parse_detokenize(const char *body, size_t len, int32_t **ids, int *n,
                             li_api_error *err);
// {"tokens": [ids]} or, with pieces (texts[i] of lens[i] bytes), {"tokens": [{"id", "piece"}]}
// where a piece that is not valid UTF-8 is its list of bytes. {"content": text}.
char *li_api_tokenize_json(const int32_t *ids, int n, const char *const *texts, const size_t *lens);
char *li_api_detokenize_json(const char *text, size_t len);

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

// Log-probabilities of one generated token: its text (raw bytes, may split a character), its
// log-probability, where it starts in the choice's text, and the most likely alternatives.
typedef struct {
    const char *text;
    size_t len;
    float logprob;
} li_api_top;

typedef struct {
    const char *text;
    size_t len;
    float logprob;
    size_t offset;  // byte offset of the token in the choice's text
    int n_top;
    li_api_top top[LI_API_MAX_TOP_LOGPROBS];
} li_api_logprob;

// One choice of a response or a stream chunk.
typedef struct {
    int index;
    const char *text;          // sanitized UTF-8 (a stream's delta); NULL: none
    const char *finish;        // "stop" / "length"; NULL: not finished (a delta)
    bool first;                // stream: the choice's first chunk (chat announces the role)
    bool logprobs;             // logprobs asked: lp (n_lp) are this text's tokens
    const li_api_logprob *lp;
    int n_lp;
} li_api_choice;

typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens;
} li_api_usage;

// A whole (non-streaming) response of n choices. Returns a malloc'ed string.
char *li_api_response_json(const li_api_meta *meta, const li_api_choice *ch, int n,
                           const li_api_usage *usage);
// One SSE event "data: {...}\n\n" of a stream: one choice's chunk (a text delta, or its final
// chunk with a finish reason), or, with ch NULL, the usage chunk. Returns a malloc'ed string.
char *li_api_chunk_sse(const li_api_meta *meta, const li_api_choice *ch, const li_api_usage *usage);

#endif
