// metrics.c — Prometheus counters, gauges and histograms of `lazyinfer serve` (metrics.h).
// One mutex guards everything: records are a few adds, rendering is a few KB of text.
// Tested through /metrics by tests/test_server.py (counts, histogram totals, KV pages at idle).
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "metrics.h"

// TTFT (s): from 10 ms (a cached prompt on a small model) to a minute (long prompts queued).
static const double ttft_bounds[LI_METRICS_N_BUCKETS - 1] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                             1, 2.5, 5, 10, 60};
// Latency (s): whole requests, up to long generations.
static const double latency_bounds[LI_METRICS_N_BUCKETS - 1] = {0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                                5, 10, 30, 60, 300};

static const char *endpoint_names[3] = {"completions", "chat_completions", "other"};
static const char *class_names[3] = {"2xx", "4xx", "5xx"};

void li_metrics_init(li_metrics *mx) {
    memset(mx, 0, sizeof *mx);
    pthread_mutex_init(&mx->mu, NULL);
    mx->ttft.bounds = ttft_bounds;
    mx->latency.bounds = latency_bounds;
}

void li_metrics_free(li_metrics *mx) {
    pthread_mutex_destroy(&mx->mu);
}

static void observe(li_histogram *h, double x) {
    int i = 0;
    while (i < LI_METRICS_N_BUCKETS - 1 && x > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += x;
    h->n++;
}

static int64_t now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

void li_metrics_request(li_metrics *mx, int endpoint, int status, double ttft_s, double latency_s,
                        int prompt_tokens, int generated_tokens) {
    int e = endpoint >= 0 && endpoint < 2 ? endpoint : 2;
    int c = status < 400 ? 0 : status < 500 ? 1 : 2;
    pthread_mutex_lock(&mx->mu);
    mx->requests[e][c]++;
    if (ttft_s >= 0) observe(&mx->ttft, ttft_s);
    if (e < 2 && status < 400) observe(&mx->latency, latency_s);
    mx->prompt_tokens += prompt_tokens;
    pthread_mutex_unlock(&mx->mu);
    (void)generated_tokens;  // counted as they are produced (li_metrics_tokens)
}

void li_metrics_tokens(li_metrics *mx, int n) {
    int64_t s = now_s();
    int k = (int)(s % LI_METRICS_TPS_WINDOW);
    pthread_mutex_lock(&mx->mu);
    if (mx->tps_second[k] != s) {
        mx->tps_second[k] = s;
        mx->tps_bucket[k] = 0;
    }
    mx->tps_bucket[k] += n;
    mx->generated_tokens += n;
    pthread_mutex_unlock(&mx->mu);
}

void li_metrics_cancelled(li_metrics *mx) {
    pthread_mutex_lock(&mx->mu);
    mx->cancelled++;
    pthread_mutex_unlock(&mx->mu);
}

void li_metrics_dllm_batch(li_metrics *mx, int n) {
    pthread_mutex_lock(&mx->mu);
    mx->dllm_batches++;
    mx->dllm_batched += n;
    pthread_mutex_unlock(&mx->mu);
}

void li_metrics_engine(li_metrics *mx, const li_cache_stats *cs, int running, int waiting) {
    pthread_mutex_lock(&mx->mu);
    mx->cache = *cs;
    mx->running = running;
    mx->waiting = waiting;
    pthread_mutex_unlock(&mx->mu);
}

void li_metrics_connections(li_metrics *mx, int open, int64_t timed_out, int64_t shed,
                            int64_t refused) {
    pthread_mutex_lock(&mx->mu);
    mx->conns_open = open;
    mx->conns_timed_out = timed_out;
    mx->conns_shed = shed;
    mx->conns_refused = refused;
    pthread_mutex_unlock(&mx->mu);
}

static li_status histogram(li_buf *b, const char *name, const char *help, const li_histogram *h) {
    LI_TRY(li_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name));
    int64_t cum = 0;
    for (int i = 0; i < LI_METRICS_N_BUCKETS; i++) {
        cum += h->counts[i];
        if (i < LI_METRICS_N_BUCKETS - 1)
            LI_TRY(li_buf_printf(b, "%s_bucket{le=\"%g\"} %lld\n", name, h->bounds[i], (long long)cum));
        else
            LI_TRY(li_buf_printf(b, "%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)cum));
    }
    return li_buf_printf(b, "%s_sum %.6f\n%s_count %lld\n", name, h->sum, name, (long long)h->n);
}

static li_status gauge(li_buf *b, const char *name, const char *type, const char *help, double v) {
    return li_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

// The document tiers below the pool, one series per tier (host, disk, remote) per counter.
static li_status render_tiers(li_buf *b, const li_cache_tier_stats *t) {
    static const char *tier[3] = {"host", "disk", "remote"};
    static const struct {
        const char *name, *type, *help;
        size_t off;
        bool is_double;
    } fields[] = {
#define F(n, ty, h, f, d) {"lazyinfer_kv_tier_" n, ty, h, offsetof(li_cache_tier_stats, f), d}
        F("hits_total", "counter", "documents promoted from the tier after missing the ones above", hits, false),
        F("misses_total", "counter", "tier lookups that found nothing usable", misses, false),
        F("bytes_in_total", "counter", "bytes promoted out of the tier", bytes_in, false),
        F("bytes_out_total", "counter", "bytes written into the tier", bytes_out, false),
        F("promotions_total", "counter", "copies promoted from the tier into the KV pool", promotions, false),
        F("promotion_seconds_total", "counter", "time from lookup to pages queued, summed", promote_ms, true),
        F("resident_bytes", "gauge", "bytes the tier holds (remote: written by this replica)", resident_bytes, false),
        F("resident_entries", "gauge", "documents the tier holds (remote: written by this replica)", resident_entries, false),
        F("evictions_total", "counter", "entries evicted for the tier's budget", evictions, false),
        F("dropped_total", "counter", "entries found damaged, partial or stale and recomputed", dropped, false),
        F("write_errors_total", "counter", "writes that failed (disk full, Redis down)", errors, false),
#undef F
    };
    bool any = false;
    for (int i = 0; i < 3; i++) any |= t[i].enabled;
    for (size_t f = 0; any && f < sizeof fields / sizeof fields[0]; f++) {
        LI_TRY(li_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fields[f].name, fields[f].help,
                             fields[f].name, fields[f].type));
        for (int i = 0; i < 3; i++) {
            if (!t[i].enabled) continue;
            const char *p = (const char *)&t[i] + fields[f].off;
            double v = fields[f].is_double ? *(const double *)p / 1e3 : (double)*(const int64_t *)p;
            LI_TRY(li_buf_printf(b, "%s{tier=\"%s\"} %.17g\n", fields[f].name, tier[i], v));
        }
    }
    return LI_OK;
}

li_status li_metrics_render(li_metrics *mx, li_buf *b) {
    pthread_mutex_lock(&mx->mu);
    li_metrics m = *mx;  // snapshot, rendered without the lock
    pthread_mutex_unlock(&mx->mu);
    LI_TRY(li_buf_printf(b, "# HELP lazyinfer_requests_total HTTP requests answered, by endpoint and "
                            "status class\n# TYPE lazyinfer_requests_total counter\n"));
    for (int e = 0; e < 3; e++)
        for (int c = 0; c < 3; c++)
            LI_TRY(li_buf_printf(b, "lazyinfer_requests_total{endpoint=\"%s\",status=\"%s\"} %lld\n",
                                 endpoint_names[e], class_names[c], (long long)m.requests[e][c]));
    LI_TRY(gauge(b, "lazyinfer_requests_cancelled_total", "counter",
                 "requests whose client disconnected before the end", (double)m.cancelled));
    LI_TRY(gauge(b, "lazyinfer_requests_running", "gauge", "requests in the engine", m.running));
    LI_TRY(gauge(b, "lazyinfer_requests_waiting", "gauge", "requests queued in the server", m.waiting));
    LI_TRY(gauge(b, "lazyinfer_connections_open", "gauge", "HTTP connections open", m.conns_open));
    LI_TRY(gauge(b, "lazyinfer_connections_timed_out_total", "counter",
                 "connections closed by a deadline (idle, headers, body)", (double)m.conns_timed_out));
    LI_TRY(gauge(b, "lazyinfer_connections_shed_total", "counter",
                 "idle connections closed to make room for new ones", (double)m.conns_shed));
    LI_TRY(gauge(b, "lazyinfer_connections_refused_total", "counter",
                 "connections refused at --max-connections (every other one busy)",
                 (double)m.conns_refused));
    LI_TRY(histogram(b, "lazyinfer_time_to_first_token_seconds",
                     "time from request arrival to the first generated token", &m.ttft));
    LI_TRY(histogram(b, "lazyinfer_request_duration_seconds",
                     "time from request arrival to the last byte of a successful completion",
                     &m.latency));
    LI_TRY(gauge(b, "lazyinfer_prompt_tokens_total", "counter", "prompt tokens of answered requests",
                 (double)m.prompt_tokens));
    LI_TRY(gauge(b, "lazyinfer_generation_tokens_total", "counter", "tokens generated",
                 (double)m.generated_tokens));
    int64_t s = now_s(), recent = 0;
    for (int k = 0; k < LI_METRICS_TPS_WINDOW; k++)
        if (m.tps_second[k] > s - LI_METRICS_TPS_WINDOW && m.tps_second[k] < s) recent += m.tps_bucket[k];
    LI_TRY(gauge(b, "lazyinfer_generation_tokens_per_second", "gauge",
                 "tokens generated per second over the last full 9 seconds",
                 recent / (double)(LI_METRICS_TPS_WINDOW - 1)));
    LI_TRY(gauge(b, "lazyinfer_dllm_batches_total", "counter",
                 "diffusion batches of two or more requests decoded together", (double)m.dllm_batches));
    LI_TRY(gauge(b, "lazyinfer_dllm_batched_requests_total", "counter",
                 "diffusion requests decoded in such batches", (double)m.dllm_batched));
    const li_cache_stats *c = &m.cache;
    LI_TRY(gauge(b, "lazyinfer_doc_cache_hits_total", "counter", "document-cache lookups that hit",
                 (double)c->doc_hits));
    LI_TRY(gauge(b, "lazyinfer_doc_cache_misses_total", "counter", "document-cache lookups that missed",
                 (double)c->doc_misses));
    LI_TRY(gauge(b, "lazyinfer_doc_cache_evictions_total", "counter",
                 "documents or prefix pages evicted", (double)c->evictions));
    LI_TRY(gauge(b, "lazyinfer_doc_cache_resident_documents", "gauge",
                 "documents held by the document cache", (double)c->resident_docs));
    LI_TRY(gauge(b, "lazyinfer_doc_cache_resident_bytes", "gauge",
                 "KV bytes held by the document (or prefix) cache", (double)c->resident_bytes));
    LI_TRY(gauge(b, "lazyinfer_prefix_cache_hit_tokens_total", "counter",
                 "prompt tokens served by the prefix cache", (double)c->prefix_hit_tokens));
    LI_TRY(gauge(b, "lazyinfer_kv_pages_total", "gauge", "pages in the KV pool", (double)c->kv_pages_total));
    LI_TRY(gauge(b, "lazyinfer_kv_pages_in_use", "gauge", "KV pages not free (caches included)",
                 (double)(c->kv_pages_total - c->kv_pages_free)));
    LI_TRY(gauge(b, "lazyinfer_kv_pages_cached", "gauge", "KV pages held by the document/prefix cache",
                 c->kv_page_bytes ? (double)(c->resident_bytes / c->kv_page_bytes) : 0.0));
    LI_TRY(gauge(b, "lazyinfer_kv_page_bytes", "gauge", "bytes per KV page", (double)c->kv_page_bytes));
    li_cache_tier_stats tiers[3];
    memcpy(tiers, c->tiers, sizeof tiers);
    if (m.model) li_cache_tier_stats_get(m.model, tiers);
    return render_tiers(b, tiers);
}
