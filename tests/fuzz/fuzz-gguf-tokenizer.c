// fuzz-gguf-tokenizer.c — libFuzzer target for the tokenizer built from GGUF metadata
// (src/tokenizer/vocab-gguf.c on top of src/format/gguf.c): the input is a whole GGUF file opened
// from memory and handed to li_tokenizer_load_gguf. When a tokenizer loads, it must be safe to
// use: a few fixed strings and a slice of the input are encoded with parse_special off and on
// (every id must lie in 0..n_vocab-1, else abort so the fuzzer reports it), decoded, every token
// of a small vocabulary is decoded on its own, ids outside the vocabulary must be a clean error,
// and when a chat format was detected a short conversation is rendered and encoded. Not checked:
// decode(encode(s)) == s, which a fuzzed vocabulary need not satisfy (fuzz-tokenizer.c checks it
// for real vocabularies). ASan/UBSan find the rest.
// Seeds in tests/fuzz/corpus/fuzz-gguf-tokenizer/ (tests/ref/gen_fuzz_seeds.py).
//   make fuzz   or   build/fuzz/fuzz-gguf-tokenizer -runs=1000000
//                        tests/fuzz/corpus/fuzz-gguf-tokenizer
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "fuzz-encode.h"
#include "tokenizer/tokenizer.h"

static void exercise(const li_tokenizer *t, const uint8_t *data, size_t size) {
    static const char *const texts[] = {
        "Hello world! 12345 <|im_start|>user\nhi<|im_end|>",
        "  spaces\t\ttabs\n\nnewlines  ",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|></s><s>",
        "caf\xC3\xA9 \xE8\xAA\x9E \xF0\x9F\x98\x80 don't I'M 3.14",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int f = 0; f < 4; f++) encode_decode(t, texts[i], strlen(texts[i]), f & 1, f & 2);
    // A slice of the input: arbitrary bytes, mostly invalid UTF-8 (must be a clean error).
    size_t off = size / 2, n = size - off < 256 ? size - off : 256;
    encode_decode(t, (const char *)data + off, n, false, false);
    encode_decode(t, (const char *)data + off, n, true, true);

    int nv = li_tokenizer_n_vocab(t);
    li_buf b = {0};
    for (int32_t id = 0; id < nv && id < 512; id++) {
        li_tokenizer_decode_token(t, id, &b);
        li_tokenizer_is_eog(t, id);
    }
    const int32_t bad[] = {-1, nv, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < 4; i++)
        if (li_tokenizer_decode_token(t, bad[i], &b) == LI_OK) {
            fprintf(stderr, "decode_token accepted id %d (vocabulary %d)\n", bad[i], nv);
            abort();
        }
    li_buf_free(&b);
    int32_t bos = li_tokenizer_bos(t), eos = li_tokenizer_eos(t);
    if (bos < -1 || bos >= nv || eos < -1 || eos >= nv) {
        fprintf(stderr, "bos %d / eos %d outside the vocabulary (%d)\n", bos, eos, nv);
        abort();
    }
    li_tokenizer_find(t, "<|im_start|>");
    li_tokenizer_find(t, "");

    if (li_tokenizer_chat_format(t) != LI_CHAT_UNKNOWN) {
        li_chat_message m[] = {{"system", " Be brief. "}, {"user", "hi \xC2\xA0"},
                               {"assistant", "hello"}, {"user", "again"}};
        for (int first = 0; first < 2; first++) {  // with and without a system message
            li_buf r = {0};
            if (li_chat_render_messages(t, m + first, 4 - first, true, &r) == LI_OK)
                encode_decode(t, r.data ? r.data : "", r.len, li_tokenizer_add_bos(t), true);
            li_buf_free(&r);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    li_gguf *g = NULL;
    if (li_gguf_open_memory(&g, data, size, "fuzz.gguf") != LI_OK) return 0;
    li_tokenizer *t = NULL;
    if (li_tokenizer_load_gguf(&t, g) == LI_OK) {
        if (!t) abort();
        exercise(t, data, size);
        li_tokenizer_free(t);
    } else if (t) {
        fprintf(stderr, "load failed but returned a tokenizer\n");
        abort();
    }
    li_gguf_close(g);
    return 0;
}
