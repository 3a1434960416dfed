// gguf-write.h — a growable byte buffer and the little-endian writers the tests build GGUF files
// with in memory (test-formats: whole models, test-tokenizer: vocabularies). Not a GGUF library:
// the tests lay out headers, key/values and tensors themselves, so a malformed file is one edit.
// Out of memory aborts (a test machine without memory is no result).
#ifndef LI_TESTS_GGUF_WRITE_H
#define LI_TESTS_GGUF_WRITE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;  // (cap) bytes, the first n written
    size_t n, cap;
} wbuf;

static inline void w_bytes(wbuf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static inline void w_u8(wbuf *b, uint8_t v) { w_bytes(b, &v, 1); }
static inline void w_u32(wbuf *b, uint32_t v) { w_bytes(b, &v, 4); }
static inline void w_u64(wbuf *b, uint64_t v) { w_bytes(b, &v, 8); }
// A GGUF string: u64 length, then the bytes (no terminator).
static inline void w_str(wbuf *b, const char *s) {
    w_u64(b, strlen(s));
    w_bytes(b, s, strlen(s));
}
// Zero bytes up to the next multiple of al.
static inline void w_pad(wbuf *b, size_t al) {
    while (b->n % al) w_u8(b, 0);
}

#endif
