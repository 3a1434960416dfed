// cli.h — shared helpers of the lazyinfer subcommands (tools/cmd-*.c, tools/main.c).
#ifndef LI_CLI_H
#define LI_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyinfer.h"

#define DEFAULT_MODEL_REL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
// --attn-impl's help, the same for every command that loads a model
#define CLI_ATTN_IMPL_HELP                                                                         \
    "prefill / dense attention on cuda: auto (cuDNN where it takes the shape, else our kernels; "  \
    "default), cudnn, native"

typedef enum { OPT_FLAG, OPT_STR, OPT_INT, OPT_FLOAT, OPT_U64 } opt_kind;

typedef struct {
    const char *long_name;  // "--temp"
    const char *short_name; // "-n" or NULL
    opt_kind kind;
    void *dst;
    const char *help;
} opt;

// The model-loading options commands share (--model, --tokenizer, --chat-template, --threads,
// --backend, --gpu, --ctx-size, --kv-dtype, --attn-impl) write straight into li_model_params
// (path, tokenizer_path, chat_template, n_threads, backend, device, n_ctx, kv_dtype, attn_impl),
// started from li_model_default_params(); a path left NULL is cli_default_model().

void cli_print_usage(const char *usage, const opt *opts, int n_opts);
// The option of opts that arg names (its long or short name); NULL if none.
const opt *cli_find_opt(const opt *opts, int n_opts, const char *arg);
// Parses argv[1..] into opts; positional arguments go to pos (at most max_pos). Returns 0 to go
// on, 1 after --help (printed), 2 on a usage error (printed, naming the flag). A command that
// takes no positional argument passes NULL, 0, NULL.
int cli_parse_args(int argc, char **argv, const char *usage, const opt *opts, int n_opts,
                   const char **pos, int max_pos, int *n_pos);
// The model setup fetched: models/ next to the binary, else under the working directory.
const char *cli_default_model(void);
// The repository's data files (data/README.md), e.g. "data/gsm8k/test.jsonl": REL under the
// working directory, else next to the binary (the repository root for ./lazyinfer). Returns the
// first readable one, copied into buf; NULL when neither is there (then buf holds the candidate
// next to the binary, for cli_data_missing).
const char *cli_data_path(const char *rel, char *buf, size_t cap);
// Prints "lazyinfer CMD: no WHAT at REL (looked under the working directory and at BUF); FIX"
// to stderr, for a default data path that cli_data_path did not find.
void cli_data_missing(const char *cmd, const char *what, const char *rel, const char *buf,
                      const char *fix);
// "256M", "2G", "1048576", "64KiB" → bytes (binary multiples, >= 0). false on junk or overflow.
bool cli_parse_bytes(const char *s, int64_t *out);
// Bytes of memory available to a new allocation without swapping (MemAvailable of
// /proc/meminfo); -1 when unknown.
int64_t cli_mem_available(void);

// The options of li_model_params mp that read the same on every command loading a model: put
// CLI_DEVICE_OPTS(mp) in the option table (--threads, --backend, --gpu, --attn-impl), and
// CLI_KV_DTYPE_OPT(mp) too where the command keeps a KV cache.
#define CLI_DEVICE_OPTS(mp)                                                                        \
    {"--threads", "-t", OPT_INT, &(mp).n_threads, "CPU threads (default: all cores)"},             \
    {"--backend", NULL, OPT_STR, &(mp).backend,                                                    \
     "compute backend: cpu (default), cpu-ref, cuda (./lazyinfer-cuda)"},                          \
    {"--gpu", NULL, OPT_INT, &(mp).device, "GPU index for --backend cuda (default 0)"},            \
    {"--attn-impl", NULL, OPT_STR, &(mp).attn_impl, CLI_ATTN_IMPL_HELP}
#define CLI_KV_DTYPE_OPT(mp)                                                                       \
    {"--kv-dtype", NULL, OPT_STR, &(mp).kv_dtype,                                                  \
     "how K/V are stored: f32, bf16 or auto (default: bf16 on cuda, f32 on the CPU)"}

