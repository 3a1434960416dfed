// backend.h — the op table every compute backend fills, and the data it works on.
//
// A backend is a table of function pointers (NULL = unsupported), as in ggml. The CPU backend has
// two tables: the scalar oracle (cpu/ops-ref.c, fp64 accumulation, obviously correct, slow) and the
// fast path (cpu/ops-cpu.c, threads + vectorisable loops + OpenBLAS). tests/test-ops.c walks every
// op of the fast table against the oracle on random inputs at odd sizes.
//
// Dimension letters, fixed here for the whole code base:
//   T tokens in a batch   D model dim    H query heads   Hkv key/value heads   Dh head dim
//   F ffn hidden dim      V vocab        L layers        P tokens per KV page
// Shapes are outermost-first (PyTorch order); a weight is W (out, in) and y = x @ W^T.
// All activations are f32 on the CPU backend. Pointers given to ops belong to the backend's
// memory (host memory for the CPU, device memory for CUDA).
#ifndef LI_BACKEND_H
#define LI_BACKEND_H

#include "../core/core.h"
#include "../format/hparams.h"
#include "dllm-rules.h"
#include "page-word.h"


// ---- weights --------------------------------------------------------------------------------

// A 2-D weight W (n_rows = out, n_cols = in), row-major, held in a compute dtype:
// LI_DTYPE_F32 or LI_DTYPE_BF16 (CPU), BF16 (CUDA). 1-D weights (norms) have n_rows = 1.
typedef struct {
    li_dtype dtype;
    int64_t n_rows, n_cols;
    void *data;
} li_weight;

// ---- RoPE -----------------------------------------------------------------------------------


// Per-pair inverse frequencies after scaling, and the position-independent magnitude (YaRN's
// attention factor, 1 otherwise) that multiplies cos and sin. Built once per model on the host.
// Rotation of pair (a, b) at position p:  a' = m(a cos(p w) - b sin(p w)),  b' = m(a sin + b cos).
typedef struct {
    li_rope_layout layout;
    int n_dims;                        // rotated dims; pairs = n_dims / 2
    float inv_freq[LI_ROPE_MAX_PAIRS];  // w_i, as HF computes it (fp32)
    float mscale;                      // m
} li_rope_table;

// Fills `t` exactly as HF transformers' rope init functions do. Returns LI_ERR_INVALID_ARG for
// impossible values (n_dims odd or > 2*LI_ROPE_MAX_PAIRS, theta <= 0, factor <= 0, …).
li_status li_rope_table_init(li_rope_table *t, const li_rope_config *cfg);

// ---- paged KV storage -----------------------------------------------------------------------

// The physical KV pool as kernels see it. One page holds P tokens of every layer, K and V:
//   data: (n_pages, L, 2, Hkv, P, Dh) of `dtype`, index 0 of the "2" axis is K, 1 is V.
// dtype is LI_DTYPE_F32 (the zero value) or LI_DTYPE_BF16: half the bytes per token, so a
// memory budget holds twice the documents, and half the bytes decode attention reads. Writers
// round to bf16 (nearest even) when storing; readers compute in f32. K is stored already
// rotated (at the position it was written with); V as is.
typedef struct {
    int n_layer, n_head_kv, head_dim, page_size;
    int64_t n_pages;
    void *data;
    li_dtype dtype;
} li_kv_storage;

// Bytes of one stored K or V element.
static inline size_t li_kv_elem_bytes(li_dtype t) { return t == LI_DTYPE_BF16 ? 2 : 4; }

static inline size_t li_kv_offset(const li_kv_storage *kv, int64_t page, int il, int is_v, int h,
                                  int slot) {
    return ((((size_t)page * kv->n_layer + il) * 2 + is_v) * kv->n_head_kv + h) *
               (size_t)kv->page_size * kv->head_dim +
           (size_t)slot * kv->head_dim;
}

// A sequence's page table: 64-bit words, one per page (layout and helpers: page-word.h).

// One sequence's keys for attention: its page table (n_pages words).
// A device backend's callers also give host copies of the table and of the call's rows'
// kv_first / n_visible (the same values as the op's arguments), so that the backend can plan a
// library call on the host (CUDA: attn-blocks.h for cuDNN); NULL where the caller has none, and
// then the backend uses its own kernels.
typedef struct {
    const uint64_t *pages;
    int n_pages;
    const uint64_t *pages_host;
    const int32_t *kv_first_host, *n_visible_host;
} li_kv_seq;

// One sequence's part of a multi-sequence call (a batch): rows [t0, t0 + n) of the call's
// q / out / kv_first / n_visible, and its keys.
typedef struct {
    int t0, n;
    li_kv_seq kv;
} li_attn_seq;

// ---- sampling -------------------------------------------------------------------------------

