// gguf.c — GGUF v3 (and v2, same layout) reader: header, metadata key/values of every type,
// tensor infos, alignment and data offsets, dequantisation of the tensor types we compute with,
// and li_gguf_hparams (gguf-hparams.h), which turns llama and qwen2 metadata into li_hparams.
//
// File layout (little-endian), as written by gguf-py and llama.cpp:
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv
//   n_kv     × { str key, u32 type, value }             str = u64 length + bytes (no NUL)
//   n_tensors × { str name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to `general.alignment` (default 32), then the data section; tensor offsets are
//   relative to its start and multiples of the alignment.
// Every length, count, offset and size comes from the file, so every one is checked against the
// bytes that remain, with overflow-checked arithmetic, before it is used; nothing is allocated
// in proportion to a count before the count is known to fit in the file. Nested arrays are
// walked (to find where the next key starts) but their elements cannot be read through the API.
//
// Not here: what the tensors mean (model layer) and the tokenizer's use of the metadata.
// Tested by tests/test-formats.c (hand-built good and bad files, the real SmolLM2 GGUF against
// numbers from the python gguf package) and fuzzed by tests/fuzz/fuzz-gguf.c.
#include "gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-hparams.h"
#include "hf-config.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 1024              // llama.cpp allows 63; be lenient, but bounded
#define GGUF_MAX_ARRAY (UINT64_C(1) << 31)  // elements per array
#define GGUF_MAX_DEPTH 8                // nesting of arrays of arrays
#define GGUF_DEFAULT_ALIGNMENT 32

// ---- ggml tensor types ----------------------------------------------------------------------

// Elements per block and bytes per block of every ggml type, as in ggml.c's type_traits (the
// numbers gguf-py lists in GGML_QUANT_SIZES). Size 0: a removed or unknown type number.
typedef struct {
    const char *name;
    uint32_t blck, size;  // elements per block, bytes per block
} ggml_type_info;

static const ggml_type_info ggml_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static const ggml_type_info *ggml_type_get(uint32_t t) {
    if (t >= N_GGML_TYPES || ggml_types[t].size == 0) return NULL;
    return &ggml_types[t];
}

static li_dtype dtype_from_ggml(uint32_t t) {
    switch (t) {
    case 0: return LI_DTYPE_F32;
    case 1: return LI_DTYPE_F16;
    case 2: return LI_DTYPE_Q4_0;
    case 3: return LI_DTYPE_Q4_1;
    case 8: return LI_DTYPE_Q8_0;
    case 30: return LI_DTYPE_BF16;
    default: return LI_DTYPE_COUNT;
    }
}

// ---- metadata value types -------------------------------------------------------------------

