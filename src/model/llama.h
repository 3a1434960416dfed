// llama.h — the Llama-family model: hyper-parameters, weights, run state and the batched forward.
//
// One forward call processes a batch of T tokens that may belong to several sequences. Each
// token carries its RoPE position and the physical KV slot its K/V go to; each sequence carries
// its page table (li_kv_seq, already including the slots of its new tokens) and, per token, how
// many of its keys it may see. The model layer knows nothing about how pages are allocated or
// shared (that is src/kv/); it reads and writes the pool through the backend ops.
// Tested by tests/test-model-ref.c (HF transformers reference files) and tests/test-model.c.
#ifndef LI_LLAMA_H
#define LI_LLAMA_H

#include "../backend/backend.h"
#include "../format/gguf.h"
#include "../format/hparams.h"
#include "../format/safetensors.h"

typedef struct {
    li_weight attn_norm;  // (1, D)
    li_weight wq;         // (H*Dh, D)
    li_weight wk;         // (Hkv*Dh, D)
    li_weight wv;         // (Hkv*Dh, D)
    // Qwen2 (hp.qkv_bias): the projections' biases, views into bqkv when fused; data NULL
    // without them
    li_weight bq;         // (1, H*Dh)
    li_weight bk;         // (1, Hkv*Dh)
    li_weight bv;         // (1, Hkv*Dh)
    li_weight wo;         // (D, H*Dh)
    li_weight ffn_norm;   // (1, D)
    li_weight w_gate;     // (F, D)
    li_weight w_up;       // (F, D)
    li_weight w_down;     // (D, F)
    // The same rows back to back, for one matmul per group when T == 1 (decode): fewer
    // synchronisations per token. wq/wk/wv and w_gate/w_up are views into these; data NULL when
    // the weights could not be fused (mixed dtypes).
    li_weight wqkv;       // (H*Dh + 2*Hkv*Dh, D)
    li_weight w_gate_up;  // (2F, D)
    li_weight bqkv;       // (1, H*Dh + 2*Hkv*Dh) [bq | bk | bv], the fused rows' bias
} li_llama_layer;

typedef struct {
    li_weight tok_embd;  // (V, D)
    li_weight out_norm;  // (1, D)
    li_weight output;    // (V, D); aliases tok_embd when tied
    li_llama_layer *layers;  // (L)
} li_llama_weights;

// Where the weights came from and what owns their memory.
typedef struct {
    li_gguf *gguf;          // open while weights point into it (f32 tensors are not copied)
    li_safetensors *st;     // same for safetensors
    void **owned;           // buffers we allocated (dequantised / converted / synthetic)
    int n_owned;
    int64_t cap_owned;
    char source_dtype[16];  // dominant dtype of the file's weights, for `info`
    // Device backends: the weights' buffers in backend memory (weights-device.c); the host
    // copies above are freed once uploaded.
    li_backend *dev;
    void **dev_owned;
    int n_dev_owned;
    int64_t cap_dev_owned;
} li_weight_store;

// One sequence's part of a batch: tokens [t0, t0 + n) of the batch, and its page table
// (including the pages the new tokens are written into). backend.h's li_attn_seq, so that a batch's
// sequences go to attention_seqs as they are.
typedef li_attn_seq li_batch_seq;

// Scratch for one forward of up to max_tokens tokens (allocated once at init), in the backend's
// memory. On a device backend the batch's index arrays (tokens, positions, slots, visibility,
// page tables) are packed into idx_host and uploaded to idx_dev in one copy per forward.
typedef struct {
    int max_tokens;
    int max_table_words;   // page-table words of all sequences of one batch (device backends)
    li_backend *be;
    void *idx_host, *idx_dev;
    size_t idx_bytes;
    li_batch_seq *seqs_dev;  // (max_tokens) host structs whose page tables point into idx_dev
    // (n_seqs + 1) in idx_dev when the staged batch is decode rows of several sequences (one row
    // each) and the backend has attention_decode: where each page table starts among the
    // consecutive staged tables (words from the first); NULL otherwise. page_start_host: the
    // same values in idx_host
    int32_t *page_start, *page_start_host;
    float *x;       // (T, D) residual stream
    float *xn;      // (T, D) normalised
    float *q;       // (T, H*Dh)
    float *k;       // (T, Hkv*Dh)
    float *v;       // (T, Hkv*Dh)
    float *att;     // (T, H*Dh)
    float *gate;    // (T, 2F): the FFN gate, or [gate | up] from one GEMM over w_gate_up
    float *up;      // (T, F)
    float *tmp;     // (T, D)
    // bf16 activations (a device backend with backend.h's BF16 forms; LI_LLAMA_ACT = f32 | bf16
    // overrides the default, bf16 there): every GEMM input is made in bf16 by the op before it
    // (the norms, swiglu, the attention output's one rounding), and the O and down projections
    // add to x in the GEMM's epilogue. The residual stream x stays f32: the same bits as the f32
    // forms, since each rounding only moves into the op that makes the value (backend.h).
    bool act_bf16;
    // With bf16 activations, gate and up as one GEMM over w_gate_up (N = 2F) that swiglu reads
    // at ld 2F, and q, k, v as one over wqkv whose rows qkv_rope_store biases, rotates and stores
    // in one pass; LI_LLAMA_FUSED=0 runs the separate GEMMs and passes (A/B, and the f32 path's
    // bits: a GEMM of other N may pick another algorithm, so fused is within fp32 rounding of
    // split, not bit for bit).
    bool fused_gemms;
    uint16_t *xb;   // (T, max(D, F, H*Dh)) normalised rows, silu(gate) * up, attention output
    // FP8 prefill (li_llama_set_fp8): the GEMM inputs as e4m3 codes (T, max(D, F, H*Dh)) and
    // their scales per 1 x 128 group; allocated by the first FP8 batch
    uint8_t *qa;
    float *sa;
} li_llama_scratch;

