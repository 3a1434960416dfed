// fuzz-safetensors-index.c — libFuzzer target for the sharded-safetensors index parser
// (model.safetensors.index.json in src/format/safetensors.c). The index parser reads files, so
// each input is written as the index of a temporary directory that holds two small valid shards
// (model-00001-of-00002.safetensors with tensor "a", model-00002-of-00002.safetensors with "b");
// the directory is then opened. Whatever opens must have every listed tensor inside its shard.
// Seeds in tests/fuzz/corpus/fuzz-safetensors-index/.
//   make fuzz   or   build/fuzz/fuzz-safetensors-index -runs=1000000 tests/fuzz/corpus/fuzz-safetensors-index
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/safetensors.h"

static char dir[64];
static char index_path[128];

// A one-tensor safetensors file: 8-byte header length, JSON header, 2 f32 values.
static void write_shard(const char *name, const char *tensor) {
    char path[128], header[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = snprintf(header, sizeof header,
                     "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", tensor);
    while (n % 8) header[n++] = ' ';
    uint64_t len = (uint64_t)n;
    float data[2] = {1.5f, -2.0f};
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(&len, 8, 1, f);
    fwrite(header, 1, (size_t)n, f);
    fwrite(data, sizeof data, 1, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/li-fuzz-stidx-XXXXXX");
        if (!mkdtemp(dir)) abort();
        write_shard("model-00001-of-00002.safetensors", "a");
        write_shard("model-00002-of-00002.safetensors", "b");
        snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    }
    FILE *f = fopen(index_path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    li_safetensors *st = NULL;
    if (li_safetensors_open(&st, dir) == LI_OK) {
        for (int64_t i = 0; i < li_safetensors_count(st); i++) {
            const li_st_tensor *t = li_safetensors_at(st, i);
            if (li_safetensors_find(st, t->name) != t) abort();
            float out[2];
            if (t->n_elements == 2 && t->dtype == LI_DTYPE_F32) li_st_tensor_to_f32(t, out);
        }
        li_safetensors_close(st);
    } else if (st) {
        abort();  // a failed open must not hand out a handle
    }
    return 0;
}
