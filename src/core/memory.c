// memory.c — aligned allocation, overflow-checked sizes, growable buffers.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

void *li_alloc(size_t n_bytes, const char *what) {
    size_t rounded = (n_bytes + 63) & ~(size_t)63;
    if (rounded < n_bytes) rounded = n_bytes;  // overflow: let aligned_alloc fail
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) {
        li_error_set(LI_ERR_OOM, "out of memory allocating %zu bytes for %s", n_bytes,
                     what ? what : "a buffer");
        return NULL;
    }
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

void li_free(void *p) { free(p); }

void *li_alloc_parts(const li_part *parts, int n, const char *what) {
    size_t total = 0;  // each part rounded up to 64 bytes; SIZE_MAX on overflow (li_alloc fails)
    for (int i = 0; i < n && total != SIZE_MAX; i++) {
        size_t r = (parts[i].bytes + 63) & ~(size_t)63;
        total = r < parts[i].bytes || total > SIZE_MAX - r ? SIZE_MAX : total + r;
    }
    char *block = li_alloc(total, what);
    if (!block) return NULL;
    for (size_t i = 0, at = 0; i < (size_t)n; i++) {
        *parts[i].ptr = block + at;
        at += (parts[i].bytes + 63) & ~(size_t)63;
    }
    return block;
}

bool li_mul_overflows(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

bool li_add_overflows(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

bool li_grow(void **p, int64_t *cap, int64_t n, size_t elem, int64_t first) {
    if (n <= *cap) return true;
    int64_t c = *cap ? *cap : first;
    while (c < n) c *= 2;
    uint64_t bytes;
    if (li_mul_overflows((uint64_t)c, elem, &bytes) || bytes > SIZE_MAX) return false;
    char *q = realloc(*p, (size_t)bytes);
    if (!q) return false;
    memset(q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
    *p = q;
    *cap = c;
    return true;
}

static li_status buf_reserve(li_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return LI_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return li_error_set(LI_ERR_OOM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return LI_OK;
}

li_status li_buf_append(li_buf *b, const void *p, size_t n) {
    LI_TRY(buf_reserve(b, n));
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return LI_OK;
}

li_status li_buf_printf(li_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return li_error_set(LI_ERR_INVALID_ARG, "bad format string");
    LI_TRY(buf_reserve(b, (size_t)n));
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return LI_OK;
}

void li_buf_free(li_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
