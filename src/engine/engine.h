// engine.h — internal view of li_model (the public handle): backend, model, tokenizer, KV pool,
// caches, scratch, and the sampler. The public functions live in engine.c (loading, tokens,
// chat), scheduler.c (requests, documents, continuous batching), engine-ar.c (li_generate and
// li_eval_logits on top of it) and engine-dllm.c (diffusion decoding).
#ifndef LI_ENGINE_H
#define LI_ENGINE_H

#include "../kv/doc-cache.h"
#include "../kv/kv-pool.h"
#include "../kv/kv-tiers.h"
#include "../kv/prefix-cache.h"
#include "../model/llada.h"
#include "../model/llama.h"
#include "../tokenizer/tokenizer.h"

// Exactly one of `llama` (has_weights or metadata) and `llada` describes the model.
struct li_model {
    li_backend *be;
    li_llama llama;  // autoregressive models (arch "llama"); unused when llada is set
    // Fast-dLLM v2 (engine-bd.c): the FFN's FP8 copies of layers >= 1, quantised by the first
    // request that asks for FP8 and lent to llama.fp8 for the forwards of such requests only
    li_llama_fp8_layer *bd_fp8;
    li_llada *llada; // diffusion models (arch "llada"): decoded by engine-dllm.c
    li_tokenizer *tok;
    li_kv_pool kv;
    li_llama_scratch scratch;
    li_generation_config gen_cfg;  // defaults from generation_config.json (HF dirs)
    int n_ctx;    // max tokens per sequence (also set by metadata_only loads)
    li_dtype kv_dtype;  // of the KV pool (also resolved by metadata_only loads)
    int n_batch;  // max tokens per forward call (prefill chunk)
    float *logits;  // (n_batch, V) output of the last forward
    bool metadata_only;

    // Requests and caches (scheduler.c).
    li_cache_mode cache_mode;
    li_doc_cache *docs;        // lazy, copy
    li_prefix_cache *prefix;   // prefix
    li_kv_tiers *tiers;        // lazy, copy: host / disk / remote tiers below the pool (or NULL)
    char model_id[512];        // names the weights in cache keys
    char tokenizer_id[512];    // names the tokenizer in cache keys
    int max_running;           // requests decoded together
    struct li_sched *sched;
};

li_status li_sched_init(li_model *m);
// The tiers below the pool from p's host_cache_bytes … (lazy, copy), with the pool's GDSF cost
// (li_doc_cache_set_cost's arguments). Tiers asked for in another mode are an error.
li_status li_sched_init_tiers(li_model *m, const li_model_params *p, double cost_per_token,
                              double cost_per_pair);
int li_sched_n_unfinished(const li_model *m);  // requests submitted and not finished
void li_sched_free(li_model *m);
// Evicts cached documents / prefix pages until the pool has n_pages free.
li_status li_engine_make_room(li_model *m, int64_t n_pages);

// Sampler: the engine's PRNG and the backend's sample op.
typedef struct {
    li_sampler_config cfg;
    li_rng rng;
} li_sampler;
void li_sampler_init(li_sampler *s, const li_sampling_params *p);
int32_t li_sampler_sample(li_sampler *s, li_backend *be, const float *logits, int V);

// Fast-dLLM v2 block diffusion (engine-bd.c), for models with hparams bd_size > 0: what
// li_dllm_generate and the li_dllm_batch steps run for them (docs/DLLM.md "Fast-dLLM v2"), the
// parameter check (LI_ERR_INVALID_ARG / LI_ERR_LIMIT naming the parameter), and the token that
// ends a request.
li_status li_bd_check(const li_model *m, const li_dllm_params *p, const int32_t *prompt,
                      int n_prompt);
li_status li_bd_generate(li_model *m, const int32_t *prompt, int n_prompt,
                         const li_dllm_params *p, int32_t *out, li_dllm_stats *stats);
// The same one forward at a time (a batch's requests take turns per forward): begin (checks,
// buffers; nothing runs), step until *finished (then the request's KV pages are free again),
// result (out: gen_length tokens, canvas_out, stats), free (any time; NULL is a no-op).
typedef struct li_bd_run li_bd_run;
li_status li_bd_begin(li_model *m, const int32_t *prompt, int n_prompt, const li_dllm_params *p,
                      li_bd_run **out);
li_status li_bd_step(li_bd_run *d, bool *finished);
void li_bd_result(const li_bd_run *d, int32_t *out, li_dllm_stats *stats);
void li_bd_free(li_bd_run *d);
// FNV-1a over the bits of every logit row the request's decisions read so far (the prompt's
// last row, the sub-blocks' rows, each closing forward's last row): equal for two runs that
// decided from the same logits (tests: LaCache's layer-0 caches on = off).
uint64_t li_bd_read_hash(const li_bd_run *d);
int32_t li_bd_stop_token(const li_model *m);

// The hyper-parameters of whichever architecture is loaded.
const li_hparams *li_model_hparams(const li_model *m);

#endif
