// vocab-gguf.c — builds the tokenizer from GGUF metadata (tokenizer.ggml.*).
//
// Understood: model "gpt2" (byte-level BPE: tokens, merges "a b", token_type 3 = control →
// special added token, 4 = user-defined → added token), bos/eos/unknown ids, add_bos_token,
// tokenizer.chat_template, and the pre-tokenizer names of tokenizer.ggml.pre:
//   "llama-bpe", "llama3"  → Split(Llama-3 regex, Isolated) + ByteLevel(use_regex=false)
//   "qwen2"                → NFC + Split(Qwen2 regex: single digits, Isolated) +
//                            ByteLevel(use_regex=false) — Qwen2's HF tokenizer.json (llama.cpp
//                            does not normalise; lazyinfer follows the HF tokenizer the GGUF
//                            was converted from)
//   "smollm"               → Digits(individual) + ByteLevel(use_regex=true) — the exact
//                            pre_tokenizer of SmolLM2's HF tokenizer.json
//   "gpt2", "default", absent → ByteLevel(use_regex=true) (GPT-2 regex)
// Anything else is LI_ERR_UNSUPPORTED naming the value. Not here: sentencepiece ("llama") GGUF
// vocabularies. Tested by tests/test_tokenizer_parity.py (SmolLM2 GGUF vs HF tokenizers) and
// tests/test-tokenizer.c.
#include <string.h>

#include "tokenizer-internal.h"

static li_status pre_from_name(li_tokenizer *t, const char *pre, size_t len, const char *path) {
#define IS(s) (len == strlen(s) && memcmp(pre, s, len) == 0)
    t->byte_level = true;
    if (!pre || IS("gpt2") || IS("default"))
        return li_tok_add_split(t, LI_RE_GPT2, strlen(LI_RE_GPT2), false, SPLIT_ISOLATED, path);
    if (IS("llama-bpe") || IS("llama3"))
        return li_tok_add_split(t, LI_RE_LLAMA3, strlen(LI_RE_LLAMA3), false, SPLIT_ISOLATED,
                                path);
    if (IS("qwen2")) {  // Qwen2's tokenizer.json: NFC, Split(Qwen2 regex), ByteLevel(no regex)
        t->nfc = true;
        return li_tok_add_split(t, LI_RE_QWEN2, strlen(LI_RE_QWEN2), false, SPLIT_ISOLATED, path);
    }
    if (IS("smollm")) {
        LI_TRY(li_tok_add_split(t, "\\p{N}", 5, false, SPLIT_ISOLATED, path));
        return li_tok_add_split(t, LI_RE_GPT2, strlen(LI_RE_GPT2), false, SPLIT_ISOLATED, path);
    }
#undef IS
    return li_error_set(LI_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not supported "
                        "(llama-bpe, llama3, qwen2, smollm, gpt2, default are)", path, (int)len, pre);
}

static li_status opt_id(const li_gguf *g, const char *key, int n_vocab, int32_t *out) {
    if (!li_gguf_has(g, key)) return LI_OK;
    uint32_t v;
    LI_TRY(li_gguf_get_u32(g, key, &v));
    if (v >= (uint32_t)n_vocab)
        return li_error_set(LI_ERR_FORMAT, "%s: %s = %u is beyond the vocabulary (%d tokens)",
                            li_gguf_path(g), key, v, n_vocab);
    *out = (int32_t)v;
    return LI_OK;
}

static li_status load(li_tokenizer **out, const li_gguf *g) {
    const char *path = li_gguf_path(g);
    const char *model;
    size_t mlen;
    if (!li_gguf_has(g, "tokenizer.ggml.model"))
        return li_error_set(LI_ERR_FORMAT, "%s: no tokenizer.ggml.model (the file has no "
                            "tokenizer; pass --tokenizer tokenizer.json)", path);
    LI_TRY(li_gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen));
    if (mlen != 4 || memcmp(model, "gpt2", 4) != 0)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported "
                            "(gpt2 byte-level BPE is)", path, (int)mlen, model);
    li_gguf_type et;
    uint64_t n_tok;
    const void *data;
    LI_TRY(li_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, &data));
    if (et != LI_GGUF_STRING || n_tok == 0 || n_tok > (1 << 24))
        return li_error_set(LI_ERR_FORMAT, "%s: tokenizer.ggml.tokens must be 1..%d strings",
                            path, 1 << 24);
    const int32_t *types = NULL;
    if (li_gguf_has(g, "tokenizer.ggml.token_type")) {
        uint64_t nt;
        LI_TRY(li_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt, &data));
        if ((et != LI_GGUF_INT32 && et != LI_GGUF_UINT32) || nt != n_tok)
            return li_error_set(LI_ERR_FORMAT, "%s: tokenizer.ggml.token_type must be %llu int32",
                                path, (unsigned long long)n_tok);
        types = data;
    }
    LI_TRY(li_tok_alloc(out, (int)n_tok));
    li_tokenizer *t = *out;
    for (uint64_t i = 0; i < n_tok; i++) {
        const char *s;
        size_t len;
        LI_TRY(li_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len));
        int32_t ty = 1;
        if (types) memcpy(&ty, (const uint8_t *)types + 4 * i, 4);  // packed, maybe unaligned
        uint8_t at = TOK_MODEL;
        if (ty == 3) at |= TOK_ADDED | TOK_SPECIAL;  // control
        if (ty == 4) at |= TOK_ADDED;                // user-defined
        LI_TRY(li_tok_set(t, (int32_t)i, s, len, at));
    }
    LI_TRY(li_tok_build_index(t, path));
    uint64_t n_merges = 0;
    if (li_gguf_has(g, "tokenizer.ggml.merges")) {
        LI_TRY(li_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges, &data));
        if (et != LI_GGUF_STRING || n_merges > (1u << 26))
            return li_error_set(LI_ERR_FORMAT, "%s: tokenizer.ggml.merges must be strings", path);
    }
    LI_TRY(li_tok_reserve_merges(t, n_merges));
    for (uint64_t i = 0; i < n_merges; i++) {
        const char *s;
        size_t len;
        LI_TRY(li_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &s, &len));
        const char *sp = memchr(s, ' ', len);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
            return li_error_set(LI_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] '%.*s' is not two "
                                "tokens separated by one space", path, (unsigned long long)i,
                                (int)len, s);
        LI_TRY(li_tok_add_merge(t, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp - s) - 1,
                                (int)i, path));
    }
    const char *pre = NULL;
    size_t plen = 0;
    if (li_gguf_has(g, "tokenizer.ggml.pre"))
        LI_TRY(li_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &plen));
    LI_TRY(pre_from_name(t, pre, plen, path));
    t->dec = DEC_BYTE_LEVEL;
    LI_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos));
    LI_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos));
    if (li_gguf_has(g, "tokenizer.ggml.add_bos_token"))
        LI_TRY(li_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos));
    LI_TRY(li_tok_finish(t, path));
    if (li_gguf_has(g, "tokenizer.chat_template")) {
        const char *s;
        size_t len;
        LI_TRY(li_gguf_get_str(g, "tokenizer.chat_template", &s, &len));
        LI_TRY(li_tok_set_template(t, s, len));
    }
    return LI_OK;
}

li_status li_tokenizer_load_gguf(li_tokenizer **out, const li_gguf *g) {
    *out = NULL;
    li_tokenizer *t = NULL;
    li_status st = load(&t, g);
    if (st != LI_OK) {
        li_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LI_OK;
}