static const char *value_type_name(uint32_t t) {
    static const char *names[] = {"uint8",   "int8",   "uint16", "int16", "uint32",
                                  "int32",   "float32", "bool",  "string", "array",
                                  "uint64",  "int64",  "float64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "invalid";
}

// Bytes of one scalar value; 0 for string, array and invalid types.
static uint32_t scalar_size(uint32_t t) {
    switch (t) {
    case LI_GGUF_UINT8: case LI_GGUF_INT8: case LI_GGUF_BOOL: return 1;
    case LI_GGUF_UINT16: case LI_GGUF_INT16: return 2;
    case LI_GGUF_UINT32: case LI_GGUF_INT32: case LI_GGUF_FLOAT32: return 4;
    case LI_GGUF_UINT64: case LI_GGUF_INT64: case LI_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

// ---- handle ---------------------------------------------------------------------------------

typedef struct {
    const char *key;       // NUL-terminated copy; first member (see name_at)
    li_gguf_type type;
    const uint8_t *val;    // scalar: the value's bytes; string: its bytes; array: first element
    uint64_t n;            // string: byte length; array: element count
    li_gguf_type elem;     // array: element type
    uint64_t str_first;    // array of strings: index of element 0 in li_gguf.strs
} gguf_kv;

// Open-addressing hash set of indices into an array of structs whose first member is the
// `const char *` name, so one implementation serves keys and tensor names.
typedef struct {
    int32_t *slots;  // -1 = empty
    uint64_t mask;
} name_index;

struct li_gguf {
    li_mapped_file file;  // zeroed when opened from memory
    const uint8_t *data;  // (size) the whole file
    size_t size;
    char *name;           // path or caller-given name, for messages
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;  // start of the data section
    int64_t n_kv;
    gguf_kv *kv;           // (n_kv)
    int64_t n_tensors;
    li_gguf_tensor *tensors;  // (n_tensors)
    const uint8_t **strs;  // (n_strs) each element of each string array: its u64 length field
    uint64_t n_strs, cap_strs;
    name_index kv_index, tensor_index;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = UINT64_C(14695981039346656037);  // FNV-1a
    for (; *s; s++) h = (h ^ (uint8_t)*s) * UINT64_C(1099511628211);
    return h;
}

static const char *name_at(const void *base, size_t stride, int64_t i) {
    const char *p = (const char *)base + (size_t)i * stride;
    const char *name;
    memcpy(&name, p, sizeof name);
    return name;
}

static li_status index_init(name_index *ix, int64_t n, const char *what) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    ix->slots = li_alloc(cap * sizeof *ix->slots, what);
    if (!ix->slots) return LI_ERR_OOM;
    memset(ix->slots, 0xff, cap * sizeof *ix->slots);
    ix->mask = cap - 1;
    return LI_OK;
}

// Index of `name` in base[], or -1. With `insert`, adds item `add` when absent and returns -1;
// returns the existing index when the name is already there (a duplicate).
static int64_t index_probe(const name_index *ix, const void *base, size_t stride, const char *name,
                           int64_t add) {
    for (uint64_t h = hash_str(name) & ix->mask;; h = (h + 1) & ix->mask) {
        int32_t s = ix->slots[h];
        if (s < 0) {
            if (add >= 0) ix->slots[h] = (int32_t)add;
            return -1;
        }
        if (strcmp(name_at(base, stride, s), name) == 0) return s;
    }
}

// ---- reading --------------------------------------------------------------------------------

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    const char *file;
} reader;

static li_status need(reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return li_error_set(LI_ERR_FORMAT,
                            "%s: truncated file: %s at offset %zu needs %" PRIu64
                            " bytes but only %zu remain",
                            r->file, what, r->pos, n, r->size - r->pos);
    return LI_OK;
}

static li_status read_u32(reader *r, uint32_t *v, const char *what) {
    LI_TRY(need(r, 4, what));
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return LI_OK;
}

static li_status read_u64(reader *r, uint64_t *v, const char *what) {
    LI_TRY(need(r, 8, what));
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return LI_OK;
}

// A GGUF string: u64 length, then the bytes. *s points into the file.
static li_status read_str(reader *r, const uint8_t **s, uint64_t *len, const char *what) {
    LI_TRY(read_u64(r, len, what));
    if (*len > r->size - r->pos)
        return li_error_set(LI_ERR_FORMAT,
                            "%s: %s at offset %zu has length %" PRIu64
                            ", longer than the %zu bytes left in the file",
                            r->file, what, r->pos - 8, *len, r->size - r->pos);
    *s = r->p + r->pos;
    r->pos += *len;
    return LI_OK;
}

// Copies a key or tensor name to a NUL-terminated heap string; rejects empty, over-long names
// and embedded NUL bytes (lookups by C string could never find them).
static li_status copy_name(reader *r, const uint8_t *s, uint64_t len, const char *what,
                           char **out) {
    if (len == 0) return li_error_set(LI_ERR_FORMAT, "%s: empty %s", r->file, what);
    if (len > GGUF_MAX_NAME)
        return li_error_set(LI_ERR_FORMAT, "%s: %s of %" PRIu64 " bytes (more than %d)", r->file,
                            what, len, GGUF_MAX_NAME);
    if (memchr(s, 0, len))
        return li_error_set(LI_ERR_FORMAT, "%s: %s '%.*s' contains a NUL byte", r->file, what,
                            (int)strnlen((const char *)s, len), (const char *)s);
    char *c = malloc(len + 1);
    if (!c) return li_error_set(LI_ERR_OOM, "%s: out of memory for a %s", r->file, what);
    memcpy(c, s, len);
    c[len] = 0;
    *out = c;
    return LI_OK;
}

static li_status push_str(li_gguf *g, const uint8_t *p) {
    if (g->n_strs == g->cap_strs) {
        uint64_t cap = g->cap_strs ? g->cap_strs * 2 : 256;
        const uint8_t **s = realloc(g->strs, cap * sizeof *s);
        if (!s) return li_error_set(LI_ERR_OOM, "%s: out of memory for string arrays", g->name);
        g->strs = s;
        g->cap_strs = cap;
    }
    g->strs[g->n_strs++] = p;
    return LI_OK;
}

// Skips (or, at depth 0 with `kv`, records) one array: u32 element type, u64 count, elements.
static li_status read_array(li_gguf *g, reader *r, const char *key, int depth, gguf_kv *kv) {
    uint32_t elem;
    uint64_t n;
    if (depth >= GGUF_MAX_DEPTH)
        return li_error_set(LI_ERR_FORMAT, "%s: key '%s': arrays nested more than %d deep",
                            r->file, key, GGUF_MAX_DEPTH);
    LI_TRY(read_u32(r, &elem, "array element type"));
    LI_TRY(read_u64(r, &n, "array length"));
    if (elem > LI_GGUF_FLOAT64)
        return li_error_set(LI_ERR_FORMAT, "%s: key '%s': invalid array element type %u", r->file,
                            key, elem);
    if (n > GGUF_MAX_ARRAY)
        return li_error_set(LI_ERR_FORMAT, "%s: key '%s': array of %" PRIu64
                            " elements (more than 2^31)", r->file, key, n);
    if (kv) {
        kv->elem = (li_gguf_type)elem;
        kv->n = n;
        kv->val = r->p + r->pos;
        kv->str_first = g->n_strs;
    }
    uint32_t es = scalar_size(elem);
    // Smallest encoding of one element, to reject impossible counts before looping over them.
    uint64_t min_bytes = es ? es : elem == LI_GGUF_STRING ? 8 : 12, total;
    if (li_mul_overflows(n, min_bytes, &total) || total > r->size - r->pos)
        return li_error_set(LI_ERR_FORMAT,
                            "%s: key '%s': array of %" PRIu64 " %s elements at offset %zu "
                            "runs past the end of the file",
                            r->file, key, n, value_type_name(elem), r->pos);
    if (es) {
        r->pos += total;
        return LI_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (elem == LI_GGUF_STRING) {
            const uint8_t *s;
            uint64_t len;
            if (kv && depth == 0) LI_TRY(push_str(g, r->p + r->pos));
            LI_TRY(read_str(r, &s, &len, "string in an array"));
        } else {
            LI_TRY(read_array(g, r, key, depth + 1, NULL));
        }
    }
    return LI_OK;
}

static li_status read_kv(li_gguf *g, reader *r, int64_t i) {
    gguf_kv *kv = &g->kv[i];
    const uint8_t *s;
    uint64_t len;
    uint32_t type;
    LI_TRY(read_str(r, &s, &len, "metadata key"));
    LI_TRY(copy_name(r, s, len, "metadata key", (char **)&kv->key));
    LI_TRY(read_u32(r, &type, "metadata value type"));
    if (type > LI_GGUF_FLOAT64)
        return li_error_set(LI_ERR_FORMAT, "%s: key '%s' has invalid value type %u", r->file,
                            kv->key, type);
    kv->type = (li_gguf_type)type;
    if (type == LI_GGUF_STRING) {
        LI_TRY(read_str(r, &kv->val, &kv->n, "string value"));
    } else if (type == LI_GGUF_ARRAY) {
        LI_TRY(read_array(g, r, kv->key, 0, kv));
    } else {
        LI_TRY(need(r, scalar_size(type), "metadata value"));
        kv->val = r->p + r->pos;
        r->pos += scalar_size(type);
    }
    if (index_probe(&g->kv_index, g->kv, sizeof *g->kv, kv->key, i) >= 0)
        return li_error_set(LI_ERR_FORMAT, "%s: duplicate metadata key '%s'", r->file, kv->key);
    return LI_OK;
}

static li_status read_tensor_info(li_gguf *g, reader *r, int64_t i, uint64_t *offset) {
    li_gguf_tensor *t = &g->tensors[i];
    const uint8_t *s;
    uint64_t len;
    uint32_t n_dims, type;
    LI_TRY(read_str(r, &s, &len, "tensor name"));
    LI_TRY(copy_name(r, s, len, "tensor name", (char **)&t->name));
    LI_TRY(read_u32(r, &n_dims, "tensor dimension count"));
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (must be 1..%d)",
                            r->file, t->name, n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        LI_TRY(read_u64(r, &ne, "tensor shape"));
        if (ne == 0 || ne > INT64_MAX)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has invalid ne[%u] = %" PRIu64,
                                r->file, t->name, d, ne);
        if (li_mul_overflows(n_el, ne, &n_el) || n_el > INT64_MAX)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': element count overflows",
                                r->file, t->name);
        t->ne[d] = (int64_t)ne;
    }
    for (uint32_t d = n_dims; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    t->n_elements = n_el;
    LI_TRY(read_u32(r, &type, "tensor type"));
    const ggml_type_info *ti = ggml_type_get(type);
    if (!ti)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has unknown ggml type %u", r->file,
                            t->name, type);
    t->ggml_type = type;
    t->dtype = dtype_from_ggml(type);
    if ((uint64_t)t->ne[0] % ti->blck != 0)
        return li_error_set(LI_ERR_FORMAT,
                            "%s: tensor '%s' of type %s has ne[0] = %" PRId64
                            ", not a multiple of the block size %u",
                            r->file, t->name, ti->name, t->ne[0], ti->blck);
    if (li_mul_overflows(n_el / ti->blck, ti->size, &t->n_bytes))
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': byte size overflows", r->file,
                            t->name);
    LI_TRY(read_u64(r, offset, "tensor data offset"));
    if (index_probe(&g->tensor_index, g->tensors, sizeof *g->tensors, t->name, i) >= 0)
        return li_error_set(LI_ERR_FORMAT, "%s: duplicate tensor name '%s'", r->file, t->name);
    return LI_OK;
}

