// safetensors.c — safetensors reader: one file, or the shards that model.safetensors.index.json
// lists, each mapped read-only; tensors are pointers into the mappings.
//
// File layout: u64 N (little-endian), N bytes of JSON header, data section. The header maps
// each tensor name to {"dtype": "BF16", "shape": [out, in], "data_offsets": [begin, end]} with
// offsets relative to the data section; an optional "__metadata__" maps strings to strings.
// Checked: N ≤ 100 MB and ≤ file size - 8, the JSON (duplicate keys rejected), every field's
// type, shape entries non-negative integers, numel without overflow, begin ≤ end ≤ data size,
// end - begin == numel × dtype size, names unique across shards. Index: "weight_map" maps names
// to shard file names, which must be plain names inside the directory (no '/', '\' or '..');
// each distinct shard is opened once and every listed tensor must be in the shard it names.
// Lookups go through a hash of the names; tensors are ordered by shard, then data offset.
//
// Not here: what the tensors mean (model layer). Tested by tests/test-formats.c (hand-built
// good and bad files, a sharded directory written by the python safetensors package), fuzzed by
// tests/fuzz/fuzz-safetensors.c.
#include "safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-type.h"

#define MAX_HEADER_BYTES (100u << 20)
#define MAX_INDEX_BYTES (100u << 20)
#define MAX_PATH_LEN 4096

// Every dtype of the safetensors spec, with its width in bits (F4/F6 pack sub-byte elements).
typedef struct {
    const char *name;
    uint32_t bits;
    li_dtype dtype;
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F32", 32, LI_DTYPE_F32},       {"F16", 16, LI_DTYPE_F16},
    {"BF16", 16, LI_DTYPE_BF16},     {"F64", 64, LI_DTYPE_COUNT},
    {"I64", 64, LI_DTYPE_COUNT},     {"I32", 32, LI_DTYPE_COUNT},
    {"I16", 16, LI_DTYPE_COUNT},     {"I8", 8, LI_DTYPE_COUNT},
    {"U64", 64, LI_DTYPE_COUNT},     {"U32", 32, LI_DTYPE_COUNT},
    {"U16", 16, LI_DTYPE_COUNT},     {"U8", 8, LI_DTYPE_COUNT},
    {"BOOL", 8, LI_DTYPE_COUNT},     {"F8_E4M3", 8, LI_DTYPE_COUNT},
    {"F8_E5M2", 8, LI_DTYPE_COUNT},  {"F8_E8M0", 8, LI_DTYPE_COUNT},
    {"F6_E2M3", 6, LI_DTYPE_COUNT},  {"F6_E3M2", 6, LI_DTYPE_COUNT},
    {"F4", 4, LI_DTYPE_COUNT},
};

typedef struct {
    li_mapped_file file;  // zeroed when opened from memory
    const uint8_t *data;  // (size) the whole file
    size_t size;
    char *path;           // for messages and li_st_tensor.file
} shard;

// Open-addressing hash of tensor indices by name.
typedef struct {
    int32_t *slots;  // -1 = empty
    uint64_t mask;
} name_index;

struct li_safetensors {
    shard *shards;
    int n_shards;
    int64_t cap_shards;
    li_st_tensor *tensors;  // (n_tensors) names are heap copies
    int64_t n_tensors, cap_tensors;
    name_index index;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = UINT64_C(14695981039346656037);  // FNV-1a
    for (; *s; s++) h = (h ^ (uint8_t)*s) * UINT64_C(1099511628211);
    return h;
}

// Index of `name`, or -1; with add ≥ 0, inserts `add` when absent.
static int64_t index_probe(const li_safetensors *st, const char *name, int64_t add) {
    const name_index *ix = &st->index;
    for (uint64_t h = hash_str(name) & ix->mask;; h = (h + 1) & ix->mask) {
        int32_t s = ix->slots[h];
        if (s < 0) {
            if (add >= 0) ix->slots[h] = (int32_t)add;
            return -1;
        }
        if (strcmp(st->tensors[s].name, name) == 0) return s;
    }
}

static li_status build_index(li_safetensors *st) {
    uint64_t cap = 16;
    if (st->n_tensors > INT32_MAX)
        return li_error_set(LI_ERR_FORMAT, "%s: too many tensors", st->shards[0].path);
    while (cap < (uint64_t)st->n_tensors * 2) cap *= 2;
    st->index.slots = li_alloc(cap * sizeof *st->index.slots, "safetensors index");
    if (!st->index.slots) return LI_ERR_OOM;
    memset(st->index.slots, 0xff, cap * sizeof *st->index.slots);
    st->index.mask = cap - 1;
    for (int64_t i = 0; i < st->n_tensors; i++) {
        int64_t j = index_probe(st, st->tensors[i].name, i);
        if (j >= 0)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' is also in %s",
                                st->tensors[i].file, st->tensors[i].name, st->tensors[j].file);
    }
    return LI_OK;
}

