// core.h — the bottom layer: status codes and error messages, logging, assertions,
// aligned allocation, read-only file mapping, dtype conversion and a small thread pool.
//
// Everything a user or the environment can cause returns an li_status; the human-readable
// reason is kept in a thread-local buffer (li_error_set / li_error_msg) so a status can travel
// up through several layers and the CLI prints one precise line. Programmer errors use
// LI_ASSERT, which aborts with file:line. Library code never calls exit().
//
// Tested by tests/test-core.c.
#ifndef LI_CORE_H
#define LI_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fp8.h"
#include "lazyinfer.h"

// ---- errors ---------------------------------------------------------------------------------

// Records the message for the current thread and returns `st`, so a failing path reads
//   return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' runs past the end of the file", path, name);
li_status li_error_set(li_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Prefixes the current message with more context ("loading model: ") and returns `st`.
li_status li_error_wrap(li_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *li_error_msg(void);  // valid until the next li_error_* call on this thread
void li_error_clear(void);

#define LI_TRY(expr)                                                                               \
    do {                                                                                           \
        li_status li_try_st_ = (expr);                                                             \
        if (li_try_st_ != LI_OK) return li_try_st_;                                                \
    } while (0)

// ---- logging and assertions -----------------------------------------------------------------

typedef enum { LI_LOG_DEBUG, LI_LOG_INFO, LI_LOG_WARN, LI_LOG_ERROR } li_log_level;
void li_log_set_level(li_log_level level);
void li_log(li_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LI_INFO(...) li_log(LI_LOG_INFO, __VA_ARGS__)
#define LI_WARN(...) li_log(LI_LOG_WARN, __VA_ARGS__)
#define LI_DEBUG(...) li_log(LI_LOG_DEBUG, __VA_ARGS__)

_Noreturn void li_assert_fail(const char *expr, const char *file, int line);
#define LI_ASSERT(x) ((x) ? (void)0 : li_assert_fail(#x, __FILE__, __LINE__))

// Progress on stderr for long work, only when stderr is a terminal. `what` is a short label.
void li_progress(const char *what, int64_t done, int64_t total);

// ---- memory ---------------------------------------------------------------------------------

// 64-byte aligned, zero-filled. Returns NULL and sets the error on failure (never aborts).
void *li_alloc(size_t n_bytes, const char *what);
void li_free(void *p);  // li_free(NULL) is a no-op

// Arrays of one lifetime as one allocation: *parts[i].ptr gets parts[i].bytes of it, 64-byte
// aligned and zero-filled. Returns the block, the one thing to li_free; NULL (no pointer set,
// the error set naming `what`) when memory runs out.
typedef struct {
    void **ptr;
    size_t bytes;
} li_part;
void *li_alloc_parts(const li_part *parts, int n, const char *what);

// Grows the array *p of elem-byte elements to hold at least n: its capacity *cap starts at
// `first` and doubles, and the elements added are zero-filled. False, with *p and *cap as they
// were, when memory runs out (the caller sets the error, naming the array).
bool li_grow(void **p, int64_t *cap, int64_t n, size_t elem, int64_t first);

// Overflow-checked size arithmetic for anything derived from file contents.
bool li_mul_overflows(uint64_t a, uint64_t b, uint64_t *out);
bool li_add_overflows(uint64_t a, uint64_t b, uint64_t *out);

// Growable byte buffer (responses, strings built in pieces).
typedef struct {
    char *data;
    size_t len, cap;
} li_buf;
li_status li_buf_append(li_buf *b, const void *p, size_t n);
li_status li_buf_printf(li_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void li_buf_free(li_buf *b);

// ---- files ----------------------------------------------------------------------------------

// A whole file mapped read-only. `data` is valid until li_mapped_file_close.
typedef struct {
    const uint8_t *data;
    size_t size;
    char *path;  // owned copy, for error messages
} li_mapped_file;
li_status li_mapped_file_open(li_mapped_file *f, const char *path);
void li_mapped_file_close(li_mapped_file *f);  // safe on a zeroed struct

// Reads a whole (small) file into a NUL-terminated heap buffer; caller li_free()s it.
li_status li_file_read_all(const char *path, char **out, size_t *out_len, size_t max_bytes);
bool li_path_is_dir(const char *path);
bool li_path_exists(const char *path);
// dst = dir + "/" + name, truncation is an error
li_status li_path_join(char *dst, size_t dst_size, const char *dir, const char *name);

// ---- dtypes ---------------------------------------------------------------------------------

typedef enum {
    LI_DTYPE_F32,
    LI_DTYPE_F16,
    LI_DTYPE_BF16,
    LI_DTYPE_Q8_0,  // GGUF blocks of 32: f16 scale + 32 int8
    LI_DTYPE_Q4_0,  // GGUF blocks of 32: f16 scale + 16 bytes of nibbles (q - 8)
    LI_DTYPE_Q4_1,  // GGUF blocks of 32: f16 scale, f16 min + 16 bytes of nibbles
    LI_DTYPE_I32,
    LI_DTYPE_COUNT
} li_dtype;

const char *li_dtype_name(li_dtype t);
// Bytes for n elements of t (n must be a multiple of the block size for block types).
// Returns false when n is not a whole number of blocks or the size overflows.
bool li_dtype_nbytes(li_dtype t, uint64_t n, uint64_t *out_bytes);
int li_dtype_block_size(li_dtype t);  // elements per block (1 for scalar types)

// A float's bit pattern and back (through memcpy: no aliasing rule broken).
static inline uint32_t li_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float li_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
float li_bf16_to_f32(uint16_t h);
uint16_t li_f32_to_bf16(float f);  // round-to-nearest-even, NaN kept quiet
float li_f16_to_f32(uint16_t h);
uint16_t li_f32_to_f16(float f);   // round-to-nearest-even

// Converts n elements of `src` (of type t) to f32. n must be a multiple of the block size.
void li_dequantize_row(li_dtype t, const void *src, float *dst, int64_t n);

// ---- fp8 e4m3 (src/core/fp8.c; the LLaDA FP8 FFN, ARCHITECTURE.md §5.3) -----------------------
//
// OCP FP8 E4M3 "fn" (torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; finite
// max 448; subnormals m * 2^-9; no infinities; S.1111.111 is NaN. Tested by tests/test-fp8.c
// against golden values from PyTorch (tests/data/fp8/).
#define LI_E4M3_MAX 448.0f
// Group size of the block-scaled FP8 GEMM: activations per 1 x 128, weights per 128 x 128.
#define LI_FP8_GROUP 128
// Scale floor (DeepGEMM's per_token_cast_to_fp8 / per_block_cast_to_fp8 clamp amax to 1e-4):
// an all-zero group gets scale 1e-4 / 448 and codes 0.
#define LI_FP8_AMAX_MIN 1e-4f

// li_f32_to_e4m3 and li_e4m3_to_f32 (round to nearest even, saturating; exact): fp8.h.
// The fp32 scale of a group with absolute maximum amax: max(amax, LI_FP8_AMAX_MIN) / 448.
float li_fp8_scale(float amax);

// ---- threads --------------------------------------------------------------------------------

// A fixed pool of worker threads. li_parallel_for splits [0, n) into contiguous chunks, one per
// thread (the caller is thread 0), and returns when all have finished. Not reentrant: one
// parallel_for at a time per pool.
typedef struct li_threadpool li_threadpool;
typedef void (*li_range_fn)(void *ctx, int64_t begin, int64_t end, int thread_id);
li_status li_threadpool_init(li_threadpool **out, int n_threads);
void li_threadpool_free(li_threadpool *tp);
int li_threadpool_size(const li_threadpool *tp);
void li_parallel_for(li_threadpool *tp, int64_t n, li_range_fn fn, void *ctx);

// ---- time and randomness --------------------------------------------------------------------

double li_time_ms(void);  // monotonic milliseconds

// xoshiro256** seeded through splitmix64: the one PRNG of the engine (sampling, synth weights).
typedef struct {
    uint64_t s[4];
} li_rng;
void li_rng_seed(li_rng *r, uint64_t seed);
uint64_t li_rng_u64(li_rng *r);
double li_rng_uniform(li_rng *r);  // [0, 1), 53 random bits
float li_rng_normal(li_rng *r);    // standard normal (Box-Muller)

#endif