static const gguf_kv *find_kv(const li_gguf *g, const char *key) {
    if (!g->kv_index.slots) return NULL;
    int64_t i = index_probe(&g->kv_index, g->kv, sizeof *g->kv, key, -1);
    return i >= 0 ? &g->kv[i] : NULL;
}

static li_status parse(li_gguf *g) {
    reader r = {g->data, g->size, 0, g->name};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (g->size < 4 || memcmp(g->data, "GGUF", 4) != 0)
        return li_error_set(LI_ERR_FORMAT, "%s: not a GGUF file (no 'GGUF' magic)", g->name);
    r.pos = 4;
    LI_TRY(read_u32(&r, &version, "header version"));
    if (version == 1)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (only 2 "
                            "and 3); convert the file again with a recent llama.cpp", g->name);
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0)
            return li_error_set(LI_ERR_UNSUPPORTED, "%s: big-endian GGUF is not supported",
                                g->name);
        return li_error_set(LI_ERR_FORMAT, "%s: unknown GGUF version %u", g->name, version);
    }
    g->version = version;
    LI_TRY(read_u64(&r, &n_tensors, "tensor count"));
    LI_TRY(read_u64(&r, &n_kv, "metadata count"));
    // A key/value takes at least 14 bytes (u64 length, a 1-byte key, u32 type, a 1-byte value),
    // a tensor info at least 33 (8 + 1 + 4 + 8 + 4 + 8): counts beyond that cannot be in the
    // file, and are rejected before anything is allocated for them.
    if (n_kv > INT32_MAX || n_tensors > INT32_MAX)
        return li_error_set(LI_ERR_FORMAT, "%s: header claims %" PRIu64 " tensors and %" PRIu64
                            " metadata entries (at most 2^31 - 1 each)", g->name, n_tensors, n_kv);
    if (n_kv > (r.size - r.pos) / 14)
        return li_error_set(LI_ERR_FORMAT, "%s: header claims %" PRIu64
                            " metadata entries, more than the file can hold", g->name, n_kv);
    if (n_tensors > (r.size - r.pos) / 33)
        return li_error_set(LI_ERR_FORMAT, "%s: header claims %" PRIu64
                            " tensors, more than the file can hold", g->name, n_tensors);
    g->kv = li_alloc((n_kv ? n_kv : 1) * sizeof *g->kv, "gguf metadata");
    g->tensors = li_alloc((n_tensors ? n_tensors : 1) * sizeof *g->tensors, "gguf tensors");
    if (!g->kv || !g->tensors) return LI_ERR_OOM;
    LI_TRY(index_init(&g->kv_index, (int64_t)n_kv, "gguf key index"));
    LI_TRY(index_init(&g->tensor_index, (int64_t)n_tensors, "gguf tensor index"));

    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1;  // so close() frees the key being read
        LI_TRY(read_kv(g, &r, (int64_t)i));
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = find_kv(g, "general.alignment");
    if (al) {
        uint32_t a;
        if (al->type != LI_GGUF_UINT32)
            return li_error_set(LI_ERR_FORMAT, "%s: general.alignment has type %s (must be "
                                "uint32)", g->name, value_type_name(al->type));
        memcpy(&a, al->val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return li_error_set(LI_ERR_FORMAT, "%s: general.alignment = %u is not a power of 2",
                                g->name, a);
        g->alignment = a;
    }

    uint64_t *offsets = li_alloc((n_tensors ? n_tensors : 1) * sizeof *offsets, "gguf offsets");
    if (!offsets) return LI_ERR_OOM;
    li_status st = LI_OK;
    for (uint64_t i = 0; i < n_tensors && st == LI_OK; i++) {
        g->n_tensors = (int64_t)i + 1;
        st = read_tensor_info(g, &r, (int64_t)i, &offsets[i]);
    }
    if (st != LI_OK) goto free_offsets;

    // Data section: the end of the tensor infos rounded up to the alignment.
    uint64_t pad = (g->alignment - r.pos % g->alignment) % g->alignment;
    g->data_offset = r.pos + pad;
    // As llama.cpp requires: tensors lie in info order, each at the end of the previous one
    // rounded up to the alignment. So a lying type or shape shows up as a misplaced successor.
    uint64_t expect = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        li_gguf_tensor *t = &g->tensors[i];
        uint64_t begin, end;
        if (offsets[i] % g->alignment != 0) {
            st = li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' data offset %" PRIu64
                              " is not a multiple of the alignment %" PRIu64,
                              g->name, t->name, offsets[i], g->alignment);
            goto free_offsets;
        }
        if (offsets[i] != expect) {
            if (i == 0)
                st = li_error_set(LI_ERR_FORMAT, "%s: first tensor '%s' has data offset %" PRIu64
                                  " (must be 0)", g->name, t->name, offsets[i]);
            else
                st = li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has data offset %" PRIu64
                                  " but tensor '%s' before it ends at %" PRIu64 " (padded to "
                                  "the alignment): a wrong type, shape or offset", g->name,
                                  t->name, offsets[i], g->tensors[i - 1].name, expect);
            goto free_offsets;
        }
        if (li_add_overflows(g->data_offset, offsets[i], &begin) ||
            li_add_overflows(begin, t->n_bytes, &end) || end > g->size) {
            st = li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' data [%" PRIu64 " + %" PRIu64
                              ", +%" PRIu64 " bytes) runs past the end of the file (%zu bytes)",
                              g->name, t->name, g->data_offset, offsets[i], t->n_bytes, g->size);
            goto free_offsets;
        }
        t->data = g->data + begin;
        // end ≤ size, so the padded running offset cannot overflow
        expect = offsets[i] + t->n_bytes;
        expect += (g->alignment - expect % g->alignment) % g->alignment;
    }
