// error.c — status strings, the thread-local error message, logging, assertions and progress.
// Tested by tests/test-core.c.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

static _Thread_local char error_msg[1024];

const char *li_status_str(li_status st) {
    switch (st) {
    case LI_OK: return "ok";
    case LI_ERR_INVALID_ARG: return "invalid argument";
    case LI_ERR_IO: return "I/O error";
    case LI_ERR_FORMAT: return "format error";
    case LI_ERR_UNSUPPORTED: return "unsupported";
    case LI_ERR_OOM: return "out of memory";
    case LI_ERR_KV_FULL: return "KV cache full";
    case LI_ERR_LIMIT: return "limit exceeded";
    case LI_ERR_BACKEND: return "backend error";
    case LI_ERR_NOT_FOUND: return "not found";
    }
    return "unknown status";
}

const char *li_last_error(void) { return error_msg[0] ? error_msg : "no error message"; }
const char *li_error_msg(void) { return li_last_error(); }
void li_error_clear(void) { error_msg[0] = 0; }

li_status li_error_set(li_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_msg, sizeof error_msg, fmt, ap);
    va_end(ap);
    return st;
}

li_status li_error_wrap(li_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof error_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_msg, sizeof old);
    // Truncation is acceptable here: the message is for people; keep the newest context first.
    size_t n = strlen(prefix);
    if (n >= sizeof error_msg) n = sizeof error_msg - 1;
    memcpy(error_msg, prefix, n);
    size_t room = sizeof error_msg - 1 - n, m = strlen(old);
    if (m > room) m = room;
    memcpy(error_msg + n, old, m);
    error_msg[n + m] = 0;
    return st;
}

static li_log_level log_level = LI_LOG_WARN;

void li_log_set_level(li_log_level level) { log_level = level; }

void li_log(li_log_level level, const char *fmt, ...) {
    if (level < log_level) return;
    static const char *names[] = {"debug", "info", "warning", "error"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lazyinfer: %s: %s\n", names[level], line);
}

_Noreturn void li_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "lazyinfer: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

void li_progress(const char *what, int64_t done, int64_t total) {
    static int is_tty = -1;
    if (is_tty < 0) is_tty = isatty(STDERR_FILENO);
    if (!is_tty || total <= 0) return;
    int pct = (int)(100 * done / total);
    fprintf(stderr, "\r%s: %3d%% (%lld/%lld)", what, pct, (long long)done, (long long)total);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}