static li_status push_tensor(li_safetensors *st, li_st_tensor **t) {
    if (!li_grow((void **)&st->tensors, &st->cap_tensors, st->n_tensors + 1, sizeof **t, 64))
        return li_error_set(LI_ERR_OOM, "out of memory for safetensors tensors");
    *t = &st->tensors[st->n_tensors++];
    return LI_OK;
}

// One header entry: {"dtype", "shape", "data_offsets"} checked against the data section.
static li_status parse_entry(li_safetensors *st, const shard *sh, const char *name, json_t *v,
                             const uint8_t *base, uint64_t dsize) {
    const char *file = sh->path;
    li_st_tensor *t = NULL;
    if (!json_is_object(v))
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' must be an object, not %s", file,
                            name, li_json_type_name(v));
    if (name[0] == 0) return li_error_set(LI_ERR_FORMAT, "%s: tensor with an empty name", file);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!jd || !json_is_string(jd))
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': 'dtype' must be a string", file, name);
    if (!js || !json_is_array(js))
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': 'shape' must be an array", file,
                            name);
    if (!jo || !json_is_array(jo) || json_array_size(jo) != 2)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' must be an array of "
                            "two integers", file, name);
    const st_dtype *dt = NULL;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(json_string_value(jd), st_dtypes[i].name) == 0) dt = &st_dtypes[i];
    if (!dt)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%.16s'", file,
                            name, json_string_value(jd));
    size_t n_dims = json_array_size(js);
    if (n_dims > LI_ST_MAX_DIMS)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s' has %zu dimensions (at most %d)",
                            file, name, n_dims, LI_ST_MAX_DIMS);
    int64_t shape[LI_ST_MAX_DIMS];
    uint64_t numel = 1, bits, n_bytes, off[2];
    for (size_t i = 0; i < n_dims; i++) {
        json_t *e = json_array_get(js, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a "
                                "non-negative integer", file, name, i);
        shape[i] = json_integer_value(e);
        if (li_mul_overflows(numel, (uint64_t)shape[i], &numel) || numel > INT64_MAX)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': element count overflows", file,
                                name);
    }
    if (li_mul_overflows(numel, dt->bits, &bits) || bits % 8 != 0)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': %" PRIu64 " elements of %s are not "
                            "a whole number of bytes", file, name, numel, dt->name);
    n_bytes = bits / 8;
    for (int i = 0; i < 2; i++) {
        json_t *e = json_array_get(jo, (size_t)i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': data_offsets[%d] is not a "
                                "non-negative integer", file, name, i);
        off[i] = (uint64_t)json_integer_value(e);
    }
    if (off[0] > off[1] || off[1] > dsize)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                            "] are not inside the data section (%" PRIu64 " bytes)",
                            file, name, off[0], off[1], dsize);
    if (off[1] - off[0] != n_bytes)
        return li_error_set(LI_ERR_FORMAT, "%s: tensor '%s': data_offsets span %" PRIu64
                            " bytes but %" PRIu64 " elements of %s need %" PRIu64,
                            file, name, off[1] - off[0], numel, dt->name, n_bytes);
    LI_TRY(push_tensor(st, &t));
    t->name = strdup(name);
    if (!t->name) return li_error_set(LI_ERR_OOM, "%s: out of memory", file);
    t->dtype = dt->dtype;
    snprintf(t->dtype_str, sizeof t->dtype_str, "%s", dt->name);
    t->n_dims = (int)n_dims;
    memcpy(t->shape, shape, n_dims * sizeof shape[0]);
    t->n_elements = numel;
    t->data = base + off[0];
    t->n_bytes = n_bytes;
    t->file = sh->path;
    return LI_OK;
}

// Tensors of one shard in data order (ties — empty tensors — by name).
static int cmp_tensor(const void *a, const void *b) {
    const li_st_tensor *x = a, *y = b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return strcmp(x->name, y->name);
}

