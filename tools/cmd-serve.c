// cmd-serve.c — `lazyinfer serve`: loads a model and runs the OpenAI-compatible server
// (src/server/server.h) until SIGINT or SIGTERM. Endpoints and fields: docs/SERVER.md.
// Tested by tests/test_server.py, which starts this command on a free port.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../src/core/core.h"
#include "../src/server/server.h"
#include "cli.h"
#include "lazyinfer.h"

// The id clients send as "model": the file or directory name without ".gguf".
static void model_id_of(const char *path, char *out, size_t size) {
    const char *base = path;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;  // "dir/" → "dir"
    for (size_t i = 0; i + 1 < n; i++)
        if (path[i] == '/') base = path + i + 1;
    size_t len = (size_t)(path + n - base);
    if (len > 5 && !strncmp(base + len - 5, ".gguf", 5)) len -= 5;
    snprintf(out, size, "%.*s", (int)len, base);
}

static sigset_t sigs;  // SIGINT, SIGTERM: taken by sigwait

// A second signal during the drain ends it at once.
static void *second_signal(void *arg) {
    int sig = 0;
    if (sigwait(&sigs, &sig) == 0) {
        fprintf(stderr, "lazyinfer serve: signal %d again, stopping now\n", sig);
        li_server_hurry(arg);
    }
    return NULL;
}