free_offsets:
    li_free(offsets);
    return st;
}

static li_status open_common(li_gguf **out, li_gguf *g) {
    li_status st = parse(g);
    if (st != LI_OK) {
        li_gguf_close(g);
        *out = NULL;
        return st;
    }
    *out = g;
    return LI_OK;
}

li_status li_gguf_open(li_gguf **out, const char *path) {
    LI_ASSERT(out && path);
    *out = NULL;
    li_gguf *g = li_alloc(sizeof *g, "gguf handle");
    if (!g) return LI_ERR_OOM;
    li_status st = li_mapped_file_open(&g->file, path);
    g->name = strdup(path);
    if (st != LI_OK || !g->name) {
        li_gguf_close(g);
        return st != LI_OK ? st : li_error_set(LI_ERR_OOM, "%s: out of memory", path);
    }
    g->data = g->file.data;
    g->size = g->file.size;
    return open_common(out, g);
}

li_status li_gguf_open_memory(li_gguf **out, const uint8_t *data, size_t size, const char *name) {
    LI_ASSERT(out && (data || size == 0));
    *out = NULL;
    li_gguf *g = li_alloc(sizeof *g, "gguf handle");
    if (!g) return LI_ERR_OOM;
    g->name = strdup(name ? name : "<memory>");
    if (!g->name) {
        li_gguf_close(g);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    g->data = data;
    g->size = size;
    return open_common(out, g);
}

void li_gguf_close(li_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free((char *)g->kv[i].key);
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    li_free(g->kv);
    li_free(g->tensors);
    li_free(g->kv_index.slots);
    li_free(g->tensor_index.slots);
    free(g->strs);
    free(g->name);
    li_mapped_file_close(&g->file);
    li_free(g);
}

const char *li_gguf_path(const li_gguf *g) { return g->name; }

// ---- metadata getters -----------------------------------------------------------------------

bool li_gguf_has(const li_gguf *g, const char *key) { return find_kv(g, key) != NULL; }

static li_status absent(const li_gguf *g, const char *key) {
    return li_error_set(LI_ERR_INVALID_ARG, "%s: no metadata key '%s'", g->name, key);
}

static li_status wrong_type(const li_gguf *g, const gguf_kv *kv, const char *want) {
    return li_error_set(LI_ERR_FORMAT, "%s: metadata key '%s' has type %s, expected %s", g->name,
                        kv->key, value_type_name(kv->type), want);
}

// Integer value of any integer type, as a sign flag and a magnitude (so u64 and i64 both fit).
static bool kv_int(const gguf_kv *kv, bool *neg, uint64_t *mag) {
    const uint8_t *p = kv->val;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64 = 0;
    *neg = false;
    switch (kv->type) {
    case LI_GGUF_UINT8: memcpy(&u8, p, 1); *mag = u8; return true;
    case LI_GGUF_UINT16: memcpy(&u16, p, 2); *mag = u16; return true;
    case LI_GGUF_UINT32: memcpy(&u32, p, 4); *mag = u32; return true;
    case LI_GGUF_UINT64: memcpy(&u64, p, 8); *mag = u64; return true;
    case LI_GGUF_INT8: memcpy(&i8, p, 1); i64 = i8; break;
    case LI_GGUF_INT16: memcpy(&i16, p, 2); i64 = i16; break;
    case LI_GGUF_INT32: memcpy(&i32, p, 4); i64 = i32; break;
    case LI_GGUF_INT64: memcpy(&i64, p, 8); break;
    default: return false;
    }
    *neg = i64 < 0;
    *mag = i64 < 0 ? (uint64_t)0 - (uint64_t)i64 : (uint64_t)i64;
    return true;
}

li_status li_gguf_get_u32(const li_gguf *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = find_kv(g, key);
    bool neg;
    uint64_t mag;
    if (!kv) return absent(g, key);
    if (!kv_int(kv, &neg, &mag)) return wrong_type(g, kv, "an integer");
    if (neg || mag > UINT32_MAX)
        return li_error_set(LI_ERR_FORMAT, "%s: metadata key '%s' = %s%" PRIu64
                            " does not fit in uint32", g->name, key, neg ? "-" : "", mag);
    *out = (uint32_t)mag;
    return LI_OK;
}

li_status li_gguf_get_f32(const li_gguf *g, const char *key, float *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return absent(g, key);
    if (kv->type == LI_GGUF_FLOAT32) {
        memcpy(out, kv->val, 4);
    } else if (kv->type == LI_GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
    } else {
        return wrong_type(g, kv, "float32");
    }
    return LI_OK;
}

li_status li_gguf_get_bool(const li_gguf *g, const char *key, bool *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return absent(g, key);
    if (kv->type != LI_GGUF_BOOL) return wrong_type(g, kv, "bool");
    *out = kv->val[0] != 0;
    return LI_OK;
}

li_status li_gguf_get_str(const li_gguf *g, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return absent(g, key);
    if (kv->type != LI_GGUF_STRING) return wrong_type(g, kv, "string");
    *s = (const char *)kv->val;
    *len = (size_t)kv->n;
    return LI_OK;
}

li_status li_gguf_get_arr(const li_gguf *g, const char *key, li_gguf_type *elem_type,
                          uint64_t *n, const void **data) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return absent(g, key);
    if (kv->type != LI_GGUF_ARRAY) return wrong_type(g, kv, "array");
    *elem_type = kv->elem;
    *n = kv->n;
    *data = kv->val;
    return LI_OK;
}

