// fuzz-tokenizer.c — libFuzzer target for the tokenizer: tokenizer.json parsing and encode.
//
// The first input byte picks the mode:
//   odd  → the rest is a tokenizer.json; when it loads, a fixed text (and the bytes of the input,
//          which are then mostly invalid UTF-8 → must be a clean error) are encoded and decoded;
//   even → the rest is text, encoded with the Llama-3 tokenizer (tests/data, when `make fuzz`
//          runs from the repository root) and with a small SmolLM2-shaped tokenizer (Digits +
//          ByteLevel regex); bit 1 = add_bos, bit 2 = parse_special. For valid UTF-8 without
//          BOS, decode(encode(s)) must equal s (abort otherwise, so the fuzzer reports it).
// Seeds: tests/fuzz/corpus/fuzz-tokenizer/. Run: make fuzz (FUZZ_RUNS executions).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-internal.h"

static const char *SMOLISH =
    "{\"added_tokens\":[{\"id\":7,\"content\":\"<|im_start|>\",\"special\":true},"
    "{\"id\":8,\"content\":\"<x>\",\"special\":false,\"lstrip\":true,\"rstrip\":true},"
    "{\"id\":9,\"content\":\"zq\",\"single_word\":true}],"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\","
    "\"individual_digits\":true},{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
    "\"use_regex\":true},{\"type\":\"Split\",\"pattern\":{\"String\":\"a\"},\"behavior\":"
    "\"MergedWithNext\"}]},\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\xC4\xA0\":3,"
    "\"\xC4\xA0" "ab\":4,\"1\":5,\"<|im_start|>\":7},\"merges\":[\"a b\",\"\xC4\xA0 ab\"]}}";

static li_tokenizer *llama, *smolish;

static void roundtrip(const li_tokenizer *t, const uint8_t *d, size_t n, bool bos, bool sp,
                      bool must_match) {
    int32_t *ids = NULL;
    int k = 0;
    if (li_tokenizer_encode(t, (const char *)d, n, bos, sp, &ids, &k) != LI_OK) return;
    li_buf b = {0};
    if (li_tokenizer_decode(t, ids, k, &b) == LI_OK && must_match &&
        (b.len != n || (n && memcmp(b.data, d, n) != 0))) {
        fprintf(stderr, "round trip mismatch: %zu bytes in, %zu out\n", n, b.len);
        abort();
    }
    li_buf_free(&b);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        init = 1;
        if (li_tokenizer_load_json(&llama, "data/llama3-tokenizer/tokenizer.json", NULL) !=
            LI_OK)
            fprintf(stderr, "fuzz-tokenizer: no Llama-3 tokenizer (%s); text mode uses the small "
                    "one only\n", li_error_msg());
        if (li_tokenizer_load_json_buffer(&smolish, SMOLISH, strlen(SMOLISH), "smolish") != LI_OK) {
            fprintf(stderr, "fuzz-tokenizer: built-in tokenizer failed: %s\n", li_error_msg());
            abort();
        }
    }
    if (size == 0) return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    if (mode & 1) {
        li_tokenizer *t = NULL;
        if (li_tokenizer_load_json_buffer(&t, (const char *)data, size, "fuzz.json") == LI_OK) {
            static const char txt[] = "Hello 123 world<|x|> \xC3\xA9\xE8\xAA\x9E";
            roundtrip(t, (const uint8_t *)txt, sizeof txt - 1, true, true, false);
            roundtrip(t, data, size < 256 ? size : 256, false, true, false);
            li_chat_message m[] = {{"user", "hi"}};
            li_buf b = {0};
            li_chat_render_messages(t, m, 1, true, &b);
            li_buf_free(&b);
            li_tokenizer_free(t);
        }
        return 0;
    }
    bool bos = mode & 2, sp = mode & 4;
    if (llama) roundtrip(llama, data, size, bos, sp, !bos);
    // The small tokenizer adds a prefix space and drops unknown characters: no exact round trip.
    roundtrip(smolish, data, size, bos, sp, false);
    return 0;
}
