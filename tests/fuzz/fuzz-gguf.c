// fuzz-gguf.c — libFuzzer target for the GGUF reader (src/format/gguf.c): the input is a whole
// file opened from memory. Whatever opens must be safe to use: every tensor converts (or is
// refused as unsupported), string arrays can be walked, hparams can be derived. ASan/UBSan find
// the rest. Seeds in tests/fuzz/corpus/fuzz-gguf/ (tests/ref/gen_format_fixtures.py).
//   make fuzz      or      build/fuzz/fuzz-gguf -runs=1000000 tests/fuzz/corpus/fuzz-gguf
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf-hparams.h"
#include "format/gguf.h"

static const char *const keys[] = {
    "general.architecture", "general.name", "general.alignment", "llama.block_count",
    "llama.context_length", "llama.rope.freq_base", "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
    "tokenizer.ggml.add_bos_token", "k", "a",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    li_gguf *g = NULL;
    if (li_gguf_open_memory(&g, data, size, "fuzz.gguf") != LI_OK) return 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        uint32_t u;
        float f;
        bool b;
        const char *s;
        size_t len;
        li_gguf_type et;
        uint64_t n;
        const void *d;
        li_gguf_get_u32(g, keys[k], &u);
        li_gguf_get_f32(g, keys[k], &f);
        li_gguf_get_bool(g, keys[k], &b);
        if (li_gguf_get_str(g, keys[k], &s, &len) == LI_OK && len) {
            volatile char c = s[len - 1];  // the whole string must be inside the input
            (void)c;
        }
        if (li_gguf_get_arr(g, keys[k], &et, &n, &d) == LI_OK && et == LI_GGUF_STRING) {
            for (uint64_t i = 0; i < n; i++)
                if (li_gguf_get_arr_str(g, keys[k], i, &s, &len) == LI_OK && len) {
                    volatile char c = s[len - 1];
                    (void)c;
                }
        }
    }
    for (int64_t i = 0; i < li_gguf_n_tensors(g); i++) {
        const li_gguf_tensor *t = li_gguf_tensor_at(g, i);
        if (li_gguf_find_tensor(g, t->name) != t) abort();  // names are unique
        if (t->n_bytes && (t->data < data || t->data + t->n_bytes > data + size)) abort();
        float *f = malloc(t->n_elements * sizeof(float) + 1);
        if (f) li_gguf_tensor_to_f32(g, t, f);
        free(f);
    }
    li_hparams hp;
    li_gguf_hparams(g, &hp);
    li_gguf_close(g);
    return 0;
}