// --fp8 of the commands that run autoregressive models (generate, bench generate, rag, bench rag,
// serve): li_model_params.fp8.
#define CLI_FP8_OPT(mp)                                                                            \
    {"--fp8", NULL, OPT_STR, &(mp).fp8,                                                            \
     "FP8 prefill: off (default), ffn (the FFN's GEMMs) or all (every linear layer but the "       \
     "head) as block-scaled FP8 for batches of tokens; decode keeps bf16 (approximate)"}

// The document tiers below the KV pool (README "Sharing documents across replicas") and the
// eviction policy of the pool's documents and of every tier, the same flags on serve, rag and
// bench rag: put CLI_TIER_OPTS(args) in the option table, then cli_tier_params fills
// li_model_params from them.
typedef struct {
    const char *host_cache, *disk_cache, *disk_budget, *kv_remote, *kv_remote_password_file;
    const char *evict;
} cli_tier_args;
#define CLI_TIER_OPTS(a)                                                                           \
    {"--evict", NULL, OPT_STR, &(a).evict,                                                         \
     "document eviction of the pool and every tier (lazy, copy): lru (default) or gdsf, "          \
     "cost-aware: frequency x recompute cost / bytes"},                                            \
    {"--host-cache", NULL, OPT_STR, &(a).host_cache,                                               \
     "host RAM tier for documents (L1), e.g. 4G: copies are written through and promoted back "    \
     "instead of prefilled (pinned on cuda; lazy/copy caches)"},                                   \
    {"--disk-cache", NULL, OPT_STR, &(a).disk_cache,                                               \
     "disk tier (L2): a directory of one file per document (needs --disk-budget)"},                \
    {"--disk-budget", NULL, OPT_STR, &(a).disk_budget, "bytes the disk tier may hold, e.g. 20G"},  \
    {"--kv-remote", NULL, OPT_STR, &(a).kv_remote,                                                 \
     "shared tier (L3): redis://HOST:PORT[/DB] (Redis or Valkey), one store for every replica; "   \
     "unreachable: a warning and no L3"},                                                          \
    {"--kv-remote-password-file", NULL, OPT_STR, &(a).kv_remote_password_file,                     \
     "file whose first line is the Redis password (AUTH)"}
// Sizes parsed (K/M/G suffixes, as --budget) into *p. False after printing
// "lazyinfer CMD: --flag 'value': why" to stderr.
bool cli_tier_params(const char *cmd, const cli_tier_args *a, li_model_params *p);
// One line per enabled tier of cs: hits, misses, promotions and their mean time, bytes moved,
// residency, evictions, dropped entries and write errors.
void cli_print_tier_stats(FILE *f, const li_cache_stats *cs);
// Prints "lazyinfer: <what>: <last error>" and returns 1.
int cli_fail(const char *what);

int cmd_sim(int argc, char **argv);  // tools/cmd-sim.c
int cmd_dllm(int argc, char **argv);        // tools/cmd-dllm.c: lazyinfer dllm
int cmd_bench_dllm(int argc, char **argv);  // tools/cmd-dllm.c: lazyinfer bench dllm
int cmd_bench_rag(int argc, char **argv);   // tools/cmd-bench-rag.c: lazyinfer bench rag
int cmd_bench_kernels(int argc, char **argv);  // tools/cmd-bench-kernels.c: lazyinfer bench kernels
int cmd_bench_fp8(int argc, char **argv);      // tools/cmd-bench-fp8.c: lazyinfer bench fp8
int cmd_bench_quality(int argc, char **argv);  // tools/cmd-bench-quality.c: bench quality

// Subcommands in their own files (tools/cmd-*.c).
int cmd_rag(int argc, char **argv);
int cmd_serve(int argc, char **argv);  // tools/cmd-serve.c: lazyinfer serve

#endif