int cmd_serve(int argc, char **argv) {
    li_model_params mp = li_model_default_params(); // --model, --chat-template, -c, -t, ...
    const char *cache = NULL, *name = NULL, *repair = "none";
    int max_tokens = 0;
    uint64_t kv_budget = 0;
    cli_tier_args tiers = {0};
    li_server_params sp = li_server_default_params(); // the options of the same name set it
    // given as signed, for the checks below
    int idle_timeout = (int)sp.idle_timeout_s, header_timeout = (int)sp.header_timeout_s;
    int body_timeout = (int)sp.body_timeout_s, max_conns = (int)sp.max_connections;
    int max_conns_client = (int)sp.max_connections_per_client, drain = (int)sp.drain_timeout_s;
    int batch_wait = (int)sp.batch_wait_ms;
    const opt opts[] = {
        {"--model", "-m", OPT_STR, &mp.path, "HF directory, .gguf file or synth:NAME[:SEED] (default: the model setup fetched)"},
        {"--host", NULL, OPT_STR, &sp.host, "address to listen on (default 127.0.0.1)"},
        {"--port", NULL, OPT_INT, &sp.port, "port (default 8080; 0: any free port)"},
        {"--reuse-port", NULL, OPT_FLAG, &sp.reuse_port, "share the port with other servers started with it (SO_REUSEPORT); without it a port in use is an error"},
        {"--api-key", NULL, OPT_STR, &sp.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: env LAZYINFER_API_KEY, else none)"},
        {"--max-batch", NULL, OPT_INT, &sp.max_running, "requests decoded together (default 8)"},
        {"--batch-wait-ms", NULL, OPT_INT, &batch_wait, "diffusion models: when none is decoding, how long the first request waits for others to start in its batch (default 20)"},
        {"--max-queue", NULL, OPT_INT, &sp.max_queue, "requests accepted (running + queued) before 503 (default 256)"},
        {"--kv-budget", NULL, OPT_U64, &kv_budget, "KV pool size in bytes (default: max-batch x context)"},
        {"--cache", NULL, OPT_STR, &cache, "document cache: lazy (default), copy, prefix, none, full"},
        {"--repair", NULL, OPT_STR, &repair, "cross-document repair of requests without a 'repair' "
         "field: none (default), head[:K], blend[:R] (lazy, copy)"},
        CLI_TIER_OPTS(tiers),
        CLI_KV_DTYPE_OPT(mp),
        CLI_FP8_OPT(mp),
        {"--ctx-size", "-c", OPT_INT, &mp.n_ctx, "context size in tokens (default: min(trained, 4096))"},
        CLI_DEVICE_OPTS(mp),
        {"--max-tokens", NULL, OPT_INT, &max_tokens, "max_tokens of chat requests that give none (default 256, or --max-gen if smaller)"},
        {"--max-gen", NULL, OPT_INT, &sp.max_gen, "tokens one request may generate, max_tokens or gen_length (default 2048)"},
        {"--model-name", NULL, OPT_STR, &name, "model id in /v1/models (default: the file name)"},
        {"--chat-template", NULL, OPT_STR, &mp.chat_template, "chat format override: llama3, chatml, llada"},
        {"--idle-timeout", NULL, OPT_INT, &idle_timeout, "seconds a connection may wait without a request, or without reading a response (default 30)"},
        {"--header-timeout", NULL, OPT_INT, &header_timeout, "seconds from a request line to the end of its headers (default 10)"},
        {"--body-timeout", NULL, OPT_INT, &body_timeout, "seconds from the headers to the end of the body (default 60)"},
        {"--max-connections", NULL, OPT_INT, &max_conns, "connections open at once (default 4096; idle ones are shed past 15/16)"},
        {"--max-connections-per-client", NULL, OPT_INT, &max_conns_client, "connections per client address (default 256; 0: no limit); beyond it the client's idle ones are shed, else 503"},
        {"--trusted-proxy", NULL, OPT_STR, &sp.trusted_proxy, "address of a reverse proxy in front: its requests count for the right-most X-Forwarded-For address that is not the proxy (default: none)"},
        {"--drain-timeout", NULL, OPT_INT, &drain, "on SIGTERM/SIGINT, seconds running requests have to finish (default 30; a second signal stops at once)"},
        {"--quiet", "-q", OPT_FLAG, &sp.quiet, "no log line per request"},
    };
    const char *pos[1];
    int n_pos;
    int r = cli_parse_args(argc, argv,
                           "usage: lazyinfer serve [-m MODEL] [--host 127.0.0.1] [--port 8080] "
                           "[--api-key KEY] [--max-batch N] [--kv-budget BYTES] [--cache MODE]",
                           opts, sizeof opts / sizeof opts[0], pos, 0, &n_pos);
    if (r) return r == 1 ? 0 : 2;
    if (sp.port < 0 || sp.port > 65535 || sp.max_running < 1 || sp.max_queue < 1 || mp.n_ctx < 0 ||
        mp.n_threads < 0 || max_tokens < 0 || sp.max_gen < 1 || kv_budget > (uint64_t)INT64_MAX ||
        idle_timeout < 1 || header_timeout < 1 || body_timeout < 1 || max_conns < 1 ||
        max_conns_client < 0 || drain < 0 || batch_wait < 0 || batch_wait > 60000) {
        fprintf(stderr, "lazyinfer serve: --port must be in [0, 65535]; --max-batch, --max-queue, "
                        "--max-tokens, --max-gen, the timeouts and --max-connections >= 1; -c, -t, "
                        "--max-connections-per-client, --drain-timeout >= 0; --batch-wait-ms in "
                        "[0, 60000] (see --help)\n");
        return 2;
    }
    if (max_tokens == 0) max_tokens = sp.max_gen < 256 ? sp.max_gen : 256;
    if (max_tokens > sp.max_gen) {
        fprintf(stderr, "lazyinfer serve: --max-tokens %d is larger than --max-gen %d\n", max_tokens,
                sp.max_gen);
        return 2;
    }
    if (!sp.api_key) sp.api_key = getenv("LAZYINFER_API_KEY");
    li_cache_mode cm = LI_CACHE_LAZY;
    if (cache && li_cache_mode_parse(cache, &cm) != LI_OK) {
        fprintf(stderr, "lazyinfer serve: --cache: %s\n", li_last_error());
        return 2;
    }
    if (li_repair_parse(repair, &sp.repair) != LI_OK) {
        fprintf(stderr, "lazyinfer serve: --repair: %s\n", li_last_error());
        return 2;
    }
    if (sp.repair.mode != LI_REPAIR_NONE && cm != LI_CACHE_LAZY && cm != LI_CACHE_COPY) {
        fprintf(stderr, "lazyinfer serve: --repair %s needs --cache lazy or copy\n", repair);
        return 2;
    }
    if (!mp.path) mp.path = cli_default_model();
    mp.max_seqs = sp.max_running;
    mp.cache_mode = cache;
    mp.kv_budget_bytes = (int64_t)kv_budget;
    if (!cli_tier_params("serve", &tiers, &mp)) return 2;
    double t0 = li_time_ms();
    li_model *m;
    if (li_model_load(&m, &mp) != LI_OK) return cli_fail("cannot load the model");
    double t_loaded = li_time_ms();

    // SIGINT/SIGTERM are taken by sigwait below; every thread started from here inherits the mask
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char id[256];
    if (name) snprintf(id, sizeof id, "%s", name);
    else model_id_of(mp.path, id, sizeof id);
    sp.model_id = id;
    sp.model_path = mp.path;
    sp.default_max_tokens = max_tokens;
    sp.idle_timeout_s = (unsigned)idle_timeout;
    sp.header_timeout_s = (unsigned)header_timeout;
    sp.body_timeout_s = (unsigned)body_timeout;
    sp.max_connections = (unsigned)max_conns;
    sp.max_connections_per_client = (unsigned)max_conns_client;
    sp.drain_timeout_s = (unsigned)drain;
    sp.batch_wait_ms = (unsigned)batch_wait;
    // every connection is a descriptor: take the hard limit (li_server_start stays below it)
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    li_server *s;
    if (li_server_start(&s, m, &sp) != LI_OK) {
        li_model_free(m);
        return cli_fail("cannot start the server");
    }
    li_model_info in;
    li_model_get_info(m, &in);
    bool v6 = strchr(sp.host, ':') != NULL;  // an IPv6 literal goes in brackets in a URL
    fprintf(stderr,
            "lazyinfer serve: listening on http://%s%s%s:%d — model '%s' (%s, %.1f M params), loaded in "
            "%.0f ms, server up %.1f ms later; max batch %d, %s%s\n",
            v6 ? "[" : "", sp.host, v6 ? "]" : "", li_server_port(s), id, in.arch, in.n_params / 1e6, t_loaded - t0,
            li_time_ms() - t_loaded, sp.max_running, sp.api_key && *sp.api_key ? "API key required" : "no API key",
            strcmp(sp.host, "127.0.0.1") && strcmp(sp.host, "localhost") && strcmp(sp.host, "::1")
                ? " (WARNING: not bound to localhost)" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "lazyinfer serve: signal %d, stopping: new requests get 503, running ones have "
                    "%d s to finish (a second signal stops them now)\n", sig, drain);
    pthread_t second;
    if (pthread_create(&second, NULL, second_signal, s) == 0) pthread_detach(second);
    li_server_stop(s);
    li_model_free(m);
    return 0;
}