static li_status parse_shard(li_safetensors *st, int si) {
    const shard *sh = &st->shards[si];
    uint64_t n;
    json_error_t err;
    if (sh->size < 8)
        return li_error_set(LI_ERR_FORMAT, "%s: file of %zu bytes is too small for a safetensors "
                            "header", sh->path, sh->size);
    memcpy(&n, sh->data, 8);  // little-endian hosts only (x86-64, aarch64)
    if (n > MAX_HEADER_BYTES || n > sh->size - 8)
        return li_error_set(LI_ERR_FORMAT, "%s: header length %" PRIu64 " is larger than %s (%"
                            PRIu64 " bytes)", sh->path, n,
                            n > MAX_HEADER_BYTES ? "the 100 MB limit" : "the file",
                            n > MAX_HEADER_BYTES ? (uint64_t)MAX_HEADER_BYTES
                                                 : (uint64_t)sh->size - 8);
    json_t *root = json_loadb((const char *)sh->data + 8, n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return li_error_set(LI_ERR_FORMAT, "%s: invalid JSON header at line %d column %d: %s",
                            sh->path, err.line, err.column, err.text);
    li_status s = LI_OK;
    const uint8_t *base = sh->data + 8 + n;
    uint64_t dsize = sh->size - 8 - n;
    int64_t first = st->n_tensors;
    const char *key;
    json_t *v;
    if (!json_is_object(root)) {
        s = li_error_set(LI_ERR_FORMAT, "%s: the header must be a JSON object, not %s", sh->path,
                         li_json_type_name(root));
        goto out;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                s = li_error_set(LI_ERR_FORMAT, "%s: __metadata__ must be an object, not %s",
                                 sh->path, li_json_type_name(v));
                goto out;
            }
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    s = li_error_set(LI_ERR_FORMAT, "%s: __metadata__ value '%.64s' must be a "
                                     "string, not %s", sh->path, mk, li_json_type_name(mv));
                    goto out;
                }
            }
            continue;
        }
        s = parse_entry(st, sh, key, v, base, dsize);
        if (s != LI_OK) goto out;
    }
    if (st->n_tensors > first)
        qsort(st->tensors + first, (size_t)(st->n_tensors - first), sizeof *st->tensors,
              cmp_tensor);
out:
    json_decref(root);
    return s;
}

static li_status add_shard(li_safetensors *st, int *idx) {
    if (!li_grow((void **)&st->shards, &st->cap_shards, st->n_shards + 1, sizeof *st->shards, 4))
        return li_error_set(LI_ERR_OOM, "out of memory for safetensors shards");
    *idx = st->n_shards++;
    return LI_OK;
}

static li_status open_file(li_safetensors *st, const char *path, int *idx) {
    LI_TRY(add_shard(st, idx));
    shard *sh = &st->shards[*idx];
    sh->path = strdup(path);
    if (!sh->path) return li_error_set(LI_ERR_OOM, "%s: out of memory", path);
    LI_TRY(li_mapped_file_open(&sh->file, path));
    sh->data = sh->file.data;
    sh->size = sh->file.size;
    return parse_shard(st, *idx);
}

// A shard file name from the index must stay inside the model directory.
static bool safe_shard_name(const char *s) {
    return s[0] != 0 && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}

static li_status open_index(li_safetensors *st, const char *index_path) {
    char dir[MAX_PATH_LEN], path[MAX_PATH_LEN];
    char *text = NULL;
    size_t len = 0;
    json_error_t err;
    json_t *root = NULL;
    li_status s;
    const char *name;
    json_t *v;

    // The directory of the index: everything before its last '/'.
    const char *slash = strrchr(index_path, '/');
    size_t dl = slash ? (size_t)(slash - index_path) : 1;
    if (dl >= sizeof dir) return li_error_set(LI_ERR_INVALID_ARG, "%s: path too long", index_path);
    memcpy(dir, slash ? index_path : ".", dl);
    dir[dl] = 0;
    if (slash && dl == 0) snprintf(dir, sizeof dir, "/");

    LI_TRY(li_file_read_all(index_path, &text, &len, MAX_INDEX_BYTES));
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    li_free(text);
    if (!root)
        return li_error_set(LI_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s",
                            index_path, err.line, err.column, err.text);
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!wm || !json_is_object(wm) || json_object_size(wm) == 0) {
        s = li_error_set(LI_ERR_FORMAT, "%s: no 'weight_map' object listing the tensors",
                         index_path);
        goto out;
    }
    // Open each distinct shard once, in the order the index first names it.
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v)) {
            s = li_error_set(LI_ERR_FORMAT, "%s: weight_map entry '%.128s' must be a file name, "
                             "not %s", index_path, name, li_json_type_name(v));
            goto out;
        }
        const char *file = json_string_value(v);
        if (!safe_shard_name(file)) {
            s = li_error_set(LI_ERR_FORMAT, "%s: weight_map entry '%.128s' names shard '%.128s', "
                             "which is not a plain file name in the model directory",
                             index_path, name, file);
            goto out;
        }
        if ((s = li_path_join(path, sizeof path, dir, file)) != LI_OK) goto out;
        bool seen = false;
        for (int i = 0; i < st->n_shards && !seen; i++)
            seen = strcmp(st->shards[i].path, path) == 0;
        if (seen) continue;
        if (!li_path_exists(path)) {
            s = li_error_set(LI_ERR_IO, "%s: shard '%s' (holding '%.128s') does not exist",
                             index_path, path, name);
            goto out;
        }
        int idx;
        if ((s = open_file(st, path, &idx)) != LI_OK) goto out;
    }
    if ((s = build_index(st)) != LI_OK) goto out;
    json_object_foreach(wm, name, v) {
        int64_t i = index_probe(st, name, -1);
        if ((s = li_path_join(path, sizeof path, dir, json_string_value(v))) != LI_OK) goto out;
        if (i < 0 || strcmp(st->tensors[i].file, path) != 0) {
            s = li_error_set(LI_ERR_FORMAT, "%s: tensor '%.128s' is listed in shard %s, which "
                             "does not contain it", index_path, name, path);
            goto out;
        }
    }
    s = LI_OK;