// Filters applied in HF transformers' order: temperature, top-k, top-p, min-p (each on the
// distribution left by the previous ones, renormalised), then one draw by inverse CDF over the
// survivors sorted by probability (descending; ties by lower token id) with the uniform `u`.
// temperature <= 0 means greedy: argmax, lowest id on ties; `u` unused.
typedef struct {
    float temperature;
    int top_k;    // <= 0: off
    float top_p;  // >= 1: off
    float min_p;  // <= 0: off
} li_sampler_config;

// ---- diffusion / FP8 data (LLaDA, ARCHITECTURE.md §5) ------------------------------------------

// A weight W (N, K) quantised to e4m3 per 128 x 128 block: q (N, K) codes, row-major; scale
// (ceil(N/128), ceil(K/128)) fp32, row-major; W[n, k] ~ e4m3(q[n, k]) * scale[n/128, k/128].
// Edge blocks are partial when N or K is not a multiple of 128.
typedef struct {
    int64_t n_rows, n_cols;  // N, K
    uint8_t *q;
    float *scale;
} li_fp8_weight;

// Rows after attention_dense's k, v and BF16 out that a backend may touch (see there): a size
// class of the device's attention plans is this many rows.
#define LI_ATTN_DENSE_SLACK 256

// The dt of block-scaled FP8 activations (li_fp8_rows) in the [dt] entries below. Not a tensor
// dtype (no loader yields one), so it sits past li_dtype's values: li_dtype_name says "unknown".
#define LI_DTYPE_FP8 ((li_dtype)(LI_DTYPE_COUNT + 1))

// Rows x (T, K) quantised to e4m3 per group of LI_FP8_GROUP (128) along K, the last group partial
// when K % 128 != 0: x[t, k] ~ e4m3(q[t, k]) * scale[t, k / 128]. What the LI_DTYPE_FP8 forms of
// add_rmsnorm and swiglu and fp8_quant_rows make (out points to one), and matmul_fp8 reads.
typedef struct {
    uint8_t *q;    // (T, K) codes
    float *scale;  // (T, ceil(K/128)) fp32
    float *tmp;    // (T, K) f32 scratch: where a form cannot fuse the quantisation, its f32 rows go
                   // here first (contents afterwards unspecified; may alias the form's inputs
                   // as its F32 form allows out to). Unused by fp8_quant_rows and matmul_fp8.
} li_fp8_rows;

// The largest work a model will give a backend's ops, so that a backend with internal scratch
// (CUDA: bf16 activations for the GEMMs, split-K partials, the key index, sampling buffers) can
// allocate it before generating instead of while: an autoregressive model at load (engine.c), a
// diffusion model per request (engine-dllm.c, li_llada_reserve). A field left 0 asks for nothing
// of its part.
typedef struct {
    int max_rows;      // T of one forward
    int64_t max_in;    // the widest matmul with f32 input (K): max(D, F, H*Dh); 0: none
    int max_heads;     // H
    int head_dim;      // Dh
    int64_t max_keys;  // keys one sequence's paged attention can see (page slots); 0: none
    int n_head_kv;     // Hkv of that attention, and its pool's dtype: a backend that calls a
    li_dtype kv_dtype; // library there prepares it now (CUDA: cuDNN's one-time set-up)
    int n_vocab;       // V
    bool sampler;      // sample over V
    // diffusion models
    int64_t dense_kv;      // elements of K (as many of V) in one dense attention / flash_attn_tiles
                           // call: keys x Hkv x Dh
    int64_t fp8_n, fp8_k;  // bounds on the FP8 weights' N and K (matmul_fp8); 0: no FP8
    int dllm_rows;         // rows of one dllm_x0 call (a window), over V; also the RNG jump table
} li_backend_reserve;

// Largest key tile of flash_attn_tiles (the per-row scores of one tile live on the stack).
#define LI_FA_MAX_TILE 1024

// ---- the op table ---------------------------------------------------------------------------

typedef struct li_backend li_backend;

typedef enum { LI_ATTN_AUTO = 0, LI_ATTN_LIBRARY, LI_ATTN_NATIVE } li_attn_impl;

// The entries of the table that take an activation dtype (li_backend_ops.act_dtypes, li_be_takes).
typedef enum {
    LI_ACT_RMSNORM,
    LI_ACT_MATMUL,
    LI_ACT_ROPE,
    LI_ACT_SWIGLU,
    LI_ACT_ATTENTION_DENSE,
    LI_ACT_ADD_RMSNORM,
    LI_ACT_QKV_ROPE,
    LI_ACT_OPS
} li_act_op;

