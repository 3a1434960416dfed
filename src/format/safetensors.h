// safetensors.h — safetensors reader (mmap), one file or a set of shards listed by
// model.safetensors.index.json.
//
// The JSON header is parsed with jansson; offsets, shapes and dtypes are checked against the file
// (data_offsets inside the data section, end - begin == numel × dtype size, no overflow). A bad
// file gives LI_ERR_FORMAT naming the file, the tensor and the problem. Tensor data are pointers
// into the mappings. Tested by tests/test-formats.c, fuzzed by tests/fuzz/fuzz-safetensors.c.
#ifndef LI_SAFETENSORS_H
#define LI_SAFETENSORS_H

#include "../core/core.h"

#define LI_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    li_dtype dtype;          // F32, F16, BF16; LI_DTYPE_COUNT for types we do not compute with
    char dtype_str[8];       // as written in the file ("BF16", "I64", …)
    int n_dims;
    int64_t shape[LI_ST_MAX_DIMS];  // outermost first
    uint64_t n_elements;
    const uint8_t *data;     // into the mapping
    uint64_t n_bytes;
    const char *file;        // path of the shard holding it
} li_st_tensor;

typedef struct li_safetensors li_safetensors;

// `path` is a .safetensors file, or a directory holding model.safetensors or
// model.safetensors.index.json (then every shard it names is opened and checked, and every
// tensor the index lists must exist in the shard it names).
li_status li_safetensors_open(li_safetensors **out, const char *path);
// One in-memory file (fuzzing); the buffer must outlive the handle.
li_status li_safetensors_open_memory(li_safetensors **out, const uint8_t *data, size_t size,
                                     const char *name);
void li_safetensors_close(li_safetensors *st);  // NULL is a no-op

int64_t li_safetensors_count(const li_safetensors *st);
const li_st_tensor *li_safetensors_at(const li_safetensors *st, int64_t i);
const li_st_tensor *li_safetensors_find(const li_safetensors *st, const char *name);  // NULL if absent

// Converts to f32 (dst holds n_elements floats); LI_ERR_UNSUPPORTED for other dtypes.
li_status li_st_tensor_to_f32(const li_st_tensor *t, float *dst);

#endif
