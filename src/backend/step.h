// step.h — the step runner: one model step's ops queued as one graph where the backend records
// graphs (CUDA graphs: ops.graph_begin / graph_end), eagerly otherwise, and queued again eagerly
// when a recording cannot run. The model forwards (arch-llama.c, arch-llada.c) hand it their step
// as a function and a key naming the step's shape, and know nothing else of graphs.
// Not here: recording, instantiation and parameter update (the backend's graph_begin /
// graph_end). Tested by tests/test-llada.c and gpu-model on cpu-devsim (no graphs: the eager
// path) and by make CUDA=1 gpu-check (graphs, re-runs).
#ifndef LI_BACKEND_STEP_H
#define LI_BACKEND_STEP_H

#include "backend.h"

// Queues a step's ops; a status an op's host side can fail with (LI_OK otherwise).
typedef li_status (*li_step_fn)(void *ctx);
// Puts back what the step's host side changed, so that the step can be queued again from the
// same state (NULL: the step changes nothing on the host).
typedef void (*li_step_restore_fn)(void *ctx);

// Runs step(ctx) once. With record (the caller can restore its state) on a backend that records
// graphs, as one graph kept for `key` (the same key: the same ops in the same shapes, new
// parameters); when the recording cannot run (nothing of it ran) restore(ctx) and step(ctx)
// queued again, eagerly. A failing step restores too. Returns the first error of the step or of
// the graph's end.
li_status li_step_run(li_backend *be, uint64_t key, bool record, li_step_fn step,
                      li_step_restore_fn restore, void *ctx);

// Step keys: parts mixed in order (64-bit FNV-1a over 64-bit words), from LI_STEP_KEY_INIT.
#define LI_STEP_KEY_INIT 1469598103934665603ull
static inline uint64_t li_step_key(uint64_t key, uint64_t part) {
    return (key ^ part) * 1099511628211ull;
}

#endif
