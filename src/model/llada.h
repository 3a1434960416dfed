// llada.h — the LLaDA diffusion LM (ARCHITECTURE.md §2.3, §5): bidirectional Llama-style
// transformer evaluated over a whole canvas per denoising step, with the LaCache exact caches
// (EmbedCache, RoPECache, FACache, LM-head truncation) and the FP8 FFN of layers >= 1.
//
// The forward is one denoising step over one or several canvases (requests batched together: the
// matmuls run over all rows at once, attention per canvas). Each canvas has its own
// li_llada_cache, valid for one SAR block of one canvas layout; `block_start` refills it.
// Invariant (tests/test-llada.c): with any combination of cache flags the logits equal the
// all-off logits within fp32 rounding (fp8 off; with fp8 on, an fp32-rounding difference may flip
// an e4m3 code, so the agreement is that of the FP8 path); FACache alone changes no bit.
// Not here: the SAR decoding loop, remasking, parallel decoding, DPad selection
// (src/engine/engine-dllm.c).
#ifndef LI_LLADA_H
#define LI_LLADA_H

#include "../backend/backend.h"
#include "../format/hparams.h"

typedef struct li_llada li_llada;

// Loads an HF directory with config.json model_type "llada" and the safetensors names of
// ARCHITECTURE.md §2.3 (prefix model.transformer.).
li_status li_llada_load(li_llada **out, const char *path, li_backend *be, bool metadata_only);
// Random weights of a named configuration: "tiny-llada" (3 layers, D 64, vocab 512: the byte
// tokenizer's ids, mask 261), "llada-8b" (real shapes, bf16), "llada-mid" (8 layers, D 1024,
// F 3072, vocab 32768, f32, 0.7 GB: CPU benchmarks). Shapes: llada-load.c.
li_status li_llada_synth(li_llada **out, const char *name, uint64_t seed, li_backend *be,
                         bool metadata_only);
bool li_llada_synth_known(const char *name);
void li_llada_free(li_llada *m);  // NULL is a no-op
const li_hparams *li_llada_hparams(const li_llada *m);
int64_t li_llada_n_params(const li_llada *m);
const char *li_llada_source_dtype(const li_llada *m);  // "bf16", "f32", "random", …

// LaCache switches (each independent) and the FP8 FFN switch.
typedef struct {
    bool embed;   // EmbedCache: canvas embeddings once per block, block rows per step
    bool rope;    // RoPECache: layer-0 norm → Q,K,V → RoPE once per block for non-block rows
    bool fa;      // FACache: layer-0 online-softmax state over non-block tiles, once per block
    bool trunc;   // final norm + LM head only on the block's rows
    bool fp8;     // FP8 (e4m3, 1×128 activation groups, 128×128 weight blocks) FFN, layers >= 1
    int fa_tile;  // FACache query/key tile in tokens (0: 64; at most LI_FA_MAX_TILE)
} li_lacache;

// Per-canvas cache state (and its share of scratch), for canvases up to max_tokens.
typedef struct li_llada_cache li_llada_cache;
li_status li_llada_cache_init(li_llada_cache **out, const li_llada *m, int max_tokens);
void li_llada_cache_free(li_llada_cache *c);

// Scratch for one forward over at most max_rows canvas rows in total (all canvases of a batch).
typedef struct li_llada_scratch li_llada_scratch;
li_status li_llada_scratch_init(li_llada_scratch **out, const li_llada *m, int max_rows);
void li_llada_scratch_free(li_llada_scratch *s);
// Has the backend allocate its internal scratch (backend.h reserve) for the forwards s serves:
// canvases of at most max_canvas_rows rows, dllm_x0 over blocks of block_rows, FP8 FFNs or not.
// A no-op on a backend without internal scratch.
li_status li_llada_reserve(const li_llada *m, const li_llada_scratch *s, int max_canvas_rows,
                           int block_rows, bool fp8);

typedef struct {
    int n_tokens;          // T: canvas rows (after any DPad drop)
    const int32_t *tokens; // (T) token ids, masks included
    const int32_t *pos;    // (T) RoPE positions (kept suffix rows keep their original positions)
    int block_lo, block_hi;  // rows [lo, hi) of this canvas form the current block
    bool block_start;      // first step of this block (or a new layout): caches are refilled
    // Rows whose logits the step returns: NULL for the block rows [lo, hi); else n_out rows of
    // the block, ascending (the decoder's mask rows: those before its SAR block still holding
    // the mask id, then that block's rows).
    const int32_t *out_rows;
    int n_out;
} li_llada_canvas;

// Work actually done in a step, for the per-component savings the benchmarks report.
typedef struct {
    int64_t embed_rows;      // rows embedded
    int64_t qkv_rows;        // rows through layer-0 norm + Q/K/V + RoPE
    int64_t fa_tiles;        // layer-0 (query tile, key tile) pairs computed
    int64_t fa_tiles_skipped;  // pairs served by FACache
    int64_t head_rows;       // rows through final norm + LM head
    int64_t fp8_gemm_rows;   // rows of FFN GEMMs done in FP8 (3 GEMMs per layer >= 1)
    double flops;            // floating-point operations of the step, 2 per MAC: every matmul
                             // and the attention products (QK^T, PV); norms, RoPE, softmax
                             // and SwiGLU are not counted
} li_llada_step_info;

// One denoising step over n canvases. logits[i] receives (block_hi - block_lo, V) floats for
// canvas i's block rows, or (n_out, V) for its out_rows. info (may be NULL) is accumulated into,
// not reset.
// Within a block (block_start false) the rows outside [block_lo, block_hi) must keep their
// tokens, and every row its position, as at block_start: otherwise LI_ERR_INVALID_ARG (checked
// when any of embed/rope/fa is on). Flags may change between steps; a cache that was not filled
// in this block is filled on its first use.
li_status li_llada_forward(const li_llada *m, const li_lacache *lc, li_llada_scratch *s,
                           li_llada_cache *const *caches, const li_llada_canvas *canvases,
                           int n, float *const *logits, li_llada_step_info *info);

#endif
