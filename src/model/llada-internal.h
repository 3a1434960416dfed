// llada-internal.h — the LLaDA model struct shared by llada-load.c (loading, synthetic weights,
// FP8 weight cache) and arch-llada.c (caches, scratch, forward). Internal to src/model/.
#ifndef LI_LLADA_INTERNAL_H
#define LI_LLADA_INTERNAL_H

#include <pthread.h>

#include "llada.h"
#include "llama.h"

struct li_llada {
    li_hparams hp;
    li_rope_table rope;
    // Same layout as Llama's: tok_embd = wte, out_norm = ln_f, output = ff_out (LM head);
    // per block w_gate = ff_proj, w_up = up_proj, w_down = ff_out, wo = attn_out.
    li_llama_weights w;
    li_weight_store store;
    li_backend *be; // borrowed
    bool has_weights;
    // FP8 copies of the FFN matrices of layers >= 1 (gate, up, down per layer; layer 0 unused),
    // quantised on the first FP8 forward (li_llada_fp8_prepare) and kept with the model.
    pthread_mutex_t fp8_lock;
    bool fp8_ready;
    li_fp8_weight *fp8; // (L * 3)
};

// Quantises the FFN weights of layers >= 1 once (thread-safe; later calls return at once).
li_status li_llada_fp8_prepare(const li_llada *m);

#endif
