// attention-cudnn.h — scaled dot-product attention through cuDNN's SDPA (the cuDNN frontend's
// graph API), as plain C functions for the CUDA backend. The C++ that the frontend needs stays in
// attention-cudnn.cpp; nothing else in lazyinfer sees C++.
//
// cuDNN is loaded at run time (dlopen): the path the backend was given (LI_CUDNN_LIB, read at
// init) names the library file, else libcudnn.so.9 is looked up on the loader path (docs/CUDA.md says how the GPU machine provides it). A binary
// whose machine has no cuDNN still runs: li_cudnn_open fails with a message and the backend uses
// its own kernels.
//
// Plans: one cuDNN graph per shape class, built on first use and kept (up to LI_CUDNN_PLANS, the
// least recently used replaced). Runtime-varying lengths and offsets (rows and keys of each batch
// entry, where it starts in the packed tensors) are device tensors, so a new batch reuses the
// plan of its class (entries, and bounds on rows and keys).
#ifndef LI_ATTENTION_CUDNN_H
#define LI_ATTENTION_CUDNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct li_cudnn li_cudnn;

// How K and V are laid out for one call.
typedef enum {
    LI_SDPA_DENSE,   // one entry, all rows over all keys: k, v (s_kv, Hkv, Dh); no length tensors
    LI_SDPA_PADDED,  // one entry laid out as DENSE for s_q rows and s_kv keys (a size class),
                     // of which the first seq_q[0] / seq_kv[0] are real: one plan serves every
                     // length of its class. q and o hold s_q rows (o's past the real ones may
                     // be written), k and v s_kv keys (those past the real ones are read and
                     // must be finite)
    LI_SDPA_RAGGED,  // b entries packed one after another ("THD"): entry e's rows start at
                     // element q_off[e] of q and o, its keys at kv_off[e] of k and v, its
                     // log-sum-exps at lse_off[e]; seq_q, seq_kv give their counts
} li_sdpa_kind;

// One SDPA call: O = softmax(scale Q Kᵀ [+ mask]) V per entry and query head, GQA (query head h
// reads kv head h / (H / Hkv)), bf16 inputs and outputs, fp32 softmax and accumulation.
typedef struct {
    li_sdpa_kind kind;
    int b;             // batch entries
    int H, Hkv, Dh;
    int s_q;           // DENSE: rows; PADDED, RAGGED: a bound on any entry's rows (plan class)
    int s_kv;          // DENSE: keys; PADDED, RAGGED: a bound on any entry's keys (plan class)
    bool causal;       // bottom-right aligned: row r of n sees the first n_kv - (n - 1 - r) keys
    float scale;
    const void *q;            // DENSE (s_q, H, Dh); RAGGED (rows of all entries, H, Dh); bf16
    const void *k, *v;        // DENSE (s_kv, Hkv, Dh); RAGGED (keys of all entries, Hkv, Dh);
                              // bf16; RAGGED: the 256 keys after an entry's last must be finite
    void *o;                  // as q
    float *lse;               // RAGGED only, or NULL: (rows of all entries, H) log-sum-exp of the
                              // scaled scores (natural log)
    const int32_t *seq_q;     // (b) PADDED, RAGGED: rows of each entry
    const int32_t *seq_kv;    // (b) PADDED, RAGGED: keys of each entry
    const int32_t *q_off;     // (b + 1) RAGGED: element offsets (rows x H x Dh) into q and o
    const int32_t *kv_off;    // (b + 1) RAGGED: element offsets (keys x Hkv x Dh) into k and v
    const int32_t *lse_off;   // (b + 1) RAGGED: element offsets (rows x H) into lse
} li_sdpa_args;

// Loads cuDNN (lib: the library file; NULL or "": libcudnn.so.9 on the loader path) and creates
// a handle bound to `stream`; NULL with the reason in err when cuDNN cannot be loaded or
// initialised.
li_cudnn *li_cudnn_open(cudaStream_t stream, const char *lib, char *err, size_t n_err);
void li_cudnn_close(li_cudnn *c);  // NULL is a no-op

// Queues the call on the handle's stream. 0: queued; 1: cuDNN has no engine for this shape
// (nothing queued, err says why: the caller runs its own kernel); -1: an error (err).
int li_cudnn_sdpa(li_cudnn *c, const li_sdpa_args *a, char *err, size_t n_err);

// Builds (or finds) the plan of a call of these arguments without queuing anything (pointers are
// not read): 0 ready, 1 no engine for the shape, -1 an error (err). The first plan of a process
// pays cuDNN's one-time set-up, seconds on the H200 machine: a backend prepares one at load.
int li_cudnn_prepare(li_cudnn *c, const li_sdpa_args *a, char *err, size_t n_err);

// Plans built so far, the milliseconds spent building them, calls run, and workspace
// (re)allocations.
typedef struct {
    int64_t plans_built, calls, workspace_allocs;
    double build_ms;
    int64_t unsupported;  // shapes cuDNN refused (each tried once)
} li_cudnn_stats;
void li_cudnn_get_stats(const li_cudnn *c, li_cudnn_stats *out);
// cuDNN's version as loaded (e.g. 91900), 0 when none.
int li_cudnn_version(const li_cudnn *c);

#ifdef __cplusplus
}
#endif

#endif
