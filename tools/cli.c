// cli.c — what every lazyinfer subcommand shares: option parsing, the default model and data
// paths and error printing (see cli.h).
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lazyinfer.h"

void cli_print_usage(const char *usage, const opt *opts, int n_opts) {
    printf("%s\n\noptions:\n", usage);
    for (int i = 0; i < n_opts; i++) {
        char names[64];
        snprintf(names, sizeof names, "%s%s%s", opts[i].short_name ? opts[i].short_name : "",
                 opts[i].short_name ? ", " : "", opts[i].long_name);
        printf("  %-22s %s\n", names, opts[i].help);
    }
    printf("  %-22s %s\n", "-h, --help", "show this help");
}

static bool parse_value(const opt *o, const char *v) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case OPT_STR: *(const char **)o->dst = v; return true;
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno || x < INT_MIN || x > INT_MAX) return false;
        *(int *)o->dst = (int)x;
        return true;
    }
    case OPT_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *end || errno || *v == '-') return false;
        *(uint64_t *)o->dst = x;
        return true;
    }
    case OPT_FLOAT: {
        float x = strtof(v, &end);
        if (*v == 0 || *end || errno || !isfinite(x)) return false;
        *(float *)o->dst = x;
        return true;
    }
    case OPT_FLAG: break;
    }
    return false;
}

const opt *cli_find_opt(const opt *opts, int n_opts, const char *arg) {
    for (int k = 0; k < n_opts; k++)
        if (!strcmp(arg, opts[k].long_name) ||
            (opts[k].short_name && !strcmp(arg, opts[k].short_name)))
            return &opts[k];
    return NULL;
}

// Parses argv[1..] into opts; positional arguments go to pos (at most max_pos). Returns 0 to go
// on, 1 after --help (printed), 2 on a usage error (printed).
int cli_parse_args(int argc, char **argv, const char *usage, const opt *opts, int n_opts,
                      const char **pos, int max_pos, int *n_pos) {
    int n_none;
    if (!n_pos) n_pos = &n_none; // max_pos 0: no count wanted
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_print_usage(usage, opts, n_opts);
            return 1;
        }
        if (a[0] == '-' && a[1] != 0) {
            const opt *o = cli_find_opt(opts, n_opts, a);
            if (!o) {
                fprintf(stderr, "lazyinfer %s: unknown option '%s' (see --help)\n", argv[0], a);
                return 2;
            }
            if (o->kind == OPT_FLAG) {
                *(bool *)o->dst = true;
                continue;
            }
            if (i + 1 >= argc) {
                fprintf(stderr, "lazyinfer %s: option '%s' needs a value\n", argv[0], a);
                return 2;
            }
            if (!parse_value(o, argv[++i])) {
                fprintf(stderr, "lazyinfer %s: bad value '%s' for option '%s'\n", argv[0], argv[i], a);
                return 2;
            }
            continue;
        }
        if (*n_pos >= max_pos) {
            fprintf(stderr, "lazyinfer %s: unexpected argument '%s' (see --help)\n", argv[0], a);
            return 2;
        }
        pos[(*n_pos)++] = a;
    }
    return 0;
}

// The model setup fetched: models/ next to the binary, else under the working directory.
const char *cli_default_model(void) {
    static char path[PATH_MAX + sizeof DEFAULT_MODEL_REL + 1];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/%s", exe, DEFAULT_MODEL_REL);
            if (access(path, R_OK) == 0) return path;
        }
    }
    return DEFAULT_MODEL_REL;
}

const char *cli_data_path(const char *rel, char *buf, size_t cap) {
    if (cap == 0) return NULL;
    buf[0] = 0;
    if (access(rel, R_OK) == 0) {
        snprintf(buf, cap, "%s", rel);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    if ((size_t)snprintf(buf, cap, "%s/%s", exe, rel) >= cap) return NULL;
    return access(buf, R_OK) == 0 ? buf : NULL;
}

void cli_data_missing(const char *cmd, const char *what, const char *rel, const char *buf,
                      const char *fix) {
    fprintf(stderr, "lazyinfer %s: no %s at %s (looked under the working directory%s%s); %s\n",
            cmd, what, rel, buf && buf[0] ? " and at " : "", buf && buf[0] ? buf : "", fix);
}

int cli_fail(const char *what) {
    fprintf(stderr, "lazyinfer: %s: %s\n", what, li_last_error());
    return 1;
}


int64_t cli_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    fclose(f);
    return kib >= 0 ? (int64_t)kib * 1024 : -1;
}

