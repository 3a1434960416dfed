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
    LI_ERR_NOT_FOUND,    // a key a store or cache was asked for is not there (a miss)
} li_status;

const char *li_status_str(li_status st);  // static string, e.g. "format error"
const char *li_last_error(void);           // message of the last failure on this thread

// ---- models ---------------------------------------------------------------------------------

typedef struct li_model li_model;

typedef struct {
    const char *path;            // HF directory, .gguf file, or "synth:NAME[:SEED]"
    const char *tokenizer_path;  // optional tokenizer.json overriding the model's (NULL: none)
    const char *chat_template;   // optional override: "llama3", "chatml", "llada" (NULL: detect)
    const char *backend;         // "cpu" (default), "cpu-ref" (the scalar fp64 oracle: slow,
                                 // for tests and debugging) or "cuda" (./lazyinfer-cuda builds:
                                 // NVIDIA sm_90 GPUs; Llama-family models)
    int n_threads;               // CPU worker threads (0: all cores)
    int device;                  // GPU index for "cuda" (0: the first)
    int n_ctx;                   // max tokens per sequence (0: the model's trained context, at
                                 // most 4096; beyond the trained one: a warning, once a process)
    int page_size;               // KV page size in tokens (0: 16)
    int max_seqs;                // sequences that can be in flight at once (0: 1)
    const char *cache_mode;      // document KV cache: "lazy" (default), "copy", "prefix", "none",
                                 // "full" (see li_cache_mode)
    int64_t kv_budget_bytes;     // KV pool size (0: max_seqs × n_ctx tokens' worth)
    const char *kv_dtype;        // how K/V are stored: "f32", "bf16" (half the bytes: twice the
                                 // tokens per budget), NULL or "auto": bf16 on "cuda", f32 on
                                 // the CPU backends
    const char *attn_impl;       // prefill / dense attention on "cuda": "auto" (NULL; cuDNN SDPA
                                 // where it takes the shape and loads, the engine's kernels
                                 // otherwise), "cudnn" (cuDNN or an error), "native" (the
                                 // engine's kernels); decode rows always use the engine's
    bool metadata_only;          // hyper-parameters and tokenizer only (for `info`): no weights,
                                 // no KV pool; generation functions must not be called
    const char *doc_evict;       // document-cache eviction (lazy, copy): "lru" (NULL), or "gdsf"
                                 // (GreedyDual-Size-Frequency: uses × prefill FLOPs / bytes);
                                 // the tiers below (host, disk) evict by the same policy
    // Tiers below the pool for "lazy" and "copy" documents (README "Sharing documents across
    // replicas"): copies are written through to each configured tier and promoted back on a miss.
    int64_t host_cache_bytes;    // L1 host RAM budget (pinned on "cuda"); 0: none
    const char *disk_cache_dir;  // L2 directory (one file per document); NULL: none
    int64_t disk_budget_bytes;   // L2 budget (required with disk_cache_dir)
    const char *kv_remote;       // L3 "redis://HOST:PORT[/DB]", shared by replicas; NULL: none.
                                 // Unreachable at load: a warning and no L3
    const char *kv_remote_password_file;  // L3 AUTH password: the file's first line
    const char *fp8;             // FP8 prefill of autoregressive models: "off" (NULL), "ffn" (the
                                 // FFN's GEMMs) or "all" (every linear layer but the LM head) as
                                 // block-scaled FP8 for batches of more than one token; decode
                                 // keeps the bf16 / f32 weights. Approximate (docs/CUDA.md)
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
    char kv_dtype[16];      // dtype of the KV page pool ("f32", "bf16"; "" without one)
    int64_t kv_token_bytes; // bytes of K and V one token takes in the pool (K/V dtype resolved
                            // from the params, also for metadata_only loads; 0 for diffusion
                            // models, which have no pool)
    int n_ctx;              // tokens per sequence this load allows (params.n_ctx, else
                            // min(trained, 4096); diffusion models: prompt + gen_length)
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    float rope_theta, rms_eps;
    char rope_scaling[16];  // "none", "linear", "llama3", "yarn"
    bool tied_embeddings;
    int64_t n_params;
    int n_vocab_text;       // ids with a text in the tokenizer: 0 .. n_vocab_text - 1 (the
                            // embedding's n_vocab may be larger; those ids decode as an error)
    char cache_mode[16];    // the document cache mode li_submit runs ("lazy", …)
    int n_threads;          // CPU workers of the backend
    bool diffusion;         // a diffusion LM (li_dllm_*); false: autoregressive (li_submit)
    bool metadata_only;     // loaded with params.metadata_only: nothing can run
    int bd_size;            // Fast-dLLM v2 block diffusion: the config's block (0: other models)
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
// A special (control) token such as an end of turn; false for ids outside the tokenizer.
bool li_token_is_special(const li_model *m, int32_t id);
// Tokenizes `text` with a tokenizer.json alone, no model (`lazyinfer tokenize -m FILE.json`);
// a tokenizer_config.json beside it gives BOS and the chat template. Otherwise as li_tokenize.
li_status li_tokenize_file(const char *tokenizer_json, const char *text, size_t len, bool add_bos,
                           bool parse_special, int32_t **out_ids, int *out_n);

// Renders one user message (and optional system message) with the model's chat format,
// with the assistant turn opened. *out is malloc'ed; release with free().
li_status li_chat_render(const li_model *m, const char *system, const char *user, char **out);

typedef struct {
    const char *role;     // "system", "user", "assistant"
    const char *content;
} li_chat_message;
// Renders a conversation with the model's chat format (and, if add_generation_prompt, the
// assistant turn opened) and tokenises it: the template's special tokens are matched, the
// messages' contents are never parsed for special tokens. *ids: li_free_tokens.
li_status li_chat_tokenize_messages(const li_model *m, const li_chat_message *msgs, int n,
                                    bool add_generation_prompt, int32_t **ids, int *n_ids);

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
// Called before each token is sampled with the logits it is drawn from, logits (V) in host
// memory, which it may change (biases, penalties; -INFINITY forbids a token). From li_step
// (continuous batching: the scheduler's requests only).
typedef void (*li_logits_cb)(void *user, float *logits, int V);

typedef struct {
    int n_predict;  // max tokens to generate
    li_sampling_params sampling;
    bool stop_at_eos;
    li_token_cb on_token;
    li_logits_cb on_logits;  // optional
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
// `logits` (n_tokens × n_vocab floats, caller-allocated). For tests and reference checks; it
// uses the model's KV pool directly (evicting cached documents if it needs room), so call it
// only when no request submitted with li_submit is unfinished.
li_status li_eval_logits(li_model *m, const int32_t *tokens, int n_tokens, float *logits);

// ---- requests with documents (RAG) and the scheduler ----------------------------------------
//
// A request is [system?][document…][query] (ARCHITECTURE.md §3.1). Each document is tokenised
// alone (no BOS) and encoded alone from position 0; the query and generated tokens attend to every
// block. With `chat`, the system block is the model's chat template up to the user message, and
// the query block is the user's text followed by the template's end of turn and assistant header.
// Requests are queued with li_submit and advanced together by li_step (continuous batching:
// missing documents are prefilled once for every request that waits for them, then queries, then
// one decode step for every running sequence).

typedef enum {
    LI_CACHE_LAZY,    // position-agnostic document cache, RoPE offset applied in attention
    LI_CACHE_COPY,    // position-aware (Block-Attention's port): a copy per (document, offset)
    LI_CACHE_PREFIX,  // vLLM automatic prefix caching (hash-chained pages, no documents)
    LI_CACHE_NONE,    // every document recomputed in every request (same semantics)
    LI_CACHE_FULL,    // ordinary causal attention over the whole prompt (other semantics)
} li_cache_mode;
li_status li_cache_mode_parse(const char *name, li_cache_mode *out);
const char *li_cache_mode_name(li_cache_mode mode);

// Cross-document repair (docs/RAG.md "Repair"): block attention encodes each document alone, so
// its tokens never attended to the documents before it. A repair recomputes some document tokens
// in the request's context, at their true positions, into the request's own pages (an overlay:
// the cached copy is never written, and attention reads the overlay instead of the cached
// entries it replaces). Documents at offset 0 (the first block) need none. Modes lazy and copy.
typedef enum {
    LI_REPAIR_NONE,   // block attention as cached (the default)
    LI_REPAIR_HEAD,   // each document's first head_k tokens, through every layer (EPIC)
    LI_REPAIR_BLEND,  // the blend_r fraction of document tokens whose layer-2 K deviates most
                      // from the cached K, through every layer (CacheBlend)
} li_repair_mode;
typedef struct {
    li_repair_mode mode;
    int head_k;     // HEAD: tokens per document, >= 1 (li_repair_parse's default 16)
    float blend_r;  // BLEND: fraction in (0, 1] (default 0.15)
} li_repair;
// "none", "head", "head:K", "blend", "blend:R" → *out; anything else LI_ERR_INVALID_ARG naming
// the problem.
li_status li_repair_parse(const char *s, li_repair *out);
// The canonical spelling ("none", "head:16", "blend:0.15") into buf (n bytes).
void li_repair_format(const li_repair *r, char *buf, size_t n);

typedef struct {
    const char *text;      // document text (len bytes), tokenised alone without BOS; or
    size_t len;
    const int32_t *ids;    // its token ids (used when non-NULL)
    int n_ids;
    const char *id;        // optional caller id, for logs
} li_doc;

// A request's token ids made ahead of li_submit (li_request_tokenize): its blocks and query.
typedef struct li_request_tokens li_request_tokens;

typedef struct {
    const char *system;     // optional system message
    const li_doc *docs;     // (n_docs) documents, in prompt order
    int n_docs;
    const char *query;      // the question (user message with chat, raw text without)
    const int32_t *prompt_ids;  // alternative to system/docs/query: a tokenised prompt
    int n_prompt_ids;
    bool chat;              // format through the model's chat template
    li_generate_params gen; // on_token / user are called from li_step
    float *first_logits;    // optional (V): receives the logits the first token was drawn from
    const li_request_tokens *tokens;  // optional: system/docs/query tokenised by
                                      // li_request_tokenize (then not tokenised again; copied)
    li_repair repair;       // zero: none; else the cache mode must be lazy or copy
} li_request;

typedef struct {
    li_status status;       // LI_OK, or why the request failed (message in `error`)
    char error[256];
    bool cancelled;         // ended by li_cancel
    int n_prompt;           // prompt tokens (all blocks + query)
    int n_doc_tokens;       // tokens in system + document blocks
    int n_cached_tokens;    // prompt tokens served from a cache (not recomputed): the pool or a
    int doc_hits, doc_misses;  // lower tier (a promoted document is a hit)
    int n_repair_tokens;    // document tokens recomputed in context by the repair (not cached)
    int n_generated;
    double queue_ms;        // submit → admitted
    double ttft_ms;         // submit → first token
    double total_ms;        // submit → finished
} li_request_result;

// Tokenises a request's system/docs/query into its blocks and query, as li_submit would. It reads
// only the tokenizer, so any thread may call it while another one steps the model (a server
// tokenises on its connection threads, never stalling the engine). *out: li_request_tokens_free.
li_status li_request_tokenize(const li_model *m, const li_request *q, li_request_tokens **out);
int li_request_tokens_count(const li_request_tokens *t);  // prompt tokens, blocks + query
// Part i (the blocks in order, then the query): its token count, *ids its ids; -1 past the end.
int li_request_tokens_part(const li_request_tokens *t, int i, const int32_t **ids);
void li_request_tokens_free(li_request_tokens *t);        // NULL is a no-op

// Queues a request (everything it points to is copied or tokenised here, except the callbacks
// and first_logits). *id identifies it for li_result.
li_status li_submit(li_model *m, const li_request *r, int64_t *id);
// One scheduler iteration. *n_unfinished: requests not finished yet (0: idle).
li_status li_step(li_model *m, int *n_unfinished);
// Steps until every submitted request has finished.
li_status li_run(li_model *m);
// Ends a request now (between steps): a waiting request never runs, a running one stops and
// gives its pages and document pins back at once (a document prefill that other requests wait
// for goes on). Its result then has `cancelled` set. LI_ERR_INVALID_ARG if the id is unknown.
li_status li_cancel(li_model *m, int64_t id);
// Result of a finished request (LI_ERR_INVALID_ARG if unknown or not finished); forgets it.
li_status li_result(li_model *m, int64_t id, li_request_result *out);

typedef struct {
    bool enabled;                 // the tier is configured and open (remote: reachable at load)
    int64_t hits, misses;         // lookups of documents that missed every tier above
    int64_t bytes_in, bytes_out;  // promoted out of the tier / written into it
    int64_t promotions;           // copies promoted from the tier into the pool
    double promote_ms;            // Σ time from the lookup to the pages being queued
    int64_t resident_bytes, resident_entries;  // remote: what this replica wrote (Redis bounds it)
    int64_t evictions;            // entries dropped for the budget
    int64_t dropped;              // entries found damaged, partial or stale (recomputed)
    int64_t errors;               // writes that failed (disk full, Redis down)
} li_cache_tier_stats;

typedef struct {
    int64_t doc_lookups, doc_hits, doc_misses, doc_hit_tokens, doc_miss_tokens;
    int64_t copies_made;        // copy mode: page copies with re-rotation
    int64_t evictions;          // documents (or prefix pages) evicted
    int64_t resident_docs, resident_copies, resident_bytes;
    int64_t copy_baseline_bytes;  // lazy: what a position-aware cache would hold for the same use
    int64_t prefix_lookup_tokens, prefix_hit_tokens;  // prefix mode
    int64_t kv_pages_total, kv_pages_free;
    int64_t kv_page_bytes;
    // The tiers below the pool (li_model_params.host_cache_bytes …): [0] host, [1] disk, [2] remote.
    li_cache_tier_stats tiers[3];
} li_cache_stats;
void li_get_cache_stats(const li_model *m, li_cache_stats *out);
// Waits until every copy handed to the lower tiers so far is written (disk, Redis): tests and
// benchmarks call it before reading another replica's view. No-op without tiers.
void li_cache_tiers_wait(li_model *m);
// The tiers' counters now (out: [0] host, [1] disk, [2] remote); unlike li_get_cache_stats, any
// thread may call it (the server's /metrics does). Zeroes without tiers.
void li_cache_tier_stats_get(li_model *m, li_cache_tier_stats out[3]);

// ---- diffusion decoding (LLaDA SAR, Fast-dLLM, DPad, LaCache) -------------------------------
//
// Semi-autoregressive (SAR) decoding of a diffusion LM (models whose arch is "llada"): the
// canvas [prompt | MASK × gen_length] is denoised block by block, a few tokens committed per
// forward pass; every mask up to the current block's end is a candidate (mask tokens in the
// prompt too: infilling, see canvas_out). The exact semantics (schedule, remasking, Gumbel-max, CFG, ties, RNG draw order,
// Fast-dLLM threshold/factor, DPad) are the contract in docs/DLLM.md, which a Python reference
// (tests/ref/gen_llada_ref.py) implements independently.

// LaCache components (exact caches: committed tokens equal the all-off run's).
enum {
    LI_DLLM_LACACHE_EMBED = 1,  // EmbedCache: canvas embeddings once per block
    LI_DLLM_LACACHE_ROPE = 2,   // RoPECache: layer-0 norm → Q,K,V → RoPE of non-block rows once
    LI_DLLM_LACACHE_FA = 4,     // FACache: layer-0 online-softmax state of non-block tiles once
    LI_DLLM_LACACHE_TRUNC = 8,  // final norm + LM head on the block's rows only
    LI_DLLM_LACACHE_ALL = 15,
};

typedef enum {
    LI_DLLM_REMASK_LOW_CONFIDENCE,  // confidence = softmax probability of the predicted token
    LI_DLLM_REMASK_RANDOM,          // confidence = one uniform draw per candidate row
} li_dllm_remasking;

// The precision of the low-confidence softmax (docs/DLLM.md step 5). The references differ:
// LLaDA's generate.py takes it in float32 (very confident rows round to exactly 1.0 and
// torch.topk orders those ties), Fast-dLLM's threshold and factor samplers in float64.
typedef enum {
    LI_DLLM_CONF_AUTO,  // each rule's reference: f32 for top-k (schedule, commit_per_step),
                        // f64 for threshold and factor
    LI_DLLM_CONF_F32,   // generate.py: softmax(logits) in float32
    LI_DLLM_CONF_F64,   // Fast-dLLM: softmax(logits.to(float64))
} li_dllm_confidence;

// What the trace callback sees after each denoising step of one request.
typedef struct {
    int request;         // index of the request in the batch (0 for li_dllm_generate)
    int block;           // block index, 0-based
    int step_in_block;   // 0-based step within the block
    int step;            // steps taken so far by this request, this one included (1-based)
    int nfe;             // forward passes so far (a CFG step counts 2)
    int n_committed;     // tokens committed by this step
    const int32_t *gen;  // (gen_length) generated part of the canvas; mask_id where still masked
    int gen_length;
    int32_t mask_id;
} li_dllm_step;
typedef void (*li_dllm_trace_cb)(void *user, const li_dllm_step *s);

typedef struct {
    int gen_length;    // tokens to generate (multiple of block_length)
    int block_length;  // B
    int sub_block_length;  // Fast-dLLM v2 models only: sub-blocks of B decoded in turn (0: 8)
    int steps;         // total denoising steps (multiple of gen_length / block_length)
    li_dllm_remasking remasking;
    li_dllm_confidence confidence;  // LI_DLLM_CONF_AUTO by default
    double temperature;  // 0: argmax; > 0: Gumbel-max in float64
    double cfg;          // classifier-free guidance scale, 0: off
    // Parallel decoding (Fast-dLLM), at most one of the three; with any of them the per-block
    // schedule is replaced by "repeat steps until the block has no mask" (`steps` is then only
    // validated).
    double threshold;     // 0: off; τ in (0, 1]: commit the best + every candidate >= τ
    double factor;        // 0: off; f > 0: Fast-dLLM's prefix with c_i >= 1 - f/(i+1)
                          // (docs/DLLM.md: its count rule exactly, quirk included)
    int commit_per_step;  // 0: off; K > 0: commit exactly min(K, masks left) per step
                          // (benchmarks with random weights, whose flat confidences defeat τ, f)
    // DPad: suffix masks after the block kept with probability scale·N(x_d; 0, 1),
    // x = linspace(0, k_sigma, window), dropped beyond the window; redrawn once per block.
    bool dpad;            // off by default
    int dpad_window;      // 256
    double dpad_k_sigma;  // 4
    double dpad_scale;    // 2
    bool early_stop;              // stop after a finished block that contains EOS (rest → EOS)
    bool logits_eos_inf;          // logits[EOS] = -inf before x0
    bool confidence_eos_eot_inf;  // logits[EOT] (and at temperature 0 logits[EOS]) = -inf after
                                  // x0, before the confidence softmax: their confidence is 0
    unsigned lacache;  // LI_DLLM_LACACHE_* bits (0: all off)
    bool fp8;          // FP8 FFN for layers >= 1 (approximate: changes the logits)
    int fa_tile;       // FACache tile in tokens (0: the model's default, 64)
    uint64_t seed;     // per-request RNG seed (li_rng: xoshiro256** seeded by splitmix64)
    li_dllm_trace_cb on_step;  // optional, called after every step
    void *user;
    // Optional (n_prompt + gen_length), filled at the end: the whole final canvas — the prompt
    // with its mask tokens decoded (infilling: masks in the prompt are filled like the generated
    // ones), then the generated part.
    int32_t *canvas_out;
} li_dllm_params;
li_dllm_params li_dllm_default_params(void);  // gen 128, block 32, steps 128, all else off

// Checks the parameters on their own (sizes, divisibility, ranges, exclusive options). Returns
// LI_ERR_INVALID_ARG with a message naming the parameter.
li_status li_dllm_check_params(const li_dllm_params *p);

typedef struct {
    int n_prompt, gen_length;
    int steps;             // denoising steps taken
    int nfe;               // forward passes (a CFG step counts 2)
    bool early_stopped;
    // Two token counts, two tokens/s figures (both over latency_ms):
    int n_tokens_fastdllm;  // Fast-dLLM: generated tokens that are not EOS (EOS padding excluded)
    int n_tokens_dinfer;    // dInfer: every generated position (gen_length; prompt excluded)
    double tps_fastdllm, tps_dinfer;
    double latency_ms;     // wall time of the denoising loop (allocation excluded)
    double ms_per_step;    // latency_ms / steps
    // Work done, summed over the forwards (li_llada_step_info). In a batch these are filled in
    // the batch total only (the forwards serve all requests at once).
    int64_t embed_rows, qkv_rows, fa_tiles, fa_tiles_skipped, head_rows, fp8_gemm_rows;
    int64_t canvas_rows;   // rows given to the model (after DPad drops), summed over forwards
    double flops;
    // Device memory the backend allocated for its own scratch during the steps (after the
    // request's reservation at start): 0 unless a shape outgrew it (then once per growth).
    int64_t backend_allocs;
} li_dllm_stats;

// Decodes one request. out: (gen_length) caller-allocated, receives the generated part of the
// final canvas. stats may be NULL. The model must be a diffusion model (arch "llada"), or a
// Fast-dLLM v2 block-diffusion model (config model_type "Fast_dLLM_Qwen"): decoded by blocks of
// block_length over an exact KV cache, sub-blocks of sub_block_length committed by threshold
// (0: the reference's 1, one token per step); out holds the tokens up to its stop token, then
// stop tokens (docs/DLLM.md "Fast-dLLM v2"). Its options other than these are refused.
li_status li_dllm_generate(li_model *m, const int32_t *prompt, int n_prompt,
                           const li_dllm_params *params, int32_t *out, li_dllm_stats *stats);

typedef struct {
    const int32_t *prompt;  // (n_prompt) token ids
    int n_prompt;
    li_dllm_params params;  // per request; lacache, fp8 and fa_tile must be equal in a batch
    int32_t *out;           // (params.gen_length) caller-allocated
    li_dllm_stats stats;    // filled (work counters only in *total)
} li_dllm_request;

// Decodes n requests together: each step runs one forward over the canvases of every request
// still decoding (prompts, lengths and options may differ). Each request commits exactly the
// tokens it would alone. total (may be NULL): wall time, NFE, steps and the work of the batch.
li_status li_dllm_generate_batch(li_model *m, li_dllm_request *reqs, int n, li_dllm_stats *total);

// The same batch one step at a time, so that a caller (the server) can interleave batches, drop
// requests whose client left and stop between steps. begin checks and allocates everything
// (reqs must outlive the batch); each step runs one forward over every request still decoding
// (*n_left: those left; a request's out is filled when it finishes, and done says so); cancel
// drops request q (it takes no more steps, its out is not filled); stats: the totals so far.
// li_dllm_generate_batch = begin, step until none is left, stats, free.
typedef struct li_dllm_batch li_dllm_batch;
li_status li_dllm_batch_begin(li_model *m, li_dllm_request *reqs, int n, li_dllm_batch **out);
li_status li_dllm_batch_step(li_dllm_batch *b, int *n_left);
li_status li_dllm_batch_cancel(li_dllm_batch *b, int q);
bool li_dllm_batch_done(const li_dllm_batch *b, int q);  // finished or cancelled
void li_dllm_batch_stats(const li_dllm_batch *b, li_dllm_stats *total);
void li_dllm_batch_free(li_dllm_batch *b);  // NULL is a no-op

// The model's mask, EOS and EOT token ids (-1 where the tokenizer has none).
li_status li_dllm_special_tokens(const li_model *m, int32_t *mask, int32_t *eos, int32_t *eot);
// Text of a generated part: tokens up to the first EOS or EOT, special tokens and masks left out.
// *out is malloc'ed (free()).
li_status li_dllm_detokenize(const li_model *m, const int32_t *gen, int n, char **out);

#ifdef __cplusplus
}
#endif
#endif