// Which linear layers FP8 prefill quantises: none, the FFN's (gate, up, down) or every one of a
// layer (q, k, v, o too). The LM head always stays bf16 (it runs on a few rows).
typedef enum { LI_FP8_OFF = 0, LI_FP8_FFN, LI_FP8_ALL } li_fp8_scope;

// A layer's FP8 copies (zeroed: not quantised; attention's are zeroed in scope LI_FP8_FFN).
typedef struct {
    li_fp8_weight q, k, v, o, gate, up, down;
} li_llama_fp8_layer;

typedef struct {
    li_hparams hp;
    li_rope_table rope;
    li_llama_weights w;
    li_weight_store store;
    li_backend *be;  // borrowed: valid for the model's lifetime
    bool has_weights;  // false when loaded for metadata only
    // FP8 prefill (li_llama_set_fp8): per layer, block-quantised copies of the linear layers in
    // its scope that batches of more than one row read; NULL (default): off.
    li_llama_fp8_layer *fp8;
    li_fp8_scope fp8_scope;
} li_llama;


// Layer 0 of a Fast-dLLM v2 request (src/engine/engine-bd.c; docs/DLLM.md "LaCache on it"),
// run by llama-bd0.c. The layer-0 keys (after RoPE) and values of every row the request has run
// are kept dense by position, and a block's layer-0 attention streams, for each query row, the
// cached prefix's keys [0, c) in tiles of `tile` from key 0, then the block's keys [c, c + B), in
// that order whatever the flags (flash_attn_tiles' online softmax), the prefix in calls of
// `group` query rows (the sub-blocks: a call's row count picks the GPU's kernel, so the calls are
// the same with the cache and without). Layer 0's input is the embedding alone, so a row whose
// token did not change since the block's last forward has the same embedding, Q/K/V and prefix
// state; LaCache keeps them:
//   EmbedCache  the block's embedding rows, recomputed for the span of changed rows;
//   RoPECache   its Q (here) and K/V (in k0, v0), recomputed for the span of changed rows;
//   FACache     each query row's state (m, l, o) after the prefix, recomputed for the groups
//               holding a changed row;
// all rows at a block's first forward. Every other op runs on every row as without the caches,
// and the GEMMs of the span run through li_matmul_rows: a cache on gives the logits of the
// cache off, bit for bit. Buffers in the backend's memory; host bookkeeping below them.
typedef struct {
    li_backend *be;
    int max_rows, B;      // rows of the request (positions), rows of a block
    bool embed, rope, fa;  // the LaCache switches
    int group, tile;      // query rows per prefix call (S), key tile
    float *k0, *v0;       // (max_rows, Hkv*Dh) layer-0 keys after RoPE, values, by position
    float *emb;           // (B, D) EmbedCache
    float *q;             // (B, H*Dh) RoPECache queries (or this forward's)
    float *m, *l, *o;     // (B, H), (B, H), (B, H*Dh) the block rows' online-softmax state
    float *cm, *cl, *co;  // the same after the prefix alone: FACache
    // host: the block the caches hold (start c; -1: none), its tokens at its last forward
    int c;
    int32_t *tokens;  // (B)
    bool emb_ok, rope_ok, fa_ok;
    // the plan of the forward under way (li_llama_forward): rows [lo, hi) embedded and projected
    // (all B without the cache), `redo` the prefix groups computed (bit g: rows [gS, gS + S))
    int p0, lo, hi;  // p0: the batch's first position (c for a block)
    uint64_t redo;
    bool use_emb, use_rope, use_fa;
    // work, summed over forwards: rows embedded and projected, prefix rows streamed and served
    int64_t n_embed, n_qkv, fa_tiles, fa_tiles_skipped;
} li_llama_bd0;