typedef struct {
    const char *name;

    // out (T, D) = W[tokens[t]] with W (V, D); tokens are checked by the caller.
    void (*embed)(li_backend *be, float *out, const li_weight *W, const int32_t *tokens, int T);

    // Entries that take an activation dtype dt (li_be_takes says which a backend has) are marked
    // [dt]. F32 is the plain form; BF16 stores bf16 where F32 stores f32 ("bf16 activations"
    // below); FP8 (LI_DTYPE_FP8) stores block-scaled e4m3 rows: out points to an li_fp8_rows, and
    // the codes and scales equal fp8_quant_rows of the F32 form's output on the same backend, bit
    // for bit (the quantisation fused where the backend can: the f32 rows are never stored).

    // [dt] out (T, D) = x / sqrt(mean(x^2) + eps) * w, w (D), stored as dt. out may alias x (F32).
    void (*rmsnorm)(li_backend *be, void *out, li_dtype dt, const float *x, const float *w, int T,
                    int D, float eps);

    // [dt] y (T, N) = x (T, K) @ W^T, W (N, K), x stored as dt; accumulate: y += x @ W^T instead
    // (the residual add fused: the bits of the product then add; BF16 only). y never aliases x.
    void (*matmul)(li_backend *be, float *y, const void *x, li_dtype dt, const li_weight *W, int T,
                   bool accumulate);
    // Rows up to which matmul computes every row exactly as it would alone (its bits depend on
    // neither T nor the other rows); 0: any T once be->batch_invariant is set. li_matmul_rows
    // keeps to it.
    int matmul_invariant_rows;

    // x (n) += y (n): residual add.
    void (*add)(li_backend *be, float *x, const float *y, int64_t n);

    // x (T, N) += b (N) on every row: a projection's bias (Qwen2's q/k/v). Each element is one
    // fp32 add, so every backend gives the same bits.
    void (*add_bias)(li_backend *be, float *x, const float *b, int T, int N);

    // [dt] Residual add fused with the next norm: x (T, D) += y (T, D), then out (T, D) =
    // rmsnorm(x) * w stored as dt, exactly add followed by rmsnorm (same results bit for bit on a
    // backend). out aliases neither x nor y. F32 or FP8 (the FFN's quantised input; y NULL there:
    // no add, rmsnorm alone). NULL or dt not taken: li_add_rmsnorm runs the unfused ops.
    void (*add_rmsnorm)(li_backend *be, void *out, li_dtype dt, float *x, const float *y,
                        const float *w, int T, int D, float eps);

    // [dt] out (T, nh, Dh) = x (T, nh, Dh) rotated at positions pos (T), stored as dt. Only the
    // first table->n_dims of each head are rotated; the rest pass through. F32: in place (out ==
    // x). BF16: out never aliases x, x is not changed, and pos NULL stores bf16(x) unrotated.
    void (*rope)(li_backend *be, void *out, li_dtype dt, float *x, const int32_t *pos, int T,
                 int nh, int Dh, const li_rope_table *table);

    // Writes k, v (T, Hkv, Dh) into layer il at physical slots slot (T) = page * P + offset.
    void (*kv_store)(li_backend *be, const li_kv_storage *kv, int il, const float *k,
                     const float *v, const int64_t *slot, int T);

    // The fused projection's rows qkv (T, (H + 2 Hkv) Dh) = [q | k | v] (Hkv, Dh: kv's) split for
    // attention in one pass: bias ((H + 2 Hkv) Dh; NULL: none) added to every row, one fp32 add
    // per element as add_bias; q (T, H, Dh) = the q part rotated at positions pos (T), f32; the k
    // part rotated and the v part as is written into layer il at slots slot (T) as kv_store
    // writes them (the pool's dtype). On a backend, the bits of add_bias, rope's F32 form (q, k)
    // and kv_store run on the parts as separate arrays. q aliases nothing. NULL:
    // li_qkv_rope_store runs those ops.
    void (*qkv_rope_store)(li_backend *be, float *q, const li_kv_storage *kv, int il,
                           const float *qkv, const float *bias, const int32_t *pos,
                           const int64_t *slot, int T, int H, const li_rope_table *table);

    // Copy mode (position-aware baseline): page dst = page src for the first `count` slots of
    // every layer, V as is and K rotated by delta (the pure rotation R_delta: no mscale, which is
    // already inside the stored K), so a document cached at offset a serves offset a + delta.
    void (*kv_copy_rotate)(li_backend *be, const li_kv_storage *kv, int64_t src, int64_t dst,
                           int count, int64_t delta, const li_rope_table *rope);

    // Attention of T query rows over one sequence's paged keys, layer il.
    //   q (T, H, Dh) already rotated at the rows' positions; out (T, H, Dh).
    //   Query row t sees logical keys [kv_first[t], n_visible[t]) of `seq` (causal prefill:
    //   n_past + t + 1; kv_first NULL means 0 for every row — a block that must not see the keys
    //   before it, like a document in a prefix-cached prompt, sets its first key there).
    //   GQA: query head h reads kv head h / (H / Hkv).
    //   Each page's K is rotated by its Δ (li_page_delta) before the dot product, with `rope`
    //   (Δ = 0 pages are used as stored; rope may be NULL when every Δ is 0).
    //   scores = q·k * scale, softmax over visible keys, out = Σ p v.
    void (*attention)(li_backend *be, float *out, const float *q, int T, int H,
                      const li_kv_storage *kv, int il, const li_kv_seq *seq,
                      const int32_t *kv_first, const int32_t *n_visible, float scale,
                      const li_rope_table *rope);
    // Rows of n sequences in one call (a batch's prefill and query chunks; NULL: the caller
    // calls attention per sequence): sequence i's rows are [seqs[i].t0, seqs[i].t0 + seqs[i].n)
    // of q, out, kv_first and n_visible (device pointers to the whole call's arrays; the host
    // copies in seqs[i].kv are the sequence's own); otherwise as attention. A backend with a
    // library attention runs every sequence's blocks in one library call. [dt] out is f32, or
    // bf16 (out_dt): the f32 result rounded once, what the O projection reads.
    void (*attention_seqs)(li_backend *be, void *out, li_dtype out_dt, const float *q, int n_seqs,
                           const li_attn_seq *seqs, int H, const li_kv_storage *kv, int il,
                           const int32_t *kv_first, const int32_t *n_visible, float scale,
                           const li_rope_table *rope);
    // Decode rows of n sequences in one call (a batch's decode step; NULL: the caller calls
    // attention per sequence): row i of q and out (n, H, Dh) is sequence i's one query row, which
    // sees its keys [0, n_visible[i]); its page table is pages[page_start[i] ..
    // page_start[i + 1]) — the n tables consecutive in backend memory, page_start (n + 1) in
    // backend memory and the same values in page_start_host (host memory). Otherwise as
    // attention (Δ rotation with rope, GQA, scale). li_attention_decode_rows is the reference.
    void (*attention_decode)(li_backend *be, float *out, const float *q, int n, int H,
                             const li_kv_storage *kv, int il, const uint64_t *pages,
                             const int32_t *page_start, const int32_t *page_start_host,
                             const int32_t *n_visible, float scale, const li_rope_table *rope);

    // [dt] out (T, F) = silu(gate) * up stored as dt, silu(x) = x / (1 + exp(-x)); row t of gate
    // and up at t * ld (ld = F: separate arrays; BF16 also gate = gu, up = gu + F, ld = 2F: the
    // fused gate|up projection's rows). F32 and FP8 need ld = F; out (FP8: out->tmp) may alias
    // gate there. FP8 where the table does not take it: li_swiglu runs F32 then fp8_quant_rows.
    void (*swiglu)(li_backend *be, void *out, li_dtype dt, const float *gate, const float *up,
                   int T, int64_t F, int64_t ld);

    // In place softmax over each of `rows` rows of length n (max-subtracted).
    void (*softmax)(li_backend *be, float *x, int rows, int n);

    // Picks a token from logits (V) as li_sampler_config describes, using the uniform u in [0,1).
    int32_t (*sample)(li_backend *be, const float *logits, int V, const li_sampler_config *cfg,
                      double u);

    // ---- diffusion / FP8 ops (LLaDA; tested by tests/test-ops-llada.c) ----

    // FlashAttention's inner loop, bidirectional (no mask), dense K/V, GQA (query head h reads kv
    // head h / (H / Hkv)). Query rows q (nq, H, Dh) carry a running online-softmax state
    // m, l (nq, H) and o (nq, H, Dh) (unnormalised); they stream keys k, v (nk, Hkv, Dh) in
    // tiles of `tile` keys (the last one partial), in order. Per tile, per (row, head):
    //   s_j = scale q·k_j,  m' = max(m, max_j s_j),  a = exp(m - m'),  p_j = exp(s_j - m'),
    //   l = a l + Σ_j p_j,  o = a o + Σ_j p_j v_j,  m = m'.
    // A fresh state is m = -inf, l = 0, o = 0 (a = 0 then). 1 <= tile <= LI_FA_MAX_TILE.
    void (*flash_attn_tiles)(li_backend *be, float *o, float *m, float *l, const float *q, int nq,
                             int H, const float *k, const float *v, int nk, int Hkv, int Dh,
                             int tile, float scale);
    // [dt] Bidirectional attention over dense K/V for Dh 64 or 128 (LLaDA's layers >= 1): out
    // (T, H, Dh) from q (T, H, Dh) f32 and k, v (nk, Hkv, Dh), every row over every key, GQA:
    // what flash_attn_tiles over all keys + finalize compute, here on tensor cores (bf16 inputs,
    // fp32 accumulation, so within bf16 rounding of them). dt is k's, v's and out's dtype (BF16:
    // out = bf16 of the F32 out; q is scaled before rounding). Not taken: the model uses
    // flash_attn_tiles. BF16: k and v are followed by LI_ATTN_DENSE_SLACK rows that may be read
    // (finite values), and out by as many that may be overwritten: a device backend runs the call
    // as its library's plan of a size class, padded, so that a new length builds no new plan.
    void (*attention_dense)(li_backend *be, void *out, li_dtype dt, const float *q, int T, int H,
                            const void *k, const void *v, int nk, int Hkv, int Dh, float scale);
    // out (n, Dh) = o (n, Dh) / l (n): the final normalisation (n = rows * heads). out may alias o.
    void (*flash_attn_finalize)(li_backend *be, float *out, const float *o, const float *l,
                                int64_t n, int Dh);
    // Per-token-group FP8 quantisation: out (li_fp8_rows, K wide) of x (T, K): scale[t, g] =
    // li_fp8_scale(amax of group g of row t); q = li_f32_to_e4m3(x / scale) (fp32 division).
    // Bit-exact on every backend.
    void (*fp8_quant_rows)(li_backend *be, const li_fp8_rows *out, const float *x, int T, int K);
    // y (T, N) = x (T, K) @ W^T from FP8 rows x (fp8_quant_rows or an FP8 form) and a
    // block-quantised weight W (N, K); accumulate: y += the product instead (the FFN's residual
    // add: y + the product's bits, as add of the product would give). exact: this accumulation,
    // fixed so that backends agree bit for bit:
    //   acc = 0 (fp32); for each K-group g in ascending order:
    //     S_g = Σ_{k in g} e4m3(x.q[t,k]) * e4m3(W.q[n,k])   exactly (every product is exact in
    //           fp32 and the sum of 128 of them needs < 44 bits: fp64 or int64, any order),
    //     acc = acc + ((float)S_g * x.scale[t,g]) * W.scale[n/128, g]     (fp32, no FMA)
    //   y[t,n] = acc.
    // Not exact: the backend's fastest FP8 GEMM, the same inputs and mathematical result but the
    // library's accumulation order, so not bit-exact across backends (~fp32 rounding): CUDA
    // cuBLASLt's block-scaled GEMM (1 x 128 activation, 128 x 128 weight scales, the add in its
    // epilogue) where it takes the shape, the exact kernel elsewhere; the CPU tables: one f32 GEMM
    // of the decoded, scaled codes for batches of 16 rows or more (ops-cpu.c), exact below.
    void (*matmul_fp8)(li_backend *be, float *y, const li_fp8_rows *x, int T,
                       const li_fp8_weight *W, bool exact, bool accumulate);
    // Quantises W (f32 or bf16, backend memory) per 128 x 128 block into out->q and out->scale
    // (allocated by the caller in backend memory, shapes of li_fp8_weight): scale =
    // li_fp8_scale(block amax), q = li_f32_to_e4m3(w / scale) (fp32 division) — bit for bit what
    // li_fp8_weight_quantize computes on the host. NULL: the host does it.
    void (*fp8_quant_weight)(li_backend *be, li_fp8_weight *out, const li_weight *W);
    // The diffusion decoder's steps where the window logits are (dllm-rules.h li_dllm_ops); NULL:
    // the backend cannot run a diffusion model.
    const li_dllm_ops *dllm;

    // ---- bf16 activations (LLaDA on a device; not taken: the model runs the F32 forms) ----
    // The [dt] entries' BF16 forms store bf16 (round to nearest even) where the F32 form would
    // store f32 and the next op would round that same value to bf16 anyway (a GEMM's input,
    // attention's K / V / output): the rounding moves into the op that makes the value and the
    // f32 copy is never written, so a pass costs 2 bytes per element instead of 4 + 6. On one
    // backend the results equal the F32 form followed by the conversion, bit for bit (gpu-check
    // holds CUDA to it); the reference (ops-ref.c) is exactly that composition. The residual
    // stream stays f32. act_dtypes says which forms a table has: bit (1u << dt) per li_act_op
    // entry; an entry left 0 takes LI_DTYPE_F32 only.
    uint32_t act_dtypes[LI_ACT_OPS];
    // [dt] The fused projection's rows qkv (T, (H + 2 Hkv) Dh) = [q | k | v] split for attention
    // at positions pos (T): q (T, H, Dh) = rope(q part) in f32; k (T, Hkv, Dh) = rope(k part) and
    // v (T, Hkv, Dh) = the v part, both stored as dt — the bits of rope's F32 form and its dt form
    // (pos NULL for v) on separate arrays. BF16 is the one form (not taken: the model runs rope).
    void (*qkv_rope)(li_backend *be, float *q, void *k, void *v, li_dtype dt, const float *qkv,
                     const int32_t *pos, int T, int H, int Hkv, int Dh, const li_rope_table *table);

    // ---- memory (NULL on the CPU tables: host memory; callers go through li_be_* below) ----

    // Matrices moved into this backend's memory are converted to bf16 (CUDA: cuBLASLt takes
    // bf16); false keeps the loader's dtype. Norm vectors are always f32.
    bool matrices_bf16;
    // Buffers in the backend's memory, zero-filled. alloc returns NULL with the error set.
    void *(*alloc)(li_backend *be, size_t n_bytes, const char *what);
    void (*free)(li_backend *be, void *p);  // NULL is a no-op
    // Host <-> backend copies; they return once the copy is done (after the ops queued before).
    li_status (*upload)(li_backend *be, void *dst, const void *src_host, size_t n_bytes);
    li_status (*download)(li_backend *be, void *dst_host, const void *src, size_t n_bytes);
    // dst = src inside backend memory, queued like an op (regions must not overlap).
    void (*copy)(li_backend *be, void *dst, const void *src, size_t n_bytes);
    // x (n) = value, queued like an op.
    void (*fill)(li_backend *be, float *x, float value, int64_t n);
    // Waits for every queued op: LI_OK or the first error one of them hit.
    li_status (*sync)(li_backend *be);
    // Allocates the backend's internal scratch for work up to r (NULL: nothing to allocate).
    li_status (*reserve)(li_backend *be, const li_backend_reserve *r);
    // How many times the internal scratch was allocated or grown so far (NULL: the backend has
    // none to report). Work within a reserve leaves it unchanged: engine-dllm.c reports the
    // growth during a request's steps (li_dllm_stats.backend_allocs), which tests want 0.
    int64_t (*scratch_allocs)(li_backend *be);
    // Step graphs (CUDA graphs; NULL: ops always run as queued). The ops between graph_begin and
    // graph_end form one step. graph_begin(key) returns true when they are being recorded rather
    // than run: graph_end then runs the recording as one graph (replacing the parameters of the
    // graph kept for `key` when the steps have the same shape, instantiating otherwise). A key
    // seen for the first time runs eagerly (scratch, plans, caches allocated outside recording).
    // graph_end sets *rerun when the step could not run as a graph (an op cannot be recorded, the
    // graph cannot be instantiated or launched): nothing ran; the caller restores what the ops'
    // host side changed and queues the same ops again, eagerly. Steps must not read or write
    // host memory between the two calls; the key names the step's shape (e.g. batch rows).
    bool (*graph_begin)(li_backend *be, uint64_t key);
    li_status (*graph_end)(li_backend *be, bool *rerun);
    // x (n) = mean + uniform [-a, a), stored as dtype (F32 or BF16), a pure function of (seed,
    // index): random weights built where they live, without a host copy (synth models).
    li_status (*fill_random)(li_backend *be, void *x, li_dtype dtype, int64_t n, uint64_t seed,
                             float a, float mean);
    // ---- KV tiers (src/kv/kv-tiers.c; NULL: li_be_* below fall back to host memory and the
    // synchronous upload / download) ----
    // Host memory this backend copies to and from fastest (CUDA: pinned), contents undefined;
    // NULL with the error set. host_free(NULL) is a no-op. Slow (pinning: ~0.1-0.2 s per GiB):
    // the host tier takes its whole budget once, at start (src/kv/host-arena.h).
    void *(*host_alloc)(li_backend *be, size_t n_bytes, const char *what);
    void (*host_free)(li_backend *be, void *p);
    // dst_host (n, page_bytes) = the pool's pages[i] (page ids, host array), queued like an op
    // (async D2H): dst_host holds them after the next sync. Runs of consecutive ids are one copy.
    li_status (*kv_gather)(li_backend *be, void *dst_host, const li_kv_storage *kv,
                           const int64_t *pages, int n);
    // The pool's pages[i] = src_host (n, page_bytes), queued like an op (async H2D): ops queued
    // later see the pages; src_host must stay untouched until the next sync.
    li_status (*kv_scatter)(li_backend *be, li_kv_storage *kv, const int64_t *pages, int n,
                            const void *src_host);
} li_backend_ops;