bool cli_parse_bytes(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return false;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    default: break;
    }
    if (mul > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return false;
    v *= mul;
    if (v > 9.0e18) return false;
    *out = (int64_t)v;
    return true;
}

bool cli_tier_params(const char *cmd, const cli_tier_args *a, li_model_params *p) {
    const char *flag = NULL, *value = NULL;
    if (a->host_cache && (!cli_parse_bytes(a->host_cache, &p->host_cache_bytes) ||
                          p->host_cache_bytes <= 0)) {
        flag = "--host-cache";
        value = a->host_cache;
    }
    if (a->disk_budget && (!cli_parse_bytes(a->disk_budget, &p->disk_budget_bytes) ||
                           p->disk_budget_bytes <= 0)) {
        flag = "--disk-budget";
        value = a->disk_budget;
    }
    if (flag) {
        fprintf(stderr, "lazyinfer %s: %s '%s': expected bytes > 0 with an optional K/M/G suffix "
                        "(e.g. 4G)\n", cmd, flag, value);
        return false;
    }
    // the host tier takes its whole budget at start (pinned on CUDA): more than the machine has
    // free would fail there, or swap and be killed later on the CPU
    int64_t avail = cli_mem_available();
    if (a->host_cache && avail > 0 && p->host_cache_bytes > avail) {
        fprintf(stderr, "lazyinfer %s: --host-cache %s: more than the %.1f GiB of memory "
                        "available now\n", cmd, a->host_cache, avail / 1073741824.0);
        return false;
    }
    if (a->disk_cache && !a->disk_budget) {
        fprintf(stderr, "lazyinfer %s: --disk-cache %s needs --disk-budget SIZE (e.g. 20G)\n", cmd,
                a->disk_cache);
        return false;
    }
    if (a->disk_budget && !a->disk_cache) {
        fprintf(stderr, "lazyinfer %s: --disk-budget needs --disk-cache DIR\n", cmd);
        return false;
    }
    if (a->evict && strcmp(a->evict, "lru") != 0 && strcmp(a->evict, "gdsf") != 0) {
        fprintf(stderr, "lazyinfer %s: --evict '%s': expected lru or gdsf\n", cmd, a->evict);
        return false;
    }
    if (a->kv_remote_password_file && !a->kv_remote) {
        fprintf(stderr, "lazyinfer %s: --kv-remote-password-file needs --kv-remote URL\n", cmd);
        return false;
    }
    p->doc_evict = a->evict;
    p->disk_cache_dir = a->disk_cache;
    p->kv_remote = a->kv_remote;
    p->kv_remote_password_file = a->kv_remote_password_file;
    return true;
}

void cli_print_tier_stats(FILE *f, const li_cache_stats *cs) {
    static const char *names[3] = {"host", "disk", "remote"};
    const double mib = 1024.0 * 1024.0;
    for (int i = 0; i < 3; i++) {
        const li_cache_tier_stats *t = &cs->tiers[i];
        if (!t->enabled) continue;
        fprintf(f,
                "tier %s: %lld hits, %lld misses, %lld promotions (%.2f ms each), %.2f MiB in, "
                "%.2f MiB out; resident %.2f MiB in %lld; %lld evictions, %lld dropped, "
                "%lld write errors\n",
                names[i], (long long)t->hits, (long long)t->misses, (long long)t->promotions,
                t->promotions ? t->promote_ms / (double)t->promotions : 0.0, t->bytes_in / mib,
                t->bytes_out / mib, t->resident_bytes / mib, (long long)t->resident_entries,
                (long long)t->evictions, (long long)t->dropped, (long long)t->errors);
    }
}
