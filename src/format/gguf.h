// gguf.h — GGUF v3 reader (mmap): header, metadata key/values, tensor infos.
//
// Every length, count, offset and size read from the file is validated against the mapped size
// before use (with overflow-checked arithmetic); a bad file gives LI_ERR_FORMAT with a message
// naming the file and what is wrong ("model.gguf: tensor 'blk.0.attn_q.weight' data [.., ..)
// runs past the end of the file (98362432 bytes)"). Tensor data are pointers into the mapping.
// Not here: what the tensors mean (model layer) and the tokenizer's use of the metadata
// (tokenizer layer). Tested by tests/test-formats.c and fuzzed by tests/fuzz/fuzz-gguf.c.
#ifndef LI_GGUF_H
#define LI_GGUF_H

#include "../core/core.h"

typedef enum {
    LI_GGUF_UINT8 = 0, LI_GGUF_INT8 = 1, LI_GGUF_UINT16 = 2, LI_GGUF_INT16 = 3,
    LI_GGUF_UINT32 = 4, LI_GGUF_INT32 = 5, LI_GGUF_FLOAT32 = 6, LI_GGUF_BOOL = 7,
    LI_GGUF_STRING = 8, LI_GGUF_ARRAY = 9, LI_GGUF_UINT64 = 10, LI_GGUF_INT64 = 11,
    LI_GGUF_FLOAT64 = 12,
} li_gguf_type;

typedef struct {
    const char *name;       // NUL-terminated copy
    int n_dims;             // 1..4
    int64_t ne[4];          // GGUF order: ne[0] is the innermost (contiguous) dimension
    li_dtype dtype;         // F32, F16, BF16, Q8_0, Q4_0, Q4_1 (others: LI_DTYPE_COUNT)
    uint32_t ggml_type;     // the raw type number, for messages about unsupported types
    uint64_t n_elements;
    const uint8_t *data;    // into the mapping
    uint64_t n_bytes;
} li_gguf_tensor;

typedef struct li_gguf li_gguf;

// Opens and validates the whole file. `data` may also be an in-memory buffer (fuzzing):
// li_gguf_open_memory does not copy it; it must outlive the li_gguf.
li_status li_gguf_open(li_gguf **out, const char *path);
li_status li_gguf_open_memory(li_gguf **out, const uint8_t *data, size_t size, const char *name);
void li_gguf_close(li_gguf *g);  // NULL is a no-op
const char *li_gguf_path(const li_gguf *g);

// Metadata. Each getter returns LI_OK and fills *out when the key exists with a compatible type
// (any integer type whose value fits, for the integer getters), LI_ERR_FORMAT naming the key when
// it exists with another type or out of range, and LI_ERR_INVALID_ARG without touching *out when
// the key is absent (callers test `li_gguf_has` first for optional keys).
bool li_gguf_has(const li_gguf *g, const char *key);
li_status li_gguf_get_u32(const li_gguf *g, const char *key, uint32_t *out);
li_status li_gguf_get_f32(const li_gguf *g, const char *key, float *out);
li_status li_gguf_get_bool(const li_gguf *g, const char *key, bool *out);
// String value: not NUL-terminated inside the file; *len gets its length.
li_status li_gguf_get_str(const li_gguf *g, const char *key, const char **s, size_t *len);
// Array: element type and count. Numeric arrays: *data points at n packed little-endian elements.
li_status li_gguf_get_arr(const li_gguf *g, const char *key, li_gguf_type *elem_type,
                          uint64_t *n, const void **data);
// Element i of an array of strings.
li_status li_gguf_get_arr_str(const li_gguf *g, const char *key, uint64_t i, const char **s,
                              size_t *len);

int64_t li_gguf_n_tensors(const li_gguf *g);
const li_gguf_tensor *li_gguf_tensor_at(const li_gguf *g, int64_t i);
const li_gguf_tensor *li_gguf_find_tensor(const li_gguf *g, const char *name);  // NULL if absent

// Dequantises/converts the whole tensor to f32 (dst has n_elements floats). LI_ERR_UNSUPPORTED
// naming the tensor and its type for types we do not read.
li_status li_gguf_tensor_to_f32(const li_gguf *g, const li_gguf_tensor *t, float *dst);

#endif