struct li_backend {
    const li_backend_ops *ops;
    li_threadpool *tp;  // CPU: workers for the fast ops (NULL in the oracle)
    int n_threads;
    void *impl;         // backend-private state (scratch buffers, cuBLASLt handles, …)
    // GEMM rows must not depend on how many rows share the GEMM (no split-K on CUDA), so that
    // a GEMM over a subset of rows gives the full GEMM's bits: LLaDA's truncated head and
    // block-only layer-0 Q/K/V (cached = uncached). Set at load for diffusion models; off, a
    // backend may split K (decode batches of 2-64 rows with K = 14336 need it: 10x on the H200).
    bool batch_invariant;
    // Which attention a backend runs where it has a choice (--attn-impl): LI_ATTN_AUTO the
    // library's (CUDA: cuDNN SDPA) where it takes the shape and loads, the backend's own kernels
    // otherwise; LI_ATTN_LIBRARY the library's or an error; LI_ATTN_NATIVE always its own.
    // Decode rows (T = 1) always run the backend's own kernels. CPU backends ignore it.
    li_attn_impl attn_impl;
    void (*destroy)(li_backend *be);  // frees a non-CPU backend (li_backend_free calls it)
};

// ---- backend memory (backend.c) ----------------------------------------------------------------
// What model and engine code use for every buffer an op touches: host memory (li_alloc, memcpy)
// when the backend has no memory ops (the CPU), the backend's own otherwise (CUDA device memory).
// Host code must never dereference a buffer of a backend where li_be_is_device is true.
bool li_be_is_device(const li_backend *be);
// ops.add_rmsnorm / ops.swiglu where the backend takes dt (li_be_takes), the unfused ops
// otherwise: add (F32 always, FP8 where y), rmsnorm / swiglu in F32 (FP8: into out->tmp), then
// fp8_quant_rows (FP8). li_swiglu's other dts always go to the entry.
void li_add_rmsnorm(li_backend *be, void *out, li_dtype dt, float *x, const float *y,
                    const float *w, int T, int D, float eps);
