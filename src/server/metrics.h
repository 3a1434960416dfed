// metrics.h — the counters and histograms `lazyinfer serve` exposes at /metrics (Prometheus
// text format 0.0.4). Thread-safe: HTTP threads record requests, the engine thread records tokens
// and the cache/KV snapshot it takes after every step (li_get_cache_stats may only be called by
// the thread that owns the model). Not here: HTTP. Tested through /metrics by tests/test_server.py.
#ifndef LI_SERVER_METRICS_H
#define LI_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "../core/core.h"

#define LI_METRICS_N_BUCKETS 12
#define LI_METRICS_TPS_WINDOW 10  // seconds over which tokens/s is averaged

typedef struct {
    const double *bounds;  // (LI_METRICS_N_BUCKETS - 1) upper bounds in seconds, then +Inf
    int64_t counts[LI_METRICS_N_BUCKETS];
    double sum;
    int64_t n;
} li_histogram;

typedef struct {
    pthread_mutex_t mu;
    // requests by endpoint (0 completions, 1 chat, 2 other) and status class (2xx, 4xx, 5xx)
    int64_t requests[3][3];
    int64_t cancelled;  // client went away before the end
    li_histogram ttft, latency;
    int64_t prompt_tokens, generated_tokens;
    // tokens/s: generated tokens per second over the last LI_METRICS_TPS_WINDOW seconds
    int64_t tps_bucket[LI_METRICS_TPS_WINDOW];
    int64_t tps_second[LI_METRICS_TPS_WINDOW];
    int64_t dllm_batches, dllm_batched;  // diffusion batches of >= 2 requests, requests in them
    int running, waiting;  // requests in the engine / queued in the server
    int conns_open;        // connections (conn.h), set before each render
    int64_t conns_timed_out, conns_shed, conns_refused;
    li_cache_stats cache;  // last snapshot by the engine thread
    li_model *model;       // borrowed: its tiers' counters are read fresh at each render
                           // (li_cache_tier_stats_get is thread-safe; the tiers' worker writes
                           // while the engine idles)
} li_metrics;

void li_metrics_init(li_metrics *mx);
void li_metrics_free(li_metrics *mx);
// status: the HTTP status sent; ttft_s < 0 when no token was produced.
void li_metrics_request(li_metrics *mx, int endpoint, int status, double ttft_s, double latency_s,
                        int prompt_tokens, int generated_tokens);
void li_metrics_tokens(li_metrics *mx, int n);  // tokens generated just now
void li_metrics_cancelled(li_metrics *mx);
void li_metrics_dllm_batch(li_metrics *mx, int n);  // n >= 2 diffusion requests decoded together
void li_metrics_engine(li_metrics *mx, const li_cache_stats *cs, int running, int waiting);
void li_metrics_connections(li_metrics *mx, int open, int64_t timed_out, int64_t shed,
                            int64_t refused);
// Appends the Prometheus text to b.
li_status li_metrics_render(li_metrics *mx, li_buf *b);

#endif