li_status li_gguf_get_arr_str(const li_gguf *g, const char *key, uint64_t i, const char **s,
                              size_t *len) {
    const gguf_kv *kv = find_kv(g, key);
    uint64_t l;
    if (!kv) return absent(g, key);
    if (kv->type != LI_GGUF_ARRAY || kv->elem != LI_GGUF_STRING)
        return wrong_type(g, kv, "array of strings");
    if (i >= kv->n)
        return li_error_set(LI_ERR_INVALID_ARG, "%s: index %" PRIu64 " out of range for '%s' (%"
                            PRIu64 " strings)", g->name, i, key, kv->n);
    const uint8_t *p = g->strs[kv->str_first + i];
    memcpy(&l, p, 8);
    *s = (const char *)p + 8;
    *len = (size_t)l;
    return LI_OK;
}

// ---- tensors --------------------------------------------------------------------------------

int64_t li_gguf_n_tensors(const li_gguf *g) { return g->n_tensors; }

const li_gguf_tensor *li_gguf_tensor_at(const li_gguf *g, int64_t i) {
    LI_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const li_gguf_tensor *li_gguf_find_tensor(const li_gguf *g, const char *name) {
    if (!g->tensor_index.slots) return NULL;
    int64_t i = index_probe(&g->tensor_index, g->tensors, sizeof *g->tensors, name, -1);
    return i >= 0 ? &g->tensors[i] : NULL;
}

li_status li_gguf_tensor_to_f32(const li_gguf *g, const li_gguf_tensor *t, float *dst) {
    LI_ASSERT(g && t && dst);
    const uint8_t *src = t->data;
    uint64_t n = t->n_elements;
    switch (t->dtype) {
    case LI_DTYPE_F32:
        memcpy(dst, src, n * 4);
        return LI_OK;
    case LI_DTYPE_F16:
    case LI_DTYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t->dtype == LI_DTYPE_F16 ? li_f16_to_f32(h) : li_bf16_to_f32(h);
        }
        return LI_OK;
    case LI_DTYPE_Q8_0:
    case LI_DTYPE_Q4_0:
    case LI_DTYPE_Q4_1: {
        const ggml_type_info *ti = ggml_type_get(t->ggml_type);
        if (((uintptr_t)src & 3) == 0) {
            li_dequantize_row(t->dtype, src, dst, (int64_t)n);
            return LI_OK;
        }
        // Blocks hold f16 fields; with an alignment-1 file or a caller's odd buffer they may
        // be misaligned, so copy them through an aligned bounce buffer (64 blocks at a time).
        _Alignas(8) uint8_t bounce[64 * 34];
        uint64_t n_blocks = n / ti->blck;
        for (uint64_t b = 0; b < n_blocks; b += 64) {
            uint64_t nb = n_blocks - b < 64 ? n_blocks - b : 64;
            memcpy(bounce, src + b * ti->size, nb * ti->size);
            li_dequantize_row(t->dtype, bounce, dst + b * ti->blck, (int64_t)(nb * ti->blck));
        }
        return LI_OK;
    }
    default: {
        const ggml_type_info *ti = ggml_type_get(t->ggml_type);
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: tensor '%s' has ggml type %s (%u); "
                            "lazyinfer reads F32, F16, BF16, Q8_0, Q4_0 and Q4_1 only",
                            g->name, t->name, ti ? ti->name : "?", t->ggml_type);
    }
    }
}