void li_swiglu(li_backend *be, void *out, li_dtype dt, const float *gate, const float *up, int T,
               int64_t F, int64_t ld);
// y (T, N) = x (T, K) @ W^T (ops.matmul, x in dt) with every row's bits those of the row alone,
// whatever T: calls of at most ops.matmul_invariant_rows rows where the backend gives one, one
// call otherwise (be->batch_invariant must be set: a diffusion model's backend). A diffusion
// decoder that computes a subset of rows (a truncated head, a cached layer's changed rows) then
// gets the bits of the whole GEMM.
void li_matmul_rows(li_backend *be, float *y, const void *x, li_dtype dt, const li_weight *W,
                    int T);
// ops.qkv_rope_store where the backend has it, the unfused ops otherwise: the parts copied out
// of the rows (li_be_copy, three a row) into q and the scratch k, v (T, Hkv, Dh) f32, add_bias on
// each (bias non-NULL), rope (F32) on q and k, then kv_store. k and v are touched only there
// (contents afterwards unspecified); a caller passes them so that neither path allocates.
void li_qkv_rope_store(li_backend *be, float *q, float *k, float *v, const li_kv_storage *kv,
                       int il, const float *qkv, const float *bias, const int32_t *pos,
                       const int64_t *slot, int T, int H, const li_rope_table *table);
