// backend-cuda-graphs.c — step graphs, the backend side of src/backend/step.c: graph_begin
// starts a stream capture for a step key (a key's first step runs eagerly), graph_end
// instantiates or updates the key's executable graph and launches it, or has the step re-run
// eagerly when recording failed. Off unless LI_CUDA_GRAPHS=1 (docs/CUDA.md says why).
//
// Not here: keys and the re-run loop (step.c); what the forwards record (the models). Tested by
// test-dllm and gpu-model with LI_CUDA_GRAPHS=1 on a GPU machine (cached = uncached, graphs =
// eager).
#include "backend-cuda-internal.h"

// ---- step graphs ------------------------------------------------------------------------------
//
// A decode step of Llama-8B is ~400 kernels of 5-40 µs; a LLaDA step ~450 larger ones. Launched
// one by one each costs the host ~3-5 µs and the device a gap between kernels; as one CUDA graph
// the device runs them back to back. Each step is recorded again (stream capture: the host
// still walks the forward, ~1-2 µs per op, but nothing runs) and the recording replaces the
// parameters of the executable graph kept for its key (cudaGraphExecUpdate: same kernels in
// the same order, new arguments — page counts, split-K plans, block bounds); a step of another
// shape under the same key fails the update and is instantiated afresh. Recording every step
// keeps graphs correct by construction: no argument is ever replayed stale.

bool li_backend_cuda_graph_stats(li_backend *be, li_cuda_graph_stats *out) {
    li_cuda_impl *im = be->impl;
    *out = im->gstats;
    return !im->graphs_off;
}

bool li_cu_graph_begin(li_backend *be, uint64_t key) {
    li_cuda_impl *im = be->impl;
    if (im->graphs_off || im->capturing || im->err != LI_OK) return false;
    int i = 0;
    while (i < im->n_seen && im->seen[i] != key) i++;
    if (i == im->n_seen) {  // first time: eagerly, so that scratch and plans exist
        im->seen[im->n_seen < LI_GRAPH_SEEN ? im->n_seen++ : (int)(key % LI_GRAPH_SEEN)] = key;
        im->gstats.eager_steps++;
        return false;
    }
    cudaError_t e = cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        im->graphs_off = true;
        snprintf(im->gstats.note, sizeof im->gstats.note, "cudaStreamBeginCapture: %s",
                 cudaGetErrorString(e));
        return false;
    }
    im->capturing = true;
    im->cur_key = key;
    return true;
}

// The slot kept for key, or a free / evicted one (exec NULL; a free one's was NULL already).
static graph_slot *graph_slot_for(li_cuda_impl *im, uint64_t key) {
    for (int i = 0; i < im->n_graphs; i++)
        if (im->graphs[i].key == key) return &im->graphs[i];
    graph_slot *g =
        &im->graphs[cache_slot_pick(&im->n_graphs, &im->graph_next_evict, LI_GRAPH_SLOTS)];
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->key = key;
    g->exec = NULL;
    return g;
}

// Nothing of the step ran (its recording, instantiation or launch failed): forget the key so
// that its next step runs eagerly first, and have the caller queue the ops again, eagerly. After
// LI_GRAPH_MAX_FAILURES failures in a row graphs are turned off.
static li_status graph_failed(li_cuda_impl *im, const char *what, cudaError_t e, bool *rerun) {
    snprintf(im->gstats.note, sizeof im->gstats.note, "%s failed: %.200s", what,
             im->err != LI_OK ? im->err_msg : cudaGetErrorString(e));
    cudaGetLastError();
    im->err = LI_OK;
    for (int i = 0; i < im->n_seen; i++)
        if (im->seen[i] == im->cur_key) im->seen[i] = im->seen[--im->n_seen];
    if (++im->graph_failures >= LI_GRAPH_MAX_FAILURES) im->graphs_off = true;
    im->gstats.failed++;
    *rerun = true;
    return LI_OK;
}

li_status li_cu_graph_end(li_backend *be, bool *rerun) {
    li_cuda_impl *im = be->impl;
    *rerun = false;
    if (!im->capturing) return LI_OK;
    im->capturing = false;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(im->stream, &graph);
    if (e != cudaSuccess || im->err != LI_OK || !graph) {  // an op could not be recorded
        if (graph) cudaGraphDestroy(graph);
        return graph_failed(im, "recording", e, rerun);
    }
    graph_slot *g = graph_slot_for(im, im->cur_key);
    if (g->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(g->exec, graph, &info) == cudaSuccess) {
            im->gstats.updated++;
        } else {  // another shape under this key
            cudaGetLastError();
            cudaGraphExecDestroy(g->exec);
            g->exec = NULL;
        }
    }
    if (!g->exec) {
        e = cudaGraphInstantiate(&g->exec, graph, 0);
        if (e != cudaSuccess) {
            g->exec = NULL;  // the slot stays: the key's next step instantiates again
            cudaGraphDestroy(graph);
            return graph_failed(im, "instantiation", e, rerun);
        }
        im->gstats.instantiated++;
    }
    cudaGraphDestroy(graph);
    e = cudaGraphLaunch(g->exec, im->stream);
    if (e != cudaSuccess) return graph_failed(im, "launch", e, rerun);
    im->gstats.launched++;
    im->graph_failures = 0;
    return LI_OK;
}

void li_cu_graphs_free(li_cuda_impl *im) {
    if (im->capturing) {  // a step abandoned mid-recording (an error path)
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(im->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    for (int i = 0; i < im->n_graphs; i++) cudaGraphExecDestroy(im->graphs[i].exec);
}
