// llama-bd0.h — the parts of llama-bd0.c (Fast-dLLM v2's layer 0 with LaCache's caches) that
// arch-llama.c's forward calls. Internal to src/model/; li_llama_bd0 itself is in llama.h.
#ifndef LI_LLAMA_BD0_H
#define LI_LLAMA_BD0_H

#include "../backend/step.h"
#include "llama.h"

// Before the forward, on the host batch b (b->bd0 set): what each cache serves in this forward
// (z->p0, lo, hi, redo, use_*). Returns the part of the step key those decide (0: not a block).
uint64_t li_bd0_plan(li_llama_bd0 *z, const li_batch *b);
// After the forward ran: the caches now hold b's block; the work counters.
void li_bd0_commit(li_llama_bd0 *z, const li_batch *b);
// The ops, on the (staged) batch: x (T, D) = the embedding rows; layer 0's q (returned: T rows),
// and its k, v into the dense rows and the pool (norm input in bf16 when bf16); a block's
// layer-0 attention into s->att.
void li_bd0_embed(const li_llama *m, li_llama_scratch *s, const li_batch *b);
const float *li_bd0_qkv(const li_llama *m, li_llama_scratch *s, const li_kv_storage *kv,
                        const li_batch *b, bool bf16);
void li_bd0_attend(const li_llama *m, li_llama_scratch *s, const li_batch *b, const float *q);

#endif