void *li_be_alloc(li_backend *be, size_t n_bytes, const char *what);  // zeroed; NULL + error
void li_be_free(li_backend *be, void *p);
li_status li_be_upload(li_backend *be, void *dst, const void *src_host, size_t n_bytes);
li_status li_be_download(li_backend *be, void *dst_host, const void *src, size_t n_bytes);
void li_be_copy(li_backend *be, void *dst, const void *src, size_t n_bytes);
void li_be_fill(li_backend *be, float *x, float value, int64_t n);
li_status li_be_sync(li_backend *be);
// Whether the backend's entry `op` takes activations of dtype dt (the entry is there and
// act_dtypes has dt, or is 0 and dt is F32).
bool li_be_takes(const li_backend *be, li_act_op op, li_dtype dt);
// Bytes of one page of kv: L × 2 × Hkv × P × Dh × element (inline: cuda/kv-transfer.c links
// without backend.c in gpu-check).
static inline size_t li_kv_storage_page_bytes(const li_kv_storage *kv) {
    return (size_t)kv->n_layer * 2 * kv->n_head_kv * kv->page_size * kv->head_dim *
           li_kv_elem_bytes(kv->dtype);
}
// The length of the run of consecutive page ids starting at pages[i] (i < n): one copy each.
static inline int li_page_run(const int64_t *pages, int i, int n) {
    int run = 1;
    while (i + run < n && pages[i + run] == pages[i] + run) run++;
    return run;
}
// KV tier transfers (ops.host_alloc … kv_scatter): pinned memory and async copies where the
// backend has them, host memory and memcpy / synchronous copies otherwise.
void *li_be_host_alloc(li_backend *be, size_t n_bytes, const char *what);
void li_be_host_free(li_backend *be, void *p);
li_status li_be_kv_gather(li_backend *be, void *dst_host, const li_kv_storage *kv,
                          const int64_t *pages, int n);
