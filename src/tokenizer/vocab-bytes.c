// vocab-bytes.c — the built-in byte tokenizer of synthetic models: one id per byte (0..255) plus
// the chat format's special tokens (at 256.. or, for a LLaDA-sized vocabulary, at LLaDA-8B's own
// ids), BOS / EOS as the format has them. A vocabulary source like vocab-json.c and
// vocab-gguf.c: it fills the tables of tokenizer.c and takes the chat format from chat.c.
//
// Not here: encoding and decoding (tokenizer.c). Tested by tests/test-tokenizer.c.
#include <string.h>

#include "tokenizer-internal.h"

li_status li_tokenizer_init_bytes(li_tokenizer **out, int n_vocab, li_chat_format fmt) {
    *out = NULL;
    static const char *const llama3[] = {"<|begin_of_text|>", "<|end_of_text|>",
                                         "<|start_header_id|>", "<|end_header_id|>",
                                         "<|eot_id|>"};
    static const char *const llada[] = {"<|startoftext|>", "<|endoftext|>",
                                        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                        "<|mdm_mask|>"};
    // LLaDA-8B's ids (ARCHITECTURE.md §2.3: BOS 126080, EOS 126081, mask 126336, EOT 126348; the
    // header ids 126346/126347 are those of the released LLaDA tokenizer).
    static const int32_t llada_ids[] = {126080, 126081, 126346, 126347, 126348, 126336};
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
    const char *const *names;
    int n_sp;
    switch (fmt) {
    case LI_CHAT_LLAMA3: names = llama3; n_sp = 5; break;
    case LI_CHAT_LLADA: names = llada; n_sp = 6; break;
    case LI_CHAT_CHATML: names = chatml; n_sp = 3; break;
    default: names = NULL; n_sp = 0; break;
    }
    if (n_vocab < 256 + n_sp)
        return li_error_set(LI_ERR_INVALID_ARG, "byte tokenizer: n_vocab %d is smaller than the "
                            "256 bytes + %d special tokens of format %s", n_vocab, n_sp,
                            li_chat_format_name(fmt));
    li_tokenizer *t;
    LI_TRY(li_tok_alloc(&t, n_vocab));
    li_status st = LI_OK;
    t->raw_bytes = true;
    for (int b = 0; b < 256 && st == LI_OK; b++) {
        char c = (char)b;
        st = li_tok_set(t, b, &c, 1, 0);
    }
    bool real_llada = fmt == LI_CHAT_LLADA && n_vocab > 126348;
    for (int i = 0; i < n_sp && st == LI_OK; i++) {
        int32_t id = real_llada ? llada_ids[i] : 256 + i;
        st = li_tok_set(t, id, names[i], strlen(names[i]), TOK_ADDED | TOK_SPECIAL);
    }
    if (st == LI_OK) st = li_tok_build_index(t, "byte tokenizer");
    if (st != LI_OK) goto fail;
    switch (fmt) {
    case LI_CHAT_LLAMA3:
        t->bos = li_tokenizer_find(t, "<|begin_of_text|>");
        t->eos = li_tokenizer_find(t, "<|end_of_text|>");
        t->add_bos = true;
        break;
    case LI_CHAT_LLADA:
        t->bos = li_tokenizer_find(t, "<|startoftext|>");
        t->eos = li_tokenizer_find(t, "<|endoftext|>");
        t->add_bos = true;
        break;
    case LI_CHAT_CHATML:
        t->eos = li_tokenizer_find(t, "<|im_end|>");
        break;
    default: break;
    }
    if ((st = li_tok_finish(t, "byte tokenizer")) != LI_OK) goto fail;
    t->chat = fmt;
    *out = t;
    return LI_OK;
fail:
    li_tokenizer_free(t);
    return st;
}
