// fuzz-tokenizer-config.c — libFuzzer target for the tokenizer_config.json part of the HF loader
// (src/tokenizer/vocab-json.c: chat_template as a string or a list of {name, template},
// bos_token / eos_token as a string or an AddedToken object, add_bos_token) and the chat-template
// detection it feeds (src/tokenizer/chat.c). The input is the tokenizer_config.json text, not
// NUL-terminated; it is loaded with li_tokenizer_load_json_buffers next to two fixed small
// tokenizer.json files (a byte-level BPE one with Llama-3 / ChatML / LLaDA special tokens and a
// sentencepiece-style one). When a tokenizer loads: bos/eos must lie in the vocabulary (abort
// otherwise), a conversation is rendered when a chat format was detected, and the rendering and
// a fixed text are encoded (ids checked) and decoded. ASan/UBSan find the rest.
// Seeds in tests/fuzz/corpus/fuzz-tokenizer-config/ (tests/ref/gen_fuzz_seeds.py).
//   make fuzz   or   build/fuzz/fuzz-tokenizer-config -runs=1000000
//                        tests/fuzz/corpus/fuzz-tokenizer-config
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-internal.h"
#include "fuzz-encode.h"

// Byte-level BPE: bytes a b c space(Ġ) newline(Ċ), merges, and the special tokens the chat
// formats and the config's bos/eos fields name.
static const char *BYTE_LEVEL =
    "{\"added_tokens\":["
    "{\"id\":10,\"content\":\"<|begin_of_text|>\",\"special\":true},"
    "{\"id\":11,\"content\":\"<|end_of_text|>\",\"special\":true},"
    "{\"id\":12,\"content\":\"<|start_header_id|>\",\"special\":true},"
    "{\"id\":13,\"content\":\"<|end_header_id|>\",\"special\":true},"
    "{\"id\":14,\"content\":\"<|eot_id|>\",\"special\":true},"
    "{\"id\":15,\"content\":\"<|im_start|>\",\"special\":true},"
    "{\"id\":16,\"content\":\"<|im_end|>\",\"special\":true},"
    "{\"id\":17,\"content\":\"<|startoftext|>\",\"special\":true},"
    "{\"id\":18,\"content\":\"<|endoftext|>\",\"special\":true}],"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
    "{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\xC4\xA0\":3,\"\xC4\x8A\":4,"
    "\"ab\":5,\"\xC4\xA0" "a\":6,\"\xC4\xA0" "ab\":7,\"u\":8,\"s\":9},"
    "\"merges\":[\"a b\",\"\xC4\xA0 a\",\"\xC4\xA0" "a b\"]}}";

// Sentencepiece-style BPE: ▁ normalizer, byte fallback, <s> / </s> / <unk>.
static const char *SENTENCEPIECE =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true},"
    "{\"id\":11,\"content\":\"<|im_start|>\",\"special\":true},"
    "{\"id\":12,\"content\":\"<|im_end|>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"
    "\"\xE2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":"
    "\"\xE2\x96\x81\"}]},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
    "{\"String\":\"\xE2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
    "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\",\"vocab\":"
    "{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,\"<0x41>\":4,\"\xE2\x96\x81\":5,\"h\":6,"
    "\"i\":7,\"hi\":8,\"\xE2\x96\x81hi\":9,\"<0xC3>\":10},"
    "\"merges\":[\"h i\",\"\xE2\x96\x81 hi\"]}}";

static void exercise(const li_tokenizer *t) {
    int nv = li_tokenizer_n_vocab(t);
    int32_t bos = li_tokenizer_bos(t), eos = li_tokenizer_eos(t);
    if (bos < -1 || bos >= nv || eos < -1 || eos >= nv) {
        fprintf(stderr, "bos %d / eos %d outside the vocabulary (%d)\n", bos, eos, nv);
        abort();
    }
    if (eos >= 0 && !li_tokenizer_is_eog(t, eos)) {
        fprintf(stderr, "eos %d is not an end-of-generation id\n", eos);
        abort();
    }
    static const char txt[] = "ab abc hi\nA \xC3\xA9<|im_start|>x<|eot_id|>";
    encode_decode(t, txt, sizeof txt - 1, true, false);
    encode_decode(t, txt, sizeof txt - 1, false, true);
    if (li_tokenizer_chat_format(t) == LI_CHAT_UNKNOWN) return;
    li_chat_message m[] = {{"system", "\tsys "}, {"user", " ab "}, {"assistant", "c"}};
    for (int first = 0; first < 2; first++) {  // with and without a system message
        li_buf r = {0};
        if (li_chat_render_messages(t, m + first, 3 - first, first == 0, &r) == LI_OK)
            encode_decode(t, r.data ? r.data : "", r.len, li_tokenizer_add_bos(t), true);
        li_buf_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *const toks[] = {BYTE_LEVEL, SENTENCEPIECE};
    for (int k = 0; k < 2; k++) {
        li_tokenizer *t = NULL;
        li_status st = li_tokenizer_load_json_buffers(&t, toks[k], strlen(toks[k]),
                                                      k ? "sp.json" : "bl.json", (const char *)data,
                                                      size, "fuzz_config.json");
        if (st == LI_OK) {
            if (!t) abort();
            exercise(t);
            li_tokenizer_free(t);
        } else if (t) {
            fprintf(stderr, "load failed but returned a tokenizer\n");
            abort();
        }
    }
    return 0;
}