li_status li_be_kv_scatter(li_backend *be, li_kv_storage *kv, const int64_t *pages, int n,
                           const void *src_host);
// Step graphs (ops.graph_begin): false / LI_OK with *rerun false where the backend has none.
bool li_be_graph_begin(li_backend *be, uint64_t key);
li_status li_be_graph_end(li_backend *be, bool *rerun);

// act_dtypes of a table with both forms of rmsnorm, matmul, rope and swiglu, the BF16 form of
// qkv_rope, `dense` the forms of attention_dense, and `fp8` (0 or LI_ACT_FP8) added to swiglu
// and add_rmsnorm (whose F32 form is then there too).
#define LI_ACT_F32_BF16 (1u << LI_DTYPE_F32 | 1u << LI_DTYPE_BF16)
#define LI_ACT_FP8 (1u << LI_DTYPE_FP8)
#define LI_ACT_BF16_FORMS(dense, fp8)                                                              \
    {[LI_ACT_RMSNORM] = LI_ACT_F32_BF16, [LI_ACT_MATMUL] = LI_ACT_F32_BF16,                       \
     [LI_ACT_ROPE] = LI_ACT_F32_BF16, [LI_ACT_SWIGLU] = LI_ACT_F32_BF16 | (fp8),                  \
     [LI_ACT_ATTENTION_DENSE] = (dense), [LI_ACT_ADD_RMSNORM] = 1u << LI_DTYPE_F32 | (fp8),       \
     [LI_ACT_QKV_ROPE] = 1u << LI_DTYPE_BF16}