// ---- hyper-parameters (gguf-hparams.h) ------------------------------------------------------

// `{arch}.suffix`, e.g. "llama.block_count".
static const char *arch_key(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

// Required (`req`) or optional u32 key into an int; optional keys leave *out untouched.
static li_status get_int(const li_gguf *g, const char *key, bool req, int *out) {
    uint32_t v;
    if (!li_gguf_has(g, key)) {
        if (req)
            return li_error_set(LI_ERR_FORMAT, "%s: missing required metadata key '%s'",
                                g->name, key);
        return LI_OK;
    }
    LI_TRY(li_gguf_get_u32(g, key, &v));
    if (v > INT32_MAX)
        return li_error_set(LI_ERR_FORMAT, "%s: metadata key '%s' = %u is too large", g->name,
                            key, v);
    *out = (int)v;
    return LI_OK;
}

static li_status get_float_opt(const li_gguf *g, const char *key, float *out) {
    if (!li_gguf_has(g, key)) return LI_OK;
    return li_gguf_get_f32(g, key, out);
}

static li_status add_eos(const li_gguf *g, li_hparams *hp, const char *key) {
    int id = -1;
    LI_TRY(get_int(g, key, false, &id));
    if (id < 0) return LI_OK;
    for (int i = 0; i < hp->n_eos; i++)
        if (hp->eos_ids[i] == id) return LI_OK;
    if (hp->n_eos < LI_MAX_EOS) hp->eos_ids[hp->n_eos++] = id;
    return LI_OK;
}

li_status li_gguf_hparams(const li_gguf *g, li_hparams *hp) {
    char k[256];
    const char *s;
    size_t len;
    memset(hp, 0, sizeof *hp);
    hp->bos_id = -1;

    if (!li_gguf_has(g, "general.architecture"))
        return li_error_set(LI_ERR_FORMAT, "%s: missing metadata key 'general.architecture'",
                            g->name);
    LI_TRY(li_gguf_get_str(g, "general.architecture", &s, &len));
    bool qwen2 = len == 5 && memcmp(s, "qwen2", 5) == 0;
    if (!qwen2 && (len != 5 || memcmp(s, "llama", 5) != 0))
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported "
                            "(GGUF files must be 'llama' or 'qwen2')", g->name,
                            (int)(len < 64 ? len : 64), s);
    const char *arch = qwen2 ? "qwen2" : "llama";  // also the prefix of its keys
    memcpy(hp->arch, arch, 6);
    if (li_gguf_has(g, "general.name")) {
        LI_TRY(li_gguf_get_str(g, "general.name", &s, &len));
        if (len >= sizeof hp->name) len = sizeof hp->name - 1;
        memcpy(hp->name, s, len);
        hp->name[len] = 0;
    }

    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "block_count"), true, &hp->n_layer));
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "embedding_length"), true, &hp->n_embd));
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "feed_forward_length"), true, &hp->n_ff));
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "attention.head_count"), true, &hp->n_head));
    hp->n_head_kv = hp->n_head;
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "attention.head_count_kv"), false,
                   &hp->n_head_kv));
    hp->head_dim = -1;
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "attention.key_length"), false,
                   &hp->head_dim));
    if (hp->head_dim < 0) {
        if (hp->n_head <= 0 || hp->n_embd % hp->n_head != 0)
            return li_error_set(LI_ERR_FORMAT, "%s: %s.embedding_length = %d is not a multiple "
                                "of %s.attention.head_count = %d (and there is no "
                                "%s.attention.key_length)", g->name, arch, hp->n_embd, arch,
                                hp->n_head, arch);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "context_length"), true, &hp->n_ctx_train));
    if (!li_gguf_has(g, arch_key(k, sizeof k, arch, "attention.layer_norm_rms_epsilon")))
        return li_error_set(LI_ERR_FORMAT, "%s: missing required metadata key '%s'", g->name, k);
    LI_TRY(li_gguf_get_f32(g, k, &hp->rms_eps));

    hp->n_vocab = -1;
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "vocab_size"), false, &hp->n_vocab));
    if (hp->n_vocab < 0 && li_gguf_has(g, "tokenizer.ggml.tokens")) {
        li_gguf_type et;
        uint64_t n;
        const void *d;
        LI_TRY(li_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d));
        if (n > INT32_MAX)
            return li_error_set(LI_ERR_FORMAT, "%s: tokenizer.ggml.tokens is too long", g->name);
        hp->n_vocab = (int)n;
    }
    if (hp->n_vocab < 0)
        return li_error_set(LI_ERR_FORMAT, "%s: no vocabulary size (neither %s.vocab_size nor "
                            "tokenizer.ggml.tokens)", g->name, arch);

    li_rope_config *rope = &hp->rope;
    // convert_hf_to_gguf permutes llama's Q/K rows for interleaved pairs; qwen2's it writes as
    // HF has them, and llama.cpp rotates them as NEOX (rotate_half) pairs
    li_rope_config_default(rope, qwen2 ? LI_ROPE_NEOX : LI_ROPE_GPTJ, hp->head_dim,
                           hp->n_ctx_train);
    LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "rope.dimension_count"), false, &rope->n_dims));
    LI_TRY(get_float_opt(g, arch_key(k, sizeof k, arch, "rope.freq_base"), &rope->theta));
    if (li_gguf_has(g, arch_key(k, sizeof k, arch, "rope.scaling.type"))) {
        LI_TRY(li_gguf_get_str(g, k, &s, &len));
        if (len == 4 && memcmp(s, "none", 4) == 0) {
            rope->scaling = LI_ROPE_SCALING_NONE;
        } else if (len == 6 && memcmp(s, "linear", 6) == 0) {
            rope->scaling = LI_ROPE_SCALING_LINEAR;
        } else if (len == 4 && memcmp(s, "yarn", 4) == 0) {
            rope->scaling = LI_ROPE_SCALING_YARN;
        } else {
            return li_error_set(LI_ERR_UNSUPPORTED, "%s: rope scaling type '%.*s' is not "
                                "supported (none, linear, yarn)", g->name,
                                (int)(len < 64 ? len : 64), s);
        }
    }
    if (rope->scaling != LI_ROPE_SCALING_NONE) {
        rope->factor = 0;
        LI_TRY(get_float_opt(g, arch_key(k, sizeof k, arch, "rope.scaling.factor"),
                             &rope->factor));
        rope->original_max_pos = hp->n_ctx_train;
        LI_TRY(get_int(g, arch_key(k, sizeof k, arch, "rope.scaling.original_context_length"),
                       false, &rope->original_max_pos));
        LI_TRY(get_float_opt(g, arch_key(k, sizeof k, arch, "rope.scaling.yarn_beta_fast"),
                             &rope->beta_fast));
        LI_TRY(get_float_opt(g, arch_key(k, sizeof k, arch, "rope.scaling.yarn_beta_slow"),
                             &rope->beta_slow));
        LI_TRY(get_float_opt(g, arch_key(k, sizeof k, arch, "rope.scaling.attn_factor"),
                             &rope->attention_factor));
    }
    // Llama 3.1 GGUFs carry llama3 scaling as a tensor of per-pair frequency divisors.
    const li_gguf_tensor *ff = li_gguf_find_tensor(g, "rope_freqs.weight");
    if (ff) {
        int pairs = hp->rope.n_dims / 2;
        if (ff->dtype != LI_DTYPE_F32 || ff->n_dims != 1 || ff->ne[0] != pairs ||
            pairs > LI_ROPE_MAX_PAIRS)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor 'rope_freqs.weight' must be f32 of %d "
                                "elements (rope dims / 2)", g->name, pairs);
        LI_TRY(li_gguf_tensor_to_f32(g, ff, hp->rope.freq_factors));
        for (int i = 0; i < pairs; i++)
            if (!(hp->rope.freq_factors[i] > 0) || !isfinite(hp->rope.freq_factors[i]))
                return li_error_set(LI_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g is not a "
                                    "positive number", g->name, i, hp->rope.freq_factors[i]);
        hp->rope.has_freq_factors = true;
    }

    hp->tied_embeddings = li_gguf_find_tensor(g, "output.weight") == NULL;
    if (qwen2) {  // q/k/v biases always (blk.N.attn_{q,k,v}.bias), none on attn_output or MLP
        hp->qkv_bias = true;
        hp->attention_bias = li_gguf_find_tensor(g, "blk.0.attn_output.bias") != NULL;
    } else {
        hp->attention_bias = li_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    }
    hp->mlp_bias = li_gguf_find_tensor(g, "blk.0.ffn_up.bias") != NULL;
    int bos = -1;
    LI_TRY(get_int(g, "tokenizer.ggml.bos_token_id", false, &bos));
    hp->bos_id = bos;
    LI_TRY(add_eos(g, hp, "tokenizer.ggml.eos_token_id"));
    LI_TRY(add_eos(g, hp, "tokenizer.ggml.eot_token_id"));
    LI_TRY(add_eos(g, hp, "tokenizer.ggml.eom_token_id"));
    return li_hparams_validate(hp, g->name, true);
}
