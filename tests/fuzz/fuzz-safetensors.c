// fuzz-safetensors.c — libFuzzer target for the safetensors reader (src/format/safetensors.c):
// the input is one whole file opened from memory. Whatever opens must be consistent: each
// tensor is found by its name, its bytes lie inside the input, conversion is safe.
// Seeds in tests/fuzz/corpus/fuzz-safetensors/ (tests/ref/gen_format_fixtures.py).
//   make fuzz      or      build/fuzz/fuzz-safetensors -runs=1000000 tests/fuzz/corpus/fuzz-safetensors
#include <stdint.h>
#include <stdlib.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    li_safetensors *st = NULL;
    if (li_safetensors_open_memory(&st, data, size, "fuzz.safetensors") != LI_OK) return 0;
    for (int64_t i = 0; i < li_safetensors_count(st); i++) {
        const li_st_tensor *t = li_safetensors_at(st, i);
        if (li_safetensors_find(st, t->name) != t) abort();
        if (t->n_bytes && (t->data < data || t->data + t->n_bytes > data + size)) abort();
        float *f = malloc(t->n_elements * sizeof(float) + 1);
        if (f) li_st_tensor_to_f32(t, f);
        free(f);
    }
    li_safetensors_find(st, "model.embed_tokens.weight");
    li_safetensors_close(st);
    return 0;
}