// The [dt] entries rmsnorm, matmul, rope and swiglu of a table whose F32 and BF16 forms are
// separate functions P##_rmsnorm / P##_rmsnorm_bf16 (and so on, with the signatures the table
// had for them): defines static P##_rmsnorm_dt, P##_matmul_dt, P##_rope_dt and P##_swiglu_dt,
// which pick the form by dt (ops-ref.c, the CUDA backend).
#define LI_DT_FORMS(P)                                                                             \
    static void P##_rmsnorm_dt(li_backend *be, void *out, li_dtype dt, const float *x,            \
                               const float *w, int T, int D, float eps) {                         \
        if (dt == LI_DTYPE_BF16)                                                                   \
            P##_rmsnorm_bf16(be, out, x, w, T, D, eps);                                            \
        else                                                                                       \
            P##_rmsnorm(be, out, x, w, T, D, eps);                                                 \
    }                                                                                              \
    static void P##_matmul_dt(li_backend *be, float *y, const void *x, li_dtype dt,               \
                              const li_weight *W, int T, bool accumulate) {                        \
        if (dt == LI_DTYPE_BF16) {                                                                 \
            P##_matmul_bf16(be, y, x, W, T, accumulate);                                           \
        } else {                                                                                   \
            LI_ASSERT(!accumulate);                                                                \
            P##_matmul(be, y, x, W, T);                                                            \
        }                                                                                          \
    }                                                                                              \
    static void P##_rope_dt(li_backend *be, void *out, li_dtype dt, float *x, const int32_t *pos, \
                            int T, int nh, int Dh, const li_rope_table *table) {                   \
        if (dt == LI_DTYPE_BF16) {                                                                 \
            P##_rope_bf16(be, out, x, pos, T, nh, Dh, table);                                      \
        } else {                                                                                   \
            LI_ASSERT(out == x);                                                                   \
            P##_rope(be, x, pos, T, nh, Dh, table);                                                \
        }                                                                                          \
    }                                                                                              \
    static void P##_swiglu_dt(li_backend *be, void *out, li_dtype dt, const float *gate,          \
                              const float *up, int T, int64_t F, int64_t ld) {                     \
        if (dt == LI_DTYPE_BF16) {                                                                 \
            P##_swiglu_bf16(be, out, gate, up, T, (int)F, ld);                                     \
        } else {                                                                                   \
            LI_ASSERT(ld == F);                                                                    \
            P##_swiglu(be, out, gate, up, (int64_t)T * F);                                         \
        }                                                                                          \
    }

// ops.attention_decode as ops.attention once per row (what a backend without a one-call kernel
// for the shape runs).
static inline void li_attention_decode_rows(li_backend *be, float *out, const float *q, int n,
                                            int H, const li_kv_storage *kv, int il,
                                            const uint64_t *pages, const int32_t *page_start_host,
                                            const int32_t *n_visible, float scale,
                                            const li_rope_table *rope) {
    const size_t row = (size_t)H * kv->head_dim;
    for (int i = 0; i < n; i++) {
        const li_kv_seq seq = {.pages = pages + page_start_host[i],
                               .n_pages = page_start_host[i + 1] - page_start_host[i]};
        be->ops->attention(be, out + i * row, q + i * row, 1, H, kv, il, &seq, NULL,
                           n_visible + i, scale, rope);
    }
}

// The CPU tables (src/backend/cpu/).
extern const li_backend_ops li_cpu_ref_ops;   // scalar oracle, fp64 accumulation
extern const li_backend_ops li_cpu_fast_ops;  // threads, vectorised loops, OpenBLAS

// Creates a CPU backend using the fast table with n_threads workers (0: all cores).
li_status li_backend_cpu_init(li_backend **out, int n_threads);
// The fast table with memory ops of its own ("cpu-devsim"): runs the device data path (weights
// moved, index arrays staged) on the CPU so that tests cover it without a GPU. bf16: matrices
// converted to bf16 as on CUDA ("cpu-devsim-bf16": the GPU's oracle with the GPU's weights).
li_status li_backend_cpu_devsim_init(li_backend **out, int n_threads, bool bf16);
// Same, but every op is the oracle (for tests and debugging: LI_BACKEND=ref).
li_status li_backend_cpu_ref_init(li_backend **out);
void li_backend_free(li_backend *be);
// The backend a name picks: NULL or "cpu", "cpu-ref", "cpu-devsim", "cpu-devsim-bf16", "cuda"
// (GPU `device`; LI_ERR_UNSUPPORTED in a build without CUDA). n_threads: CPU workers (0: all).
li_status li_backend_open(li_backend **out, const char *name, int n_threads, int device);

#endif