out:
    json_decref(root);
    return s;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static li_status open_path(li_safetensors *st, const char *path) {
    char p[MAX_PATH_LEN];
    int idx;
    if (li_path_is_dir(path)) {
        LI_TRY(li_path_join(p, sizeof p, path, "model.safetensors"));
        if (li_path_exists(p)) {
            LI_TRY(open_file(st, p, &idx));
            return build_index(st);
        }
        LI_TRY(li_path_join(p, sizeof p, path, "model.safetensors.index.json"));
        if (li_path_exists(p)) return open_index(st, p);
        return li_error_set(LI_ERR_IO, "%s: no model.safetensors or "
                            "model.safetensors.index.json in this directory", path);
    }
    if (ends_with(path, ".json")) return open_index(st, path);
    LI_TRY(open_file(st, path, &idx));
    return build_index(st);
}

// data (size bytes), named name in messages, as the one shard of st.
static li_status open_buffer(li_safetensors *st, const uint8_t *data, size_t size,
                             const char *name) {
    int idx = 0;
    LI_TRY(add_shard(st, &idx));
    shard *sh = &st->shards[idx];
    sh->path = strdup(name ? name : "<memory>");
    if (!sh->path) return li_error_set(LI_ERR_OOM, "out of memory");
    sh->data = data;
    sh->size = size;
    LI_TRY(parse_shard(st, idx));
    return build_index(st);
}

void li_safetensors_close(li_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_shards; i++) {
        li_mapped_file_close(&st->shards[i].file);
        free(st->shards[i].path);
    }
    free(st->shards);
    li_free(st->index.slots);
    li_free(st);
}

// A new handle filled from path (open_path) or else from data (open_buffer).
static li_status open_handle(li_safetensors **out, const char *path, const uint8_t *data,
                             size_t size, const char *name) {
    li_safetensors *st = li_alloc(sizeof *st, "safetensors handle");
    li_status s = !st ? LI_ERR_OOM : path ? open_path(st, path) : open_buffer(st, data, size, name);
    if (s != LI_OK) li_safetensors_close(st);
    *out = s == LI_OK ? st : NULL;
    return s;
}

li_status li_safetensors_open(li_safetensors **out, const char *path) {
    LI_ASSERT(out && path);
    return open_handle(out, path, NULL, 0, NULL);
}

li_status li_safetensors_open_memory(li_safetensors **out, const uint8_t *data, size_t size,
                                     const char *name) {
    LI_ASSERT(out && (data || size == 0));
    return open_handle(out, NULL, data, size, name);
}

int64_t li_safetensors_count(const li_safetensors *st) { return st->n_tensors; }

const li_st_tensor *li_safetensors_at(const li_safetensors *st, int64_t i) {
    LI_ASSERT(i >= 0 && i < st->n_tensors);
    return &st->tensors[i];
}

const li_st_tensor *li_safetensors_find(const li_safetensors *st, const char *name) {
    int64_t i = st->index.slots ? index_probe(st, name, -1) : -1;
    return i >= 0 ? &st->tensors[i] : NULL;
}

li_status li_st_tensor_to_f32(const li_st_tensor *t, float *dst) {
    LI_ASSERT(t && dst);
    switch (t->dtype) {
    case LI_DTYPE_F32:
        memcpy(dst, t->data, t->n_elements * 4);  // data may be unaligned: memcpy, not a cast
        return LI_OK;
    case LI_DTYPE_F16:
    case LI_DTYPE_BF16:
        for (uint64_t i = 0; i < t->n_elements; i++) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            dst[i] = t->dtype == LI_DTYPE_F16 ? li_f16_to_f32(h) : li_bf16_to_f32(h);
        }
        return LI_OK;
    default:
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; lazyinfer converts "
                            "F32, F16 and BF16 only", t->file, t->name, t->dtype_str);
    }
}