// max_rows: positions the request can reach; B, group (S, B a multiple), tile (0: 64): the
// block's rows, the prefix's query rows per call, its key tile. embed / rope / fa: the caches.
li_status li_llama_bd0_init(li_llama_bd0 *z, const li_llama *m, int max_rows, int B, int group,
                            int tile, bool embed, bool rope, bool fa);
void li_llama_bd0_free(li_llama_bd0 *z);  // NULL or zeroed: a no-op

typedef struct {
    int n_tokens;              // T
    const int32_t *tokens;     // (T)
    const int32_t *pos;        // (T) RoPE positions
    const int64_t *slot;       // (T) physical KV slots: page * P + offset
    const int32_t *n_visible;  // (T) keys of its sequence each token sees (causal: own index + 1)
    const int32_t *kv_first;   // (T) first key each token sees, or NULL for 0 (see backend.h)
    int n_seqs;
    const li_batch_seq *seqs;  // (n_seqs)
    int n_logits;              // rows that need logits
    const int32_t *logit_rows; // (n_logits) batch indices
    // Fast-dLLM v2 (li_llama_bd0; NULL: none): layer 0's K/V also go to bd0's dense rows; with
    // bd_block the batch is the request's current block (one sequence, positions pos[0] .. +
    // T, T = bd0->B, every row seeing the cache and the block) and layer 0 runs as li_llama_bd0
    // says; the head's rows then run through li_matmul_rows.
    li_llama_bd0 *bd0;
    bool bd_block;
    // A repair's selection pass (src/engine/repair.c) batched with other work: the last n_tail
    // rows, whole sequences at the end of seqs, run layers [0, tail_layer) and then only the
    // K/V store of layer tail_layer (their attention, FFN and later layers are not computed);
    // they take no logits. 0: every row runs every layer.
    int n_tail;
    int tail_layer;            // in [1, n_layer) when n_tail > 0
} li_batch;

// Loaders. `path`: an HF directory, a .gguf file. The model is bound to `be`.
li_status li_llama_load(li_llama *m, const char *path, li_backend *be, bool metadata_only);
// Random weights of a named real configuration ("tiny-llama", "smollm2-135m",
// "llama-3.1-8b", "tiny-qwen2", "qwen2.5-7b"); seed fixes them.
li_status li_llama_synth(li_llama *m, const char *name, uint64_t seed, li_backend *be,
                         bool metadata_only);
bool li_llama_synth_known(const char *name);
void li_llama_free(li_llama *m);
int64_t li_llama_n_params(const li_hparams *hp);
// True when the model is too big to hold in f32 on the CPU: bf16 matrices then stay bf16.
bool li_llama_keeps_bf16(const li_hparams *hp);

// Device backends (weights-device.c): moves every weight into the backend's memory (matrices
// bf16, norms f32; fused groups and a tied head stay shared) and frees the host copies. A no-op
// on host backends. li_llama_load and li_llama_synth call it.
li_status li_llama_weights_to_device(li_llama *m);
// Random weights built directly in device memory (synth models too big for a host copy): the
// same distributions as li_synth_llama_weights, another generator (so other values).
li_status li_llama_synth_on_device(li_llama *m, uint64_t seed);

// FP8 prefill: the linear layers of `scope` in layers first_layer .. L-1 quantised once (128 x 128
// blocks, on the model's backend) and run as block-scaled FP8 GEMMs for batches of more than one
// row (prefill chunks); one-row batches (decode) keep the bf16 / f32 weights. LI_FP8_OFF frees
// them. Approximate: ARCHITECTURE.md §6 gives the measured error.
li_status li_llama_set_fp8(li_llama *m, li_fp8_scope scope, int first_layer);
// "off" (NULL), "ffn" or "all" -> *out; LI_ERR_INVALID_ARG naming the value otherwise.
li_status li_fp8_scope_parse(const char *s, li_fp8_scope *out);
const char *li_fp8_scope_name(li_fp8_scope s);

// max_table_words bounds the page-table words of one batch (only device backends stage them).
li_status li_llama_scratch_init(li_llama_scratch *s, li_backend *be, const li_hparams *hp,
                                int max_tokens, int max_table_words);
void li_llama_scratch_free(li_llama_scratch *s);

// Runs the batch through the model: writes every token's K/V into the pool and fills
// logits (n_logits, V) for the requested rows.
li_status li_llama_forward(const li_llama *m, li_llama_scratch *s, const li_kv_storage *kv,
                           const li_batch *batch, float *logits);

#endif
