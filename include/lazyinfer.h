// lazyinfer.h — the only public header of lazyinfer, an LLM inference engine in C.
//
// Handles are opaque. Every function that can fail returns an li_status; the reason is a
// thread-local message read with li_last_error() right after the failing call.
// Thread-safety: a li_model may be used by one thread at a time unless a function says
// otherwise; li_status_str and li_last_error are always safe.
#ifndef LAZYINFER_H
#define LAZYINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LI_OK = 0,
    LI_ERR_INVALID_ARG,  // a parameter the caller gave is out of range or malformed
    LI_ERR_IO,           // a file could not be opened, read or mapped
    LI_ERR_FORMAT,       // a file's contents are truncated, corrupt or inconsistent
    LI_ERR_UNSUPPORTED,  // valid input that this build does not handle (dtype, architecture)
    LI_ERR_OOM,          // an allocation failed
    LI_ERR_KV_FULL,      // the KV page pool has no free page for this request
    LI_ERR_LIMIT,        // a configured limit (context length, page-table field width) exceeded
    LI_ERR_BACKEND,      // the compute backend failed (e.g. a CUDA error)
} li_status;

const char *li_status_str(li_status st);  // static string, e.g. "format error"
const char *li_last_error(void);           // message of the last failure on this thread

// ---- models ---------------------------------------------------------------------------------

typedef struct li_model li_model;

typedef struct {
    const char *path;            // HF directory, .gguf file, or "synth:NAME[:SEED]"
    const char *tokenizer_path;  // optional tokenizer.json overriding the model's (NULL: none)
    const char *chat_template;   // optional override: "llama3", "chatml", "llada" (NULL: detect)
    const char *backend;         // "cpu" (default) or "cpu-ref" (the scalar fp64 oracle: slow,
                                 // for tests and debugging)
    int n_threads;               // CPU worker threads (0: all cores)
    int n_ctx;                   // max tokens per sequence (0: the model's trained context)
    int page_size;               // KV page size in tokens (0: 16)
    int max_seqs;                // sequences that can be in flight at once (0: 1)
    bool metadata_only;          // hyper-parameters and tokenizer only (for `info`): no weights,
                                 // no KV pool; generation functions must not be called
} li_model_params;

li_model_params li_model_default_params(void);

// Loads weights, tokenizer and hyper-parameters and allocates the KV pool for
// max_seqs × n_ctx tokens. On success *out is owned by the caller (free with li_model_free).
li_status li_model_load(li_model **out, const li_model_params *params);
void li_model_free(li_model *m);  // NULL is a no-op

typedef struct {
    char arch[32];       // "llama"
    char name[128];      // from metadata, or the synth name
    char weight_dtype[16];  // dtype of the weights in the source file ("q4_1", "bf16", …)
    char compute_dtype[16]; // dtype the weights are held in for compute ("f32")
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    float rope_theta, rms_eps;
    char rope_scaling[16];  // "none", "linear", "llama3", "yarn"
    bool tied_embeddings;
    int64_t n_params;
} li_model_info;
void li_model_get_info(const li_model *m, li_model_info *out);

// ---- tokens ---------------------------------------------------------------------------------

// Tokenizes `text` (len bytes of UTF-8). add_bos: prepend BOS when the model wants one.
// parse_special: match added/special tokens such as "<|im_start|>" in the text.
// *out_ids is malloc'ed by the library; release with li_free_tokens.
li_status li_tokenize(const li_model *m, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t **out_ids, int *out_n);
void li_free_tokens(int32_t *ids);
// Appends the bytes of token `id` to buf (at most buf_size bytes); *out_len gets the full length.
li_status li_token_to_piece(const li_model *m, int32_t id, char *buf, size_t buf_size,
                            size_t *out_len);
int32_t li_token_eos(const li_model *m);

// Renders one user message (and optional system message) with the model's chat format,
// with the assistant turn opened. *out is malloc'ed; release with free().
li_status li_chat_render(const li_model *m, const char *system, const char *user, char **out);

// ---- autoregressive generation --------------------------------------------------------------

typedef struct {
    float temperature;  // 0: greedy
    int top_k;          // 0: off
    float top_p;        // 1: off
    float min_p;        // 0: off
    uint64_t seed;
} li_sampling_params;
li_sampling_params li_sampling_default_params(void);

// Called once per generated token; return false to stop.
typedef bool (*li_token_cb)(void *user, int32_t token);

typedef struct {
    int n_predict;  // max tokens to generate
    li_sampling_params sampling;
    bool stop_at_eos;
    li_token_cb on_token;
    void *user;
} li_generate_params;
li_generate_params li_generate_default_params(void);

typedef struct {
    int n_prompt, n_generated;
    double prompt_ms, generate_ms;  // wall time of prefill and of the decode steps
} li_generate_stats;

// Prefills `prompt` and samples up to n_predict tokens, reporting each through on_token.
// The model's KV pages are freed again before it returns.
li_status li_generate(li_model *m, const int32_t *prompt, int n_prompt,
                      const li_generate_params *params, li_generate_stats *stats);

// Runs the model over `tokens` from position 0 and copies the logits of every position into
// `logits` (n_tokens × n_vocab floats, caller-allocated). For tests and reference checks.
li_status li_eval_logits(li_model *m, const int32_t *tokens, int n_tokens, float *logits);

#ifdef __cplusplus
}
#endif
#endif
